"""Differential tests: our exchanges against independent views of the same captures.

- ../shared/captures/*.tshark.json carry ``framing_check``: every PDU of the capture
  (direction, first packet, tcp stream, correlation id, api key, version, length),
  found by a header-level parse independent of ours.
- tshark (Debian's 4.0.17, installed by tests/run.sh) decodes our samples; for every
  request it decodes, we must find the same API key, version, correlation id and
  frame number.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from analyzer.pipeline import Options, Run
from tests.conftest import SAMPLES, SHARED_CAPTURES

CAPS = sorted(SHARED_CAPTURES.glob("*.tshark.json")) if SHARED_CAPTURES.is_dir() else []


def _run(path: Path, ports: list[int]) -> tuple[list, Run]:
    run = Run(str(path), Options(ports=tuple(ports)))
    return list(run), run


def _capture_of(meta: Path) -> Path:
    d = json.loads(meta.read_text())
    return meta.parent / d["file"]


@pytest.mark.skipif(not CAPS, reason="../shared/captures is not present")
@pytest.mark.parametrize("meta", CAPS, ids=lambda p: p.name.replace(".tshark.json", ""))
def test_every_pdu_of_framing_check_is_found(meta: Path) -> None:
    d = json.loads(meta.read_text())
    fc = d["framing_check"]
    cap = _capture_of(meta)
    exchanges, run = _run(cap, d["decode_as_ports"])
    cols = fc["pdus_columns"]
    pdus = [dict(zip(cols, row, strict=False)) for row in fc["pdus"]]
    ours_req = Counter()
    ours_resp = Counter()
    for ex in exchanges:
        if ex.request is not None and ex.protocol == "kafka" and ex.api_key is not None:
            ours_req[(ex.request.first_index, ex.conn.id, ex.correlation_id, ex.api_key, ex.api_version)] += 1
        if ex.response is not None and ex.protocol == "kafka":
            ours_resp[(ex.response.first_index, ex.conn.id, ex.correlation_id)] += 1
    missing_req = []
    missing_resp = []
    for p in pdus:
        if p["dir"] == "req":
            key = (p["first_frame"], p["tcp_stream"], p["correlation_id"], p["api_key"], p["api_version"])
            if ours_req[key] <= 0:
                missing_req.append(key)
            ours_req[key] -= 1
        else:
            key = (p["first_frame"], p["tcp_stream"], p["correlation_id"])
            if ours_resp[key] <= 0:
                missing_resp.append(key)
            ours_resp[key] -= 1
    assert not missing_req, f"requests framing_check found and we did not: {missing_req[:10]}"
    assert not missing_resp, f"responses framing_check found and we did not: {missing_resp[:10]}"
    assert run.summary.request_frames == fc["requests_total"]
    assert run.summary.response_frames == fc["responses_total"]
    unanswered = fc["stats"].get("requests_without_response_in_capture", 0)
    assert run.summary.exchanges.get("unanswered", 0) == unanswered


SAMPLE_CAPS = sorted(p for p in SAMPLES.glob("*.pcap*"))
TSHARK = shutil.which("tshark")

# what Debian's tshark 4.0.17 dissects; above these it marks frames unsupported
TSHARK_MAX = {0: 8, 1: 11, 2: 5, 3: 9, 8: 8, 9: 7, 10: 3, 11: 7, 12: 4, 13: 4, 14: 5, 15: 5, 16: 4, 17: 1,
              18: 3, 19: 5, 20: 4, 21: 1, 22: 3, 23: 3, 24: 1, 25: 1, 26: 1, 28: 3, 29: 2, 30: 2, 31: 2,
              32: 2, 33: 1, 36: 2, 37: 1, 42: 2, 43: 2, 44: 1, 47: 0, 48: 1, 49: 1}


def _tshark_requests(cap: Path, ports: list[int]) -> list[tuple[int, int, int, int]]:
    args = [TSHARK, "-n", "-r", str(cap)]
    for p in ports:
        args += ["-d", f"tcp.port=={p},kafka"]
    args += ["-Y", "kafka.request_key", "-T", "fields", "-E", "occurrence=a", "-E", "separator=|",
             "-e", "frame.number", "-e", "kafka.request_key", "-e", "kafka.request.version",
             "-e", "kafka.correlation_id"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120, check=True).stdout
    rows = []
    for line in out.splitlines():
        fn, keys, vers, cids = line.split("|")
        for k, v, c in zip(keys.split(","), vers.split(","), cids.split(","), strict=False):
            if k and v and c:
                rows.append((int(fn), int(k), int(v), int(c)))
    return rows


@pytest.mark.skipif(TSHARK is None, reason="tshark is not installed (tests/run.sh installs it)")
@pytest.mark.skipif(not SAMPLE_CAPS, reason="no samples")
@pytest.mark.parametrize("cap", SAMPLE_CAPS, ids=lambda p: p.name)
def test_tshark_requests_found_in_samples(cap: Path) -> None:
    manifest = json.loads((SAMPLES / "manifest.json").read_text()) if (SAMPLES / "manifest.json").exists() else {}
    ports = [9092]
    for entry in manifest.get("samples", manifest if isinstance(manifest, list) else []):
        if isinstance(entry, dict) and entry.get("file") == cap.name and entry.get("broker_ports"):
            ports = list(entry["broker_ports"])
    exchanges, _ = _run(cap, ports)
    ours = Counter((ex.request_frame, ex.api_key, ex.api_version, ex.correlation_id)
                   for ex in exchanges if ex.protocol == "kafka" and ex.request is not None)
    theirs = [r for r in _tshark_requests(cap, ports) if r[2] <= TSHARK_MAX.get(r[1], -1)]
    missing = [r for r in theirs if ours[r] <= 0]
    assert not missing, f"tshark decoded requests we did not find: {missing[:10]}"
