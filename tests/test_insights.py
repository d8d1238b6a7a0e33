"""The stories: consumer lag (the lag table's rows, from the core's Fetch sessions, and the
query over them), producers (the batches table) and consumer groups (analyzer.sinks.insights):
crafted exchanges with known figures, real captures, the lean and full trees alike, and the
stats outputs."""
from __future__ import annotations

import csv
import io
import json
import struct
from pathlib import Path

import pytest

from analyzer import engine, figures
from analyzer.sinks.stats import Stories
from analyzer.sinks.stats_render import csv_rows, lag_table
from dissectors import kafka
from dissectors.context import DecodeContext
from tests import rows_reference
from tests.checkgen import Wire
from tests.conftest import group_counts_of
from tests.lean import lean_request

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


def _lag(exchanges: list, names: dict | None = None) -> list:
    """stats' consumer lag of ``exchanges`` (in order): the query over their rows of the lag
    table (the core's Fetch sessions, fed the front's rows)."""
    from tests.conftest import figures_db

    return figures.consumer_lag(engine.query_of(figures_db(exchanges, names=names)))


def test_incremental_session_lag_is_known_between_full_fetches() -> None:
    _w, exs = _session_story()
    rows = {(r["topic"], r["partition"]): r for r in _lag(exs)}
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
    exs = [_fetch(w, 0, 0, {0: 0, 1: 0}, [(0, 10, 10, 0), (1, 7, 7, 0)], resp_sid=5),
           # the broker lost the session: no figure, the session is gone
           _fetch(w, 5, 1, {0: 0}, [], error_code=70),
           # an incremental request for a session the broker no longer has: only what it names
           _fetch(w, 5, 2, {0: 4}, [(0, 12, 12, 0)]),
           # sessionless (epoch -1), read_uncommitted
           _fetch(w, 0, -1, {1: 3}, [(1, 9, 9, 0)], isolation=0)]
    rows = {(r["topic"], r["partition"]): r for r in _lag(exs)}
    assert (rows[("t", 0)]["samples"], rows[("t", 0)]["last"], rows[("t", 0)]["max"]) == (2, 8, 10)
    assert (rows[("t", 1)]["samples"], rows[("t", 1)]["last"], rows[("t", 1)]["max"]) == (2, 6, 7)
    assert rows[("t", 0)]["group"] is None


def test_two_connections_of_one_client_and_the_stories_state() -> None:
    _w, exs = _session_story()
    w2 = Wire(conn_id=1, t0=1_700_000_100.0)        # later than the first connection
    other = [_fetch(w2, 0, -1, {0: 10}, [(0, 50, 50, 3)]), _fetch(w2, 0, -1, {0: 13}, [(0, 51, 51, 0)])]
    # each connection's session followed apart, in any order of the rows
    want = _lag(exs + other)
    assert _lag(other + exs) == want
    p0 = [r for r in want if r["partition"] == 0][0]
    # the same client id on two connections: one row, figures of both (30, 30, 25, 25, 40, 38)
    assert (p0["samples"], p0["max"], p0["last"], p0["mean"]) == (6, 40, 38, 31.333)
    # the other stories travel and merge alike (the group's generation, in every order)
    a, b = Stories().add_all(exs), Stories().add_all(other)
    one = Stories().add_all(exs + other)
    ab = Stories.from_state(json.loads(json.dumps(a.to_state()))).merge(
        Stories.from_state(json.loads(json.dumps(b.to_state()))))
    ba = Stories.from_state(b.to_state()).merge(Stories.from_state(a.to_state()))
    counts = group_counts_of(exs + other)
    assert ab.result(counts) == ba.result(counts) == one.result(counts)
    assert [g["group_id"] for g in one.result(counts)["consumer_groups"]] == ["g1"]


def test_lag_points_keep_the_peaks_within_their_cap() -> None:
    w = Wire()
    # one sessionless partition whose lag goes 0..9 and back, 20 answers
    lags = [*range(10), *range(9, -1, -1)]
    exs = [_fetch(w, 0, -1, {0: 100}, [(0, 100 + n, 100 + n, 0)], isolation=0) for n in lags]
    from tests.conftest import figures_db

    query = engine.query_of(figures_db(exs))
    (pts,) = figures.lag_points(query).values()
    assert [v for _t, v in pts] == lags
    # at most 6: runs of 4 neighbours, the highest of each at its own time
    (few,) = figures.lag_points(query, cap=6).values()
    assert [v for _t, v in few] == [3, 7, 9, 7, 3] and few[2][0] == min(t for t, v in pts if v == 9)


def fetch_v7_request(forgotten: list[int]) -> tuple[bytes, int]:
    """Fetch v7 request bytes (header v1): session 9 epoch 3, topic "t" partition 0 at 42,
    forgetting ``forgotten`` partitions of "t"."""
    header = struct.pack(">hhi", 1, 7, 1) + struct.pack(">h", 1) + b"c"
    body = struct.pack(">iiiibii", -1, 500, 1, 1 << 20, 1, 9, 3)
    body += struct.pack(">i", 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", 1) + struct.pack(">iqqi", 0, 42, -1, 1 << 20)
    body += struct.pack(">i", 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", len(forgotten))
    body += b"".join(struct.pack(">i", p) for p in forgotten)
    return header + body, len(header)


def test_lean_tree_keeps_what_lag_reads_and_the_forgotten_partitions() -> None:
    data, hl = fetch_v7_request([1, 2])
    tree = lean_request(data, hl, DecodeContext())
    body = tree.child("body")
    assert (body.get("isolation_level"), body.get("session_id"), body.get("session_epoch")) == (1, 9, 3)
    # the partitions asked: its body's rows, as the full decoder's (the topics array left out)
    full = kafka.decode_request(data, DecodeContext()).child("body")
    assert full is not None
    rows_reference.fetch_request_rows(full)
    assert body.extra["fetch"] == full.extra["fetch"] and body.child("topics") is None
    assert body.extra["fetch"][0][:1] + body.extra["fetch"][0][2:] == ("t", 0, 42)
    # the forgotten topics whole, as the full decoder has them (no decoding again)
    forgotten = body.child("forgotten_topics_data")
    assert [(t.get("topic"), [e.value for e in t.child("partitions").children]) for t in forgotten.children] \
        == [("t", [1, 2])]


def test_stats_outputs_carry_the_lag() -> None:
    _w, exs = _session_story()
    from tests.conftest import stats_of

    res = stats_of(exs)
    t = lag_table(res)
    assert t is not None and t.rows[0][:6] == ["g1 / checkgen", "t", "0", "25", "30", "27.5"]
    header, rows = csv_rows(res, "consumer_lag")
    assert header[:4] == ["client_id", "group", "topic", "partition"] and len(rows) == 2
    from tests.conftest import figures_db

    assert figures.lag_points(engine.query_of(figures_db(exs)))["g1 t-0"][0][1] == 30


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/captures not present")
def test_real_group_consumers_lag_and_groups() -> None:
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
        run = Run(str(SHARED / "midstream_rdkafka_tansu.pcap"), Options(decode=mode), DecodeContext())
        rows[mode] = _lag(list(run), run.ctx.topic_names)
    assert rows["lite"] == rows["full"]
    assert [(r["group"], r["topic"][:8], r["partition"], r["samples"], r["max"], r["last"], r["isolation"])
            for r in rows["lite"]] == [
        ("mid-grp", "01a2006b", 0, 104, 5, 1, "read_committed"),
        ("mid-grp", "01a2006b", 1, 104, 4, 3, "read_committed"),
        ("mid-grp", "01a2006b", 2, 104, 3, 0, "read_committed")]
    # a deepflow capture: one incremental Fetch v12 (session epoch 13344) asks zqy-test-0 from 36
    # and its answer has no news: no high watermark seen, so no figure (lag is never guessed)
    exs = list(Run(str(SHARED / "public" / "deepflow__01-fetch-v12-ok.pcap"), Options(decode="lite"), DecodeContext()))
    assert any(ex.api_key == 1 for ex in exs) and _lag(exs) == []


# -- producers -------------------------------------------------------------------------------

T0 = 1_700_000_000_000


def _batch(codec: int, n: int, pid: int = -1, epoch: int = -1, seq: int = -1, txn: bool = False) -> bytes:
    """A v2 batch built by kafka-python (an independent implementation): records 7 ms apart."""
    from kafka.record.memory_records import MemoryRecordsBuilder

    b = MemoryRecordsBuilder(2, codec, 1 << 20, transactional=txn, producer_id=pid, producer_epoch=epoch,
                             base_sequence=seq)
    for i in range(n):
        assert b.append(T0 + i * 7, b"k%d" % i, b"value %d " % i + b"x" * 200, []) is not None
    b.close()
    return bytes(b.buffer())


def _produce(w: Wire, batches: list[tuple[int, bytes]], acks: int = -1, txn: str | None = None,
             client_id: str = "p1"):
    """A Produce v9 exchange whose request data holds ``batches`` ((partition, batch bytes) each, of
    topic "t") at the offsets its records fields name."""
    from dissectors.field import Field

    data = b"\x00" * 16
    parts = []
    for p, raw in batches:
        parts.append({"index": p, "records": Field("records", "records", None, len(data), len(raw))})
        data += raw
    ex = w.ex(0, 9, {"transactional_id": txn, "acks": acks, "timeout_ms": 30000,
                     "topic_data": [{"name": "t", "partition_data": parts}]},
              {"responses": [], "throttle_time_ms": 0})
    ex.request = ex.request._replace(data=data)
    ex.client_id = client_id
    return ex


def _producers(exchanges: list) -> list:
    """stats' producers of ``exchanges``: the query over their rows of the batches table."""
    from analyzer import engine, figures
    from tests.conftest import figures_db

    return figures.producers(engine.query_of(figures_db(exchanges)))


def test_producer_batches_compression_linger_retries() -> None:
    pytest.importorskip("xxhash")
    w = Wire()
    g5, n3, g2 = _batch(1, 5, 7, 0, 0, txn=True), _batch(0, 3, 7, 0, 0, txn=True), _batch(1, 2, 7, 0, 5, txn=True)
    exs = [_produce(w, [(0, g5), (1, n3)], txn="tx"),
           # partition 0's first batch again (a retry), then the next one
           _produce(w, [(0, g5), (0, g2)], txn="tx"),
           _produce(w, [(0, _batch(2, 4))], acks=1, client_id="p2")]
    p1, p2 = _producers(exs)
    before = {"g5": len(_batch(0, 5, 7, 0, 0, txn=True)), "g2": len(_batch(0, 2, 7, 0, 5, txn=True))}
    assert (p1["client_id"], p1["producer_id"], p1["idempotent"], p1["transactional_id"]) == ("p1", 7, True, "tx")
    assert (p1["requests"], p1["batches"], p1["records"], p1["transactional_batches"]) == (2, 4, 15, 4)
    assert (p1["records_per_batch"], p1["max_records_per_batch"], p1["acks"]) == (3.75, 5, {"all": 2})
    assert p1["retries"] == 1 and p1["producer_epochs"] == [0]
    gz = p1["compression"]["gzip"]
    assert (gz["batches"], gz["bytes"], gz["bytes_before"]) == (3, 2 * len(g5) + len(g2),
                                                                 2 * before["g5"] + before["g2"])
    assert gz["ratio"] == round(gz["bytes_before"] / gz["bytes"], 3) and gz["ratio"] > 2
    assert p1["compression"]["none"] == {"batches": 1, "bytes": len(n3), "bytes_before": len(n3), "ratio": 1.0}
    assert p1["linger_ms"] == {"mean": 19.25, "max": 28}          # 28, 14, 28, 7 ms
    assert p1["bytes_per_batch"] == round((2 * len(g5) + len(g2) + len(n3)) / 4, 1)
    assert (p2["producer_id"], p2["idempotent"], p2["retries"], p2["acks"]) == (-1, False, None, {"1": 1})
    assert list(p2["compression"]) == ["snappy"] and p2["linger_ms"]["max"] == 21
    # the same figures from the exchanges in any order
    assert _producers(exs[::-1]) == [p1, p2]


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/captures not present")
def test_real_transactional_and_idempotent_producers() -> None:
    import re

    from analyzer.pipeline import Options, Run
    from analyzer.sinks.insights import produce_partitions
    from dissectors.field import body_of

    path = str(SHARED / "txn_rdkafka_tansu.pcap")
    ps = {}
    truth: dict[str, list[int]] = {}
    for mode in ("lite", "full"):
        exs = list(Run(path, Options(decode=mode), DecodeContext()))
        for ex in exs:
            if mode == "full" and ex.api_key == 0:
                # the full decoder's own reading: batch lengths and its decompression notes
                for _t, _p, rec in produce_partitions(body_of(ex.request_tree)):
                    for batch in rec.children or ():
                        size = batch.get("batch_length") + 12
                        note = [n for n in batch.child("records").notes or () if n.startswith("decompressed")]
                        after = int(re.search(r"-> (\d+) bytes", note[0]).group(1)) + 61 if note else size
                        row = truth.setdefault(ex.client_id, [0, 0, 0])
                        row[0] += 1
                        row[1] += size
                        row[2] += after
        ps[mode] = _producers(exs)
    assert ps["lite"] == ps["full"]
    got = {r["client_id"]: r for r in ps["lite"]}
    assert sorted(got) == sorted(truth) == ["lab-rdkafka-producer", "lab-rdkafka-txn", "lab-rdkafka-txn-input"]
    for cid, (n, after, before) in truth.items():
        r = got[cid]
        comp = sum(v["bytes"] for v in r["compression"].values())
        comp_before = sum(v["bytes_before"] for v in r["compression"].values())
        assert (r["batches"], comp, comp_before) == (n, after, before), cid
    txn, idem, plain = got["lab-rdkafka-txn"], got["lab-rdkafka-producer"], got["lab-rdkafka-txn-input"]
    assert (txn["transactional_id"], txn["transactional_batches"], txn["batches"], txn["records"]) == \
        ("lab-txn-70", 6, 6, 40)
    assert (idem["idempotent"], idem["transactional_id"], idem["records"], idem["retries"]) == (True, None, 20, 0)
    assert (plain["producer_id"], plain["idempotent"], plain["records"]) == (-1, False, 3)
    assert list(txn["compression"]) == ["lz4"] and txn["acks"] == {"all": 6}


# -- groups ----------------------------------------------------------------------------------

def _join(w: Wire, member: str, gen: int, members: list[str] | None = None, error: int = 0, latency_ms: float = 2.0,
          assigned: str | None = None):
    resp = {"throttle_time_ms": 0, "error_code": error, "generation_id": gen if not error else -1,
            "protocol_type": "consumer", "protocol_name": "range", "leader": "m-a" if not error else "",
            "member_id": assigned or member, "members": [{"member_id": m} for m in members or []]}
    return w.ex(11, 7, {"group_id": "g1", "session_timeout_ms": 10000, "rebalance_timeout_ms": 30000,
                        "member_id": member, "protocol_type": "consumer",
                        "protocols": [{"name": "range", "metadata": b""}]}, resp,
                error_codes=["MEMBER_ID_REQUIRED"] if error == 79 else [], latency_ms=latency_ms)


def _sync(w: Wire, member: str, gen: int, latency_ms: float = 2.0):
    return w.ex(14, 5, {"group_id": "g1", "generation_id": gen, "member_id": member, "assignments": []},
                {"throttle_time_ms": 0, "error_code": 0, "assignment": b""}, latency_ms=latency_ms)


def test_group_story_generations_triggers_and_rebalance_time() -> None:
    from analyzer.sinks.check import Checker
    from analyzer.sinks.insights import GroupStories
    from tests.checkgen import completion_order

    w = Wire(step_ms=150)
    exs = [
        # generation 1: m-a joins anew (MEMBER_ID_REQUIRED, then with its id), alone
        _join(w, "", -1, error=79, assigned="m-a"),
        _join(w, "m-a", 1, ["m-a"], latency_ms=50),
        _sync(w, "m-a", 1, latency_ms=20),
    ]
    # generation 2: m-b arrives on its own connection and is held 400 ms; meanwhile m-a hears
    # REBALANCE_IN_PROGRESS on its heartbeat and rejoins
    w2 = Wire(conn_id=1, t0=w.t, step_ms=100, frame=1000)
    exs.append(_join(w2, "m-b", 2, latency_ms=400))
    exs.append(w.ex(12, 4, {"group_id": "g1", "generation_id": 1, "member_id": "m-a"},
                    {"throttle_time_ms": 0, "error_code": 27}, error_codes=["REBALANCE_IN_PROGRESS"]))
    exs.append(_join(w, "m-a", 2, ["m-a", "m-b"], latency_ms=100))
    w2.t = w.t
    exs += [_sync(w, "m-a", 2), _sync(w2, "m-b", 2, latency_ms=300)]
    w.t = w2.t
    # generation 3: m-b leaves
    exs.append(w.ex(13, 4, {"group_id": "g1", "members": [{"member_id": "m-b"}]}, {"error_code": 0}))
    exs.append(_join(w, "m-a", 3, ["m-a"]))
    exs.append(_sync(w, "m-a", 3))
    # m-a rejoins twice getting generation 3 back: no new generation
    exs += [_join(w, "m-a", 3, ["m-a"]), _join(w, "m-a", 3, ["m-a"])]
    assert exs[3].request_time < exs[4].request_time < exs[3].response_time
    gs = GroupStories()
    for ex in completion_order(exs):
        gs.add(ex)
    counts = group_counts_of(exs)
    (story,) = gs.result(counts)
    g1, g2, g3 = story["generations"]
    assert (g1["generation"], g1["members"], g1["leader"], g1["protocol"]) == (1, ["m-a"], "m-a", "range")
    assert g1["triggers"] == ["new member", "MEMBER_ID_REQUIRED"]
    # first JoinGroup (request of exs[0]) to the SyncGroup answer of generation 1
    assert g1["rebalance_start"] == exs[0].request_time and g1["rebalance_end"] == exs[2].response_time
    assert g1["rebalance_ms"] == round((exs[2].response_time - exs[0].request_time) * 1000, 3)
    assert g2["members"] == ["m-a", "m-b"] and g2["rebalance_start"] == exs[3].request_time
    assert g2["rebalance_end"] == exs[7].response_time       # the last SyncGroup answer
    assert g2["triggers"] == ["REBALANCE_IN_PROGRESS on heartbeat (m-a)"]
    assert g3["triggers"] == ["LeaveGroup (m-b)"] and g3["members"] == ["m-a"]
    assert story["rejoins_same_generation"] == 2 and story["joins"] == 7
    # the same story through check --timeline's checker, and from a state round trip
    c = Checker().add_all(completion_order(exs))
    assert c.stories() == gs.result(counts) == \
        GroupStories.from_state(json.loads(json.dumps(gs.to_state()))).result(counts)
    # rejoining without the generation moving is a storm past the threshold
    storms = [f for f in Checker(storm_rebalances=1).add_all(completion_order(exs)).finish()
              if f.rule == "rebalance-storm"]
    assert [f.details.get("kind") for f in storms] == [None, "rejoin"]
    assert storms[1].details["rejoins"] == 2 and storms[1].frames == [exs[-2].request_frame, exs[-1].request_frame]


def test_group_story_session_timeout_and_kip848() -> None:
    from analyzer.sinks.insights import GroupStories

    w = Wire(step_ms=100)
    exs = [_join(w, "m-a", 1, ["m-a", "m-b"]), _sync(w, "m-a", 1), _sync(w, "m-b", 1),
           # m-b vanishes without LeaveGroup: generation 2 has m-a alone
           _join(w, "m-a", 2, ["m-a"]), _sync(w, "m-a", 2)]
    for epoch, asg in ((0, None), (1, [{"topic_id": "t", "partitions": [0, 1]}]), (1, None), (2, [])):
        resp = {"throttle_time_ms": 0, "error_code": 0, "member_id": "k-1", "member_epoch": epoch,
                "heartbeat_interval_ms": 5000}
        if asg is not None:
            resp["assignment"] = {"topic_partitions": asg}
        exs.append(w.ex(68, 0, {"group_id": "g2", "member_id": "", "member_epoch": epoch}, resp))
    gs = GroupStories()
    for ex in exs:
        gs.add(ex)
    s1, s2 = gs.result(group_counts_of(exs))
    assert [g["triggers"] for g in s1["generations"]] == [["first seen"], ["session timeout (m-b gone without LeaveGroup)"]]
    assert s2["generations"] == [] and s2["members_kip848"] == [
        {"member_id": "k-1", "first_epoch": 0, "last_epoch": 2, "assignments": 2, "assignment": {}}]


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/captures not present")
def test_real_group_rebalances() -> None:
    import subprocess
    import sys

    path = str(SHARED / "group_kafkajs_tansu.pcap")
    res = json.loads(subprocess.run([sys.executable, "-m", "analyzer", "stats", "-f", "json", path],
                                    capture_output=True, text=True, check=True).stdout)
    (story,) = res["consumer_groups"]
    g0, g1 = story["generations"]
    # kafkajs: a first member alone (generation 0), then a second one joins (generation 1) while
    # the first hears REBALANCE_IN_PROGRESS on its heartbeats; both rebalances last about as long
    # as the broker's initial rebalance delay (3 s, then 4 s with the second member)
    assert (g0["generation"], len(g0["members"]), g0["protocol"]) == (0, 1, "RoundRobinAssigner")
    assert (g1["generation"], len(g1["members"])) == (1, 2) and g1["leader"] == g0["leader"]
    assert g0["triggers"] == ["new member", "MEMBER_ID_REQUIRED"]
    assert g1["triggers"][-1].startswith("REBALANCE_IN_PROGRESS on heartbeat (lab-kafkajs-group-efc5911d")
    assert (g0["rebalance_ms"], g1["rebalance_ms"]) == (3008.547, 4008.634)
    out = subprocess.run([sys.executable, "-m", "analyzer", "check", "--timeline", story["group_id"], path],
                         capture_output=True, text=True, check=True).stdout
    assert "generation 1: 2 member(s)" in out and "rebalance 4009 ms" in out


def test_quiet_group_exchanges_are_counted_not_kept() -> None:
    """A Heartbeat answered without error and an OffsetCommit tell a group's story only that
    they happened: counted (a query over the exchanges table), not kept (the state stays
    small, and the core does not hand them on), and the story is the one every event tells."""
    from analyzer.pipeline import Options, Run
    from analyzer.sinks.insights import GroupStories, group_event, group_stories

    exs = list(Run(str(ROOT / "samples" / "group_rdkafka.pcap"), Options(decode="lite")))
    g = GroupStories()
    for ex in exs:
        g.add(ex)
    every = [ev for ex in exs if (ev := group_event(ex, str(ex.conn), full=False)) is not None]
    counts = group_counts_of(exs)
    assert 0 < len(g.events) < len(every) / 2 and sum(counts.values()) == len(every)
    assert g.result(counts) == group_stories(every)
    back = GroupStories.from_state(json.loads(json.dumps(g.to_state())))
    assert back.result(counts) == g.result(counts)


def test_real_consumer_falling_behind_sample() -> None:
    """samples/consumer_lag_kafkapython.pcap: kafka-python reads 5 records per poll while 240
    records arrive in 4 bursts. Lag recomputed here by a plain walk of the full trees (each
    answered Fetch names every partition: sessionless) equals the lag table's."""
    from analyzer.pipeline import Options, Run

    path = str(ROOT / "samples" / "consumer_lag_kafkapython.pcap")
    truth: dict[int, list[int]] = {}
    exs = list(Run(path, Options(decode="full"), DecodeContext()))
    for ex in exs:
        if ex.api_key != 1 or ex.response is None:
            continue
        asked = {p.get("partition"): p.get("fetch_offset")
                 for t in ex.request_tree.child("body").child("topics").children
                 for p in t.child("partitions").children}
        for t in ex.response_tree.child("body").child("responses").children:
            for p in t.child("partitions").children:
                truth.setdefault(p.get("partition_index"), []).append(p.get("high_watermark")
                                                                      - asked[p.get("partition_index")])
    rows = _lag(exs)
    assert [(r["partition"], r["samples"], r["max"], r["last"], r["mean"]) for r in rows] == [
        (p, len(v), max(v), v[-1], round(sum(v) / len(v), 3)) for p, v in sorted(truth.items())]
    assert {(r["client_id"], r["group"], r["topic"], r["isolation"]) for r in rows} == {
        ("kws-slow-consumer", "kws-lag-group", "lag", "read_uncommitted")}
    # behind after the bursts (60 records, 20 per partition, 2 KiB fetched per partition at a time)
    assert max(r["max"] for r in rows) >= 20 and all(r["last"] == 0 for r in rows)
