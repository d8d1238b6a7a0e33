"""stats' figures as queries over the tables (analyzer/figures.py): the groups' query, run by
DuckDB over the exported tables of a capture, gives stats' groups (the columns of
``stats -f csv``) on every capture of the corpus, for each kind of grouping; ``stats --query``
prints it, and ``sql`` runs it."""
from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

duckdb = pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

from analyzer.figures import groups_query  # noqa: E402
from analyzer.pipeline import Options, Run  # noqa: E402
from analyzer.runs import Decode  # noqa: E402
from analyzer.sinks.stats import StatsAccumulator  # noqa: E402
from analyzer.sinks.stats_render import csv_rows  # noqa: E402
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


def _each_capture(paths: list[str], out: Path) -> Iterator[tuple[str, Any]]:
    """(path, a DuckDB connection whose ``exchanges`` are that capture's alone) for each
    capture of the exported tables in ``out``."""
    db = duckdb.connect()
    db.execute(f"CREATE TABLE everything AS SELECT * FROM read_parquet('{out}/exchanges/*.parquet')")
    for path in paths:
        quoted = path.replace("'", "''")
        db.execute(f"CREATE OR REPLACE VIEW exchanges AS SELECT * FROM everything WHERE capture = '{quoted}'")
        yield path, db


def test_the_groups_query_gives_stats_groups(tables: tuple[list[str], Path]) -> None:
    paths, out = tables
    compared = 0
    for path, db in _each_capture(paths, out):
        for by in GROUPINGS:
            cur = db.execute(groups_query(by))
            cols = [d[0] for d in cur.description]
            got = [{k: v for k, v in zip(cols, row, strict=True) if k != "capture"} for row in cur.fetchall()]
            acc = StatsAccumulator(by).add_all(Run(path, Options(decode=Decode.LITE_TOPICS)))
            _header, want = csv_rows(acc.result())
            for w in want:
                assert w.pop("exact"), (path, by)     # (within the exact limit: the sketch is not the query's)
            assert sorted(got, key=repr) == sorted(want, key=repr), (path, by)
            compared += len(want)
    assert compared > _at_least(1500, 400)


def test_stats_query_prints_what_sql_runs(tables: tuple[list[str], Path]) -> None:
    paths, out = tables
    r = cli("stats", "--query", "--by", "client_id,api", paths[0])
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == groups_query(("client_id", "api")).strip()
    r = cli("sql", paths[0], r.stdout, "-f", "json")
    assert r.returncode == 0, r.stderr
    assert '"latency_ms_p99"' in r.stdout and '"client_id"' in r.stdout


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


def test_the_top_query_gives_stats_slowest_exchanges(tables: tuple[list[str], Path]) -> None:
    """`stats --top N`'s slowest exchanges are the top query's rows, on every capture."""
    from analyzer.figures import top_query

    paths, out = tables
    seen = 0
    for path, db in _each_capture(paths, out):
        cur = db.execute(top_query(12))
        cols = [d[0] for d in cur.description]
        got = [{k: v for k, v in zip(cols, row, strict=True) if k != "capture"} for row in cur.fetchall()]
        want = StatsAccumulator(keep_top=100).add_all(Run(path, Options(decode=Decode.LITE))).result(top=12)["top"]
        # (equal latencies: the order among exchanges of one connection, frame and id is the heap's)
        assert [(r["latency_ms"], r["conn"], r["request_frame"]) for r in got] == \
            [(r["latency_ms"], r["conn"], r["request_frame"]) for r in want], path
        assert sorted(got, key=repr) == sorted(want, key=repr), path
        seen += len(want)
    assert seen > _at_least(300, 120)
    r = cli("stats", "--query", "--top", "5", paths[0])
    assert r.returncode == 0 and r.stdout.strip() == top_query(5).strip()


def test_the_throughput_queries_give_stats_throughput(tables: tuple[list[str], Path]) -> None:
    """stats' throughput (span, exchanges, requests per second), per topic-partition and per
    second are the three throughput queries' rows, on every capture."""
    from analyzer.figures import per_second_query, throughput_query, topic_partitions_query

    paths, out = tables

    def rows(db: Any, q: str) -> list[dict]:
        cur = db.execute(q)
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]

    tps = seconds = 0
    for path, db in _each_capture(paths, out):
        want = StatsAccumulator().add_all(Run(path, Options(decode=Decode.LITE))).result()["throughput"]
        (span,) = rows(db, throughput_query())
        assert span == {k: want[k] for k in span}, path
        assert rows(db, topic_partitions_query()) == want["topic_partitions"], path
        assert rows(db, per_second_query()) == want["per_second"], path
        tps += len(want["topic_partitions"])
        seconds += len(want["per_second"])
    assert tps > _at_least(50, 20) and seconds > _at_least(100, 25)


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


def test_the_plot_queries_give_stats_histograms_and_latency_series(tables: tuple[list[str], Path]) -> None:
    """What stats' plots draw: the latency histograms per API (the filled buckets, their
    lower edges) and the latency over time per API and second (count, mean, max), as the
    histogram and latency-series queries give them, on every capture."""
    from analyzer.figures import histogram_query, latency_series_query

    paths, out = tables
    buckets = 0
    for path, db in _each_capture(paths, out):
        acc = StatsAccumulator().add_all(Run(path, Options(decode=Decode.LITE)))
        got: dict = {}
        for api, _bucket, lower, n in db.execute(histogram_query()).fetchall():
            got.setdefault(api, {})[lower] = n
        assert got == {api: {lo: n for lo, n in rows if n} for api, rows in acc.histograms().items()}, path
        series: dict = {}
        for api, t, n, mean, hi in db.execute(latency_series_query()).fetchall():
            series.setdefault(api, []).append((t, n, mean, hi))
        assert series == {api: [tuple(x) for x in rows] for api, rows in acc.latency_series().items()}, path
        buckets += sum(len(b) for b in got.values())
    assert buckets > _at_least(300, 120)
