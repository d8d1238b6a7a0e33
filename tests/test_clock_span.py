"""Captures whose clock jumps (issue 37): one trace at 29 s and one at 1.45e9 s (a 1970
clock and a 2015 one, as ``mergecap`` makes of two captures), two traces 247 days apart.
Every command finishes with the right figures in memory bounded by what it saw (packets,
exchanges), never by the clock span: ``read``, ``stats`` as a table, JSON, CSV and a
picture, ``check --timeline`` run through the CLI in a child process under an address-space
limit, which reports its peak RSS after each command; and the per-second rates of
``stats`` and of the ``live --stats`` closing report over a span of 2**62 seconds.
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

from analyzer.sinks.stats_render import rate_lines, render_text
from tests.conftest import REPO
from tests.pcapgen import TcpFlow, TcpPacket, kafka_request, kafka_response, write_pcap
from tests.test_stats import T0, mk

DAY = 86400
AS_LIMIT = 1536 << 20       # the child's address space: the old per-second list of a 1.45e9 s span is 11.6 GB
GROWTH_MB = 40              # peak RSS a command may add to what `read` of the same capture needed
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
from click.testing import CliRunner
from analyzer.cli import main
out = []
for args in json.loads(sys.argv[2]):
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
    """``read`` first (the baseline), then stats (table, json, csv, consumer lag csv),
    check --timeline (text, json) and, with matplotlib, stats --plot: each command's exit
    code, stdout and the child's peak RSS after it (MB), checked against the bounds."""
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
    base = runs["read"]["peak_mb"]
    for name, r in runs.items():
        if name != "plot":
            assert r["peak_mb"] - base < GROWTH_MB, (name, r["peak_mb"], base)
        assert r["peak_mb"] < PEAK_MB, (name, r["peak_mb"])
    if "plot" in runs:
        assert (tmp / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return runs


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
    runs = _run_commands(_capture(tmp_path / "decades.pcap", t0, t1), tmp_path)
    _check_figures(runs, t0, t1, span=int(t1) - int(t0) + 1, per=24166667)


def test_traces_247_days_apart(tmp_path: Path) -> None:
    """Two traces 247 days apart: the old text report took some 170 MB more than `read`."""
    t0 = 1_600_000_000.0
    t1 = t0 + 247 * DAY
    runs = _run_commands(_capture(tmp_path / "months.pcap", t0, t1), tmp_path)
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
    """The closing report of ``live --stats`` (its Dashboard's accumulator through
    render_text) of two exchanges 2**62 seconds apart; the dashboard's own rates follow the
    wall clock over its 5-second window."""
    from rich.console import Console

    from analyzer import live

    now = [1000.0]
    dash = live.Dashboard("live on lo", clock=lambda: now[0])
    for i, t in enumerate((0.0, 2.0**62)):
        dash.add(mk(api="Metadata", lat=2.0, t=t, cid=i, frame=3 * i + 1))
        now[0] += 1
    assert dash.rates(now[0]) == {"Metadata": 1.0}      # 2 requests over the 2 s since the start
    buf = io.StringIO()
    render_text(dash.accumulator.result(), Console(file=buf, width=200), plain=True)
    (line,) = [x for x in buf.getvalue().splitlines() if x.startswith("Requests:")]
    span = int(T0 + 2.0**62) - int(T0) + 1              # (mk times its exchanges from T0)
    assert line.endswith(f"over the {span} seconds they span: 0.0 on average, 1 at the busiest")
