"""The captures in samples/: each is documented, small, and analysed as the client used it.

``samples/manifest.json`` is written by ``samples/make_samples.py`` from an independent
header-level framing check (requests per API key/version) and from what the client
library reported (records delivered and consumed per topic).
"""
from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "samples"
MANIFEST: dict[str, dict[str, Any]] = json.loads((SAMPLES / "manifest.json").read_text())
FILES = sorted(p for p in SAMPLES.iterdir() if p.suffix in (".pcap", ".pcapng"))
NAMES = sorted(MANIFEST)


def _pipeline() -> Any:
    try:
        from analyzer import pipeline
    except ImportError as e:  # the lead's pipeline is not there yet
        pytest.skip(f"analyzer.pipeline not importable yet: {e}")
    return pipeline


def _analyze(name: str) -> tuple[list[Any], Any]:
    pipeline = _pipeline()
    m = MANIFEST[name]
    run = pipeline.Run(str(SAMPLES / m["file"]), pipeline.Options(ports=tuple(m["broker_ports"])))
    exchanges = list(run)
    return exchanges, run.summary


def test_samples_exist_and_are_small() -> None:
    assert len(FILES) >= 10
    for p in FILES:
        assert 0 < p.stat().st_size < 150 * 1024, p.name


def test_every_sample_is_documented() -> None:
    readme = (SAMPLES / "README.md").read_text()
    listed = {m["file"] for m in MANIFEST.values()}
    for p in FILES:
        assert f"`{p.name}`" in readme, f"{p.name} not described in samples/README.md"
        assert p.name in listed, f"{p.name} not in samples/manifest.json"
    for m in MANIFEST.values():
        assert (SAMPLES / m["file"]).exists(), m["file"]


def test_sample_set_covers_the_brief() -> None:
    files = {m["file"] for m in MANIFEST.values()}
    assert "produce_fetch_rdkafka_gzip.pcap" in files          # the quick-start sample
    assert any(f.endswith(".pcapng") for f in files)
    clients = {m["client"].split()[0] for m in MANIFEST.values()}
    assert {"confluent-kafka", "kafka-python", "aiokafka", "kafkajs"} <= clients
    keys = Counter()
    for m in MANIFEST.values():
        for kv, n in m["requests"].items():
            keys[kv] += n
    seen = {int(kv.split("/")[0]) for kv in keys}
    # Produce, Fetch, Metadata, JoinGroup, SyncGroup, Heartbeat, OffsetCommit, LeaveGroup,
    # CreateTopics, DeleteTopics, DescribeConfigs, InitProducerId, AddPartitionsToTxn, EndTxn
    assert {0, 1, 3, 8, 11, 12, 13, 14, 19, 20, 22, 24, 26, 32} <= seen
    assert {"0/0", "0/1", "0/2"} <= set(keys)                    # legacy MessageSet produces


@pytest.mark.parametrize("name", NAMES)
def test_manifest_matches_independent_framing(name: str) -> None:
    """Re-run make_samples' framing check: the manifest is true to the file."""
    sys.path.insert(0, str(SAMPLES))
    try:
        import make_samples
    finally:
        sys.path.remove(str(SAMPLES))
    m = MANIFEST[name]
    check = make_samples.framing_check(SAMPLES / m["file"], m["broker_ports"])
    assert check["requests"] == m["requests"]
    assert check["matched"] == m["matched"]


@pytest.mark.parametrize("name", NAMES)
def test_analyzer_finds_every_request(name: str) -> None:
    exchanges, summary = _analyze(name)
    m = MANIFEST[name]
    found = Counter(f"{ex.api_key}/{ex.api_version}" for ex in exchanges
                    if ex.request is not None and ex.protocol == "kafka" and ex.api_key is not None)
    assert dict(found) == m["requests"]
    statuses = Counter(ex.status for ex in exchanges)
    assert statuses["ok"] + statuses["malformed"] == m["matched"]
    assert statuses["orphan_response"] == 0


@pytest.mark.parametrize("name", [n for n in NAMES if "produced" in MANIFEST[n]["client_result"]])
def test_analyzer_record_counts(name: str) -> None:
    exchanges, _ = _analyze(name)
    res = MANIFEST[name]["client_result"]
    produced: Counter[str] = Counter()
    fetched: Counter[str] = Counter()
    produce_errors = 0
    for ex in exchanges:
        for p in ex.partitions:
            n = p.get("records") or 0
            if ex.api_key == 0:
                if p.get("error"):
                    produce_errors += 1
                else:
                    produced[p["topic"]] += n
            elif ex.api_key == 1:
                fetched[p["topic"]] += n
    for topic, n in res["produced"].items():
        assert produced[topic] == n, f"{topic}: produce records {produced[topic]} != delivered {n}"
    for topic, n in res["consumed"].items():
        # the fetch responses may also carry records the client filtered (aborted transactions)
        assert fetched[topic] >= n, f"{topic}: fetched records {fetched[topic]} < consumed {n}"
    if res.get("produce_errors"):
        assert produce_errors > 0
