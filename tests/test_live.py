"""``kafkawire-sniff live``: the capture/feed loop, the pcap it writes, its errors, and a real run.

The real run (marked slow, run by default, ~20 s) starts Tansu and a librdkafka client on
loopback, runs ``live -i lo`` in a subprocess while the client works, and checks that the
exchanges it printed are exactly those ``read`` finds in the pcap it wrote, and that they
carry what the client did (topic, records produced and fetched).
"""
from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from analyzer import live
from analyzer.model import Packet

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "samples"
sys.path.insert(0, str(Path(__file__).resolve().parent))
import lab  # noqa: E402


def _pipeline_module() -> Any:
    try:
        from analyzer import pipeline
    except ImportError as e:
        pytest.skip(f"analyzer.pipeline not importable yet: {e}")
    return pipeline


def _sample_packets(name: str) -> tuple[list[tuple[float, bytes, int]], int]:
    from analyzer._core import open_capture

    pkts = []
    linktype = 1
    with open_capture(str(SAMPLES / name)) as reader:
        for _i, ts, lt, data, orig_len in reader:
            pkts.append((ts, data, orig_len))
            linktype = lt
    return pkts, linktype


def _key(d: dict[str, Any]) -> tuple[Any, ...]:
    return (d["conn"], d["api_key"], d["api_version"], d["correlation_id"], d["status"])


# ---------------------------------------------------------------- the loop with a fake pipeline


class FakePipeline:
    """One 'exchange' per packet whose first data byte is odd; tracks what the loop called."""

    def __init__(self) -> None:
        self.fed: list[Packet] = []
        self.expired: list[float] = []
        self.finished = 0

    def feed_packets(self, packets: list[tuple[Any, ...]]) -> list[Any]:
        fed = [Packet(*p) for p in packets]
        self.fed += fed
        return [SimpleNamespace(index=p.index) for p in fed if p.data[0] % 2]

    def expire(self, now: float) -> list[Any]:
        self.expired.append(now)
        return []

    def finish(self) -> list[Any]:
        self.finished += 1
        return [SimpleNamespace(index="end")]


def _packets(n: int) -> list[tuple[float, bytes, int]]:
    return [(1_700_000_000.0 + i * 0.001, bytes([i % 256]) * 60, 60) for i in range(n)]


def test_loop_feeds_every_packet_in_order_and_finishes() -> None:
    pipe = FakePipeline()
    got: list[Any] = []
    res = live.LiveSession(pipe, live.ReplaySource(_packets(25), per_read=4), got.append,
                           handle_signals=False).run()
    assert res.reason == "source ended"
    assert [p.index for p in pipe.fed] == list(range(1, 26))
    assert all(p.linktype == 1 and p.orig_len == 60 for p in pipe.fed)
    assert pipe.fed[3].ts == pytest.approx(1_700_000_000.003)
    assert [e.index for e in got] == [2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, "end"]
    assert pipe.finished == 1 and res.packets == 25 and res.exchanges == 13


def test_count_stops_after_n_exchanges_without_showing_more() -> None:
    pipe = FakePipeline()
    got: list[Any] = []
    src = live.ReplaySource(_packets(100), per_read=50)
    res = live.LiveSession(pipe, src, got.append, count=3, handle_signals=False).run()
    assert res.reason == "count" and [e.index for e in got] == [2, 4, 6]
    # a read's packets cross into the core as one batch: the read that held the third
    # exchange is fed whole, the next is never read; the pipeline is finished (the summary
    # counts every connection) without showing what finishing reported
    assert len(pipe.fed) == 50 and res.packets == 50 and pipe.finished == 1 and src.closed


def test_count_reached_inside_a_batch_still_analyses_the_batch() -> None:
    """The real pipeline hands a batch's exchanges out as it analyses the batch: when the
    count is reached inside it, the rest is still analysed (the summary counts every
    connection of the packets read) and finishing works (it crashed on a connection the
    unread rest of the batch had opened)."""
    from analyzer._core import open_capture
    from analyzer.pipeline import Options, Pipeline

    with open_capture(str(SAMPLES / "group_rdkafka.pcap")) as r:
        pkts = [(ts, data, orig_len) for _i, ts, _lt, data, orig_len in r][:120]
    pipe = Pipeline(Options())
    got: list[Any] = []
    res = live.LiveSession(pipe, live.ReplaySource(pkts, 1, per_read=120), got.append, count=1,
                           handle_signals=False).run()
    assert res.reason == "count" and res.exchanges == 1 and len(got) == 1
    assert pipe.summary.connections == 8 and pipe.summary.packets == 120


def test_duration_expire_and_tick_use_the_clock() -> None:
    now = [1000.0]

    def clock() -> float:
        now[0] += 0.1
        return now[0]

    class Idle:
        linktype = 1

        def read(self, timeout: float) -> list[tuple[float, bytes, int]]:
            assert 0 < timeout <= 0.25
            return []

        def close(self) -> None:
            pass

    pipe = FakePipeline()
    ticks: list[float] = []
    res = live.LiveSession(pipe, Idle(), lambda e: None, duration=3.0, on_tick=ticks.append, clock=clock,
                           handle_signals=False).run()
    assert res.reason == "duration"
    assert 5 <= len(pipe.expired) <= 7          # every 0.5 s of a 3 s run
    assert 2 <= len(ticks) <= 3                 # every second
    assert pipe.finished == 1


def test_sigterm_stops_cleanly() -> None:
    pipe = FakePipeline()
    src = live.ReplaySource(_packets(10_000), per_read=1, pace=0.001)
    session = live.LiveSession(pipe, src, lambda e: None)
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        res = session.run()
    finally:
        timer.cancel()
    assert res.reason == "terminated" and 0 < res.packets < 10_000 and pipe.finished == 1
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_pcap_sink_round_trips_through_our_reader(tmp_path: Path) -> None:
    from analyzer._core import open_capture
    from analyzer.model import Packet

    path = tmp_path / "w.pcap"
    sink = live.PcapSink(str(path), 113)
    sink.write(1_700_000_000.123456789, b"\x01" * 40, 40)
    sink.write(1_700_000_001.5, b"\x02" * 20, 1500)
    sink.close()
    with open_capture(str(path)) as reader:
        got = list(map(Packet._make, reader))
    assert [(p.index, p.linktype, p.data, p.orig_len) for p in got] == [(1, 113, b"\x01" * 40, 40),
                                                                        (2, 113, b"\x02" * 20, 1500)]
    assert got[0].ts == pytest.approx(1_700_000_000.123456789, abs=1e-6)


def test_port_filter() -> None:
    assert live.port_filter([9092]) == "tcp and (port 9092)"
    assert live.port_filter([9093, 9092, 9093]) == "tcp and (port 9092 or port 9093)"
    assert live.port_filter([]) == "tcp"


# ---------------------------------------------------------------- the loop with the real pipeline


@pytest.mark.parametrize("name", ["produce_fetch_rdkafka_gzip.pcap", "group_rdkafka.pcap"])
def test_replay_through_loop_equals_read(name: str) -> None:
    pipeline = _pipeline_module()
    from analyzer.sinks.output import exchange_to_json

    if not (SAMPLES / name).exists():
        pytest.skip(f"no sample {name}")
    pkts, lt = _sample_packets(name)
    opts = pipeline.Options(ports=(int(json.loads((SAMPLES / "manifest.json").read_text())
                                       [name.rsplit(".", 1)[0]]["broker_ports"][0]),))
    got: list[Any] = []
    live.LiveSession(pipeline.Pipeline(opts), live.ReplaySource(pkts, lt, per_read=7), got.append,
                     handle_signals=False).run()
    want = [exchange_to_json(e, trees=False) for e in pipeline.Run(str(SAMPLES / name), opts)]
    mine = [exchange_to_json(e, trees=False) for e in got]
    assert sorted(map(_key, mine)) == sorted(map(_key, want))
    assert len(mine) > 10


def test_kernel_drops_are_read_every_tick_and_shown() -> None:
    """The kernel's drop count is read at each tick (not only at the end), so `live --stats`
    shows drops while it runs; the dashboard says them in its head line."""
    now = [1000.0]

    def clock() -> float:
        now[0] += 0.1
        return now[0]

    class Dropping:
        linktype = 1

        def __init__(self) -> None:
            self.dropped = 0
            self.reads = 0

        def read(self, timeout: float) -> list[tuple[float, bytes, int]]:
            return []

        def kernel_stats(self) -> tuple[int, int]:
            self.reads += 1
            self.dropped += 7
            return 10, 7

        def close(self) -> None:
            pass

    src = Dropping()
    seen: list[int] = []
    res = live.LiveSession(FakePipeline(), src, lambda e: None, duration=3.0,
                           on_tick=lambda t: seen.append(src.dropped), clock=clock, handle_signals=False).run()
    assert res.reason == "duration" and res.dropped == src.dropped
    # a tick a second over 3 s: the count grew while the session ran
    assert src.reads >= 2 and seen == sorted(seen) and seen[0] > 0
    from rich.console import Console

    dash = live.Dashboard("live on lo", clock=lambda: 1000.0)
    buf = io.StringIO()
    Console(file=buf, width=140).print(dash.renderable(1001.0))
    assert "kernel drops" not in buf.getvalue()          # not known (no live socket)
    dash.dropped = 0
    buf = io.StringIO()
    Console(file=buf, width=140).print(dash.renderable(1001.0))
    assert "kernel drops 0" in buf.getvalue()
    dash.dropped = 1234
    buf = io.StringIO()
    Console(file=buf, width=140).print(dash.renderable(1001.0))
    assert "kernel drops 1234" in buf.getvalue()


def test_dashboard_figures_and_render() -> None:
    pipeline = _pipeline_module()
    from rich.console import Console

    name = "group_rdkafka.pcap"
    exchanges = list(pipeline.Run(str(SAMPLES / name), pipeline.Options(ports=(0,))))
    t = [100.0]
    dash = live.Dashboard("live on lo", clock=lambda: t[0])
    assert len(exchanges) >= 60
    for i, ex in enumerate(exchanges[:60]):
        t[0] = 100.0 + i // 10 + 0.5          # ten exchanges in each second 100..105
        dash.add(ex)
    exchanges = exchanges[:60]
    rows = {r["api"]: r for r in dash.rows(106.5)}
    want = Counter(ex.api_name for ex in exchanges)
    assert {a: r["count"] for a, r in rows.items()} == dict(want)
    # per API, the figures of its exchanges: nearest-rank quantiles of their latencies (fewer
    # than 1000: exact), the error codes of their responses, the unanswered
    for api, r in rows.items():
        mine = [ex for ex in exchanges if ex.api_name == api]
        lats = sorted(ex.latency_ms for ex in mine if ex.latency_ms is not None)
        assert r["p50"] == (lats[-(-len(lats) // 2) - 1] if lats else None), api
        assert r["p99"] == (lats[-(-len(lats) * 99 // 100) - 1] if lats else None), api
        assert r["max"] == (lats[-1] if lats else None), api
        assert r["errors"] == sum(len(ex.error_codes) for ex in mine), api
        assert r["unanswered"] == sum(ex.status == "unanswered" for ex in mine), api
    assert rows["Heartbeat"]["p50"] is not None and rows["Heartbeat"]["p99"] >= rows["Heartbeat"]["p50"]
    assert sum(dash.rates(106.5).values()) == pytest.approx(10.0)   # seconds 101..105: 50 in 5 s
    assert sum(dash.rates(103.5).values()) == pytest.approx(30 / 3)  # only 3 whole seconds since the start
    buf = io.StringIO()
    Console(file=buf, width=140).print(dash.renderable(106.5))
    text = buf.getvalue()
    assert "Heartbeat" in text and "kws-member-0" in text and "top clients" in text


def _exchange(api: str, lat: float | None, client: tuple[str, str] = ("app", "10.0.0.1"),
              errors: tuple[str, ...] = (), seq: int = 0) -> Any:
    """An exchange of ``api`` answered ``lat`` ms after its request (None: unanswered)."""
    from analyzer.model import Conn, Endpoint, Exchange, Frame

    conn = Conn(0, Endpoint(client[1], 40000), Endpoint("10.0.0.9", 9092), client_dir=0)
    req = Frame(conn, 0, b"", 16, 1, 1, 0.0, 0.0, 0)
    resp = Frame(conn, 1, b"", 16, 2, 2, lat / 1000, lat / 1000, 0) if lat is not None else None
    return Exchange(conn=conn, protocol="kafka", api_key=0, api_name=api, api_version=0, correlation_id=seq,
                    client_id=client[0], request=req, response=resp,
                    status="unanswered" if resp is None else "ok", error_codes=list(errors), seq=seq)


def test_dashboard_closing_report() -> None:
    """The closing report of ``live --stats``: per API its requests, average rate since the
    start, nearest-rank p50/p99 and the max latency, error codes and unanswered requests;
    the top clients and the error codes, as the dashboard showed them."""
    from rich.console import Console

    t = [1000.0]
    dash = live.Dashboard("live on lo", clock=lambda: t[0])
    for i in range(1, 101):         # Produce answered in 1..100 ms; every 10th with an error, one with two
        errors = ("NOT_LEADER_OR_FOLLOWER",) + (("REQUEST_TIMED_OUT",) if i == 50 else ()) if i % 10 == 0 else ()
        t[0] = 1000.0 + i / 10
        dash.add(_exchange("Produce", float(i), errors=errors, seq=i))
    consumer = ("consumer-1", "10.0.0.2")
    for i, lat in enumerate((500.0, 2.0, None, 7.0)):
        dash.add(_exchange("Fetch", lat, client=consumer, seq=200 + i))
    rows = {r["api"]: r for r in dash.rows(1020.0)}
    assert list(rows) == ["Produce", "Fetch"]                       # most requests first
    got = {a: {k: (round(v, 9) if isinstance(v, float) else v) for k, v in r.items() if k != "rate"}
           for a, r in rows.items()}
    assert got == {
        "Produce": {"api": "Produce", "count": 100, "avg_rate": 5.0, "p50": 50.0, "p99": 99.0, "max": 100.0,
                    "errors": 11, "unanswered": 0},
        "Fetch": {"api": "Fetch", "count": 4, "avg_rate": 0.2, "p50": 7.0, "p99": 500.0, "max": 500.0,
                  "errors": 0, "unanswered": 1},
    }
    buf = io.StringIO()
    Console(file=buf, width=100).print(dash.report(1020.0))
    # (each table's heading is underlined by a rule as wide as the table: left out here)
    lines = [line.split() for line in buf.getvalue().splitlines() if line.strip("─ ")]
    assert " ".join(lines[0]) == "live --stats: per API over 20.0 s, 104 exchanges (avg/s: since the start; latency in ms)"
    assert lines[1:4] == [
        ["API", "reqs", "avg/s", "p50", "p99", "max", "errors", "unanswered"],
        ["Produce", "100", "5.0", "50.0", "99.0", "100", "11", "0"],
        ["Fetch", "4", "0.2", "7.00", "500", "500", "0", "1"],
    ]
    assert [" ".join(x) for x in lines[4:]] == [
        "top clients", "client_id address requests errors", "app 10.0.0.1 100 10", "consumer-1 10.0.0.2 4 1",
        "errors", "error count", "NOT_LEADER_OR_FOLLOWER 10", "REQUEST_TIMED_OUT 1"]
    # without a response code in error: no errors table
    quiet = live.Dashboard("live on lo", clock=lambda: 1000.0)
    quiet.add(_exchange("Metadata", 1.0))
    buf = io.StringIO()
    Console(file=buf, width=100).print(quiet.report(1001.0))
    assert "errors" not in buf.getvalue().splitlines()
    assert buf.getvalue().splitlines()[3].split() == ["Metadata", "1", "1.0", "1.00", "1.00", "1.00", "0", "0"]


def test_dashboard_latencies_stay_in_bounded_memory() -> None:
    """Latencies wait in a short list (at most SETTLE_EVERY) before the API's Quantiles takes
    them: exact up to EXACT_LIMIT values, then the bounded sketch, within its relative
    accuracy; count and max stay exact."""
    from analyzer._core import EXACT_LIMIT, RELATIVE_ACCURACY

    dash = live.Dashboard("live on lo", clock=lambda: 1000.0)
    n = 5000
    longest = 0
    for i in range(1, n + 1):
        dash.add(_exchange("Fetch", float(i), seq=i))
        longest = max(longest, len(dash.apis["Fetch"].pending))
    assert n > EXACT_LIMIT and longest == dash.SETTLE_EVERY - 1
    (r,) = dash.rows(1010.0)
    q = dash.apis["Fetch"].latency
    assert not dash.apis["Fetch"].pending and q.count == n and not q.exact
    assert r["count"] == n and r["max"] == pytest.approx(n)
    assert r["p50"] == pytest.approx(n / 2, rel=RELATIVE_ACCURACY)
    assert r["p99"] == pytest.approx(n * 0.99, rel=RELATIVE_ACCURACY)


def test_dashboard_rate_at_start_is_the_average_since_the_start() -> None:
    """Started at .9 of a second, three exchanges in the next second: a second later the
    recent rate is what the average says (3.0), not 0.0 (the whole seconds before the
    current one were only the start's last tenth); later, the window is cut at the start."""
    pipeline = _pipeline_module()
    exchanges = list(pipeline.Run(str(SAMPLES / "group_rdkafka.pcap"), pipeline.Options(ports=(0,))))[:4]
    t = [100.9]
    dash = live.Dashboard("live on lo", clock=lambda: t[0])
    for ex, at in zip(exchanges, (101.0, 101.3, 101.6), strict=False):
        t[0] = at
        dash.add(ex)
    avg = sum(r["avg_rate"] for r in dash.rows(101.9))
    assert avg == pytest.approx(3.0)
    assert sum(dash.rates(101.9).values()) == pytest.approx(avg)
    # before a whole second since the start: the average too
    assert sum(dash.rates(101.5).values()) == pytest.approx(sum(r["avg_rate"] for r in dash.rows(101.5)))
    assert sum(dash.rates(102.5).values()) == pytest.approx(3 / (102 - 100.9))   # from the start to second 102
    t[0] = 102.2
    dash.add(exchanges[3])
    assert sum(dash.rates(107.5).values()) == pytest.approx(1 / 5)               # seconds 102-106: one


# ---------------------------------------------------------------- errors, one line each


def _cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from analyzer.cli import main; main()", "live", *args],
                          capture_output=True, text=True, timeout=timeout, cwd=REPO)


def test_unknown_interface_lists_the_available_ones() -> None:
    r = _cli("-i", "nosuch0", "-d", "1")
    assert r.returncode == 1
    assert r.stderr.startswith("kafkawire-sniff: error: unknown interface 'nosuch0' (available: ")
    assert "lo" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_bpf_syntax_error_is_one_line() -> None:
    if lab.can_capture():
        pytest.skip(lab.can_capture())
    r = _cli("-i", "lo", "--bpf", "tcp prot 9092", "-d", "1")
    assert r.returncode == 1
    assert r.stderr.startswith("kafkawire-sniff: error: bad BPF filter 'tcp prot 9092'")
    assert len(r.stderr.strip().splitlines()) == 1


def test_no_interface_given() -> None:
    r = _cli("-d", "1")
    assert r.returncode == 2 and "choose an interface with -i (available:" in r.stderr


def test_capture_starts_before_the_pipeline_is_built() -> None:
    """`live --help` goes without the pipeline (the schema, the decoders); a capture says
    "capturing on" as soon as its socket is open and builds the pipeline after (the kernel
    queues the packets meanwhile): analyzer.pipeline is imported after that line."""
    def imported(lines: list[str]) -> int:
        return next(i for i, line in enumerate(lines) if re.search(r"\|\s+analyzer\.pipeline$", line))

    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "analyzer", "live", "--help"],
                       capture_output=True, text=True, timeout=60, cwd=REPO)
    assert r.returncode == 0 and "analyzer.pipeline" not in r.stderr
    if lab.can_capture():
        pytest.skip(lab.can_capture())
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "analyzer", "live", "-i", "lo", "-p", "1",
                        "-d", "0.3"], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stderr.splitlines()
    started = next(i for i, line in enumerate(lines) if line.startswith("capturing on lo (tcp and (port 1))"))
    assert started < imported(lines)


def test_live_alone_lists_the_interfaces() -> None:
    """`live` without -i (nor any other option) lists the interfaces, one a line, and exits 0."""
    r = _cli()
    assert r.returncode == 0, r.stderr
    names = r.stdout.splitlines()
    assert "lo" in names and names == sorted(names) and r.stderr == ""


def test_no_permission_says_root_or_cap_net_raw() -> None:
    if os.geteuid() != 0:
        r = _cli("-i", "lo", "-d", "1")
    else:
        setpriv = shutil.which("setpriv")
        if not setpriv:
            pytest.skip("setpriv not available to drop privileges")
        # same user, but without any capability: PF_PACKET sockets are refused
        r = subprocess.run([setpriv, "--inh-caps=-all", "--bounding-set=-all", "--", sys.executable, "-c",
                            "from analyzer.cli import main; main()", "live", "-i", "lo", "-d", "1"],
                           capture_output=True, text=True, timeout=30, cwd=REPO)
    assert r.returncode == 1, r.stderr
    assert "needs root or CAP_NET_RAW" in r.stderr and len(r.stderr.strip().splitlines()) == 1


# ---------------------------------------------------------------- a real run on loopback


@pytest.mark.slow
def test_live_on_loopback_matches_read_of_its_pcap(tmp_path: Path) -> None:
    _pipeline_module()
    why = lab.can_capture()
    if why:
        pytest.skip(why)
    try:
        broker = lab.start_tansu(lifetime=90, logdir=tmp_path)
    except lab.LabUnavailable as e:
        pytest.skip(f"no Tansu broker: {e}")
    pcap = tmp_path / "live.pcap"
    topic = "live-test"
    with broker:
        r = lab.run_workload(["create", "--bs", broker.bootstrap, "--topic", topic, "--partitions", "2"],
                             timeout=30, log=tmp_path / "create.log")
        assert r.returncode == 0, r.output
        out = open(tmp_path / "live.ndjson", "w")  # noqa: SIM115
        err = open(tmp_path / "live.err", "w")  # noqa: SIM115
        sniff = subprocess.Popen(
            [sys.executable, "-c", "from analyzer.cli import main; main()", "live", "-i", "lo",
             "-p", str(broker.port), "--format", "ndjson", "--write", str(pcap), "--duration", "12"],
            stdout=out, stderr=err, cwd=REPO, start_new_session=True)
        try:
            deadline = time.monotonic() + 15
            while "capturing on" not in (tmp_path / "live.err").read_text() and time.monotonic() < deadline:
                assert sniff.poll() is None, (tmp_path / "live.err").read_text()
                time.sleep(0.1)
            time.sleep(0.5)
            res = lab.run_workload(["pf", "--bs", broker.bootstrap, "--client", "rdkafka", "--codec", "lz4",
                                    "--topic", topic, "--n", "30", "--partitions", "2", "--headers",
                                    "--seed", "5", "--fetch-secs", "5"], timeout=40, log=tmp_path / "pf.log")
            assert res.returncode == 0, res.output
            rc = sniff.wait(timeout=30)
        finally:
            if sniff.poll() is None:
                os.kill(sniff.pid, signal.SIGKILL)
                sniff.wait(5)
            out.close()
            err.close()
    assert rc == 0, (tmp_path / "live.err").read_text()
    printed = [json.loads(line) for line in (tmp_path / "live.ndjson").read_text().splitlines()]
    r2 = subprocess.run([sys.executable, "-c", "from analyzer.cli import main; main()", "read", str(pcap),
                         "-p", str(broker.port), "--format", "ndjson"],
                        capture_output=True, text=True, timeout=60, cwd=REPO)
    assert r2.returncode == 0, r2.stderr
    read_back = [json.loads(line) for line in r2.stdout.splitlines()]
    assert sorted(map(_key, printed)) == sorted(map(_key, read_back))
    assert len(printed) >= 8
    # what the client did: 30 records produced to both partitions, 30 fetched back
    assert res.result["produced"] == {topic: 30} and res.result["consumed"] == {topic: 30}
    produced = sum(p["records"] or 0 for e in printed if e["api_name"] == "Produce" for p in e["partitions"]
                   if p["topic"] == topic)
    fetched = sum(p["records"] or 0 for e in printed if e["api_name"] == "Fetch" for p in e["partitions"]
                  if p["topic"] == topic)
    assert produced == 30 and fetched >= 30
    assert {e["api_name"] for e in printed} >= {"ApiVersions", "Metadata", "Produce", "Fetch"}
    assert all(e["status"] in ("ok", "unanswered") for e in printed)
    assert "packets captured" in (tmp_path / "live.err").read_text()


# ---------------------------------------------------------------- every way of stopping, on loopback


class _KafkaPair:
    """A loopback Kafka conversation we control: a server answering ApiVersions v0 (crafted
    frames) and a client that sends one request and waits for its answer per ``exchange()``."""

    def __init__(self) -> None:
        import socket
        import struct

        self._struct = struct
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(1)
        self.port = self.server.getsockname()[1]
        self.client = socket.create_connection(("127.0.0.1", self.port))
        self.peer, _ = self.server.accept()
        self.cid = 0

    def exchange(self) -> None:
        pk = self._struct.pack
        self.cid += 1
        client_id = b"kws-live-stop"
        body = pk(">hhih", 18, 0, self.cid, len(client_id)) + client_id
        self.client.sendall(pk(">i", len(body)) + body)
        got = b""
        while len(got) < 4 + len(body):
            got += self.peer.recv(4096)
        # ApiVersions v0 response: correlation id, error 0, one api key (18, 0..3)
        resp = pk(">ihihhh", self.cid, 0, 1, 18, 0, 3)
        self.peer.sendall(pk(">i", len(resp)) + resp)
        want = 4 + len(resp)
        got = b""
        while len(got) < want:
            got += self.client.recv(4096)

    def close(self) -> None:
        for s in (self.client, self.peer, self.server):
            s.close()


def _start_live(port: int, tmp_path: Path, *args: str, stdout: Any = None) -> tuple[subprocess.Popen[Any], Path]:
    err = tmp_path / "live.err"
    proc = subprocess.Popen([sys.executable, "-c", "from analyzer.cli import main; main()", "live", "-i", "lo",
                             "-p", str(port), *args],
                            stdout=stdout if stdout is not None else open(tmp_path / "live.out", "w"),  # noqa: SIM115
                            stderr=open(err, "w"), cwd=REPO, start_new_session=True)  # noqa: SIM115
    deadline = time.monotonic() + 20
    while "capturing on" not in err.read_text():
        assert proc.poll() is None and time.monotonic() < deadline, err.read_text()
        time.sleep(0.05)
    time.sleep(0.3)         # the socket is open before the line is printed; give the loop a moment
    return proc, err


def _wait(proc: subprocess.Popen[Any], timeout: float = 20) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(5)
        raise


@pytest.mark.parametrize(("how", "args", "status", "stopped"), [
    (signal.SIGINT, ("-d", "60"), 130, "stopped by Ctrl-C (SIGINT)"),
    (signal.SIGINT, ("-c", "50"), 130, "stopped by Ctrl-C (SIGINT)"),
    (signal.SIGTERM, ("--stats", "-f", "summary"), 143, "stopped by SIGTERM"),
    ("count", ("-c", "2"), 0, "stopped after 2 exchanges"),
    ("duration", ("-d", "3"), 0, "stopped after 3 s"),
])
def test_every_way_of_stopping_prints_the_summary(tmp_path: Path, how: Any, args: tuple[str, ...], status: int,
                                                  stopped: str) -> None:
    why = lab.can_capture()
    if why:
        pytest.skip(why)
    pair = _KafkaPair()
    try:
        proc, err = _start_live(pair.port, tmp_path, *args)
        try:
            for _ in range(3):
                pair.exchange()
            time.sleep(0.5)
            if isinstance(how, signal.Signals):
                os.kill(proc.pid, how)
            rc = _wait(proc)
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
    finally:
        pair.close()
    out, text = (tmp_path / "live.out").read_text(), err.read_text()
    assert rc == status, text
    assert "Traceback" not in text and "Traceback" not in out
    lines = out.splitlines()
    head = next(line for line in lines if line.startswith("== live summary"))
    assert head.startswith(f"== live summary: {stopped}; ")
    printed = [line for line in lines if "ApiVersions v0" in line]
    assert len(printed) == (2 if how == "count" else 3)
    assert all("client_id=kws-live-stop" in line for line in printed)
    assert "  connections: 1 (kafka 1)" in lines
    # the summary accounts for every exchange of the packets read: with -c, those of the
    # read that reached the count are analysed too (a read crosses into the core whole)
    ok = [int(line.split()[-1]) for line in lines if line.startswith("  exchanges: ok ")]
    assert ok and (ok[0] == 3 if how != "count" else 2 <= ok[0] <= 3), lines
    if "--stats" in args:
        # the dashboard's closing report before the summary: its heading, the API's row
        # (requests, ..., no error, none unanswered) and its client
        report = next(i for i, line in enumerate(lines) if line.startswith("live --stats: per API over "))
        assert report < lines.index(head)
        row = next(line.split() for line in lines[report:] if line.startswith("ApiVersions"))
        assert row[:2] == ["ApiVersions", "3"] and row[-2:] == ["0", "0"]
        assert any(line.split()[:1] == ["kws-live-stop"] and line.split()[-2:] == ["3", "0"]
                   for line in lines[report:])


def test_reader_closing_the_pipe_stops_with_the_summary_on_stderr(tmp_path: Path) -> None:
    why = lab.can_capture()
    if why:
        pytest.skip(why)
    pair = _KafkaPair()
    try:
        proc, err = _start_live(pair.port, tmp_path, stdout=subprocess.PIPE)
        try:
            pair.exchange()
            assert proc.stdout is not None
            first = proc.stdout.readline()
            proc.stdout.close()             # as `| head -1` does
            for _ in range(3):
                pair.exchange()
            rc = _wait(proc)
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
    finally:
        pair.close()
    text = err.read_text()
    assert b"ApiVersions v0" in first
    assert rc == 0, text
    assert "Traceback" not in text
    assert "== live summary: stopped as the reader of the output went away; " in text
    # the capture stopped at the read that met the closed pipe (the one holding exchange 2's
    # response): what that read held is analysed (a read crosses into the core as one batch)
    # and accounted for, nothing after. Where that read ends is the scheduler's choice: after
    # a response (ok 2, 3 or 4), or after a request whose response it does not hold, which
    # the pipeline's finish then reports as unanswered (README, "live": requests still
    # waiting at the stop are unanswered). The client sends one request at a time, so at
    # most one is; every request of the read is in the exchanges, its response or not.
    lines = text.splitlines()
    assert "  connections: 1 (kafka 1)" in lines
    m = next((re.fullmatch(r"  exchanges: ok (\d+)(?:, unanswered (\d+))?", line) for line in lines
              if line.startswith("  exchanges: ")), None)
    assert m is not None, text
    ok, unanswered = int(m[1]), int(m[2] or 0)
    assert 2 <= ok and unanswered <= 1 and ok + unanswered <= 4, text
    assert f"  kafka frames: {ok + unanswered} requests, {ok} responses" in lines, text


# ---------------------------------------------------------------- the core's packet reader


def _udp_frames(got: list[tuple[float, bytes, int]], port: int) -> list[tuple[float, bytes, int]]:
    """The Ethernet/IPv4/UDP packets to ``port`` among ``got`` (lo carries other tests' traffic)."""
    import struct

    return [(ts, d, n) for ts, d, n in got
            if len(d) >= 38 and d[12:14] == b"\x08\x00" and d[23] == 17 and struct.unpack_from("!H", d, 36)[0] == port]


def _read_until(read: Any, want: int, pick: Any, seconds: float = 5.0) -> list[tuple[float, bytes, int]]:
    got: list[tuple[float, bytes, int]] = []
    deadline = time.monotonic() + seconds
    while len(got) < want and time.monotonic() < deadline:
        got += pick(read())
        time.sleep(0.01)
    return got


def _udp_pair() -> tuple[Any, int, Any]:
    """A UDP socket bound to a free port on 127.0.0.1, that port, and a socket to send to it."""
    import socket

    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    return rx, rx.getsockname()[1], socket.socket(socket.AF_INET, socket.SOCK_DGRAM)


def test_reader_gives_udp_datagrams_of_lo_cut_to_the_snap_length() -> None:
    """ScapySource's socket on lo (the kernel filter on a private UDP port, ``inbound`` added)
    read by the core: every datagram once, its bytes cut to the snap length, its length on
    the wire, and the kernel's receive time."""
    import struct

    why = lab.can_capture()
    if why:
        pytest.skip(why)
    rx, port, tx = _udp_pair()
    snap = 128
    src = live.ScapySource("lo", f"udp and port {port}", snaplen=snap)
    try:
        assert src.reader.snaplen == snap and not src.reader.closed
        sizes = [1, 60, 86, 87, 1400, 9000, 60000]
        t0 = time.time()
        for i, n in enumerate(sizes):
            tx.sendto(bytes([65 + i]) * n, ("127.0.0.1", port))
        t1 = time.time()
        got = _read_until(lambda: src.read(0.5), len(sizes), lambda b: _udp_frames(b, port))
        assert len(got) == len(sizes), got       # once each: the outgoing copy is not read
        for (ts, data, orig_len), (i, n) in zip(got, enumerate(sizes), strict=True):
            wire = 14 + 20 + 8 + n
            assert orig_len == wire
            assert data[:6] == bytes(6) and len(data) == min(wire, snap)
            assert struct.unpack_from("!H", data, 16)[0] == 28 + n      # the IP total length
            assert data[42:] == bytes([65 + i]) * (min(wire, snap) - 42)
            assert t0 - 0.01 <= ts <= t1 + 0.01, (ts, t0, t1)
        assert src.received >= len(sizes)
        counts = src.reader.counts
        assert counts["clock_times"] == 0 and counts["truncated"] >= 4 and counts["calls"] >= 1
        # nothing queued: [] at once, after the wait
        assert _udp_frames(src.read(0.05), port) == []
    finally:
        src.close()
        rx.close()
        tx.close()
    assert src.reader.closed
    with pytest.raises(ValueError, match="closed PacketReader"):
        src.reader.read()


def test_reader_skips_outgoing_copies_and_falls_back_to_the_clock() -> None:
    """A PF_PACKET socket on lo without any filter sees each packet twice, sent and
    received (sll_pkttype PACKET_OUTGOING, then PACKET_HOST): with ``skip_outgoing`` the
    reader gives the received copy only. Without SO_TIMESTAMPNS the time is the clock's.
    ``max_packets`` bounds a read; the rest stays queued for the next."""
    import socket

    from analyzer._core import PacketReader

    why = lab.can_capture()
    if why:
        pytest.skip(why)
    rx, port, tx = _udp_pair()
    socks = [socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3)) for _ in range(2)]
    try:
        for s in socks:
            s.bind(("lo", 0))
        socks[0].setsockopt(socket.SOL_SOCKET, live.SO_TIMESTAMPNS, 1)
        both = PacketReader(socks[0].fileno(), 65535, skip_outgoing=False)
        incoming = PacketReader(socks[1].fileno(), 65535, skip_outgoing=True)
        for r in (both, incoming):           # what lo carried before
            while r.read(10000):
                pass
        t0 = time.time()
        for i in range(10):
            tx.sendto(b"%d" % i * 10, ("127.0.0.1", port))
        t1 = time.time()
        first = _udp_frames(incoming.read(max_packets=3), port)
        got_in = first + _read_until(incoming.read, 10 - len(first), lambda b: _udp_frames(b, port))
        got_both = _read_until(both.read, 20, lambda b: _udp_frames(b, port))
        t2 = time.time()
        assert len(got_in) == 10 and len(got_both) == 20
        # (each datagram once with skip_outgoing, twice without, the same bytes)
        assert [d[42:] for _, d, _ in got_in] == [b"%d" % i * 10 for i in range(10)]     # in order
        assert Counter(d for _, d, _ in got_both) == Counter(d for _, d, _ in got_in * 2)
        assert incoming.counts["outgoing"] >= 10 and both.counts["outgoing"] == 0
        # the kernel's times (none from the clock): from the send on, and no later than the
        # read (a busy machine may hand a looped packet to the receive side well after t1)
        assert both.counts["clock_times"] == 0 and incoming.counts["clock_times"] >= 10
        assert all(t0 - 0.01 <= ts <= t2 for ts, _, _ in got_both), (t0, t1, t2, [ts for ts, _, _ in got_both])
        assert all(t0 <= ts <= time.time() for ts, _, _ in got_in)            # the clock's, at the read
    finally:
        for s in (*socks, rx, tx):
            s.close()


def test_reader_on_a_bad_descriptor_is_a_one_line_error() -> None:
    """A descriptor that is no socket, a socket that is no packet socket, a socket closed
    under the reader: one-line errors (OSError with its errno, ValueError), no crash."""
    import errno
    import socket

    from analyzer._core import PacketReader

    r = open(os.devnull, "rb")  # noqa: SIM115
    fd = r.fileno()
    r.close()
    with pytest.raises(OSError) as e:
        PacketReader(fd, 65535)
    assert e.value.errno == errno.EBADF and str(e.value) == (
        f"[Errno {errno.EBADF}] cannot read packets from fd {fd}: Bad file descriptor")
    with open(os.devnull, "rb") as f, pytest.raises(OSError) as e:
        PacketReader(f.fileno(), 65535)
    assert e.value.errno == errno.ENOTSOCK and "\n" not in str(e.value)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s, pytest.raises(ValueError) as v:
        PacketReader(s.fileno(), 65535)
    assert str(v.value).endswith("not a packet (AF_PACKET) socket (family Inet)")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s, pytest.raises(ValueError, match="snap length 0"):
        PacketReader(s.fileno(), 0)
    why = lab.can_capture()
    if why:
        pytest.skip(f"the rest reads a packet socket: {why}")
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
    dup = os.dup(s.fileno())
    s.close()
    reader = PacketReader(dup, 65535)
    os.close(dup)                  # closed under the reader (nothing opened since: not reused)
    with pytest.raises(OSError) as e:
        reader.read()
    assert e.value.errno == errno.EBADF and str(e.value) == f"[Errno {errno.EBADF}] Bad file descriptor"


def test_feeding_the_core_from_the_reader_equals_feeding_it_the_packets_read(tmp_path: Path) -> None:
    """Two sockets on lo see the same Kafka conversation. One is fed to its pipeline by the
    core itself (``ScapySource.feed``: the path of ``live`` without --write), the other read
    into Python and fed (the path with --write, its packets written): the same exchanges,
    field for field (packet numbers too; times within a millisecond), and the same as
    ``read`` finds in the pcap the second wrote."""
    from analyzer.pipeline import Options, Pipeline, Run
    from analyzer.sinks.output import exchange_to_json

    why = lab.can_capture()
    if why:
        pytest.skip(why)
    pair = _KafkaPair()
    bpf = live.port_filter([pair.port])
    direct, listed = live.ScapySource("lo", bpf), live.ScapySource("lo", bpf)
    pcap = tmp_path / "listed.pcap"
    try:
        for _ in range(20):
            pair.exchange()
        pair.close()                    # FIN both ways
        time.sleep(0.3)
        results = []
        for src, sink in ((direct, None), (listed, live.PcapSink(str(pcap), listed.linktype))):
            pipe = Pipeline(Options(ports=(pair.port,)))
            got: list[Any] = []
            session = live.LiveSession(pipe, src, got.append, sink=sink, duration=1.0, handle_signals=False)
            if sink is None:
                assert hasattr(src, "feed") and hasattr(pipe, "feed_reader")
            res = session.run()
            results.append((res, [exchange_to_json(e, trees=True) for e in got], pipe.summary.packets))
    finally:
        pair.close()
        direct.close()
        listed.close()
    (res_d, ex_d, n_d), (res_l, ex_l, n_l) = results
    assert res_d.packets == res_l.packets == n_d == n_l and res_d.packets >= 20 * 2 + 3
    assert res_l.written == res_l.packets and res_d.written is None
    # each socket has its own receive time of a packet (the kernel stamps each socket's
    # copy): the times agree within a millisecond, latencies within 0.1 ms, the rest exactly
    times = ("request_time", "response_time", "response_first_time", "latency_ms", "ttfb_ms")
    for d, li in zip(ex_d, ex_l, strict=True):
        for k in times:
            assert d.pop(k) == pytest.approx(li.pop(k), abs=0.1 if k.endswith("_ms") else 1e-3), k
    assert len(ex_d) == 20 and ex_d == ex_l
    read_back = [exchange_to_json(e, trees=True) for e in Run(str(pcap), Options(ports=(pair.port,)))]
    for e in read_back:
        for k in times:
            e.pop(k)
    assert read_back == ex_l
