"""The pre-0.8 protocol through the same read / JSON / stats / check paths as 0.8+."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.legacy_captures import write_captures


@pytest.fixture(scope="module")
def legacy_pcap(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_captures(tmp_path_factory.mktemp("legacy"))["legacy_07"]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "analyzer", *args], capture_output=True, text=True, timeout=120)


def test_ndjson_fields(legacy_pcap: Path) -> None:
    r = _cli("read", str(legacy_pcap), "-f", "ndjson")
    assert r.returncode == 0, r.stderr
    objs = [json.loads(x) for x in r.stdout.splitlines()]
    assert {o["protocol"] for o in objs} == {"kafka-legacy"}
    assert all(o["api_version"] is None and o["correlation_id"] is None for o in objs)
    names = [o["api_name"] for o in objs]
    assert names.count("PRODUCE") == 3 and "MULTIPRODUCE" in names and "MULTIFETCH" in names
    for o in objs:
        if o["api_name"] in ("PRODUCE", "MULTIPRODUCE"):
            assert o["status"] == "no_response_expected" and o["response_frame"] is None
        else:
            assert o["status"] == "ok" and o["latency_ms"] is not None
    fetch_err = [o for o in objs if o["api_name"] == "FETCH" and o["error_codes"]]
    assert fetch_err and fetch_err[0]["error_codes"] == ["OFFSET_OUT_OF_RANGE"]
    mf = next(o for o in objs if o["api_name"] == "MULTIFETCH")
    assert "WRONG_PARTITION" in mf["error_codes"]
    assert any(p["crc_ok"] is False for p in mf["partitions"])


def test_stats_and_check(legacy_pcap: Path) -> None:
    r = _cli("stats", str(legacy_pcap), "-f", "json")
    assert r.returncode == 0, r.stderr
    groups = {g["api"]: g for g in json.loads(r.stdout)["groups"]}
    assert groups["FETCH"]["count"] == 2 and groups["FETCH"]["errors"] == {"OFFSET_OUT_OF_RANGE": 1}
    assert groups["PRODUCE"]["count"] == 3
    r = _cli("check", str(legacy_pcap), "-f", "json")
    assert r.returncode == 1       # CRC mismatches are errors
    findings = json.loads(r.stdout)["captures"][0]["findings"]
    crc = [f for f in findings if f["rule"] == "crc-mismatch"]
    assert len(crc) == 2 and all(f["severity"] == "error" for f in crc)
