"""What a lean tree (the core's figures walk) holds: the body alone under the root, error codes when not zero, topic
ids where their names are kept (what kafka.error_codes, summary.partitions_of and
kafka.learn_topic_ids read)."""
from __future__ import annotations

import struct

from dissectors import kafka
from dissectors.context import DecodeContext
from tests.lean import lean_request, lean_response


def heartbeat_v4(error: int, header_tags: bytes = b"\x00") -> bytes:
    # response header v1 (correlation id, tag section), throttle_time_ms, error_code, tags
    return struct.pack(">i", 7) + header_tags + struct.pack(">ih", 25, error) + b"\x00"


def test_root_holds_the_body_alone_and_zero_error_codes_are_left_out() -> None:
    ctx = DecodeContext()
    tree = lean_response(heartbeat_v4(0), 12, 4, ctx)
    assert [c.name for c in tree.children] == ["body"]
    body = tree.child("body")
    assert (body.offset, body.length) == (5, 7)
    assert [(c.name, c.value) for c in body.children] == [("throttle_time_ms", 25)]
    assert kafka.error_codes(tree) == [] and ctx.counts.malformed == 0

    tree = lean_response(heartbeat_v4(27), 12, 4, ctx)
    err = tree.child("body").child("error_code")
    assert (err.value, err.offset, err.extra) == (27, 9, {"error_code": 27})
    assert kafka.error_codes(tree) == ["REBALANCE_IN_PROGRESS"]


def test_header_tags_and_bad_headers() -> None:
    ctx = DecodeContext()
    # a non-empty tag section in the response header (tag 3, 2 bytes): the body follows it
    tree = lean_response(heartbeat_v4(0, b"\x01\x03\x02ab"), 12, 4, ctx)
    assert [c.name for c in tree.children] == ["body"] and tree.child("body").offset == 9
    assert tree.child("body").get("throttle_time_ms") == 25 and ctx.counts.malformed == 0
    # a cut header is the one kept, with its note
    tree = lean_response(b"\x00\x00", 12, 4, ctx)
    assert [c.name for c in tree.children] == ["header"] and tree.child("header").is_malformed
    assert ctx.counts.malformed == 1
    tree = lean_request(b"\x00\x0c\x00", 3, ctx)
    assert [c.name for c in tree.children] == ["header"] and ctx.counts.malformed == 2


def test_topic_ids_kept_with_their_names_only() -> None:
    tid = bytes(range(1, 17))
    tid_text = "01020304-0506-0708-090a-0b0c0d0e0f10"
    # Metadata v12 response: no brokers, no cluster id, one topic with no partitions
    topic = struct.pack(">h", 0) + b"\x03t1" + tid + b"\x00" + b"\x01" + struct.pack(">i", 0) + b"\x00"
    body = struct.pack(">i", 0) + b"\x01" + b"\x00" + struct.pack(">i", 1) + b"\x02" + topic + b"\x00"
    ctx = DecodeContext()
    tree = lean_response(struct.pack(">i", 7) + b"\x00" + body, 3, 12, ctx)
    t = tree.child("body").child("topics").children[0]
    assert [c.name for c in t.children] == ["name", "topic_id", "partitions"]
    assert ctx.topic_names == {tid_text: "t1"} and t.child("topic_id").notes is None
    # Fetch v13 request: consumer lag reads its session and fetch offsets, so the topic id
    # comes with them (not resolved: the request side is named from the answers)
    header = struct.pack(">hhi", 1, 13, 1) + struct.pack(">h", 1) + b"c" + b"\x00"
    req = (header + struct.pack(">iiiibii", -1, 500, 1, 1 << 20, 0, 0, -1)
           + b"\x02" + tid + b"\x02" + struct.pack(">iiqiqi", 0, -1, 0, -1, 0, 1 << 20) + b"\x00" + b"\x00"
           + b"\x01" + b"\x01" + b"\x00")
    tree = lean_request(req, len(header), ctx)
    body_f = tree.child("body")
    assert [c.name for c in body_f.children] == ["max_wait_ms", "min_bytes", "isolation_level", "session_id",
                                                 "session_epoch", "forgotten_topics_data"]
    assert [(c.get("isolation_level"), c.get("session_id"), c.get("session_epoch"))
            for c in [body_f]] == [(0, 0, -1)]
    # (its partitions: the body's rows, the topics array left out)
    assert body_f.extra == {"fetch": [(None, tid_text, 0, 0)]}
    assert body_f.child("forgotten_topics_data").children == []
    assert body_f.length == len(req) - len(header) and ctx.counts.malformed == 0 and ctx.counts.trailing == 0


def metadata_v12_response(partition_errors: list[int]) -> bytes:
    """One topic whose partitions (index i) have these error codes, no brokers."""
    tid = bytes(range(1, 17))
    parts = b"".join(struct.pack(">hiii", err, i, 1, 0) + b"\x01\x01\x01" + b"\x00"
                     for i, err in enumerate(partition_errors))
    topic = (struct.pack(">h", 0) + b"\x03t1" + tid + b"\x00" + bytes([len(partition_errors) + 1]) + parts
             + struct.pack(">i", 0) + b"\x00")
    body = struct.pack(">i", 0) + b"\x01" + b"\x00" + struct.pack(">i", 1) + b"\x02" + topic + b"\x00"
    return struct.pack(">i", 7) + b"\x00" + body


def test_partitions_of_error_codes_alone_kept_only_with_a_non_zero_code() -> None:
    ctx = DecodeContext()
    tree = lean_response(metadata_v12_response([0, 9, 0, 3]), 3, 12, ctx)
    parts = tree.child("body").child("topics").children[0].child("partitions")
    assert parts.value == 4         # the count of the array on the wire
    assert [(p.name, [(c.name, c.value) for c in p.children]) for p in parts.children] == [
        ("[1]", [("error_code", 9), ("partition_index", 1)]),
        ("[3]", [("error_code", 3), ("partition_index", 3)])]
    assert parts.children[0].offset == parts.offset + 1 + 18 and parts.children[0].length == 18
    # the root carries the codes read, in wire order: what a walk of the tree finds
    walked: list[str] = []
    kafka._collect_errors((tree,), walked)
    assert kafka.error_codes(tree) is tree.error_codes
    assert tree.error_codes == walked == ["REPLICA_NOT_AVAILABLE", "UNKNOWN_TOPIC_OR_PARTITION"]
    assert ctx.counts.malformed == 0 and ctx.counts.trailing == 0

    tree = lean_response(metadata_v12_response([0, 0]), 3, 12, ctx)
    parts = tree.child("body").child("topics").children[0].child("partitions")
    assert parts.value == 2 and parts.children == [] and kafka.error_codes(tree) == []


def test_error_codes_of_a_cut_message_are_those_of_its_partial_tree() -> None:
    data = metadata_v12_response([0, 9, 0, 3])
    ctx = DecodeContext()
    # partition [3] (the last 24 bytes but 6) says 126 replicas: bad bytes after its error
    # code, and the partial element stays, with its code
    bad = bytearray(data)
    bad[len(data) - 24 + 14] = 0x7F
    tree = lean_response(bytes(bad), 3, 12, ctx)
    walked: list[str] = []
    kafka._collect_errors((tree,), walked)
    assert ctx.counts.malformed == 1
    assert kafka.error_codes(tree) == walked == ["REPLICA_NOT_AVAILABLE", "UNKNOWN_TOPIC_OR_PARTITION"]
