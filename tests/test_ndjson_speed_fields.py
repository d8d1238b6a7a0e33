"""Issue 11 (ndjson speed): the shortcuts on the full-decode/JSON path give exactly what
the general code gives: inline annotation notes, Field.to_json, describe_value's ASCII path."""
from __future__ import annotations

import json
import struct

from dissectors import annotate
from dissectors.context import DecodeContext
from dissectors.decoder import _fixed_group, decode_struct
from dissectors.errors import error_name
from dissectors.field import Field, json_value
from dissectors.schema import FieldDef, api_name
from dissectors.values import NOTE_MAX, as_json, as_text, describe_value


def _general_to_json(f: Field) -> dict:
    """The reference serialisation: json_value on every value, recursion on every child."""
    return {"name": f.name, "type": f.type, "value": json_value(f.value), "offset": f.offset,
            "length": f.length, "children": [_general_to_json(c) for c in f.children or ()],
            "notes": list(f.notes or ())}


def test_to_json_matches_the_general_form() -> None:
    leaf_bytes = Field("k", "bytes", b"\x00\xff", 3, 2, None, ["binary, 2 bytes"])
    tup = Field("t", "array", (1, b"\x01", "x"), 5, 3)
    dct = Field("d", "struct", {1: b"\x02", "a": None}, 8, 1)
    flt = Field("f", "float64", 1.5, 9, 8)
    root = Field("root", "Struct", None, 0, 17, [leaf_bytes, tup, dct, flt, Field("b", "bool", True, 1, 1)])
    got = root.to_json()
    assert got == _general_to_json(root)
    assert got["children"][0]["value"] == "00ff" and got["children"][1]["value"] == [1, "01", "x"]
    assert got["children"][2]["value"] == {"1": "02", "a": None}
    # fresh lists for every field: callers may change them
    assert got["children"][3]["children"] is not got["children"][4]["children"]
    assert got["children"][3]["notes"] == [] and got["children"][3]["notes"] is not got["children"][4]["notes"]


def test_note_tables_match_the_annotators() -> None:
    assert annotate.API_NOTES[18] == api_name(18) == "ApiVersions"
    assert annotate.API_NOTES[999] == api_name(999) == "Unknown(999)"
    assert 999 in annotate.API_NOTES and 18 in annotate.API_NOTES  # int16 keys are remembered
    acks = annotate.note_table("acks")
    assert acks is not None and acks[-1] == "all" and acks[7] == "unknown (7)" and 7 not in acks
    assert annotate.note_table("error_code") is None and annotate.note_table(None) is None
    assert annotate.ERROR_NOTES[3] == error_name(3) and annotate.ERROR_NOTES[-77] == "UNKNOWN_ERROR_CODE_-77"
    for meaning in ("api_key", "acks", "isolation_level", "pattern_type", "acl_operation", "acl_permission",
                    "config_source", "coordinator_type"):
        table = annotate.note_table(meaning)
        ann = annotate.annotator(meaning)
        assert table is not None and ann is not None
        for v in (-1, 0, 1, 2, 3, 18, 200):
            f = Field("x", "int16", v)
            ann(f, None, [f])
            assert f.notes == [table[v]]


def test_fixed_group_inline_notes_equal_annotator_calls() -> None:
    """A run with table, error-code, annotator-called and plain fields."""
    specs = [("api_key", "int16", None, "api_key"), ("error_code", "int16", None, "error_code"),
             ("acks", "int16", None, "acks"), ("ts", "int64", None, "timestamp_ms"),
             ("plain", "int32", None, None), ("ok", "int16", None, "error_code")]
    op = _fixed_group(specs)
    buf = struct.pack(">hhhqih", 3, 6, -1, -1, 42, 0)
    out: list[Field] = []

    class St:
        ctx = DecodeContext()
        api_key = 0

    assert op(buf, 0, len(buf), out, St()) == len(buf)
    assert [(f.name, f.value, f.offset, f.length, f.notes, f.extra) for f in out] == [
        ("api_key", 3, 0, 2, ["Metadata"], None),
        ("error_code", 6, 2, 2, ["NOT_LEADER_OR_FOLLOWER"], {"error_code": 6}),
        ("acks", -1, 4, 2, ["all"], None),
        ("ts", -1, 6, 8, ["none"], None),
        ("plain", 42, 14, 4, None, None),
        ("ok", 0, 18, 2, ["NONE"], None),     # zero is named too; only non-zero codes are collected
    ]


def test_struct_with_annotated_fields_cut_short_keeps_what_fits() -> None:
    fields = (FieldDef(name="error_code", type="int16", versions=(0, 0x7FFF), meaning="error_code"),
              FieldDef(name="api_key", type="int16", versions=(0, 0x7FFF), meaning="api_key"))
    ctx = DecodeContext()
    f, _ = decode_struct(fields, 0, False, struct.pack(">hb", 1, 0), 0, 3, ctx, "s", "S")
    kids = f.children or []
    assert [(c.name, c.value) for c in kids] == [("error_code", 1), ("api_key", None)]
    assert kids[1].is_malformed and ctx.counts.malformed == 1


def _describe_general(b: bytes) -> list[str]:
    """describe_value's text/json branches without the ASCII shortcut."""
    text = as_text(b)
    assert text is not None
    doc = as_json(text)
    if doc is not None:
        return ["json: " + json.dumps(doc, separators=(",", ":"), ensure_ascii=False)[:NOTE_MAX]]
    t = text.replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t")
    return ["text: " + (t if len(t) <= NOTE_MAX else t[:NOTE_MAX - 1] + "\u2026")]


def test_describe_value_ascii_shortcut_around_the_cut() -> None:
    for n in (1, 5, NOTE_MAX - 1, NOTE_MAX, NOTE_MAX + 1, NOTE_MAX + 2, 3 * NOTE_MAX):
        for filler in (b"a", b"ab\n", b"x\ty\r", b"\n\n\n"):
            b = (b"v" + filler * n)[:n]
            assert describe_value(b) == _describe_general(b), (n, filler)
    assert describe_value(b"a" * NOTE_MAX) == ["text: " + "a" * NOTE_MAX]
    assert describe_value(b"a" * (NOTE_MAX + 1)) == ["text: " + "a" * (NOTE_MAX - 1) + "\u2026"]
    assert describe_value(b"a" * (NOTE_MAX - 1) + b"\n") == ["text: " + "a" * (NOTE_MAX - 1) + "\u2026"]
    assert describe_value(b' {"a": 1}') == ['json: {"a":1}']
    assert describe_value(b"a\x01b") == ["binary, 3 bytes"]


def test_json_line_equals_the_dict_form_on_the_samples() -> None:
    """exchange_json_line (trees straight to text) == dumps_line(exchange_to_json(...)), byte for byte."""
    import glob
    from pathlib import Path

    from analyzer.pipeline import Options, Run
    from analyzer.sinks.fastjson import dumps_line, dumps_tree
    from analyzer.sinks.output import exchange_json_line, exchange_to_json

    root = Path(__file__).resolve().parents[1]
    n = 0
    for path in sorted(glob.glob(str(root / "samples" / "*.pcap*"))):
        for ex in Run(path, Options(), DecodeContext()):
            want = dumps_line(exchange_to_json(ex, trees=True, source="x.pcap")).encode()
            assert exchange_json_line(ex, source="x.pcap") == want
            n += 1
    assert n > 100
    # what the core's writer refuses (non-string keys, big integers) takes the to_json way
    odd = Field("odd", "struct", {1: b"\x01"}, 0, 1, None, ["n"])
    assert dumps_tree(odd) == dumps_line(odd.to_json()).encode() == \
        b'{"name":"odd","type":"struct","value":{"1":"01"},"offset":0,"length":1,"children":[],"notes":["n"]}'
    big = Field("big", "varlong", 2 ** 70, 0, 10)
    assert json.loads(dumps_tree(Field("r", "S", None, 0, 10, [big])))["children"][0]["value"] == 2 ** 70
    assert dumps_tree(None) == b"null"
