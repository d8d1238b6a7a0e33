"""The data model: the tables a capture becomes, defined once.

Five tables, typed (Arrow's types; Parquet on disk), the same for ``export`` on one
machine and for the ``spark`` job on a cluster, and the tables ``sql`` queries:

- ``exchanges``: one row per exchange (a request and its response, or either alone);
- ``partitions``: one row per topic-partition of a Produce or Fetch request or response;
- ``batches``: one row per record batch (v2) of a Produce request (the producers);
- ``lag``: one row per partition of a consumer's fetch session at each Fetch answer (the
  consumer lag, followed in order by ``_core.FetchSessions``: core/src/table/lag.rs);
- ``connections``: one row per TCP connection, Kafka or not.

Each table is a tuple of ``Column``: its name, type, whether it may be null, and what it
holds (the README's "Data model" lists them from here). The types are named as Arrow
names them; ``arrow_schema`` and ``spark_schema`` make each engine's schema of a table,
and the ``*_row`` functions make a row (a tuple in column order) of an exchange, a
partition or a connection.
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from analyzer._core import FetchSessions, batch_summaries
from analyzer.model import Conn, Exchange
from analyzer.sinks.output import exchange_to_json
from analyzer.sinks.stats import named_topic_partitions, throttle_ms, wait_kind
from dissectors.context import Limits
from dissectors.field import Field, body_of
from dissectors.summary import fetch_table, produce_table


@dataclass(frozen=True)
class Column:
    name: str
    type: str           # string, int32, int64, float64, bool, a struct of STRUCTS (partition,
                        # topic_partition, fetch_ask, fetch), or list<any of those>
    nullable: bool
    doc: str


@dataclass(frozen=True)
class Table:
    name: str
    doc: str
    columns: tuple[Column, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)


def _c(name: str, type_: str, doc: str, nullable: bool = True) -> Column:
    return Column(name, type_, nullable, doc)


# the topic and partition index columns of the tables and structs that name a partition
_TOPIC_DOC = "topic name (a topic id as text when the capture never named it)"
TOPIC = _c("topic", "string", _TOPIC_DOC)
PARTITION_INDEX = _c("partition", "int32", "partition index")

# a topic-partition of an exchange (the ``partitions`` column of ``exchanges``, and the last
# columns of ``partitions``)
PARTITION = (
    TOPIC,
    PARTITION_INDEX,
    _c("records", "int64", "records sent by Produce / returned by Fetch, after decompression", False),
    _c("bytes", "int64", "their bytes on the wire", False),
    _c("codec", "string", "compression codec: none, gzip, snappy, lz4, zstd"),
    _c("crc_ok", "bool", "every batch's CRC checks out (null: no batch)"),
    _c("error", "string", "the partition's error code name in a response"),
)

# a topic-partition an exchange names (the ``topic_partitions`` column of ``exchanges``)
TOPIC_PARTITION = (
    _c("topic", "string", "topic name"),
    _c("partition", "int32", "partition index"),
)

# a partition a Fetch request asks for (the ``asked`` list of ``fetch``)
FETCH_ASK = (
    TOPIC,
    PARTITION_INDEX,
    _c("fetch_offset", "int64", "the offset asked from: the consumer's position"),
)

# a Fetch's session (the ``fetch_session`` column of ``exchanges``): what consumer lag follows
FETCH = (
    _c("isolation_level", "int32", "0: read_uncommitted, 1: read_committed"),
    _c("session_id", "int32", "the request's fetch session id (KIP-227; 0: none)"),
    _c("session_epoch", "int32", "the request's session epoch (0: a full fetch that opens a session, "
                                 "> 0: incremental, -1: no session)"),
    _c("error_code", "int32", "the answer's top-level error code (a session error ends the session; null: "
                              "unanswered, or a version before 7 without one)"),
    _c("response_session_id", "int32", "the session id the answer gives"),
    _c("asked", "list<fetch_ask>", "the partitions the request asks for, with their offsets", False),
    _c("forgotten", "list<topic_partition>", "the partitions an incremental request drops from its session",
       False),
)

# the first Fetch version whose answer has a top-level error_code (and sessions)
FETCH_ERROR_CODE_SINCE = 7

# the struct types of columns, by name
STRUCTS = {"partition": PARTITION, "topic_partition": TOPIC_PARTITION, "fetch_ask": FETCH_ASK, "fetch": FETCH}

# what names an exchange in the tables built from it
_EXCHANGE_KEY = (
    _c("capture", "string", "the capture as named on the command line (a path or URI)", False),
    _c("conn", "int64", "connection number, as tshark's tcp.stream", False),
)

EXCHANGES = Table("exchanges", "one row per exchange: a request and its response, or either alone", (
    *_EXCHANGE_KEY,
    _c("client", "string", "client address:port", False),
    _c("broker", "string", "broker address:port", False),
    _c("protocol", "string", "kafka, or kafka-legacy (pre-0.8)", False),
    _c("api_key", "int32", "API key (pre-0.8: the request type)"),
    _c("api_name", "string", "API name as Kafka spells it", False),
    _c("api_version", "int32", "API version"),
    _c("correlation_id", "int32", "correlation id"),
    _c("client_id", "string", "client id"),
    _c("request_frame", "int64", "packet that completed the request frame (1-based, as tshark)"),
    _c("response_frame", "int64", "packet that completed the response frame"),
    _c("request_time", "float64", "request time, seconds since the epoch"),
    _c("response_time", "float64", "response time"),
    _c("response_first_time", "float64", "time of the response's first byte"),
    _c("latency_ms", "float64", "response time - request time, ms"),
    _c("ttfb_ms", "float64", "time to the response's first byte, ms"),
    _c("wait", "string", "why the broker held it on purpose: fetch_max_wait (a Fetch answered near its "
                         "max_wait_ms with less than min_bytes), join_group, sync_group_follower; null: "
                         "service time (stats' waits)"),
    _c("throttle_ms", "int32", "the response's throttle_time_ms (0: not throttled, or no such field)", False),
    _c("group_id", "string", "the consumer group the request names (top-level group_id)"),
    _c("request_bytes", "int64", "request frame bytes, size prefix included"),
    _c("response_bytes", "int64", "response frame bytes, size prefix included"),
    _c("status", "string", "ok, unanswered, no_response_expected, orphan_response, malformed", False),
    _c("error_codes", "list<string>", "names of the non-zero error codes, in wire order", False),
    _c("partitions", "list<partition>", "Produce/Fetch: the topic-partitions (see partitions)", False),
    _c("topic_partitions", "list<topic_partition>", "the topic-partitions it names: a Produce's or Fetch's "
                                                    "partitions, else those its request lists (partition null: "
                                                    "a topic listed without partitions); stats --by topic", False),
    _c("notes", "list<string>", "why a request is unanswered, frames cut by the capture...", False),
    _c("fetch_session", "fetch", "Fetch: its session, its partitions' offsets asked (consumer lag); null for "
                                 "other APIs and a Fetch whose request or answer could not be read"),
))

# the field trees, as JSON text (``export --trees``, ``spark --trees``)
TREES = (
    _c("request", "string", "the request's field tree as JSON"),
    _c("response", "string", "the response's field tree as JSON"),
)

PARTITIONS = Table("partitions", "one row per topic-partition of a Produce or Fetch request or response", (
    *_EXCHANGE_KEY,
    _c("api_name", "string", "Produce or Fetch", False),
    _c("api_version", "int32", "API version"),
    _c("correlation_id", "int32", "correlation id"),
    _c("client_id", "string", "client id"),
    _c("request_frame", "int64", "packet that completed the request frame"),
    _c("response_frame", "int64", "packet that completed the response frame"),
    _c("request_time", "float64", "request time, seconds since the epoch"),
    _c("status", "string", "the exchange's status", False),
    *PARTITION,
    _c("fetch_offset", "int64", "Fetch: the offset the request asked from (the consumer's position)"),
    _c("high_watermark", "int64", "Fetch: the partition's high watermark in the response"),
    _c("last_stable_offset", "int64", "Fetch: its last stable offset (read_committed consumers read up to it)"),
))

BATCHES = Table("batches", "one row per record batch (v2) of a Produce request: what its producer sent", (
    *_EXCHANGE_KEY,
    _c("client_id", "string", "client id"),
    _c("api_version", "int32", "Produce version"),
    _c("correlation_id", "int32", "correlation id"),
    _c("request_frame", "int64", "packet that completed the request frame"),
    _c("request_time", "float64", "request time, seconds since the epoch"),
    _c("acks", "int32", "the request's acks: -1 (all), 0, 1"),
    _c("transactional_id", "string", "the request's transactional id"),
    TOPIC,
    PARTITION_INDEX,
    _c("producer_id", "int64", "producer id (-1: not idempotent)", False),
    _c("producer_epoch", "int32", "producer epoch", False),
    _c("base_sequence", "int32", "sequence number of the batch's first record (-1: none)", False),
    _c("records", "int64", "records_count", False),
    _c("bytes", "int64", "the batch's bytes on the wire (its 12-byte log header included)", False),
    _c("bytes_before", "int64", "the same with its records decompressed (null: they could not be, within "
                                "the decompression limit of a records field, --max-decompressed)"),
    _c("codec", "string", "compression codec: none, gzip, snappy, lz4, zstd", False),
    _c("base_timestamp", "int64", "base_timestamp (ms since the epoch)", False),
    _c("max_timestamp", "int64", "max_timestamp: minus base_timestamp, how long the producer gathered it "
                                 "(CreateTime)", False),
    _c("transactional", "bool", "a transactional batch", False),
    _c("control", "bool", "a control batch (transaction marker)", False),
))

LAG = Table("lag", "one row per partition of a consumer's fetch session at each Fetch answer: its lag", (
    *_EXCHANGE_KEY,
    _c("client_id", "string", "client id"),
    _c("request_frame", "int64", "packet that completed the Fetch request frame"),
    _c("response_time", "float64", "the answer's time, seconds since the epoch", False),
    _c("isolation_level", "int32", "0: read_uncommitted, 1: read_committed"),
    _c("topic", "string", _TOPIC_DOC, False),
    _c("partition", "int32", PARTITION_INDEX.doc, False),
    _c("position", "int64", "the offset the consumer fetched from: the offset last asked plus the records "
                            "the answers returned since", False),
    _c("high_watermark", "int64", "the partition's high watermark, as the last answer that gave it", False),
    _c("last_stable_offset", "int64", "its last stable offset, as that answer gave it"),
    _c("lag", "int64", "high_watermark - position (records; never below 0)", False),
    _c("stable_lag", "int64", "last_stable_offset - position: what a read_committed consumer can read"),
))

CONNECTIONS = Table("connections", "one row per TCP connection, Kafka or not", (
    *_EXCHANGE_KEY,
    _c("client", "string", "client address:port (the SYN sender, or the side that sends requests)", False),
    _c("broker", "string", "broker address:port", False),
    _c("protocol", "string", "kafka, kafka-legacy, tls (not decrypted), or null: not Kafka or no payload"),
    _c("detection", "string", "why it is Kafka (port 9092, auto: ... with the evidence), or unidentified"),
    _c("first_time", "float64", "its first packet's time", False),
    _c("last_time", "float64", "its last packet's time", False),
    _c("syn_seen", "bool", "its handshake was captured", False),
    _c("closed", "string", "fin, rst, or null: open at the capture's end"),
    _c("lost", "bool", "bytes of it were never captured (lost segments)", False),
))

TABLES = (EXCHANGES, PARTITIONS, BATCHES, LAG, CONNECTIONS)
# the tables whose rows the core builds, in the order it hands them (``Stream.take_tables``)
CORE_TABLES = (EXCHANGES, PARTITIONS, BATCHES, LAG)


def with_trees(t: Table) -> Table:
    """``exchanges`` with the field trees as JSON text."""
    return Table(t.name, t.doc, t.columns + TREES)


# -- rows ----------------------------------------------------------------------------------------

def partition_tuple(p: dict[str, Any]) -> tuple[Any, ...]:
    """One partition (``Exchange.partitions``' dicts, as JSON values) in ``PARTITION`` order."""
    t = p.get("topic")
    part = p.get("partition")
    crc = p.get("crc_ok")
    return (None if t is None else str(t),
            part if isinstance(part, int) and not isinstance(part, bool) else None,
            int(p.get("records") or 0), int(p.get("bytes") or 0),
            None if p.get("codec") is None else str(p.get("codec")),
            None if crc is None else bool(crc),
            None if p.get("error") is None else str(p.get("error")))


class Rows(NamedTuple):
    """An exchange's rows: of ``exchanges``, and of the tables that hold its parts."""
    exchange: tuple[Any, ...]
    partitions: list[tuple[Any, ...]]
    batches: list[tuple[Any, ...]]
    lag: list[tuple[Any, ...]]


def exchange_rows(ex: Exchange, capture: str, conn: int, trees: bool = False,
                  names: Mapping[str, str] | None = None, sessions: FetchSessions | None = None) -> Rows:
    """An exchange's rows (``Rows``: of ``exchanges``, with the trees when ``trees``; its
    partitions, batches and consumer-lag figures); ``conn`` is the connection's number in the
    tables, ``names`` the topic ids named so far (``DecodeContext.topic_names``: a Fetch
    request's asks), ``sessions`` the run's Fetch sessions (without, no lag rows)."""
    d = exchange_to_json(ex, trees=trees)
    parts = [partition_tuple(p) for p in d["partitions"]]
    fetching = ex.api_key == 1 and ex.protocol == "kafka"
    fetch = _fetch(ex, names or {}) if fetching else None
    row: tuple[Any, ...] = (capture, conn, d["client"], d["broker"], d["protocol"], d["api_key"], d["api_name"], d["api_version"],
           d["correlation_id"], d["client_id"], d["request_frame"], d["response_frame"],
           _float(d["request_time"]), _float(d["response_time"]), _float(d["response_first_time"]),
           _float(d["latency_ms"]), _float(d["ttfb_ms"]), wait_kind(ex),
           throttle_ms(ex), _group_id(ex), d["request_bytes"], d["response_bytes"], d["status"],
           list(d["error_codes"]), parts, [(t, p) for t, p, _pd in named_topic_partitions(ex)], list(d["notes"]),
           fetch)
    if trees:
        row += tuple(None if d[t] is None else json.dumps(d[t], separators=(",", ":"), ensure_ascii=False)
                     for t in ("request", "response"))
    key = (capture, conn, d["api_name"], d["api_version"], d["correlation_id"], d["client_id"], d["request_frame"],
           d["response_frame"], _float(d["request_time"]), d["status"])
    offsets = _fetch_offsets(ex) if fetching else []
    part_rows = [key + p + (offsets[i] if i < len(offsets) else _NO_OFFSETS) for i, p in enumerate(parts)]
    batches = _batches(ex, d, capture, conn, parts) if ex.api_key == 0 and ex.protocol == "kafka" else []
    lag = []
    if fetch is not None and sessions is not None and ex.response is not None:
        lag = [(capture, conn, d["client_id"], d["request_frame"], float(ex.response.last_ts), fetch[0], *x)
               for x in fetch_lag(ex, conn, sessions, names, fetch, parts, offsets)]
    return Rows(row, part_rows, batches, lag)


def fetch_lag(ex: Exchange, conn: int, sessions: FetchSessions, names: Mapping[str, str] | None = None,
              fetch: tuple[Any, ...] | None = None, parts: list[tuple[Any, ...]] | None = None,
              offsets: list[tuple[Any, ...]] | None = None) -> list[tuple[Any, ...]]:
    """The consumer-lag figures an answered Fetch gives, its connection's Fetches fed to
    ``sessions`` in order: (topic, partition, position, high_watermark, last_stable_offset,
    lag, stable_lag) each. ``fetch``, ``parts`` and ``offsets``: its ``fetch_session``, its
    partitions (``partition_tuple``) and their offsets (``_fetch_offsets``) when made already."""
    if fetch is None:
        fetch = _fetch(ex, names or {}) if ex.api_key == 1 and ex.protocol == "kafka" else None
    if fetch is None or ex.response is None:
        return []
    if parts is None:
        parts = [partition_tuple(p) for p in ex.partitions]
    if offsets is None:
        offsets = _fetch_offsets(ex)
    answers = [(p[0], p[1], p[2], p[6], *(offsets[i][1:] if i < len(offsets) else (None, None)))
               for i, p in enumerate(parts)]
    return sessions.fetch(conn, fetch, answers)


def _fetch(ex: Exchange, names: Mapping[str, str]) -> tuple[Any, ...] | None:
    """A Fetch's ``fetch`` struct (``FETCH``): its request's session and asks (topic ids named
    by ``names``), its answer's error and session; None when either could not be read."""
    q = body_of(ex.request_tree)
    r = body_of(ex.response_tree) if ex.response is not None else None
    if ex.request is None or ex.request.truncated or q is None or (ex.response is not None and r is None):
        return None

    def int_of(body: Field | None, name: str) -> int | None:
        v = body.get(name) if body is not None else None
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    def topic(name: str | None, tid: str | None) -> str | None:
        return name if name is not None else (names.get(tid, tid) if tid is not None else None)

    forgotten = []
    for t in (f := q.child("forgotten_topics_data")) and f.children or ():
        name = topic(t.get("topic", t.get("name")), t.get("topic_id"))
        for p in (ps := t.child("partitions")) and ps.children or ():
            if isinstance(p.value, int):
                forgotten.append((name, p.value))
    # (an answer of v7+ has a top-level error code: a lean tree leaves a 0 out)
    error = int_of(r, "error_code")
    if error is None and r is not None and (ex.api_version or 0) >= FETCH_ERROR_CODE_SINCE:
        error = 0
    return (int_of(q, "isolation_level"), int_of(q, "session_id"), int_of(q, "session_epoch"),
            error, int_of(r, "session_id"),
            [(topic(name, tid), idx, off) for name, tid, idx, off in fetch_table(q)], forgotten)


def _batches(ex: Exchange, d: dict[str, Any], capture: str, conn: int,
             parts: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """A Produce request's rows of ``batches``: each partition's record batches, read from
    the request's bytes by the core's summary of each records field (``_core.batch_summaries``,
    as its walk reads them for its own rows);
    ``parts`` its partitions' rows (their topics named as the capture named them), in the
    order of its body's rows."""
    body = body_of(ex.request_tree)
    if ex.request is None or body is None:
        return []
    rows = produce_table(body)
    spans = [(r[7], r[8]) for r in rows if r[7] is not None and r[8]]
    which = [i for i, r in enumerate(rows) if r[7] is not None and r[8]]
    acks = body.get("acks")
    txn = body.get("transactional_id")
    key = (capture, conn, d["client_id"], d["api_version"], d["correlation_id"], d["request_frame"],
           _float(d["request_time"]), acks if isinstance(acks, int) and not isinstance(acks, bool) else None,
           txn if isinstance(txn, str) else None)
    out = []
    for span, *batch in batch_summaries(ex.request.data, spans, Limits().max_decompressed):
        i = which[span]
        name, tid, idx = rows[i][:3]
        topic = parts[i][0] if len(parts) == len(rows) else (name if name is not None else tid)
        out.append(key + (topic, idx, *batch))
    return out


_NO_OFFSETS = (None, None, None)


def _group_id(ex: Exchange) -> str | None:
    """The group the request names at its body's top level."""
    body = body_of(ex.request_tree)
    g = body.get("group_id") if body is not None else None
    return g if isinstance(g, str) else None


def _fetch_offsets(ex: Exchange) -> list[tuple[int | None, int | None, int | None]]:
    """A Fetch's (fetch_offset, high_watermark, last_stable_offset) of each partition of its
    answer, in the order ``Exchange.partitions`` lists them (the answer's rows, in wire
    order); the offset asked of each, from the request's rows."""
    asked = {(topic if topic is not None else tid, idx): off
             for topic, tid, idx, off in fetch_table(body_of(ex.request_tree))}
    return [(asked.get((topic if topic is not None else tid, idx)), hw, lso)
            for topic, tid, idx, _code, hw, lso, *_rest in fetch_table(body_of(ex.response_tree))]


def connection_row(c: Conn, capture: str, conn: int) -> tuple[Any, ...]:
    """A connection's row of ``connections`` (at its end); ``conn`` its number in the tables."""
    return (capture, conn, str(c.client), str(c.broker), c.protocol, c.detection, float(c.first_ts),
            float(c.last_ts), bool(c.syn_seen), c.closed, bool(c.lost_from))


def _float(v: float | None) -> float | None:
    return None if v is None else float(v)


# -- schemas -------------------------------------------------------------------------------------

def arrow_schema(t: Table) -> Any:
    """The table's ``pyarrow.Schema``."""
    import pyarrow as pa

    def typ(name: str) -> Any:
        if name.startswith("list<"):
            return pa.list_(typ(name[5:-1]))
        if name in STRUCTS:
            return pa.struct([pa.field(c.name, typ(c.type), c.nullable) for c in STRUCTS[name]])
        return {"string": pa.string(), "int32": pa.int32(), "int64": pa.int64(), "float64": pa.float64(),
                "bool": pa.bool_()}[name]
    return pa.schema([pa.field(c.name, typ(c.type), c.nullable) for c in t.columns])


def spark_schema(t: Table) -> Any:
    """The table's Spark ``StructType``."""
    from pyspark.sql import types as T

    def typ(name: str) -> Any:
        if name.startswith("list<"):
            return T.ArrayType(typ(name[5:-1]))
        if name in STRUCTS:
            return T.StructType([T.StructField(c.name, typ(c.type), c.nullable) for c in STRUCTS[name]])
        return {"string": T.StringType(), "int32": T.IntegerType(), "int64": T.LongType(),
                "float64": T.DoubleType(), "bool": T.BooleanType()}[name]
    return T.StructType([T.StructField(c.name, typ(c.type), c.nullable) for c in t.columns])


# -- writing -------------------------------------------------------------------------------------

class ParquetTable:
    """One table written as Parquet row groups of ``batch`` rows (memory bounded by a batch),
    to ``path`` (a file). ``add`` a row; ``close`` writes what is left and the footer."""

    def __init__(self, t: Table, path: str, batch: int = 16384, compression: str = "zstd") -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        # (the system's allocator, not jemalloc: what a batch's writing frees goes back at once,
        # and memory stays flat over a capture of any size)
        pa.set_memory_pool(pa.system_memory_pool())

        self.table = t
        self.schema = arrow_schema(t)
        self.rows: list[tuple[Any, ...]] = []
        self.batch = batch
        self.count = 0
        self._writer = pq.ParquetWriter(path, self.schema, compression=compression)

    def add(self, row: tuple[Any, ...]) -> None:
        self.rows.append(row)
        if len(self.rows) >= self.batch:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa

        if not self.rows:
            return
        cols = list(zip(*self.rows, strict=True))
        arrays = [pa.array(list(col), type=f.type) for col, f in zip(cols, self.schema, strict=True)]
        self._writer.write_batch(pa.RecordBatch.from_arrays(arrays, schema=self.schema))
        self.count += len(self.rows)
        self.rows.clear()

    def add_batch(self, batch: Any) -> None:
        """A record batch of the table's rows (any Arrow PyCapsule exporter: the core's
        ``ArrowBatch``), written as it is; its schema must be the table's."""
        import pyarrow as pa

        b = pa.record_batch(batch)
        if not b.schema.equals(self.schema):
            raise ValueError(f"a batch of {self.table.name} does not have its schema: {b.schema}")
        if b.num_rows:
            self._writer.write_batch(b)
            self.count += b.num_rows

    def close(self) -> None:
        self._flush()
        self._writer.close()


def write_rows(runs: Iterator[tuple[str, Any]], writers: dict[str, ParquetTable], trees: bool = False) -> None:
    """Every exchange, partition, batch and connection of the ``(capture name, Run)`` pairs to the
    table ``writers`` (by table name), each capture's connections numbered as ``read``
    numbers them (``table_run``)."""
    for capture, run in runs:
        table_run(capture, run, writers, trees)


def table_run(capture: str, run: Any, writers: dict[str, ParquetTable], trees: bool = False,
              stories: Callable[[Exchange], None] | None = None,
              keep: Callable[[Exchange], bool] | None = None) -> None:
    """The rows of one Run's exchanges, partitions, batches and connections to the table ``writers`` (by
    table name; without one for connections, none are written).
    A run made with ``Options.tables`` hands the rows the core built as record batches; the
    exchanges it yields (those the core leaves to the front's decoder) become rows here.
    ``stories``: called with every exchange kept, those the core tabled and handed on too
    (``Options.hand``); ``keep``: the exchanges that count (a display filter; the others
    make no row)."""
    exchanges, partitions, batches, lag = (writers[t.name] for t in CORE_TABLES)
    connections = writers.get(CONNECTIONS.name)     # (stats' figures do not read it)
    sessions = FetchSessions()      # (of the Fetches the front decodes; the core follows its own)

    def core_rows(*taken: Any) -> None:
        for t, b in zip(CORE_TABLES, taken, strict=True):
            writers[t.name].add_batch(b)

    if connections is not None:
        def closed(c: Conn) -> None:
            connections.add(connection_row(c, capture, c.id))
        run.pipeline.on_closed = closed
    run.pipeline.on_tables = core_rows
    run.pipeline.on_tabled = stories
    for ex in run:
        if keep is not None and not keep(ex):
            continue
        rows = exchange_rows(ex, capture, ex.conn.id, trees, run.ctx.topic_names, sessions)
        exchanges.add(rows.exchange)
        for w, add in ((partitions, rows.partitions), (batches, rows.batches), (lag, rows.lag)):
            for r in add:
                w.add(r)
        if stories is not None:
            stories(ex)


def open_writers(folder: str, tables: Sequence[Table] = TABLES, compression: str = "zstd") -> dict[str, ParquetTable]:
    """A ``ParquetTable`` per table, writing ``folder/<table>/part-00000.parquet`` (the
    folders made here)."""
    out = {}
    for t in tables:
        os.makedirs(os.path.join(folder, t.name), exist_ok=True)
        out[t.name] = ParquetTable(t, os.path.join(folder, t.name, "part-00000.parquet"), compression=compression)
    return out
