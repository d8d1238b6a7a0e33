"""In-flight depth (stats' in_flight, analyzer.sinks.insights.InFlight): checked against a
plain count over every pair of a connection's exchanges (request and response times) on
real captures; workers give what one process gives; the outputs."""
from __future__ import annotations

import csv
import io
import json
import struct
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from analyzer.cli import main
from analyzer.pipeline import Options, Run
from analyzer.sinks.insights import InFlight, depth_bucket, max_in_flight_verdict
from dissectors.context import DecodeContext
from tests.conftest import SAMPLES, SHARED_CAPTURES
from tests.pcapgen import TcpFlow, kafka_frame, write_pcap

CAPTURES = sorted(p for p in SAMPLES.iterdir() if p.suffix in (".pcap", ".pcapng")) + \
    (sorted(SHARED_CAPTURES.glob("*.pcap*")) if SHARED_CAPTURES.is_dir() else [])


def truth(path: Path) -> dict[str | None, dict[str, Any]]:
    """Per client id: max depth and the depth distribution, counted pair by pair: a request
    is in flight from its request time to its response time (unanswered: the connection's
    last packet; acks=0 Produce: never); its depth counts the requests sent before it (by
    time, then frame) still in flight at its time, and itself."""
    by_conn: dict[int, list[tuple[float, int, float, str | None]]] = {}
    ends: dict[int, Any] = {}
    for ex in Run(str(path), Options(decode="lite"), DecodeContext()):
        if ex.request is None or ex.status == "no_response_expected":
            continue
        ends[ex.conn.id] = ex.conn
        s = ex.request.last_ts
        by_conn.setdefault(ex.conn.id, []).append(
            (s, ex.request_frame or 0, ex.response.last_ts if ex.response is not None else -1.0, ex.client_id))
    out: dict[str | None, dict[str, Any]] = {}
    for cid, reqs in by_conn.items():
        end = ends[cid].last_ts
        ivals = [(s, f, e if e >= 0 else max(end, s), c) for s, f, e, c in reqs]
        client = next((c for _s, _f, _e, c in reqs if c is not None), None)
        o = out.setdefault(client, {"max_depth": 0, "depths": {}})
        for s, f, _e, _c in ivals:
            d = 1 + sum(1 for s2, f2, e2, _ in ivals if (s2, f2) < (s, f) and e2 > s)
            o["max_depth"] = max(o["max_depth"], d)
            o["depths"][depth_bucket(d)] = o["depths"].get(depth_bucket(d), 0) + 1
    return out


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_depth_equals_pairwise_count(path: Path) -> None:
    inf = InFlight()
    for ex in Run(str(path), Options(decode="lite"), DecodeContext()):
        inf.add(ex)
    got = {c["client_id"]: {"max_depth": c["max_depth"], "depths": {k: n for k, n in c["depths"].items() if n}}
           for c in inf.result()["clients"]}
    assert got == truth(path)


def _stats(*args: str) -> str:
    res = CliRunner().invoke(main, ["stats", *args])
    assert res.exit_code == 0, res.output
    return res.stdout


@pytest.mark.parametrize("path", [p for p in CAPTURES if p.stat().st_size < 3_000_000], ids=lambda p: p.name)
def test_workers_equal_one_process(path: Path) -> None:
    one = _stats("-f", "json", "--section", "in_flight", "-j", "1", str(path))
    assert _stats("-f", "json", "--section", "in_flight", "-j", "2", str(path)) == one


def test_real_values_and_outputs() -> None:
    """produce_fetch_rdkafka_none: the producer's connection had 3 requests in flight once
    (2 Produce and GetTelemetrySubscriptions); table, JSON and CSV say it."""
    path = str(SAMPLES / "produce_fetch_rdkafka_none.pcap")
    inf = json.loads(_stats("-f", "json", "--section", "in_flight", path))["in_flight"]
    prod = next(c for c in inf["clients"] if c["client_id"] == "kws-rdkafka-producer")
    assert (prod["requests"], prod["max_depth"], prod["max_produce_depth"]) == (6, 3, 2)
    assert prod["depths"] == {"1": 4, "2": 1, "3-5": 1, "6+": 0}
    assert prod["overlapping_apis"] == {"GetTelemetrySubscriptions+Produce": 2}
    assert prod["max_in_flight"] == "at most 3 seen: consistent with the default 5"
    assert [c["conn"] for c in inf["connections"]][:2] == [1, 4]
    table = _stats("--section", "in_flight", path)
    assert "Requests in flight at once" in table and "kws-rdkafka-producer" in table
    rows = list(csv.DictReader(io.StringIO(_stats("-f", "csv", "--section", "in_flight", path))))
    assert rows[1]["client_id"] == "kws-rdkafka-producer" and rows[1]["depth_3-5"] == "1"
    assert max_in_flight_verdict(1).startswith("at most 1 seen") and "above" in max_in_flight_verdict(6)


# -- crafted captures for check's rules: real Produce frames replayed, pipelined -------------

def _produce_frames(path: Path, client_id: str) -> tuple[bytes, bytes]:
    for ex in Run(str(path), Options(decode="lite"), DecodeContext()):
        if ex.api_name == "Produce" and ex.client_id == client_id and ex.response is not None:
            return ex.request.data, ex.response.data
    raise AssertionError("no Produce")


def _pipelined(tmp: Path, idempotent: bool, n: int, answer_order: list[int]) -> Path:
    """``n`` Produce requests sent back to back, then answered in ``answer_order``."""
    req, resp = _produce_frames(SAMPLES / "txn_rdkafka.pcap", "kws-idempotent") if idempotent else \
        _produce_frames(SAMPLES / "produce_fetch_rdkafka_none.pcap", "kws-rdkafka-producer")
    flow = TcpFlow(("10.0.0.1", 40000), ("10.0.0.2", 9092))
    pkts = flow.handshake()
    for corr in range(n):
        pkts += flow.send(0, kafka_frame(req[:4] + struct.pack("!i", 100 + corr) + req[8:]))
    for corr in answer_order:
        pkts += flow.send(1, kafka_frame(struct.pack("!i", 100 + corr) + resp[4:]))
    pkts += flow.fin(0) + flow.fin(1)
    path = tmp / f"pipelined_{idempotent}_{n}_{''.join(map(str, answer_order))}.pcap"
    write_pcap(str(path), pkts)
    return path


def _check(path: Path, rule: str) -> list[dict[str, Any]]:
    res = CliRunner().invoke(main, ["check", "-f", "json", "--rule", rule, str(path)])
    assert res.exit_code in (0, 1), res.output
    return [f for f in json.loads(res.stdout)["captures"][0]["findings"] if f["rule"] == rule]


def test_idempotent_producer_more_than_5_in_flight(tmp_path: Path) -> None:
    found = _check(_pipelined(tmp_path, True, 7, list(range(7))), "in-flight-idempotent")
    assert len(found) == 1 and found[0]["severity"] == "error"
    f = found[0]
    assert f["details"]["count"] == 2 and f["details"]["max_in_flight"] == 7     # the 6th and the 7th
    assert "idempotent producer id(s) 1" in f["message"] and "kws-idempotent" in f["message"]
    assert "OUT_OF_ORDER_SEQUENCE_NUMBER" in f["advice"] and "5 or less" in f["advice"]
    assert _check(_pipelined(tmp_path, True, 5, list(range(5))), "in-flight-idempotent") == []
    # 7 in flight from a producer without idempotence: not this rule
    assert _check(_pipelined(tmp_path, False, 7, list(range(7))), "in-flight-idempotent") == []


def test_reordered_produce_answers_without_idempotence(tmp_path: Path) -> None:
    found = _check(_pipelined(tmp_path, False, 3, [0, 2, 1]), "in-flight-reorder")
    assert len(found) == 1 and found[0]["severity"] == "warning" and found[0]["details"]["count"] == 1
    assert "max.in.flight.requests.per.connection=1" in found[0]["advice"]
    assert "enable.idempotence" in found[0]["advice"]
    assert _check(_pipelined(tmp_path, False, 3, [0, 1, 2]), "in-flight-reorder") == []
    assert _check(_pipelined(tmp_path, True, 3, [0, 2, 1]), "in-flight-reorder") == []


def test_crafted_depth_counts(tmp_path: Path) -> None:
    """7 requests sent before any answer: depths 1..7, each answer in order."""
    inf = InFlight()
    for ex in Run(str(_pipelined(tmp_path, False, 7, list(range(7)))), Options(decode="lite"), DecodeContext()):
        inf.add(ex)
    c = inf.result()["clients"][0]
    assert (c["max_depth"], c["max_produce_depth"], c["depths"]) == (7, 7, {"1": 1, "2": 1, "3-5": 3, "6+": 2})
    assert "above the Java client's default 5" in c["max_in_flight"]


def test_memory_flat_over_many_connections() -> None:
    """Connections that ended are retired (looked for every RETIRE_EVERY exchanges): the
    state followed stays bounded while 10,000 connections come and go; the figures stay."""
    from analyzer.sinks.insights import RETIRE_EVERY
    from tests.checkgen import Wire

    inf = InFlight()
    most = 0
    for i in range(10_000):
        w = Wire(conn_id=i)
        ex = w.ex(3, 12, {"topics": None})
        inf.add(ex)
        w.conn.ended, w.conn.last_seq = True, ex.seq       # (told after its last exchange, as pairing does)
        most = max(most, len(inf._live))
    assert most <= RETIRE_EVERY
    res = inf.result()
    assert res["clients"][0]["requests"] == 10_000 and res["clients"][0]["max_depth"] == 1
    assert len(res["connections"]) == 100
