"""The data model (analyzer/tables.py): the tables' schema, ``export`` (Parquet on one
machine) equal to the Spark job's tables and to ``read``, ``sql`` over captures and over
table folders, and their bad inputs."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from analyzer.spark.inputs import JobConfig  # noqa: E402
from analyzer.spark.job import run_local  # noqa: E402
from analyzer.tables import EXCHANGES, TABLES, arrow_schema  # noqa: E402
from tests.conftest import REPO, SAMPLES, capture_paths, group_counts_of  # noqa: E402
from tests.pcapgen import TcpFlow, write_pcap  # noqa: E402

CAPTURES = sorted(str(p) for p in Path(SAMPLES).glob("*.pcap*"))


def cli(*args: str, cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "analyzer", *args], capture_output=True, text=True,
                          cwd=cwd or REPO, timeout=300)


def test_the_tables_schema_is_what_the_readme_documents() -> None:
    # names, types and nullability, as a change to them must be deliberate
    want = {
        "exchanges": "capture string!, conn int64!, client string!, broker string!, protocol string!, "
                     "api_key int32, api_name string!, api_version int32, correlation_id int32, client_id string, "
                     "request_frame int64, response_frame int64, request_time double, response_time double, "
                     "response_first_time double, latency_ms double, ttfb_ms double, wait string, throttle_ms int32!, "
                     "group_id string, request_bytes int64, "
                     "response_bytes int64, status string!, error_codes list<item: string>!, "
                     "partitions list<item: struct<topic: string, partition: int32, records: int64 not null, "
                     "bytes: int64 not null, codec: string, crc_ok: bool, error: string>>!, "
                     "topic_partitions list<item: struct<topic: string, partition: int32>>!, "
                     "notes list<item: string>!, fetch_session struct<isolation_level: int32, session_id: int32, "
                     "session_epoch: int32, error_code: int32, response_session_id: int32, asked: list<item: "
                     "struct<topic: string, partition: int32, fetch_offset: int64>> not null, forgotten: list<item: "
                     "struct<topic: string, partition: int32>> not null>",
        "partitions": "capture string!, conn int64!, api_name string!, api_version int32, correlation_id int32, "
                      "client_id string, request_frame int64, response_frame int64, request_time double, "
                      "status string!, topic string, partition int32, records int64!, bytes int64!, "
                      "codec string, crc_ok bool, error string, fetch_offset int64, high_watermark int64, "
                      "last_stable_offset int64",
        "batches": "capture string!, conn int64!, client_id string, api_version int32, correlation_id int32, "
                   "request_frame int64, request_time double, acks int32, transactional_id string, topic string, "
                   "partition int32, producer_id int64!, producer_epoch int32!, base_sequence int32!, "
                   "records int64!, bytes int64!, bytes_before int64, codec string!, base_timestamp int64!, "
                   "max_timestamp int64!, transactional bool!, control bool!",
        "lag": "capture string!, conn int64!, client_id string, request_frame int64, response_time double!, "
               "isolation_level int32, topic string!, partition int32!, position int64!, high_watermark int64!, "
               "last_stable_offset int64, lag int64!, stable_lag int64",
        "connections": "capture string!, conn int64!, client string!, broker string!, protocol string, "
                       "detection string, first_time double!, last_time double!, syn_seen bool!, closed string, "
                       "lost bool!",
    }
    for t in TABLES:
        s = arrow_schema(t)
        got = ", ".join(f"{f.name} {f.type}{'' if f.nullable else '!'}" for f in s)
        assert got == want[t.name], t.name
    readme = (Path(REPO) / "README.md").read_text()
    section = readme[readme.index("## Data model"):]
    section = section[:section.index("\n## ", 5)]
    for t in TABLES:
        assert f"`{t.name}`" in section
        for c in t.columns:
            assert f"| `{c.name}` | {c.type} |" in section, (t.name, c.name)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tables") / "out"
    r = cli("export", *CAPTURES, "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert r.stderr.startswith(f"wrote {out}: exchanges ")
    return out


def _value(v: object) -> object:
    """A cell compared as a plain value: lists and structs (dicts from Arrow, tuples in rows) as tuples."""
    if isinstance(v, dict):
        return tuple(_value(x) for x in v.values())
    if isinstance(v, (list, tuple)):
        return tuple(_value(x) for x in v)
    return v


def _sorted(rows: list) -> list:
    return sorted((_value(r) for r in rows), key=repr)


def _rows(out: Path, name: str) -> list:
    t = pq.read_table(out / name / "part-00000.parquet")
    assert t.schema.equals(arrow_schema({t.name: t for t in TABLES}[name]))
    return _sorted([tuple(r.values()) for r in t.to_pylist()])


def test_export_is_the_spark_jobs_tables(exported: Path) -> None:
    """The Spark job's steps (split, shuffled by connection, gathered) make the same rows."""
    _res, rows = run_local(CAPTURES, JobConfig(split_size=64 * 1024))
    assert [len(rows[t.name]) > n for t, n in zip(TABLES, (200, 100, 20, 50, 50), strict=True)] == [True] * 5
    for t in TABLES:
        assert _rows(exported, t.name) == _sorted(rows[t.name]), t.name


def test_export_rows_are_what_read_shows(exported: Path) -> None:
    path = CAPTURES[0]
    r = cli("read", "-f", "ndjson", path)
    read = [json.loads(line) for line in r.stdout.splitlines()]
    t = pq.read_table(exported / "exchanges" / "part-00000.parquet").to_pylist()
    mine = [x for x in t if x["capture"] == path]
    keys = ("conn", "api_name", "api_version", "correlation_id", "status", "request_frame", "latency_ms", "error_codes")
    assert sorted(tuple(str(x[k]) for k in keys) for x in mine) == sorted(tuple(str(x[k]) for k in keys)
                                                                           for x in read)
    conns = [x for x in pq.read_table(exported / "connections" / "part-00000.parquet").to_pylist()
             if x["capture"] == path]
    assert {x["conn"] for x in conns} == {x["conn"] for x in read}
    assert all(x["protocol"] == "kafka" and x["detection"].startswith("auto: ") for x in conns)


def test_connections_table_holds_the_unidentified_too(tmp_path: Path) -> None:
    flow = TcpFlow(("10.2.0.1", 41000), ("10.2.0.2", 22))
    pkts = flow.handshake() + flow.send(1, b"SSH-2.0-OpenSSH_9.6\r\n") + flow.send(0, b"SSH-2.0-x\r\n")
    path = str(tmp_path / "ssh.pcap")
    write_pcap(path, pkts + flow.fin(0) + flow.fin(1))
    out = tmp_path / "t"
    assert cli("export", path, "--out", str(out)).returncode == 0
    assert pq.read_table(out / "exchanges" / "part-00000.parquet").num_rows == 0
    (row,) = pq.read_table(out / "connections" / "part-00000.parquet").to_pylist()
    assert (row["conn"], row["protocol"], row["detection"], row["syn_seen"], row["closed"]) == \
        (0, None, "unidentified", True, "fin")


def test_export_refuses_what_it_must_not_overwrite(tmp_path: Path) -> None:
    cap = CAPTURES[0]
    out = tmp_path / "o"
    assert cli("export", cap, "--out", str(out)).returncode == 0
    r = cli("export", cap, "--out", str(out))
    assert r.returncode == 1 and r.stderr.count("\n") == 1
    assert "is not empty (use --overwrite to replace its tables)" in r.stderr
    r = cli("export", cap, "--out", str(out), "--overwrite")
    assert r.returncode == 0, r.stderr
    (out / "mine.txt").write_text("keep")
    r = cli("export", cap, "--out", str(out), "--overwrite")
    assert r.returncode == 1 and "holds other files (mine.txt): not replaced" in r.stderr
    assert (out / "mine.txt").read_text() == "keep" and (out / "exchanges").is_dir()
    afile = tmp_path / "f"
    afile.write_text("x")
    for bad, code, msg in ((str(afile), 2, "is a file"), ("/proc/kws/out", 1, "cannot write --out /proc/kws/out")):
        r = cli("export", cap, "--out", bad)
        assert r.returncode == code and msg in r.stderr and r.stderr.count("\n") == 1, r.stderr
    r = cli("export", cap, str(tmp_path / "missing.pcap"), "--out", str(tmp_path / "n"))
    assert r.returncode == 1 and "no such capture" in r.stderr and not (tmp_path / "n").exists()


def test_export_with_trees(tmp_path: Path) -> None:
    out = tmp_path / "o"
    assert cli("export", CAPTURES[0], "--out", str(out), "--trees").returncode == 0
    t = pq.read_table(out / "exchanges" / "part-00000.parquet")
    assert t.schema.names[-2:] == ["request", "response"]
    tree = json.loads(t.column("request")[0].as_py())
    assert tree["name"] == "request" and tree["children"]


def test_sql_over_captures_and_over_table_folders(exported: Path) -> None:
    q = "SELECT api_name, count(*) AS n FROM exchanges GROUP BY 1 ORDER BY n DESC, 1 LIMIT 3"
    on_caps = cli("sql", *CAPTURES, q, "-f", "json")
    on_tables = cli("sql", str(exported), q, "-f", "json")
    assert on_caps.returncode == on_tables.returncode == 0, on_caps.stderr
    got = json.loads(on_caps.stdout)
    assert got == json.loads(on_tables.stdout)
    assert got[0] == {"api_name": "Fetch", "n": 57}
    csv_out = cli("sql", str(exported), q, "-f", "csv").stdout.splitlines()
    assert csv_out[0] == "api_name,n" and csv_out[1] == "Fetch,57"
    # floats in full: an epoch time keeps its microseconds, in CSV and in the table (the same
    # row each time: the engine keeps no order that a query does not ask for)
    fq = ("SELECT request_time, 1.0 / 3 AS third FROM exchanges WHERE request_time IS NOT NULL "
          "ORDER BY request_time, capture, conn LIMIT 1")
    got = json.loads(cli("sql", str(exported), fq, "-f", "json").stdout)[0]
    assert cli("sql", str(exported), fq, "-f", "csv").stdout.splitlines()[1] == f"{got['request_time']!r},{1 / 3!r}"
    assert repr(got["request_time"]) in cli("sql", str(exported), fq).stdout
    table = cli("sql", str(exported), q).stdout
    assert table.split()[:2] == ["api_name", "n"] and "Fetch" in table
    # the connections, and a join
    r = cli("sql", str(exported), "SELECT c.detection, count(*) FROM exchanges e JOIN connections c "
                                  "USING (capture, conn) GROUP BY 1 ORDER BY 1 LIMIT 1", "-f", "csv")
    assert r.returncode == 0 and r.stdout.splitlines()[1].startswith("auto: ")


def test_sql_bad_input_is_one_line(exported: Path, tmp_path: Path) -> None:
    for query, exit_code, msg in (("SELEC 1", 2, "query failed: Parser Error"),
                                  ("SELECT * FROM nope", 2, "query failed: Catalog Error"),
                                  ("SELECT nope FROM exchanges", 2, "query failed: Binder Error")):
        r = cli("sql", str(exported), query)
        assert r.returncode == exit_code and r.stderr.startswith(f"kafkawire-sniff: error: {msg}"), r.stderr
        assert r.stderr.count("\n") == 1
    r = cli("sql", str(tmp_path / "missing.pcap"), "SELECT 1")
    assert r.returncode == 1 and "no such capture" in r.stderr
    r = cli("sql", "SELECT 1")
    assert r.returncode == 2 and "give the captures" in r.stderr
    # a table folder whose Parquet is not Parquet
    (tmp_path / "bad" / "exchanges").mkdir(parents=True)
    (tmp_path / "bad" / "exchanges" / "part-00000.parquet").write_bytes(b"not parquet at all")
    r = cli("sql", str(tmp_path / "bad"), "SELECT count(*) FROM exchanges")
    assert r.returncode == 1 and r.stderr.startswith("kafkawire-sniff: error: cannot read the tables:"), r.stderr
    assert r.stderr.count("\n") == 1


def test_the_readme_examples_run(exported: Path) -> None:
    readme = (Path(REPO) / "README.md").read_text()
    section = readme[readme.index("### `export` and `sql`"):]
    # the shell example and the output it shows
    shown = section[section.index("```\napi_name") + 4:]
    shown = shown[:shown.index("```")]
    r = cli("sql", str(exported), "SELECT api_name, count(*) AS n FROM exchanges GROUP BY 1 ORDER BY n DESC LIMIT 3")
    assert [line.rstrip() for line in r.stdout.splitlines()] == shown.rstrip("\n").splitlines()
    assert 'kafkawire-sniff sql tables "SELECT api_name, count(*) AS n FROM exchanges GROUP BY 1 ORDER BY n DESC ' \
           'LIMIT 3"' in section
    # every query shown runs and finds rows in the samples
    block = section[section.index("```sql\n") + 7:]
    block = block[:block.index("```")]
    queries = [q.strip() for q in "\n".join(line for line in block.splitlines()
                                           if not line.startswith("--")).split(";") if q.strip()]
    assert len(queries) == 8
    for q in queries:
        r = cli("sql", str(exported), q, "-f", "json")
        assert r.returncode == 0, (q, r.stderr)
        # (no sample is throttled: the throttling query finds rows in ../shared's captures)
        assert json.loads(r.stdout) or "throttle_ms > 0" in q, q


def test_the_lag_query_gives_stats_consumer_lag(exported: Path) -> None:
    """The README's consumer-lag query over the lag table gives the max and last lag stats
    reports, for every sample with a consumer."""
    readme = (Path(REPO) / "README.md").read_text()
    q = readme[readme.index("SELECT client_id, topic, partition, count(*) AS figures"):]
    q = q[:q.index(";")].replace("SELECT client_id,", "SELECT capture, client_id,")
    r = cli("sql", str(exported), q, "-f", "json")
    assert r.returncode == 0, r.stderr
    got = {(x["capture"], x["client_id"], x["topic"], x["partition"]): (x["max_lag"], x["last_lag"])
           for x in json.loads(r.stdout)}
    want = {}
    for path in CAPTURES:
        lag = json.loads(cli("stats", "-f", "json", "--section", "consumer_lag", path).stdout)["consumer_lag"]
        want.update({(path, x["client_id"], x["topic"], x["partition"]): (x["max"], x["last"]) for x in lag})
    assert len(want) >= 20
    assert got == want


class _Rows:
    """A table writer that keeps its rows (``ParquetTable``'s ``add`` and ``add_batch``)."""

    def __init__(self, name: str) -> None:
        self.schema = arrow_schema({t.name: t for t in TABLES}[name])
        self.rows: list = []
        self.python = 0

    def add(self, row: tuple) -> None:
        self.rows.append(row)
        self.python += 1

    def add_batch(self, batch: object) -> None:
        b = pa.record_batch(batch)
        assert b.schema.equals(self.schema)
        self.rows += [tuple(r.values()) for r in b.to_pylist()]


def _tables(path: str, core: bool) -> tuple[dict[str, _Rows], dict]:
    from analyzer.commands.export import export_command
    from analyzer.commands.options import iter_captures
    from analyzer.runs import Decode
    from analyzer.tables import write_rows

    kw = {k: v for k, v in export_command.make_context("export", [path, "--out", "x"]).params.items()
          if k not in ("captures", "out", "overwrite", "trees")}
    writers = {t.name: _Rows(t.name) for t in TABLES}
    runs = list(iter_captures((path,), kw, progress=False, decode=Decode.LITE_TOPICS, tables=core))
    write_rows(iter(runs), writers)   # type: ignore[arg-type]
    (_, run), = runs
    return writers, run.summary.to_json(run.ctx)


def test_the_cores_rows_are_the_decoders() -> None:
    """The rows the core builds (Options.tables: Arrow batches, no Exchange objects) are the
    rows the front makes of its Exchanges, on every capture of the corpus, and the run's
    summary (statuses, malformed fields, CRC verdicts, limits) counts the same; the core
    leaves few exchanges to the front (pre-0.8, cut frames, SASL tokens...)."""
    python = total = 0
    for path in capture_paths():
        core, core_summary = _tables(str(path), True)
        front, front_summary = _tables(str(path), False)
        for name in core:
            assert _sorted(core[name].rows) == _sorted(front[name].rows), (path, name)
        assert core_summary == front_summary, path
        python += core["exchanges"].python
        total += len(core["exchanges"].rows)
    assert total > 200 and python < total / 10, (python, total)


def test_a_batch_of_another_schema_is_refused(tmp_path: Path) -> None:
    from analyzer.tables import ParquetTable

    w = ParquetTable(EXCHANGES, str(tmp_path / "x.parquet"))
    with pytest.raises(ValueError, match="does not have its schema"):
        w.add_batch(pa.record_batch({"capture": ["a"]}))
    w.close()


def test_the_exchanges_handed_on_are_the_decoders() -> None:
    """A run that tables its exchanges and hands those of the stories' APIs on (Options.hand)
    gives them as a run that decodes every exchange in Python does: the same exchanges, the
    same topic names on their partitions (the ids the tabled Metadata answers name are told
    by the core, records of kind 8, not learnt from Python trees), and so the same stories,
    on every capture of the corpus; some of them name topics by id (Fetch v13+)."""
    from analyzer.pipeline import Options, Run
    from analyzer.runs import Decode
    from analyzer.sinks.stats import STORY_KEYS as HAND
    from analyzer.sinks.stats import Stories

    by_id = beats = 0
    for path in capture_paths():
        p = str(path)
        handed: list[Any] = []
        run = Run(p, Options(decode=Decode.LITE_TOPICS, tables=p, hand=HAND))
        run.pipeline.on_tabled = handed.append
        handed += list(run)
        whole = [ex for ex in Run(p, Options(decode=Decode.LITE_TOPICS)) if ex.api_key in HAND]

        def key(ex: Any) -> tuple[Any, ...]:
            return (ex.conn.id, ex.request_frame or 0, ex.response_frame or 0, ex.correlation_id or 0)

        got = sorted((ex for ex in handed if ex.api_key in HAND), key=key)
        want = sorted(whole, key=key)
        assert [(key(ex), ex.api_name, ex.status, ex.partitions) for ex in got] == \
            [(key(ex), ex.api_name, ex.status, ex.partitions) for ex in want], p
        counts = group_counts_of(want)
        assert Stories().add_all(got).result(counts) == Stories().add_all(want).result(counts), p
        by_id += sum(1 for ex in want if ex.api_key == 1 and (ex.api_version or 0) >= 13)
        # what stats hands: the story-telling group APIs, a Heartbeat only when it failed (and
        # the committed lag's APIs when that view is kept)
        for views in ((), ("committed_lag",)):
            told = Stories(views)
            lean: list[Any] = []
            run = Run(p, Options(decode=Decode.LITE_TOPICS, tables=p, hand=told.keys, hand_failed=told.failed_keys))
            run.pipeline.on_tabled = lean.append
            lean += list(run)
            beats += sum(1 for ex in want if ex.api_key == 12) - sum(1 for ex in lean if ex.api_key == 12)
            assert told.add_all(lean).result(counts) == Stories(views).add_all(want).result(counts), p
    assert by_id > 20 and beats > 20


def test_a_query_out_of_memory_runs_again_on_one_thread() -> None:
    """Each of DuckDB's threads holds buffers of its own: a query that two threads run out of
    the memory limit with is run again on one (and so are the next), which spills instead;
    one thread out of memory is the error."""
    import duckdb

    from analyzer.engine import query_of

    class Db:
        def __init__(self, fail: int) -> None:
            self.fail, self.threads, self.seen = fail, 2, []

        def execute(self, sql: str) -> Any:
            self.seen.append(sql)
            if sql == "SET threads = 1":
                self.threads = 1
                return self
            if sql.startswith("SELECT current_setting"):
                self.row = (self.threads,)
                return self
            if self.fail:
                self.fail -= 1
                raise duckdb.OutOfMemoryException("out of memory")
            self.description, self.row = [("n",)], (self.threads,)
            return self

        def fetchone(self) -> tuple:
            return self.row

        def fetchall(self) -> list:
            return [self.row]

    db = Db(fail=1)
    assert query_of(db)("SELECT 1") == (["n"], [(1,)]) and "SET threads = 1" in db.seen
    assert query_of(db)("SELECT 2") == (["n"], [(1,)])
    with pytest.raises(duckdb.OutOfMemoryException):
        query_of(Db(fail=2))("SELECT 1")
