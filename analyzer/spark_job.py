"""The Spark job behind ``kafkawire-sniff spark``: many and huge captures, same figures as one process.

The work is the same as ``read``/``stats``/``check``: the tasks call the very stage
functions those commands use (``analyzer.capture`` reads the records,
``analyzer.pipeline.Pipeline`` runs net -> tcp -> framing -> pairing -> dissect,
``analyzer.stats.StatsAccumulator`` and ``analyzer.check.Checker`` consume the
exchanges). What this module adds is only the cutting and the gluing:

1. plan (driver): resolve paths, globs and Hadoop URIs; cut each local pcap/pcapng
   file into byte ranges of ``split_size``; pack small files into fewer tasks.
2. scan (one Spark job over the ranges): find the first record boundary at or after
   each range start (pcap: a record header is accepted when ``CHAIN`` consecutive
   records chain with sane caplen/orig_len/timestamps, or end exactly at the end of
   the file; pcapng: a block whose type is known and whose leading and trailing
   lengths agree, ``CHAIN`` times), then hop record by record to the end of the range
   counting packets exactly as ``CaptureReader`` numbers them. The driver checks that
   each range ends where the next begins (otherwise that file is read unsplit) and
   turns the counts into the number of the first packet of each range, so packet
   numbers stay the file's global 1-based numbers (frame numbers equal ``read``'s).
3. read + shuffle: each range is read by ``CaptureReader`` from a small in-memory
   capture (the file header, for pcapng the section header and interface blocks in
   effect, then the range's bytes); every TCP packet is keyed by its file and
   normalised 4-tuple, and ``repartitionAndSortWithinPartitions`` sends each
   connection to one task, sorted by packet number. Port reuse is then handled by the
   ``Reassembler`` inside the task, since the packets keep their order.
4. process (``process_partition``): one ``Pipeline`` per 4-tuple; every exchange goes
   to a row for the ``exchanges``/``partitions`` tables, to the task's
   ``StatsAccumulator`` and to its ``Checker`` (one of each per file).
5. gather (driver): stats states are merged (``StatsAccumulator.merge``), checkers
   are merged and finished once per file (the global rules see every connection),
   and connection numbers are renumbered in order of first packet per file, as the
   ``Reassembler`` numbers them in one process.

Files that are gzip-compressed, or that are not on the local filesystem (hdfs://,
s3a://...: read through ``SparkContext.binaryFiles``), are read whole by one task;
their connections are still spread over tasks by the shuffle.

Known differences from one process, all rare: a topic id learnt from a Metadata
response on one connection resolves names in ``partitions`` of a Fetch on another
connection only in one process (each connection decodes with its own DecodeContext
here; the topic stays the UUID); a pcapng simple packet block (no timestamp) at the
very start of a range takes time 0 instead of the previous packet's time.
"""
from __future__ import annotations

import bisect
import glob
import json
import os
import struct
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any

from analyzer.capture import CaptureError, open_capture
from analyzer.check import Checker, Finding
from analyzer.model import Packet
from analyzer.net import SkipCounter, parse_packet
from analyzer.options import fresh_context
from analyzer.pipeline import Options, Pipeline
from analyzer.stats import DEFAULT_BY, StatsAccumulator
from dissectors.context import DecodeContext

__all__ = ["JobConfig", "Source", "Split", "JobResult", "resolve_inputs", "plan_splits", "pack_tasks",
           "scan_split", "read_split", "process_partition", "gather", "run_local", "run_spark",
           "remap_conn", "EXCHANGE_COLUMNS", "PARTITION_COLUMNS", "SparkJobError"]

DEFAULT_SPLIT_SIZE = 64 * 1024 * 1024
DEFAULT_PACK_SIZE = 64 * 1024 * 1024
CHAIN = 8                     # consecutive records that must chain to accept a boundary
_MAX_RECORD = 1 << 28         # as analyzer.capture: a larger length is corruption
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


@dataclass(frozen=True)
class Split:
    file_id: int
    no: int
    start: int
    end: int


# -- 1. plan ----------------------------------------------------------------------------

def _is_uri(p: str) -> bool:
    return "://" in p.split("/", 1)[0] + "/" if "://" in p else False


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
        e, _ns = _PCAP_MAGICS[head[:4]]
        snaplen = struct.unpack_from(e + "I", head, 16)[0] if len(head) >= 20 else 0
        first = struct.unpack_from(e + "I", head, 24)[0] if len(head) >= 28 else 0
        kind = {"kind": "pcap", "endian": e, "first_sec": first, "snaplen": snaplen}
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
                uri = "file://" + os.path.abspath(m)
                out.append(Source(len(out), name, None, size, "remote"))
                _HADOOP_URIS[len(out) - 1] = uri
                continue
            out.append(Source(len(out), name, os.path.abspath(m), size, info["kind"],
                              info.get("endian", "<"), info.get("first_sec", 0), info.get("snaplen", 0)))
    if not out:
        raise SparkJobError("no capture files given")
    return out


_HADOOP_URIS: dict[int, str] = {}   # force_hadoop: file id -> file:// URI (tests)


def hadoop_uri(src: Source) -> str:
    return _HADOOP_URIS.get(src.file_id, src.name)


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


def pack_tasks(splits: list[Split], sources: list[Source], pack_size: int = DEFAULT_PACK_SIZE) -> list[list[Split]]:
    """Group splits into tasks: each split of a big file alone, small whole files packed together."""
    tasks: list[list[Split]] = []
    cur: list[Split] = []
    cur_size = 0
    for sp in splits:
        n = sp.end - sp.start
        whole = sp.start == 0 and sp.end == sources[sp.file_id].size
        if not whole or n >= pack_size:
            tasks.append([sp])
            continue
        if cur and cur_size + n > pack_size:
            tasks.append(cur)
            cur, cur_size = [], 0
        cur.append(sp)
        cur_size += n
    if cur:
        tasks.append(cur)
    return tasks


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


def scan_split(src: Source, sp: Split) -> ScanResult:
    """Find the split's first record boundary and count the packets up to the next range."""
    if src.kind not in ("pcap", "pcapng") or src.local is None or (sp.start == 0 and sp.end == src.size):
        return ScanResult(src.file_id, sp.no, sp.start, sp.end, -1)
    r = _Range(src.local)
    try:
        if src.kind == "pcap":
            return _scan_pcap(r, src, sp)
        return _scan_pcapng(r, src, sp)
    finally:
        r.close()


def _scan_pcap(r: _Range, src: Source, sp: Split) -> ScanResult:
    e = src.endian
    hdr = struct.Struct(e + "IIII")
    magic = r.get(0, 4)
    div_ok = 1_000_000_000 if _PCAP_MAGICS.get(magic, ("<", False))[1] else 1_000_000
    off = max(sp.start, 24)
    if sp.start > 24:
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


def _scan_pcapng(r: _Range, src: Source, sp: Split) -> ScanResult:
    u32 = struct.Struct(src.endian + "I")
    off = sp.start + (-sp.start % 4)
    if sp.start > 0:
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
        for (_a, x), (_b, y) in zip(live, live[1:]):
            if x.hop_end != y.boundary or x.damaged:
                ok = False
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
    """A path holding the bytes: a memfd on Linux, else a temporary file."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("kafkawire-split")
        for c in chunks:
            os.write(fd, c) if len(c) < (1 << 30) else _write_all(fd, c)
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


def _write_chunks(fd: int, chunks: list[bytes]) -> None:
    for c in chunks:
        _write_all(fd, c)


def _packets_of(src: Source, rs: ReadSplit, content: bytes | None = None) -> Iterator[tuple[Packet, Any]]:
    """(Packet with the file's global number, reader) for every packet of the range."""
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
        if hasattr(os, "memfd_create"):
            fd = os.memfd_create("kafkawire-split")
            _write_chunks(fd, [rs.prefix, data])
            path, cleanup = f"/proc/self/fd/{fd}", (lambda fd=fd: os.close(fd))
        else:
            path, cleanup = _memfile([rs.prefix, data])
        del data
    try:
        try:
            reader = open_capture(path)
        except CaptureError as e:
            raise CaptureError(str(e).replace(path, src.name)) from None
        with reader:
            base = rs.first_index
            n = 0
            for p in reader:
                n += 1
                yield Packet(base + p.index, p.ts, p.linktype, p.data, p.orig_len), reader
            if rs.expect >= 0 and n != rs.expect:
                raise CaptureError(f"{src.name}: range at offset {rs.start} held {n} packets, "
                                   f"the scan counted {rs.expect} (internal error; please report)")
    finally:
        if cleanup is not None:
            cleanup()


def conn_key(seg: Any) -> tuple[str, int, str, int]:
    a, b = (seg.src.ip, seg.src.port), (seg.dst.ip, seg.dst.port)
    if b < a:
        a, b = b, a
    return (a[0], a[1], b[0], b[1])


Keyed = tuple[tuple[int, str, int, str, int, int], Any]


def read_split(src: Source, rs: ReadSplit, content: bytes | None = None) -> Iterator[Keyed]:
    """Packets of a range keyed by (file, normalised 4-tuple, packet number); one meta record last."""
    skips = SkipCounter()
    meta: dict[str, Any] = {"packets": 0, "first_ts": None, "last_ts": None, "warning": None,
                            "counters": {}, "start": rs.start}
    fid = src.file_id
    reader = None
    first_ts = last_ts = None
    n = 0
    for pkt, reader in _packets_of(src, rs, content):
        n += 1
        ts = pkt.ts
        if first_ts is None:
            first_ts = ts
        if last_ts is None or ts > last_ts:
            last_ts = ts
        seg = parse_packet(pkt, skips)
        if seg is None:
            continue
        k = conn_key(seg)
        yield (fid, k[0], k[1], k[2], k[3], pkt.index), tuple(pkt)
    if reader is not None:
        meta["warning"] = reader.truncated
        meta["counters"] = dict(reader.counters)
    meta.update(packets=n, first_ts=first_ts, last_ts=last_ts, skipped=dict(skips))
    yield (fid, META, -1, META, -1, rs.start), meta


def partition_of(key: tuple[Any, ...], n: int) -> int:
    """Deterministic partition of a (file, 4-tuple, ...) key (Python's str hash is salted)."""
    import zlib
    return zlib.crc32(f"{key[0]}|{key[1]}|{key[2]}|{key[3]}|{key[4]}".encode()) % n


# -- 4. process -----------------------------------------------------------------------------

EXCHANGE_COLUMNS = ("capture", "conn", "client", "broker", "protocol", "api_key", "api_name", "api_version",
                    "correlation_id", "client_id", "request_frame", "response_frame", "request_time",
                    "response_time", "response_first_time", "latency_ms", "ttfb_ms", "request_bytes",
                    "response_bytes", "status", "error_codes", "partitions", "notes")
TREE_COLUMNS = ("request", "response")
PARTITION_FIELDS = ("topic", "partition", "records", "bytes", "codec", "crc_ok", "error")
PARTITION_COLUMNS = ("capture", "conn", "api_name", "api_version", "correlation_id", "client_id",
                     "request_frame", "response_frame", "request_time", "status") + PARTITION_FIELDS


def _part_tuple(p: dict[str, Any]) -> tuple[Any, ...]:
    t = p.get("topic")
    part = p.get("partition")
    crc = p.get("crc_ok")
    return (None if t is None else str(t),
            part if isinstance(part, int) and not isinstance(part, bool) else None,
            int(p.get("records") or 0), int(p.get("bytes") or 0),
            None if p.get("codec") is None else str(p.get("codec")),
            None if crc is None else bool(crc),
            None if p.get("error") is None else str(p.get("error")))


class _FileAcc:
    """What one task gathers for one file."""

    def __init__(self, cfg: JobConfig) -> None:
        self.stats = StatsAccumulator(cfg.by, keep_top=0)
        self.checker = Checker(set(cfg.rules) if cfg.rules is not None else None, slow_ms=cfg.slow_ms,
                               storm_rebalances=cfg.storm_rebalances)
        self.conns: list[int] = []           # first packet number of every connection
        self.summary: Counter[str] = Counter()
        self.skipped: Counter[str] = Counter()
        self.bytes_skipped: Counter[str] = Counter()
        self.exchanges: Counter[str] = Counter()
        self.notes: Counter[str] = Counter()
        self.limits: Counter[str] = Counter()
        self.counters: Counter[str] = Counter()
        self.meta: list[dict[str, Any]] = []

    def state(self) -> dict[str, Any]:
        return {"stats": self.stats.to_state(), "checker": self.checker, "conns": self.conns,
                "summary": dict(self.summary), "skipped": dict(self.skipped),
                "bytes_skipped": dict(self.bytes_skipped), "exchanges": dict(self.exchanges),
                "notes": dict(self.notes), "limits": dict(self.limits), "counters": dict(self.counters),
                "meta": self.meta}


_SUM_FIELDS = ("connections", "kafka_connections", "tls_connections", "other_connections", "request_frames",
               "response_frames", "truncated_frames", "gaps", "gap_bytes")


def process_group(fid: int, name: str, packets: Iterable[tuple[Any, ...]], fa: _FileAcc,
                  cfg: JobConfig, many: bool) -> Iterator[tuple[Any, ...]]:
    """Run one Pipeline over the packets of one 4-tuple (sorted by number); yield table rows."""
    ctx = fresh_context(cfg.ctx)
    pipe = Pipeline(cfg.options, ctx)
    conns = pipe.reassembler.conns
    first: list[int] = []
    per_conn = "conn" in cfg.by
    acc = StatsAccumulator(cfg.by, keep_top=0) if per_conn else fa.stats
    checker = fa.checker
    trees = cfg.with_trees

    def rows(out: list[Any]) -> Iterator[tuple[Any, ...]]:
        from analyzer.output import exchange_to_json
        for ex in out:
            acc.add(ex)
            checker.add(ex)
            d = exchange_to_json(ex, trees=trees)
            conn = first[ex.conn.id]
            parts = [_part_tuple(p) for p in d["partitions"]]
            row = [name, conn] + [d.get(c) for c in EXCHANGE_COLUMNS[2:20]] + \
                [list(d["error_codes"]), parts, list(d["notes"])]
            if trees:
                row += [json.dumps(d.get("request"), separators=(",", ":"), ensure_ascii=False)
                        if d.get("request") is not None else None,
                        json.dumps(d.get("response"), separators=(",", ":"), ensure_ascii=False)
                        if d.get("response") is not None else None]
            yield ("x", fid, tuple(row))
            for p in parts:
                yield ("p", fid, (name, conn, d["api_name"], d["api_version"], d["correlation_id"],
                                  d["client_id"], d["request_frame"], d["response_frame"], d["request_time"],
                                  d["status"]) + p)

    for v in packets:
        out = pipe.feed(Packet(*v))
        if len(conns) > len(first):
            first.extend([v[0]] * (len(conns) - len(first)))
        if out:
            yield from rows(out)
    yield from rows(pipe.finish())
    fa.conns.extend(first)
    s = pipe.summary
    for f in _SUM_FIELDS:
        fa.summary[f] += getattr(s, f)
    fa.summary["tcp_packets"] += s.packets
    fa.skipped.update(s.packets_skipped)
    fa.bytes_skipped.update(s.bytes_skipped)
    fa.exchanges.update(s.exchanges)
    fa.notes.update(s.notes)
    fa.counters.update({"malformed_fields": ctx.malformed, "crc_valid": ctx.crc_valid,
                        "crc_invalid": ctx.crc_invalid})
    fa.limits.update(ctx.limits_hit)
    for k, n in pipe.reassembler.counters.items():
        fa.notes[f"tcp: {k}"] += n
    if per_conn:
        i = cfg.by.index("conn")
        acc.groups = {k[:i] + (first[k[i]],) + k[i + 1:]: g for k, g in acc.groups.items()}
        fa.stats.merge(acc)


def process_partition(items: Iterable[Keyed], cfg: JobConfig, names: dict[int, str],
                      many: bool = False) -> Iterator[tuple[Any, ...]]:
    """A shuffled, sorted partition -> rows ("x", file, row) / ("p", file, row), then ("s", file, state)."""
    per_file: dict[int, _FileAcc] = {}
    for gkey, grp in groupby(items, key=lambda kv: kv[0][:5]):
        fid = gkey[0]
        fa = per_file.get(fid)
        if fa is None:
            fa = per_file[fid] = _FileAcc(cfg)
        if gkey[1] == META and gkey[2] == -1:
            for _k, meta in grp:
                fa.meta.append(meta)
            continue
        yield from process_group(fid, names[fid], (v for _k, v in grp), fa, cfg, many)
    for fid, fa in per_file.items():
        yield ("s", fid, fa.state())


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
    elapsed: float = 0.0


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
    total = StatsAccumulator(cfg.by, keep_top=0)
    findings: list[Finding] = []
    conn_ids: dict[int, list[int]] = {}
    files: list[dict[str, Any]] = []
    tot: Counter[str] = Counter()
    for src in sources:
        sts = per_file.get(src.file_id, [])
        conns = sorted(i for st in sts for i in st["conns"])
        conn_ids[src.file_id] = conns
        acc = StatsAccumulator(cfg.by, keep_top=0)
        for st in sts:
            acc.merge(StatsAccumulator.from_state(st["stats"]))
        if "conn" in cfg.by:
            i = cfg.by.index("conn")
            label = os.path.basename(src.name.rstrip("/"))

            def new_key(k: tuple[Any, ...], i: int = i, label: str = label, fid: int = src.file_id) -> Any:
                cid = remap_conn(conn_ids, fid, k[i])
                return k[:i] + ((f"{label}#{cid}" if many else cid),) + k[i + 1:]
            acc.groups = {new_key(k): g for k, g in acc.groups.items()}
        total.merge(acc)
        checker = Checker(set(cfg.rules) if cfg.rules is not None else None, slow_ms=cfg.slow_ms,
                          storm_rebalances=cfg.storm_rebalances)
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
        s: Counter[str] = Counter()
        for st in sts:
            s.update(st["summary"])
        skipped: Counter[str] = Counter()
        for m in metas:
            skipped.update(m.get("skipped") or {})
        for st in sts:
            skipped.update(st["skipped"])
        exchanges: Counter[str] = Counter()
        notes: Counter[str] = Counter()
        bytes_skipped: Counter[str] = Counter()
        limits: Counter[str] = Counter()
        counters: Counter[str] = Counter()
        for st in sts:
            exchanges.update(st["exchanges"])
            notes.update(st["notes"])
            bytes_skipped.update(st["bytes_skipped"])
            limits.update(st["limits"])
            counters.update(st["counters"])
        warnings = [m["warning"] for m in sorted(metas, key=lambda m: m["start"]) if m.get("warning")]
        packets = sum(m["packets"] for m in metas)
        d = {"capture": src.name, "packets": packets, "packets_skipped": dict(skipped),
             **{f: s.get(f, 0) for f in _SUM_FIELDS}, "exchanges": dict(exchanges),
             "bytes_skipped": dict(bytes_skipped), "notes": dict(notes), "first_time": first_ts,
             "last_time": last_ts, "malformed_fields": counters.get("malformed_fields", 0),
             "crc_valid": counters.get("crc_valid", 0), "crc_invalid": counters.get("crc_invalid", 0),
             "limits_hit": dict(limits), "findings": len(fs)}
        if warnings:
            d["capture_warning"] = warnings[0]
        files.append(d)
        tot["packets"] += packets
        tot["exchanges"] += sum(exchanges.values())
        tot["connections"] += s.get("connections", 0)
        tot["findings"] += len(fs)
    summary = {"files": len(sources), "bytes": sum(s.size for s in sources), **dict(tot), "per_file": files}
    return JobResult(sources, total, findings, summary, conn_ids)


def finalize_rows(rows: Iterable[tuple[str, int, tuple[Any, ...]]], conn_ids: dict[int, list[int]]
                  ) -> Iterator[tuple[Any, ...]]:
    """Rows with their connection renumbered as `read` numbers it."""
    for _tag, fid, row in rows:
        yield row[:1] + (remap_conn(conn_ids, fid, row[1]),) + row[2:]


# -- in-process runner (the same steps without Spark; for tests and debugging) ------------------

def run_local(patterns: Iterable[str], cfg: JobConfig, partitions: int = 3
              ) -> tuple[JobResult, list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Plan, scan, read, shuffle (in memory), process and gather, in this process."""
    t0 = time.monotonic()
    sources = resolve_inputs(patterns)
    splits = plan_splits(sources, cfg.split_size)
    scans = [scan_split(sources[sp.file_id], sp) for sp in splits]
    reads = plan_reads(sources, splits, scans)
    buckets: list[list[Keyed]] = [[] for _ in range(partitions)]
    for rs in reads:
        for kv in read_split(sources[rs.file_id], rs):
            buckets[partition_of(kv[0], partitions)].append(kv)
    names = {s.file_id: s.name for s in sources}
    states: list[tuple[int, dict[str, Any]]] = []
    ex_rows: list[tuple[str, int, tuple[Any, ...]]] = []
    part_rows: list[tuple[str, int, tuple[Any, ...]]] = []
    for b in buckets:
        b.sort(key=lambda kv: kv[0])
        for rec in process_partition(b, cfg, names, len(sources) > 1):
            if rec[0] == "x":
                ex_rows.append(rec)
            elif rec[0] == "p":
                part_rows.append(rec)
            else:
                import pickle
                states.append((rec[1], pickle.loads(pickle.dumps(rec[2]))))
    res = gather(states, sources, cfg)
    res.reads = len(reads)
    res.tasks = len(reads)
    res.elapsed = time.monotonic() - t0
    return res, list(finalize_rows(ex_rows, res.conn_ids)), list(finalize_rows(part_rows, res.conn_ids))


def run_spark(*args: Any, **kwargs: Any) -> Any:
    from analyzer.spark_runner import run_spark as _run
    return _run(*args, **kwargs)
