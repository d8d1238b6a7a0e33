"""Guards of the hot path: each test feeds the case that one check of a shortcut is there for.

A capture fed through ``Pipeline.feed_capture`` (the core reads it in batches) must give
exactly what its packets give fed one by one, or a few at a time, through
``Pipeline.feed_packets`` (the framer's straight cut against its state machine is tested
in Rust, core/src/frame.rs). These tests were first written against the old
Python fused path (``Pipeline.feed_all``) by weakening each check in turn and feeding the
input that tells the weakened code from the real one; they now hold the core to the same
results:

- IP/TCP lengths that disagree with the captured bytes (zero IP length as with
  segmentation offload, a TCP data offset below 5 or past the bytes, a snaplen cut);
- timestamps that go back, on data packets, FINs and packets that are no TCP segment;
- in-order bytes after a reset or at a FIN's sequence number, bytes that fill a hole,
  a segment 64 KiB ahead, sequence numbers that wrap, equal ISNs on both sides;
- the reassembler's retransmission history (``overlap_window``);
- a direction whose first event is a gap and whose first bytes are TLS;
- many connections interleaved, port reuse by a SYN+RST or answered first by a bare ACK;
- pairing: the orphan-response check (negative ids, the 4096 distance, no request yet,
  a Produce with acks=0), requests sent together, a client check made before the
  client side was known, a direction that ends inside a frame; a pre-0.8 request or
  response whose own decoding marked bad fields (the exchange is malformed);
- a connection's first request at the pre-0.8 score bounds (50, 75, 80) and cut by the
  snaplen inside its client id: which protocol, and which side is the client.
"""
from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from analyzer import _core
from analyzer._core import open_capture
from analyzer.model import Endpoint, Packet
from dissectors.header import api_table
from tests.pcapgen import (
    ACK,
    PSH,
    RawPacket,
    TcpFlow,
    TcpPacket,
    core_limits,
    encap,
    ip_packet,
    kafka_request,
    kafka_response,
    run_batched,
    write_pcap,
)
from tests.probes import probes

API_VERSIONS_V0 = b"\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x03"   # no error, one key


def _same(path: str, setup: Any = None, **opts: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(run through feed_capture, run with the packets fed one by one), asserted equal in
    everything, and equal to runs fed 2 and 3 packets at a time."""
    a = run_batched(path, 0, setup, **opts)
    b = run_batched(path, 1, setup, **opts)
    assert a == b
    for batch in (2, 3):
        assert run_batched(path, batch, setup, **opts) == a, batch
    return a, b


def _conversation(client: tuple[str, int], server: tuple[str, int], ts: float, isn: tuple[int, int] = (1000, 5000),
                  n: int = 3) -> tuple[TcpFlow, list[TcpPacket]]:
    flow = TcpFlow(client, server, isn=isn, ts=ts)
    pkts = flow.handshake()
    for corr in range(n):
        pkts += flow.send(0, kafka_request(18, 0, corr, "guard"))
        pkts += flow.ack(1)
        pkts += flow.send(1, kafka_response(corr, API_VERSIONS_V0), sizes=[10])
    return flow, pkts


def _frame(p: TcpPacket) -> bytearray:
    return bytearray(encap(ip_packet(p)))


# -- packets that are odd -------------------------------------------------------------------

def test_header_lengths_that_disagree_with_the_bytes(tmp_path: Path) -> None:
    """In-order data segments whose IP length is 0 (segmentation offload: the per-packet
    parser takes the captured bytes) or cut by the snaplen, and copies of them with a TCP
    data offset below 5 or past the captured bytes (skipped as bad TCP headers)."""
    pkts: list[TcpPacket | RawPacket] = []
    for cli, srv, ts in ((("10.0.0.1", 40000), ("10.0.0.2", 9092), 1000.0),
                         (("fd00::1", 40001), ("fd00::2", 9092), 1001.0)):
        v6 = ":" in cli[0]
        flow, conv = _conversation(cli, srv, ts)
        conv[-1].snap = len(_frame(conv[-1])) - 3      # the last response's end not captured
        for p in conv:
            if not p.payload or p.snap:
                pkts.append(p)
                continue
            f = _frame(p)
            doff = 14 + (40 if v6 else 20) + 12
            for bad in (0x40, 0x00, 0xF0):        # below 5 words; 15 words, past a short payload
                g = bytearray(f)
                g[doff] = bad
                pkts.append(RawPacket(p.ts, bytes(g)))
            # the segment itself with its IP length zeroed
            if v6:
                f[18:20] = b"\x00\x00"
            else:
                f[16:18] = b"\x00\x00"
            pkts.append(RawPacket(p.ts, bytes(f)))
        pkts += flow.fin(0) + flow.fin(1) + flow.ack(0)
    path = str(tmp_path / "lengths.pcap")
    write_pcap(path, pkts)
    a, _ = _same(path)
    assert a["summary"]["exchanges"] == {"ok": 6}
    assert a["summary"]["truncated_frames"] == 2 and a["counters"]["snaplen bytes"] == 6
    assert a["summary"]["packets_skipped"] == {"bad TCP header": 32, "truncated header": 16}
    assert a["summary"]["packets"] == len(pkts)


def test_time_going_back(tmp_path: Path) -> None:
    """The summary's last time is the latest of every packet's, whatever the packet: a bare
    ACK, then earlier-stamped packets; a FIN stamped later than everything after it; a last
    packet that is no TCP segment stamped latest of all."""
    flow, pkts = _conversation(("10.0.0.1", 40000), ("10.0.0.2", 9092), 1000.0)
    pkts[4].ts = 2000.0         # a bare ACK (the server's, of the first request)
    assert pkts[4].payload == b""
    pkts[-1].ts = 2500.0        # the last response's second part
    end = flow.fin(0) + flow.fin(1) + flow.ack(0)
    end[0].ts = 3000.0          # the client's FIN
    path = str(tmp_path / "back.pcap")
    write_pcap(path, pkts + end)
    a, _ = _same(path)
    assert a["summary"]["last_time"] == 3000.0 and a["summary"]["first_time"] == 1000.0
    # the latest time on a data packet
    write_pcap(path, pkts + [flow.ack(0)[0]])
    a, _ = _same(path)
    assert a["summary"]["last_time"] == 2500.0
    # the latest time on a packet that is no TCP segment (a UDP datagram)
    udp = _frame(TcpPacket(4000.0, "10.0.0.9", "10.0.0.8", 1, 2, ACK, 1, 1, b"x"))
    udp[23] = 17
    write_pcap(path, pkts + [RawPacket(4000.0, bytes(udp))] + flow.ack(1))
    a, _ = _same(path)
    assert a["summary"]["last_time"] == 4000.0
    assert a["summary"]["packets"] == len(pkts) + 2


# -- connection state --------------------------------------------------------------------

def test_in_order_data_after_a_reset_or_a_fin(tmp_path: Path) -> None:
    """Bytes in sequence after the connection was reset (its directions hold no FIN), and
    bytes at the sequence number of a direction's FIN: the reassembler counts them as data
    after close / after FIN and does not deliver them."""
    pkts: list[TcpPacket] = []
    flow, conv = _conversation(("10.0.0.1", 40000), ("10.0.0.2", 9092), 1000.0, n=1)
    pkts += conv + flow.rst(1)
    pkts += flow.send(0, kafka_request(18, 0, 5, "late")) + flow.ack(1)
    flow, conv = _conversation(("10.0.0.1", 40001), ("10.0.0.2", 9092), 1001.0, n=1)
    pkts += conv + flow.fin(0)
    flow.seq[0] -= 1            # the client's next bytes at its FIN's sequence number
    pkts += flow.send(0, kafka_request(18, 0, 6, "after-fin"))
    pkts += flow.send(1, kafka_response(6, API_VERSIONS_V0)) + flow.fin(1) + flow.ack(0)
    path = str(tmp_path / "after-close.pcap")
    write_pcap(path, pkts)
    a, _ = _same(path)
    assert a["counters"]["data after close"] == 1 and a["counters"]["data after FIN"] == 1
    assert a["summary"]["exchanges"] == {"ok": 2, "orphan_response": 1}


def test_in_order_bytes_that_fill_a_hole(tmp_path: Path) -> None:
    """A segment that arrives in order while later ones wait in the reassembler: delivered
    with them, and a segment exactly 64 KiB past the expected one (a loss of 64 KiB) is out
    of order, not in order."""
    flow = TcpFlow(("10.0.0.1", 40000), ("10.0.0.2", 9092), ts=1000.0)
    pkts = flow.handshake()
    req = kafka_request(18, 0, 1, "hole")
    parts = flow.send(0, req, sizes=[6, 6])
    pkts += [parts[1], parts[2], parts[0]] + flow.send(1, kafka_response(1, API_VERSIONS_V0))
    far = TcpPacket(flow.ts, "10.0.0.1", "10.0.0.2", 40000, 9092, PSH | ACK, flow.seq[0] + 65536, flow.seq[1],
                    kafka_request(18, 0, 9, "far"))
    pkts += [far] + flow.send(0, kafka_request(18, 0, 2, "near")) + flow.send(1, kafka_response(2, API_VERSIONS_V0))
    pkts += flow.fin(0) + flow.fin(1)
    path = str(tmp_path / "hole.pcap")
    write_pcap(path, pkts)
    a, _ = _same(path)
    assert a["counters"] == {"out of order": 3}
    assert [e[2] for e in a["exchanges"]] == ["ok", "ok"]


def test_sequence_numbers_wrapping(tmp_path: Path) -> None:
    """Initial sequence numbers just below 2**32: the numbers wrap within the conversation
    and the data after the wrap is still in order (nothing out of order, retransmitted or
    lost)."""
    flow = TcpFlow(("10.0.0.1", 40000), ("10.0.0.2", 9092), isn=(2**32 - 30, 2**32 - 5), ts=1000.0)
    pkts = flow.handshake()
    for corr in range(4):
        pkts += flow.send(0, kafka_request(18, 0, corr, "wrap"))
        pkts += flow.send(1, kafka_response(corr, API_VERSIONS_V0))
    pkts += flow.fin(0) + flow.fin(1)
    path = str(tmp_path / "wrap.pcap")
    write_pcap(path, pkts)
    a, _ = _same(path)
    assert a["summary"]["exchanges"] == {"ok": 4}
    assert a["counters"] == {} and a["summary"]["gaps"] == 0 and a["summary"]["bytes_skipped"] == {}


def test_retransmission_history(tmp_path: Path) -> None:
    """The reassembler's history of delivered bytes (``overlap_window``): retransmissions
    that differ from the first copy are found exactly when the first copy is still in the
    window (a 100-byte window here: full to the byte, one segment larger than it, a
    segment pushed out)."""
    flow = TcpFlow(("10.0.0.1", 40000), ("10.0.0.2", 9092), ts=1000.0)
    pkts = flow.handshake()
    req = kafka_request(18, 0, 1, "w", b"\x00" * 400)
    base = flow.seq[0]
    seg = flow.send(0, req, sizes=[40, 60, 150, 30])

    def changed(i: int) -> TcpPacket:
        p = seg[i]
        return TcpPacket(flow.ts, p.src, p.dst, p.sport, p.dport, PSH | ACK, p.seq, p.ack,
                         bytes(b ^ 0x5A for b in p.payload))

    # A (40) and B (60) fill the window exactly: A is kept
    pkts += seg[:2] + [changed(0)]
    # C (150) alone is more than the window: kept, A and B are pushed out
    pkts += seg[2:3] + [changed(2), changed(1)]
    # D (30): C is pushed out
    pkts += seg[3:4] + [changed(2)] + seg[4:]
    pkts += flow.send(1, kafka_response(1, API_VERSIONS_V0)) + flow.fin(0) + flow.fin(1)
    assert seg[3].seq == (base + 250) & 0xFFFFFFFF
    path = str(tmp_path / "history.pcap")
    write_pcap(path, pkts)

    a, _ = _same(path, core_limits(overlap_window=100))
    assert a["counters"]["retransmission"] == 4 and a["counters"]["overlap differs"] == 2
    assert [n.split(" in packet ")[1].split()[0] for n in a["notes"]] == ["6", "8"]
    assert a["summary"]["exchanges"] == {"ok": 1}


def test_first_bytes_after_a_gap_are_classified(tmp_path: Path) -> None:
    """A direction whose first event is a gap (its first segment's payload not captured)
    has a framer but has not shown its first bytes: TLS bytes next in order must still be
    spotted."""
    flow = TcpFlow(("10.0.0.1", 40000), ("10.0.0.2", 9092), ts=1000.0)
    pkts = flow.handshake()
    first = flow.send(0, b"\x16\x03\x01\x00\x10" + b"\x01" * 16)
    first[0].snap = 54                  # headers only
    record = b"\x17\x03\x03\x00\x20" + bytes(range(32))
    pkts += first + flow.send(0, record) + flow.send(1, record) + flow.send(0, record)
    pkts += flow.fin(0) + flow.fin(1)
    path = str(tmp_path / "gap-tls.pcap")
    write_pcap(path, pkts)
    a, _ = _same(path)
    s = a["summary"]
    assert s["tls_connections"] == 1
    assert s["bytes_skipped"] == {"tls (not decrypted)": 3 * len(record), "gap": 21}
    assert s["gaps"] == 1 and a["exchanges"] == []


def test_connections_interleaved(tmp_path: Path) -> None:
    """Eight connections, then every one of them again, interleaved, then their ends: each
    exchange on its connection, whatever the batches the packets come in."""
    pkts: list[TcpPacket] = []
    flows = []
    for i in range(8):
        flow, conv = _conversation(("10.0.0.1", 41000 + i), ("10.0.0.2", 9092), 1000.0 + i, n=1)
        flows.append(flow)
        pkts += conv
    for flow in flows:                  # every connection again, interleaved
        pkts += flow.send(0, kafka_request(18, 0, 7, "again")) + flow.send(1, kafka_response(7, API_VERSIONS_V0))
    for flow in flows:
        pkts += flow.fin(0) + flow.fin(1) + flow.ack(0)
    path = str(tmp_path / "many.pcap")
    write_pcap(path, pkts)
    a, _ = _same(path)
    assert a["summary"]["exchanges"] == {"ok": 16}
    assert [(e[1], e[5]) for e in a["exchanges"]] == [(i, 0) for i in range(8)] + [(i, 7) for i in range(8)]
    assert [c[6] for c in a["conns"]] == ["fin"] * 8 and a["counters"] == {}


# -- the response side's check (_response_check) ---------------------------------------------

def test_orphan_response_bounds(tmp_path: Path) -> None:
    """A response whose request is not in flight is plausible when no request was seen yet,
    or when its id is within 4096 of the latest request's; a negative id never is. The
    implausible ones are followed in their segment by a real response: the framer skips to
    it; the last one ends its segment, a frame boundary in sync: kept as damaged."""
    flow = TcpFlow(("10.0.0.1", 40000), ("10.0.0.2", 9092), ts=1000.0)
    pkts = flow.handshake()
    bad = b"\xff" * 8
    pkts += flow.send(1, kafka_response(77, bad))        # before any request
    for cid, orphan in ((5000, 5000 + 4096), (5001, 5001 + 4097), (2, -1), (5003, 5003 - 4096),
                        (5004, 5004 - 4097)):
        pkts += flow.send(0, kafka_request(18, 0, cid, "o"))
        pkts += flow.send(1, kafka_response(orphan, bad) + kafka_response(cid, API_VERSIONS_V0))
    # rejected, but alone in its segment after frames in sync: kept (a damaged header)
    pkts += flow.send(1, kafka_response(-7, bad))
    pkts += flow.fin(0) + flow.fin(1)
    path = str(tmp_path / "orphans.pcap")
    write_pcap(path, pkts)
    a, _ = _same(path)
    assert [(e[2], e[5]) for e in a["exchanges"]] == [
        ("orphan_response", 77), ("orphan_response", 9096), ("ok", 5000), ("ok", 5001), ("ok", 2),
        ("orphan_response", 907), ("ok", 5003), ("ok", 5004), ("orphan_response", -7)]
    assert a["summary"]["bytes_skipped"] == {"desync": 48}
    # the first request, cut straight with the protocol undecided, decided it
    assert [c[5] for c in a["conns"]] == ["kafka"] and a["summary"]["kafka_connections"] == 1


def test_each_direction_keeps_its_own_sequence_state(tmp_path: Path) -> None:
    """Both sides with the same initial sequence number (the two sides send different byte
    counts): each direction keeps its own sequence state, up to the FINs."""
    pkts: list[TcpPacket] = []
    for i, (cli, srv) in enumerate(((("10.0.0.1", 40000), ("10.0.0.2", 9092)),
                                    (("fd00::1", 40001), ("fd00::2", 9092)))):
        flow, conv = _conversation(cli, srv, 1000.0 + i, isn=(7000, 7000))
        pkts += conv + flow.fin(1) + flow.fin(0) + flow.ack(1)
    path = str(tmp_path / "same-isn.pcap")
    write_pcap(path, pkts)
    a, _ = _same(path)
    assert a["summary"]["exchanges"] == {"ok": 6} and a["counters"] == {}
    assert [c[6] for c in a["conns"]] == ["fin", "fin"]


def test_syn_rst_on_a_closed_tuple(tmp_path: Path) -> None:
    """A packet with SYN and RST on the 4-tuple of a closed connection opens a new one and
    resets it at once: the ACKs after it belong to the new connection."""
    flow, conv = _conversation(("10.0.0.1", 40000), ("10.0.0.2", 9092), 1000.0, n=1)
    pkts = conv + flow.fin(0) + flow.fin(1) + flow.ack(0)
    pkts.append(TcpPacket(1001.0, "10.0.0.1", "10.0.0.2", 40000, 9092, 0x06, 424242, 0))
    pkts += [TcpPacket(1002.0, "10.0.0.2", "10.0.0.1", 9092, 40000, ACK, 1, 424243),
             TcpPacket(1003.0, "10.0.0.1", "10.0.0.2", 40000, 9092, ACK, 424243, 1)]
    path = str(tmp_path / "syn-rst.pcap")
    write_pcap(path, pkts)
    a, _ = _same(path)
    assert [c[6] for c in a["conns"]] == ["fin", "rst"] and a["counters"] == {"port reuse": 1}
    # each connection's last packet up to its end (the core reports nothing of a connection
    # after it): the second FIN, the reset
    assert [(c[6], round(c[8], 6)) for c in a["conns"]] == [("fin", round(pkts[-5].ts, 6)), ("rst", 1001.0)]


def test_new_syn_answered_by_an_ack_first(tmp_path: Path) -> None:
    """Port reuse: a new SYN on the 4-tuple of a closed connection, answered first by the
    server's bare ACK (a challenge ACK), then by its SYN-ACK: the bare ACK belongs to the
    new connection, not to the closed one's last ACKs."""
    flow, conv = _conversation(("10.0.0.1", 40000), ("10.0.0.2", 9092), 1000.0, n=1)
    pkts = conv + flow.fin(0) + flow.fin(1) + flow.ack(0)
    again = TcpFlow(("10.0.0.1", 40000), ("10.0.0.2", 9092), isn=(90000, 70000), ts=1001.0)
    hs = again.handshake()
    pkts += [hs[0], TcpPacket(1001.0005, "10.0.0.2", "10.0.0.1", 9092, 40000, ACK, 70001, 90001)] + hs[1:]
    pkts += again.send(0, kafka_request(18, 0, 3, "again")) + again.send(1, kafka_response(3, API_VERSIONS_V0))
    pkts += again.fin(0) + again.fin(1)
    path = str(tmp_path / "challenge-ack.pcap")
    write_pcap(path, pkts)
    a, _ = _same(path)
    assert a["summary"]["exchanges"] == {"ok": 2} and a["counters"]["port reuse"] == 1
    assert [(c[1], c[3], c[6]) for c in a["conns"]] == [(Endpoint("10.0.0.1", 40000), True, "fin")] * 2
    # each connection's last packet up to its end: the first's second FIN (not the bare ACK of
    # the new one), the second's last FIN
    assert [round(c[8], 6) for c in a["conns"]] == [round(pkts[len(conv) + 1].ts, 6), round(pkts[-1].ts, 6)]


# -- pairing (_frame) ------------------------------------------------------------------------

def test_pairing_order_notes_and_the_latest_request(tmp_path: Path) -> None:
    """Two requests in one segment answered in reverse order are not out of request order
    (they were sent together), two in separate segments are; a Produce with acks=0 expects
    no response and is not the latest request the orphan check measures from."""
    flow = TcpFlow(("10.0.0.1", 40000), ("10.0.0.2", 9092), ts=1000.0)
    pkts = flow.handshake()
    pkts += flow.send(0, kafka_request(18, 0, 1, "o") + kafka_request(18, 0, 2, "o"))
    pkts += flow.send(1, kafka_response(2, API_VERSIONS_V0)) + flow.send(1, kafka_response(1, API_VERSIONS_V0))
    pkts += flow.send(0, kafka_request(18, 0, 3, "o")) + flow.send(0, kafka_request(18, 0, 4, "o"))
    pkts += flow.send(1, kafka_response(4, API_VERSIONS_V0)) + flow.send(1, kafka_response(3, API_VERSIONS_V0))
    produce = struct.pack(">hi", 0, 1000) + struct.pack(">i", 0)       # acks=0, timeout, no topics
    pkts += flow.send(0, kafka_request(18, 0, 10, "o") + kafka_request(0, 2, 9000, "o", produce))
    # 20 is within 4096 of 10, the latest request awaiting an answer, not of the Produce's 9000
    pkts += flow.send(1, kafka_response(20, b"\xff" * 8) + kafka_response(10, API_VERSIONS_V0))
    pkts += flow.fin(0) + flow.fin(1)
    path = str(tmp_path / "order.pcap")
    write_pcap(path, pkts)
    a, _ = _same(path)
    assert [(e[2], e[5]) for e in a["exchanges"]] == [
        ("ok", 2), ("ok", 1), ("ok", 4), ("ok", 3), ("no_response_expected", 9000), ("orphan_response", 20),
        ("ok", 10)]
    assert a["summary"]["notes"] == {"responses out of request order": 1}
    assert a["summary"]["bytes_skipped"] == {}


def test_first_frame_a_response_then_client_bytes_that_are_no_request(tmp_path: Path) -> None:
    """A connection caught mid-stream on a port not known as Kafka's, its first frame a
    response: the other side becomes the client without the protocol being decided, and
    its check must still ask for a request (a frame that would pass as an orphan response
    is no request: skipped)."""
    srv, cli = ("10.0.0.2", 12345), ("10.0.0.1", 40000)
    flow = TcpFlow(srv, cli, ts=1000.0)        # side 0: the server
    pkts = flow.send(1, b"\xee\xee")       # the client's framer is made before its side is known
    pkts += flow.send(0, kafka_response(77, b"\xff" * 8))
    pkts += flow.send(1, struct.pack(">I", 10) + b"\x7f\x11\x22\x33" + b"\xee" * 6)
    pkts += flow.send(1, kafka_request(18, 0, 6, "c")) + flow.send(0, kafka_response(6, API_VERSIONS_V0))
    pkts += flow.fin(0) + flow.fin(1)
    path = str(tmp_path / "mid-stream.pcap")
    write_pcap(path, pkts)
    a, _ = _same(path)
    assert [(e[2], e[5], e[16]) for e in a["exchanges"]] == [("orphan_response", 77, 0), ("ok", 6, 0)]
    assert a["summary"]["bytes_skipped"] == {"before first frame": 2 + 4 + 10}
    assert a["summary"]["kafka_connections"] == 1


def test_direction_ending_inside_a_frame_gives_it_at_once(tmp_path: Path) -> None:
    """The client ends (FIN) inside a request: the truncated request is framed when its
    direction ends, so the response that comes after it still finds it."""
    flow = TcpFlow(("10.0.0.1", 40000), ("10.0.0.2", 9092), ts=1000.0)
    pkts = flow.handshake()
    pkts += flow.send(0, kafka_request(18, 0, 1, "cut-short")[:-3]) + flow.fin(0)
    pkts += flow.send(1, kafka_response(1, API_VERSIONS_V0)) + flow.fin(1)
    path = str(tmp_path / "fin-inside.pcap")
    write_pcap(path, pkts)
    a, _ = _same(path)
    assert [(e[2], e[5], e[7], e[8]) for e in a["exchanges"]] == [("ok", 1, 4, 6)]
    assert a["summary"]["truncated_frames"] == 1


def test_legacy_response_check_follows_the_request_waiting(tmp_path: Path) -> None:
    """Pre-0.8: a response is judged as an answer to the oldest request waiting (here an
    OFFSETS request): a frame that could answer a FETCH but not an OFFSETS request is
    skipped, and the real answer behind it in the segment pairs."""
    from tests import legacy_captures as w

    flow = TcpFlow(("10.0.0.1", 40000), ("10.0.0.2", 9092), ts=1000.0)
    pkts = flow.handshake()
    pkts += flow.send(0, w.offsets_request("t", 0, -2, 1))
    fetch_like = struct.pack(">I", 12) + b"\x00\x00" + b"\x7f" * 4 + b"\x01" + b"\x7f" * 5
    pkts += flow.send(1, fetch_like + w.offsets_response(0, [7]))
    pkts += flow.fin(0) + flow.fin(1)
    path = str(tmp_path / "legacy.pcap")
    write_pcap(path, pkts)
    a, _ = _same(path, protocol="legacy")
    assert [(e[2], e[3]) for e in a["exchanges"]] == [("ok", "OFFSETS")]
    assert a["summary"]["bytes_skipped"] == {"before first frame": 16}


def test_raw_sasl_token_over_two_segments(tmp_path: Path) -> None:
    """After SaslHandshake v0 the frames are raw SASL tokens, which no Kafka check would
    pass: a long token spread over two segments (judged before its end is in, so it cannot
    be kept as a damaged frame ending its segment) must still be framed."""
    flow = TcpFlow(("10.0.0.1", 40000), ("10.0.0.2", 9092), ts=1000.0)
    pkts = flow.handshake()
    mech = b"PLAIN"
    pkts += flow.send(0, kafka_request(17, 0, 2, "sasl", struct.pack(">h", len(mech)) + mech))
    pkts += flow.send(1, kafka_response(2, struct.pack(">hi", 0, 1) + struct.pack(">h", 5) + mech))
    token = b"\x00alice\x00" + b"pw" * 100
    pkts += flow.send(0, struct.pack(">I", len(token)) + token, sizes=[100])
    pkts += flow.send(1, struct.pack(">I", 0))
    pkts += flow.send(0, kafka_request(3, 0, 3, "c", struct.pack(">i", 0)))
    pkts += flow.send(1, kafka_response(3, struct.pack(">ii", 0, 0)))
    pkts += flow.fin(0) + flow.fin(1)
    path = str(tmp_path / "sasl.pcap")
    write_pcap(path, pkts)
    a, _ = _same(path, decode="lite")
    assert [(e[2], e[3], e[7]) for e in a["exchanges"]] == [
        ("ok", "SaslHandshake", 4), ("ok", "SaslToken", 7), ("ok", "Metadata", 9)]
    assert a["summary"]["bytes_skipped"] == {}


@pytest.mark.parametrize("together", [False, True])
def test_raw_sasl_token_pipelined_with_the_next_request(tmp_path: Path, together: bool) -> None:
    """A client that sends its last raw SASL token and its next Kafka request in one segment,
    before the broker's token: the broker's token (empty, as for PLAIN) still answers the
    client's, and the request after it is paired by its correlation id; the broker's token
    and its response may come in one segment too."""
    flow = TcpFlow(("10.0.0.1", 40000), ("10.0.0.2", 9092), ts=1000.0)
    pkts = flow.handshake()
    mech = b"PLAIN"
    pkts += flow.send(0, kafka_request(17, 0, 2, "sasl", struct.pack(">h", len(mech)) + mech))
    pkts += flow.send(1, kafka_response(2, struct.pack(">hi", 0, 1) + struct.pack(">h", 5) + mech))
    token = b"\x00alice\x00secret"
    pkts += flow.send(0, struct.pack(">I", len(token)) + token + kafka_request(3, 0, 3, "c", struct.pack(">i", 0)))
    answers = [struct.pack(">I", 0), kafka_response(3, struct.pack(">ii", 0, 0))]
    for a in ([b"".join(answers)] if together else answers):
        pkts += flow.send(1, a)
    pkts += flow.fin(0) + flow.fin(1)
    path = str(tmp_path / "sasl-pipelined.pcap")
    write_pcap(path, pkts)
    a, _ = _same(path)
    assert [(e[2], e[3], e[5], e[7], e[8]) for e in a["exchanges"]] == [
        ("ok", "SaslHandshake", 2, 4, 5), ("ok", "SaslToken", None, 6, 7), ("ok", "Metadata", 3, 6, 7 + (not together))]
    assert a["summary"]["bytes_skipped"] == {}


@pytest.mark.parametrize("snap", [0, 96])
def test_a_request_the_capture_missed_costs_only_its_exchange(tmp_path: Path, snap: int) -> None:
    """A request packet missing from the capture (the broker got it: its ACK covers it): the
    hole ends at that ACK (a bare ACK), so the requests after it are paired with their
    responses as they come; only the missed request's response is an orphan. With a snaplen
    that cuts every frame, the framer finds the next frame from its captured head alone."""
    flow = TcpFlow(("10.0.0.1", 40000), ("10.0.0.2", 9092), ts=1000.0)
    pkts = flow.handshake()
    for corr in range(5):
        pkts += flow.send(0, kafka_request(3, 1, corr, "a-client-id-long-enough-to-be-cut", b"\xff" * 40))
        pkts += flow.ack(1)
        pkts += flow.send(1, kafka_response(corr, struct.pack(">i", 0) + b"\x00" * 60))
    pkts += flow.fin(0) + flow.fin(1)
    missed = pkts[3 + 3 * 2]                      # the request with correlation id 2
    assert missed.payload[8:12] == struct.pack(">i", 2)
    whole, cut = str(tmp_path / "whole.pcap"), str(tmp_path / "cut.pcap")
    write_pcap(whole, pkts, snaplen=snap)
    write_pcap(cut, [p for p in pkts if p is not missed], snaplen=snap)
    a, _ = _same(whole)
    b, _ = _same(cut)
    exp = [(e[3], e[5]) for e in a["exchanges"]]
    assert exp == [("Metadata", c) for c in range(5)]
    assert [(e[2], e[3], e[5]) for e in b["exchanges"]] == [
        (e[2], e[3], e[5]) if e[5] != 2 else ("orphan_response", "Unknown", 2) for e in a["exchanges"]]
    # each exchange as soon as its response is in, not at the connection's end
    assert [e[8] for e in b["exchanges"]] == [e[8] - (e[5] >= 2) for e in a["exchanges"]]
    # the hole (the missed request) is one lost segment, ended by the ACK that covers it
    assert (a["counters"].get("lost segments"), b["counters"].get("lost segments")) == (None, 1)
    assert b["counters"]["lost bytes"] == len(missed.payload)
    # (with the snaplen, the missed request's own snaplen gap is gone with it)
    assert b["summary"]["gaps"] == a["summary"]["gaps"] + (0 if snap else 1)


@pytest.mark.parametrize(("sample", "pkt", "at", "old", "new", "corr", "kept"), [
    ("produce_fetch_aiokafka_lz4.pcap", 4, 73, 0, 64, 1, ("ok", "ApiVersions", 1)),      # ApiVersions v0 -> v64
    ("produce_fetch_kafkajs_gzip.pcap", 4, 70, 0, 4, 0, None),      # ApiVersions -> API key 1042
    ("produce_fetch_kafkajs_gzip.pcap", 45, 78, 0, 16, 0, None)])   # Fetch: client id of 4096+ bytes
def test_a_broken_first_request_is_one_frame_or_a_scan_finds_the_next_packets_request(
        tmp_path: Path, sample: str, pkt: int, at: int, old: int, new: int, corr: int,
        kept: tuple[str, str, int] | None) -> None:
    """A connection's first request made implausible by one flipped bit (a version, an API key
    or a client id length no request has). A version we do not know, in a request header that
    is otherwise sane at the first byte of a connection whose handshake was captured, is still
    one frame: its exchange is paired with its response by correlation id (issue 23). An API
    key beyond 127 there counts only on a ``--port`` (these samples' brokers are found by
    autodetection), and a client id longer than the frame never: either desynchronises the
    direction. The scan then
    meets a guess inside that request's tail, which would swallow the next request, or,
    undecided, hold it back until its response has gone by, or, taken, wait for megabytes that
    never come; the next packet's first bytes, a plausible request, win (long fuzz runs found
    all three). Only the broken request's exchange is lost."""
    src = Path(__file__).resolve().parents[1] / "samples" / sample
    with open_capture(str(src)) as r:
        pkts = list(map(Packet._make, r))
    data = bytearray(pkts[pkt - 1].data)
    assert data[at] == old
    data[at] = new
    path = str(tmp_path / "flipped.pcap")
    write_pcap(path, [RawPacket(p.ts, bytes(data) if p.index == pkt else p.data) for p in pkts])
    whole, _ = _same(str(src))
    a, _ = _same(path)
    lost = ("orphan_response", "Unknown", corr) if kept is None else kept
    # (in the order of their request frames: a connection auto-detection judges later lets
    # its exchanges go later)
    assert sorted(((e[2], e[3], e[5], e[7]) for e in a["exchanges"]), key=repr) == sorted(
        ((*lost, None if kept is None else e[7]) if e[7] == pkt else (e[2], e[3], e[5], e[7])
         for e in whole["exchanges"]), key=repr)
    assert bool(a["summary"]["bytes_skipped"]) == (kept is None)


def test_a_scan_guess_keeps_its_frame_against_a_weak_reading_of_a_later_packet(tmp_path: Path) -> None:
    """After a desync, a response found by the scan and spread over several packets keeps its
    bytes when a later packet of it merely looks like an orphan response (a size and a
    correlation id): only a strong reading (a request header, a response whose request
    waits) may take a later packet's start from a guess."""
    flow = TcpFlow(("10.0.0.1", 40000), ("10.0.0.2", 9092), ts=1000.0)
    pkts = flow.send(0, kafka_request(3, 1, 7, "c", struct.pack(">i", -1)))      # mid-stream: no SYN
    look_alike = struct.pack(">ii", 16, 5) + b"\x00" * 992      # what an orphan's head looks like
    big = kafka_response(7, struct.pack(">iii", 0, 0, 0) + b"\x01" * 980 + look_alike + b"\x02" * 1000)
    pkts += flow.send(1, b"\xff" * 6 + big, sizes=[6 + 1000, 1000])        # 6 bytes of garbage first
    path = str(tmp_path / "guess.pcap")
    write_pcap(path, pkts)
    a, _ = _same(path)
    assert [(e[2], e[3], e[5], e[8]) for e in a["exchanges"]] == [("ok", "Metadata", 7, 4)]
    assert a["summary"]["bytes_skipped"] == {"before first frame": 6}


def test_legacy_exchange_with_bad_fields_is_malformed(tmp_path: Path) -> None:
    """Pre-0.8 trees are decoded before the exchange is made: one whose decoding marked bad
    fields makes its exchange malformed (a frame cut short in the capture would not)."""
    from tests import legacy_captures as w

    flow = TcpFlow(("10.0.0.1", 40000), ("10.0.0.2", 9092), ts=1000.0)
    pkts = flow.handshake()
    pkts += flow.send(0, w.fetch_request("t", 0, 0, 100))
    pkts += flow.send(1, w.fetch_response(0, w.message(b"v")))
    pkts += flow.send(0, w.frame(w.fetch_request("t", 0, 0, 10)[4:-2]))     # a FETCH two bytes short
    pkts += flow.send(1, w.fetch_response(0))
    pkts += flow.send(0, w.offsets_request("t", 0, -2, 1))
    pkts += flow.send(1, w.frame(struct.pack(">hi", 0, 5) + struct.pack(">q", 7)))   # 5 offsets, 1 there
    pkts += flow.fin(0) + flow.fin(1)
    path = str(tmp_path / "legacy-bad.pcap")
    write_pcap(path, pkts)
    a, _ = _same(path, protocol="legacy")
    assert [(e[2], e[3]) for e in a["exchanges"]] == [("ok", "FETCH"), ("malformed", "FETCH"),
                                                      ("malformed", "OFFSETS")]


TABLE = _core.HeaderTable(api_table())


def plausible(data: bytes, prefix: bool = False) -> Any:
    """The core's check of a 0.8+ request frame (``prefix``: only its first bytes): the header
    (a truthy tuple) when plausible and parsed whole, True when judged on a cut client id, else
    False."""
    return probes.probe_request_header(TABLE, data, prefix, True)


def _first_request(tmp_path: Path, data: bytes, syn: bool, snap: int = 0) -> tuple[Any, ...]:
    """(client side, protocol, exchanges) of a connection whose client sends one frame (runs
    through feed_capture and feed_packets agree): with a handshake, or caught mid-stream on ports that tell
    no side (so the frame decides which side is the client): both are --port ports, as one
    frame alone is too thin for auto-detection."""
    flow = TcpFlow(("10.0.0.1", 50000), ("10.0.0.2", 9092 if syn else 40001), ts=1000.0)
    pkts = (flow.handshake() if syn else []) + flow.send(0, data)
    if snap:
        pkts[-1].snap = snap
    path = str(tmp_path / "first.pcap")
    write_pcap(path, pkts)
    a, _ = _same(path, ports=(9092, 50000, 40001))
    (_cid, _a, _b, _syn, client_dir, protocol, *_rest), = a["conns"]
    return client_dir, protocol, [(e[2], e[3], e[5]) for e in a["exchanges"]]


def test_first_request_protocol_at_the_legacy_score_bounds(tmp_path: Path) -> None:
    """A connection's first request: a 0.8+ reading wins below a pre-0.8 score of 80, a pre-0.8
    reading from 80 (a FETCH on a 4-byte topic reads as a Fetch v4 header too), and a frame
    with no 0.8+ reading is pre-0.8 from a score of 50, which also makes its sender the client
    when nothing else tells."""
    from tests import legacy_captures as w

    at80 = w.fetch_request("test", 0, -1, 0)                  # no offset, no size: 40 + 40
    at75 = w.fetch_request("test", 0x14100, 0, 0)             # partition past 65535 (-15), offset 0 (+10)
    at65 = w.fetch_request("a:b", 0, -1, 0)                   # a topic Kafka would refuse: 25 + 40
    at50 = w.fetch_request("a:b" + "x" * 57, 0x7FFFFFFF, -1, 0)   # and a partition past 65535: -15
    # the core's pre-0.8 score and 0.8+ check of a whole frame (core/src/legacy.rs, kafka.rs)
    assert [probes.probe_legacy_request_score(f[4:], True) for f in (at80, at75, at65, at50)] == [80, 75, 65, 50]
    assert [bool(plausible(f[4:])) for f in (at80, at75, at65, at50)] == [True, True, True, False]
    for syn in (True, False):
        assert _first_request(tmp_path, at80, syn) == (0, "kafka-legacy", [("unanswered", "FETCH", None)])
        assert _first_request(tmp_path, at75, syn) == (0, "kafka", [("unanswered", "Fetch", 0x74657374)])
        assert _first_request(tmp_path, at65, syn) == (0, "kafka", [("unanswered", "Fetch", 0x613A6200)])
        assert _first_request(tmp_path, at50, syn) == (0, "kafka-legacy", [("unanswered", "FETCH", None)])


def test_first_request_cut_by_the_snaplen_is_judged_on_its_bytes(tmp_path: Path) -> None:
    """A first request cut inside its client id (snaplen) is a 0.8+ request on the bytes there
    are: its sender is the client, on a connection caught mid-stream."""
    data = kafka_request(3, 1, 7, "a-long-client-id-of-forty-bytes-xxxxxxxx", b"\xff\xff\xff\xff")
    assert not plausible(data[4:26]) and plausible(data[4:26], prefix=True)
    assert _first_request(tmp_path, data, False, snap=54 + 26) == (0, "kafka", [("unanswered", "Metadata", 7)])
