"""Guards on the packet path's edge cases: each test feeds the case one check of the core
(or of a Python fast path) exists for, and compares two ways of reaching the result that must
agree (or checks exact values).

- capture: a share of the connections (``Stream(share=(k, n))``) against the whole capture:
  every packet in exactly one share, both directions of a connection in one, packets that are
  no TCP segment in share 0, the shares' events together the whole capture's; the reader's
  packet count, notes, refills and damage messages; pcapng block checks.
- tcp: the core's reassembly fed a packet at a time against the same packets in one batch
  and in batches of three (events, counters, notes, connections); the overlap history,
  closing and forgetting connections, buffer bounds.
- stats: the figures' definitions at their edges (the slowest exchanges among rounding ties,
  waits, throughput rows, the time span, partition keys) against exact expected values.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import pytest

from analyzer._core import Stream, open_capture
from analyzer.model import Endpoint, Packet
from tests.pcapgen import (
    ACK,
    FIN,
    PSH,
    RST,
    SYN,
    CoreRun,
    RawPacket,
    TcpFlow,
    TcpPacket,
    conn_key,
    frame_bytes,
    ip_packet,
    kafka_request,
    kafka_response,
    share_of_each,
    write_pcap,
)

# -- capture: a share of the connections -------------------------------------------------------

N = 3


def _flow_pkts(client: str, server: str, port: int, ts: float = 1_700_000_000.0) -> list[TcpPacket]:
    f = TcpFlow((client, port), (server, 9092), ts=ts)
    pkts = f.handshake()
    pkts += f.send(0, kafka_request(18, 0, 1, "guard"))
    pkts += f.send(1, kafka_response(1, b"\x00\x00\x00\x00\x00\x00"))
    pkts += f.fin(0) + f.fin(1)
    return pkts


def _rec(p: TcpPacket | RawPacket, index: int = 1) -> tuple:
    data, orig = frame_bytes(p, 1)
    return (index, p.ts, 1, data, orig)


def _not_share0(client: str, server: str) -> list[TcpPacket]:
    """A flow whose connection is not share 0's (where packets that are no TCP segment go)."""
    for port in range(40000, 40100):
        pkts = _flow_pkts(client, server, port)
        if share_of_each([_rec(pkts[3])], N)[0] != 0:
            return pkts
    raise AssertionError("no flow outside share 0")


def _core_events(path: str, **kw: object) -> tuple[Stream, list[tuple]]:
    s = Stream(ids_from_index=True, **kw)
    evs: list[tuple] = []
    with open_capture(path) as cap:
        while (batch := s.feed_capture(cap, 5)) is not None:
            evs += batch
    evs += s.finish()
    return s, evs


def _shares_partition(path: str) -> tuple[list[tuple], list[int]]:
    """Each packet of the file is in exactly one share; a packet that is no TCP segment in
    share 0; both directions of a connection in one share. Read through ``feed_capture``, a
    share counts its own packets (``packets``, ``first_ts``, ``last_ts``, ``skips``) and the
    shares' events together are the whole capture's (connection ids are first packet
    numbers, the same in every share). Returns the file's packets and their shares."""
    with open_capture(path) as r:
        every = [tuple(p) for p in r]
        assert r.packets == len(every)
    share = share_of_each(every, N)
    by_key: dict[tuple, set[int]] = {}
    for p, k in zip(every, share, strict=True):
        key, why = conn_key(p[2], p[3], p[4])
        if key is None:
            assert k == 0, (p[0], why)
        else:
            by_key.setdefault(key, set()).add(k)
    assert all(len(ks) == 1 for ks in by_key.values()), by_key
    whole, whole_evs = _core_events(path)
    evs: list[tuple] = []
    skips: dict[str, int] = {}
    for k in range(N):
        s, mine_evs = _core_events(path, share=(k, N))
        mine = [p for p, sk in zip(every, share, strict=True) if sk == k]
        assert s.packets == len(mine), f"share {k}"
        if mine:
            assert (s.first_ts, s.last_ts) == (mine[0][1], max(p[1] for p in mine))
        assert not s.skips or k == 0
        for why, n in s.skips.items():
            skips[why] = skips.get(why, 0) + n
        evs += mine_evs
    assert whole.packets == len(every) and skips == whole.skips
    assert sorted(evs, key=repr) == sorted(whole_evs, key=repr)
    return every, share


@pytest.mark.parametrize("big_endian", [False, True])
def test_share_ipv6_lookalikes_go_to_share_0(tmp_path: Path, big_endian: bool) -> None:
    """IPv6 records that are not plain IPv6 TCP with a whole TCP header (UDP next, a version
    nibble other than 6, a TCP header cut short, another EtherType with the same bytes after
    it) are no TCP segment, and go to share 0, whatever their addresses and ports; IPv4
    fragments (high fragment-offset bits) too. An IPv6 hop-by-hop header is read through."""
    v6 = _not_share0("fd00::1", "fd00::2")
    v4 = _not_share0("10.1.0.1", "10.1.0.2")
    frame6 = bytearray(frame_bytes(v6[3], 1)[0])
    frame4 = bytearray(frame_bytes(v4[3], 1)[0])
    udp6 = bytearray(frame6)
    udp6[20] = 17
    hop6 = bytearray(frame6)
    hop6[20] = 0                                # hop-by-hop options next
    ver6 = bytearray(frame6)
    ver6[14] = 0x40 | (ver6[14] & 0x0F)         # version nibble 4 under EtherType 86dd
    other6 = bytearray(frame6)
    other6[12:14] = b"\x86\xde"
    cut6 = [bytes(frame6[:n]) for n in (58, 66, 73)]    # ports there, TCP header cut short
    frag4 = []
    for hi in (0x01, 0x10, 0x1F):               # fragment offset's high bits, no MF
        f = bytearray(frame4)
        f[20] = 0x40 | hi
        f[21] = 0
        frag4.append(bytes(f))
    odd = [bytes(udp6), bytes(hop6), bytes(ver6), bytes(other6), *cut6, *frag4]
    ts = v6[3].ts
    pkts = v6[:4] + v4[:4] + [RawPacket(ts, d) for d in odd] + v6[4:] + v4[4:]
    path = str(tmp_path / "v6.pcap")
    write_pcap(path, pkts, big_endian=big_endian)
    every, share = _shares_partition(path)
    reasons = [conn_key(p[2], p[3], p[4])[1] for p in every[8:8 + len(odd)]]
    assert all(reasons) and all(k == 0 for k in share[8:8 + len(odd)]), reasons
    assert set(share[:8]) - {0}                                 # the flows are elsewhere


def test_share_is_the_same_in_both_directions() -> None:
    """A connection's share is the same for its packets either way, IPv4 and IPv6; the
    connections spread over the shares."""
    for client, server in (("10.0.0.7", "10.0.0.9"), ("fd00::7", "2001:db8::1:9")):
        for n in (3, 7):
            seen = set()
            for port in range(41000, 41040):
                flow = _flow_pkts(client, server, port)
                a, b = share_of_each([_rec(flow[3], 1), _rec(flow[4], 2)], n)
                assert a == b, (client, port, n)
                seen.add(a)
            assert len(seen) > 1, (client, n)


@pytest.mark.parametrize("incl", [0, 1, 37, 38, 40, 53, 54])
def test_share_short_record_at_the_end_of_the_file(tmp_path: Path, incl: int) -> None:
    """A last record shorter than an Ethernet IPv4 TCP header (54 bytes), even an empty one,
    is read, counted and skipped in share 0; one of 54 bytes (the whole header, no payload
    on the wire) is its connection's."""
    v4 = _not_share0("10.2.0.1", "10.2.0.2")
    last = frame_bytes(v4[3], 1)[0][:incl]
    path = str(tmp_path / "short.pcap")
    write_pcap(path, [*v4, RawPacket(v4[-1].ts, last)])
    every, share = _shares_partition(path)
    assert len(every) == len(v4) + 1 and every[-1][3] == last
    assert share[-1] == (share[0] if incl == 54 else 0) and share[0] != 0


def test_whole_file_empty_record_at_the_end(tmp_path: Path) -> None:
    path = str(tmp_path / "empty.pcap")
    pkts = _flow_pkts("10.3.0.1", "10.3.0.2", 40000)
    write_pcap(path, [*pkts, RawPacket(pkts[-1].ts, b"")])
    with open_capture(path) as r:
        got = list(map(Packet._make, r))
        assert r.truncated is None
    assert len(got) == len(pkts) + 1 and got[-1][3] == b"" and got[-1][0] == len(pkts) + 1


@pytest.mark.parametrize("shared", [False, True])
def test_packets_counts_the_record_yielded(tmp_path: Path, shared: bool) -> None:
    """``reader.packets`` is the number of the packet just yielded, while iterating; a
    share's events carry the file's packet numbers (``now``, the topic-id clock of
    analyzer.shards), not the share's count, and the shares together count every packet."""
    pkts = []
    for i in range(4):
        pkts += _flow_pkts("10.4.0.1", "10.4.0.2", 40000 + i, ts=1_700_000_000.0 + i)
    path = str(tmp_path / "n.pcap")
    write_pcap(path, pkts)
    seen = 0
    if not shared:
        with open_capture(path) as r:
            for rec in r:
                assert r.packets == rec[0]
                seen += 1
    else:
        nows = []
        for k in range(N):
            s, evs = _core_events(path, share=(k, N))
            seen += s.packets
            # in-order data: the packet handled is the one that carried the bytes
            nows += [(e[6], e[7]) for e in evs if e[0] == 0]
        assert nows and all(index == now for index, now in nows)
        assert sorted(i for i, _ in nows) == [i for i, p in enumerate(pkts, 1) if p.payload]
    assert seen == len(pkts)


def _odd_times(recs: list[tuple[float, int, int]]) -> bytes:
    out = []
    for ts, incl, orig in recs:
        sec = int(ts)
        out.append(struct.pack("<IIII", sec, round((ts - sec) * 1e6), incl, orig) + bytes(incl))
    return struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1) + b"".join(out)


def test_backwards_counted_against_the_previous_record(tmp_path: Path) -> None:
    """"timestamp went backwards" compares each record with the one before it (not with the
    latest time seen); "caplen > orig_len" per record."""
    path = tmp_path / "t.pcap"
    path.write_bytes(_odd_times([(10.0, 60, 60), (5.0, 60, 60), (7.0, 60, 59), (6.0, 60, 60),
                                 (8.0, 60, 60), (8.0, 60, 60), (9.0, 61, 60)]))
    with open_capture(str(path)) as r:
        got = list(map(Packet._make, r))
        assert r.counters == {"timestamp went backwards": 2, "caplen > orig_len": 2}
    assert [t[1] for t in got] == [10.0, 5.0, 7.0, 6.0, 8.0, 8.0, 9.0]


def test_share_counts_are_its_own_packets(tmp_path: Path) -> None:
    """A share counts its own packets: their number, the first one's time and the latest
    time among them, in file order while time goes back now and then (each share meets
    some); the reader's notes are the file's (every share reads the whole file)."""
    pkts = []
    for i in range(6):
        pkts += _flow_pkts("10.5.0.1", "10.5.0.2", 40000 + i, ts=1_700_000_000.0 + 10 * i)
    for j in range(0, len(pkts), 5):
        pkts[j].ts -= 25.0
    path = str(tmp_path / "notes.pcap")
    write_pcap(path, pkts)
    every, share = _shares_partition(path)
    back = sum(1 for a, b in zip(every, every[1:], strict=False) if b[1] < a[1])
    assert back
    from analyzer.pipeline import Options, Run
    for k in range(N):
        mine = [p for p, sk in zip(every, share, strict=True) if sk == k]
        assert mine, k
        run = Run(path, Options(share=(k, N), conn_ids_from_index=True))
        list(run)
        s = run.summary
        assert (s.packets, s.first_ts, s.last_ts) == (len(mine), mine[0][1], max(p[1] for p in mine))
        assert s.notes["timestamp went backwards"] == back


def test_damage_offset_after_refills(tmp_path: Path) -> None:
    """The offset in a bad-record message is the file offset, past several buffer refills."""
    rec = struct.pack("<IIII", 1, 0, 600, 600) + bytes(600)
    n = 4000                                     # ~2.4 MB: three 1 MiB reads
    bad = struct.pack("<IIII", 1, 0, 0x7FFFFFFF, 0x7FFFFFFF)
    path = tmp_path / "bad.pcap"
    path.write_bytes(_odd_times([])[:24] + rec * n + bad + bytes(32))
    with open_capture(str(path)) as r:
        got = list(map(Packet._make, r))
        msg = r.truncated
    assert len(got) == n
    assert msg == f"bad record length {0x7FFFFFFF} at offset {24 + n * 616} (packet {n + 1})"
    path.write_bytes(_odd_times([])[:24] + rec * n + rec[:100])
    with open_capture(str(path)) as r:
        assert len(list(r)) == n and r.truncated == f"capture ends inside packet {n + 1}"
    path.write_bytes(_odd_times([])[:24] + rec * n + rec[:15])
    with open_capture(str(path)) as r:
        assert len(list(r)) == n and r.truncated == f"capture ends inside the header of packet {n + 1}"
    path.write_bytes(_odd_times([])[:24] + rec * n + rec[:1])
    with open_capture(str(path)) as r:
        assert len(list(r)) == n and r.truncated == f"capture ends inside the header of packet {n + 1}"



@pytest.mark.parametrize("gz", [False, True])
def test_whole_file_read_across_refills(tmp_path: Path, gz: bool) -> None:
    """Records (and pcapng blocks) that straddle the reader's 1 MiB reads, the last one ending
    the file right where a refill ends, are all read."""
    import gzip

    from tests.pcapgen import write_pcapng
    # pcap: 24-byte header, then 616-byte records; the last starts before 4 + 2^20 (the first
    # read) and ends the file
    rec = struct.pack("<IIII", 1, 0, 600, 600) + bytes(600)
    m = -(-((1 << 20) + 4 - 24) // 616)
    body = _odd_times([])[:24] + rec * m
    for extra in (b"", struct.pack("<IIII", 1, 0, 0, 0)):      # (an empty record last)
        data = body + extra
        path = tmp_path / "refill.pcap"
        path.write_bytes(gzip.compress(data, 1) if gz else data)
        with open_capture(str(path)) as r:
            got = list(map(Packet._make, r))
            assert r.truncated is None
        assert len(got) == m + (extra != b"") and all(len(t[3]) == 600 for t in got[:m])
    # varied sizes: records and their headers cut by the reads at many places
    sizes = [(i * 7919) % 3000 for i in range(1700)]
    pkts = [RawPacket(1.0 + i / 1000, bytes([i % 251]) * n) for i, n in enumerate(sizes)]
    for writer, name in ((write_pcap, "v.pcap"), (write_pcapng, "v.pcapng")):
        path = tmp_path / name
        writer(str(path), pkts, gz=gz)
        with open_capture(str(path)) as r:
            got = [tuple(p) for p in r]
            assert r.truncated is None and r.packets == len(pkts)
        assert [len(t[3]) for t in got] == sizes and [t[0] for t in got] == list(range(1, len(pkts) + 1))
        assert all(t[3] == bytes([(t[0] - 1) % 251]) * len(t[3]) for t in got)


# -- capture: pcapng blocks ----------------------------------------------------------------

def _ng(path: Path, blocks: list[bytes]) -> tuple[list[tuple], dict[str, int], str | None]:
    from tests.pcapgen import pcapng_block
    shb = pcapng_block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    path.write_bytes(shb + b"".join(blocks))
    with open_capture(str(path)) as r:
        got = [tuple(p) for p in r]
        return got, dict(r.counters), r.truncated


def _idb(linktype: int = 1) -> bytes:
    from tests.pcapgen import pcapng_block
    return pcapng_block(1, struct.pack("<HHI", linktype, 0, 0))


def _epb(if_id: int, data: bytes, incl: int | None = None, orig: int | None = None, ts_us: int = 5_000_000) -> bytes:
    from tests.pcapgen import pcapng_block
    n = len(data) if incl is None else incl
    return pcapng_block(6, struct.pack("<IIIII", if_id, ts_us >> 32, ts_us & 0xFFFFFFFF, n,
                                       len(data) if orig is None else orig) + data)


@pytest.mark.parametrize("over", [1, 2, 3, 4, 5])
def test_pcapng_captured_length_past_the_block(tmp_path: Path, over: int) -> None:
    """An EPB whose captured length runs past its data (into the padding and the trailing
    length) keeps the block's data alone and is counted."""
    data = bytes(range(60))                      # a multiple of 4: no padding
    got, counters, trunc = _ng(tmp_path / "e.pcapng", [_idb(), _epb(0, data, incl=60 + over, orig=100)])
    assert trunc is None and counters == {"malformed pcapng block": 1}
    assert got == [(1, 5.0, 1, data, 100)]


def test_pcapng_simple_packet_block_without_its_trailer(tmp_path: Path) -> None:
    from tests.pcapgen import pcapng_block
    data = bytes(range(40))
    spb = pcapng_block(3, struct.pack("<I", 1500) + data)      # cut by the snaplen: 40 of 1500
    got, counters, trunc = _ng(tmp_path / "s.pcapng", [_idb(), spb])
    assert trunc is None and counters == {}
    assert got == [(1, 0.0, 1, data, 1500)]


def test_pcapng_short_and_odd_blocks(tmp_path: Path) -> None:
    """An EPB too short for its fixed fields is counted and skipped; a packet on an interface
    not described (yet, or at all) is kept with link type -1."""
    from tests.pcapgen import pcapng_block
    data = bytes(range(44))
    short = pcapng_block(6, struct.pack("<IIII", 0, 0, 5, 0))     # 28 bytes: no orig_len
    got, counters, trunc = _ng(tmp_path / "o.pcapng", [
        _epb(0, data, ts_us=1_000_000),                 # before any IDB
        _idb(), short, _epb(0, data, ts_us=2_000_000),
        _epb(1, data, ts_us=3_000_000),                 # interface 1: not described
        _epb(7, data, ts_us=4_000_000)])
    assert trunc is None
    assert counters == {"packet on unknown interface": 3, "malformed pcapng block": 1}
    assert got == [(1, 1.0, -1, data, 44), (2, 2.0, 1, data, 44), (3, 3.0, -1, data, 44), (4, 4.0, -1, data, 44)]


def test_pcapng_trailing_length_differs(tmp_path: Path) -> None:
    data = bytes(40)
    good = _epb(0, data)
    bad = bytearray(_epb(0, data, ts_us=6_000_000))
    bad[-4:] = struct.pack("<I", len(bad) + 4)
    got, _counters, trunc = _ng(tmp_path / "t.pcapng", [_idb(), good, bytes(bad), good])
    assert [g[0] for g in got] == [1]
    off = 28 + 20 + len(good)
    assert trunc == f"bad pcapng block length at offset {off} (trailing length differs) (after packet 1)"


# -- tcp: the core's reassembly, a packet at a time and in batches ----------------------------

CLI = Endpoint("10.9.0.1", 40000)
SRV = Endpoint("10.9.0.2", 9092)


@dataclass
class Seg:
    """One crafted TCP segment as a raw-IP packet (link type 101) for ``Stream.feed``."""
    index: int
    ts: float
    data: bytes
    orig_len: int
    seq: int
    ack: int

    @property
    def rec(self) -> tuple[int, float, int, bytes, int]:
        return (self.index, self.ts, 101, self.data, self.orig_len)


def _ev(e: tuple) -> tuple:
    """A core event (core/src/py/mod.rs) as ("data" | "gap" | "end", conn, ...)."""
    if e[0] == 0:
        return ("data", *e[1:7])
    if e[0] == 1:
        return ("gap", *e[1:8])
    assert e[0] == 2
    return ("end", *e[1:6])


class _Result:
    """What a Stream gave: its counters, notes and conn_count, and the connections (the
    model's Conn, from the events)."""

    def __init__(self, run: CoreRun) -> None:
        s = run.stream
        self.stream = s
        self.counters = s.counters
        self.notes = s.notes
        self.conn_count = s.conn_count
        self.conns = run.conns


def _feed(segs: list[Seg], size: int, **kw: int) -> tuple[list[tuple], tuple, _Result]:
    s = Stream(**kw)
    run = CoreRun(s)
    evs: list[tuple] = []
    for i in range(0, len(segs), size):
        batch = s.feed([g.rec for g in segs[i:i + size]])
        run.model(batch)
        evs += [_ev(e) for e in batch if e[0] <= 2]
    mid = (s.counters, s.notes, s.open_conns)
    fin = s.finish()
    run.model(fin)
    evs += [_ev(e) for e in fin if e[0] <= 2]
    return evs, mid, _Result(run)


def _conns(r: _Result) -> list[tuple]:
    return [(c.id, c.a, c.b, c.syn_seen, c.closed, c.closed_by, c.first_ts, c.last_ts) for c in r.conns]


def _run_both(segs: list[Seg], **kw: int) -> tuple[list[tuple], _Result]:
    """The events, counters, notes and connections of the segments fed one packet per call,
    all in one call and in calls of three, which must agree; returns the events (finish
    included) and the result of the packet-per-call run."""
    out = [_feed(segs, size, **kw) for size in (1, max(1, len(segs)), 3)]
    for evs, mid, r in out[1:]:
        assert evs == out[0][0] and mid == out[0][1]
        assert (r.counters, r.notes, r.conn_count, _conns(r)) == \
            (out[0][2].counters, out[0][2].notes, out[0][2].conn_count, _conns(out[0][2]))
    return out[0][0], out[0][2]


PROBE_A, PROBE_B = ("10.99.0.1", 50000), ("10.99.0.2", 9092)


def _waiting(segs: list[Seg], **kw: int) -> int:
    """The out-of-order bytes buffered over all connections after ``segs``: the most a new
    connection can then buffer before "total buffer bound" trips is max_total_buffer less
    them (found by bisection; max_total_buffer is 60 000 unless given)."""
    total = kw.setdefault("max_total_buffer", 60_000)

    def trips(m: int) -> bool:
        s = Stream(**kw)
        s.feed([g.rec for g in segs])
        before = s.counters.get("total buffer bound", 0)
        syn = ip_packet(TcpPacket(1e9, PROBE_A[0], PROBE_B[0], PROBE_A[1], PROBE_B[1], SYN, 100, 0))
        data = ip_packet(TcpPacket(1e9, PROBE_A[0], PROBE_B[0], PROBE_A[1], PROBE_B[1], ACK, 101 + 1, 0, b"p" * m))
        s.feed([(10**6, 1e9, 101, syn, len(syn)), (10**6 + 1, 1e9, 101, data, len(data))])
        return s.counters.get("total buffer bound", 0) > before

    lo, hi = 0, total + 1           # the probe's m bytes fit for m <= lo, trip for m >= hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if trips(mid):
            hi = mid
        else:
            lo = mid
    return total - lo


class _Side:
    """Sequence numbers of one connection's two sides, for making segments by hand."""

    def __init__(self, isn: tuple[int, int] = (1000, 5000), a: Endpoint = CLI, b: Endpoint = SRV) -> None:
        self.seq = list(isn)
        self.ends = (a, b)
        self.i = 0

    def seg(self, side: int, flags: int, payload: bytes = b"", missing: int = 0, seq: int | None = None,
            advance: bool = True) -> Seg:
        self.i += 1
        s = self.seq[side] if seq is None else seq
        src, dst = self.ends[side], self.ends[1 - side]
        ack = self.seq[1 - side] & 0xFFFFFFFF
        ts = 100.0 + self.i / 1000
        # the snaplen cut ``missing`` bytes of the payload: on the wire, not captured
        wire = ip_packet(TcpPacket(ts, src.ip, dst.ip, src.port, dst.port, flags, s & 0xFFFFFFFF, ack,
                                   payload + bytes(missing)))
        out = Seg(self.i, ts, wire[:len(wire) - missing], len(wire), s & 0xFFFFFFFF, ack)
        if advance and seq is None:
            self.seq[side] += len(payload) + missing + (1 if flags & (SYN | FIN) else 0)
        return out

    def handshake(self) -> list[Seg]:
        return [self.seg(0, SYN), self.seg(1, SYN | ACK), self.seg(0, ACK)]


def test_data_after_rst_is_data_after_close() -> None:
    c = _Side()
    segs = [*c.handshake(), c.seg(0, PSH | ACK, b"abcd"), c.seg(1, RST | ACK),
            c.seg(0, PSH | ACK, b"efgh"), c.seg(0, ACK), c.seg(1, PSH | ACK, b"late")]
    evs, r = _run_both(segs)
    assert r.counters == {"data after close": 2}
    assert [e[0] for e in evs] == ["data", "end"] and evs[1][2:4] == (None, "rst")
    # the connection's times are those up to its close: nothing after its end reaches Python
    assert r.conns[0].last_ts == segs[4].ts


def test_data_at_the_fin_offset_after_fin_is_data_after_fin() -> None:
    c = _Side()
    segs = [*c.handshake(), c.seg(0, PSH | ACK, b"abcd"), c.seg(0, FIN | ACK)]
    fin_seq = c.seq[0] - 1
    segs += [c.seg(0, PSH | ACK, b"more", seq=fin_seq), c.seg(0, PSH | ACK, b"past", seq=fin_seq + 1),
             c.seg(1, PSH | ACK, b"answer")]
    evs, r = _run_both(segs)
    assert r.counters == {"data after FIN": 2}
    assert evs[:3] == [("data", 0, 0, 0, b"abcd", segs[3].ts, 4), ("end", 0, 0, "fin", segs[4].ts, 5),
                       ("data", 0, 1, 0, b"answer", segs[7].ts, 8)]


def test_snaplen_cut_segments_on_the_fast_path() -> None:
    """A segment whose payload the snaplen cut (wholly or partly) gives data then a gap."""
    c = _Side()
    segs = [*c.handshake(), c.seg(0, PSH | ACK, b"ab"), c.seg(0, PSH | ACK, b"", missing=100),
            c.seg(0, PSH | ACK, b"cd", missing=10), c.seg(0, PSH | ACK, b"ef")]
    evs, r = _run_both(segs)
    assert evs[:5] == [("data", 0, 0, 0, b"ab", segs[3].ts, 4), ("gap", 0, 0, 2, 100, segs[4].ts, 5, "snaplen"),
                       ("data", 0, 0, 102, b"cd", segs[5].ts, 6), ("gap", 0, 0, 104, 10, segs[5].ts, 6, "snaplen"),
                       ("data", 0, 0, 114, b"ef", segs[6].ts, 7)]
    assert r.counters == {"snaplen bytes": 110}


def test_in_order_data_drains_what_waits() -> None:
    c = _Side()
    segs = c.handshake()
    a, b, d = c.seg(0, PSH | ACK, b"aa"), c.seg(0, PSH | ACK, b"bb"), c.seg(0, PSH | ACK, b"dd")
    segs += [b, d, a]
    evs, r = _run_both(segs)
    assert [e[3:5] for e in evs if e[0] == "data"] == [(0, b"aa"), (2, b"bb"), (4, b"dd")]
    assert r.counters == {"out of order": 2} and _waiting(segs) == 0


def _resent_altered(chunks: list[bytes], altered: list[bytes]) -> list[Seg]:
    """A handshake, ``chunks`` delivered in order by the client, then ``altered`` sent again
    at the offsets of the chunks, oldest first."""
    c = _Side()
    segs = c.handshake()
    seq = c.seq[0]
    for chunk in chunks:
        segs.append(c.seg(0, PSH | ACK, chunk))
    for chunk, again in zip(chunks, altered, strict=True):
        segs.append(c.seg(0, PSH | ACK, again, seq=seq))
        seq += len(chunk)
    return segs


@pytest.mark.parametrize("window", [0, 6, 8, 32])
def test_overlap_history_window(window: int) -> None:
    """Retransmitted bytes are compared with the delivered ones still in the history window
    (at least the latest segment, none with window 0)."""
    segs = _resent_altered([b"AAAA", b"BBBB", b"CCCCCCCCCC"], [b"aaaa", b"bbbb", b"cccccccccc"])
    _evs, r = _run_both(segs, overlap_window=window)
    differs = r.counters.get("overlap differs", 0)
    # window 0: no history; 6 and 8: only the latest segment (10 bytes > window); 32: all
    assert differs == {0: 0, 6: 1, 8: 1, 32: 3}[window]
    assert r.counters["retransmission"] == 3


def test_overlap_history_keeps_what_fits() -> None:
    segs = _resent_altered([b"AAAA", b"BBBB", b"CCCC"], [b"xAAA", b"xBBB", b"xCCC"])
    for window, want in ((7, 1), (8, 2), (9, 2), (11, 2), (12, 3)):
        _evs, r = _run_both(segs, overlap_window=window)
        assert r.counters.get("overlap differs", 0) == want, window


def test_pure_ack_moves_last_ts() -> None:
    c = _Side()
    segs = [*c.handshake(), c.seg(0, PSH | ACK, b"abc"), c.seg(1, ACK), c.seg(0, ACK)]
    evs, r = _run_both(segs)
    assert r.conns[0].last_ts == segs[-1].ts and evs[-1] == ("end", 0, None, "end of capture", segs[-1].ts, 0)


# -- tcp: SYNs, closing, forgetting, buffer bounds -------------------------------------

def test_syn_on_a_known_connection() -> None:
    """A SYN on a known 4-tuple never takes the fast path: retransmitted SYN, port reuse."""
    c = _Side()
    segs = [*c.handshake(), c.seg(0, PSH | ACK, b"abcd"),
            c.seg(0, SYN, seq=1000), c.seg(1, SYN | ACK, seq=5000),      # retransmitted, same ISNs
            c.seg(0, PSH | ACK, b"efgh")]
    d = _Side(isn=(7000, 9000))
    segs += [d.seg(0, SYN), d.seg(1, SYN | ACK), d.seg(0, PSH | ACK, b"new!")]  # new ISN: reuse
    evs, r = _run_both(segs)
    # (a SYN-ACK with the recorded ISN is taken as it comes, not counted)
    assert r.counters == {"retransmitted SYN": 1, "port reuse": 1}
    assert [e[:5] for e in evs] == [
        ("data", 0, 0, 0, b"abcd"), ("data", 0, 0, 4, b"efgh"), ("end", 0, None, "reused", segs[7].ts),
        ("data", 1, 0, 0, b"new!"), ("end", 1, None, "end of capture", segs[-1].ts)]


def test_first_packets_without_syn_ack() -> None:
    """The server's first packets carry no SYN (its SYN-ACK not captured): its stream starts
    at the first sequence number seen, a pure ACK's included."""
    c = _Side()
    syn = c.seg(0, SYN)
    c.seq[1] += 1
    segs = [syn, c.seg(1, ACK), c.seg(1, PSH | ACK, b"hello"), c.seg(0, PSH | ACK, b"hi"),
            c.seg(1, PSH | ACK, b"again")]
    evs, r = _run_both(segs)
    assert [e[:5] for e in evs[:3]] == [("data", 0, 1, 0, b"hello"), ("data", 0, 0, 0, b"hi"),
                                        ("data", 0, 1, 5, b"again")]
    assert r.conns[0].syn_seen


def test_forgetting_closed_connections_keeps_a_reused_tuple() -> None:
    """max_closed: the oldest closed connection is forgotten (an ACK on its 4-tuple starts a
    new connection); forgetting one whose 4-tuple was reused keeps the new connection's."""
    sides = [_Side(a=Endpoint("10.9.1.1", 41000 + i)) for i in range(4)]
    x = sides[0]
    segs = [*x.handshake(), x.seg(0, PSH | ACK, b"one"), x.seg(1, RST | ACK)]       # conn 0, closed
    y = _Side(isn=(20000, 30000), a=x.ends[0])
    segs += [y.seg(0, SYN), y.seg(1, SYN | ACK), y.seg(0, ACK)]                      # conn 1 on x's tuple
    for s in sides[1:]:                                                               # conns 2, 3, 4 closed
        segs += [*s.handshake(), s.seg(0, PSH | ACK, b"ab"), s.seg(0, RST | ACK)]
    # closed now: 0, 2, 3, 4; max_closed 2 forgets 0 and 2
    segs += [y.seg(0, PSH | ACK, b"still 1"),                  # conn 1 (its entry survived 0's forgetting)
             sides[1].seg(0, ACK), sides[1].seg(0, PSH | ACK, b"x"),   # 2 forgotten: a new conn 5
             sides[2].seg(0, PSH | ACK, b"late")]               # 3 remembered: data after close
    evs, r = _run_both(segs, max_closed=2)
    assert r.counters == {"data after close": 1, "port reuse": 1}
    assert [(e[1], e[4]) for e in evs if e[0] == "data"] == [(0, b"one"), (2, b"ab"), (3, b"ab"), (4, b"ab"),
                                                             (1, b"still 1"), (5, b"x")]
    assert r.conn_count == 6
    # the two closed connections remembered are 3 and 4: data on 4's tuple is data after
    # close too (and 0's tuple is 1's, 2's a new connection's: shown above)
    evs2, r2 = _run_both([*segs, sides[3].seg(0, PSH | ACK, b"late too")], max_closed=2)
    assert evs2 == evs and r2.counters == {"data after close": 2, "port reuse": 1} and r2.conn_count == 6


def test_closing_frees_what_waits_beyond_a_fin() -> None:
    c = _Side()
    segs = c.handshake()
    start = c.seq[0]
    segs += [c.seg(0, PSH | ACK, b"x" * 10, seq=start + 10),        # beyond the FIN below: waits
             c.seg(0, PSH | ACK, b"aaaaa"), c.seg(0, FIN | ACK)]
    evs, r = _run_both(segs)
    assert [e[4] for e in evs if e[0] == "data"] == [b"aaaaa"]
    assert _waiting(segs, max_total_buffer=15) == 10
    rst = c.seg(1, RST | ACK)
    assert _waiting([*segs, rst], max_total_buffer=15) == 0
    # what the connection's close freed leaves room for another's 10 waiting bytes
    d = _Side(a=Endpoint("10.9.1.2", 40001))
    more = [*d.handshake(), d.seg(0, PSH | ACK, b"y" * 10, seq=d.seq[0] + 5)]
    s = Stream(max_total_buffer=15)
    s.feed([g.rec for g in [*segs, rst]])
    out = s.feed([g.rec for g in more])
    assert not [e for e in out if e[0] <= 2] and "total buffer bound" not in s.counters
    # (without the RST, they would not fit)
    s = Stream(max_total_buffer=15)
    s.feed([g.rec for g in segs])
    s.feed([g.rec for g in more])
    assert s.counters.get("total buffer bound") == 1


def test_syn_ack_first_with_ack_zero() -> None:
    """The connection starts at the SYN-ACK whose ack is 0: the client's ISN is 2^32 - 1, so its
    SYN seen then is a retransmission."""
    c = _Side(isn=(0xFFFFFFFF, 5000))
    syn = c.seg(0, SYN)
    segs = [c.seg(1, SYN | ACK), syn, c.seg(0, ACK), c.seg(0, PSH | ACK, b"wrap")]
    assert segs[0].ack == 0
    evs, r = _run_both(segs)
    assert r.counters == {"retransmitted SYN": 1}
    assert evs[0][:5] == ("data", 0, 0, 0, b"wrap") and r.conn_count == 1


@pytest.mark.parametrize("extra", [-1, 0, 1])
def test_buffer_bounds_at_their_edge(extra: int) -> None:
    """Out-of-order bytes up to max_buffer (per direction) and max_total_buffer (all
    connections) wait; one more byte turns the hole into a gap."""
    for kw in ({"max_buffer": 20}, {"max_total_buffer": 20}):
        c = _Side()
        segs = c.handshake()
        start = c.seq[0]
        segs += [c.seg(0, PSH | ACK, b"b" * 10, seq=start + 5), c.seg(0, PSH | ACK, b"c" * (10 + extra), seq=start + 15),
                 c.seg(0, PSH | ACK, b"a" * 5, seq=start)]
        evs, r = _run_both(segs, **kw)
        gaps = [e for e in evs if e[0] == "gap"]
        assert gaps == ([("gap", 0, 0, 0, 5, segs[4].ts, 5, "lost segment")] if extra > 0 else []), kw
        assert [e[3] for e in evs if e[0] == "data"] == ([5, 15] if extra > 0 else [0, 5, 15])


def test_duplicate_of_a_waiting_segment() -> None:
    c = _Side()
    segs = c.handshake()
    start = c.seq[0]
    segs += [c.seg(0, PSH | ACK, b"b" * 10, seq=start + 5), c.seg(0, PSH | ACK, b"b" * 10, seq=start + 5),
             c.seg(0, PSH | ACK, b"B" * 10, seq=start + 5), c.seg(0, PSH | ACK, b"b" * 4, seq=start + 5)]
    assert _waiting(segs, max_buffer=15) == 10
    mid = Stream(max_buffer=15)
    assert not [e for e in mid.feed([g.rec for g in segs]) if e[0] <= 2]
    assert not mid.counters.get("lost segments")
    segs.append(c.seg(0, PSH | ACK, b"a" * 5, seq=start))
    evs, r = _run_both(segs, max_buffer=15)
    assert r.counters == {"out of order": 4, "retransmission": 3, "overlap differs": 1}
    assert [e[3:5] for e in evs if e[0] == "data"] == [(0, b"aaaaa"), (5, b"b" * 10)]


@pytest.mark.parametrize("max_closed", [0, 1, 2])
def test_closed_connections_forgotten_past_max_closed(max_closed: int) -> None:
    """With max_closed m, the m latest closed connections are remembered (data on their
    4-tuples is data after close), older ones forgotten (their 4-tuples start new ones)."""
    sides = [_Side(a=Endpoint("10.9.2.1", 42000 + i)) for i in range(3)]
    segs = []
    for s in sides:
        segs += [*s.handshake(), s.seg(0, RST | ACK)]
    segs += [s.seg(0, PSH | ACK, b"after") for s in sides]
    _evs, r = _run_both(segs, max_closed=max_closed)
    assert r.counters.get("data after close", 0) == max_closed
    assert r.conn_count == 3 + (3 - max_closed)


# -- stats: the figures' definitions at their edges ----------------------------------------------

def test_top_is_the_best_by_definition_among_rounding_ties() -> None:
    """The top is the first N exchanges by (latency rounded to the microsecond desc, conn,
    request frame, correlation id), ties within the rounding included."""
    import random

    from tests.conftest import stats_of
    from tests.test_stats import lat_of, mk
    rng = random.Random(5)
    lats = [5.0, 4.9996, 5.0004, 4.9994, 5.0006, 5.001, 4.999, 3.0, 7.0]
    exs = [mk(lat=rng.choice(lats), conn=rng.randrange(3), cid=i, frame=rng.randrange(1, 10_000) * 3, t=i * 0.001)
           for i in range(400)]
    want = sorted(((round(lat_of(ex), 3), ex.conn.id, ex.request_frame, ex.correlation_id) for ex in exs),
                  key=lambda r: (-r[0], r[1], r[2], r[3]))
    assert len({r[0] for r in want[:150]}) == 3        # 7.0, then 5.001 and 5.0 (rounded)
    for keep in (1, 3, 10, 40, 150):
        got = stats_of(exs, top=keep)["top"]
        assert [(r["latency_ms"], r["conn"], r["request_frame"], r["correlation_id"]) for r in got] == want[:keep], keep


@pytest.mark.parametrize("lat,got,wait", [(450.0, 0, True), (449.99, 0, False), (500.0, 9, True),
                                          (500.0, 10, False), (500.0, 11, False)])
def test_fetch_wait_edges(lat: float, got: int, wait: bool) -> None:
    """A Fetch waited on purpose from 0.9 x max_wait_ms on, when it got fewer than min_bytes."""
    from analyzer.sinks.stats import wait_kind
    from tests.conftest import stats_of
    from tests.test_stats import mk
    ex = mk("Fetch", 11, lat=lat, req_body={"max_wait_ms": 500, "min_bytes": 10},
            partitions=[{"topic": "a", "partition": 0, "records": 1, "bytes": got}])
    assert wait_kind(ex, lat) == ("fetch_max_wait" if wait else None)
    g = stats_of([ex], by=("api",))["groups"][0]
    assert g["waits"] == ({"fetch_max_wait": 1} if wait else {}) and g["service"] == (0 if wait else 1)
    # no min_bytes: at least one byte is wanted
    ex0 = mk("Fetch", 11, lat=500.0, req_body={"max_wait_ms": 500},
             partitions=[{"topic": "a", "partition": 0, "records": 0, "bytes": min(got, 1)}])
    assert wait_kind(ex0, 500.0) == ("fetch_max_wait" if got == 0 else None)


def test_sync_group_leader_and_follower_in_the_groups() -> None:
    from dissectors.field import Field
    from tests.conftest import stats_of
    from tests.test_stats import mk
    leader = Field("assignments", "array", 1, children=[Field("[0]", "SyncGroupRequestAssignment")])
    exs = [mk("SyncGroup", 3, lat=900.0, cid=1, req_body={"assignments": Field("x", "array", 0)}),
           mk("SyncGroup", 3, lat=2.0, cid=2, req_body={"assignments": leader}),
           mk("JoinGroup", 7, lat=1.0, cid=3, errors=["MEMBER_ID_REQUIRED"]),
           mk("Produce", 9, lat=3.0, cid=4, req_body={"acks": -1})]
    res = stats_of(exs, by=("api",))
    waits = {g["api"]: (g["waits"], g["service"]) for g in res["groups"]}
    assert waits == {"SyncGroup": ({"sync_group_follower": 1}, 1), "JoinGroup": ({}, 1),
                     "Produce": ({}, 1)}


def test_throughput_rows_only_for_produce_and_fetch_partitions() -> None:
    from tests.conftest import stats_of
    from tests.test_stats import T0, mk
    parts = [{"topic": "t", "partition": 1, "records": 3, "bytes": 30, "error": None}]
    exs = [mk("Produce", lat=1.0, t=0.1, cid=1, frame=1, partitions=parts),
           mk("Fetch", lat=1.0, t=0.2, cid=2, frame=4, partitions=parts),
           mk("ListOffsets", lat=1.0, t=0.3, cid=3, frame=7, partitions=parts)]
    thr = stats_of(exs, by=("api",))["throughput"]
    assert [(r["topic"], r["partition"], r["produced_records"], r["produced_bytes"], r["fetched_records"],
             r["fetched_bytes"]) for r in thr["topic_partitions"]] == [("t", 1, 3, 30, 3, 30)]
    assert [(r["t"] - int(T0), r["requests"], r["produced_records"], r["produced_bytes"], r["fetched_records"],
             r["fetched_bytes"]) for r in thr["per_second"]] == [(0, 3, 3, 30, 3, 30)]


def test_orphans_and_time_span() -> None:
    """An orphan response counts in time at its response; the span is min first .. max last
    whatever the order exchanges arrive in."""
    from tests.conftest import stats_of
    from tests.test_stats import T0, mk
    exs = [mk(api="Metadata", lat=2.0, t=1.5, cid=1, frame=10),
           mk(api="Metadata", lat=1.0, t=3.2, cid=2, frame=20, status="orphan_response"),
           mk(api="Metadata", lat=400.0, t=0.5, cid=3, frame=1),
           mk(api="Metadata", lat=1.0, t=1.0, cid=4, frame=5)]
    thr = stats_of(exs, by=("api",))["throughput"]
    assert thr["first_time"] == T0 + 0.5
    assert thr["last_time"] == pytest.approx(T0 + 3.2 + 0.001, rel=0, abs=1e-6)
    assert [(r["t"] - int(T0), r["requests"]) for r in thr["per_second"]] == [(0, 1), (1, 2), (3, 1)]


# -- tcp: late SYN-ACKs, odd FINs and SYNs ---------------------------------------------

@pytest.mark.parametrize("case", ["pending", "delivered"])
def test_late_syn_ack_keeps_the_stream_offsets(case: str) -> None:
    """A SYN-ACK seen after the server's stream has begun (bytes delivered or waiting)
    does not move its offsets."""
    c = _Side()
    segs = [c.seg(0, SYN)]
    s0 = c.seq[1] + 1                   # the server's first data byte after its SYN
    if case == "pending":
        segs += [c.seg(1, ACK, seq=s0 + 10), c.seg(1, PSH | ACK, b"later", seq=s0 + 15),
                 c.seg(1, SYN | ACK, seq=s0 - 1), c.seg(1, PSH | ACK, b"first", seq=s0 + 10)]
        want = [(0, b"first"), (5, b"later")]
    else:
        segs += [c.seg(1, PSH | ACK, b"first", seq=s0 + 100), c.seg(1, SYN | ACK, seq=s0 - 1),
                 c.seg(1, PSH | ACK, b"later", seq=s0 + 105)]
        want = [(0, b"first"), (5, b"later")]
    evs, r = _run_both(segs)
    assert [e[3:5] for e in evs if e[0] == "data"] == want
    assert not [e for e in evs if e[0] == "gap"]


def test_fin_below_what_was_delivered_is_not_an_end() -> None:
    c = _Side()
    segs = [*c.handshake(), c.seg(0, PSH | ACK, b"abcdef"), c.seg(0, FIN | ACK, seq=c.seq[0] - 4),
            c.seg(0, PSH | ACK, b"gh")]
    evs, r = _run_both(segs)
    assert [e[:5] for e in evs] == [("data", 0, 0, 0, b"abcdef"), ("data", 0, 0, 6, b"gh"),
                                    ("end", 0, None, "end of capture", segs[-1].ts)]
    assert r.conns[0].closed_by == 0


def test_one_connection_end_when_the_last_fin_closes_over_a_hole() -> None:
    c = _Side()
    segs = [*c.handshake(), c.seg(1, FIN | ACK)]
    start = c.seq[0]
    segs += [c.seg(0, PSH | ACK, b"late", seq=start + 4), c.seg(0, FIN | ACK, seq=start + 8)]
    evs, r = _run_both(segs)
    assert [e for e in evs if e[0] != "data"] == [
        ("end", 0, 1, "fin", segs[3].ts, 4), ("gap", 0, 0, 0, 4, segs[5].ts, 6, "lost segment"),
        ("end", 0, 0, "fin", segs[5].ts, 6), ("end", 0, None, "fin", segs[5].ts, 6)]


@pytest.mark.parametrize("first", [b"", b"mid-stream"])
def test_syn_after_a_midstream_start_is_a_new_connection(first: bytes) -> None:
    """A SYN on a 4-tuple first seen mid-stream (no ISN for that side) starts a new connection."""
    c = _Side()
    segs = [c.seg(0, PSH | ACK if first else ACK, first), c.seg(0, SYN, seq=77), c.seg(0, PSH | ACK, b"x", seq=78)]
    evs, r = _run_both(segs)
    assert r.counters == {"port reuse": 1} and r.conn_count == 2
    assert [e[:5] for e in evs if e[0] == "data"] == ([("data", 0, 0, 0, first)] if first else []) + \
        [("data", 1, 0, 0, b"x")]


def test_syn_ack_again_after_close() -> None:
    c = _Side()
    segs = [*c.handshake(), c.seg(0, RST | ACK), c.seg(1, SYN | ACK, seq=5000)]
    _evs, r = _run_both(segs)
    assert r.counters == {"retransmitted SYN": 1} and r.conn_count == 1


@pytest.mark.parametrize("version", [1, 2, 3])
def test_api_versions_unsupported_answer_in_the_v0_layout(version: int) -> None:
    """An ApiVersions v1+ answer with UNSUPPORTED_VERSION (35) may come in the v0 layout: the
    lean walk reads it so, as a walk of the v0 body does."""
    from dissectors.context import DecodeContext
    from tests.lean import dump, lean_response
    body = struct.pack(">hi", 35, 2) + struct.pack(">hhh", 0, 0, 9) + struct.pack(">hhh", 18, 0, 3)
    frame = struct.pack(">i", 7) + body
    ctx = DecodeContext()
    a = lean_response(frame, 18, version, ctx)
    assert ctx.counts.malformed == 0 and ctx.counts.trailing == 0
    v0 = lean_response(frame, 18, 0, DecodeContext())
    assert dump(a.child("body")) == dump(v0.child("body"))
    assert a.child("body").type.endswith("v0") and kafka_errors(a) == ["UNSUPPORTED_VERSION"]
    # an answer that fits the asked version is read in it
    ok = struct.pack(">hi", 35, 1) + struct.pack(">hhh", 18, 0, 3) + struct.pack(">i", 0)
    b = lean_response(struct.pack(">i", 7) + ok, 18, 1, DecodeContext())
    assert b.child("body").type.endswith("v1")


def kafka_errors(root: object) -> list[str]:
    from dissectors import kafka
    return kafka.error_codes(root)      # type: ignore[arg-type]


def test_throughput_partition_keys_are_ints_or_none() -> None:
    """A partition index that is not an int (a bool, a string) is no partition: it counts
    under null."""
    from tests.conftest import stats_of
    from tests.test_stats import mk
    exs = [mk("Fetch", lat=1.0, t=0.1 * i, cid=i, frame=3 * i + 1,
              partitions=[{"topic": "t", "partition": p, "records": 1, "bytes": 10, "error": None}])
           for i, p in enumerate([2, "2", True, None, 2])]
    tps = stats_of(exs, by=("api",))["throughput"]["topic_partitions"]
    assert [(r["topic"], r["partition"], r["fetched_records"], r["fetched_bytes"]) for r in tps] == \
        [("t", 2, 2, 20), ("t", None, 3, 30)]
