"""The records inside Produce requests and Fetch responses.

Three on-wire formats share one framing (offset int64, size int32, then the
rest), and the magic byte at offset 16 of each entry tells them apart:

- magic 0 / 1: a MessageSet of messages (CRC-32 over magic..end; v1 adds a
  timestamp); a compressed message carries an inner MessageSet in its value;
- magic 2: a RecordBatch (CRC-32C over attributes..end) of varint-encoded
  records, the records part compressed as a whole.

``decode_records`` turns the bytes into a Field tree whose offsets are relative
to the frame, except inside decompressed data where they are relative to the
decompressed buffer (the entry says so in a note). A partial entry at the end,
which Fetch responses carry when max_bytes cuts a batch, is a
``truncated_batch`` Field, not an error, and is not counted.
"""
from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, NamedTuple

from crc32c import crc32c

from .annotate import crc_verdict
from .compression import decompress_detail
from .context import DecodeContext
from .field import Field
from .values import describe_value

CODEC_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")
CONTROL_TYPES = {0: "ABORT", 1: "COMMIT"}
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
MAX_WRAPPER_DEPTH = 2     # a compressed message inside a compressed message, at most twice
MIN_RECORD_SIZE = 7       # length, attributes, ts delta, offset delta, key len, value len, header count
V2_HEADER = 61
V2_MIN_LENGTH = V2_HEADER - 12
LEGACY_MIN_SIZE = (14, 22)  # message_size minimum for magic 0 and 1

_V2 = struct.Struct(">qiibIhiqqqhii")
_V0 = struct.Struct(">qiIbb")
_V1 = struct.Struct(">qiIbbq")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_Q_I = struct.Struct(">qi")
_CTRL_KEY = struct.Struct(">hh")
_CTRL_VALUE = struct.Struct(">hi")

# name, struct format, size: the fixed header fields, used for a truncated entry
_V2_FIELDS = (("base_offset", ">q", 8), ("batch_length", ">i", 4), ("partition_leader_epoch", ">i", 4),
              ("magic", ">b", 1), ("crc", ">I", 4), ("attributes", ">h", 2),
              ("last_offset_delta", ">i", 4), ("base_timestamp", ">q", 8), ("max_timestamp", ">q", 8),
              ("producer_id", ">q", 8), ("producer_epoch", ">h", 2), ("base_sequence", ">i", 4),
              ("records_count", ">i", 4))
_LEGACY_FIELDS = (("offset", ">q", 8), ("message_size", ">i", 4), ("crc", ">I", 4), ("magic", ">b", 1),
                  ("attributes", ">b", 1), ("timestamp", ">q", 8))
_ONLY_V2 = {2}
_TYPES = {">q": "int64", ">i": "int32", ">I": "uint32", ">h": "int16", ">b": "int8"}


class RecordView(NamedTuple):
    """One record or message as a consumer would see it (see :func:`iter_records`)."""
    offset: int | None
    timestamp: int | None
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    magic: int
    is_control: bool


class _Bad(Exception):
    """Bad bytes inside one record: caught at the record level."""


class _State:
    __slots__ = ("records", "codecs", "crc_ok", "magics", "batches", "truncated", "ctx")

    def __init__(self, ctx: DecodeContext) -> None:
        self.ctx = ctx
        self.records = 0
        self.codecs: set[str] = set()
        self.crc_ok = True
        self.magics: set[int] = set()
        self.batches: list[dict[str, Any]] = []
        self.truncated = False


# -- helpers --------------------------------------------------------------------
_last_second: list[Any] = [None, ""]


def iso_ms(ms: int) -> str:
    """A millisecond epoch timestamp as ISO 8601 UTC, or a reason when it is none."""
    if ms == -1:
        return "no timestamp (-1)"
    sec, milli = divmod(ms, 1000)
    if sec == _last_second[0]:  # records of one batch mostly share the second
        return f"{_last_second[1]}.{milli:03d}Z"
    try:
        prefix = datetime.fromtimestamp(sec, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return "timestamp out of range"
    _last_second[0], _last_second[1] = sec, prefix
    return f"{prefix}.{milli:03d}Z"


def _crc_note(field: Field, stored: int, computed: int, state: _State) -> None:
    field.note(crc_verdict(stored, computed))
    if stored == computed:
        state.ctx.counts.crc_valid += 1
    else:
        state.ctx.counts.crc_invalid += 1
        state.crc_ok = False


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """A zigzag varint (or varlong) at ``pos``: (value, next position)."""
    if pos >= end:
        raise _Bad("varint cut short")
    b = buf[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    result = b & 0x7F
    shift = 7
    pos += 1
    while True:
        if pos >= end:
            raise _Bad("varint cut short")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise _Bad("varint longer than 10 bytes")


# -- entry point ----------------------------------------------------------------
def decode_records(data: bytes, start: int, end: int, ctx: DecodeContext, name: str = "records",
                   *, null: bool = False) -> Field:
    """Decode the records bytes ``data[start:end]`` of a frame.

    ``null=True`` (or ``end < start``) stands for null records (length -1).
    The Field's ``value`` is the number of records or messages after
    decompression (a truncated trailing entry not counted); ``extra`` carries
    the summary described in the module docs of the issue: records, bytes,
    codec, crc_ok, truncated, magics and the v2 batches' producer state. (The lean
    summary `stats` reads is the core's: core/src/records.rs.)
    """
    if null or end < start:
        return Field(name, "records", None, start, 0, None, ["null"],
                     {"records": 0, "bytes": 0, "codec": "none", "crc_ok": True, "truncated": False,
                      "magics": [], "batches": []})
    end = min(end, len(data))
    state = _State(ctx)
    top = Field(name, "records", 0, start, end - start)
    _decode_set(data, start, end, state, top, depth=0, budget=[ctx.limits.max_decompressed], outer=True)
    top.value = state.records
    codecs = state.codecs
    codec = "none" if not codecs else (next(iter(codecs)) if len(codecs) == 1 else "mixed")
    kids = top.children
    # a truncated batch can only be the last entry (_decode_set stops there)
    entries = len(kids) - (kids[-1].name == "truncated_batch") if kids else 0
    if entries:
        if state.magics == _ONLY_V2:
            kind = "batch" if entries == 1 else "batches"
        else:
            kind = "message" if entries == 1 else "messages"
        top.note(f"{state.records} record{'' if state.records == 1 else 's'} in {entries} {kind}, {codec}")
    top.extra = {"records": state.records, "bytes": end - start, "codec": codec, "crc_ok": state.crc_ok,
                 "truncated": state.truncated, "magics": sorted(state.magics), "batches": state.batches}
    return top


def _decode_set(buf: bytes, pos: int, end: int, state: _State, parent: Field, depth: int,
                budget: list[int], outer: bool, wrapper_magic: int | None = None,
                cut_by_limit: bool = False) -> int:
    """Decode consecutive entries of buf[pos:end] into ``parent``'s children.

    Returns the number of records/messages found. ``outer`` is True for the
    records field itself (where a cut trailing entry is a truncated batch) and
    False inside a decompressed wrapper (where it is malformed, unless the
    decompressed size limit cut the data: ``cut_by_limit``)."""
    ctx = state.ctx
    count = 0
    index = 0
    while pos < end:
        left = end - pos
        size = _I32.unpack_from(buf, pos + 8)[0] if left >= 12 else None
        if size is None or size < 0 or 12 + size > left:
            if outer and (size is None or size >= 0):
                parent.add(_truncated(buf, pos, end, size))
                state.truncated = True
            elif cut_by_limit:
                parent.add(Field("truncated_message", "bytes", None, pos, left, None,
                                 ["message cut by the decompressed size limit"]))
            else:
                f = parent.add(Field("truncated_message" if not outer else f"[{index}]", "bytes", None,
                                     pos, left))
                f.mark_malformed(f"entry of {left} bytes cut short" if size is None or size >= 0
                                 else f"negative entry size {size}", ctx)
            return count
        if size < 5:
            f = parent.add(Field(f"[{index}]", "bytes", None, pos, 12 + size))
            f.mark_malformed(f"entry size {size} too small to hold a magic byte", ctx)
            return count
        magic = buf[pos + 16]
        if magic == 2:
            if wrapper_magic is not None:
                f = parent.add(Field(f"[{index}]", "bytes", None, pos, 12 + size))
                f.mark_malformed(f"a magic 2 batch inside a magic {wrapper_magic} wrapper", ctx)
                return count
            field, n = _decode_v2(buf, pos, size, state, index, budget)
        elif magic in (0, 1):
            field, n = _decode_legacy(buf, pos, size, state, index, depth, budget)
        else:
            f = parent.add(Field(f"[{index}]", "bytes", None, pos, 12 + size))
            f.mark_malformed(f"unknown magic {magic}", ctx)
            return count
        parent.add(field)
        if outer:
            state.magics.add(magic)
        count += n
        if depth == 0:
            state.records += n
        pos += 12 + size
        index += 1
    return count


def _truncated(buf: bytes, pos: int, end: int, size: int | None) -> Field:
    left = end - pos
    if size is None:
        note = f"partial batch cut by max_bytes ({left} bytes, size not yet readable)"
    else:
        note = f"partial batch cut by max_bytes ({left} of {12 + size} bytes)"
    f = Field("truncated_batch", "bytes", None, pos, left, None, [note])
    layout: tuple[tuple[str, str, int], ...] = (("offset", ">q", 8), ("size", ">i", 4))  # magic not in yet
    if left > 16:
        magic = buf[pos + 16]
        if magic == 2:
            layout = _V2_FIELDS
        elif magic == 1:
            layout = _LEGACY_FIELDS
        elif magic == 0:
            layout = _LEGACY_FIELDS[:5]
    p = pos
    for fname, fmt, n in layout:
        if p + n > end:
            break
        f.add(Field(fname, _TYPES[fmt], struct.unpack_from(fmt, buf, p)[0], p, n))
        p += n
    return f


# -- magic 2 --------------------------------------------------------------------
def _decode_v2(buf: bytes, pos: int, size: int, state: _State, index: int,
               budget: list[int]) -> tuple[Field, int]:
    ctx = state.ctx
    batch_end = pos + 12 + size
    batch = Field(f"[{index}]", "RecordBatch", None, pos, 12 + size)
    if size < V2_MIN_LENGTH:
        batch.mark_malformed(f"batch_length {size} shorter than the {V2_MIN_LENGTH}-byte v2 header", ctx)
        return batch, 0
    (base_offset, length, leader_epoch, magic, crc, attrs, last_delta, base_ts, max_ts,
     producer_id, producer_epoch, base_seq, count) = _V2.unpack_from(buf, pos)
    codec_id = attrs & 7
    ts_type = (attrs >> 3) & 1
    is_txn = bool(attrs & 0x10)
    is_control = bool(attrs & 0x20)
    has_horizon = bool(attrs & 0x40)
    codec = CODEC_NAMES[codec_id] if codec_id < 5 else f"unknown({codec_id})"

    crc_f = Field("crc", "uint32", crc, pos + 17, 4)
    computed = crc32c(memoryview(buf)[pos + 21:batch_end])
    _crc_note(crc_f, crc, computed, state)
    attr_f = Field("attributes", "int16", attrs, pos + 21, 2, [
        Field("compression", "bits", codec_id, pos + 21, 2, None, [codec]),
        Field("timestamp_type", "bits", ts_type, pos + 21, 2, None, [TIMESTAMP_TYPES[ts_type]]),
        Field("is_transactional", "bits", is_txn, pos + 21, 2),
        Field("is_control", "bits", is_control, pos + 21, 2),
        Field("has_delete_horizon", "bits", has_horizon, pos + 21, 2),
    ])
    base_ts_f = Field("base_timestamp", "int64", base_ts, pos + 27, 8, None, [iso_ms(base_ts)])
    if has_horizon:
        base_ts_f.note("delete horizon")
    count_f = Field("records_count", "int32", count, pos + 57, 4)
    batch.children = [
        Field("base_offset", "int64", base_offset, pos, 8),
        Field("batch_length", "int32", length, pos + 8, 4),
        Field("partition_leader_epoch", "int32", leader_epoch, pos + 12, 4),
        Field("magic", "int8", magic, pos + 16, 1),
        crc_f,
        attr_f,
        Field("last_offset_delta", "int32", last_delta, pos + 23, 4, None,
              [f"last offset {base_offset + last_delta}"]),
        base_ts_f,
        Field("max_timestamp", "int64", max_ts, pos + 35, 8, None, [iso_ms(max_ts)]),
        Field("producer_id", "int64", producer_id, pos + 43, 8, None, ["none"] if producer_id == -1 else None),
        Field("producer_epoch", "int16", producer_epoch, pos + 51, 2),
        Field("base_sequence", "int32", base_seq, pos + 53, 4, None, ["none"] if base_seq == -1 else None),
        count_f,
    ]
    _record_batch_seen(batch, state, codec, count, producer_id, producer_epoch, base_seq, base_offset,
                       is_txn, is_control)

    rstart = pos + V2_HEADER
    records_f = Field("records", "array", count, rstart, batch_end - rstart)
    batch.children.append(records_f)
    bad_count = _bad_records_count(count, codec_id, batch_end - rstart, ctx)
    sane_count = bad_count is None
    if bad_count is not None:
        count_f.mark_malformed(bad_count, ctx)

    note: str | None = None
    if codec_id == 0:
        rbuf, rpos, rend = buf, rstart, batch_end
    else:
        rbuf, note, info = decompress_detail(codec, memoryview(buf)[rstart:batch_end], budget[0])
        budget[0] = max(0, budget[0] - len(rbuf))
        rpos, rend = 0, len(rbuf)
        records_f.note(f"decompressed {codec}: {batch_end - rstart} -> {len(rbuf)} bytes; byte offsets of the "
                       "records below are relative to the decompressed data")
        batch.note(f"records compressed with {codec}: their byte offsets are relative to the decompressed data")
        for i in info:
            records_f.note(i)
        if note is not None:
            if note.startswith("decompressed size limit"):
                records_f.note(note)
                ctx.counts.hit_limit("max_decompressed")
            else:
                records_f.mark_malformed(note, ctx)
        elif sane_count and count > len(rbuf) // MIN_RECORD_SIZE:
            count_f.mark_malformed(f"records_count {count} exceeds what {len(rbuf)} decompressed bytes can hold",
                                   ctx)
            sane_count = False
        if note is not None and not rbuf:
            return batch, count if sane_count else 0

    limited = codec_id != 0 and note is not None and note.startswith("decompressed size limit")
    decoded = _decode_v2_records(rbuf, rpos, rend, count if sane_count else ctx.limits.max_array_len, records_f,
                                 base_offset, max_ts if ts_type else base_ts, bool(ts_type), is_control, ctx,
                                 limited)
    if sane_count and decoded != count and not records_f.is_malformed and not limited:
        records_f.mark_malformed(f"records_count {count} but {decoded} records present", ctx)
    return batch, count if sane_count else decoded


def _bad_records_count(count: int, codec_id: int, room: int, ctx: DecodeContext) -> str | None:
    """Why a v2 batch's records_count cannot be counted (``room``: the bytes after its
    header; the max_array_len limit is counted in ``ctx``), or None when it can."""
    if count < 0:
        return f"negative records_count {count}"
    if count > ctx.limits.max_array_len:
        ctx.counts.hit_limit("max_array_len")
        return f"records_count {count} over the limit {ctx.limits.max_array_len}"
    if codec_id == 0 and count > room // MIN_RECORD_SIZE:
        return f"records_count {count} exceeds what {room} bytes can hold"
    return None


def _record_batch_seen(batch: Field, state: Any, codec: str, count: int, producer_id: int, producer_epoch: int,
                       base_seq: int, base_offset: int, is_txn: bool, is_control: bool) -> None:
    """Count a v2 batch in the summary (codecs, producer state for the sequence checks) and note it."""
    state.codecs.add(codec)
    state.batches.append({"producer_id": producer_id, "producer_epoch": producer_epoch,
                          "base_sequence": base_seq, "record_count": count, "base_offset": base_offset,
                          "is_transactional": is_txn, "is_control": is_control})
    summary = f"magic 2, {codec}, {count} record{'s' if count != 1 else ''}"
    if is_control:
        summary += ", control"
    if is_txn:
        summary += ", transactional"
    batch.notes = [summary]


def _record_bytes(name: str, buf: bytes, q: int, rend: int, kids: list[Field],
                  control: Callable[[Field, bytes, int, int], None] | None) -> tuple[bytes | None, int]:
    """A record's varint-length-prefixed key or value (length -1: null); (bytes, next position)."""
    n, p = _varint(buf, q, rend)
    kids.append(Field(f"{name}_length", "varint", n, q, p - q))
    if n < 0:
        if n != -1:
            raise _Bad(f"negative {name} length {n}")
        return None, p
    if p + n > rend:
        raise _Bad(f"{name} length {n} exceeds the record")
    b = bytes(buf[p:p + n])
    f = Field(name, "bytes", b, p, n)
    if control is not None:
        control(f, buf, p, n)
    else:
        f.notes = describe_value(b)
    kids.append(f)
    return b, p + n


def _decode_v2_records(buf: bytes, pos: int, end: int, limit: int, parent: Field, base_offset: int,
                       base_ts: int, log_append: bool, is_control: bool, ctx: DecodeContext,
                       cut_by_limit: bool = False) -> int:
    children: list[Field] = []
    parent.children = children
    F = Field
    varint = _varint
    iso = iso_ms
    lat = ", LogAppendTime" if log_append else ""
    last_ts = None
    ts_note = ""
    n = 0
    while pos < end and n < limit:
        rstart = pos
        rec = F(f"[{n}]", "Record", None, rstart, 0)
        try:
            length, p = varint(buf, pos, end)
            if cut_by_limit and p + length > end:
                children.append(F("truncated_record", "bytes", None, rstart, end - rstart, None,
                                  ["record cut by the decompressed size limit"]))
                return n
            if length < MIN_RECORD_SIZE - 1 or p + length > end:
                raise _Bad(f"record length {length} does not fit the {end - p} bytes left")
            rend = p + length
            kids = [F("length", "varint", length, rstart, p - rstart), F("attributes", "int8", buf[p], p, 1)]
            rec.children = kids
            q = p + 1
            # the timestamp and offset deltas: one byte each in the common case
            x = buf[q]
            if x < 0x80:
                ts_delta, p = (x >> 1) ^ -(x & 1), q + 1
            else:
                ts_delta, p = varint(buf, q, rend)
            ts = base_ts if log_append else base_ts + ts_delta
            if ts != last_ts:
                ts_note = f"timestamp {iso(ts)} ({ts}){lat}"
                last_ts = ts
            kids.append(F("timestamp_delta", "varint", ts_delta, q, p - q, None, [ts_note]))
            q = p
            x = buf[q] if q < rend else 0x80
            if x < 0x80:
                off_delta, p = (x >> 1) ^ -(x & 1), q + 1
            else:
                off_delta, p = varint(buf, q, rend)
            offset = base_offset + off_delta
            kids.append(F("offset_delta", "varint", off_delta, q, p - q, None, [f"offset {offset}"]))
            q = p
            key, p = _record_bytes("key", buf, q, rend, kids, _control_key if is_control else None)
            q = p
            value, p = _record_bytes("value", buf, q, rend, kids, _control_value if is_control else None)
            q = p
            hcount, p = varint(buf, p, rend)
            if hcount < 0 or hcount > (rend - p) // 2:
                raise _Bad(f"headers count {hcount} does not fit the record")
            kids.append(F("headers_count", "varint", hcount, q, p - q))
            headers: list[tuple[str, bytes | None]] = []
            if hcount:
                hkids: list[Field] = []
                hf = F("headers", "array", hcount, p, 0, hkids)
                kids.append(hf)
                for i in range(hcount):
                    p = _decode_header(buf, p, rend, hkids, i, headers)
                hf.length = p - hf.offset
            rec.length = rend - rstart
            rec.extra = {"offset": offset, "timestamp": ts, "key": key, "value": value, "headers": headers}
            children.append(rec)
            if p != rend:
                rec.mark_malformed(f"record length {length} but its fields end {rend - p} bytes early", ctx)
            pos = rend
            n += 1
        except (_Bad, IndexError) as exc:
            if cut_by_limit and rec.children is None:  # the length itself was cut
                children.append(F("truncated_record", "bytes", None, rstart, end - rstart, None,
                                  ["record cut by the decompressed size limit"]))
                return n
            rec.length = end - rstart
            rec.mark_malformed(str(exc) if isinstance(exc, _Bad) else "record cut short", ctx)
            children.append(rec)
            return n
    if pos < end and not parent.is_malformed:
        parent.mark_malformed(f"{end - pos} bytes after the last record", ctx)
    return n


def _decode_header(buf: bytes, p: int, end: int, out: list[Field], i: int,
                   headers: list[tuple[str, bytes | None]]) -> int:
    start = p
    klen, p = _varint(buf, p, end)
    kids = [Field("key_length", "varint", klen, start, p - start)]
    h = Field(f"[{i}]", "RecordHeader", None, start, 0, kids)
    out.append(h)
    if klen < 0 or p + klen > end:
        raise _Bad(f"header key length {klen} does not fit the record")
    key = bytes(buf[p:p + klen]).decode("utf-8", "replace")
    kids.append(Field("key", "string", key, p, klen))
    p += klen
    q = p
    vlen, p = _varint(buf, p, end)
    kids.append(Field("value_length", "varint", vlen, q, p - q))
    value: bytes | None = None
    if vlen >= 0:
        if p + vlen > end:
            raise _Bad(f"header value length {vlen} does not fit the record")
        value = bytes(buf[p:p + vlen])
        kids.append(Field("value", "bytes", value, p, vlen, None, describe_value(value)))
        p += vlen
    elif vlen != -1:
        raise _Bad(f"negative header value length {vlen}")
    h.length = p - start
    headers.append((key, value))
    return p


def _control_key(f: Field, buf: bytes, p: int, n: int) -> None:
    if n < 4:
        f.note(f"control key of {n} bytes, expected 4")
        return
    version, ctype = _CTRL_KEY.unpack_from(buf, p)
    name = CONTROL_TYPES.get(ctype, f"unknown control type {ctype}")
    f.children = [Field("version", "int16", version, p, 2),
                  Field("type", "int16", ctype, p + 2, 2, None, [name])]
    f.notes = [f"control record: {name}"]


def _control_value(f: Field, buf: bytes, p: int, n: int) -> None:
    if n < 6:
        f.note(f"control value of {n} bytes, expected 6")
        return
    version, epoch = _CTRL_VALUE.unpack_from(buf, p)
    f.children = [Field("version", "int16", version, p, 2),
                  Field("coordinator_epoch", "int32", epoch, p + 2, 4)]
    f.notes = [f"coordinator epoch {epoch}"]


# -- magic 0 and 1 ------------------------------------------------------------
def _decode_legacy(buf: bytes, pos: int, size: int, state: _State, index: int, depth: int,
                   budget: list[int]) -> tuple[Field, int]:
    """One message (and, for a compressed one, its inner messages)."""
    ctx = state.ctx
    msg_end = pos + 12 + size
    msg = Field(f"[{index}]", "Message", None, pos, 12 + size)
    magic = buf[pos + 16]
    if size < LEGACY_MIN_SIZE[magic]:
        msg.mark_malformed(f"message_size {size} shorter than a magic {magic} message", ctx)
        return msg, 0
    if magic == 0:
        offset, _size, crc, _magic, attrs = _V0.unpack_from(buf, pos)
        ts = None
        p = pos + 18
    else:
        offset, _size, crc, _magic, attrs, ts = _V1.unpack_from(buf, pos)
        p = pos + 26
    codec_id = attrs & 7
    ts_type = (attrs >> 3) & 1 if magic == 1 else 0
    codec = CODEC_NAMES[codec_id] if codec_id < 5 else f"unknown({codec_id})"
    crc_f = Field("crc", "uint32", crc, pos + 12, 4)
    _crc_note(crc_f, crc, zlib.crc32(memoryview(buf)[pos + 16:msg_end]), state)
    attr_kids = [Field("compression", "bits", codec_id, pos + 17, 1, None, [codec])]
    if magic == 1:
        attr_kids.append(Field("timestamp_type", "bits", ts_type, pos + 17, 1, None,
                               [TIMESTAMP_TYPES[ts_type]]))
    kids = [
        Field("offset", "int64", offset, pos, 8),
        Field("message_size", "int32", size, pos + 8, 4),
        crc_f,
        Field("magic", "int8", magic, pos + 16, 1),
        Field("attributes", "int8", attrs, pos + 17, 1, attr_kids),
    ]
    if ts is not None:      # magic 1
        kids.append(Field("timestamp", "int64", ts, pos + 18, 8, None, [iso_ms(ts)]))
    msg.children = kids
    msg.extra = {"offset": offset, "timestamp": ts, "key": None, "value": None, "headers": []}
    if depth == 0:
        state.codecs.add(codec)
    key = value = None
    for part in ("key", "value"):
        if p + 4 > msg_end:
            msg.mark_malformed(f"{part} length cut short", ctx)
            return msg, 1
        (n,) = _I32.unpack_from(buf, p)
        kids.append(Field(f"{part}_length", "int32", n, p, 4))
        p += 4
        if n < -1 or p + max(n, 0) > msg_end:
            msg.mark_malformed(f"{part} length {n} does not fit the {msg_end - p} bytes left", ctx)
            return msg, 1
        if n >= 0:
            b = bytes(buf[p:p + n])
            f = Field(part, "bytes", b, p, n)
            kids.append(f)
            if part == "key":
                key = b
                f.notes = describe_value(b)
            else:
                value = b
                if codec_id == 0:
                    f.notes = describe_value(b)
            p += n
    if p != msg_end:
        msg.mark_malformed(f"{msg_end - p} bytes after the value", ctx)
    msg.extra["key"] = key
    msg.extra["value"] = value
    if codec_id == 0:
        return msg, 1

    # a compressed wrapper: its value is an inner MessageSet
    value_f = kids[-1]
    if value is None:
        msg.mark_malformed("compressed message with a null value", ctx)
        return msg, 0
    if depth >= MAX_WRAPPER_DEPTH:
        value_f.mark_malformed(f"compressed messages nested more than {MAX_WRAPPER_DEPTH} deep", ctx)
        return msg, 0
    inner, note, info = decompress_detail(codec, value, budget[0])
    budget[0] = max(0, budget[0] - len(inner))
    value_f.note(f"decompressed {codec}: {len(value)} -> {len(inner)} bytes; byte offsets of the inner "
                 "messages below are relative to the decompressed data")
    msg.note(f"magic {magic} {codec} wrapper: the inner messages' byte offsets are relative to the "
             "decompressed data")
    for i in info:
        value_f.note(i)
    limited = _decompression_note(value_f, note, ctx, annotate=True)
    if not inner:
        return msg, 0
    value_f.children = []
    n = _decode_set(inner, 0, len(inner), state, value_f, depth + 1, budget, outer=False,
                    wrapper_magic=magic, cut_by_limit=limited)
    inner_msgs = [c for c in value_f.children if c.type == "Message" and c.extra]
    _absolute_inner(msg, offset, ts, ts_type, magic, inner_msgs)
    return msg, n


def _decompression_note(value_f: Field, note: str | None, ctx: DecodeContext, annotate: bool) -> bool:
    """What decompressing a wrapper's value said: a size limit hit (noted on the value when
    ``annotate``, counted; True) or bad data (the value marked malformed)."""
    if note is None:
        return False
    if note.startswith("decompressed size limit"):
        if annotate:
            value_f.note(note)
        ctx.counts.hit_limit("max_decompressed")
        return True
    value_f.mark_malformed(note, ctx)
    return False


def _absolute_inner(wrapper: Field, offset: int, ts: int | None, ts_type: int, magic: int,
                    inner: list[Field]) -> None:
    """Make inner offsets (and, for LogAppendTime, timestamps) absolute the way a
    Kafka consumer does: v1 inner offsets are relative and the wrapper's offset
    is that of the last inner message; v0 inner offsets are used as written."""
    if not inner:
        return
    # (the inner messages have their extra, and their offset as first child: see the caller)
    if magic == 1:
        assert ts is not None       # a magic 1 wrapper has its timestamp
        last = inner[-1].extra
        assert last is not None
        shift = offset - last["offset"]
        unassigned = shift < 0
        for m in inner:
            x, kids = m.extra, m.children
            assert x is not None and kids
            rel = x["offset"]
            off_f = kids[0]
            if unassigned:
                off_f.note(f"relative offset {rel} (wrapper offset {offset} not assigned yet)")
            else:
                x["offset"] = rel + shift
                off_f.note(f"absolute offset {rel + shift}")
            if ts_type == 1:
                x["timestamp"] = ts
                ts_f = m.child("timestamp")
                if ts_f is not None:
                    ts_f.note(f"LogAppendTime from the wrapper: {iso_ms(ts)}")
        wrapper.note(f"wrapper offset {offset} is the last inner message's absolute offset")
    else:
        for m in inner:
            kids = m.children
            assert kids
            kids[0].note("offset as written")


# -- reading back -----------------------------------------------------------------
def iter_records(field: Field) -> list[RecordView]:
    """Every record or (inner) message decoded under a records Field, in order,
    with absolute offsets and timestamps where they are known. A compressed v0/v1
    wrapper is replaced by its inner messages."""
    out: list[RecordView] = []

    def visit(entries: list[Field] | None, magic_hint: int) -> None:
        for e in entries or ():
            if e.type == "RecordBatch":
                attrs = e.child("attributes")
                ctrl = bool(attrs and attrs.get("is_control"))
                recs = e.child("records")
                for r in (recs.children if recs is not None else None) or ():
                    if r.extra:
                        x = r.extra
                        out.append(RecordView(x["offset"], x["timestamp"], x["key"], x["value"],
                                              x["headers"], 2, ctrl))
            elif e.type == "Message" and e.extra:
                magic = e.get("magic", magic_hint)
                attrs = e.child("attributes")
                codec = attrs.get("compression", 0) if attrs is not None else 0
                if codec:
                    vf = e.child("value")
                    visit(vf.children if vf is not None else None, magic)
                else:
                    x = e.extra
                    out.append(RecordView(x["offset"], x["timestamp"], x["key"], x["value"], [], magic, False))

    visit(field.children, 2)
    return out
