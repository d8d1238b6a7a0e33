"""Fuzzing, bounded in time: mutated captures, random frames, schema-shaped messages
with corrupted lengths and counts, and memory bounds.

Every case runs under a per-case deadline (SIGALRM) so a hang fails the test instead
of stalling the suite. Hypothesis runs derandomized (a fixed seed) with explicit
``max_examples``; the mutations draw from the samples and a few ../shared captures.

Properties:
- no exception reaches the user: ``Run`` yields or raises only ``CaptureError``; the CLI
  exits 0/1 with parseable output or a one-line error;
- a mutation that breaks one frame leaves the other exchanges decoded: every exchange
  of the unmutated capture whose frames do not touch the mutated packet is still there,
  with the same connection, API, version, correlation id (and status);
- crafted huge declared counts, lengths and frame sizes cost no memory.

Inputs that once failed are kept in tests/corpus/ and replayed by
``test_corpus_replay``; a failing fuzz case writes its input to
``$TMPDIR/kws-fuzz-failures/`` (the assertion message names the file) to be copied there.
A longer run: ``KWS_FUZZ_SCALE=50 pytest tests/test_fuzz.py`` (50 times the examples).
"""
from __future__ import annotations

import contextlib
import functools
import gzip
import hashlib
import json
import os
import signal
import struct
import tempfile
import tracemalloc
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyzer._core import UNIDENTIFIED, CaptureError, Stream, open_capture, parse_packet
from analyzer.cli import main
from analyzer.model import Packet
from analyzer.pipeline import Options, Run
from dissectors import kafka
from dissectors.context import DecodeContext, Limits
from dissectors.field import Field
from tests.conftest import SAMPLES, SHARED_CAPTURES
from tests.pcapgen import RawPacket, TcpFlow, kafka_frame, write_pcap

CORPUS = Path(__file__).resolve().parent / "corpus"
CASE_SECONDS = 10.0          # a generous bound per case: the samples take ~50 ms each
SCALE = int(os.environ.get("KWS_FUZZ_SCALE", "1"))    # e.g. KWS_FUZZ_SCALE=50 for a long local run


def examples(n: int) -> int:
    return n * SCALE


FUZZ = settings(max_examples=examples(40), deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])

SAMPLE_FILES = sorted(p.name for p in SAMPLES.glob("*.pcap*"))
SHARED_PICKS = ["sasl_scram_tansu_auth.pcap", "old_v0_kp2_082_mock.pcap", "edge_kcat_tansu.pcap",
                "snap96_rdkafka_tansu.pcap", "public/go-sniffer-pr39__kafka.pcap",
                "public/deepflow__mixed-with-unsupported.pcap", "public/ndpi__kafka.pcapng"]


def capture_sources() -> list[Path]:
    out = [SAMPLES / n for n in SAMPLE_FILES]
    out += [SHARED_CAPTURES / n for n in SHARED_PICKS if (SHARED_CAPTURES / n).is_file()]
    return out


SOURCES = capture_sources()


# -- harness -------------------------------------------------------------------------------

class Hang(Exception):
    pass


@contextlib.contextmanager
def deadline(seconds: float = CASE_SECONDS) -> Iterator[None]:
    """Fail (raise Hang) when the block runs longer than ``seconds``."""
    def on_alarm(signum: int, frame: object) -> None:
        raise Hang(f"case still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def keep_failure(data: bytes, suffix: str) -> str:
    d = Path(tempfile.gettempdir()) / "kws-fuzz-failures"
    d.mkdir(exist_ok=True)
    p = d / (hashlib.sha1(data).hexdigest()[:16] + suffix)
    p.write_bytes(data)
    return str(p)


@contextlib.contextmanager
def saved_on_failure(path: Path) -> Iterator[None]:
    try:
        yield
    except BaseException as e:
        kept = keep_failure(path.read_bytes(), path.suffix)
        raise AssertionError(f"failing input kept in {kept} (copy it to tests/corpus/): {e!r}") from e


class Packets:
    """A capture's packets as (ts, data, orig_len), plus where each packet's TCP payload sits."""

    def __init__(self, path: Path) -> None:
        with open_capture(str(path)) as r:
            pkts = list(map(Packet._make, r))
        self.linktypes = {p.linktype for p in pkts}
        self.linktype = pkts[0].linktype if pkts else 1
        self.items = [(p.ts, p.data, p.orig_len) for p in pkts]
        self.payload_at: list[int | None] = []
        payload_len: dict[int, int] = {}
        for p in pkts:
            seg = parse_packet(p.linktype, p.data, p.orig_len)
            # (a skip reason, or the segment: its payload is the 8th field)
            payload = seg[7] if isinstance(seg, tuple) else b""
            self.payload_at.append(len(p.data) - len(payload) if payload else None)
            if payload:
                payload_len[p.index] = len(payload)
        # packet number -> (connection id, direction, stream offset of its payload): a packet
        # whose whole payload the core delivered while handling that packet
        self.stream_at: dict[int, tuple[int, int, int]] = {}
        stream = Stream()
        for ev in stream.feed([tuple(p) for p in pkts]):
            if ev[0] == 0:
                _kind, conn, direction, offset, data, _ts, index, now, _now_ts = ev
                if index == now and len(data) == payload_len.get(index):
                    self.stream_at[index] = (conn, direction, offset)

    def write(self, path: Path, items: list[tuple[float, bytes, int]] | None = None) -> str:
        write_pcap(str(path), [RawPacket(ts, d, o) for ts, d, o in (self.items if items is None else items)],
                   linktype=self.linktype)
        return str(path)


@functools.lru_cache(maxsize=32)
def packets_of(path: Path) -> Packets:
    return Packets(path)


def ekey(ex) -> tuple:  # noqa: ANN001
    """What identifies an exchange across mutations that shift packet numbers."""
    c = ex.conn
    return (frozenset((str(c.a), str(c.b))), ex.api_name, ex.api_version, ex.correlation_id)


def touched(ex, indices: set[int]) -> bool:  # noqa: ANN001
    for fr in (ex.request, ex.response):
        if fr is not None and any(fr.first_index <= i <= fr.last_index for i in indices):
            return True
    return False


def analyse(path: str, ctx: DecodeContext | None = None) -> list:
    """The whole pipeline; only CaptureError (a one-line user error) may come out."""
    with deadline():
        try:
            return list(Run(path, Options(), ctx or DecodeContext()))
        except CaptureError as e:
            assert "\n" not in str(e) and path in str(e)
            return []


@functools.lru_cache(maxsize=32)
def baseline(path: Path) -> list:
    p = packets_of(path)
    with tempfile.TemporaryDirectory() as d:
        return analyse(p.write(Path(d) / "base.pcap"))


# -- mutations ---------------------------------------------------------------------------------

KINDS = ["flip_payload", "flip_any", "overwrite", "drop", "dup", "swap", "swap_far", "truncate"]


@st.composite
def mutation(draw: st.DrawFn, sources: list[Path] | None = None) -> tuple[Path, str, dict]:
    src = draw(st.sampled_from(sources or SOURCES))
    pk = packets_of(src)
    n = len(pk.items)
    kind = draw(st.sampled_from(KINDS))
    with_payload = [i for i, a in enumerate(pk.payload_at) if a is not None]
    i = draw(st.integers(0, n - 1))
    args: dict = {"i": i}
    if kind == "flip_payload" and with_payload:
        i = args["i"] = draw(st.sampled_from(with_payload))
        start = pk.payload_at[i]
        args["pos"] = draw(st.integers(start, len(pk.items[i][1]) - 1))
        args["bit"] = draw(st.integers(0, 7))
    elif kind in ("flip_any", "flip_payload"):
        kind = "flip_any"
        args["pos"] = draw(st.integers(0, max(len(pk.items[i][1]) - 1, 0)))
        args["bit"] = draw(st.integers(0, 7))
    elif kind == "overwrite":
        args["pos"] = draw(st.integers(0, max(len(pk.items[i][1]) - 1, 0)))
        args["bytes"] = draw(st.binary(min_size=1, max_size=8))
    elif kind == "swap":
        args["j"] = min(i + 1, n - 1)
    elif kind == "swap_far":
        args["j"] = draw(st.integers(0, n - 1))
    elif kind == "truncate":
        args["frac"] = draw(st.floats(0.0, 1.0))
    return src, kind, args


def apply(src: Path, kind: str, args: dict, out: Path) -> tuple[str, set[int]]:
    """Write the mutated capture; return its path and the (1-based, original) packets touched."""
    pk = packets_of(src)
    items = list(pk.items)
    i = args["i"]
    hit = {i + 1}
    if kind in ("flip_any", "flip_payload"):
        ts, d, o = items[i]
        if d:
            b = bytearray(d)
            b[args["pos"]] ^= 1 << args["bit"]
            items[i] = (ts, bytes(b), o)
    elif kind == "overwrite":
        ts, d, o = items[i]
        b = bytearray(d)
        b[args["pos"]:args["pos"] + len(args["bytes"])] = args["bytes"]
        items[i] = (ts, bytes(b[:len(d)]), o)
    elif kind == "drop":
        del items[i]
    elif kind == "dup":
        items.insert(i + 1, items[i])
    elif kind in ("swap", "swap_far"):
        j = args["j"]
        items[i], items[j] = items[j], items[i]
        hit.add(j + 1)
    path = pk.write(out, items)
    if kind == "truncate":
        data = out.read_bytes()
        out.write_bytes(data[:int(len(data) * args["frac"])])
    return path, hit


def in_size_prefix(src: Path, index: int, pos: int) -> bool:
    """Whether byte ``pos`` of packet ``index`` (1-based) is part of a Kafka size prefix.

    A corrupted size prefix moves every later frame boundary of that direction: the
    framer resynchronises only when the new size is implausible, so the frames a wrong
    but plausible size swallows are lost (as they would be for any length-trusting
    dissector). Such flips get the weaker check."""
    pk = packets_of(src)
    where = pk.stream_at.get(index)
    start = pk.payload_at[index - 1]
    if where is None or start is None or pos < start:
        return False
    conn, direction, off = where
    s = off + pos - start
    for e in baseline(src):
        for fr in (e.request, e.response):
            if fr is not None and fr.conn.id == conn and fr.direction == direction \
                    and fr.stream_offset <= s < fr.stream_offset + 4:
                return True
    return False


def check_others_survive(src: Path, kind: str, hit: set[int], mutated: list, prefix: bool = False) -> None:
    """Exchanges of the unmutated capture that do not touch the mutated packets are still there
    (``prefix``: a size prefix was hit; only exchanges complete before it, and those on other
    connections, must survive)."""
    base = baseline(src)
    if kind == "truncate":
        return
    if prefix:
        first = min(hit)
        conns = {e.conn.id for e in base if touched(e, hit)}
        base = [e for e in base if e.conn.id not in conns
                or max(f.last_index for f in (e.request, e.response) if f is not None) < first]
    after = Counter(ekey(e) for e in mutated)
    after_ok = Counter((ekey(e), e.status) for e in mutated)
    if kind == "dup":
        # a duplicated packet is a retransmission: nothing changes
        assert Counter((ekey(e), e.status) for e in base) == after_ok
        return
    # a flipped correlation id may collide with another request in flight on that connection
    # (counted as "correlation id reused while in flight"): that one may be mispaired
    collide = {(ekey(e)[0], e.correlation_id) for e in mutated if touched(e, hit)}
    for e in base:
        if touched(e, hit) or (ekey(e)[0], e.correlation_id) in collide:
            continue
        if kind in ("flip_payload", "swap"):
            assert after_ok[(ekey(e), e.status)] > 0, (kind, hit, ekey(e), e.status)
        assert after[ekey(e)] > 0, (kind, hit, ekey(e))


# -- mutated captures through the pipeline and the CLI ---------------------------------------

@FUZZ
@given(m=mutation())
def test_mutated_captures_through_the_pipeline(tmp_path_factory: pytest.TempPathFactory,
                                               m: tuple[Path, str, dict]) -> None:
    src, kind, args = m
    out = tmp_path_factory.mktemp("mut") / "m.pcap"
    path, hit = apply(src, kind, args, out)
    with saved_on_failure(out):
        exs = analyse(path)
        if kind in ("flip_payload", "dup", "swap", "drop"):
            prefix = kind == "flip_payload" and in_size_prefix(src, args["i"] + 1, args["pos"])
            check_others_survive(src, kind, hit, exs, prefix)


@settings(FUZZ, max_examples=examples(30))
@given(m=mutation([SAMPLES / n for n in SAMPLE_FILES if not n.startswith("old_")]))
def test_one_broken_kafka_frame_leaves_the_others(tmp_path_factory: pytest.TempPathFactory,
                                                  m: tuple[Path, str, dict]) -> None:
    """Bit flips inside Kafka payloads of modern captures: the strongest survival property."""
    src, _, args = m
    pk = packets_of(src)
    if pk.payload_at[args["i"]] is None:
        return
    args = dict(args, pos=max(args.get("pos", 0), pk.payload_at[args["i"]]), bit=args.get("bit", 0))
    out = tmp_path_factory.mktemp("flip") / "f.pcap"
    path, hit = apply(src, "flip_payload", args, out)
    with saved_on_failure(out):
        check_others_survive(src, "flip_payload", hit, analyse(path),
                             in_size_prefix(src, args["i"] + 1, args["pos"]))


def run_cli(args: list[str]) -> tuple[int, str, str]:
    with deadline():
        r = CliRunner().invoke(main, args)
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return r.exit_code, r.stdout, r.stderr


def check_cli_outputs(path: str) -> None:
    code, out, err = run_cli(["read", "-f", "ndjson", path])
    assert "Traceback" not in err
    if code == 1:
        assert err.count("\n") == 1 and err.startswith("kafkawire-sniff: error: ") and path in err
        return
    assert code == 0, err
    for line in out.splitlines():
        json.loads(line)
    code, out, err = run_cli(["stats", "-f", "json", path])
    assert code == 0 and "Traceback" not in err, err
    json.loads(out)
    code, out, err = run_cli(["check", "-f", "json", path])
    assert code in (0, 1) and "Traceback" not in err, err
    doc = json.loads(out)
    assert code == (1 if doc["counts"]["error"] else 0)


@settings(FUZZ, max_examples=examples(15))
@given(m=mutation())
def test_mutated_captures_through_the_cli(tmp_path_factory: pytest.TempPathFactory,
                                         m: tuple[Path, str, dict]) -> None:
    src, kind, args = m
    out = tmp_path_factory.mktemp("cli") / "c.pcap"
    path, _ = apply(src, kind, args, out)
    with saved_on_failure(out):
        check_cli_outputs(path)


def test_mutations_with_seeded_random_many_flips(tmp_path: Path) -> None:
    """Heavier damage than hypothesis draws: 1-40 flips over several packets, seeded."""
    import random

    rng = random.Random(20261122)
    for case in range(40):
        src = rng.choice(SOURCES)
        pk = packets_of(src)
        items = list(pk.items)
        for _ in range(rng.randint(1, 40)):
            j = rng.randrange(len(items))
            ts, d, o = items[j]
            if d:
                b = bytearray(d)
                b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
                items[j] = (ts, bytes(b), o)
        out = tmp_path / f"many{case}.pcap"
        pk.write(out, items)
        with saved_on_failure(out):
            analyse(str(out))


# -- random frames ----------------------------------------------------------------------------

def bounded_tree(root: Field, n: int) -> None:
    """Every field of a tree lies inside the frame (except inside decompressed data)."""
    stack = [root]
    while stack:
        f = stack.pop()
        assert f.offset >= 0 and f.length >= 0 and f.offset + f.length <= n, f
        if any("decompressed" in x for x in f.notes or ()):
            continue
        stack.extend(f.children or ())


@FUZZ
@given(data=st.binary(max_size=600), api_key=st.integers(0, 95), version=st.integers(0, 20))
def test_random_frames_decode(data: bytes, api_key: int, version: int) -> None:
    with deadline(5):
        ctx = DecodeContext()
        req = kafka.decode_request(data, ctx)
        resp = kafka.decode_response(data, api_key, version, ctx)
    assert isinstance(req, Field) and isinstance(resp, Field)
    bounded_tree(req, len(data))
    bounded_tree(resp, len(data))
    json.dumps(req.to_json())
    json.dumps(resp.to_json())


@settings(FUZZ, max_examples=examples(80))
@given(data=st.binary(max_size=400), rtype=st.integers(-1, 5),
       mech=st.sampled_from([None, "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI"]),
       codec=st.sampled_from(["gzip", "snappy", "lz4", "zstd"]))
def test_random_bytes_through_the_other_decoders(data: bytes, rtype: int, mech: str | None, codec: str) -> None:
    """Pre-0.8 requests and responses, raw SASL tokens, record sets and codecs."""
    from dissectors import legacy
    from dissectors.compression import decompress_detail
    from dissectors.records import decode_records

    with deadline(5):
        ctx = DecodeContext(Limits(max_decompressed=1 << 16))
        trees = [legacy.decode_legacy_request(data, ctx), legacy.decode_legacy_response(data, rtype, ctx),
                 kafka.decode_sasl_token(data, ctx, mech, True), kafka.decode_sasl_token(data, ctx, mech, False),
                 decode_records(data, 0, len(data), ctx)]
        out, _note, _info = decompress_detail(codec, data, 1 << 16)
    assert len(out) <= 1 << 16
    for t in trees:
        bounded_tree(t, len(data))
        json.dumps(t.to_json())


@settings(FUZZ, max_examples=examples(60))
@given(api_key=st.integers(0, 95), version=st.integers(0, 17), body=st.binary(max_size=300))
def test_random_bodies_behind_a_valid_header(api_key: int, version: int, body: bytes) -> None:
    """A real request header (flexible or not) then random bytes."""
    for flexible in (False, True):
        cid = b"\x00\x03cli" + (b"\x00" if flexible else b"")
        frame = struct.pack(">hhi", api_key, version, 7) + cid + body
        with deadline(5):
            ctx = DecodeContext()
            tree = kafka.decode_request(frame, ctx)
            kafka.decode_response(struct.pack(">i", 7) + (b"\x00" if flexible else b"") + body,
                                  api_key, version, ctx)
        bounded_tree(tree, len(frame))


@settings(FUZZ, max_examples=examples(25))
@given(frames=st.lists(st.tuples(st.integers(0, 70), st.integers(0, 13), st.binary(max_size=200)),
                       min_size=1, max_size=8),
       garbage=st.binary(max_size=40))
def test_random_frame_streams_through_the_pipeline(tmp_path_factory: pytest.TempPathFactory,
                                                   frames: list[tuple[int, int, bytes]], garbage: bytes) -> None:
    flow = TcpFlow(("10.9.0.1", 45000), ("10.9.0.2", 9092))
    pkts = flow.handshake()
    for corr, (api_key, version, body) in enumerate(frames):
        req = kafka_frame(struct.pack(">hhih", api_key, version, corr, 1) + b"c" + body)
        pkts += flow.send(0, req + (garbage if corr == 0 else b""), mss=100)
        pkts += flow.send(1, kafka_frame(struct.pack(">i", corr) + body[::-1]), mss=100)
    pkts += flow.fin(0) + flow.fin(1)
    out = tmp_path_factory.mktemp("rnd") / "r.pcap"
    write_pcap(str(out), pkts)
    with saved_on_failure(out):
        exs = analyse(str(out))
        assert exs, "nothing came out of a stream of valid frames"


# -- schema-shaped messages with corrupted lengths and counts --------------------------------

CORRUPT = [b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff", b"\x80\x80\x80\x80\x08", b"\xff\xff\xff\xff\x0f",
           b"\x00\x00", b"\x00\x00\x00\x00", b"\xff" * 10 + b"\x01", b"\x01", b"\xfe", b"\x7f\xff"]
LENGTH_TYPES = {"array", "string", "bytes", "records", "tagged_fields", "varint", "int32", "int16", "uuid"}


@functools.lru_cache(maxsize=1)
def real_frames() -> list[tuple[str, bytes, int, int, tuple[int, ...]]]:
    """(kind, frame, api_key, api_version, offsets of length/count fields) from the samples."""
    out = []
    for name in SAMPLE_FILES:
        if name.startswith("old_"):
            continue
        for ex in Run(str(SAMPLES / name)):
            if ex.protocol != "kafka" or ex.api_key is None:
                continue
            for kind, fr, tree in (("req", ex.request, ex.request_tree), ("resp", ex.response, ex.response_tree)):
                if fr is None or tree is None or fr.truncated:
                    continue
                offs = tuple(sorted({f.offset for f in tree.walk()
                                     if f.type in LENGTH_TYPES and f.offset < len(fr.data)}))
                out.append((kind, bytes(fr.data), ex.api_key, ex.api_version, offs))
    return out


def decode(kind: str, data: bytes, api_key: int, version: int, ctx: DecodeContext) -> Field:
    if kind == "req":
        return kafka.decode_request(data, ctx)
    return kafka.decode_response(data, api_key, version, ctx)


@settings(FUZZ, max_examples=examples(150))
@given(st.data())
def test_corrupted_lengths_and_counts(data: st.DataObject) -> None:
    frames = real_frames()
    kind, frame, api_key, version, offs = data.draw(st.sampled_from(frames))
    off = data.draw(st.sampled_from(offs))
    pat = data.draw(st.one_of(st.sampled_from(CORRUPT), st.binary(min_size=1, max_size=6)))
    b = bytearray(frame)
    b[off:off + len(pat)] = pat
    mutated = bytes(b[:len(frame)])
    ctx = DecodeContext()
    with deadline(5):       # a hang guard (a loop that never ends), not a speed check
        tree = decode(kind, mutated, api_key, version, ctx)
    json.dumps(tree.to_json())
    bounded_tree(tree, len(mutated))


def test_every_length_field_of_every_sample_frame_corrupted() -> None:
    """Exhaustive over fields (not random): each length/count field of a few frames per API
    set to -1, to 0x7fffffff and to a long varint."""
    seen: Counter = Counter()
    n = 0
    for kind, frame, api_key, version, offs in real_frames():
        if seen[(kind, api_key, version)] >= 2 or len(frame) > 4000:
            continue
        seen[(kind, api_key, version)] += 1
        for off in offs:
            for pat in (b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\xff" * 10 + b"\x01"):
                b = bytearray(frame)
                b[off:off + len(pat)] = pat
                with deadline(5):
                    decode(kind, bytes(b[:len(frame)]), api_key, version, DecodeContext())
                n += 1
    assert n > 500


# -- memory bounds ---------------------------------------------------------------------------

def peak_bytes(fn) -> int:  # noqa: ANN001
    tracemalloc.start()
    try:
        with deadline(10):
            fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


HUGE_LIMITS = Limits(max_array_len=2**31, max_decompressed=1 << 20)


@pytest.mark.parametrize("name,frame", [
    # Metadata v0: topics count 2^31-1 with 6 bytes behind it
    ("array int32", struct.pack(">hhih", 3, 0, 1, 1) + b"c" + struct.pack(">i", 0x7FFFFFFF) + b"\x00\x01a" * 2),
    # Metadata v12 (flexible): compact array count 2^32-2
    ("compact array", struct.pack(">hhih", 3, 12, 1, 1) + b"c\x00" + b"\xff\xff\xff\xff\x0f" + b"\x00" * 20),
    # ApiVersions v3 (flexible): compact string length 2^28
    ("compact string", struct.pack(">hhih", 18, 3, 1, 1) + b"c\x00" + b"\x81\x80\x80\x80\x01" + b"x" * 30),
    # SaslAuthenticate v0: bytes length 2^31-1
    ("bytes", struct.pack(">hhih", 36, 0, 1, 1) + b"c" + struct.pack(">i", 0x7FFFFFFF) + b"p" * 30),
    # CreateTopics v0: nested arrays, each declaring 2^31-1 elements
    ("nested arrays", struct.pack(">hhih", 19, 0, 1, 1) + b"c" + struct.pack(">i", 1) + b"\x00\x01t"
     + struct.pack(">ihhi", 1, 1, 1, 0x7FFFFFFF) + b"\x00" * 16),
])
def test_huge_declared_counts_cost_no_memory(name: str, frame: bytes) -> None:
    ctx = DecodeContext(HUGE_LIMITS)
    out: list[Field] = []
    peak = peak_bytes(lambda: out.append(kafka.decode_request(frame, ctx)))
    assert peak < 512 * 1024, (name, peak)
    assert out[0].any_malformed() and ctx.counts.malformed >= 1


def _record_batch(count: int, records: bytes, codec: int = 0) -> bytes:
    after_crc = struct.pack(">hiqqqhii", codec, 0, 0, 0, -1, -1, -1, count) + records
    import crc32c
    crc = crc32c.crc32c(after_crc)
    body = struct.pack(">iBI", 0, 2, crc) + after_crc
    return struct.pack(">qi", 0, len(body)) + body


def _produce_v3(records: bytes) -> bytes:
    return (struct.pack(">hhih", 0, 3, 1, 1) + b"c" + struct.pack(">hhi", -1, 1, 1000)
            + struct.pack(">i", 1) + b"\x00\x01t" + struct.pack(">ii", 1, 0) + struct.pack(">i", len(records))
            + records)


def test_huge_records_count_costs_no_memory() -> None:
    # (a Produce decoded first: what the decoder builds once per process is not this frame's cost)
    kafka.decode_request(_produce_v3(_record_batch(1, b"\x10" * 40)), DecodeContext())
    frame = _produce_v3(_record_batch(0x7FFFFFFF, b"\x10" * 40))
    ctx = DecodeContext(HUGE_LIMITS)
    peak = peak_bytes(lambda: kafka.decode_request(frame, ctx))
    assert peak < 512 * 1024 and ctx.counts.malformed >= 1


def test_decompression_bomb_stops_at_the_limit() -> None:
    bomb = gzip.compress(b"\x00" * (32 << 20), 9)              # 32 MiB of zeros in ~32 KiB
    frame = _produce_v3(_record_batch(1000, bomb, codec=1))
    ctx = DecodeContext(Limits(max_decompressed=1 << 20))
    tree: list[Field] = []
    peak = peak_bytes(lambda: tree.append(kafka.decode_request(frame, ctx)))
    assert peak < 8 << 20, peak
    assert sum(v for k, v in ctx.counts.limits_hit.items() if "decompressed" in k) == 1
    assert any("limit" in n for f in tree[0].walk() for n in f.notes or ())


def test_huge_declared_frame_through_the_pipeline(tmp_path: Path) -> None:
    """A 1 GiB size prefix with 2 KiB behind it, then a normal exchange on another connection."""
    flow = TcpFlow(("10.3.0.1", 43000), ("10.3.0.2", 9092))
    pkts = flow.handshake()
    pkts += flow.send(0, struct.pack(">i", 1 << 30) + struct.pack(">hhih", 3, 0, 1, 1) + b"c" + b"\x00" * 2000,
                      mss=1000)
    pkts += flow.fin(0)
    other = TcpFlow(("10.3.0.1", 43001), ("10.3.0.2", 9092), ts=flow.ts + 1)
    pkts += other.handshake()
    pkts += other.send(0, kafka_frame(struct.pack(">hhih", 18, 0, 5, 1) + b"c"))
    pkts += other.send(1, kafka_frame(struct.pack(">ihi", 5, 0, 0)))
    path = tmp_path / "huge.pcap"
    write_pcap(str(path), pkts)
    ctx = DecodeContext()
    result: list = []

    def go() -> None:
        result.extend(Run(str(path), Options(max_frame_size=2**31), ctx))

    peak = peak_bytes(go)
    assert peak < 4 << 20, peak
    assert sorted((e.api_name, e.correlation_id, e.status) for e in result) == [
        ("ApiVersions", 5, "ok"), ("Metadata", 1, "unanswered")]
    big = next(e for e in result if e.api_name == "Metadata")
    assert big.request is not None and big.request.truncated and big.request.size == 1 << 30


# -- the corpus --------------------------------------------------------------------------------

def corpus_files() -> list[Path]:
    return sorted(p for p in CORPUS.glob("*") if p.suffix in (".pcap", ".pcapng", ".bin"))


def corpus_bin_meta(p: Path) -> tuple[str, int, int]:
    """``req-3-0-what.bin`` / ``resp-1-12-what.bin``: kind, api_key, api_version."""
    kind, key, ver = p.stem.split("-")[:3]
    return kind, int(key), int(ver)


@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: p.name)
def test_corpus_replay(path: Path) -> None:
    """Inputs that once failed: no exception, no hang, and the CLI still answers."""
    if path.suffix == ".bin":
        kind, key, ver = corpus_bin_meta(path)
        data = path.read_bytes()
        with deadline(5):
            tree = decode(kind, data, key, ver, DecodeContext())
        json.dumps(tree.to_json())
        return
    analyse(str(path))
    check_cli_outputs(str(path))


def test_corpus_is_small() -> None:
    files = corpus_files()
    assert files and all(p.stat().st_size < 64 * 1024 for p in files)
    assert (CORPUS / "README.md").is_file()


def test_corpus_fields_stay_inside_the_frame() -> None:
    """Once failed: ``_fix_lengths`` stretched containers over decompressed records' offsets."""
    p = CORPUS / "req-0-10-compressed-records-then-malformed.bin"
    data = p.read_bytes()
    tree = kafka.decode_request(data, DecodeContext())
    assert tree.any_malformed()
    bounded_tree(tree, len(data))


def test_sources_present() -> None:
    assert len(SAMPLE_FILES) >= 10
    if not SHARED_CAPTURES.is_dir():
        pytest.skip("../shared/captures is not present: fuzzing the samples only")
    assert len(SOURCES) > len(SAMPLE_FILES)



def test_size_prefix_flip_costs_only_its_own_connection() -> None:
    """The corpus case of a plausible but wrong size: that connection's direction is swallowed
    up to the capture end (reported as a truncated frame), the other connection is untouched."""
    base = baseline(SAMPLES / "admin_rdkafka.pcap")
    path = str(CORPUS / "size-prefix-flip-swallows-next-request.pcap")
    # on the broker's port, as a --port
    run = Run(path, Options(ports=(base[0].conn.broker.port,)))
    exs = list(run)
    assert [(e.api_name, e.correlation_id, e.status) for e in exs if e.conn.id == 1] == \
        [(e.api_name, e.correlation_id, e.status) for e in base if e.conn.id == 1]
    lost = sorted((e.api_name, e.correlation_id, e.status) for e in exs if e.conn.id == 0)
    assert lost == [("ApiVersions", 1, "unanswered"), ("Unknown", 1, "orphan_response"),
                    ("Unknown", 2, "orphan_response")]
    assert run.summary.truncated_frames == 1
    # found by auto-detection, the damaged connection shows no exchange that proves it Kafka:
    # it is unidentified TCP, its bytes counted as such, and the other one is untouched
    run = Run(path)
    exs = list(run)
    assert [(e.api_name, e.correlation_id, e.status) for e in exs] == \
        [(e.api_name, e.correlation_id, e.status) for e in base if e.conn.id == 1]
    assert run.summary.other_connections == 1 and run.summary.bytes_skipped[UNIDENTIFIED] > 0
