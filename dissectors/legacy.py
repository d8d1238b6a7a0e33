"""The legacy (pre-0.8, Kafka 0.6/0.7) wire protocol: bytes in, Field trees out.

The first Kafka protocol had no API versions, no correlation ids and no client id.
Every frame is ``REQUEST_LENGTH int32`` followed by the request; the offsets in the
trees below are counted from the first byte after that 4-byte length, like every
other dissector in this package.

Requests (``REQUEST_TYPE int16`` first)::

    PRODUCE (0)       topic string16, partition int32, messages_length int32, messages
    FETCH (1)         topic string16, partition int32, offset int64, max_size int32
    MULTIFETCH (2)    topic_count int16, then topic_count x (topic, partition, offset, max_size)
    MULTIPRODUCE (3)  topic_count int16, then topic_count x (topic, partition, messages_length, messages)
    OFFSETS (4)       topic string16, partition int32, time int64 (-1 latest, -2 earliest),
                      max_number_of_offsets int32

The seed description calls REQUEST_TYPE, TOPIC and PARTITION the request header, and
REQUEST_TYPE plus TOPIC_COUNT the multi-request header; the trees follow it: the
``header`` child holds those fields and the ``body`` child the rest.

Responses (``ERROR_CODE int16`` first, in the ``header`` child)::

    FETCH       messages up to the end of the frame (the broker copies max_size bytes of
                its log, so the last message may be cut: that is noted, not malformed)
    OFFSETS     number_of_offsets int32, then that many int64 offsets
    MULTIFETCH  one part per requested topic-partition, in request order, each
                size int32 (error code + messages), error_code int16, messages
    PRODUCE and MULTIPRODUCE get no response at all.

Messages (a message set is messages back to back, no offsets)::

    length int32, magic int8, [compression int8 when magic is 1], crc uint32, payload

The CRC-32 (IEEE, as java.util.zip.CRC32) covers the payload only. The compression
byte's low two bits give the codec: 0 none, 1 gzip, 2 snappy (the xerial-framed
stream of snappy-java). A compressed message's payload decompresses to a message set
whose messages are decoded as children of the wrapper; their offsets are relative
to the decompressed bytes (the inner set carries a note saying so). One frame may
decompress at most ``ctx.limits.max_decompressed`` bytes in all (counted in
``ctx.counts.limits_hit["max_decompressed"]`` when reached).

Error codes of that era: -1 UNKNOWN, 0 NONE, 1 OFFSET_OUT_OF_RANGE,
2 INVALID_MESSAGE, 3 WRONG_PARTITION, 4 INVALID_FETCH_SIZE.

Detection and framing: which connections speak this protocol (a score of a connection's
first request frame, 0 impossible .. 100 certain, that separates it from a 0.8+ request),
and the framer's checks of a frame's first bytes, live in the core: core/src/legacy.rs,
whose module documentation gives the heuristic and its limits. A legacy FETCH error
response is a 2-byte frame (just the error code), which the core's framer allows on
legacy connections.

Public API: ``LEGACY_API_NAMES``, ``LEGACY_ERROR_NAMES``, ``decode_legacy_request``, ``decode_legacy_response``, ``legacy_partitions``,
``legacy_error_codes``, ``legacy_crc``.
"""
from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from dissectors.annotate import crc_verdict
from dissectors.context import DecodeContext
from dissectors.field import Field

LEGACY_API_NAMES: dict[int, str] = {0: "PRODUCE", 1: "FETCH", 2: "MULTIFETCH", 3: "MULTIPRODUCE", 4: "OFFSETS"}
LEGACY_ERROR_NAMES: dict[int, str] = {
    -1: "UNKNOWN",
    0: "NONE",
    1: "OFFSET_OUT_OF_RANGE",
    2: "INVALID_MESSAGE",
    3: "WRONG_PARTITION",
    4: "INVALID_FETCH_SIZE",
}
CODEC_NAMES: dict[int, str] = {0: "none", 1: "gzip", 2: "snappy"}

PRODUCE, FETCH, MULTIFETCH, MULTIPRODUCE, OFFSETS = 0, 1, 2, 3, 4

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")

_PRINTABLE = re.compile(rb"[\x21-\x7e]+\Z")

_MIN_MESSAGE = 5          # magic + crc: the smallest legal message length (magic 0, empty payload)
_MIN_FETCH_PART = 2 + 4 + 8 + 4
_MIN_PRODUCE_PART = 2 + 4 + 4


def legacy_error_name(code: int) -> str:
    return LEGACY_ERROR_NAMES.get(code, f"UNKNOWN_ERROR({code})")


def legacy_crc(payload: bytes | memoryview) -> int:
    """The CRC-32 a legacy message carries for ``payload`` (unsigned)."""
    return zlib.crc32(payload) & 0xFFFFFFFF


# ---------------------------------------------------------------------------
# decompression: dissectors.compression when present, a gzip-only stand-in otherwise

_decompress_impl: Callable[[str, bytes, int], tuple[bytes, str | None]] | None = None


def _fallback_decompress(codec: str, data: bytes, limit: int) -> tuple[bytes, str | None]:
    if codec != "gzip":
        return b"", f"{codec} decompression unavailable (dissectors.compression missing)"
    d = zlib.decompressobj(47)          # gzip or zlib header, auto-detected
    try:
        out = d.decompress(data, limit + 1)
    except zlib.error as e:
        return b"", f"gzip: {e}"
    if len(out) > limit:
        return out[:limit], f"decompressed size exceeds limit of {limit} bytes"
    if not d.eof:
        return out, "gzip stream truncated"
    return out, None


def _decompress(codec: str, data: bytes, limit: int) -> tuple[bytes, str | None]:
    global _decompress_impl
    if _decompress_impl is None:
        try:
            from dissectors.compression import decompress as impl
        except ImportError:
            return _fallback_decompress(codec, data, limit)
        _decompress_impl = impl
    try:
        return _decompress_impl(codec, data, limit)
    except Exception as e:  # noqa: BLE001 - a decompressor bug must not kill the capture
        return b"", f"{codec}: {type(e).__name__}: {e}"


# ---------------------------------------------------------------------------
# message sets


class _SetSummary:
    """What legacy_partitions reports about one message set (inner messages included)."""
    __slots__ = ("records", "crc_good", "crc_bad", "codecs")

    def __init__(self) -> None:
        self.records = 0
        self.crc_good = 0
        self.crc_bad = 0
        self.codecs: set[str] = set()

    def as_extra(self, nbytes: int) -> dict[str, Any]:
        if not self.codecs:
            codec = "none"
        elif len(self.codecs) == 1:
            codec = next(iter(self.codecs))
        else:
            codec = "mixed"
        return {
            "records": self.records,
            "bytes": nbytes,
            "codec": codec,
            "crc_ok": self.crc_bad == 0,
        }


def _decode_message_set(data: bytes, start: int, end: int, ctx: DecodeContext, name: str,
                        summary: _SetSummary, *, partial_ok: bool, depth: int, budget: list[int]) -> Field:
    """Messages back to back in data[start:end]; the Field is an array of Message structs."""
    ms = Field(name, "array", 0, start, end - start, children=[])
    pos = start
    count = 0
    while pos < end:
        left = end - pos
        if count >= ctx.limits.max_array_len:
            ctx.counts.hit_limit("max_array_len")
            ms.note(f"stopped after {count} messages (max_array_len); {left} bytes not decoded")
            break
        length = _I32.unpack_from(data, pos)[0] if left >= 4 else None
        if length is not None and length < _MIN_MESSAGE:
            f = ms.add(Field("invalid_message", "bytes", data[pos:end], pos, left))
            f.mark_malformed(f"message length {length} is below the minimum of {_MIN_MESSAGE}", ctx)
            break
        if length is None or length > left - 4:
            f = ms.add(Field("partial_message", "bytes", data[pos:end], pos, left))
            need = "a 4-byte length" if length is None else f"{length + 4} bytes"
            if partial_ok:
                f.note(f"partial message at the end of the set: {left} bytes of {need} "
                       "(the broker cuts the set at max_size)")
            else:
                f.mark_malformed(f"message cut: {left} bytes left, needs {need}", ctx)
            break
        ms.add(_decode_message(data, pos, length, ctx, count, summary, depth, budget))
        pos += 4 + length
        count += 1
    ms.value = count
    ms.extra = summary.as_extra(end - start)
    if depth == 0 and count:
        x = ms.extra
        ms.note(f"{x['records']} record{'' if x['records'] == 1 else 's'} in {count} "
                f"message{'' if count == 1 else 's'}, {x['codec']}")
    return ms


def _decode_message(data: bytes, pos: int, length: int, ctx: DecodeContext, index: int,
                    summary: _SetSummary, depth: int, budget: list[int]) -> Field:
    end = pos + 4 + length
    m = Field(f"[{index}]", "Message", None, pos, 4 + length, children=[
        Field("length", "int32", length, pos, 4),
    ])
    magic = data[pos + 4]
    mf = m.add(Field("magic", "int8", magic, pos + 4, 1))
    codec = 0
    if magic == 0:
        mf.note("magic 0: no compression attribute")
        crc_pos = pos + 5
    elif magic == 1:
        mf.note("magic 1: compression attribute")
        if length < _MIN_MESSAGE + 1:
            m.add(Field("rest", "bytes", data[pos + 5:end], pos + 5, length - 1))
            m.mark_malformed(f"message length {length} too short for magic 1", ctx)
            return m
        attr = data[pos + 5]
        codec = attr & 0x03
        cf = m.add(Field("compression", "int8", attr, pos + 5, 1))
        cf.note(CODEC_NAMES.get(codec, f"unknown codec {codec}"))
        if attr & ~0x03:
            cf.note(f"unknown attribute bits 0x{attr & ~0x03:02x}")
        if codec == 3:
            cf.mark_malformed("compression codec 3 is not defined", ctx)
        crc_pos = pos + 6
    else:
        m.add(Field("rest", "bytes", data[pos + 5:end], pos + 5, length - 1))
        mf.mark_malformed(f"unknown magic {magic} (expected 0 or 1)", ctx)
        return m
    stored = _U32.unpack_from(data, crc_pos)[0]
    pstart = crc_pos + 4
    payload = data[pstart:end]
    computed = legacy_crc(payload)
    crc = m.add(Field("crc", "uint32", stored, crc_pos, 4))
    crc.note(crc_verdict(stored, computed))
    if computed == stored:
        ctx.counts.crc_valid += 1
        summary.crc_good += 1
    else:
        ctx.counts.crc_invalid += 1
        summary.crc_bad += 1
    pf = m.add(Field("payload", "bytes", payload, pstart, end - pstart))
    codec_name = CODEC_NAMES.get(codec, f"codec{codec}")
    if depth == 0:
        summary.codecs.add(codec_name)
    if codec not in (1, 2):
        summary.records += 1
        return m
    # a compressed wrapper: its payload is a whole message set
    if not ctx.presentation.decode_records:
        summary.records += 1
        pf.note(f"{codec_name}-compressed message set (not decompressed: record decoding is off)")
        return m
    if depth + 1 >= ctx.limits.max_depth:
        ctx.counts.hit_limit("max_depth")
        summary.records += 1
        pf.note(f"{codec_name}-compressed message set nested too deep; not decompressed")
        return m
    if budget[0] <= 0:
        ctx.counts.hit_limit("max_decompressed")
        summary.records += 1
        pf.note(f"{codec_name}-compressed message set not decompressed: this frame already "
                f"decompressed max_decompressed ({ctx.limits.max_decompressed}) bytes")
        return m
    raw, err = _decompress(codec_name, payload, budget[0])
    budget[0] -= len(raw)
    pf.note(f"{codec_name}-compressed message set: {len(payload)} -> {len(raw)} bytes")
    partial = False
    if err is not None:
        if "limit" in err.lower():
            ctx.counts.hit_limit("max_decompressed")
            pf.note(f"decompression stopped: {err}")
        else:
            pf.mark_malformed(f"decompression failed: {err}", ctx)
        partial = True
    inner = _decode_message_set(raw, 0, len(raw), ctx, "messages", summary, partial_ok=partial,
                                depth=depth + 1, budget=budget)
    inner.note("inner messages: offsets are relative to the decompressed payload")
    inner.extra = {"decompressed": True}
    m.add(inner)
    return m


# ---------------------------------------------------------------------------
# primitive readers that record Fields and mark shortfalls


def _need(parent: Field, what: str, pos: int, size: int, end: int, ctx: DecodeContext) -> bool:
    if pos + size <= end:
        return True
    parent.mark_malformed(f"{what} cut: needs {size} bytes, {max(end - pos, 0)} left", ctx)
    return False


def _read_topic(data: bytes, pos: int, end: int, parent: Field, ctx: DecodeContext) -> tuple[str | None, int]:
    """A string16 topic; returns (topic, next position) or (None, -1) when it does not fit."""
    if not _need(parent, "topic length", pos, 2, end, ctx):
        return None, -1
    n = _I16.unpack_from(data, pos)[0]
    if n < 0:
        f = parent.add(Field("topic", "string", None, pos, 2))
        if n == -1:
            f.note("null topic")
            return None, pos + 2
        f.mark_malformed(f"topic length {n} is negative", ctx)
        return None, -1
    if pos + 2 + n > end:
        f = parent.add(Field("topic", "string", None, pos, end - pos))
        f.mark_malformed(f"topic length {n} exceeds frame ({end - pos - 2} bytes left)", ctx)
        return None, -1
    raw = data[pos + 2:pos + 2 + n]
    topic = raw.decode("utf-8", "replace")
    f = parent.add(Field("topic", "string", topic, pos, 2 + n))
    if n == 0:
        f.note("empty topic name")
    elif not _PRINTABLE.match(raw):
        f.note("topic name is not printable ASCII")
    return topic, pos + 2 + n


def _read_int(data: bytes, pos: int, end: int, parent: Field, name: str, type_: str,
              st: struct.Struct, ctx: DecodeContext) -> tuple[int | None, int]:
    if not _need(parent, name, pos, st.size, end, ctx):
        return None, -1
    v = st.unpack_from(data, pos)[0]
    parent.add(Field(name, type_, v, pos, st.size))
    return v, pos + st.size


def _last(parent: Field) -> Field:
    """The field a read that succeeded (``_read_int``) has just added to ``parent``."""
    kids = parent.children
    assert kids is not None
    return kids[-1]


def _time_note(ms: int) -> str:
    if ms == -1:
        return "latest"
    if ms == -2:
        return "earliest"
    try:
        return datetime.fromtimestamp(ms / 1000.0, tz=timezone.utc).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        return "timestamp out of range"


def _error_field(data: bytes, pos: int, parent: Field, name: str = "error_code") -> Field:
    code = _I16.unpack_from(data, pos)[0]
    f = parent.add(Field(name, "int16", code, pos, 2))
    f.note(legacy_error_name(code))
    return f


def _trailing(body: Field, data: bytes, pos: int, ctx: DecodeContext) -> None:
    """Bytes after a complete message: kept and counted (ctx.counts.trailing), as the 0.8+ decoder does."""
    n = len(data) - pos
    body.add(Field("trailing_bytes", "bytes", data[pos:], pos, n)).note(f"{n} trailing bytes after the message")
    body.note(f"{n} trailing bytes after the message")
    ctx.counts.trailing += 1


def _type_name(request_type: int) -> str:
    return LEGACY_API_NAMES.get(request_type, "")


# ---------------------------------------------------------------------------
# requests


def _fetch_like(data: bytes, pos: int, end: int, parent: Field, ctx: DecodeContext, is_offsets: bool) -> int:
    if is_offsets:
        t, pos = _read_int(data, pos, end, parent, "time", "int64", _I64, ctx)
        if t is None:
            return -1
        _last(parent).note(_time_note(t))
        _, pos = _read_int(data, pos, end, parent, "max_number_of_offsets", "int32", _I32, ctx)
    else:
        _, pos = _read_int(data, pos, end, parent, "offset", "int64", _I64, ctx)
        if pos < 0:
            return -1
        _, pos = _read_int(data, pos, end, parent, "max_size", "int32", _I32, ctx)
    return pos


def _produce_part(data: bytes, pos: int, end: int, parent: Field, ctx: DecodeContext, budget: list[int]) -> int:
    ml, pos = _read_int(data, pos, end, parent, "messages_length", "int32", _I32, ctx)
    if ml is None:
        return -1
    mlf = _last(parent)
    left = end - pos
    if ml < 0:
        mlf.mark_malformed(f"messages_length {ml} is negative", ctx)
        return -1
    cut = ml > left
    if cut:
        mlf.mark_malformed(f"messages_length {ml} exceeds frame ({left} bytes left)", ctx)
        ml = left
    summary = _SetSummary()
    parent.add(_decode_message_set(data, pos, pos + ml, ctx, "messages", summary, partial_ok=cut, depth=0,
                                   budget=budget))
    return pos + ml


def decode_legacy_request(data: bytes, ctx: DecodeContext) -> Field:
    """The Field tree of one legacy request frame (the bytes after its 4-byte length)."""
    n = len(data)
    root = Field("request", "LegacyRequest", None, 0, n, children=[])
    header = root.add(Field("header", "LegacyRequestHeader", None, 0, 0, children=[]))
    if n < 2:
        header.mark_malformed(f"request of {n} bytes has no request_type", ctx)
        return root
    rtype = _I16.unpack_from(data, 0)[0]
    rt = header.add(Field("request_type", "int16", rtype, 0, 2))
    name = _type_name(rtype)
    root.extra = {"request_type": rtype, "api_name": name or None}
    if not name:
        rt.mark_malformed(f"unknown legacy request type {rtype}", ctx)
        header.length = 2
        root.add(Field("body", "bytes", data[2:], 2, n - 2))
        return root
    rt.note(name)
    root.type = f"{name}Request"
    budget = [ctx.limits.max_decompressed]   # decompressed bytes allowed for the whole frame
    if rtype in (MULTIFETCH, MULTIPRODUCE):
        return _decode_multi_request(data, rtype, root, header, ctx, budget)

    pos = 2
    _, pos = _read_topic(data, pos, n, header, ctx)
    if pos >= 0:
        _, pos = _read_int(data, pos, n, header, "partition", "int32", _I32, ctx)
    header.length = (pos if pos >= 0 else n)
    body_start = header.length
    body = root.add(Field("body", f"{name}RequestBody", None, body_start, n - body_start, children=[]))
    if pos < 0:
        return root
    if rtype == PRODUCE:
        pos = _produce_part(data, pos, n, body, ctx, budget)
    else:
        pos = _fetch_like(data, pos, n, body, ctx, is_offsets=rtype == OFFSETS)
    if 0 <= pos < n:
        _trailing(body, data, pos, ctx)
    return root


def _decode_multi_request(data: bytes, rtype: int, root: Field, header: Field, ctx: DecodeContext,
                          budget: list[int]) -> Field:
    n = len(data)
    name = LEGACY_API_NAMES[rtype]
    count, pos = _read_int(data, 2, n, header, "topic_count", "int16", _I16, ctx)
    header.length = pos if pos >= 0 else n
    body = root.add(Field("body", f"{name}RequestBody", None, header.length, n - header.length, children=[]))
    if count is None:
        return root
    parts = body.add(Field("topic_partitions", "array", count, pos, n - pos, children=[]))
    minimum = _MIN_FETCH_PART if rtype == MULTIFETCH else _MIN_PRODUCE_PART
    if count < 0:
        _last(header).mark_malformed(f"topic_count {count} is negative", ctx)
        return root
    if count > ctx.limits.max_array_len:
        ctx.counts.hit_limit("max_array_len")
    if count * minimum > n - pos:
        _last(header).mark_malformed(
            f"topic_count {count} needs at least {count * minimum} bytes, {n - pos} left", ctx)
    elem_type = "FetchPart" if rtype == MULTIFETCH else "ProducePart"
    for i in range(min(count, ctx.limits.max_array_len)):
        if pos >= n:
            parts.mark_malformed(f"frame ends after {i} of {count} topic-partitions", ctx)
            break
        part = parts.add(Field(f"[{i}]", elem_type, None, pos, 0, children=[]))
        start = pos
        _, pos = _read_topic(data, pos, n, part, ctx)
        if pos >= 0:
            _, pos = _read_int(data, pos, n, part, "partition", "int32", _I32, ctx)
        if pos >= 0:
            if rtype == MULTIFETCH:
                pos = _fetch_like(data, pos, n, part, ctx, is_offsets=False)
            else:
                pos = _produce_part(data, pos, n, part, ctx, budget)
        if pos < 0:
            part.length = n - start
            break
        part.length = pos - start
    parts.length = (pos if pos >= 0 else n) - parts.offset
    if 0 <= pos < n:
        _trailing(body, data, pos, ctx)
    return root


# ---------------------------------------------------------------------------
# responses


def _request_parts(request_tree: Field | None) -> list[tuple[str | None, int | None]]:
    """(topic, partition) of each requested topic-partition, in request order."""
    if request_tree is None:
        return []
    header = request_tree.child("header")
    body = request_tree.child("body")
    if header is not None and header.child("topic_count") is not None:
        parts = body.child("topic_partitions") if body is not None else None
        return [(p.get("topic"), p.get("partition")) for p in (parts.children or ())] if parts else []
    if header is not None:
        return [(header.get("topic"), header.get("partition"))]
    return []


def _tag_partition(f: Field, where: tuple[str | None, int | None] | None) -> None:
    if where is None:
        return
    topic, partition = where
    f.extra = dict(f.extra or {}, topic=topic, partition=partition)
    f.note(f"topic {topic!r} partition {partition} (from the request)")


def decode_legacy_response(data: bytes, request_type: int, ctx: DecodeContext,
                           request_tree: Field | None = None) -> Field:
    """The Field tree of one legacy response frame to a request of ``request_type``.

    ``request_tree`` (the decoded request) names the topic-partition of each part:
    a MULTIFETCH response carries one part per requested topic-partition, in order,
    with no topic names of its own.
    """
    n = len(data)
    name = _type_name(request_type)
    root = Field("response", f"{name}Response" if name else "LegacyResponse", None, 0, n, children=[])
    root.extra = {"request_type": request_type, "api_name": name or None}
    header = root.add(Field("header", "LegacyResponseHeader", None, 0, min(n, 2), children=[]))
    if n < 2:
        header.mark_malformed(f"response of {n} bytes has no error_code", ctx)
        return root
    _error_field(data, 0, header)
    body = root.add(Field("body", f"{name}ResponseBody" if name else "bytes", None, 2, n - 2, children=[]))
    where = _request_parts(request_tree)
    if request_type == FETCH:
        summary = _SetSummary()
        ms = body.add(_decode_message_set(data, 2, n, ctx, "messages", summary, partial_ok=True, depth=0,
                                          budget=[ctx.limits.max_decompressed]))
        _tag_partition(ms, where[0] if where else None)
    elif request_type == OFFSETS:
        _decode_offsets_response(data, body, ctx)
    elif request_type == MULTIFETCH:
        _decode_multifetch_response(data, body, where, request_tree is not None, ctx)
    else:
        body.type = "bytes"
        body.value = data[2:]
        body.children = None
        what = f"{name} requests get no response" if name else f"unknown legacy request type {request_type}"
        body.mark_malformed(f"unexpected response: {what}", ctx)
    return root


def _decode_offsets_response(data: bytes, body: Field, ctx: DecodeContext) -> None:
    n = len(data)
    if n == 2:
        return                                   # an error answer may carry no offsets at all
    if not _need(body, "number_of_offsets", 2, 4, n, ctx):
        return
    count = _I32.unpack_from(data, 2)[0]
    arr = body.add(Field("offsets", "array", count, 2, n - 2, children=[]))
    left = n - 6
    if count < 0:
        arr.mark_malformed(f"number_of_offsets {count} is negative", ctx)
        return
    fits = min(count, left // 8)
    if fits < count:
        arr.mark_malformed(f"number_of_offsets {count} needs {count * 8} bytes, {left} left", ctx)
    if fits > ctx.limits.max_array_len:
        ctx.counts.hit_limit("max_array_len")
        arr.note(f"only the first {ctx.limits.max_array_len} offsets decoded (max_array_len)")
        fits = ctx.limits.max_array_len
    values = struct.unpack_from(f">{fits}q", data, 6) if fits else ()
    arr.children = [Field(f"[{i}]", "int64", v, 6 + 8 * i, 8) for i, v in enumerate(values)]
    end = 6 + 8 * count
    arr.length = min(end, n) - 2
    if 0 < end < n:
        _trailing(body, data, end, ctx)


def _decode_multifetch_response(data: bytes, body: Field, where: list[tuple[str | None, int | None]],
                                have_request: bool, ctx: DecodeContext) -> None:
    n = len(data)
    budget = [ctx.limits.max_decompressed]   # decompressed bytes allowed for the whole frame
    parts = body.add(Field("topic_partitions", "array", 0, 2, n - 2, children=[]))
    pos = 2
    i = 0
    while pos < n:
        if i >= ctx.limits.max_array_len:
            ctx.counts.hit_limit("max_array_len")
            parts.note(f"stopped after {i} parts (max_array_len)")
            break
        part = parts.add(Field(f"[{i}]", "FetchResponsePart", None, pos, n - pos, children=[]))
        if not _need(part, "part size", pos, 4, n, ctx):
            break
        size = _I32.unpack_from(data, pos)[0]
        sf = part.add(Field("size", "int32", size, pos, 4))
        left = n - pos - 4
        if size < 2:
            sf.mark_malformed(f"part size {size} is below 2 (the error code)", ctx)
            break
        if size > left:
            sf.mark_malformed(f"part size {size} exceeds frame ({left} bytes left)", ctx)
            size = left
            if size < 2:
                break
        end = pos + 4 + size
        _error_field(data, pos + 4, part)
        summary = _SetSummary()
        ms = part.add(_decode_message_set(data, pos + 6, end, ctx, "messages", summary, partial_ok=True, depth=0,
                                          budget=budget))
        part.length = end - pos
        _tag_partition(part, where[i] if i < len(where) else None)
        if ms.extra is not None and i < len(where):
            ms.extra.update(topic=where[i][0], partition=where[i][1])
        pos = end
        i += 1
    parts.value = i
    if have_request and i != len(where):
        parts.mark_malformed(f"{i} parts, but the request asked for {len(where)} topic-partitions", ctx)


# ---------------------------------------------------------------------------
# summaries for the pairing code


def _tree_type(tree: Field) -> int | None:
    if tree.extra and "request_type" in tree.extra:
        return tree.extra["request_type"]
    for code, name in LEGACY_API_NAMES.items():
        if tree.type in (f"{name}Request", f"{name}Response"):
            return code
    return None


def legacy_error_codes(tree: Field) -> list[str]:
    """Names (this era's, see LEGACY_ERROR_NAMES) of the non-zero error codes in a legacy tree, in wire order."""
    return [legacy_error_name(f.value) for f in tree.walk()
            if f.name == "error_code" and f.type == "int16" and f.value]


def _partition_row(topic: str | None, partition: int | None, ms: Field | None,
                   error: str | None) -> dict[str, Any]:
    extra = (ms.extra if ms is not None else None) or {}
    return {
        "topic": topic,
        "partition": partition,
        "records": extra.get("records", 0),
        "bytes": extra.get("bytes", 0),
        "codec": extra.get("codec"),
        "crc_ok": extra.get("crc_ok"),
        "error": error,
    }


def _error_of(f: Field | None) -> str | None:
    if f is None:
        return None
    code = f.get("error_code")
    if code is None or code == 0:
        return None
    return legacy_error_name(code)


def legacy_partitions(tree: Field, is_request: bool) -> list[dict[str, Any]]:
    """Per topic-partition summaries: PRODUCE/MULTIPRODUCE requests, FETCH/MULTIFETCH responses.

    Each dict: topic, partition, records (messages after decompression), bytes (of the
    message set on the wire), codec of the outer messages ("none" | "gzip" | "snappy" |
    "mixed"; "none" for an empty set), crc_ok (False when any message, inner ones
    included, fails its CRC), error (name or None). These match the keys and empty-set
    conventions of ``dissectors.records``. Other trees give [].
    """
    rtype = _tree_type(tree)
    header = tree.child("header")
    body = tree.child("body")
    if body is None or header is None:
        return []
    rows: list[dict[str, Any]] = []
    if is_request:
        if rtype == PRODUCE:
            rows.append(_partition_row(header.get("topic"), header.get("partition"),
                                       body.child("messages"), None))
        elif rtype == MULTIPRODUCE:
            parts = body.child("topic_partitions")
            for p in (parts.children or ()) if parts else ():
                rows.append(_partition_row(p.get("topic"), p.get("partition"), p.child("messages"), None))
        return rows
    if rtype == FETCH:
        ms = body.child("messages")
        extra = (ms.extra if ms is not None else None) or {}
        rows.append(_partition_row(extra.get("topic"), extra.get("partition"), ms, _error_of(header)))
    elif rtype == MULTIFETCH:
        parts = body.child("topic_partitions")
        for p in (parts.children or ()) if parts else ():
            extra = p.extra or {}
            rows.append(_partition_row(extra.get("topic"), extra.get("partition"), p.child("messages"),
                                       _error_of(p)))
    return rows
