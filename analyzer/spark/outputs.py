"""What a Spark job writes under --out (``OUTPUTS``): the exchanges, partitions, batches, lag
and connections tables from the tasks' rows (``table_frames``, ``write_tables``; the
exchanges', batches' and lag's DataFrames are also what the figures query), and the driver's
small tables of figures (stats, findings, lags, producers, consumer groups) as Parquet, plus
stats.json and summary.json in a local folder (``write_figures``)."""
from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable, Iterator
from typing import Any

from analyzer.figures import with_endpoints
from analyzer.sinks.check import Finding
from analyzer.spark.gather import JobResult, Redo, finalize_rows
from analyzer.spark.inputs import JobConfig, Source
from analyzer.spark.tasks import TAGS
from analyzer.tables import EXCHANGES, TABLES, spark_schema, with_trees

OUTPUTS = ("exchanges", "partitions", "batches", "lag", "connections", "stats", "findings", "consumer_lag",
           "committed_lag", "producers", "consumer_groups", "stats.json", "summary.json")

STAT_FIGURES = ("count", "answered", "unanswered", "orphans", "no_response", "malformed", "error_exchanges",
                "service", "bytes_in", "bytes_out", "throttled", "records", "record_bytes")
QUANTILE_FIELDS = ("min", "p50", "p90", "p99", "p999", "max", "mean")
FINDING_COLUMNS = ("capture", "rule", "severity", "message", "conn", "frames", "exchanges", "details")


def _struct(cols: Iterable[tuple[str, Any]]) -> Any:
    from pyspark.sql import types as T

    return T.StructType([T.StructField(c, t) for c, t in cols])


def _pick(records: Iterable[dict[str, Any]], schema: Any) -> list[tuple[Any, ...]]:
    """The records as rows of the schema's columns."""
    return [tuple(r[f.name] for f in schema.fields) for r in records]


def stats_rows(result: dict[str, Any]) -> tuple[list[str], list[tuple[Any, ...]]]:
    """The `stats` groups as flat rows: the --by keys (a connection's with its endpoints, as
    `stats -f csv` has them), the counts, the latency figures (ms)."""
    by = list(with_endpoints(tuple(result["by"])))
    cols = by + list(STAT_FIGURES) + ["throttle_time_ms_total", "throttle_time_ms_max", "errors", "waits"]
    for q in ("latency_ms", "ttfb_ms", "latency_ms_excl_waits"):
        cols += [f"{q}_{f}" for f in QUANTILE_FIELDS]
    rows = []
    for g in result["groups"]:
        r: list[Any] = [None if g[b] is None else (str(g[b]) if b in ("conn", "topic") else g[b]) for b in by]
        r += [int(g[f]) for f in STAT_FIGURES]
        r += [int(g["throttle_time_ms"]["total"]), int(g["throttle_time_ms"]["max"]),
              {str(k): int(v) for k, v in g["errors"].items()}, {str(k): int(v) for k, v in g["waits"].items()}]
        for q in ("latency_ms", "ttfb_ms", "latency_ms_excl_waits"):
            r += [None if g[q][f] is None else float(g[q][f]) for f in QUANTILE_FIELDS]
        rows.append(tuple(r))
    return cols, rows


def _stats_schema(cols: list[str]) -> Any:
    from pyspark.sql import types as T

    def type_of(c: str) -> Any:
        if c in ("version", "partition"):
            return T.IntegerType()
        if c in ("api", "client_id", "client", "broker", "topic", "conn"):
            return T.StringType()
        if c in ("errors", "waits"):
            return T.MapType(T.StringType(), T.LongType())
        if c.startswith(("latency_ms_", "ttfb_ms_")):
            return T.DoubleType()
        return T.LongType()
    return _struct((c, type_of(c)) for c in cols)


def finding_rows(findings: list[Finding], sources: list[Source]) -> list[tuple[Any, ...]]:
    single = sources[0].name if len(sources) == 1 else None
    return [(f.capture or single, f.rule, f.severity, f.message, f.conn, [int(x) for x in f.frames],
             json.dumps(f.exchanges, default=str), json.dumps(f.details, default=str)) for f in findings]


def _figure_tables(sres: dict[str, Any], result: JobResult) -> list[tuple[str, list[tuple[Any, ...]], Any]]:
    """The driver's tables: (name, rows, Spark schema) of the stats groups, the findings, the
    lags, the producers (acks as a map, compression as JSON text) and the consumer groups (a
    row per generation)."""
    from pyspark.sql import types as T

    S, L, D, I32, B = T.StringType(), T.LongType(), T.DoubleType(), T.IntegerType(), T.BooleanType()
    cols, srows = stats_rows(sres)
    f_schema = _struct((c, T.ArrayType(L) if c == "frames" else S) for c in FINDING_COLUMNS)
    lag = _struct((("client_id", S), ("group", S), ("topic", S), ("partition", I32), ("isolation", S),
                   ("samples", L), ("last", L), ("max", L), ("mean", D), ("max_time", D), ("last_time", D),
                   ("stable_last", L), ("stable_max", L)))
    clag = _struct((("group", S), ("topic", S), ("partition", I32), ("committed_offset", L), ("commit_time", D),
                    ("commit_api", S), ("committed_by", S), ("high_watermark", L), ("high_watermark_time", D),
                    ("high_watermark_api", S), ("lag", L), ("note", S), ("member_id", S), ("client_id", S)))
    prod = _struct((("client_id", S), ("producer_id", L), ("idempotent", B), ("producer_epochs", T.ArrayType(L)),
                    ("transactional_id", S), ("transactional_batches", L), ("acks", T.MapType(S, L)),
                    ("requests", L), ("batches", L), ("records", L), ("records_per_batch", D),
                    ("max_records_per_batch", L), ("bytes_per_batch", D), ("bytes_before_per_batch", D),
                    ("compression", S), ("linger_ms_mean", D), ("linger_ms_max", L), ("retries", L)))
    producers = (dict(r, compression=json.dumps(r["compression"], sort_keys=True),
                      linger_ms_mean=r["linger_ms"]["mean"], linger_ms_max=r["linger_ms"]["max"])
                 for r in sres["producers"])
    gens = _struct((("group_id", S), ("generation", L), ("protocol", S), ("leader", S), ("members", T.ArrayType(S)),
                    ("rebalance_start", D), ("rebalance_end", D), ("rebalance_ms", D), ("triggers", T.ArrayType(S))))
    generations = (dict(gen, group_id=g["group_id"]) for g in sres["consumer_groups"] for gen in g["generations"])
    return [("stats", srows, _stats_schema(cols)),
            ("findings", finding_rows(result.findings, result.sources), f_schema),
            ("consumer_lag", _pick(sres["consumer_lag"], lag), lag),
            ("committed_lag", _pick(sres.get("committed_lag") or [], clag), clag),
            ("producers", _pick(producers, prod), prod),
            ("consumer_groups", _pick(generations, gens), gens)]


def _out_path(out_dir: str, name: str) -> str:
    if "://" in out_dir:
        return out_dir.rstrip("/") + "/" + name
    return "file://" + os.path.join(os.path.abspath(out_dir), name)


def _write_small_parquet(path: str, rows: list[tuple[Any, ...]], schema: Any) -> bool:
    """A driver-side table straight to a local Parquet directory with pyarrow (no Spark job)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
        from pyspark.sql.pandas.types import to_arrow_schema
    except ImportError:
        return False
    try:
        aschema = to_arrow_schema(schema)
    except Exception:  # noqa: BLE001 - a type this pyspark cannot map: let Spark write it
        return False
    cols = [f.name for f in schema.fields]
    data = {c: [r[i] for r in rows] for i, c in enumerate(cols)}
    for i, f in enumerate(aschema):
        if pa.types.is_map(f.type):
            data[cols[i]] = [list(v.items()) if v is not None else None for v in data[cols[i]]]
    table = pa.Table.from_pydict(data, schema=aschema)
    if os.path.isdir(path):
        shutil.rmtree(path)
    os.makedirs(path)
    pq.write_table(table, os.path.join(path, "part-00000.parquet"))
    open(os.path.join(path, "_SUCCESS"), "w").close()
    return True


def table_frames(spark: Any, cfg: JobConfig, result: JobResult, res1: Any, res2: Any, redo: Redo) -> dict[str, Any]:
    """The DataFrames of the tables (``analyzer.tables.TABLES``, by name): the rows of the first
    pass (``res1``) but those of the groups decoded again, the rows of the second (``res2``, or
    None), their connections numbered and topic ids named (``finalize_rows``). Partitions and
    connections are empty when ``cfg.rows`` is False."""
    sc = spark.sparkContext
    conn_b = sc.broadcast(result.conn_ids)
    rename_b = sc.broadcast(redo.rename)
    redo_b = sc.broadcast(redo.keys)

    def rows_of(tag: str) -> Any:
        rdd = res1.filter(lambda r: r[0] == tag and r[1] not in redo_b.value)
        if res2 is not None:
            rdd = rdd.union(res2.filter(lambda r: r[0] == tag))

        def fin(it: Iterator[Any]) -> Iterator[tuple[Any, ...]]:
            return finalize_rows(it, conn_b.value, rename_b.value)
        return rdd.mapPartitions(fin)

    return {t.name: spark.createDataFrame(rows_of(TAGS[t.name]),
                                          spark_schema(with_trees(t) if cfg.tree_rows and t is EXCHANGES else t),
                                          verifySchema=False) for t in TABLES}


def write_tables(out_dir: str, frames: dict[str, Any]) -> None:
    """Write the tables' DataFrames (``table_frames``) under ``out_dir``, a folder each."""
    for name, df in frames.items():
        df.write.mode("overwrite").parquet(_out_path(out_dir, name))


def write_figures(spark: Any, out_dir: str, result: JobResult) -> None:
    """Write the figures' tables of ``OUTPUTS`` under ``out_dir`` (the job's figures:
    ``result.stats``), and in a local folder stats.json and summary.json."""
    sres = result.stats
    for name, rows, schema in _figure_tables(sres, result):
        if "://" not in out_dir and _write_small_parquet(os.path.join(out_dir, name), rows, schema):
            continue
        spark.createDataFrame(rows, schema).coalesce(1).write.mode("overwrite").parquet(_out_path(out_dir, name))
    if "://" not in out_dir:
        with open(os.path.join(out_dir, "stats.json"), "w") as f:
            json.dump(sres, f, indent=1, default=str)
        with open(os.path.join(out_dir, "summary.json"), "w") as f:
            json.dump(result.summary, f, indent=1, default=str)
