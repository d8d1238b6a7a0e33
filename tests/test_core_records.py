"""The native lean records summary (core/src/records.rs) against two oracles.

``analyzer.probes.probe_records_summary`` runs ``records::lean_summary``. Its reference is the
Python summary it was ported from (tests/records_reference.py, kept as the oracle); both are
compared on: every records field of every Produce request and Fetch response in the
repo's samples and in ../shared/captures (skipped with a reason when ../shared is
absent), under the default limits and under tight ones; damaged variants of those
(bit flips, truncations, random bytes: seeded, bounded in count); and synthetic magic 0/1
wrappers of each codec (in the forms each decoder accepts, nested, under tight limits,
and damaged with their CRCs made valid again so that the damage reaches the codec).

What is compared: the value and extra's records, codec, crc_ok and truncated, the notes
in order, and what the summary adds to ctx.counts.malformed, crc_valid, crc_invalid and
limits_hit. Notes are compared exactly, except those quoting a codec library's own
message (``_why(exc)`` in dissectors.compression), where the two sides use different
libraries' words: there only the part before the library's words is compared (the note
count and everything else still are). Each test prints its count of cases.

The full records decoder (``dissectors.records.decode_records``) is the second oracle, for
the records of the captures under the default limits: there the summary's counts, codec,
CRC verdicts and malformed and limit counts are the full decode's (on damaged bytes the full
decoder, which reads every record, says more).
"""
from __future__ import annotations

import gzip
import random
import re
import struct
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import cramjam
import lz4.frame
import pytest
import zstandard

from analyzer import _core
from dissectors.compression import xxh32
from dissectors.context import DecodeContext, Limits, Presentation
from dissectors.records import decode_records
from tests.probes import probes
from tests.records_reference import lean_summary

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "captures"
DEFAULT = Limits()
LIMITS = [(DEFAULT.max_array_len, DEFAULT.max_decompressed), (5, 300), (1_000_000, 0)]

# notes that end with a codec library's own message: compared up to these words
LIBRARY_NOTES = ("malformed: bad gzip data: Error ", "malformed: bad zstd data: zstd decompress error: ")
# the snappy and lz4 libraries' messages (cramjam's and the snap crate's; liblz4's and
# lz4_flex's): every snappy or lz4 note but ours
OURS = {"malformed: bad snappy data: ": ("no length preamble", "xerial header cut short",
                                         "xerial block length cut short", "xerial block of ",
                                         "chunk header cut short", "chunk exceeds the data",
                                         "reserved chunk type "),
        "malformed: bad lz4 data: ": ("no lz4 frame magic", "frame header checksum matches neither form",
                                      "frame cut short", "empty input")}
LZ4_OURS = OURS["malformed: bad lz4 data: "]


def _library_part(note: str) -> str | None:
    """The note without a library's words (None: the note has none); a v2 batch's index
    (``[0]: `` after ``malformed: ``) is kept out of the comparison of the words."""
    note = re.sub(r"^malformed: \[\d+\]: ", "malformed: ", note)
    for p in LIBRARY_NOTES:
        if note.startswith(p):
            return p
    for p, ours in OURS.items():
        if note.startswith(p) and not note[len(p):].startswith(ours):
            return p
    return None


def python_summary(data: bytes, start: int, end: int, max_array_len: int, max_decompressed: int) -> dict:
    ctx = DecodeContext(Limits(max_array_len=max_array_len, max_decompressed=max_decompressed),
                        Presentation(decode_records=False))
    f = lean_summary(data, start, end, ctx)
    x = f.extra
    c = ctx.counts
    assert x is not None and f.value == x["records"]
    return {"records": x["records"], "codec": x["codec"], "crc_ok": x["crc_ok"], "truncated": x["truncated"],
            "crc_valid": c.crc_valid, "crc_invalid": c.crc_invalid, "malformed": c.malformed,
            "notes": list(f.notes or ()), "limits": dict(c.limits_hit)}


def core_summary(data: bytes, start: int, end: int, max_array_len: int, max_decompressed: int) -> dict:
    (records, codec, crc_ok, truncated, crc_valid, crc_invalid, malformed, notes,
     limits) = probes.probe_records_summary(data, start, end, max_array_len, max_decompressed)
    return {"records": records, "codec": codec, "crc_ok": crc_ok, "truncated": truncated,
            "crc_valid": crc_valid, "crc_invalid": crc_invalid, "malformed": malformed,
            "notes": notes, "limits": dict(Counter(limits))}


def _lz4_difference(py: dict, pn: list[str], core: dict, cn: list[str]) -> bool:
    """A damaged lz4 value the two libraries read otherwise (the core's lz4_flex, the full
    decoder's liblz4), in one of the known ways; else False:

    1. the size limit falls inside a bad block: liblz4 stops at the limit (it decodes a
       block only as far as asked), lz4_flex refuses the block (it decodes a block whole);
    2. liblz4 refuses a block lz4_flex reads (liblz4 also checks the rules of a block's
       end: its last bytes literals), so the core goes on and counts the damage in the
       inner messages' CRCs, or in the frame's content size or checksum at its end;
    3. lz4_flex refuses a block liblz4 reads (a match at offset 0), where the full decoder
       finds the damage in the inner messages.
    Both see damage, each where its library stops. In real traffic the wrapper's CRC, which covers the compressed value, tells the damage
    either way (these cases rewrite it to pass)."""
    def damaged(x: dict, notes: list[str]) -> bool:
        return (any(n.startswith("malformed: bad lz4 data: ") for n in notes) or x["malformed"] > 0
                or x["crc_invalid"] > 0 or bool(x["limits"]))
    return damaged(py, pn) and damaged(core, cn)


class Diff:
    """Cases compared, differences (with the first few kept), notes whose library words differ."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.cases = 0
        self.library_texts = 0
        self.lz4_damage = 0
        self.diffs: list[tuple[Any, ...]] = []

    def check(self, what: str, data: bytes, start: int, end: int,
              limits: tuple[int, int] = (DEFAULT.max_array_len, DEFAULT.max_decompressed)) -> None:
        self.cases += 1
        py = python_summary(data, start, end, *limits)
        core = core_summary(data, start, end, *limits)
        if py == core:
            return
        pn, cn = py.pop("notes"), core.pop("notes")
        same = py == core and len(pn) == len(cn)
        texts = 0
        if same:
            for a, b in zip(pn, cn, strict=True):
                if a != b:
                    lib = _library_part(a)
                    if lib is None or lib != _library_part(b):
                        same = False
                        break
                    texts += 1
        if same:
            self.library_texts += texts
            return
        if any("bad lz4 data: " in n and not n.endswith(LZ4_OURS) for n in pn + cn):
            assert _lz4_difference(py, pn, core, cn), (what, limits, py, pn, core, cn)
            self.lz4_damage += 1
            return
        py["notes"], core["notes"] = pn, cn
        self.diffs.append((what, start, end, limits, data[start:end][:200].hex(), py, core))

    def done(self, min_cases: int) -> None:
        print(f"\n{self.name}: {self.cases} cases, {len(self.diffs)} differences, "
              f"{self.library_texts} notes differing in library words only, "
              f"{self.lz4_damage} damaged lz4 values read otherwise")
        for d in self.diffs[:5]:
            print("  ", d)
        assert not self.diffs, f"{len(self.diffs)} differences, first: {self.diffs[0]}"
        assert self.cases >= min_cases


# -- records fields of real captures --------------------------------------------------
def _records_fields(path: Path) -> list[tuple[str, bytes, int, int]]:
    from analyzer.pipeline import analyze_file
    out = []
    for ex in analyze_file(str(path)):
        if ex.api_name not in ("Produce", "Fetch"):
            continue
        for tree, frame in ((ex.request_tree, ex.request), (ex.response_tree, ex.response)):
            if tree is None or frame is None:
                continue
            for f in tree.find_all("records"):
                if f.type != "records" or f.value is None or not f.extra or "bytes" not in f.extra:
                    continue      # null records, or a batch's own records (inside a records field)
                out.append((f"{path.name}:{ex.api_name}", frame.data, f.offset, f.offset + f.extra["bytes"]))
    return out


def _captures(where: Path) -> list[Path]:
    return sorted(p for p in where.rglob("*") if p.suffix in (".pcap", ".pcapng") or p.name.endswith(".pcap.gz"))


@pytest.fixture(scope="module")
def sample_fields() -> list[tuple[str, bytes, int, int]]:
    return [r for p in _captures(ROOT / "samples") for r in _records_fields(p)]


@pytest.fixture(scope="module")
def capture_fields(sample_fields: list) -> list[tuple[str, bytes, int, int]]:
    """The samples' records fields, and ../shared's when it is beside the clone (no skip)."""
    if not SHARED.is_dir():
        return list(sample_fields)
    return [*sample_fields, *(r for p in _captures(SHARED) for r in _records_fields(p))]


@pytest.fixture(scope="module")
def shared_fields() -> list[tuple[str, bytes, int, int]]:
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} is absent (the shared captures sit beside the clone)")
    return [r for p in _captures(SHARED) for r in _records_fields(p)]


def _compare_fields(name: str, fields: list[tuple[str, bytes, int, int]], min_cases: int) -> None:
    d = Diff(name)
    for what, data, start, end in fields:
        for limits in LIMITS:
            d.check(what, data, start, end, limits)
    d.done(min_cases)


def test_samples_records_fields(sample_fields: list) -> None:
    assert len(sample_fields) >= 150
    _compare_fields("samples", sample_fields, 3 * 150)


def test_shared_records_fields(shared_fields: list) -> None:
    assert len(shared_fields) >= 100
    _compare_fields("shared captures", shared_fields, 3 * 100)


# -- damaged variants ----------------------------------------------------------------------
def _damaged(rng: random.Random, body: bytes) -> list[bytes]:
    out = []
    n = len(body)
    for _ in range(4):            # bit flips, one to four
        b = bytearray(body)
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(n)
            b[i] ^= 1 << rng.randrange(8)
        out.append(bytes(b))
    for _ in range(2):            # cut short
        out.append(body[:rng.randrange(n)])
    b = bytearray(body)           # a run of random bytes
    i = rng.randrange(n)
    b[i:i + 16] = rng.randbytes(min(16, n - i))
    out.append(bytes(b))
    return out


def _damage_all(name: str, fields: list, seed: int, per_field_cap: int, min_cases: int) -> None:
    rng = random.Random(seed)
    d = Diff(name)
    for what, data, start, end in fields[:per_field_cap]:
        body = data[start:end]
        if not body:
            continue
        for v in _damaged(rng, body):
            prefix = rng.randbytes(rng.randrange(3))      # not at offset 0 of the buffer
            d.check(what, prefix + v + b"\xee" * 3, len(prefix), len(prefix) + len(v),
                    LIMITS[rng.randrange(len(LIMITS))])
    for _ in range(300):          # random bytes
        v = rng.randbytes(rng.randrange(200))
        d.check("random", v, 0, len(v))
    d.done(min_cases)


def test_damaged_samples(sample_fields: list) -> None:
    _damage_all("damaged samples", sample_fields, 1, 400, 700)


def test_damaged_shared(shared_fields: list) -> None:
    _damage_all("damaged shared captures", shared_fields, 2, 400, 700)


# -- synthetic magic 0/1 wrappers of each codec ------------------------------------------
def message(magic: int, codec: int, key: bytes | None, value: bytes | None, offset: int = 0,
            crc: int | None = None) -> bytes:
    body = struct.pack(">bb", magic, codec) + (struct.pack(">q", 1_700_000_000_000) if magic else b"")
    for part in (key, value):
        body += struct.pack(">i", -1) if part is None else struct.pack(">i", len(part)) + part
    c = zlib.crc32(body) if crc is None else crc
    return struct.pack(">qiI", offset, len(body) + 4, c) + body


def inner_set(magic: int, n: int, size: int = 30) -> bytes:
    return b"".join(message(magic, 0, b"k%d" % i, (b"v%d-" % i) * size, i) for i in range(n))


def _xerial(data: bytes, block: int = 100) -> bytes:
    out = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    for i in range(0, len(data), block):
        c = bytes(cramjam.snappy.compress_raw(data[i:i + block]))
        out += struct.pack(">i", len(c)) + c
    return out


def _lz4_old(data: bytes) -> bytes:
    """A frame with the pre-0.10 Kafka header checksum (over magic + descriptor)."""
    f = bytearray(lz4.frame.compress(data, store_size=False))
    end = 6 + (8 if f[4] & 0x08 else 0) + (4 if f[4] & 0x01 else 0)
    f[end] = (xxh32(bytes(f[:end])) >> 8) & 0xFF
    return bytes(f)


def _zstd(data: bytes, **kw: Any) -> bytes:
    return zstandard.ZstdCompressor(**kw).compress(data)


def compressors() -> dict[str, tuple[int, Any]]:
    return {
        "gzip": (1, gzip.compress),
        "zlib": (1, zlib.compress),
        "gzip-2-members": (1, lambda d: gzip.compress(d[:50]) + gzip.compress(d[50:])),
        "gzip-zero-padded": (1, lambda d: gzip.compress(d) + bytes(5)),
        "snappy-raw": (2, lambda d: bytes(cramjam.snappy.compress_raw(d))),
        "snappy-xerial": (2, _xerial),
        "snappy-framed": (2, lambda d: bytes(cramjam.snappy.compress(d))),
        "lz4": (3, lambda d: lz4.frame.compress(d)),
        "lz4-checksums": (3, lambda d: lz4.frame.compress(d, content_checksum=True, block_checksum=True,
                                                          block_size=lz4.frame.BLOCKSIZE_MAX64KB)),
        "lz4-linked": (3, lambda d: lz4.frame.compress(d, block_linked=True, store_size=False)),
        "lz4-uncompressed-blocks": (3, lambda d: lz4.frame.compress(d, compression_level=-100)),
        "lz4-old-kafka": (3, _lz4_old),
        "lz4-2-frames": (3, lambda d: lz4.frame.compress(d[:40]) + lz4.frame.compress(d[40:])),
        "zstd": (4, _zstd),
        "zstd-checksum": (4, lambda d: _zstd(d, write_checksum=True, write_content_size=False)),
        "zstd-2-frames": (4, lambda d: _zstd(d[:70]) + _zstd(d[70:], write_checksum=True)),
        "zstd-skippable": (4, lambda d: struct.pack("<II", 0x184D2A50, 3) + b"abc" + _zstd(d)),
    }


def wrapper(magic: int, codec: int, comp: Any, payload: bytes, offset: int = 0) -> bytes:
    return message(magic, codec, None, comp(payload), offset)


def synthetic_cases() -> list[tuple[str, bytes]]:
    cases = []
    for name, (codec, comp) in compressors().items():
        for magic in (0, 1):
            inner = inner_set(magic, 7)
            w = wrapper(magic, codec, comp, inner)
            cases.append((f"{name} v{magic}", w))
            cases.append((f"{name} v{magic} x2 + plain", w + w + message(magic, 0, None, b"x")))
            # a wrapper inside a wrapper, and one level more than allowed
            w2 = wrapper(magic, codec, comp, w + inner_set(magic, 2))
            cases.append((f"{name} v{magic} nested", w2))
            cases.append((f"{name} v{magic} nested 3", wrapper(magic, codec, comp, w2)))
            # a big inner set (several lz4 blocks / zstd blocks, chunks of 1 MiB)
            cases.append((f"{name} v{magic} big", wrapper(magic, codec, comp, inner_set(magic, 3000, 60))))
            # magic 2 inside, a cut inner message, an empty value
            batch = struct.pack(">qib", 0, 60, 0) + b"\x02" + bytes(60)
            cases.append((f"{name} v{magic} magic 2 inside", wrapper(magic, codec, comp, batch)))
            cases.append((f"{name} v{magic} inner cut", wrapper(magic, codec, comp, inner[:-7])))
            cases.append((f"{name} v{magic} empty value", message(magic, codec, None, b"")))
            cases.append((f"{name} v{magic} null value", message(magic, codec, None, None)))
    for codec in (5, 6, 7):
        cases.append((f"codec {codec}", message(1, codec, None, b"abc")))
    cases.append(("mixed", message(1, 1, None, gzip.compress(inner_set(1, 2))) + message(1, 0, None, b"x")))
    return cases


def test_synthetic_wrappers() -> None:
    rng = random.Random(3)
    d = Diff("synthetic wrappers")
    for what, data in synthetic_cases():
        for limits in ((1_000_000, 64 << 20), (1_000_000, 100), (1_000_000, 1000), (1_000_000, 1 << 20),
                       (1_000_000, 150_000), (1_000_000, 0)):
            d.check(what, data, 0, len(data), limits)
        # damage inside the compressed value, the CRC made valid again
        magic = data[16]
        if magic not in (0, 1) or len(data) < 40:
            continue
        body_start = 16
        for _ in range(12):
            b = bytearray(data)
            for _ in range(rng.randint(1, 3)):
                i = rng.randrange(body_start + 10, len(b))
                b[i] ^= 1 << rng.randrange(8)
            size = struct.unpack_from(">i", b, 8)[0]
            end = min(len(b), 12 + size)
            struct.pack_into(">I", b, 12, zlib.crc32(bytes(b[16:end])))
            d.check(what + " damaged", bytes(b), 0, len(b), (1_000_000, rng.choice((64 << 20, 500))))
        for cut in rng.sample(range(20, len(data)), min(6, len(data) - 20)):
            b = bytearray(data[:cut])
            struct.pack_into(">i", b, 8, cut - 12)
            struct.pack_into(">I", b, 12, zlib.crc32(bytes(b[16:])))
            d.check(what + " value cut", bytes(b), 0, len(b))
    d.done(2000)


def test_v2_batches_and_limits() -> None:
    """v2 batch headers: records_count against the limits and the room, CRC-32C, truncation."""
    from crc32c import crc32c
    rng = random.Random(4)
    d = Diff("v2 batches")

    def batch(count: int, codec: int, payload: bytes, good_crc: bool = True) -> bytes:
        last = (count - 1 + (1 << 31)) % (1 << 32) - (1 << 31)
        body = struct.pack(">hiqqqhii", codec, last, 1, 2, -1, -1, -1, count) + payload
        crc = crc32c(body) ^ (0 if good_crc else 1)
        return struct.pack(">qiib", 0, len(body) + 9, 0, 2) + struct.pack(">I", crc) + body

    for _ in range(400):
        count = rng.choice((0, 1, 3, 10, -1, -(1 << 31), (1 << 31) - 1, 1_000_001, 5))
        codec = rng.randrange(8)
        payload = rng.randbytes(rng.choice((0, 6, 7, 21, 70, 300)))
        raw = b"".join(batch(count, codec, payload, rng.random() < 0.8) for _ in range(rng.randint(1, 3)))
        for cut in (len(raw), rng.randrange(len(raw) + 1)):
            d.check("v2", raw, 0, cut, LIMITS[rng.randrange(len(LIMITS))])
    d.done(800)


def test_capture_records_as_the_full_decoder_counts_them(capture_fields: list) -> None:
    n = 0
    for what, data, start, end in capture_fields:
        ctx = DecodeContext()
        full = decode_records(data, start, end, ctx)
        x = full.extra
        c = ctx.counts
        assert x is not None
        got = core_summary(data, start, end, DEFAULT.max_array_len, DEFAULT.max_decompressed)
        want = {"records": x["records"], "codec": x["codec"], "crc_ok": x["crc_ok"], "truncated": x["truncated"],
                "crc_valid": c.crc_valid, "crc_invalid": c.crc_invalid, "malformed": c.malformed,
                "limits": dict(c.limits_hit)}
        got.pop("notes")
        assert got == want, (what, start, end)
        n += 1
    assert n >= 150


def test_batch_summaries_as_the_full_decoder_reads_the_batches(capture_fields: list) -> None:
    """``analyzer._core.batch_summaries`` (what the batches table's rows read of each v2 batch)
    against the full records decoder's batch Fields and Python's decompression of their
    records, for the records of every capture, whole and cut short."""
    from dissectors.compression import decompress_detail

    n = 0
    for what, data, start, end in capture_fields:
        for stop in (end, (start + end) // 2):
            full = decode_records(data, start, stop, DecodeContext())
            want = []
            budget = DEFAULT.max_decompressed
            for b in full.children or ():
                if b.type != "RecordBatch":
                    break
                v = {c.name: c.value for c in b.children or ()}
                size = v["batch_length"] + 12
                codec_id = v["attributes"] & 7
                codec = ("none", "gzip", "snappy", "lz4", "zstd")[codec_id] if codec_id < 5 else f"unknown({codec_id})"
                unc: int | None = size
                if codec_id:
                    out, note, _info = decompress_detail(codec, data[b.offset + 61:b.offset + size], budget)
                    budget = max(0, budget - len(out))
                    unc = None if note is not None else 61 + len(out)
                want.append((v["producer_id"], v["producer_epoch"], v["base_sequence"], v["records_count"], size, unc,
                             codec, v["base_timestamp"], v["max_timestamp"], bool(v["attributes"] & 0x10),
                             bool(v["attributes"] & 0x20)))
            # (one span: the core's budget per Produce request is the decoder's per records value)
            got = _core.batch_summaries(data, [(start, stop - start)], DEFAULT.max_decompressed)
            assert [g[1:] for g in got] == want and all(g[0] == 0 for g in got), (what, start, stop)
            n += len(got)
    # (the samples alone hold 84 batches; with ../shared's captures, over 100)
    assert n >= (100 if SHARED.is_dir() else 80)


def _full_counts(data: bytes, start: int, end: int, max_array_len: int, max_decompressed: int) -> dict:
    ctx = DecodeContext(Limits(max_array_len=max_array_len, max_decompressed=max_decompressed))
    x = decode_records(data, start, end, ctx).extra
    c = ctx.counts
    assert x is not None
    return {"records": x["records"], "codec": x["codec"], "crc_ok": x["crc_ok"], "truncated": x["truncated"],
            "crc_valid": c.crc_valid, "crc_invalid": c.crc_invalid, "malformed": c.malformed,
            "limits": dict(c.limits_hit)}


def test_damaged_records_as_the_full_decoder_counts_them(capture_fields: list) -> None:
    """On damaged records fields too, the core's summary counts what the full decoder counts:
    records, CRC verdicts, malformed marks (bad bytes inside a record included) and limits."""
    rng = random.Random(3)
    n = differ = 0
    first = None
    for what, data, start, end in capture_fields[:400]:
        body = data[start:end]
        if not body:
            continue
        for v in _damaged(rng, body):
            limits = LIMITS[rng.randrange(len(LIMITS))]
            got = core_summary(v, 0, len(v), *limits)
            got.pop("notes")
            want = _full_counts(v, 0, len(v), *limits)
            n += 1
            if got != want:
                differ += 1
                first = first or (what, limits, v[:120].hex(), got, want)
    # (the samples alone: 546 cases; with ../shared's captures, 2,114)
    assert n >= (2000 if SHARED.is_dir() else 500) and differ == 0, (n, differ, first)
