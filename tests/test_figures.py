"""stats' figures as queries over the tables (analyzer/figures.py), checked against an
independent reckoning: the exchanges of every capture of the corpus decoded in full by the
Python decoder (not the core's tables) and counted here in plain Python (nearest-rank
percentiles, sums, the slowest, per second, the 1-2-5 histogram buckets), compared with
what the queries give over the tables ``export`` wrote, for each kind of grouping; ``stats
--query`` prints the queries, ``sql`` runs them, and Spark runs the same definition."""
from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb  # noqa: E402
import pytest

from analyzer import engine, figures  # noqa: E402
from analyzer.figures import PERCENTILES, groups_query  # noqa: E402
from analyzer.model import Exchange  # noqa: E402
from analyzer.pipeline import Options, Run  # noqa: E402
from analyzer.runs import Decode  # noqa: E402
from analyzer.sinks.stats import named_topic_partitions, throttle_ms, wait_kind  # noqa: E402
from tests.conftest import REPO, SHARED_CAPTURES, capture_paths  # noqa: E402

# how much the corpus holds at least: the samples alone, or with ../shared's captures
_SHARED = SHARED_CAPTURES.is_dir()


def _at_least(with_shared: int, samples_alone: int) -> int:
    return with_shared if _SHARED else samples_alone


GROUPINGS = (("api", "version"), ("client_id",), ("topic",), ("topic", "partition"), ("api", "topic"),
             ("conn", "client", "broker"), ("broker", "api"))


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "analyzer", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=600)


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], Path]:
    paths = [str(p) for p in capture_paths()]
    out = tmp_path_factory.mktemp("figures") / "t"
    r = cli("export", *paths, "--out", str(out))
    assert r.returncode == 0, r.stderr
    return paths, out


def _each_capture(paths: list[str], out: Path) -> Iterator[tuple[str, Any, list[Exchange]]]:
    """(path, a DuckDB connection whose ``exchanges`` are that capture's alone, the capture's
    exchanges decoded in full) for each capture of the exported tables in ``out``."""
    db = duckdb.connect()
    db.execute(f"CREATE TABLE everything AS SELECT * FROM read_parquet('{out}/exchanges/*.parquet')")
    for path in paths:
        quoted = path.replace("'", "''")
        db.execute(f"CREATE OR REPLACE VIEW exchanges AS SELECT * FROM everything WHERE capture = '{quoted}'")
        yield path, db, list(Run(path, Options(decode=Decode.FULL)))


# -- the independent reckoning -------------------------------------------------------------------

def _rank(values: list[float], p: float) -> float:
    return sorted(values)[max(1, math.ceil(p * len(values))) - 1]


def _summary(values: list[float], ns: list[int]) -> dict[str, float | None]:
    if not values:
        return {k: None for k in ("min", "p50", "p90", "p99", "p999", "max", "mean")}
    out = {"min": round(min(values), 3)}
    out.update({name: round(_rank(values, p), 3) for name, p in PERCENTILES})
    out["max"] = round(max(values), 3)
    out["mean"] = round(sum(ns) / len(ns) / 1e6, 3)
    return out


def _ns(ex: Exchange) -> int:
    assert ex.request is not None and ex.response is not None
    return round((ex.response.last_ts - ex.request.last_ts) * 1000.0 * 1e6)


def reckon_groups(exs: list[Exchange], by: tuple[str, ...]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Each group's count, statuses, errors, latency figures, bytes and throttling, for the
    --by keys ``by`` (topic and partition: each exchange once per topic-partition it names)."""
    rows: dict[tuple[Any, ...], list[Exchange]] = {}
    for ex in exs:
        conn = ex.conn
        plain = {"api": ex.api_name, "version": ex.api_version, "client_id": ex.client_id,
                 "client": str(conn.client), "broker": str(conn.broker), "conn": conn.id}
        named = {(t, p) for t, p, _d in named_topic_partitions(ex)} or {(None, None)}
        keys = {tuple({**plain, "topic": t, "partition": p}[b] for b in by) for t, p in named}
        for k in keys:
            rows.setdefault(k, []).append(ex)
    out = {}
    for k, group in rows.items():
        answered = [ex for ex in group if ex.latency_ms is not None]
        service = [ex for ex in answered if wait_kind(ex) is None]
        lat = [ex.latency_ms for ex in answered]
        thr = [throttle_ms(ex) for ex in group]
        out[k] = {
            "count": len(group), "answered": len(answered),
            **{name: sum(1 for ex in group if ex.status == status) for name, status in
               (("unanswered", "unanswered"), ("orphans", "orphan_response"),
                ("no_response", "no_response_expected"), ("malformed", "malformed"))},
            "latency_ms": _summary(lat, [_ns(ex) for ex in answered]),  # type: ignore[arg-type]
            "latency_ms_excl_waits": _summary([ex.latency_ms for ex in service],  # type: ignore[misc]
                                              [_ns(ex) for ex in service]),
            "service": len(service),
            "bytes_in": sum(ex.request.size + 4 for ex in group if ex.request is not None),
            "bytes_out": sum(ex.response.size + 4 for ex in group if ex.response is not None),
            "throttled": sum(1 for t in thr if t > 0), "throttle_time_ms": {"total": sum(thr), "max": max(thr)},
        }
        if "topic" not in by and "partition" not in by:
            errors: dict[str, int] = {}
            for ex in group:
                for e in ex.error_codes:
                    errors[e] = errors.get(e, 0) + 1
            out[k]["errors"] = errors
            out[k]["records"] = sum(int(p.get("records") or 0) for ex in group for p in ex.partitions)
    return out


def test_the_groups_query_counts_as_the_decoder_reckons(tables: tuple[list[str], Path]) -> None:
    """stats' groups (figures.groups over the core's tables) equal the reckoning over the
    exchanges the Python decoder decodes in full, for every grouping, on every capture."""
    paths, out = tables
    compared = 0
    for path, db, exs in _each_capture(paths, out):
        for by in GROUPINGS:
            got = {tuple(g[b] for b in by): g for g in figures.groups(engine.query_of(db), by)}
            want = reckon_groups(exs, by)
            assert set(got) == set(want), (path, by)
            for k, w in want.items():
                assert {f: got[k][f] for f in w} == w, (path, by, k)
            compared += len(want)
    assert compared > _at_least(1500, 400)


def _hist_bucket(v: float) -> int:
    """The 1-2-5 bucket of a latency in ms (3 x the decade + 0, 1, 2), as stats defines it."""
    v = max(round(v, 3), 0.001)
    d = math.floor(math.log10(v))
    m = v / 10.0 ** d
    if m >= 9.999999:
        d, m = d + 1, 1.0
    return d * 3 + (0 if m < 2.0 else (1 if m < 5.0 else 2))


def test_the_other_figures_count_as_the_decoder_reckons(tables: tuple[list[str], Path]) -> None:
    """The slowest exchanges, the span and requests per second, the per-second rows, the
    latency histograms and the latency over time: each as the reckoning over the exchanges
    decoded in full gives it, on every capture."""
    paths, out = tables
    slowest = seconds = buckets = 0
    for path, db, exs in _each_capture(paths, out):
        q = engine.query_of(db)
        answered = [ex for ex in exs if ex.latency_ms is not None]
        # the 12 slowest, in order (ties: connection, request frame, correlation id)
        want_top = sorted(answered, key=lambda ex: (-round(ex.latency_ms, 3), ex.conn.id, ex.request_frame or 0,  # type: ignore[arg-type]
                                                    ex.correlation_id if ex.correlation_id is not None else -1))[:12]
        got_top = figures.top(q, 12)
        assert [(t["latency_ms"], t["conn"], t["request_frame"], t["api"]) for t in got_top] == \
            [(round(ex.latency_ms, 3), ex.conn.id, ex.request_frame, ex.api_name) for ex in want_top], path  # type: ignore[arg-type]
        slowest += len(got_top)
        # span, per second (by each exchange's first time: its request's, else its response's)
        t0 = [ex.request_time if ex.request_time is not None else ex.response_time for ex in exs]
        t1 = [ex.response_time if ex.response_time is not None else ex.request_time for ex in exs]
        thr = figures.throughput(q)
        assert thr["exchanges"] == len(exs), path
        if exs:
            assert (thr["first_time"], thr["last_time"]) == (min(t0), max(t1)), path  # type: ignore[type-var]
        per: dict[int, int] = {}
        for t in t0:
            per[int(math.floor(t))] = per.get(int(math.floor(t)), 0) + 1  # type: ignore[arg-type]
        assert [(r["t"], r["requests"]) for r in thr["per_second"]] == sorted(per.items()), path
        seconds += len(per)
        # the histograms: each API's filled buckets
        hist: dict[str, dict[float, int]] = {}
        for ex in answered:
            lower = figures.bucket_lower(_hist_bucket(ex.latency_ms))  # type: ignore[arg-type]
            h = hist.setdefault(ex.api_name, {})
            h[lower] = h.get(lower, 0) + 1
        assert {api: {lo: n for lo, n in rows if n} for api, rows in figures.histograms(q).items()} == hist, path
        buckets += sum(len(h) for h in hist.values())
        # latency over time: per API and second of the request, the count and the largest
        series: dict[str, dict[int, list[float]]] = {}
        for ex in answered:
            series.setdefault(ex.api_name, {}).setdefault(int(math.floor(ex.request_time)), []).append(ex.latency_ms)  # type: ignore[arg-type]
        assert {api: [(t, n, round(hi, 9)) for t, n, _mean, hi in rows]
                for api, rows in figures.latency_series(q).items()} == \
            {api: [(t, len(v), round(max(v), 9)) for t, v in sorted(per_s.items())] for api, per_s in series.items()}, path
    assert slowest > _at_least(300, 120) and seconds > _at_least(100, 25) and buckets > _at_least(300, 120)


def test_stats_query_prints_what_sql_runs(tables: tuple[list[str], Path]) -> None:
    paths, out = tables
    r = cli("stats", "--query", "--by", "client_id,api", paths[0])
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == groups_query(("client_id", "api")).strip()
    r = cli("sql", paths[0], r.stdout, "-f", "json")
    assert r.returncode == 0, r.stderr
    assert '"latency_ms_p99"' in r.stdout and '"client_id"' in r.stdout
    r = cli("stats", "--query", "--top", "5", paths[0])
    assert r.returncode == 0 and r.stdout.strip() == figures.top_query(5).strip()


@pytest.mark.slow
def test_spark_runs_the_same_definition(tables: tuple[list[str], Path]) -> None:
    """The groups' query, transpiled to Spark SQL (figures.spark_sql: sqlglot), gives on Spark
    what DuckDB gives, value for value, over the corpus' tables, for each kind of grouping, and
    so does the slowest exchanges' query: one definition on both engines."""
    pytest.importorskip("pyspark")
    pytest.importorskip("sqlglot")
    from analyzer.figures import spark_sql
    from analyzer.spark.session import make_session, stop_session

    _paths, out = tables
    db = duckdb.connect()
    db.execute(f"CREATE VIEW exchanges AS SELECT * FROM read_parquet('{out}/exchanges/*.parquet')")
    spark = make_session("local[2]", shuffle_partitions=2)
    try:
        spark.conf.set("spark.sql.ansi.enabled", "false")
        spark.read.parquet(str(out / "exchanges")).createOrReplaceTempView("exchanges")
        from analyzer.figures import (
            histogram_query,
            latency_series_query,
            per_second_query,
            top_query,
            topic_partitions_query,
        )

        for q in [groups_query(by) for by in GROUPINGS] + [top_query(50), topic_partitions_query(),
                                                            per_second_query(), histogram_query(),
                                                            latency_series_query()]:
            cur = db.execute(q)
            want = sorted(cur.fetchall(), key=repr)
            rows = spark.sql(spark_sql(q)).collect()
            assert list(rows[0].asDict()) == [d[0] for d in cur.description], q
            got = sorted((tuple(r) for r in rows), key=repr)
            assert len(got) > _at_least(40, 4) and got == want, q
    finally:
        stop_session(spark)


def test_sql_has_the_figures_as_views(tables: tuple[list[str], Path]) -> None:
    """`sql` defines stats' figures as views (stats_groups, stats_top, stats_throughput,
    stats_topic_partitions, stats_per_second, stats_histogram, stats_latency_series): over a
    capture, what stats -f json says."""
    import json

    paths, _out = tables
    path = next(p for p in paths if p.endswith("group_rdkafka.pcap"))
    report = json.loads(cli("stats", "-f", "json", "--top", "3", path).stdout)
    r = cli("sql", path, "SELECT * FROM stats_per_second", "-f", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == report["throughput"]["per_second"]
    r = cli("sql", path, "SELECT api, version, count, latency_ms_p99 FROM stats_groups", "-f", "json")
    assert json.loads(r.stdout) == [{k: g[k] if k != "latency_ms_p99" else g["latency_ms"]["p99"]
                                     for k in ("api", "version", "count", "latency_ms_p99")} for g in report["groups"]]
    r = cli("sql", path, "SELECT latency_ms, request_frame FROM stats_top LIMIT 3", "-f", "json")
    assert json.loads(r.stdout) == [{"latency_ms": t["latency_ms"], "request_frame": t["request_frame"]}
                                    for t in report["top"]]
    for view in ("stats_throughput", "stats_topic_partitions", "stats_histogram", "stats_latency_series"):
        r = cli("sql", path, f"SELECT count(*) AS n FROM {view}", "-f", "json")
        assert r.returncode == 0 and json.loads(r.stdout)[0]["n"] >= 1, view
