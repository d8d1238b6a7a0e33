"""CaptureReader.records() (plain tuples laid out as Packet, what feed_all reads) against the
reader's Packet iteration, and the fused path's summary counts when its generator ends."""
from __future__ import annotations

from pathlib import Path

import pytest

from analyzer.capture import CaptureError, open_capture
from analyzer.model import Packet
from analyzer.pipeline import Options, Pipeline, Run
from analyzer.shards import shard_of
from tests.pcapgen import (
    RawPacket,
    TcpFlow,
    frame_bytes,
    kafka_request,
    kafka_response,
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


@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_records_are_the_packets_as_tuples(tmp_path: Path, fmt: str) -> None:
    path = str(tmp_path / f"x.{fmt}")
    (write_pcap if fmt == "pcap" else write_pcapng)(path, _packets())
    with open_capture(path) as r:
        pkts = list(r)
    with open_capture(path) as r:
        recs = list(r.records())
        assert r.packets == len(recs)
        with pytest.raises(CaptureError):
            r.records()            # once, like iterating
    assert all(type(p) is Packet for p in pkts)
    assert recs == [tuple(p) for p in pkts] and len(recs) == len(_packets())
    if fmt == "pcap":
        assert all(type(t) is tuple for t in recs)       # no NamedTuple per record


@pytest.mark.parametrize("big_endian", [False, True])
def test_records_of_a_share(tmp_path: Path, big_endian: bool) -> None:
    """The shares of a file are its packets, each once, in order, as shard_of puts them: the
    fused test of an Ethernet IPv4 TCP record in either byte order, and the other records
    (too short, not IP, IPv4 fragments, UDP, IPv4 with options) through share_of."""
    pkts = _packets(6)
    # (of a connection that is not share 0's, where the odd records below must go: a record
    # wrongly taken for one of its packets would go elsewhere)
    tcp = next(p for p in pkts if len(f := frame_bytes(p, 1)[0]) > 60 and shard_of((0, 0.0, 1, f, len(f)), 3))
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
        every = list(r)
    kept = []
    for k in range(3):
        with open_capture(path) as r:
            r.keep_share(k, 3, shard_of)
            mine = list(r.records())
            assert r.packets == len(every)
        assert mine == [tuple(p) for p in every if shard_of(p, 3) == k]
        kept += mine
    assert sorted(kept) == sorted(tuple(p) for p in every)
    assert all(shard_of(p, 3) == 0 for p in every[5:5 + len(odd)])


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
        got = list(r.records())
        assert list(r.counters.items()) == [("caplen > orig_len", 2), ("timestamp went backwards", 3)]
    assert len(got) == 3000 and [t[0] for t in got] == list(range(1, 3001))
    for i, (_idx, ts, lt, data, orig) in enumerate(got):
        sec, usec = struct.unpack_from("<II", recs[i])
        assert ts == sec + usec / 1e6 and lt == 1 and len(data) == 600 and orig == (599 if i % 1500 == 400 else 600)


def test_run_reads_records_and_counts_like_feed(tmp_path: Path) -> None:
    path = str(tmp_path / "r.pcap")
    pkts = _packets()
    write_pcap(path, pkts)
    run = Run(path, Options())
    n = len(list(run))
    per_packet = Pipeline(Options())
    m = 0
    with open_capture(path) as r:
        for p in r:
            m += len(per_packet.feed(p))
    m += len(per_packet.finish())
    assert n == m == 8
    assert run.summary.to_json() == per_packet.summary.to_json()
    assert run.summary.packets == len(pkts) and run.summary.last_ts == pytest.approx(pkts[-1].ts, abs=1e-6)


def test_fused_counts_complete_when_the_generator_is_closed_early(tmp_path: Path) -> None:
    path = str(tmp_path / "c.pcap")
    write_pcap(path, _packets())
    pipe = Pipeline(Options())
    with open_capture(path) as r:
        gen = pipe.feed_all(r.records())
        first = next(gen)
        gen.close()
        read = r.packets
    # every packet read was counted, the last one's time included (the fused path takes most)
    assert first.response is not None and pipe.summary.packets == read == first.response.last_index
    assert pipe.summary.last_ts == first.response.last_ts
