"""Bounded decompression for the four Kafka record codecs.

Every decoder here streams its output in chunks and stops at ``limit`` bytes, so
a decompression bomb costs at most ``limit`` bytes of memory and the time to
produce them. Failures never raise: they come back as a one-line note.

Formats accepted:
- gzip: one or more gzip members (zlib auto-detects a zlib header too);
- snappy: a raw block, the xerial framing Java clients write
  (``\\x82SNAPPY\\x00`` + two int32 versions + [int32 size, raw block]*), and
  the official snappy framing format (``\\xff\\x06\\x00\\x00sNaPpY`` chunks);
- lz4: the LZ4 frame format, including frames written by Kafka clients before
  0.10 for magic 0/1 messages, whose header checksum was computed over the
  4-byte magic number and the descriptor instead of the descriptor alone
  (KAFKA-3160); both are accepted and the second is reported in the info list;
- zstd: one or more frames, read through a stream reader.
"""
from __future__ import annotations

import struct
import zlib

import cramjam
import lz4.frame
import zstandard

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
CHUNK = 1 << 20
LZ4_OLD_KAFKA_NOTE = "lz4 header checksum in the pre-0.10 Kafka form (over magic + descriptor)"

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_SNAPPY_FRAMED_MAGIC = b"\xff\x06\x00\x00sNaPpY"
_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_I32 = struct.Struct(">i")


def limit_note(limit: int) -> str:
    return f"decompressed size limit {limit} hit"


def decompress(codec: str, data: bytes, limit: int) -> tuple[bytes, str | None]:
    """Decompress ``data`` with ``codec``; at most ``limit`` bytes out.

    Returns ``(output, note)``: note is None on success, else a one-line reason
    (the output is then what was produced before the problem, possibly b"").
    """
    out, note, _info = decompress_detail(codec, data, limit)
    return out, note


def decompress_detail(codec: str, data: bytes | memoryview, limit: int) -> tuple[bytes, str | None, list[str]]:
    """Like :func:`decompress`, plus a list of informational notes about the
    input that are not failures (for example the old lz4 header checksum). ``data`` may
    be a memoryview (a slice of the frame, not copied until a codec needs bytes)."""
    info: list[str] = []
    if limit < 0:
        limit = 0
    try:
        if codec == "gzip":
            out, note = _gzip(data, limit)
        elif codec == "snappy":
            out, note = _snappy(data, limit, info)
        elif codec == "lz4":
            out, note = _lz4(data, limit, info)
        elif codec == "zstd":
            out, note = _zstd(data, limit)
        elif codec == "none":
            out, note = (bytes(data[:limit]), None if len(data) <= limit else limit_note(limit))
        else:
            out, note = b"", f"unknown codec {codec!r}"
    except Exception as exc:  # a codec library surprise must not reach the user
        out, note = b"", f"bad {codec} data: {_why(exc)}"
    return out, note, info


def _why(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:120]


# -- gzip ---------------------------------------------------------------------
def _gzip(data: bytes | memoryview, limit: int) -> tuple[bytes, str | None]:
    parts: list[bytes] = []
    total = 0
    rest = bytes(data)
    members = 0
    while rest:
        d = zlib.decompressobj(47)  # gzip or zlib header, auto-detected
        pending = rest
        try:
            while True:
                want = min(CHUNK, limit - total + 1)
                chunk = d.decompress(pending, want)
                pending = d.unconsumed_tail
                if chunk:
                    parts.append(chunk)
                    total += len(chunk)
                    if total > limit:
                        return _cut(parts, limit), limit_note(limit)
                if d.eof or (not pending and not chunk):
                    break
        except zlib.error as exc:
            return b"".join(parts), f"bad gzip data: {_why(exc)}"
        if not d.eof:
            return b"".join(parts), "bad gzip data: stream ends before the end of the gzip member"
        members += 1
        rest = d.unused_data
        if rest and not rest.startswith(b"\x1f\x8b"):
            if rest.strip(b"\x00"):
                return b"".join(parts), f"bad gzip data: {len(rest)} bytes of trailing garbage"
            break
    if members == 0:
        return b"", "bad gzip data: empty input"
    return b"".join(parts), None


def _cut(parts: list[bytes], limit: int) -> bytes:
    return b"".join(parts)[:limit]


# -- snappy ---------------------------------------------------------------------
def _varint_len(data: bytes) -> tuple[int, int] | None:
    """The uncompressed length preamble of a raw snappy block: (value, size)."""
    value = 0
    for i in range(min(5, len(data))):
        b = data[i]
        value |= (b & 0x7F) << (7 * i)
        if not b & 0x80:
            return value, i + 1
    return None


def _snappy_raw(block: bytes, budget: int) -> tuple[bytes | None, str | None]:
    pre = _varint_len(block)
    if pre is None:
        return None, "bad snappy data: no length preamble"
    if pre[0] > budget:
        return None, "limit"
    try:
        return bytes(cramjam.snappy.decompress_raw(block)), None
    except Exception as exc:
        return None, f"bad snappy data: {_why(exc)}"


def _snappy(data: bytes | memoryview, limit: int, info: list[str]) -> tuple[bytes, str | None]:
    data = bytes(data)
    if data.startswith(_XERIAL_MAGIC):
        return _snappy_xerial(data, limit, info)
    if data.startswith(_SNAPPY_FRAMED_MAGIC):
        return _snappy_framed(data, limit, info)
    out, err = _snappy_raw(data, limit)
    if err == "limit":
        return b"", limit_note(limit)
    if err is not None:
        return b"", err
    return out or b"", None


def _snappy_xerial(data: bytes, limit: int, info: list[str]) -> tuple[bytes, str | None]:
    info.append("snappy xerial framing")
    pos = 16
    if len(data) < pos:
        return b"", "bad snappy data: xerial header cut short"
    parts: list[bytes] = []
    total = 0
    while pos < len(data):
        if pos + 4 > len(data):
            return b"".join(parts), "bad snappy data: xerial block length cut short"
        (size,) = _I32.unpack_from(data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            return b"".join(parts), f"bad snappy data: xerial block of {size} bytes exceeds the data"
        out, err = _snappy_raw(data[pos:pos + size], limit - total)
        if err == "limit":
            return b"".join(parts), limit_note(limit)
        if err is not None or out is None:
            return b"".join(parts), err
        parts.append(out)
        total += len(out)
        pos += size
    return b"".join(parts), None


def _snappy_framed(data: bytes, limit: int, info: list[str]) -> tuple[bytes, str | None]:
    info.append("snappy framing format")
    pos = 0
    parts: list[bytes] = []
    total = 0
    while pos < len(data):
        if pos + 4 > len(data):
            return b"".join(parts), "bad snappy data: chunk header cut short"
        kind = data[pos]
        size = data[pos + 1] | (data[pos + 2] << 8) | (data[pos + 3] << 16)
        pos += 4
        if pos + size > len(data):
            return b"".join(parts), "bad snappy data: chunk exceeds the data"
        body = data[pos:pos + size]
        pos += size
        if kind == 0x00:
            out, err = _snappy_raw(body[4:], limit - total)
            if err == "limit":
                return b"".join(parts), limit_note(limit)
            if err is not None or out is None:
                return b"".join(parts), err
        elif kind == 0x01:
            out = body[4:]
            if total + len(out) > limit:
                return b"".join(parts), limit_note(limit)
        elif kind == 0xFF or 0x80 <= kind <= 0xFE:
            continue  # stream identifier, padding, skippable
        else:
            return b"".join(parts), f"bad snappy data: reserved chunk type 0x{kind:02x}"
        parts.append(out)
        total += len(out)
    return b"".join(parts), None


# -- lz4 ----------------------------------------------------------------------
_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 of a short input (used only for lz4 frame header checksums)."""
    n = len(data)
    pos = 0
    if n >= 16:
        v1 = (seed + _P1 + _P2) & _M32
        v2 = (seed + _P2) & _M32
        v3 = seed & _M32
        v4 = (seed - _P1) & _M32
        while pos + 16 <= n:
            a, b, c, d = struct.unpack_from("<4I", data, pos)
            v1 = (_rotl((v1 + a * _P2) & _M32, 13) * _P1) & _M32
            v2 = (_rotl((v2 + b * _P2) & _M32, 13) * _P1) & _M32
            v3 = (_rotl((v3 + c * _P2) & _M32, 13) * _P1) & _M32
            v4 = (_rotl((v4 + d * _P2) & _M32, 13) * _P1) & _M32
            pos += 16
        acc = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M32
    else:
        acc = (seed + _P5) & _M32
    acc = (acc + n) & _M32
    while pos + 4 <= n:
        (lane,) = struct.unpack_from("<I", data, pos)
        acc = (_rotl((acc + lane * _P3) & _M32, 17) * _P4) & _M32
        pos += 4
    while pos < n:
        acc = (_rotl((acc + data[pos] * _P5) & _M32, 11) * _P1) & _M32
        pos += 1
    acc ^= acc >> 15
    acc = (acc * _P2) & _M32
    acc ^= acc >> 13
    acc = (acc * _P3) & _M32
    acc ^= acc >> 16
    return acc


def _lz4_fix_header(frame: bytes) -> tuple[bytes, bool] | None:
    """Check a frame's header checksum. Returns (frame to decode, was_old_kafka),
    with the checksum rewritten to the standard value in the old-Kafka case;
    None when the header is too short or neither checksum matches."""
    if len(frame) < 7 or not frame.startswith(_LZ4_MAGIC):
        return None
    flg = frame[4]
    end = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    if len(frame) <= end:
        return None
    hc = frame[end]
    if hc == (xxh32(frame[4:end]) >> 8) & 0xFF:
        return frame, False
    if hc == (xxh32(frame[0:end]) >> 8) & 0xFF:
        good = (xxh32(frame[4:end]) >> 8) & 0xFF
        return frame[:end] + bytes((good,)) + frame[end + 1:], True
    return None


def _lz4(data: bytes | memoryview, limit: int, info: list[str]) -> tuple[bytes, str | None]:
    rest = bytes(data)
    parts: list[bytes] = []
    total = 0
    frames = 0
    while rest:
        fixed = _lz4_fix_header(rest)
        if fixed is None:
            if frames and not rest.strip(b"\x00"):
                break
            if not rest.startswith(_LZ4_MAGIC):
                return b"".join(parts), "bad lz4 data: no lz4 frame magic"
            return b"".join(parts), "bad lz4 data: frame header checksum matches neither form"
        frame, old = fixed
        if old and LZ4_OLD_KAFKA_NOTE not in info:
            info.append(LZ4_OLD_KAFKA_NOTE)
        d = lz4.frame.LZ4FrameDecompressor()
        pending = frame
        try:
            while not d.eof:
                want = min(CHUNK, limit - total + 1)
                chunk = d.decompress(pending, max_length=want)
                pending = b""
                if chunk:
                    parts.append(chunk)
                    total += len(chunk)
                    if total > limit:
                        return _cut(parts, limit), limit_note(limit)
                elif d.needs_input:
                    break
        except RuntimeError as exc:
            return b"".join(parts), f"bad lz4 data: {_why(exc)}"
        if not d.eof:
            return b"".join(parts), "bad lz4 data: frame cut short"
        frames += 1
        rest = d.unused_data or b""
    if frames == 0:
        return b"", "bad lz4 data: empty input"
    return b"".join(parts), None


# -- zstd -----------------------------------------------------------------------
def _zstd(data: bytes | memoryview, limit: int) -> tuple[bytes, str | None]:
    if not data:
        return b"", "bad zstd data: empty input"
    problem = _zstd_structure(data)
    if problem is not None:
        return b"", f"bad zstd data: {problem}"
    # bound the window (memory) too: no legitimate Kafka batch needs more than
    # the output limit, and never less than 8 MiB is allowed
    window = 1 << 23
    while window < limit and window < (1 << 27):
        window <<= 1
    dctx = zstandard.ZstdDecompressor(max_window_size=window)
    parts: list[bytes] = []
    total = 0
    try:
        with dctx.stream_reader(bytes(data), read_across_frames=True) as reader:
            while True:
                want = min(CHUNK, limit - total + 1)
                chunk = reader.read(want)
                if not chunk:
                    break
                parts.append(chunk)
                total += len(chunk)
                if total > limit:
                    return _cut(parts, limit), limit_note(limit)
    except zstandard.ZstdError as exc:
        return b"".join(parts), f"bad zstd data: {_why(exc)}"
    return b"".join(parts), None


_ZSTD_MAGIC = 0xFD2FB528
_FCS_SIZE = (0, 2, 4, 8)
_DID_SIZE = (0, 1, 2, 4)


def _zstd_structure(data: bytes | memoryview) -> str | None:
    """Walk the frames and block headers (no decompression) so that a frame
    cut short is reported: the stream reader alone returns partial output."""
    n = len(data)
    pos = 0
    while pos < n:
        if pos + 4 > n:
            return "frame magic cut short"
        (magic,) = struct.unpack_from("<I", data, pos)
        if magic & 0xFFFFFFF0 == 0x184D2A50:  # skippable frame
            if pos + 8 > n:
                return "skippable frame cut short"
            (size,) = struct.unpack_from("<I", data, pos + 4)
            pos += 8 + size
            if pos > n:
                return "skippable frame cut short"
            continue
        if magic != _ZSTD_MAGIC:
            return "unknown frame magic" if pos == 0 else f"trailing bytes after frame at {pos}"
        pos += 4
        if pos >= n:
            return "frame header cut short"
        fhd = data[pos]
        single = fhd & 0x20
        fcs_flag = fhd >> 6
        fcs = 1 if (fcs_flag == 0 and single) else _FCS_SIZE[fcs_flag]
        pos += 1 + (0 if single else 1) + _DID_SIZE[fhd & 3] + fcs
        checksum = 4 if fhd & 0x04 else 0
        while True:
            if pos + 3 > n:
                return "frame cut short"
            bh = data[pos] | (data[pos + 1] << 8) | (data[pos + 2] << 16)
            pos += 3
            last, btype, bsize = bh & 1, (bh >> 1) & 3, bh >> 3
            if btype == 3:
                return "reserved block type"
            pos += 1 if btype == 1 else bsize
            if pos > n:
                return "frame cut short"
            if last:
                break
        pos += checksum
        if pos > n:
            return "frame checksum cut short"
    return None
