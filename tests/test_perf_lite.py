"""The lean decode mode that ``stats`` uses gives the same figures (its queries over the
exchanges' rows, and the stories) as full field trees."""
from __future__ import annotations

import glob
from pathlib import Path

import pytest

from analyzer.pipeline import Options, Run
from analyzer.sinks.stats import COSTLY_VIEWS
from dissectors import kafka
from dissectors.context import DecodeContext
from tests.conftest import stats_of
from tests.lean import lean_response

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(__file__).resolve().parents[2] / "shared" / "captures"


def _stats(path: str, mode: str, by: tuple[str, ...] = ("api", "version")) -> tuple[dict, dict, dict]:
    run = Run(path, Options(decode=mode), DecodeContext())
    exs = list(run)
    exchanges = [(ex.seq, ex.api_name, ex.status, tuple(ex.error_codes),
                  tuple(tuple(sorted((k, v) for k, v in p.items() if k != "crc_ok")) for p in ex.partitions))
                 for ex in exs]
    return stats_of(exs, by, top=1000, views=COSTLY_VIEWS), run.summary.to_json(), {"exchanges": exchanges}


def _captures() -> list[str]:
    files = sorted(glob.glob(str(ROOT / "samples" / "*.pcap*")))
    return files


@pytest.mark.parametrize("path", _captures(), ids=lambda p: Path(p).name)
def test_lite_stats_identical_on_samples(path: str) -> None:
    full = _stats(path, "full")
    lite = _stats(path, "lite")
    assert full[0]["groups"], "a sample with no exchanges proves nothing"
    assert lite == full


@pytest.mark.parametrize("path", _captures(), ids=lambda p: Path(p).name)
def test_lite_topics_stats_identical_on_samples(path: str) -> None:
    """Grouped by topic and partition (the request's topics kept in the lean trees)."""
    by = ("api", "version", "topic", "partition")
    full = _stats(path, "full", by)
    assert _stats(path, "lite-topics", by) == full


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/captures not present")
def test_lite_stats_identical_on_shared_captures() -> None:
    files = sorted(glob.glob(str(SHARED / "*.pcap*")))
    assert files
    n = 0
    for path in files:
        full = _stats(path, "full", ("api", "version", "client_id", "conn"))
        lite = _stats(path, "lite", ("api", "version", "client_id", "conn"))
        assert lite == full, path
        by = ("api", "topic", "partition")
        assert _stats(path, "lite-topics", by) == _stats(path, "full", by), path
        n += sum(g["count"] for g in full[0]["groups"])
    assert n > 1000


def test_lean_tree_keeps_errors_throttle_and_partitions() -> None:
    # a Produce v9 response with one partition error and a throttle time, built by hand
    import struct

    def cstr(s: str) -> bytes:
        return bytes([len(s) + 1]) + s.encode()

    part = struct.pack(">ihqqq", 3, 6, -1, -1, 0) + b"\x01" + b"\x01" + b"\x00"   # NOT_LEADER_OR_FOLLOWER
    topic = cstr("t1") + b"\x02" + part + b"\x00"
    body = b"\x02" + topic + struct.pack(">i", 250) + b"\x00"
    frame = struct.pack(">i", 7) + b"\x00" + body
    ctx = DecodeContext()
    full = kafka.decode_response(frame, 0, 9, ctx)
    lite = lean_response(frame, 0, 9, DecodeContext())
    assert kafka.error_codes(lite) == kafka.error_codes(full) == ["NOT_LEADER_OR_FOLLOWER"]
    assert lite.child("body").get("throttle_time_ms") == 250
    p = lite.child("body").child("responses").children[0].child("partition_responses").children[0]
    assert p.get("index") == 3 and p.get("error_code") == 6
    # fields stats never reads are not built
    assert p.child("base_offset") is None and full.child("body").child("responses").children[0] \
        .child("partition_responses").children[0].child("base_offset") is not None


def test_lean_tree_marks_malformed_like_full() -> None:
    import struct
    frame = struct.pack(">i", 7) + b"\x00" + b"\x05"   # array count 4, nothing after
    c1, c2 = DecodeContext(), DecodeContext()
    kafka.decode_response(frame, 0, 9, c1)
    lean_response(frame, 0, 9, c2)
    assert c1.counts.malformed == c2.counts.malformed == 1


def test_fastjson_matches_json_module() -> None:
    import json

    from analyzer.sinks.fastjson import dumps_line
    from analyzer.sinks.output import exchange_to_json

    n = 0
    for path in _captures()[:6]:
        for ex in Run(path, Options(), DecodeContext()):
            obj = exchange_to_json(ex, trees=True)
            text = dumps_line(obj)
            assert json.loads(text) == json.loads(json.dumps(obj, separators=(",", ":"), ensure_ascii=False))
            assert "\n" not in text
            n += 1
    assert n > 50
    # what orjson refuses falls back to the json module
    assert json.loads(dumps_line({1: 2 ** 70})) == {"1": 2 ** 70}
