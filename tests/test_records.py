"""Records inside Produce and Fetch: MessageSet v0/v1 and RecordBatch v2.

Batches are built by an independent implementation (kafka-python 3.0.12's
record builders), then decoded and checked record by record. Real captures
from ../shared/captures are read with a tiny frame parser below.
"""
from __future__ import annotations

import json
import random
import struct
import zlib
from pathlib import Path

import cramjam
import pytest
import zstandard
from crc32c import crc32c

from dissectors.context import DecodeContext, Limits, Presentation
from dissectors.field import Field
from dissectors.records import decode_records, iter_records
from dissectors.values import describe_value, display_value
from tests.probes import probes

pytest.importorskip("xxhash")  # kafka-python needs it for the pre-0.10 lz4 framing
from kafka.record.default_records import DefaultRecordBatchBuilder  # noqa: E402
from kafka.record.memory_records import MemoryRecordsBuilder  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "captures"
CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
T0 = 1_700_000_000_000
MIB = 1 << 20


def build(magic: int, codec: int, n: int = 12, offset: int = 0, headers: bool = True, **producer) -> bytes:
    b = MemoryRecordsBuilder(magic, codec, 1 << 22, offset=offset, **producer)
    for i in range(n):
        hdrs = [("trace", b"t-%d" % i), ("empty", b"")] if headers and magic == 2 else None
        key = None if i == 3 else b"key-%d" % i
        value = None if i == 5 else json.dumps({"i": i, "pad": "x" * 40}).encode()
        assert b.append(T0 + i * 7, key, value, hdrs) is not None
    b.close()
    return bytes(b.buffer())


def expected(i: int, magic: int, offset: int = 0):
    key = None if i == 3 else b"key-%d" % i
    value = None if i == 5 else json.dumps({"i": i, "pad": "x" * 40}).encode()
    hdrs = [("trace", b"t-%d" % i), ("empty", b"")] if magic == 2 else []
    return offset + i, (T0 + i * 7 if magic else None), key, value, hdrs


def decode(raw: bytes, ctx: DecodeContext | None = None, start: int = 0, end: int | None = None) -> Field:
    """The records field of ``raw[start:end]``: the full decode, or with ``ctx.presentation.decode_records``
    off the lean summary `stats` reads, which is the core's (core/src/records.rs) made a
    Field here as the core's lean trees carry it."""
    ctx = ctx or DecodeContext()
    end = len(raw) if end is None else end
    if ctx.presentation.decode_records:
        return decode_records(raw, start, end, ctx)
    (records, codec, crc_ok, truncated, valid, invalid, malformed, notes,
     limits) = probes.probe_records_summary(raw, start, end, ctx.limits.max_array_len, ctx.limits.max_decompressed)
    ctx.counts.crc_valid += valid
    ctx.counts.crc_invalid += invalid
    ctx.counts.malformed += malformed
    for name in limits:
        ctx.counts.hit_limit(name)
    end = min(end, len(raw))
    return Field("records", "records", records, start, end - start, None, notes or None,
                 {"records": records, "bytes": end - start, "codec": codec, "crc_ok": crc_ok, "truncated": truncated})


MATRIX = [(m, c) for m in (0, 1, 2) for c in range(5) if not (m < 2 and c == 4)]


@pytest.mark.parametrize("magic,codec", MATRIX, ids=[f"v{m}-{CODECS[c]}" for m, c in MATRIX])
def test_kafka_python_batches(magic: int, codec: int) -> None:
    raw = build(magic, codec, offset=40)
    ctx = DecodeContext()
    f = decode(raw, ctx)
    assert f.value == 12 and not f.any_malformed()
    ex = f.extra
    assert ex["records"] == 12 and ex["bytes"] == len(raw)
    assert ex["codec"] == CODECS[codec] and ex["crc_ok"] is True and ex["truncated"] is False
    assert ex["magics"] == [magic]
    recs = iter_records(f)
    assert len(recs) == 12
    for i, r in enumerate(recs):
        off, ts, key, value, hdrs = expected(i, magic, 40)
        assert (r.offset, r.timestamp, r.key, r.value, r.headers) == (off, ts, key, value, hdrs), i
        assert r.magic == magic
    if magic == 2:
        assert ctx.counts.crc_valid == 1
        assert ex["batches"] == [{"producer_id": -1, "producer_epoch": -1, "base_sequence": -1, "record_count": 12,
                                  "base_offset": 0, "is_transactional": False, "is_control": False}]
    else:
        assert ctx.counts.crc_valid == (12 if codec == 0 else 13)  # inner messages and the wrapper
        assert ex["batches"] == []
    assert ctx.counts.crc_invalid == 0 and ctx.counts.malformed == 0


def _leaves(f: Field):
    for x in f.walk():
        if not x.children:
            yield x


def test_offsets_are_frame_relative_and_point_at_the_bytes() -> None:
    raw = build(2, 0) + build(1, 0) + build(0, 0)
    frame = b"\xaa" * 37 + raw + b"\xbb" * 5
    f = decode_records(frame, 37, 37 + len(raw), DecodeContext(), name="records")
    assert f.offset == 37 and f.length == len(raw) and f.value == 36
    checked = 0
    for leaf in _leaves(f):
        if leaf.type == "bytes" and leaf.value is not None:
            assert frame[leaf.offset:leaf.offset + leaf.length] == leaf.value
            checked += 1
        elif leaf.type in ("int64", "int32", "int16", "int8", "uint32") and leaf.name != "attributes":
            fmt = {"int64": ">q", "int32": ">i", "int16": ">h", "int8": ">b", "uint32": ">I"}[leaf.type]
            assert struct.unpack_from(fmt, frame, leaf.offset)[0] == leaf.value, leaf
            checked += 1
    assert checked > 200
    assert f.extra["magics"] == [0, 1, 2] and f.extra["codec"] == "none"


def test_v2_tree_fields() -> None:
    raw = build(2, 0, n=3)
    f = decode(raw)
    batch = f.children[0]
    assert batch.type == "RecordBatch"
    names = [c.name for c in batch.children]
    assert names == ["base_offset", "batch_length", "partition_leader_epoch", "magic", "crc", "attributes",
                     "last_offset_delta", "base_timestamp", "max_timestamp", "producer_id", "producer_epoch",
                     "base_sequence", "records_count", "records"]
    crc = batch.child("crc")
    assert crc.notes == [f"crc valid (0x{crc.value:08x})"] and crc.value == crc32c(raw[21:])
    assert batch.child("base_timestamp").notes == ["2023-11-14T22:13:20.000Z"]
    assert batch.get("max_timestamp") == T0 + 14
    attrs = batch.child("attributes")
    assert [c.name for c in attrs.children] == ["compression", "timestamp_type", "is_transactional", "is_control",
                                                "has_delete_horizon"]
    rec = batch.child("records").children[2]
    assert [c.name for c in rec.children] == ["length", "attributes", "timestamp_delta", "offset_delta", "key_length",
                                              "key", "value_length", "value", "headers_count", "headers"]
    assert rec.get("timestamp_delta") == 14
    assert rec.child("timestamp_delta").notes == [f"timestamp 2023-11-14T22:13:20.014Z ({T0 + 14})"]
    assert rec.child("offset_delta").notes == ["offset 2"]
    assert rec.child("key").notes == ["text: key-2"]
    assert rec.child("value").notes == ['json: {"i":2,"pad":"' + "x" * 40 + '"}']
    hdr = rec.child("headers").children[0]
    assert (hdr.get("key"), hdr.get("value")) == ("trace", b"t-2")
    assert json.dumps(f.to_json())  # serialisable


def test_v1_wrapper_offsets_made_absolute_and_log_append_time() -> None:
    raw = bytearray(build(1, 1, n=5))
    struct.pack_into(">q", raw, 0, 1000)  # the broker's offset for the wrapper (outside the CRC)
    f = decode(bytes(raw))
    assert [r.offset for r in iter_records(f)] == [996, 997, 998, 999, 1000]
    assert f.children[0].child("value").children[0].child("offset").notes == ["absolute offset 996"]
    # LogAppendTime on the wrapper: every inner message takes the wrapper's timestamp
    raw[17] |= 0x08
    struct.pack_into(">q", raw, 18, T0 + 99_000)
    struct.pack_into(">I", raw, 12, zlib.crc32(bytes(raw[16:])))
    ctx = DecodeContext()
    f = decode(bytes(raw), ctx)
    assert [r.timestamp for r in iter_records(f)] == [T0 + 99_000] * 5
    assert ctx.counts.crc_invalid == 0


def test_v0_inner_offsets_as_written() -> None:
    f = decode(build(0, 2, n=4, offset=70))
    assert [r.offset for r in iter_records(f)] == [70, 71, 72, 73]


def test_transactional_producer_state() -> None:
    raw = build(2, 4, n=6, transactional=True, producer_id=4242, producer_epoch=3, base_sequence=17)
    f = decode(raw)
    assert f.extra["batches"] == [{"producer_id": 4242, "producer_epoch": 3, "base_sequence": 17, "record_count": 6,
                                   "base_offset": 0, "is_transactional": True, "is_control": False}]
    assert f.children[0].child("attributes").get("is_transactional") is True
    assert "transactional" in f.children[0].notes[0]


class _ControlBuilder(DefaultRecordBatchBuilder):
    def _get_attributes(self, include_compression_type=True):
        return super()._get_attributes(include_compression_type) | self.CONTROL_MASK


@pytest.mark.parametrize("ctype,name", [(0, "ABORT"), (1, "COMMIT")])
def test_control_batch(ctype: int, name: str) -> None:
    b = _ControlBuilder(magic=2, compression_type=0, is_transactional=True, producer_id=9, producer_epoch=1,
                        base_sequence=-1, batch_size=1 << 16)
    b.append(0, T0, struct.pack(">hh", 0, ctype), struct.pack(">hi", 0, 23), [])
    raw = bytes(b.build())
    ctx = DecodeContext()
    f = decode(raw, ctx)
    assert f.value == 1 and ctx.counts.crc_valid == 1 and not f.any_malformed()
    assert f.extra["batches"][0]["is_control"] is True
    rec = f.children[0].child("records").children[0]
    key = rec.child("key")
    assert key.notes == [f"control record: {name}"]
    assert [(c.name, c.value) for c in key.children] == [("version", 0), ("type", ctype)]
    value = rec.child("value")
    assert [(c.name, c.value) for c in value.children] == [("version", 0), ("coordinator_epoch", 23)]
    assert iter_records(f)[0].is_control


def test_corrupted_crc_v2_and_legacy() -> None:
    raw = bytearray(build(2, 0, n=3))
    raw[-3] ^= 0x01
    ctx = DecodeContext()
    f = decode(bytes(raw), ctx)
    want = crc32c(bytes(raw[21:]))
    stored = struct.unpack(">I", raw[17:21])[0]
    assert f.children[0].child("crc").notes == [f"crc INVALID (0x{stored:08x}), computed 0x{want:08x}"]
    assert (ctx.counts.crc_invalid, ctx.counts.crc_valid) == (1, 0) and f.extra["crc_ok"] is False
    assert f.value == 3  # still decoded
    raw = bytearray(build(1, 0, n=3))
    raw[-1] ^= 0x40
    ctx = DecodeContext()
    f = decode(bytes(raw), ctx)
    assert (ctx.counts.crc_invalid, ctx.counts.crc_valid) == (1, 2) and f.extra["crc_ok"] is False
    last = f.children[-1]
    assert last.child("crc").notes[0].startswith(f"crc INVALID (0x{last.get('crc'):08x}), computed 0x")
    # an inner message corrupted inside a compressed wrapper (wrapper CRC recomputed)
    inner = bytearray(build(1, 0, n=3))
    inner[-1] ^= 0x40
    comp = bytes(cramjam.snappy.compress_raw(bytes(inner)))
    wrapper = struct.pack(">bbq", 1, 2, T0) + struct.pack(">i", -1) + struct.pack(">i", len(comp)) + comp
    msg = struct.pack(">qiI", 2, len(wrapper) + 4, zlib.crc32(wrapper)) + wrapper
    ctx = DecodeContext()
    f = decode(msg, ctx)
    assert f.value == 3 and (ctx.counts.crc_invalid, ctx.counts.crc_valid) == (1, 3) and f.extra["codec"] == "snappy"


def _v2_with_payload(payload: bytes, codec: int, count: int = 1) -> bytes:
    """A v2 batch header around ``payload`` (records or compressed records)."""
    body = struct.pack(">hiqqqhii", codec, count - 1, T0, T0, -1, -1, -1, count) + payload
    return struct.pack(">qiib", 0, len(body) + 9, 0, 2) + struct.pack(">I", crc32c(body)) + body


@pytest.fixture(scope="module")
def bombs() -> dict[str, bytes]:
    z = bytes(MIB)
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = c.compress(z) + c.flush(zlib.Z_FULL_FLUSH)
    gz = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + block * 1024 + c.flush() + b"\x00" * 8
    zc = zstandard.ZstdCompressor(level=1).compressobj()
    zs = b"".join([zc.compress(z) for _ in range(1024)] + [zc.flush()])
    return {"gzip": _v2_with_payload(gz, 1, 1000), "zstd": _v2_with_payload(zs, 4, 1000)}


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
def test_decompression_bomb(bombs: dict[str, bytes], codec: str) -> None:
    raw = bombs[codec]
    ctx = DecodeContext()
    f = decode(raw, ctx)
    recs = f.children[0].child("records")
    assert "decompressed size limit 67108864 hit" in recs.notes
    assert ctx.counts.limits_hit == {"max_decompressed": 1}
    assert f.value == 1000  # the batch header's count, as sent
    ctx = DecodeContext(Limits(max_decompressed=MIB))
    f = decode(raw, ctx)
    assert f"decompressed size limit {MIB} hit" in f.children[0].child("records").notes


def test_legacy_bomb_and_nesting_bounded() -> None:
    # a v1 wrapper whose inner set is itself a wrapper, nested 5 deep
    payload = build(1, 0, n=2)
    for _ in range(5):
        comp = zlib.compress(payload)
        wrapper = struct.pack(">bbq", 1, 1, T0) + struct.pack(">i", -1) + struct.pack(">i", len(comp)) + comp
        payload = struct.pack(">qiI", 0, len(wrapper) + 4, zlib.crc32(wrapper)) + wrapper
    ctx = DecodeContext()
    f = decode(payload, ctx)
    assert any("nested more than 2 deep" in n for x in f.walk() for n in x.notes or ())
    assert ctx.counts.malformed >= 1


def _batches() -> tuple[bytes, list[int], list[int]]:
    parts = [build(2, 0, n=3), build(2, 1, n=4), build(2, 3, n=2, headers=False), build(2, 4, n=5)]
    ends, counts, pos = [], [], 0
    for p, n in zip(parts, (3, 4, 2, 5), strict=True):
        pos += len(p)
        ends.append(pos)
        counts.append(n)
    return b"".join(parts), ends, counts


def test_batch_cut_at_every_byte() -> None:
    raw, ends, counts = _batches()
    for k in range(len(raw) + 1):
        ctx = DecodeContext()
        f = decode_records(raw, 0, k, ctx)
        complete = [i for i, e in enumerate(ends) if e <= k]
        assert f.value == sum(counts[i] for i in complete), k
        at_boundary = k == 0 or k in ends
        assert f.extra["truncated"] is (not at_boundary), k
        assert ctx.counts.malformed == 0 and not f.any_malformed(), k
        if not at_boundary:
            last = f.children[-1]
            assert last.name == "truncated_batch"
            assert last.notes[0].startswith("partial batch cut by max_bytes (")
            start = ends[len(complete) - 1] if complete else 0
            if k - start >= 12:
                whole = (ends[len(complete)] - start)
                assert last.notes == [f"partial batch cut by max_bytes ({k - start} of {whole} bytes)"]


def test_legacy_cut_at_every_byte() -> None:
    raw = build(1, 0, n=3) + build(0, 1, n=3)
    first = len(build(1, 0, n=1))
    for k in range(len(raw) + 1):
        f = decode_records(raw, 0, k, DecodeContext())
        assert not f.any_malformed(), k
        assert f.value == min(k // first, 3) + (3 if k == len(raw) else 0), k


def test_random_corruption_never_raises() -> None:
    raw, _ends, _counts = _batches()
    raw += build(1, 2, n=3) + build(0, 3, n=3)
    rng = random.Random(7)
    for _ in range(400):
        b = bytearray(raw)
        for _ in range(rng.randint(1, 6)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        ctx = DecodeContext()
        f = decode(bytes(b), ctx)
        assert isinstance(f.value, int)
        json.dumps(f.to_json())


def test_null_and_empty_records() -> None:
    f = decode_records(b"\xff\xff\xff\xff", 4, 4, DecodeContext(), null=True)
    assert f.value is None and f.extra["records"] == 0
    f = decode_records(b"", 0, 0, DecodeContext())
    assert f.value == 0 and f.extra["truncated"] is False and f.children is None


def test_mixed_codecs_and_malformed_count() -> None:
    raw = build(2, 1, n=2) + build(2, 2, n=2)
    f = decode(raw)
    assert f.extra["codec"] == "mixed" and f.value == 4
    # records_count lies: more records claimed than present
    good = build(2, 0, n=2)
    bad = bytearray(good)
    struct.pack_into(">i", bad, 57, 3)
    struct.pack_into(">I", bad, 17, crc32c(bytes(bad[21:])))
    ctx = DecodeContext()
    f = decode(bytes(bad), ctx)
    assert ctx.counts.malformed == 1 and f.children[0].child("records").is_malformed
    # unknown magic stops the set
    bad = bytearray(good)
    bad[16] = 7
    ctx = DecodeContext()
    f = decode(bytes(bad), ctx)
    assert f.value == 0 and ctx.counts.malformed == 1 and "malformed: unknown magic 7" in f.children[0].notes


def test_raw_snappy_and_xerial_in_batches() -> None:
    recs = build(2, 0, n=4)[61:]
    for payload, info in ((bytes(cramjam.snappy.compress_raw(recs)), None),
                          (struct.pack(">8sii", b"\x82SNAPPY\x00", 1, 1)
                           + struct.pack(">i", len(c := bytes(cramjam.snappy.compress_raw(recs)))) + c,
                           "snappy xerial framing")):
        f = decode(_v2_with_payload(payload, 2, 4))
        assert f.value == 4 and not f.any_malformed()
        notes = f.children[0].child("records").notes
        assert (info in notes) if info else len(notes) == 1
        assert [r.key for r in iter_records(f)] == [b"key-0", b"key-1", b"key-2", None]


def test_old_lz4_framing_in_magic0() -> None:
    f = decode(build(0, 3, n=4))
    value = f.children[0].child("value")
    assert any("pre-0.10" in n for n in value.notes)
    f = decode(build(1, 3, n=4))
    assert not any("pre-0.10" in n for n in f.children[0].child("value").notes)


def test_decode_records_off_counts_only() -> None:
    raw = build(2, 1, n=7) + build(2, 0, n=3)
    ctx = DecodeContext(presentation=Presentation(decode_records=False))
    f = decode(raw, ctx)
    # the lean summary: one Field, no children, what `stats` reads in extra
    assert f.value == 10 and f.children is None and f.notes is None
    assert f.extra == {"records": 10, "bytes": len(raw), "codec": "mixed", "crc_ok": True, "truncated": False}
    assert (ctx.counts.crc_valid, ctx.counts.crc_invalid, ctx.counts.malformed) == (2, 0, 0)


def test_values() -> None:
    assert describe_value(b"hello") == ["text: hello"]
    assert describe_value(b'{"a": [1, 2]}') == ['json: {"a":[1,2]}']
    assert describe_value(b"\x00\x00\x00\x00\x2a\x02\x06abc") == ["schema registry id 42", "binary, 5 bytes"]
    assert describe_value(b"\x00\x00\x00\x01\x00" + b'{"x":1}') == ["schema registry id 256", 'json: {"x":1}']
    assert describe_value(b"\xff\xfe\x01") == ["binary, 3 bytes"]
    assert describe_value(b"") == ["empty"] and describe_value(None) == ["null"]
    long = describe_value(b"y" * 1000)[0]
    assert len(long) == len("text: ") + 200
    assert display_value(b'{"a":1}') == '{\n  "a": 1\n}'
    assert display_value(b"abcdef", max_bytes=3) == "abc \u2026 (3 more bytes)"
    assert display_value(b"\x01\x02\x03", max_bytes=2) == "0102 \u2026 (1 more bytes)"
    assert display_value(b"\x00\x00\x00\x00\x07hi") == "[schema registry id 7] hi"


def test_batch_of_1000_records() -> None:
    b = MemoryRecordsBuilder(2, 0, 1 << 24)
    for i in range(1000):
        b.append(T0 + i, b"key-%d" % i, b"value %d " % i + b"v" * 80, [("h", b"1")])
    b.close()
    f = decode(bytes(b.buffer()))
    assert f.value == 1000
    recs = f.children[0].child("records")
    assert recs is not None and len(recs.children) == 1000
    last = recs.children[999]
    assert (last.get("offset_delta"), last.get("key")) == (999, b"key-999")


# -- real captures ---------------------------------------------------------------
def _pcap_streams(path: Path, broker_ports: set[int]) -> dict[tuple, bytes]:
    """Per-direction reassembled TCP payloads, keyed by (client, server, to_broker)."""
    from scapy.utils import RawPcapNgReader, RawPcapReader

    reader = RawPcapNgReader if path.suffix == ".pcapng" else RawPcapReader
    segs: dict[tuple, dict[int, bytes]] = {}
    with reader(str(path)) as r:
        linktype = getattr(r, "linktype", 1)
        for pkt, _meta in r:
            data = bytes(pkt)
            if linktype == 113:
                p, etype = 16, struct.unpack_from(">H", data, 14)[0]
            else:
                p, etype = 14, struct.unpack_from(">H", data, 12)[0]
            if etype == 0x0800:
                ihl = (data[p] & 0x0F) * 4
                proto, src, dst = data[p + 9], data[p + 12:p + 16], data[p + 16:p + 20]
                total = struct.unpack_from(">H", data, p + 2)[0]
                end, p = p + total, p + ihl
            elif etype == 0x86DD:
                proto, src, dst = data[p + 6], data[p + 8:p + 24], data[p + 24:p + 40]
                end, p = p + 40 + struct.unpack_from(">H", data, p + 4)[0], p + 40
            else:
                continue
            if proto != 6:
                continue
            sport, dport, seq = struct.unpack_from(">HHI", data, p)
            payload = data[p + (data[p + 12] >> 4) * 4:end]
            if payload:
                segs.setdefault((src, sport, dst, dport), {})[seq] = payload
    out = {}
    for (src, sport, dst, dport), by_seq in segs.items():
        buf, nxt = bytearray(), None
        for seq in sorted(by_seq):
            chunk = by_seq[seq]
            if nxt is not None and seq < nxt:
                chunk = chunk[nxt - seq:]
            buf += chunk
            nxt = seq + len(by_seq[seq]) if nxt is None or seq + len(by_seq[seq]) > nxt else nxt
        to_broker = dport in broker_ports
        key = ((src, sport), (dst, dport)) if to_broker else ((dst, dport), (src, sport))
        out[key + (to_broker,)] = bytes(buf)
    return out


def _frames(buf: bytes):
    p = 0
    while p + 4 <= len(buf):
        (n,) = struct.unpack_from(">i", buf, p)
        if n < 0 or p + 4 + n > len(buf):
            return
        yield buf[p + 4:p + 4 + n]
        p += 4 + n


class _R:
    """A cursor over one frame for the tiny Produce/Fetch parsers below."""

    def __init__(self, b: bytes, p: int = 0) -> None:
        self.b, self.p = b, p

    def take(self, fmt: str):
        v = struct.unpack_from(fmt, self.b, self.p)[0]
        self.p += struct.calcsize(fmt)
        return v

    def uvarint(self) -> int:
        v = s = 0
        while True:
            x = self.b[self.p]
            self.p += 1
            v |= (x & 0x7F) << s
            if x < 0x80:
                return v
            s += 7

    def string(self, flexible: bool) -> None:
        n = self.uvarint() - 1 if flexible else self.take(">h")
        self.p += max(n, 0)

    def array_len(self, flexible: bool) -> int:
        return self.uvarint() - 1 if flexible else self.take(">i")

    def tags(self, flexible: bool) -> None:
        if flexible:
            for _ in range(self.uvarint()):
                self.uvarint()
                self.p += self.uvarint()

    def records(self, flexible: bool) -> tuple[int, int]:
        n = self.uvarint() - 1 if flexible else self.take(">i")
        start = self.p
        self.p += max(n, 0)
        return start, start + max(n, 0)


def _produce_records(frame: bytes):
    r = _R(frame)
    r.take(">h")
    version = r.take(">h")
    r.take(">i")
    r.string(False)
    flex = version >= 9
    r.tags(flex)
    if version >= 3:
        r.string(flex)
    r.take(">h")
    r.take(">i")
    for _ in range(r.array_len(flex)):
        r.string(flex)
        for _ in range(r.array_len(flex)):
            r.take(">i")
            yield r.records(flex)
            r.tags(flex)
        r.tags(flex)


def _fetch_records(frame: bytes, version: int):
    r = _R(frame, 4)
    flex = version >= 12
    r.tags(flex)
    if version >= 1:
        r.take(">i")
    if version >= 7:
        r.take(">h")
        r.take(">i")
    for _ in range(r.array_len(flex)):
        if version >= 13:
            r.p += 16
        else:
            r.string(flex)
        for _ in range(r.array_len(flex)):
            r.take(">i")
            r.take(">h")
            r.take(">q")
            if version >= 4:
                r.take(">q")
                if version >= 5:
                    r.take(">q")
                for _ in range(r.array_len(flex)):
                    r.p += 16
                    r.tags(flex)
            if version >= 11:
                r.take(">i")
            yield r.records(flex)
            r.tags(flex)
        r.tags(flex)


def _capture(name: str):
    path = SHARED / name
    if not path.exists():
        pytest.skip(f"{path} is absent (../shared/captures)")
    truth = json.loads(path.with_suffix(".tshark.json").read_text())
    ports = set(truth.get("broker_ports") or truth.get("decode_as_ports") or [9092])
    streams = _pcap_streams(path, ports)
    produce, fetch = [], []
    for (client, server, to_broker), buf in streams.items():
        if not to_broker:
            continue
        fetch_versions = {}
        for fr in _frames(buf):
            api_key, version, corr = struct.unpack_from(">hhi", fr)
            if api_key == 0:
                produce += [decode_records(fr, s, e, DecodeContext()) for s, e in _produce_records(fr)]
            elif api_key == 1:
                fetch_versions[corr] = version
        for fr in _frames(streams.get((client, server, False), b"")):
            v = fetch_versions.get(struct.unpack_from(">i", fr)[0])
            if v is not None:
                fetch += [decode_records(fr, s, e, DecodeContext()) for s, e in _fetch_records(fr, v)]
    return truth, produce, fetch


def _batch_codecs(fields: list[Field]) -> dict[str, int]:
    out: dict[str, int] = {}
    for f in fields:
        for c in f.children or ():
            if c.type == "RecordBatch":
                codec = c.child("attributes").child("compression").notes[0]
                out[codec] = out.get(codec, 0) + 1
    return out


@pytest.mark.shared
@pytest.mark.parametrize("name,codec", [
    ("comp_gzip_kp3_tansu.pcap", "gzip"),
    ("comp_lz4_kafkajs_tansu.pcap", "lz4"),
    ("comp_snappy_aiokafka_tansu.pcap", "snappy"),
    ("comp_zstd_rdkafka_tansu.pcap", "zstd"),
    ("comp_none_kafkajs_tansu.pcap", "none"),
    ("comp_gzip_rdkafka_tansu.pcap", "gzip"),
    ("comp_lz4_rdkafka_tansu.pcap", "lz4"),
    ("comp_snappy_rdkafka_tansu.pcap", "snappy"),
])
def test_capture_counts(name: str, codec: str) -> None:
    truth, produce, fetch = _capture(name)
    assert sum(f.value for f in produce) == 60
    assert all(f.extra["crc_ok"] and not f.any_malformed() for f in produce + fetch)
    assert {f.extra["codec"] for f in produce if f.value} == {codec}
    assert sum(f.value or 0 for f in fetch) == 60
    tshark = truth.get("record_batches_by_codec") or {}
    if tshark and "rdkafka" not in name:  # tshark dissects these Produce/Fetch versions
        ours = _batch_codecs(produce + fetch)
        assert ours == tshark
    for f in produce:
        for r in iter_records(f):
            assert r.key and r.value is not None and r.timestamp and r.timestamp > T0


@pytest.mark.shared
@pytest.mark.parametrize("name,magic,gzip_n,none_n,fetched", [
    ("old_v0_kp2_082_mock.pcap", 0, 30, 20, 20),
    ("old_v1_kp2_0101_mock.pcap", 1, 20, 20, 20),
    ("old_v0_rdkafka_082_tansu.pcap", 0, 20, 20, None),
])
def test_capture_message_sets(name: str, magic: int, gzip_n: int, none_n: int, fetched: int | None) -> None:
    # the workload logs (MANIFEST.md) give the message counts: a gzip set the broker
    # refused, then an uncompressed one it accepted and served back by Fetch
    _truth, produce, fetch = _capture(name)
    assert sorted({m for f in produce for m in f.extra["magics"]}) == [magic]
    by_codec: dict[str, int] = {}
    for f in produce:
        by_codec[f.extra["codec"]] = by_codec.get(f.extra["codec"], 0) + f.value
    assert by_codec == {"gzip": gzip_n, "none": none_n}
    assert all(f.extra["crc_ok"] and not f.any_malformed() for f in produce + fetch)
    inner = [r for f in produce if f.extra["codec"] == "gzip" for r in iter_records(f)]
    assert len(inner) == gzip_n and all(r.magic == magic and r.value for r in inner)
    if fetched is not None:
        got = [r for f in fetch for r in iter_records(f)]
        assert len(got) == fetched and all(r.magic == magic for r in got)
        offsets = [r.offset for r in got]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)


@pytest.mark.shared
def test_capture_transactions_and_control_batches() -> None:
    _truth, produce, fetch = _capture("txn_rdkafka_tansu.pcap")
    txn = [b for f in produce for b in f.extra["batches"] if b["is_transactional"]]
    assert txn and all(b["producer_id"] >= 0 and b["producer_epoch"] >= 0 and b["base_sequence"] >= 0 for b in txn)
    markers = [x.notes[0] for f in fetch for x in f.walk()
               if x.name == "key" and x.notes and x.notes[0].startswith("control record")]
    # one committed and one aborted transaction over 3 partitions
    assert sorted(markers) == ["control record: ABORT"] * 3 + ["control record: COMMIT"] * 3
    assert sum(b["is_control"] for f in fetch for b in f.extra["batches"]) == 6


def test_limit_cut_is_a_note_not_malformed() -> None:
    raw = build(2, 1, n=200)
    ctx = DecodeContext(Limits(max_decompressed=5000))
    f = decode(raw, ctx)
    recs = f.children[0].child("records")
    assert "decompressed size limit 5000 hit" in recs.notes
    assert recs.children[-1].name == "truncated_record" and ctx.counts.malformed == 0
    assert 0 < len(iter_records(f)) < 200 and f.value == 200 and ctx.counts.limits_hit == {"max_decompressed": 1}
    raw = build(1, 1, n=200)
    ctx = DecodeContext(Limits(max_decompressed=5000))
    f = decode(raw, ctx)
    value = f.children[0].child("value")
    assert "decompressed size limit 5000 hit" in value.notes and ctx.counts.malformed == 0
    assert value.children[-1].name == "truncated_message"
    assert 0 < len(iter_records(f)) < 200 and f.value == len(iter_records(f))


def test_truncated_batch_shows_its_header() -> None:
    raw = build(2, 0, n=5)
    f = decode_records(raw, 0, 70, DecodeContext())
    t = f.children[0]
    assert t.name == "truncated_batch" and f.value == 0 and not f.any_malformed()
    assert t.notes == [f"partial batch cut by max_bytes (70 of {len(raw)} bytes)"]
    assert t.get("records_count") == 5 and t.get("magic") == 2 and t.get("batch_length") == len(raw) - 12
    f = decode_records(raw, 0, 14, DecodeContext())
    assert [c.name for c in f.children[0].children] == ["offset", "size"]
    f = decode_records(raw, 0, 9, DecodeContext())
    assert f.children[0].notes == ["partial batch cut by max_bytes (9 bytes, size not yet readable)"]


LEAN_KEYS = ("records", "bytes", "codec", "crc_ok", "truncated")   # the lean summary's extra


def _lean_vs_full(raw: bytes, max_decompressed: int = 64 * MIB) -> tuple:
    """(summary, counters) of the full and the lean decode of the same bytes."""
    out = []
    for on in (True, False):
        ctx = DecodeContext(Limits(max_decompressed=max_decompressed), Presentation(decode_records=on))
        f = decode(raw, ctx)
        ex = {k: f.extra[k] for k in LEAN_KEYS}
        c = ctx.counts
        out.append((f.value, ex, c.malformed, c.crc_valid, c.crc_invalid, dict(c.limits_hit)))
    return out[0], out[1]


@pytest.mark.parametrize("magic,codec", MATRIX, ids=[f"v{m}-{CODECS[c]}" for m, c in MATRIX])
def test_lean_summary_same_as_full(magic: int, codec: int) -> None:
    # records decoding off (stats): counts, codecs, CRC verdicts, limits and malformed
    # counts as the full decode, on clean entries and (magic 0/1, which the lean decode
    # walks and decompresses as the full one) cut, bit-flipped and size-limited ones
    raw = build(magic, codec, n=9) + build(magic, 0, n=3, offset=9)
    full, lean = _lean_vs_full(raw)
    assert full == lean and lean[0] == 12 and lean[3] == (2 if magic == 2 else (13 if codec else 12))
    if magic == 2:      # the lean v2 batch reads no record (nor decompresses): damage below is not seen
        return
    rng = random.Random(magic * 10 + codec)
    for _ in range(60):
        bad = bytearray(raw)
        for _k in range(rng.randint(1, 3)):
            bad[rng.randrange(len(bad))] ^= 1 << rng.randrange(8)
        cut = rng.choice([len(bad), rng.randrange(1, len(bad) + 1)])
        full, lean = _lean_vs_full(bytes(bad[:cut]))
        # (damaged lz4: liblz4 and the core's lz4_flex stop at other places, each seeing
        # damage: tests/test_core_records.py's _lz4_difference lists how)
        assert full == lean or (codec == 3 and _damaged(full) and _damaged(lean)), bytes(bad[:cut]).hex()
    full, lean = _lean_vs_full(raw, max_decompressed=200)
    assert full == lean


def _damaged(summary: tuple) -> bool:
    """A summary of _lean_vs_full counts damage: malformed, a CRC invalid or a limit hit."""
    _value, _extra, malformed, _valid, invalid, limits = summary
    return bool(malformed or invalid or limits)


def test_lean_legacy_counts_inner_messages() -> None:
    ctx = DecodeContext(presentation=Presentation(decode_records=False))
    f = decode(build(1, 1, n=4) + build(0, 0, n=2, offset=4), ctx)
    assert f.value == 6 and f.children is None and f.extra["codec"] == "mixed"
    assert ctx.counts.crc_valid == 1 + 4 + 1 + 1 and ctx.counts.malformed == 0


def test_lean_marks_on_the_records_field() -> None:
    # bad entries are counted (and noted on the one Field) as the full decode counts them:
    # its value, its malformed marks, its CRC verdicts and limits are the full decode's
    a, b = build(2, 0, n=7), build(2, 1, n=3, offset=7)

    def lean(raw: bytes, **kw) -> tuple[Field, DecodeContext]:
        ctx = DecodeContext(Limits(**kw), Presentation(decode_records=False))
        f = decode(raw, ctx)
        full_ctx = DecodeContext(Limits(**kw))
        full = decode(raw, full_ctx)
        c, fc = ctx.counts, full_ctx.counts
        assert (f.value, c.malformed, c.crc_valid, c.crc_invalid, c.limits_hit) == \
            (full.value, fc.malformed, fc.crc_valid, fc.crc_invalid, fc.limits_hit)
        return f, ctx

    bad_crc = bytearray(a)
    bad_crc[-1] ^= 1
    f, ctx = lean(bytes(bad_crc) + b)
    assert f.value == 10 and f.extra["crc_ok"] is False and (ctx.counts.crc_valid, ctx.counts.crc_invalid) == (1, 1)
    stored = struct.unpack(">I", bad_crc[17:21])[0]
    assert f.notes[0].startswith(f"[0]: crc INVALID (0x{stored:08x}), computed 0x") and ctx.counts.malformed == 0
    f, ctx = lean(a + b + b[:30])
    assert f.value == 10 and f.extra["truncated"] is True and ctx.counts.malformed == 0 and f.notes is None
    # a records_count over the limit: the records up to the limit are walked and counted,
    # the bytes after them marked
    f, ctx = lean(a + b, max_array_len=5)
    assert f.value == 8 and ctx.counts.limits_hit == {"max_array_len": 1}
    assert f.notes[0] == "malformed: [0]: records_count 7 over the limit 5" and ctx.counts.malformed == 2
    assert f.notes[1].startswith("malformed: [0]: ") and f.notes[1].endswith(" bytes after the last record")
    short = bytearray(a)
    struct.pack_into(">i", short, 8, 40)
    f, ctx = lean(bytes(short[:52]) + b)
    assert f.value == 3 and ctx.counts.malformed == 1 and f.extra["codec"] == "gzip"
    assert f.notes == ["malformed: [0]: batch_length 40 shorter than the 49-byte v2 header"]
    unknown = bytearray(b)
    unknown[16] = 3
    f, ctx = lean(a + bytes(unknown))
    assert f.value == 7 and f.notes == ["malformed: [1]: unknown magic 3"] and ctx.counts.crc_valid == 1
    neg = bytearray(b)
    struct.pack_into(">i", neg, 8, -2)
    f, ctx = lean(a + bytes(neg))
    assert f.value == 7 and f.notes == ["malformed: [1]: negative entry size -2"]
    assert f.extra["truncated"] is False and ctx.counts.malformed == 1
    many = bytearray(a)
    struct.pack_into(">i", many, 57, 1000)
    f, ctx = lean(bytes(many))
    assert f.value == 7 and ctx.counts.malformed == 1 and "records_count 1000 exceeds what" in f.notes[-1]
    # bad bytes inside a record of a batch whose CRC is good (a producer's bug): marked, as
    # `read` marks them (the summary used to stop at the batch header)
    inner = bytearray(a)
    inner[61] = 0x02                          # the first record's length: 1, too short for a record
    struct.pack_into(">I", inner, 17, crc32c(bytes(inner[21:])))
    f, ctx = lean(bytes(inner))
    assert ctx.counts.crc_valid == 1 and ctx.counts.malformed == 2
    assert f.notes == ["malformed: [0]: record [0]: record length 1 does not fit the "
                       f"{len(a) - 62} bytes left", "malformed: [0]: records_count 7 but 0 records present"]
