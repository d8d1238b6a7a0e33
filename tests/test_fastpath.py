"""A capture fed through ``Pipeline.feed_capture`` (the core reads it in batches) gives
exactly what its packets give fed one by one, or a few at a time, through
``Pipeline.feed_packets``.

Covers what the old fused fast path (``Pipeline.feed_all``) took, now the core's: IPv4 and
IPv6 data and ACKs in order, frames that look like TCP segments but are not, ACKs after a
connection closed (also once the reassembler forgot it), port reuse, SYN, FIN and RST
handling; and the helpers made cheaper for the hot path: the request-header parser (the
core's now, core/src/kafka.rs, through its probe), ``kafka.error_codes`` and the batched sketch.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from analyzer import _core
from dissectors import kafka
from dissectors.field import Field
from dissectors.header import RequestHeader, api_table
from tests.pcapgen import (
    ACK,
    FIN,
    PSH,
    RST,
    SYN,
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

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(__file__).resolve().parents[2] / "shared" / "captures"


def _both(path: str, batches: tuple[int, ...] = (1, 7), max_closed: int | None = None,
          **opts: Any) -> dict[str, Any]:
    """The run through feed_capture, asserted equal in everything to the runs fed the packets
    one by one and ``batches`` at a time."""
    setup = core_limits(max_closed=max_closed) if max_closed is not None else None
    a = run_batched(path, 0, setup, **opts)
    for batch in batches:
        b = run_batched(path, batch, setup, **opts)
        for k in a:
            assert a[k] == b[k], (batch, k)
    return a


def _conversation(client: tuple[str, int], server: tuple[str, int], ts: float, isn: tuple[int, int],
                  n: int = 3) -> tuple[TcpFlow, list[TcpPacket]]:
    flow = TcpFlow(client, server, isn=isn, ts=ts)
    pkts = flow.handshake()
    for corr in range(n):
        pkts += flow.send(0, kafka_request(18, 0, corr, "fast"))      # ApiVersions v0
        pkts += flow.ack(1)
        pkts += flow.send(1, kafka_response(corr, b"\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x03"),
                          sizes=[10])
    return flow, pkts



def test_capture_equals_per_packet_on_v4_v6_closed_and_reused(tmp_path: Path) -> None:
    pkts: list[TcpPacket] = []
    # IPv4 and IPv6, each closed with FINs then ACKed after the close
    for cli, srv, ts in ((("10.0.0.1", 40000), ("10.0.0.2", 9092), 1000.0),
                         (("fd00::1", 40001), ("fd00::2", 9092), 1001.0)):
        flow, p = _conversation(cli, srv, ts, (1000, 5000))
        pkts += p + flow.fin(0) + flow.fin(1)
        pkts += flow.ack(0) + flow.ack(1)
    # the same 4-tuple again (port reuse) with new ISNs, ended by a reset, then stray ACKs
    flow, p = _conversation(("10.0.0.1", 40000), ("10.0.0.2", 9092), 1002.0, (90000, 70000))
    pkts += p + flow.rst(1) + flow.ack(0)
    # data after the close is counted, not delivered
    late = TcpPacket(1003.0, "10.0.0.1", "10.0.0.2", 40000, 9092, 0x18, 123, 0, b"late")
    pkts.append(late)
    path = str(tmp_path / "mix.pcap")
    write_pcap(path, pkts)
    a = _both(path, batches=(1, 2, 5, 13))
    sa = a["summary"]
    assert sa["exchanges"] == {"ok": 9} and sa["packets"] == len(pkts)
    assert sa["last_time"] == 1003.0 and sa["first_time"] == 1000.0
    assert a["counters"] == {"port reuse": 1, "data after close": 1}
    assert [(c[1].ip, c[6]) for c in a["conns"]] == [("10.0.0.1", "fin"), ("fd00::1", "fin"), ("10.0.0.1", "rst")]
    assert sa["bytes_skipped"] == {} and sa["gaps"] == 0


def _look_alikes(p: TcpPacket) -> list[bytes]:
    """Frames made from a data segment's that are not TCP segments of its connection as the
    parser reads them (fragments, UDP, other EtherTypes, IPv4 with options, other IP
    versions, IPv6 extension headers): each byte the old fused path tested, changed."""
    frame = encap(ip_packet(p))
    out = []
    if ":" not in p.src:
        changes = [(20, frame[20] | 0x20), (20, frame[20] | 0x01), (21, 0x01), (23, 17), (12, 0x09), (13, 0x01),
                   (14, 0x46), (14, 0x55)]
    else:
        changes = [(14, 0x50 | frame[14] & 0x0F), (20, 0), (12, 0x87), (13, 0xDE)]
    for at, value in changes:
        f = bytearray(frame)
        f[at] = value
        out.append(bytes(f))
    return out


def test_only_tcp_segments_are_taken(tmp_path: Path) -> None:
    """Before every data segment, frames that copy it but are not TCP segments of its connection
    (each with one of the bytes the old fused path tested changed): were one taken for the
    in-order segment it copies, the stream would be cut wrong."""
    pkts: list[TcpPacket | RawPacket] = []
    for cli, srv, ts in ((("10.0.0.1", 40000), ("10.0.0.2", 9092), 1000.0),
                         (("fd00::1", 40001), ("fd00::2", 9092), 1001.0)):
        flow, conv = _conversation(cli, srv, ts, (1000, 5000))
        for p in conv:
            if p.payload:
                pkts += [RawPacket(p.ts, f) for f in _look_alikes(p)]
            pkts.append(p)
        pkts += flow.fin(0) + flow.fin(1) + flow.ack(0)
    path = str(tmp_path / "look-alikes.pcap")
    write_pcap(path, pkts)
    a = _both(path)
    sa = a["summary"]
    assert sa["exchanges"] == {"ok": 6}
    assert sa["packets"] == len(pkts) and sa["bytes_skipped"] == {} and a["counters"] == {}
    # every look-alike skipped (9 data segments a connection): IPv4 fragments (MF, offset
    # low and high bits), UDP, other EtherTypes (IPv4 and IPv6), an IPv4 header of 6 words
    # (the TCP header read past), IP versions 5, an IPv6 hop-by-hop header made of TCP bytes
    assert sa["packets_skipped"] == {"IP fragment": 27, "not TCP": 9, "not IP": 36, "bad TCP header": 9,
                                     "bad IP header": 27}


def test_ack_on_forgotten_connection_starts_a_new_one(tmp_path: Path) -> None:
    """Past ``max_closed`` the reassembler forgets a closed connection: a later ACK on its
    4-tuple is a new connection there, not the closed one's."""
    pkts: list[TcpPacket] = []
    flows = []
    for i in range(4):
        flow, p = _conversation(("10.0.0.1", 41000 + i), ("10.0.0.2", 9092), 1000.0 + i, (1000, 5000), n=1)
        pkts += p + flow.fin(0) + flow.fin(1) + flow.ack(0)
        flows.append(flow)
    pkts += flows[0].ack(0)         # connection 0 was forgotten (max_closed=2)
    path = str(tmp_path / "forgotten.pcap")
    write_pcap(path, pkts)
    a = _both(path, max_closed=2)
    assert len(a["conns"]) == 5
    assert [(c[1].port, c[3], c[6]) for c in a["conns"]] == [(41000 + i, True, "fin") for i in range(4)] + [
        (41000, False, None)]
    # remembered (the default max_closed), the ACK is the closed connection's
    b = _both(path)
    assert len(b["conns"]) == 4 and b["summary"]["exchanges"] == a["summary"]["exchanges"] == {"ok": 4}


def _captures() -> list[str]:
    paths = sorted(str(p) for p in (REPO / "samples").glob("*.pcap*"))
    if SHARED.is_dir():
        paths += sorted(str(p) for p in SHARED.rglob("*.pcap*"))[:12]
    return paths


@pytest.mark.parametrize("path", _captures(), ids=lambda p: Path(p).name)
def test_capture_equals_per_packet_on_captures(path: str) -> None:
    a = _both(path, batches=(1, 100), decode="lite")
    assert a["summary"]["packets"] > 0 and a["exchanges"]


TABLE = _core.HeaderTable(api_table())


def core_header(data: bytes, partial: bool = False) -> RequestHeader | None:
    """The core's request-header parser (``kafka::request_header`` without the check)."""
    h = probes.probe_request_header(TABLE, data, partial, False)
    return None if h is None else RequestHeader(*h)


def core_plausible(data: bytes, prefix: bool = False) -> Any:
    """The core's check of a request frame: the header (a truthy tuple) when plausible and
    parsed whole, True when judged on a cut client id, else False."""
    return probes.probe_request_header(TABLE, data, prefix, True)


def test_request_header_parser_against_a_plain_reading() -> None:
    # a flexible request (ApiVersions v3): header v2, tagged fields after the client id
    data = b"\x00\x12\x00\x03\x00\x00\x00\x07\x00\x03abc\x00body"
    h = core_header(data)
    assert h is not None and tuple(h) == (18, 3, 7, "abc", 14, 2)
    assert core_plausible(data)
    # tagged fields present: one tag of 2 bytes
    data2 = b"\x00\x12\x00\x03\x00\x00\x00\x07\x00\x03abc\x01\x05\x02xy"
    h2 = core_header(data2)
    assert h2 is not None and h2.header_len == len(data2)
    # cut inside the tagged fields: None unless partial
    assert core_header(data2[:-1]) is None
    h3 = core_header(data2[:-1], partial=True)
    assert h3 is not None and h3.header_len == len(data2) - 1
    # ControlledShutdown v0: header v0, 8 bytes
    h4 = core_header(b"\x00\x07\x00\x00\x00\x00\x00\x01\x00\x00\x00\x05")
    assert h4 is not None and (h4.header_len, h4.header_version, h4.client_id) == (8, 0, None)
    # an unknown API key, a version out of range, an unprintable client id: not a request
    assert not core_plausible(b"\x7f\x00\x00\x01\x00\x00\x00\x01\x00\x01a")
    assert not core_plausible(b"\x00\x03\x00\x63\x00\x00\x00\x01\x00\x01a")
    assert not core_plausible(b"\x00\x03\x00\x01\x00\x00\x00\x01\x00\x01\x01")
    # the framer's peek: a client id running past the bytes is judged on what is there
    assert core_plausible(b"\x00\x03\x00\x01\x00\x00\x00\x01\x00\x40abc", prefix=True)
    assert not core_plausible(b"\x00\x03\x00\x01\x00\x00\x00\x01\x00\x40abc")


def test_error_codes_in_wire_order() -> None:
    body = Field("body", "Body", children=[
        Field("error_code", "int16", 0),
        Field("topics", "array", 2, children=[
            Field("[0]", "T", children=[Field("name", "string", "a"), Field("error_code", "int16", 3)]),
            Field("[1]", "T", children=[Field("partition_error_code", "int16", 6),
                                        Field("code", "int16", 7, extra={"error_code": 7}),
                                        Field("other", "int16", 9)]),
        ]),
    ])
    tree = Field("response", "Response", children=[Field("header", "H"), body])
    assert kafka.error_codes(tree) == ["UNKNOWN_TOPIC_OR_PARTITION", "NOT_LEADER_OR_FOLLOWER", "REQUEST_TIMED_OUT"]


def test_syn_fin_rst_equal_per_packet(tmp_path: Path) -> None:
    """SYN, SYN-ACK, FIN and RST packets (the old fused loop handed them to the reassembler
    without ``feed``): every connection-lifecycle case gives the same through feed_capture as
    packet by packet."""
    pkts: list[TcpPacket] = []
    srv = ("10.0.0.2", 9092)
    # 1: plain conversation, FIN carrying the last bytes of a request, then a FIN on each side
    flow, p = _conversation(("10.0.0.1", 42000), srv, 1000.0, (1000, 5000), n=1)
    pkts += p
    req = kafka_request(18, 0, 7, "fin")
    pkts.append(TcpPacket(flow.ts, "10.0.0.1", "10.0.0.2", 42000, 9092, PSH | ACK | FIN, flow.seq[0],
                          flow.seq[1], req))
    flow.seq[0] += len(req) + 1
    pkts += flow.fin(1) + flow.ack(0)
    # 2: the SYN not captured: the connection starts at the SYN-ACK (b's SYN-ACK, a = the client)
    flow, p = _conversation(("10.0.0.1", 42001), srv, 1001.0, (2000, 6000), n=1)
    pkts += p[1:] + flow.rst(0)
    # 3: retransmitted SYN, then port reuse by a SYN with a new ISN on the open connection
    flow, p = _conversation(("10.0.0.1", 42002), srv, 1002.0, (3000, 7000), n=1)
    pkts += p[:1] + p[:1] + p[1:]
    flow2, p2 = _conversation(("10.0.0.1", 42002), srv, 1002.5, (9000, 9500), n=1)
    pkts += p2 + flow2.fin(1) + flow2.fin(0)
    # 4: a FIN ahead of a lost segment (the hole becomes a gap at the close), data after close
    flow, p = _conversation(("10.0.0.1", 42003), srv, 1003.0, (4000, 8000), n=1)
    pkts += p
    lost = flow.send(0, kafka_request(18, 0, 9, "lost"))
    pkts += flow.fin(0) + flow.fin(1)
    pkts.append(TcpPacket(flow.ts, "10.0.0.2", "10.0.0.1", 9092, 42003, PSH | ACK, flow.seq[1],
                          flow.seq[0], b"after"))
    pkts += lost
    # 5: a SYN-ACK with a new ISN on the closed connection (its SYN not captured): port reuse
    flow, p = _conversation(("10.0.0.1", 42004), srv, 1004.0, (5000, 9000), n=1)
    pkts += p + flow.fin(0) + flow.fin(1)
    flow, p = _conversation(("10.0.0.1", 42004), srv, 1004.5, (15000, 19000), n=1)
    pkts += p[1:] + flow.rst(1)
    # 6: IPv6 handshake, RST without ACK, then a stray SYN-ACK and ACK
    flow, p = _conversation(("fd00::1", 42005), ("fd00::2", 9092), 1005.0, (6000, 10000), n=1)
    pkts += p
    pkts.append(TcpPacket(flow.ts, "fd00::2", "fd00::1", 9092, 42005, RST, flow.seq[1], 0))
    pkts.append(TcpPacket(flow.ts + 0.1, "fd00::2", "fd00::1", 9092, 42005, SYN | ACK, 777, 1))
    pkts += flow.ack(0)
    # 7: a FIN cut by the snaplen (still counts right)
    flow, p = _conversation(("10.0.0.1", 42006), srv, 1006.0, (7000, 11000), n=1)
    pkts += p
    cut = TcpPacket(flow.ts, "10.0.0.1", "10.0.0.2", 42006, 9092, FIN | ACK | PSH, flow.seq[0],
                    flow.seq[1], kafka_request(18, 0, 11, "cut" * 40), snap=80)
    pkts.append(cut)
    pkts.append(TcpPacket(flow.ts + 0.01, "10.0.0.2", "10.0.0.1", 9092, 42006, RST | ACK, flow.seq[1], 0))
    path = str(tmp_path / "lifecycle.pcap")
    write_pcap(path, pkts)

    run = _both(path, batches=(1, 2, 3))
    counters = run["counters"]
    assert counters["port reuse"] == 3 and counters["retransmitted SYN"] == 1
    assert counters["lost segments"] == 1 and counters["data after close"] == 2
    assert counters["snaplen bytes"] == 108
    assert [c[6] for c in run["conns"]] == ["fin", "rst", None, "fin", "fin", "fin", "rst", "rst", None, "rst"]
    assert run["conns"][1][1].port == 42001         # SYN-ACK first: a is still the client
    assert [c[3] for c in run["conns"]][:3] == [True, False, True]
    assert run["summary"]["packets"] == len(pkts)


def test_closed_entries_reuse_and_early_ack(tmp_path: Path) -> None:
    """A closed connection takes only its last ACKs, and a new connection's SYN starts
    afresh: the same results through feed_capture as packet by packet when the old server
    opens a connection on the same 4-tuple, when the client ACKs before the SYN-ACK is
    captured, and with data after the close."""
    pkts: list[TcpPacket] = []
    srv = ("10.0.0.2", 9092)
    flow, p = _conversation(("10.0.0.1", 43000), srv, 1000.0, (1000, 5000), n=2)
    pkts += p + flow.fin(0) + flow.fin(1) + flow.ack(0)
    pkts.append(TcpPacket(1000.9, "10.0.0.1", "10.0.0.2", 43000, 9092, PSH | ACK, flow.seq[0],
                          flow.seq[1], b"late"))
    # the roles swapped on the same 4-tuple: the old server sends the SYN
    back, p2 = _conversation(srv, ("10.0.0.1", 43000), 1001.0, (20000, 30000), n=1)
    pkts += p2 + back.fin(1) + back.fin(0) + back.ack(1)
    # a retransmitted SYN and the client's ACK before the SYN-ACK is seen
    flow3, p3 = _conversation(("10.0.0.1", 43001), srv, 1002.0, (3000, 7000), n=1)
    pkts += p3[:1] + p3[:1]
    pkts.append(TcpPacket(1002.0, "10.0.0.1", "10.0.0.2", 43001, 9092, ACK, 3001, 0))
    pkts += p3[1:] + flow3.fin(1) + flow3.fin(0) + flow3.ack(1)
    path = str(tmp_path / "reopen.pcap")
    write_pcap(path, pkts)

    run = _both(path, batches=(1, 2, 3))
    conns, counters, summary = run["conns"], run["counters"], run["summary"]
    assert [c[1].port for c in conns] == [43000, 9092, 43001]     # the second one: a = the old server
    assert [c[6] for c in conns] == ["fin", "fin", "fin"]
    assert counters["port reuse"] == 1 and counters["retransmitted SYN"] == 1
    assert counters["data after close"] == 1
    assert summary["packets"] == len(pkts) and summary["exchanges"] == {"ok": 4}
    assert summary["first_time"] == 1000.0
