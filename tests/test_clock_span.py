"""Captures whose clock jumps (issue 37): one trace at 29 s and one at 1.45e9 s (a 1970
clock and a 2015 one, as ``mergecap`` makes of two captures), two traces 247 days apart.
Every command finishes with the right figures in memory bounded by what it saw (packets,
exchanges), never by the clock span: ``read``, ``stats`` as a table, JSON, CSV and a
picture, ``check --timeline`` run through the CLI in a child process under an address-space
limit, which reports each command's peak RSS; each peak is held to the same command's on
a capture of the same exchanges one second apart. And the per-second rates of ``stats``
and of the ``live --stats`` closing report over a span of 2**62 seconds.
"""
from __future__ import annotations

import csv
import io
import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from analyzer.sinks.stats_render import rate_lines
from tests.conftest import REPO
from tests.pcapgen import TcpFlow, TcpPacket, kafka_request, kafka_response, write_pcap
from tests.test_stats import T0, mk

DAY = 86400
# the child's address space: the old per-second list of a 1.45e9 s span is 11.6 GB (here a
# MemoryError); DuckDB reserves some 600 MB of it per connection (not resident), stats --plot
# with matplotlib 1.5 GB in all
AS_LIMIT = 4 << 30
# peak RSS a command may take on the traces far apart beyond what it takes on the same
# exchanges one second apart (the old text report of two traces 247 days apart took some
# 170 MB more than `read`; the same exchanges a second apart, nothing more)
SPAN_MB = 20
PEAK_MB = 300               # peak RSS of the child, matplotlib's picture included


# -- the captures ------------------------------------------------------------------------------

def _str(s: str) -> bytes:
    return struct.pack(">h", len(s)) + s.encode()


def _heartbeat(corr: int) -> tuple[bytes, bytes]:
    """Heartbeat v0 of member m1 in group g1, generation 1; answered without error."""
    return (kafka_request(12, 0, corr, "app", _str("g1") + struct.pack(">i", 1) + _str("m1")),
            kafka_response(corr, struct.pack(">h", 0)))


def _fetch(corr: int, offset: int, high_watermark: int) -> tuple[bytes, bytes]:
    """Fetch v4 of t-0 from ``offset`` (max_wait_ms 0), answered with ``high_watermark`` and no records."""
    req = struct.pack(">iiiib", -1, 0, 1, 1 << 20, 0) + struct.pack(">i", 1) + _str("t") \
        + struct.pack(">i", 1) + struct.pack(">iqi", 0, offset, 1 << 20)
    resp = struct.pack(">ii", 0, 1) + _str("t") + struct.pack(">i", 1) \
        + struct.pack(">ihqq", 0, 0, high_watermark, high_watermark) + struct.pack(">ii", -1, -1)
    return kafka_request(1, 4, corr, "app", req), kafka_response(corr, resp)


def _trace(ts: float, port: int, corr: int, high_watermark: int) -> list[TcpPacket]:
    """One connection from ``ts`` (a packet every ms): a Heartbeat, then a Fetch lagging
    ``high_watermark - 100`` records; requests complete at ts + 3 ms and ts + 5 ms."""
    flow = TcpFlow(("10.0.0.1", port), ("10.0.0.2", 9092), ts=ts)
    pkts = flow.handshake()
    for req, resp in (_heartbeat(corr), _fetch(corr + 1, 100, high_watermark)):
        pkts += flow.send(0, req) + flow.send(1, resp)
    return pkts + flow.fin(0) + flow.fin(1)


def _capture(path: Path, t0: float, t1: float) -> str:
    write_pcap(str(path), _trace(t0, 40000, 1, 151) + _trace(t1, 40001, 10, 160))
    return str(path)


# -- the commands, in a child process -----------------------------------------------------------

_CHILD = r"""
import json, resource, sys, traceback
soft, hard = int(sys.argv[1]), resource.getrlimit(resource.RLIMIT_AS)[1]
resource.setrlimit(resource.RLIMIT_AS, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))
def peak_mb():
    # this process's own peak (VmHWM): ru_maxrss would count the parent's size at fork too
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024
def reset_peak():
    # each command's own peak: VmHWM back to the current RSS (Linux 4.0+; where refused, the
    # peaks are the child's so far, which the two captures' children still compare alike)
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
from click.testing import CliRunner
from analyzer.cli import main
out = []
for args in json.loads(sys.argv[2]):
    reset_peak()
    r = CliRunner().invoke(main, args)
    out.append({"args": args, "code": r.exit_code, "stdout": r.stdout,
                "error": "".join(traceback.format_exception(*r.exc_info)) if r.exit_code and r.exc_info else None,
                "peak_mb": peak_mb()})
print(json.dumps(out))
"""


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _run_commands(path: str, tmp: Path) -> dict[str, dict[str, Any]]:
    """``read``, stats (table, json, csv, consumer lag csv), check --timeline (text, json) and,
    with matplotlib, stats --plot (to ``tmp``), in one child: each command's exit code,
    stdout and peak RSS (MB)."""
    if not os.path.exists("/proc/self/status"):
        pytest.skip("the child's peak RSS is read from /proc (Linux)")
    cmds = {"read": ["read", path], "table": ["stats", path], "json": ["stats", "-f", "json", path],
            "csv": ["stats", "-f", "csv", path],
            "lag_csv": ["stats", "-f", "csv", "--section", "consumer_lag", path],
            "timeline": ["check", "--timeline", "g1", path],
            "timeline_json": ["check", "--timeline", "g1", "-f", "json", path]}
    if _has_matplotlib():
        cmds["plot"] = ["stats", "--plot", str(tmp / "plot.png"), path]
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MALLOC_ARENA_MAX="2", MPLBACKEND="Agg")
    p = subprocess.run([sys.executable, "-c", _CHILD, str(AS_LIMIT), json.dumps(list(cmds.values()))],
                       capture_output=True, text=True, cwd=REPO, env=env, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    runs = dict(zip(cmds, json.loads(p.stdout), strict=True))
    for name, r in runs.items():
        assert r["code"] == 0, (name, r["error"] or r["stdout"])
        assert r["peak_mb"] < PEAK_MB, (name, r["peak_mb"])
    if "plot" in runs:
        assert (tmp / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return runs


def _run_far_and_near(tmp: Path, t0: float, t1: float) -> dict[str, dict[str, Any]]:
    """The commands on the two traces at ``t0`` and ``t1``, and on the same two traces one
    second apart: each command's peak RSS on the first within SPAN_MB of its peak on the
    second (memory follows what a command sees, not the span of the clock). The first's
    runs."""
    (tmp / "far").mkdir()
    (tmp / "near").mkdir()
    far = _run_commands(_capture(tmp / "far.pcap", t0, t1), tmp / "far")
    near = _run_commands(_capture(tmp / "near.pcap", t0, t0 + 1.0), tmp / "near")
    assert json.loads(near["json"]["stdout"])["throughput"]["duration_s"] < 2
    for name, r in far.items():
        assert r["peak_mb"] - near[name]["peak_mb"] < SPAN_MB, (name, r["peak_mb"], near[name]["peak_mb"])
    return far


def _csv(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def _check_figures(runs: dict[str, dict[str, Any]], t0: float, t1: float, span: int, per: int) -> None:
    """What every command says of the two traces (``_capture(t0, t1)``): 4 exchanges, 2 a
    second at the seconds of t0 and t1, the lag of t-0 (51 then 60), the group's two Heartbeats."""
    assert "exchanges: ok 4" in runs["read"]["stdout"]
    assert len([line for line in runs["read"]["stdout"].splitlines() if "Heartbeat v0" in line]) == 2

    doc = json.loads(runs["json"]["stdout"])
    thr = doc["throughput"]
    assert thr["first_time"] == pytest.approx(t0 + 0.003) and thr["last_time"] == pytest.approx(t1 + 0.006)
    assert thr["exchanges"] == 4
    assert [(r["t"], r["requests"]) for r in thr["per_second"]] == [(int(t0), 2), (int(t1), 2)]
    assert {(g["api"], g["count"], g["latency_ms"]["max"]) for g in doc["groups"]} == \
        {("Fetch", 2, 1.0), ("Heartbeat", 2, 1.0)}
    (lag,) = doc["consumer_lag"]
    assert (lag["group"], lag["samples"], lag["last"], lag["max"], lag["mean"]) == ("g1", 2, 60, 60, 55.5)

    lines = runs["table"]["stdout"].splitlines()
    assert f"Requests: 4 over {thr['duration_s']:.1f} s; per second, over the {span} seconds they span: " \
           "0.0 on average, 2 at the busiest" in lines
    # 60 buckets of `per` seconds: the first trace in the first, the second in the last
    assert f"per {per} s: █" + " " * 58 + "█" in lines

    rows = _csv(runs["csv"]["stdout"])
    assert sorted((r["api"], r["count"]) for r in rows) == [("Fetch", "2"), ("Heartbeat", "2")]
    (lag_row,) = _csv(runs["lag_csv"]["stdout"])
    assert (lag_row["last"], lag_row["max"]) == ("60", "60")

    text = runs["timeline"]["stdout"]
    assert "group g1: 2 exchanges" in text and f"+{t1 - t0:.3f}s" in text
    tl = json.loads(runs["timeline_json"]["stdout"])
    assert [e["time"] for e in tl["events"]] == pytest.approx([t0 + 0.003, t1 + 0.003])


def test_clock_jumping_by_decades(tmp_path: Path) -> None:
    """One trace at 29 s, one at 1.45e9 s: the old text report asked for a list of 1.45e9
    seconds (11.6 GB; here a MemoryError under the child's limit)."""
    t0, t1 = 29.0, 1.45e9
    runs = _run_far_and_near(tmp_path, t0, t1)
    _check_figures(runs, t0, t1, span=int(t1) - int(t0) + 1, per=24166667)


def test_traces_247_days_apart(tmp_path: Path) -> None:
    """Two traces 247 days apart: the old text report took some 170 MB more than `read`."""
    t0 = 1_600_000_000.0
    t1 = t0 + 247 * DAY
    runs = _run_far_and_near(tmp_path, t0, t1)
    _check_figures(runs, t0, t1, span=247 * DAY + 1, per=355681)


# -- the per-second rates, in this process --------------------------------------------------------

def test_rate_lines_fold_any_span_into_width_buckets() -> None:
    """Seconds 0 and 2**62 (a pcapng timestamp can be that far off): the seen seconds fold
    straight into the buckets, none is made per second of the span."""
    result = {"throughput": {"per_second": [{"t": 0, "requests": 3}, {"t": 5, "requests": 1},
                                            {"t": 2**62, "requests": 2}], "duration_s": 2.0**62}}
    head, spark = rate_lines(result)
    assert head == (f"Requests: 6 over {2.0**62:.1f} s; per second, over the {2**62 + 1} seconds they span: "
                    "0.0 on average, 3 at the busiest")
    per = -(-(2**62 + 1) // 60)
    assert spark == f"per {per} s: █" + " " * 58 + "▄"
    # a narrower sparkline: never more buckets than its width
    assert rate_lines(result, width=7)[1] == f"per {-(-(2**62 + 1) // 7)} s: █     ▄"


def test_live_stats_closing_report_over_a_clock_jump() -> None:
    """The closing report of ``live --stats`` (``Dashboard.report``) of two exchanges 2**62
    seconds apart: the dashboard counts by the wall clock (its own), never by the exchanges'
    timestamps, so the jump changes neither its rates nor the span it reports."""
    from rich.console import Console

    from analyzer import live

    now = [1000.0]
    dash = live.Dashboard("live on lo", clock=lambda: now[0])
    for i, t in enumerate((0.0, 2.0**62)):
        dash.add(mk(api="Metadata", lat=2.0, t=t, cid=i, frame=3 * i + 1))
        now[0] += 1
    assert dash.rates(now[0]) == {"Metadata": 1.0}      # 2 requests over the 2 s since the start
    # the second exchange's 2 ms are lost in its timestamps (mk times them from T0; at
    # T0 + 2**62 s a double's step is 1024 s): its latency is 0.0, the first one's 2.0 to a
    # double's step at T0 (0.24 us)
    assert T0 + 2.0**62 + 0.002 == T0 + 2.0**62
    first = (T0 + 0.002 - T0) * 1000.0
    (row,) = dash.rows(now[0])
    assert {k: row[k] for k in ("api", "count", "avg_rate", "p50", "errors", "unanswered")} == \
        {"api": "Metadata", "count": 2, "avg_rate": 1.0, "p50": 0.0, "errors": 0, "unanswered": 0}
    assert row["p99"] == row["max"] == first == pytest.approx(2.0, abs=1e-3)
    buf = io.StringIO()
    Console(file=buf, width=100).print(dash.report(now[0]))
    lines = buf.getvalue().splitlines()
    assert lines[0] == "live --stats: per API over 2.0 s, 2 exchanges (avg/s: since the start; latency in ms)"
    assert lines[1].split() == ["API", "reqs", "avg/s", "p50", "p99", "max", "errors", "unanswered"]
    assert lines[3].split() == ["Metadata", "2", "1.0", "0.000", "2.00", "2.00", "0", "0"]
