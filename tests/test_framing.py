"""Kafka framing through the whole capture -> frames path, on crafted and real captures (the
framer's own cases are Rust unit tests in core/src/frame.rs)."""
from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest

from tests.pcapgen import (
    StreamData,
    StreamGap,
    TcpFlow,
    kafka_request,
    kafka_response,
    run_pipeline,
    write_pcap,
)

SHARED = Path(__file__).resolve().parents[2] / "shared" / "captures"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/captures not present")
C, S = ("10.0.0.1", 40000), ("10.0.0.2", 9092)


def requests(n: int, body: int = 40, start: int = 1) -> list[bytes]:
    return [kafka_request(3, 12, start + i, "client-x", b"\xff" * (body + i)) for i in range(n)]


def run(tmp_path, pkts, snaplen=0):
    path = tmp_path / "f.pcap"
    write_pcap(str(path), pkts, snaplen=snaplen)
    return run_pipeline(str(path))


def corr(frame) -> int:
    """Correlation id of a request frame."""
    return int.from_bytes(frame.data[4:8], "big")


def rcorr(frame) -> int:
    """Correlation id of a response frame."""
    return int.from_bytes(frame.data[0:4], "big")


def response_plausible(h: bytes) -> bool:
    return len(h) >= 4 and int.from_bytes(h[:4], "big") < 100


def stream_len(events, direction=0) -> int:
    return sum(len(e.data) if isinstance(e, StreamData) else e.length
               for e in events if isinstance(e, StreamData | StreamGap) and e.direction == direction)


def accounted(r, direction=0) -> int:
    frames = [f for f in r["frames"] if f.direction == direction]
    return sum(4 + len(f.data) for f in frames)


def test_frames_split_byte_by_byte(tmp_path):
    f = TcpFlow(C, S)
    reqs = requests(3)
    hs = f.handshake()
    pkts = hs + f.send(0, b"".join(reqs), mss=1) + f.fin(0) + f.fin(1)
    r = run(tmp_path, pkts)
    frames = r["frames"]
    assert [fr.data for fr in frames] == [q[4:] for q in reqs]
    # packet numbers: handshake is 1-3, then one packet per byte
    first = 4
    for q, fr in zip(reqs, frames, strict=True):
        assert (fr.first_index, fr.last_index) == (first, first + len(q) - 1)
        assert fr.first_ts == pytest.approx(pkts[first - 1].ts)
        assert fr.last_ts == pytest.approx(pkts[first + len(q) - 2].ts)
        assert fr.size == len(q) - 4 and not fr.truncated
        first += len(q)
    assert [fr.stream_offset for fr in frames] == [0, len(reqs[0]), len(reqs[0]) + len(reqs[1])]
    assert r["framing"].skipped == {}


def test_many_frames_per_segment_and_large_frames(tmp_path):
    f = TcpFlow(C, S)
    small = requests(50)
    big = kafka_response(7, bytes(range(256)) * 400)         # 102,404 bytes
    pkts = f.handshake() + f.send(0, b"".join(small)) + f.send(1, big, mss=1460) + f.fin(0) + f.fin(1)
    r = run(tmp_path, pkts)
    req = [fr for fr in r["frames"] if fr.direction == 0]
    resp = [fr for fr in r["frames"] if fr.direction == 1]
    assert [corr(fr) for fr in req] == list(range(1, 51))
    assert {(fr.first_index, fr.last_index) for fr in req} == {(4, 4)}
    assert len(resp) == 1 and resp[0].data == big[4:]
    nseg = -(-len(big) // 1460)
    assert (resp[0].first_index, resp[0].last_index) == (5, 4 + nseg)


def test_lost_segment_inside_frame_keeps_sync(tmp_path):
    f = TcpFlow(C, S)
    reqs = requests(3, body=3000)
    hs = f.handshake()
    segs = f.send(0, b"".join(reqs), mss=1000)
    del segs[1]                                   # bytes 1000..1999: inside request 1
    r = run(tmp_path, hs + segs + f.fin(0) + f.fin(1))
    fr = r["frames"]
    assert [corr(x) for x in fr] == [1, 2, 3]
    assert fr[0].truncated and fr[0].size == len(reqs[0]) - 4 and fr[0].data == reqs[0][4:1000]
    assert not fr[1].truncated and fr[1].data == reqs[1][4:]
    assert r["framing"].skipped == {"gap": 1000 + (len(reqs[0]) - 2000)}
    assert accounted(r) + sum(r["framing"].skipped.values()) == stream_len(r["events"])


def test_lost_segment_across_boundary_resyncs(tmp_path):
    f = TcpFlow(C, S)
    reqs = requests(6, body=600)                  # frames longer than a segment
    data = b"".join(reqs)
    hs = f.handshake()
    segs = f.send(0, data, mss=500)
    # lose the segment holding the end of request 2 and the start of request 3
    b2 = len(reqs[0]) + len(reqs[1])              # offset where request 3 starts
    lost = next(i for i, s in enumerate(segs) if (s.seq - hs[0].seq - 1) <= b2 - 2 < (s.seq - hs[0].seq - 1) + 500)
    lo = segs[lost].seq - hs[0].seq - 1
    del segs[lost]
    r = run(tmp_path, hs + segs + f.fin(0) + f.fin(1))
    got = [(corr(x), x.truncated) for x in r["frames"]]
    gaps = [(e.offset, e.length) for e in r["events"] if isinstance(e, StreamGap)]
    assert gaps == [(lo, 500)]
    # request 2 truncated (size known), request 3 lost, the framer resyncs at request 4
    starts = [sum(len(q) for q in reqs[:i]) for i in range(6)]
    in_gap = [i for i in range(6) if lo <= starts[i] < lo + 500]
    assert in_gap == [2]
    assert got == [(1, False), (2, True), (4, False), (5, False), (6, False)]
    sk = r["framing"].skipped
    assert set(sk) == {"gap"}
    assert accounted(r) + sk["gap"] == stream_len(r["events"])
    resynced = [x for x in r["frames"] if corr(x) == 4][0]
    assert resynced.stream_offset == starts[3]


def test_garbage_desync_and_midstream_start(tmp_path):
    f = TcpFlow(C, S)
    f.handshake()                                         # not captured: mid-stream
    reqs = requests(4)
    junk = b"\x7f" * 50                                   # size 0x7f7f7f7f > max
    tail_of_earlier = reqs[0][10:]                        # starts mid-frame
    pkts = f.send(0, tail_of_earlier + reqs[1] + junk + reqs[2] + reqs[3], mss=64)
    r = run(tmp_path, pkts)
    assert [corr(x) for x in r["frames"]] == [2, 3, 4]
    sk = r["framing"].skipped
    assert sk == {"before first frame": len(tail_of_earlier), "desync": len(junk)}
    assert accounted(r) + sum(sk.values()) == stream_len(r["events"])


def test_snaplen_cut_frames_stay_in_sync(tmp_path):
    f = TcpFlow(C, S)
    hs = f.handshake()
    reqs = requests(5, body=200)
    pkts = hs
    for q in reqs:
        pkts += f.send(0, q)
    pkts += f.send(1, kafka_response(9, b"r" * 500)) + f.fin(0) + f.fin(1)
    r = run(tmp_path, pkts, snaplen=14 + 20 + 20 + 30)
    req = [x for x in r["frames"] if x.direction == 0]
    assert [(corr(x), x.truncated, x.size, len(x.data)) for x in req] == [
        (i + 1, True, len(q) - 4, 26) for i, q in enumerate(reqs)]
    assert [x.last_index for x in req] == [4, 5, 6, 7, 8]
    resp = [x for x in r["frames"] if x.direction == 1]
    assert len(resp) == 1 and resp[0].size == 504 and resp[0].truncated
    assert r["framing"].skipped == {"gap": sum(len(q) - 30 for q in reqs) + 508 - 30}
    assert r["framing"].truncated_frames == 6


def test_retransmitted_and_reordered_frames(tmp_path):
    f = TcpFlow(C, S)
    hs = f.handshake()
    reqs = requests(8, body=100)
    segs = f.send(0, b"".join(reqs), mss=97)
    segs[2], segs[5] = segs[5], segs[2]
    segs.insert(7, replace(segs[1]))
    r = run(tmp_path, hs + segs + f.fin(0) + f.fin(1))
    assert [corr(x) for x in r["frames"]] == list(range(1, 9))
    assert not any(x.truncated for x in r["frames"]) and r["framing"].skipped == {}


# -- real captures ---------------------------------------------------------------------

def _shared_captures() -> list[Path]:
    if not SHARED.is_dir():
        return []
    return sorted(p for p in SHARED.iterdir() if p.suffix in (".pcap", ".pcapng"))


@needs_shared
@pytest.mark.parametrize("path", _shared_captures(), ids=lambda p: p.name)
def test_real_capture_frame_counts(path):
    truth = json.loads(path.with_suffix(".tshark.json").read_text())
    ports = set(truth["decode_as_ports"])
    fc = truth["framing_check"]
    r = run_pipeline(str(path), ports=ports)
    req = resp = 0
    for fr in r["frames"]:
        dst = fr.conn.b if fr.direction == 0 else fr.conn.a
        if dst.port in ports:
            req += 1
        elif (fr.conn.a if fr.direction == 0 else fr.conn.b).port in ports:
            resp += 1
    # counts agree everywhere here, including the snaplen and mid-stream captures
    assert (req, resp) == (fc["requests_total"], fc["responses_total"])
    if fc.get("pdus"):
        mine = sorted(("req" if (f.conn.b if f.direction == 0 else f.conn.a).port in ports else "resp",
                       f.first_index, f.conn.id, f.size) for f in r["frames"])
        theirs = sorted((p[0], p[1], p[2], p[6]) for p in fc["pdus"])
        assert mine == theirs        # same first packet, tcp.stream and length for every PDU
    assert r["reasm"].counters.get("overlap differs", 0) == 0
    assert len(r["reasm"].conns) == truth["tcp_streams"]
    total = sum(len(e.data) if isinstance(e, StreamData) else e.length
                for e in r["events"] if isinstance(e, StreamData | StreamGap))
    assert sum(4 + len(f.data) for f in r["frames"]) + sum(r["framing"].skipped.values()) == total
    if path.name.startswith("snap96"):
        assert r["framing"].truncated_frames == fc["stats"]["pdus_with_uncaptured_bytes"]
    else:
        assert r["framing"].truncated_frames == 0 and r["framing"].skipped == {}


@needs_shared
def test_public_captures_run_clean():
    pub = SHARED / "public"
    for path in sorted(pub.glob("*.pcap*")):
        r = run_pipeline(str(path))
        assert r["reader"].truncated is None, path.name
        assert r["frames"], path.name
        assert dict(r["skips"]) == {}, path.name
    r = run_pipeline(str(pub / "go-sniffer-pr39__kafka.pcap"))
    # 16 trailer bytes per record (caplen > orig_len) are not payload
    assert len(r["reasm"].conns) == 2
    assert [f.size for f in r["frames"] if f.direction == 0][-1] == 1120


# -- robustness ------------------------------------------------------------------------


def test_mutated_captures_never_raise(tmp_path):
    """Bit flips, truncations, duplicated and dropped records: CaptureError at worst."""
    from analyzer._core import CaptureError
    f = TcpFlow(C, S)
    pkts = f.handshake() + f.send(0, b"".join(requests(20, body=150)), mss=300)
    pkts += f.send(1, b"".join(kafka_response(i, b"\x00" * 90) for i in range(20)), mss=256)
    pkts += f.fin(0) + f.fin(1)
    clean = tmp_path / "clean.pcap"
    write_pcap(str(clean), pkts)
    base = clean.read_bytes()
    rng = random.Random(5)
    bad = tmp_path / "bad.pcap"
    outcomes = {"ok": 0, "error": 0, "truncated": 0}
    for _ in range(150):
        b = bytearray(base)
        for _ in range(rng.randrange(1, 20)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        if rng.random() < 0.3:
            del b[rng.randrange(24, len(b)):]
        if rng.random() < 0.3:
            i, j = sorted(rng.randrange(24, len(b)) for _ in range(2))
            b[j:j] = b[i:j]
        bad.write_bytes(bytes(b))
        try:
            r = run_pipeline(str(bad))
        except CaptureError as e:
            assert "\n" not in str(e)
            outcomes["error"] += 1
            continue
        outcomes["truncated" if r["reader"].truncated else "ok"] += 1
    assert outcomes["ok"] > 10 and outcomes["truncated"] > 10
