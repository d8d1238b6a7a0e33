"""The core's header checks (core/src/kafka.rs, core/src/legacy.rs) give exactly what the
Python ones they port give (dissectors/header.py, dissectors/legacy.py, python_acks).

Compared through the core's probes (core/src/py_probe.rs) on: every request and response
frame of every capture in samples/, in ../shared/captures when present, and in the legacy
captures that tests/legacy_captures.py writes; every prefix of those frames' first 80
bytes; thousands of seeded random and mutated byte strings; with the schema's API table,
an empty one and a partial one. Any difference fails.

One difference is deliberate: Produce v9+ whose transactional_id length varint is 2**63 or
more makes ``python_acks`` raise OverflowError (struct cannot take such an offset); the
core says None (no acks), as Python does for every other length past the frame.
"""
from __future__ import annotations

import glob
import random
import struct
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from analyzer import _core
from analyzer.pipeline import Options, Run
from dissectors import header, kafka, legacy, schema
from dissectors.context import DecodeContext
from dissectors.header import (
    MAX_NEWER_PLAUSIBLE,
    api_table,
    parse_request_header,
    read_uvarint,
    request_header,
    response_correlation_id,
    sane_request,
    skip_tagged_fields,
)
from tests import legacy_captures
from tests.conftest import SAMPLES, SHARED_CAPTURES

SEED = 20240611
PREFIX = 80                      # prefixes of a frame's first bytes compared
LEGACY_TYPES = (None, -1, 0, 1, 2, 3, 4, 5, 17)


# --- the API table the core is handed (to move next to the pipeline when it uses the core)

@contextmanager
def schema_apis(apis: dict[int, schema.ApiDef]) -> Iterator[None]:
    """Python's header checks with ``apis`` as the schema (their caches cleared around)."""
    saved = schema.APIS, header.APIS

    def clear() -> None:
        header._HV.clear()
        header._API_OK.clear()
        header._CHECKED.clear()

    clear()
    schema.APIS = header.APIS = apis
    try:
        yield
    finally:
        schema.APIS, header.APIS = saved
        clear()


# --- comparing

def _norm(x: Any) -> tuple[str, Any]:
    """A result as (kind, value): a header tuple, True, False, None, an int... (a bool and an
    int never compare equal here)."""
    if isinstance(x, tuple):
        return "tuple", tuple(x)
    return type(x).__name__, x


class Diff:
    """Counts comparisons and keeps the first differences."""

    def __init__(self) -> None:
        self.count = 0
        self.bad: list[str] = []

    def same(self, what: str, args: tuple[Any, ...], py: Any, rs: Any) -> None:
        self.count += 1
        if py is rs or (py == rs and (py.__class__ is rs.__class__ or isinstance(py, tuple))):
            return          # (the common case, quickly: a header tuple equals Python's NamedTuple)
        if _norm(py) != _norm(rs):
            if len(self.bad) < 20:
                self.bad.append(f"{what}{args!r}: python {py!r}, core {rs!r}")
            else:
                self.bad.append("")

    def check(self, label: str) -> None:
        print(f"{label}: {self.count} cases compared")
        assert self.count > 0
        assert not self.bad, f"{len(self.bad)} differences of {self.count}:\n" + "\n".join(b for b in self.bad if b)


def compare_header_checks(d: Diff, table: Any, data: bytes, size: int | None = None) -> None:
    """request_header in its four modes, sane_request (for the frame's size, the bytes' and
    sizes that cut the client_id), parse + Produce acks, correlation id."""
    for partial in (False, True):
        for check in (False, True):
            d.same("request_header", (data, partial, check), request_header(data, partial, check),
                   _core.probe_request_header(table, data, partial, check))
    sizes = {len(data), len(data) if size is None else size}
    if len(data) >= 10:
        slen = struct.unpack_from(">h", data, 8)[0]
        sizes |= {max(slen + 9, 0), max(slen + 10, 0)}
    for s in sizes:
        d.same("sane_request", (data, s), sane_request(data, s), _core.probe_sane_request(table, data, s))
    for partial in (False, True):
        h = parse_request_header(data, partial)
        if h is not None:
            compare_acks(d, data, h)
    d.same("response_correlation_id", (data,), response_correlation_id(data),
           _core.probe_response_correlation_id(data))


OVERFLOWS = [0]     # Produce acks inputs where Python raised OverflowError (the deliberate difference)


def python_acks(data: bytes, h: header.RequestHeader) -> int | None:
    """What the Python pipeline read as a Produce request's acks before the core paired
    (straight from the body; v3+ has transactional_id first)."""
    pos = h.header_len
    try:
        if h.api_version >= 3:
            if h.api_version >= 9:  # compact nullable string
                n, pos = read_uvarint(data, pos, len(data))
                pos += max(n - 1, 0)
            else:
                (n,) = struct.unpack_from(">h", data, pos)
                pos += 2 + max(n, 0)
        return int(struct.unpack_from(">h", data, pos)[0])
    except (struct.error, ValueError):
        return None


def compare_acks(d: Diff, data: bytes, h: header.RequestHeader) -> None:
    try:
        py: Any = python_acks(data, h)
    except OverflowError:
        OVERFLOWS[0] += 1
        py = None                # the core's answer, deliberately (see the module doc)
    d.same("produce_acks", (data, h), py, _core.probe_produce_acks(data, h))


def compare_legacy(d: Diff, data: bytes) -> None:
    for complete in (True, False):
        d.same("legacy_request_score", (data, complete), legacy.legacy_request_score(data, complete),
               _core.probe_legacy_request_score(data, complete))
    d.same("legacy_request_plausible", (data,), legacy.legacy_request_plausible(data),
           _core.probe_legacy_request_plausible(data))
    for t in LEGACY_TYPES if len(data) > 1 else (None,):
        d.same("legacy_response_plausible", (data, t), legacy.legacy_response_plausible(data, t),
               _core.probe_legacy_response_plausible(data, t))


def compare_all(d: Diff, table: Any, data: bytes, size: int | None = None) -> None:
    compare_header_checks(d, table, data, size)
    compare_legacy(d, data)


# --- inputs

def _captures() -> list[Path]:
    paths = sorted(SAMPLES.glob("*.pcap*"))
    if SHARED_CAPTURES.is_dir():
        paths += sorted(Path(p) for p in glob.glob(str(SHARED_CAPTURES / "**" / "*.pcap*"), recursive=True))
    return paths


@pytest.fixture(scope="module")
def table() -> Any:
    return _core.ProbeApiTable(api_table())


@pytest.fixture(scope="module")
def legacy_paths(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return list(legacy_captures.write_captures(tmp_path_factory.mktemp("legacy")).values())


def _frames(paths: list[Path]) -> list[tuple[bytes, int]]:
    """(data, size) of every request and response frame the pipeline pairs, without repeats."""
    seen: dict[tuple[bytes, int], None] = {}
    for p in paths:
        for ex in Run(str(p), Options(decode="none")):
            for f in (ex.request, ex.response):
                if f is not None:
                    seen.setdefault((f.data, f.size))
    return list(seen)


@pytest.fixture(scope="module")
def frames(legacy_paths: list[Path]) -> list[tuple[bytes, int]]:
    got = _frames(_captures() + legacy_paths)
    assert len(got) > 500
    return got


@pytest.fixture(scope="module")
def legacy_frames(legacy_paths: list[Path]) -> list[bytes]:
    """The legacy captures' frames, and every frame the legacy writers make."""
    got = [data for data, _ in _frames(legacy_paths)]
    got += [f[4:] for _, f in legacy_captures.build_main_connection() + legacy_captures.four_byte_topic_connection()]
    assert len(got) > 20
    return got


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


INTERESTING_CPS = [0x09, 0x0A, 0x1F, 0x20, 0x7E, 0x7F, 0x85, 0xA0, 0xAD, 0xE9, 0x378, 0x2028, 0x2029, 0x200B,
                   0x3000, 0xE000, 0xFEFF, 0xFFFD, 0xFFFF, 0x1F600, 0x1FAE8, 0xF0000, 0x10FFFF, 0x0897]
BAD_UTF8 = [b"\xed\xa0\x80", b"\xe2\x82", b"\xf0\x90\x80", b"\xc0\xaf", b"\xff", b"\x80", b"\xf4\x90\x80\x80",
            b"\xe0\x80\xaf", b"\xc3"]


def _text(rng: random.Random) -> bytes:
    kind = rng.randrange(8)
    if kind == 0:
        return b""
    if kind == 1:
        return bytes(rng.randrange(0x20, 0x7F) for _ in range(rng.randrange(1, 24)))
    if kind == 2:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 12)))
    if kind == 3:
        cps = [rng.randrange(0x110000) for _ in range(rng.randrange(1, 4))]
        return "".join(chr(c) for c in cps if not 0xD800 <= c < 0xE000).encode()
    if kind == 4:
        return b"ab" + chr(rng.choice(INTERESTING_CPS)).encode() + b"cd"[:rng.randrange(3)]
    if kind == 5:
        return b"x" + rng.choice(BAD_UTF8) + b"y"[:rng.randrange(2)]
    if kind == 6:
        return b"producer-" + bytes([rng.choice([0, 1, 0x1B, 0x7F])])
    return "çlïent-ü€".encode()[:rng.randrange(1, 14)]


def _tagged(rng: random.Random) -> bytes:
    kind = rng.randrange(9)
    if kind == 0:
        return b""
    if kind in (1, 2):
        return b"\x00"
    if kind == 3:
        n = rng.randrange(1, 4)
        return _uvarint(n) + b"".join(_uvarint(rng.randrange(300)) + _uvarint(s := rng.randrange(5))
                                      + bytes(s) for _ in range(n))
    if kind == 4:
        return _uvarint(rng.choice([1, 2, 200, 1 << 20, (1 << 64) - 1, (1 << 70) - 1]))
    if kind == 5:
        return b"\x01\x00" + _uvarint(rng.choice([3, 1000, 1 << 40, (1 << 70) - 1])) + b"abc"
    if kind == 6:
        return b"\xff" * rng.randrange(1, 12)
    if kind == 7:
        return b"\x80" * 9 + b"\x01"
    return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 6)))


def random_request(rng: random.Random, keys: list[int]) -> bytes:
    """Bytes shaped like a request header, with the odd lengths, versions, texts and tagged
    sections the checks must judge."""
    key = rng.choice(keys + [-1, -32768, 0, 7, 7, 17, 18, 127, 128, 32767])
    api = schema.APIS.get(key)
    top = api.max_version if api else 10
    version = rng.choice([rng.randrange(-3, 45), 0, 0, top, top + MAX_NEWER_PLAUSIBLE,
                          top + MAX_NEWER_PLAUSIBLE + 1, rng.randrange(top + 1), 32767, -32768, -1])
    out = struct.pack(">hhi", key, version, rng.choice([0, 1, -1, rng.randrange(-2**31, 2**31)]))
    r = rng.random()
    if r < 0.1:
        out += struct.pack(">h", rng.choice([-1, -1, -2, -32768]))
    else:
        text = _text(rng)
        slen = len(text)
        if r > 0.85:
            slen = rng.choice([len(text) + rng.randrange(1, 5), 2048, 2049, 32767, max(len(text) - 1, 0)])
        out += struct.pack(">h", slen) + text
    out += _tagged(rng) + bytes(rng.randrange(256) for _ in range(rng.choice([0, 0, 2, 6, 20])))
    if rng.random() < 0.3:
        out = out[:rng.randrange(len(out) + 1)]
    return out


def mutate(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randrange(1, 4)):
        op = rng.randrange(6)
        if op == 0 and b:
            b[rng.randrange(len(b))] = rng.randrange(256)
        elif op == 1 and b:
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        elif op == 2:
            del b[rng.randrange(len(b) + 1):]
        elif op == 3:
            i = rng.randrange(len(b) + 1)
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 5)))
        elif op == 4 and len(b) >= 10:
            # a length field: the client_id length or a legacy topic length / count
            at = rng.choice([2, 4, 8])
            b[at:at + 2] = struct.pack(">h", rng.choice([-1, 0, 1, 4, 255, 256, 2048, 32767, len(b)]))
        elif op == 5 and b:
            i = rng.randrange(len(b))
            b[i:i + 1] = b"\x00"
    return bytes(b)


def random_legacy(rng: random.Random) -> bytes:
    """A legacy frame (after its length) from the writers of tests/legacy_captures.py."""
    w = legacy_captures

    def topic() -> str:
        return rng.choice(["events", "test", "a", "audit.log-1", "t$p", "x" * 255, "x" * 256, ""])

    def messages() -> bytes:
        out = b""
        for _ in range(rng.randrange(4)):
            k = rng.randrange(5)
            if k == 0:
                out += w.message(b"p" * rng.randrange(20), magic=0)
            elif k == 1:
                out += w.message(b"q" * rng.randrange(20), magic=1)
            elif k == 2:
                out += w.message(b"bad", magic=rng.choice([0, 1]), crc=rng.randrange(1 << 32))
            elif k == 3:
                out += w.compressed_message([w.message(b"in", magic=1)], rng.choice(["gzip", "snappy"]))
            else:
                out += struct.pack(">i", rng.choice([0, 4, 5, 6, 1000])) + bytes([rng.choice([0, 1, 2])])
        return out

    part = rng.randrange(-2, 70000)
    kind = rng.randrange(8)
    if kind == 0:
        f = w.produce_request(topic(), part, messages())
    elif kind == 1:
        f = w.fetch_request(topic(), part, rng.choice([0, -1, 1 << 40]), rng.choice([0, 1, 1 << 20]))
    elif kind == 2:
        f = w.offsets_request(topic(), part, rng.choice([-1, -2, -3, 5]), rng.choice([0, 1, 4]))
    elif kind == 3:
        f = w.multifetch_request([(topic(), part, rng.choice([0, -5]), rng.choice([0, 9]))
                                  for _ in range(rng.randrange(1, 4))])
    elif kind == 4:
        f = w.multiproduce_request([(topic(), part, messages()) for _ in range(rng.randrange(1, 4))])
    elif kind == 5:
        f = w.fetch_response(rng.randrange(-2, 6), messages())
    elif kind == 6:
        f = w.offsets_response(rng.randrange(-2, 6), [rng.randrange(1 << 40) for _ in range(rng.randrange(3))])
    else:
        f = w.multifetch_response([(rng.randrange(-2, 6), messages()) for _ in range(rng.randrange(1, 3))],
                                  error=rng.choice([0, 0, 1]))
    data = f[4:]
    if rng.random() < 0.4:
        data = mutate(rng, data)
    elif rng.random() < 0.3:
        data = data[:rng.randrange(len(data) + 1)]
    return data


def produce_request(rng: random.Random, version: int) -> bytes:
    """A Produce request header and the start of its body (transactional_id, acks)."""
    out = struct.pack(">hhih", 0, version, 1, 3) + b"cli"
    if version >= 9:
        out += b"\x00"
        txn = rng.choice([b"\x00", b"\x01", b"\x04abc", b"\x05abc", _uvarint(1 << 62), _uvarint((1 << 63) - 20),
                          _uvarint(1 << 63), _uvarint((1 << 64) - 1), _uvarint((1 << 70) - 1), b"\x80\x80",
                          b"\xff" * 10 + b"\x01"])
    elif version >= 3:
        txn = struct.pack(">h", rng.choice([-1, -2, 0, 3, 5])) + b"abc"
    else:
        txn = b""
    out += txn + struct.pack(">h", rng.choice([-1, 0, 1]))
    return out[:rng.randrange(len(out) - 3, len(out) + 1)] if rng.random() < 0.3 else out


# --- tests

def test_table_rule_past_the_vector() -> None:
    """Every version past an entry's vector has the vector's last header version, as the
    ApiTable assumes, for every version up to 0x7FFF."""
    for key, _top, hvs in api_table():
        last = hvs[-1]
        bad = [v for v in range(len(hvs), 0x8000) if schema.request_header_version(key, v) != last]
        assert not bad, f"api_key {key}: versions {bad[:5]}... differ from the last entry {last}"


def test_printable_every_code_point() -> None:
    """The core's printable check is str.isprintable for every code point (the core follows
    Unicode 14.0.0, Python 3.11's; another Python's Unicode would differ here)."""
    bad = [cp for cp in range(0x110000)
           if not 0xD800 <= cp < 0xE000 and _core.probe_is_printable(chr(cp)) != chr(cp).isprintable()]
    core_version = ".".join(map(str, _core.probe_unicode_version()))
    assert not bad, (f"{len(bad)} code points differ (Python's Unicode {unicodedata.unidata_version}, the core's "
                     f"{core_version}): {[hex(c) for c in bad[:20]]}")
    print(f"printable: {0x110000 - 0x800} code points compared")


def test_utf8_replace_decoding() -> None:
    """The core decodes as bytes.decode("utf-8", "replace"): every 1- and 2-byte string, every
    3-byte one that starts with a lead byte, 4- and 5-byte ones from telling bytes, random ones."""
    d = Diff()
    cases: list[bytes] = [bytes([a]) for a in range(256)]
    cases += [bytes([a, b]) for a in range(256) for b in range(256)]
    cases += [bytes([a, b, c]) for a in range(0xC0, 0x100) for b in range(0x70, 0x100, 3) for c in range(0x70, 0x100, 5)]
    tell = [0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC2, 0xE0, 0xED, 0xF0, 0xF4, 0xF5, 0xFF]
    cases += [bytes([a, b, c, e]) for a in range(0xF0, 0x100) for b in tell for c in tell for e in tell]
    rng = random.Random(SEED)
    cases += [bytes(rng.choice(tell + [0x61]) for _ in range(rng.randrange(1, 12))) for _ in range(20000)]
    for c in cases:
        d.same("decode", (c,), c.decode("utf-8", "replace"), _core.probe_decode_utf8(c))
    d.check("utf-8 replace")


def test_capture_frames(table: Any, frames: list[tuple[bytes, int]]) -> None:
    """Every frame of every capture, whole and every prefix of its first 80 bytes."""
    d = Diff()
    prefixes: set[bytes] = set()
    for data, size in frames:
        compare_all(d, table, data, size)
        for n in range(min(len(data), PREFIX) + 1):
            p = data[:n]
            if p not in prefixes:
                prefixes.add(p)
                compare_all(d, table, p, size)
    d.check(f"capture frames ({len(frames)} frames, {len(prefixes)} distinct prefixes)")


def test_random_and_mutated(table: Any, frames: list[tuple[bytes, int]]) -> None:
    """Seeded random request-shaped bytes, random bytes, and mutated capture frames."""
    rng = random.Random(SEED)
    keys = sorted(schema.APIS)
    d = Diff()
    for _ in range(12000):
        compare_all(d, table, random_request(rng, keys))
    for _ in range(3000):
        compare_all(d, table, bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40))))
    for _ in range(6000):
        data, size = rng.choice(frames)
        compare_all(d, table, mutate(rng, data[:rng.choice([12, 24, 80, len(data)])]), size)
    d.check("random and mutated")


@pytest.mark.parametrize("which", ["empty", "partial"])
def test_other_tables(which: str, frames: list[tuple[bytes, int]]) -> None:
    """An empty schema (small unknown keys plausible) and a partial one (keys it lacks are not)."""
    apis = {} if which == "empty" else {k: a for k, a in schema.APIS.items() if k % 3 != 1}
    table = _core.ProbeApiTable(api_table(apis))
    rng = random.Random(SEED + 1)
    d = Diff()
    with schema_apis(apis):
        for _ in range(6000):
            compare_header_checks(d, table, random_request(rng, sorted(schema.APIS) or list(range(70))))
        for data, size in rng.sample(frames, min(len(frames), 800)):
            compare_header_checks(d, table, data, size)
            compare_header_checks(d, table, data[:rng.randrange(min(len(data), PREFIX) + 1)], size)
    d.check(f"{which} table")


def test_produce_acks(table: Any) -> None:
    """python_acks on Produce requests of every version, with odd transactional ids."""
    rng = random.Random(SEED + 2)
    d = Diff()
    OVERFLOWS[0] = 0
    for _ in range(4000):
        data = produce_request(rng, rng.randrange(0, 14))
        for partial in (False, True):
            h = parse_request_header(data, partial)
            if h is not None:
                compare_acks(d, data, h)
    d.check(f"produce acks ({OVERFLOWS[0]} of them where Python raises OverflowError and the core says None)")
    assert OVERFLOWS[0] > 0      # the deliberate difference is exercised


def test_varints_and_tagged_fields() -> None:
    rng = random.Random(SEED + 3)
    d = Diff()
    for _ in range(20000):
        data = rng.choice([_tagged(rng), _uvarint(rng.randrange(1 << rng.choice([7, 14, 63, 64, 70]))),
                           bytes(rng.randrange(256) for _ in range(rng.randrange(0, 14)))])
        data += bytes(rng.randrange(256) for _ in range(rng.randrange(0, 6)))
        pos = rng.randrange(len(data) + 2)
        try:
            value, nxt = read_uvarint(data, pos, len(data))
            py_v: Any = (min(value, (1 << 64) - 1), nxt)     # the core saturates past 64 bits
        except ValueError:
            py_v = None
        d.same("read_uvarint", (data, pos), py_v, _core.probe_read_uvarint(data, pos))
        try:
            py_t: Any = skip_tagged_fields(data, pos, len(data))
        except ValueError:
            py_t = None
        d.same("skip_tagged_fields", (data, pos), py_t, _core.probe_skip_tagged_fields(data, pos))
    d.check("varints and tagged fields")


def test_legacy_frames(legacy_frames: list[bytes]) -> None:
    """The legacy functions on every legacy frame, its prefixes, writer-made and mutated frames."""
    rng = random.Random(SEED + 4)
    d = Diff()
    for data in legacy_frames:
        for n in range(len(data) + 1):
            compare_legacy(d, data[:n])
        for _ in range(200):
            compare_legacy(d, mutate(rng, data))
    for _ in range(15000):
        compare_legacy(d, random_legacy(rng))
    for t in range(-3, 20):
        d.same("legacy_expects_response", (t,), legacy.legacy_expects_response(t),
               _core.probe_legacy_expects_response(t))
    d.check("legacy")


def _sasl_handshake(rng: random.Random) -> tuple[bytes, bytes]:
    """A SaslHandshake request (v0-v2) and a response to it."""
    version = rng.choice([0, 1, 1, 2])
    mech = rng.choice([b"PLAIN", b"SCRAM-SHA-256", b"", b"GSSAPI\xff", "m\u00e9ca".encode(), b"x\xed\xa0\x80"])
    raw = struct.pack(">h", len(mech)) + mech if rng.random() > 0.1 else b"\xff\xff"
    req = struct.pack(">hhih", 17, version, 7, 3) + b"cli" + raw
    resp = struct.pack(">ih", 7, rng.choice([0, 33, -1])) + struct.pack(">i", 1) + struct.pack(">h", 5) + b"PLAIN"
    return req, resp


def test_sasl_handshake(table: Any) -> None:
    """The mechanism and the response's error code, against the Python decoder's trees (the
    SaslHandshake exchanges of the captures, and made ones)."""
    ctx = DecodeContext()
    d = Diff()
    pairs: list[tuple[bytes, bytes | None]] = []
    for p in _captures():
        for ex in Run(str(p), Options(decode="none")):
            if ex.api_key == 17 and ex.request is not None and not ex.request.truncated:
                pairs.append((ex.request.data, ex.response.data if ex.response else None))
    rng = random.Random(SEED + 5)
    pairs += [_sasl_handshake(rng) for _ in range(300)]
    for req, resp in pairs:
        h = parse_request_header(req)
        assert h is not None
        body = kafka.decode_request(req, ctx).child("body")
        mech = body.get("mechanism") if body is not None and h.api_version <= 1 else None
        d.same("sasl_handshake_mechanism", (req,), mech, _core.probe_sasl_handshake_mechanism(req, h))
        if resp is not None:
            rbody = kafka.decode_response(resp, 17, h.api_version, ctx).child("body")
            code = rbody.get("error_code") if rbody is not None else None
            d.same("response_error_code", (resp,), code, _core.probe_response_error_code(resp, 4))
    d.check(f"sasl handshake ({len(pairs)} requests)")
