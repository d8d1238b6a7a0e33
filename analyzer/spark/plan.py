"""How a Spark job cuts its input (driver side): byte ranges of the big pcap/pcapng files,
each range's first record boundary and packet count (so packet numbers stay the file's
global 1-based numbers, as `read` gives them), the reads that follow, and their packing
into tasks.

The core finds a range's boundary and walks it (``scan_range``, core/src/split.rs: records
that chain with sane lengths and times, pcapng blocks whose lengths agree). Each range ends
where the next begins: a range whose search was fooled by bytes that look
like records is counted again from where the previous one's hop ended; a file whose ranges
still do not chain is read whole.
"""
from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from analyzer._core import scan_range
from analyzer.runs import Decode, lean_decode
from analyzer.spark.inputs import DEFAULT_PACK_SIZE, DEFAULT_SPLIT_SIZE, JobConfig, Source

_SHB = 0x0A0D0D0A             # a pcapng section header block's type


@dataclass(frozen=True)
class Split:
    file_id: int
    no: int
    start: int
    end: int


@dataclass
class ScanResult:
    file_id: int
    no: int
    boundary: int | None        # first record/block at or after the range start (None: none in range)
    hop_end: int                # first record/block at or after the range end (or the file size)
    packets: int                # packets whose record starts in [boundary, hop_end)
    context: list[tuple[int, bytes]] = field(default_factory=list)   # pcapng SHB/IDB blocks in the range
    damaged: bool = False       # the hop met the end of the file inside a record


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


def whole_read(src: Source) -> ReadSplit:
    """The read of a whole file."""
    return ReadSplit(src.file_id, 0, 0, src.size, 0, b"", -1)


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


def plan_job(sources: list[Source], split_size: int,
             scan_ranges: Callable[[list[tuple[Source, Split]]], Iterable[ScanResult]]) -> list[ReadSplit]:
    """The reads of the job: the files cut into ranges, the ranges of cut files scanned by
    ``scan_ranges`` (``scan_split`` of each, wherever it runs), chained by ``plan_reads``."""
    splits = plan_splits(sources, split_size)
    cut = {sp.file_id for sp in splits if sp.no > 0}
    ranges = [(sources[sp.file_id], sp) for sp in splits if sp.file_id in cut]
    scanned = {(r.file_id, r.no): r for r in (scan_ranges(ranges) if ranges else ())}
    scans = [scanned.get((sp.file_id, sp.no)) or scan_split(sources[sp.file_id], sp) for sp in splits]
    return plan_reads(sources, splits, scans)


# -- scanning a range ----------------------------------------------------------------------

def scan_split(src: Source, sp: Split, known: int | None = None) -> ScanResult:
    """Find the split's first record boundary and count the packets up to the next range
    (the core's ``scan_range``). ``known``: the boundary is known (where the previous
    range's hop ended): no search."""
    if src.kind not in ("pcap", "pcapng") or src.local is None or (sp.start == 0 and sp.end == src.size):
        return ScanResult(src.file_id, sp.no, sp.start, sp.end, -1)
    got = scan_range(src.local, sp.start, sp.end, known)
    if got is None:         # (the file changed since it was sniffed)
        return ScanResult(src.file_id, sp.no, sp.start, sp.end, -1)
    boundary, hop_end, packets, context, damaged = got
    return ScanResult(src.file_id, sp.no, boundary, hop_end, packets, context, damaged)


# -- reads and tasks ------------------------------------------------------------------------

def plan_reads(sources: list[Source], splits: list[Split], scans: list[ScanResult]) -> list[ReadSplit]:
    """Chain the scans of each file into ReadSplits; a file whose ranges do not chain is read whole."""
    by_file: dict[int, list[tuple[Split, ScanResult]]] = {}
    for sp, sc in zip(splits, scans, strict=True):
        by_file.setdefault(sp.file_id, []).append((sp, sc))
    out: list[ReadSplit] = []
    for fid, items in sorted(by_file.items()):
        src = sources[fid]
        items.sort(key=lambda x: x[0].no)
        if len(items) == 1 or src.local is None:
            out.append(whole_read(src))
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
        live = [(sp, sc) for sp, sc in live if sc.boundary is not None and sc.boundary < src.size
                and (sc.packets > 0 or sc.boundary < sc.hop_end)]
        if not ok:
            out.append(whole_read(src))
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
                if any(off == sc.boundary and _is_shb(blk, src.endian) for off, blk in sc.context):
                    prefix = b""       # the range starts with its own section header
            out.append(ReadSplit(fid, i, sc.boundary, end, index, prefix,
                                 sc.packets if i + 1 < len(live) else -1))
            index += sc.packets
            for _off, blk in sc.context:
                if _is_shb(blk, src.endian):
                    context = [blk]
                else:
                    context.append(blk)
    return out


def _is_shb(block: bytes, endian: str) -> bool:
    return bool(struct.unpack_from(endian + "I", block)[0] == _SHB)


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


def direct_and_shuffled(sources: list[Source], reads: list[ReadSplit], cfg: JobConfig, cores: int,
                        keys: set[tuple[Any, ...]] | None = None) -> tuple[list[ReadSplit], list[ReadSplit]]:
    """The reads processed where they are read (``is_direct``), and those that go through the
    shuffle. A second pass (``keys``: the connection groups it decodes again) has only the
    shuffled reads of the files those groups are in."""
    limit = direct_limit(reads, cfg, cores)
    direct = [rs for rs in reads if is_direct(sources[rs.file_id], rs, limit)]
    shuffled = [rs for rs in reads if not is_direct(sources[rs.file_id], rs, limit)]
    if keys is None:
        return direct, shuffled
    fids = {k[0] for k in keys}
    return [], [rs for rs in shuffled if rs.file_id in fids]


def shuffle_partitions(shuffled: list[ReadSplit], cfg: JobConfig, cores: int) -> int:
    """From the bytes that go through the shuffle, a multiple of the cores (equal waves of tasks)."""
    total = sum(rs.end - rs.start for rs in shuffled)
    return cfg.partitions or -(-max(cores * 2, min(4096, total // (32 << 20) + 1)) // cores) * cores


def lite_if_enough(cfg: JobConfig) -> JobConfig:
    """The lean decode mode when nothing asked for reads more than lean trees give: the
    stats figures (``lite``; ``-topics`` when grouping by topic or partition), check's rules
    (``-check``: what they read besides) and the rows of the exchanges and partitions tables
    (fields of the exchange, and the requests' topics: ``-topics``) give what full trees give, and a display
    filter decodes full trees where it tests a tree field. Field trees in the rows
    (``with_trees``) and a lowered --max-depth (``lean_decode``) keep the full decoder."""
    if cfg.options.decode != Decode.FULL or cfg.with_trees:
        return cfg
    # (the requests' topics: grouping by topic or partition reads them, and so does the
    # exchanges table's topic_partitions column)
    lite = Decode.lite(topics=bool({"topic", "partition"} & set(cfg.by)) or cfg.rows,
                       check=cfg.rules is None or bool(cfg.rules))
    return replace(cfg, options=replace(cfg.options, decode=lean_decode(cfg.ctx.limits.max_depth, lite)))
