"""The generic schema decoder, annotations, nested payloads and secrets.

Small hand-built FieldDef tables test each primitive and each malformed case;
real frames from ../shared/captures test whole messages.
"""
from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest

from dissectors import decoder, kafka
from dissectors.consumer import decode_assignment, decode_subscription
from dissectors.context import DecodeContext, Limits, Presentation
from dissectors.decoder import decode_struct
from dissectors.errors import ERRORS, error_name
from dissectors.field import Field
from dissectors.schema import ANY, APIS, ApiDef, FieldDef
from tests.pcapgen import uvarint

SHARED = Path(__file__).resolve().parents[2] / "shared"
CAPTURES = SHARED / "captures"


def F(name: str, typ: str, versions: tuple[int, int] = (0, ANY), **kw) -> FieldDef:  # noqa: N802
    return FieldDef(name, typ, versions, **kw)


def dec(fields: tuple[FieldDef, ...], data: bytes, version: int = 0, flexible: bool = False,
        ctx: DecodeContext | None = None) -> tuple[Field, int, DecodeContext]:
    ctx = ctx or DecodeContext()
    root, pos = decode_struct(fields, version, flexible, data, 0, len(data), ctx, "body", "T")
    return root, pos, ctx


def zigzag(n: int, bits: int = 64) -> int:
    return (n << 1) ^ (n >> (bits - 1))


def malformed_notes(f: Field) -> list[str]:
    return [n for x in f.walk() for n in (x.notes or ()) if n.startswith("malformed")]


# ---------------------------------------------------------------------------
# primitives
# ---------------------------------------------------------------------------

def test_fixed_primitives_values_offsets_lengths() -> None:
    fields = (F("a", "int8"), F("b", "int16"), F("c", "int32"), F("d", "int64"), F("e", "uint16"),
              F("f", "uint32"), F("g", "float64"), F("h", "bool"), F("i", "uuid"))
    uid = bytes(range(16))
    data = struct.pack(">bhiqHIdB", -5, -300, -70000, -(2 ** 40), 65535, 4_000_000_000, 1.5, 2) + uid
    root, pos, ctx = dec(fields, data)
    got = [(c.name, c.type, c.value, c.offset, c.length) for c in root.children]
    assert got == [
        ("a", "int8", -5, 0, 1), ("b", "int16", -300, 1, 2), ("c", "int32", -70000, 3, 4),
        ("d", "int64", -(2 ** 40), 7, 8), ("e", "uint16", 65535, 15, 2), ("f", "uint32", 4_000_000_000, 17, 4),
        ("g", "float64", 1.5, 21, 8), ("h", "bool", True, 29, 1),
        ("i", "uuid", "00010203-0405-0607-0809-0a0b0c0d0e0f", 30, 16),
    ]
    assert pos == len(data) and root.length == len(data) and ctx.counts.malformed == 0


def test_varint_and_varlong_zigzag() -> None:
    fields = (F("v", "varint"), F("w", "varlong"), F("x", "varint"))
    data = uvarint(zigzag(-1, 32)) + uvarint(zigzag(-(2 ** 40))) + uvarint(zigzag(300, 32))
    root, pos, _ = dec(fields, data)
    assert [c.value for c in root.children] == [-1, -(2 ** 40), 300]
    assert [c.length for c in root.children] == [1, 6, 2]
    assert pos == len(data)


def test_varint_too_long_is_malformed() -> None:
    root, _, ctx = dec((F("v", "varint"),), b"\xff" * 6)
    assert ctx.counts.malformed == 1
    assert "longer than 5 bytes" in malformed_notes(root)[0]


def test_fixed_field_cut_short_keeps_earlier_fields() -> None:
    fields = (F("a", "int32"), F("b", "int64"), F("c", "int16"))
    root, _, ctx = dec(fields, struct.pack(">i", 7) + b"\x00\x01")
    assert root.children[0].value == 7
    bad = root.children[1]
    assert bad.name == "b" and bad.offset == 4 and bad.is_malformed
    assert "int64 needs 8 bytes, 2 left" in bad.notes[0]
    assert len(root.children) == 2 and ctx.counts.malformed == 1


@pytest.mark.parametrize("flexible", [False, True])
def test_strings_normal_null_and_nullable(flexible: bool) -> None:
    def s(v: bytes | None) -> bytes:
        if flexible:
            return b"\x00" if v is None else uvarint(len(v) + 1) + v
        return struct.pack(">h", -1) if v is None else struct.pack(">h", len(v)) + v
    fields = (F("a", "string"), F("b", "string", nullable=(0, ANY)), F("c", "string"))
    data = s("héllo".encode()) + s(None) + s(b"") + (b"\x00" if flexible else b"")
    root, pos, ctx = dec(fields, data, flexible=flexible)
    # (a flexible struct shows its tagged-field section, empty here)
    assert [c.value for c in root.children] == ["héllo", None, ""] + ([0] if flexible else [])
    assert root.children[0].length == (7 if flexible else 8)
    assert pos == len(data) and ctx.counts.malformed == 0
    # null in a non-nullable string is noted, not fatal
    root, _, ctx = dec((F("a", "string"),), s(None) + (b"\x00" if flexible else b""), flexible=flexible)
    assert root.children[0].value is None and "non-nullable" in root.children[0].notes[0]
    assert ctx.counts.malformed == 0


@pytest.mark.parametrize("flexible", [False, True])
def test_string_length_past_end_is_malformed(flexible: bool) -> None:
    prefix = uvarint(901) if flexible else struct.pack(">h", 900)
    root, _, ctx = dec((F("n", "int8"), F("s", "string")), b"\x01" + prefix + b"abc", flexible=flexible)
    assert root.children[0].value == 1
    assert malformed_notes(root) == ["malformed: string length 900 exceeds the 3 bytes left"]
    assert ctx.counts.malformed == 1


def test_string_invalid_utf8_noted() -> None:
    root, _, ctx = dec((F("s", "string"),), struct.pack(">h", 2) + b"\xff\xfe")
    assert root.children[0].notes == ["invalid UTF-8"] and ctx.counts.malformed == 0


def test_negative_lengths_below_minus_one_are_malformed() -> None:
    root, _, ctx = dec((F("b", "bytes"),), struct.pack(">i", -7))
    assert "negative" in malformed_notes(root)[0]


@pytest.mark.parametrize("flexible", [False, True])
def test_bytes_forms(flexible: bool) -> None:
    def b(v: bytes | None) -> bytes:
        if flexible:
            return b"\x00" if v is None else uvarint(len(v) + 1) + v
        return struct.pack(">i", -1) if v is None else struct.pack(">i", len(v)) + v
    fields = (F("a", "bytes"), F("b", "bytes", nullable=(0, ANY)))
    root, pos, _ = dec(fields, b(b"\x00\x01\x02") + b(None) + (b"\x00" if flexible else b""), flexible=flexible)
    assert root.children[0].value == b"\x00\x01\x02" and root.children[1].value is None
    assert len(root.children) == (3 if flexible else 2)
    root, _, ctx = dec(fields, (uvarint(10_000) if flexible else struct.pack(">i", 10_000)) + b"xx",
                       flexible=flexible)
    assert ctx.counts.malformed == 1 and "bytes length" in malformed_notes(root)[0]


def test_arrays_of_structs_and_primitives() -> None:
    part = (F("p", "int32"), F("e", "int16", meaning="error_code"))
    fields = (F("ids", "array", element="int32"),
              F("parts", "array", element="struct", struct="Part", fields=part),
              F("names", "array", element="string", nullable=(0, ANY)))
    data = (struct.pack(">iii", 2, 5, 6) + struct.pack(">i", 2) + struct.pack(">ih", 0, 0)
            + struct.pack(">ih", 1, 3) + struct.pack(">i", -1))
    root, pos, ctx = dec(fields, data)
    ids, parts, names = root.children
    assert (ids.type, ids.value, [c.value for c in ids.children]) == ("array", 2, [5, 6])
    assert [c.name for c in ids.children] == ["[0]", "[1]"] and ids.children[1].offset == 8
    assert parts.value == 2 and parts.children[1].type == "Part"
    assert parts.children[1].get("e") == 3 and parts.children[1].child("e").notes == ["UNKNOWN_TOPIC_OR_PARTITION"]
    assert parts.children[1].offset == 22 and parts.children[1].length == 6
    assert names.value is None and pos == len(data) and ctx.counts.malformed == 0
    assert kafka.error_codes(root) == ["UNKNOWN_TOPIC_OR_PARTITION"]


def test_compact_arrays() -> None:
    fields = (F("ids", "array", element="int32"), F("s", "array", element="string"),
              F("n", "array", element="int64", nullable=(0, ANY)))
    data = b"\x03" + struct.pack(">ii", 1, 2) + b"\x02\x02z" + b"\x00" + b"\x00"
    root, pos, ctx = dec(fields, data, flexible=True)
    assert root.children[0].value == 2 and [c.value for c in root.children[0].children] == [1, 2]
    assert root.children[1].children[0].value == "z"
    assert root.children[2].value is None
    assert pos == len(data) and ctx.counts.malformed == 0


def test_huge_array_count_is_malformed_without_looping() -> None:
    fields = (F("parts", "array", element="struct", struct="P", fields=(F("p", "int32"),)),)
    root, _, ctx = dec(fields, struct.pack(">i", 2_000_000_000) + b"\x00" * 8)
    assert malformed_notes(root) == ["malformed: array count 2000000000 exceeds max_array_len 1000000"]
    assert ctx.counts.limits_hit == {"max_array_len": 1}
    root, _, ctx = dec(fields, struct.pack(">i", 900_000) + b"\x00" * 8)
    assert malformed_notes(root) == ["malformed: array count 900000 exceeds the 8 bytes left"]
    assert ctx.counts.limits_hit == {}


def test_max_array_len_configurable() -> None:
    ctx = DecodeContext(Limits(max_array_len=2))
    root, _, ctx = dec((F("ids", "array", element="int8"),), struct.pack(">i", 3) + b"abc", ctx=ctx)
    assert ctx.counts.limits_hit == {"max_array_len": 1} and root.any_malformed()


def test_nested_and_nullable_structs_and_depth_limit() -> None:
    inner = (F("x", "int8"),)
    fields = (F("s", "struct", struct="Inner", fields=inner),
              F("n", "struct", struct="Inner", fields=inner, nullable=(0, ANY)),
              F("m", "struct", struct="Inner", fields=inner, nullable=(0, ANY)))
    data = b"\x07\x00" + b"\xff" + b"\x01\x09\x00" + b"\x00"
    root, pos, ctx = dec(fields, data, flexible=True)
    s, n, m, tags = root.children
    assert (s.type, s.get("x"), s.offset, s.length) == ("Inner", 7, 0, 2)
    # every struct of a flexible version shows its (empty) tagged-field section
    assert [(c.name, c.value, c.offset, c.length) for c in s.children] == [("x", 7, 0, 1), ("tagged_fields", 0, 1, 1)]
    assert (tags.name, tags.value, tags.offset) == ("tagged_fields", 0, 6)
    assert n.value is None and n.children is None and n.length == 1
    assert m.get("x") == 9 and m.length == 3 and pos == len(data)
    deep: tuple[FieldDef, ...] = (F("x", "int8"),)
    for _ in range(5):
        deep = (F("s", "struct", struct="S", fields=deep),)
    root, _, ctx = dec(deep, b"\x01", ctx=DecodeContext(Limits(max_depth=3)))
    assert ctx.counts.limits_hit == {"max_depth": 1} and root.any_malformed()
    root, _, ctx = dec(deep, b"\x01")
    assert not root.any_malformed()


def test_tagged_fields_known_unknown_and_bad() -> None:
    fields = (F("a", "int8"), F("t0", "int32", tag=0, tagged=(0, ANY)),
              F("t2", "string", tag=2, tagged=(0, ANY)))
    data = b"\x05" + b"\x03" + b"\x00\x04" + struct.pack(">i", 42) + b"\x01\x02\xab\xcd" + b"\x02\x03\x03hi"
    root, pos, ctx = dec(fields, data, flexible=True)
    a, tags = root.children
    assert (tags.name, tags.value, tags.offset, tags.length) == ("tagged_fields", 3, 1, len(data) - 1)
    t0, t1, t2 = tags.children
    assert (t0.name, t0.value, t0.offset, t0.notes) == ("t0", 42, 4, ["tag 0"])
    assert (t1.name, t1.type, t1.value) == ("tag_1", "bytes", b"\xab\xcd")
    assert (t2.value, t2.notes) == ("hi", ["tag 2"]) and pos == len(data) and ctx.counts.malformed == 0
    assert t1.notes == ["unknown tagged field 1"]
    # tagged fields are not read in non-flexible versions, where they do not exist
    root, pos, _ = dec(fields, b"\x05", flexible=False)
    assert [c.name for c in root.children] == ["a"] and pos == 1
    # an empty section is shown too: one byte, no fields
    root, _, _ = dec(fields, b"\x05\x00", flexible=True)
    assert [(c.name, c.value, c.offset, c.length) for c in root.children] == [("a", 5, 0, 1),
                                                                              ("tagged_fields", 0, 1, 1)]
    # a tag whose size runs past the end
    root, _, ctx = dec(fields, b"\x05\x01\x07\x50xx", flexible=True)
    assert malformed_notes(root) == ["malformed: tagged field 7 size 80 exceeds the 2 bytes left"]
    root, _, ctx = dec(fields, b"\x05\x7f", flexible=True)
    assert "tagged field count 127" in malformed_notes(root)[0]


def test_version_ranges_select_fields() -> None:
    fields = (F("a", "int8"), F("b", "int8", (2, ANY)), F("c", "int8", (0, 1)))
    root, _, _ = dec(fields, b"\x01\x02", version=1)
    assert [c.name for c in root.children] == ["a", "c"]
    root, _, _ = dec(fields, b"\x01\x02", version=3)
    assert [c.name for c in root.children] == ["a", "b"]


def test_records_fallback_when_records_module_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decoder, "_records_fn", None)
    monkeypatch.setitem(sys.modules, "dissectors.records", None)
    root, _, ctx = dec((F("r", "records", nullable=(0, ANY)),), struct.pack(">i", 3) + b"abc")
    r = root.children[0]
    assert (r.type, r.value) == ("bytes", b"abc") and "unavailable" in r.notes[0]
    assert ctx.counts.malformed == 0


def test_records_delegated_to_records_module() -> None:
    pytest.importorskip("dissectors.records")
    root, _, ctx = dec((F("r", "records", nullable=(0, ANY)),), struct.pack(">i", -1))
    assert root.children[0].type == "records" and root.children[0].value is None


# ---------------------------------------------------------------------------
# messages: header, versions, trailing bytes
# ---------------------------------------------------------------------------

def _req_header(api_key: int, version: int, cid: int, client: bytes | None, flexible: bool) -> bytes:
    h = struct.pack(">hhi", api_key, version, cid)
    h += struct.pack(">h", -1) if client is None else struct.pack(">h", len(client)) + client
    return h + (b"\x00" if flexible else b"")


def test_request_header_tree_and_body() -> None:
    # ApiVersions v3: client_software_name / version, flexible, header v2
    body = b"\x04abc" + b"\x021" + b"\x00"
    data = _req_header(18, 3, 77, b"cli", True) + body
    t = kafka.decode_request(data, DecodeContext())
    assert (t.name, t.type, t.offset, t.length) == ("request", "ApiVersionsRequest", 0, len(data))
    h, b = t.children
    assert h.type == "RequestHeader v2" and h.length == 14
    assert [(c.name, c.value) for c in h.children] == [
        ("api_key", 18), ("api_version", 3), ("correlation_id", 77), ("client_id", "cli"), ("tagged_fields", 0)]
    assert h.children[0].notes == ["ApiVersions"]
    assert b.type == "ApiVersionsRequest v3" and b.offset == 14
    assert b.get("client_software_name") == "abc" and b.get("client_software_version") == "1"
    assert not t.any_malformed()


def test_request_newer_version_decoded_as_newest_with_note() -> None:
    api = APIS[18]
    # (a body in the newest layout, v5's: software name and version, a null cluster id, node id -1)
    data = _req_header(18, api.max_version + 1, 1, b"c", True) + b"\x02a\x02b\x00" + struct.pack(">i", -1) + b"\x00"
    t = kafka.decode_request(data, DecodeContext())
    body = t.child("body")
    assert body.type == f"ApiVersionsRequest v{api.max_version}"
    assert (f"version {api.max_version + 1} is newer than the newest known ({api.max_version}): "
            f"decoded as v{api.max_version}") in body.notes


def test_unknown_api_key_keeps_raw_body() -> None:
    data = _req_header(999, 0, 5, b"c", True) + b"\x01\x02"
    t = kafka.decode_request(data, DecodeContext())
    assert t.type == "Unknown(999)Request"
    body = t.child("body")
    assert body.value == b"\x01\x02" and "unknown API key 999" in body.notes[0]
    assert t.child("header").type == "RequestHeader v2" and not t.any_malformed()


def test_request_header_cut_short() -> None:
    ctx = DecodeContext()
    t = kafka.decode_request(b"\x00\x03\x00", ctx)
    assert t.any_malformed() and ctx.counts.malformed == 1
    t = kafka.decode_request(struct.pack(">hhih", 3, 1, 1, 50) + b"ab", ctx)
    assert "client_id length 50" in malformed_notes(t)[0]


def test_trailing_bytes_flagged_and_counted() -> None:
    ctx = DecodeContext()
    # Heartbeat v0: group_id, generation_id, member_id, then 3 bytes the schema does not describe
    t = kafka.decode_request(struct.pack(">hhi", 12, 0, 1) + struct.pack(">h", 1) + b"c"
                             + struct.pack(">h", 1) + b"g" + struct.pack(">i", 5)
                             + struct.pack(">h", 1) + b"m" + b"xyz", ctx)
    body = t.child("body")
    assert body.get("group_id") == "g" and body.get("member_id") == "m"
    tb = body.child("trailing_bytes")
    assert tb.value == b"xyz" and tb.notes == ["3 trailing bytes after the message"]
    assert ctx.counts.trailing == 1 and ctx.counts.malformed == 0


def test_response_header_versions() -> None:
    # ApiVersions v3 response: header v0 even though the body is flexible
    body = struct.pack(">h", 0) + b"\x02" + struct.pack(">hhh", 18, 0, 4) + b"\x00" + struct.pack(">i", 0) + b"\x00"
    r = kafka.decode_response(struct.pack(">i", 9) + body, 18, 3, DecodeContext())
    assert r.child("header").type == "ResponseHeader v0" and r.child("header").length == 4
    assert r.child("body").child("api_keys").children[0].child("api_key").notes == ["ApiVersions"]
    assert not r.any_malformed()
    # Heartbeat v4 (flexible): header v1 with tagged fields
    r = kafka.decode_response(struct.pack(">i", 9) + b"\x00" + struct.pack(">ih", 0, 27) + b"\x00", 12, 4,
                              DecodeContext())
    assert [c.name for c in r.child("header").children] == ["correlation_id", "tagged_fields"]
    assert kafka.error_codes(r) == ["REBALANCE_IN_PROGRESS"]


def test_api_versions_unsupported_version_answer_in_v0_layout() -> None:
    body = struct.pack(">hi", 35, 1) + struct.pack(">hhh", 18, 0, 3)
    r = kafka.decode_response(struct.pack(">i", 1) + body, 18, 4, DecodeContext())
    b = r.child("body")
    assert b.type == "ApiVersionsResponse v0" and not r.any_malformed()
    assert "UNSUPPORTED_VERSION answer in the v0 layout (requested v4)" in b.notes


def test_error_codes_in_wire_order_with_duplicates() -> None:
    root = Field("r", "R", children=[
        Field("error_code", "int16", 3), Field("x", "array", children=[
            Field("error_code", "int16", 0), Field("partition_error_code", "int16", 6),
            Field("error_code", "int16", 3)])])
    assert kafka.error_codes(root) == ["UNKNOWN_TOPIC_OR_PARTITION", "NOT_LEADER_OR_FOLLOWER",
                                       "UNKNOWN_TOPIC_OR_PARTITION"]


def test_error_table() -> None:
    assert ERRORS[-1] == "UNKNOWN_SERVER_ERROR" and ERRORS[0] == "NONE"
    assert ERRORS[36] == "TOPIC_ALREADY_EXISTS" and ERRORS[133] == "SHARE_SESSION_LIMIT_REACHED"
    assert set(ERRORS) == set(range(-1, 134))
    assert error_name(4242) == "UNKNOWN_ERROR_CODE_4242"


def test_list_apis() -> None:
    apis = kafka.list_apis()
    assert [a["api_key"] for a in apis] == sorted(APIS)
    produce = apis[0]
    assert produce["name"] == "Produce" and produce["min_version"] == 0 and produce["flexible_from"] == 9
    assert set(produce) == {"api_key", "name", "min_version", "max_version", "flexible_from"}


# ---------------------------------------------------------------------------
# annotations
# ---------------------------------------------------------------------------

def test_meaning_annotations() -> None:
    fields = (F("ts", "int64", meaning="timestamp_ms"), F("none_ts", "int64", meaning="timestamp_ms"),
              F("spec", "int64", meaning="offset_spec"), F("acks", "int16", meaning="acks"),
              F("iso", "int8", meaning="isolation_level"), F("op", "int8", meaning="acl_operation"),
              F("perm", "int8", meaning="acl_permission"), F("pat", "int8", meaning="pattern_type"),
              F("src", "int8", meaning="config_source"), F("ct", "int8", meaning="coordinator_type"),
              F("rt", "int8", meaning="resource_type"))
    data = struct.pack(">qqqhbbbbbbb", 1_700_000_000_123, -1, -2, -1, 1, 3, 3, 4, 5, 1, 2)
    root, _, _ = dec(fields, data)
    notes = {c.name: c.notes for c in root.children}
    assert notes == {"ts": ["2023-11-14T22:13:20.123Z"], "none_ts": ["none"], "spec": ["earliest"],
                     "acks": ["all"], "iso": ["READ_COMMITTED"], "op": ["READ"], "perm": ["ALLOW"],
                     "pat": ["PREFIXED"], "src": ["DEFAULT_CONFIG"], "ct": ["TRANSACTION"], "rt": ["TOPIC"]}


def test_resource_type_numbering_depends_on_api() -> None:
    fields = (F("rt", "int8", meaning="resource_type"),)
    st = decoder.State(DecodeContext(), api_key=32)  # DescribeConfigs: ConfigResource numbering
    root, _ = decode_struct(fields, 0, False, b"\x04", 0, 1, st.ctx, "b", "T", st=st)
    assert root.children[0].notes == ["BROKER"]
    st = decoder.State(DecodeContext(), api_key=29)  # DescribeAcls: ACL numbering
    root, _ = decode_struct(fields, 0, False, b"\x04", 0, 1, st.ctx, "b", "T", st=st)
    assert root.children[0].notes == ["CLUSTER"]


def _metadata_v12_response(topic: str, tid: bytes) -> bytes:
    # throttle, brokers[], cluster_id, controller_id, topics[1] {error, name, id, internal, partitions[], ops}
    body = struct.pack(">i", 0) + b"\x01" + b"\x00" + struct.pack(">i", 1)
    body += b"\x02" + struct.pack(">h", 0) + uvarint(len(topic) + 1) + topic.encode() + tid + b"\x00" + b"\x01" \
        + struct.pack(">i", 0) + b"\x00" + b"\x00"
    return struct.pack(">i", 1) + b"\x00" + body


def test_topic_ids_learnt_from_metadata_and_resolved_later() -> None:
    ctx = DecodeContext()
    tid = bytes.fromhex("0123456789abcdef0123456789abcdef")
    r = kafka.decode_response(_metadata_v12_response("orders", tid), 3, 12, ctx)
    assert not r.any_malformed()
    assert ctx.topic_names == {"01234567-89ab-cdef-0123-456789abcdef": "orders"}
    assert r.child("body").child("topics").children[0].child("topic_id").notes == ["topic orders"]
    # a later Fetch v13 request names the topic by id only
    fetch = (struct.pack(">iiii", -1, 500, 1, 1024) + b"\x00" + struct.pack(">ii", 0, -1) + b"\x02" + tid
             + b"\x01" + b"\x01" + b"\x01" + b"\x00" + b"\x00")
    req = kafka.decode_request(_req_header(1, 13, 2, b"c", True) + fetch, ctx)
    tids = [f for f in req.walk() if f.name == "topic_id"]
    assert tids and tids[0].notes == ["topic orders"]
    other = kafka.decode_request(_req_header(1, 13, 2, b"c", True) + fetch.replace(tid, b"\x11" * 16),
                                 DecodeContext())
    assert [f.notes for f in other.walk() if f.name == "topic_id"] == [["unresolved"]]


# ---------------------------------------------------------------------------
# nested payloads: consumer protocol
# ---------------------------------------------------------------------------

def _s(v: str) -> bytes:
    return struct.pack(">h", len(v)) + v.encode()


def subscription_v1() -> bytes:
    return (struct.pack(">h", 1) + struct.pack(">i", 2) + _s("a") + _s("b") + struct.pack(">i", 2) + b"ud"
            + struct.pack(">i", 1) + _s("a") + struct.pack(">iii", 2, 0, 3))


def assignment_v0() -> bytes:
    return (struct.pack(">h", 0) + struct.pack(">i", 1) + _s("t") + struct.pack(">iii", 2, 1, 4)
            + struct.pack(">i", -1))


def test_consumer_subscription_and_assignment() -> None:
    ctx = DecodeContext()
    sub = decode_subscription(subscription_v1(), 0, len(subscription_v1()), ctx)
    assert sub.type == "ConsumerProtocolSubscription v1" and not sub.any_malformed()
    assert sub.get("version") == 1
    assert [c.value for c in sub.child("topics").children] == ["a", "b"]
    assert sub.get("user_data") == b"ud"
    owned = sub.child("owned_partitions").children[0]
    assert owned.get("topic") == "a" and [c.value for c in owned.child("partitions").children] == [0, 3]
    a = decode_assignment(assignment_v0(), 0, len(assignment_v0()), ctx)
    tp = a.child("assigned_partitions").children[0]
    assert tp.get("topic") == "t" and [c.value for c in tp.child("partitions").children] == [1, 4]
    assert a.get("user_data") is None and ctx.counts.malformed == 0
    # a newer version decodes as v3 with a note, extra bytes kept
    newer = struct.pack(">h", 9) + assignment_v0()[2:] + b"\x01\x02"
    a = decode_assignment(newer, 0, len(newer), ctx)
    assert "newer than the newest known (3)" in a.notes[0] and a.child("trailing_bytes").value == b"\x01\x02"


def test_join_group_request_subscription_decoded_in_place() -> None:
    sub = subscription_v1()
    # JoinGroup v5: group_id, session_timeout, rebalance_timeout, member_id, group_instance_id,
    # protocol_type, protocols[] {name, metadata}
    body = (_s("grp") + struct.pack(">ii", 10000, 30000) + _s("") + struct.pack(">h", -1) + _s("consumer")
            + struct.pack(">i", 1) + _s("range") + struct.pack(">i", len(sub)) + sub)
    data = _req_header(11, 5, 3, b"c", False) + body
    t = kafka.decode_request(data, DecodeContext())
    meta = t.child("body").child("protocols").children[0].child("metadata")
    nested = meta.child("subscription")
    assert nested is not None and nested.offset == len(data) - len(sub) and nested.length == len(sub)
    assert [c.value for c in nested.child("topics").children] == ["a", "b"]
    # another protocol type: left alone
    t = kafka.decode_request(data.replace(_s("consumer"), _s("connect!")), DecodeContext())
    assert t.child("body").child("protocols").children[0].child("metadata").children is None


def test_sync_group_response_assignment_decoded() -> None:
    asg = assignment_v0()
    # SyncGroup v3: throttle, error, assignment (protocol_type arrives in v5)
    data = struct.pack(">i", 4) + struct.pack(">ih", 0, 0) + struct.pack(">i", len(asg)) + asg
    r = kafka.decode_response(data, 14, 3, DecodeContext())
    nested = r.child("body").child("assignment").child("assignment")
    assert nested.type == "ConsumerProtocolAssignment v0"
    assert nested.child("assigned_partitions").children[0].get("topic") == "t"


# ---------------------------------------------------------------------------
# secrets
# ---------------------------------------------------------------------------

def _sasl_auth_request(token: bytes) -> bytes:
    return _req_header(36, 1, 5, b"c", False) + struct.pack(">i", len(token)) + token


@pytest.mark.parametrize("show", [False, True])
def test_sasl_plain_password_redacted(show: bool) -> None:
    ctx = DecodeContext(presentation=Presentation(show_secrets=show))
    t = kafka.decode_request(_sasl_auth_request(b"\x00alice\x00s3cret!"), ctx)
    ab = t.child("body").child("auth_bytes")
    tok = ab.child("sasl")
    assert tok.type == "SASL PLAIN" and tok.get("username") == "alice"
    pw = tok.child("password")
    if show:
        assert pw.value == "s3cret!" and ab.value == b"\x00alice\x00s3cret!"
    else:
        assert pw.value == "<redacted 7 bytes>" and ab.value == "<redacted 14 bytes>"
        assert "s3cret" not in repr([f.value for f in t.walk()])
    assert pw.offset == len(_sasl_auth_request(b"")) + 7 and pw.length == 7


def test_sasl_scram_messages() -> None:
    ctx = DecodeContext()
    first = b"n,,n=bob,r=fyko+d2lbbFgONRv9qkxdawL"
    t = kafka.decode_request(_sasl_auth_request(first), ctx)
    tok = t.child("body").child("auth_bytes").child("sasl")
    assert tok.type == "SCRAM client-first"
    assert tok.get("username") == "bob" and tok.get("nonce") == "fyko+d2lbbFgONRv9qkxdawL"
    assert t.child("body").get("auth_bytes") == first  # nothing secret in client-first
    final = b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts="
    t = kafka.decode_request(_sasl_auth_request(final), ctx)
    ab = t.child("body").child("auth_bytes")
    tok = ab.child("sasl")
    assert tok.type == "SCRAM client-final" and tok.get("proof") == "<redacted 28 bytes>"
    assert ab.value == f"<redacted {len(final)} bytes>"
    # server side: SaslAuthenticate v1 response auth_bytes
    srv = b"r=abc,s=QSXCR+Q6sek8bf92,i=4096"
    resp = struct.pack(">i", 5) + struct.pack(">hh", 0, -1) + struct.pack(">i", len(srv)) + srv \
        + struct.pack(">q", 0)
    r = kafka.decode_response(resp, 36, 1, ctx)
    tok = r.child("body").child("auth_bytes").child("sasl")
    assert tok.type == "SCRAM server-first" and tok.get("iterations") == 4096 and tok.get("salt") == "QSXCR+Q6sek8bf92"


@pytest.mark.parametrize("show", [False, True])
def test_oauthbearer_token_redacted(show: bool) -> None:
    token = b"n,a=user@example.com,\x01host=broker\x01auth=Bearer eyJhbGciOi.payload.sig\x01\x01"
    ctx = DecodeContext(presentation=Presentation(show_secrets=show))
    tok = kafka.decode_sasl_token(token, ctx, "OAUTHBEARER", True)
    assert tok.get("authzid") == "user@example.com" and tok.get("host") == "broker"
    assert tok.get("auth_scheme") == "Bearer"
    assert tok.get("token") == ("eyJhbGciOi.payload.sig" if show else "<redacted 22 bytes>")
    assert token[tok.child("token").offset:][:3] == b"eyJ"


def test_raw_sasl_frame_plain_with_mechanism() -> None:
    tok = kafka.decode_sasl_token(b"admin\x00bob\x00pw", DecodeContext(), "PLAIN", True)
    assert (tok.get("authzid"), tok.get("username"), tok.get("password")) == ("admin", "bob", "<redacted 2 bytes>")
    gss = kafka.decode_sasl_token(b"\x60\x82\x01", DecodeContext(), "GSSAPI", True)
    assert gss.value == b"\x60\x82\x01" and "opaque" in gss.notes[-1]


def test_secret_meaning_and_password_like_config_values() -> None:
    fields = (F("hmac", "bytes", meaning="secret"),
              F("configs", "array", element="struct", struct="C",
                fields=(F("name", "string"), F("value", "string", nullable=(0, ANY), meaning="config_value"))))
    data = (struct.pack(">i", 4) + b"\x01\x02\x03\x04" + struct.pack(">i", 2)
            + _s("ssl.key.password") + _s("hunter2") + _s("retention.ms") + _s("1000"))
    root, _, _ = dec(fields, data)
    hmac, configs = root.children
    assert hmac.value == "<redacted 4 bytes>"
    assert [c.get("value") for c in configs.children] == ["<redacted 7 bytes>", "1000"]
    root, _, _ = dec(fields, data, ctx=DecodeContext(presentation=Presentation(show_secrets=True)))
    assert root.children[0].value == b"\x01\x02\x03\x04"
    assert root.children[1].children[0].get("value") == "hunter2"


def test_schema_marks_the_secrets_issue_10_lists() -> None:
    """DescribeConfigs / AlterConfigs / IncrementalAlterConfigs / CreateTopics config values and
    the delegation-token HMAC are redacted through the real schema."""
    def meanings(api: ApiDef, request: bool) -> set[str]:
        out: set[str] = set()
        stack = list(api.request if request else api.response)
        while stack:
            f = stack.pop()
            if f.meaning:
                out.add(f.meaning)
            stack.extend(f.fields)
        return out
    assert "config_value" in meanings(APIS[32], False)   # DescribeConfigs response
    assert "config_value" in meanings(APIS[33], True)    # AlterConfigs request
    assert "config_value" in meanings(APIS[44], True)    # IncrementalAlterConfigs request
    assert "config_value" in meanings(APIS[19], True)    # CreateTopics request
    assert "secret" in meanings(APIS[38], False)         # CreateDelegationToken response hmac
    # an IncrementalAlterConfigs v0 request setting a password through the real table
    body = (struct.pack(">i", 1) + b"\x04" + _s("0") + struct.pack(">i", 1) + _s("sasl.jaas.config")
            + b"\x00" + _s("org.Foo required password=x;") + b"\x00")
    t = kafka.decode_request(_req_header(44, 0, 1, b"c", False) + body, DecodeContext())
    vals = [f for f in t.walk() if f.name == "value"]
    assert vals and vals[0].value == "<redacted 28 bytes>"
    assert t.child("body").child("resources").children[0].child("resource_type").notes == ["BROKER"]


# ---------------------------------------------------------------------------
# real captures
# ---------------------------------------------------------------------------

def _frames(path: Path, broker_ports: set[int]) -> list[tuple[bytes, bytes | None]]:
    """Tiny pcap -> (request, response) helper for tests: loopback captures, no loss."""
    scapy = pytest.importorskip("scapy.all")
    segs: dict[tuple, dict[int, bytes]] = {}
    for p in scapy.rdpcap(str(path)):
        if scapy.TCP not in p:
            continue
        t = p[scapy.TCP]
        payload = bytes(t.payload)
        if payload:
            segs.setdefault((p.payload.src, t.sport, p.payload.dst, t.dport), {}).setdefault(t.seq, payload)
    streams: dict[tuple, list[bytes]] = {}
    for key, by_seq in segs.items():
        data = b"".join(by_seq[s] for s in sorted(by_seq))
        out, pos = [], 0
        while pos + 4 <= len(data):
            (n,) = struct.unpack_from(">i", data, pos)
            if n < 0 or pos + 4 + n > len(data):
                break
            out.append(data[pos + 4:pos + 4 + n])
            pos += 4 + n
        streams[key] = out
    pairs = []
    for (src, sport, dst, dport), reqs in streams.items():
        if dport not in broker_ports:
            continue
        by_cid = {struct.unpack_from(">i", r)[0]: r for r in streams.get((dst, dport, src, sport), [])
                  if len(r) >= 4}
        pairs += [(q, by_cid.get(struct.unpack_from(">i", q, 4)[0])) for q in reqs if len(q) >= 8]
    return pairs


def _capture(name: str) -> list[tuple[bytes, bytes | None]]:
    path = CAPTURES / name
    if not path.exists():
        pytest.skip(f"{path} is absent (shared captures not available)")
    return _frames(path, {9092})


def _api(req: bytes) -> tuple[int, int]:
    return struct.unpack_from(">hh", req)  # type: ignore[return-value]


@pytest.mark.shared
def test_capture_api_versions_v3_response_decodes_fully() -> None:
    pairs = [(q, r) for q, r in _capture("edge_kcat_tansu.pcap") if _api(q) == (18, 3)]
    assert pairs
    ctx = DecodeContext()
    r = kafka.decode_response(pairs[0][1], 18, 3, ctx)
    assert not r.any_malformed() and ctx.counts.malformed == 0 and ctx.counts.trailing == 0
    body = r.child("body")
    assert body.child("api_keys").value == 36 and body.get("throttle_time_ms") == 0
    keys = {c.get("api_key"): c.get("max_version") for c in body.child("api_keys").children}
    assert keys[1] == 17 and keys[18] == 4
    tags = body.child("tagged_fields")
    assert [c.name for c in tags.children] == ["supported_features", "finalized_features_epoch",
                                               "finalized_features", "zk_migration_ready"]
    assert tags.offset + tags.length == len(pairs[0][1])


@pytest.mark.shared
def test_capture_sasl_scram_unknown_user() -> None:
    pairs = [(q, r) for q, r in _capture("sasl_scram_tansu_auth.pcap") if _api(q)[0] == 36 and r]
    assert pairs
    ctx = DecodeContext()
    q, r = pairs[0]
    t = kafka.decode_request(q, ctx)
    tok = t.child("body").child("auth_bytes").child("sasl")
    assert tok.type == "SCRAM client-first" and tok.get("username") and tok.get("nonce")
    seen = set()
    for q, r in pairs:
        resp = kafka.decode_response(r, 36, _api(q)[1], ctx)
        for f in resp.walk():
            if f.name == "sasl":
                seen.add(f.type)
                if f.type == "SCRAM server-final":
                    assert f.get("error") == "unknown-user"
    assert {"SCRAM server-first", "SCRAM server-final"} <= seen
    assert ctx.counts.malformed == 0


@pytest.mark.shared
def test_capture_kafkajs_group_consumer_protocol() -> None:
    pairs = _capture("group_kafkajs_tansu.pcap")
    ctx = DecodeContext()
    subs, asgs = [], []
    for q, r in pairs:
        key, ver = _api(q)
        if key not in (11, 14):
            continue
        t = kafka.decode_request(q, ctx)
        subs += [f for f in t.walk() if f.name == "subscription"]
        asgs += [f for f in t.walk() if f.name == "assignment" and f.type.startswith("ConsumerProtocol")]
        if r:
            resp = kafka.decode_response(r, key, ver, ctx)
            asgs += [f for f in resp.walk() if f.type.startswith("ConsumerProtocolAssignment")]
    assert subs and asgs
    assert all(not s.any_malformed() for s in subs + asgs)
    assert subs[0].child("topics").value >= 1
    assert ctx.counts.malformed == 0


@pytest.mark.shared
def test_capture_metadata_teaches_topic_ids() -> None:
    ctx = DecodeContext()
    for q, r in _capture("admin_rdkafka_tansu.pcap"):
        key, ver = _api(q)
        kafka.decode_request(q, ctx)
        if r:
            kafka.decode_response(r, key, ver, ctx)
    assert {"adm-rd-a", "adm-rd-b"} <= set(ctx.topic_names.values())


@pytest.mark.shared
@pytest.mark.parametrize("name", ["admin_kafkajs_tansu.pcap", "comp_none_rdkafka_tansu.pcap",
                                  "group_rdkafka_tansu.pcap", "txn_rdkafka_tansu.pcap",
                                  "comp_lz4_kafkajs_tansu.pcap"])
def test_capture_corpus_decodes_without_malformed(name: str) -> None:
    ctx = DecodeContext()
    pairs = _capture(name)
    assert pairs
    for q, r in pairs:
        key, ver = _api(q)
        t = kafka.decode_request(q, ctx)
        assert not t.any_malformed(), (key, ver)
        if r:
            resp = kafka.decode_response(r, key, ver, ctx)
            assert not resp.any_malformed(), (key, ver)
            assert resp.child("body").offset + resp.child("body").length == len(r)
    assert ctx.counts.malformed == 0


# ---------------------------------------------------------------------------
# hostile input: never an exception, always bounded
# ---------------------------------------------------------------------------

def test_fuzz_random_bodies_never_raise() -> None:
    hyp = pytest.importorskip("hypothesis")
    from hypothesis import strategies as hst

    cases = [(k, v) for k, a in sorted(APIS.items()) for v in (a.min_version, a.max_version)]

    @hyp.settings(max_examples=300, deadline=None, database=None, derandomize=True)
    @hyp.given(hst.sampled_from(cases), hst.binary(max_size=64), hst.booleans())
    def check(case: tuple[int, int], tail: bytes, request: bool) -> None:
        key, ver = case
        ctx = DecodeContext()
        if request:
            flexible = ver >= (APIS[key].flexible_from if APIS[key].flexible_from is not None else 10 ** 6)
            data = _req_header(key, ver, 1, b"c", flexible) + tail
            t = kafka.decode_request(data, ctx)
        else:
            data = struct.pack(">i", 1) + tail
            t = kafka.decode_response(data, key, ver, ctx)
        assert t.length == len(data) and t.to_json()["name"] in ("request", "response")
        for f in t.walk():
            assert f.offset >= 0 and f.length >= 0 and f.offset + f.length <= len(data)
    check()


def test_mutated_real_messages_never_raise() -> None:
    """Bit flips and cuts of a rich message (Metadata v12 response)."""
    import random
    rnd = random.Random(7)
    base = _metadata_v12_response("orders", bytes(range(16)))
    for i in range(400):
        b = bytearray(base)
        if i % 3 == 0:
            b = b[:rnd.randrange(len(b))]
        else:
            for _ in range(rnd.randint(1, 4)):
                b[rnd.randrange(len(b))] ^= 1 << rnd.randrange(8)
        ctx = DecodeContext()
        t = kafka.decode_response(bytes(b), 3, 12, ctx)
        t.to_json()
        assert t.child("header") is not None


def test_controlled_shutdown_v0_uses_header_v0() -> None:
    t = kafka.decode_request(struct.pack(">hhii", 7, 0, 5, 3), DecodeContext())
    h = t.child("header")
    assert h.type == "RequestHeader v0" and [c.name for c in h.children] == ["api_key", "api_version",
                                                                            "correlation_id"]
    assert t.child("body").get("broker_id") == 3 and not t.any_malformed()


def test_plans_compiled_once_and_reused() -> None:
    data = struct.pack(">i", 9) + struct.pack(">ih", 0, 0)
    kafka.decode_response(data, 12, 3, DecodeContext())
    plan = decoder._BODIES[(id(APIS[12]), 3, False)][1]
    kafka.decode_response(data, 12, 3, DecodeContext())
    assert decoder._BODIES[(id(APIS[12]), 3, False)][1] is plan
    assert decoder.compile_fields(APIS[12].response, 3, False, plan.type_name) is plan


def test_records_children_do_not_stretch_containers_after_an_early_stop() -> None:
    """A malformed spot after a records field: containers are fixed up over their
    children, but never over a records tree (its offsets may count from decompressed data)."""
    inner = Field("record", "Record", None, 5000, 10)
    rec = Field("records", "records", 1, 10, 4, [inner])
    arr = Field("parts", "array", 1, 8, 0, [Field("[0]", "P", None, 8, 0, [rec])])
    assert decoder._fix_lengths(arr) == 14 and arr.length == 6
