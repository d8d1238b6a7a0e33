"""A Spark job from start to end: ``run_spark`` on a SparkSession, ``run_local`` the same
steps in this process (tests and debugging). Resolve the inputs, plan the reads, run the
tasks (a first pass; a second one for the connections whose topic ids other connections
named), gather their results, make the tables, query the exchanges, batches and lag tables
for `stats`' figures (``analyzer.figures``: Spark SQL on Spark, DuckDB in ``run_local``), write
them."""
from __future__ import annotations

import contextlib
import dataclasses
import pickle
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from analyzer import figures
from analyzer.spark import plan, tasks
from analyzer.spark.gather import JobResult, State, finalize_rows, gather, plan_redo, stats_result
from analyzer.spark.inputs import JobConfig, Source, resolve_inputs
from analyzer.spark.outputs import table_frames, write_figures, write_tables
from analyzer.spark.plan import ReadSplit
from analyzer.spark.session import StatusLine, hadoop_glob
from analyzer.tables import BATCHES, EXCHANGES, LAG, TABLES

Rows = list[tuple[Any, ...]]
# the tables the figures' queries read (``analyzer.figures``)
QUERIED = (EXCHANGES, BATCHES, LAG)


def run_spark(spark: Any, patterns: Iterable[str], out_dir: str | None, cfg: JobConfig,
              status: StatusLine | None = None) -> JobResult:
    """The whole job on ``spark``; writes the tables under ``out_dir`` (None: compute only).
    Returns the JobResult (the figures of `stats`, the findings of `check`, the summary)."""
    from pyspark import StorageLevel

    t0 = time.monotonic()
    sc = spark.sparkContext
    if out_dir is None and cfg.rows:
        cfg = dataclasses.replace(cfg, rows=False)
    cfg = plan.lite_if_enough(cfg)

    def phase(text: str) -> None:
        if status is not None:
            status.phase = text

    def scan_ranges(ranges: list[Any]) -> list[Any]:
        phase(f"scanning {len(ranges)} ranges")
        par = max(1, min(len(ranges), sc.defaultParallelism * 4))
        return list(sc.parallelize(ranges, par).map(lambda r: plan.scan_split(*r)).collect())

    sources = resolve_inputs(patterns, hadoop_glob=lambda u: hadoop_glob(sc, u), force_hadoop=cfg.force_hadoop)
    phase("reading")
    reads = plan.plan_job(sources, cfg.split_size, scan_ranges)
    cores = max(1, sc.defaultParallelism)
    nparts = plan.shuffle_partitions(plan.direct_and_shuffled(sources, reads, cfg, cores)[1], cfg, cores)

    def one_pass(keys: set[tuple[Any, ...]] | None = None, known: Any = None) -> tuple[Any, int, list[State]]:
        rdd, ntasks = _spark_pass(sc, sources, *plan.direct_and_shuffled(sources, reads, cfg, cores, keys),
                                  cfg, cores, nparts, keys, known)
        return rdd, ntasks, rdd.filter(lambda r: r[0] == "s").map(lambda r: (r[1], r[2])).collect()

    phase(f"{len(sources)} file(s), {len(reads)} read task(s), {nparts} partitions")
    res1, ntasks, states = one_pass()
    redo = plan_redo(states, cfg)
    res2 = None
    if redo.keys:
        phase(f"second pass over {len(redo.keys)} connection(s) (topic ids learnt on other connections)")
        res2, _n, states2 = one_pass(redo.keys, redo.table)
        states = redo.kept + states2
    result = gather(states, sources, cfg, redo)
    result.reads, result.tasks = len(reads), ntasks
    frames = table_frames(spark, cfg, result, res1, res2, redo)
    # the figures' sources, each queried several times (and written): made once
    queried = {t.name: frames[t.name].persist(StorageLevel.MEMORY_AND_DISK) for t in QUERIED}
    try:
        if out_dir is not None:
            phase("writing Parquet")
            write_tables(out_dir, frames)
        phase("figures")
        with spark_query(spark, queried) as query:
            result.stats = stats_result(query, cfg, result)
        if out_dir is not None:
            write_figures(spark, out_dir, result)
    finally:
        for df in queried.values():
            df.unpersist()
        for rdd in (res1, res2):
            if rdd is not None:
                rdd.unpersist()
    result.elapsed = time.monotonic() - t0
    return result


@contextlib.contextmanager
def spark_query(spark: Any, tables: dict[str, Any]) -> Iterator[figures.Query]:
    """``figures.Query`` on Spark over the DataFrames ``tables`` (by table name: a temporary
    view of that name each while it lasts): each figure's SQL in Spark's dialect
    (``figures.spark_sql``), run with ANSI mode off as they need (a list's missing element is
    null, as in DuckDB), collected as tuples of plain Python values."""
    from pyspark.sql import Row

    def plain(v: Any) -> Any:
        """A value as plain Python: a struct (Row) as a dict, a list's items so too."""
        if isinstance(v, Row):
            return {k: plain(x) for k, x in v.asDict().items()}
        if isinstance(v, list):
            return [plain(x) for x in v]
        return v

    def run(sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        df = spark.sql(figures.spark_sql(sql))
        return list(df.columns), [tuple(plain(v) for v in row) for row in df.collect()]

    ansi = "spark.sql.ansi.enabled"
    was = spark.conf.get(ansi, None)
    spark.conf.set(ansi, "false")
    for name, df in tables.items():
        df.createOrReplaceTempView(name)
    try:
        yield run
    finally:
        for name in tables:
            spark.catalog.dropTempView(name)
        if was is None:
            spark.conf.unset(ansi)
        else:
            spark.conf.set(ansi, was)


def _spark_pass(sc: Any, sources: list[Source], direct: list[ReadSplit], shuffled: list[ReadSplit], cfg: JobConfig,
                cores: int, nparts: int, keys: set[tuple[Any, ...]] | None, known: Any) -> tuple[Any, int]:
    """The RDD of tagged rows and states (persisted), and the number of read tasks.

    Whole small files (``direct``) are processed where they are read (no shuffle); the
    other reads (ranges of split files, big files read whole: gzip, remote) are read into
    per-connection batches, shuffled so that each connection meets in one task, sorted by
    first packet, processed. A second pass (``keys``) reads only those groups' packets."""
    from pyspark import StorageLevel

    names = {s.file_id: s.name for s in sources}
    keys_b, known_b = sc.broadcast(keys), sc.broadcast(known)

    def remote(reads: list[ReadSplit], each: Callable[[Source, bytes], Iterator[Any]]) -> list[Any]:
        """An RDD per file of ``reads`` read through Hadoop (binaryFiles), made by ``each``."""
        return [sc.binaryFiles(src.hadoop_uri, minPartitions=1).flatMap(lambda kv, src=src: each(src, kv[1]))
                for src in sources if src.local is None and any(rs.file_id == src.file_id for rs in reads)]

    def union(rdds: list[Any]) -> Any:
        return rdds[0] if len(rdds) == 1 else sc.union(rdds)

    out: list[Any] = []
    ntasks = 0
    if direct:
        # small files packed together, but into at least two tasks per core when there are enough
        dbytes = sum(rs.end - rs.start for rs in direct)
        packed = plan.pack_tasks(direct, sources, max(1 << 20, min(cfg.pack_size, -(-dbytes // (cores * 2)))))
        if packed:
            out.append(sc.parallelize(packed, len(packed)).flatMap(lambda t: tasks.whole_task(t, sources, cfg)))
        hadoop = remote(direct, lambda src, content: tasks.process_whole(src, plan.whole_read(src), cfg, content))
        out += hadoop
        ntasks += len(packed) + len(hadoop)
    if shuffled:
        packed = plan.pack_tasks(shuffled, sources, cfg.pack_size)
        keyed = [sc.parallelize(packed, len(packed)).flatMap(lambda t: tasks.read_task(t, sources, keys_b.value))
                 ] if packed else []
        hadoop = remote(shuffled, lambda src, content: tasks.read_batches(src, plan.whole_read(src), content,
                                                                          keys_b.value))
        ntasks += len(packed) + len(hadoop)
        out.append(union(keyed + hadoop).repartitionAndSortWithinPartitions(
            nparts, partitionFunc=lambda k: tasks.partition_of(k, nparts)).mapPartitions(
            lambda it: tasks.process_partition(it, cfg, names, known_b.value)))
    if not out:
        return sc.emptyRDD(), ntasks
    return union(out).persist(StorageLevel.MEMORY_AND_DISK), ntasks


def run_local(patterns: Iterable[str], cfg: JobConfig, partitions: int = 3, batch_bytes: int = tasks.BATCH_BYTES
              ) -> tuple[JobResult, dict[str, Rows]]:
    """Plan, scan, read, shuffle (in memory, through pickle as Spark's would), process and
    gather in this process, and query the rows of exchanges, batches and lag with DuckDB for
    the figures. Returns the result and the rows of each table by name (``analyzer.tables``;
    partitions and connections: none when ``cfg.rows`` is False)."""
    t0 = time.monotonic()
    cfg = plan.lite_if_enough(cfg)
    sources = resolve_inputs(patterns)
    reads = plan.plan_job(sources, cfg.split_size, lambda ranges: [plan.scan_split(*r) for r in ranges])
    names = {s.file_id: s.name for s in sources}

    def one_pass(keys: set[tuple[Any, ...]] | None, known: Any) -> tuple[list[State], Rows]:
        direct, shuffled = plan.direct_and_shuffled(sources, reads, cfg, 1, keys)
        buckets: list[list[tasks.Keyed]] = [[] for _ in range(partitions)]
        for kv in tasks.read_task(shuffled, sources, keys, batch_bytes):
            buckets[tasks.partition_of(kv[0], partitions)].append(kv)
        outs: list[Iterable[tuple[Any, ...]]] = [tasks.whole_task(direct, sources, cfg)]
        for b in buckets:
            b.sort(key=lambda kv: kv[0])
            outs.append(tasks.process_partition(pickle.loads(pickle.dumps(b)), cfg, names, known))
        states: list[State] = []
        rows: Rows = []
        for rec in (rec for out in outs for rec in out):
            if rec[0] == "s":
                states.append((rec[1], pickle.loads(pickle.dumps(rec[2]))))
            else:
                rows.append(rec)
        return states, rows

    states, rows = one_pass(None, None)
    redo = plan_redo(states, cfg)
    if redo.keys:
        states2, rows2 = one_pass(redo.keys, redo.table)
        states = redo.kept + states2
        rows = [r for r in rows if r[1] not in redo.keys] + rows2
    res = gather(states, sources, cfg, redo)
    res.reads = res.tasks = len(reads)
    tables = {t.name: list(finalize_rows((r for r in rows if r[0] == tasks.TAGS[t.name]), res.conn_ids, redo.rename))
              for t in TABLES}
    with duckdb_query(tables, cfg.tree_rows) as query:
        res.stats = stats_result(query, cfg, res)
    res.elapsed = time.monotonic() - t0
    return res, tables


@contextlib.contextmanager
def duckdb_query(tables: dict[str, Rows], trees: bool = False) -> Iterator[figures.Query]:
    """``figures.Query`` on DuckDB over the rows of the ``QUERIED`` tables (by table name; the
    exchanges with the trees' columns when ``trees``), as the views of those names."""
    from analyzer.engine import query_of, rows_db
    from analyzer.tables import with_trees

    db = rows_db([(with_trees(t) if trees and t is EXCHANGES else t, tables[t.name]) for t in QUERIED])
    try:
        yield query_of(db)
    finally:
        db.close()
