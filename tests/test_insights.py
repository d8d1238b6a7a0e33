"""Consumer lag (analyzer.insights): crafted fetch sessions with known lag, real captures,
the digest and full trees alike, state round trips, and the stats outputs."""
from __future__ import annotations

import csv
import io
import json
import struct
from pathlib import Path

import pytest

from analyzer.insights import ConsumerLag
from analyzer.stats import StatsAccumulator
from analyzer.stats_render import csv_rows, lag_table
from dissectors import digest
from dissectors.context import DecodeContext
from tests.checkgen import Wire

SHARED = Path(__file__).resolve().parents[2] / "shared" / "captures"
ROOT = Path(__file__).resolve().parents[1]


def _fetch(w: Wire, sid: int, epoch: int, offsets: dict[int, int], answer: list[tuple[int, int, int, int]], *,
           resp_sid: int = 0, error_code: int = 0, forgotten: list[int] | None = None, isolation: int = 1):
    """A Fetch v11 on topic "t": ``offsets`` partition -> fetch_offset asked; ``answer``:
    (partition, high_watermark, last_stable_offset, records returned) per partition answered."""
    req = {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 1 << 20,
           "isolation_level": isolation, "session_id": sid, "session_epoch": epoch,
           "topics": [{"topic": "t", "partitions": [{"partition": p, "fetch_offset": o}
                                                     for p, o in offsets.items()]}] if offsets else [],
           "forgotten_topics_data": [{"topic": "t", "partitions": forgotten}] if forgotten else []}
    resp = {"throttle_time_ms": 0, "error_code": error_code, "session_id": resp_sid,
            "responses": [{"topic": "t", "partitions": [
                {"partition_index": p, "error_code": 0, "high_watermark": hw, "last_stable_offset": lso}
                for p, hw, lso, _n in answer]}] if answer else []}
    parts = [{"topic": "t", "partition": p, "records": n, "bytes": 70 * n, "codec": "none", "crc_ok": True,
              "error": None} for p, _hw, _lso, n in answer]
    return w.ex(1, 11, req, resp, partitions=parts, latency_ms=5.0)


def _session_story() -> tuple[Wire, list]:
    w = Wire()
    exs = [
        # full fetch opening session 77: p0 from 100 (hw 130, lso 120, 10 records back), p1 caught up
        _fetch(w, 0, 0, {0: 100, 1: 50}, [(0, 130, 120, 10), (1, 50, 50, 0)], resp_sid=77),
        # incremental: p0 asks from 110; p1 left out of both request and answer
        _fetch(w, 77, 1, {0: 110}, [(0, 140, 140, 5)], resp_sid=77),
        # incremental, nothing asked anew: p1 gets news, p0 (at 115, hw 140) left out
        _fetch(w, 77, 2, {}, [(1, 60, 60, 0)], resp_sid=77),
        # incremental forgetting p1: only p0 stays
        _fetch(w, 77, 3, {}, [], resp_sid=77, forgotten=[1]),
        w.ex(11, 5, {"group_id": "g1", "member_id": "", "protocol_type": "consumer"},
             {"error_code": 0, "generation_id": 1}),
    ]
    return w, exs


def test_incremental_session_lag_is_known_between_full_fetches() -> None:
    _w, exs = _session_story()
    lag = ConsumerLag()
    for ex in exs:
        lag.add(ex)
    rows = {(r["topic"], r["partition"]): r for r in lag.result()}
    p0, p1 = rows[("t", 0)], rows[("t", 1)]
    t1, t2 = exs[0].response_time, exs[1].response_time
    # p0: 130-100, 140-110, 140-115 (left out), 140-115 (left out); committed: 120-100, 140-110, 25, 25
    assert (p0["samples"], p0["last"], p0["max"], p0["mean"]) == (4, 25, 30, 27.5)
    assert p0["max_time"] == t1 and p0["last_time"] == exs[3].response_time
    assert (p0["stable_last"], p0["stable_max"]) == (25, 30)
    # p1: 0, 0 (left out), 60-50; forgotten afterwards: no fourth sample
    assert (p1["samples"], p1["last"], p1["max"], p1["mean"]) == (3, 10, 10, 3.333)
    assert p1["max_time"] == exs[2].response_time and t2 < p1["max_time"]
    assert p0["group"] == p1["group"] == "g1" and p0["client_id"] == "checkgen"
    assert p0["isolation"] == "read_committed"


def test_session_error_and_sessionless_fetches_start_afresh() -> None:
    w = Wire()
    lag = ConsumerLag()
    for ex in (_fetch(w, 0, 0, {0: 0, 1: 0}, [(0, 10, 10, 0), (1, 7, 7, 0)], resp_sid=5),
               # the broker lost the session: no figure, the session is gone
               _fetch(w, 5, 1, {0: 0}, [], error_code=70),
               # an incremental request for a session the broker no longer has: only what it names
               _fetch(w, 5, 2, {0: 4}, [(0, 12, 12, 0)]),
               # sessionless (epoch -1), read_uncommitted
               _fetch(w, 0, -1, {1: 3}, [(1, 9, 9, 0)], isolation=0)):
        lag.add(ex)
    rows = {(r["topic"], r["partition"]): r for r in lag.result()}
    assert (rows[("t", 0)]["samples"], rows[("t", 0)]["last"], rows[("t", 0)]["max"]) == (2, 8, 10)
    assert (rows[("t", 1)]["samples"], rows[("t", 1)]["last"], rows[("t", 1)]["max"]) == (2, 6, 7)
    assert rows[("t", 0)]["group"] is None


def test_state_round_trip_and_merge_in_any_order() -> None:
    _w, exs = _session_story()
    w2 = Wire(conn_id=1, t0=1_700_000_100.0)        # later than the first connection
    other = [_fetch(w2, 0, -1, {0: 10}, [(0, 50, 50, 3)]), _fetch(w2, 0, -1, {0: 13}, [(0, 51, 51, 0)])]
    a, b = StatsAccumulator(), StatsAccumulator()
    for ex in exs:
        a.add(ex)
    for ex in other:
        b.add(ex)
    one = StatsAccumulator()
    for ex in exs + other:
        one.add(ex)
    ab = StatsAccumulator.from_state(json.loads(json.dumps(a.to_state()))).merge(
        StatsAccumulator.from_state(json.loads(json.dumps(b.to_state()))))
    ba = StatsAccumulator.from_state(b.to_state()).merge(StatsAccumulator.from_state(a.to_state()))
    want = one.result()["consumer_lag"]
    assert ab.result()["consumer_lag"] == ba.result()["consumer_lag"] == want
    p0 = [r for r in want if r["partition"] == 0][0]
    # the same client id on two connections: one row, figures of both (30, 30, 25, 25, 40, 38)
    assert (p0["samples"], p0["max"], p0["last"], p0["mean"]) == (6, 40, 38, 31.333)


def test_series_fold_keeps_the_max_and_stays_bounded() -> None:
    lag = ConsumerLag()
    from analyzer.insights import MAX_SERIES, _Lag
    g = lag.lags[("c", "t", 0)] = _Lag()
    for s in range(3 * MAX_SERIES):
        g.add(s % 7, None, 1_700_000_000.0 + s)
    assert len(g.series) == 3 * MAX_SERIES // 4 and g.width == 4   # 6,144 s in 4-s buckets
    assert max(g.series.values()) == 6 and g.max == 6 and g.n == 3 * MAX_SERIES


def fetch_v7_request(forgotten: list[int]) -> tuple[bytes, int]:
    """Fetch v7 request bytes (header v1): session 9 epoch 3, topic "t" partition 0 at 42,
    forgetting ``forgotten`` partitions of "t"."""
    header = struct.pack(">hhi", 1, 7, 1) + struct.pack(">h", 1) + b"c"
    body = struct.pack(">iiiibii", -1, 500, 1, 1 << 20, 1, 9, 3)
    body += struct.pack(">i", 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", 1) + struct.pack(">iqqi", 0, 42, -1, 1 << 20)
    body += struct.pack(">i", 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", len(forgotten))
    body += b"".join(struct.pack(">i", p) for p in forgotten)
    return header + body, len(header)


def test_digest_keeps_what_lag_reads_and_forgotten_partitions_are_read_in_full() -> None:
    data, hl = fetch_v7_request([1, 2])
    tree = digest.digest_request(data, hl, DecodeContext())
    body = tree.child("body")
    assert (body.get("isolation_level"), body.get("session_id"), body.get("session_epoch")) == (1, 9, 3)
    p = body.child("topics").children[0].child("partitions").children[0]
    assert (p.get("partition"), p.get("fetch_offset")) == (0, 42)
    forgotten = body.child("forgotten_topics_data")
    assert len(forgotten.children) == 1 and not forgotten.children[0].children   # kept empty

    class _Req:
        pass
    from analyzer.model import Exchange
    ex = Exchange.__new__(Exchange)
    ex.request = _Req()                 # type: ignore[assignment]
    ex.request.data = data              # type: ignore[attr-defined]
    assert ConsumerLag._forgotten(ex, body) == [("t", 1), ("t", 2)]


def test_stats_outputs_carry_the_lag() -> None:
    _w, exs = _session_story()
    acc = StatsAccumulator()
    for ex in exs:
        acc.add(ex)
    res = acc.result()
    t = lag_table(res)
    assert t is not None and t.rows[0][:6] == ["g1 / checkgen", "t", "0", "25", "30", "27.5"]
    header, rows = csv_rows(res, "consumer_lag")
    assert header[:4] == ["client_id", "group", "topic", "partition"] and len(rows) == 2
    assert acc.lag.series()["g1 t-0"][0][1] == 30


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/captures not present")
def test_real_group_consumers_lag_and_groups(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = str(SHARED / "group_rdkafka_mock.pcap")
    out = subprocess.run([sys.executable, "-m", "analyzer", "stats", "-f", "json", path],
                         capture_output=True, text=True, check=True).stdout
    lag = json.loads(out)["consumer_lag"]
    got = [(r["client_id"], r["group"], r["topic"], r["partition"], r["samples"], r["last"], r["max"])
           for r in lag]
    # two rdkafka members of lab-group, two partitions each, behind by 30 records at first
    assert got == [("lab-rdkafka-member0", "lab-group", "grp-mock", 0, 26, 0, 30),
                   ("lab-rdkafka-member0", "lab-group", "grp-mock", 2, 26, 0, 30),
                   ("lab-rdkafka-member1", "lab-group", "grp-mock", 1, 27, 0, 30),
                   ("lab-rdkafka-member1", "lab-group", "grp-mock", 3, 27, 0, 30)]
    text = subprocess.run([sys.executable, "-m", "analyzer", "stats", "-f", "csv", "--section", "consumer_lag",
                           path], capture_output=True, text=True, check=True).stdout
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [(r["client_id"], r["partition"], r["max"]) for r in rows] == [(g[0], str(g[3]), str(g[6])) for g in got]


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/captures not present")
def test_real_consumer_started_before_the_capture() -> None:
    from analyzer.pipeline import Options, Run

    # an rdkafka consumer of mid-grp started before the capture (topic ids never resolved),
    # fetching sessionless (Fetch v16, epoch -1) three partitions read_committed: 104 answers
    rows = {}
    for mode in ("lite", "full"):
        lag = ConsumerLag()
        for ex in Run(str(SHARED / "midstream_rdkafka_tansu.pcap"), Options(decode=mode), DecodeContext()):
            lag.add(ex)
        rows[mode] = lag.result()
    assert rows["lite"] == rows["full"]
    assert [(r["group"], r["topic"][:8], r["partition"], r["samples"], r["max"], r["last"], r["isolation"])
            for r in rows["lite"]] == [
        ("mid-grp", "01a2006b", 0, 104, 5, 1, "read_committed"),
        ("mid-grp", "01a2006b", 1, 104, 4, 3, "read_committed"),
        ("mid-grp", "01a2006b", 2, 104, 3, 0, "read_committed")]
    # a deepflow capture: one incremental Fetch v12 (session epoch 13344) asks zqy-test-0 from 36
    # and its answer has no news: no high watermark seen, so no figure (lag is never guessed)
    lag = ConsumerLag()
    for ex in Run(str(SHARED / "public" / "deepflow__01-fetch-v12-ok.pcap"), Options(decode="lite"), DecodeContext()):
        lag.add(ex)
    assert [(r["topic"], r["partition"], r["samples"]) for r in lag.result()] == []
