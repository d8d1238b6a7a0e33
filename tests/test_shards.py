"""`stats --jobs N`: a capture shared out by connection over forked workers gives the
figures one process gives (analyzer.shards)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from analyzer.cli import main
from analyzer.model import Packet
from analyzer.shards import auto_jobs, learnt_ids, resolve_misses, shard_of
from tests.conftest import SAMPLES, SHARED_CAPTURES
from tests.pcapgen import TcpFlow, encap, frame_bytes, kafka_request, kafka_response, write_pcap

SAMPLE_FILES = sorted(p for p in SAMPLES.iterdir() if p.suffix in (".pcap", ".pcapng"))
SHARED_FILES = sorted(SHARED_CAPTURES.rglob("*.pcap*")) if SHARED_CAPTURES.is_dir() else []


def _stats(*args: str) -> str:
    res = CliRunner().invoke(main, ["stats", "-f", "json", *args])
    assert res.exit_code == 0, res.output
    return res.stdout


@pytest.mark.parametrize("by", ["api,version,client,broker,conn", "api,version,topic,partition,client_id"])
@pytest.mark.parametrize("path", SAMPLE_FILES, ids=lambda p: p.name)
def test_samples_sharded_equal_one_process(path: Path, by: str) -> None:
    one = _stats("--by", by, "--top", "20", "-j", "1", str(path))
    three = _stats("--by", by, "--top", "20", "-j", "3", str(path))
    assert json.loads(one)["groups"], "a sample with no exchange proves nothing"
    assert three == one


@pytest.mark.skipif(not SHARED_FILES, reason="../shared/captures is not present")
@pytest.mark.parametrize("path", SHARED_FILES, ids=lambda p: p.name)
def test_shared_sharded_equal_one_process(path: Path) -> None:
    args = ("--by", "api,version,conn", "--top", "10")
    assert _stats(*args, "-j", "2", str(path)) == _stats(*args, "-j", "1", str(path))


def test_several_captures_keep_their_labels() -> None:
    files = [str(p) for p in SAMPLE_FILES[:3]]
    args = ("--by", "api,conn", "--top", "5")
    one = _stats(*args, "-j", "1", *files)
    assert "#" in one                      # connections are labelled <capture>#<n>
    assert _stats(*args, "-j", "2", *files) == one


def _flows(n: int, tmp: Path) -> tuple[Path, list]:
    pkts = []
    for i in range(n):
        flow = TcpFlow((f"10.0.{i % 3}.{i + 1}", 40000 + 7 * i), ("10.9.9.9", 9092), ts=1000.0 + i)
        pkts += flow.handshake()
        pkts += flow.send(0, kafka_request(18, 0, 1))
        pkts += flow.send(1, kafka_response(1, b"\x00\x00\x00\x00\x00\x00"))
        pkts += flow.fin(0) + flow.fin(1)
    path = tmp / "many.pcap"
    write_pcap(str(path), pkts)
    return path, pkts


def test_both_directions_go_to_one_worker_and_work_is_spread(tmp_path: Path) -> None:
    _path, pkts = _flows(30, tmp_path)
    by_conn: dict[tuple, set[int]] = {}
    for i, p in enumerate(pkts):
        data, orig = frame_bytes(p, 1)
        key = tuple(sorted([(p.src, p.sport), (p.dst, p.dport)]))
        by_conn.setdefault(key, set()).add(shard_of(Packet(i + 1, p.ts, 1, data, orig), 3))
    assert len(by_conn) == 30
    assert all(len(s) == 1 for s in by_conn.values())          # one worker per connection
    counts = [sum(1 for s in by_conn.values() if k in s) for k in range(3)]
    assert min(counts) >= 3, counts                               # every worker gets a share
    # the general path (IPv6, other link types) is symmetric too
    v6 = TcpFlow(("fd00::1", 40000), ("fd00::2", 9092), ts=1.0)
    shards = set()
    for p in v6.handshake() + v6.send(0, b"x") + v6.send(1, b"y"):
        data, orig = frame_bytes(p, 1)
        shards.add(shard_of(Packet(1, p.ts, 1, data, orig), 5))
        raw = encap(data[14:], 101)          # raw IP
        shards.add(shard_of(Packet(1, p.ts, 101, raw, len(raw)), 5))
    assert len(shards) == 1


@pytest.mark.parametrize("name", ["produce_fetch_rdkafka_zstd_ipv6.pcap", "produce_fetch_kafkapython_gzip_pcapng.pcapng", "group_rdkafka.pcap"])
def test_reader_share_is_shard_of(name: str) -> None:
    """A reader told to keep share k yields exactly the packets shard_of puts in k, in order."""
    from analyzer.capture import open_capture

    path = SAMPLES / name
    if not path.exists():
        pytest.skip(f"{name} not in samples/")
    with open_capture(str(path)) as r:
        every = list(r)
    total = 0
    for k in range(3):
        with open_capture(str(path)) as r:
            r.keep_share(k, 3, shard_of)
            kept = list(r)
            assert r.packets == len(every)              # every packet is read and counted
        assert kept == [p for p in every if shard_of(p, 3) == k]
        total += len(kept)
    assert total == len(every)


def test_connection_numbers_match_one_process(tmp_path: Path) -> None:
    path, _ = _flows(30, tmp_path)
    args = ("--by", "conn", "--top", "30")
    one = _stats(*args, "-j", "1", str(path))
    assert [g["conn"] for g in json.loads(one)["groups"]] == list(range(30))
    assert _stats(*args, "-j", "4", str(path)) == one


def test_topic_id_resolution() -> None:
    table = learnt_ids([(50, "id-a", "alpha"), (10, "id-b", "beta"), (70, "id-b", "beta")])
    assert table["id-b"] == ([10, 70], ["beta", "beta"])
    # learnt elsewhere before the first vain lookup: renamed, exact
    assert resolve_misses({"id-b": [20, 90]}, table) == ({"id-b": "beta"}, True)
    # nobody learnt it before the last vain lookup: one process could not name it either
    assert resolve_misses({"id-a": [5, 40], "id-c": [1, 2]}, table) == ({}, True)
    # learnt between two vain lookups: the figures cannot be fixed
    assert resolve_misses({"id-a": [40, 60]}, table) == ({}, False)
    assert resolve_misses({"id-b": [20, 90]}, table, rename=False) == ({}, False)


def test_not_exact_falls_back_to_one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    import analyzer.shards as shards

    calls = []

    def never_exact(misses: dict, table: dict, rename: bool = True) -> tuple[dict, bool]:
        calls.append(misses)
        return {}, False

    path = str(SAMPLES / "produce_fetch_rdkafka_zstd_ipv6.pcap")   # a Fetch v13+ with topic ids
    args = ("--by", "api,topic,partition")
    one = _stats(*args, "-j", "1", path)
    monkeypatch.setattr(shards, "resolve_misses", never_exact)
    assert _stats(*args, "-j", "2", path) == one
    assert calls


def test_bad_capture_is_one_line_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"this is not a capture at all")
    res = CliRunner().invoke(main, ["stats", "-j", "2", str(bad)])
    assert res.exit_code != 0
    assert "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1, res.output


def test_cut_capture_is_warned_about_with_and_without_workers(tmp_path: Path) -> None:
    src = SAMPLES / "group_rdkafka.pcap"
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(src.read_bytes()[:30000])
    outs = []
    for j in ("1", "2"):
        res = CliRunner().invoke(main, ["stats", "-f", "json", "-j", j, str(cut)])
        assert res.exit_code == 0, res.output
        assert res.stderr == f"warning: {cut}: capture ends inside packet 180\n"
        outs.append(res.stdout)
    assert outs[0] == outs[1] and json.loads(outs[0])["groups"]
    res = CliRunner().invoke(main, ["stats", "-f", "json", "-j", "2", str(src)])
    assert res.stderr == ""


def test_auto_jobs_only_for_big_files(tmp_path: Path) -> None:
    path, _ = _flows(3, tmp_path)
    assert auto_jobs([str(path)]) == 1
    assert auto_jobs([str(tmp_path / "missing.pcap")]) == 1


def test_plot_with_workers(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "lat.html"
    res = CliRunner().invoke(main, ["stats", "-j", "2", "--plot", str(out), str(SAMPLE_FILES[0])])
    assert res.exit_code == 0, res.output
    assert out.stat().st_size > 1000
