"""Display filters (``-Y``), ``--frame``, ``--api`` checking and the read commands reports print.

The exchanges a filter should select are computed here from ``read -f ndjson``'s objects
(the exchange fields, the ``partitions`` digest, the JSON trees walked by explicit names),
never by the filter module; tshark gives the packets for ``--frame``.
"""
from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from analyzer.display_filter import FilterError, Literal, compile_filter, path_values
from dissectors.field import Field
from tests.conftest import SAMPLES, shared_captures

GROUP = str(SAMPLES / "group_rdkafka.pcap")
TXN = str(SAMPLES / "txn_rdkafka.pcap")
FETCH = str(SAMPLES / "produce_fetch_rdkafka_none.pcap")
ADMIN = str(SAMPLES / "admin_rdkafka.pcap")

Key = tuple[Any, ...]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "analyzer", *args], capture_output=True, text=True, timeout=300)


def _key(o: dict[str, Any]) -> Key:
    return (o["conn"], o["api_name"], o["correlation_id"], o["request_frame"], o["response_frame"])


@cache
def _ndjson(capture: str) -> tuple[dict[str, Any], ...]:
    r = _cli("read", capture, "-f", "ndjson", "--no-summary")
    assert r.returncode == 0, r.stderr
    return tuple(json.loads(line) for line in r.stdout.splitlines())


def _selected(capture: str, expr: str, decode: str = "full") -> list[Key]:
    """The exchanges the filter keeps, in-process, as ``read`` and ``stats`` run it."""
    from analyzer.commands.options import iter_captures
    from analyzer.sinks.output import exchange_to_json

    flt = compile_filter(expr)
    out: list[Key] = []
    for _path, run in iter_captures((capture,), {}, progress=False, decode=decode):
        keep = flt.matcher(run.ctx)
        out.extend(_key(exchange_to_json(ex, trees=False)) for ex in run if keep(ex))
    return sorted(out, key=repr)


def _expected(capture: str, pred: Callable[[dict[str, Any]], bool]) -> list[Key]:
    return sorted((_key(o) for o in _ndjson(capture) if pred(o)), key=repr)


def _check(capture: str, expr: str, pred: Callable[[dict[str, Any]], bool], at_least: int = 1) -> list[Key]:
    want = _expected(capture, pred)
    assert len(want) >= at_least, f"the oracle selects too few for {expr!r}: {len(want)}"
    assert len(want) < len(_ndjson(capture)) or at_least == 0, f"{expr!r} selects every exchange: a weak test"
    assert _selected(capture, expr) == want, expr
    return want


def _nodes(tree: dict[str, Any] | None) -> Iterator[dict[str, Any]]:
    stack = [tree] if tree else []
    while stack:
        n = stack.pop()
        yield n
        stack.extend(n["children"])


def _values_anywhere(o: dict[str, Any]) -> list[Any]:
    return [n["value"] for t in (o["request"], o["response"]) for n in _nodes(t)]


def _child(n: dict[str, Any] | None, name: str) -> dict[str, Any] | None:
    for c in (n or {}).get("children", ()):
        if c["name"] == name:
            return c
    return None


# -- the language, on crafted values -----------------------------------------------------------------

@pytest.mark.parametrize("expr, n", [
    ("latency_ms > 250ms", 250.0), ("latency_ms > 1.5s", 1500.0), ("latency_ms > 500us", 0.5),
    ("latency_ms > 2min", 120_000.0), ("request_bytes > 64KiB", 65536), ("request_bytes > 1MB", 1_000_000),
    ("request_bytes > 10B", 10), ("request.max_wait_ms > 1s", 1000.0), ("request.max_bytes >= 1MiB", 1 << 20),
    ("api_key == 0x12", 18), ("correlation_id == -1", -1),
])
def test_numbers_and_units(expr: str, n: float) -> None:
    lit: Literal = compile_filter(expr).root.lits[0]   # type: ignore[attr-defined]
    assert lit.number == n


@pytest.mark.parametrize("expr, message", [
    ("api_nme == Fetch", "unknown field 'api_nme' (did you mean api_name"),
    ("response.high_watermark > 1", "did you mean response.responses.partitions.high_watermark"),
    ("response.responses.partitions.high_watermar > 1", "did you mean response.responses.partitions.high_watermark"),
    ("request.nope == 1", "unknown field 'request.nope'"),
    ("api_name == JoinGroups", "unknown API 'JoinGroups' (did you mean JoinGroup"),
    ("error == UNKNOWN_TOPIC", "unknown error name 'UNKNOWN_TOPIC' (did you mean"),
    ("latency_ms > 2kB", "latency_ms: unknown time unit 'kB'"),
    ("request.acks == 1s", "a unit (s) applies only to times"),
    ("partition == x", "partition is a number: 'x' is not one"),
    ("client_id > 5", "client_id is text"),
    ("group matches \"(\"", "not a regular expression"),
    ("api_name == Fetch latency_ms", "syntax error at column 19: unexpected 'latency_ms'"),
    ("api_name ==", "syntax error at column 12: unexpected end of filter, expected a value"),
    ("(api_key == 1", "expected ')'"),
    ("api_key = 1", "syntax error at column 9: unexpected '='"),
    ("", "empty filter"),
    ("kafka.topic_name == x", "unknown field 'kafka.topic_name' (tshark's name: did you mean topic?)"),
    ("tcp.stream == 3", "did you mean conn?"),
    ("max_wait_ms > 1", "unknown field 'max_wait_ms' (did you mean request.max_wait_ms?)"),
    ("group_id == g", "did you mean group or "),
])
def test_errors_name_the_problem(expr: str, message: str) -> None:
    with pytest.raises(FilterError) as e:
        compile_filter(expr)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("expr, message", [
    ("status == lost", "unknown status 'lost' (did you mean unanswered? statuses: ok, unanswered, "
                       "no_response_expected, orphan_response, malformed)"),
    ("status in {ok orphan_respons}", "unknown status 'orphan_respons' (did you mean orphan_response?"),
    ("status != answered", "unknown status 'answered' (did you mean ok?"),
    ("status == bogus", "unknown status 'bogus' (statuses: ok, unanswered,"),
    ("api_name == fetchh", "unknown API 'fetchh' (did you mean Fetch"),
    ("error == not_leader", "unknown error name 'not_leader' (did you mean NOT_LEADER_OR_FOLLOWER"),
    ("error == 3", "code 3 is UNKNOWN_TOPIC_OR_PARTITION, so: error == UNKNOWN_TOPIC_OR_PARTITION"),
    ("kafka.error_code == 3", "unknown field 'kafka.error_code' (tshark's name: did you mean error? it holds "
                              "error names here"),
    ("kafka.error == 3", "did you mean error?"),
    ("kafka.api_key == 1", "did you mean api_key?"),
    ("kafka.request_key == 1", "did you mean api_key?"),
    ("kafka.api_version == 1", "did you mean api_version?"),
    ("kafka.request_version == 1", "did you mean api_version?"),
    ("kafka.request.version == 1", "did you mean api_version?"),
    ("kafka.correlation_id == 1", "did you mean correlation_id?"),
    ("kafka.client_id == x", "did you mean client_id?"),
    ("kafka.partition_id == 1", "did you mean partition?"),
    ("kafka.topic == x", "did you mean topic?"),
])
def test_enumerated_values_and_tshark_names_suggest(expr: str, message: str) -> None:
    with pytest.raises(FilterError) as e:
        compile_filter(expr)
    assert message in str(e.value)
    assert "\n" not in str(e.value) and "fields: " not in str(e.value)


def test_unknown_status_is_a_usage_error() -> None:
    r = _cli("read", GROUP, "-Y", "status == lost")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == ("kafkawire-sniff: error: -Y: unknown status 'lost' (did you mean unanswered? statuses: ok, "
                        "unanswered, no_response_expected, orphan_response, malformed)\n")
    r = _cli("check", GROUP, "-Y", "kafka.error_code == 79")
    assert r.returncode == 2 and "did you mean error?" in r.stderr


def test_enumerated_fields_any_case() -> None:
    _check(GROUP, "api_name == joingroup", lambda o: o["api_name"] == "JoinGroup", 4)
    _check(GROUP, "api_name in {FETCH heartbeat}", lambda o: o["api_name"] in ("Fetch", "Heartbeat"), 4)
    _check(GROUP, "api_name != HEARTBEAT", lambda o: o["api_name"] != "Heartbeat")
    _check(GROUP, "error == member_id_required", lambda o: "MEMBER_ID_REQUIRED" in o["error_codes"], 2)
    _check(GROUP, 'error contains "member"', lambda o: any("MEMBER" in e for e in o["error_codes"]), 2)
    _check(GROUP, "status == OK && api_name == Fetch", lambda o: o["status"] == "ok" and o["api_name"] == "Fetch")
    # the same exchanges as --api
    assert _selected(GROUP, "api_name == fetch") == _selected(GROUP, "api_name == Fetch")


@pytest.mark.parametrize("tshark, ours", [
    ("api_name eq JoinGroup", "api_name == JoinGroup"),
    ("api_name ne Heartbeat", "api_name != Heartbeat"),
    ("api_version gt 4", "api_version > 4"),
    ("api_version ge 5", "api_version >= 5"),
    ("correlation_id lt 3", "correlation_id < 3"),
    ("correlation_id le 3", "correlation_id <= 3"),
    ('client_id ~ "member-0$"', 'client_id matches "member-0$"'),
    ('client_id contains "member" and latency_ms gt 1s', 'client_id contains "member" && latency_ms > 1s'),
    ("not api_name eq Fetch or api_version le 3", "!(api_name == Fetch) || api_version <= 3"),
])
def test_tshark_operators(tshark: str, ours: str) -> None:
    got = _selected(GROUP, tshark)
    assert got == _selected(GROUP, ours)
    assert 0 < len(got) < len(_ndjson(GROUP)), tshark


def test_word_operators_are_whole_words() -> None:
    for expr, where in (("latency_ms lex 5", "→lex 5"), ("client_id containsx a", "→containsx a"),
                        ("api_name eq", "api_name eq→"), ("conn inx {1}", "→inx {1}")):
        with pytest.raises(FilterError) as e:
            compile_filter(expr)
        assert "syntax error" in str(e.value) and str(e.value).endswith(where), (expr, str(e.value))


def test_syntax_error_points_at_the_place() -> None:
    with pytest.raises(FilterError) as e:
        compile_filter("api_name == Fetch && && latency_ms > 1")
    assert str(e.value).endswith("api_name == Fetch && \u2192&& latency_ms > 1")


def test_cli_errors_are_one_line_exit_2() -> None:
    for args in (["read", GROUP, "-Y", "topik == x"], ["stats", GROUP, "-Y", "api_name =="],
                 ["check", GROUP, "-Y", "(a"], ["read", GROUP, "--api", "JoinGroups"]):
        r = _cli(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert r.stdout == "" and len(r.stderr.splitlines()) == 1
        assert r.stderr.startswith("kafkawire-sniff: error: ")
    r = _cli("read", GROUP, "--api", "JoinGroups")
    assert "did you mean JoinGroup" in r.stderr and "valid: " in r.stderr and "Produce" in r.stderr
    r = _cli("read", GROUP, "-Y", "topik == x")
    assert "did you mean topic" in r.stderr


def _tree(*children: Field) -> Field:
    return Field("response", "FetchResponse", None, 0, 0, [Field("header", "ResponseHeader v1", None, 0, 4, [
        Field("correlation_id", "int32", 7, 0, 4)]), Field("body", "FetchResponse v12", None, 4, 0, list(children))])


def _arr(name: str, *elems: Field) -> Field:
    return Field(name, "array", len(elems), 0, 0, list(elems))


def test_path_values_walk_every_element() -> None:
    parts = lambda *hw: _arr("partitions", *[Field(f"[{i}]", "PartitionData", None, 0, 0, [  # noqa: E731
        Field("partition_index", "int32", i), Field("high_watermark", "int64", h)]) for i, h in enumerate(hw)])
    t = _tree(Field("throttle_time_ms", "int32", 5),
              _arr("responses", Field("[0]", "FetchableTopicResponse", None, 0, 0, [Field("topic", "string", "a"),
                                                                                      parts(10, 20)]),
                   Field("[1]", "FetchableTopicResponse", None, 0, 0, [Field("topic", "string", "b"), parts(30)])),
              _arr("ids", Field("[0]", "int32", 4), Field("[1]", "int32", 9)),
              Field("tagged_fields", "tagged_fields", 1, 0, 0, [Field("node_endpoints", "array", 0, 0, 0, [])]))
    assert path_values(t, ["responses", "partitions", "high_watermark"]) == [10, 20, 30]
    assert path_values(t, ["body", "responses", "topic"]) == ["a", "b"]
    assert path_values(t, ["header", "correlation_id"]) == [7]
    assert path_values(t, ["ids"]) == [4, 9]               # an array of plain values: its elements
    assert path_values(t, ["responses"]) == [2]            # an array of structs: its count
    assert path_values(t, ["node_endpoints"]) == [0]       # a tagged field, by its name
    assert path_values(t, ["responses", "nothing"]) == []
    assert path_values(None, ["x"]) == []


# -- operators on the exchange's own fields, on real captures ------------------------------------------

def _lat(o: dict[str, Any]) -> float | None:
    return o["latency_ms"]


def test_equal_and_not_equal() -> None:
    _check(GROUP, "api_name == JoinGroup", lambda o: o["api_name"] == "JoinGroup", 4)
    _check(GROUP, "api_name != Heartbeat", lambda o: o["api_name"] != "Heartbeat")
    _check(GROUP, 'client_id == "kws-member-0"', lambda o: o["client_id"] == "kws-member-0", 5)
    _check(GROUP, "api_key == 14", lambda o: o["api_key"] == 14, 2)
    port = _ndjson(GROUP)[0]["client"]
    _check(GROUP, f'client == "{port}"', lambda o: o["client"] == port, 2)
    _check(GROUP, f"client != {port}", lambda o: o["client"] != port)


def test_order_comparisons() -> None:
    lats = sorted(o["latency_ms"] for o in _ndjson(GROUP) if o["latency_ms"] is not None)
    cut = lats[len(lats) // 2]
    cut = (cut + next(x for x in lats if x > cut)) / 2      # between two latencies: no rounding edge
    _check(GROUP, f"latency_ms > {cut}", lambda o: _lat(o) is not None and _lat(o) > cut)
    _check(GROUP, f"latency_ms < {cut}", lambda o: _lat(o) is not None and _lat(o) < cut)
    _check(GROUP, "latency_ms > 1s", lambda o: _lat(o) is not None and _lat(o) > 1000, 3)
    _check(GROUP, "api_version >= 5", lambda o: (o["api_version"] or -1) >= 5)
    _check(GROUP, "api_version <= 3", lambda o: o["api_version"] is not None and o["api_version"] <= 3)
    _check(FETCH, "response_bytes > 1KiB", lambda o: (o["response_bytes"] or 0) > 1024)
    _check(FETCH, "request_frame < 40", lambda o: o["request_frame"] is not None and o["request_frame"] < 40)


def test_contains_matches_in() -> None:
    _check(GROUP, 'client_id contains "member"', lambda o: "member" in (o["client_id"] or ""), 10)
    _check(GROUP, 'client_id matches "PRODUCER$"', lambda o: (o["client_id"] or "").endswith("producer"), 2)
    _check(GROUP, "api_name in {JoinGroup, SyncGroup LeaveGroup}",
           lambda o: o["api_name"] in ("JoinGroup", "SyncGroup", "LeaveGroup"), 8)
    _check(GROUP, "correlation_id in {1..3 7}", lambda o: o["correlation_id"] in (1, 2, 3, 7), 10)
    _check(GROUP, "conn in {0 2}", lambda o: o["conn"] in (0, 2), 2)


def test_logic_and_precedence() -> None:
    def is_(name: str) -> Callable[[dict[str, Any]], bool]:
        return lambda o: o["api_name"] == name

    _check(GROUP, "api_name == Fetch || api_name == Heartbeat && latency_ms > 1s",
           lambda o: is_("Fetch")(o) or (is_("Heartbeat")(o) and (_lat(o) or 0) > 1000))
    _check(GROUP, "(api_name == Fetch or api_name == Heartbeat) and client_id contains \"0\"",
           lambda o: (is_("Fetch")(o) or is_("Heartbeat")(o)) and "0" in (o["client_id"] or ""))
    _check(GROUP, "!(api_name == Fetch) && not api_name == Metadata",
           lambda o: not is_("Fetch")(o) and not is_("Metadata")(o))


def test_error_and_status() -> None:
    _check(GROUP, "error", lambda o: bool(o["error_codes"]), 2)
    _check(GROUP, "error == MEMBER_ID_REQUIRED", lambda o: "MEMBER_ID_REQUIRED" in o["error_codes"], 2)
    _check(GROUP, "!error", lambda o: not o["error_codes"])
    txn = _ndjson(TXN)
    assert txn


@pytest.mark.shared
def test_status_on_a_capture_started_midstream() -> None:
    cap = str(shared_captures() / "midstream_rdkafka_tansu.pcap")
    _check(cap, "status != ok", lambda o: o["status"] != "ok", 2)
    _check(cap, 'status == "orphan_response"', lambda o: o["status"] == "orphan_response", 1)
    # a field that is not there satisfies no comparison; its negation keeps it
    _check(cap, "!(latency_ms < 1000)", lambda o: o["latency_ms"] is None or o["latency_ms"] >= 1000, 1)


# -- shorthands and paths --------------------------------------------------------------------------

def _topics_by_value(o: dict[str, Any], topic: str) -> bool:
    """The topic's name is a value in the trees, or a topic id resolved to it ('topic NAME' note)."""
    for t in (o["request"], o["response"]):
        for n in _nodes(t):
            if n["value"] == topic or (n["name"] == "topic_id" and f"topic {topic}" in n["notes"]):
                return True
    return False


def test_topic_names_and_ids() -> None:
    want = _check(GROUP, "topic == grp", lambda o: _topics_by_value(o, "grp"), 20)
    names = {k[1] for k in want}
    # Metadata names it, JoinGroup subscribes to it (consumer protocol), Fetch v12+ by topic id
    assert {"Metadata", "JoinGroup", "Fetch", "OffsetCommit", "Produce"} <= names
    fetch_by_id = [o for o in _ndjson(GROUP) if o["api_name"] == "Fetch" and o["api_version"] >= 13]
    assert fetch_by_id, "the sample's Fetch names topics by id"
    _check(GROUP, 'topic matches "^gr" && api_name == Fetch', lambda o: o["api_name"] == "Fetch"
           and _topics_by_value(o, "grp"), len(fetch_by_id))


def test_topic_ids_resolved_in_stats_lite_mode() -> None:
    # stats reads lean trees: the tree tests decode full trees again, for the exchanges that reach them
    got = _selected(GROUP, "api_name == Fetch && topic == grp", decode="lite")
    assert got == _expected(GROUP, lambda o: o["api_name"] == "Fetch" and _topics_by_value(o, "grp"))


def test_partition() -> None:
    _check(FETCH, "partition == 1 && api_name in {Produce Fetch}",
           lambda o: o["api_name"] in ("Produce", "Fetch") and any(p["partition"] == 1 for p in o["partitions"]))


def test_group_member_transactional_producer() -> None:
    _check(GROUP, "group == kws-group", lambda o: "kws-group" in _values_anywhere(o), 15)
    join = next(o for o in _ndjson(GROUP) if o["api_name"] == "JoinGroup" and not o["error_codes"])
    member = _child(_child(join["response"], "body"), "member_id")["value"]   # type: ignore[index]
    assert member
    _check(GROUP, f'member == "{member}"', lambda o: member in _values_anywhere(o), 5)
    txn_ids = {n["value"] for o in _ndjson(TXN) for n in _nodes(o["request"]) if n["name"] == "transactional_id"
               and n["value"]}
    assert len(txn_ids) == 1
    (tid,) = txn_ids
    _check(TXN, f'transactional_id == "{tid}"', lambda o: tid in _values_anywhere(o), 5)
    init = next(o for o in _ndjson(TXN) if o["api_name"] == "InitProducerId"
                and _child(_child(o["request"], "body"), "transactional_id")["value"])   # type: ignore[index]
    pid = _child(_child(init["response"], "body"), "producer_id")["value"]   # type: ignore[index]
    # the producer id is in the InitProducerId answer, EndTxn and the Produce and Fetch record batches
    want = _check(TXN, f"producer_id == {pid}", lambda o: any(
        n["name"] == "producer_id" and n["value"] == pid for t in (o["request"], o["response"]) for n in _nodes(t)), 5)
    assert {"InitProducerId", "Produce", "EndTxn", "Fetch"} <= {k[1] for k in want}


def _high_watermarks(o: dict[str, Any]) -> list[int]:
    out = []
    for topic in (_child(_child(o["response"], "body"), "responses") or {}).get("children", ()):
        for part in (_child(topic, "partitions") or {}).get("children", ()):
            out.append(_child(part, "high_watermark")["value"])   # type: ignore[index]
    return out


def test_tree_paths() -> None:
    hws = sorted({h for o in _ndjson(FETCH) for h in _high_watermarks(o)})
    assert hws == [10]
    _check(FETCH, "response.responses.partitions.high_watermark >= 10",
           lambda o: any(h >= 10 for h in _high_watermarks(o)))
    assert _selected(FETCH, "response.responses.partitions.high_watermark > 10") == []
    _check(FETCH, "request.header.client_id contains consumer",
           lambda o: "consumer" in (o["client_id"] or "") and o["request"] is not None)
    _check(FETCH, "request.body.acks == -1", lambda o: o["api_name"] == "Produce" and _child(
        _child(o["request"], "body"), "acks")["value"] == -1)     # type: ignore[index]
    _check(GROUP, 'request.topic_data.partition_data.records.records.headers.key == "trace-id" || '
                  "request.topic_data.partition_data.records.records_count > 0",
           lambda o: o["api_name"] == "Produce")
    # a field the exchange lacks: no match, never an error
    _check(TXN, "request.transactional_id", lambda o: (_child(_child(o["request"], "body"), "transactional_id")
                                                       or {}).get("value") is not None, 4)


@pytest.mark.shared
def test_tree_path_any_partition_over_a_threshold() -> None:
    cap = str(shared_captures() / "midstream_rdkafka_tansu.pcap")
    hws = sorted(h for o in _ndjson(cap) for h in _high_watermarks(o))
    cut = hws[len(hws) // 2]
    want = _check(cap, f"response.responses.partitions.high_watermark > {cut}",
                  lambda o: any(h > cut for h in _high_watermarks(o)), 10)
    assert len(want) < sum(o["api_name"] == "Fetch" for o in _ndjson(cap))
    _check(cap, f"response.responses.partitions.high_watermark <= {cut} && request.max_wait_ms >= 100ms",
           lambda o: any(h <= cut for h in _high_watermarks(o))
           and _child(_child(o["request"], "body"), "max_wait_ms")["value"] >= 100, 10)   # type: ignore[index]


def test_cheap_filters_decode_no_trees() -> None:
    """stats (lean trees): a filter on the exchange's fields decodes nothing again; a tree test
    behind `&&` decodes only the exchanges that pass the cheap test before it."""
    from analyzer.commands.options import iter_captures
    from dissectors.kafka import CONSUMER_PAYLOAD_APIS, NESTED_PAYLOAD_APIS

    exchanges = _ndjson(GROUP)
    n_fetch = sum(o["api_name"] == "Fetch" for o in exchanges)
    # (SASL tokens come with full trees in lean mode: nothing to decode again; JoinGroup and
    # SyncGroup come with lean ones, their consumer payloads judged by the walk)
    n_full = sum(o["api_key"] in NESTED_PAYLOAD_APIS - CONSUMER_PAYLOAD_APIS for o in exchanges)
    assert any(o["api_key"] in CONSUMER_PAYLOAD_APIS for o in exchanges)
    for expr, decodes in (("api_name == Fetch && latency_ms > 0", 0), ("error || client_id contains x", 0),
                          ("response.responses.partitions.high_watermark >= 0 && api_name == Fetch", n_fetch),
                          ("api_name == Fetch || topic == nope", len(exchanges) - n_fetch - n_full)):
        for _path, run in iter_captures((GROUP,), {}, progress=False, decode="lite"):
            keep = compile_filter(expr).matcher(run.ctx)
            kept = sum(map(keep, run))
            assert keep.source.decodes == decodes, expr
            assert kept > 0


# -- --frame -----------------------------------------------------------------------------------------

def _tshark_packets(capture: str) -> dict[int, tuple[str, int, int]]:
    """Packet number -> (source ip:port, tcp payload length, tcp stream) as tshark sees them."""
    r = subprocess.run(["tshark", "-r", capture, "-T", "fields", "-e", "frame.number", "-e", "ip.src", "-e",
                        "ipv6.src", "-e", "tcp.srcport", "-e", "tcp.len", "-e", "tcp.stream", "-o",
                        "tcp.desegment_tcp_streams:FALSE"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = {}
    for line in r.stdout.splitlines():
        num, ip4, ip6, port, ln, stream = (line.split("\t") + [""] * 6)[:6]
        if port:
            out[int(num)] = (f"{ip4 or '[' + ip6 + ']'}:{port}", int(ln or 0), int(stream))
    return out


def _frame_read(capture: str, *frames: int) -> tuple[list[Key], str]:
    r = _cli("read", capture, *[a for f in frames for a in ("--frame", str(f))], "-f", "ndjson", "--no-summary")
    assert r.returncode == 0, r.stderr
    return sorted((_key(json.loads(x)) for x in r.stdout.splitlines()), key=repr), r.stderr


def _spread_capture(path: Path) -> None:
    """Two connections to one broker: A's ApiVersions answer (3,006 bytes) in three segments,
    with B's whole exchange and an ACK of A's client between them.

    1-3 A handshake, 4-6 B handshake, 7 A request, 8 B request, 9 A answer part 1,
    10 B answer, 11 A's client ACK (no payload), 12 A answer part 2, 13 A answer part 3."""
    import struct

    from tests.pcapgen import TcpFlow, kafka_request, kafka_response, write_pcap

    a = TcpFlow(("10.0.0.1", 40000), ("10.0.0.9", 9092))
    b = TcpFlow(("10.0.0.2", 40001), ("10.0.0.9", 9092))
    body = struct.pack("!hi", 0, 500) + b"".join(struct.pack("!hhh", k % 70, 0, 3) for k in range(500))
    head = a.handshake() + b.handshake() + a.send(0, kafka_request(18, 0, 1, "a")) + b.send(
        0, kafka_request(18, 0, 1, "b"))
    a_ack = a.ack(0)            # made before the answer: it acknowledges what the client had
    a_resp = a.send(1, kafka_response(1, body), mss=1100)
    assert len(a_resp) == 3
    pkts = head + a_resp[:1] + b.send(1, kafka_response(1, struct.pack("!hi", 0, 0))) + a_ack + a_resp[1:]
    for i, p in enumerate(pkts):
        p.ts = 1_700_000_000.0 + i * 0.001
    write_pcap(str(path), pkts)


def test_frame_finds_every_packet_of_a_frame(tmp_path: Path) -> None:
    cap = tmp_path / "spread.pcap"
    _spread_capture(cap)
    objs = {o["client_id"]: o for o in (json.loads(x) for x in _cli("read", str(cap), "-f", "ndjson",
                                                                        "--no-summary").stdout.splitlines())}
    assert (objs["a"]["request_frame"], objs["a"]["response_frame"]) == (7, 13)
    assert (objs["b"]["request_frame"], objs["b"]["response_frame"]) == (8, 10)
    a, b = _key(objs["a"]), _key(objs["b"])
    for n, want in ((7, [a]), (9, [a]), (12, [a]), (13, [a]), (8, [b]), (10, [b])):
        got, err = _frame_read(str(cap), n)
        assert got == want, n
        assert err == ""
    got, _err = _frame_read(str(cap), 8, 9)
    assert got == sorted([a, b], key=repr)
    got, err = _frame_read(str(cap), 11)
    assert got == [] and "packet 11: a TCP packet without payload (no Kafka bytes)" in err
    got, err = _frame_read(str(cap), 99)
    assert got == [] and "packet 99: the capture has fewer packets" in err


def test_frame_every_exchange_by_its_frames() -> None:
    objs = _ndjson(TXN)
    for o in objs[::5]:
        for f in (o["request_frame"], o["response_frame"]):
            if f is not None:
                got, _err = _frame_read(TXN, f)
                assert _key(o) in got
                assert all(f in (k[3], k[4]) or k[3] is None or k[4] is None or k[3] < f < k[4] or k[3] > f
                           for k in got)


def test_api_names_any_case_and_keys() -> None:
    r = _cli("read", GROUP, "--api", "joingroup", "--api", "14", "-f", "ndjson", "--no-summary")
    got = sorted((_key(json.loads(x)) for x in r.stdout.splitlines()), key=repr)
    assert got == _expected(GROUP, lambda o: o["api_name"] in ("JoinGroup", "SyncGroup"))


# -- the commands --------------------------------------------------------------------------------------

def test_stats_and_check_count_what_the_filter_keeps() -> None:
    r = _cli("stats", GROUP, "-Y", "group == kws-group", "-f", "json")
    assert r.returncode == 0, r.stderr
    counts = {g["api"]: g["count"] for g in json.loads(r.stdout)["groups"]}
    want: dict[str, int] = {}
    for o in _ndjson(GROUP):
        if "kws-group" in _values_anywhere(o):
            want[o["api_name"]] = want.get(o["api_name"], 0) + 1
    assert counts == want
    r = _cli("check", GROUP, "-Y", "api_name != JoinGroup", "-f", "json")
    assert r.returncode == 0 and json.loads(r.stdout)["captures"][0]["findings"] == []
    r = _cli("check", GROUP, "-Y", "api_name == JoinGroup", "-f", "json")
    doc = json.loads(r.stdout)["captures"][0]
    # the two MEMBER_ID_REQUIRED answers, one per connection: one story told once
    assert doc["exchanges"] == 4 and len(doc["findings"]) == 1
    assert len(doc["findings"][0]["occurrences"]) == 2


def test_live_counts_what_the_filter_keeps() -> None:
    from analyzer import live
    from analyzer._core import open_capture
    from analyzer.pipeline import Options, Pipeline

    pkts = []
    with open_capture(GROUP) as reader:
        for _i, ts, linktype, data, orig_len in reader:
            pkts.append((ts, data, orig_len))
            lt = linktype
    pipe = Pipeline(Options(ports=(0,)))
    got: list[Any] = []
    res = live.LiveSession(pipe, live.ReplaySource(pkts, lt, per_read=9), got.append, count=3,
                           handle_signals=False, keep=compile_filter("api_name == Heartbeat").matcher(pipe.ctx)).run()
    assert res.reason == "count" and res.exchanges == 3
    assert [e.api_name for e in got] == ["Heartbeat"] * 3


def test_spark_job_keeps_what_the_filter_keeps() -> None:
    from analyzer.spark.inputs import JobConfig
    from analyzer.spark.job import run_local

    res, tables = run_local([FETCH], JobConfig(display_filter="api_name == Fetch && topic == plain",
                                               split_size=900))
    want = sorted((o["api_name"], o["request_frame"], o["response_frame"]) for o in _ndjson(FETCH)
                  if o["api_name"] == "Fetch" and _topics_by_value(o, "plain"))
    assert len(want) == 2 and len(want) < len(_ndjson(FETCH))
    assert sorted((r[6], r[10], r[11]) for r in tables["exchanges"]) == want
    assert res.stats["groups"][0]["api"] == "Fetch" and len(res.stats["groups"]) == 1


def test_spark_refuses_conn() -> None:
    r = _cli("spark", GROUP, "--out", "/nonexistent-dir/x", "-Y", "conn == 1")
    assert r.returncode == 2 and "spark cannot filter on conn" in r.stderr


def _run_show(cmd: str) -> list[Key]:
    argv = shlex.split(cmd)
    assert argv[:2] == ["kafkawire-sniff", "read"] and argv[-2:] == ["-f", "tree"]
    r = _cli(*argv[1:-2], "-f", "ndjson", "--no-summary")
    assert r.returncode == 0, r.stderr
    return [_key(json.loads(x)) for x in r.stdout.splitlines()]


def test_stats_top_commands_show_their_exchanges() -> None:
    r = _cli("stats", GROUP, TXN, "--top", "5", "-f", "json")
    top = json.loads(r.stdout)["top"]
    assert len(top) == 5
    for t in top:
        shown = _run_show(t["show"])
        assert any(k[3] == t["request_frame"] and k[4] == t["response_frame"] and k[2] == t["correlation_id"]
                   for k in shown), t
    text = _cli("stats", GROUP, "--top", "2").stdout.splitlines()
    assert f"#1: {top[0]['show']}" in text or any(x.startswith("#1: kafkawire-sniff read ") for x in text)


def test_check_findings_show_their_exchanges() -> None:
    for cap in (GROUP, ADMIN):
        doc = json.loads(_cli("check", cap, "-f", "json").stdout)
        for f in doc["captures"][0]["findings"]:
            shown = _run_show(f["show"])
            for e in f["exchanges"]:
                assert any(k[3] == e["request_frame"] and k[4] == e["response_frame"] for k in shown), f
    text = _cli("check", GROUP).stdout
    # (one story on two connections: both of its exchanges)
    assert f"show: kafkawire-sniff read {GROUP} --frame 73 --frame 81 -f tree" in text


@pytest.mark.shared
def test_check_findings_with_many_frames_use_a_filter() -> None:
    cap = str(shared_captures() / "old_v0_rdkafka_082_tansu.pcap")
    doc = json.loads(_cli("check", cap, "-f", "json").stdout)
    def told(f: dict[str, Any]) -> list[dict[str, Any]]:      # a story told once: each occurrence
        return f.get("occurrences") or [f]

    many = [f for f in doc["captures"][0]["findings"] if sum(len(o["frames"]) for o in told(f)) > 4]
    assert many
    for f in many:
        assert " -Y 'request_frame in {" in f["show"]
        shown = {(k[3], k[4]) for k in _run_show(f["show"])}
        assert shown == {(e["request_frame"], e["response_frame"]) for o in told(f) for e in o["exchanges"]}
