"""A TCP connection's life through the pipeline: its handshake, first bytes and ends.

Covers the per-connection paths: a direction that ends inside a frame gives its truncated
frame; a SYN of a 4-tuple the reassembler forgot is learnt like any new connection; a
FIN on a known connection ends its direction (the framer's own cases, such as the
straight cut of a direction's first bytes, are Rust unit tests in core/src/frame.rs). A capture fed through ``Pipeline.feed_capture`` gives what
its packets fed one by one (or in batches) through ``Pipeline.feed_packets`` give.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from analyzer._core import Stream, open_capture
from analyzer.model import Conn, Endpoint
from analyzer.pipeline import Options, Pipeline
from tests.pcapgen import (
    ACK,
    FIN,
    SYN,
    CoreRun,
    StreamEnd,
    TcpFlow,
    TcpPacket,
    encap,
    ip_packet,
    kafka_request,
    kafka_response,
    write_pcap,
)

CONN = Conn(0, Endpoint("10.0.0.1", 40000), Endpoint("10.0.0.2", 9092))
RESP_BODY = b"\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x03"


def _sig(ex: Any) -> tuple[Any, ...]:
    return (ex.seq, ex.conn.id, ex.status, ex.api_name, ex.correlation_id, ex.request_frame,
            ex.response_frame, list(ex.notes), ex.conn.closed)


def _run(path: str, batch: int, max_closed: int | None = None) -> tuple[list[Any], list[Any], dict[str, Any]]:
    """The exchanges (their connection as it ended), each exchange's ``conn.closed`` when
    it came out, and the summary of ``path`` (with the core's reassembly counters under
    "core"): batch 0 through ``Pipeline.feed_capture``, else its packets through
    ``Pipeline.feed_packets``, ``batch`` at a time."""
    o = Options()
    pipe = Pipeline(o)
    if max_closed is not None:
        pipe.stream = pipe.new_stream(max_closed=max_closed)
    exs: list[Any] = []
    when: list[Any] = []            # conn.closed of each exchange as it came out
    with open_capture(path) as r:
        if not batch:
            for ex in pipe.feed_capture(r):
                exs.append(ex)
                when.append(ex.conn.closed)
        else:
            while pkts := r.read(batch):
                for ex in pipe.feed_packets(pkts):
                    exs.append(ex)
                    when.append(ex.conn.closed)
    for ex in pipe.finish():
        exs.append(ex)
        when.append(ex.conn.closed)
    summary = pipe.summary.to_json(pipe.ctx)
    summary["core"] = dict(pipe.stream.counters)
    return [_sig(ex) for ex in exs], when, summary


def _same_every_way(path: str, max_closed: int | None = None) -> tuple[list[Any], list[Any], dict[str, Any]]:
    """``_run`` through feed_capture and through feed_packets in batches of 1, 2 and 5: the same
    exchanges and summary. Returns feed_capture's, and feed_packets' one by one closed-when-out."""
    whole, when, wsum = _run(path, 0, max_closed)
    for batch in (1, 2, 5):
        got, got_when, got_sum = _run(path, batch, max_closed)
        assert (got, got_sum) == (whole, wsum), batch
        if batch == 1:
            when = got_when
    return whole, when, wsum


def test_connection_ends_clean_cut_and_reset(tmp_path: Path) -> None:
    pkts: list[TcpPacket] = []
    # 1: ends at frame boundaries (FIN, FIN, ACK)
    flow = TcpFlow(("10.0.0.1", 40000), ("10.0.0.2", 9092), ts=1000.0)
    pkts += flow.handshake() + flow.send(0, kafka_request(18, 0, 1, "x")) + flow.send(1, kafka_response(1, RESP_BODY))
    pkts += flow.fin(0) + flow.fin(1) + flow.ack(0)
    # 2: the client's second request is cut by its FIN (the server's FIN first)
    flow = TcpFlow(("10.0.0.1", 40001), ("10.0.0.2", 9092), ts=1001.0)
    pkts += flow.handshake() + flow.send(0, kafka_request(18, 0, 1, "x")) + flow.send(1, kafka_response(1, RESP_BODY))
    pkts += flow.send(0, kafka_request(3, 0, 2, "x")[:-1]) + flow.fin(1) + flow.fin(0) + flow.ack(1)
    # 3: both sides hold part of a frame when the server resets
    flow = TcpFlow(("10.0.0.1", 40002), ("10.0.0.2", 9092), ts=1002.0)
    pkts += flow.handshake() + flow.send(0, kafka_request(18, 0, 1, "x"))
    pkts += flow.send(0, kafka_request(18, 0, 2, "x")[:-1]) + flow.send(1, kafka_response(1, RESP_BODY)[:-2])
    pkts += flow.rst(1)
    path = str(tmp_path / "ends.pcap")
    write_pcap(path, pkts)
    fused, when, fsum = _same_every_way(path)
    # (conn 2: at the reset the client's cut request, then the server's cut response that
    # answers the first one, then the request left unanswered)
    assert [(s[1], s[2], s[4]) for s in fused] == [
        (0, "ok", 1), (1, "ok", 1), (1, "unanswered", 2), (2, "ok", 1), (2, "unanswered", 2)]
    assert fsum["truncated_frames"] == 3 and fsum["bytes_skipped"] == {}
    assert fsum["connections"] == fsum["kafka_connections"] == 3 and fsum["core"] == {}
    # as each exchange came out (fed one packet at a time), its connection was still open
    # or already closed; in the end every one is closed
    assert when == [None, None, "fin", "rst", "rst"]
    assert [s[-1] for s in fused] == ["fin", "fin", "fin", "rst", "rst"]


def _two_ends(tmp_path: Path) -> str:
    pkts: list[TcpPacket] = []
    flow = TcpFlow(("10.0.0.1", 40000), ("10.0.0.2", 9092), ts=1000.0)
    pkts += flow.handshake() + flow.send(0, kafka_request(18, 0, 1, "x")) + flow.send(1, kafka_response(1, RESP_BODY))
    pkts += flow.fin(0) + flow.fin(1) + flow.ack(0)
    flow = TcpFlow(("10.0.0.1", 40002), ("10.0.0.2", 9092), ts=1002.0)
    pkts += flow.handshake() + flow.send(0, kafka_request(18, 0, 1, "x"))
    pkts += flow.send(0, kafka_request(18, 0, 2, "x")[:-1]) + flow.send(1, kafka_response(1, RESP_BODY)[:-2])
    pkts += flow.rst(1)
    path = str(tmp_path / "ends2.pcap")
    write_pcap(path, pkts)
    return path


def test_exchanges_come_out_of_feed_capture_as_of_their_packet(tmp_path: Path) -> None:
    """An exchange comes out with its connection as it stood at the packet that completed
    it (the old fused path of Pipeline.feed_all yielded after each packet): an answer before
    the FIN shows the connection open, as feeding the packets one by one does."""
    path = _two_ends(tmp_path)
    sigs, when, _ = _run(path, 0)
    assert _run(path, 1)[:2] == (sigs, [None, "rst", "rst"])
    assert when == [None, "rst", "rst"]


def test_syn_on_forgotten_tuple_and_fin_on_a_known_connection(tmp_path: Path) -> None:
    pkts: list[TcpPacket] = []
    for i in range(3):      # the same 4-tuple three times; the reassembler keeps 1 closed
        flow = TcpFlow(("10.0.0.1", 40000), ("10.0.0.2", 9092), isn=(1000 + 99 * i, 5000 + 77 * i),
                       ts=1000.0 + i)
        pkts += flow.handshake() + flow.send(0, kafka_request(18, 0, i, "x"))
        pkts += flow.send(1, kafka_response(i, RESP_BODY)) + flow.fin(0) + flow.fin(1) + flow.ack(0)
        other = TcpFlow(("10.0.0.1", 41000 + i), ("10.0.0.2", 9092), ts=1000.5 + i)
        pkts += other.handshake() + other.fin(0) + other.fin(1) + other.ack(0)
    path = str(tmp_path / "reuse.pcap")
    write_pcap(path, pkts)
    fused, when, fsum = _same_every_way(path, max_closed=1)
    assert [(s[1], s[2], s[4]) for s in fused] == [(0, "ok", 0), (2, "ok", 1), (4, "ok", 2)]
    assert when == [None, None, None] and [s[-1] for s in fused] == ["fin", "fin", "fin"]
    assert fsum["connections"] == 6 and fsum["kafka_connections"] == 3
    # (the 4-tuple's earlier connections are forgotten: each later SYN starts a new one, not
    # counted as port reuse; remembered, they would be)
    assert fsum["packets"] == len(pkts) and fsum["packets_skipped"] == {} and fsum["core"] == {}
    remembered, _, rsum = _same_every_way(path)
    assert remembered == fused and rsum["core"] == {"port reuse": 2}
    # a FIN on a known connection (its SYN seen, nothing else) ends its direction
    a, b = ("10.0.0.1", 1), ("10.0.0.2", 2)
    syn = encap(ip_packet(TcpPacket(1.0, a[0], b[0], a[1], b[1], SYN, 100, 0)))
    fin = encap(ip_packet(TcpPacket(2.0, a[0], b[0], a[1], b[1], FIN | ACK, 101, 0)))
    run = CoreRun(Stream())
    assert run.model(run.stream.feed([(1, 1.0, 1, syn, len(syn))])) == []
    (conn,) = run.conns
    assert (conn.id, conn.a, conn.b, conn.syn_seen, conn.closed_by) == (0, Endpoint(*a), Endpoint(*b), True, None)
    assert run.model(run.stream.feed([(2, 2.0, 1, fin, len(fin))])) == [StreamEnd(conn, 0, "fin", 2.0, 2)]
    assert (conn.closed_by, conn.closed, run.stream.open_conns) == (0, None, 1)
