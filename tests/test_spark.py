"""The Spark job: same figures as `stats` and `check`, split or not, local or on a standalone cluster.

The reference is one machine's: `kafkawire-sniff stats -f json` (its figures, DuckDB's queries
over the captures' tables, and its stories), what `check` finds, and the exchange rows of one
process; the tables `export` writes. The job's figures are the same queries, run by Spark
SQL over its own exchanges, batches and lag tables (``run_local``, the job's steps in this
process: by DuckDB over its rows).

One SparkSession (local[2]) is shared by the module. The standalone master and worker
are started (from pyspark's spark-class, bound to 127.0.0.1) at the start of the module
so their start overlaps the local tests, and stopped by PID at the end.
"""
from __future__ import annotations

import functools
import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pyspark = pytest.importorskip("pyspark")
pq = pytest.importorskip("pyarrow.parquet")

from analyzer._core import open_capture  # noqa: E402
from analyzer.commands.options import options_from_kwargs  # noqa: E402
from analyzer.pipeline import Run  # noqa: E402
from analyzer.runs import fresh_context  # noqa: E402
from analyzer.sinks.check import Checker  # noqa: E402
from analyzer.sinks.output import exchange_to_json  # noqa: E402
from analyzer.spark.inputs import JobConfig  # noqa: E402
from analyzer.spark.job import run_local, run_spark  # noqa: E402
from analyzer.spark.session import make_session, stop_session  # noqa: E402
from analyzer.tables import (  # noqa: E402
    BATCHES,
    EXCHANGES,
    FETCH,
    LAG,
    PARTITION,
    PARTITIONS,
    TOPIC_PARTITION,
    arrow_schema,
    exchange_rows,
)
from dissectors.context import DecodeContext, Limits  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = sorted(glob.glob(str(ROOT / "samples" / "*.pcap*")))
pytestmark = pytest.mark.slow

if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("Java is not installed", allow_module_level=True)


# -- the reference: `stats` and `check` on one machine -----------------------------------------

def stats_json(paths: list[str], *args: str) -> dict[str, Any]:
    """What `kafkawire-sniff stats -f json ARGS... PATHS...` prints."""
    r = subprocess.run([sys.executable, "-m", "analyzer", "stats", "-f", "json", *args, *paths],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    return dict(json.loads(r.stdout))


@functools.lru_cache(maxsize=8)
def committed_lag(paths: tuple[str, ...]) -> list[dict[str, Any]]:
    """The committed-offset lag, a story `stats` computes only when its section is asked (it
    does not depend on --by), and the job always."""
    return list(stats_json(list(paths), "--section", "committed_lag")["committed_lag"])


@functools.lru_cache(maxsize=8)
def in_flight(paths: tuple[str, ...]) -> dict[str, Any]:
    """The requests in flight, likewise."""
    return dict(stats_json(list(paths), "--section", "in_flight")["in_flight"])


def reference(paths: list[str], by: tuple[str, ...], top: int = 0
              ) -> tuple[dict[str, Any], list[str], list[tuple[Any, ...]]]:
    """What one machine gives: `stats -f json --by BY --top TOP` over the captures (but its
    ``connections``, why connections were taken as Kafka: the job's connections table holds
    it), with the stories the job always keeps and `stats` only when asked, placed where
    `stats` places them (before ``accuracy``): the committed lag (``--section
    committed_lag``) and the requests in flight (of each capture in one process, merged: see
    below); what `check` finds in each file; and the exchange rows of one process
    (``row_key``).

    (`stats --section in_flight` over several captures names a connection still open at the
    end of its capture after the next capture, ``next.pcap#n``: one ``Stories`` follows every
    capture there, and the connection is settled once the source has changed.)"""
    ref = stats_json(paths, "--by", ",".join(by), "--top", str(top))
    assert "detection" in ref.pop("connections")
    assert ref["groups"] and ref["throughput"]["exchanges"] > 0
    accuracy = ref.pop("accuracy")
    ref["committed_lag"] = committed_lag(tuple(paths))
    ref["in_flight"] = in_flight(tuple(paths))
    ref["accuracy"] = accuracy
    options, ctx = options_from_kwargs({})
    findings: list[str] = []
    rows: list[tuple[Any, ...]] = []
    many = len(paths) > 1
    for p in paths:
        checker = Checker()
        run = Run(p, options, fresh_context(ctx))
        for ex in run:
            checker.add(ex)
            rows.append(row_key(exchange_rows(ex, p, ex.conn.id, names=run.ctx.topic_names).exchange))
        for f in checker.finish(capture_end=run.summary.last_ts):
            if many:
                f.capture = p
            findings.append(json.dumps(f.to_json(), sort_keys=True, default=str))
    return ref, sorted(findings), sorted(rows, key=repr)


def _fields(value: Any, columns: tuple[Any, ...], names: tuple[str, ...]) -> tuple[Any, ...]:
    """The fields ``names`` of a struct (a dict, or a tuple of the ``columns``)."""
    d = value if isinstance(value, dict) else dict(zip((c.name for c in columns), value, strict=True))
    return tuple(d[n] for n in names)


def plain(v: Any) -> Any:
    """A value of a table's row as tuples: a struct (a dict, or a tuple) as the tuple of its
    fields' values, a list as a tuple."""
    if isinstance(v, dict):
        return tuple(plain(x) for x in v.values())
    return tuple(plain(x) for x in v) if isinstance(v, list | tuple) else v


def row_key(row: tuple[Any, ...] | dict[str, Any]) -> tuple[Any, ...]:
    """What is compared of an exchange's row of the exchanges table (a tuple of its columns,
    the trees' columns after them, or a dict): its key, status, latency, error codes, its
    partitions, the topic-partitions it names and its Fetch session (topic ids named; but its
    answer's error code, which a lean tree holds only when not zero)."""
    d = row if isinstance(row, dict) else dict(zip(EXCHANGES.names, row[:len(EXCHANGES.names)], strict=True))
    parts = tuple(_fields(p, PARTITION, ("topic", "partition", "records", "bytes", "codec", "error"))
                  for p in d["partitions"])
    named = tuple(_fields(p, TOPIC_PARTITION, ("topic", "partition")) for p in d["topic_partitions"])
    fetch = None if d["fetch_session"] is None else \
        plain(_fields(d["fetch_session"], FETCH, tuple(c.name for c in FETCH if c.name != "error_code")))
    return (d["capture"], d["conn"], d["client"], d["broker"], d["api_name"], d["api_version"], d["correlation_id"],
            d["request_frame"], d["response_frame"], d["status"], d["latency_ms"], tuple(d["error_codes"]), parts,
            named, fetch)


def parquet_rows(out: Path) -> list[tuple[Any, ...]]:
    return sorted((row_key(d) for d in pq.read_table(str(out / "exchanges")).to_pylist()), key=repr)


def _packets(paths: list[str]) -> int:
    """The records of the captures, as the capture reader counts them."""
    n = 0
    for p in paths:
        with open_capture(p) as r:
            n += sum(1 for _ in r)
    return n


def findings_of(res: Any) -> list[str]:
    return sorted(json.dumps(f.to_json(), sort_keys=True, default=str) for f in res.findings)


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Where two JSON values differ (paths; none: equal as JSON)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str)
                for d in (differences(a.get(k), b.get(k), f"{path}.{k}") if k in a and k in b
                          else [f"{path}.{k}: only in {'the first' if k in a else 'the second'}"])]
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, f"{path}[{i}]")]
    same = json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)
    return [] if same else [f"{path}: {a!r} != {b!r}"]


def same_json(a: Any, b: Any) -> bool:
    diffs = differences(a, b)
    assert not diffs, "\n".join(diffs[:10])
    return True


def same_stats(got: dict[str, Any], ref: dict[str, Any]) -> bool:
    """The job's figures are the reference's, their keys in its order (``reference``)."""
    assert list(got) == list(ref)
    return same_json(got, ref)


def exported(paths: list[str], out: Path, table: str) -> Any:
    """The ``table`` (a ``pyarrow.Table``) that `kafkawire-sniff export PATHS --out OUT` writes."""
    if not out.exists():
        r = subprocess.run([sys.executable, "-m", "analyzer", "export", *paths, "--out", str(out)],
                           capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert r.returncode == 0, r.stderr[-2000:]
    return pq.read_table(str(out / table))


def same_rows(rows: list[tuple[Any, ...]], ref: Any, schema: Any) -> int:
    """``rows`` (tuples of a table's columns, as the job's tasks make them) are those of
    ``ref`` (a ``pyarrow.Table`` of ``schema``), in any order; how many."""
    assert ref.schema.remove_metadata() == schema
    got = sorted((plain(r) for r in rows), key=repr)
    assert got == sorted((plain(r) for r in ref.to_pylist()), key=repr)
    return len(got)


def same_table(written: Path, ref: Any, schema: Any) -> int:
    """The Parquet folder ``written`` holds the rows of ``ref`` (a ``pyarrow.Table``; in any
    order), both of ``schema``; how many."""
    got = pq.read_table(str(written))
    assert got.schema.remove_metadata() == schema and ref.schema.remove_metadata() == schema
    rows = sorted((tuple(r.values()) for r in got.to_pylist()), key=repr)
    assert rows == sorted((tuple(r.values()) for r in ref.to_pylist()), key=repr)
    return len(rows)


def written_producers(out: Path) -> list[dict[str, Any]]:
    """The job's ``producers`` table as `stats -f json` has them: acks a map, compression
    JSON text, linger flattened."""
    return [dict(r, acks=dict(r["acks"]), compression=json.loads(r["compression"]),
                 linger_ms={"mean": r.pop("linger_ms_mean"), "max": r.pop("linger_ms_max")})
            for r in pq.read_table(str(out / "producers")).to_pylist()]


# -- fixtures ---------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """A standalone master + worker from pyspark's spark-class, on 127.0.0.1."""

    def __init__(self, tmp: Path) -> None:
        home = Path(pyspark.__file__).parent
        self.spark_class = str(home / "bin" / "spark-class")
        self.port = _free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        env = dict(os.environ, SPARK_HOME=str(home), SPARK_LOCAL_IP="127.0.0.1", SPARK_NO_DAEMONIZE="1",
                   PYSPARK_PYTHON=sys.executable)
        self.env = env
        self.master_log = tmp / "master.log"
        self.worker_log = tmp / "worker.log"
        self.master = subprocess.Popen(
            [self.spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
             "--port", str(self.port), "--webui-port", str(_free_port())],
            env=env, stdout=open(self.master_log, "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115
        self.worker = subprocess.Popen(
            [self.spark_class, "org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
             "--webui-port", str(_free_port()), "--cores", "2", "--memory", "1g",
             "--work-dir", str(tmp / "work")],
            env=env, stdout=open(self.worker_log, "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115

    def wait_ready(self, timeout: float = 120.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.master.poll() is not None or self.worker.poll() is not None:
                return False
            if b"Successfully registered with master" in self.worker_log.read_bytes():
                return True
            time.sleep(0.5)
        return False

    def stop(self) -> None:
        for p in (self.worker, self.master):
            if p.poll() is None:
                p.terminate()
        for p in (self.worker, self.master):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    c = Cluster(tmp_path_factory.mktemp("cluster"))
    yield c
    c.stop()


@pytest.fixture(scope="module")
def samples_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder `kafkawire-sniff export SAMPLES` writes (made when first read: ``exported``)."""
    return tmp_path_factory.mktemp("samples") / "export"


@pytest.fixture(scope="module")
def spark(cluster: Cluster) -> Any:   # the cluster starts first, so its start overlaps these tests
    s = make_session("local[2]", shuffle_partitions=2)
    yield s
    stop_session(s)


# -- in-process runner: the job's own steps without Spark (fast) --------------------------------------

@pytest.mark.parametrize(("by", "split", "batch"), [
    (("api", "version"), 700, 4 << 20), (("conn", "api"), 700, 4 << 20), (("topic", "partition"), 700, 300),
    (("client", "broker"), 700, 4 << 20), (("conn", "topic"), 11000, 1000), (("api", "version"), 11000, 4 << 20),
    (("conn", "api"), 1 << 20, 2000)])
def test_steps_match_stats_and_check_with_tiny_splits(by: tuple[str, ...], split: int, batch: int,
                                                      samples_export: Path) -> None:
    """Every sample cut into ranges of 700 bytes (or: the small ones read whole and processed with
    no shuffle, the bigger ones cut into ranges; or: all read whole, shuffled by connection),
    connections shuffled in batches (some cut into many batches): the same exchange and lag
    rows as `export` writes, and from them the same figures as `stats -f json` (the slowest 12
    too, as `stats --top 12`; the consumer lag), the same stories and findings."""
    from analyzer.spark.inputs import resolve_inputs
    from analyzer.spark.plan import is_direct, plan_reads, plan_splits, scan_split

    ref_stats, ref_findings, ref_rows = reference(SAMPLES, by, top=12)
    direct_max = 0 if split == 1 << 20 else -1
    res, rows = run_local(SAMPLES, JobConfig(by=by, split_size=split, direct_max=direct_max, top=12),
                          batch_bytes=batch)
    sources = resolve_inputs(SAMPLES)
    splits = plan_splits(sources, split)
    reads = plan_reads(sources, splits, [scan_split(sources[sp.file_id], sp) for sp in splits])
    direct = sum(is_direct(sources[rs.file_id], rs, split) for rs in reads)
    if split == 700:
        assert res.reads > 100 and direct == 0          # the files really were split
    elif direct_max == 0:
        assert res.reads == len(SAMPLES)                # read whole, but through the shuffle
    else:
        assert 0 < direct < len(SAMPLES) < res.reads    # some whole, some split
    assert same_stats(res.stats, ref_stats)
    assert len(ref_stats["top"]) == 12 and len({r["capture"] for r in ref_stats["top"]}) > 2
    assert ref_stats["consumer_lag"] and ref_stats["committed_lag"] and ref_stats["in_flight"]
    assert {r["isolation"] for r in ref_stats["consumer_lag"]} == {"read_committed", "read_uncommitted"}
    assert any(r["max"] > 0 for r in ref_stats["consumer_lag"])
    assert len(ref_stats["producers"]) > 5 and {p["idempotent"] for p in ref_stats["producers"]} == {True, False}
    assert findings_of(res) == ref_findings
    assert sorted((row_key(r) for r in rows["exchanges"]), key=repr) == ref_rows
    assert any(r[-1] is not None for r in ref_rows)         # (the Fetches' sessions)
    assert same_rows(rows["exchanges"], exported(SAMPLES, samples_export, "exchanges"), arrow_schema(EXCHANGES)) \
        == len(ref_rows)
    assert same_rows(rows["lag"], exported(SAMPLES, samples_export, "lag"), arrow_schema(LAG)) \
        == sum(r["samples"] for r in ref_stats["consumer_lag"]) > 50
    assert res.summary["packets"] == _packets(SAMPLES) > 1000


@pytest.mark.parametrize("by", [("api", "version"), ("conn", "client_id"), ("api", "topic", "partition")])
def test_stats_only_uses_lite_decoding_with_the_same_figures(by: tuple[str, ...]) -> None:
    """No rule and no tables written: the lean decoder, as `stats` uses it (with the requests'
    topics when grouping by topic or partition), and the same figures (the producers too),
    from the rows of exchanges and batches alone (no partitions or connections rows). Rules
    add what check reads (``-check``); the tables (their topic_partitions) read the requests'
    topics, and a display filter decodes full trees where it tests a tree field; field trees
    in the rows or a lowered --max-depth keep the full decoder."""
    from analyzer.spark.plan import lite_if_enough

    lite = "lite-topics" if "topic" in by else "lite"
    cfg = JobConfig(by=by, split_size=700, rules=frozenset(), rows=False)
    assert lite_if_enough(cfg).options.decode == lite
    assert lite_if_enough(JobConfig(by=by, rows=False)).options.decode == lite + "-check"
    # (the rows' topic_partitions read the requests' topics)
    assert lite_if_enough(JobConfig(by=by, rules=frozenset())).options.decode == "lite-topics"
    assert lite_if_enough(JobConfig(by=by)).options.decode == "lite-topics-check"
    assert lite_if_enough(JobConfig(by=by, with_trees=True)).options.decode == "full"
    assert lite_if_enough(JobConfig(by=by, display_filter="api_key == 0")).options.decode == "lite-topics-check"
    assert lite_if_enough(JobConfig(by=by, ctx=DecodeContext(Limits(max_depth=3)))).options.decode == "full"
    ref_stats, _findings, ref_rows = reference(SAMPLES, by)
    res, rows = run_local(SAMPLES, cfg)
    ex_rows, parts, conns = rows["exchanges"], rows["partitions"], rows["connections"]
    assert same_stats(res.stats, ref_stats) and ref_stats["producers"] and ref_stats["consumer_lag"]
    assert res.findings == [] and parts == [] and conns == [] and len(ex_rows) == len(ref_rows)
    assert len(rows["lag"]) == sum(r["samples"] for r in ref_stats["consumer_lag"])      # (its source)


def test_trees_and_second_pass() -> None:
    """With --with-trees, connections whose Fetch names topic ids learnt on another connection are
    decoded a second time with the file's topic ids: trees equal `read`'s, notes included.
    Without, those ids are named after the fact, in the rows (partitions, the topic-partitions
    and Fetch sessions exchanges name, lag) and so in the figures by topic and the consumer
    lag, as `stats` names them."""
    files = [str(ROOT / "samples" / "produce_fetch_rdkafka_gzip.pcap"), str(ROOT / "samples" / "txn_rdkafka.pcap")]
    res, rows = run_local(files, JobConfig(with_trees=True, split_size=900))
    ex_rows = rows["exchanges"]
    assert res.redone > 0 and res.renamed == 0
    ref: dict[tuple[Any, ...], Any] = {}
    options, ctx = options_from_kwargs({})
    for p in files:
        for ex in Run(p, options, fresh_context(ctx)):
            d = exchange_to_json(ex, trees=True)
            ref[(p, d["conn"], d["request_frame"], d["response_frame"])] = (d["request"], d["response"])
    rq, rs = len(EXCHANGES.columns), len(EXCHANGES.columns) + 1     # (the trees follow the columns)
    got = {(r[0], r[1], r[10], r[11]): (json.loads(r[rq]) if r[rq] else None, json.loads(r[rs]) if r[rs] else None)
           for r in ex_rows}
    assert got == ref
    assert "topic quickstart" in json.dumps(list(got.values()))
    topic = LAG.names.index("topic")
    assert {r[topic] for r in rows["lag"]} == {"quickstart", "txn"}
    # without trees the same connections are named after the fact instead
    by = ("topic", "api")
    res2, tables2 = run_local(files, JobConfig(split_size=900, by=by))
    rows2, parts = tables2["exchanges"], tables2["partitions"]
    assert res2.redone == 0 and res2.renamed > 0
    assert {p[10] for p in parts} == {"quickstart", "txn"}
    assert {r[topic] for r in tables2["lag"]} == {"quickstart", "txn"}
    ref_stats, _findings, ref_rows = reference(files, by)
    assert sorted((row_key(r) for r in rows2), key=repr) == ref_rows
    assert {tp[0] for r in ref_rows for tp in r[-2]} == {"quickstart", "txn"}
    assert {a[0] for r in ref_rows if r[-1] is not None for a in r[-1][4]} == {"quickstart", "txn"}
    assert same_stats(res2.stats, ref_stats) and {r["topic"] for r in ref_stats["consumer_lag"]} == {"quickstart", "txn"}
    assert {g["topic"] for g in ref_stats["groups"]} == {"quickstart", "txn", None}


def test_rows_are_numbered_and_named_after_the_fact() -> None:
    """``finalize_rows``: a row's connection numbered as `read` numbers it (the rank of its
    first packet in the file), and the topic ids ``plan_redo`` names (per file) named in every
    table that holds a topic: the exchanges' partitions, topic-partitions and Fetch session
    (its asks and forgotten partitions), the topic of partitions, of batches and of lag;
    another file's rows keep their ids."""
    from analyzer.spark.gather import finalize_rows
    from analyzer.tables import CONNECTIONS

    def row(table: Any, **values: Any) -> tuple[Any, ...]:
        return tuple(values.get(n) for n in table.names)

    def part(topic: str) -> tuple[Any, ...]:
        return (topic, 0) + (None,) * (len(PARTITION) - 2)

    def session(*topics: str) -> tuple[Any, ...]:
        return (1, 7, 2, 0, 7, [(t, 0, 10) for t in topics], [(t, 1) for t in topics])

    rows = [("x", (0,), row(EXCHANGES, capture="a", conn=70, partitions=[part("id1"), part("id2")],
                            topic_partitions=[("id1", 0)], fetch_session=session("id1", "id2"))),
            ("x", (0,), row(EXCHANGES, capture="a", conn=70, partitions=[], topic_partitions=[])),
            ("p", (0,), row(PARTITIONS, capture="a", conn=30, topic="id1", partition=0)),
            ("b", (0,), row(BATCHES, capture="a", conn=70, topic="id1", partition=0, producer_id=9)),
            ("l", (0,), row(LAG, capture="a", conn=30, topic="id1", partition=0, lag=5)),
            ("b", (1,), row(BATCHES, capture="b", conn=50, topic="id1", partition=0, producer_id=9)),
            ("l", (1,), row(LAG, capture="b", conn=50, topic="id1", partition=0, lag=5)),
            ("x", (1,), row(EXCHANGES, capture="b", conn=50, fetch_session=session("id1"))),
            ("c", (1,), row(CONNECTIONS, capture="b", conn=50))]
    x, x2, p, b, lag, b2, lag2, x3, c = finalize_rows(rows, {0: [30, 70], 1: [50]}, {0: {"id1": "one"}})
    assert x == row(EXCHANGES, capture="a", conn=1, partitions=[part("one"), part("id2")],
                    topic_partitions=[("one", 0)], fetch_session=session("one", "id2"))
    assert x2 == row(EXCHANGES, capture="a", conn=1, partitions=[], topic_partitions=[])
    assert p == row(PARTITIONS, capture="a", conn=0, topic="one", partition=0)
    assert b == row(BATCHES, capture="a", conn=1, topic="one", partition=0, producer_id=9)
    assert lag == row(LAG, capture="a", conn=0, topic="one", partition=0, lag=5)
    assert b2 == row(BATCHES, capture="b", conn=0, topic="id1", partition=0, producer_id=9)
    assert lag2 == row(LAG, capture="b", conn=0, topic="id1", partition=0, lag=5)
    assert x3 == row(EXCHANGES, capture="b", conn=0, fetch_session=session("id1"))
    assert c == row(CONNECTIONS, capture="b", conn=0)


def test_split_boundaries_agree_with_the_reader(tmp_path: Path) -> None:
    """A pcap whose payloads contain fake record headers: the scan still finds the true boundaries."""
    from analyzer.spark.inputs import resolve_inputs
    from analyzer.spark.plan import plan_reads, plan_splits, scan_split
    from analyzer.spark.tasks import read_batches
    from tests.pcapgen import TcpFlow, kafka_request, kafka_response, write_pcap

    flow = TcpFlow(("10.0.0.1", 40000), ("10.0.0.2", 9092), ts=1_700_000_000.0)
    pkts = flow.handshake()
    import struct
    fake = struct.pack("<IIII", 1_700_000_000, 5, 40, 40) * 30     # looks like record headers
    for i in range(60):
        pkts += flow.send(0, kafka_request(18, 3, i, body=fake[: (i * 7) % len(fake)]))
        pkts += flow.send(1, kafka_response(i, b"\0\0" + fake[: (i * 11) % len(fake)]))
    path = tmp_path / "fake.pcap"
    write_pcap(str(path), pkts)
    sources = resolve_inputs([str(path)])
    splits = plan_splits(sources, 997)
    reads = plan_reads(sources, splits, [scan_split(sources[0], sp) for sp in splits])
    assert len(reads) > 20
    got = sorted(n for rs in reads for kv in read_batches(sources[0], rs) if kv[0][1]
                 for (n,) in struct.iter_unpack("<Q", kv[1][0]))
    assert got == list(range(1, len(pkts) + 1))


def test_batch_columns_that_disagree_are_refused() -> None:
    """A shuffle record whose columns do not describe the same packets is refused with a
    ValueError (the core checks every length before it reads a packet)."""
    import struct

    from analyzer._core import Stream

    one = struct.pack("<Q", 1)
    s = Stream()
    with pytest.raises(ValueError, match="do not describe the same packets"):
        s.feed_batch(one, b"", b"", b"", b"", b"")
    with pytest.raises(ValueError, match="ends at byte 9"):
        s.feed_batch(one, struct.pack("<d", 1.0), struct.pack("<i", 1), struct.pack("<I", 9),
                     struct.pack("<Q", 9), b"\0" * 4)
    assert s.feed_batch(b"", b"", b"", b"", b"", b"") == [] and s.packets == 0


# -- Spark, local mode ------------------------------------------------------------------------------

def test_local_mode_matches_stats_and_check(spark: Any, tmp_path: Path, samples_export: Path) -> None:
    by = ("api", "version")
    ref_stats, ref_findings, ref_rows = reference(SAMPLES, by)
    out = tmp_path / "out"
    # (the figures' queries run with ANSI mode off, as figures.spark_sql asks: the job sets it
    # for them, and gives the session its own back after)
    spark.conf.set("spark.sql.ansi.enabled", "true")
    try:
        res = run_spark(spark, SAMPLES, str(out), JobConfig(by=by))
        assert spark.conf.get("spark.sql.ansi.enabled") == "true"
    finally:
        spark.conf.unset("spark.sql.ansi.enabled")
    assert same_stats(res.stats, ref_stats)
    assert findings_of(res) == ref_findings
    assert parquet_rows(out) == ref_rows
    # the tables on disk
    stats_tab = pq.read_table(str(out / "stats")).to_pylist()
    assert len(stats_tab) == len(ref_stats["groups"]) and "exact" not in stats_tab[0]
    for row, g in zip(sorted(stats_tab, key=lambda r: (r["api"], r["version"] or -1)),
                      sorted(ref_stats["groups"], key=lambda r: (r["api"], r["version"] or -1)), strict=True):
        assert (row["count"], row["answered"], row["bytes_in"], row["latency_ms_p99"], dict(row["errors"])) == \
            (g["count"], g["answered"], g["bytes_in"], g["latency_ms"]["p99"], g["errors"])
    parts = pq.read_table(str(out / "partitions")).to_pylist()
    ref_parts = sum(len(r[-3]) for r in ref_rows)      # (the partitions: before the topic-partitions named)
    assert len(parts) == ref_parts and ref_parts > 0
    assert {p["topic"] for p in parts} >= {"quickstart", "txn"}      # topic ids resolved as in one process
    assert len(pq.read_table(str(out / "findings")).to_pylist()) == len(ref_findings)
    assert same_stats(json.loads((out / "stats.json").read_text()), ref_stats)
    # the figures of stats -f json, one row each: the consumer lag, from the lag table as
    # `export` writes it (and the exchanges' Fetch sessions)
    lag = pq.read_table(str(out / "consumer_lag")).to_pylist()
    assert lag == ref_stats["consumer_lag"] and len(lag) >= 3
    assert same_table(out / "lag", exported(SAMPLES, samples_export, "lag"), arrow_schema(LAG)) \
        == sum(r["samples"] for r in lag)
    assert same_table(out / "exchanges", exported(SAMPLES, samples_export, "exchanges"), arrow_schema(EXCHANGES)) \
        == len(ref_rows)
    clag = pq.read_table(str(out / "committed_lag")).to_pylist()
    assert clag == ref_stats["committed_lag"] and len(clag) >= 3
    prods = written_producers(out)      # (every field of every producer)
    assert prods == ref_stats["producers"] and len(prods) > 5
    # their source, the batches table: as `export` writes it
    assert same_table(out / "batches", exported(SAMPLES, samples_export, "batches"), arrow_schema(BATCHES)) \
        >= sum(p["batches"] for p in prods) > 0
    gens = pq.read_table(str(out / "consumer_groups")).to_pylist()
    assert [(r["group_id"], r["generation"], r["rebalance_ms"], r["triggers"]) for r in gens] == \
        [(g["group_id"], x["generation"], x["rebalance_ms"], x["triggers"])
         for g in ref_stats["consumer_groups"] for x in g["generations"]] and gens
    assert res.summary["files"] == len(SAMPLES)


def test_split_captures_equal_unsplit(spark: Any, tmp_path: Path) -> None:
    """Two pcaps and one pcapng cut into many tasks give what one task gives, by connection and
    topic; the consumer lag (a consumer behind, reading uncommitted; one reading committed)
    and its lag table too."""
    files = [str(ROOT / "samples" / "group_rdkafka.pcap"), str(ROOT / "samples" / "consumer_lag_kafkapython.pcap"),
             str(ROOT / "samples" / "produce_fetch_kafkapython_gzip_pcapng.pcapng")]
    by = ("conn", "topic")
    split = run_spark(spark, files, str(tmp_path / "o"), JobConfig(by=by, split_size=1500, partitions=3))
    assert split.reads > 20
    ref_stats, ref_findings, ref_rows = reference(files, by)
    assert same_stats(split.stats, ref_stats)       # reference: one machine, unsplit
    assert {"client", "broker"} < set(ref_stats["groups"][0])   # (a connection's groups name its endpoints)
    assert ref_stats["producers"] and written_producers(tmp_path / "o") == ref_stats["producers"]
    assert findings_of(split) == ref_findings
    assert parquet_rows(tmp_path / "o") == ref_rows
    assert same_table(tmp_path / "o" / "batches", exported(files, tmp_path / "export", "batches"),
                      arrow_schema(BATCHES)) > 0
    assert any(r["max"] > 0 for r in ref_stats["consumer_lag"])
    assert {r["isolation"] for r in ref_stats["consumer_lag"]} == {"read_committed", "read_uncommitted"}
    assert pq.read_table(str(tmp_path / "o" / "consumer_lag")).to_pylist() == ref_stats["consumer_lag"]
    assert same_table(tmp_path / "o" / "lag", exported(files, tmp_path / "export", "lag"), arrow_schema(LAG)) \
        == sum(r["samples"] for r in ref_stats["consumer_lag"])
    stats_tab = pq.read_table(str(tmp_path / "o" / "stats"))      # (its endpoints too, as stats -f csv has them)
    assert stats_tab.column_names[:4] == ["conn", "client", "broker", "topic"]
    assert stats_tab.num_rows == len(ref_stats["groups"])


def test_hadoop_read_path(spark: Any, tmp_path: Path) -> None:
    """Files read through binaryFiles (as hdfs:// ones are) give the same figures."""
    files = [str(ROOT / "samples" / "txn_rdkafka.pcap")]
    ref_stats, ref_findings, _rows = reference(files, ("api", "version"))
    for direct_max in (-1, 0):      # processed where read / shuffled by connection
        res = run_spark(spark, files, None, JobConfig(force_hadoop=True, direct_max=direct_max))
        assert same_stats(res.stats, ref_stats)
        assert findings_of(res) == ref_findings


def test_unreachable_master_is_named_within_seconds(tmp_path: Path) -> None:
    port = _free_port()         # nothing listens there
    t0 = time.monotonic()
    r = subprocess.run(["kafkawire-sniff", "spark", str(ROOT / "samples" / "group_rdkafka.pcap"), "--out",
                        str(tmp_path / "o"), "--master", f"spark://127.0.0.1:{port}"],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert time.monotonic() - t0 < 15
    assert r.returncode == 1
    assert r.stderr.splitlines() == [f"kafkawire-sniff: error: the Spark master at spark://127.0.0.1:{port} did not "
                                     "answer (Connection refused); is it running and is the URL right?"]
    assert not (tmp_path / "o").exists()        # said before anything is made


def test_master_check() -> None:
    from analyzer.spark.inputs import SparkJobError
    from analyzer.spark.session import check_master

    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        up = srv.getsockname()[1]
        down = _free_port()
        check_master(f"spark://127.0.0.1:{up}")
        check_master(f"spark://127.0.0.1:{down},127.0.0.1:{up}")     # one of several answering is enough
        check_master("local[2]")                                       # not ours to check
        with pytest.raises(SparkJobError, match=r"master at spark://127\.0\.0\.1:\d+ did not answer"):
            check_master(f"spark://127.0.0.1:{down}")
        with pytest.raises(SparkJobError, match="bad master URL"):
            check_master("spark://127.0.0.1:port")


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "analyzer.cli", "spark", str(tmp_path / "missing.pcap"),
                        "--out", str(tmp_path / "o")], capture_output=True, text=True, timeout=60, cwd=ROOT)
    if "No module named analyzer.cli.__main__" in r.stderr or r.returncode not in (1, 2):
        r = subprocess.run(["kafkawire-sniff", "spark", str(tmp_path / "missing.pcap"), "--out",
                            str(tmp_path / "o")], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [f"kafkawire-sniff: error: {tmp_path / 'missing.pcap'}: no such file"]


def test_cli_top_lists_what_stats_lists(tmp_path: Path) -> None:
    """`spark --top N` prints the slowest exchanges of all its captures as `stats --top N` does
    (same table: capture, connection and frame numbers as `read` gives them) and keeps them
    in stats.json. What the run made in the temporary directory (Spark's log; no code is
    shipped: executors use the installed package) is gone after it; only the log4j
    settings stay."""
    files = [str(ROOT / "samples" / "group_rdkafka.pcap"), str(ROOT / "samples" / "txn_rdkafka.pcap")]
    out = tmp_path / "o"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    r = subprocess.run(["kafkawire-sniff", "spark", "--top", "4", "-q", "--out", str(out), *files],
                       capture_output=True, text=True, timeout=300, cwd=ROOT, env=dict(os.environ, TMPDIR=str(tmp)))
    assert r.returncode == 0, r.stderr[-2000:]
    assert [p.name for p in tmp.rglob("*") if p.is_file()] == ["log4j2.properties"]
    s = subprocess.run(["kafkawire-sniff", "stats", "--top", "4", *files],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    lines = s.stdout.splitlines()
    i = lines.index("Slowest 4 exchanges")
    assert r.stdout.splitlines() == lines[i:i + 11]     # title, header, rule, 4 rows, 4 read commands
    assert lines[i + 7].startswith(f"#1: kafkawire-sniff read {ROOT / 'samples'}/")
    assert "group_rdkafka.pcap" in r.stdout and "JoinGroup" in r.stdout
    ref = json.loads(subprocess.run(["kafkawire-sniff", "stats", "--top", "4", "-f", "json", *files],
                                    capture_output=True, text=True, timeout=120, cwd=ROOT).stdout)
    assert json.loads((out / "stats.json").read_text())["top"] == ref["top"]
    assert len(ref["top"]) == 4


# -- Spark, standalone cluster ------------------------------------------------------------------------

def test_standalone_cluster(spark: Any, cluster: Cluster, tmp_path: Path) -> None:
    """The same job on a standalone master + worker (last: it replaces the module's local session;
    the driver JVM is reused, only the context changes)."""
    assert cluster.wait_ready(), "master/worker did not start:\n" + cluster.worker_log.read_text()[-2000:]
    stop_session(spark)
    remote = make_session(cluster.url, shuffle_partitions=2)
    try:
        assert remote.sparkContext.master == cluster.url
        out = tmp_path / "out"
        files = SAMPLES[:6]
        res = run_spark(remote, files, str(out), JobConfig(by=("conn", "api"), partitions=2))
    finally:
        stop_session(remote)
    ref_stats, ref_findings, ref_rows = reference(files, ("conn", "api"))
    assert same_stats(res.stats, ref_stats)
    assert findings_of(res) == ref_findings
    assert same_stats(json.loads((out / "stats.json").read_text()), ref_stats)
    assert parquet_rows(out) == ref_rows


def test_from_a_source_checkout_into_an_out_folder(tmp_path: Path) -> None:
    """The README's example run in a source checkout: Spark's Python workers start in that
    folder, whose analyzer/ has no compiled core; they must import the installed package.
    A second run into the same --out is refused unless --overwrite; the summary lists every
    table written and counts the time from the command's start."""
    checkout = tmp_path / "checkout"
    (checkout / "analyzer").mkdir(parents=True)
    (checkout / "analyzer" / "__init__.py").write_text('raise ImportError("the checkout\'s analyzer, no core")\n')
    exe = shutil.which("kafkawire-sniff")
    assert exe is not None
    out = tmp_path / "o"
    cmd = [exe, "spark", str(ROOT / "samples" / "admin_rdkafka.pcap"), "--out", str(out)]
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=checkout)
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr[-2000:]
    summary = dict(line.strip().split(": ", 1) for line in r.stderr.splitlines() if ": " in line)
    assert summary["wrote"] == ", ".join(str(out / t) for t in (
        "exchanges", "partitions", "batches", "lag", "connections", "stats", "findings", "consumer_lag",
        "committed_lag", "producers", "consumer_groups", "stats.json", "summary.json"))
    assert all((out / t).exists() for t in ("batches", "lag", "connections", "consumer_groups", "summary.json"))
    elapsed = float(summary["elapsed"].split()[0])
    assert took - 3 < elapsed <= took     # from the command's start, not the job's
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=checkout)
    assert r.returncode == 1 and r.stderr.splitlines() == [
        f"kafkawire-sniff: error: --out {out} is not empty (use --overwrite to replace its tables)"]
    assert (out / "exchanges").is_dir()
    (out / "notes.txt").write_text("mine")
    r = subprocess.run(cmd + ["--overwrite"], capture_output=True, text=True, timeout=300, cwd=checkout)
    assert r.returncode == 1 and "holds other files (notes.txt): not replaced" in r.stderr
    (out / "notes.txt").unlink()
    r = subprocess.run(cmd + ["--overwrite", "-q"], capture_output=True, text=True, timeout=300, cwd=checkout)
    assert r.returncode == 0, r.stderr[-2000:]


def test_a_master_spark_refuses_says_why(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("HADOOP_CONF_DIR", "YARN_CONF_DIR")}
    r = subprocess.run(["kafkawire-sniff", "spark", str(ROOT / "samples" / "admin_rdkafka.pcap"), "--out",
                        str(tmp_path / "o"), "--master", "yarn"], capture_output=True, text=True, timeout=120,
                       cwd=ROOT, env=env)
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1
    assert r.stderr.startswith("kafkawire-sniff: error: cannot start Spark (When running with master 'yarn' "
                               "either HADOOP_CONF_DIR or YARN_CONF_DIR must be set in the environment; "
                               "Spark's log: ")
