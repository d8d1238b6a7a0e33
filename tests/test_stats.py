"""Statistics: the figures ``stats`` reports (``analyzer.figures``' queries over the exchange
tables, with the stories of ``analyzer.sinks.stats.Stories``) from exchanges with chosen
timestamps: nearest-rank percentiles (exact at any count), errors and statuses, waits and
throttling, grouping, throughput, the slowest exchanges, histograms; the same figures
through JSON, CSV, text and plots; the stories' merging; the command on real captures."""
from __future__ import annotations

import csv
import io
import json
import random
from typing import Any

import pytest

from analyzer import engine, figures
from analyzer._core import Quantiles
from analyzer.figures import PERCENTILES, bucket_lower, groups_query
from analyzer.model import Conn, Endpoint, Exchange, Frame
from analyzer.sinks.stats import COSTLY_VIEWS, Stories, named_topic_partitions, parse_by, wait_kind
from analyzer.sinks.stats_render import (
    bar,
    csv_rows,
    histogram_lines,
    html_page,
    render_text,
    tables,
    write_csv,
    write_json,
)
from dissectors.field import Field
from tests.conftest import figures_db, group_counts_of, stats_of
from tests.test_quantiles import nearest_rank_index

T0 = 1_700_000_000.0
CONNS = [Conn(i, Endpoint("127.0.0.1", 50000 + i), Endpoint("127.0.0.1", 9092), client_dir=0) for i in range(4)]


def tree(kind: str, **body: Any) -> Field:
    root = Field(kind, kind.capitalize())
    root.add(Field("header", "Header"))
    b = root.add(Field("body", "Body"))
    for k, v in body.items():
        if isinstance(v, Field):
            v.name = k
            b.add(v)
        else:
            b.add(Field(k, "int32", v))
    return root


def topics_array(*topics: tuple[str, list[int]]) -> Field:
    arr = Field("topics", "array", len(topics))
    for i, (name, parts) in enumerate(topics):
        el = arr.add(Field(f"[{i}]", "Topic"))
        el.add(Field("name", "string", name))
        pa = el.add(Field("partitions", "array", len(parts)))
        for j, p in enumerate(parts):
            pe = pa.add(Field(f"[{j}]", "Partition"))
            pe.add(Field("partition_index", "int32", p))
    return arr


def mk(api: str = "Produce", version: int = 9, lat: float | None = 10.0, ttfb: float | None = None,
       t: float = 0.0, conn: int = 0, client_id: str = "app", cid: int = 1, frame: int = 1,
       status: str | None = None, errors: list[str] | None = None, partitions: list[dict[str, Any]] | None = None,
       req_body: dict[str, Any] | None = None, resp_body: dict[str, Any] | None = None,
       req_size: int = 96, resp_size: int = 46) -> Exchange:
    """An exchange whose request completes at T0 + t and whose response completes ``lat`` ms later
    (its first byte ``ttfb`` ms later, default = lat)."""
    c = CONNS[conn]
    req = None
    resp = None
    if status != "orphan_response":
        req = Frame(c, 0, b"", req_size, frame, frame, T0 + t, T0 + t, 0)
    if lat is not None:
        first = ttfb if ttfb is not None else lat
        base = T0 + t
        resp = Frame(c, 1, b"", resp_size, frame + 1, frame + 2, base + first / 1000.0, base + lat / 1000.0, 0)
    if status is None:
        status = "ok" if resp is not None else "unanswered"
    if status == "orphan_response":
        assert resp is not None
    return Exchange(
        conn=c, protocol="kafka", api_key={"Produce": 0, "Fetch": 1, "JoinGroup": 11, "Metadata": 3}.get(api, 18),
        api_name=api, api_version=version, correlation_id=cid, client_id=client_id, request=req, response=resp,
        status=status, request_tree=tree("request", **(req_body or {})),
        response_tree=tree("response", **(resp_body or {})) if resp is not None else None,
        error_codes=list(errors or []), partitions=list(partitions or []), seq=cid)


def group(res: dict[str, Any], **keys: Any) -> dict[str, Any]:
    found = [g for g in res["groups"] if all(g[k] == v for k, v in keys.items())]
    assert len(found) == 1, (keys, [{k: g[k] for k in res["by"]} for g in res["groups"]])
    return found[0]


def lat_exchanges(values: list[float], **kw: Any) -> list[Exchange]:
    return [mk(lat=v, t=i * 0.01, cid=i, frame=3 * i + 1, **kw) for i, v in enumerate(values)]


def query_of(exchanges: list[Exchange]) -> figures.Query:
    """The figures' queries over the tables of ``exchanges`` (histograms, series, points)."""
    return engine.query_of(figures_db(exchanges))


def lat_of(ex: Exchange) -> float:
    """An answered exchange's latency (ms)."""
    assert ex.latency_ms is not None
    return ex.latency_ms


def ns(ex: Exchange) -> int:
    """An exchange's latency in whole nanoseconds, as stats sums them for the mean."""
    assert ex.request is not None and ex.response is not None
    return round((ex.response.last_ts - ex.request.last_ts) * 1000.0 * 1e6)


# -- percentiles ---------------------------------------------------------------------------


def test_nearest_rank_definition() -> None:
    """pX is the value at 1-based rank ceil(X/100 * n): in the report, and in the core's exact
    quantiles (what ``live --stats`` reads)."""
    name_of = {p: name for name, p in PERCENTILES}
    for q, n, rank in ((0.5, 100, 50), (0.99, 100, 99), (0.999, 100, 100), (0.99, 10, 10), (0.5, 1, 1),
                       (0.9, 10, 9), (0.5, 3, 2)):
        assert nearest_rank_index(q, n) == rank - 1
        values = [float(v) for v in range(n, 0, -1)]
        exact = Quantiles()
        exact.extend(values)
        assert exact.quantile(q) == rank, (q, n)
        g = stats_of(lat_exchanges(values))["groups"][0]
        assert g["latency_ms"][name_of[q]] == rank, (q, n)


def test_exact_figures_1_to_100_ms() -> None:
    values = [float(v) for v in range(1, 101)]
    random.Random(7).shuffle(values)
    res = stats_of(lat_exchanges(values, ttfb=0.5))
    assert res["by"] == ["api", "version"]
    g = group(res, api="Produce", version=9)
    assert g["count"] == 100 and g["answered"] == 100
    assert g["latency_ms"] == {"min": 1.0, "p50": 50.0, "p90": 90.0, "p99": 99.0, "p999": 100.0,
                               "max": 100.0, "mean": 50.5}
    assert g["ttfb_ms"]["p50"] == 0.5 and g["ttfb_ms"]["max"] == 0.5
    assert g["bytes_in"] == 100 * (96 + 4) and g["bytes_out"] == 100 * (46 + 4)
    assert "exact" not in g
    assert res["accuracy"] == {"percentile_definition": figures.PERCENTILE_DEFINITION}
    assert res["accuracy"]["percentile_definition"].startswith("nearest-rank")


def test_exact_small_group_p99_is_max() -> None:
    res = stats_of(lat_exchanges([3.0, 1.0, 2.0, 10.0, 4.0]))
    lat = res["groups"][0]["latency_ms"]
    assert lat["p50"] == 3.0 and lat["p90"] == 10.0 and lat["p99"] == 10.0 and lat["mean"] == 4.0


def test_percentiles_exact_beyond_a_thousand_values() -> None:
    """4,999 latencies in one group: every percentile is the exact nearest-rank value (it was
    a DDSketch's, within 1 %, beyond 1,000 values per group; stats keeps no sketch now)."""
    rng = random.Random(3)
    exs = lat_exchanges([rng.lognormvariate(1.0, 1.5) for _ in range(4999)])
    g = stats_of(exs)["groups"][0]
    s = sorted(lat_of(ex) for ex in exs)
    for name, q in PERCENTILES:
        assert g["latency_ms"][name] == round(s[nearest_rank_index(q, len(s))], 3), name
    assert g["latency_ms"]["min"] == round(s[0], 3) and g["latency_ms"]["max"] == round(s[-1], 3)
    assert g["latency_ms"]["mean"] == round(sum(ns(ex) for ex in exs) / len(exs) / 1e6, 3)
    assert g["answered"] == g["service"] == 4999


def test_the_summary_rounds_to_the_microsecond() -> None:
    """min, the percentiles and max are the latencies rounded to the microsecond; the mean is
    that of the latencies in whole nanoseconds, rounded once."""
    exs = lat_exchanges([1.00049, 2.0005, 3.5, 10.0, 0.0006, 0.0006, 0.0])
    lats = sorted(lat_of(ex) for ex in exs)
    mean = round(sum(ns(ex) for ex in exs) / len(exs) / 1e6, 3)
    # (the mean of the rounded latencies would differ: rounding once is what is tested)
    assert mean != round(sum(round(v, 3) for v in lats) / len(lats), 3)
    g = stats_of(exs)["groups"][0]
    assert g["latency_ms"] == {"min": round(lats[0], 3), "p50": round(lats[3], 3), "p90": 10.0, "p99": 10.0,
                               "p999": 10.0, "max": 10.0, "mean": mean}
    assert [name for name, _p in PERCENTILES] == ["p50", "p90", "p99", "p999"]


# -- the stories: merging --------------------------------------------------------------------


def _state_trip(s: Stories) -> Stories:
    return Stories.from_state(json.loads(json.dumps(s.to_state())))


def _sample_exchanges(name: str) -> list[Exchange]:
    from analyzer.pipeline import Options, Run

    return list(Run(str(_sample(name)), Options(decode="lite")))


@pytest.mark.parametrize("name", ["consumer_lag_kafkapython.pcap", "group_rdkafka.pcap", "txn_rdkafka.pcap"])
@pytest.mark.parametrize("parts", [2, 3])
def test_stories_merged_from_shares_of_the_connections(name: str, parts: int) -> None:
    """The stories of shares of a capture's connections (as the worker processes and the Spark
    tasks make them), shipped as JSON state and merged in either order, are those of one pass
    over the whole capture."""
    exs = _sample_exchanges(name)
    counts = group_counts_of(exs)
    one = Stories(COSTLY_VIEWS).add_all(exs).result(counts)
    assert one["in_flight"]["clients"]
    shares = [Stories(COSTLY_VIEWS).add_all([ex for ex in exs if ex.conn.id % parts == i]) for i in range(parts)]
    assert all(s.result(counts) != one for s in shares)
    for order in (shares, shares[::-1]):
        merged = _state_trip(order[0])
        for s in order[1:]:
            merged.merge(_state_trip(s))
        assert merged.result(counts) == one


def test_stories_state_keeps_the_views_asked_for() -> None:
    exs = _sample_exchanges("group_rdkafka.pcap")
    lean = Stories(()).add_all(exs)
    counts = group_counts_of(exs)
    assert set(lean.result(counts)) == {"consumer_groups"}
    back = _state_trip(lean)
    assert back.views == frozenset() and back.result(counts) == lean.result(counts)
    full = Stories(COSTLY_VIEWS).add_all(exs)
    assert _state_trip(full).result(counts) == full.result(counts)
    assert set(full.result(counts)) == {"consumer_groups", "committed_lag", "in_flight"}
    st = full.to_state()
    st["v"] = -1
    with pytest.raises(ValueError, match="version"):
        Stories.from_state(st)


# -- grouping ------------------------------------------------------------------------------


def _mixed() -> list[Exchange]:
    p = [{"topic": "a", "partition": 0, "records": 5, "bytes": 500},
         {"topic": "a", "partition": 1, "records": 3, "bytes": 300},
         {"topic": "b", "partition": 0, "records": 1, "bytes": 100}]
    return [
        mk("Produce", 9, lat=4.0, conn=0, client_id="p1", cid=1, partitions=p),
        mk("Produce", 9, lat=8.0, conn=1, client_id="p2", cid=2, partitions=p[:1]),
        mk("Produce", 7, lat=2.0, conn=1, client_id="p2", cid=3, partitions=p[2:]),
        mk("Metadata", 12, lat=1.0, conn=0, client_id="p1", cid=4,
           req_body={"topics": topics_array(("a", []), ("c", []))}),
        mk("Fetch", 11, lat=6.0, conn=2, client_id="c1", cid=5,
           partitions=[{"topic": "a", "partition": 1, "records": 3, "bytes": 300, "error": None},
                       {"topic": "b", "partition": 0, "records": 0, "bytes": 0,
                        "error": "OFFSET_OUT_OF_RANGE"}],
           errors=["OFFSET_OUT_OF_RANGE"]),
    ]


def test_group_by_api_only_and_client_id() -> None:
    res = stats_of(_mixed(), by=parse_by("api"))
    assert [g["api"] for g in res["groups"]] == ["Fetch", "Metadata", "Produce"]
    prod = group(res, api="Produce")
    assert prod["count"] == 3 and prod["latency_ms"]["p50"] == 4.0 and prod["records"] == 15
    res2 = stats_of(_mixed(), by=parse_by("client_id,api"))
    assert group(res2, client_id="p2", api="Produce")["count"] == 2
    assert group(res2, client_id="p1", api="Metadata")["count"] == 1


def test_group_by_client_broker_conn() -> None:
    res = stats_of(_mixed(), by=("client", "broker", "conn"))
    g = group(res, conn=1)
    assert g["client"] == "127.0.0.1:50001" and g["broker"] == "127.0.0.1:9092"
    assert g["count"] == 2 and g["latency_ms"]["max"] == 8.0


def test_group_by_topic_partition_expands() -> None:
    res = stats_of(_mixed(), by=("api", "topic", "partition"))
    a0 = group(res, api="Produce", topic="a", partition=0)
    assert a0["count"] == 2 and a0["records"] == 10 and a0["record_bytes"] == 1000
    assert a0["latency_ms"]["min"] == 4.0 and a0["latency_ms"]["max"] == 8.0
    b0 = group(res, api="Produce", topic="b", partition=0)
    assert b0["count"] == 2 and b0["records"] == 2
    # Metadata names topics a and c without partitions
    assert group(res, api="Metadata", topic="c", partition=None)["count"] == 1
    # Fetch errors belong to the partition that had them
    assert group(res, api="Fetch", topic="b", partition=0)["errors"] == {"OFFSET_OUT_OF_RANGE": 1}
    assert group(res, api="Fetch", topic="a", partition=1)["errors"] == {}


def test_group_by_topic_counts_an_exchange_once_per_topic() -> None:
    res = stats_of(_mixed(), by=("topic",))
    a = group(res, topic="a")
    assert a["count"] == 4          # two Produce, the Metadata, the Fetch
    assert a["records"] == 5 + 3 + 5 + 3
    assert group(res, topic="c")["count"] == 1


def test_topic_partitions_from_request_tree() -> None:
    ex = mk("Metadata", 12, req_body={"topics": topics_array(("x", [0, 2]))})
    assert [(t, p) for t, p, _ in named_topic_partitions(ex)] == [("x", 0), ("x", 2)]
    none = mk("ApiVersions", 3, cid=2, frame=10)
    assert named_topic_partitions(none) == []
    # grouped by topic, an exchange that names none counts under null
    res = stats_of([ex, none], by=("topic", "partition"))
    assert [(g["topic"], g["partition"], g["count"]) for g in res["groups"]] == \
        [("x", 0, 1), ("x", 2, 1), (None, None, 1)]


def test_parse_by_rejects_unknown() -> None:
    assert parse_by(" api , conn ") == ("api", "conn")
    with pytest.raises(ValueError):
        parse_by("api,nope")
    with pytest.raises(ValueError):
        groups_query(("bogus",))


# -- errors, statuses, waits, throttling ---------------------------------------------------


def test_errors_and_statuses() -> None:
    exs = [
        mk(lat=5.0, cid=1, errors=["NOT_LEADER_OR_FOLLOWER", "NOT_LEADER_OR_FOLLOWER"]),
        mk(lat=7.0, cid=2, errors=["REQUEST_TIMED_OUT"]),
        mk(lat=None, cid=3),                                   # unanswered
        mk(lat=None, cid=4, status="no_response_expected"),   # acks=0
        mk(lat=3.0, cid=5, status="malformed"),
    ]
    res = stats_of(exs)
    g = res["groups"][0]
    assert g["count"] == 5 and g["answered"] == 3
    assert g["unanswered"] == 1 and g["no_response"] == 1 and g["malformed"] == 1
    assert g["errors"] == {"NOT_LEADER_OR_FOLLOWER": 2, "REQUEST_TIMED_OUT": 1} and g["error_exchanges"] == 2
    assert g["latency_ms"]["min"] == 3.0 and g["latency_ms"]["max"] == 7.0
    assert g["bytes_out"] == 3 * 50 and g["bytes_in"] == 5 * 100
    orphan = mk(api="Unknown", version=None, lat=2.0, status="orphan_response")  # type: ignore[arg-type]
    res2 = stats_of([orphan])
    assert res2["groups"][0]["orphans"] == 1 and res2["groups"][0]["bytes_in"] == 0
    assert res2["groups"][0]["version"] is None
def test_wait_classification() -> None:
    fetch_idle = mk("Fetch", 11, lat=501.0, cid=1, req_body={"max_wait_ms": 500, "min_bytes": 1})
    fetch_near = mk("Fetch", 11, lat=455.0, cid=2, req_body={"max_wait_ms": 500, "min_bytes": 1})
    fetch_fast = mk("Fetch", 11, lat=20.0, cid=3, req_body={"max_wait_ms": 500, "min_bytes": 1},
                    partitions=[{"topic": "a", "partition": 0, "records": 4, "bytes": 400}])
    fetch_data = mk("Fetch", 11, lat=499.0, cid=4, req_body={"max_wait_ms": 500, "min_bytes": 1},
                    partitions=[{"topic": "a", "partition": 0, "records": 4, "bytes": 400}])
    fetch_short = mk("Fetch", 11, lat=499.0, cid=5, req_body={"max_wait_ms": 500, "min_bytes": 1000},
                     partitions=[{"topic": "a", "partition": 0, "records": 4, "bytes": 400}])
    join = mk("JoinGroup", 7, lat=3000.0, cid=6)
    join_mid = mk("JoinGroup", 7, lat=1.0, cid=7, errors=["MEMBER_ID_REQUIRED"])
    prod_all = mk("Produce", 9, lat=12.0, cid=8, req_body={"acks": -1})
    prod_one = mk("Produce", 9, lat=2.0, cid=9, req_body={"acks": 1})
    assert wait_kind(fetch_idle) == "fetch_max_wait"
    assert wait_kind(fetch_near) == "fetch_max_wait"
    assert wait_kind(fetch_fast) is None
    assert wait_kind(fetch_data) is None
    assert wait_kind(fetch_short) == "fetch_max_wait"
    assert wait_kind(join) == "join_group" and wait_kind(join_mid) is None
    # (waiting for the in-sync replicas is the work a Produce with acks=-1 asks for: service)
    assert wait_kind(prod_all) is None and wait_kind(prod_one) is None
    leader = Field("assignments", "array", 1, children=[Field("[0]", "SyncGroupRequestAssignment")])
    assert wait_kind(mk("SyncGroup", 3, lat=1000.0, req_body={"assignments": Field("x", "array", 0)})) \
        == "sync_group_follower"
    assert wait_kind(mk("SyncGroup", 3, lat=1.0, req_body={"assignments": leader})) is None
    res = stats_of(
        [fetch_idle, fetch_near, fetch_fast, fetch_data, fetch_short, join, join_mid, prod_all, prod_one], by=("api",))
    f = group(res, api="Fetch")
    assert f["waits"] == {"fetch_max_wait": 3} and f["service"] == 2
    assert f["latency_ms"]["max"] == 501.0
    assert f["latency_ms_excl_waits"]["min"] == 20.0 and f["latency_ms_excl_waits"]["max"] == 499.0
    j = group(res, api="JoinGroup")
    assert j["waits"] == {"join_group": 1} and j["latency_ms_excl_waits"]["max"] == 1.0
    p = group(res, api="Produce")
    assert p["waits"] == {} and p["service"] == 2 and p["latency_ms_excl_waits"]["max"] == 12.0



def test_throttling() -> None:
    exs = [mk(lat=1.0, cid=i, resp_body={"throttle_time_ms": t}) for i, t in enumerate([0, 100, 250, 0])]
    g = stats_of(exs)["groups"][0]
    assert g["throttled"] == 2 and g["throttle_time_ms"] == {"total": 350, "max": 250}


# -- throughput, top, histograms -----------------------------------------------------------


def test_throughput_and_request_rate() -> None:
    exs = [
        mk("Produce", lat=1.0, t=0.0, cid=1, partitions=[{"topic": "a", "partition": 0, "records": 10, "bytes": 1000}]),
        mk("Produce", lat=1.0, t=0.5, cid=2, partitions=[{"topic": "a", "partition": 0, "records": 10, "bytes": 1000}]),
        mk("Fetch", lat=3.0, t=1.2, cid=3, partitions=[{"topic": "a", "partition": 0, "records": 20, "bytes": 1900}]),
        mk("Metadata", lat=1.0, t=3.999, cid=4),
    ]
    thr = stats_of(exs)["throughput"]
    assert thr["duration_s"] == pytest.approx(4.0, abs=1e-6)
    assert thr["exchanges"] == 4 and thr["requests_per_s"] == 1.0
    (tp,) = thr["topic_partitions"]
    assert (tp["topic"], tp["partition"], tp["produced_records"], tp["produced_bytes"]) == ("a", 0, 20, 2000)
    assert (tp["fetched_records"], tp["fetched_bytes"]) == (20, 1900)
    assert tp["produced_records_per_s"] == 5.0
    secs = [(r["t"] - int(T0), r["requests"], r["produced_records"], r["fetched_records"]) for r in thr["per_second"]]
    assert secs == [(0, 2, 20, 0), (1, 1, 0, 20), (3, 1, 0, 0)]


def test_top_slowest() -> None:
    values = [5.0, 50.0, 1.0, 50.0, 20.0]
    exs = lat_exchanges(values)
    top = stats_of(exs, top=2)["top"]
    assert [r["latency_ms"] for r in top] == [50.0, 50.0]
    assert [r["correlation_id"] for r in top] == [1, 3]      # ties: by connection, then request frame
    assert top[0]["request_frame"] == 4 and top[0]["response_frame"] == 6
    assert top[0]["conn"] == 0 and top[0]["client"] == "127.0.0.1:50000" and top[0]["api"] == "Produce"
    assert [r["latency_ms"] for r in stats_of(exs, top=10)["top"]] == [50.0, 50.0, 20.0, 5.0, 1.0]
    assert stats_of(exs)["top"] == []


def test_histogram_buckets_1_2_5() -> None:
    """Buckets of a 1-2-5 log scale (ms), of the latencies rounded to the microsecond (1 us
    and under in the lowest), from an API's lowest bucket to its highest, the empty ones as
    zeros."""
    def buckets(values: list[float]) -> list[tuple[float, int]]:
        return figures.histograms(query_of(lat_exchanges(values)))["Produce"]

    assert buckets([1.0, 1.99, 2.0, 4.99, 5.0, 9.99, 10.0]) == [(1.0, 2), (2.0, 2), (5.0, 2), (10.0, 1)]
    assert buckets([0.5]) == [(pytest.approx(0.5), 1)] and bucket_lower(-1) == pytest.approx(0.5)
    assert buckets([0.0, 0.0004, 0.001]) == [(pytest.approx(0.001), 3)] and bucket_lower(-9) == pytest.approx(0.001)
    assert bucket_lower(7) == pytest.approx(200.0)
    hists = figures.histograms(query_of(lat_exchanges([1.0, 1.5, 3.0, 30.0])))
    assert hists["Produce"] == [(1.0, 2), (2.0, 1), (5.0, 0), (10.0, 0), (20.0, 1)]
    lines = histogram_lines(hists, width=8)
    assert lines[1].endswith("|████████| 2") and ">=     1ms" in lines[1]
    assert lines[3].endswith("|        | 0")
    assert bar(1, 8, 1) == "▏" and bar(0, 8, 4) == ""


def test_latency_series_per_api_and_second() -> None:
    exs = [mk(api="Metadata", lat=1.5, t=0.2, cid=1, frame=1), mk(api="Metadata", lat=2.5, t=0.7, cid=2, frame=10),
           mk(api="Metadata", lat=4.0, t=2.1, cid=3, frame=20), mk(api="Fetch", lat=9.0, t=0.4, cid=4, frame=30)]
    series = figures.latency_series(query_of(exs))
    assert {api: [(s - int(T0), n, round(mean, 3), round(mx, 3)) for s, n, mean, mx in rows]
            for api, rows in series.items()} == {"Fetch": [(0, 1, 9.0, 9.0)],
                                                 "Metadata": [(0, 2, 2.0, 2.5), (2, 1, 4.0, 4.0)]}


def test_points_are_every_kth_in_time_within_the_cap() -> None:
    """The plots' scatter: every k-th answered exchange in time order, k the smallest that
    keeps at most ``cap`` points."""
    exs = lat_exchanges([1.0 + i % 7 for i in range(1000)]) + [mk(lat=None, t=20.0, cid=5000, frame=90_000)]
    q = query_of(exs)
    for cap, k in ((100, 10), (300, 4), (1000, 1), (5000, 1)):
        pts = figures.points(q, cap)["Produce"]
        assert len(pts) == len(range(0, 1000, k)) <= cap, cap
        assert pts == [(exs[i].request_time, round(lat_of(exs[i]), 3)) for i in range(0, 1000, k)], cap


# -- output formats -------------------------------------------------------------------------


def _report_exchanges() -> list[Exchange]:
    return _mixed() + lat_exchanges([float(v) for v in range(1, 21)], conn=3)


def _report() -> dict[str, Any]:
    return stats_of(_report_exchanges(), top=3, views=COSTLY_VIEWS)


def test_json_output_has_issue_shape() -> None:
    res = _report()
    buf = io.StringIO()
    write_json(res, buf)
    doc = json.loads(buf.getvalue())
    assert doc == json.loads(json.dumps(res))
    g = next(g for g in doc["groups"] if g["api"] == "Produce" and g["version"] == 9)
    for k in ("api", "version", "count", "errors", "latency_ms", "bytes_in", "bytes_out"):
        assert k in g
    assert set(g["latency_ms"]) == {"min", "p50", "p90", "p99", "p999", "max", "mean"}
    assert g["count"] == 22 and g["latency_ms"]["p50"] == 9.0 and g["latency_ms"]["p99"] == 20.0
    assert len(doc["top"]) == 3 and doc["top"][0]["latency_ms"] == 20.0
    assert {"api", "version", "correlation_id", "conn", "client", "broker", "request_frame",
            "response_frame", "latency_ms"} <= set(doc["top"][0])
    assert "throughput" in doc and "accuracy" in doc


def test_csv_output_matches_json() -> None:
    res = _report()
    buf = io.StringIO()
    write_csv(res, buf)
    rows = list(csv.DictReader(io.StringIO(buf.getvalue())))
    assert len(rows) == len(res["groups"])
    for row, g in zip(rows, res["groups"], strict=True):
        assert row["api"] == g["api"] and int(row["version"]) == g["version"]
        assert int(row["count"]) == g["count"] and int(row["bytes_in"]) == g["bytes_in"]
        for k in ("min", "p50", "p90", "p99", "p999", "max", "mean"):
            assert float(row[f"latency_ms_{k}"]) == g["latency_ms"][k]
        assert float(row["latency_ms_excl_waits_p50"]) == g["latency_ms_excl_waits"]["p50"]
        assert int(row["throttle_time_ms_total"]) == g["throttle_time_ms"]["total"]
    fetch = next(r for r in rows if r["api"] == "Fetch")
    assert fetch["errors"] == "OFFSET_OUT_OF_RANGE=1"
    header, _ = csv_rows(res)
    assert header[:3] == ["api", "version", "count"]


def test_plain_text_and_rich_tables() -> None:
    from rich.console import Console

    res = _report()
    ts = tables(res)
    assert [t.title.split(" ")[0] for t in ts] == ["Latency", "Errors", "Time", "Slowest", "Throughput", "Requests"]
    plain = Console(file=io.StringIO(), width=200, force_terminal=False)
    render_text(res, plain, figures.histograms(query_of(_report_exchanges())))
    text = plain.file.getvalue()  # type: ignore[attr-defined]
    line = next(ln for ln in text.splitlines() if ln.startswith("Produce") and " 9 " in ln)
    cols = line.split()
    assert cols[:3] == ["Produce", "9", "22"]
    assert "20.0" in cols and "9.00" in cols           # max and p50
    assert "Percentiles: nearest-rank, exact." in text and "Produce latency" in text
    assert "\x1b[" not in text
    rich_c = Console(file=io.StringIO(), width=200, force_terminal=True)
    render_text(res, rich_c, None)
    assert "Produce" in rich_c.file.getvalue()  # type: ignore[attr-defined]


def test_plot_png_and_html(tmp_path: Any) -> None:
    pytest.importorskip("matplotlib")
    from analyzer.sinks.stats_render import write_plot

    res = _report()
    q = query_of(_report_exchanges())
    hists, series = figures.histograms(q), figures.latency_series(q)
    png = tmp_path / "s.png"
    write_plot(str(png), res, hists, series, figures.points(q), "test")
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    page = tmp_path / "s.html"
    write_plot(str(page), res, hists, series, None, "test")
    text = page.read_text()
    assert "data:image/png;base64," in text and "<td>Produce</td>" in text
    assert html_page(b"x", res, "<t>").count("&lt;t&gt;") == 2
    with pytest.raises(ValueError):
        write_plot(str(tmp_path / "s.svg"), res, {}, {}, None)


def test_empty_report() -> None:
    res = stats_of([], top=5)
    assert res["groups"] == [] and res["top"] == [] and res["throughput"]["requests_per_s"] is None
    assert res["throughput"]["duration_s"] == 0.0 and res["throughput"]["exchanges"] == 0
    assert res["throughput"]["per_second"] == [] and res["throughput"]["topic_partitions"] == []
    buf = io.StringIO()
    write_csv(res, buf)
    assert buf.getvalue().strip() == "api,version,count"
    q = query_of([])
    assert figures.histograms(q) == {} and figures.latency_series(q) == {} and figures.points(q) == {}


# -- the command on real captures -------------------------------------------------------------

REPO = __import__("pathlib").Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "captures"
SAMPLES = REPO / "samples"


def _cli() -> Any:
    try:
        from analyzer.cli import main
    except ImportError as e:  # pragma: no cover - before the pipeline lands
        pytest.skip(f"analyzer.cli not importable: {e}")
    return main


def _run(args: list[str]) -> Any:
    from click.testing import CliRunner

    main = _cli()
    try:
        runner = CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:
        runner = CliRunner()
    return runner.invoke(main, args, catch_exceptions=False)


def _shared(name: str) -> Any:
    p = SHARED / name
    if not p.exists():
        pytest.skip(f"{p} absent (shared capture corpus not available)")
    return p


def _pcap_times(path: Any) -> list[float]:
    """Packet timestamps of a classic pcap, read independently of the analyzer."""
    import struct

    data = path.read_bytes()
    magic = data[:4]
    endian = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    nano = magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
    pos, out = 24, []
    while pos + 16 <= len(data):
        sec, frac, incl, _orig = struct.unpack_from(endian + "IIII", data, pos)
        out.append(sec + frac / (1e9 if nano else 1e6))
        pos += 16 + incl
    return out


@pytest.mark.shared
@pytest.mark.parametrize("name", ["admin_kafkajs_tansu.pcap", "group_kafkajs_tansu.pcap",
                                  "comp_none_kafkajs_tansu.pcap"])
def test_cli_counts_and_latency_match_framing_check(name: str) -> None:
    cap = _shared(name)
    truth = json.loads(cap.with_suffix(".tshark.json").read_text())["framing_check"]
    r = _run(["stats", str(cap), "-f", "json", "--by", "api,version", "--top", "3"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    got = {(g["api"], g["version"]): g["count"] for g in doc["groups"]}
    want = {(k.split(":", 1)[1], int(v)): n for k, vs in truth["requests"].items() for v, n in vs.items()}
    assert got == want
    assert sum(g["answered"] for g in doc["groups"]) == truth["responses_total"]
    # latency from the packet times of the request and response PDUs (small PDUs: one packet each)
    times = _pcap_times(cap)
    cols = truth["pdus_columns"]
    rows = [dict(zip(cols, p, strict=True)) for p in truth["pdus"]]
    reqs = {(p["tcp_stream"], p["correlation_id"]): p for p in rows if p["dir"] == "req"}
    lat_by_api: dict[int, list[float]] = {}
    for p in rows:
        if p["dir"] != "resp":
            continue
        q = reqs[(p["tcp_stream"], p["correlation_id"])]
        lat_by_api.setdefault(q["api_key"], []).append((times[p["first_frame"] - 1] - times[q["first_frame"] - 1]) * 1000)
    metadata = max((g for g in doc["groups"] if g["api"] == "Metadata"), key=lambda g: g["count"])
    assert metadata["latency_ms"]["max"] == pytest.approx(max(lat_by_api[3]), abs=0.002)
    assert metadata["latency_ms"]["min"] == pytest.approx(min(lat_by_api[3]), abs=0.002)
    allmax = max(v for vs in lat_by_api.values() for v in vs)
    assert doc["top"][0]["latency_ms"] == pytest.approx(allmax, abs=0.002)
    assert len(doc["top"]) == 3 and doc["top"][0]["request_frame"] < doc["top"][0]["response_frame"]


@pytest.mark.shared
def test_cli_json_csv_table_agree() -> None:
    cap = _shared("group_kafkajs_tansu.pcap")
    doc = json.loads(_run(["stats", str(cap), "-f", "json", "--by", "api"]).stdout)
    rows = list(csv.DictReader(io.StringIO(_run(["stats", str(cap), "-f", "csv", "--by", "api"]).stdout)))
    assert [r["api"] for r in rows] == [g["api"] for g in doc["groups"]]
    for r, g in zip(rows, doc["groups"], strict=True):
        assert int(r["count"]) == g["count"]
        assert (float(r["latency_ms_p99"]) if r["latency_ms_p99"] else None) == g["latency_ms"]["p99"]
    text = _run(["stats", str(cap), "--by", "api", "--histogram"]).stdout
    hb = next(g for g in doc["groups"] if g["api"] == "Heartbeat")
    line = next(ln for ln in text.splitlines() if ln.startswith("Heartbeat "))
    assert line.split()[1] == str(hb["count"])
    assert "Heartbeat latency (" in text and "JoinGroup" in text
    jg = next(g for g in doc["groups"] if g["api"] == "JoinGroup")
    assert jg["waits"].get("join_group", 0) >= 1
    sg = next(g for g in doc["groups"] if g["api"] == "SyncGroup")
    assert sg["waits"].get("sync_group_follower", 0) >= 1 and sg["service"] >= 1


@pytest.mark.shared
def test_cli_group_by_conn_and_client_id() -> None:
    cap = _shared("concurrent_mixed_tansu.pcapng")
    truth = json.loads(cap.with_suffix(".tshark.json").read_text())["framing_check"]
    doc = json.loads(_run(["stats", str(cap), "-f", "json", "--by", "conn"]).stdout)
    assert sum(g["count"] for g in doc["groups"]) == truth["requests_total"]
    assert len(doc["groups"]) == truth["connections"]
    doc2 = json.loads(_run(["stats", str(cap), "-f", "json", "--by", "client_id,api"]).stdout)
    assert sum(g["count"] for g in doc2["groups"]) == truth["requests_total"]
    assert len({g["client_id"] for g in doc2["groups"]}) >= 4


def _sample(name: str) -> Any:
    p = SAMPLES / name
    if not p.exists():
        pytest.skip(f"{p} absent")
    return p


def test_cli_sample_throughput_matches_client_report() -> None:
    cap = _sample("produce_fetch_rdkafka_gzip.pcap")
    man = json.loads((SAMPLES / "manifest.json").read_text())["produce_fetch_rdkafka_gzip"]
    doc = json.loads(_run(["stats", str(cap), "-f", "json", "--by", "api,topic,partition"]).stdout)
    tps = doc["throughput"]["topic_partitions"]
    produced = sum(t["produced_records"] for t in tps if t["topic"] == "quickstart")
    fetched = sum(t["fetched_records"] for t in tps if t["topic"] == "quickstart")
    assert produced == man["client_result"]["produced"]["quickstart"] == 20
    assert fetched == man["client_result"]["consumed"]["quickstart"]
    prod = [g for g in doc["groups"] if g["api"] == "Produce"]
    assert {g["topic"] for g in prod} == {"quickstart"} and {g["partition"] for g in prod} == {0, 1}
    assert sum(g["records"] for g in prod) == 20


def test_cli_sample_errors_by_name() -> None:
    cap = _sample("admin_rdkafka.pcap")
    doc = json.loads(_run(["stats", str(cap), "-f", "json", "--by", "api"]).stdout)
    errs = {g["api"]: g["errors"] for g in doc["groups"]}
    assert errs["CreateTopics"].get("TOPIC_ALREADY_EXISTS") == 1
    assert errs["DeleteTopics"].get("UNKNOWN_TOPIC_OR_PARTITION") == 1
    assert sum(g["count"] for g in doc["groups"]) == 11


def test_cli_plot_and_usage_errors(tmp_path: Any) -> None:
    pytest.importorskip("matplotlib")
    cap = _sample("group_rdkafka.pcap")
    png = tmp_path / "lat.png"
    r = _run(["stats", str(cap), "--plot", str(png)])
    assert r.exit_code == 0 and png.read_bytes()[:4] == b"\x89PNG"
    r = _run(["stats", str(cap), "--by", "api,nope"])
    assert r.exit_code == 2
    r = _run(["stats", str(tmp_path / "missing.pcap")])
    assert r.exit_code == 1




def test_cli_request_rates_can_be_compared() -> None:
    """The average and the peak count the same one-second buckets: the average never exceeds
    the peak, and a capture shorter than a second is not turned into a rate it never had."""
    short = _run(["stats", str(_sample("admin_rdkafka.pcap"))]).stdout.splitlines()
    assert "Requests: 11 over 8.7 ms, all within one second" in short
    assert not any("/s on average" in line for line in short)
    long = _run(["stats", str(_sample("group_rdkafka.pcap"))]).stdout.splitlines()
    (line,) = [x for x in long if x.startswith("Requests:")]
    assert line == "Requests: 64 over 5.1 s; per second, over the 6 seconds they span: 10.7 on average, 26 at the busiest"
    doc = json.loads(_run(["stats", str(_sample("group_rdkafka.pcap")), "-f", "json"]).stdout)
    per_second = [row["requests"] for row in doc["throughput"]["per_second"]]
    assert sum(per_second) == 64 and max(per_second) == 26



def test_plot_always_draws_the_slowest_and_the_erring_apis() -> None:
    """Ten APIs, the 8 busiest each seen 5+ times; the slowest (JoinGroup, once) and one with
    an error (Metadata, once) are drawn all the same, in place of the least busy."""
    from analyzer.sinks.stats_render import plot_apis, plot_highlights

    exchanges = []
    i = 0
    for k, api in enumerate(["A1", "A2", "A3", "A4", "A5", "A6", "A7", "A8"]):
        for _ in range(5 + k):
            i += 1
            exchanges.append(mk(api=api, lat=1.0 + k, t=i * 0.01, cid=i, frame=3 * i))
    exchanges.append(mk(api="JoinGroup", lat=3000.0, t=1.0, cid=900, frame=2700))
    exchanges.append(mk(api="Metadata", lat=0.5, t=1.1, cid=901, frame=2703, errors=["LEADER_NOT_AVAILABLE"]))
    res = stats_of(exchanges)
    q = query_of(exchanges)
    counts = {api: sum(n for _e, n in b) for api, b in figures.histograms(q).items()}
    slowest, erring = plot_highlights(res, figures.latency_series(q))
    assert slowest == "JoinGroup" and erring == {"Metadata": 1}
    assert plot_apis(counts, slowest, erring) == ["A8", "A7", "A6", "A5", "A4", "A3", "JoinGroup", "Metadata"]


@pytest.mark.shared
def test_plot_of_a_real_capture_keeps_its_slowest_api() -> None:
    """group_rdkafka_tansu: JoinGroup (2 exchanges, the slowest: held for the rebalance) is not
    among the 8 busiest of its 14 APIs."""
    pytest.importorskip("matplotlib")
    from analyzer.pipeline import Options, Run
    from analyzer.sinks.stats_render import plot_apis, plot_highlights, plot_png

    exs = list(Run(str(_shared("group_rdkafka_tansu.pcap")), Options(decode="lite")))
    res = stats_of(exs)
    q = query_of(exs)
    hists, series = figures.histograms(q), figures.latency_series(q)
    counts = {api: sum(n for _e, n in b) for api, b in hists.items()}
    assert len(counts) == 14 and "JoinGroup" not in sorted(counts, key=lambda a: -counts[a])[:8]
    slowest, erring = plot_highlights(res, series)
    assert slowest == "JoinGroup" and erring == {"JoinGroup": 2}
    drawn = plot_apis(counts, slowest, erring)
    assert len(drawn) == 8 and "JoinGroup" in drawn
    assert plot_png(res, hists, series)[:4] == b"\x89PNG"


def test_cli_engine_failure_is_one_line(monkeypatch: Any) -> None:
    """When the engine fails (here: a memory limit too small for any query), stats says so
    in one line and exits 1, no traceback."""
    from click.testing import CliRunner

    from analyzer import engine
    from analyzer.cli import main

    monkeypatch.setattr(engine, "MEMORY_LIMIT", "1KB")
    r = CliRunner().invoke(main, ["stats", str(SAMPLES / "group_rdkafka.pcap")])
    assert r.exit_code == 1, r.output
    assert r.stderr.count("\n") == 1 and "error: the figures' queries failed:" in r.stderr, r.stderr
