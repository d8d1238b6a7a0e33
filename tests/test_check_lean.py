"""`check` reads the core's lean trees (``Options.decode="lite-check"``): the figures, what
its rules read besides (the v2 batches' producer state, an ApiVersions answer's table),
full trees for SaslHandshake and the APIs with nested payloads, and a message whose walk
marked bad bytes decoded again in full. Its findings must be those full trees give: on
every capture, on damaged exchanges, and on idempotent producers whose sequences go wrong."""
from __future__ import annotations

import json
import random
import struct
from pathlib import Path
from typing import Any

import crc32c

from analyzer.pipeline import Options, Run
from analyzer.sinks.check import Checker
from dissectors.context import DecodeContext, Limits
from dissectors.field import ErrorsRoot, Field
from dissectors.kafka import decode_response
from tests.conftest import SAMPLES, SHARED_CAPTURES, capture_paths, stats_of
from tests.lean import damaged_capture
from tests.pcapgen import TcpFlow, kafka_frame, write_pcap


def checked(path: Path, decode: str, **limits: int) -> dict[str, Any]:
    """What a `check` run knows at the end: findings, its state's counts, each group's
    timeline, the producer batches it follows, and the run's counts."""
    run = Run(str(path), Options(decode=decode), DecodeContext(Limits(**limits)))
    checker = Checker()
    for ex in run:
        checker.add(ex)
    return {
        "findings": [f.to_json() for f in checker.finish(capture_end=run.summary.last_ts)],
        "state": checker.stats(),
        "timelines": {g: checker.timeline(g) for g in checker.groups()},
        "batches": [tuple(b) for b in checker._batches],
        "advertised": sorted((cs.name, sorted(cs.advertised.items())) for cs in checker._conns.values()
                             if cs.advertised),
        "summary": run.summary.to_json(run.ctx),
    }


def same(path: Path, **limits: int) -> dict[str, Any]:
    """The lean run's results, asserted equal to the full run's."""
    lean = checked(path, "lite-check", **limits)
    full = checked(path, "full", **limits)
    for k in full:
        assert json.dumps(lean[k], sort_keys=True, default=str) == json.dumps(full[k], sort_keys=True, default=str), \
            (path.name, k)
    return lean


def test_check_reads_every_capture_as_full_trees_do() -> None:
    findings = batches = advertised = 0
    for path in capture_paths():
        got = same(path)
        findings += len(got["findings"])
        batches += len(got["batches"])
        advertised += len(got["advertised"])
    # (the samples alone: 13 findings, 18 producer batches, 56 connections' versions; with
    # the shared captures 58, 34 and 267)
    shared = SHARED_CAPTURES.is_dir()
    assert findings >= (50 if shared else 13), findings
    assert batches >= (30 if shared else 18) and advertised >= (250 if shared else 56), (batches, advertised)


def test_check_reads_as_full_trees_do_under_tight_limits() -> None:
    for path in sorted(SAMPLES.glob("*.pcap*")):
        for limits in ({"max_array_len": 3}, {"max_decompressed": 300}):
            same(path, **limits)


def test_check_reads_damaged_exchanges_as_full_trees_do(tmp_path: Path) -> None:
    cap, _ = damaged_capture(tmp_path / "damaged.pcap", seed=11)
    got = same(cap)
    rules = {f["rule"] for f in got["findings"]}
    assert {"malformed-frame", "crc-mismatch", "error-response"} <= rules, rules
    assert got["summary"]["malformed_fields"] > 300


# -- idempotent producers ---------------------------------------------------------------

def _produce_requests() -> list[tuple[bytes, bytes, list[int]]]:
    """The samples' Produce exchanges whose batches carry a producer id: (request, response,
    the offsets of its v2 batches in the request)."""
    out = []
    for path in sorted(SAMPLES.glob("*.pcap*")):
        for ex in Run(str(path), Options()):
            if ex.api_key != 0 or ex.response is None or ex.status != "ok":
                continue
            starts = [b.offset for f in ex.request_tree.walk() if f.type == "records"
                      for b in f.children or () if b.type == "RecordBatch" and b.get("producer_id", -1) >= 0]
            if starts:
                out.append((ex.request.data, ex.response.data, starts))
    return out


def _with_sequence(data: bytes, starts: list[int], seqs: list[int]) -> bytes:
    """The request with its batches' base_sequence rewritten (and their CRC-32C made good)."""
    b = bytearray(data)
    for pos, seq in zip(starts, seqs, strict=False):
        struct.pack_into(">i", b, pos + 53, seq)
        size = struct.unpack_from(">i", b, pos + 8)[0]
        struct.pack_into(">I", b, pos + 17, crc32c.crc32c(bytes(b[pos + 21:pos + 12 + size])))
    return bytes(b)


def test_producer_sequences_are_judged_on_lean_trees_as_on_full_ones(tmp_path: Path) -> None:
    """Real Produce requests of idempotent producers sent again and again with their
    base_sequence rewritten: in order, with gaps, overlaps, duplicates and reorderings, some
    answered OUT_OF_ORDER_SEQUENCE_NUMBER; spread over two connections."""
    reqs = _produce_requests()
    assert reqs, "no idempotent Produce request in the samples"
    rng = random.Random(3)
    flows = [TcpFlow(("10.3.0.1", 31000 + i), ("10.3.0.2", 9092)) for i in range(2)]
    packets = [p for f in flows for p in f.handshake()]
    for i in range(120):
        data, resp, starts = rng.choice(reqs)
        seqs = [rng.choice((i * 10, i * 10 + 3, max(0, i * 10 - 25), 0)) for _ in starts]
        flow = rng.choice(flows)
        packets += flow.send(0, kafka_frame(_with_sequence(data, starts, seqs)))
        if rng.random() < 0.85:
            packets += flow.send(1, kafka_frame(resp))
    cap = tmp_path / "sequences.pcap"
    write_pcap(str(cap), packets)
    got = same(cap)
    kinds = {f["details"].get("kind") for f in got["findings"] if f["rule"] == "producer-sequence"}
    assert len(got["batches"]) > 100 and {"gap", "overlap"} <= kinds, (len(got["batches"]), kinds)


# -- what the lean walk keeps for the rules ---------------------------------------------

def test_an_apiversions_answer_carries_its_table_in_both_trees() -> None:
    """extra["versions"] of api_keys: whole elements, the last of an API key winning; the
    lean tree keeps the table, not the elements."""
    from analyzer._core import Figures
    from dissectors.errors import ERRORS
    from dissectors.schema import APIS

    def entry(k: int, lo: int, hi: int) -> bytes:
        return struct.pack(">hhh", k, lo, hi) + b"\x00"      # (v3: each element's tag section)

    rows = [(0, 3, 9), (3, 0, 12), (18, 0, 3), (3, 1, 13)]
    body = (struct.pack(">h", 0) + bytes([len(rows) + 1]) + b"".join(entry(*r) for r in rows)
            + struct.pack(">i", 0) + b"\x00")
    data = struct.pack(">i", 9) + body
    full = decode_response(data, 18, 3, DecodeContext())
    table = {0: (3, 9), 3: (1, 13), 18: (0, 3)}
    fkeys = full.child("body").child("api_keys")
    assert fkeys.extra == {"versions": table} and len(fkeys.children) == 4
    tree, counts = Figures((Field, ErrorsRoot), APIS, ERRORS, check=True).response(data, 18, 3)
    lkeys = tree.children[0].child("api_keys")
    assert isinstance(lkeys, Field) and lkeys.extra == {"versions": table}
    assert lkeys.children is None and (lkeys.offset, lkeys.length) == (fkeys.offset, fkeys.length)
    assert counts[0] == 0
    # (without check the walk keeps neither)
    plain, _ = Figures((Field, ErrorsRoot), APIS, ERRORS).response(data, 18, 3)
    assert plain.children[0].child("api_keys") is None


def test_lean_records_carry_the_batches_full_trees_carry() -> None:
    """extra["batches"] of a Produce request's records, lean (check=True) and full alike."""
    from analyzer._core import Figures
    from dissectors.errors import ERRORS
    from dissectors.kafka import decode_request
    from dissectors.schema import APIS

    n = 0
    for data, _resp, _starts in _produce_requests():
        full = decode_request(data, DecodeContext())
        header = full.child("header")
        tree, _ = Figures((Field, ErrorsRoot), APIS, ERRORS, check=True).request(data, header.offset + header.length)
        fb = [f.extra["batches"] for f in full.walk() if f.type == "records"]
        lb = [f.extra["batches"] for f in tree.walk() if f.type == "records"]
        assert lb == fb
        n += sum(map(len, fb))
    assert n >= 4


# -- what a checker keeps ----------------------------------------------------------------

def _check(path: Path, every: int, monkeypatch: Any, listed: bool = False) -> tuple[Checker, str]:
    import analyzer.sinks.check as rules

    monkeypatch.setattr(rules, "RETIRE_EVERY", every)
    run = Run(str(path), Options(decode="lite-check"))
    checker = Checker()
    # (``listed``: every exchange made before the first is checked, so that each connection
    # has ended before the checker sees its exchanges)
    for ex in list(run) if listed else run:
        checker.add(ex)
    findings = [f.to_json() for f in checker.finish(capture_end=run.summary.last_ts)]
    return checker, json.dumps([findings, checker.stats()], sort_keys=True)


def test_a_checker_forgets_connections_that_ended_with_nothing_left_to_judge(tmp_path: Path,
                                                                             monkeypatch: Any) -> None:
    """Connections that ended lose what only their next exchanges read, and those with
    nothing left for finish() to judge are only counted: the same findings and counts as a
    checker that keeps every connection, with a fraction of the state; and none is forgotten
    before its last exchange, however late the exchanges come."""
    cap, _ = damaged_capture(tmp_path / "damaged.pcap", seed=5)
    whole, want = _check(cap, 10**9, monkeypatch)
    seen = whole.stats()["connections"]
    assert len(whole._conns) == seen > 500
    lean, got = _check(cap, 8, monkeypatch)
    assert got == want
    # (the last connections seen are not looked at again: no exchange comes after them)
    assert len(lean._conns) < seen // 4 and len(lean._by_object) < 8, (len(lean._conns), seen)
    assert all(cs.corr is None for cs in lean._conns.values() if cs.conn is None)
    late, got = _check(cap, 1, monkeypatch, listed=True)
    assert got == want
    assert len(late._conns) < seen // 4
    # (connections of many exchanges, all ended before the checker sees the first)
    for path in sorted(SAMPLES.glob("*.pcap*")):
        assert _check(path, 1, monkeypatch, listed=True)[1] == _check(path, 10**9, monkeypatch)[1], path.name


def test_the_spark_rows_and_figures_read_lean_trees_as_full_ones() -> None:
    """What the Spark job reads of each exchange when its rows carry no field trees
    (``lite-topics-check``, ``lite-check``): the exchanges table's fields (partitions
    included), the figures grouped by topic and partition, and the run's counts."""
    from analyzer.sinks.output import exchange_to_json
    from analyzer.sinks.stats import COSTLY_VIEWS

    def read(path: Path, decode: str, by: tuple[str, ...]) -> str:
        run = Run(str(path), Options(decode=decode))
        exs = list(run)
        rows = [exchange_to_json(ex, trees=False) for ex in exs]
        figures = stats_of(exs, by, top=10, views=COSTLY_VIEWS)
        return json.dumps([rows, figures, run.summary.to_json(run.ctx)], sort_keys=True, default=str)

    partitions = 0
    for path in capture_paths():
        by = ("api", "version", "topic", "partition", "client_id")
        full = read(path, "full", by)
        assert read(path, "lite-topics-check", by) == full, path.name
        assert read(path, "lite-check", by[:2]) == read(path, "full", by[:2]), path.name
        partitions += full.count('"partition":')
    # (rows' and figures' partitions: 405 in the samples alone, 2,873 with the shared captures)
    assert partitions >= (2500 if SHARED_CAPTURES.is_dir() else 400), partitions


def test_check_with_a_display_filter_reads_lean_trees_as_full_ones() -> None:
    """`check -Y`: the filter keeps, on lean trees, the exchanges it keeps on full trees
    (it decodes full trees where it tests a tree field), and the rules find the same."""
    from analyzer.display_filter import compile_filter
    from tests.test_read_summary import FILTERS

    def findings(path: Path, decode: str, expr: str) -> str:
        run = Run(str(path), Options(decode=decode))
        keep = compile_filter(expr).matcher(run.ctx)
        checker = Checker()
        for ex in run:
            if keep(ex):
                checker.add(ex)
        return json.dumps([[f.to_json() for f in checker.finish(capture_end=run.summary.last_ts)],
                           checker.stats()], sort_keys=True, default=str)

    seen = 0
    for path in sorted(SAMPLES.glob("*.pcap*")):
        for expr in FILTERS:
            got = findings(path, "lite-check", expr)
            assert got == findings(path, "full", expr), (path.name, expr)
            seen += json.loads(got)[1]["exchanges"]
    assert seen > 500, seen
