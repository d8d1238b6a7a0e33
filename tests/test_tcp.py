"""Link/IP/TCP parsing and TCP reassembly in the core (analyzer._core: parse_packet, Stream),
on crafted packets."""
from __future__ import annotations

import random
import struct
from dataclasses import replace

import pytest

from analyzer._core import Stream, parse_packet
from analyzer.model import Endpoint
from tests.pcapgen import (
    ACK,
    PSH,
    SYN,
    CoreRun,
    RawPacket,
    StreamData,
    StreamEnd,
    StreamGap,
    TcpFlow,
    TcpPacket,
    encap,
    ip_packet,
    run_pipeline,
    write_pcap,
    write_pcapng,
)

C, S = ("10.0.0.1", 40000), ("10.0.0.2", 9092)


def stream(events, conn_id: int = 0, direction: int = 0) -> bytes:
    """Reassembled bytes of one direction; gaps as b'?' * length."""
    out = bytearray()
    for ev in events:
        if isinstance(ev, StreamData | StreamGap) and ev.conn.id == conn_id and ev.direction == direction:
            assert ev.offset == len(out), "offsets must be contiguous"
            out += ev.data if isinstance(ev, StreamData) else b"?" * ev.length
    return bytes(out)


def run(tmp_path, pkts, **kw):
    path = tmp_path / "t.pcap"
    write_pcap(str(path), pkts, **{k: v for k, v in kw.items() if k in ("linktype", "snaplen")})
    return run_pipeline(str(path), **{k: v for k, v in kw.items() if k == "max_buffer"})


def ends(events):
    return [(e.conn.id, e.direction, e.reason) for e in events if isinstance(e, StreamEnd)]


# -- net -------------------------------------------------------------------------------

def feed(pkts: list[tuple[int, float, int, bytes, int]], **kw: object) -> tuple[CoreRun, list]:
    """Packets ``(index, ts, linktype, data, orig_len)`` through a core Stream one at a time,
    then its finish: (the run: counters, notes, conns; the model's stream events)."""
    s = Stream(**kw)
    run = CoreRun(s)
    events: list = []
    for p in pkts:
        events += run.model(s.feed([p]))
    events += run.model(s.finish())
    return run, events


def skips_of(pkts: list[tuple[int, float, int, bytes, int]]) -> dict[str, int]:
    """What a core Stream counts as skipped for these packets (each one is counted)."""
    s = Stream()
    s.feed(pkts)
    assert s.packets == len(pkts)
    return s.skips


LINKS = [(1, {}), (0, {}), (0, {"null_big_endian": True}), (108, {}), (113, {}), (276, {}),
         (101, {}), (12, {}), (14, {}), (228, {}), (229, {})]


@pytest.mark.parametrize("v6", [False, True])
@pytest.mark.parametrize("linktype,kw", LINKS)
def test_every_link_type(v6, linktype, kw):
    if (linktype == 228 and v6) or (linktype == 229 and not v6):
        pytest.skip("228 is IPv4 only, 229 IPv6 only")
    src = "fd00::1" if v6 else "10.1.2.3"
    dst = "fd00::2" if v6 else "10.1.2.4"
    p = TcpPacket(5.0, src, dst, 1234, 9092, PSH | ACK, 0xFFFFFFF0, 77, b"hello kafka")
    data = encap(ip_packet(p), linktype, **kw)
    seg = parse_packet(linktype, data, len(data))
    assert not isinstance(seg, str), seg
    assert seg == (src, 1234, dst, 9092, 0xFFFFFFF0, 77, PSH | ACK, b"hello kafka", 0)
    run, ev = feed([(1, 5.0, linktype, data, len(data))])
    assert run.stream.skips == {} and len(run.conns) == 1
    conn = run.conns[0]
    assert conn.a == Endpoint(src, 1234) and conn.b == Endpoint(dst, 9092)
    assert str(conn.a) == (f"[{src}]:1234" if v6 else f"{src}:1234")
    assert stream(ev) == b"hello kafka"


@pytest.mark.parametrize("vlans", [(300,), (100, 200), (10, 20, 30)])
def test_vlan_tags(vlans):
    p = TcpPacket(1.0, "10.0.0.1", "10.0.0.2", 1, 9092, ACK, 1, 1, b"xyz", vlans=vlans)
    data = encap(ip_packet(p), 1, vlans)
    assert data[12:14] == (b"\x88\xa8" if len(vlans) > 1 else b"\x81\x00")
    seg = parse_packet(1, data, len(data))
    assert not isinstance(seg, str) and seg[7] == b"xyz"
    # 0x9100 outer tag (old QinQ)
    data2 = data[:12] + b"\x91\x00" + data[14:]
    assert parse_packet(1, data2, len(data2))[7] == b"xyz"


def _ip6_with_ext(ext: bytes, first_nh: int, tcp_payload: bytes = b"data") -> bytes:
    p = TcpPacket(1.0, "::1", "::1", 5000, 9092, ACK | PSH, 10, 20, tcp_payload)
    plain = ip_packet(p)
    tcp = plain[40:]
    hdr = bytearray(plain[:40])
    struct.pack_into("!H", hdr, 4, len(ext) + len(tcp))
    hdr[6] = first_nh
    return bytes(hdr) + ext + tcp


def test_ipv6_extension_headers_and_fragments():
    hop = bytes([60, 0]) + b"\x01\x04\0\0\0\0"           # hop-by-hop -> dest opts
    dest = bytes([6, 0]) + b"\x01\x04\0\0\0\0"           # dest opts -> TCP
    ip = _ip6_with_ext(hop + dest, 0)
    seg = parse_packet(229, ip, len(ip))
    assert not isinstance(seg, str) and seg[7] == b"data" and seg[0] == "::1"
    # atomic fragment (offset 0, M=0) is a whole packet
    frag0 = struct.pack("!BBHI", 6, 0, 0, 99)
    ip = _ip6_with_ext(frag0, 44)
    assert parse_packet(229, ip, len(ip))[7] == b"data"
    fragm = struct.pack("!BBHI", 6, 0, 1, 99)             # M=1
    frag_ip = _ip6_with_ext(fragm, 44)
    assert parse_packet(229, frag_ip, len(frag_ip)) == "IP fragment"
    routing = bytes([6, 0, 0, 0]) + b"\0" * 4
    ip = _ip6_with_ext(routing, 43)
    assert parse_packet(229, ip, len(ip))[7] == b"data"
    udp = _ip6_with_ext(b"", 17)
    assert parse_packet(229, udp, len(udp)) == "not TCP"
    assert skips_of([(1, 1.0, 229, frag_ip, len(frag_ip)), (2, 1.0, 229, ip, len(ip)),
                     (3, 1.0, 229, udp, len(udp))]) == {"IP fragment": 1, "not TCP": 1}


def test_skip_reasons():
    tcp = TcpPacket(1.0, "10.0.0.1", "10.0.0.2", 1, 2, ACK, 1, 1, b"abc")
    ip = bytearray(ip_packet(tcp))
    arp = b"\xff" * 12 + b"\x08\x06" + b"\0" * 28
    udp = bytearray(ip)
    udp[9] = 17
    frag = bytearray(ip)
    frag[6:8] = b"\x20\x00"                                 # MF
    frag2 = bytearray(ip)
    frag2[6:8] = b"\x00\x10"                                # offset 16
    null_other = struct.pack("<I", 7) + bytes(ip)
    pkts = [(1, 1.0, 1, arp, len(arp)), (2, 1.0, 101, bytes(udp), len(udp)), (3, 1.0, 101, bytes(frag), len(frag)),
            (4, 1.0, 101, bytes(frag2), len(frag2)), (5, 1.0, 101, bytes(ip[:30]), len(ip)),
            (6, 1.0, 147, bytes(ip), len(ip)), (7, 1.0, 1, b"\0" * 8, 8), (8, 1.0, 0, null_other, len(null_other))]
    assert [parse_packet(*p[2:]) for p in pkts] == [
        "not IP", "not TCP", "IP fragment", "IP fragment", "truncated header", "unsupported link type 147",
        "truncated header", "not IP"]
    skips = skips_of(pkts)
    assert skips == {"not IP": 2, "not TCP": 1, "IP fragment": 2, "truncated header": 2,
                     "unsupported link type 147": 1}
    assert sum(skips.values()) == 8


def test_ipv4_options_padding_and_snaplen():
    tcp = TcpPacket(1.0, "10.0.0.1", "10.0.0.2", 1, 2, ACK | PSH, 1, 1, b"0123456789")
    ip = ip_packet(tcp)
    # add 4 bytes of IP options (IHL 6)
    opt = bytearray(ip[:20]) + b"\x01\x01\x01\x00" + ip[20:]
    opt[0] = 0x46
    struct.pack_into("!H", opt, 2, len(opt))
    seg = parse_packet(101, bytes(opt), len(opt))
    assert seg[7:] == (b"0123456789", 0)
    # Ethernet padding / trailer bytes after the datagram are not payload
    eth = encap(ip, 1) + b"\0" * 16
    seg = parse_packet(1, eth, len(eth))
    assert seg[7:] == (b"0123456789", 0)
    # snaplen: 4 payload bytes captured, 6 missing
    cut = encap(ip, 1)[:14 + 20 + 20 + 4]
    seg = parse_packet(1, cut, len(encap(ip, 1)))
    assert seg[7:] == (b"0123", 6)


# -- reassembly ------------------------------------------------------------------------

def _flow(isn=(1000, 5000)):
    return TcpFlow(C, S, isn=isn)


def test_in_order_fin_and_conn_fields(tmp_path):
    f = _flow()
    pkts = f.handshake() + f.send(0, b"A" * 3000, mss=1000) + f.send(1, b"B" * 10) + f.fin(0) + f.fin(1)
    r = run(tmp_path, pkts)
    ev = r["events"]
    assert stream(ev, 0, 0) == b"A" * 3000 and stream(ev, 0, 1) == b"B" * 10
    conn = r["reasm"].conns[0]
    assert conn.a == Endpoint(*C) and conn.b == Endpoint(*S) and conn.syn_seen
    assert conn.closed == "fin"
    assert ends(ev) == [(0, 0, "fin"), (0, 1, "fin"), (0, None, "fin")]
    data = [e for e in ev if isinstance(e, StreamData)]
    assert [(e.offset, e.index) for e in data] == [(0, 4), (1000, 5), (2000, 6), (0, 7)]


def test_reordering_and_retransmission(tmp_path):
    f = _flow()
    hs = f.handshake()
    segs = f.send(0, bytes(range(256)) * 20, mss=512)
    order = [0, 2, 1, 4, 3, 3, 5, 6, 7, 9, 8, 0, 9]           # swaps, duplicates
    pkts = hs + [segs[i] for i in order] + f.fin(0) + f.fin(1)
    r = run(tmp_path, pkts)
    assert stream(r["events"]) == bytes(range(256)) * 20
    c = r["reasm"].counters
    assert c["out of order"] == 3 and c["retransmission"] == 3
    assert "overlap differs" not in c and r["reasm"].notes == []


def test_overlap_differing_first_copy_wins(tmp_path):
    f = _flow()
    hs = f.handshake()
    segs = f.send(0, b"a" * 100 + b"b" * 100, sizes=[100, 100])
    # a retransmission covering bytes 50..150 with different content
    bad = replace(segs[0], seq=segs[0].seq + 50, payload=b"X" * 100, ts=segs[1].ts + 0.01)
    same = replace(segs[1], seq=segs[1].seq + 20, payload=b"b" * 30, ts=bad.ts + 0.01)
    r = run(tmp_path, hs + segs + [bad, same] + f.fin(0))
    assert stream(r["events"]) == b"a" * 100 + b"b" * 100
    assert r["reasm"].counters["overlap differs"] == 1
    assert r["reasm"].counters["retransmission"] == 2
    assert r["reasm"].notes == ["conn 0 dir 0: retransmitted bytes 50-100 in packet 6 differ from the first copy"]


def test_overlap_buffered_segments(tmp_path):
    """Out-of-order duplicates while a hole is open: the first buffered copy wins."""
    f = _flow()
    hs = f.handshake()
    segs = f.send(0, b"0123456789" * 30, sizes=[100, 100, 100])
    dup = replace(segs[2], payload=b"Z" * 100)
    r = run(tmp_path, hs + [segs[2], dup, segs[1], segs[0]])
    assert stream(r["events"]) == b"0123456789" * 30
    assert r["reasm"].counters["overlap differs"] == 1


def test_lost_segment_gap_range(tmp_path):
    f = _flow()
    hs = f.handshake()
    segs = f.send(0, b"x" * 5000, mss=1000)
    lost = segs.pop(2)                                          # bytes 2000..2999
    r = run(tmp_path, hs + segs + f.fin(0) + f.fin(1))
    gaps = [e for e in r["events"] if isinstance(e, StreamGap)]
    assert [(g.offset, g.length, g.reason) for g in gaps] == [(2000, 1000, "lost segment")]
    assert stream(r["events"]) == b"x" * 2000 + b"?" * 1000 + b"x" * 2000
    assert ends(r["events"])[-1] == (0, None, "fin")
    assert r["reasm"].counters["lost bytes"] == 1000
    assert lost.seq == hs[0].seq + 1 + 2000


@pytest.mark.parametrize("resent", [False, True])
def test_a_hole_the_other_side_acknowledged_is_a_capture_loss(tmp_path, resent):
    """A hole whose bytes the other side acknowledged (the receiver has them: the capture
    missed them, and nobody sends them again) becomes a gap at that ACK, and what waited
    behind it is delivered then, not at the connection's end. A duplicate ACK (the network
    lost the bytes: they come again) or one that ends inside the hole leaves it open; bytes
    sent again fill it."""
    f = _flow()
    hs = f.handshake()
    segs = f.send(0, b"a" * 100 + b"b" * 100 + b"c" * 100, sizes=[100, 100, 100])
    lost = segs.pop(0)
    dup = replace(f.ack(1)[0], ack=lost.seq)                   # what a receiver sends for b, c
    short = replace(dup, ack=lost.seq + 50)
    exact = replace(dup, ack=lost.seq + 100)                   # the hole's end: b's start
    answer = f.send(1, b"R" * 10)
    pkts = hs + segs + [dup, short] + ([lost] if resent else []) + [exact] + answer + f.fin(0) + f.fin(1)
    r = run(tmp_path, pkts)
    ev = [(type(e).__name__, e.direction, e.offset, e.index) for e in r["events"] if isinstance(e, StreamData | StreamGap)]
    at = len(hs) + len(segs) + 2 + resent + 1                  # the exact ACK's packet number
    if resent:
        assert ev[:3] == [("StreamData", 0, 0, at - 1), ("StreamData", 0, 100, 4), ("StreamData", 0, 200, 5)]
        assert stream(r["events"]) == b"a" * 100 + b"b" * 100 + b"c" * 100
        assert "lost segments" not in r["reasm"].counters
    else:
        assert ev[:3] == [("StreamGap", 0, 0, at), ("StreamData", 0, 100, 4), ("StreamData", 0, 200, 5)]
        assert stream(r["events"]) == b"?" * 100 + b"b" * 100 + b"c" * 100
        assert r["reasm"].counters["lost bytes"] == 100
    assert ev[3] == ("StreamData", 1, 0, at + 1)
    assert stream(r["events"], direction=1) == b"R" * 10


def test_buffer_bound_forces_gap_early(tmp_path):
    f = _flow()
    hs = f.handshake()
    segs = f.send(0, bytes(50_000), mss=1000)
    del segs[3]
    r = run(tmp_path, hs + segs, max_buffer=8000)
    ev = r["events"]
    gap_pos = next(i for i, e in enumerate(ev) if isinstance(e, StreamGap))
    # the gap was emitted once ~8 KB waited, long before the end of the capture
    assert ev[gap_pos].offset == 3000 and ev[gap_pos].length == 1000
    assert ev[gap_pos].index == 4 + 3 + 8        # 9th segment after the hole tripped the bound
    assert stream(ev) == bytes(3000) + b"?" * 1000 + bytes(46_000)


def test_pending_memory_bounded():
    """Bytes waiting behind a hole that is never filled stay within max_buffer (plus the
    segment that trips it): the hole becomes a gap then, and what waited is delivered."""
    def pkt(i: int, seq: int, payload: bytes) -> tuple:
        data = ip_packet(TcpPacket(float(i), "1.1.1.1", "2.2.2.2", 1, 9092, ACK, seq, 0, payload))
        return (i, float(i), 101, data, len(data))

    pkts = [pkt(1, 100, b"a")]
    for i in range(1, 500):     # a hole at offset 1 (100 bytes) that is never filled
        pkts.append(pkt(i + 1, 100 + 1 + i * 100, b"b" * 100))
    _run, ev = feed(pkts, max_buffer=10_000)
    gaps = [e for e in ev if isinstance(e, StreamGap)]
    assert [(g.offset, g.length, g.reason) for g in gaps][:1] == [(1, 100, "lost segment")]
    # the gap came once 10_000 bytes waited: at the segment after the 100 that fit
    waited = sum(100 for e in ev if isinstance(e, StreamData) and e.offset > 1 and e.index <= gaps[0].index)
    assert gaps[0].index <= 2 + 101 and waited <= 10_000 + 100
    assert stream(ev) == b"a" + b"?" * 100 + b"b" * 100 * 499


def test_midstream_start(tmp_path):
    f = _flow(isn=(777_777, 999_999))
    f.handshake()                                 # not captured
    pkts = f.send(1, b"response-bytes") + f.send(0, b"request") + f.send(1, b"more")
    r = run(tmp_path, pkts)
    conn = r["reasm"].conns[0]
    assert not conn.syn_seen
    assert conn.a == Endpoint(*S)                  # the first sender
    assert stream(r["events"], 0, 0) == b"response-bytes" + b"more"
    assert stream(r["events"], 0, 1) == b"request"
    assert ends(r["events"]) == [(0, None, "end of capture")]


def test_syn_ack_first_makes_client_a(tmp_path):
    f = _flow()
    hs = f.handshake()
    r = run(tmp_path, hs[1:] + f.send(0, b"req") + f.send(1, b"resp"))
    conn = r["reasm"].conns[0]
    assert conn.a == Endpoint(*C)
    assert stream(r["events"], 0, 0) == b"req" and stream(r["events"], 0, 1) == b"resp"


def test_port_reuse_and_retransmitted_syn(tmp_path):
    f1 = _flow(isn=(1000, 5000))
    p1 = f1.handshake() + f1.send(0, b"first")
    f2 = TcpFlow(C, S, isn=(90_000, 70_000), ts=f1.ts + 1)
    syn = f2.handshake()
    p2 = [syn[0], syn[0]] + syn[1:] + f2.send(0, b"second") + f2.fin(0) + f2.fin(1)
    # and a third connection on the same 4-tuple after a clean close
    f3 = TcpFlow(C, S, isn=(123, 456), ts=f2.ts + 1)
    p3 = f3.handshake() + f3.send(0, b"third") + f3.rst(1)
    r = run(tmp_path, p1 + p2 + p3)
    conns = r["reasm"].conns
    assert [c.id for c in conns] == [0, 1, 2]
    assert [stream(r["events"], i) for i in range(3)] == [b"first", b"second", b"third"]
    assert ends(r["events"]) == [(0, None, "reused"), (1, 0, "fin"), (1, 1, "fin"), (1, None, "fin"),
                                 (2, None, "rst")]
    assert r["reasm"].counters["retransmitted SYN"] == 1
    assert r["reasm"].counters["port reuse"] == 2
    assert [c.closed for c in conns] == [None, "fin", "rst"]


def test_rst_flushes_holes(tmp_path):
    f = _flow()
    hs = f.handshake()
    segs = f.send(0, b"abcdefghij", sizes=[3, 3])
    r = run(tmp_path, hs + [segs[0], segs[2]] + f.rst(1))
    ev = r["events"]
    assert stream(ev) == b"abc???ghij"
    assert ends(ev) == [(0, None, "rst")]
    assert [e for e in ev if isinstance(e, StreamGap)][0].reason == "lost segment"


def test_sequence_wraparound(tmp_path):
    f = _flow(isn=(0xFFFFFF00, 0xFFFFFFFE))
    hs = f.handshake()
    data = bytes(random.Random(1).randrange(256) for _ in range(3000))
    segs = f.send(0, data, mss=100)
    segs[3], segs[4] = segs[4], segs[3]
    r = run(tmp_path, hs + segs + f.send(1, b"x" * 10) + f.fin(0) + f.fin(1))
    assert stream(r["events"]) == data
    assert stream(r["events"], 0, 1) == b"x" * 10
    assert ends(r["events"])[-1] == (0, None, "fin")


def test_keepalive_not_flagged(tmp_path):
    f = _flow()
    hs = f.handshake()
    d = f.send(0, b"hello")
    ka = replace(d[0], seq=d[0].seq + 4, payload=b"\0", ts=d[0].ts + 1)
    r = run(tmp_path, hs + d + [ka])
    assert stream(r["events"]) == b"hello"
    assert r["reasm"].counters == {"keep-alive": 1}


def test_snaplen_gaps_keep_offsets(tmp_path):
    f = _flow()
    hs = f.handshake()
    segs = f.send(0, b"k" * 500, sizes=[200, 300])
    r = run(tmp_path, hs + segs + f.fin(0), snaplen=14 + 20 + 20 + 30)
    ev = [e for e in r["events"] if isinstance(e, StreamData | StreamGap)]
    assert [(type(e).__name__, e.offset, len(e.data) if isinstance(e, StreamData) else e.length) for e in ev] == [
        ("StreamData", 0, 30), ("StreamGap", 30, 170), ("StreamData", 200, 30), ("StreamGap", 230, 270)]
    assert all(e.reason == "snaplen" for e in ev if isinstance(e, StreamGap))
    assert ends(r["events"])[0] == (0, 0, "fin")


def test_random_shuffles_reassemble_exactly():
    rng = random.Random(7)
    for trial in range(30):
        f = TcpFlow(C, S, isn=(rng.randrange(1 << 32), rng.randrange(1 << 32)))
        hs = f.handshake()
        data = rng.randbytes(rng.randrange(1, 20_000))
        segs = f.send(0, data, mss=rng.choice([1, 7, 100, 1460]))
        # local shuffles and duplicates
        for _ in range(len(segs) // 3):
            i = rng.randrange(len(segs))
            j = min(len(segs) - 1, i + rng.randrange(1, 5))
            segs[i], segs[j] = segs[j], segs[i]
        segs += [rng.choice(segs) for _ in range(5)]
        pkts = [(i, p.ts, 101, ip_packet(p), len(ip_packet(p))) for i, p in enumerate(hs + segs + f.fin(0) + f.fin(1), 1)]
        _run, events = feed(pkts)
        assert stream(events) == data, trial
        assert ends(events)[-1] == (0, None, "fin")


def test_ipv6_flow_in_pcapng_with_two_link_types(tmp_path):
    f = TcpFlow(("fd00::1", 5555), ("fd00::2", 9092))
    g = TcpFlow(("10.9.9.9", 6666), ("10.9.9.1", 9092))
    a = f.handshake() + f.send(0, b"v6 data")
    b = g.handshake() + g.send(0, b"v4 data")
    for p in b:
        p.iface = 1
    pkts = sorted(a + b, key=lambda p: p.ts)
    path = tmp_path / "two.pcapng"
    write_pcapng(str(path), pkts + [RawPacket(pkts[-1].ts + 1, b"\x00" * 10, iface=1)], interfaces=(1, 276))
    r = run_pipeline(str(path))
    assert len(r["reasm"].conns) == 2
    by_ip = {c.a.ip: c.id for c in r["reasm"].conns}
    assert stream(r["events"], by_ip["fd00::1"]) == b"v6 data"
    assert stream(r["events"], by_ip["10.9.9.9"]) == b"v4 data"
    assert dict(r["skips"]) == {"truncated header": 1}


def test_syn_flag_constant():
    assert SYN == 2


@pytest.mark.parametrize("linktype", [0, 1, 12, 14, 101, 108, 113, 228, 229, 276])
def test_link_types_through_pcap(tmp_path, linktype):
    v6 = linktype == 229
    cli, srv = (("fd00::1", 40000), ("fd00::2", 9092)) if v6 else (C, S)
    f = TcpFlow(cli, srv)
    pkts = f.handshake() + f.send(0, b"q" * 3000, mss=1000) + f.send(1, b"r" * 10) + f.fin(0) + f.fin(1)
    r = run(tmp_path, pkts, linktype=linktype)
    assert stream(r["events"], 0, 0) == b"q" * 3000 and stream(r["events"], 0, 1) == b"r" * 10
    assert dict(r["skips"]) == {} and r["reader"].linktypes == [linktype]
    assert ends(r["events"])[-1] == (0, None, "fin")


def test_fin_before_last_data_segment(tmp_path):
    f = _flow()
    hs = f.handshake()
    segs = f.send(0, b"abcdef", sizes=[3])
    fin = f.fin(0)
    r = run(tmp_path, hs + [segs[0], fin[0], segs[1]] + f.send(1, b"ok"))
    assert stream(r["events"]) == b"abcdef"
    assert ends(r["events"])[0] == (0, 0, "fin")
    # the client's direction ended at its FIN, the connection at the end of the capture
    assert ends(r["events"])[-1] == (0, None, "end of capture")


def test_closed_by_records_the_side_that_closed_first() -> None:
    for closer, close in ((1, "fin"), (0, "rst")):
        f = TcpFlow(("10.0.0.1", 40000), ("10.0.0.2", 9092))
        pkts = f.handshake() + f.send(0, b"\x00\x00\x00\x04abcd")
        pkts += (f.fin(closer) + f.fin(1 - closer)) if close == "fin" else f.rst(closer)
        frames = [encap(ip_packet(p), 1) for p in pkts]
        # (orig_len 0, as a record that never said its length)
        run, events = feed([(i, p.ts, 1, d, 0) for i, (p, d) in enumerate(zip(pkts, frames, strict=True), 1)])
        conn = events[-1].conn
        assert conn is run.conns[0] and len(run.conns) == 1
        assert conn.closed_by == closer and conn.closed == close
