"""The generated digest decoders give exactly what the closure plans give.

``dissectors.digest`` decodes a body with a generated function and hands any message it
cannot finish to the closure plan, which stays the definition of the digest. These tests
run both over the same messages (every frame of the samples and ../shared captures, those
frames truncated and with bytes overwritten, corrupted length fields, and schema-shaped
messages built for every API and version) and compare the trees Field by Field (names,
types, values, offsets, lengths, notes, extra) and the DecodeContext counters.
"""
from __future__ import annotations

import functools
import random
import struct
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyzer.pipeline import Options, Run
from dissectors import digest, kafka
from dissectors.context import DecodeContext
from dissectors.field import Field
from dissectors.schema import APIS, FieldDef, in_range, is_flexible
from tests.conftest import SAMPLES, SHARED_CAPTURES, shared_captures
from tests.pcapgen import uvarint

# ("q", frame, header_len) or ("s", frame, api_key, api_version): the digest's own arguments
Call = tuple


def dump(f: Field) -> tuple:
    return (f.name, f.type, repr(f.value), f.offset, f.length, tuple(f.notes or ()), repr(f.extra),
            None if f.children is None else tuple(dump(c) for c in f.children))


def counters(ctx: DecodeContext) -> tuple:
    return (ctx.malformed, ctx.crc_valid, ctx.crc_invalid, ctx.trailing, dict(ctx.limits_hit),
            dict(ctx.topic_names))


def digest_all(calls: list[Call], generated: bool, decode_records: bool = False) -> list[tuple]:
    """(tree, ctx counters after it, fallbacks it took) per call, one context for all."""
    digest._set_generated(generated)
    try:
        ctx = DecodeContext(decode_records=decode_records)
        out = []
        for c in calls:
            before = digest._stats.fallbacks
            if c[0] == "q":
                tree = digest.digest_request(c[1], c[2], ctx)
            else:
                tree = digest.digest_response(c[1], c[2], c[3], ctx)
            out.append((dump(tree), counters(ctx), digest._stats.fallbacks - before))
            # the codes the root carries are those a walk of the tree finds
            walked: list[str] = []
            kafka._collect_errors((tree,), walked)
            assert kafka.error_codes(tree) == walked
        return out
    finally:
        digest._set_generated(True)


def assert_same(calls: list[Call], decode_records: bool = False) -> list[tuple]:
    gen = digest_all(calls, True, decode_records)
    plan = digest_all(calls, False, decode_records)
    for c, g, p in zip(calls, gen, plan, strict=True):
        assert g[:2] == p[:2], f"generated and plan differ on {c[0]} {c[2:]} {c[1].hex()}"
    return gen


def is_probe(c: Call) -> bool:
    """An ApiVersions response that starts with UNSUPPORTED_VERSION: the digest tries the
    asked version first, which fails (and falls back) when the answer is in the v0 layout."""
    return c[0] == "s" and c[2] == 18


# -- frames of real captures -----------------------------------------------------------------

def recorded_calls(paths: list[str]) -> list[Call]:
    calls: list[Call] = []
    req, resp = digest.digest_request, digest.digest_response

    def rq(data: bytes, header_len: int, ctx: DecodeContext) -> Field:
        calls.append(("q", bytes(data), header_len))
        return req(data, header_len, ctx)

    def rs(data: bytes, api_key: int, api_version: int, ctx: DecodeContext) -> Field:
        calls.append(("s", bytes(data), api_key, api_version))
        return resp(data, api_key, api_version, ctx)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(digest, "digest_request", rq)
        mp.setattr(digest, "digest_response", rs)
        for path in paths:
            for _ex in Run(path, Options(decode="lite"), DecodeContext()):
                pass
    return calls


@functools.lru_cache(maxsize=1)
def capture_calls() -> tuple[Call, ...]:
    paths = sorted(str(p) for p in SAMPLES.glob("*.pcap*"))
    if SHARED_CAPTURES.is_dir():
        paths += sorted(str(p) for p in SHARED_CAPTURES.rglob("*.pcap*"))
    return tuple(recorded_calls(paths))


def test_every_capture_frame_same_as_plan() -> None:
    shared_captures()       # its counts are those of the shared captures: skips without them
    calls = list(capture_calls())
    assert len(calls) > 500
    for decode_records in (False, True):
        gen = assert_same(calls, decode_records)
        # the generated code decodes well-formed messages itself: it falls back only where
        # the plan finds bad bytes
        plan_bad = [("malformed_at" in repr(p[0])) for p in digest_all(calls, False, decode_records)]
        unexpected = [c[:1] + c[2:] for c, g, bad in zip(calls, gen, plan_bad, strict=True)
                      if g[2] and not bad and not is_probe(c)]
        assert not unexpected


def damaged(c: Call) -> Iterator[Call]:
    """The frame cut short at about 40 places, and with single bytes set to 0xff / 0x7f."""
    frame = c[1]
    n = len(frame)
    for k in range(0, n, max(1, n // 40)):
        yield (c[0], frame[:k], *c[2:])
    for k in range(0, min(n, 600), 5):
        b = bytearray(frame)
        b[k] = 0xFF if k % 2 else 0x7F
        yield (c[0], bytes(b), *c[2:])


def test_damaged_capture_frames_same_as_plan() -> None:
    shared_captures()       # its counts are those of the shared captures: skips without them
    # up to three frames of each (direction, API, version): the others add little
    seen: dict[tuple, int] = {}
    picked = []
    for c in capture_calls():
        k = (c[0], c[2] if c[0] == "s" else c[1][:4], c[-1])
        if seen.get(k, 0) < 3:
            seen[k] = seen.get(k, 0) + 1
            picked.append(c)
    calls = [d for c in picked for d in damaged(c)]
    assert len(calls) > 20_000
    gen = assert_same(calls)
    assert sum(g[2] for g in gen) > 10_000       # the fallback path is exercised


@settings(max_examples=200, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_corrupted_bytes_same_as_plan(data: st.DataObject) -> None:
    calls = capture_calls()
    c = data.draw(st.sampled_from(calls))
    frame = bytearray(c[1])
    for _ in range(data.draw(st.integers(1, 3))):
        off = data.draw(st.integers(0, max(0, len(frame) - 1)))
        pat = data.draw(st.sampled_from([b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\x80\x80\x80\x80\x08",
                                         b"\x00\x00", b"\x01", b"\xfe", b"\x00\x00\x00\x05"])
                        | st.binary(min_size=1, max_size=6))
        frame[off:off + len(pat)] = pat
    assert_same([(c[0], bytes(frame[:len(c[1])]), *c[2:])], decode_records=data.draw(st.booleans()))


# -- schema-shaped messages for every API and version ---------------------------------------

_FIXED_SIZE = {"int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint16": 2, "uint32": 4, "float64": 8,
               "bool": 1, "uuid": 16}


class Encoder:
    """A valid message of one API version from its FieldDefs, with random content."""

    def __init__(self, version: int, flexible: bool, rng: random.Random) -> None:
        self.version, self.flexible, self.rng = version, flexible, rng

    def sized(self, payload: bytes | None, wide: bool) -> bytes:
        if self.flexible:
            return uvarint(0 if payload is None else len(payload) + 1) + (payload or b"")
        if payload is None:
            return b"\xff\xff\xff\xff" if wide else b"\xff\xff"
        return struct.pack(">i" if wide else ">h", len(payload)) + payload

    def value(self, typ: str, name: str = "") -> bytes:
        rng = self.rng
        if typ in _FIXED_SIZE:
            if typ == "bool":
                return bytes([rng.randint(0, 1)])
            if typ == "int16" and "error" in name:
                return struct.pack(">h", rng.choice([0, 0, 3, 6, 87]))
            return bytes(rng.getrandbits(8) for _ in range(_FIXED_SIZE[typ]))
        if typ in ("varint", "varlong"):
            return uvarint(rng.randint(0, 1000))
        if typ == "string":
            return self.sized(None if rng.random() < 0.1 else
                              "".join(rng.choice("abcxyz-é") for _ in range(rng.randint(0, 12))).encode(), False)
        if typ in ("bytes", "records"):
            return self.sized(None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 20)), True)
        raise AssertionError(typ)

    def field(self, fd: FieldDef) -> bytes:
        rng = self.rng
        if fd.type == "struct":
            if in_range(self.version, fd.nullable):
                if rng.random() < 0.3:
                    return b"\xff"
                return b"\x01" + self.struct(fd.fields)
            return self.struct(fd.fields)
        if fd.type == "array":
            n = -1 if rng.random() < 0.1 else rng.randint(0, 3)
            head = (uvarint(n + 1) if self.flexible else struct.pack(">i", n))
            el = fd.element or "struct"
            return head + b"".join(self.struct(fd.fields) if el == "struct" else self.value(el)
                                   for _ in range(max(n, 0)))
        return self.value(fd.type, fd.name)

    def struct(self, fields: tuple[FieldDef, ...]) -> bytes:
        v, flexible = self.version, self.flexible
        out = b""
        tagged: list[tuple[int, bytes]] = []
        for fd in fields:
            if flexible and fd.tag is not None and (fd.tagged is None or in_range(v, fd.tagged)):
                if (fd.tagged is not None or in_range(v, fd.versions)) and self.rng.random() < 0.5:
                    tagged.append((fd.tag, self.field(fd)))
                continue
            if not in_range(v, fd.versions) or (fd.tag is not None and not flexible):
                continue
            out += self.field(fd)
        if flexible:
            if self.rng.random() < 0.2:
                tagged.append((90 + self.rng.randint(0, 9), self.rng.randbytes(self.rng.randint(0, 5))))
            tagged.sort()
            out += uvarint(len(tagged)) + b"".join(uvarint(t) + uvarint(len(p)) + p for t, p in tagged)
        return out


def schema_calls(seeds: int) -> list[Call]:
    calls: list[Call] = []
    for api in sorted(APIS.values(), key=lambda a: a.key):
        for version in range(api.min_version, api.max_version + 1):
            flexible = is_flexible(api, version)
            for seed in range(seeds):
                rng = random.Random(f"{api.key}/{version}/{seed}")
                enc = Encoder(version, flexible, rng)
                cid = b"\x00\x03cli" + (b"\x00" if flexible else b"")
                head = struct.pack(">hhi", api.key, version, 7) + cid
                calls.append(("q", head + enc.struct(api.request), len(head)))
                rhead = struct.pack(">i", 7) + (b"\x00" if flexible and api.key != 18 else b"")
                calls.append(("s", rhead + enc.struct(api.response), api.key, version))
    return calls


def test_schema_shaped_messages_of_every_api_version() -> None:
    calls = schema_calls(4)
    assert len(calls) > 2500
    gen = assert_same(calls, decode_records=True)
    plan = digest_all(calls, False, True)
    # well-formed: the plan decodes them to the end, and the generated code did it alone
    assert all("malformed_at" not in repr(p[0]) for c, p in zip(calls, plan, strict=True) if not is_probe(c))
    assert not [c[:1] + c[2:] for c, g in zip(calls, gen, strict=True) if g[2] and not is_probe(c)]
    # and they keep what the digest keeps: some error codes, names, indexes are in there
    kept = {n for g in gen for n in _names(g[0])}
    assert {"error_code", "throttle_time_ms", "topic_id", "partition_index", "tagged_fields"} <= kept


def _names(d: tuple) -> Iterator[str]:
    yield d[0]
    for c in d[7] or ():
        yield from _names(c)


def test_schema_shaped_messages_damaged() -> None:
    calls = [d for c in schema_calls(1) for d in damaged(c)]
    gen = assert_same(calls)
    assert sum(g[2] for g in gen) > 1000


def test_array_limit_and_trailing_counted_once() -> None:
    # Metadata v12 response whose topics array declares 5 elements with a limit of 2
    frame = struct.pack(">i", 7) + b"\x00" + struct.pack(">i", 0) + b"\x06" + b"\x00" * 40
    ctx = DecodeContext(max_array_len=2)
    tree = digest.digest_response(frame, 3, 12, ctx)
    assert ctx.limits_hit == {"max_array_len": 1} and ctx.malformed == 1
    assert tree.child("body").extra == {"malformed_at": 9}
    # a well-formed Heartbeat v0 response followed by junk: one trailing count, no malformed
    ctx = DecodeContext()
    tree = digest.digest_response(struct.pack(">ih", 7, 0) + b"junk", 12, 0, ctx)
    assert (ctx.trailing, ctx.malformed) == (1, 0)
    body = tree.child("body")
    assert body.length == 6 and body.children == []      # a zero error code is not kept


def test_records_counters_not_doubled_on_fallback() -> None:
    # flexible Produce requests cut right after their first records field: the generated
    # code decodes the records (counting CRCs in ctx), then fails on the missing tag
    # section; the plan decodes them again, and the counters must be the plan's alone
    n = 0
    for c in capture_calls():
        if c[0] != "q" or c[1][:2] != b"\x00\x00" or struct.unpack_from(">h", c[1], 2)[0] < 9:
            continue
        ctx = DecodeContext(decode_records=False)
        recs = next(digest.digest_request(c[1], c[2], ctx).find_all("records"), None)
        if recs is None or not ctx.crc_valid:
            continue
        short: list[Call] = [("q", c[1][:recs.offset + recs.length], c[2])]
        for decode_records in (False, True):
            gen = assert_same(short, decode_records)
            assert gen[0][2] == 1 and gen[0][1][1] > 0      # fell back; CRCs were counted
        n += 1
        if n == 5:
            break
    assert n


def test_generated_source_compiles_for_every_api_version() -> None:
    n = 0
    for api in APIS.values():
        for version in range(api.min_version, api.max_version + 1):
            for request in (True, False):
                bd = digest._body_def(api, version, request)
                assert bd.fast is not None
                n += 1
    assert n > 700
