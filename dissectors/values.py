"""Human renderings of record keys, values and header values.

The Field keeps the raw bytes (JSON output shows hex); these helpers give the
short notes shown beside them (``text: ...``, ``json: ...``, ``schema registry
id 42``, ``binary, 12 bytes``) and a longer display form for tree output.
"""
from __future__ import annotations

import json
import re

NOTE_MAX = 200
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029]")


def _cut(text: str, limit: int = NOTE_MAX) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"


def as_text(b: bytes) -> str | None:
    """The bytes as text when they are valid UTF-8 without control characters
    (tab, newline and carriage return are allowed), else None."""
    try:
        s = b.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if _CONTROL.search(s):
        return None
    return s


def as_json(text: str) -> object | None:
    """The parsed JSON document when ``text`` is a JSON object or array, else None."""
    t = text.lstrip()
    if not t or t[0] not in "{[":
        return None
    try:
        return json.loads(t)
    except ValueError:
        return None


def schema_registry_id(b: bytes) -> int | None:
    """The schema ID of Confluent Schema Registry framing (magic byte 0 + a
    big-endian int32 ID + payload), else None."""
    if len(b) >= 5 and b[0] == 0:
        return int.from_bytes(b[1:5], "big", signed=True)
    return None


_ASCII_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def describe_value(b: bytes | None) -> list[str]:
    """Short notes describing a key, value or header value."""
    if b is None:
        return ["null"]
    if not b:
        return ["empty"]
    b = bytes(b)
    if b.isascii() and b[0] not in b"{[ \t\r\n" and not _ASCII_CONTROL.search(b):
        # the common case: printable ASCII that is no JSON document (as_text and
        # as_json below would say so after copying all of it). The note shows at most
        # NOTE_MAX characters, so only that much (plus one, for the cut) is escaped.
        head = b[:NOTE_MAX + 1].decode("ascii")
        return ["text: " + _cut(head.replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t"))]
    text = as_text(b)
    if text is not None:
        doc = as_json(text)
        if doc is not None:
            return ["json: " + _cut(json.dumps(doc, separators=(",", ":"), ensure_ascii=False))]
        return ["text: " + _cut(text.replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t"))]
    sid = schema_registry_id(b)
    if sid is not None:
        notes = [f"schema registry id {sid}"]
        inner = as_text(b[5:])
        if inner is not None and b[5:]:
            doc = as_json(inner)
            if doc is not None:
                notes.append("json: " + _cut(json.dumps(doc, separators=(",", ":"), ensure_ascii=False)))
            else:
                notes.append("text: " + _cut(inner.replace("\n", "\\n")))
        else:
            notes.append(f"binary, {len(b) - 5} bytes")
        return notes
    return [f"binary, {len(b)} bytes"]


def display_value(b: bytes | None, max_bytes: int | None = None) -> str:
    """A display form for tree output: the text, pretty-printed JSON (several
    lines), ``[schema registry id N] ...`` or hex; cut to ``max_bytes`` bytes of
    input (None: no cut) with a ``... (N more bytes)`` marker."""
    if b is None:
        return "null"
    b = bytes(b)
    more = 0
    if max_bytes is not None and len(b) > max_bytes:
        more = len(b) - max_bytes
        cut = b[:max_bytes]
    else:
        cut = b
    tail = f" \u2026 ({more} more bytes)" if more else ""
    text = as_text(b) if not more else _text_prefix(cut)
    if text is not None:
        if not more:
            doc = as_json(text)
            if doc is not None:
                return json.dumps(doc, indent=2, ensure_ascii=False)
        return text + tail
    sid = schema_registry_id(b)
    if sid is not None:
        return f"[schema registry id {sid}] " + display_value(b[5:], None if max_bytes is None
                                                             else max(0, max_bytes - 5))
    return cut.hex() + tail


def _text_prefix(b: bytes) -> str | None:
    """Text of a cut value: a multi-byte character split by the cut is allowed."""
    for trim in range(4):
        if trim > len(b):
            break
        try:
            s = b[:len(b) - trim].decode("utf-8")
        except UnicodeDecodeError:
            continue
        return None if _CONTROL.search(s) else s
    return None
