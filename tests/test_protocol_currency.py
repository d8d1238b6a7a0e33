"""Protocol currency (issue 23): trees that say everything the wire says, frames whose API
key or version we do not know, frames cut by the capture's snaplen, and the schema table
against Kafka's own message definitions."""
from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

from analyzer import pipeline
from analyzer.commands.options import summary_text
from dissectors import kafka
from dissectors.context import DecodeContext
from dissectors.field import Field
from tests.conftest import SAMPLES, shared_captures
from tests.pcapgen import TcpFlow, kafka_frame, kafka_request, kafka_response, write_pcap

# ---------------------------------------------------------------------------- helpers


def exchanges(path: Path | str, ports: tuple[int, ...] = (9092,)) -> tuple[list[Any], Any]:
    run = pipeline.Run(str(path), pipeline.Options(ports=ports))
    return list(run), run.summary


def at(tree: Field, path: str) -> Field:
    f: Field | None = tree
    for part in path.split("/"):
        assert f is not None, path
        f = f.child(part)
    assert f is not None, path
    return f


# ------------------------------------------------------------------ trees: tags, NONE, CRCs


def test_tagged_field_sections_tag_numbers_and_none_on_a_real_api_versions_v4() -> None:
    exs, _ = exchanges(SAMPLES / "produce_fetch_kafkapython_zstd.pcap", (46091,))
    ex = next(e for e in exs if e.api_key == 18)
    body = at(ex.response_tree, "body")
    # error code 0 is named, as tshark's "No Error (0)"
    assert (body.child("error_code").value, body.child("error_code").notes) == (0, ["NONE"])
    # every struct of a flexible version shows its tagged-field section: each ApiVersion entry...
    first = body.child("api_keys").children[0]
    assert [(c.name, c.value) for c in first.children] == [
        ("api_key", 75), ("min_version", 0), ("max_version", 0), ("tagged_fields", 0)]
    assert (first.children[-1].offset, first.children[-1].length) == (13, 1)
    # ... and the body's own, here with the four tagged fields Kafka 3.3+ sends, each with its tag
    tags = body.children[-1]
    assert (tags.name, tags.value, tags.offset, tags.length) == ("tagged_fields", 4, 263, 20)
    assert [(c.name, c.value, c.notes) for c in tags.children] == [
        ("supported_features", 0, ["tag 0"]), ("finalized_features_epoch", -1, ["tag 1"]),
        ("finalized_features", 0, ["tag 2"]), ("zk_migration_ready", False, ["tag 3"])]
    # the request body (flexible v4) shows its empty section too
    req = at(ex.request_tree, "body")
    assert [(c.name, c.value) for c in req.children] == [
        ("client_software_name", "kafka-python"), ("client_software_version", "3.0.12"), ("tagged_fields", 0)]


def test_crc_in_hex_beside_the_verdict_on_real_batches() -> None:
    exs, _ = exchanges(SAMPLES / "produce_fetch_kafkapython_zstd.pcap", (46091,))
    produce = next(e for e in exs if e.api_key == 0)
    crcs = [f for f in produce.request_tree.walk() if f.name == "crc"]
    assert crcs
    for f in crcs:
        assert f.notes == [f"crc valid (0x{f.value:08x})"]


# ------------------------------------------------------------------ frames cut by the snaplen


def test_snaplen_96_api_versions_shows_the_captured_entries() -> None:
    exs, summary = exchanges(shared_captures() / "snap96_rdkafka_tansu.pcap")
    ex = next(e for e in exs if e.api_key == 18)
    assert (ex.response.size, len(ex.response.data), ex.response.truncated) == (283, 26, True)
    resp = ex.response_tree
    assert resp.notes == ["cut by the capture: 26 of 283 bytes captured, decoded as far as they go"]
    keys = at(resp, "body/api_keys")
    # the count is the wire's (36 entries), checked against the declared 279 body bytes, and
    # the entries the 26 captured bytes hold are shown: two whole, the third cut after max_version's start
    assert keys.value == 36 and not resp.any_malformed()
    assert [[(c.name, c.value) for c in e.children] for e in keys.children] == [
        [("api_key", 12), ("min_version", 0), ("max_version", 4), ("tagged_fields", 0)],
        [("api_key", 8), ("min_version", 0), ("max_version", 9), ("tagged_fields", 0)],
        [("api_key", 15), ("min_version", 0)]]
    assert keys.children[2].child("api_key").notes == ["DescribeGroups"]
    # the request: its client_software_name as far as it was captured
    req = ex.request_tree
    assert req.notes == ["cut by the capture: 26 of 64 bytes captured, decoded as far as they go"]
    assert at(req, "body/client_software_name").value == "conflue"
    # one note on each cut tree, and the exchanges stay ok
    assert all(e.status == "ok" for e in exs)
    assert sum(1 for e in exs for t in (e.request_tree, e.response_tree)
               if t is not None and t.notes and t.notes[0].startswith("cut by the capture")) == 41
    assert summary.truncated_frames == 41


def test_snaplen_96_summary_counts_cuts_not_malformed() -> None:
    run = pipeline.Run(str(shared_captures() / "snap96_rdkafka_tansu.pcap"))
    list(run)
    d = run.summary.to_json(run.ctx)
    assert (d["cut_messages"], d["malformed_fields"], d["truncated_frames"]) == (41, 0, 41)
    text = "\n".join(summary_text(run.summary, run.ctx))
    assert "cut by the capture: 41 messages, decoded as far as their captured bytes go" in text
    assert "malformed" not in text
    # the lean decoding of stats counts them the same way
    lean = pipeline.Run(str(shared_captures() / "snap96_rdkafka_tansu.pcap"), pipeline.Options(decode="lite"))
    assert len(list(lean)) == 22 and (lean.ctx.counts.cut, lean.ctx.counts.malformed) == (41, 0)


def _cut(frame: bytes, keep: int) -> tuple[bytes, int]:
    """A frame (without its size prefix) cut after ``keep`` bytes, and its declared size."""
    return frame[:keep], len(frame)


def test_crafted_api_versions_v2_response_cut_keeps_whole_entries_and_the_partial_one() -> None:
    entries = [(0, 0, 9), (1, 0, 13), (3, 0, 12), (18, 0, 3)]
    body = struct.pack(">hi", 0, len(entries)) + b"".join(struct.pack(">hhh", *e) for e in entries)
    frame = struct.pack(">i", 5) + body + struct.pack(">i", 0)
    data, size = _cut(frame, 4 + 6 + 6 * 2 + 3)
    ctx = DecodeContext()
    tree = kafka.decode_response(data, 18, 2, ctx, size)
    keys = at(tree, "body/api_keys")
    assert keys.value == 4 and [e.get("api_key") for e in keys.children] == [0, 1, 3]
    assert [c.name for c in keys.children[2].children] == ["api_key"]
    assert (ctx.counts.malformed, ctx.counts.cut) == (0, 1) and tree.notes[0].startswith("cut by the capture: 25 of 38")
    # the same bytes as a whole frame are malformed: the count exceeds the bytes there are
    ctx = DecodeContext()
    tree = kafka.decode_response(data, 18, 2, ctx)
    assert ctx.counts.malformed == 1 and [n for f in tree.walk() for n in f.notes or () if n.startswith("malformed")] == [
        "malformed: array count 4 exceeds the 15 bytes left"]
    # a count beyond even the declared size stays malformed in a cut frame
    bad = struct.pack(">i", 5) + struct.pack(">hi", 0, 1000) + struct.pack(">hhh", 0, 0, 9)
    ctx = DecodeContext()
    tree = kafka.decode_response(bad, 18, 2, ctx, len(bad) + 10)
    assert ctx.counts.malformed == 1 and ctx.counts.cut == 1


def test_crafted_cut_strings_bytes_records_and_header() -> None:
    # a Produce v3 request cut inside its records: topic names whole, records what was captured
    batch = _record_batch()
    part = struct.pack(">i", 0) + struct.pack(">i", len(batch)) + batch
    topic = struct.pack(">h", 6) + b"orders" + struct.pack(">i", 1) + part
    body = struct.pack(">hhii", -1, 1, 1000, 1) + topic
    frame = kafka_request(0, 3, 9, "producer-1", body)[4:]
    ctx = DecodeContext()
    data, size = _cut(frame, len(frame) - 20)
    tree = kafka.decode_request(data, ctx, size)
    t0 = at(tree, "body/topic_data").children[0]
    assert t0.get("name") == "orders" and (ctx.counts.malformed, ctx.counts.cut) == (0, 1)
    rec = t0.child("partition_data").children[0].child("records")
    assert rec.offset + rec.length == len(data)
    # cut inside the client_id: the part captured, no malformed note
    ctx = DecodeContext()
    data, size = _cut(frame, 14)
    tree = kafka.decode_request(data, ctx, size)
    assert at(tree, "header/client_id").value == "prod" and (ctx.counts.malformed, ctx.counts.cut) == (0, 1)
    # cut inside a string of the body
    ctx = DecodeContext()
    data, size = _cut(frame, 20 + 2 + 2 + 4 + 4 + 2 + 3)     # header, transactional_id ... 'ord'
    tree = kafka.decode_request(data, ctx, size)
    assert at(tree, "body/topic_data").children[0].get("name") == "ord" and ctx.counts.malformed == 0


def _record_batch() -> bytes:
    from tests.test_records import build
    return build(2, 0, n=3)


# ---------------------------------------------- frames whose API key or version we do not know


def _flexible_request(api_key: int, version: int, corr: int, client_id: str, body: bytes) -> bytes:
    """A request frame with header v2 (client_id, then an empty tagged-field section)."""
    cid = client_id.encode()
    return kafka_frame(struct.pack(">hhih", api_key, version, corr, len(cid)) + cid + b"\x00" + body)


def _metadata_v1(corr: int) -> tuple[bytes, bytes]:
    req = kafka_request(3, 1, corr, "cli", struct.pack(">i", 0))
    resp = kafka_response(corr, struct.pack(">iii", 0, 7, 0))   # no brokers, controller 7, no topics
    return req, resp


def _unknown_capture(path: Path, syn: bool = True, port: int = 9092) -> None:
    flow = TcpFlow(("10.0.0.1", 40000), ("10.0.0.2", port), ts=1000.0)
    pkts = flow.handshake() if syn else []
    unknown = _flexible_request(10000, 0, 2, "cli", b"\x01\x02\x03hello")
    md1, md1r = _metadata_v1(1)
    # the unknown API key first, glued to a Metadata request in one segment, its answer with it
    pkts += flow.send(0, unknown + md1)
    pkts += flow.send(1, kafka_response(2, b"\x00\x23\x00") + md1r)
    # ControlledShutdown v1000 spread over two segments, a Metadata request behind it
    shutdown = _flexible_request(7, 1000, 3, "cli", struct.pack(">iq", 2, 5) + b"\x00")
    md4, md4r = _metadata_v1(4)
    pkts += flow.send(0, shutdown + md4, sizes=[20])
    pkts += flow.send(1, kafka_response(3, b"\x00\x00\x23\x01\x00") + md4r)
    pkts += flow.fin(0) + flow.fin(1)
    write_pcap(str(path), pkts)


def test_unknown_api_key_and_far_version_are_one_frame_each_and_paired(tmp_path: Path) -> None:
    """Before: the API key 10000 request was skipped as "bytes before first frame" and its
    answer an orphan; ControlledShutdown v1000 knocked framing out of sync, its tail read as a
    Metadata v3 request that was never answered."""
    path = tmp_path / "unknown.pcap"
    _unknown_capture(path)
    exs, summary = exchanges(path)
    assert [(e.status, e.api_name, e.api_key, e.api_version, e.correlation_id) for e in exs] == [
        ("ok", "Unknown(10000)", 10000, 0, 2), ("ok", "Metadata", 3, 1, 1),
        ("ok", "ControlledShutdown", 7, 1000, 3), ("ok", "Metadata", 3, 1, 4)]
    assert not summary.bytes_skipped and summary.request_frames == summary.response_frames == 4
    unknown, shutdown = exs[0], exs[2]
    body = at(unknown.request_tree, "body")
    assert (body.type, body.value, body.offset) == ("bytes", b"\x01\x02\x03hello", 14)
    assert body.notes == ["unknown API key 10000: body kept as raw bytes (header assumed flexible)"]
    assert at(unknown.response_tree, "body").notes == ["unknown API key 10000: body kept as raw bytes"]
    body = at(shutdown.request_tree, "body")
    assert body.type == "bytes" and body.notes == [
        "version 1000 is beyond the newest we know (3): body kept as raw bytes"]
    assert at(shutdown.response_tree, "body").value == b"\x00\x23\x01\x00" and shutdown.error_codes == []
    # check names them
    from analyzer.sinks.check import Checker
    ck = Checker()
    for e in exs:
        ck.add(e)
    found = [(f.rule, f.severity, f.message) for f in ck.finish() if f.rule == "unknown-api"]
    assert found == [
        ("unknown-api", "warning", "1 request(s) with unknown API key 10000: framed and paired, body not judged"),
        ("unknown-api", "warning", "1 request(s) with ControlledShutdown v1000, newer than the newest known (v3): "
                                   "framed and paired, body not judged")]


def test_a_first_request_beyond_key_127_counts_only_on_a_kafka_port(tmp_path: Path) -> None:
    # on a port found by autodetection, a connection's first request needs a plausible API key
    # (0-127), lest another length-prefixed protocol pass for Kafka; on a --port any key
    path = tmp_path / "elsewhere.pcap"
    _unknown_capture(path, port=19092)
    exs, summary = exchanges(path)
    assert [(e.status, e.api_name, e.correlation_id) for e in exs][:2] == [
        ("orphan_response", "Unknown", 2), ("ok", "Metadata", 1)]
    assert summary.bytes_skipped["before first frame"] == 26
    exs, summary = exchanges(path, (19092,))
    assert [e.status for e in exs] == ["ok"] * 4 and not summary.bytes_skipped


def test_stats_lean_decoding_keeps_such_bodies_raw_too(tmp_path: Path) -> None:
    # (the lean walk would read v1000's body with v3's layout: an error code 8960 that is not)
    path = tmp_path / "unknown.pcap"
    _unknown_capture(path)
    run = pipeline.Run(str(path), pipeline.Options(decode="lite"))
    exs = list(run)
    shutdown = next(e for e in exs if e.api_key == 7)
    assert shutdown.error_codes == [] and at(shutdown.response_tree, "body").type == "bytes"
    assert run.ctx.counts.malformed == 0 and [e.status for e in exs] == ["ok"] * 4


def test_without_the_handshake_the_first_boundary_is_unknown(tmp_path: Path) -> None:
    # mid-stream the first byte is no known boundary: the unknown request is still passed over
    # (the stricter rules of a desynchronised stream), and its answer is an orphan
    path = tmp_path / "midstream.pcap"
    _unknown_capture(path, syn=False)
    exs, summary = exchanges(path)
    assert [(e.status, e.api_name, e.correlation_id) for e in exs][:2] == [
        ("orphan_response", "Unknown", 2), ("ok", "Metadata", 1)]
    assert summary.bytes_skipped["before first frame"] == 26
    # nor is the end of the frame the scan guessed (the Metadata request): ControlledShutdown
    # v1000 there is passed over as well; the boundaries after a frame cut in sync are known
    assert ("ok", "ControlledShutdown", 3) not in [(e.status, e.api_name, e.correlation_id) for e in exs]


def test_a_version_just_above_the_newest_is_decoded_with_the_newest_layout() -> None:
    # Heartbeat's newest known version is 4; a v5 whose body fits v4's layout is decoded so
    v4_body = b"\x04grp" + struct.pack(">i", 9) + b"\x04mem" + b"\x00" + b"\x00"   # compact strings
    frame = _flexible_request(12, 5, 1, "cli", v4_body)[4:]
    ctx = DecodeContext()
    tree = kafka.decode_request(frame, ctx)
    body = at(tree, "body")
    assert body.type == "HeartbeatRequest v4" and body.get("group_id") == "grp" and body.get("generation_id") == 9
    assert body.notes == ["version 5 is newer than the newest known (4): decoded as v4"]
    # one that does not fit it (three bytes more) is kept raw, with a note saying why
    frame = _flexible_request(12, 5, 1, "cli", v4_body[:-1] + b"abc" + b"\x00")[4:]
    tree = kafka.decode_request(frame, ctx)
    body = at(tree, "body")
    assert body.type == "bytes" and body.value == v4_body[:-1] + b"abc\x00"
    assert body.notes == ["version 5 is newer than the newest known (4) and the v4 layout does not fit: "
                          "body kept as raw bytes"]
    assert ctx.counts.malformed == 0 and ctx.counts.trailing == 0
    # the response the same way: v4's layout fits (throttle_time_ms, error_code, tags)
    tree = kafka.decode_response(struct.pack(">i", 1) + b"\x00" + struct.pack(">ih", 0, 27) + b"\x00", 12, 5, ctx)
    assert at(tree, "body").get("error_code") == 27 and kafka.error_codes(tree) == ["REBALANCE_IN_PROGRESS"]


# ------------------------------------------------------------------------- Kafka 4.4's versions

TOPIC_ID = bytes(range(1, 17))


def _body(tree: Field) -> list[tuple[str, Any]]:
    return [(c.name, c.value) for c in at(tree, "body").children]


def test_api_versions_v5_request_names_cluster_and_node() -> None:
    # KIP-1242: read as v4 the ClusterId's length (0x0a) was taken for a tagged-field count
    body = b"\x0dkafka-python\x073.0.12" + b"\x0aclusterid" + struct.pack(">i", 3) + b"\x00"
    ctx = DecodeContext()
    tree = kafka.decode_request(_flexible_request(18, 5, 1, "cli", body)[4:], ctx)
    assert _body(tree) == [("client_software_name", "kafka-python"), ("client_software_version", "3.0.12"),
                           ("cluster_id", "clusterid"), ("node_id", 3), ("tagged_fields", 0)]
    assert at(tree, "body").notes is None and ctx.counts.malformed == 0
    # unknown to the client: a null cluster id, node -1
    tree = kafka.decode_request(_flexible_request(18, 5, 1, "cli", b"\x02a\x02b\x00" + struct.pack(">i", -1)
                                                  + b"\x00")[4:], ctx)
    assert _body(tree)[2:4] == [("cluster_id", None), ("node_id", -1)] and ctx.counts.malformed == 0


def test_txn_offset_commit_v6_names_topics_by_id_and_the_renamed_epoch() -> None:
    # KIP-1319 (the frames as Kafka's trunk schema encodes them)
    head = b"\x02t\x02g" + struct.pack(">qhi", 1, 2, 3) + b"\x02m\x00" + b"\x02"
    partition = b"\x02" + struct.pack(">iqi", 0, 5, -1) + b"\x01" + b"\x00" + b"\x00" + b"\x00"
    ctx = DecodeContext(topic_names={"01020304-0506-0708-090a-0b0c0d0e0f10": "orders"})
    tree = kafka.decode_request(_flexible_request(28, 6, 1, "cli", head + TOPIC_ID + partition)[4:], ctx)
    body = at(tree, "body")
    assert body.get("generation_id_or_member_epoch") == 3 and body.get("member_id") == "m"
    topic = body.child("topics").children[0]
    assert [c.name for c in topic.children] == ["topic_id", "partitions", "tagged_fields"]
    assert topic.get("topic_id") == "01020304-0506-0708-090a-0b0c0d0e0f10"
    assert topic.child("partitions").children[0].get("committed_offset") == 5 and ctx.counts.malformed == 0
    # v5 still names the topic
    tree = kafka.decode_request(_flexible_request(28, 5, 1, "cli", head + b"\x07orders" + partition)[4:], ctx)
    assert at(tree, "body").child("topics").children[0].get("name") == "orders" and ctx.counts.malformed == 0
    # the response the same way
    resp = struct.pack(">i", 1) + b"\x00" + struct.pack(">i", 0) + b"\x02" + TOPIC_ID + b"\x02" + \
        struct.pack(">ih", 0, 0) + b"\x00\x00\x00"
    tree = kafka.decode_response(resp, 28, 6, ctx)
    topic = at(tree, "body").child("topics").children[0]
    assert topic.get("topic_id") == "01020304-0506-0708-090a-0b0c0d0e0f10" and ctx.counts.malformed == 0
    assert topic.child("partitions").children[0].child("error_code").notes == ["NONE"]


def test_streams_group_heartbeat_v1_response_and_v0_legacy_lag() -> None:
    # KIP-1331 (the frames as Kafka's trunk schema encodes them)
    head = struct.pack(">ih", 0, 0) + b"\x00" + b"\x02m" + struct.pack(">ii", 1, 2)
    v1 = head + struct.pack(">iq", 3, 1000) + b"\x00\x00\x00\x00" + b"\x01" + struct.pack(">i", 4) + b"\x00\x00"
    v0 = head + struct.pack(">ii", 1000, 3) + b"\x00\x00\x00\x00" + struct.pack(">i", 4) + b"\x00\x00"
    ctx = DecodeContext()
    b1 = dict(_body(kafka.decode_response(struct.pack(">i", 1) + b"\x00" + v1, 88, 1, ctx)))
    assert (b1["task_offset_interval_ms"], b1["acceptable_recovery_lag"], b1["topology_description_required"],
            b1["endpoint_information_epoch"]) == (3, 1000, True, 4)
    assert "acceptable_recovery_lag_legacy" not in b1
    b0 = dict(_body(kafka.decode_response(struct.pack(">i", 1) + b"\x00" + v0, 88, 0, ctx)))
    assert (b0["acceptable_recovery_lag_legacy"], b0["task_offset_interval_ms"]) == (1000, 3)
    assert "acceptable_recovery_lag" not in b0 and "topology_description_required" not in b0
    assert ctx.counts.malformed == 0 and ctx.counts.trailing == 0


def _cstr(s: str | None) -> bytes:
    """A compact (nullable) string."""
    return b"\x00" if s is None else bytes([len(s) + 1]) + s.encode()


def _cstrs(*ss: str) -> bytes:
    """A compact array of compact strings."""
    return bytes([len(ss) + 1]) + b"".join(_cstr(s) for s in ss)


def test_delete_groups_v3_response_says_why_a_group_was_not_deleted() -> None:
    # KIP-1331: each result's nullable ErrorMessage after its ErrorCode (read as v2, the
    # message's length 0x05 was taken for a tagged-field count and the frame kept raw)
    results = (_cstr("g") + struct.pack(">h", 68) + _cstr("nope") + b"\x00"
               + _cstr("h") + struct.pack(">h", 0) + _cstr(None) + b"\x00")
    v3 = struct.pack(">i", 7) + b"\x03" + results + b"\x00"
    ctx = DecodeContext()
    tree = kafka.decode_response(struct.pack(">i", 1) + b"\x00" + v3, 42, 3, ctx)
    body = at(tree, "body")
    assert body.type == "DeleteGroupsResponse v3" and body.notes is None and body.get("throttle_time_ms") == 7
    results = body.child("results").children
    assert [[(c.name, c.value) for c in r.children] for r in results] == [
        [("group_id", "g"), ("error_code", 68), ("error_message", "nope"), ("tagged_fields", 0)],
        [("group_id", "h"), ("error_code", 0), ("error_message", None), ("tagged_fields", 0)]]
    assert kafka.error_codes(tree) == ["NON_EMPTY_GROUP"] and ctx.counts.malformed == 0 and ctx.counts.trailing == 0
    # v2 has no message: the same results without it
    v2 = (struct.pack(">i", 7) + b"\x03" + _cstr("g") + struct.pack(">h", 68) + b"\x00"
          + _cstr("h") + struct.pack(">h", 0) + b"\x00" + b"\x00")
    tree = kafka.decode_response(struct.pack(">i", 1) + b"\x00" + v2, 42, 2, ctx)
    assert [c.name for c in at(tree, "body").child("results").children[0].children] == [
        "group_id", "error_code", "tagged_fields"]
    # the v3 request is v2's: the group names
    tree = kafka.decode_request(_flexible_request(42, 3, 1, "cli", b"\x03\x02g\x02h\x00")[4:], ctx)
    assert _body(tree) == [("groups_names", 2), ("tagged_fields", 0)]
    assert [c.value for c in at(tree, "body").child("groups_names").children] == ["g", "h"]
    assert ctx.counts.malformed == 0 and ctx.counts.trailing == 0


def test_streams_group_describe_v1_request_asks_for_the_topology_description() -> None:
    # KIP-1331: IncludeTopologyDescription after IncludeAuthorizedOperations
    ctx = DecodeContext()
    tree = kafka.decode_request(_flexible_request(89, 1, 1, "cli", b"\x02\x04app\x01\x01\x00")[4:], ctx)
    assert at(tree, "body").type == "StreamsGroupDescribeRequest v1"
    assert _body(tree) == [("group_ids", 1), ("include_authorized_operations", True),
                           ("include_topology_description", True), ("tagged_fields", 0)]
    tree = kafka.decode_request(_flexible_request(89, 0, 1, "cli", b"\x02\x04app\x01\x00")[4:], ctx)
    assert _body(tree) == [("group_ids", 1), ("include_authorized_operations", True), ("tagged_fields", 0)]
    assert ctx.counts.malformed == 0 and ctx.counts.trailing == 0


def _node(name: str, node_type: int, sources: tuple[str, ...] = (), sink: str | None = None,
          stores: tuple[str, ...] = (), successors: tuple[str, ...] = ()) -> bytes:
    return (_cstr(name) + struct.pack(">b", node_type) + _cstrs(*sources) + _cstr(sink) + _cstrs(*stores)
            + _cstrs(*successors) + b"\x00")


def test_streams_group_describe_v1_response_carries_the_topology_description_and_assignor() -> None:
    # KIP-1331 and KIP-1357: after AuthorizedOperations, the nullable TopologyDescription,
    # TopologyDescriptionStatus and the nullable AssignorName
    head = (struct.pack(">h", 0) + _cstr(None) + _cstr("app") + _cstr("Stable") + struct.pack(">ii", 5, 5)
            + b"\xff" + b"\x01" + struct.pack(">i", -2147483648))     # no topology, no members
    source = _node("KSTREAM-SOURCE-0000000000", 1, sources=("orders",), successors=("KSTREAM-PROCESSOR-1",))
    processor = _node("KSTREAM-PROCESSOR-1", 2, stores=("counts",), successors=("KSTREAM-SINK-2",))
    sink = _node("KSTREAM-SINK-2", 3, sink="counts-out")
    description = (b"\x01" + b"\x02" + _cstr("0") + b"\x04" + source + processor + sink + b"\x00"
                   + b"\x02" + _node("global-source", 1, sources=("rates",), successors=("global-proc",))
                   + _node("global-proc", 2, stores=("rates-store",)) + b"\x00" + b"\x00")
    described = head + description + struct.pack(">b", 3) + _cstr("sticky") + b"\x00"
    # another group: nothing stored for it, no assignor known
    unstored = head.replace(b"\x04app", b"\x04bob") + b"\xff" + struct.pack(">b", 1) + _cstr(None) + b"\x00"
    body = struct.pack(">i", 0) + b"\x03" + described + unstored + b"\x00"
    ctx = DecodeContext()
    tree = kafka.decode_response(struct.pack(">i", 1) + b"\x00" + body, 89, 1, ctx)
    assert at(tree, "body").type == "StreamsGroupDescribeResponse v1"
    assert ctx.counts.malformed == 0 and ctx.counts.trailing == 0
    app, bob = at(tree, "body/groups").children
    assert [c.name for c in app.children][-5:] == [
        "authorized_operations", "topology_description", "topology_description_status", "assignor_name",
        "tagged_fields"]
    assert (app.get("group_id"), app.get("topology_description_status"), app.get("assignor_name")) == (
        "app", 3, "sticky")
    desc = app.child("topology_description")
    sub = desc.child("subtopologies").children[0]
    assert sub.get("subtopology_id") == "0"

    def node(f: Field) -> tuple[Any, ...]:
        return (f.get("name"), f.get("node_type"), [c.value for c in f.child("source_topics").children],
                f.get("sink_topic"), [c.value for c in f.child("stores").children],
                [c.value for c in f.child("successors").children])

    assert [node(n) for n in sub.child("nodes").children] == [
        ("KSTREAM-SOURCE-0000000000", 1, ["orders"], None, [], ["KSTREAM-PROCESSOR-1"]),
        ("KSTREAM-PROCESSOR-1", 2, [], None, ["counts"], ["KSTREAM-SINK-2"]),
        ("KSTREAM-SINK-2", 3, [], "counts-out", [], [])]
    store = desc.child("global_stores").children[0]
    assert (node(store.child("source")), node(store.child("processor"))) == (
        ("global-source", 1, ["rates"], None, [], ["global-proc"]),
        ("global-proc", 2, [], None, ["rates-store"], []))
    assert [(c.name, c.value) for c in bob.children][-4:] == [
        ("topology_description", None), ("topology_description_status", 1), ("assignor_name", None),
        ("tagged_fields", 0)]
    # v0 has none of them: the same group ends with its authorized operations
    v0 = struct.pack(">i", 0) + b"\x02" + head + b"\x00" + b"\x00"
    tree = kafka.decode_response(struct.pack(">i", 1) + b"\x00" + v0, 89, 0, ctx)
    assert [c.name for c in at(tree, "body/groups").children[0].children][-2:] == [
        "authorized_operations", "tagged_fields"]
    assert ctx.counts.malformed == 0 and ctx.counts.trailing == 0
