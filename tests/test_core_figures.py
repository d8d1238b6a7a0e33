"""The core's lean walk (core/src/figures/) against the full decoder (dissectors/decoder.py).

The lean tree of a message is, by its definition, the full decoder's tree of it with only
what the per-exchange figures read: error codes that are not zero, the ANCHORS figures
anywhere, the COMPANIONS (topic names and ids, partition indexes) in a struct kept for
another reason, records fields (their summary), and the structs and arrays that lead to them,
an element of an "errors only" array kept only when one of its codes is not zero. This test
builds that expectation from the full tree and the schema, on its own (``expected``), and
holds the core to it for every message of the captures and for schema-shaped messages of
every API version. Damaged messages: the walk stops exactly where the full decoder stops.
"""
from __future__ import annotations

import random
import struct
from typing import Any

import pytest

from analyzer._core import Figures
from dissectors import kafka
from dissectors.context import DecodeContext, Limits, Presentation
from dissectors.errors import ERRORS
from dissectors.field import ErrorsRoot, Field
from dissectors.schema import APIS, FieldDef, in_range, is_flexible
from tests import rows_reference
from tests.conftest import SHARED_CAPTURES
from tests.lean import dump, figures, lean_request, lean_response
from tests.schema_messages import Call, Encoder, capture_calls, schema_calls

ANCHORS = {"throttle_time_ms", "max_wait_ms", "min_bytes", "acks", "assignments", "mechanism", "group_id",
           "isolation_level", "session_id", "session_epoch", "fetch_offset", "high_watermark",
           "last_stable_offset", "forgotten_topics_data", "transactional_id", "member_id", "generation_id",
           "generation_id_or_member_epoch", "protocol_name", "leader"}
COMPANIONS = {"name", "topic", "index", "partition", "partition_index", "topic_id"}
FIXED = {"int8", "int16", "int32", "int64", "uint16", "uint32", "float64", "bool", "uuid"}


# -- the expectation, from the full tree and the schema ---------------------------------------

def is_error(fd: FieldDef) -> bool:
    return fd.meaning == "error_code" or (fd.type == "int16" and (fd.name == "error_code"
                                                                  or fd.name.endswith("_error_code")))


def wanted(fd: FieldDef) -> bool:
    return fd.name in ANCHORS or fd.type == "records" or is_error(fd) or any(wanted(c) for c in fd.fields)


def present(fields: tuple[FieldDef, ...], version: int, flexible: bool) -> list[tuple[FieldDef, bool]]:
    out = []
    for fd in fields:
        if flexible and fd.tag is not None and (fd.tagged is None or in_range(version, fd.tagged)):
            if fd.tagged is not None or in_range(version, fd.versions):
                out.append((fd, True))
        elif in_range(version, fd.versions) and not (fd.tag is not None and not flexible):
            out.append((fd, False))
    return out


def errors_only(pres: list[tuple[FieldDef, bool]]) -> bool:
    w = [(fd, t) for fd, t in pres if wanted(fd)]
    return (bool(w) and all(not t and fd.type in FIXED and is_error(fd) and fd.name not in ANCHORS for fd, t in w)
            and not any(t and fd.name in COMPANIONS for fd, t in pres))


def node(f: Field, children: Any = None, extra: Any = None) -> tuple:
    return (f.name, f.type, repr(f.value), f.offset, f.length, repr(extra), children)


def records_node(f: Field) -> tuple:
    # records are compared by place (their summary is tests/test_core_records.py's)
    return (f.name, "records", f.value is None, f.offset + f.length)


def any_error(f: Field) -> bool:
    return any(c is not f and c.value and c.type == "int16" and (c.name == "error_code" or c.name.endswith("_error_code"))
               or (c.extra and "error_code" in c.extra and c.value) for c in f.walk())


class Expect:
    def __init__(self, version: int, flexible: bool) -> None:
        self.version, self.flexible = version, flexible

    def struct(self, full: Field, fields: tuple[FieldDef, ...]) -> list[tuple]:
        pres = present(fields, self.version, self.flexible)
        companions = any(wanted(fd) for fd, _t in pres)
        kids = {c.name: c for c in full.children or ()}
        out: list[tuple] = []
        for fd, tagged in pres:
            if not tagged and fd.name in kids:
                out += self.field(kids[fd.name], fd, companions)
        section = kids.get("tagged_fields")
        if section is not None and section.children:
            tags = {c.name: c for c in section.children}
            kept: list[tuple] = []
            for fd, tagged in pres:
                if tagged and fd.name in tags:
                    kept += self.field(tags[fd.name], fd, companions)
            if kept:
                out.append(node(section, kept))
        return out

    def forgotten(self, full: Field, fields: tuple[FieldDef, ...]) -> list[tuple]:
        kids = {c.name: c for c in full.children or ()}
        out: list[tuple] = []
        for fd, tagged in present(fields, self.version, self.flexible):
            f = kids.get(fd.name)
            if tagged or f is None:
                continue
            if fd.name in ("topic", "name", "topic_id"):
                out.append(node(f))
            elif fd.name == "partitions":
                out.append(node(f, None if f.children is None else [node(e) for e in f.children]))
        return out

    def field(self, f: Field, fd: FieldDef, companions: bool) -> list[tuple]:
        keep = fd.name in ANCHORS or is_error(fd) or (companions and fd.name in COMPANIONS)
        if fd.type in FIXED or fd.type == "string":
            if not keep or (is_error(fd) and not f.value):
                return []
            return [node(f, None, {"error_code": f.value} if fd.meaning == "error_code" else None)]
        if fd.type == "records":
            return [records_node(f)]
        if fd.type == "struct":
            if not wanted(fd):
                return []
            if f.children is None:          # null
                return [node(f)]
            return [node(f, self.struct(f, fd.fields))]
        if fd.type == "array" and (fd.element or "struct") == "struct" and wanted(fd):
            if f.value is None:
                return [node(f)]
            if fd.name == "forgotten_topics_data":      # its topics whole: names or ids, partitions
                return [node(f, [node(e, self.forgotten(e, fd.fields)) for e in f.children or ()])]
            lazy = errors_only(present(fd.fields, self.version, self.flexible))
            elems = [node(e, self.struct(e, fd.fields)) for e in f.children or () if not lazy or any_error(e)]
            return [node(f, elems)]
        return []


def lean_shape(f: Field) -> tuple:
    if f.type == "records":
        return records_node(f)
    extra = f.extra if f.extra and "error_code" in f.extra else None
    return node(f, None if f.children is None else [lean_shape(c) for c in f.children], extra)


def full_of(c: Call) -> tuple[Field, int, bool]:
    """The full decoder's tree of a call, its version and flexibility."""
    ctx = DecodeContext(presentation=Presentation(decode_records=False))
    if c[0] == "q":
        tree = kafka.decode_request(c[1], ctx)
        key = struct.unpack_from(">h", c[1])[0]
    else:
        tree = kafka.decode_response(c[1], c[2], c[3], ctx)
        key = c[2]
    body = tree.child("body")
    assert body is not None
    # the version the body was read in (ApiVersions' v0 refusal, a newer one read as the newest)
    v = int(body.type.rsplit("v", 1)[1])
    return tree, v, is_flexible(APIS[key], v)


def lean_of(c: Call, ctx: DecodeContext) -> Field:
    return lean_request(c[1], c[2], ctx) if c[0] == "q" else lean_response(c[1], c[2], c[3], ctx)


def check_as_full(calls: list[Call] | tuple[Call, ...]) -> int:
    """Each well-formed call's lean tree is the expectation; the count compared."""
    n = 0
    for c in calls:
        full, version, flexible = full_of(c)
        if full.any_malformed():
            continue
        key = struct.unpack_from(">h", c[1])[0] if c[0] == "q" else c[2]
        api = APIS[key]
        fields = api.request if c[0] == "q" else api.response
        body = full.child("body")
        assert body is not None
        ctx = DecodeContext()
        lean = lean_of(c, ctx)
        got = lean_shape(lean.child("body"))
        want = node(body, Expect(version, flexible).struct(body, fields))
        if c[0] == "q" and key in (0, 1):
            # a Fetch or Produce request's partitions: its body's rows, not nodes (but where marked)
            table, array = ("fetch", "topics") if key == 1 else ("produce", "topic_data")
            read = kafka.decode_request(c[1], DecodeContext()).child("body")
            assert read is not None
            (rows_reference.fetch_request_rows if key == 1 else rows_reference.produce_request_rows)(read)
            assert lean.child("body").extra[table] == read.extra[table], c
            if not any(f.is_malformed for f in lean.walk()):
                want = want[:-1] + ([k for k in want[-1] if k[0] != array],)
        if c[0] == "s" and key == 1:
            # a Fetch answer's partitions: its body's rows (dissectors.summary), not nodes;
            # the rows of a full tree with its records read
            read = kafka.decode_response(c[1], c[2], c[3], DecodeContext()).child("body")
            assert read is not None
            rows_reference.fetch_rows(read)
            assert lean.child("body").extra["fetch"] == read.extra["fetch"], c
            if not any(f.is_malformed for f in lean.walk()):    # (marks stay where they are)
                want = want[:-1] + ([k for k in want[-1] if k[0] != "responses"],)
        assert got[:1] + got[2:] == want[:1] + want[2:], f"{c[0]} {c[2:]} {c[1].hex()}"
        assert kafka.error_codes(lean) == kafka.error_codes(full), c
        # (the only marks: those of records whose bytes are no records, the summary's)
        assert ctx.counts.malformed == sum(n.startswith("malformed: ") for f in lean.walk() if f.type == "records"
                                    for n in f.notes or ())
        n += 1
    return n


def test_every_capture_message_as_the_full_decoder_keeps_it() -> None:
    calls = capture_calls()
    # (the samples alone hold 576 such messages; with ../shared's captures, over 1,000)
    assert check_as_full(calls) > (1000 if SHARED_CAPTURES.is_dir() else 500)


def test_schema_shaped_messages_of_every_api_version() -> None:
    calls = schema_calls(4)
    assert len(calls) > 2500
    assert check_as_full(calls) > 2500
    kept = {f.name for c in calls for f in lean_of(c, DecodeContext()).walk()}
    assert {"error_code", "throttle_time_ms", "topic_id", "partition_index", "tagged_fields"} <= kept


# -- damaged messages: the walk stops where the full decoder stops --------------------------

def damaged(c: Call, rng: random.Random, n: int = 6) -> list[Call]:
    out = []
    data = c[1]
    lo = c[2] if c[0] == "q" else 4
    for _ in range(n):
        b = bytearray(data)
        if len(b) <= lo + 1:
            break
        op = rng.randrange(3)
        i = rng.randrange(lo, len(b))
        if op == 0:
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            del b[i:]
        else:
            b[i:i + 4] = rng.choice([b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\x80\x80\x80\x80", b"\x00\x00"])
            b = b[:len(data)]
        out.append((c[0], bytes(b), *c[2:]))
    return out


def malformed_at(tree: Field) -> int | None:
    body = tree.child("body")
    return None if body is None or not body.extra else body.extra.get("malformed_at")


def test_damaged_messages_stop_where_the_full_decoder_stops() -> None:
    rng = random.Random(11)
    seen: dict[tuple, int] = {}
    n = stopped = in_tags = 0
    for c in [*capture_calls(), *schema_calls(1)]:
        k = (c[0], c[2] if c[0] == "s" else c[1][:4])
        if seen.get(k, 0) >= 3:
            continue
        seen[k] = seen.get(k, 0) + 1
        for d in damaged(c, rng):
            ctx = DecodeContext(presentation=Presentation(decode_records=False))
            full = (kafka.decode_request(d[1], ctx) if d[0] == "q" else kafka.decode_response(d[1], d[2], d[3], ctx))
            lctx = DecodeContext()
            lean = lean_of(d, lctx)
            # every mark counted is in the tree (bad bytes in a tagged section too: the
            # section stays, as the full decoder keeps it)
            marks = sum(n.startswith("malformed: ") for f in lean.walk() for n in f.notes or ())
            assert marks == lctx.counts.malformed, d
            in_tags += any(f.is_malformed for t in lean.walk() if t.name == "tagged_fields" for f in t.walk())
            if full.child("body") is None:      # a bad header: kept alone in both, marked and counted
                assert [f.name for f in lean.children] == ["header"] and lctx.counts.malformed == 1, d
                continue
            at = malformed_at(lean)
            # (the full decoder reads more than the lean walk, nested payloads, but marks
            # those where they are: its walk of the body stops at the same place)
            assert malformed_at(full) == at, (d[0], d[2:], d[1].hex())
            if at is not None:
                stopped += 1
                assert lctx.counts.malformed >= 1
            n += 1
    assert n > 2000 and stopped > 500 and in_tags > 100, (n, stopped, in_tags)


def test_consumer_payloads_are_judged_as_the_full_decoder_judges_them() -> None:
    """JoinGroup and SyncGroup messages with their bytes damaged (the consumer-protocol
    payloads among them): the lean path (the walk, or the full decoder where the walk finds
    a payload bad) counts the malformed fields and limits the full decoder counts."""
    rng = random.Random(5)
    calls = [c for c in [*capture_calls(), *schema_calls(2)]
             if (struct.unpack_from(">h", c[1])[0] if c[0] == "q" else c[2]) in (11, 14)]
    n = to_full = 0
    for c in calls:
        for d in [c, *damaged(c, rng, 12)]:
            for limit in (1_000_000, 1):
                full_ctx = DecodeContext(Limits(max_array_len=limit))
                if d[0] == "q":
                    kafka.decode_request(d[1], full_ctx)
                else:
                    kafka.decode_response(d[1], d[2], d[3], full_ctx)
                ctx = DecodeContext(Limits(max_array_len=limit))
                lean_of(d, ctx)
                c, fc = ctx.counts, full_ctx.counts
                assert (c.malformed, c.limits_hit) == (fc.malformed, fc.limits_hit), d
                f = figures(ctx)
                to_full += (f.request(d[1], d[2]) if d[0] == "q" else f.response(d[1], d[2], d[3])) is None
                n += 1
    assert n > 1000 and to_full > 20, (n, to_full)     # (29 from the samples alone)


def test_array_limit_and_trailing_counted_once() -> None:
    # Metadata v12 response whose topics array declares 5 elements with a limit of 2
    frame = struct.pack(">i", 7) + b"\x00" + struct.pack(">i", 0) + b"\x06" + b"\x00" * 40
    ctx = DecodeContext(Limits(max_array_len=2))
    tree = lean_response(frame, 3, 12, ctx)
    assert ctx.counts.limits_hit == {"max_array_len": 1} and ctx.counts.malformed == 1
    assert tree.child("body").extra == {"malformed_at": 9}
    # a well-formed Heartbeat v0 response followed by junk: one trailing count, no malformed
    ctx = DecodeContext()
    tree = lean_response(struct.pack(">ih", 7, 0) + b"junk", 12, 0, ctx)
    assert (ctx.counts.trailing, ctx.counts.malformed) == (1, 0)
    body = tree.child("body")
    assert body.length == 6 and body.children == []      # a zero error code is not kept


@pytest.mark.parametrize("api_key", [3, 12])
def test_versions_past_the_known_ones_walk_as_the_latest(api_key: int) -> None:
    """A request or answer of a version newer than the schema knows is read as the latest
    one (the pipeline gives such frames the full decoder: ``covers`` says no)."""
    api = APIS[api_key]
    top = api.max_version
    enc = Encoder(top, is_flexible(api, top), random.Random(f"newer/{api_key}"))
    req, resp = enc.struct(api.request), enc.struct(api.response)
    fig = Figures((Field, ErrorsRoot), APIS, ERRORS)
    assert fig.covers(api_key, top) and not fig.covers(api_key, top + 1) and not fig.covers(9999, 0)
    # an API left to the full decoder (what the pipeline does with nested payloads)
    assert not Figures((Field, ErrorsRoot), APIS, ERRORS, full_apis={api_key}).covers(api_key, top)
    for v in (top, top + 1, top + 7):
        head = struct.pack(">hhi", api_key, v, 7) + b"\x00\x03cli\x00"
        q = lean_request(head + req, len(head), DecodeContext())
        s = lean_response(struct.pack(">i", 7) + b"\x00" + resp, api_key, v, DecodeContext())
        assert q.child("body").type.endswith(f"v{top}") and s.child("body").type.endswith(f"v{top}")
        if v == top:
            want = (dump(q), dump(s))
        assert (dump(q), dump(s)) == want


def test_unknown_api_and_short_request() -> None:
    fig = Figures((Field, ErrorsRoot), APIS, ERRORS)
    assert fig.response(b"\x00\x00\x00\x07", 9999, 0) is None
    tree, counts = fig.request(struct.pack(">hhi", 9999, 0, 1) + b"\x00\x00", 10)
    assert (tree.name, tree.type, tree.children) == ("request", "Request", []) and counts[0] == 0
    tree, counts = fig.request(b"\x00\x0c\x00", 3)
    assert [c.name for c in tree.children] == ["header"] and tree.children[0].is_malformed and counts[0] == 1


# -- the request's topics, kept for stats grouped by topic or partition ---------------------

def _topic_view(tree: Field) -> list:
    """What `stats --by topic/partition` reads of a request tree (stats.named_topic_partitions;
    one (None, None, None) when it names none)."""
    from types import SimpleNamespace

    from analyzer.sinks.stats import named_topic_partitions
    named = named_topic_partitions(SimpleNamespace(partitions=[], request_tree=tree))  # type: ignore[arg-type]
    return named or [(None, None, None)]


def _digest_view(tree: Field) -> str:
    """What a `read` summary line says of a request beside its partitions and errors
    (analyzer.sinks.output.digest): group, transactional id, SASL mechanism, topics."""
    from types import SimpleNamespace

    from analyzer.sinks.output import digest
    return digest(SimpleNamespace(partitions=[], request_tree=tree, error_codes=[]), width=10_000)  # type: ignore[arg-type]


def test_topics_kept_for_grouping_as_the_full_decoder_reads_them() -> None:
    """With topics on, every request's topics and partition indexes read as in the full
    tree, and so does what a summary line says of it (schema-shaped requests of every API
    version, the captures' requests, and damaged ones); with topics off, the lean tree is
    what it was."""
    fig = Figures((Field, ErrorsRoot), APIS, ERRORS, topics=True)
    plain = Figures((Field, ErrorsRoot), APIS, ERRORS)
    rng = random.Random(3)
    calls = [c for c in (*schema_calls(3), *capture_calls()) if c[0] == "q"]
    n = named = 0
    for c in calls:
        for d in (c, *damaged(c, rng, 2)):
            full = kafka.decode_request(d[1], DecodeContext(presentation=Presentation(decode_records=False)))
            tree, _counts = fig.request(d[1], d[2])
            want = _topic_view(full)
            assert _topic_view(tree) == want, (d[2:], d[1].hex())
            assert _digest_view(tree) == _digest_view(full), (d[2:], d[1].hex())
            n += 1
            named += any(t is not None for t, _p, _d in want)
        # the figures alone: a subset of the topics' tree, the same where both keep a field
        lean, _ = plain.request(c[1], c[2])
        assert {f.name for f in lean.walk()} <= {f.name for f in fig.request(c[1], c[2])[0].walk()}
    # (the samples alone: 4,120 requests, 948 naming a topic; with ../shared's captures,
    # over 5,000 and 1,000)
    assert n > (5000 if SHARED_CAPTURES.is_dir() else 4000) and named > (1000 if SHARED_CAPTURES.is_dir() else 900)
