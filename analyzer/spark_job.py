"""The Spark job behind ``kafkawire-sniff spark``: many and huge captures, same figures as one process.

The work is the same as ``read``/``stats``/``check``: the tasks call the very stage
functions those commands use (``analyzer._core`` reads the records,
``analyzer.pipeline.Pipeline`` runs net -> tcp -> framing -> pairing -> dissect,
``analyzer.sinks.stats.StatsAccumulator`` and ``analyzer.sinks.check.Checker`` consume the
exchanges). What this module adds is only the cutting and the gluing:

1. plan (driver): resolve paths, globs and Hadoop URIs; cut each local pcap/pcapng
   file into byte ranges of ``split_size``; pack small files into fewer tasks.
2. scan (one Spark job over the ranges): find the first record boundary at or after
   each range start (pcap: a record header is accepted when ``CHAIN`` consecutive
   records chain with sane caplen/orig_len/timestamps, or end exactly at the end of
   the file; pcapng: a block whose type is known and whose leading and trailing
   lengths agree, ``CHAIN`` times), then hop record by record to the end of the range
   counting packets exactly as ``CaptureReader`` numbers them. The driver checks that
   each range ends where the next begins (a range whose search was fooled by bytes
   that look like records is counted again from where the previous hop ended; a file
   whose ranges still do not chain is read unsplit) and turns the counts into the
   number of the first packet of each range, so packet numbers stay the file's global
   1-based numbers (frame numbers equal ``read``'s).
3. read + shuffle: a whole file small enough (``direct_limit``: up to 1 MiB always, else
   while the files make two tasks per core) is processed where it is read, with no
   shuffle: ``process_whole`` runs one Pipeline over the file, as `stats` does (small
   files are packed into fewer tasks). The other reads (the ranges of split files, big
   files read whole) go through the shuffle: each range is read by ``CaptureReader`` from
   a small in-memory capture (the file header, for pcapng the section header and
   interface blocks in effect, then the range's bytes); the core groups its TCP packets by
   normalised 4-tuple into columnar batches (``read_batches``, ``ConnBatcher``: one record
   per connection of the range, keyed by file, 4-tuple and the number of its first
   packet; no Python object per packet), and
   ``repartitionAndSortWithinPartitions`` sends each connection to one task, its batches
   in packet order. The shuffle thus carries a few records per connection, not one per
   packet. Port reuse is then handled by the core's reassembly inside the task, since the
   packets keep their order.
4. process (``process_partition``): one ``Pipeline`` per 4-tuple, its batches handed to
   the core as they came (``Pipeline.feed_batch``: the core's stages, as `read` runs
   them); every exchange goes to a row for
   the ``exchanges``/``partitions`` tables, to the task's ``StatsAccumulator`` and to its
   ``Checker`` (one of each per file). Unless the rows carry field trees (``with_trees``),
   they are decoded as lean trees, as `stats` and `check` decode them (``lite_if_enough``).
5. gather (driver): stats states are merged (``StatsAccumulator.merge``), checkers
   are merged and finished once per file (the global rules see every connection),
   and connection numbers are renumbered in order of first packet per file, as the
   core numbers them in one process.

Topic ids. A Fetch (v13+) names topics by id; one process resolves an id with the
name learnt from a Metadata (or CreateTopics, DescribeTopicPartitions) response seen
earlier on *any* connection. Each connection group here decodes with its own
DecodeContext, whose ``topic_names`` (``TopicNames``) records what it learns and the
ids it could not resolve; such groups are kept apart ("held"). The driver then knows
every learning of the file: an id learnt before the group's first lookup is renamed
in the held figures and rows (what one process gives); an id learnt between lookups
(or any id with --with-trees, whose notes name topics) sends the held groups through
a second pass that decodes them again with the file's learnings in packet order.
The learnings travel as runs (``TopicNames.learnt``: an entry per id and name, not per
answer); the one case they cannot replay, an id given two names on connections interleaved
in time, is counted in the summary (``topic_ids_inexact``) with a warning.

Files that are gzip-compressed, or that are not on the local filesystem (hdfs://,
s3a://...: read through ``SparkContext.binaryFiles``), are read whole by one task;
unless they are small (processed there), their connections are still spread over tasks
by the shuffle.

Known differences from one process, all rare: a pcapng simple packet block (no
timestamp) at the very start of a range takes time 0 instead of the previous
packet's; the core's reassembly forgets closed connections after 10000 newer ones closed,
which one process counts over the whole file and a task over its connections only.
"""
from __future__ import annotations

import bisect
import contextlib
import dataclasses
import functools
import glob
import json
import os
import shutil
import struct
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any

from analyzer._core import Capture, CaptureError, ConnBatcher, open_capture
from analyzer.commands.options import fresh_context
from analyzer.model import Conn, Exchange, pace_collector
from analyzer.pipeline import Options, Pipeline
from analyzer.shards import LearntTable, TopicNames, learnt_ids, rename_topics, resolve_misses
from analyzer.sinks.check import Checker, Finding
from analyzer.sinks.stats import DEFAULT_BY, StatsAccumulator, keep_top_for
from analyzer.tables import (
    CONNECTIONS,
    EXCHANGES,
    PARTITIONS,
    connection_row,
    exchange_rows,
    spark_schema,
    with_trees,
)
from dissectors.context import DecodeContext

__all__ = ["JobConfig", "Source", "Split", "JobResult", "resolve_inputs", "plan_splits", "pack_tasks",
           "scan_split", "read_batches", "is_direct", "direct_limit", "process_whole",
           "process_partition", "lite_if_enough", "gather", "run_local", "run_spark", "remap_conn",
           "SparkJobError"]

DEFAULT_SPLIT_SIZE = 64 * 1024 * 1024
DEFAULT_PACK_SIZE = 64 * 1024 * 1024
CHAIN = 8                     # consecutive records that must chain to accept a boundary
_MAX_RECORD = 1 << 28         # as the core's reader: a larger length is corruption
_MAX_BLOCK = 1 << 28
_TS_SLACK = 400 * 86400       # a record's time must be within this of the file's first packet
META = ""                     # key ip of the per-task bookkeeping records (sorts first)

_PCAP_MAGICS = {b"\xd4\xc3\xb2\xa1": ("<", False), b"\xa1\xb2\xc3\xd4": (">", False),
                b"\x4d\x3c\xb2\xa1": ("<", True), b"\xa1\xb2\x3c\x4d": (">", True)}
_SHB, _IDB, _PB, _SPB, _EPB = 0x0A0D0D0A, 1, 2, 3, 6
_KNOWN_BLOCKS = frozenset({_SHB, _IDB, _PB, _SPB, 4, 5, _EPB, 7, 8, 9, 0x0A, 0xBAD, 0x40000BAD})


class SparkJobError(Exception):
    """A problem the user can act on (one line)."""


# -- configuration ------------------------------------------------------------------

@dataclass
class JobConfig:
    options: Options = field(default_factory=Options)
    ctx: DecodeContext = field(default_factory=DecodeContext)   # limits template
    by: tuple[str, ...] = DEFAULT_BY
    with_trees: bool = False
    rules: frozenset[str] | None = None
    slow_ms: float = 1000.0
    storm_rebalances: int = 5
    split_size: int = DEFAULT_SPLIT_SIZE
    pack_size: int = DEFAULT_PACK_SIZE
    partitions: int = 0                   # shuffle partitions; 0: chosen from the input size
    force_hadoop: bool = False            # read local files through binaryFiles too (tests)
    rows: bool = True                     # make the exchanges/partitions rows (False: figures only)
    direct_max: int = -1                  # whole files up to this size skip the shuffle (-1: from input, cores)
    top: int = 0                          # the slowest exchanges listed (stats.json "top"), as `stats --top`
    display_filter: str | None = None     # -Y: only the exchanges it selects make rows, figures, findings


@dataclass(frozen=True)
class Source:
    file_id: int
    name: str               # as reported (the `capture` column): the path or URI
    local: str | None       # local filesystem path, or None: read through Hadoop
    size: int
    kind: str               # "pcap" | "pcapng" | "gzip" | "remote"
    endian: str = "<"
    first_sec: int = 0      # pcap: seconds of the first record (timestamp sanity)
    snaplen: int = 0
    uri: str | None = None  # what binaryFiles reads when ``local`` is None (default: name)


@dataclass(frozen=True)
class Split:
    file_id: int
    no: int
    start: int
    end: int


# -- 1. plan ----------------------------------------------------------------------------

def _sniff(path: str, name: str) -> dict[str, Any]:
    """Kind, byte order, first time and snaplen of a local capture; CaptureError if it is none."""
    try:
        with open(path, "rb") as f:
            head = f.read(40)
    except OSError as e:
        raise CaptureError(f"{name}: cannot open: {e.strerror or e}") from None
    if head[:2] == b"\x1f\x8b":
        kind: dict[str, Any] = {"kind": "gzip"}
    elif head[:4] in _PCAP_MAGICS:
        endian, _ns = _PCAP_MAGICS[head[:4]]
        snaplen = struct.unpack_from(endian + "I", head, 16)[0] if len(head) >= 20 else 0
        first = struct.unpack_from(endian + "I", head, 24)[0] if len(head) >= 28 else 0
        kind = {"kind": "pcap", "endian": endian, "first_sec": first, "snaplen": snaplen}
    elif head[:4] == b"\x0a\x0d\x0d\x0a":
        bom = head[8:12]
        kind = {"kind": "pcapng", "endian": ">" if bom == b"\x1a\x2b\x3c\x4d" else "<"}
    else:
        kind = {"kind": "other"}
    # let the reader judge the header and the first packet, as `read` would
    with open_capture(path) as reader:
        for _pkt in reader:
            break
    return kind


def resolve_inputs(patterns: Iterable[str], hadoop_glob: Callable[[str], list[tuple[str, int]]] | None = None,
                   force_hadoop: bool = False) -> list[Source]:
    """Expand paths, globs and URIs into Sources (in the order given; duplicates dropped).

    ``file://`` URIs are local paths. Other URIs go through ``hadoop_glob(uri) ->
    [(uri, size)]`` (the driver's Hadoop FileSystem); without it they are an error.
    """
    out: list[Source] = []
    seen: set[str] = set()
    for pat in patterns:
        local = pat[len("file://"):] if pat.startswith("file://") else (None if "://" in pat else pat)
        if local is None:
            if hadoop_glob is None:
                raise SparkJobError(f"{pat}: cannot read this URI without Spark's Hadoop filesystem")
            found = hadoop_glob(pat)
            if not found:
                raise SparkJobError(f"{pat}: no such file")
            for uri, size in found:
                if uri not in seen:
                    seen.add(uri)
                    out.append(Source(len(out), uri, None, size, "remote"))
            continue
        matches = sorted(glob.glob(local)) if glob.has_magic(local) else [local]
        if not matches:
            raise SparkJobError(f"{pat}: no file matches")
        for m in matches:
            if os.path.isdir(m):
                raise SparkJobError(f"{m}: is a directory (give the capture files, or a glob)")
            if not os.path.exists(m):
                raise SparkJobError(f"{m}: no such file")
            name = pat if (pat == m or not glob.has_magic(local)) else m
            if pat.startswith("file://") and not glob.has_magic(local):
                name = pat
            if name in seen:
                continue
            seen.add(name)
            info = _sniff(m, name)
            size = os.path.getsize(m)
            if force_hadoop:
                out.append(Source(len(out), name, None, size, "remote", uri="file://" + os.path.abspath(m)))
                continue
            out.append(Source(len(out), name, os.path.abspath(m), size, info["kind"],
                              info.get("endian", "<"), info.get("first_sec", 0), info.get("snaplen", 0)))
    if not out:
        raise SparkJobError("no capture files given")
    return out


def hadoop_uri(src: Source) -> str:
    return src.uri or src.name


def plan_splits(sources: Iterable[Source], split_size: int = DEFAULT_SPLIT_SIZE) -> list[Split]:
    """Byte ranges of at most ``split_size`` for local pcap/pcapng files; one whole range otherwise."""
    out: list[Split] = []
    for s in sources:
        if s.kind not in ("pcap", "pcapng") or s.size <= split_size:
            out.append(Split(s.file_id, 0, 0, s.size))
            continue
        n = -(-s.size // split_size)
        step = -(-s.size // n)
        for i in range(n):
            out.append(Split(s.file_id, i, i * step, min(s.size, (i + 1) * step)))
    return out


def pack_tasks(reads: list[ReadSplit], sources: list[Source], pack_size: int = DEFAULT_PACK_SIZE
               ) -> list[list[ReadSplit]]:
    """Group reads into tasks: each range of a split file alone, small whole files packed together
    (up to ``pack_size`` bytes per task). Files read through Hadoop are left out (one task each)."""
    tasks: list[list[ReadSplit]] = []
    cur: list[ReadSplit] = []
    cur_size = 0
    for rs in reads:
        src = sources[rs.file_id]
        if src.local is None:
            continue
        n = rs.end - rs.start
        if rs.expect >= 0 or rs.start > 0 or n >= pack_size:
            tasks.append([rs])
            continue
        if cur and cur_size + n > pack_size:
            tasks.append(cur)
            cur, cur_size = [], 0
        cur.append(rs)
        cur_size += n
    if cur:
        tasks.append(cur)
    return tasks


def lite_if_enough(cfg: JobConfig) -> JobConfig:
    """The lean decode mode when nothing asked for reads more than lean trees give: the
    stats figures (``lite``; ``-topics`` when grouping by topic or partition), check's rules
    (``-check``: what they read besides) and the rows of the exchanges and partitions tables
    (fields of the exchange, not of its trees) give what full trees give, and a display
    filter decodes full trees where it tests a tree field. Field trees in the rows
    (``with_trees``) and a lowered --max-depth (``lean_decode``) keep the full decoder."""
    from dataclasses import replace

    from analyzer.commands.options import lean_decode

    if cfg.options.decode != "full" or cfg.with_trees:
        return cfg
    lite = "lite-topics" if {"topic", "partition"} & set(cfg.by) else "lite"
    if cfg.rules is None or cfg.rules:
        lite += "-check"
    return replace(cfg, options=replace(cfg.options, decode=lean_decode(cfg.ctx.max_depth, lite)))


# -- 2. scan ----------------------------------------------------------------------------

@dataclass
class ScanResult:
    file_id: int
    no: int
    boundary: int | None        # first record/block at or after the range start (None: none in range)
    hop_end: int                # first record/block at or after the range end (or the file size)
    packets: int                # packets whose record starts in [boundary, hop_end)
    context: list[tuple[int, bytes]] = field(default_factory=list)   # pcapng SHB/IDB blocks in the range
    damaged: bool = False       # the hop met the end of the file inside a record


class _Range:
    """pread-based random access to a local file, with a small cache window."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_RDONLY)
        self.size = os.fstat(self.fd).st_size
        self.base = 0
        self.buf = b""

    def get(self, off: int, n: int) -> bytes:
        if off < self.base or off + n > self.base + len(self.buf):
            self.base = off
            self.buf = os.pread(self.fd, max(n, 1 << 20), off)
        return self.buf[off - self.base: off - self.base + n]

    def close(self) -> None:
        os.close(self.fd)


def _pcap_ok(r: _Range, off: int, src: Source, hdr: struct.Struct, div_ok: int) -> bool:
    """CHAIN records chain from ``off`` (or end exactly at the end of the file)."""
    limit = src.snaplen if 0 < src.snaplen <= _MAX_RECORD else 1 << 18
    prev_sec = None
    for _ in range(CHAIN):
        if off == r.size:
            return True
        h = r.get(off, 16)
        if len(h) < 16:
            return False
        sec, frac, incl, orig = hdr.unpack(h)
        if frac >= div_ok or incl > limit or orig < incl or orig > _MAX_RECORD:
            return False
        if abs(sec - src.first_sec) > _TS_SLACK or (prev_sec is not None and sec + 60 < prev_sec):
            return False
        prev_sec = sec
        off += 16 + incl
        if off > r.size:
            return False
    return True


def _pcapng_block_ok(r: _Range, off: int, u32: struct.Struct) -> int | None:
    h = r.get(off, 8)
    if len(h) < 8:
        return None
    btype, blen = u32.unpack_from(h, 0)[0], u32.unpack_from(h, 4)[0]
    if btype not in _KNOWN_BLOCKS or blen < 12 or blen % 4 or blen > _MAX_BLOCK or off + blen > r.size:
        return None
    t = r.get(off + blen - 4, 4)
    if len(t) < 4 or u32.unpack(t)[0] != blen:
        return None
    return blen


def _pcapng_ok(r: _Range, off: int, u32: struct.Struct) -> bool:
    for _ in range(CHAIN):
        if off == r.size:
            return True
        blen = _pcapng_block_ok(r, off, u32)
        if blen is None:
            return False
        off += blen
    return True


def scan_split(src: Source, sp: Split, known: int | None = None) -> ScanResult:
    """Find the split's first record boundary and count the packets up to the next range.

    ``known``: the boundary is known (where the previous range's hop ended): no search."""
    if src.kind not in ("pcap", "pcapng") or src.local is None or (sp.start == 0 and sp.end == src.size):
        return ScanResult(src.file_id, sp.no, sp.start, sp.end, -1)
    r = _Range(src.local)
    try:
        if src.kind == "pcap":
            return _scan_pcap(r, src, sp, known)
        return _scan_pcapng(r, src, sp, known)
    finally:
        r.close()


def _scan_pcap(r: _Range, src: Source, sp: Split, known: int | None = None) -> ScanResult:
    e = src.endian
    hdr = struct.Struct(e + "IIII")
    magic = r.get(0, 4)
    div_ok = 1_000_000_000 if _PCAP_MAGICS.get(magic, ("<", False))[1] else 1_000_000
    off = max(sp.start, 24) if known is None else known
    if sp.start > 24 and known is None:
        while off < sp.end and not _pcap_ok(r, off, src, hdr, div_ok):
            off += 1
        if off >= sp.end:
            return ScanResult(src.file_id, sp.no, None, sp.end, 0)
    boundary = off
    n = 0
    damaged = False
    while off < sp.end:
        h = r.get(off, 16)
        if len(h) < 16:
            damaged = off < r.size
            break
        incl = hdr.unpack(h)[2]
        if off + 16 + incl > r.size:
            damaged = True
            break
        n += 1
        off += 16 + incl
    return ScanResult(src.file_id, sp.no, boundary, off, n, damaged=damaged)


def _scan_pcapng(r: _Range, src: Source, sp: Split, known: int | None = None) -> ScanResult:
    u32 = struct.Struct(src.endian + "I")
    off = sp.start + (-sp.start % 4) if known is None else known
    if sp.start > 0 and known is None:
        while off < sp.end and not _pcapng_ok(r, off, u32):
            off += 4
        if off >= sp.end:
            return ScanResult(src.file_id, sp.no, None, sp.end, 0)
    boundary = off
    n = 0
    ctx: list[tuple[int, bytes]] = []
    damaged = False
    while off < sp.end:
        if off + 12 > r.size:
            damaged = off < r.size
            break
        h = r.get(off, 8)
        btype, blen = u32.unpack_from(h, 0)[0], u32.unpack_from(h, 4)[0]
        if btype == _SHB:
            bom = r.get(off + 8, 4)
            if bom not in (b"\x4d\x3c\x2b\x1a", b"\x1a\x2b\x3c\x4d") or \
                    (bom == b"\x1a\x2b\x3c\x4d") != (src.endian == ">"):
                damaged = True          # another byte order: not split (the driver reads it whole)
                break
        if blen < 12 or blen % 4 or blen > _MAX_BLOCK or off + blen > r.size:
            damaged = True
            break
        if btype in (_SHB, _IDB):
            ctx.append((off, r.get(off, blen)))
        elif btype == _EPB or btype == _PB:
            if blen >= 32:
                n += 1
        elif btype == _SPB:
            n += 1
        off += blen
    return ScanResult(src.file_id, sp.no, boundary, off, n, ctx, damaged)


@dataclass(frozen=True)
class ReadSplit:
    """What one task reads: a byte range with its first packet number and header bytes."""
    file_id: int
    no: int
    start: int
    end: int
    first_index: int            # number of the range's first packet minus 1
    prefix: bytes               # pcap file header / pcapng SHB + IDBs in effect
    expect: int                 # packets the scan counted (-1: whole file, not checked)


def plan_reads(sources: list[Source], splits: list[Split], scans: list[ScanResult]) -> list[ReadSplit]:
    """Chain the scans of each file into ReadSplits; a file whose ranges do not chain is read whole."""
    by_file: dict[int, list[tuple[Split, ScanResult]]] = {}
    for sp, sc in zip(splits, scans, strict=True):
        by_file.setdefault(sp.file_id, []).append((sp, sc))
    out: list[ReadSplit] = []
    for fid, items in sorted(by_file.items()):
        src = sources[fid]
        items.sort(key=lambda x: x[0].no)
        whole = ReadSplit(fid, 0, 0, src.size, 0, b"", -1)
        if len(items) == 1 or src.local is None:
            out.append(whole)
            continue
        live = [(sp, sc) for sp, sc in items if sc.boundary is not None]
        ok = bool(live) and live[0][1].boundary == (24 if src.kind == "pcap" else 0)
        for i in range(len(live) - 1):
            x, (sp_y, y) = live[i][1], live[i + 1]
            if x.damaged:
                ok = False
            elif x.hop_end != y.boundary:
                # the search was fooled (bytes inside a record that look like a chain of
                # records): the previous range's hop is right; count this range again from it
                try:
                    live[i + 1] = (sp_y, scan_split(src, sp_y, known=x.hop_end))
                except OSError:
                    ok = False
        live = [(sp, sc) for sp, sc in live if sc.boundary is not None and sc.boundary < sources[fid].size
                and (sc.packets > 0 or sc.boundary < sc.hop_end)]
        if not ok:
            out.append(whole)
            continue
        with open(src.local, "rb") as f:
            header = f.read(24)
        index = 0
        context: list[bytes] = []
        for i, (_sp, sc) in enumerate(live):
            end = live[i + 1][1].boundary if i + 1 < len(live) else src.size
            assert sc.boundary is not None and end is not None
            if src.kind == "pcap":
                prefix = header
            else:
                prefix = b"".join(context)
                for off, blk in sc.context:
                    if off == sc.boundary and struct.unpack_from(src.endian + "I", blk)[0] == _SHB:
                        prefix = b""       # the range starts with its own section header
                        break
            out.append(ReadSplit(fid, i, sc.boundary, end, index, prefix,
                                 sc.packets if i + 1 < len(live) else -1))
            index += sc.packets
            for _off, blk in sc.context:
                if struct.unpack_from(src.endian + "I", blk)[0] == _SHB:
                    context = [blk]
                else:
                    context.append(blk)
    return out


# -- 3. read ------------------------------------------------------------------------------

def _memfile(chunks: list[bytes]) -> tuple[str, Callable[[], None]]:
    """A path holding the bytes, for ``open_capture``: a memfd on Linux, else a temporary file."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("kafkawire-split")
        for c in chunks:
            _write_all(fd, c)
        return f"/proc/self/fd/{fd}", lambda: os.close(fd)
    tf = tempfile.NamedTemporaryFile(prefix="kafkawire-split-", delete=False)  # noqa: SIM115
    for c in chunks:
        tf.write(c)
    tf.close()
    return tf.name, lambda: os.unlink(tf.name)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view[: 1 << 30])
        view = view[n:]


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


Keyed = tuple[tuple[int, str, int, str, int, int], Any]
Batch = tuple[bytes, bytes, bytes, bytes, bytes, bytes]   # numbers, times, link types, orig_lens, ends, data

_READ_BATCH = 4096          # packets the core reads per call
BATCH_BYTES = 4 << 20       # a connection's batch is sent on once its packets hold this many bytes


def read_batches(src: Source, rs: ReadSplit, content: bytes | None = None,
                 keys: set[tuple[Any, ...]] | None = None, batch_bytes: int = BATCH_BYTES) -> Iterator[Keyed]:
    """The TCP packets of a read grouped by connection (``analyzer._core.ConnBatcher``): one
    record per connection of the range (or per ``batch_bytes`` of its packets), keyed by
    (file, normalised 4-tuple, number of the batch's first packet), whose value is the
    columnar ``Batch``; the read's meta record last. The shuffle thus carries a few
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


def partition_of(key: tuple[Any, ...], n: int) -> int:
    """Deterministic partition of a (file, 4-tuple, ...) key (Python's str hash is salted)."""
    import zlib
    return zlib.crc32(f"{key[0]}|{key[1]}|{key[2]}|{key[3]}|{key[4]}".encode()) % n


# -- 4. process -----------------------------------------------------------------------------

class _FileAcc:
    """What one task gathers for one file (held: groups whose topic ids another connection may name)."""

    def __init__(self, cfg: JobConfig) -> None:
        self.stats = StatsAccumulator(cfg.by, keep_top=keep_top_for(cfg.top))
        self.checker = _new_checker(cfg)
        self.conns: list[int] = []           # first packet number of every connection
        self.counts: dict[str, Counter[str]] = {k: Counter() for k in _COUNTERS}
        self.meta: list[dict[str, Any]] = []
        self.learnt: list[list[Any]] = []          # TopicNames.learnt runs
        self.groups: list[tuple[Any, ...]] = []          # held: the group keys
        self.misses: list[dict[str, list[int]]] = []     # held: per group, topic id -> [first, last] miss

    def absorb(self, g: _FileAcc) -> None:
        self.stats.merge(g.stats)
        self.checker.merge(g.checker)
        self.conns.extend(g.conns)
        for k, c in g.counts.items():
            self.counts[k].update(c)
        self.learnt.extend(g.learnt)

    def state(self) -> dict[str, Any]:
        return {"stats": self.stats.to_state(), "checker": self.checker, "conns": self.conns,
                "counts": {k: dict(c) for k, c in self.counts.items()}, "meta": self.meta,
                "learnt": self.learnt, "groups": self.groups, "misses": self.misses}


_COUNTERS = ("summary", "skipped", "bytes_skipped", "exchanges", "notes", "limits", "counters", "detection")
_SUM_FIELDS = ("connections", "kafka_connections", "kafka_tls_connections", "tls_connections", "other_connections",
               "empty_connections", "request_frames", "response_frames", "truncated_frames", "gaps", "gap_bytes")


def _new_checker(cfg: JobConfig) -> Checker:
    return Checker(set(cfg.rules) if cfg.rules is not None else None, slow_ms=cfg.slow_ms,
                   storm_rebalances=cfg.storm_rebalances)


@functools.lru_cache(maxsize=4)
def _compiled(text: str) -> Any:
    """The display filter of a task, compiled once per worker process."""
    from analyzer.display_filter import compile_filter
    return compile_filter(text)


def process_group(gkey: tuple[Any, ...], name: str, feed: Callable[[Pipeline], Iterable[Exchange]],
                  g: _FileAcc, cfg: JobConfig, known: LearntTable | None) -> Iterator[tuple[Any, ...]]:
    """Run one Pipeline, fed by ``feed`` (the batches of a 4-tuple in order, or a whole
    file), into ``g``; yield table rows.

    Rows (``analyzer.tables``): ("x", group key, exchange row), ("p", group key, partition
    row) and ("c", group key, connection row), with the connection as its first packet
    number (renumbered by ``finalize_rows``)."""

    ctx = fresh_context(cfg.ctx)
    names = TopicNames(known)
    ctx.topic_names = names
    # a connection's id is its first packet's number (renumbered by finalize_rows)
    pipe = Pipeline(dataclasses.replace(cfg.options, conn_ids_from_index=True), ctx)
    names.source = pipe
    acc, checker = g.stats, g.checker
    trees = cfg.with_trees

    make_rows = cfg.rows
    keep = _compiled(cfg.display_filter).matcher(ctx) if cfg.display_filter else None

    closed: list[Conn] = []     # the connections ended since the last row (made_rows)

    def ended() -> Iterator[tuple[Any, ...]]:
        for c in closed:
            yield ("c", gkey, connection_row(c, name, c.id))
        closed.clear()

    def rows(out: Iterable[Exchange]) -> Iterator[tuple[Any, ...]]:
        for ex in out:
            yield from ended()
            if keep is not None and not keep(ex):
                continue
            acc.add(ex)
            checker.add(ex)
            if not make_rows:
                continue
            row, parts = exchange_rows(ex, name, ex.conn.id, trees)
            yield ("x", gkey, row)
            for p in parts:
                yield ("p", gkey, p)
        yield from ended()

    if make_rows:
        pipe.on_closed = closed.append
    yield from rows(feed(pipe))
    yield from rows(pipe.finish())
    g.conns.extend(pipe.stream.first_indexes)
    g.learnt.extend(names.learnt)
    s = pipe.summary
    c = g.counts
    for f in _SUM_FIELDS:
        c["summary"][f] += getattr(s, f)
    c["summary"]["tcp_packets"] += s.packets
    c["skipped"].update(s.packets_skipped)
    c["bytes_skipped"].update(s.bytes_skipped)
    c["exchanges"].update(s.exchanges)
    c["notes"].update(s.notes)
    c["detection"].update(s.detection)
    checker.encrypted(s)
    c["counters"].update({"malformed_fields": ctx.malformed, "cut_messages": ctx.cut, "crc_valid": ctx.crc_valid,
                          "crc_invalid": ctx.crc_invalid})
    c["limits"].update(ctx.limits_hit)
    g.misses = [dict(names.misses)] if names.misses else []


def _batches_feed(items: Iterable[Keyed]) -> Callable[[Pipeline], Iterator[Exchange]]:
    """A ``process_group`` feed: a connection's batches (shuffle records), in order."""
    def feed(pipe: Pipeline) -> Iterator[Exchange]:
        for _k, batch in items:
            yield from pipe.feed_batch(batch)
    return feed


def process_partition(items: Iterable[Keyed], cfg: JobConfig, names: dict[int, str],
                      known: dict[int, LearntTable] | None = None
                      ) -> Iterator[tuple[Any, ...]]:
    """A shuffled, sorted partition -> rows ("x"/"p"/"c", group key, row), then ("s", file, state) per file.

    First pass (``known`` None): a group that looked up a topic id it had not learnt
    itself goes to the file's *held* state (with its key and misses), so the driver can
    redo it once the whole file's topic ids are known. Second pass: nothing is held."""
    pace_collector(freeze=False)
    per_file: dict[tuple[int, bool], _FileAcc] = {}

    def acc_for(fid: int, held: bool) -> _FileAcc:
        a = per_file.get((fid, held))
        if a is None:
            a = per_file[(fid, held)] = _FileAcc(cfg)
        return a

    for gkey, grp in groupby(items, key=lambda kv: kv[0][:5]):
        fid = gkey[0]
        if gkey[1] == META and gkey[2] == -1:
            acc_for(fid, False).meta.extend(m for _k, m in grp)
            continue
        g = _FileAcc(cfg)
        yield from process_group(gkey, names[fid], _batches_feed(grp), g, cfg,
                                 known.get(fid) if known is not None else None)
        held = bool(g.misses) and known is None
        target = acc_for(fid, held)
        target.absorb(g)
        if held:
            target.groups.append(gkey)
            target.misses.extend(g.misses)
    for (fid, held), a in per_file.items():
        yield ("s", fid, dict(a.state(), held=held))


def is_direct(src: Source, rs: ReadSplit, limit: int) -> bool:
    """A read that holds a whole file of at most ``limit`` bytes: processed where it is read,
    with no shuffle (as `stats` does: one Pipeline over the file)."""
    return rs.start == 0 and rs.expect < 0 and src.size <= limit


def direct_limit(reads: list[ReadSplit], cfg: JobConfig, cores: int) -> int:
    """Files read whole up to this size are processed with no shuffle: at most a split, and
    small enough that they make two tasks per core (a bigger one is still spread over the
    shuffle partitions by connection); files up to 1 MiB always."""
    if cfg.direct_max >= 0:
        return min(cfg.split_size, cfg.direct_max)
    total = sum(rs.end - rs.start for rs in reads)
    return min(cfg.split_size, max(1 << 20, total // (2 * max(1, cores))))


def process_whole(src: Source, rs: ReadSplit, cfg: JobConfig, content: bytes | None = None
                  ) -> Iterator[tuple[Any, ...]]:
    """A whole file in one task, no shuffle: one Pipeline over all its packets in order (as
    `read` runs), so topic ids are learnt across connections and nothing is held. Yields what
    ``process_partition`` yields for the file: rows, then ("s", file, state)."""
    pace_collector(freeze=False)
    fid = src.file_id
    g = _FileAcc(cfg)

    def feed(pipe: Pipeline) -> Iterator[Exchange]:
        yield from pipe.feed_capture(cap)
        s = pipe.summary        # (every packet read: the file's meta record)
        g.meta.append(_meta(rs, cap, s.packets, s.first_ts, s.last_ts, {}))
    with _opened(src, rs, content) as cap:
        yield from process_group((fid,), src.name, feed, g, cfg, None)
    g.misses = []
    yield ("s", fid, dict(g.state(), held=False))


def learnt_table(states: Iterable[tuple[int, dict[str, Any]]]) -> dict[int, LearntTable]:
    """file -> topic id -> (sorted packet numbers, names, exact) of everything the file's
    groups learnt (``learnt_ids`` of their runs)."""
    per_file: dict[int, list[list[Any]]] = {}
    for fid, st in states:
        per_file.setdefault(fid, []).extend(st["learnt"])
    return {fid: learnt_ids(ev) for fid, ev in per_file.items()}


def inexact_ids(table: dict[int, LearntTable]) -> int:
    """Topic ids whose learnings the second pass cannot replay exactly (``learnt_ids``: an id
    given two names on connections interleaved in time): its names may differ from `stats`."""
    return sum(1 for t in table.values() for ent in t.values() if not ent.exact)


def decode_again(cfg: JobConfig) -> bool:
    """Whether connections that named topic ids learnt elsewhere are decoded again, not renamed
    after the fact: the trees' notes, and what a display filter chose by topic, need the names."""
    return cfg.with_trees or cfg.display_filter is not None


def redo_groups(states: list[tuple[int, dict[str, Any]]],
                table: dict[int, LearntTable], trees: bool = False
                ) -> tuple[set[tuple[Any, ...]], list[int], dict[int, dict[str, str]]]:
    """Decide what to do with the held states: (group keys to process again, indexes of the
    held states they replace, per file the topic ids to rename in the others).

    For each topic id a held group failed to resolve: if no connection of the file had
    learnt it before the group's last lookup, one process would not have resolved it
    either (keep). If one name was learnt before the group's first lookup, one process
    resolves every lookup to that name: renaming the id in the held figures and rows
    gives exactly that (without --with-trees: the trees' notes would still differ).
    Otherwise (learnt between lookups) the groups are decoded again with the file's
    topic ids known at each packet."""
    redo: set[tuple[Any, ...]] = set()
    dropped: list[int] = []
    rename: dict[int, dict[str, str]] = {}
    for i, (fid, st) in enumerate(states):
        if not st.get("held"):
            continue
        t = table.get(fid, {})
        again = False
        names: dict[str, str] = {}
        for m in st["misses"]:
            got, exact = resolve_misses(m, t, rename=not trees)
            names.update(got)
            again = again or not exact
        if again:
            redo.update(st["groups"])
            dropped.append(i)
        elif names:
            rename.setdefault(fid, {}).update(names)
            st["rename"] = names
    return redo, dropped, rename


# -- 5. gather ---------------------------------------------------------------------------------

@dataclass
class JobResult:
    sources: list[Source]
    stats: StatsAccumulator
    findings: list[Finding]
    summary: dict[str, Any]
    conn_ids: dict[int, list[int]]        # file -> sorted first packet numbers (index = conn id)
    tasks: int = 0
    reads: int = 0
    redone: int = 0                       # connection groups decoded a second time (topic ids)
    renamed: int = 0                      # topic ids named after the fact (learnt on other connections)
    elapsed: float = 0.0

    def set_inexact(self, n: int) -> None:
        """Note the topic ids that ``inexact_ids`` counts (in the summary, when there are any)."""
        if n:
            self.summary["topic_ids_inexact"] = n


def capture_names(sources: list[Source]) -> dict[str | None, str]:
    """What the slowest exchanges' ``capture`` (a base name, or None for a lone capture) stands for."""
    many = len(sources) > 1
    return {(os.path.basename(s.name.rstrip("/")) if many else None): s.name for s in sources}


def remap_conn(conn_ids: dict[int, list[int]], fid: int, first_index: int) -> int:
    """The connection number `read` gives: the rank of its first packet in the file."""
    arr = conn_ids[fid]
    i = bisect.bisect_left(arr, first_index)
    return i


def gather(states: Iterable[tuple[int, dict[str, Any]]], sources: list[Source], cfg: JobConfig) -> JobResult:
    """Merge the per-task states into the figures of `stats` and `check`, file by file."""
    per_file: dict[int, list[dict[str, Any]]] = {}
    for fid, st in states:
        per_file.setdefault(fid, []).append(st)
    many = len(sources) > 1
    total = StatsAccumulator(cfg.by, keep_top=keep_top_for(cfg.top))
    findings: list[Finding] = []
    conn_ids: dict[int, list[int]] = {}
    files: list[dict[str, Any]] = []
    tot: Counter[str] = Counter()
    for src in sources:
        sts = per_file.get(src.file_id, [])
        conns = sorted(i for st in sts for i in st["conns"])
        conn_ids[src.file_id] = conns
        acc = StatsAccumulator(cfg.by, keep_top=total.keep_top)
        for st in sts:
            acc.merge(rename_topics(StatsAccumulator.from_state(st["stats"]), st.get("rename") or {}))
        acc.renumber_conns(functools.partial(remap_conn, conn_ids, src.file_id),
                           os.path.basename(src.name.rstrip("/")) if many else None)
        total.merge(acc)
        checker = _new_checker(cfg)
        for st in sts:
            checker.merge(st["checker"])
        metas = [m for st in sts for m in st["meta"]]
        last_ts = max((m["last_ts"] for m in metas if m["last_ts"] is not None), default=None)
        first_ts = min((m["first_ts"] for m in metas if m["first_ts"] is not None), default=None)
        fs = checker.finish(capture_end=last_ts)
        if many:
            for f in fs:
                f.capture = src.name
        findings.extend(fs)
        c: dict[str, Counter[str]] = {k: Counter() for k in _COUNTERS}
        for st in sts:
            for k, v in st["counts"].items():
                c[k].update(v)
        for m in metas:
            c["skipped"].update(m.get("skipped") or {})
        warnings = [m["warning"] for m in sorted(metas, key=lambda m: m["start"]) if m.get("warning")]
        packets = sum(m["packets"] for m in metas)
        d: dict[str, Any] = {
            "capture": src.name, "packets": packets, "packets_skipped": dict(c["skipped"]),
            **{f: c["summary"].get(f, 0) for f in _SUM_FIELDS}, "exchanges": dict(c["exchanges"]),
            "bytes_skipped": dict(c["bytes_skipped"]), "notes": dict(c["notes"]), "first_time": first_ts,
            "last_time": last_ts, "malformed_fields": c["counters"].get("malformed_fields", 0),
            "cut_messages": c["counters"].get("cut_messages", 0),
            "crc_valid": c["counters"].get("crc_valid", 0), "crc_invalid": c["counters"].get("crc_invalid", 0),
            "limits_hit": dict(c["limits"]), "detection": dict(c["detection"]), "findings": len(fs)}
        if warnings:
            d["capture_warning"] = warnings[0]
        files.append(d)
        tot["packets"] += packets
        tot["exchanges"] += sum(c["exchanges"].values())
        tot["connections"] += c["summary"].get("connections", 0)
        tot["findings"] += len(fs)
    summary = {"files": len(sources), "bytes": sum(s.size for s in sources), **dict(tot), "per_file": files}
    return JobResult(sources, total, findings, summary, conn_ids)


def finalize_rows(rows: Iterable[tuple[str, Any, tuple[Any, ...]]], conn_ids: dict[int, list[int]],
                  rename: dict[int, dict[str, str]] | None = None) -> Iterator[tuple[Any, ...]]:
    """Rows with their connection renumbered as `read` numbers it, and topic ids named
    where ``redo_groups`` decided so."""
    ti = PARTITIONS.names.index("topic")
    pi = EXCHANGES.names.index("partitions")
    for tag, gkey, row in rows:
        row = row[:1] + (remap_conn(conn_ids, gkey[0], row[1]),) + row[2:]
        names = rename.get(gkey[0]) if rename else None
        if names:
            if tag == "p":
                t = row[ti]
                if t in names:
                    row = row[:ti] + (names[t],) + row[ti + 1:]
            elif tag == "x" and any(p[0] in names for p in row[pi]):
                parts = [((names.get(p[0], p[0]),) + p[1:]) for p in row[pi]]
                row = row[:pi] + (parts,) + row[pi + 1:]
        yield row


# -- in-process runner (the same steps without Spark; for tests and debugging) ------------------

def run_local(patterns: Iterable[str], cfg: JobConfig, partitions: int = 3, batch_bytes: int = BATCH_BYTES
              ) -> tuple[JobResult, list[tuple[Any, ...]], list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Plan, scan, read, shuffle (in memory), process and gather in this process: the
    steps of ``run_spark`` without Spark (tests and debugging). Returns the result and
    the rows of the exchanges, partitions and connections tables (``analyzer.tables``)."""
    import pickle

    t0 = time.monotonic()
    cfg = lite_if_enough(cfg)
    sources = resolve_inputs(patterns)
    splits = plan_splits(sources, cfg.split_size)
    scans = [scan_split(sources[sp.file_id], sp) for sp in splits]
    reads = plan_reads(sources, splits, scans)
    names = {s.file_id: s.name for s in sources}
    limit = direct_limit(reads, cfg, 1)

    def one_pass(keys: set[tuple[Any, ...]] | None, known: Any) -> tuple[list[Any], list[Any]]:
        buckets: list[list[Keyed]] = [[] for _ in range(partitions)]
        direct: list[Any] = []
        for rs in reads:
            src = sources[rs.file_id]
            if is_direct(src, rs, limit):
                if keys is None:
                    direct.append(process_whole(src, rs, cfg))
                continue
            for kv in read_batches(src, rs, keys=keys, batch_bytes=batch_bytes):
                buckets[partition_of(kv[0], partitions)].append(kv)
        states: list[tuple[int, dict[str, Any]]] = []
        rows: list[Any] = []
        for b in buckets:
            b.sort(key=lambda kv: kv[0])
            direct.append(process_partition(pickle.loads(pickle.dumps(b)), cfg, names, known))
        for recs in direct:
            for rec in recs:
                if rec[0] == "s":
                    states.append((rec[1], pickle.loads(pickle.dumps(rec[2]))))
                else:
                    rows.append(rec)
        return states, rows

    states, rows = one_pass(None, None)
    table = learnt_table(states)
    redo, dropped, rename = redo_groups(states, table, decode_again(cfg))
    if redo:
        states = [st for i, st in enumerate(states) if i not in set(dropped)]
        rows = [r for r in rows if r[1] not in redo]
        states2, rows2 = one_pass(redo, table)
        states += states2
        rows += rows2
    res = gather(states, sources, cfg)
    res.reads = len(reads)
    res.tasks = len(reads)
    res.redone = len(redo)
    res.renamed = sum(len(v) for v in rename.values())
    res.set_inexact(inexact_ids(table))
    res.elapsed = time.monotonic() - t0
    ex_rows, part_rows, conn_rows = (list(finalize_rows((r for r in rows if r[0] == tag), res.conn_ids, rename))
                                     for tag in ("x", "p", "c"))
    return res, ex_rows, part_rows, conn_rows


# -- Spark ------------------------------------------------------------------------------------------

_LOG4J = """status = error
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = spark: %p %c{1}: %m%n
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = error
"""


def _support_dir() -> str:
    d = os.path.join(tempfile.gettempdir(), f"kafkawire-spark-{os.getuid() if hasattr(os, 'getuid') else 0}")
    os.makedirs(d, exist_ok=True)
    return d


def _loopback_master(master: str) -> bool:
    return master.startswith("local") or "127.0.0.1" in master or "localhost" in master


def make_session(master: str = "local[*]", shuffle_partitions: int = 8,
                 conf: dict[str, str] | None = None) -> Any:
    """A quiet SparkSession (log4j at ERROR, no UI, no console progress bar).

    Raises SparkJobError with a one-line reason when Spark cannot start (a standalone
    master that does not answer is named within seconds, before the JVM starts). Stop it
    with ``stop_session``, which also removes what this made in the temporary directory."""
    import sys

    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise SparkJobError("the spark command needs PySpark (pip install 'kafkawire-sniff[spark]', "
                            "i.e. pyspark and pyarrow; and Java 17 or newer)") from None
    check_master(master)
    log4j = os.path.join(_support_dir(), "log4j2.properties")
    with open(log4j, "w") as f:
        f.write(_LOG4J)
    if _loopback_master(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    java_opts = f"-Dlog4j2.configurationFile=file:{log4j} -Dlog4j.configurationFile=file:{log4j}"
    b = (SparkSession.builder.master(master).appName("kafkawire-sniff")
         .config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.driver.extraJavaOptions", java_opts)
         .config("spark.executor.extraJavaOptions", java_opts)
         .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
         .config("spark.pyspark.python", sys.executable)
         .config("spark.pyspark.driver.python", sys.executable)
         # the workers import the installed package, not a folder of the same name in the
         # directory Spark starts them in (a source checkout's analyzer/ has no compiled core)
         .config("spark.executorEnv.PYTHONSAFEPATH", "1")
         .config("spark.python.worker.reuse", "true"))
    if _loopback_master(master):
        b = b.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    for k, v in (conf or {}).items():
        b = b.config(k, v)
    # The JVM (and the Python workers it starts) inherit fd 2: point it at a log file while
    # the gateway starts, so JVM warnings and Spark stack traces never reach the user.
    log_path = os.path.join(_support_dir(), f"spark-{os.getpid()}.log")
    start = os.path.getsize(log_path) if os.path.exists(log_path) else 0
    saved = os.dup(2)
    try:
        sys.stderr.flush()
        with open(log_path, "ab") as log:
            os.dup2(log.fileno(), 2)
        spark = b.getOrCreate()
    except Exception as e:  # noqa: BLE001 - Java missing, bad master URL...
        java = "" if (os.environ.get("JAVA_HOME") or shutil.which("java")) else \
            "; Java 17+ must be installed: java on PATH or JAVA_HOME"
        cause = log_cause(log_path, start) or spark_error_text(e)
        raise SparkJobError(f"cannot start Spark ({cause}{java}; Spark's log: {log_path})") from None
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    spark.sparkContext.setLogLevel("ERROR")
    # no code is shipped: the executors' Python (spark.pyspark.python) must have this
    # package installed, native core included (a compiled module cannot travel in a zip
    # of .py files); see the README's "Spark on a cluster"
    _MADE[id(spark)] = [log_path]
    return spark


def log_cause(path: str, start: int = 0) -> str | None:
    """The first exception's message in Spark's log from byte ``start`` (what Spark said
    when its gateway would not start: a master it cannot use, a missing setting)."""
    import re

    try:
        with open(path, "rb") as f:
            f.seek(start)
            text = f.read(1 << 20).decode("utf-8", "replace")
    except OSError:
        return None
    m = re.search(r"^(?:Exception in thread \S+ )?[\w.$]+(?:Exception|Error): (.+)$", text, re.MULTILINE)
    return m.group(1).strip().rstrip(".") if m else None


# what make_session wrote in the temporary directory, per session: removed by stop_session
_MADE: dict[int, list[str]] = {}


def session_log(spark: Any) -> str | None:
    """The file Spark's own log goes to for a session from ``make_session``."""
    made = _MADE.get(id(spark))
    return made[0] if made else None


def stop_session(spark: Any, keep_log: bool = False) -> None:
    """Stop a session from ``make_session`` and remove Spark's log (unless ``keep_log``: a
    failed run names it)."""
    try:
        spark.stop()
    finally:
        made = _MADE.pop(id(spark), [])
        for path in [] if keep_log else made:
            try:
                os.remove(path)
            except OSError:
                pass


def check_master(master: str, timeout: float = 3.0) -> None:
    """A standalone master (``spark://HOST:PORT``, or several comma-separated) must accept a
    TCP connection within ``timeout`` s: Spark itself retries for over a minute and then
    blames Java. Other masters (local, yarn, k8s) are left to Spark."""
    import socket

    if not master.startswith("spark://"):
        return
    why = []
    for hp in master[len("spark://"):].split(","):
        host, sep, port = hp.strip().rpartition(":")
        if not sep:
            host, port = port, "7077"
        try:
            addr = (host.strip("[]"), int(port))
        except ValueError:
            raise SparkJobError(f"bad master URL {master!r} (expected spark://HOST:PORT)") from None
        try:
            socket.create_connection(addr, timeout=timeout).close()
            return
        except OSError as e:
            why.append(e.strerror or str(e) or type(e).__name__)
    raise SparkJobError(f"the Spark master at {master} did not answer ({'; '.join(sorted(set(why)))}); "
                        "is it running and is the URL right?")




def spark_error_text(e: BaseException) -> str:
    """One line out of a Spark/Py4J exception: the Python error raised in a task if there is one."""
    import re

    text = str(e)
    found = re.findall(r"(?:^|\n)\s*(?:[\w.]+\.)?((?:CaptureError|SparkJobError|UserError)): (.+)", text)
    if found:
        return found[-1][1].strip()
    py = re.findall(r"(?:^|\n)\s*((?:[\w.]+\.)?\w+(?:Error|Exception)): (.+)", text)
    for name, msg in reversed(py):
        if "py4j" not in name.lower() and "java" not in name.lower():
            return f"{name.rsplit('.', 1)[-1]}: {msg.strip()}"
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), type(e).__name__)
    return first[:300]


class StatusLine:
    """A status line on stderr (when it is a terminal) from a SparkStatusTracker polling thread."""

    def __init__(self, sc: Any, enabled: bool, interval: float = 0.5) -> None:
        import sys
        import threading

        self.sc = sc
        self.enabled = enabled and sys.stderr.isatty()
        self.interval = interval
        self.phase = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kafkawire-spark-status", daemon=True)
        self._width = 0

    def __enter__(self) -> StatusLine:
        if self.enabled:
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self.enabled:
            self._thread.join(timeout=2)
            self._write("")

    def _write(self, text: str) -> None:
        import sys

        pad = max(0, self._width - len(text))
        sys.stderr.write("\r" + text + " " * pad + ("\r" if not text else ""))
        sys.stderr.flush()
        self._width = len(text)

    def line(self) -> str:
        tr = self.sc.statusTracker()
        parts = []
        for sid in sorted(tr.getActiveStageIds()):
            info = tr.getStageInfo(sid)
            if info is not None:
                parts.append(f"stage {sid}: {info.numCompletedTasks}/{info.numTasks} tasks"
                             + (f" ({info.numActiveTasks} running)" if info.numActiveTasks else ""))
        return f"spark: {self.phase}" + (" | " + ", ".join(parts) if parts else "")

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._write(self.line()[:200])
            except Exception:  # noqa: BLE001 - the context is stopping
                return


def _hadoop_glob(sc: Any, uri: str) -> list[tuple[str, int]]:
    jvm = sc._jvm
    path = jvm.org.apache.hadoop.fs.Path(uri)
    fs = path.getFileSystem(sc._jsc.hadoopConfiguration())
    st = fs.globStatus(path)
    if st is None:
        return []
    return sorted((str(x.getPath().toString()), int(x.getLen())) for x in st if x.isFile())


def _spark_pass(sc: Any, sources: list[Source], reads: list[ReadSplit], cfg: JobConfig, names: dict[int, str],
                nparts: int, keys: set[tuple[Any, ...]] | None, known: Any) -> tuple[Any, int]:
    """The RDD of tagged rows and states (persisted), and the number of read tasks.

    Whole small files are processed where they are read (no shuffle); the ranges of split
    files (and big files read whole: gzip, remote) are read into per-connection batches,
    shuffled so that each connection meets in one task, sorted by first packet, processed.
    A second pass (``keys``) only reads the split files again, for those groups."""
    from pyspark import StorageLevel

    src_list = list(sources)
    par = max(1, sc.defaultParallelism)
    limit = direct_limit(reads, cfg, par)
    direct = [rs for rs in reads if is_direct(src_list[rs.file_id], rs, limit)]
    shuffled_reads = [rs for rs in reads if not is_direct(src_list[rs.file_id], rs, limit)]
    if keys is not None:
        direct = []
        fids = {k[0] for k in keys}
        shuffled_reads = [rs for rs in shuffled_reads if rs.file_id in fids]
    rdds = []
    ntasks = 0
    if direct:
        # small files packed together, but into at least two tasks per core when there are enough
        dbytes = sum(rs.end - rs.start for rs in direct)
        pack = max(1 << 20, min(cfg.pack_size, -(-dbytes // (par * 2))))
        dtasks = pack_tasks(direct, src_list, pack)

        def whole_task(task: list[ReadSplit]) -> Iterator[tuple[Any, ...]]:
            for rs in task:
                yield from process_whole(src_list[rs.file_id], rs, cfg)
        if dtasks:
            rdds.append(sc.parallelize(dtasks, len(dtasks)).flatMap(whole_task))
            ntasks += len(dtasks)
        for src in src_list:
            if src.local is None and any(rs.file_id == src.file_id for rs in direct):
                def read_whole(kv: tuple[str, bytes], src: Source = src) -> Iterator[tuple[Any, ...]]:
                    return process_whole(src, ReadSplit(src.file_id, 0, 0, src.size, 0, b"", -1), cfg,
                                         content=kv[1])
                rdds.append(sc.binaryFiles(hadoop_uri(src), minPartitions=1).flatMap(read_whole))
                ntasks += 1
    if shuffled_reads:
        keys_b = sc.broadcast(keys) if keys is not None else None
        tasks = pack_tasks(shuffled_reads, src_list, cfg.pack_size)

        def read_task(task: list[ReadSplit]) -> Iterator[Keyed]:
            k = keys_b.value if keys_b is not None else None
            for rs in task:
                yield from read_batches(src_list[rs.file_id], rs, keys=k)

        keyed_rdds = []
        if tasks:
            keyed_rdds.append(sc.parallelize(tasks, len(tasks)).flatMap(read_task))
            ntasks += len(tasks)
        for src in src_list:
            if src.local is None and any(rs.file_id == src.file_id for rs in shuffled_reads):
                def read_remote(kv: tuple[str, bytes], src: Source = src) -> Iterator[Keyed]:
                    k = keys_b.value if keys_b is not None else None
                    return read_batches(src, ReadSplit(src.file_id, 0, 0, src.size, 0, b"", -1),
                                        content=kv[1], keys=k)
                keyed_rdds.append(sc.binaryFiles(hadoop_uri(src), minPartitions=1).flatMap(read_remote))
                ntasks += 1
        keyed = keyed_rdds[0] if len(keyed_rdds) == 1 else sc.union(keyed_rdds)
        n = nparts

        def part(k: tuple[Any, ...]) -> int:
            return partition_of(k, n)

        shuffled = keyed.repartitionAndSortWithinPartitions(n, partitionFunc=part)
        known_b = sc.broadcast(known) if known is not None else None

        def process(it: Iterator[Keyed]) -> Iterator[tuple[Any, ...]]:
            return process_partition(it, cfg, names, known_b.value if known_b is not None else None)

        rdds.append(shuffled.mapPartitions(process))
    if not rdds:
        return sc.emptyRDD(), ntasks
    out = rdds[0] if len(rdds) == 1 else sc.union(rdds)
    return out.persist(StorageLevel.MEMORY_AND_DISK), ntasks


def run_spark(spark: Any, patterns: Iterable[str], out_dir: str | None, cfg: JobConfig,
              status: StatusLine | None = None) -> JobResult:
    """The whole job on ``spark``; writes the Parquet tables under ``out_dir`` (None: compute only).

    Returns the JobResult (merged stats, findings, summary)."""
    t0 = time.monotonic()
    sc = spark.sparkContext
    if out_dir is None and cfg.rows:
        from dataclasses import replace
        cfg = replace(cfg, rows=False)
    cfg = lite_if_enough(cfg)

    def phase(text: str) -> None:
        if status is not None:
            status.phase = text

    sources = resolve_inputs(patterns, hadoop_glob=lambda u: _hadoop_glob(sc, u), force_hadoop=cfg.force_hadoop)
    names = {s.file_id: s.name for s in sources}
    splits = plan_splits(sources, cfg.split_size)
    multi = {sp.file_id for sp in splits if sp.no > 0}
    to_scan = [(sources[sp.file_id], sp) for sp in splits if sp.file_id in multi]
    phase(f"scanning {len(to_scan)} ranges" if to_scan else "reading")
    scanned: dict[tuple[int, int], ScanResult] = {}
    if to_scan:
        par = max(1, min(len(to_scan), sc.defaultParallelism * 4))
        for r in sc.parallelize(to_scan, par).map(lambda x: scan_split(*x)).collect():
            scanned[(r.file_id, r.no)] = r
    scans = [scanned.get((sp.file_id, sp.no)) or scan_split(sources[sp.file_id], sp) for sp in splits]
    reads = plan_reads(sources, splits, scans)
    # shuffle partitions: from the bytes that go through the shuffle, a multiple of the cores
    # (equal waves of tasks)
    par = max(1, sc.defaultParallelism)
    limit = direct_limit(reads, cfg, par)
    total_bytes = sum(rs.end - rs.start for rs in reads if not is_direct(sources[rs.file_id], rs, limit))
    nparts = cfg.partitions or -(-max(par * 2, min(4096, total_bytes // (32 << 20) + 1)) // par) * par

    phase(f"{len(sources)} file(s), {len(reads)} read task(s), {nparts} partitions")
    res1, ntasks = _spark_pass(sc, sources, reads, cfg, names, nparts, None, None)
    states = res1.filter(lambda r: r[0] == "s").map(lambda r: (r[1], r[2])).collect()
    table = learnt_table(states)
    redo, dropped, rename = redo_groups(states, table, decode_again(cfg))
    res2 = None
    if redo:
        phase(f"second pass over {len(redo)} connection(s) (topic ids learnt on other connections)")
        dropped_set = set(dropped)
        states = [st for i, st in enumerate(states) if i not in dropped_set]
        res2, _n = _spark_pass(sc, sources, reads, cfg, names, nparts, redo, table)
        states += res2.filter(lambda r: r[0] == "s").map(lambda r: (r[1], r[2])).collect()
    result = gather(states, sources, cfg)
    result.reads = len(reads)
    result.tasks = ntasks
    result.redone = len(redo)
    result.renamed = sum(len(v) for v in rename.values())
    result.set_inexact(inexact_ids(table))
    if out_dir is not None:
        phase("writing Parquet")
        write_tables(spark, out_dir, cfg, result, res1, res2, redo, rename)
    res1.unpersist()
    if res2 is not None:
        res2.unpersist()
    result.elapsed = time.monotonic() - t0
    return result


# -- tables ------------------------------------------------------------------------------------------

STAT_FIGURES = ("count", "answered", "unanswered", "orphans", "no_response", "malformed", "error_exchanges",
                "service", "bytes_in", "bytes_out", "throttled", "records", "record_bytes")
QUANTILE_FIELDS = ("min", "p50", "p90", "p99", "p999", "max", "mean")


def stats_rows(result: dict[str, Any]) -> tuple[list[str], list[tuple[Any, ...]]]:
    """The `stats` groups as flat rows: the --by keys, the counts, the latency figures (ms)."""
    by = list(result["by"])
    cols = by + list(STAT_FIGURES) + ["exact", "throttle_time_ms_total", "throttle_time_ms_max", "errors", "waits"]
    for q in ("latency_ms", "ttfb_ms", "latency_ms_excl_waits"):
        cols += [f"{q}_{f}" for f in QUANTILE_FIELDS]
    rows = []
    for g in result["groups"]:
        r: list[Any] = [None if g[b] is None else (str(g[b]) if b in ("conn", "topic") else g[b]) for b in by]
        r += [int(g[f]) for f in STAT_FIGURES]
        r += [bool(g["exact"]), int(g["throttle_time_ms"]["total"]), int(g["throttle_time_ms"]["max"]),
              {str(k): int(v) for k, v in g["errors"].items()}, {str(k): int(v) for k, v in g["waits"].items()}]
        for q in ("latency_ms", "ttfb_ms", "latency_ms_excl_waits"):
            r += [None if g[q][f] is None else float(g[q][f]) for f in QUANTILE_FIELDS]
        rows.append(tuple(r))
    return cols, rows


def _stats_schema(cols: list[str]) -> Any:
    from pyspark.sql import types as T

    fields = []
    for c in cols:
        if c in ("version", "partition"):
            t: Any = T.IntegerType()
        elif c in ("api", "client_id", "client", "broker", "topic", "conn"):
            t = T.StringType()
        elif c == "exact":
            t = T.BooleanType()
        elif c in ("errors", "waits"):
            t = T.MapType(T.StringType(), T.LongType())
        elif c.startswith(("latency_ms_", "ttfb_ms_")):
            t = T.DoubleType()
        else:
            t = T.LongType()
        fields.append(T.StructField(c, t))
    return T.StructType(fields)


FINDING_COLUMNS = ("capture", "rule", "severity", "message", "conn", "frames", "exchanges", "details")


def finding_rows(findings: list[Finding], sources: list[Source]) -> list[tuple[Any, ...]]:
    single = sources[0].name if len(sources) == 1 else None
    return [(f.capture or single, f.rule, f.severity, f.message, f.conn, [int(x) for x in f.frames],
             json.dumps(f.exchanges, default=str), json.dumps(f.details, default=str)) for f in findings]


def producer_rows(result: dict[str, Any]) -> tuple[Any, list[tuple[Any, ...]]]:
    """The `stats` producers as rows: acks as a map, compression as JSON text."""
    from pyspark.sql import types as T

    cols = (("client_id", T.StringType()), ("producer_id", T.LongType()), ("idempotent", T.BooleanType()),
            ("producer_epochs", T.ArrayType(T.LongType())), ("transactional_id", T.StringType()),
            ("transactional_batches", T.LongType()), ("acks", T.MapType(T.StringType(), T.LongType())),
            ("requests", T.LongType()), ("batches", T.LongType()), ("records", T.LongType()),
            ("records_per_batch", T.DoubleType()), ("max_records_per_batch", T.LongType()),
            ("bytes_per_batch", T.DoubleType()), ("bytes_before_per_batch", T.DoubleType()),
            ("compression", T.StringType()), ("linger_ms_mean", T.DoubleType()), ("linger_ms_max", T.LongType()),
            ("retries", T.LongType()), ("retries_exact", T.BooleanType()))
    rows = []
    for r in result["producers"]:
        d = dict(r, compression=json.dumps(r["compression"], sort_keys=True),
                 linger_ms_mean=r["linger_ms"]["mean"], linger_ms_max=r["linger_ms"]["max"])
        rows.append(tuple(d[c] for c, _t in cols))
    return T.StructType([T.StructField(c, t) for c, t in cols]), rows


def generation_rows(result: dict[str, Any]) -> tuple[Any, list[tuple[Any, ...]]]:
    """The `stats` consumer groups as one row per generation."""
    from pyspark.sql import types as T

    cols = (("group_id", T.StringType()), ("generation", T.LongType()), ("protocol", T.StringType()),
            ("leader", T.StringType()), ("members", T.ArrayType(T.StringType())),
            ("rebalance_start", T.DoubleType()), ("rebalance_end", T.DoubleType()),
            ("rebalance_ms", T.DoubleType()), ("triggers", T.ArrayType(T.StringType())))
    rows = [tuple(dict(gen, group_id=g["group_id"])[c] for c, _t in cols)
            for g in result["consumer_groups"] for gen in g["generations"]]
    return T.StructType([T.StructField(c, t) for c, t in cols]), rows


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


# what the job writes under --out: the tables (stats.json and summary.json in a local folder)
OUTPUTS = ("exchanges", "partitions", "connections", "stats", "findings", "consumer_lag", "committed_lag",
           "producers", "consumer_groups", "stats.json", "summary.json")


def write_tables(spark: Any, out_dir: str, cfg: JobConfig, result: JobResult, res1: Any, res2: Any,
                 redo: set[tuple[Any, ...]], rename: dict[int, dict[str, str]] | None = None) -> None:
    from pyspark.sql import types as T

    sc = spark.sparkContext
    conn_b = sc.broadcast(result.conn_ids)
    rename_b = sc.broadcast(rename or {})
    redo_b = sc.broadcast(redo)
    ex_schema = spark_schema(with_trees(EXCHANGES) if cfg.with_trees else EXCHANGES)

    def rows_of(tag: str) -> Any:
        def keep1(r: tuple[Any, ...]) -> bool:
            return r[0] == tag and r[1] not in redo_b.value
        rdd = res1.filter(keep1)
        if res2 is not None:
            rdd = rdd.union(res2.filter(lambda r: r[0] == tag))

        def fin(it: Iterator[Any]) -> Iterator[tuple[Any, ...]]:
            return finalize_rows(it, conn_b.value, rename_b.value)
        return rdd.mapPartitions(fin)

    for tag, name, schema in (("x", "exchanges", ex_schema), ("p", "partitions", spark_schema(PARTITIONS)),
                              ("c", "connections", spark_schema(CONNECTIONS))):
        spark.createDataFrame(rows_of(tag), schema, verifySchema=False) \
            .write.mode("overwrite").parquet(_out_path(out_dir, name))
    sres = result.stats.result(top=cfg.top)
    from analyzer.sinks.stats_render import add_show
    add_show(sres["top"], capture_names(result.sources))
    cols, srows = stats_rows(sres)
    f_schema = T.StructType([
        T.StructField("capture", T.StringType()), T.StructField("rule", T.StringType()),
        T.StructField("severity", T.StringType()), T.StructField("message", T.StringType()),
        T.StructField("conn", T.StringType()), T.StructField("frames", T.ArrayType(T.LongType())),
        T.StructField("exchanges", T.StringType()), T.StructField("details", T.StringType())])
    frows = finding_rows(result.findings, result.sources)
    lag_schema = T.StructType([T.StructField(c, t) for c, t in (
        ("client_id", T.StringType()), ("group", T.StringType()), ("topic", T.StringType()),
        ("partition", T.IntegerType()), ("isolation", T.StringType()), ("samples", T.LongType()),
        ("last", T.LongType()), ("max", T.LongType()), ("mean", T.DoubleType()), ("max_time", T.DoubleType()),
        ("last_time", T.DoubleType()), ("stable_last", T.LongType()), ("stable_max", T.LongType()))])
    lrows = [tuple(r[f.name] for f in lag_schema.fields) for r in sres["consumer_lag"]]
    clag_schema = T.StructType([T.StructField(c, t) for c, t in (
        ("group", T.StringType()), ("topic", T.StringType()), ("partition", T.IntegerType()),
        ("committed_offset", T.LongType()), ("commit_time", T.DoubleType()), ("commit_api", T.StringType()),
        ("committed_by", T.StringType()), ("high_watermark", T.LongType()),
        ("high_watermark_time", T.DoubleType()), ("high_watermark_api", T.StringType()), ("lag", T.LongType()),
        ("note", T.StringType()), ("member_id", T.StringType()), ("client_id", T.StringType()))])
    clrows = [tuple(r[f.name] for f in clag_schema.fields) for r in sres["committed_lag"]]
    prod_schema, prows = producer_rows(sres)
    grp_schema, grows = generation_rows(sres)
    for name, rows, schema in (("stats", srows, _stats_schema(cols)), ("findings", frows, f_schema),
                               ("consumer_lag", lrows, lag_schema), ("committed_lag", clrows, clag_schema),
                               ("producers", prows, prod_schema),
                               ("consumer_groups", grows, grp_schema)):
        if "://" not in out_dir and _write_small_parquet(os.path.join(out_dir, name), rows, schema):
            continue
        spark.createDataFrame(rows, schema).coalesce(1).write.mode("overwrite").parquet(_out_path(out_dir, name))
    if "://" not in out_dir:
        with open(os.path.join(out_dir, "stats.json"), "w") as f:
            json.dump(sres, f, indent=1, default=str)
        with open(os.path.join(out_dir, "summary.json"), "w") as f:
            json.dump(result.summary, f, indent=1, default=str)
