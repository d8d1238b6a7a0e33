"""A TCP connection's life through the pipeline: its handshake, first bytes and ends.

Covers the cheaper per-connection paths: a new framer cuts its first bytes straight
(``Framer._at`` starts at offset 0), a direction that ends at a frame boundary is not
finished (nothing to cut), while one that ends inside a frame still gives its truncated
frame; the client side's check before the first request decides the protocol; a SYN of
a 4-tuple the reassembler forgot is learnt like any new connection; a FIN fed to
``Reassembler.segment`` without its endpoints.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from analyzer import pipeline
from analyzer.capture import open_capture
from analyzer.framing import Framer
from analyzer.model import Conn, Endpoint, StreamData, StreamEnd
from analyzer.pipeline import Options, Pipeline
from analyzer.tcp import Reassembler
from dissectors.header import RequestHeader
from tests.pcapgen import (
    ACK,
    FIN,
    SYN,
    TcpFlow,
    TcpPacket,
    kafka_request,
    kafka_response,
    request_plausible,
    write_pcap,
)

CONN = Conn(0, Endpoint("10.0.0.1", 40000), Endpoint("10.0.0.2", 9092))
RESP_BODY = b"\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x03"


def _sig(ex: Any) -> tuple[Any, ...]:
    return (ex.seq, ex.conn.id, ex.status, ex.api_name, ex.correlation_id, ex.request_frame,
            ex.response_frame, list(ex.notes), ex.conn.closed)


def _run(path: str, fused: bool, max_closed: int | None = None) -> tuple[list[Any], dict[str, Any]]:
    pipe = Pipeline(Options())
    if max_closed is not None:
        pipe.reassembler.max_closed = max_closed
    with open_capture(path) as r:
        if fused:
            out = [_sig(ex) for ex in pipe.feed_all(r)]
        else:
            out = [_sig(ex) for pkt in r for ex in pipe.feed(pkt)]
    out += [_sig(ex) for ex in pipe.finish()]
    return out, pipe.summary.to_json(pipe.ctx)


def test_new_framer_cuts_its_first_bytes_straight() -> None:
    frame = kafka_request(18, 0, 1, "a")
    fresh = Framer(CONN, 0, request_plausible)
    out: list[Any] = []
    f = fresh.feed_data(0, frame, 1.0, 3, out)
    assert f is not None and out == [] and f.data == frame[4:] and f.first_index == 3
    assert fresh._at == len(frame) and fresh._off == len(frame)
    # the same as through feed(); and a first event elsewhere than offset 0 starts there
    via_feed = Framer(CONN, 0, request_plausible).feed(StreamData(CONN, 0, 0, frame, 1.0, 3))
    assert via_feed == [f]
    late = Framer(CONN, 0, request_plausible)
    assert late.feed_data(7, frame, 1.0, 3, out) is None
    assert [x.stream_offset for x in out] == [7] and out[0].data == frame[4:] and late._at == 7 + len(frame)


def test_framer_ending_at_a_boundary_holds_nothing() -> None:
    frame = kafka_request(18, 0, 1, "a")
    fr = Framer(CONN, 0, request_plausible)
    out: list[Any] = []
    fr.feed_data(0, frame + frame[:6], 1.0, 1, out)
    assert len(out) == 1 and bytes(fr.buf) == frame[:6]
    assert [(x.truncated, x.size) for x in fr.finish()] == [(True, len(frame) - 4)]
    clean = Framer(CONN, 0, request_plausible)
    assert clean.feed_data(0, frame, 1.0, 1, out) is not None and not clean.buf
    assert clean.feed(StreamEnd(CONN, 0, "fin", 2.0, 2)) == [] and clean.skipped == {}


def test_undecided_client_check() -> None:
    h = pipeline._undecided_request(b"\x00\x12\x00\x00\x00\x00\x00\x01\x00\x03abc")
    assert isinstance(h, RequestHeader) and (h.api_key, h.correlation_id, h.client_id) == (18, 1, "abc")
    # the peek of a pre-0.8 fetch (type 1) of an 80-byte topic: no 0.8+ header (no version 80)
    assert pipeline._undecided_request((b"\x00\x01\x00\x50" + b"t" * 80)[:64]) is True
    assert pipeline._undecided_request(b"\x7f\x7f\x00\x00\x00\x00\x00\x01") is False


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
    fused, fsum = _run(path, True)
    per_packet, psum = _run(path, False)
    assert fused == per_packet and fsum == psum
    # (conn 2: at the reset the client's cut request, then the server's cut response that
    # answers the first one, then the request left unanswered)
    assert [(s[1], s[2], s[4]) for s in fused] == [
        (0, "ok", 1), (1, "ok", 1), (1, "unanswered", 2), (2, "ok", 1), (2, "unanswered", 2)]
    assert fsum["truncated_frames"] == 3 and fsum["bytes_skipped"] == {}
    assert fsum["connections"] == fsum["kafka_connections"] == 3
    assert [s[-1] for s in fused] == [None, None, "fin", "rst", "rst"]


def test_syn_on_forgotten_tuple_and_fin_without_endpoints(tmp_path: Path) -> None:
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
    fused, fsum = _run(path, True, max_closed=1)
    per_packet, psum = _run(path, False, max_closed=1)
    assert fused == per_packet and fsum == psum
    assert [(s[1], s[2], s[4]) for s in fused] == [(0, "ok", 0), (2, "ok", 1), (4, "ok", 2)]
    assert fsum["connections"] == 6 and fsum["kafka_connections"] == 3
    # a FIN on a known connection needs no endpoints
    ra = Reassembler()
    a, b = Endpoint("10.0.0.1", 1), Endpoint("10.0.0.2", 2)
    assert ra.segment(None, 0, a, b, 100, 0, SYN, b"", 0, 1.0, 1) == []
    st, _ = ra._pairs[(a, b)]
    assert ra.segment(st, 0, None, None, 101, 0, FIN | ACK, b"", 0, 2.0, 2) == [
        StreamEnd(st.conn, 0, "fin", 2.0, 2)]
