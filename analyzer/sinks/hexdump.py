"""``read -x``: a Kafka frame's bytes as ``tshark -x`` dumps them, with the fields of its tree
named beside the lines they start on.

Which bytes: the whole Kafka frame, its 4-byte size prefix included (as captured: a frame
the capture cut is dumped as far as its bytes go). The dump's offset column (hex) counts
from the first byte of the size prefix, as tshark dumps a reassembled PDU; the field trees'
offsets (``@52+4``) count from the first byte after it, so a field ``@N`` sits at dump
offset ``N + 4``. Beside each line, the fields that start on it, each with its tree offset
(``correlation_id@4``): the size prefix is named ``size@-4``.

One convention for every length-prefixed node: its range starts at its prefix. The trees
give strings, bytes and arrays that way, but a ``records`` node from after its size prefix
(4 bytes, or a varint in flexible versions), so the dump names a records field at its
prefix (``records@-4`` relative to the node's ``@N``, i.e. at ``@N-4``), the trees unchanged.
Offsets inside compressed record batches count in the decompressed data (the batch's note
says so): those fields are not in the frame's bytes and are not named.
"""
from __future__ import annotations

import struct
from collections.abc import Iterator

from analyzer.model import Frame
from dissectors.field import Field

PREFIX = 4          # the frame's size prefix, before the trees' offset 0
WIDTH = 16


def _uvarint_ending_at(data: bytes, end: int, want: int) -> int | None:
    """How many bytes before ``end`` hold an unsigned varint of value ``want`` (None if not)."""
    for n in range(1, 6):
        start = end - n
        if start < 0:
            return None
        v = shift = 0
        ok = True
        for i, b in enumerate(data[start:end]):
            v |= (b & 0x7F) << shift
            shift += 7
            if (b & 0x80) == 0 and i != n - 1:
                ok = False
                break
            if (b & 0x80) and i == n - 1:
                ok = False
        if ok and v == want:
            return n
    return None


def records_prefix(f: Field, data: bytes) -> int:
    """The length of a (non-null) records node's size prefix just before its ``offset`` in
    ``data`` (the frame after its size prefix): 4 (an INT32 length), a varint's length
    (flexible versions: length + 1), or 0 when the bytes before it are neither."""
    at = f.offset
    if at >= 4 and struct.unpack_from(">i", data, at - 4)[0] == f.length:
        return 4
    return _uvarint_ending_at(data, at, f.length + 1) or 0


def field_starts(tree: Field, data: bytes) -> list[tuple[int, str]]:
    """(start in the frame after its size prefix, ``name@offset``) of every field the dump
    names, in tree order: each node but the root, except one that starts where its first
    child does (the child, more precise, is named); a records node from its size prefix;
    nothing under a node whose children count in decompressed data."""
    out: list[tuple[int, str]] = []

    def walk(f: Field, parent: Field | None) -> None:
        kids = f.children or []
        start = f.offset
        if f.type == "records" and "null" not in (f.notes or ()):
            start -= records_prefix(f, data)
        if parent is not None and not (kids and kids[0].offset == start):
            if 0 <= start < len(data) or (f.length == 0 and start == len(data)):
                out.append((start, f"{f.name}@{start}"))
        if any(n.startswith("decompressed ") for n in f.notes or ()):
            return
        for c in kids:
            walk(c, f)

    walk(tree, None)
    return out


def dump_lines(frame: Frame, tree: Field | None) -> Iterator[str]:
    """The lines of a frame's dump (no newlines): offset, 16 bytes in hex, ASCII, and the
    fields that start on the line."""
    data = frame.data
    whole = struct.pack(">i", frame.size) + data
    starts: dict[int, list[str]] = {0: ["size@-4"]}
    if tree is not None:
        for at, label in field_starts(tree, data):
            starts.setdefault((at + PREFIX) // WIDTH * WIDTH, []).append(label)
    for line in range(0, max(len(whole), 1), WIDTH):
        chunk = whole[line:line + WIDTH]
        hexes = " ".join(f"{b:02x}" for b in chunk).ljust(WIDTH * 3 - 1)
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        names = starts.get(line)
        yield f"{line:04x}  {hexes}   " + (f"{text.ljust(WIDTH)}   {' '.join(names)}" if names else text)


def frame_heading(kind: str, frame: Frame) -> str:
    """The line above a frame's dump: which frame, its packets and sizes, the convention."""
    packets = (f"packet {frame.last_index}" if frame.first_index == frame.last_index
               else f"packets {frame.first_index}-{frame.last_index}")
    cut = f", {len(frame.data)} captured" if frame.truncated or len(frame.data) < frame.size else ""
    return (f"{kind} frame, {packets}: {frame.size + PREFIX} bytes (size prefix 4 + {frame.size}{cut}); "
            f"dump offsets from the size prefix, @N = tree offset (dump offset N+4)")


def exchange_dump(request: Frame | None, request_tree: Field | None, response: Frame | None,
                  response_tree: Field | None, indent: str = "  ") -> list[str]:
    """The dump of an exchange's request and response frames, a line saying so for a frame
    the capture does not hold (an orphan response's request, an unanswered request's response)."""
    lines: list[str] = []
    for kind, frame, tree in (("request", request, request_tree), ("response", response, response_tree)):
        if frame is None:
            lines.append(f"{indent}{kind} frame: not captured (no bytes to dump)")
            continue
        lines.append(indent + frame_heading(kind, frame))
        lines.extend(indent + line for line in dump_lines(frame, tree))
    return lines
