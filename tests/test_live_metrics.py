"""``live --metrics``: the OpenMetrics endpoint (analyzer.sinks.metrics) and a real Prometheus.

- its figures are stats' (requests, latency histograms with waits apart, errors, bytes,
  throttling, consumer lag position and committed) on the samples, read back through the
  OpenMetrics exposition;
- labels are bounded (``--metrics-max-series``: the rest folds into ``other`` and is
  counted), quiet series and the lag state behind the gauges are dropped;
- bad HOST:PORT, a port in use, an address not of this machine: one line, non-zero exit;
- the real thing (marked slow, ~25 s): Tansu and a kafka-python consumer group on loopback,
  ``live --metrics -w`` scraped by Prometheus (Debian's ``prometheus``; skipped when it is
  not installed) every second; what Prometheus stored equals what ``read`` and ``stats``
  find in the pcap of the same run.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("prometheus_client")

from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.exposition import generate_latest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from analyzer import engine, figures
from analyzer.model import Exchange
from analyzer.pipeline import Options, Run
from analyzer.sinks import metrics as m
from tests.conftest import SAMPLES, figures_db, stats_of

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lab  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MANIFEST = json.loads((SAMPLES / "manifest.json").read_text())
PARITY = ["group_rdkafka.pcap", "consumer_lag_kafkapython.pcap", "produce_fetch_rdkafka_gzip.pcap",
          "txn_rdkafka.pcap"]


def _run(name: str) -> tuple[list[Exchange], dict[str, str]]:
    """A sample's exchanges and the topic names by id its run learnt (DecodeContext.topic_names)."""
    port = MANIFEST[name.rsplit(".", 1)[0]]["broker_ports"][0]
    run = Run(str(SAMPLES / name), Options(ports=(port,), decode="lite"))
    return list(run), run.ctx.topic_names


def _exchanges(name: str) -> list[Exchange]:
    return _run(name)[0]


def _scrape(metrics: m.LiveMetrics) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """sample name -> {sorted labels: value}, through the OpenMetrics text and its parser."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(m._Collector(metrics))
    text = generate_latest(reg).decode()
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def _by(samples: dict[tuple[tuple[str, str], ...], float], *labels: str) -> Counter[tuple[str, ...]]:
    out: Counter[tuple[str, ...]] = Counter()
    for key, v in samples.items():
        d = dict(key)
        out[tuple(d[label] for label in labels)] += v
    return out


def _s(v: Any) -> str:
    return "" if v is None else str(v)


# ---------------------------------------------------------------- stats' figures


@pytest.mark.parametrize("name", PARITY)
def test_figures_are_stats_figures(name: str) -> None:
    exchanges, names = _run(name)
    live = m.LiveMetrics(1000, names=names)
    for ex in exchanges:
        live.add(ex)
    res = stats_of(exchanges, ("api", "version"), views=("committed_lag",))
    got = _scrape(live)
    groups = {(_s(g["api"]), _s(g["version"])): g for g in res["groups"]}
    assert groups
    requests = _by(got["kafkawire_requests_total"], "api", "version")
    assert requests == Counter({k: g["count"] - g["orphans"] for k, g in groups.items() if g["count"] - g["orphans"]})
    unanswered = _by(got.get("kafkawire_unanswered_requests_total", {}), "api", "version")
    assert unanswered == Counter({k: g["unanswered"] for k, g in groups.items() if g["unanswered"]})
    count = _by(got["kafkawire_request_latency_seconds_count"], "api", "version")
    total = _by(got["kafkawire_request_latency_seconds_sum"], "api", "version")
    service = _by({k: v for k, v in got["kafkawire_request_latency_seconds_count"].items()
                   if dict(k)["wait"] == "none"}, "api", "version")
    waits = _by({k: v for k, v in got["kafkawire_request_latency_seconds_count"].items()
                 if dict(k)["wait"] != "none"}, "api", "version", "wait")
    # the sum of the latencies in integer ns, as stats sums them (its mean is of this sum)
    sum_ns: Counter[tuple[str, str]] = Counter()
    for ex in exchanges:
        if ex.latency_ms is not None:
            assert ex.response_time is not None and ex.request_time is not None
            sum_ns[(_s(ex.api_name), _s(ex.api_version))] += round((ex.response_time - ex.request_time) * 1000.0 * 1e6)
    answered = {k: g for k, g in groups.items() if g["answered"]}
    assert set(count) == set(answered) == set(sum_ns)
    for k, g in answered.items():
        assert count[k] == g["answered"] and service[k] == g["service"], k
        assert g["latency_ms"]["mean"] == round(sum_ns[k] / g["answered"] / 1e6, 3), k
        # the sum in seconds: stats' sum of latencies (integer ns), to the ns per exchange
        assert total[k] == pytest.approx(sum_ns[k] / 1e9, abs=2e-9 * g["answered"]), k
        assert {w: n for (a, v, w), n in waits.items() if (a, v) == k} == g["waits"], k
    # the histogram's buckets are cumulative, end with +Inf = count, and a value on a bound
    # falls in that bound's bucket (le)
    for key, n in got["kafkawire_request_latency_seconds_count"].items():
        bk = {float(dict(k)["le"]): v for k, v in got["kafkawire_request_latency_seconds_bucket"].items()
              if tuple(x for x in k if x[0] != "le") == key}
        assert sorted(bk) == sorted([*m.LATENCY_BUCKETS, math.inf]) and bk[math.inf] == n
        assert all(bk[a] <= bk[b] for a, b in zip(sorted(bk), sorted(bk)[1:], strict=False))
    by_api: dict[str, Any] = {}
    for (api, _v), g in groups.items():
        row = by_api.setdefault(api, Counter())
        row.update({"in": g["bytes_in"], "out": g["bytes_out"], "thr": g["throttled"],
                    "thr_ms": g["throttle_time_ms"]["total"]})
        for e, n in g["errors"].items():
            row["error " + e] += n
    bytes_in = _by(got["kafkawire_request_bytes_total"], "api")
    bytes_out = _by(got["kafkawire_response_bytes_total"], "api")
    errors = _by(got.get("kafkawire_errors_total", {}), "api", "error")
    for api, row in by_api.items():
        assert bytes_in[(api,)] == row["in"] and bytes_out[(api,)] == row["out"], api
        assert errors == Counter({(a, e[6:]): n for a, r in by_api.items() for e, n in r.items()
                                  if e.startswith("error ") and n})
    assert got["kafkawire_orphan_responses_total"][()] == sum(g["orphans"] for g in groups.values())
    statuses = _by(got["kafkawire_exchanges_total"], "status")
    assert sum(statuses.values()) == res["throughput"]["exchanges"] == len(exchanges) and statuses[("ok",)] > 0
    # records per topic: stats' throughput per topic-partition, summed per topic
    tp = res["throughput"]["topic_partitions"]
    for api, col in (("Produce", "produced_records"), ("Fetch", "fetched_records")):
        want: Counter[tuple[str, str]] = Counter()
        for t in tp:
            if t[col]:
                want[(api, _s(t["topic"]))] += t[col]
        have = _by(got.get("kafkawire_topic_records_total", {}), "api", "topic")
        assert Counter({k: v for k, v in have.items() if k[0] == api and v}) == want, api
    # consumer lag: stats' latest figure per client id and topic-partition, with its group (the
    # query over the lag table of the same run: topic ids named as the run named them)
    lag = {(d["client_id"], d["group"], d["topic"], d["partition"]): d["last"]
           for d in figures.consumer_lag(engine.query_of(figures_db(exchanges, names=names)))}
    assert lag      # (group_rdkafka's Fetch v16 names topics by id)
    have_lag = {(d["client_id"], d["group"], d["topic"], d["partition"]): v
                for d, v in ((dict(k), v) for k, v in got.get("kafkawire_consumer_lag_records", {}).items())}
    assert have_lag == {(_s(c), _s(g), _s(t), _s(p)): v for (c, g, t, p), v in lag.items()}
    committed = {(d["group"], d["topic"], _s(d["partition"])): d["lag"] for d in res["committed_lag"]
                 if d["lag"] is not None}
    have_committed = {(d["group"], d["topic"], d["partition"]): v for d, v in
                      ((dict(k), v) for k, v in got.get("kafkawire_consumer_committed_lag_records", {}).items())}
    assert have_committed == committed


def test_lag_gauges_are_not_zeros_only() -> None:
    """The parity above is not of zeros only: scraped as the lag sample goes, its consumer
    falls behind (position lag) and its group's commits trail the log (committed lag)."""
    live = m.LiveMetrics(1000)
    peak: Counter[str] = Counter()
    for i, ex in enumerate(_exchanges("consumer_lag_kafkapython.pcap")):
        live.add(ex)
        if i % 3 == 0:
            got = _scrape(live)
            for name in ("kafkawire_consumer_lag_records", "kafkawire_consumer_committed_lag_records"):
                peak[name] = max([peak[name], *got.get(name, {}).values()])
    assert peak["kafkawire_consumer_lag_records"] >= 20
    assert peak["kafkawire_consumer_committed_lag_records"] > 0


# ---------------------------------------------------------------- bounded labels and memory


def _with_client(ex: Exchange, client_id: str) -> Exchange:
    return dataclasses.replace(ex, client_id=client_id)


def _one_request() -> Exchange:
    return next(ex for ex in _exchanges("produce_fetch_rdkafka_gzip.pcap") if ex.api_name == "Metadata")


def test_client_ids_beyond_the_budget_fold_into_other_and_are_counted() -> None:
    ex = _one_request()
    live = m.LiveMetrics(5)
    for _round in range(2):
        for i in range(20):
            live.add(_with_client(ex, f"client-{i}"))
    got = _scrape(live)
    clients = _by(got["kafkawire_client_requests_total"], "client_id")
    assert len(clients) == 6
    assert clients[("other",)] == 2 * 15 and sum(clients.values()) == 40
    assert all(clients[(f"client-{i}",)] == 2 for i in range(5))
    folded = _by(got["kafkawire_metrics_folded_series_total"], "metric")
    assert folded[("kafkawire_client_requests",)] == 15         # distinct series, not increments
    assert folded[("kafkawire_requests",)] == 0


def test_api_and_version_from_the_wire_are_bounded_too() -> None:
    ex = _one_request()
    live = m.LiveMetrics(3)
    for v in range(10):
        live.add(dataclasses.replace(ex, api_version=v))
    got = _scrape(live)
    req = _by(got["kafkawire_requests_total"], "api", "version")
    assert len(req) == 4 and req[("other", "other")] == 7
    hist = _by(got["kafkawire_request_latency_seconds_count"], "api", "version", "wait")
    assert hist[("other", "other", "none")] == 7        # (the wait label is kept)


class _Sessions:
    """The lag's FetchSessions, with the connections it was told ended."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.ended: list[int] = []

    def fetch(self, *args: Any) -> Any:
        return self.inner.fetch(*args)

    def closed(self, conn: int) -> None:
        self.ended.append(conn)
        self.inner.closed(conn)


def test_quiet_series_and_lag_state_are_dropped() -> None:
    t = [1_000_000.0]
    live = m.LiveMetrics(2, clock=lambda: t[0])
    sessions = live.lag.sessions = _Sessions(live.lag.sessions)
    exchanges = _exchanges("consumer_lag_kafkapython.pcap")
    for ex in exchanges:
        live.add(ex)
    fetching = {ex.conn.id: ex.conn for ex in exchanges if ex.api_name == "Fetch"}
    assert live.lag.lags and live.lag.members and live.committed.commits and live.lag.conns == fetching
    live.tick(t[0])
    # a connection still open keeps its fetch session; those that ended (at the end of the
    # capture, all of them) are forgotten
    open_one = next(iter(fetching.values()))
    open_one.ended = False
    live.prune(t[0])
    assert live.lag.conns == {open_one.id: open_one} and sorted(sessions.ended) == sorted(set(fetching) - {open_one.id})
    open_one.ended = True
    live.prune(t[0])
    assert not live.lag.conns and sorted(sessions.ended) == sorted(fetching)
    t[0] = max(ex.response.last_ts for ex in exchanges if ex.response is not None) + m.SERIES_TTL + 10
    live.tick()
    assert not live.lag.lags and not live.lag.members and not live.lag.member_seen and not live.committed.commits
    assert not live.committed.hws and not live.clients.values and not live.records.values
    got = _scrape(live)
    assert "kafkawire_consumer_lag_records" not in got and "kafkawire_client_requests_total" not in got
    # the places freed: new clients get named series again
    ex = _one_request()
    for i in range(3):
        live.add(_with_client(ex, f"new-{i}"))
    clients = _by(_scrape(live)["kafkawire_client_requests_total"], "client_id")
    assert set(clients) == {("new-0",), ("new-1",), ("other",)}


def test_lag_state_keeps_the_most_recent_entries_within_its_cap() -> None:
    live = m.LiveMetrics(1)
    exchanges = _exchanges("consumer_lag_kafkapython.pcap")
    # up to its 4th Fetch answer, when one partition's latest answer is older than the others'
    fourth = [i for i, ex in enumerate(exchanges) if ex.api_name == "Fetch"][3]
    for ex in exchanges[:fourth + 1]:
        live.add(ex)
    entries = sorted(live.lag.lags.items(), key=lambda kv: kv[1][0])      # (by the time of the latest answer)
    assert len(entries) == 3        # 3 partitions, one consumer
    assert entries[0][1][0] < entries[1][1][0] and max(v[1] for _k, v in entries) > 0
    last = entries[-1][1][0]
    # none quiet for LAG_TTL: all kept; then the oldest past the cap go
    live.lag.prune(entries[0][1][0] + m.LAG_TTL - 1, 3)
    assert live.lag.lags == dict(entries)
    live.lag.prune(last, 2)
    assert live.lag.lags == dict(entries[1:])
    # latest(): each entry's lag at its latest answer, with the consumer's group
    rows = live.lag.latest()
    (group,) = {g for _c, g in live.lag.members}
    assert sorted(rows) == sorted((group, *k, v[1]) for k, v in entries[1:])
    # with a budget of one: the first consumer-partition by name, the other folded into
    # "other", with its value (the largest of those folded)
    got = _scrape(live)["kafkawire_consumer_lag_records"]
    first = (("client_id", _s(rows[0][1])), ("group", _s(rows[0][0])), ("partition", _s(rows[0][3])),
             ("topic", _s(rows[0][2])))
    other = (("client_id", "other"), ("group", "other"), ("partition", "other"), ("topic", "other"))
    assert got == {first: rows[0][4], other: max(r[4] for r in rows[1:])}
    folded = _by(_scrape(live)["kafkawire_metrics_folded_series_total"], "metric")
    assert folded[("kafkawire_consumer_lag_records",)] == 1      # the same series folded at each scrape: once


def test_a_client_s_group_is_the_one_its_requests_name_most_often() -> None:
    lag = m._LiveLag()
    lag.lags = {("c1", "t", 0): (1.0, 5), ("c2", "t", 0): (1.0, 7), (None, "t", 1): (2.0, 0)}
    lag.members = {("c1", "b"): 3, ("c1", "a"): 3, ("c1", "z"): 1, ("c2", "g"): 1, ("c2", "h"): 2}
    assert sorted(lag.latest(), key=lambda r: r[1] or "") == [
        (None, None, "t", 1, 0), ("a", "c1", "t", 0, 5), ("h", "c2", "t", 0, 7)]


def test_exposition_is_openmetrics_with_units() -> None:
    live = m.LiveMetrics(100)
    for ex in _exchanges("group_rdkafka.pcap"):
        live.add(ex)
    reg = CollectorRegistry(auto_describe=False)
    reg.register(m._Collector(live))
    text = generate_latest(reg).decode()
    assert text.endswith("# EOF\n")
    assert "# UNIT kafkawire_request_latency_seconds seconds" in text
    assert "# TYPE kafkawire_request_latency_seconds histogram" in text
    assert 'kafkawire_request_latency_seconds_bucket{api="Fetch",le="0.0001",version="' in text
    assert "# UNIT kafkawire_consumer_lag_records records" in text
    # what the endpoint writes for Prometheus' Accept header (no escaping asked: underscores)
    # is the library's writing, byte for byte, without its per-character name escaping
    from prometheus_client.exposition import choose_encoder
    accept = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
              "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
    encoder, kind = m._encoder(accept)
    assert encoder(reg) == text.encode() and kind == choose_encoder(accept)[1]
    assert m._encoder(None)[0](reg) == choose_encoder("")[0](reg)       # (the text format)
    names = {f.name for f in text_string_to_metric_families(text)}
    assert names >= {"kafkawire_requests", "kafkawire_errors", "kafkawire_request_bytes", "kafkawire_response_bytes",
                     "kafkawire_throttled_responses", "kafkawire_throttle_time_seconds",
                     "kafkawire_unanswered_requests", "kafkawire_orphan_responses", "kafkawire_open_connections",
                     "kafkawire_capture_packets", "kafkawire_capture_kernel_dropped_packets",
                     "kafkawire_capture_dropped_packets", "kafkawire_skipped_bytes",
                     "kafkawire_metrics_folded_series", "kafkawire_consumer_lag_records",
                     "kafkawire_consumer_committed_lag_records"}
    assert all(n.startswith("kafkawire_") for n in names)


# ---------------------------------------------------------------- the command's errors


def _cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from analyzer.cli import main; main()", "live", *args],
                          capture_output=True, text=True, timeout=timeout, cwd=REPO)


@pytest.mark.parametrize(("addr", "says"), [
    ("9464", "'9464' is not HOST:PORT"),
    ("127.0.0.1:http", "port 'http' is not a number from 0 to 65535"),
    ("127.0.0.1:70000", "port '70000' is not a number"),
    ("::1:9464", "an IPv6 address goes in brackets"),
    ("[nope]:9464", "'nope' is not an IPv6 address"),
])
def test_bad_address_is_a_usage_error(addr: str, says: str) -> None:
    r = _cli("-i", "lo", "--metrics", addr, "-d", "1")
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("kafkawire-sniff: error: ") and says in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_max_series_without_metrics_is_a_usage_error() -> None:
    r = _cli("-i", "lo", "--metrics-max-series", "5", "-d", "1")
    assert r.returncode == 2 and "--metrics-max-series needs --metrics" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_port_in_use_and_foreign_address_are_one_line() -> None:
    why = lab.can_capture()
    if why:
        pytest.skip(why)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        r = _cli("-i", "lo", "-p", "1", "--metrics", f"127.0.0.1:{port}", "-d", "1")
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip() == (f"kafkawire-sniff: error: cannot serve metrics on 127.0.0.1:{port}: "
                                "Address already in use (is another exporter on that port?)")
    r = _cli("-i", "lo", "-p", "1", "--metrics", "192.0.2.1:9464", "-d", "1")
    assert r.returncode == 1 and "cannot serve metrics on 192.0.2.1:9464: Cannot assign requested address" \
        in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_scraped_while_capturing_and_closed_by_ctrl_c(tmp_path: Path) -> None:
    """A real capture on lo (a crafted ApiVersions conversation), the endpoint on a port the
    system picks (named on the "capturing on" line), scraped while live runs; Ctrl-C stops
    it as it stops `live` (summary, exit 130) and the endpoint goes with it."""
    why = lab.can_capture()
    if why:
        pytest.skip(why)
    from tests.test_live import _KafkaPair, _start_live, _wait

    pair = _KafkaPair()
    try:
        proc, err = _start_live(pair.port, tmp_path, "--metrics", "127.0.0.1:0", "--metrics-max-series", "50")
        try:
            url = next(w for w in err.read_text().split() if w.startswith("http://127.0.0.1:")).rstrip(";")
            for _ in range(4):
                pair.exchange()
            deadline = time.monotonic() + 10
            while True:
                with urllib.request.urlopen(url, timeout=5) as r:
                    text = r.read().decode()
                    kind = r.headers["Content-Type"]
                if 'kafkawire_requests_total{api="ApiVersions",version="0"} 4.0' in text \
                        and "kafkawire_capture_packets_total 0.0" not in text:
                    break
                assert time.monotonic() < deadline, text
                time.sleep(0.2)
            assert kind.startswith("text/plain")        # (no Accept header: the Prometheus text format)
            assert 'kafkawire_client_requests_total{client_id="kws-live-stop"} 4.0' in text
            assert 'kafkawire_request_latency_seconds_count{api="ApiVersions",version="0",wait="none"} 4.0' in text
            assert "kafkawire_open_connections 1.0" in text
            req = urllib.request.Request(url, headers={"Accept": "application/openmetrics-text; version=1.0.0"})
            with urllib.request.urlopen(req, timeout=5) as r:
                assert r.headers["Content-Type"].startswith("application/openmetrics-text")
                assert r.read().decode().endswith("# EOF\n")
            os.kill(proc.pid, signal.SIGINT)
            rc = _wait(proc)
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
    finally:
        pair.close()
    out = (tmp_path / "live.out").read_text()
    assert rc == 130 and "Traceback" not in err.read_text()
    assert "== live summary: stopped by Ctrl-C (SIGINT)" in out and "ApiVersions v0" not in out
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0


# ---------------------------------------------------------------- Prometheus, for real


class _Prometheus:
    def __init__(self, target: str, tmp: Path, lifetime: float) -> None:
        exe = shutil.which("prometheus")
        if not exe:
            raise lab.LabUnavailable("prometheus not installed (apt-get install -y prometheus)")
        self.port = lab.free_port()
        cfg = tmp / "prometheus.yml"
        cfg.write_text("global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\nscrape_configs:\n"
                       f"  - job_name: kafkawire\n    static_configs:\n      - targets: ['{target}']\n")
        self.proc = lab.spawn("prometheus", lab.bounded(
            [exe, f"--config.file={cfg}", f"--storage.tsdb.path={tmp / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"], lifetime), tmp / "prometheus.log")
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            if not self.proc.alive() or time.monotonic() > deadline:
                self.proc.stop()
                raise lab.LabUnavailable("prometheus did not start: " + self.proc.output()[-400:])
            time.sleep(0.2)

    def query(self, q: str) -> list[dict[str, Any]]:
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": q})
        with urllib.request.urlopen(url, timeout=5) as r:
            body = json.loads(r.read())
        assert body["status"] == "success", body
        return list(body["data"]["result"])

    def values(self, q: str, *labels: str) -> dict[tuple[str, ...], float]:
        out: dict[tuple[str, ...], float] = {}
        for row in self.query(q):
            key = tuple(row["metric"].get(label, "") for label in labels)
            out[key] = out.get(key, 0.0) + float(row["value"][1])
        return out

    def wait_for(self, what: str, ok: Any, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            got = self.query(what)
            if ok(got):
                return got
            assert time.monotonic() < deadline, f"prometheus: {what} -> {got}"
            time.sleep(0.25)


def _counts(rows: Iterable[dict[str, Any]]) -> Counter[tuple[str, str]]:
    return Counter((r["api_name"], _s(r["api_version"])) for r in rows if r["status"] != "orphan_response")


@pytest.mark.slow
def test_prometheus_stores_what_read_and_stats_find_in_the_pcap(tmp_path: Path) -> None:
    why = lab.can_capture()
    if why:
        pytest.skip(why)
    if not shutil.which("prometheus"):
        pytest.skip("prometheus not installed (Debian: apt-get install -y prometheus; tests/run.sh does)")
    try:
        broker = lab.start_tansu(lifetime=90, logdir=tmp_path)
    except lab.LabUnavailable as e:
        pytest.skip(f"no Tansu broker: {e}")
    pcap = tmp_path / "live.pcap"
    endpoint = lab.free_port()
    topic = "metrics-lag"
    with broker:
        r = lab.run_workload(["create", "--bs", broker.bootstrap, "--topic", topic, "--partitions", "3"],
                             timeout=30, log=tmp_path / "create.log")
        assert r.returncode == 0, r.output
        err = tmp_path / "live.err"
        sniff = subprocess.Popen(
            [sys.executable, "-c", "from analyzer.cli import main; main()", "live", "-i", "lo",
             "-p", str(broker.port), "--metrics", f"127.0.0.1:{endpoint}", "--write", str(pcap), "-d", "80"],
            stdout=open(tmp_path / "live.out", "w"), stderr=open(err, "w"),  # noqa: SIM115
            cwd=REPO, start_new_session=True)
        prom = None
        try:
            deadline = time.monotonic() + 20
            while "capturing on" not in err.read_text():
                assert sniff.poll() is None and time.monotonic() < deadline, err.read_text()
                time.sleep(0.1)
            assert f"metrics at http://127.0.0.1:{endpoint}/metrics" in err.read_text()
            try:
                prom = _Prometheus(f"127.0.0.1:{endpoint}", tmp_path, lifetime=85)
            except lab.LabUnavailable as e:
                pytest.skip(str(e))
            prom.wait_for('up{job="kafkawire"}', lambda rows: rows and rows[0]["value"][1] == "1", 20)
            # a consumer group member that falls behind a producer and commits (kafka-python)
            res = lab.run_workload(["lag", "--bs", broker.bootstrap, "--topic", topic, "--n", "300",
                                    "--partitions", "3", "--codec", "gzip", "--group", "kws-metrics-group",
                                    "--group-secs", "4", "--seed", "7"], timeout=50, log=tmp_path / "lag.log")
            assert res.returncode == 0, res.output
            # then another producer and a consumer without a group: high watermarks seen after
            # the group's last commit, so its committed lag is known (and not zero)
            res2 = lab.run_workload(["pf", "--bs", broker.bootstrap, "--client", "rdkafka", "--topic", topic,
                                     "--n", "12", "--partitions", "3", "--seed", "8", "--fetch-secs", "3"],
                                    timeout=30, log=tmp_path / "pf.log")
            assert res2.returncode == 0, res2.output
            # the clients are gone; live counts each packet as it comes and its capture figures
            # once a second: a scrape two seconds later holds everything
            done = time.time() + 2.0
            prom.wait_for("timestamp(kafkawire_capture_packets_total)",
                          lambda rows: rows and float(rows[0]["value"][1]) > done, 15)
            stored = prom.values("kafkawire_requests_total", "api", "version")
            count = prom.values("kafkawire_request_latency_seconds_count", "api", "version", "wait")
            total = prom.values("kafkawire_request_latency_seconds_sum", "api", "version")
            p99 = prom.query('histogram_quantile(0.99, sum by (api, le) '
                             '(rate(kafkawire_request_latency_seconds_bucket{wait="none"}[1m])))')
            lag = prom.values("kafkawire_consumer_lag_records", "client_id", "group", "topic", "partition")
            committed = prom.values("kafkawire_consumer_committed_lag_records", "group", "topic", "partition")
            packets = prom.values("kafkawire_capture_packets_total")
            dropped = prom.values("kafkawire_capture_kernel_dropped_packets_total")
            os.kill(sniff.pid, signal.SIGTERM)
            rc = sniff.wait(timeout=20)
        finally:
            if prom is not None:
                prom.proc.stop()
            if sniff.poll() is None:
                os.kill(sniff.pid, signal.SIGKILL)
                sniff.wait(5)
    text = err.read_text() + (tmp_path / "live.out").read_text()
    assert rc == 143 and "Traceback" not in text, text
    assert "== live summary: stopped by SIGTERM" in text
    # the endpoint went with the process
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", endpoint)) != 0

    read = subprocess.run([sys.executable, "-c", "from analyzer.cli import main; main()", "read", str(pcap),
                           "-p", str(broker.port), "-f", "ndjson"], capture_output=True, text=True, timeout=60,
                          cwd=REPO)
    assert read.returncode == 0, read.stderr
    want = _counts(json.loads(line) for line in read.stdout.splitlines())
    assert sum(want.values()) >= 25 and {"Produce", "Fetch", "JoinGroup", "OffsetCommit"} <= {a for a, _v in want}
    assert {k: int(v) for k, v in stored.items()} == dict(want)
    assert packets[()] > 0 and dropped[()] == 0

    stats = subprocess.run([sys.executable, "-c", "from analyzer.cli import main; main()", "stats", str(pcap),
                            "-p", str(broker.port), "-f", "json"], capture_output=True, text=True, timeout=60,
                           cwd=REPO)
    assert stats.returncode == 0, stats.stderr
    report = json.loads(stats.stdout)
    answered = {(g["api"], _s(g["version"])): g for g in report["groups"] if g["answered"]}
    have = Counter()
    for (api, version, _wait), n in count.items():
        have[(api, version)] += int(n)
    assert dict(have) == {k: g["answered"] for k, g in answered.items()}
    for k, g in answered.items():
        # stats prints the mean to the microsecond (ms, 3 decimals)
        assert total[k] * 1000 == pytest.approx(g["latency_ms"]["mean"] * g["answered"],
                                                abs=0.0005 * g["answered"] + 1e-6), k
        assert int(count.get((*k, "none"), 0)) == g["service"], k
        assert {w: int(n) for (a, v, w), n in count.items() if (a, v) == k and w != "none"} == g["waits"], k
    assert any(g["waits"] for g in answered.values())       # (the waits are apart: a Fetch long poll, a join)
    assert {r["metric"].get("api") for r in p99} >= {"Produce", "Fetch"}
    # consumer lag: stats' latest figure per consumer and partition, and the committed lag
    assert {k: int(v) for k, v in lag.items()} == {
        (_s(d["client_id"]), _s(d["group"]), d["topic"], _s(d["partition"])): d["last"]
        for d in report["consumer_lag"]}
    assert {k[0] for k in lag} == {"kws-slow-consumer", "kws-rdkafka-consumer"}
    assert {k[1] for k in lag if k[0] == "kws-slow-consumer"} == {"kws-metrics-group"}
    cl = subprocess.run([sys.executable, "-c", "from analyzer.cli import main; main()", "stats", str(pcap),
                         "-p", str(broker.port), "-f", "json", "--section", "committed_lag"],
                        capture_output=True, text=True, timeout=60, cwd=REPO)
    assert cl.returncode == 0, cl.stderr
    want_committed = {(d["group"], d["topic"], _s(d["partition"])): d["lag"]
                      for d in json.loads(cl.stdout)["committed_lag"] if d["lag"] is not None}
    assert {k: int(v) for k, v in committed.items()} == want_committed
    assert set(want_committed) == {("kws-metrics-group", topic, str(p)) for p in range(3)}
    assert sum(want_committed.values()) > 0
