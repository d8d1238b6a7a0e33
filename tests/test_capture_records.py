"""The core's capture reader (``read(n)`` batches, what ``Stream.feed_capture`` reads) against
its Packet iteration; a share's packets (``Stream(share=...)``) against the whole capture; and
the summary's counts when ``Pipeline.feed_capture``'s generator ends early."""
from __future__ import annotations

from pathlib import Path

import pytest

from analyzer._core import Stream, open_capture
from analyzer.model import Packet
from analyzer.pipeline import Options, Pipeline, Run
from tests.pcapgen import (
    RawPacket,
    TcpFlow,
    conn_key,
    frame_bytes,
    kafka_request,
    kafka_response,
    share_of_each,
    write_pcap,
    write_pcapng,
)


def _packets(n_conns: int = 4) -> list:
    pkts = []
    for i in range(n_conns):
        f = TcpFlow(("10.0.0.1", 41000 + i), ("10.0.0.2", 9092), ts=1_700_000_000.0 + i)
        pkts += f.handshake()
        for corr in range(2):
            pkts += f.send(0, kafka_request(18, 0, corr, "rec"))
            pkts += f.send(1, kafka_response(corr, b"\x00\x00\x00\x00\x00\x00"))
        pkts += f.fin(0) + f.fin(1) + f.ack(0)
    return pkts


def core_events(path: str, **kw: object) -> tuple[Stream, list[tuple]]:
    """Every event of ``path`` through a core Stream (``feed_capture`` in batches of 7)."""
    s = Stream(**kw)
    evs: list[tuple] = []
    with open_capture(path) as cap:
        while (batch := s.feed_capture(cap, 7)) is not None:
            evs += batch
    evs += s.finish()
    return s, evs


@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_batches_are_the_packets(tmp_path: Path, fmt: str) -> None:
    path = str(tmp_path / f"x.{fmt}")
    (write_pcap if fmt == "pcap" else write_pcapng)(path, _packets())
    with open_capture(path) as r:
        pkts = list(r)
        assert r.packets == len(pkts) and r.finished
    with open_capture(path) as r:
        recs = []
        while batch := r.read(5):
            assert len(batch) <= 5 and r.packets == len(recs) + len(batch)
            recs += batch
        assert r.packets == len(recs) and r.read(5) == []
    # (plain tuples laid out as analyzer.model.Packet)
    assert all(type(p) is tuple and len(p) == len(Packet._fields) for p in pkts + recs)
    assert recs == pkts and len(recs) == len(_packets())
    assert [Packet._make(p).index for p in recs] == list(range(1, len(recs) + 1))


def test_a_capture_is_read_once(tmp_path: Path) -> None:
    """A capture has one read position, shared by iterating, ``read`` and a Stream's
    ``feed_capture``: read to its end, it gives nothing more (it does not start again)."""
    path = str(tmp_path / "once.pcap")
    write_pcap(path, _packets(1))
    with open_capture(path) as r:
        first = r.read(2)
        rest = list(r)
        assert [p[0] for p in first + rest] == list(range(1, len(_packets(1)) + 1))
        assert list(r) == [] and r.read(5) == [] and r.finished


@pytest.mark.parametrize("big_endian", [False, True])
def test_packets_of_a_share(tmp_path: Path, big_endian: bool) -> None:
    """The shares of a file are its packets, each once, in order: both directions of a
    connection in one share, and the odd records (too short, not IP, IPv4 fragments, UDP,
    IPv4 with options, other EtherTypes) where their parse puts them: records that are no
    TCP segment in share 0. A share's connections put together are the whole capture's."""
    pkts = _packets(6)
    frames = [frame_bytes(p, 1)[0] for p in pkts]
    whole = share_of_each([(i + 1, p.ts, 1, f, len(f)) for i, (p, f) in enumerate(zip(pkts, frames, strict=True))], 3)
    # (a connection that is not share 0's, where the odd records below must not go)
    tcp = next(p for p, f, k in zip(pkts, frames, whole, strict=True) if len(f) > 60 and k)
    frame = bytearray(frame_bytes(tcp, 1)[0])
    fragment = bytearray(frame)
    fragment[20] |= 0x20                        # IPv4 "more fragments"
    last_fragment = bytearray(frame)
    last_fragment[21] = 0x01                    # IPv4 fragment offset 1 (x 8 bytes), no MF
    not_ip = [bytearray(frame), bytearray(frame)]
    not_ip[0][12:14] = b"\x08\x01"              # other EtherTypes, the same bytes after them
    not_ip[1][12:14] = b"\x09\x00"
    udp = bytearray(frame)
    udp[23] = 17
    options = bytearray(frame)
    options[14] = 0x46                          # IPv4 with options: the ports are further on
    odd = [RawPacket(tcp.ts, b"\x00" * 20), RawPacket(tcp.ts, bytes(12) + b"\x08\x06" + bytes(40)),
           RawPacket(tcp.ts, bytes(fragment)), RawPacket(tcp.ts, bytes(udp)), RawPacket(tcp.ts, frame[:40]),
           RawPacket(tcp.ts, bytes(options)), RawPacket(tcp.ts, bytes(last_fragment)),
           *(RawPacket(tcp.ts, bytes(f)) for f in not_ip)]
    pkts = pkts[:5] + odd + pkts[5:]
    path = str(tmp_path / "s.pcap")
    write_pcap(path, pkts, big_endian=big_endian)
    with open_capture(path) as r:
        every = list(map(Packet._make, r))
    share = share_of_each(every, 3)
    for p, k in zip(every, share, strict=True):
        key, why = conn_key(p.linktype, p.data, p.orig_len)
        if key is None:
            assert k == 0, (p.index, why)
    # both directions of a connection (by its 4-tuple) in one share
    by_key: dict[tuple, set[int]] = {}
    for p, k in zip(every, share, strict=True):
        key = conn_key(p.linktype, p.data, p.orig_len)[0]
        if key is not None:
            by_key.setdefault(key, set()).add(k)
    assert all(len(ks) == 1 for ks in by_key.values()) and {min(ks) for ks in by_key.values()} - {0}
    reasons = [conn_key(p.linktype, p.data, p.orig_len)[1] for p in every[5:5 + len(odd)]]
    assert reasons.count(None) <= 1, reasons            # (IPv4 with options parses, as TCP)
    assert all(k == 0 for k, why in zip(share[5:5 + len(odd)], reasons, strict=True) if why is not None)
    # through feed_capture: a share's counts are its own packets; the shares together are the file
    one, one_evs = core_events(path, ids_from_index=True)
    assert one.packets == len(every)
    kept_evs: list[tuple] = []
    skips: dict[str, int] = {}
    conns = 0
    for k in range(3):
        s, evs = core_events(path, ids_from_index=True, share=(k, 3))
        mine = [p for p, sk in zip(every, share, strict=True) if sk == k]
        assert s.packets == len(mine)
        if mine:
            assert s.first_ts == mine[0].ts and s.last_ts == max(p.ts for p in mine)
        for why, n in s.skips.items():
            skips[why] = skips.get(why, 0) + n
        assert not s.skips or k == 0
        kept_evs += evs
        conns += s.conn_count
    assert skips == one.skips and conns == one.conn_count and sum(skips.values()) >= len(odd) - 1
    # (events by connection: ids are first packet numbers, the same in every share)
    assert sorted(kept_evs, key=repr) == sorted(one_evs, key=repr)


def test_pcap_oddities_counted_as_record_by_record(tmp_path: Path) -> None:
    """Timestamps going backwards and caplen > orig_len are counted per record,
    across the reader's buffers, the counter met first first; timestamps are sec + usec/1e6."""
    import struct
    recs = []
    for i in range(3000):
        sec, usec = 1_700_000_000 + i // 7, (i % 7) * 1000 + 1
        if i % 1000 == 999:
            sec -= 3                                    # backwards
        data = bytes(600)
        orig = 599 if i % 1500 == 400 else 600         # caplen > orig_len
        recs.append(struct.pack("<IIII", sec, usec, len(data), orig) + data)
    path = tmp_path / "odd.pcap"
    path.write_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1) + b"".join(recs))
    with open_capture(str(path)) as r:
        got = list(map(Packet._make, r))
        assert list(r.counters.items()) == [("caplen > orig_len", 2), ("timestamp went backwards", 3)]
    assert len(got) == 3000 and [t[0] for t in got] == list(range(1, 3001))
    for i, (_idx, ts, lt, data, orig) in enumerate(got):
        sec, usec = struct.unpack_from("<II", recs[i])
        assert ts == sec + usec / 1e6 and lt == 1 and len(data) == 600 and orig == (599 if i % 1500 == 400 else 600)


def _exchanges(exs: list) -> list[tuple]:
    return [(ex.conn.id, ex.api_name, ex.correlation_id, ex.status, ex.request.first_index if ex.request else None,
             ex.response.last_index if ex.response else None) for ex in exs]


def test_run_reads_in_batches_and_counts_like_feed(tmp_path: Path) -> None:
    """``Run`` (feed_capture, batches of the core's size) gives the exchanges and summary of
    the same packets fed one by one (``feed``) or in batches of other sizes (``feed_packets``)."""
    path = str(tmp_path / "r.pcap")
    pkts = _packets()
    write_pcap(path, pkts)
    run = Run(path, Options())
    by_run = _exchanges(list(run))
    with open_capture(path) as r:
        every = list(map(Packet._make, r))
    for size in (1, 3, 1000):
        pipe = Pipeline(Options())
        got = []
        for i in range(0, len(every), size):
            got += pipe.feed(every[i]) if size == 1 else pipe.feed_packets(every[i:i + size])
        got += pipe.finish()
        assert _exchanges(got) == by_run, size
        assert run.summary.to_json() == pipe.summary.to_json(), size
    assert len(by_run) == 8
    assert run.summary.packets == len(pkts) and run.summary.last_ts == pytest.approx(pkts[-1].ts, abs=1e-6)


def test_counts_complete_when_the_generator_is_closed_early(tmp_path: Path) -> None:
    """Every packet the core read when ``feed_capture``'s generator is closed is counted, the
    latest time among them included, though later packets of the file are not read."""
    path = str(tmp_path / "c.pcap")
    pkts = _packets(300)                       # 4800 packets: more than one batch
    write_pcap(path, pkts)
    pipe = Pipeline(Options())
    with open_capture(path) as r:
        gen = pipe.feed_capture(r)
        first = next(gen)
        gen.close()
        read = r.packets
    assert first.response is not None and first.response.last_index <= read < len(pkts)
    assert pipe.summary.packets == read
    assert pipe.summary.first_ts == pytest.approx(pkts[0].ts, abs=1e-6)
    assert pipe.summary.last_ts == pytest.approx(max(p.ts for p in pkts[:read]), abs=1e-6)
