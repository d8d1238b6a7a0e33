"""`stats --jobs N`: a capture shared out by connection over forked workers gives the
figures one process gives (analyzer.shards)."""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from analyzer._core import Stream, open_capture
from analyzer.cli import main
from analyzer.model import Packet
from analyzer.shards import TopicNames, auto_jobs, learnt_ids, resolve_misses
from tests.conftest import SAMPLES, SHARED_CAPTURES
from tests.pcapgen import (
    CoreRun,
    RawPacket,
    StreamData,
    StreamEnd,
    StreamGap,
    TcpFlow,
    conn_key,
    encap,
    frame_bytes,
    ip_packet,
    kafka_request,
    kafka_response,
    stream_events,
    write_pcap,
)

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


def test_many_captures_with_workers(tmp_path: Path) -> None:
    """Sixty captures read by two workers each: the engine reads the 120 parts' tables in
    one scan, within its memory limit (a view per part ran out of it), and gives what one
    process gives."""
    files = []
    for i in range(60):
        f = tmp_path / f"c{i:02d}.pcap"
        f.write_bytes(SAMPLE_FILES[i % len(SAMPLE_FILES)].read_bytes())
        files.append(str(f))
    args = ("--by", "api,conn", "--top", "5")
    assert _stats(*args, "-j", "2", *files) == _stats(*args, "-j", "1", *files)


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


def shard_of(pkt: Packet, n: int) -> int:
    """The share (0..n-1) that keeps ``pkt``: the one ``Stream(share=(k, n))`` of the core
    that counts it when fed it alone (exactly one does)."""
    kept = []
    for k in range(n):
        stream = Stream(share=(k, n))
        stream.feed([tuple(pkt)])
        assert stream.packets in (0, 1)
        if stream.packets:
            kept.append(k)
    assert len(kept) == 1, (pkt, kept)
    return kept[0]


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
    # IPv6 and other link types are symmetric too (the share is of the addresses and ports,
    # not of the link layer)
    v6 = TcpFlow(("fd00::1", 40000), ("fd00::2", 9092), ts=1.0)
    shards = set()
    for p in v6.handshake() + v6.send(0, b"x") + v6.send(1, b"y"):
        data, orig = frame_bytes(p, 1)
        shards.add(shard_of(Packet(1, p.ts, 1, data, orig), 5))
        raw = encap(data[14:], 101)          # raw IP
        shards.add(shard_of(Packet(1, p.ts, 101, raw, len(raw)), 5))
        sll = encap(data[14:], 113)          # Linux cooked
        shards.add(shard_of(Packet(1, p.ts, 113, sll, len(sll)), 5))
    assert len(shards) == 1
    # what is no TCP segment goes to share 0
    udp = bytearray(ip_packet(pkts[0]))
    udp[9] = 17
    arp = b"\xff" * 6 + b"\x02" * 6 + b"\x08\x06" + bytes(28)
    for lt, data in ((1, encap(bytes(udp), 1)), (1, arp), (1, b"\x02" * 10), (147, bytes(60))):
        assert conn_key(lt, data, len(data))[0] is None
        assert all(shard_of(Packet(1, 1.0, lt, data, len(data)), n) == 0 for n in (2, 3, 5))


def _mixed_capture(tmp: Path) -> Path:
    """30 connections, an IPv6 one, port reuse on one 4-tuple, and packets that are no TCP
    segment (UDP, ARP, a cut header)."""
    _path, pkts = _flows(30, tmp)
    out: list = list(pkts)
    v6 = TcpFlow(("fd00::1", 40000), ("fd00::2", 9092), ts=1040.0)
    out += v6.handshake() + v6.send(0, kafka_request(18, 0, 1)) + v6.send(1, kafka_response(1, b"\0" * 6))
    for i in range(3):          # the same 4-tuple three times
        flow = TcpFlow(("10.0.0.77", 45000), ("10.9.9.9", 9092), isn=(1000 + 99 * i, 5000 + 77 * i),
                       ts=1050.0 + i)
        out += flow.handshake() + flow.send(0, kafka_request(18, 0, i)) + flow.fin(0) + flow.fin(1)
    udp = bytearray(encap(ip_packet(pkts[3]), 1))
    udp[14 + 9] = 17
    out.insert(5, RawPacket(pkts[4].ts, bytes(udp)))
    out.insert(40, RawPacket(pkts[39].ts, b"\xff" * 6 + b"\x02" * 6 + b"\x08\x06" + bytes(28)))
    out.insert(70, RawPacket(pkts[69].ts, encap(ip_packet(pkts[69]), 1)[:30]))
    path = tmp / "mixed.pcap"
    write_pcap(str(path), out)
    return path


def _stories(run: CoreRun, events: list) -> dict[int, tuple]:
    """Every connection (by id) with its fields and everything its events delivered."""
    got: dict[int, list] = {c.id: [] for c in run.conns}
    for ev in events:
        if isinstance(ev, StreamData):
            got[ev.conn.id].append(("data", ev.direction, ev.offset, ev.data, ev.ts, ev.index))
        elif isinstance(ev, StreamGap):
            got[ev.conn.id].append(("gap", ev.direction, ev.offset, ev.length, ev.reason, ev.index))
        else:
            assert isinstance(ev, StreamEnd)
            got[ev.conn.id].append(("end", ev.direction, ev.reason, ev.index))
    return {c.id: ((c.a, c.b, c.syn_seen, c.closed, c.closed_by, c.lost_from, c.first_ts, c.last_ts),
                   tuple(got[c.id])) for c in run.conns}


@pytest.mark.parametrize("name", ["mixed", "produce_fetch_rdkafka_zstd_ipv6.pcap",
                                  "produce_fetch_kafkapython_gzip_pcapng.pcapng", "group_rdkafka.pcap"])
def test_reader_share_is_shard_of(name: str, tmp_path: Path) -> None:
    """A core Stream told to keep share k counts exactly the packets shard_of puts in k
    (both directions and every reuse of a connection in one share, what is no TCP segment
    in share 0), while every packet of the capture is read; the shares' connections put
    together are the whole capture's, numbered by their first packet, with the same bytes,
    gaps, ends, skips and counters."""
    path = _mixed_capture(tmp_path) if name == "mixed" else SAMPLES / name
    if not path.exists():
        pytest.skip(f"{name} not in samples/")
    with open_capture(str(path)) as r:
        every = list(map(Packet._make, r))
    assert every
    share = [shard_of(p, 3) for p in every]
    by_key: dict[tuple, set[int]] = {}
    for p, k in zip(every, share, strict=True):
        key, reason = conn_key(p.linktype, p.data, p.orig_len)
        if key is None:
            assert reason and k == 0, (p.index, reason, k)
        else:
            by_key.setdefault(key, set()).add(k)
    assert by_key and all(len(ks) == 1 for ks in by_key.values())
    whole_cap, whole, whole_events = stream_events(str(path), ids_from_index=True)
    assert whole_cap.packets == whole.stream.packets == len(every)
    stories = _stories(whole, whole_events)
    got: dict[int, tuple] = {}
    skips: dict[str, int] = {}
    counters: dict[str, int] = {}
    first_indexes: list[int] = []
    total = 0
    for k in range(3):
        cap, run, events = stream_events(str(path), share=(k, 3), ids_from_index=True)
        assert cap.packets == len(every)                        # every packet is read
        assert run.stream.packets == share.count(k)             # and its own counted
        total += run.stream.packets
        mine = _stories(run, events)
        assert not set(mine) & set(got)
        got.update(mine)
        for what, n in run.stream.skips.items():
            skips[what] = skips.get(what, 0) + n
        for what, n in run.counters.items():
            counters[what] = counters.get(what, 0) + n
        first_indexes += run.stream.first_indexes
        assert all(share[i - 1] == k for i in run.stream.first_indexes)
    assert total == len(every)
    assert got == stories
    assert skips == whole.stream.skips
    assert counters == whole.counters
    assert sorted(first_indexes) == whole.stream.first_indexes == sorted(stories)
    if name == "mixed":
        assert len(stories) == 30 + 1 + 3
        assert sum(skips.values()) == 3 and whole.counters.get("port reuse") == 2


def test_connection_numbers_match_one_process(tmp_path: Path) -> None:
    path, _ = _flows(30, tmp_path)
    args = ("--by", "conn", "--top", "30")
    one = _stats(*args, "-j", "1", str(path))
    assert [g["conn"] for g in json.loads(one)["groups"]] == list(range(30))
    assert _stats(*args, "-j", "4", str(path)) == one


def _table_rows(db: Any) -> dict[str, list[dict[str, Any]]]:
    """Every row of the tables the core builds, of an engine connection (what stats'
    figures read, and all its workers write)."""
    out = {}
    for t in ("exchanges", "partitions", "batches", "lag"):
        cur = db.execute(f"SELECT * FROM {t}")
        cols = [d[0] for d in cur.description]
        out[t] = sorted((dict(zip(cols, r, strict=True)) for r in cur.fetchall()), key=repr)
    return out


RENAMING = [(SAMPLES / "produce_fetch_rdkafka_zstd_ipv6.pcap", 2, {"01a2007f-b616-73f0-ba86-8f75d55bfef2": "v6"}),
            (SAMPLES / "produce_fetch_rdkafka_none.pcap", 3, {"01a2007f-7d3b-7881-82b4-3180686d9c73": "plain"}),
            (SHARED_CAPTURES / "comp_all_rdkafka_mock3.pcap", 3,
             {"44c08efe-c51f-4c6f-b861-d64d91cb0616": "mock-gzip", "2ead55a5-b97c-4e6e-b982-d5696c79b457": "mock-lz4"})]


@pytest.mark.parametrize(("path", "jobs", "ids"), RENAMING, ids=lambda v: v.name if isinstance(v, Path) else None)
def test_worker_tables_are_one_process_tables(path: Path, jobs: int, ids: dict[str, str], tmp_path: Path) -> None:
    """The tables the workers of ``stats -j N`` write (those the core builds, what the
    figures read), as the parent's engine reads them (its views over the parts), are those
    one process writes (``export``): every row, with the connections numbered as one process
    numbers them and the topic ids a worker met before it learnt them (Fetch v13+; learnt on
    another worker's connections) named wherever a row holds a topic (the exchanges'
    partitions, topic_partitions and fetch sessions' asks, the other tables' topic)."""
    import dataclasses

    from analyzer import engine
    from analyzer.pipeline import Options
    from analyzer.runs import Decode
    from analyzer.shards import run_stats_sharded
    from dissectors.context import DecodeContext

    if not path.exists():
        pytest.skip(f"{path.name} is not present")
    res = CliRunner().invoke(main, ["export", str(path), "--out", str(tmp_path / "one")])
    assert res.exit_code == 0, res.output
    want = _table_rows(engine.connect([str(tmp_path / "one")], str(tmp_path / "spill")))
    sharded = run_stats_sharded(str(path), Options(decode=Decode.LITE_TOPICS), DecodeContext(),
                                str(tmp_path / "workers"), jobs)
    assert sharded.exact and len(sharded.parts) == jobs
    # (the ids some worker could not name itself: what this capture tests)
    assert {k: v for part in sharded.parts for k, v in part.rename.items()} == ids
    assert _table_rows(engine.connect([], str(tmp_path / "spill"), sharded.parts)) == want
    named = {p["topic"] for r in want["exchanges"] for p in r["partitions"] + r["topic_partitions"]}
    assert set(ids.values()) <= named and not set(ids) & named
    # the workers' rows as they wrote them: the ids stay ids where the names were not known
    bare = _table_rows(engine.connect([], str(tmp_path / "spill"),
                                      [dataclasses.replace(part, rename={}) for part in sharded.parts]))
    assert bare["exchanges"] != want["exchanges"] and bare["partitions"] != want["partitions"]


def _learn(events: list[tuple[int, str, str]], shares: int = 1) -> list[TopicNames]:
    """TopicNames per share after learning ``events`` (packet, topic id, name), each event
    going to the share its packet number falls to."""
    out = [TopicNames() for _ in range(shares)]
    for at, tid, name in sorted(events):
        names = out[at % shares]
        names.now = at
        names[tid] = name
    return out


def _runs(events: list[tuple[int, str, str]], shares: int = 1) -> list[list]:
    return [run for names in _learn(events, shares) for run in names.learnt]


def test_topic_id_resolution() -> None:
    table = learnt_ids(_runs([(50, "id-a", "alpha"), (10, "id-b", "beta"), (70, "id-b", "beta")]))
    assert table["id-b"] == ([10, 70], ["beta", "beta"], True, True)
    # learnt elsewhere before the first vain lookup: renamed, exact
    assert resolve_misses({"id-b": [20, 90]}, table) == ({"id-b": "beta"}, True)
    # nobody learnt it before the last vain lookup: one process could not name it either
    assert resolve_misses({"id-a": [5, 40], "id-c": [1, 2]}, table) == ({}, True)
    # learnt between two vain lookups: the figures cannot be fixed
    assert resolve_misses({"id-a": [40, 60]}, table) == ({}, False)
    assert resolve_misses({"id-b": [20, 90]}, table, rename=False) == ({}, False)


def test_learnings_kept_as_runs() -> None:
    # every Metadata answer teaches the same ids again: a run per name, not an entry per answer
    names = _learn([(at, tid, "orders" if tid == "id-o" else "users") for at in range(1, 10_001, 7)
                    for tid in ("id-o", "id-u")])[0]
    assert names.learnt == [[1, 9997, "id-o", "orders", 1429], [1, 9997, "id-u", "users", 1429]]
    names.now = 10_005
    names["id-o"] = "orders-2"           # another name starts another run
    names.now = 10_009
    names["id-o"] = "orders"
    assert [r[:4] for r in names.learnt[2:]] == [[10_005, 10_005, "id-o", "orders-2"],
                                                 [10_009, 10_009, "id-o", "orders"]]
    assert dict(names) == {"id-o": "orders", "id-u": "users"}


def _answers(events: list[tuple[int, str, str]], tid: str, end: int) -> list[str | None]:
    """What one process, which learns every event in packet order, names ``tid`` at each packet."""
    out: list[str | None] = []
    for now in range(end):
        seen = [(at, name) for at, t, name in events if t == tid and at < now]
        out.append(max(seen)[1] if seen else None)
    return out


def _replayed(table: dict, tid: str, end: int) -> list[str | None]:
    names = TopicNames(table)
    got: list[str | None] = []
    for now in range(end):
        names.now = now
        got.append(names.get(tid))
    return got


@pytest.mark.parametrize("seed", range(40))
def test_learnt_runs_replay_what_one_process_learnt(seed: int) -> None:
    """Learnt by three shares as runs, the table answers at every packet as the events would,
    and says when it cannot: only an id given two names on interleaved connections."""
    rnd = random.Random(seed)
    events: list[tuple[int, str, str]] = []
    for at in sorted(rnd.sample(range(1, 400), 60)):
        tid = rnd.choice(["id-a", "id-b"])
        # id-a always has one name; id-b sometimes takes a second one
        name = "alpha" if tid == "id-a" else rnd.choice(["beta", "beta", "beta", "gamma"] if seed % 2 else ["beta"])
        events.append((at, tid, name))
    table = learnt_ids(_runs(events, shares=3))
    full = learnt_ids([[at, at, tid, name, 1] for at, tid, name in events])     # every learning kept
    for tid, (at, names, exact, one_name) in full.items():
        assert exact
        # all resolve_misses reads
        assert table[tid].at[0] == at[0] and set(table[tid].names) == set(names)
        assert table[tid].one_name == one_name == (len(set(names)) == 1)
        if table[tid][2]:
            assert _replayed(table, tid, 410) == _answers(events, tid, 410)
        else:
            assert len(set(names)) > 1
    assert table["id-a"][2]


def test_interleaved_names_are_not_exact() -> None:
    # share 0 learns beta at 10, 12, 14; share 1 gamma at 11 (inside that run): at 13 one
    # process names it beta (12), which the run's ends (10, 14) cannot tell
    events = [(10, "id", "beta"), (12, "id", "beta"), (14, "id", "beta"), (11, "id", "gamma")]
    runs = [r for names in (_learn(events[:3])[0], _learn(events[3:])[0]) for r in names.learnt]
    assert learnt_ids(runs)["id"][2] is False
    # a run with nothing learnt between its ends hides nothing: exact (at 31: beta, from 30)
    events = [(10, "id", "beta"), (30, "id", "beta"), (20, "id", "gamma")]
    runs = [r for names in (_learn(events[:2])[0], _learn(events[2:])[0]) for r in names.learnt]
    table = learnt_ids(runs)
    assert table["id"][2] is True
    assert _replayed(table, "id", 40) == _answers(events, "id", 40)
    # the same names one after the other: exact
    events = [(10, "id", "beta"), (12, "id", "beta"), (14, "id", "beta"), (20, "id", "gamma")]
    runs = [r for names in (_learn(events[:3])[0], _learn(events[3:])[0]) for r in names.learnt]
    table = learnt_ids(runs)
    assert table["id"][2] is True
    assert _replayed(table, "id", 30) == _answers(events, "id", 30)


def test_spark_counts_the_ids_it_cannot_replay() -> None:
    from analyzer.sinks.stats import Stories
    from analyzer.spark.gather import JobResult, inexact_ids, learnt_table

    beta = _learn([(10, "id", "beta"), (12, "id", "beta"), (14, "id", "beta")])[0]
    gamma = _learn([(11, "id", "gamma")])[0]        # inside beta's run, on another connection
    ok = _learn([(5, "id2", "delta"), (9, "id2", "delta")])[0]
    table = learnt_table([(0, {"learnt": beta.learnt}), (0, {"learnt": gamma.learnt}), (1, {"learnt": ok.learnt})])
    assert inexact_ids(table) == 1
    res = JobResult([], Stories(), [], {}, {})
    res.set_inexact(0)
    assert "topic_ids_inexact" not in res.summary
    res.set_inexact(inexact_ids(table))
    assert res.summary["topic_ids_inexact"] == 1


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


# -- check --jobs ------------------------------------------------------------------------------------

def _check(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, ["check", *args])
    assert res.exit_code in (0, 1), res.output
    return res.exit_code, res.stdout, res.stderr


def test_check_sharded_equals_one_process_on_every_capture() -> None:
    """Findings, their order, the checker's counts and the exit status: what one process
    gives (text and JSON), on the samples, the shared captures and the damaged exchanges."""
    findings = 0
    for path in SAMPLE_FILES + SHARED_FILES:
        one = _check("-f", "json", "-j", "1", str(path))
        assert _check("-f", "json", "-j", "3", str(path)) == one, path.name
        findings += len(json.loads(one[1])["captures"][0]["findings"])
        if path.parent == SAMPLES:
            assert _check("-j", "2", str(path)) == _check("-j", "1", str(path)), path.name
    assert findings >= (50 if SHARED_FILES else 13), findings


def test_check_sharded_on_damaged_exchanges_and_timelines(tmp_path: Path) -> None:
    from tests.lean import damaged_capture

    cap, _ = damaged_capture(tmp_path / "damaged.pcap", seed=13)
    one = _check("-f", "json", "-j", "1", str(cap))
    assert _check("-f", "json", "-j", "2", str(cap)) == one
    assert len(json.loads(one[1])["captures"][0]["findings"]) > 50
    group = str(SAMPLES / "group_rdkafka.pcap")
    code, out, _ = _check("-f", "json", "-j", "1", "--timeline", "kws-group", group)
    assert code == 0 and json.loads(out)["events"]
    assert _check("-f", "json", "-j", "2", "--timeline", "kws-group", group) == (code, out, "")


def test_check_not_exact_falls_back_to_one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    import analyzer.shards as shards

    calls = []

    def never_exact(misses: dict, table: dict, rename: bool = True) -> tuple[dict, bool]:
        calls.append(misses)
        return {}, False

    path = str(SAMPLES / "produce_fetch_rdkafka_zstd_ipv6.pcap")
    one = _check("-f", "json", "-j", "1", path)
    monkeypatch.setattr(shards, "resolve_misses", never_exact)
    assert _check("-f", "json", "-j", "2", path) == one
    assert calls


def test_check_with_workers_on_bad_and_cut_captures(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"this is not a capture at all")
    res = CliRunner().invoke(main, ["check", "-j", "2", str(bad)])
    assert res.exit_code == 1 and "Traceback" not in res.output
    assert res.output == f"kafkawire-sniff: error: {bad}: not a pcap or pcapng file\n"
    src = SAMPLES / "group_rdkafka.pcap"
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(src.read_bytes()[:30000])
    outs = [_check("-f", "json", "-j", j, str(cut)) for j in ("1", "2")]
    assert outs[0] == outs[1] and outs[0][2] == f"warning: {cut}: capture ends inside packet 180\n"
