"""The core's header checks (core/src/kafka.rs, core/src/legacy.rs), through its probes
(core/src/py/probe.rs), against oracles that share no code with them.

The checks were ported from dissectors/header.py and dissectors/legacy.py, and this module
first compared the two, result for result, and found them equal on 7.1 million cases (every
request and response frame of every capture and every prefix of its first 80 bytes, seeded
random and mutated bytes, the schema's, an empty and a partial API table: commit 8d05a88,
merged at a8f3450); still equal at 181ea48, when the core took framing and pairing over
(6.8 million cases then, the frames being those the core pairs). No product code used the
Python versions after that: they were removed, and with them those comparisons. What is
checked now:

- every 0.8+ request frame of every capture (samples/, ../shared/captures when present, the
  captures tests/legacy_captures.py writes): the core's header, parsed without the check, is
  the one the full decoder shows (``dissectors.kafka.decode_request``: api_key, api_version,
  correlation_id, client_id, the header version, and header_len = the header node's length);
  the check accepts it; every prefix of its first 80 bytes parses to that header or to none;
- seeded random request-shaped bytes of known API keys and versions: the decoder's header,
  or none where the decoder marks the header malformed;
- which API keys and versions are plausible, with the schema's API table, an empty one and
  a partial one: the rule (``plausible_pair``), with the header versions of
  ``dissectors.schema``; the window above a known API's newest version is
  ``dissectors.header.MAX_NEWER_PLAUSIBLE`` wide, as the decoder's;
- seeded random and mutated bytes, with the three tables: no probe raises, a header never
  reaches past the bytes, the check gives the parse's header, pre-0.8 scores stay in 0-100;
- varints and tagged-field sections: the decoder's readers (``dissectors.decoder``);
- pre-0.8: every request of the legacy captures scores at or above the pipeline's bound for
  a pre-0.8 connection (core/src/pair.rs), every 0.8+ request of the captures below it; the
  framing checks accept every legacy frame; no check raises on cut or mutated frames;
- the printable check (``str.isprintable``, every code point), UTF-8 decoding
  (``bytes.decode("utf-8", "replace")``), SaslHandshake's mechanism and error code (the
  decoder's trees), Produce acks (``python_acks``, what the Python pipeline read before the
  core paired).

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
from analyzer.model import Exchange, Frame
from analyzer.pipeline import Options, Run
from dissectors import decoder, header, kafka, legacy, schema
from dissectors.context import DecodeContext
from dissectors.header import MAX_NEWER_PLAUSIBLE, api_table
from tests import legacy_captures
from tests.conftest import SAMPLES, SHARED_CAPTURES
from tests.pcapgen import uvarint
from tests.probes import probes

SEED = 20240611
PREFIX = 80                      # prefixes of a frame's first bytes checked
LEGACY_TYPES = (None, -1, 0, 1, 2, 3, 4, 5, 17)

# the core's bounds (core/src/kafka.rs): with an empty table, API keys 0..127 are plausible;
# no version above 40 is
MAX_PLAUSIBLE_API_KEY = 127
MAX_PLAUSIBLE_VERSION = 40
# the pipeline's bounds on a connection's first request (core/src/pair.rs, ConnJudge): pre-0.8
# from a score of 50, and over a plausible 0.8+ reading of the same bytes from 80
LEGACY_FROM = 50
LEGACY_OVER_MODERN = 80


# --- the schema as a table, and the oracles

@contextmanager
def schema_apis(apis: dict[int, schema.ApiDef]) -> Iterator[None]:
    """``dissectors.schema`` with ``apis`` as its API table (its header versions are the oracle's)."""
    saved = schema.APIS
    schema.APIS = apis
    try:
        yield
    finally:
        schema.APIS = saved


def tables() -> dict[str, dict[int, schema.ApiDef]]:
    """The schema's API table, an empty one (small unknown keys plausible) and a partial one
    (keys it lacks are not)."""
    return {"schema": dict(schema.APIS), "empty": {},
            "partial": {k: a for k, a in schema.APIS.items() if k % 3 != 1}}


def plausible_pair(apis: dict[int, schema.ApiDef], api_key: int, api_version: int) -> bool:
    """The rule: a key the table knows (any key 0..127 when it is empty), a version 0..40 and,
    for a known API, at most MAX_NEWER_PLAUSIBLE above the newest it knows."""
    api = apis.get(api_key)
    if api is None and (apis or not 0 <= api_key <= MAX_PLAUSIBLE_API_KEY):
        return False
    if not 0 <= api_version <= MAX_PLAUSIBLE_VERSION:
        return False
    return api is None or api_version <= api.max_version + MAX_NEWER_PLAUSIBLE


def well_formed(api_key: int, api_version: int, hv: int, client_id: bytes = b"cli") -> tuple[bytes, tuple[Any, ...]]:
    """A request of header version ``hv`` (a printable client_id, no tagged fields) and the
    header it has: (api_key, api_version, correlation_id, client_id, header_len, header_version)."""
    head = struct.pack(">hhi", api_key, api_version, 77)
    if hv == 0:
        return head + b"\x00\x03abc", (api_key, api_version, 77, None, 8, 0)
    head += struct.pack(">h", len(client_id)) + client_id + (b"\x00" if hv == 2 else b"")
    return head + b"body", (api_key, api_version, 77, client_id.decode(), len(head), hv)


def decoder_header(data: bytes, size: int | None = None) -> tuple[Any, ...] | None:
    """The request header the full decoder shows, as the core's tuple, or None when it marks
    it malformed. ``size``: the frame's declared size when the capture cut it."""
    h = kafka.decode_request(data, DecodeContext(), size).child("header")
    assert h is not None
    if h.any_malformed():
        return None
    values = {c.name: c.value for c in h.children or ()}
    return (values.get("api_key"), values.get("api_version"), values.get("correlation_id"),
            values.get("client_id"), h.length, int(h.type.rsplit(" v", 1)[1]))


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

    def same(self, what: str, args: tuple[Any, ...], want: Any, rs: Any) -> None:
        """``want`` is the oracle's answer, ``rs`` the core's."""
        self.count += 1
        if want is rs or (want == rs and (want.__class__ is rs.__class__ or isinstance(want, tuple))):
            return          # (the common case, quickly: a header tuple equals a RequestHeader)
        if _norm(want) != _norm(rs):
            if len(self.bad) < 20:
                self.bad.append(f"{what}{args!r}: oracle {want!r}, core {rs!r}")
            else:
                self.bad.append("")

    def check(self, label: str) -> None:
        print(f"{label}: {self.count} cases compared")
        assert self.count > 0
        assert not self.bad, f"{len(self.bad)} differences of {self.count}:\n" + "\n".join(b for b in self.bad if b)


OVERFLOWS = [0]     # Produce acks inputs where Python raised OverflowError (the deliberate difference)


def python_acks(data: bytes, h: header.RequestHeader) -> int | None:
    """What the Python pipeline read as a Produce request's acks before the core paired
    (straight from the body; v3+ has transactional_id first)."""
    pos = h.header_len
    try:
        if h.api_version >= 3:
            if h.api_version >= 9:  # compact nullable string
                n, pos = decoder.read_uvarint(data, pos, len(data), 10)
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
    d.same("produce_acks", (data, h), py, probes.probe_produce_acks(data, h))


# --- inputs

@pytest.fixture(scope="module")
def table() -> Any:
    return _core.HeaderTable(api_table())


def _run(paths: list[Path]) -> list[Exchange]:
    return [ex for p in paths for ex in Run(str(p), Options(decode="none"))]


@pytest.fixture(scope="module")
def exchanges(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Exchange]]:
    """The exchanges the pipeline pairs in each set of captures: samples/, ../shared/captures
    (none when absent), the captures tests/legacy_captures.py writes."""
    shared = (sorted(Path(p) for p in glob.glob(str(SHARED_CAPTURES / "**" / "*.pcap*"), recursive=True))
              if SHARED_CAPTURES.is_dir() else [])
    legacy_paths = list(legacy_captures.write_captures(tmp_path_factory.mktemp("legacy")).values())
    return {"samples": _run(sorted(SAMPLES.glob("*.pcap*"))), "shared": _run(shared), "legacy": _run(legacy_paths)}


def _all(exchanges: dict[str, list[Exchange]]) -> list[Exchange]:
    return [ex for exs in exchanges.values() for ex in exs]


def modern_requests(exchanges: dict[str, list[Exchange]]) -> list[Frame]:
    """The 0.8+ request frames of every capture, without repeats (by bytes and size)."""
    seen: dict[tuple[bytes, int], Frame] = {}
    for ex in _all(exchanges):
        if ex.protocol == "kafka" and ex.request is not None:
            seen.setdefault((ex.request.data, ex.request.size), ex.request)
    return list(seen.values())


def legacy_frames(exchanges: dict[str, list[Exchange]]) -> tuple[list[bytes], list[tuple[bytes, int]]]:
    """The pre-0.8 requests and (response, request type) pairs of the legacy captures, and
    every frame the legacy writers make."""
    requests: list[bytes] = []
    responses: list[tuple[bytes, int]] = []
    for ex in exchanges["legacy"]:
        if ex.protocol == "kafka-legacy" and ex.request is not None:
            requests.append(ex.request.data)
            if ex.response is not None:
                responses.append((ex.response.data, struct.unpack_from(">h", ex.request.data)[0]))
    rtype = 0
    for d, f in legacy_captures.build_main_connection() + legacy_captures.four_byte_topic_connection():
        if d == legacy_captures.C2B:
            requests.append(f[4:])
            rtype = struct.unpack_from(">h", f, 4)[0]
        else:
            responses.append((f[4:], rtype))
    return requests, responses


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
        return uvarint(n) + b"".join(uvarint(rng.randrange(300)) + uvarint(s := rng.randrange(5))
                                      + bytes(s) for _ in range(n))
    if kind == 4:
        return uvarint(rng.choice([1, 2, 200, 1 << 20, (1 << 64) - 1, (1 << 70) - 1]))
    if kind == 5:
        return b"\x01\x00" + uvarint(rng.choice([3, 1000, 1 << 40, (1 << 70) - 1])) + b"abc"
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
        txn = rng.choice([b"\x00", b"\x01", b"\x04abc", b"\x05abc", uvarint(1 << 62), uvarint((1 << 63) - 20),
                          uvarint(1 << 63), uvarint((1 << 64) - 1), uvarint((1 << 70) - 1), b"\x80\x80",
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
    for key, _top, _newest, hvs in api_table():
        last = hvs[-1]
        bad = [v for v in range(len(hvs), 0x8000) if schema.request_header_version(key, v) != last]
        assert not bad, f"api_key {key}: versions {bad[:5]}... differ from the last entry {last}"


def test_printable_every_code_point() -> None:
    """The core's printable check is str.isprintable for every code point (the core follows
    Unicode 14.0.0, Python 3.11's; another Python's Unicode would differ here)."""
    bad = [cp for cp in range(0x110000)
           if not 0xD800 <= cp < 0xE000 and probes.probe_is_printable(chr(cp)) != chr(cp).isprintable()]
    core_version = ".".join(map(str, probes.probe_unicode_version()))
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
        d.same("decode", (c,), c.decode("utf-8", "replace"), probes.probe_decode_utf8(c))
    d.check("utf-8 replace")


@pytest.mark.parametrize("source", ["samples", "shared", "legacy"])
def test_capture_requests_are_the_decoders(source: str, table: Any, exchanges: dict[str, list[Exchange]]) -> None:
    """Every 0.8+ request frame of the captures: the core's header is the decoder's, the check
    accepts it, and every prefix of its first 80 bytes parses to it or to nothing (nothing
    past header_len is read); with 10 bytes or more the framer's peek accepts it."""
    if source == "shared" and not SHARED_CAPTURES.is_dir():
        pytest.skip("../shared/captures is not present")
    frames = [ex.request for ex in exchanges[source] if ex.protocol == "kafka" and ex.request is not None]
    assert frames
    bad: list[str] = []
    prefixes = 0
    for f in frames:
        h = probes.probe_request_header(table, f.data, f.truncated, False)
        want = decoder_header(f.data, f.size if f.truncated else None)
        checked = probes.probe_request_header(table, f.data, f.truncated, True)
        if h is None or want is None or tuple(h) != want:
            bad.append(f"{f.data[:40]!r}: core {h!r}, decoder {want!r}")
        elif (checked is True and not f.truncated) or (checked is not True and checked != h):
            bad.append(f"{f.data[:40]!r}: the check gives {checked!r} for {h!r}")
        for n in range(min(len(f.data), PREFIX) + 1):
            p = f.data[:n]
            prefixes += 1
            got = probes.probe_request_header(table, p, False, False)
            if got is not None and got != h:
                bad.append(f"{p!r}: the prefix parses to {got!r}, the frame to {h!r}")
            if n >= 10 and probes.probe_request_header(table, p, True, True) is False:
                bad.append(f"{p!r}: the framer's peek rejects a prefix of {h!r}")
    print(f"{source}: {len(frames)} requests, {prefixes} prefixes")
    assert not bad, f"{len(bad)} differences:\n" + "\n".join(bad[:20])


def test_random_requests_are_the_decoders(table: Any) -> None:
    """Seeded random request-shaped bytes of a known API key and version (odd lengths, texts
    and tagged sections): the core parses the header the decoder shows, and nothing where the
    decoder marks the header malformed."""
    rng = random.Random(SEED)
    keys = sorted(schema.APIS)
    d = Diff()
    parsed = 0
    for _ in range(30000):
        data = random_request(rng, keys)
        if len(data) < 4:
            continue
        api_key, api_version = struct.unpack_from(">hh", data)
        api = schema.APIS.get(api_key)
        if api is None or not 0 <= api_version <= api.max_version:
            continue        # (the decoder guesses other headers its own way)
        got = probes.probe_request_header(table, data, False, False)
        parsed += got is not None
        d.same("request_header", (data,), decoder_header(data), None if got is None else tuple(got))
    d.check(f"random requests ({parsed} parsed)")
    assert parsed > 1000


@pytest.mark.parametrize("which", ["schema", "empty", "partial"])
def test_plausible_keys_and_versions(which: str) -> None:
    """Every API key -2..130 (and the extremes) with every version -2..49 (and the extremes):
    the check accepts a well-formed header exactly when ``plausible_pair`` says, and the parse
    gives the header version dissectors.schema gives."""
    apis = tables()[which]
    table = _core.HeaderTable(api_table(apis))
    d = Diff()
    edges = [-32768, 32767]
    with schema_apis(apis):
        for api_key in list(range(-2, 131)) + edges:
            for api_version in list(range(-2, 50)) + edges:
                hv = schema.request_header_version(api_key, api_version)
                data, want = well_formed(api_key, api_version, hv)
                d.same("parse", (data,), want, probes.probe_request_header(table, data, False, False))
                ok = plausible_pair(apis, api_key, api_version)
                d.same("check", (data,), want if ok else False, probes.probe_request_header(table, data, False, True))
    d.check(f"{which} table")


def test_newer_versions_window(table: Any) -> None:
    """``dissectors.header.MAX_NEWER_PLAUSIBLE``, the decoder's window above a known API's newest
    version (``kafka.NEWER_VERSIONS_TRIED``), is the core's: newest + 8 is plausible, newest + 9
    is not (for every API whose newest + 9 is within the version cap)."""
    assert kafka.NEWER_VERSIONS_TRIED == MAX_NEWER_PLAUSIBLE
    tried = 0
    for api_key, api in sorted(schema.APIS.items()):
        top = api.max_version
        if top + MAX_NEWER_PLAUSIBLE + 1 > MAX_PLAUSIBLE_VERSION:
            continue
        for version, ok in ((top, True), (top + MAX_NEWER_PLAUSIBLE, True), (top + MAX_NEWER_PLAUSIBLE + 1, False)):
            data, want = well_formed(api_key, version, schema.request_header_version(api_key, version))
            got = probes.probe_request_header(table, data, False, True)
            assert got == (want if ok else False), (api_key, version, got)
        tried += 1
    assert tried > 50


def check_invariants(bad: list[str], table: Any, data: bytes, size: int | None = None) -> None:
    """What holds of any bytes: no probe raises; a header lies within the bytes; the check gives
    the parse's header, False, or (only for a prefix) True; a header parsed without ``partial``
    is the one parsed with it; sane_request gives a header of non-negative key and version and
    a printable client_id, and the check's whole header (v1 or v2) for a frame of these bytes;
    Produce acks and the correlation id read; pre-0.8 scores in 0-100."""
    n = len(data)

    def fail(what: str, got: Any) -> None:
        if len(bad) < 20:
            bad.append(f"{what} {data!r}: {got!r}")

    parsed = {}
    for partial in (False, True):
        h = probes.probe_request_header(table, data, partial, False)
        if h is not None and not 8 <= h[4] <= n:
            fail(f"header_len (partial={partial})", h)
        checked = probes.probe_request_header(table, data, partial, True)
        if not (checked is False or checked is True and partial or checked == h and h is not None):
            fail(f"check (partial={partial}) against {h!r}", checked)
        acks = None if h is None else probes.probe_produce_acks(data, h)
        if acks is not None and not -32768 <= acks <= 32767:
            fail("acks", (h, acks))
        parsed[partial] = (h, checked)
    if parsed[False][0] is not None and parsed[True][0] != parsed[False][0]:
        fail("partial parse", parsed)
    sizes = {n, n if size is None else size}
    if n >= 10:
        slen = struct.unpack_from(">h", data, 8)[0]
        sizes |= {max(slen + 9, 0), max(slen + 10, 0)}
    for s in sizes:
        h = probes.probe_sane_request(table, data, s)
        if h is not None and (h[0] < 0 or h[1] < 0 or h[3] and not h[3].isprintable() or not 8 <= h[4] <= n):
            fail(f"sane_request({s})", h)
    whole = parsed[False][1]
    if whole is not False and whole is not True and whole[5] != 0 and probes.probe_sane_request(table, data, n) != whole:
        fail("sane_request of a plausible header", whole)     # (of header v0 it reads bytes 8-9 as a client_id length)
    if probes.probe_response_correlation_id(data) != (struct.unpack_from(">i", data)[0] if len(data) >= 4 else None):
        fail("correlation id", probes.probe_response_correlation_id(data))
    check_legacy(bad, data)


def check_legacy(bad: list[str], data: bytes) -> None:
    for complete in (True, False):
        score = probes.probe_legacy_request_score(data, complete)
        if not 0 <= score <= 100:
            bad.append(f"legacy score (complete={complete}) {data!r}: {score}")
    if probes.probe_legacy_request_plausible(data) not in (True, False):
        bad.append(f"legacy_request_plausible {data!r}")
    for t in LEGACY_TYPES:
        if probes.probe_legacy_response_plausible(data, t) not in (True, False):
            bad.append(f"legacy_response_plausible {data!r}, {t}")


@pytest.mark.parametrize("which", ["schema", "empty", "partial"])
def test_random_and_mutated(which: str, exchanges: dict[str, list[Exchange]]) -> None:
    """Seeded random request-shaped bytes, random bytes, mutated and cut capture frames, and
    every prefix of the first 80 bytes of each capture frame: ``check_invariants``."""
    apis = tables()[which]
    table = _core.HeaderTable(api_table(apis))
    frames = [(f.data, f.size) for ex in _all(exchanges) for f in (ex.request, ex.response) if f is not None]
    rng = random.Random(SEED + 1)
    keys = sorted(apis) or list(range(70))
    bad: list[str] = []
    for _ in range(12000):
        check_invariants(bad, table, random_request(rng, keys))
    for _ in range(3000):
        check_invariants(bad, table, bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40))))
    for _ in range(6000):
        data, size = rng.choice(frames)
        check_invariants(bad, table, mutate(rng, data[:rng.choice([12, 24, 80, len(data)])]), size)
    prefixes = {(data[:n], size) for data, size in rng.sample(frames, min(len(frames), 600))
                for n in range(min(len(data), PREFIX) + 1)}
    for data, size in prefixes:
        check_invariants(bad, table, data, size)
    print(f"{which} table: {21000 + len(prefixes)} byte strings")
    assert not bad, "\n".join(bad)


def test_legacy_score_separates_the_protocols(table: Any, exchanges: dict[str, list[Exchange]]) -> None:
    """The pre-0.8 score of a request, as the pipeline judges a connection's first one: every
    request of the legacy captures (and of the legacy writers) scores LEGACY_FROM or more, and
    LEGACY_OVER_MODERN or more where its bytes also pass the 0.8+ check; every 0.8+ request of
    every capture scores below LEGACY_FROM."""
    requests, _ = legacy_frames(exchanges)
    modern = modern_requests(exchanges)
    # (the samples hold 236 0.8+ requests; with ../shared's captures beside them, thousands)
    assert len(requests) > 20 and len(modern) > (500 if SHARED_CAPTURES.is_dir() else 200)
    for data in requests:
        score = probes.probe_legacy_request_score(data, True)
        also_modern = probes.probe_request_header(table, data, False, True) is not False
        assert score >= (LEGACY_OVER_MODERN if also_modern else LEGACY_FROM), (score, also_modern, data[:24])
    assert any(probes.probe_request_header(table, data, False, True) for data in requests)   # the 4-byte topic
    scores = {f.data[:24]: probes.probe_legacy_request_score(f.data, True) for f in modern}
    high = {k: s for k, s in scores.items() if s >= LEGACY_FROM}
    assert not high, high
    print(f"legacy: {len(requests)} requests, 0.8+: {len(modern)} requests, highest {max(scores.values())}")


def test_legacy_framing_checks(exchanges: dict[str, list[Exchange]]) -> None:
    """The framer's pre-0.8 checks accept every legacy frame: a request's first 16 bytes (the
    peek) and the whole frame; a response's, for its request's type and for any type; and
    only FETCH, MULTIFETCH and OFFSETS requests expect a response (PRODUCE and MULTIPRODUCE
    never get one)."""
    requests, responses = legacy_frames(exchanges)
    assert len(responses) > 10
    for data in requests:
        assert probes.probe_legacy_request_plausible(data[:16]), data[:16]
        assert probes.probe_legacy_request_plausible(data), data[:16]
    for data, rtype in responses:
        for t in (rtype, None):
            assert probes.probe_legacy_response_plausible(data[:16], t), (t, data[:16])
            assert probes.probe_legacy_response_plausible(data, t), (t, data[:16])
    for t in range(-3, 20):
        assert probes.probe_legacy_expects_response(t) == (t in (legacy.FETCH, legacy.MULTIFETCH, legacy.OFFSETS)), t


def test_legacy_random_and_mutated(exchanges: dict[str, list[Exchange]]) -> None:
    """The legacy checks on every prefix of every legacy frame, on mutated ones and on seeded
    frames of the legacy writers: none raises, scores stay in 0-100."""
    requests, responses = legacy_frames(exchanges)
    rng = random.Random(SEED + 4)
    bad: list[str] = []
    for data in requests + [r for r, _ in responses]:
        for n in range(len(data) + 1):
            check_legacy(bad, data[:n])
        for _ in range(200):
            check_legacy(bad, mutate(rng, data))
    for _ in range(15000):
        check_legacy(bad, random_legacy(rng))
    assert not bad, "\n".join(bad[:20])


def test_produce_acks(table: Any) -> None:
    """python_acks on Produce requests of every version, with odd transactional ids."""
    rng = random.Random(SEED + 2)
    d = Diff()
    OVERFLOWS[0] = 0
    for _ in range(4000):
        data = produce_request(rng, rng.randrange(0, 14))
        for partial in (False, True):
            t = probes.probe_request_header(table, data, partial, False)
            if t is not None:
                compare_acks(d, data, header.RequestHeader(*t))
    d.check(f"produce acks ({OVERFLOWS[0]} of them where Python raises OverflowError and the core says None)")
    assert OVERFLOWS[0] > 0      # the deliberate difference is exercised


def test_varints_and_tagged_fields() -> None:
    """read_uvarint and skip_tagged_fields against the decoder's readers (``decoder.read_uvarint``
    with the 10-byte bound of 64 bits, ``decoder.read_tagged``). The decoder reads a count, tag or
    size of at most 5 bytes (an unsigned int32), the core of up to 10: a section the decoder
    refuses for a longer one that the core reads is not compared (counted, and one shown)."""
    rng = random.Random(SEED + 3)
    d = Diff()
    longer = 0
    for _ in range(20000):
        data = rng.choice([_tagged(rng), uvarint(rng.randrange(1 << rng.choice([7, 14, 63, 64, 70]))),
                           bytes(rng.randrange(256) for _ in range(rng.randrange(0, 14)))])
        data += bytes(rng.randrange(256) for _ in range(rng.randrange(0, 6)))
        pos = rng.randrange(len(data) + 2)
        try:
            value, nxt = decoder.read_uvarint(data, pos, len(data), 10)
            want: Any = (min(value, (1 << 64) - 1), nxt)     # the core saturates past 64 bits
        except ValueError:
            want = None
        d.same("read_uvarint", (data, pos), want, probes.probe_read_uvarint(data, pos))
        got = probes.probe_skip_tagged_fields(data, pos)
        try:
            want = decoder.read_tagged({}, data, pos, len(data), [], decoder.State(DecodeContext()), True)
        except decoder._Bad as e:
            if e.reason.startswith("varint longer than") and got is not None:
                longer += 1
                continue
            want = None
        d.same("skip_tagged_fields", (data, pos), want, got)
    d.check(f"varints and tagged fields ({longer} sections the core reads with a varint the decoder finds too long)")
    # the difference: one tagged field, its count 1 written in 6 bytes, then tag 0 and size 0
    assert probes.probe_skip_tagged_fields(b"\x81\x80\x80\x80\x80\x00\x00\x00", 0) == 8


def _sasl_handshake(rng: random.Random) -> tuple[bytes, bytes]:
    """A SaslHandshake request (v0-v2) and a response to it."""
    version = rng.choice([0, 1, 1, 2])
    mech = rng.choice([b"PLAIN", b"SCRAM-SHA-256", b"", b"GSSAPI\xff", "m\u00e9ca".encode(), b"x\xed\xa0\x80"])
    raw = struct.pack(">h", len(mech)) + mech if rng.random() > 0.1 else b"\xff\xff"
    req = struct.pack(">hhih", 17, version, 7, 3) + b"cli" + raw
    resp = struct.pack(">ih", 7, rng.choice([0, 33, -1])) + struct.pack(">i", 1) + struct.pack(">h", 5) + b"PLAIN"
    return req, resp


def test_sasl_handshake(table: Any, exchanges: dict[str, list[Exchange]]) -> None:
    """The mechanism and the response's error code, against the Python decoder's trees (the
    SaslHandshake exchanges of the captures, and made ones)."""
    ctx = DecodeContext()
    d = Diff()
    pairs: list[tuple[bytes, bytes | None]] = []
    for ex in exchanges["samples"] + exchanges["shared"]:
        if ex.api_key == 17 and ex.request is not None and not ex.request.truncated:
            pairs.append((ex.request.data, ex.response.data if ex.response else None))
    rng = random.Random(SEED + 5)
    pairs += [_sasl_handshake(rng) for _ in range(300)]
    for req, resp in pairs:
        h = probes.probe_request_header(table, req, False, False)
        assert h is not None
        body = kafka.decode_request(req, ctx).child("body")
        mech = body.get("mechanism") if body is not None and h[1] <= 1 else None     # h[1]: api_version
        d.same("sasl_handshake_mechanism", (req,), mech, probes.probe_sasl_handshake_mechanism(req, h))
        if resp is not None:
            rbody = kafka.decode_response(resp, 17, h[1], ctx).child("body")
            code = rbody.get("error_code") if rbody is not None else None
            d.same("response_error_code", (resp,), code, probes.probe_response_error_code(resp, 4))
    d.check(f"sasl handshake ({len(pairs)} requests)")
