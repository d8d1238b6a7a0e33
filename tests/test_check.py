"""The check rules on crafted exchanges (tests/checkgen.py) and, when present, on real captures."""
from __future__ import annotations

import pickle

import pytest

from analyzer.sinks.check import RULES, Checker, Finding, check_exchanges
from dissectors.field import Field
from dissectors.schema import APIS, ApiDef
from tests.checkgen import Wire, batch, completion_order, produce_body, produce_response, records


def run(exchanges: list, **kw) -> list[Finding]:
    return check_exchanges(completion_order(exchanges), **kw)


def only(findings: list[Finding], rule: str) -> list[Finding]:
    return [f for f in findings if f.rule == rule]


def one(findings: list[Finding], rule: str) -> Finding:
    got = only(findings, rule)
    assert len(got) == 1, (rule, findings)
    return got[0]


# -- pairing ---------------------------------------------------------------------------

def test_unanswered_at_capture_end_info_and_warning():
    w = Wire()
    md = w.ex(3, 12, {"topics": None}, {"throttle_time_ms": 0})
    recent = w.ex(3, 12, {"topics": None}, answered=False)
    fs = run([md, recent])
    f = one(fs, "unanswered-request")
    assert f.severity == "info"
    assert f.frames == [recent.request_frame]
    assert f.exchanges[0]["correlation_id"] == 1
    w.idle(5.0)   # the capture goes on 5 s without an answer
    fs = run([md, recent])
    f = one(fs, "unanswered-request")
    assert f.severity == "warning"
    assert 4900 < f.details["max_wait_ms"] < 5100


def test_unanswered_fetch_within_max_wait_is_only_info():
    w = Wire()
    fe = w.ex(1, 11, {"max_wait_ms": 10_000, "session_id": 0, "session_epoch": -1}, answered=False)
    w.idle(5.0)
    f = one(run([fe]), "unanswered-request")
    assert f.severity == "info"


def test_unanswered_skipped_by_broker_is_error():
    w = Wire()
    lost = w.ex(3, 12, {"topics": None}, answered=False)
    later = w.ex(3, 12, {"topics": None}, {"throttle_time_ms": 0})
    f = one(run([lost, later]), "unanswered-request")
    assert f.severity == "error"
    assert f.frames == [lost.request_frame]


@pytest.mark.parametrize("how,by,severity", [("fin", None, "info"), ("rst", None, "warning"),
                                             ("fin", "broker", "error"), ("rst", "client", "info")])
def test_closed_in_flight(how, by, severity):
    w = Wire()
    ok = w.ex(18, 3, {}, {"error_code": 0, "api_keys": []})
    pending = w.ex(1, 12, {"max_wait_ms": 500}, answered=False)
    w.close(how, by)
    fs = run([ok, pending])
    f = one(fs, "closed-in-flight")
    assert f.severity == severity
    assert f.frames == [pending.request_frame]
    assert (f.details["closed"], f.details["closed_by"]) == (how, by)
    assert (by or "connection") in f.message
    assert not only(fs, "unanswered-request")


def test_orphan_response_midstream_info_else_error():
    w = Wire(syn_seen=False)
    o = w.orphan(1, 12, corr=77)
    f = one(run([o]), "orphan-response")
    assert (f.severity, f.frames) == ("info", [o.response_frame])
    w2 = Wire(syn_seen=True)
    o2 = w2.orphan(1, 12, corr=77)
    assert one(run([o2]), "orphan-response").severity == "error"


@pytest.mark.parametrize("missed", [False, True])
def test_orphan_response_to_a_request_the_capture_missed_is_info(tmp_path, missed):
    """A response to a request whose packet the capture missed (bytes of the client's side
    were not captured, found when the next request comes, after the orphan): not the broker's
    fault, info. A response to a correlation id the client never sent, on a capture that
    lost nothing: an error."""
    import struct

    from analyzer.pipeline import Run
    from tests.pcapgen import TcpFlow, kafka_request, kafka_response, write_pcap

    flow = TcpFlow(("10.0.0.1", 40000), ("10.0.0.2", 9092), ts=1000.0)
    pkts = flow.handshake()
    for corr in range(3):
        pkts += flow.send(0, kafka_request(3, 1, corr, "c", struct.pack(">i", -1)))
        if corr == 1 and missed:
            pkts.pop()                                  # the capture missed this request
        pkts += flow.send(1, kafka_response(corr if missed or corr != 1 else 9, struct.pack(">iii", 0, 0, 0)))
    pkts += flow.fin(0) + flow.fin(1)
    path = str(tmp_path / "o.pcap")
    write_pcap(path, pkts)
    exs = list(Run(path))
    assert [(e.status, e.correlation_id) for e in exs if e.status != "ok"] == \
        ([("orphan_response", 1)] if missed else [("orphan_response", 9), ("unanswered", 1)])
    f = one(check_exchanges(exs), "orphan-response")
    if missed:
        assert (f.severity, f.message) == ("info", "1 response(s) to requests the capture missed "
                                                   "(bytes of the client's side were not captured)")
    else:
        assert (f.severity, f.message) == ("error", "1 response(s) matching no request on a connection "
                                                    "seen from its start")


@pytest.mark.parametrize("closed", [False, True])
@pytest.mark.parametrize("missed", [False, True])
def test_unanswered_request_whose_response_the_capture_missed_is_info(tmp_path, missed, closed):
    """A request answered in bytes the capture missed (the broker's side lost a segment):
    its response is not there, but the broker did not skip it: info. A request the broker
    really skipped (later ones answered, nothing lost): an error, also when the connection
    is closed afterwards (it was not in flight then)."""
    import struct

    from analyzer.pipeline import Run
    from tests.pcapgen import TcpFlow, kafka_request, kafka_response, write_pcap

    flow = TcpFlow(("10.0.0.1", 40000), ("10.0.0.2", 9092), ts=1000.0)
    pkts = flow.handshake()
    for corr in range(3):
        pkts += flow.send(0, kafka_request(3, 1, corr, "c", struct.pack(">i", -1)))
        if corr == 1:
            resp = flow.send(1, kafka_response(corr, struct.pack(">iii", 0, 0, 0)))
            if not missed:
                flow.seq[1] -= len(resp[0].payload)     # never sent: the broker skipped it
            continue
        pkts += flow.send(1, kafka_response(corr, struct.pack(">iii", 0, 0, 0)))
    if closed:
        pkts += flow.fin(0) + flow.fin(1)
    path = str(tmp_path / "u.pcap")
    write_pcap(path, pkts)
    exs = list(Run(path))
    assert [(e.status, e.correlation_id) for e in exs if e.status != "ok"] == [("unanswered", 1)]
    fs = check_exchanges(exs)
    assert not only(fs, "closed-in-flight")
    f = one(fs, "unanswered-request")
    assert f.severity == ("info" if missed else "error")
    assert ("bytes of the broker's side were not captured" in f.message) == missed


def test_response_order():
    w = Wire()
    a_sent = w.request(3, 12, {"topics": None})
    b_sent = w.request(3, 12, {"topics": None})
    b = w.answer(b_sent, {"throttle_time_ms": 0})
    a = w.answer(a_sent, {"throttle_time_ms": 0})
    fs = check_exchanges([b, a])    # the completion order: b's response came first
    f = one(fs, "response-order")
    assert f.severity == "error"
    assert f.frames == [a.request_frame, a.response_frame]
    assert not only(run([w.ex(3, 12, {}, {})]), "response-order")


def test_correlation_reuse_while_in_flight():
    w = Wire()
    first = w.request(3, 12, {"topics": None}, corr=5)
    second = w.request(3, 12, {"topics": None}, corr=5)
    e1 = w.answer(first, {"throttle_time_ms": 0})
    e2 = w.answer(second, {"throttle_time_ms": 0})
    f = one(check_exchanges([e1, e2]), "correlation-reuse")
    assert f.severity == "error"
    assert e1.request_frame in f.frames and e2.request_frame in f.frames
    # reused only after the first was answered: fine
    w2 = Wire()
    x = w2.ex(3, 12, {}, {}, corr=5)
    y = w2.ex(3, 12, {}, {}, corr=5)
    assert not only(check_exchanges([x, y]), "correlation-reuse")


def test_correlation_reuse_with_first_unanswered():
    w = Wire()
    first = w.request(3, 12, {}, corr=9)
    e2 = w.ex(3, 12, {}, {}, corr=9)
    e1 = w.unanswered(first)
    f = one(check_exchanges([e2, e1]), "correlation-reuse")
    assert f.frames == sorted([e1.request_frame, e2.request_frame, e2.response_frame])


# -- response contents ---------------------------------------------------------------------

def test_error_responses_by_name_count_and_severity():
    w = Wire()
    a = w.ex(19, 4, {"topics": [{"name": "t"}]}, {"topics": [{"name": "t", "error_code": 36}]},
             error_codes=["TOPIC_ALREADY_EXISTS"])
    b = w.ex(20, 4, {"topic_names": ["x", "y"]}, {"responses": [{"error_code": 3}, {"error_code": 3}]},
             error_codes=["UNKNOWN_TOPIC_OR_PARTITION", "UNKNOWN_TOPIC_OR_PARTITION"])
    c = w.ex(11, 5, {"group_id": "g", "member_id": ""}, {"error_code": 79, "generation_id": -1},
             error_codes=["MEMBER_ID_REQUIRED"])
    fs = only(run([a, b, c]), "error-response")
    by = {f.details["error"]: f for f in fs}
    assert by["TOPIC_ALREADY_EXISTS"].severity == "error"
    assert by["TOPIC_ALREADY_EXISTS"].frames == [a.response_frame]
    assert by["UNKNOWN_TOPIC_OR_PARTITION"].severity == "warning"
    assert by["UNKNOWN_TOPIC_OR_PARTITION"].details["count"] == 2
    assert "2 UNKNOWN_TOPIC_OR_PARTITION" in by["UNKNOWN_TOPIC_OR_PARTITION"].message
    assert by["MEMBER_ID_REQUIRED"].severity == "info"


def test_throttled():
    w = Wire()
    a = w.ex(0, 9, produce_body("t", 0, records()), dict(produce_response("t", 0), throttle_time_ms=250))
    b = w.ex(3, 12, {}, {"throttle_time_ms": 900})
    c = w.ex(3, 12, {}, {"throttle_time_ms": 1200})
    fs = only(run([a, b, c]), "throttled")
    by = {f.details["api_name"]: f for f in fs}
    assert by["Produce"].frames == [a.response_frame]
    assert by["Metadata"].details["count"] == 2
    assert by["Metadata"].details["max_throttle_ms"] == 1200
    assert all(f.severity == "warning" for f in fs)


def test_slow_exchange_is_protocol_aware():
    w = Wire()
    md = w.ex(3, 12, {}, {"throttle_time_ms": 0}, latency_ms=1500)
    fetch_ok = w.ex(1, 11, {"max_wait_ms": 500}, {"error_code": 0, "session_id": 0}, latency_ms=1400)
    fetch_slow = w.ex(1, 11, {"max_wait_ms": 500}, {"error_code": 0, "session_id": 0}, latency_ms=1600)
    join = w.ex(11, 5, {"group_id": "g", "rebalance_timeout_ms": 30000, "session_timeout_ms": 10000},
                {"error_code": 0, "generation_id": 1}, latency_ms=9000)
    sync = w.ex(14, 3, {"group_id": "g", "generation_id": 1}, {"error_code": 0}, latency_ms=4000)
    fs = only(run([md, fetch_ok, fetch_slow, join, sync]), "slow-exchange")
    by = {f.details["api_name"]: f for f in fs}
    assert set(by) == {"Metadata", "Fetch"}
    assert by["Fetch"].frames == [fetch_slow.request_frame, fetch_slow.response_frame]
    assert by["Metadata"].details["max_latency_ms"] == pytest.approx(1500, abs=1)
    # a lower threshold
    fs = only(run([md], slow_ms=100), "slow-exchange")
    assert fs and fs[0].details["limit_ms"] == 100


# -- versions ------------------------------------------------------------------------------

def advertise(w: Wire, ranges: dict[int, tuple[int, int]]):
    return w.ex(18, 3, {"client_software_name": "x"},
                {"error_code": 0, "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi}
                                               for k, (lo, hi) in ranges.items()], "throttle_time_ms": 0})


def test_version_outside_advertised_range():
    w = Wire()
    av = advertise(w, {3: (0, 9), 18: (0, 3)})
    ok = w.ex(3, 9, {}, {})
    bad = w.ex(3, 12, {}, {})
    unknown = w.ex(19, 4, {}, {})
    fs = only(run([av, ok, bad, unknown]), "version-unadvertised")
    assert len(fs) == 2
    by = {f.exchanges[0]["api_name"]: f for f in fs}
    assert by["Metadata"].severity == "error"
    assert by["Metadata"].frames == [av.response_frame, bad.request_frame]
    assert "v0-v9" in by["Metadata"].message
    assert "did not advertise CreateTopics" in by["CreateTopics"].message
    assert by["CreateTopics"].details["advertised"] == "not advertised"
    assert "from client checkgen" in by["Metadata"].message and by["Metadata"].details["client_ids"] == ["checkgen"]
    assert "upgrade the client" in by["Metadata"].advice


def test_request_cut_short_is_not_judged_slow_on_fields_it_lost():
    w = Wire()
    # the capture kept the Fetch request's header only: its max_wait_ms is lost
    cut = w.ex(1, 11, {}, {"error_code": 0, "session_id": 0}, latency_ms=1600, req_truncated=True)
    # cut too, but after max_wait_ms (500 ms): judged on what it kept
    cut_late = w.ex(1, 11, {"max_wait_ms": 500}, {"error_code": 0, "session_id": 0}, latency_ms=1600,
                    req_truncated=True)
    join_cut = w.ex(11, 5, {"group_id": "g"}, {"error_code": 0, "generation_id": 1}, latency_ms=9000,
                    req_truncated=True)
    pending = w.ex(1, 11, {}, answered=False, req_truncated=True)
    w.idle(5.0)
    fs = run([cut, cut_late, join_cut, pending])
    slow = one(fs, "slow-exchange")
    assert slow.frames == [cut_late.request_frame, cut_late.response_frame] and slow.details["count"] == 1
    assert one(fs, "unanswered-request").severity == "info"     # not "late": its wait was lost
    # whole, the same Fetch is slow
    w2 = Wire()
    whole = w2.ex(1, 11, {"max_wait_ms": 0}, {"error_code": 0, "session_id": 0}, latency_ms=1600)
    assert one(run([whole]), "slow-exchange").details["count"] == 1


def test_unsupported_version_names_client_version_and_broker_range():
    w = Wire()
    av = advertise(w, {0: (3, 9), 18: (0, 3)})
    refused = [w.ex(0, v, produce_body("t", 0, records()), produce_response("t", 0, 35),
                    error_codes=["UNSUPPORTED_VERSION"]) for v in (2, 1)]
    w2 = Wire(conn_id=1, frame=100)      # no ApiVersions answer on this one
    blind = w2.ex(0, 0, produce_body("t", 0, records()), produce_response("t", 0, 35),
                  error_codes=["UNSUPPORTED_VERSION"])
    fs = only(run([av, *refused, blind]), "error-response")
    by = {f.conn: f for f in fs}
    f = by[str(w.conn)]
    assert f.message == ("2 UNSUPPORTED_VERSION error(s) in Produce responses: client checkgen sent Produce v1, v2; "
                         "the broker advertised v3-v9 on the connection")
    assert f.advice == "upgrade the client, or pin it to API versions the broker supports"
    assert (f.details["advertised"], f.details["api_versions"], f.details["client_ids"]) == ("v3-v9", [1, 2],
                                                                                            ["checkgen"])
    b = by[str(w2.conn)]
    assert b.message == ("1 UNSUPPORTED_VERSION error(s) in Produce responses: client checkgen sent Produce v0; the "
                         "broker's versions are not known (no ApiVersions answer on the connection)")
    assert b.details["advertised"] is None
    # other errors keep their message and gain the client and versions as details, and advice where clear
    w3 = Wire(conn_id=2, frame=200)
    fs = run([w3.ex(19, 4, {}, {}, error_codes=["TOPIC_ALREADY_EXISTS"]),
              w3.ex(3, 12, {}, {}, error_codes=["UNKNOWN_SERVER_ERROR"])])
    e = {f.details["error"]: f for f in only(fs, "error-response")}
    assert e["TOPIC_ALREADY_EXISTS"].message == "1 TOPIC_ALREADY_EXISTS error(s) in CreateTopics responses"
    assert e["TOPIC_ALREADY_EXISTS"].details["client_ids"] == ["checkgen"]
    assert e["TOPIC_ALREADY_EXISTS"].advice.startswith("nothing, if the client only makes sure the topic exists")
    assert e["UNKNOWN_SERVER_ERROR"].advice is None


def test_same_story_on_many_connections_is_told_once():
    exs = []
    for i in range(3):
        w = Wire(conn_id=i, t0=1_700_000_000.0 + i)
        exs.append(w.ex(11, 5, {"group_id": "g"}, {"error_code": 79, "generation_id": -1},
                        error_codes=["MEMBER_ID_REQUIRED"]))
        if i == 2:      # a second one on the last connection
            exs.append(w.ex(11, 5, {"group_id": "g"}, {"error_code": 79, "generation_id": -1},
                            error_codes=["MEMBER_ID_REQUIRED"]))
    w = Wire(conn_id=5)
    exs.append(w.ex(3, 12, {}, {"error_code": 0}, error_codes=["UNKNOWN_TOPIC_OR_PARTITION"]))
    fs = run(exs)
    told = [f for f in fs if f.rule == "error-response"]
    assert len(told) == 2
    t = [f for f in told if f.details["error"] == "MEMBER_ID_REQUIRED"][0]
    assert t.message == "4 MEMBER_ID_REQUIRED error(s) in JoinGroup responses (on 3 connections)"
    assert (t.severity, t.details["count"], t.details["occurrences"]) == ("info", 4, 3)
    assert t.details["connections"] == [str(e.conn) for e in exs[:3]]
    assert t.conn == "3 connections: " + ", ".join(t.details["connections"])
    assert t.frames == [exs[0].response_frame, exs[1].response_frame, exs[2].response_frame]
    assert [o.details["count"] for o in t.occurrences] == [1, 1, 2]
    j = t.to_json()
    assert len(j["occurrences"]) == 3 and "story" not in j and "template" not in j
    other = [f for f in told if f.details["error"] == "UNKNOWN_TOPIC_OR_PARTITION"][0]
    assert not other.occurrences and "connections" not in other.details and "occurrences" not in other.to_json()
    # one finding per connection when asked
    c = Checker().add_all(completion_order(exs))
    assert len(only(c.finish(fold=False), "error-response")) == 4


def test_sasl_refused_but_listed_is_a_broker_bug():
    w = Wire()
    hs = w.ex(17, 1, {"mechanism": "PLAIN"}, {"error_code": 33, "mechanisms": ["PLAIN", "SCRAM-SHA-256"]},
              error_codes=["UNSUPPORTED_SASL_MECHANISM"])
    m = one(run([hs]), "sasl-mechanism")
    assert m.message == ("1 SaslHandshake(s): the broker refused PLAIN (UNSUPPORTED_SASL_MECHANISM) but lists "
                         "PLAIN as enabled (a broker bug)")
    assert m.severity == "error" and m.frames == [hs.request_frame, hs.response_frame]


def test_request_sent_before_apiversions_answer_not_judged():
    w = Wire()
    av_sent = w.request(18, 3, {})
    early = w.request(3, 12, {})
    av = w.answer(av_sent, {"error_code": 0, "api_keys": [{"api_key": 3, "min_version": 0, "max_version": 9}]})
    e = w.answer(early, {})
    assert not only(check_exchanges([av, e]), "version-unadvertised")


def test_apiversions_fallback_retried_is_info():
    w = Wire()
    v3 = w.ex(18, 3, {"client_software_name": "x"},
              {"error_code": 35, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 2}]},
              error_codes=["UNSUPPORTED_VERSION"])
    v0 = advertise(w, {18: (0, 2), 3: (0, 12)})
    fs = run([v3, v0])
    f = one(fs, "apiversions-fallback")
    assert f.severity == "info"
    assert f.frames == [v3.request_frame, v3.response_frame, v0.request_frame, v0.response_frame]
    assert f.details["retry_version"] == 3 and f.details["broker_supports"] == (0, 2)
    assert not only(fs, "error-response")      # reported once, by the fallback rule


def test_apiversions_fallback_without_retry_is_warning():
    w = Wire()
    v3 = w.ex(18, 4, {}, {"error_code": 35, "api_keys": []}, error_codes=["UNSUPPORTED_VERSION"])
    w.close("fin")
    f = one(run([v3]), "apiversions-fallback")
    assert (f.severity, f.frames) == ("warning", [v3.request_frame, v3.response_frame])


@pytest.fixture
def kafka4_schema(monkeypatch):
    """Kafka 4.0's ranges for the two APIs the tests use, when the schema table is not there yet."""
    if 0 not in APIS:
        monkeypatch.setitem(APIS, 0, ApiDef(0, "Produce", 0, 12, 9, (), (), (3, 12)))
    if 7 not in APIS:
        monkeypatch.setitem(APIS, 7, ApiDef(7, "ControlledShutdown", 0, 3, 3, (), (), None))
    return APIS


def test_kafka4_removed_versions(kafka4_schema):
    w = Wire()
    old = w.ex(0, 0, produce_body("t", 0, records()), produce_response("t", 0))
    old2 = w.ex(0, 0, produce_body("t", 0, records()), produce_response("t", 0))
    new = w.ex(0, 9, produce_body("t", 0, records()), produce_response("t", 0))
    gone = w.ex(7, 1, {"broker_id": 1}, {"error_code": 0})
    fs = only(run([old, old2, new, gone]), "kafka4-removed")
    by = {f.details["api_name"]: f for f in fs}
    assert by["Produce"].severity == "warning"
    assert by["Produce"].frames == [old.request_frame, old2.request_frame]
    lo, hi = APIS[0].kafka4_versions
    assert f"serves v{lo}-v{hi}" in by["Produce"].message and lo == 3
    assert "removed the API" in by["ControlledShutdown"].message


def test_kafka4_removed_one_finding_per_api_listing_its_versions():
    """Fetch v0, v1, v2 and v3 on two connections: one finding for Fetch, its versions listed,
    what to do said; another API beside it has its own."""
    w1, w2 = Wire(conn_id=0), Wire(conn_id=1, t0=1_700_000_000.5, frame=100)
    exs = [w1.ex(1, v, {"max_wait_ms": 100}, {"responses": []}) for v in (3, 0, 1)]
    exs.append(w1.ex(2, 0, {"replica_id": -1}, {"topics": []}))          # ListOffsets v0
    exs += [w2.ex(1, v, {"max_wait_ms": 100}, {"responses": []}) for v in (2, 2, 5)]
    told = only(run(exs), "kafka4-removed")
    assert len(told) == 2, told
    fetch = next(f for f in told if f.details["api_name"] == "Fetch")
    assert fetch.message == ("5 Fetch v0, v1, v2, v3 request(s) from client checkgen: Kafka 4.0 serves "
                             f"v{APIS[1].kafka4_versions[0]}-v{APIS[1].kafka4_versions[1]} (KIP-896) (on 2 connections)")
    assert fetch.details["api_versions"] == [0, 1, 2, 3] and fetch.details["count"] == 5
    assert fetch.advice == ("upgrade the client to one that sends Fetch v4 or later before the brokers move to "
                            "Kafka 4.0")
    assert [sorted(o.details["api_versions"]) for o in fetch.occurrences] == [[0, 1, 3], [2]]
    assert fetch.to_json()["advice"] == fetch.advice
    lo = next(f for f in told if f.details["api_name"] == "ListOffsets")
    assert lo.message.startswith("1 ListOffsets v0 request(s) from client checkgen: Kafka 4.0 serves v1-")
    # one finding per connection and API when not told once; the same when checkers merge
    per_conn = only(Checker().add_all(completion_order(exs)).finish(fold=False), "kafka4-removed")
    assert sorted((f.details["api_name"], tuple(f.details["api_versions"])) for f in per_conn) == [
        ("Fetch", (0, 1, 3)), ("Fetch", (2,)), ("ListOffsets", (0,))]
    half = len(exs) // 2
    merged = Checker().add_all(completion_order(exs[:half])).merge(Checker().add_all(completion_order(exs[half:])))
    assert [f.to_json() for f in only(merged.finish(), "kafka4-removed")] == [f.to_json() for f in told]


# -- producers ------------------------------------------------------------------------------

def produce(w: Wire, pid: int, seq: int, n: int, *, error: int = 0, epoch: int = 0, answered: bool = True,
            partition: int = 0, codes: list[str] | None = None):
    body = produce_body("orders", partition, records([batch(pid, seq, n, epoch)]))
    if not answered:
        return w.ex(0, 9, body, answered=False)
    return w.ex(0, 9, body, produce_response("orders", partition, error), error_codes=codes)


def test_sequence_in_order_no_finding():
    w = Wire()
    exs = [produce(w, 7, s, 5) for s in (0, 5, 10, 15)]
    exs.append(produce(w, 7, 0, 3, epoch=1))   # new epoch restarts at 0
    exs.append(produce(w, 8, 100, 5))          # first sight mid-stream
    fs = run(exs)
    assert not only(fs, "producer-sequence") and not only(fs, "sequence-error-response")


def test_sequence_gap():
    w = Wire()
    a, b, c = produce(w, 7, 0, 5), produce(w, 7, 5, 5), produce(w, 7, 20, 5)
    f = one(run([a, b, c]), "producer-sequence")
    assert (f.severity, f.details["kind"], f.frames) == ("error", "gap", [c.request_frame])
    assert (f.details["expected"], f.details["got"]) == (10, 20)
    assert f.details["topic"] == "orders" and f.details["producer_id"] == 7


def test_sequence_findings_name_topic_and_partition():
    """A topic named "seq": "seq-0" read as a sequence number; the topic and partition are named."""
    w = Wire()
    exs = [w.ex(0, 9, produce_body("seq", 0, records([batch(4000, s, 5)])), produce_response("seq", 0))
           for s in (0, 5, 20)]
    bad = w.ex(0, 9, produce_body("seq", 0, records([batch(4000, 40, 5)])), produce_response("seq", 0, 45),
               error_codes=["OUT_OF_ORDER_SEQUENCE_NUMBER"])
    fs = run(exs + [bad])
    gap = one(fs, "producer-sequence")
    assert gap.message == ("producer id 4000 epoch 0, topic seq partition 0: base_sequence jumped from 10 to 20 "
                           "(10 records never sent)")
    ser = one(fs, "sequence-error-response")
    assert ser.message.startswith("OUT_OF_ORDER_SEQUENCE_NUMBER for producer id 4000 epoch 0, topic seq partition 0: ")
    assert "seq-0" not in gap.message + ser.message


def test_sequence_reorder():
    w = Wire()
    a, c, b = produce(w, 7, 0, 5), produce(w, 7, 10, 5), produce(w, 7, 5, 5)
    f = one(run([a, c, b]), "producer-sequence")
    assert (f.severity, f.details["kind"]) == ("error", "reorder")
    assert f.frames == [c.request_frame, b.request_frame]


def test_sequence_duplicate_after_ack_vs_retry_after_failure():
    w = Wire()
    a = produce(w, 7, 0, 5)
    dup = produce(w, 7, 0, 5)
    f = one(run([a, dup]), "producer-sequence")
    assert (f.severity, f.details["kind"], f.frames) == ("warning", "duplicate", [a.request_frame, dup.request_frame])
    w2 = Wire()
    lost = produce(w2, 7, 0, 5, answered=False)
    retry = produce(w2, 7, 0, 5)
    failed = produce(w2, 7, 5, 5, error=6, codes=["NOT_LEADER_OR_FOLLOWER"])
    retry2 = produce(w2, 7, 5, 5)
    assert not only(run([lost, retry, failed, retry2]), "producer-sequence")


def test_sequence_wraps_around_int32():
    w = Wire()
    top = 2**31 - 5
    assert not only(run([produce(w, 7, top - 5, 5), produce(w, 7, top, 5), produce(w, 7, 0, 5)]),
                    "producer-sequence")


def test_sequence_spans_connections_via_merge():
    w1, w2 = Wire(conn_id=0), Wire(conn_id=1, t0=1_700_000_000.5, frame=100)
    c1 = Checker().add_all([produce(w1, 9, 0, 5), produce(w1, 9, 5, 5)])
    late = produce(w2, 9, 30, 5)
    c2 = Checker().add_all([late])
    assert not only(c1.finish(), "producer-sequence")
    merged = pickle.loads(pickle.dumps(c1)).merge(pickle.loads(pickle.dumps(c2)))
    f = one(merged.finish(), "producer-sequence")
    assert f.details["kind"] == "gap" and f.frames == [late.request_frame] == [100]
    assert merged.exchanges == 3


def test_out_of_order_sequence_response_tied_to_batch():
    w = Wire()
    a = produce(w, 7, 0, 5)
    bad = produce(w, 7, 12, 5, error=45, codes=["OUT_OF_ORDER_SEQUENCE_NUMBER"])
    dup1 = produce(w, 7, 5, 5)
    dup2 = produce(w, 7, 5, 5, error=46, codes=["DUPLICATE_SEQUENCE_NUMBER"])
    fs = run([a, bad, dup1, dup2])
    ser = {f.details["error"]: f for f in only(fs, "sequence-error-response")}
    f = ser["OUT_OF_ORDER_SEQUENCE_NUMBER"]
    assert f.severity == "error"
    assert f.frames == [bad.request_frame, bad.response_frame]
    assert (f.details["base_sequence"], f.details["expected_sequence"]) == (12, 5)
    d = ser["DUPLICATE_SEQUENCE_NUMBER"]
    assert d.severity == "warning"
    assert d.frames == [dup1.request_frame, dup2.request_frame, dup2.response_frame]
    assert not only(fs, "error-response")


# -- frames -------------------------------------------------------------------------------------

def test_crc_mismatch_from_partitions_and_notes():
    w = Wire()
    p = w.ex(0, 9, produce_body("t", 0, records([batch(-1, -1, 3)])), produce_response("t", 0),
             partitions=[{"topic": "t", "partition": 0, "crc_ok": False}])
    rec = records([{"base_offset": 0, "record_count": 3}], notes=["crc INVALID (expected 0x1234abcd)"])
    fe = w.ex(1, 11, {"max_wait_ms": 100}, {"error_code": 0, "session_id": 0, "responses": [
        {"topic": "t", "partitions": [{"partition_index": 0, "error_code": 0, "records": rec}]}]})
    clean = w.ex(0, 9, produce_body("t", 0, records([batch(-1, -1, 3)])), produce_response("t", 0),
                 partitions=[{"topic": "t", "partition": 0, "crc_ok": True}])
    fs = {f.details["api_name"]: f for f in only(run([p, fe, clean]), "crc-mismatch")}
    assert fs["Produce"].frames == [p.request_frame]
    assert fs["Fetch"].frames == [fe.response_frame]
    assert fs["Fetch"].severity == "error"


def test_crc_mismatch_in_control_batches_with_crc_zero():
    """Lean notes ("[i]: crc INVALID (0x00000000)...") on control batches alone: said so, with
    what to do; a data batch failing too is a plain CRC mismatch."""
    ctl = {"base_offset": 10, "record_count": 1, "is_control": True}
    data = {"base_offset": 0, "record_count": 10, "is_control": False}

    def fetch_with(notes):
        rec = records([data, ctl], notes=notes)
        rec.extra["records"] = 11
        return w.ex(1, 11, {"max_wait_ms": 100}, {"error_code": 0, "session_id": 0, "responses": [
            {"topic": "t", "partitions": [{"partition_index": 0, "error_code": 0, "records": rec}]}]})

    w = Wire()
    markers = [fetch_with(["[1]: crc INVALID (0x00000000), computed 0x0e0bcadc"]) for _ in range(2)]
    both = fetch_with(["[0]: crc INVALID (0x1234abcd), computed 0x0e0bcadc",
                       "[1]: crc INVALID (0x00000000), computed 0x0e0bcadc"])
    fs = only(run(markers + [both]), "crc-mismatch")
    by = {f.details["kind"]: f for f in fs}
    m = by["control-crc-zero"]
    assert m.severity == "error" and m.frames == [x.response_frame for x in markers]
    assert m.message == ("2 Fetch frame(s) with a record CRC mismatch, all in control batches (transaction markers) "
                         "whose CRC field is 0; the data batches' CRCs are valid")
    assert (m.details["crc_batches"], m.details["control_crc_zero"]) == (2, 2)
    assert "broker bug" in m.advice and "check.crcs" in m.advice
    d = by["data"]
    assert d.message == "1 Fetch frame(s) with a record CRC mismatch" and d.advice is None
    assert (d.details["crc_batches"], d.details["control_crc_zero"]) == (2, 1)


def _txn_fetch_capture(tmp_path, zero_data: bool = False):
    """samples/txn_rdkafka.pcap's Fetch answer with control batches, their CRC field set to 0 (as a
    broker that writes no CRC on transaction markers sends them), on a connection of its own; with
    ``zero_data`` a data batch's CRC too."""
    import struct

    from analyzer.pipeline import Options, Run
    from tests.conftest import SAMPLES
    from tests.pcapgen import TcpFlow, kafka_frame, write_pcap

    for ex in Run(str(SAMPLES / "txn_rdkafka.pcap"), Options()):
        batches = [f for f in ex.response_tree.walk() if f.type == "RecordBatch"] if ex.api_key == 1 else []
        if any(b.get_in("attributes", "is_control") for b in batches):
            break
    else:
        raise AssertionError("no Fetch answer with control batches in samples/txn_rdkafka.pcap")
    data = bytearray(ex.response.data)
    ctl = [b for b in batches if b.get_in("attributes", "is_control")]
    for b in ctl + ([next(b for b in batches if b not in ctl)] if zero_data else []):
        struct.pack_into(">I", data, b.offset + 17, 0)
    flow = TcpFlow(("10.3.0.1", 31000), ("10.3.0.2", 9092))
    path = tmp_path / ("data0.pcap" if zero_data else "markers0.pcap")
    write_pcap(str(path), flow.handshake() + flow.send(0, kafka_frame(ex.request.data))
               + flow.send(1, kafka_frame(bytes(data))))
    return path, len(ctl)


@pytest.mark.parametrize("zero_data", [False, True])
def test_crc_zero_control_batches_of_a_real_fetch_lean_and_full(tmp_path, zero_data):
    import json

    from analyzer.commands.check import check_command
    from analyzer.pipeline import Options, Run
    path, n_ctl = _txn_fetch_capture(tmp_path, zero_data)
    got = {}
    for decode in ("lite-check", "full"):
        c = Checker()
        for ex in Run(str(path), Options(decode=decode)):
            c.add(ex)
        got[decode] = [f.to_json() for f in only(c.finish(), "crc-mismatch")]
    assert got["lite-check"] == got["full"]
    (f,) = got["full"]
    assert (f["details"]["crc_batches"], f["details"]["control_crc_zero"]) == (n_ctl + zero_data, n_ctl)
    assert f["details"]["kind"] == ("data" if zero_data else "control-crc-zero")
    assert ("transaction markers" in f["message"]) is not zero_data
    # the command: exit status 1 still, the text says what to do
    from click.testing import CliRunner
    r = CliRunner().invoke(check_command, [str(path)], standalone_mode=False)
    assert r.return_value == 1, r.output
    if not zero_data:
        assert "all in control batches (transaction markers) whose CRC field is 0" in r.output
        assert "      what to do: the broker wrote these transaction markers without a CRC" in r.output
    r = CliRunner().invoke(check_command, [str(path), "-f", "json"], standalone_mode=False)
    doc = json.loads(r.output)
    assert doc["captures"][0]["findings"][0]["details"]["control_crc_zero"] == n_ctl


def test_malformed_truncated_and_undecodable():
    w = Wire()
    bad = w.ex(3, 12, {}, {"throttle_time_ms": 0}, status="malformed")
    bad.response_tree.child("body").add(Field("brokers", "array", 900)).mark_malformed(
        "array length 900 exceeds frame")
    cut = w.ex(0, 9, produce_body("t", 0, records()), produce_response("t", 0), status="malformed",
               req_truncated=True)
    cut.request_tree.child("body").mark_malformed("frame truncated")
    rec = Field("records", "records", None)
    rec.add(Field("[0]", "RecordBatch")).mark_malformed("zstd decompression failed")
    junk = w.ex(1, 11, {"max_wait_ms": 100}, {"error_code": 0, "responses": [
        {"topic": "t", "partitions": [{"partition_index": 0, "records": rec}]}]}, status="malformed")
    fs = run([bad, cut, junk])
    m = one(fs, "malformed-frame")
    assert (m.severity, m.frames) == ("error", [bad.response_frame])
    assert "array length 900" in m.message
    t = one(fs, "truncated-frame")
    assert (t.severity, t.frames) == ("info", [cut.request_frame])
    u = one(fs, "undecodable-records")
    assert (u.severity, u.frames) == ("warning", [junk.response_frame])
    assert "decompression" in u.message


# -- fetch sessions ---------------------------------------------------------------------------

def fetch(w: Wire, sid: int, epoch: int, resp_sid: int = 0, error: int = 0, codes=None):
    return w.ex(1, 12, {"max_wait_ms": 500, "session_id": sid, "session_epoch": epoch},
                {"throttle_time_ms": 0, "error_code": error, "session_id": resp_sid, "responses": []},
                error_codes=codes)


def test_fetch_session_good_sequence_no_finding():
    w = Wire()
    exs = [fetch(w, 0, 0, resp_sid=42)] + [fetch(w, 42, e, resp_sid=42) for e in (1, 2, 3)]
    exs += [fetch(w, 42, -1), fetch(w, 0, -1), fetch(w, 0, 0, resp_sid=0), fetch(w, 0, -1)]
    assert not only(run(exs), "fetch-session")


def test_fetch_session_epoch_not_incrementing():
    w = Wire()
    exs = [fetch(w, 0, 0, resp_sid=42), fetch(w, 42, 1, resp_sid=42), fetch(w, 42, 1, resp_sid=42)]
    f = one(run(exs), "fetch-session")
    assert (f.severity, f.details["kind"], f.frames) == ("error", "epoch", [exs[2].request_frame])
    assert (f.details["got"], f.details["expected"]) == (1, 2)


def test_fetch_session_zero_id_and_errors():
    w = Wire()
    z = fetch(w, 0, 3)
    nf = fetch(w, 55, 4, error=70, codes=["FETCH_SESSION_ID_NOT_FOUND"])
    ie = fetch(w, 56, 9, error=71, codes=["INVALID_FETCH_SESSION_EPOCH"])
    fs = {f.details["kind"]: f for f in only(run([z, nf, ie]), "fetch-session")}
    assert (fs["zero-id"].severity, fs["zero-id"].frames) == ("error", [z.request_frame])
    assert fs["not-found"].severity == "warning"
    assert fs["not-found"].frames == [nf.request_frame, nf.response_frame]
    assert "FETCH_SESSION_ID_NOT_FOUND" in fs["not-found"].message
    assert fs["invalid-epoch"].frames == [ie.request_frame, ie.response_frame]
    assert not only(run([z, nf, ie]), "error-response")


# -- groups -----------------------------------------------------------------------------------

def assignment(parts: dict[str, list[int]]) -> Field:
    f = Field("assignment", "bytes", b"\x00")
    a = f.add(Field("Assignment", "ConsumerProtocolAssignment"))
    arr = a.add(Field("assigned_partitions", "array", len(parts)))
    for i, (t, ps) in enumerate(parts.items()):
        tp = arr.add(Field(f"[{i}]", "TopicPartition"))
        tp.add(Field("topic", "string", t))
        pa = tp.add(Field("partitions", "array", len(ps)))
        for j, p in enumerate(ps):
            pa.add(Field(f"[{j}]", "int32", p))
    return f


def rebalance(w: Wire, gen: int, members: list[str]):
    join = w.ex(11, 5, {"group_id": "g1", "session_timeout_ms": 10000, "rebalance_timeout_ms": 30000,
                        "member_id": members[0], "protocol_type": "consumer",
                        "protocols": [{"name": "range", "metadata": b""}]},
                {"throttle_time_ms": 0, "error_code": 0, "generation_id": gen, "protocol_name": "range",
                 "leader": members[0], "member_id": members[0],
                 "members": [{"member_id": m, "metadata": b""} for m in members]})
    sync = w.ex(14, 3, {"group_id": "g1", "generation_id": gen, "member_id": members[0],
                        "assignments": [{"member_id": m, "assignment": assignment({"t": [i]})}
                                        for i, m in enumerate(members)]},
                {"throttle_time_ms": 0, "error_code": 0, "assignment": assignment({"t": [0]})})
    hb = w.ex(12, 3, {"group_id": "g1", "generation_id": gen, "member_id": members[0]},
              {"throttle_time_ms": 0, "error_code": 0})
    return [join, sync, hb]


def test_group_timeline_and_no_storm():
    w = Wire()
    exs = rebalance(w, 1, ["m-a", "m-b"])
    commit = w.ex(8, 8, {"group_id": "g1", "generation_id": 1, "member_id": "m-a", "topics": [
        {"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 42}]}]},
        {"topics": []})
    leave = w.ex(13, 3, {"group_id": "g1", "members": [{"member_id": "m-a"}]}, {"error_code": 0})
    exs += [commit, leave]
    c = Checker().add_all(completion_order(exs))
    assert not only(c.finish(), "rebalance-storm")
    tl = c.timeline("g1")
    assert [e["api_name"] for e in tl] == ["JoinGroup", "SyncGroup", "Heartbeat", "OffsetCommit", "LeaveGroup"]
    assert tl[0]["generation_id"] == 1 and tl[0]["members"] == ["m-a", "m-b"] and tl[0]["leader"] == "m-a"
    assert tl[1]["assignments"] == {"m-a": {"t": [0]}, "m-b": {"t": [1]}}
    assert tl[1]["assignment"] == {"t": [0]}
    assert tl[3]["offsets"] == {"t-0": 42}
    assert tl[4]["members"] == ["m-a"]
    assert tl[0]["request_frame"] == exs[0].request_frame
    assert c.groups() == ["g1"] and c.timeline("other") == []


def test_rebalance_storm():
    w = Wire(step_ms=500)
    exs = [e for gen in range(1, 9) for e in rebalance(w, gen, ["m-a"])]
    f = one(run(exs), "rebalance-storm")
    assert f.severity == "warning"
    assert f.details["generations"] == 8
    assert f.frames == [exs[i].request_frame for i in range(0, len(exs), 3)]
    assert not only(run(exs, storm_rebalances=10), "rebalance-storm")


def test_consumer_group_heartbeat_in_timeline():
    w = Wire()
    cg = w.ex(68, 0, {"group_id": "g2", "member_id": "", "member_epoch": 0, "subscribed_topic_names": ["t"]},
              {"throttle_time_ms": 0, "error_code": 0, "member_id": "uuid-1", "member_epoch": 3,
               "heartbeat_interval_ms": 5000,
               "assignment": {"topic_partitions": [{"topic_id": "tid", "partitions": [0, 1]}]}})
    tl = Checker().add_all([cg]).timeline("g2")
    assert tl[0]["generation_id"] == 3 and tl[0]["assigned_member_id"] == "uuid-1"
    assert tl[0]["assignment"] == {"tid": [0, 1]}


# -- SASL -------------------------------------------------------------------------------------------

def test_sasl_request_before_auth():
    w = Wire()
    hs = w.ex(17, 1, {"mechanism": "SCRAM-SHA-256"}, {"error_code": 0, "mechanisms": ["SCRAM-SHA-256"]})
    early = w.ex(3, 12, {}, {})
    auth = w.ex(36, 2, {"auth_bytes": b"n,,n=u,r=x"}, {"error_code": 0, "auth_bytes": b"r=x"})
    later = w.ex(3, 12, {}, {})
    f = one(run([hs, early, auth, later]), "sasl-before-auth")
    assert (f.severity, f.frames) == ("error", [early.request_frame])
    # no handshake: no SASL rule applies
    w2 = Wire()
    assert not only(run([w2.ex(3, 12, {}, {})]), "sasl-before-auth")


def test_sasl_mechanism_not_offered_and_auth_failure():
    w = Wire()
    hs = w.ex(17, 1, {"mechanism": "PLAIN"}, {"error_code": 33, "mechanisms": ["SCRAM-SHA-256", "SCRAM-SHA-512"]},
              error_codes=["UNSUPPORTED_SASL_MECHANISM"])
    w2 = Wire(conn_id=1)
    hs2 = w2.ex(17, 1, {"mechanism": "SCRAM-SHA-256"}, {"error_code": 0, "mechanisms": ["SCRAM-SHA-256"]})
    auth = w2.ex(36, 1, {"auth_bytes": b"n,,n=u,r=x"},
                 {"error_code": 58, "error_message": "unknown-user", "auth_bytes": b""},
                 error_codes=["SASL_AUTHENTICATION_FAILED"])
    fs = run([hs, hs2, auth])
    m = one(fs, "sasl-mechanism")
    assert (m.severity, m.frames) == ("error", [hs.request_frame, hs.response_frame])
    assert "PLAIN" in m.message and "SCRAM-SHA-512" in m.message
    a = one(fs, "sasl-auth-failed")
    assert (a.severity, a.frames) == ("error", [auth.request_frame, auth.response_frame])
    assert "unknown-user" in a.message and a.conn == str(w2.conn)
    assert not only(fs, "error-response")


def test_scram_error_inside_successful_sasl_authenticate():
    """A broker that answers error_code 0 but puts a SCRAM server-final error (e=...) in auth_bytes."""
    w = Wire()
    hs = w.ex(17, 1, {"mechanism": "SCRAM-SHA-256"}, {"error_code": 0, "mechanisms": ["SCRAM-SHA-256"]})
    first = Field("auth_bytes", "bytes", b"r=abc")
    first.add(Field("sasl", "SCRAM server-first")).add(Field("nonce", "string", "abc"))
    a1 = w.ex(36, 1, {"auth_bytes": b"n,,n=u,r=a"}, {"error_code": 0, "error_message": "NONE", "auth_bytes": first})
    final = Field("auth_bytes", "bytes", b"e=unknown-user")
    final.add(Field("sasl", "SCRAM server-final")).add(Field("error", "string", "unknown-user"))
    a2 = w.ex(36, 1, {"auth_bytes": b"c=biws"}, {"error_code": 0, "error_message": "NONE", "auth_bytes": final})
    md = w.ex(3, 12, {}, {})
    fs = run([hs, a1, a2, md])
    f = one(fs, "sasl-auth-failed")
    assert (f.severity, f.frames) == ("error", [a2.request_frame, a2.response_frame])
    assert "unknown-user" in f.message and "error_code is 0" in f.message
    b = one(fs, "sasl-before-auth")      # authentication never completed
    assert b.frames == [md.request_frame]


# -- selection, JSON, robustness -----------------------------------------------------------------

def test_rule_selection_and_unknown_rule():
    w = Wire()
    exs = [w.ex(3, 12, {}, {"throttle_time_ms": 5}, latency_ms=3000)]
    assert {f.rule for f in run(exs)} == {"throttled", "slow-exchange"}
    assert {f.rule for f in run(exs, rules={"throttled"})} == {"throttled"}
    with pytest.raises(ValueError, match="no-such-rule"):
        Checker(rules={"no-such-rule"})
    assert all(r.severity in ("error", "warning", "info") for r in RULES.values())


def test_findings_sorted_and_json_ready():
    import json
    w = Wire()
    exs = [w.ex(3, 12, {}, {"throttle_time_ms": 5}),
           w.ex(19, 4, {}, {}, error_codes=["TOPIC_ALREADY_EXISTS"])]
    fs = run(exs)
    assert [f.severity for f in fs] == ["error", "warning"]
    d = json.loads(json.dumps([f.to_json() for f in fs]))
    assert d[0]["rule"] == "error-response" and d[0]["conn"] == "127.0.0.1:40000 -> 127.0.0.1:9092"
    assert d[0]["exchanges"][0]["api_name"] == "CreateTopics"


def test_trees_missing_or_odd_do_not_crash():
    w = Wire()
    e = w.ex(0, 9, {"topic_data": [{"name": None, "partition_data": [{"index": "x", "records": None}]}]},
             {"responses": None})
    e2 = w.ex(1, 12, {"session_id": "bad", "session_epoch": None}, {})
    e3 = w.ex(11, 5, {"group_id": None}, {})
    e4 = w.ex(99, 0, {}, {})
    e4.request_tree = None
    e4.response_tree = None
    run([e, e2, e3, e4])


# -- the command --------------------------------------------------------------------------------

class _FakeRun:
    def __init__(self, exchanges: list) -> None:
        self.exchanges = exchanges

        class S:
            last_ts = None
            capture_warning = None      # (a whole capture)
            tls: list[dict] = []        # (no TLS connection)
            bytes_skipped: dict[str, int] = {}
        self.summary = S()

    def __iter__(self):
        return iter(self.exchanges)


def _cli(monkeypatch, exchanges_by_path: dict, *args: str):
    from click.testing import CliRunner

    import analyzer.cli as cli
    from analyzer.commands import check

    def fake_iter(paths, kw, progress=True, decode="full"):
        assert decode == "lite-check"
        for p in paths:
            yield p, _FakeRun(completion_order(exchanges_by_path[p]))
    monkeypatch.setattr(check, "iter_captures", fake_iter)
    if "check" not in cli.main.commands:
        cli.main.add_command(check.check_command)
    return CliRunner().invoke(cli.main, ["check", *args])


def _sample_exchanges():
    w = Wire()
    return [w.ex(19, 4, {}, {}, error_codes=["TOPIC_ALREADY_EXISTS"]),
            w.ex(3, 12, {}, {"throttle_time_ms": 50}),
            rebalance(w, 1, ["m-a", "m-b"])[0]]


def test_cli_text_json_and_exit_status(monkeypatch):
    import json
    exs = _sample_exchanges()
    r = _cli(monkeypatch, {"a.pcap": exs}, "a.pcap")
    assert r.exit_code == 1, r.output
    assert "1 error, 1 warning" in r.output
    assert "ERROR (1)" in r.output and "TOPIC_ALREADY_EXISTS" in r.output
    assert f"frames {exs[0].response_frame}" in r.output
    assert "\x1b[" not in r.output                        # plain when not a tty
    lines = r.output.splitlines()
    at = next(i for i, x in enumerate(lines) if "TOPIC_ALREADY_EXISTS" in x)
    assert lines[at + 1].startswith("      what to do: nothing, if the client only makes sure the topic exists")
    assert lines[at + 2].startswith("      conn ")
    r = _cli(monkeypatch, {"a.pcap": exs}, "a.pcap", "--skip-rule", "error-response", "-f", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["counts"] == {"error": 0, "warning": 1, "info": 0}
    assert doc["captures"][0]["findings"][0]["rule"] == "throttled"
    assert list(doc["captures"][0]["findings"][0])[:5] == ["rule", "severity", "message", "advice", "conn"]
    assert "over its quota" in doc["captures"][0]["findings"][0]["advice"]
    assert doc["captures"][0]["findings"][0]["frames"] == [exs[1].response_frame]
    r = _cli(monkeypatch, {"a.pcap": exs}, "a.pcap", "--rule", "throttled,error-response", "-f", "json")
    assert {f["rule"] for f in json.loads(r.output)["captures"][0]["findings"]} == {"throttled", "error-response"}


def test_cli_usage_errors_and_list_rules(monkeypatch):
    r = _cli(monkeypatch, {}, "a.pcap", "--rule", "nope")
    assert r.exit_code == 2 and "unknown rule nope" in r.output
    r = _cli(monkeypatch, {}, "--list-rules")
    assert r.exit_code == 0
    assert all(rule in r.output for rule in RULES)
    r = _cli(monkeypatch, {})
    assert r.exit_code == 2


def test_cli_timeline(monkeypatch):
    import json
    w = Wire()
    exs = rebalance(w, 1, ["m-a", "m-b"]) + rebalance(w, 2, ["m-a"])
    r = _cli(monkeypatch, {"g.pcap": exs}, "g.pcap", "--timeline", "g1")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0] == "group g1: 6 exchanges"
    # the story first: one line per generation
    assert lines[1].startswith("  generation 1: 2 member(s) (m-a, m-b), protocol range, leader m-a; rebalance ")
    assert lines[2].endswith("started by session timeout (m-b gone without LeaveGroup)")
    assert "JoinGroup v5" in lines[3] and "gen=1" in lines[3] and "members=m-a,m-b" in lines[3]
    assert "plan=m-a:t[0]; m-b:t[1]" in lines[4]
    r = _cli(monkeypatch, {"g.pcap": exs}, "g.pcap", "--timeline", "g1", "-f", "json")
    story = json.loads(r.output)["story"]
    assert [(g["generation"], g["members"]) for g in story["generations"]] == [(1, ["m-a", "m-b"]), (2, ["m-a"])]
    ev = json.loads(r.output)["events"]
    assert [e["generation_id"] for e in ev] == [1, 1, 1, 2, 2, 2]
    r = _cli(monkeypatch, {"g.pcap": exs}, "g.pcap", "--timeline", "zzz")
    assert r.exit_code == 1 and "groups seen: g1" in r.output


# -- real captures (../shared/captures) ------------------------------------------------------------

SHARED = __import__("pathlib").Path(__file__).resolve().parents[2] / "shared" / "captures"
_CACHE: dict[str, Checker] = {}


def checked(name: str) -> Checker:
    path = SHARED / name
    if not path.exists():
        pytest.skip(f"{path} is absent (shared captures not available)")
    if name not in _CACHE:
        from analyzer.pipeline import Run
        c = Checker()
        run_ = Run(str(path))
        for ex in run_:
            c.add(ex)
        c.capture_end = max(c.capture_end, run_.summary.last_ts or 0.0)
        _CACHE[name] = c
    return _CACHE[name]


def pdus(name: str) -> list[dict]:
    """The ground truth's independent framing check: one dict per PDU."""
    import json
    d = json.loads((SHARED / name.replace(".pcapng", ".tshark.json").replace(".pcap", ".tshark.json")).read_text())
    fc = d["framing_check"]
    return [dict(zip(fc["pdus_columns"], p, strict=True)) for p in fc["pdus"]]



@pytest.mark.shared
def test_real_admin_errors_with_frames():
    name = "admin_rdkafka_tansu.pcap"
    fs = only(checked(name).finish(), "error-response")
    by = {f.details["error"]: f for f in fs}
    truth = {(p["dir"], p["api_key"], p["correlation_id"]): p["first_frame"] for p in pdus(name)}
    exists = by["TOPIC_ALREADY_EXISTS"]
    assert exists.severity == "error" and exists.details["api_name"] == "CreateTopics"
    corr = exists.exchanges[0]["correlation_id"]
    assert exists.frames == [truth[("resp", 19, corr)]] == [28]
    missing = by["UNKNOWN_TOPIC_OR_PARTITION"]
    assert missing.severity == "warning" and missing.details["api_name"] == "DeleteTopics"
    assert missing.frames == [truth[("resp", 20, missing.exchanges[0]["correlation_id"])]] == [82]


@pytest.mark.shared
def test_real_apiversions_fallback_and_requests_in_flight():
    name = "comp_all_rdkafka_mock3.pcap"
    told = checked(name).finish()
    # told once: the same fallback on 37 connections, the same close on 10
    fb1 = one(told, "apiversions-fallback")
    assert fb1.message == ("ApiVersions v3 answered UNSUPPORTED_VERSION; the client retried with v0 "
                           "(on 37 connections)")
    assert (fb1.details["count"], fb1.details["occurrences"], len(fb1.occurrences)) == (37, 37, 37)
    assert fb1.conn.startswith("37 connections: ") and len(fb1.details["connections"]) == 37
    assert fb1.frames == sorted(min(o.frames) for o in fb1.occurrences)
    assert len(fb1.to_json()["occurrences"]) == 37
    closes = only(told, "closed-in-flight")
    assert [(f.details["count"], f.details.get("occurrences")) for f in closes] == [(10, 10)]
    assert "waiting up to 0 ms" not in closes[0].message and "less than 1 ms after the oldest was sent" in \
        closes[0].message
    fs = checked(name).finish(fold=False)
    fb = only(fs, "apiversions-fallback")
    truth = pdus(name)
    v3 = [p for p in truth if p["dir"] == "req" and p["api_key"] == 18 and p["api_version"] == 3]
    assert sum(f.details["count"] for f in fb) == len(v3) == 37
    assert all(f.severity == "info" and f.details["retry_version"] == 0 for f in fb)
    assert sorted(f.exchanges[0]["request_frame"] for f in fb) == sorted(p["first_frame"] for p in v3)
    # requests the broker never answered: the ground truth's unmatched requests
    answered = {(p["tcp_stream"], p["correlation_id"]) for p in truth if p["dir"] == "resp"}
    lost = sorted(p["first_frame"] for p in truth
                  if p["dir"] == "req" and (p["tcp_stream"], p["correlation_id"]) not in answered)
    waiting = only(fs, "closed-in-flight") + only(fs, "unanswered-request")
    assert sorted(fr for f in waiting for fr in f.frames) == lost
    assert len(lost) == 10
    assert not [f for f in fs if f.severity == "error"]


@pytest.mark.shared
def test_real_kafka4_removed_versions():
    name = "old_v0_kp2_082_mock.pcap"
    fs = only(checked(name).finish(fold=False), "kafka4-removed")
    assert all(f.severity == "warning" for f in fs)
    got = sorted((e["api_name"], e["api_version"], e["request_frame"]) for f in fs for e in f.exchanges)
    assert all(f.details["api_versions"] == sorted({e["api_version"] for e in f.exchanges}) for f in fs)
    k4 = {k: APIS[k].kafka4_versions for k in (0, 1, 2, 3)}
    truth = sorted((p["api_key"], p["api_version"], p["first_frame"]) for p in pdus(name)
                   if p["dir"] == "req" and not k4[p["api_key"]][0] <= p["api_version"] <= k4[p["api_key"]][1])
    names = {0: "Produce", 1: "Fetch", 2: "ListOffsets"}
    assert got == sorted((names[k], v, fr) for k, v, fr in truth) == [
        ("Fetch", 0, 59), ("ListOffsets", 0, 55), ("Produce", 0, 15), ("Produce", 0, 35)]


@pytest.mark.shared
def test_real_unsupported_version_says_who_and_what_to_do():
    told = checked("old_v0_kp2_082_mock.pcap").finish()
    f = one([f for f in told if f.details.get("error") == "UNSUPPORTED_VERSION"], "error-response")
    assert f.message == ("1 UNSUPPORTED_VERSION error(s) in Produce responses: client lab-kp2-producer sent Produce v0; "
                         "the broker's versions are not known (no ApiVersions answer on the connection)")
    assert f.advice == "upgrade the client, or pin it to API versions the broker supports"
    fetch = one([f for f in only(told, "kafka4-removed") if f.details["api_name"] == "Fetch"], "kafka4-removed")
    assert fetch.message == "1 Fetch v0 request(s) from client lab-kp2-fetcher: Kafka 4.0 serves v4-v18 (KIP-896)"


@pytest.mark.shared
def test_real_sasl_failures():
    name = "sasl_scram_tansu_auth.pcap"
    told = one(checked(name).finish(), "sasl-auth-failed")
    assert told.message == ("24 SaslAuthenticate failure(s): SCRAM server-final error 'unknown-user' although "
                            "error_code is 0 (on 24 connections)")
    assert told.frames[0] == 12 and len(told.frames) == 24
    fs = checked(name).finish(fold=False)
    failed = only(fs, "sasl-auth-failed")
    assert len(failed) == 24 and all(f.severity == "error" for f in failed)
    assert all("unknown-user" in f.message for f in failed)
    auth = {p["first_frame"] for p in pdus(name) if p["api_key"] == 36}
    assert all(set(f.frames) <= auth for f in failed)
    assert failed[0].frames == [12, 13]
    # PLAIN: the broker closes the connection instead of answering the SaslHandshake
    closed = only(fs, "closed-in-flight")
    assert len(closed) == 12
    assert all(f.exchanges[0]["api_name"] == "SaslHandshake" for f in closed)


@pytest.mark.shared
def test_real_group_timeline():
    c = checked("group_rdkafka_tansu.pcap")
    tl = c.timeline("lab-group")
    joins = [e for e in tl if e["api_name"] == "JoinGroup"]
    truth = sorted(p["first_frame"] for p in pdus("group_rdkafka_tansu.pcap")
                   if p["dir"] == "req" and p["api_key"] == 11)
    assert sorted(e["request_frame"] for e in joins) == truth
    assert joins[0]["error"] == "MEMBER_ID_REQUIRED"
    leader_sync = [e for e in tl if e["api_name"] == "SyncGroup" and e.get("assignments")]
    assert leader_sync
    parts = sorted(p for a in leader_sync[0]["assignments"].values() for ps in a.values() for p in ps)
    assert parts == [0, 1, 2]
    assert {e["api_name"] for e in tl} >= {"JoinGroup", "SyncGroup", "Heartbeat", "OffsetCommit", "LeaveGroup"}
    assert not only(c.finish(), "rebalance-storm")


CLEAN = ["comp_gzip_kp3_tansu.pcap", "comp_gzip_rdkafka_tansu.pcap", "comp_lz4_rdkafka_tansu.pcap",
         "comp_none_kafkajs_tansu.pcap", "comp_snappy_aiokafka_tansu.pcap", "admin_kafkajs_tansu.pcap",
         "concurrent_mixed_tansu.pcapng", "group_kafkajs_tansu.pcap", "group_rdkafka_mock.pcap",
         "group_rdkafka_tansu.pcap", "ipv6_rdkafka_tansu.pcap", "midstream_rdkafka_tansu.pcap",
         "snap96_rdkafka_tansu.pcap", "txn_rdkafka_tansu.pcap", "edge_kcat_tansu.pcap"]


@pytest.mark.shared
@pytest.mark.parametrize("name", CLEAN)
def test_real_clean_captures_have_no_errors(name):
    fs = checked(name).finish()
    assert not [f for f in fs if f.severity == "error"], fs
    if name == "comp_gzip_kp3_tansu.pcap":
        assert fs == []


@pytest.mark.shared
def test_real_idempotent_batches_seen_without_sequence_findings():
    c = checked("txn_rdkafka_tansu.pcap")
    assert len(c._batches) >= 9 and all(b.producer_id >= 0 for b in c._batches)
    fs = c.finish()
    assert not only(fs, "producer-sequence") and not only(fs, "sequence-error-response")
