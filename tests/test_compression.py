"""Bounded decompression: every codec, every framing, bombs and bad input."""
from __future__ import annotations

import gzip
import struct
import zlib

import cramjam
import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from dissectors.compression import LZ4_OLD_KAFKA_NOTE, decompress, decompress_detail, xxh32

kcodec = pytest.importorskip("kafka.codec")
xxhash = pytest.importorskip("xxhash")

PAYLOAD = b"".join(b"record %05d: the quick brown fox jumps over the lazy dog\n" % i for i in range(2000))
GIB = 1 << 30
MIB = 1 << 20


def _gzip_bomb(total: int = GIB) -> bytes:
    """A valid gzip member of ``total`` zero bytes, built without compressing
    them all: after a full flush deflate output for equal input repeats."""
    z = bytes(MIB)
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = c.compress(z) + c.flush(zlib.Z_FULL_FLUSH)
    assert block == c.compress(z) + c.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(total // MIB):
        crc = zlib.crc32(z, crc)
    return (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + block * (total // MIB) + c.flush()
            + struct.pack("<II", crc, total & 0xFFFFFFFF))


@pytest.fixture(scope="module")
def gzip_bomb() -> bytes:
    return _gzip_bomb()


@pytest.fixture(scope="module")
def zstd_bomb() -> bytes:
    c = zstandard.ZstdCompressor(level=1).compressobj()
    z = bytes(MIB)
    return b"".join([c.compress(z) for _ in range(GIB // MIB)] + [c.flush()])


ENCODERS = {
    "gzip": [("gzip", gzip.compress), ("kafka-python gzip", kcodec.gzip_encode),
             ("two members", lambda d: gzip.compress(d[:1000]) + gzip.compress(d[1000:]))],
    "snappy": [("raw block", lambda d: bytes(cramjam.snappy.compress_raw(d))),
               ("xerial", lambda d: kcodec.snappy_encode(d, xerial_compatible=True, xerial_blocksize=4096)),
               ("kafka-python raw", lambda d: kcodec.snappy_encode(d, xerial_compatible=False)),
               ("framing format", lambda d: bytes(cramjam.snappy.compress(d)))],
    "lz4": [("frame", lz4.frame.compress), ("kafka-python", kcodec.lz4_encode),
            ("old kafka", kcodec.lz4_encode_old_kafka),
            ("content size + checksums", lambda d: lz4.frame.compress(d, store_size=True, content_checksum=True,
                                                                     block_checksum=True)),
            ("two frames", lambda d: lz4.frame.compress(d[:999]) + lz4.frame.compress(d[999:]))],
    "zstd": [("frame", zstandard.ZstdCompressor().compress), ("kafka-python", kcodec.zstd_encode),
             ("checksum, no size", zstandard.ZstdCompressor(write_checksum=True, write_content_size=False).compress),
             ("two frames", lambda d: zstandard.ZstdCompressor().compress(d[:5])
              + zstandard.ZstdCompressor().compress(d[5:]))],
}
CASES = [(codec, label, enc) for codec, encs in ENCODERS.items() for label, enc in encs]


@pytest.mark.parametrize("codec,label,enc", CASES, ids=[f"{c}-{lab}" for c, lab, _ in CASES])
def test_round_trip_and_limits(codec: str, label: str, enc) -> None:
    data = enc(PAYLOAD)
    assert len(data) < len(PAYLOAD)
    out, note = decompress(codec, data, 64 * MIB)
    assert note is None and out == PAYLOAD
    # exactly at the limit is fine, one byte less is not
    out, note = decompress(codec, data, len(PAYLOAD))
    assert note is None and out == PAYLOAD
    out, note = decompress(codec, data, len(PAYLOAD) - 1)
    assert note == f"decompressed size limit {len(PAYLOAD) - 1} hit"
    assert len(out) <= len(PAYLOAD) - 1 and PAYLOAD.startswith(out)


@pytest.mark.parametrize("codec,label,enc", CASES, ids=[f"{c}-{lab}" for c, lab, _ in CASES])
def test_cut_and_corrupt_input_is_a_note(codec: str, label: str, enc) -> None:
    data = enc(PAYLOAD)
    for cut in (0, 1, 5, 12, len(data) // 2, len(data) - 1):
        out, note = decompress(codec, data[:cut], 64 * MIB)
        assert note is not None and note.startswith(f"bad {codec} data: "), (cut, note)
        assert PAYLOAD.startswith(out)
    out, note = decompress(codec, b"\x00garbage that is no codec at all" * 3, 64 * MIB)
    assert note is not None
    assert "\n" not in note and len(note) < 200


def test_lz4_old_kafka_header_checksum_is_accepted_and_named() -> None:
    old = kcodec.lz4_encode_old_kafka(PAYLOAD)
    new = lz4.frame.compress(PAYLOAD)
    out, note, info = decompress_detail("lz4", old, 64 * MIB)
    assert (out, note) == (PAYLOAD, None) and info == [LZ4_OLD_KAFKA_NOTE]
    # the stock library refuses the old form; ours fixes only the header checksum
    with pytest.raises(RuntimeError):
        lz4.frame.decompress(old)
    out, note, info = decompress_detail("lz4", new, 64 * MIB)
    assert (out, note, info) == (PAYLOAD, None, [])
    # a header checksum matching neither form is an error
    bad = bytearray(new)
    bad[6] ^= 0xFF
    out, note = decompress("lz4", bytes(bad), 64 * MIB)
    assert out == b"" and note == "bad lz4 data: frame header checksum matches neither form"


def test_snappy_framing_detected() -> None:
    _out, note, info = decompress_detail("snappy", kcodec.snappy_encode(PAYLOAD), 64 * MIB)
    assert note is None and info == ["snappy xerial framing"]
    _out, note, info = decompress_detail("snappy", bytes(cramjam.snappy.compress_raw(PAYLOAD)), 64 * MIB)
    assert note is None and info == []


def test_xxh32_matches_reference() -> None:
    data = bytes(range(256)) * 2
    for n in range(0, 70):
        for seed in (0, 1, 0xDEADBEEF):
            assert xxh32(data[:n], seed) == xxhash.xxh32(data[:n], seed=seed).intdigest()


def test_gzip_bomb_costs_neither_memory_nor_time(gzip_bomb: bytes) -> None:
    assert len(gzip_bomb) < 2 * MIB
    out, note = decompress("gzip", gzip_bomb, 64 * MIB)
    assert note == "decompressed size limit 67108864 hit"
    assert len(out) == 64 * MIB and not out.strip(b"\x00")
    out, note = decompress("gzip", gzip_bomb, MIB)
    assert len(out) == MIB and note == f"decompressed size limit {MIB} hit"


def test_zstd_bomb_costs_neither_memory_nor_time(zstd_bomb: bytes) -> None:
    assert len(zstd_bomb) < 100_000
    out, note = decompress("zstd", zstd_bomb, 64 * MIB)
    assert note == "decompressed size limit 67108864 hit" and len(out) == 64 * MIB
    out, note = decompress("zstd", zstd_bomb, 4096)
    assert (len(out), note) == (4096, "decompressed size limit 4096 hit")


def test_lz4_and_snappy_bombs_are_bounded() -> None:
    zeros = bytes(32 * MIB)
    out, note = decompress("lz4", lz4.frame.compress(zeros), MIB)
    assert (len(out), note) == (MIB, f"decompressed size limit {MIB} hit")
    # raw snappy declares its size up front: refused before decompressing
    out, note = decompress("snappy", bytes(cramjam.snappy.compress_raw(zeros)), MIB)
    assert (out, note) == (b"", f"decompressed size limit {MIB} hit")
    out, note = decompress("snappy", kcodec.snappy_encode(zeros, xerial_blocksize=MIB // 2), MIB + 1)
    assert len(out) == MIB and note == f"decompressed size limit {MIB + 1} hit"


def test_unknown_codec_and_empty_input() -> None:
    assert decompress("brotli", b"abc", 100) == (b"", "unknown codec 'brotli'")
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        out, note = decompress(codec, b"", 100)
        assert out == b"" and note is not None and note.startswith(f"bad {codec} data")
    assert decompress("none", b"abc", 100) == (b"abc", None)


@settings(max_examples=150, deadline=None)
@given(codec=st.sampled_from(["gzip", "snappy", "lz4", "zstd"]), junk=st.binary(max_size=300),
       limit=st.integers(min_value=0, max_value=5000))
def test_arbitrary_bytes_never_raise(codec: str, junk: bytes, limit: int) -> None:
    for data in (junk, {"gzip": b"\x1f\x8b\x08\x00", "snappy": b"\x82SNAPPY\x00", "lz4": b"\x04\x22\x4d\x18",
                        "zstd": b"\x28\xb5\x2f\xfd"}[codec] + junk):
        out, note = decompress(codec, data, limit)
        assert isinstance(out, bytes) and len(out) <= limit
        assert note is None or isinstance(note, str)


@settings(max_examples=60, deadline=None)
@given(payload=st.binary(max_size=3000), codec=st.sampled_from(["gzip", "snappy", "lz4", "zstd"]))
def test_round_trip_property(payload: bytes, codec: str) -> None:
    enc = {"gzip": gzip.compress, "snappy": kcodec.snappy_encode, "lz4": lz4.frame.compress,
           "zstd": zstandard.ZstdCompressor().compress}[codec]
    assert decompress(codec, enc(payload), len(payload)) == (payload, None)
