"""What runs inside a Spark task (and in ``run_local``): a whole small file through one
Pipeline where it is read; the other reads turned into per-connection columnar batches
for the shuffle; each connection's batches, in packet order, through one Pipeline. Every
exchange makes a row of the exchanges table (the source of the figures, which the driver
queries: ``analyzer.figures``), a Produce its rows of batches (the producers' figures read
them), an answered Fetch its rows of lag (the consumer lag's: each Pipeline follows its
connections' Fetch sessions in order); when the tables are written, its rows of partitions
too; it goes to the task's Stories and Checker (one of each per file); a task ends with each
file's partial state for ``gather``.

Task output records: ("x", group key, exchange row), ("p", group key, partition row), ("b",
group key, batch row), ("l", group key, lag row) and ("c", group key, connection row), with
the connection as its first packet number (renumbered by ``gather.finalize_rows``); then
("s", file, state) per file.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import tempfile
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from itertools import groupby
from typing import Any

from analyzer._core import Capture, CaptureError, ConnBatcher, FetchSessions, open_capture
from analyzer.model import Conn, Exchange, pace_collector
from analyzer.pipeline import Pipeline
from analyzer.runs import fresh_context
from analyzer.shards import LearntTable, TopicNames
from analyzer.spark.inputs import JobConfig, Source
from analyzer.spark.plan import ReadSplit
from analyzer.tables import BATCHES, CONNECTIONS, EXCHANGES, LAG, PARTITIONS, connection_row, exchange_rows

META = ""                   # key ip of the per-read bookkeeping records (sorts first)
_READ_BATCH = 4096          # packets the core reads per call
BATCH_BYTES = 4 << 20       # a connection's batch is sent on once its packets hold this many bytes

# a shuffle record: (file, 4-tuple, first packet) -> the core's columnar batch (numbers, times,
# link types, orig_lens, ends, data), or the read's meta record
Keyed = tuple[tuple[int, str, int, str, int, int], Any]

# the tag of each table's rows in the task output records
TAGS = {EXCHANGES.name: "x", PARTITIONS.name: "p", BATCHES.name: "b", LAG.name: "l", CONNECTIONS.name: "c"}

DECODE_COUNTERS = ("malformed_fields", "cut_messages", "crc_valid", "crc_invalid")
COUNTERS = ("summary", "skipped", "bytes_skipped", "exchanges", "notes", "limits", "counters", "detection")
SUM_FIELDS = ("connections", "kafka_connections", "kafka_tls_connections", "tls_connections", "other_connections",
              "empty_connections", "request_frames", "response_frames", "truncated_frames", "gaps", "gap_bytes")


# -- reading -------------------------------------------------------------------------------

def _memfile(chunks: list[bytes]) -> tuple[str, Callable[[], None]]:
    """A path holding the bytes, for ``open_capture``: a memfd on Linux, else a temporary file."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("kafkawire-split")
        for c in chunks:
            view = memoryview(c)
            while view:
                view = view[os.write(fd, view[: 1 << 30]):]
        return f"/proc/self/fd/{fd}", lambda: os.close(fd)
    tf = tempfile.NamedTemporaryFile(prefix="kafkawire-split-", delete=False)  # noqa: SIM115
    for c in chunks:
        tf.write(c)
    tf.close()
    return tf.name, lambda: os.unlink(tf.name)


@contextlib.contextmanager
def _opened(src: Source, rs: ReadSplit, content: bytes | None = None) -> Iterator[Capture]:
    """The capture of a read: the file itself, or a memory file of the range's header
    bytes and its bytes, or of ``content`` (a file read through Hadoop)."""
    cleanup: Callable[[], None] | None = None
    if content is not None:
        path, cleanup = _memfile([content])
    elif rs.expect < 0 and rs.start == 0:
        path = src.local or ""
    else:
        assert src.local is not None
        with open(src.local, "rb") as f:
            f.seek(rs.start)
            data = f.read(rs.end - rs.start)
        path, cleanup = _memfile([rs.prefix, data])
        del data
    try:
        try:
            cap = open_capture(path)
        except CaptureError as e:
            raise CaptureError(str(e).replace(path, src.name)) from None
        with cap:
            yield cap
    finally:
        if cleanup is not None:
            cleanup()


def _meta(rs: ReadSplit, cap: Capture, packets: int, first_ts: float | None, last_ts: float | None,
          skipped: dict[str, int]) -> dict[str, Any]:
    """A read's meta record: its packets, first and last time, the reader's warning and
    counters, and the packets that gave no TCP segment (by reason)."""
    return {"packets": packets, "first_ts": first_ts, "last_ts": last_ts, "warning": cap.truncated,
            "counters": dict(cap.counters), "start": rs.start, "skipped": skipped}


def read_batches(src: Source, rs: ReadSplit, content: bytes | None = None,
                 keys: set[tuple[Any, ...]] | None = None, batch_bytes: int = BATCH_BYTES) -> Iterator[Keyed]:
    """The TCP packets of a read grouped by connection (``analyzer._core.ConnBatcher``): one
    record per connection of the range (or per ``batch_bytes`` of its packets), keyed by
    (file, normalised 4-tuple, number of the batch's first packet), whose value is the
    columnar batch; the read's meta record last. The shuffle thus carries a few
    records per connection, not one per packet, and no Python object is made per packet.

    With ``keys`` (a second pass): only the packets of those groups, and no meta record."""
    fid = src.file_id
    mine = None if keys is None else [k[1:5] for k in keys if k[0] == fid]
    with _opened(src, rs, content) as cap:
        batcher = ConnBatcher(rs.first_index, batch_bytes, mine)
        while (sealed := batcher.read(cap, _READ_BATCH)) is not None:
            for k, batch in sealed:
                yield (fid, *k), batch
        if rs.expect >= 0 and batcher.packets != rs.expect:
            raise CaptureError(f"{src.name}: range at offset {rs.start} held {batcher.packets} packets, "
                               f"the scan counted {rs.expect} (internal error; please report)")
        if keys is None:
            yield (fid, META, -1, META, -1, rs.start), _meta(rs, cap, batcher.packets, batcher.first_ts,
                                                            batcher.last_ts, batcher.skips)


def read_task(task: list[ReadSplit], sources: list[Source], keys: set[tuple[Any, ...]] | None = None,
              batch_bytes: int = BATCH_BYTES) -> Iterator[Keyed]:
    """The shuffle records of a task's reads (``read_batches`` of each)."""
    for rs in task:
        yield from read_batches(sources[rs.file_id], rs, keys=keys, batch_bytes=batch_bytes)


def partition_of(key: tuple[Any, ...], n: int) -> int:
    """Deterministic partition of a (file, 4-tuple, ...) key (Python's str hash is salted)."""
    return zlib.crc32(f"{key[0]}|{key[1]}|{key[2]}|{key[3]}|{key[4]}".encode()) % n


# -- processing ----------------------------------------------------------------------------

class FileAcc:
    """What one task gathers for one file (held: groups whose topic ids another connection may name)."""

    def __init__(self, cfg: JobConfig) -> None:
        self.stories = cfg.new_stories()
        self.checker = cfg.new_checker()
        self.conns: list[int] = []           # first packet number of every connection
        self.counts: dict[str, Counter[str]] = {k: Counter() for k in COUNTERS}
        self.meta: list[dict[str, Any]] = []
        self.learnt: list[list[Any]] = []          # TopicNames.learnt runs
        self.groups: list[tuple[Any, ...]] = []          # held: the group keys
        self.misses: list[dict[str, list[int]]] = []     # held: per group, topic id -> [first, last] miss

    def absorb(self, g: FileAcc) -> None:
        self.stories.merge(g.stories)
        self.checker.merge(g.checker)
        self.conns.extend(g.conns)
        for k, c in g.counts.items():
            self.counts[k].update(c)
        self.learnt.extend(g.learnt)

    def state(self, held: bool) -> dict[str, Any]:
        return {"stories": self.stories.to_state(), "checker": self.checker, "conns": self.conns,
                "counts": {k: dict(c) for k, c in self.counts.items()}, "meta": self.meta,
                "learnt": self.learnt, "groups": self.groups, "misses": self.misses, "held": held}


@functools.lru_cache(maxsize=4)
def _compiled(text: str) -> Any:
    """The display filter of a task, compiled once per worker process."""
    from analyzer.display_filter import compile_filter
    return compile_filter(text)


def process_group(gkey: tuple[Any, ...], name: str, feed: Callable[[Pipeline], Iterable[Exchange]],
                  g: FileAcc, cfg: JobConfig, known: LearntTable | None) -> Iterator[tuple[Any, ...]]:
    """Run one Pipeline, fed by ``feed`` (the batches of a 4-tuple in order, or a whole
    file), into ``g``; yield its rows ("x"/"p"/"b"/"l"/"c", ``gkey``, row): the exchanges',
    the batches' and the lag's always (the figures' source), those of partitions and
    connections when the tables are written."""
    ctx = fresh_context(cfg.ctx)
    names = TopicNames(known)
    ctx.topic_names = names
    # a connection's id is its first packet's number (renumbered by finalize_rows)
    pipe = Pipeline(dataclasses.replace(cfg.options, conn_ids_from_index=True), ctx)
    names.source = pipe
    keep = _compiled(cfg.display_filter).matcher(ctx) if cfg.display_filter else None
    trees = cfg.tree_rows
    sessions = FetchSessions()      # (the Pipeline hands each connection's exchanges in order)

    closed: list[Conn] = []     # the connections ended since the last row

    def ended() -> Iterator[tuple[Any, ...]]:
        for c in closed:
            yield ("c", gkey, connection_row(c, name, c.id))
        closed.clear()

    def rows(out: Iterable[Exchange]) -> Iterator[tuple[Any, ...]]:
        for ex in out:
            yield from ended()
            if keep is not None and not keep(ex):
                continue
            g.stories.add(ex)
            g.checker.add(ex)
            made = exchange_rows(ex, name, ex.conn.id, trees, names, sessions)
            yield ("x", gkey, made.exchange)
            for tag, more in (("b", made.batches), ("l", made.lag), ("p", made.partitions if cfg.rows else ())):
                for r in more:
                    yield (tag, gkey, r)
        yield from ended()

    if cfg.rows:
        pipe.on_closed = closed.append
    yield from rows(feed(pipe))
    yield from rows(pipe.finish())
    g.conns.extend(pipe.stream.first_indexes)
    g.learnt.extend(names.learnt)
    s = pipe.summary
    c = g.counts
    for f in SUM_FIELDS:
        c["summary"][f] += getattr(s, f)
    c["summary"]["tcp_packets"] += s.packets
    n = ctx.counts
    for k, got in (("skipped", s.packets_skipped), ("bytes_skipped", s.bytes_skipped), ("exchanges", s.exchanges),
                   ("notes", s.notes), ("detection", s.detection), ("limits", n.limits_hit),
                   ("counters", dict(zip(DECODE_COUNTERS, (n.malformed, n.cut, n.crc_valid, n.crc_invalid),
                                         strict=True)))):
        c[k].update(got)
    g.checker.encrypted(s)
    g.misses = [dict(names.misses)] if names.misses else []


def process_partition(items: Iterable[Keyed], cfg: JobConfig, names: dict[int, str],
                      known: dict[int, LearntTable] | None = None
                      ) -> Iterator[tuple[Any, ...]]:
    """A shuffled, sorted partition -> rows ("x"/"p"/"b"/"l"/"c", group key, row), then ("s", file, state) per file.

    First pass (``known`` None): a group that looked up a topic id it had not learnt
    itself goes to the file's *held* state (with its key and misses), so the driver can
    redo it once the whole file's topic ids are known. Second pass: nothing is held."""
    pace_collector(freeze=False)
    per_file: dict[tuple[int, bool], FileAcc] = {}

    def acc_for(fid: int, held: bool) -> FileAcc:
        if (fid, held) not in per_file:
            per_file[(fid, held)] = FileAcc(cfg)
        return per_file[(fid, held)]

    def feed(grp: Iterable[Keyed]) -> Callable[[Pipeline], Iterator[Exchange]]:
        return lambda pipe: (ex for _k, batch in grp for ex in pipe.feed_batch(batch))

    for gkey, grp in groupby(items, key=lambda kv: kv[0][:5]):
        fid = gkey[0]
        if gkey[1] == META and gkey[2] == -1:
            acc_for(fid, False).meta.extend(m for _k, m in grp)
            continue
        g = FileAcc(cfg)
        yield from process_group(gkey, names[fid], feed(grp), g, cfg, known.get(fid) if known is not None else None)
        held = bool(g.misses) and known is None
        target = acc_for(fid, held)
        target.absorb(g)
        if held:
            target.groups.append(gkey)
            target.misses.extend(g.misses)
    for (fid, held), a in per_file.items():
        yield ("s", fid, a.state(held))


def process_whole(src: Source, rs: ReadSplit, cfg: JobConfig, content: bytes | None = None
                  ) -> Iterator[tuple[Any, ...]]:
    """A whole file in one task, no shuffle: one Pipeline over all its packets in order (as
    `read` runs), so topic ids are learnt across connections and nothing is held. Yields what
    ``process_partition`` yields for the file: rows, then ("s", file, state)."""
    pace_collector(freeze=False)
    g = FileAcc(cfg)

    def feed(pipe: Pipeline) -> Iterator[Exchange]:
        yield from pipe.feed_capture(cap)
        s = pipe.summary        # (every packet read: the file's meta record)
        g.meta.append(_meta(rs, cap, s.packets, s.first_ts, s.last_ts, {}))
    with _opened(src, rs, content) as cap:
        yield from process_group((src.file_id,), src.name, feed, g, cfg, None)
    yield ("s", src.file_id, g.state(False))


def whole_task(task: list[ReadSplit], sources: list[Source], cfg: JobConfig) -> Iterator[tuple[Any, ...]]:
    """What a task of whole small files yields (``process_whole`` of each)."""
    for rs in task:
        yield from process_whole(sources[rs.file_id], rs, cfg)
