"""The lean records summary as Python defined it before the core took it over
(core/src/records.rs), with the records of v2 batches walked one by one by the full
decoder's own code: the reference tests/test_core_records.py holds the core to on every
input, damaged ones included. Test code only."""
from __future__ import annotations

import struct
import zlib

from crc32c import crc32c

from dissectors.annotate import crc_verdict
from dissectors.compression import decompress_detail
from dissectors.context import DecodeContext
from dissectors.field import MALFORMED, Field
from dissectors.records import (
    CODEC_NAMES,
    LEGACY_MIN_SIZE,
    MAX_WRAPPER_DEPTH,
    MIN_RECORD_SIZE,
    V2_HEADER,
    V2_MIN_LENGTH,
    _bad_records_count,
    _decode_v2_records,
    _decompression_note,
)

_I32 = struct.Struct(">i")


def lean_summary(data: bytes, start: int, end: int, ctx: DecodeContext, name: str = "records") -> Field:
    """The summary Field of the records bytes ``data[start:end]`` (not null)."""
    end = min(end, len(data))
    # the lean summary (the lean mode of ``stats``, which reads only extra's records,
    # bytes, codec and crc_ok): one Field, no children, built here without a call more.
    # Its counts, codec, CRC verdicts (``ctx`` counters, ``crc_ok``), decompression
    # limits and malformed counts are those of the full decode; its malformed marks and
    # invalid-CRC notes sit on this Field (see _summary_set)
    top = _new(Field)     # Field(name, "records", 0, start, end - start) without the call of __init__
    top.name, top.type, top.value, top.offset, top.length = name, "records", 0, start, end - start
    top.children = top.notes = top.extra = None
    crc_bad = ctx.counts.crc_invalid
    n, cid, truncated = _summary_set(data, start, end, ctx, top, 0, None, None, False)
    top.value = n
    top.extra = {"records": n, "bytes": end - start, "codec": _LEAN_CODECS[cid],
                 "crc_ok": ctx.counts.crc_invalid == crc_bad, "truncated": truncated}
    return top


_new = object.__new__
_V2_LEAN = struct.Struct(">Ih34xi")   # crc, attributes, then records_count 34 bytes on (offsets 17, 21, 57)
_U32 = struct.Struct(">I")
_MIXED = 8                            # the codec id _summary_set reports for entries of several codecs
# the codec of a lean summary by the id _summary_set reports: -1 (no entry) is the last
_LEAN_CODECS = (*CODEC_NAMES, "unknown(5)", "unknown(6)", "unknown(7)", "mixed", "none")


def _summary_set(buf: bytes, pos: int, end: int, ctx: DecodeContext, top: Field, depth: int,
                 budget: list[int] | None, wrapper_magic: int | None,
                 cut_by_limit: bool) -> tuple[int, int, bool]:
    """``_decode_set`` for the lean summary, without Fields: (records, codec id of the
    outer entries (-1: none, ``_MIXED``: several), whether a truncated batch ends the set).
    Depth 0 is the records field itself (``budget`` None: made at the first magic 0/1
    message); deeper sets are the inner messages of a compressed magic 0/1 wrapper.

    Once per Produce/Fetch partition of `stats`: a v2 batch is handled inline, no call,
    no object but the slice its CRC reads."""
    count = 0
    cid = -1
    index = 0
    while pos < end:
        left = end - pos
        size = _I32.unpack_from(buf, pos + 8)[0] if left >= 12 else None
        if size is None or size < 0 or 12 + size > left:
            if depth == 0 and (size is None or size >= 0):
                return count, cid, True
            if cut_by_limit:
                top.note("message cut by the decompressed size limit")
            else:
                top.mark_malformed(f"entry [{index}] of {left} bytes cut short" if size is None or size >= 0
                                   else f"[{index}]: negative entry size {size}", ctx)
            return count, cid, False
        if size < 5:
            top.mark_malformed(f"[{index}]: entry size {size} too small to hold a magic byte", ctx)
            return count, cid, False
        magic = buf[pos + 16]
        entry_end = pos + 12 + size
        if magic == 2:
            if wrapper_magic is not None:
                top.mark_malformed(f"[{index}]: a magic 2 batch inside a magic {wrapper_magic} wrapper", ctx)
                return count, cid, False
            if size < V2_MIN_LENGTH:
                top.mark_malformed(f"[{index}]: batch_length {size} shorter than the {V2_MIN_LENGTH}-byte v2 "
                                   "header", ctx)
            else:
                crc, attrs, n = _V2_LEAN.unpack_from(buf, pos + 17)
                # a bytes slice: its copy costs less than a memoryview for the usual small batch
                computed = crc32c(buf[pos + 21:entry_end])
                if computed == crc:
                    ctx.counts.crc_valid += 1
                else:
                    ctx.counts.crc_invalid += 1
                    top.note(f"[{index}]: {crc_verdict(crc, computed)}")
                c = attrs & 7
                if c != cid:
                    cid = c if cid < 0 else _MIXED
                bad_count = _bad_records_count(n, c, entry_end - pos - V2_HEADER, ctx)
                if bad_count is not None:
                    top.mark_malformed(f"[{index}]: {bad_count}", ctx)
                if budget is None:
                    budget = [ctx.limits.max_decompressed]
                count += _v2_records(buf, pos + V2_HEADER, entry_end, c, n, bad_count is None, ctx, top, budget,
                                     index)
        elif magic == 0 or magic == 1:
            if size < LEGACY_MIN_SIZE[magic]:
                top.mark_malformed(f"[{index}]: message_size {size} shorter than a magic {magic} message", ctx)
            else:
                if depth == 0:
                    c = buf[pos + 17] & 7
                    if c != cid:
                        cid = c if cid < 0 else _MIXED
                    if budget is None:
                        budget = [ctx.limits.max_decompressed]
                assert budget is not None   # made above at depth 0; a deeper set gets its wrapper's
                count += _summary_message(buf, pos, entry_end, magic, ctx, top, depth, budget, index)
        else:
            top.mark_malformed(f"[{index}]: unknown magic {magic}", ctx)
            return count, cid, False
        pos = entry_end
        index += 1
    return count, cid, False


def _v2_records(buf: bytes, rstart: int, batch_end: int, codec_id: int, count: int, sane: bool,
                ctx: DecodeContext, top: Field, budget: list[int], index: int) -> int:
    """``_decode_v2``'s records part, its marks on ``top``: the records decompressed by
    ``decompress_detail`` and walked by the full decoder's own ``_decode_v2_records`` (its
    marks read off the Fields it makes). The records it counts."""
    marked = limited = False
    if codec_id == 0:
        rbuf, rpos, rend = buf, rstart, batch_end
    else:
        codec = CODEC_NAMES[codec_id] if codec_id < 5 else f"unknown({codec_id})"
        rbuf, note, _info = decompress_detail(codec, memoryview(buf)[rstart:batch_end], budget[0])
        budget[0] = max(0, budget[0] - len(rbuf))
        rpos, rend = 0, len(rbuf)
        if note is not None:
            if note.startswith("decompressed size limit"):
                ctx.counts.hit_limit("max_decompressed")
                limited = True
            else:
                top.mark_malformed(f"[{index}]: {note}", ctx)
                marked = True
        elif sane and count > len(rbuf) // MIN_RECORD_SIZE:
            top.mark_malformed(f"[{index}]: records_count {count} exceeds what {len(rbuf)} decompressed bytes "
                               "can hold", ctx)
            sane = False
        if note is not None and not rbuf:
            return count if sane else 0
    parent = Field("records", "array", count, rpos, rend - rpos)
    decoded = _decode_v2_records(rbuf, rpos, rend, count if sane else ctx.limits.max_array_len, parent, 0, 0, False,
                                 False, DecodeContext(), limited)
    for rec in parent.children or ():
        if rec.name == "truncated_record":
            top.note("record cut by the decompressed size limit")
        for n in rec.notes or ():
            if n.startswith(MALFORMED):
                top.mark_malformed(f"[{index}]: record {rec.name}: {n[len(MALFORMED):]}", ctx)
    for n in parent.notes or ():
        if n.startswith(MALFORMED):
            top.mark_malformed(f"[{index}]: {n[len(MALFORMED):]}", ctx)
            marked = True
    if sane and decoded != count and not marked and not limited:
        top.mark_malformed(f"[{index}]: records_count {count} but {decoded} records present", ctx)
    return count if sane else decoded


def _summary_message(buf: bytes, pos: int, msg_end: int, magic: int, ctx: DecodeContext,
                     top: Field, depth: int, budget: list[int], index: int) -> int:
    """``_decode_legacy`` without Fields, for a message of a sane size: its CRC, its key
    and value lengths and, for a compressed wrapper, its inner messages (the count)."""
    (crc,) = _U32.unpack_from(buf, pos + 12)
    computed = zlib.crc32(buf[pos + 16:msg_end])
    if computed == crc:
        ctx.counts.crc_valid += 1
    else:
        ctx.counts.crc_invalid += 1
        top.note(f"[{index}]: {crc_verdict(crc, computed)}")
    p = pos + 18 if magic == 0 else pos + 26
    n = 0
    for part in ("key", "value"):
        if p + 4 > msg_end:
            top.mark_malformed(f"[{index}]: {part} length cut short", ctx)
            return 1
        (n,) = _I32.unpack_from(buf, p)
        p += 4
        if n < -1 or (n > 0 and p + n > msg_end):    # (p <= msg_end here: no max() call)
            top.mark_malformed(f"[{index}]: {part} length {n} does not fit the {msg_end - p} bytes left", ctx)
            return 1
        if n > 0:
            p += n
    if p != msg_end:
        top.mark_malformed(f"[{index}]: {msg_end - p} bytes after the value", ctx)
    codec_id = buf[pos + 17] & 7
    if codec_id == 0:
        return 1

    # a compressed wrapper: its value (the last n bytes before p) is an inner MessageSet
    if n < 0:
        top.mark_malformed(f"[{index}]: compressed message with a null value", ctx)
        return 0
    if depth >= MAX_WRAPPER_DEPTH:
        top.mark_malformed(f"[{index}]: compressed messages nested more than {MAX_WRAPPER_DEPTH} deep", ctx)
        return 0
    inner, note, _info = decompress_detail(_LEAN_CODECS[codec_id], bytes(buf[p - n:p]), budget[0])
    budget[0] = max(0, budget[0] - len(inner))
    limited = _decompression_note(top, note, ctx, annotate=False)
    if not inner:
        return 0
    return _summary_set(inner, 0, len(inner), ctx, top, depth + 1, budget, magic, limited)[0]


