"""The consumer embedded protocol: Subscription and Assignment (versions 0-3).

JoinGroup carries a member's Subscription in ``protocols[].metadata`` (request) and
``members[].metadata`` (response); SyncGroup carries Assignments in
``assignments[].assignment`` (request) and ``assignment`` (response) when
``protocol_type`` is ``consumer``. Both start with an int16 version and are never
flexible. A version newer than 3 is decoded as 3 (the format only appends fields),
with a note; what follows is kept as trailing bytes.
"""
from __future__ import annotations

import struct

from dissectors.context import DecodeContext
from dissectors.decoder import decode_struct
from dissectors.field import Field
from dissectors.schema import ANY, FieldDef

MAX_VERSION = 3

_TOPIC_PARTITION = (
    FieldDef("topic", "string", (0, ANY)),
    FieldDef("partitions", "array", (0, ANY), element="int32"),
)

SUBSCRIPTION = (
    FieldDef("topics", "array", (0, ANY), element="string"),
    FieldDef("user_data", "bytes", (0, ANY), nullable=(0, ANY)),
    FieldDef("owned_partitions", "array", (1, ANY), struct="TopicPartition", element="struct",
             fields=_TOPIC_PARTITION),
    FieldDef("generation_id", "int32", (2, ANY)),
    FieldDef("rack_id", "string", (3, ANY), nullable=(3, ANY)),
)

ASSIGNMENT = (
    FieldDef("assigned_partitions", "array", (0, ANY), struct="TopicPartition", element="struct",
             fields=_TOPIC_PARTITION),
    FieldDef("user_data", "bytes", (0, ANY), nullable=(0, ANY)),
)

_I16 = struct.Struct(">h")


def _decode(kind: str, fields: tuple[FieldDef, ...], buf: bytes, start: int, end: int,
            ctx: DecodeContext) -> Field:
    name = kind.lower()
    if end - start < 2:
        f = Field(name, f"ConsumerProtocol{kind}", None, start, end - start)
        return f.mark_malformed(f"{name} needs a 2-byte version, {end - start} bytes present", ctx)
    (version,) = _I16.unpack_from(buf, start)
    used = min(max(version, 0), MAX_VERSION)
    root, pos = decode_struct(fields, used, False, buf, start + 2, end, ctx, name,
                              f"ConsumerProtocol{kind} v{version}")
    root.offset = start
    root.length = end - start
    assert root.children is not None
    root.children.insert(0, Field("version", "int16", version, start, 2))
    if version > MAX_VERSION:
        root.note(f"version {version} is newer than the newest known ({MAX_VERSION}): decoded as v{used}")
    elif version < 0:
        root.mark_malformed(f"negative version {version}", ctx)
    if pos < end:
        n = end - pos
        t = Field("trailing_bytes", "bytes", buf[pos:end], pos, n)
        t.note(f"{n} bytes after the v{used} fields")
        root.add(t)
    return root


def decode_subscription(buf: bytes, start: int, end: int, ctx: DecodeContext) -> Field:
    """A consumer-protocol Subscription in ``buf[start:end]`` (offsets absolute)."""
    return _decode("Subscription", SUBSCRIPTION, buf, start, end, ctx)


def decode_assignment(buf: bytes, start: int, end: int, ctx: DecodeContext) -> Field:
    """A consumer-protocol Assignment in ``buf[start:end]`` (offsets absolute)."""
    return _decode("Assignment", ASSIGNMENT, buf, start, end, ctx)
