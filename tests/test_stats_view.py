"""What `stats` shows a person: ``--section`` picks one view in every format, the tables fit a
terminal of 100 columns (plain text and rich), a connection is shown with its endpoints,
and the consumer-lag plot draws each figure at the time it was taken."""
from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "samples"
GROUP = str(SAMPLES / "group_rdkafka.pcap")            # consumer lag, a producer, a consumer group
TXN = str(SAMPLES / "txn_rdkafka.pcap")
WIDTH = 100

TITLES = {"groups": "Latency", "consumer_lag": "Consumer lag", "producers": "Producers",
          "consumer_groups": "Consumer groups"}


def _stats(*args: str) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([sys.executable, "-m", "analyzer", "stats", *args], capture_output=True, text=True,
                       cwd=REPO, timeout=120)
    assert r.returncode == 0, r.stderr
    return r


def _titles(text: str) -> list[str]:
    return [t for t in TITLES.values() if any(line.startswith(t + " ") for line in text.splitlines())]


# -- --section ----------------------------------------------------------------------------------

def test_default_table_is_the_whole_report() -> None:
    out = _stats(GROUP).stdout
    assert _titles(out) == list(TITLES.values())
    assert "Requests: 64 over 5.1 s" in out and "Percentiles: nearest-rank, exact." in out


@pytest.mark.parametrize("section", ["consumer_lag", "producers", "consumer_groups"])
def test_section_is_that_view_alone_in_table_and_json(section: str) -> None:
    out = _stats(GROUP, "--section", section).stdout
    assert out.startswith(TITLES[section] + " ") and _titles(out) == [TITLES[section]]
    assert "Requests:" not in out and "Percentiles" not in out
    whole = json.loads(_stats(GROUP, "-f", "json").stdout)
    doc = json.loads(_stats(GROUP, "-f", "json", "--section", section).stdout)
    assert doc == {section: whole[section]} and doc[section]


def test_section_groups_is_the_groups_tables_and_the_slowest() -> None:
    out = _stats(GROUP, "--section", "groups", "--top", "2").stdout
    assert _titles(out) == ["Latency"] and "Errors and intentional waits" in out and "Slowest 2 exchanges" in out
    assert "Throughput" not in out and "Percentiles: nearest-rank, exact." in out
    doc = json.loads(_stats(GROUP, "-f", "json", "--section", "groups").stdout)
    assert list(doc) == ["by", "groups", "top", "accuracy"] and len(doc["groups"]) == 13


def test_csv_writes_the_groups_unless_a_section_is_chosen() -> None:
    assert _stats(GROUP, "-f", "csv").stdout.startswith("api,version,count,")
    assert _stats(GROUP, "-f", "csv", "--section", "consumer_lag").stdout.startswith("client_id,group,topic,")


def test_an_empty_section_says_so() -> None:
    r = _stats(str(SAMPLES / "admin_rdkafka.pcap"), "--section", "consumer_lag")
    assert r.stdout.strip() == "No consumer lag: no answered Fetch gave a high watermark for a partition it fetched."
    assert json.loads(_stats(str(SAMPLES / "admin_rdkafka.pcap"), "-f", "json", "--section",
                             "producers").stdout) == {"producers": []}


# -- width ----------------------------------------------------------------------------------------

def _table_lines(text: str) -> list[str]:
    """The lines of the tables (not the "Requests:" sentence nor the `read` commands to copy,
    printed whole)."""
    return [line for line in text.splitlines() if not line.startswith(("Requests:", "#"))]


@pytest.mark.parametrize("args", [
    (GROUP,), (GROUP, "--top", "5"), (GROUP, "--by", "client_id,api"), (GROUP, "--by", "topic,partition"),
    (str(SAMPLES / "consumer_lag_kafkapython.pcap"),), (TXN, "--by", "conn"), (GROUP, TXN, "--by", "conn", "--top", "4"),
])
def test_plain_tables_fit_100_columns(args: tuple[str, ...]) -> None:
    out = _stats(*args).stdout
    widest = max(len(line) for line in _table_lines(out))
    assert widest <= WIDTH, [line for line in out.splitlines() if len(line) > WIDTH]


def test_rich_tables_fit_a_100_column_terminal_with_every_figure_whole() -> None:
    """Drawn by rich on a terminal 100 wide, no line is wider and no cell is cut: each word of
    each cell (figures, error names, endpoints) is printed whole."""
    from rich.console import Console

    from analyzer.sinks.stats_render import render_text, tables

    result = json.loads(_stats(GROUP, "--top", "5", "-f", "json").stdout)
    buf = io.StringIO()
    console = Console(file=buf, width=WIDTH, force_terminal=True, color_system=None)
    render_text(result, console)
    text = buf.getvalue()
    assert console.is_terminal and "Latency" in text
    assert max(len(line.rstrip()) for line in _table_lines(text)) <= WIDTH
    words = set(text.split())
    for t in tables(result):
        for row in t.rows:
            for cell in row:
                assert set(cell.split()) <= words, (t.title, cell)


# -- connections ----------------------------------------------------------------------------------

def test_by_conn_shows_each_connection_with_its_endpoints() -> None:
    out = _stats(TXN, "--by", "conn").stdout.splitlines()
    assert any(line.startswith("0 127.0.0.1:44550 -> 127.0.0.1:32853 ") for line in out)
    doc = json.loads(_stats(TXN, "--by", "conn", "-f", "json").stdout)
    assert doc["by"] == ["conn"]
    assert (doc["groups"][0]["conn"], doc["groups"][0]["client"], doc["groups"][0]["broker"]) == \
        (0, "127.0.0.1:44550", "127.0.0.1:32853")
    two = _stats(GROUP, TXN, "--by", "conn").stdout
    assert "group_rdkafka.pcap#4 127.0.0.1:59384 -> 127.0.0.1:52615" in " ".join(two.split())


# -- the consumer-lag plot --------------------------------------------------------------------------

def test_lag_plot_draws_each_figure_at_the_time_it_was_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lag of kws-member-0 on grp-0 is first 15 at +3.126 s (the table's "max at"): the
    plot is given that figure at that time and draws it there, not from the start of its
    second (+2.17 s)."""
    pytest.importorskip("matplotlib")
    from click.testing import CliRunner

    from analyzer.commands.stats import stats_command
    from analyzer.sinks import stats_render as sr

    got: dict[str, Any] = {}

    def write_plot(path: str, result: dict[str, Any], hists: Any, series: Any, points: Any, title: str,
                   lag: Any) -> None:
        got.update(result=result, lag=lag)

    monkeypatch.setattr(sr, "write_plot", write_plot)
    r = CliRunner().invoke(stats_command, [GROUP, "--plot", "x.png", "-f", "json"], catch_exceptions=False)
    assert r.exit_code == 0
    result, lag = got["result"], got["lag"]
    t0 = result["throughput"]["first_time"]
    for row in result["consumer_lag"]:
        pts = lag[f"{row['group']} {row['topic']}-{row['partition']}"]
        assert len(pts) == row["samples"] and (row["max_time"], row["max"]) in pts
        assert (row["last_time"], row["last"]) == pts[-1]
    drawn = {name: (xs, ys) for name, xs, ys in sr.lag_lines(result, lag)}
    xs, ys = drawn["kws-group grp-0"]
    first = lag["kws-group grp-0"][0]
    assert (xs[0], ys[0]) == (first[0] - t0, first[1]) and (round(xs[0], 3), ys[0]) == (3.126, 15)
