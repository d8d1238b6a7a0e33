"""The legacy (pre-0.8) protocol dissector, on frames our own writer builds from the seed description;
and the core's pre-0.8 detection and framing checks (core/src/legacy.rs), through its probes."""
from __future__ import annotations

import re
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer import _core
from dissectors.context import DecodeContext, Limits, Presentation
from dissectors.field import Field
from dissectors.header import api_table
from dissectors.legacy import (
    LEGACY_API_NAMES,
    LEGACY_ERROR_NAMES,
    decode_legacy_request,
    decode_legacy_response,
    legacy_crc,
    legacy_error_codes,
    legacy_partitions,
)
from tests import legacy_captures as w
from tests.probes import probes

SHARED = Path(__file__).resolve().parents[2] / "shared"
SEED_003 = SHARED / "seeds" / "003_70453c66919b3262.txt"


def crc(b: bytes) -> int:
    return zlib.crc32(b) & 0xFFFFFFFF


# the pre-0.8 detection and framing checks are the core's (core/src/legacy.rs, the 0.8+ header
# parser core/src/kafka.rs): read through its probes
TABLE = _core.HeaderTable(api_table())


def legacy_score(data: bytes, complete: bool = True) -> int:
    """The core's score of a first request frame as pre-0.8: 0 impossible .. 100 certain."""
    return int(probes.probe_legacy_request_score(data, complete))


def modern_header(data: bytes) -> tuple[Any, ...] | None:
    """The core's 0.8+ reading of a whole request frame's header (no plausibility check):
    (api_key, api_version, correlation_id, client_id, header_len, header_version) or None."""
    h = probes.probe_request_header(TABLE, data, False, False)
    return None if h is None else tuple(h)


def rows(f: Field, path: str = "") -> list[tuple[str, str, Any, int, int]]:
    """Every field of a tree as (path, type, value, offset, length), depth first."""
    p = f"{path}/{f.name}" if path else f.name
    out = [(p, f.type, f.value, f.offset, f.length)]
    for c in f.children or ():
        out += rows(c, p)
    return out


def notes(f: Field, path: str) -> list[str]:
    node = f
    for part in path.split("/"):
        nxt = node.child(part)
        assert nxt is not None, f"no {part} under {node.name}"
        node = nxt
    return list(node.notes or [])


def req(frame: bytes, ctx: DecodeContext | None = None) -> Field:
    return decode_legacy_request(frame[4:], ctx or DecodeContext())


def resp(frame: bytes, rtype: int, request: Field | None = None, ctx: DecodeContext | None = None) -> Field:
    return decode_legacy_response(frame[4:], rtype, ctx or DecodeContext(), request)


# --- the writer itself follows the seed layout -------------------------------------

def test_writer_layout_matches_seed_diagrams() -> None:
    # REQUEST_LENGTH, REQUEST_TYPE=1, TOPIC_LENGTH=4, "test", PARTITION=3, OFFSET=5, MAX_SIZE=1024
    assert w.fetch_request("test", 3, 5, 1024) == bytes.fromhex(
        "00000018" "0001" "0004" "74657374" "00000003" "0000000000000005" "00000400")
    # OFFSETS: TIME=-2 (earliest), MAX NUMBER=1
    assert w.offsets_request("t", 0, -2, 1) == bytes.fromhex(
        "00000015" "0004" "0001" "74" "00000000" "fffffffffffffffe" "00000001")
    # MESSAGE magic 0: LENGTH, MAGIC, CHECKSUM, PAYLOAD
    assert w.message(b"hi", magic=0) == bytes.fromhex("00000007" "00") + struct.pack(">I", crc(b"hi")) + b"hi"
    # MESSAGE magic 1: LENGTH, MAGIC, COMPRESSION, CHECKSUM, PAYLOAD
    assert w.message(b"hi", magic=1) == bytes.fromhex("00000008" "01" "00") + struct.pack(">I", crc(b"hi")) + b"hi"
    # PRODUCE: header, MESSAGES_LENGTH, MESSAGES
    m = w.message(b"x", magic=0)
    assert w.produce_request("ab", 1, m) == (
        bytes.fromhex("00000018" "0000" "0002" "6162" "00000001" "0000000a") + m)
    # multi-request header (seed 001): REQUEST_TYPE, TOPIC_COUNT, then the parts
    assert w.multiproduce_request([("a", 0, m), ("b", 1, b"")]) == (
        bytes.fromhex("00000024" "0003" "0002" "0001" "61" "00000000" "0000000a") + m
        + bytes.fromhex("0001" "62" "00000001" "00000000"))
    assert w.multifetch_request([("a", 2, 7, 9)]) == bytes.fromhex(
        "00000017" "0002" "0001" "0001" "61" "00000002" "0000000000000007" "00000009")
    # responses: RESPONSE_LENGTH, ERROR_CODE, body
    assert w.fetch_response(3) == bytes.fromhex("00000002" "0003")
    assert w.offsets_response(0, [7]) == bytes.fromhex("0000000e" "0000" "00000001" "0000000000000007")
    assert w.multifetch_response([(0, m)]) == bytes.fromhex("00000012" "0000" "0000000c" "0000") + m
    # xerial snappy: magic header, versions, then [size, raw block]
    assert w.snappy_xerial(b"abc") .startswith(b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01")


def test_constants() -> None:
    assert LEGACY_API_NAMES == {0: "PRODUCE", 1: "FETCH", 2: "MULTIFETCH", 3: "MULTIPRODUCE", 4: "OFFSETS"}
    assert LEGACY_ERROR_NAMES[-1] == "UNKNOWN" and LEGACY_ERROR_NAMES[4] == "INVALID_FETCH_SIZE"
    assert legacy_crc(b"hello world") == 0x0D4A1185


# --- requests ---------------------------------------------------------------------------

def test_produce_magic0_every_field() -> None:
    ctx = DecodeContext()
    m1, m2 = w.message(b"hello", magic=0), w.message(b"", magic=0)
    tree = req(w.produce_request("events", 7, m1 + m2), ctx)
    assert rows(tree) == [
        ("request", "PRODUCERequest", None, 0, 41),
        ("request/header", "LegacyRequestHeader", None, 0, 14),
        ("request/header/request_type", "int16", 0, 0, 2),
        ("request/header/topic", "string", "events", 2, 8),
        ("request/header/partition", "int32", 7, 10, 4),
        ("request/body", "PRODUCERequestBody", None, 14, 27),
        ("request/body/messages_length", "int32", 23, 14, 4),
        ("request/body/messages", "array", 2, 18, 23),
        ("request/body/messages/[0]", "Message", None, 18, 14),
        ("request/body/messages/[0]/length", "int32", 10, 18, 4),
        ("request/body/messages/[0]/magic", "int8", 0, 22, 1),
        ("request/body/messages/[0]/crc", "uint32", crc(b"hello"), 23, 4),
        ("request/body/messages/[0]/payload", "bytes", b"hello", 27, 5),
        ("request/body/messages/[1]", "Message", None, 32, 9),
        ("request/body/messages/[1]/length", "int32", 5, 32, 4),
        ("request/body/messages/[1]/magic", "int8", 0, 36, 1),
        ("request/body/messages/[1]/crc", "uint32", 0, 37, 4),
        ("request/body/messages/[1]/payload", "bytes", b"", 41, 0),
    ]
    assert notes(tree, "header/request_type") == ["PRODUCE"]
    assert notes(tree, "body/messages/[0]/crc") == [f"crc valid (0x{crc(b'hello'):08x})"]
    assert notes(tree, "body/messages/[1]/crc") == ["crc valid (0x00000000)"]      # CRC-32 of nothing is 0
    assert notes(tree, "body/messages/[0]/magic") == ["magic 0: no compression attribute"]
    assert notes(tree, "body/messages") == ["2 records in 2 messages, none"]
    assert not tree.any_malformed()
    assert (ctx.counts.crc_valid, ctx.counts.crc_invalid, ctx.counts.malformed) == (2, 0, 0)
    assert tree.extra == {"request_type": 0, "api_name": "PRODUCE"}
    assert legacy_partitions(tree, True) == [
        {"topic": "events", "partition": 7, "records": 2, "bytes": 23, "codec": "none", "crc_ok": True,
         "error": None}]
    assert legacy_partitions(tree, False) == []


def test_produce_gzip_magic1_unwrapped() -> None:
    ctx = DecodeContext()
    inner = [w.message(b"a1", magic=1), w.message(b"a2", magic=0)]
    wrapper = w.compressed_message(inner, "gzip")
    tree = req(w.produce_request("t", -1, wrapper), ctx)
    msg = tree.child("body").child("messages").child("[0]")
    payload = wrapper[10:]
    assert [(c.name, c.value) for c in msg.children] == [
        ("length", len(wrapper) - 4), ("magic", 1), ("compression", 1), ("crc", crc(payload)),
        ("payload", payload), ("messages", 2)]
    assert msg.child("compression").notes == ["gzip"]
    assert msg.child("payload").notes == [f"gzip-compressed message set: {len(payload)} -> 23 bytes"]
    inner_set = msg.child("messages")
    assert inner_set.notes == ["inner messages: offsets are relative to the decompressed payload"]
    assert rows(inner_set) == [
        ("messages", "array", 2, 0, 23),
        ("messages/[0]", "Message", None, 0, 12),
        ("messages/[0]/length", "int32", 8, 0, 4),
        ("messages/[0]/magic", "int8", 1, 4, 1),
        ("messages/[0]/compression", "int8", 0, 5, 1),
        ("messages/[0]/crc", "uint32", crc(b"a1"), 6, 4),
        ("messages/[0]/payload", "bytes", b"a1", 10, 2),
        ("messages/[1]", "Message", None, 12, 11),
        ("messages/[1]/length", "int32", 7, 12, 4),
        ("messages/[1]/magic", "int8", 0, 16, 1),
        ("messages/[1]/crc", "uint32", crc(b"a2"), 17, 4),
        ("messages/[1]/payload", "bytes", b"a2", 21, 2),
    ]
    assert tree.child("header").get("partition") == -1
    assert ctx.counts.crc_valid == 3 and ctx.counts.crc_invalid == 0
    assert legacy_partitions(tree, True) == [
        {"topic": "t", "partition": -1, "records": 2, "bytes": len(wrapper), "codec": "gzip", "crc_ok": True,
         "error": None}]
    assert notes(tree, "body/messages") == ["2 records in 1 message, gzip"]


def test_produce_snappy_xerial_unwrapped() -> None:
    pytest.importorskip("dissectors.compression", reason="snappy needs dissectors.compression")
    inner = [w.message(b"s%d" % i * 5000, magic=1) for i in range(12)]       # > one 32 KiB xerial block
    wrapper = w.compressed_message(inner, "snappy")
    assert wrapper[10:18] == b"\x82SNAPPY\x00"
    ctx = DecodeContext()
    tree = req(w.produce_request("snap", 0, wrapper), ctx)
    msg = tree.child("body").child("messages").child("[0]")
    assert msg.child("compression").value == 2 and msg.child("compression").notes == ["snappy"]
    inner_set = msg.child("messages")
    assert inner_set.value == 12
    assert [m.child("payload").value for m in inner_set.children] == [b"s%d" % i * 5000 for i in range(12)]
    assert inner_set.children[11].offset == sum(len(m) for m in inner[:11])
    assert not tree.any_malformed()
    assert ctx.counts.crc_valid == 13
    assert legacy_partitions(tree, True)[0]["records"] == 12
    assert legacy_partitions(tree, True)[0]["codec"] == "snappy"


def test_fetch_and_offsets_requests_every_field() -> None:
    tree = req(w.fetch_request("logs", 2, 123456789012, 300 * 1024))
    assert rows(tree) == [
        ("request", "FETCHRequest", None, 0, 24),
        ("request/header", "LegacyRequestHeader", None, 0, 12),
        ("request/header/request_type", "int16", 1, 0, 2),
        ("request/header/topic", "string", "logs", 2, 6),
        ("request/header/partition", "int32", 2, 8, 4),
        ("request/body", "FETCHRequestBody", None, 12, 12),
        ("request/body/offset", "int64", 123456789012, 12, 8),
        ("request/body/max_size", "int32", 307200, 20, 4),
    ]
    assert notes(tree, "header/request_type") == ["FETCH"]
    tree = req(w.offsets_request("logs", 0, -2, 1))
    assert rows(tree)[-2:] == [
        ("request/body/time", "int64", -2, 12, 8),
        ("request/body/max_number_of_offsets", "int32", 1, 20, 4),
    ]
    assert tree.type == "OFFSETSRequest"
    assert notes(tree, "body/time") == ["earliest"]
    assert notes(req(w.offsets_request("logs", 0, -1, 1)), "body/time") == ["latest"]
    assert notes(req(w.offsets_request("logs", 0, 1_300_000_000_000, 1)), "body/time") == [
        "2011-03-13T07:06:40.000+00:00"]
    assert legacy_partitions(tree, True) == []


def test_multifetch_request_every_field() -> None:
    tree = req(w.multifetch_request([("a", 0, 10, 100), ("bb", 5, 20, 200)]))
    assert rows(tree) == [
        ("request", "MULTIFETCHRequest", None, 0, 43),
        ("request/header", "LegacyRequestHeader", None, 0, 4),
        ("request/header/request_type", "int16", 2, 0, 2),
        ("request/header/topic_count", "int16", 2, 2, 2),
        ("request/body", "MULTIFETCHRequestBody", None, 4, 39),
        ("request/body/topic_partitions", "array", 2, 4, 39),
        ("request/body/topic_partitions/[0]", "FetchPart", None, 4, 19),
        ("request/body/topic_partitions/[0]/topic", "string", "a", 4, 3),
        ("request/body/topic_partitions/[0]/partition", "int32", 0, 7, 4),
        ("request/body/topic_partitions/[0]/offset", "int64", 10, 11, 8),
        ("request/body/topic_partitions/[0]/max_size", "int32", 100, 19, 4),
        ("request/body/topic_partitions/[1]", "FetchPart", None, 23, 20),
        ("request/body/topic_partitions/[1]/topic", "string", "bb", 23, 4),
        ("request/body/topic_partitions/[1]/partition", "int32", 5, 27, 4),
        ("request/body/topic_partitions/[1]/offset", "int64", 20, 31, 8),
        ("request/body/topic_partitions/[1]/max_size", "int32", 200, 39, 4),
    ]
    assert not tree.any_malformed()


def test_multiproduce_request_every_field() -> None:
    ctx = DecodeContext()
    m0 = w.message(b"p0", magic=0)
    bad = w.message(b"p1", magic=1, crc=0x01020304)
    tree = req(w.multiproduce_request([("x", 1, m0), ("y", 2, bad)]), ctx)
    assert rows(tree) == [
        ("request", "MULTIPRODUCERequest", None, 0, 49),
        ("request/header", "LegacyRequestHeader", None, 0, 4),
        ("request/header/request_type", "int16", 3, 0, 2),
        ("request/header/topic_count", "int16", 2, 2, 2),
        ("request/body", "MULTIPRODUCERequestBody", None, 4, 45),
        ("request/body/topic_partitions", "array", 2, 4, 45),
        ("request/body/topic_partitions/[0]", "ProducePart", None, 4, 22),
        ("request/body/topic_partitions/[0]/topic", "string", "x", 4, 3),
        ("request/body/topic_partitions/[0]/partition", "int32", 1, 7, 4),
        ("request/body/topic_partitions/[0]/messages_length", "int32", 11, 11, 4),
        ("request/body/topic_partitions/[0]/messages", "array", 1, 15, 11),
        ("request/body/topic_partitions/[0]/messages/[0]", "Message", None, 15, 11),
        ("request/body/topic_partitions/[0]/messages/[0]/length", "int32", 7, 15, 4),
        ("request/body/topic_partitions/[0]/messages/[0]/magic", "int8", 0, 19, 1),
        ("request/body/topic_partitions/[0]/messages/[0]/crc", "uint32", crc(b"p0"), 20, 4),
        ("request/body/topic_partitions/[0]/messages/[0]/payload", "bytes", b"p0", 24, 2),
        ("request/body/topic_partitions/[1]", "ProducePart", None, 26, 23),
        ("request/body/topic_partitions/[1]/topic", "string", "y", 26, 3),
        ("request/body/topic_partitions/[1]/partition", "int32", 2, 29, 4),
        ("request/body/topic_partitions/[1]/messages_length", "int32", 12, 33, 4),
        ("request/body/topic_partitions/[1]/messages", "array", 1, 37, 12),
        ("request/body/topic_partitions/[1]/messages/[0]", "Message", None, 37, 12),
        ("request/body/topic_partitions/[1]/messages/[0]/length", "int32", 8, 37, 4),
        ("request/body/topic_partitions/[1]/messages/[0]/magic", "int8", 1, 41, 1),
        ("request/body/topic_partitions/[1]/messages/[0]/compression", "int8", 0, 42, 1),
        ("request/body/topic_partitions/[1]/messages/[0]/crc", "uint32", 0x01020304, 43, 4),
        ("request/body/topic_partitions/[1]/messages/[0]/payload", "bytes", b"p1", 47, 2),
    ]
    bad_crc = tree.child("body").child("topic_partitions").children[1].child("messages").children[0].child("crc")
    assert bad_crc.notes == [f"crc INVALID (0x01020304), computed 0x{crc(b'p1'):08x}"]
    assert (ctx.counts.crc_valid, ctx.counts.crc_invalid) == (1, 1)
    assert not tree.any_malformed()            # a bad CRC is reported, not a parse failure
    assert legacy_partitions(tree, True) == [
        {"topic": "x", "partition": 1, "records": 1, "bytes": 11, "codec": "none", "crc_ok": True, "error": None},
        {"topic": "y", "partition": 2, "records": 1, "bytes": 12, "codec": "none", "crc_ok": False, "error": None},
    ]


# --- responses --------------------------------------------------------------------------

def test_fetch_response_messages_and_partial_tail() -> None:
    ctx = DecodeContext()
    request = req(w.fetch_request("logs", 4, 0, 64))
    m0, m1 = w.message(b"first", magic=1), w.message(b"second message", magic=0)
    cut = m1[:9]                                        # the broker stopped at max_size
    tree = resp(w.fetch_response(0, m0 + cut), 1, request, ctx)
    assert rows(tree) == [
        ("response", "FETCHResponse", None, 0, 2 + len(m0) + 9),
        ("response/header", "LegacyResponseHeader", None, 0, 2),
        ("response/header/error_code", "int16", 0, 0, 2),
        ("response/body", "FETCHResponseBody", None, 2, len(m0) + 9),
        ("response/body/messages", "array", 1, 2, len(m0) + 9),
        ("response/body/messages/[0]", "Message", None, 2, 15),
        ("response/body/messages/[0]/length", "int32", 11, 2, 4),
        ("response/body/messages/[0]/magic", "int8", 1, 6, 1),
        ("response/body/messages/[0]/compression", "int8", 0, 7, 1),
        ("response/body/messages/[0]/crc", "uint32", crc(b"first"), 8, 4),
        ("response/body/messages/[0]/payload", "bytes", b"first", 12, 5),
        ("response/body/messages/partial_message", "bytes", cut, 17, 9),
    ]
    assert notes(tree, "header/error_code") == ["NONE"]
    partial = tree.child("body").child("messages").child("partial_message")
    assert partial.notes == ["partial message at the end of the set: 9 bytes of 23 bytes "
                             "(the broker cuts the set at max_size)"]
    assert not tree.any_malformed()
    assert legacy_partitions(tree, False) == [
        {"topic": "logs", "partition": 4, "records": 1, "bytes": len(m0) + 9, "codec": "none", "crc_ok": True,
         "error": None}]
    assert legacy_error_codes(tree) == []
    assert tree.extra == {"request_type": 1, "api_name": "FETCH"}


def test_fetch_error_response() -> None:
    request = req(w.fetch_request("logs", 0, 1 << 40, 1024))
    for code, name in [(1, "OFFSET_OUT_OF_RANGE"), (2, "INVALID_MESSAGE"), (3, "WRONG_PARTITION"),
                       (4, "INVALID_FETCH_SIZE"), (-1, "UNKNOWN")]:
        tree = resp(w.fetch_response(code), 1, request)
        assert tree.child("header").get("error_code") == code
        assert notes(tree, "header/error_code") == [name]
        assert tree.child("body").child("messages").value == 0
        assert legacy_error_codes(tree) == [name]
        assert legacy_partitions(tree, False) == [
            {"topic": "logs", "partition": 0, "records": 0, "bytes": 0, "codec": "none", "crc_ok": True,
             "error": name}]
        assert not tree.any_malformed()
    assert notes(resp(w.fetch_response(9), 1), "header/error_code") == ["UNKNOWN_ERROR(9)"]


def test_fetch_response_without_request_tree() -> None:
    tree = resp(w.fetch_response(0, w.message(b"z", magic=0)), 1, None)
    assert legacy_partitions(tree, False)[0]["topic"] is None
    assert legacy_partitions(tree, False)[0]["records"] == 1


def test_offsets_response_every_field() -> None:
    tree = resp(w.offsets_response(0, [536890406, 0, -5]), 4)
    assert rows(tree) == [
        ("response", "OFFSETSResponse", None, 0, 30),
        ("response/header", "LegacyResponseHeader", None, 0, 2),
        ("response/header/error_code", "int16", 0, 0, 2),
        ("response/body", "OFFSETSResponseBody", None, 2, 28),
        ("response/body/offsets", "array", 3, 2, 28),
        ("response/body/offsets/[0]", "int64", 536890406, 6, 8),
        ("response/body/offsets/[1]", "int64", 0, 14, 8),
        ("response/body/offsets/[2]", "int64", -5, 22, 8),
    ]
    assert not tree.any_malformed()
    assert legacy_partitions(tree, False) == []
    err = resp(w.fetch_response(3), 4)                 # an error answer with no offsets at all
    assert err.child("header").get("error_code") == 3 and not err.any_malformed()


def test_multifetch_response_in_request_order() -> None:
    pytest.importorskip("dissectors.compression", reason="snappy needs dissectors.compression")
    ctx = DecodeContext()
    request = req(w.multifetch_request([("a", 0, 0, 4096), ("b", 1, 0, 4096), ("c", 9, 0, 4096)]), ctx)
    set0 = w.message(b"m0", magic=0) + w.message(b"m1", magic=1)
    set1 = w.compressed_message([w.message(b"in%d" % i, magic=1) for i in range(3)], "snappy")
    frame = w.multifetch_response([(0, set0), (0, set1), (3, b"")])
    tree = resp(frame, 2, request, ctx)
    parts = tree.child("body").child("topic_partitions")
    assert parts.value == 3 and parts.offset == 2 and parts.length == len(frame) - 6
    p0, p1, p2 = parts.children
    assert [(c.name, c.value, c.offset, c.length) for c in p0.children] == [
        ("size", len(set0) + 2, 2, 4), ("error_code", 0, 6, 2), ("messages", 2, 8, len(set0))]
    assert (p0.offset, p0.length, p0.type) == (2, 6 + len(set0), "FetchResponsePart")
    assert p0.notes == ["topic 'a' partition 0 (from the request)"]
    assert p1.offset == p0.offset + p0.length
    assert p1.child("size").value == len(set1) + 2
    assert p1.child("messages").children[0].child("messages").value == 3
    assert [(c.name, c.value) for c in p2.children] == [("size", 2), ("error_code", 3), ("messages", 0)]
    assert p2.child("error_code").notes == ["WRONG_PARTITION"]
    assert tree.child("header").get("error_code") == 0
    assert not tree.any_malformed()
    assert legacy_partitions(tree, False) == [
        {"topic": "a", "partition": 0, "records": 2, "bytes": len(set0), "codec": "none", "crc_ok": True,
         "error": None},
        {"topic": "b", "partition": 1, "records": 3, "bytes": len(set1), "codec": "snappy", "crc_ok": True,
         "error": None},
        {"topic": "c", "partition": 9, "records": 0, "bytes": 0, "codec": "none", "crc_ok": True,
         "error": "WRONG_PARTITION"},
    ]
    assert legacy_error_codes(tree) == ["WRONG_PARTITION"]
    # a response with fewer parts than requested is malformed
    short = resp(w.multifetch_response([(0, set0)]), 2, request)
    assert short.child("body").child("topic_partitions").notes == [
        "malformed: 1 parts, but the request asked for 3 topic-partitions"]


def test_response_to_produce_is_unexpected() -> None:
    tree = resp(w.fetch_response(0, b"\x01\x02"), 0)
    assert tree.type == "PRODUCEResponse"
    assert tree.child("body").value == b"\x01\x02"
    assert tree.child("body").notes == ["malformed: unexpected response: PRODUCE requests get no response"]


# --- CRC, codecs, limits, malformed bytes --------------------------------------------------

def test_bad_crc_in_compressed_inner_message() -> None:
    ctx = DecodeContext()
    wrapper = w.compressed_message([w.message(b"ok", magic=1), w.message(b"bad", magic=1, crc=7)], "gzip")
    tree = resp(w.fetch_response(0, wrapper), 1, None, ctx)
    inner = tree.child("body").child("messages").children[0].child("messages")
    assert inner.children[1].child("crc").notes == [f"crc INVALID (0x00000007), computed 0x{crc(b'bad'):08x}"]
    assert (ctx.counts.crc_valid, ctx.counts.crc_invalid) == (2, 1)
    assert legacy_partitions(tree, False)[0]["crc_ok"] is False
    assert legacy_partitions(tree, False)[0]["records"] == 2


def test_decompression_limit_and_garbage() -> None:
    big = [w.message(bytes(1000), magic=1) for _ in range(50)]
    wrapper = w.compressed_message(big, "gzip")
    ctx = DecodeContext(Limits(max_decompressed=5000))
    tree = req(w.produce_request("t", 0, wrapper), ctx)
    msg = tree.child("body").child("messages").children[0]
    assert ctx.counts.limits_hit.get("max_decompressed") == 1
    assert 4 <= msg.child("messages").value <= 5
    assert any(n.startswith("decompression stopped") for n in msg.child("payload").notes)
    # the budget is per frame: three wrappers of 999 bytes each under a 1500-byte limit
    one = w.compressed_message([w.message(bytes(990), magic=0)], "gzip")
    ctx = DecodeContext(Limits(max_decompressed=1500))
    tree = resp(w.fetch_response(0, one * 3), 1, None, ctx)
    first, second, third = tree.child("body").child("messages").children
    assert first.child("messages").value == 1
    assert second.child("messages").length == 501                  # what was left of the budget
    assert second.child("messages").child("partial_message").length == 501
    assert third.child("messages") is None
    assert third.child("payload").notes[-1].startswith("gzip-compressed message set not decompressed")
    assert ctx.counts.limits_hit == {"max_decompressed": 2}
    assert not tree.any_malformed()
    # a gzip wrapper whose payload is not gzip: marked, never raised
    ctx = DecodeContext()
    junk = w.message(b"not gzip at all", magic=1, codec="gzip")
    tree = req(w.produce_request("t", 0, junk), ctx)
    payload = tree.child("body").child("messages").children[0].child("payload")
    assert payload.is_malformed and ctx.counts.malformed == 1
    # record decoding switched off: the wrapper counts as one record, nothing decompressed
    ctx = DecodeContext(presentation=Presentation(decode_records=False))
    tree = req(w.produce_request("t", 0, wrapper), ctx)
    assert tree.child("body").child("messages").children[0].child("messages") is None
    assert legacy_partitions(tree, True)[0]["records"] == 1


def test_unknown_magic_and_codec() -> None:
    ctx = DecodeContext()
    weird = struct.pack(">iB", 6, 2) + b"\x00" * 5          # magic 2 in a legacy set
    codec3 = w.message(b"q", magic=1)
    codec3 = codec3[:5] + b"\x03" + codec3[6:]
    tree = req(w.produce_request("t", 0, weird + codec3), ctx)
    msgs = tree.child("body").child("messages").children
    assert msgs[0].child("magic").notes == ["malformed: unknown magic 2 (expected 0 or 1)"]
    assert msgs[1].child("compression").notes == ["unknown codec 3", "malformed: compression codec 3 is not defined"]
    assert ctx.counts.malformed == 2


def test_malformed_requests_are_marked() -> None:
    cases = {
        "unknown type": struct.pack(">h", 9) + b"rest",
        "topic too long": struct.pack(">hh", 1, 50) + b"abc",
        "negative messages_length": struct.pack(">hh", 0, 1) + b"t" + struct.pack(">ii", 0, -5),
        "messages_length past end": struct.pack(">hh", 0, 1) + b"t" + struct.pack(">ii", 0, 99) + b"x" * 10,
        "fetch cut": w.fetch_request("t", 0, 0, 10)[4:-2],
        "multi count negative": struct.pack(">hh", 2, -1),
        "multi count too big": struct.pack(">hh", 2, 40) + w.multifetch_request([("a", 0, 0, 1)])[8:],
        "tiny message length": struct.pack(">hh", 0, 1) + b"t" + struct.pack(">iii", 0, 4, 2),
        "one byte": b"\x00",
    }
    for what, data in cases.items():
        ctx = DecodeContext()
        tree = decode_legacy_request(data, ctx)
        assert tree.any_malformed(), what
        assert ctx.counts.malformed >= 1, what
    tree = decode_legacy_request(struct.pack(">hh", 0, 1) + b"t" + struct.pack(">ii", 0, 99) + b"x" * 10,
                                 DecodeContext())
    assert notes(tree, "body/messages_length") == ["malformed: messages_length 99 exceeds frame (10 bytes left)"]
    ctx = DecodeContext()
    tree = decode_legacy_request(w.fetch_request("t", 0, 0, 10)[4:] + b"zz", ctx)
    assert tree.child("body").child("trailing_bytes").value == b"zz"
    assert (ctx.counts.trailing, ctx.counts.malformed) == (1, 0) and not tree.any_malformed()
    tree = decode_legacy_request(struct.pack(">h", 9) + b"rest", DecodeContext())
    assert tree.type == "LegacyRequest" and tree.child("body").value == b"rest"


def all_frames() -> list[tuple[int, bytes, int | None]]:
    """(direction, frame, request type) for every frame of the main scenario."""
    out = []
    last = None
    for d, f in w.build_main_connection():
        if d == w.C2B:
            last = struct.unpack(">h", f[4:6])[0]
        out.append((d, f, last))
    return out


def test_every_prefix_of_every_frame_is_safe() -> None:
    for d, f, rtype in all_frames():
        body = f[4:]
        for cut in range(len(body)):
            ctx = DecodeContext()
            if d == w.C2B:
                tree = decode_legacy_request(body[:cut], ctx)
                assert tree.any_malformed(), (rtype, cut)          # every strict prefix of a request is bad
                legacy_partitions(tree, True)
            else:
                tree = decode_legacy_response(body[:cut], rtype or 0, ctx, None)
                legacy_partitions(tree, False)
            assert tree.length == cut


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=120), st.integers(min_value=-2, max_value=6))
def test_random_bytes_never_raise(data: bytes, rtype: int) -> None:
    ctx = DecodeContext()
    for tree, is_req in ((decode_legacy_request(data, ctx), True),
                         (decode_legacy_response(data, rtype, ctx, None), False)):
        legacy_partitions(tree, is_req)
        tree.to_json()
    assert 0 <= legacy_score(data) <= 100
    assert 0 <= legacy_score(data, complete=False) <= 100


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=40), st.sampled_from([0, 1])), max_size=6),
       st.text(alphabet="abcxyz._-", min_size=1, max_size=20), st.integers(0, 1000))
def test_produce_round_trip(msgs: list[tuple[bytes, int]], topic: str, partition: int) -> None:
    mset = b"".join(w.message(p, magic=m) for p, m in msgs)
    data = w.produce_request(topic, partition, mset)[4:]
    tree = decode_legacy_request(data, DecodeContext())
    assert not tree.any_malformed()
    got = tree.child("body").child("messages").children or []
    assert [(m.child("payload").value, m.child("magic").value) for m in got] == msgs
    assert legacy_score(data) >= (90 if msgs else 70)     # an empty set has nothing to CRC-check


# --- detection -------------------------------------------------------------------------------

def modern_request(api_key: int, api_version: int, correlation_id: int, client_id: str, body: bytes) -> bytes:
    cid = client_id.encode()
    return struct.pack(">hhih", api_key, api_version, correlation_id, len(cid)) + cid + body


def test_score_legacy_frames_high() -> None:
    for d, f, _ in all_frames():
        if d == w.C2B:
            assert legacy_score(f[4:]) >= 90, f[4:20]
            assert legacy_score(f[4:], complete=False) >= 50
    # a prefix of a legacy frame scores lower but (with complete=False) not zero
    f = w.produce_request("events", 0, w.message(b"x" * 200, magic=1))[4:]
    assert legacy_score(f[:40]) <= 20
    assert 30 <= legacy_score(f[:40], complete=False) <= 70


def test_score_modern_frames_zero() -> None:
    fetch_v0 = struct.pack(">iii", -1, 100, 1) + struct.pack(">i", 1) + struct.pack(">h", 4) + b"test" \
        + struct.pack(">i", 1) + struct.pack(">iqi", 0, 0, 1048576)
    samples = [
        modern_request(0, 0, 1, "foo", b"\x00\x01" + b"\x00" * 20),      # Produce v0: "topic" length 0
        modern_request(1, 0, 7, "consumer-1", fetch_v0),                  # Fetch v0
        modern_request(1, 4, 3, "rdkafka", fetch_v0),                     # Fetch v4: topic = corr id bytes
        modern_request(2, 1, 2, "kafka-python", b"\xff\xff\xff\xff\x00\x00\x00\x00"),  # ListOffsets v1
        modern_request(3, 1, 0, "kcat", b"\x00\x00\x00\x00"),             # Metadata v1
        modern_request(4, 0, 5, "x", b""),
        modern_request(18, 3, 0, "rdkafka", b"\x00"),                     # ApiVersions v3
    ]
    for s in samples:
        assert legacy_score(s) == 0, s[:12]
    # even a correlation id of printable bytes (0x41424344) fails the exact-size arithmetic
    assert legacy_score(modern_request(1, 3, 0x41424344, "client", fetch_v0)) <= 20


def test_score_known_ambiguity_four_byte_topic() -> None:
    """A legacy request on a 4-byte topic also has a header that parses as 0.8+ (documented limit)."""
    data = w.fetch_request("test", 0, 0, 1024)[4:]
    assert legacy_score(data) == 100
    h = modern_header(data)
    assert h is not None and h[:4] == (1, 4, 0x74657374, "")     # api_key, api_version, correlation_id, client_id


def test_seed_003_is_not_legacy() -> None:
    if not SEED_003.exists():
        pytest.skip("../shared/seeds is absent")
    assert legacy_score(seed_003_frame()[4:]) == 0


# --- the 0.8 ProduceRequest hex dump of seed 003 ---------------------------------------------

def seed_003_frame() -> bytes:
    text = SEED_003.read_text()
    dump = text.split("Hex Dump", 1)[1]
    return bytes(int(x, 16) for x in re.findall(r"0x([0-9A-Fa-f]{2})", dump))


def test_seed_003_hex_dump_crc_own_path() -> None:
    if not SEED_003.exists():
        pytest.skip("../shared/seeds is absent")
    frame = seed_003_frame()
    assert len(frame) == 82 and struct.unpack(">i", frame[:4])[0] == 78
    # the message set: offset int64, size int32, then crc uint32 over magic..value
    mset = frame[4 + 41:]
    offset, size, stored = struct.unpack(">qiI", mset[:16])
    assert (offset, size, stored) == (0, 25, 0x73ACF77C)
    assert legacy_crc(mset[16:12 + size]) == stored


def test_seed_003_hex_dump_modern_decoder() -> None:
    if not SEED_003.exists():
        pytest.skip("../shared/seeds is absent")
    kafka = pytest.importorskip("dissectors.kafka", reason="the 0.8+ decoder is not written yet")
    ctx = DecodeContext()
    tree = kafka.decode_request(seed_003_frame()[4:], ctx)
    h = tree.child("header")
    assert [(c.name, c.value, c.offset, c.length) for c in h.children] == [
        ("api_key", 0, 0, 2), ("api_version", 0, 2, 2), ("correlation_id", 1, 4, 4), ("client_id", "foo", 8, 5)]
    body = tree.child("body")
    assert body.get("acks") == 1 and body.get("timeout_ms") == 1500
    topics = body.child("topic_data")
    assert topics.value == 1
    t0 = topics.children[0]
    assert t0.get("name") == "test"
    p0 = t0.child("partition_data").children[0]
    assert p0.get("index") == 0
    records = p0.child("records")
    assert (records.offset, records.length) == (41, 37)
    msg = records.children[0]
    assert [(c.name, c.value, c.offset) for c in msg.children] == [
        ("offset", 0, 41), ("message_size", 25, 49), ("crc", 0x73ACF77C, 53), ("magic", 0, 57),
        ("attributes", 0, 58), ("key_length", -1, 59), ("value_length", 11, 63), ("value", b"hello world", 67)]
    assert msg.child("crc").notes == ["crc valid (0x73acf77c)"]
    assert (ctx.counts.crc_valid, ctx.counts.crc_invalid, ctx.counts.malformed) == (1, 0, 0)
    assert not tree.any_malformed()


# --- captures written by tests/legacy_captures.py ------------------------------------------

def test_plausibility_of_frame_heads() -> None:
    legacy_request_plausible = probes.probe_legacy_request_plausible
    legacy_response_plausible = probes.probe_legacy_response_plausible
    for d, f, rtype in all_frames():
        head = f[4:20]
        if d == w.C2B:
            assert legacy_request_plausible(head), head
        else:
            assert legacy_response_plausible(head, rtype), (rtype, head)
            assert legacy_response_plausible(head, None)
    assert legacy_request_plausible(w.produce_request("a-very-long-topic-name-indeed", 0, b"")[4:20])
    fetch_v0 = modern_request(1, 0, 7, "consumer-1", bytes(40))
    assert not legacy_request_plausible(fetch_v0[:16])
    assert not legacy_request_plausible(modern_request(18, 3, 0, "rdkafka", b"\x00")[:16])
    assert not legacy_response_plausible(struct.pack(">hib", 0, 9, 7), 1)   # a message with magic 7
    assert not legacy_response_plausible(struct.pack(">hi", 0, 3), 1)       # a message shorter than 5
    assert not legacy_response_plausible(struct.pack(">h", 35), None)      # a modern-era error code
    assert legacy_response_plausible(struct.pack(">h", 1), 1)              # error-only FETCH response


def legacy_frames_from_capture(path: Path) -> tuple[list[Any], dict[str, int]]:
    """Every frame of a capture read through the whole packet path (the core's capture, net,
    tcp, framing and pairing), in stream order, and the bytes framing skipped by reason."""
    from tests.pcapgen import run_pipeline

    r = run_pipeline(str(path))
    return r["frames"], r["framing"].skipped


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("tests.pcapgen", reason="tests/pcapgen.py is not there yet")
    return w.write_captures(tmp_path_factory.mktemp("legacy"))


def test_capture_frames_and_segments(captures: dict[str, Path]) -> None:
    frames, skipped = legacy_frames_from_capture(captures["legacy_07"])
    expected = w.build_main_connection()
    assert skipped == {}
    assert [(f.direction, f.size, f.truncated) for f in frames] == [(d, len(b) - 4, False) for d, b in expected]
    assert [f.data for f in frames] == [b[4:] for _, b in expected]
    # packets: 1-3 handshake, 4 carries three requests, 5 the FETCH, 6-8 its response in three pieces
    assert [(f.first_index, f.last_index) for f in frames[:5]] == [(4, 4), (4, 4), (4, 4), (5, 5), (6, 8)]
    mp = frames[9]                                  # MULTIPRODUCE, cut every 40 bytes
    assert mp.last_index - mp.first_index == (mp.size + 4 - 1) // 40


def test_capture_decoded_and_paired_by_order(captures: dict[str, Path]) -> None:
    frames, _ = legacy_frames_from_capture(captures["legacy_07"])
    ctx = DecodeContext()
    fifo: list[Field] = []
    exchanges: list[tuple[str, Field, Field | None]] = []
    for f in frames:
        if f.direction == 0:
            assert legacy_score(f.data) >= 90
            tree = decode_legacy_request(f.data, ctx)
            rtype = tree.child("header").get("request_type")
            if rtype in (1, 2, 4):      # (FETCH, MULTIFETCH and OFFSETS are answered)
                fifo.append(tree)
            else:
                exchanges.append((LEGACY_API_NAMES[rtype], tree, None))
        else:
            request = fifo.pop(0)
            rtype = request.extra["request_type"]
            exchanges.append((LEGACY_API_NAMES[rtype], request, decode_legacy_response(f.data, rtype, ctx, request)))
    assert fifo == []
    assert [e[0] for e in exchanges] == ["PRODUCE", "PRODUCE", "PRODUCE", "FETCH", "FETCH", "OFFSETS",
                                         "MULTIPRODUCE", "MULTIFETCH"]
    parts = [legacy_partitions(r, True) if s is None else legacy_partitions(s, False) for _, r, s in exchanges]
    row = {"crc_ok": True, "error": None}
    assert parts[0] == [dict(row, topic="events", partition=0, records=2, bytes=39, codec="none")]
    assert parts[1] == [dict(row, topic="events", partition=1, records=3, bytes=65, codec="gzip")]
    assert parts[2] == [dict(row, topic="events", partition=-1, records=4, bytes=82, codec="snappy")]
    assert parts[3] == [dict(row, topic="events", partition=0, records=10, bytes=204, codec="mixed")]
    assert parts[4] == [dict(row, topic="events", partition=0, records=0, bytes=0, codec="none",
                             error="OFFSET_OUT_OF_RANGE")]
    assert parts[5] == []
    offsets = exchanges[5][2].child("body").child("offsets")
    assert [c.value for c in offsets.children] == [4096, 0]
    assert parts[6] == [dict(row, topic="events", partition=0, records=1, bytes=18, codec="none"),
                        dict(row, topic="audit", partition=2, records=5, bytes=101, codec="mixed", crc_ok=False)]
    assert parts[7] == [dict(row, topic="events", partition=0, records=1, bytes=18, codec="none"),
                        dict(row, topic="audit", partition=2, records=5, bytes=101, codec="mixed", crc_ok=False),
                        dict(row, topic="audit", partition=9, records=0, bytes=0, codec="none",
                             error="WRONG_PARTITION")]
    # the fetched messages: both magics and all three codecs, with their payloads
    fetched = exchanges[3][2].child("body").child("messages").children
    assert [(m.child("magic").value, m.get("compression")) for m in fetched] == [
        (0, None), (0, None), (1, 0), (1, 1), (1, 2)]
    leaves = [m.child("payload").value for m in fetched[:3]]
    leaves += [i.child("payload").value for m in fetched[3:] for i in m.child("messages").children]
    assert leaves == [b"hello legacy", b"second v0", b"plain v1", b"gz-a", b"gz-b", b"gz-c",
                      b"sn-0", b"sn-1", b"sn-2", b"sn-3"]
    # CRCs: every message checked, the one corrupt message (twice on the wire) flagged
    assert ctx.counts.crc_invalid == 2
    assert ctx.counts.crc_valid == 2 + 4 + 5 + 12 + (1 + 5) + (1 + 5)   # wrappers and inner messages alike
    assert ctx.counts.malformed == 0


def test_capture_mixed_connections_detected(captures: dict[str, Path]) -> None:
    from analyzer._core import Stream, open_capture
    from tests.pcapgen import CoreRun

    # the first request of each connection, reassembled by the core, decides its protocol
    # (the packets only: nothing flushed at the end of the capture)
    firsts: dict[int, bytes] = {}
    run = CoreRun(Stream())
    with open_capture(str(captures["legacy_mixed"])) as cap:
        while (batch := run.stream.feed_capture(cap, 7)) is not None:
            for ev in run.model(batch):
                if getattr(ev, "data", None) and ev.direction == 0 and ev.conn.id not in firsts:
                    firsts[ev.conn.id] = ev.data
    assert sorted(firsts) == [0, 1, 2]
    verdicts = {}
    for cid, data in sorted(firsts.items()):
        size = struct.unpack(">i", data[:4])[0]
        first = data[4:4 + size]
        verdicts[cid] = (legacy_score(first), modern_header(first) is not None)
    assert verdicts[0] == (100, False)           # legacy PRODUCE on "events": no modern reading
    assert verdicts[1] == (0, True)              # 0.8+ ApiVersions v0
    assert verdicts[2] == (100, True)            # legacy FETCH on "test": both readings parse (documented)


def test_capture_through_the_pipeline(captures: dict[str, Path]) -> None:
    from analyzer import pipeline
    from analyzer.sinks import output

    run = pipeline.Run(str(captures["legacy_mixed"]), pipeline.Options())
    exs = list(run)
    got = [(e.conn.id, e.protocol, e.api_name, e.status, e.request_frame, e.response_frame, e.error_codes)
           for e in exs]
    assert got == [
        (0, "kafka-legacy", "PRODUCE", "no_response_expected", 4, None, []),
        (0, "kafka-legacy", "PRODUCE", "no_response_expected", 4, None, []),
        (0, "kafka-legacy", "PRODUCE", "no_response_expected", 4, None, []),
        (0, "kafka-legacy", "FETCH", "ok", 5, 8, []),
        (0, "kafka-legacy", "FETCH", "ok", 9, 10, ["OFFSET_OUT_OF_RANGE"]),
        (0, "kafka-legacy", "OFFSETS", "ok", 11, 12, []),
        (0, "kafka-legacy", "MULTIPRODUCE", "no_response_expected", 16, None, []),
        (0, "kafka-legacy", "MULTIFETCH", "ok", 18, 19, ["WRONG_PARTITION"]),
        (1, "kafka", "ApiVersions", "ok", 26, 27, []),
        (1, "kafka", "Metadata", "ok", 28, 29, []),
        (2, "kafka-legacy", "FETCH", "ok", 35, 36, []),
        (2, "kafka-legacy", "OFFSETS", "ok", 37, 38, []),
    ]
    assert exs[3].partitions == [{"topic": "events", "partition": 0, "records": 10, "bytes": 204,
                                  "codec": "mixed", "crc_ok": True, "error": None}]
    assert [p["error"] for p in exs[7].partitions] == [None, None, "WRONG_PARTITION"]
    assert run.summary.bytes_skipped == {} or sum(run.summary.bytes_skipped.values()) == 0
    j = output.exchange_to_json(exs[4], trees=True)
    assert (j["protocol"], j["api_name"], j["api_version"], j["correlation_id"], j["client_id"]) == (
        "kafka-legacy", "FETCH", None, None, None)
    assert j["response"]["type"] == "FETCHResponse"
    assert j["response"]["children"][0]["children"][0]["notes"] == ["OFFSET_OUT_OF_RANGE"]
