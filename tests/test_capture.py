"""Capture reading: pcap / pcapng / gzip, damaged files, oddities kept and counted."""
from __future__ import annotations

import struct
from pathlib import Path

import pytest

from analyzer._core import CaptureError, open_capture
from analyzer.model import Packet
from tests.pcapgen import (
    RawPacket,
    TcpFlow,
    encap,
    frame_bytes,
    ip_packet,
    kafka_request,
    pcapng_block,
    write_pcap,
    write_pcapng,
)

SHARED = Path(__file__).resolve().parents[2] / "shared" / "captures"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/captures not present")


def _flow(n_req: int = 3, ts: float = 1_700_000_000.25):
    f = TcpFlow(("10.0.0.1", 40000), ("10.0.0.2", 9092), ts=ts)
    pkts = f.handshake()
    for i in range(n_req):
        pkts += f.send(0, kafka_request(18, 3, i + 1))
    pkts += f.fin(0) + f.fin(1)
    return pkts


def _read(path):
    with open_capture(str(path)) as r:
        pkts = list(map(Packet._make, r))
    return r, pkts


@pytest.mark.parametrize("nanos", [False, True])
@pytest.mark.parametrize("big_endian", [False, True])
def test_pcap_variants(tmp_path, nanos, big_endian):
    pkts = _flow()
    p = tmp_path / "x.pcap"
    write_pcap(str(p), pkts, nanos=nanos, big_endian=big_endian)
    r, got = _read(p)
    assert r.format == "pcap" and r.linktypes == [1]
    assert [g.index for g in got] == list(range(1, len(pkts) + 1))
    for g, want in zip(got, pkts, strict=True):
        data, orig = frame_bytes(want, 1)
        assert g.data == data and g.orig_len == orig and g.linktype == 1
        assert g.ts == pytest.approx(want.ts, abs=1e-6)
    assert got[0].ts == pytest.approx(1_700_000_000.25)
    assert r.truncated is None and r.counters == {}
    assert r.bytes_read() == r.size == p.stat().st_size


def test_nanosecond_precision_kept(tmp_path):
    p = tmp_path / "ns.pcap"
    write_pcap(str(p), [RawPacket(1_600_000_000.000000123, b"\0" * 20)], linktype=101, nanos=True)
    _, got = _read(p)
    # the fraction survives as nanoseconds (float precision ~ 2e-7 at this epoch)
    assert got[0].ts == pytest.approx(1_600_000_000.000000123, abs=5e-7)
    assert got[0].linktype == 101


@pytest.mark.parametrize("big_endian", [False, True])
def test_pcapng_two_interfaces_unknown_blocks(tmp_path, big_endian):
    pkts = _flow()
    for i, p in enumerate(pkts):
        p.iface = i % 2
    unknown = pcapng_block(0x0BADBEEF, b"junk junk", big_endian)
    nrb = pcapng_block(4, b"\0\0\0\0", big_endian)
    isb = pcapng_block(5, b"\0" * 12, big_endian)
    path = tmp_path / "x.pcapng"
    write_pcapng(str(path), pkts, interfaces=(1, 113), big_endian=big_endian, tsresol=9,
                 extra_blocks=(unknown, nrb, isb))
    r, got = _read(path)
    assert r.format == "pcapng" and r.linktypes == [1, 113]
    assert len(got) == len(pkts)
    assert [g.linktype for g in got] == [1 if i % 2 == 0 else 113 for i in range(len(pkts))]
    assert got[1].data == encap(ip_packet(pkts[1]), 113)
    assert got[2].ts == pytest.approx(pkts[2].ts, abs=1e-6)
    assert r.counters == {"unknown pcapng block": 1}


def test_pcapng_power_of_two_resolution_and_sections(tmp_path):
    pkts = _flow(1)
    a, b = tmp_path / "a.pcapng", tmp_path / "b.pcapng"
    write_pcapng(str(a), pkts[:3], tsresol=0x80 | 20)          # 2^-20 s units
    write_pcapng(str(b), pkts[3:], interfaces=(101,), big_endian=True)
    both = tmp_path / "both.pcapng"
    both.write_bytes(a.read_bytes() + b.read_bytes())           # two sections
    r, got = _read(both)
    assert len(got) == len(pkts)
    assert got[0].ts == pytest.approx(pkts[0].ts, abs=2e-6)
    assert [g.linktype for g in got] == [1, 1, 1] + [101] * (len(pkts) - 3)
    assert got[3].data == ip_packet(pkts[3])                    # interface 0 of section 2
    assert r.linktypes == [1, 101]


def test_pcapng_simple_and_obsolete_packet_blocks(tmp_path):
    pkts = _flow(1)
    d0, o0 = frame_bytes(pkts[0], 1)
    d1, o1 = frame_bytes(pkts[1], 1)
    t = round(pkts[1].ts * 1e6)
    path = tmp_path / "old.pcapng"
    write_pcapng(str(path), [], extra_blocks=(
        pcapng_block(2, struct.pack("<HHIIII", 0, 0, t >> 32, t & 0xFFFFFFFF, len(d1), o1) + d1),  # PB
        pcapng_block(3, struct.pack("<I", o0) + d0),                                               # SPB
    ))
    r, got = _read(path)
    assert [g.data for g in got] == [d1, d0]
    assert got[0].ts == pytest.approx(pkts[1].ts, abs=1e-6)
    assert got[1].ts == got[0].ts     # SPB has no timestamp: the previous one is kept
    assert got[1].orig_len == o0 and got[1].index == 2


@pytest.mark.parametrize("ng", [False, True])
def test_gzip_capture(tmp_path, ng):
    pkts = _flow()
    path = tmp_path / "x.gz"
    if ng:
        write_pcapng(str(path), pkts, gz=True)
    else:
        write_pcap(str(path), pkts, gz=True)
    r, got = _read(path)
    assert r.compressed and len(got) == len(pkts)
    assert got[-1].data == frame_bytes(pkts[-1], 1)[0]
    assert r.bytes_read() == path.stat().st_size


def test_cut_mid_record_keeps_everything_before(tmp_path):
    pkts = _flow(5)
    path = tmp_path / "cut.pcap"
    write_pcap(str(path), pkts)
    whole = path.read_bytes()
    path.write_bytes(whole[:-10])
    r, got = _read(path)
    assert len(got) == len(pkts) - 1
    assert r.truncated == f"capture ends inside packet {len(pkts)}"
    # cut inside the record header
    last = len(frame_bytes(pkts[-1], 1)[0]) + 16
    path.write_bytes(whole[:-last + 5])
    r, got = _read(path)
    assert len(got) == len(pkts) - 1
    assert r.truncated == f"capture ends inside the header of packet {len(pkts)}"
    with pytest.raises(CaptureError, match=f"cut.pcap: capture ends inside the header of packet {len(pkts)}"):
        list(open_capture(str(path), strict=True))


def test_cut_gzip_and_pcapng(tmp_path):
    pkts = _flow(5)
    path = tmp_path / "cut.pcapng"
    write_pcapng(str(path), pkts)
    whole = path.read_bytes()
    path.write_bytes(whole[:-7])
    r, got = _read(path)
    assert len(got) == len(pkts) - 1 and r.truncated == f"capture ends inside packet {len(pkts)}"
    gz = tmp_path / "cut.pcap.gz"
    write_pcap(str(gz), pkts, gz=True)
    gzb = gz.read_bytes()
    gz.write_bytes(gzb[:len(gzb) // 2])
    r, got = _read(gz)
    assert 0 < len(got) < len(pkts)
    assert r.truncated is not None and r.truncated.startswith(f"capture ends inside packet {len(got) + 1}")


def test_bad_pcapng_block_length(tmp_path):
    pkts = _flow(2)
    path = tmp_path / "bad.pcapng"
    write_pcapng(str(path), pkts[:3], extra_blocks=(struct.pack("<II", 6, 13) + b"\0" * 8,))
    r, got = _read(path)
    assert got == []
    assert r.truncated is not None and r.truncated.startswith("bad pcapng block length 13 at offset 60 (after packet 0)")
    first = struct.pack("<II", 0x0A0D0D0A, 7) + b"\x4d\x3c\x2b\x1a" + b"\0" * 20
    path.write_bytes(first)
    with pytest.raises(CaptureError, match=r"bad\.pcapng: bad pcapng block length 7 at offset 0"):
        open_capture(str(path)).__iter__().__next__()


def test_not_a_capture_and_missing(tmp_path):
    p = tmp_path / "notes.txt"
    p.write_text("hello, this is not a capture\n")
    with pytest.raises(CaptureError, match=r"notes\.txt: not a pcap or pcapng file$"):
        open_capture(str(p))
    empty = tmp_path / "empty.pcap"
    empty.write_bytes(b"")
    with pytest.raises(CaptureError, match="not a pcap or pcapng file"):
        open_capture(str(empty))
    with pytest.raises(CaptureError, match="cannot open"):
        open_capture(str(tmp_path / "nope.pcap"))
    bad_gz = tmp_path / "bad.gz"
    bad_gz.write_bytes(b"\x1f\x8b\x08\x00garbage-garbage")
    with pytest.raises(CaptureError, match=r"bad\.gz: bad gzip data"):
        open_capture(str(bad_gz))


def test_unsupported_link_type(tmp_path):
    p = tmp_path / "usb.pcap"
    write_pcap(str(p), [RawPacket(1.0, b"\x01\x02\x03")], linktype=147)
    with pytest.raises(CaptureError, match=r"usb\.pcap: unsupported link type 147 \(packet 1\)"):
        list(open_capture(str(p)))
    # a pcapng with one usable interface keeps going (net counts the others)
    ng = tmp_path / "mixed.pcapng"
    write_pcapng(str(ng), [RawPacket(1.0, b"\x01", iface=1), RawPacket(2.0, b"\x02", iface=0)],
                 interfaces=(1, 147))
    _, got = _read(ng)
    assert [g.linktype for g in got] == [147, 1]


def test_caplen_above_orig_len_and_backwards_time(tmp_path):
    p = tmp_path / "odd.pcap"
    write_pcap(str(p), [RawPacket(10.0, b"\x45" + b"\0" * 59, orig_len=40),
                        RawPacket(9.0, b"\x45" + b"\0" * 39),
                        RawPacket(11.0, b"\x45" + b"\0" * 39)], linktype=101)
    r, got = _read(p)
    assert [g.ts for g in got] == [10.0, 9.0, 11.0]
    assert len(got[0].data) == 60 and got[0].orig_len == 40
    assert r.counters == {"caplen > orig_len": 1, "timestamp went backwards": 1}


@needs_shared
def test_real_captures_read():
    r, got = _read(SHARED / "concurrent_mixed_tansu.pcapng")
    assert len(got) == 1177 and r.format == "pcapng" and r.truncated is None
    r, got = _read(SHARED / "public" / "go-sniffer-pr39__kafka.pcap")
    assert len(got) == 20 and r.linktypes == [113]
    assert r.counters == {"caplen > orig_len": 20}
    assert len(got[0].data) == 92 and got[0].orig_len == 76
    r, got = _read(SHARED / "public" / "ndpi__kafka.pcapng")
    assert len(got) == 41 and r.linktypes == [1, 1]
    assert r.counters == {"timestamp went backwards": 1}
    r, got = _read(SHARED / "public" / "deepflow__01-fetch-v12-unknown.pcap")
    assert len(got) == 2 and 12 < got[1].ts - got[0].ts < 14
