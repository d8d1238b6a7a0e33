"""Committed-offset lag (stats' committed_lag, analyzer.sinks.insights.CommittedLag): checked
against a plain walk of the full field trees of OffsetCommit, OffsetFetch, TxnOffsetCommit,
ListOffsets and Fetch on real captures; workers give what one process gives; the outputs."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from analyzer.cli import main
from analyzer.pipeline import Options, Run
from analyzer.sinks.insights import UNKNOWN_NO_HW, UNKNOWN_NO_HW_AFTER, CommittedLag
from analyzer.sinks.stats import Stories
from dissectors.context import DecodeContext
from tests.checkgen import Wire
from tests.conftest import SAMPLES, SHARED_CAPTURES, stats_of

COMMITTING = [SAMPLES / "group_rdkafka.pcap", SAMPLES / "consumer_lag_kafkapython.pcap"] + \
    (sorted(SHARED_CAPTURES.glob("group_*.pcap")) + [SHARED_CAPTURES / "txn_rdkafka_tansu.pcap"]
     if SHARED_CAPTURES.is_dir() else [])


def _kids(f: Any, name: str) -> list[Any]:
    c = f.child(name) if f is not None else None
    return list(c.children or []) if c is not None else []


def truth(path: Path) -> dict[tuple[str, str, int], dict[str, Any]]:
    """(group, topic, partition) -> committed offset, high watermark and lag, walked from the
    full trees: the latest committed offset by answer time, the latest high watermark."""
    commits: dict[tuple[str, str, int], tuple[float, int]] = {}
    hws: dict[tuple[str, int], tuple[float, int]] = {}
    owners: dict[tuple[str, str, int], tuple[float, str]] = {}
    names: dict[str, str] = {}          # topic id -> name, from Metadata answers (Fetch v13+ names ids)
    for ex in Run(str(path), Options(decode="full"), DecodeContext()):
        if ex.response is None or ex.request is None:
            continue
        q, r, t = ex.request_tree.child("body"), ex.response_tree.child("body"), ex.response_time
        if ex.api_name in ("OffsetCommit", "TxnOffsetCommit"):
            ok = {(tr.get("name"), p.get("partition_index")) for tr in _kids(r, "topics")
                  for p in _kids(tr, "partitions") if p.get("error_code") == 0}
            for tq in _kids(q, "topics"):
                for p in _kids(tq, "partitions"):
                    k = (tq.get("name"), p.get("partition_index"))
                    if k in ok:
                        commits[(q.get("group_id"), *k)] = max(commits.get((q.get("group_id"), *k), (0, 0)),
                                                               (t, p.get("committed_offset")))
        elif ex.api_name == "OffsetFetch":
            groups = _kids(r, "groups") or [r]
            for g in groups:
                gid = g.get("group_id") if g is not r else q.get("group_id")
                for tr in _kids(g, "topics"):
                    for p in _kids(tr, "partitions"):
                        if p.get("committed_offset") >= 0 and not p.get("error_code"):
                            k = (gid, tr.get("name"), p.get("partition_index"))
                            commits[k] = max(commits.get(k, (0, 0)), (t, p.get("committed_offset")))
        elif ex.api_name == "Metadata":
            names.update({str(tr.get("topic_id")): tr.get("name") for tr in _kids(r, "topics")
                          if tr.get("topic_id") is not None})
        elif ex.api_name == "Fetch" and not r.get("error_code"):
            for tr in _kids(r, "responses"):
                for p in _kids(tr, "partitions") or _kids(tr, "partition_responses"):
                    if not p.get("error_code") and p.get("high_watermark") >= 0:
                        topic = tr.get("topic") or names.get(str(tr.get("topic_id")))
                        k = (topic, p.get("partition_index"))
                        hws[k] = max(hws.get(k, (0, 0)), (t, p.get("high_watermark")))
        elif ex.api_name == "ListOffsets":
            latest = {(tq.get("name"), p.get("partition_index")) for tq in _kids(q, "topics")
                      for p in _kids(tq, "partitions") if p.get("timestamp") == -1}
            for tr in _kids(r, "topics"):
                for p in _kids(tr, "partitions"):
                    k = (tr.get("name"), p.get("partition_index"))
                    if k in latest and not p.get("error_code"):
                        hws[k] = max(hws.get(k, (0, 0)), (t, p.get("offset")))
        elif ex.api_name == "SyncGroup" and not r.get("error_code"):
            a = r.child("assignment")
            for tp in (a.walk() if a is not None else ()):
                if tp.get("topic") is None:
                    continue
                for p in _kids(tp, "partitions"):
                    k = (q.get("group_id"), tp.get("topic"), p.value)
                    owners[k] = max(owners.get(k, (0, "")), (t, ex.client_id))
    out = {}
    for k, (tc, off) in commits.items():
        hw = hws.get((k[1], k[2]))
        out[k] = {"committed_offset": off, "commit_time": tc,
                  "high_watermark": hw[1] if hw else None,
                  "lag": hw[1] - off if hw and hw[0] >= tc else None,
                  "client_id": owners[k][1] if k in owners else None}
    return out


@pytest.mark.parametrize("path", [p for p in COMMITTING if p.exists()], ids=lambda p: p.name)
def test_committed_lag_equals_full_tree_walk(path: Path) -> None:
    committed = Stories(["committed_lag"]).add_all(Run(str(path), Options(decode="lite"), DecodeContext())).committed
    assert committed is not None
    rows = committed.result()
    want = truth(path)
    assert want, "a capture with no committed offset proves nothing"
    got = {(r["group"], r["topic"], r["partition"]): {k: r[k] for k in ("committed_offset", "commit_time",
                                                                      "high_watermark", "lag", "client_id")}
           for r in rows}
    assert got == want
    for r in rows:
        assert (r["lag"] is None) == (r["note"] is not None)


def test_real_values() -> None:
    """group_rdkafka: both members committed 15 and the high watermark after it was 15;
    consumer_lag_kafkapython: the last commit (80) came after the last Fetch answer."""
    stories = Stories(["committed_lag"]).add_all(Run(str(SAMPLES / "group_rdkafka.pcap"), Options(decode="lite"),
                                                     DecodeContext()))
    assert stories.committed is not None
    rows = stories.committed.result()
    assert [(r["partition"], r["committed_offset"], r["high_watermark"], r["lag"], r["client_id"]) for r in rows] \
        == [(0, 15, 15, 0, "kws-member-0"), (1, 15, 15, 0, "kws-member-1")]
    lag = CommittedLag()
    for ex in Run(str(SAMPLES / "consumer_lag_kafkapython.pcap"), Options(decode="lite"), DecodeContext()):
        lag.add(ex)
    rows = lag.result()
    assert [(r["partition"], r["committed_offset"], r["lag"], r["note"]) for r in rows] == \
        [(p, 80, None, UNKNOWN_NO_HW_AFTER) for p in (0, 1, 2)]
    assert all(r["high_watermark_time"] < r["commit_time"] for r in rows)


def test_state_round_trip_and_merge_order() -> None:
    parts = []
    for path in COMMITTING[:2]:
        lag = CommittedLag()
        for ex in Run(str(path), Options(decode="lite"), DecodeContext()):
            lag.add(ex)
        parts.append(lag)
    ab = CommittedLag.from_state(json.loads(json.dumps(parts[0].to_state()))).merge(parts[1])
    ba = CommittedLag.from_state(parts[1].to_state()).merge(parts[0])
    assert ab.result() == ba.result() == sorted(parts[0].result() + parts[1].result(),
                                                key=lambda r: (r["group"], r["topic"], r["partition"]))


def _stats(*args: str) -> str:
    res = CliRunner().invoke(main, ["stats", *args])
    assert res.exit_code == 0, res.output
    return res.stdout


@pytest.mark.parametrize("path", [p for p in COMMITTING if p.exists()], ids=lambda p: p.name)
def test_workers_equal_one_process(path: Path) -> None:
    one = _stats("-f", "json", "--section", "committed_lag", "-j", "1", str(path))
    assert json.loads(one)["committed_lag"]
    assert _stats("-f", "json", "--section", "committed_lag", "-j", "2", str(path)) == one


def test_outputs() -> None:
    path = str(SAMPLES / "consumer_lag_kafkapython.pcap")
    table = _stats("--section", "committed_lag", path)
    assert "Committed-offset lag" in table and UNKNOWN_NO_HW_AFTER.split(":")[0] in table
    rows = list(csv.DictReader(io.StringIO(_stats("-f", "csv", "--section", "committed_lag", path))))
    assert [(r["partition"], r["committed_offset"], r["lag"], r["note"]) for r in rows] == \
        [(str(p), "80", "", UNKNOWN_NO_HW_AFTER) for p in (0, 1, 2)]
    assert len(json.loads(_stats("-f", "json", "--section", "committed_lag", path))["committed_lag"]) == 3
    # (a costly view: the whole report computes it only when asked, with --section)
    assert "committed_lag" not in json.loads(_stats("-f", "json", path))
    assert "No committed offsets" in _stats("--section", "committed_lag", str(SAMPLES / "admin_rdkafka.pcap"))


def test_crafted_txn_commit_and_list_offsets() -> None:
    """TxnOffsetCommit counts the partitions answered with error 0 only; ListOffsets gives a
    high watermark for timestamp -1 (latest), not -2 (earliest); a partition whose high
    watermark the capture never shows has no figure."""
    w = Wire()
    lag = CommittedLag()
    part = lambda p, o: {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1,  # noqa: E731
                         "committed_metadata": ""}
    lag.add(w.ex(28, 3, {"transactional_id": "tx", "group_id": "g", "producer_id": 7, "producer_epoch": 0,
                         "generation_id": -1, "member_id": "", "group_instance_id": None,
                         "topics": [{"name": "t", "partitions": [part(0, 100), part(1, 200), part(2, 300)]}]},
                 {"throttle_time_ms": 0, "topics": [{"name": "t", "partitions": [
                     {"partition_index": 0, "error_code": 0}, {"partition_index": 1, "error_code": 0},
                     {"partition_index": 2, "error_code": 48}]}]}))
    lag.add(w.ex(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1},
        {"partition_index": 1, "current_leader_epoch": -1, "timestamp": -2}]}]},
        {"throttle_time_ms": 0, "topics": [{"name": "t", "partitions": [
            {"partition_index": 0, "error_code": 0, "timestamp": -1, "offset": 130, "leader_epoch": 0},
            {"partition_index": 1, "error_code": 0, "timestamp": -1, "offset": 0, "leader_epoch": 0}]}]}))
    rows = lag.result()
    assert [(r["partition"], r["committed_offset"], r["high_watermark"], r["lag"], r["note"], r["commit_api"])
            for r in rows] == [(0, 100, 130, 30, None, "TxnOffsetCommit"),
                               (1, 200, None, None, UNKNOWN_NO_HW, "TxnOffsetCommit")]
    assert rows[0]["high_watermark_api"] == "ListOffsets"
    assert rows[0]["high_watermark_time"] > rows[0]["commit_time"]


def test_the_lag_plot_draws_the_committed_lag_beside_the_position_lag(tmp_path: Path) -> None:
    """Each committed-offset lag the capture tells is drawn in the lag panel at the time of
    the high watermark it was taken against, beside the position lag."""
    from analyzer.sinks.stats_render import committed_points

    path = str(Path(__file__).resolve().parents[1] / "samples" / "group_rdkafka.pcap")
    res = stats_of(Run(path, Options(decode="lite")), views=("committed_lag",))
    t0 = res["throughput"]["first_time"]
    want = sorted((f"{r['group']} {r['topic']}-{r['partition']} committed", r["high_watermark_time"] - t0, r["lag"])
                  for r in res["committed_lag"] if r["lag"] is not None)
    assert len(want) == 2 and sorted(committed_points(res)) == want
    assert all(5.1 < when < 5.2 and lag == 0 for _n, when, lag in want)
    pytest.importorskip("matplotlib")
    out = tmp_path / "lag.png"
    r = CliRunner().invoke(main, ["stats", "--plot", str(out), path])
    assert r.exit_code == 0 and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
