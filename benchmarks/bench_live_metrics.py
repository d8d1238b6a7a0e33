#!/usr/bin/env python3
"""``live --metrics`` for hours: flat memory, no packet lost, every scrape answered quickly.

Issue 40: "runs ``live --metrics`` for at least 30 minutes on loopback under a steady
workload with connections opening and closing, clients coming and going and topics
created and deleted, samples RSS and open file descriptors every few seconds, and reports
them: memory must stay flat (no growth after warm-up beyond 10 %), no packet lost by us at
the rate held, the endpoint answering every scrape within 100 ms."

What runs, all on 127.0.0.1, every process bounded in time and stopped by its PID:

- Tansu (memory storage) on a free port (``tests/lab.py``);
- tcpdump on the broker's port, writing a pcap: the peer that says what was on the wire;
- ``kafkawire-sniff live -i lo -p PORT --metrics 127.0.0.1:P --metrics-max-series N`` (no
  per-exchange output: the monitor's way), the process measured;
- Prometheus (Debian's ``prometheus``, when installed) scraping it every
  ``--scrape-interval`` seconds, as a real deployment would;
- the workload (confluent-kafka, one child process): a producer writing ``--rate`` records/s
  to topic ``steady`` (6 partitions), a consumer group member reading it (auto commit
  every second); and every ``--churn-every`` seconds a new topic ``churn-I`` created, a new
  producer (``churn-producer-I``) and a new group member (``churn-consumer-I``, group
  ``churn-group-I``) on fresh connections writing, reading and committing 20 records and
  going away, and the previous churn topic deleted. With ``--metrics-max-series`` below the
  number of client ids the run sees, the budget folds series into ``other``.

Every ``--sample-every`` seconds the script reads live's RSS and open descriptors
(/proc/PID/status, /proc/PID/fd), its CPU time, and scrapes the endpoint itself (timed,
OpenMetrics). At the end it stops the workload, takes a final scrape, stops live with
SIGTERM (it must exit 143 with its closing summary), and checks what was lost:

- the kernel's drops and the TCP bytes never captured, as live's metrics count them: 0;
- live's packets against tcpdump's count of the same filter: equal;
- live's requests per API and version (the final scrape) against ``stats`` of tcpdump's pcap.

Memory is flat when the highest RSS after the warm-up is within 10 % of the median RSS
of the first minute after it. The report (JSON and markdown) holds every sample and the
verdicts; nothing is asserted, the exit status is 0 unless the run itself failed.

Usage::

    sudo python benchmarks/bench_live_metrics.py                     # 30 minutes
    sudo python benchmarks/bench_live_metrics.py --duration 120 --warmup 30
    sudo python benchmarks/bench_live_metrics.py --rate 200 --json r.json --markdown r.md
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import lab  # noqa: E402  (the lab's broker, capture and process helpers: imported, not copied)

WORKLOAD = r'''
import json, signal, sys, threading, time
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

bs, duration, rate, churn_every = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *a: stop.set())
signal.signal(signal.SIGINT, lambda *a: stop.set())
counts = {"produced": 0, "delivered": 0, "consumed": 0, "churn_rounds": 0, "churn_consumed": 0,
          "topics_created": 0, "topics_deleted": 0, "errors": 0}
admin = AdminClient({"bootstrap.servers": bs, "client.id": "bench-admin"})

def wait(futures, what):
    for name, f in futures.items():
        try:
            f.result(timeout=15)
            counts[what] += 1
        except Exception as e:
            counts["errors"] += 1
            print(what, name, e, flush=True)

wait(admin.create_topics([NewTopic("steady", 6, 1)], request_timeout=10), "topics_created")

def steady_consumer():
    c = Consumer({"bootstrap.servers": bs, "group.id": "bench-steady", "client.id": "bench-steady-consumer",
                  "auto.offset.reset": "earliest", "enable.auto.commit": True, "auto.commit.interval.ms": 1000,
                  "fetch.wait.max.ms": 100, "session.timeout.ms": 10000, "heartbeat.interval.ms": 1000})
    c.subscribe(["steady"])
    while not stop.is_set():
        m = c.poll(0.2)
        if m is not None and not m.error():
            counts["consumed"] += 1
    c.close()

def churn():
    i = 0
    while not stop.wait(churn_every):
        i += 1
        topic = f"churn-{i}"
        wait(admin.create_topics([NewTopic(topic, 2, 1)], request_timeout=10), "topics_created")
        p = Producer({"bootstrap.servers": bs, "client.id": f"churn-producer-{i}", "linger.ms": 5})
        for k in range(20):
            p.produce(topic, value=b"churn %d %d" % (i, k) * 8, partition=k % 2)
        p.flush(10)
        del p
        c = Consumer({"bootstrap.servers": bs, "group.id": f"churn-group-{i}", "client.id": f"churn-consumer-{i}",
                      "auto.offset.reset": "earliest", "enable.auto.commit": False, "fetch.wait.max.ms": 100,
                      "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
        c.subscribe([topic])
        got, deadline = 0, time.monotonic() + 6
        while got < 20 and time.monotonic() < deadline and not stop.is_set():
            m = c.poll(0.2)
            if m is not None and not m.error():
                got += 1
        try:
            c.commit(asynchronous=False)
        except Exception as e:
            print("commit", e, flush=True)
        c.close()
        counts["churn_consumed"] += got
        if i > 1:
            wait(admin.delete_topics([f"churn-{i - 1}"], request_timeout=10), "topics_deleted")
        counts["churn_rounds"] = i

threads = [threading.Thread(target=steady_consumer), threading.Thread(target=churn)]
for t in threads:
    t.start()

def delivered(err, msg):
    if err is None:
        counts["delivered"] += 1

p = Producer({"bootstrap.servers": bs, "client.id": "bench-steady-producer", "linger.ms": 5})
start = time.monotonic()
nxt = start
n = 0
while not stop.is_set() and time.monotonic() - start < duration:
    p.produce("steady", key=b"%d" % n, value=b"record %d " % n * 10, partition=n % 6, on_delivery=delivered)
    counts["produced"] += 1
    n += 1
    p.poll(0)
    nxt += 1.0 / rate
    delay = nxt - time.monotonic()
    if delay > 0:
        time.sleep(delay)
p.flush(15)
stop.set()
for t in threads:
    t.join(30)
print("RESULT " + json.dumps(counts), flush=True)
'''


# ---------------------------------------------------------------- measuring the process


def rss_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def open_fds(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def cpu_seconds(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)", re.M)


def scrape(url: str) -> tuple[float, dict[str, float], int]:
    """(seconds the scrape took, sample name + labels -> value, bytes)."""
    req = urllib.request.Request(url, headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=10) as r:
        body = r.read()
    took = time.perf_counter() - t0
    text = body.decode()
    return took, {m.group(1) + (m.group(2) or ""): float(m.group(3)) for m in _SAMPLE.finditer(text)}, len(body)


def total(samples: dict[str, float], name: str) -> float:
    return sum(v for k, v in samples.items() if k == name or k.startswith(name + "{"))


def requests_by_api(samples: dict[str, float]) -> dict[str, int]:
    out: dict[str, int] = {}
    for k, v in samples.items():
        if k.startswith("kafkawire_requests_total{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', k))
            out[f"{labels['api']} v{labels['version']}"] = int(v)
    return out


# ---------------------------------------------------------------- the run


def start_prometheus(target: str, tmp: Path, interval: float, lifetime: float) -> tuple[Any, int] | None:
    exe = shutil.which("prometheus")
    if not exe:
        return None
    port = lab.free_port()
    cfg = tmp / "prometheus.yml"
    cfg.write_text(f"global:\n  scrape_interval: {int(interval * 1000)}ms\n  scrape_timeout: {int(min(interval, 10) * 900)}ms\n"
                   f"scrape_configs:\n  - job_name: kafkawire\n    static_configs:\n      - targets: ['{target}']\n")
    proc = lab.spawn("prometheus", lab.bounded(
        [exe, f"--config.file={cfg}", f"--storage.tsdb.path={tmp / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"], lifetime), tmp / "prometheus.log")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=1):
                return proc, port
        except OSError:
            time.sleep(0.3)
    proc.stop()
    return None


def start_tcpdump(out: Path, port: int, lifetime: float, install: bool) -> Any:
    """tcpdump on lo, the broker's port, with live's buffer (32 MiB; tcpdump's 2 MiB drops
    packets at this rate when the machine is busy) and without immediate mode."""
    exe = lab.ensure_tool("tcpdump", "tcpdump", install)
    argv = [exe, "-i", "lo", "-n", "-B", "32768", "-s", "262144", "-w", str(out)]
    if os.geteuid() == 0:
        argv[1:1] = ["-Z", "root"]
    proc = lab.spawn("tcpdump", lab.bounded([*argv, lab.port_filter([port])], lifetime),
                     out.with_name(out.name + ".capture.log"))
    deadline = time.monotonic() + 10
    while "listening on" not in proc.output():
        if not proc.alive() or time.monotonic() > deadline:
            proc.stop()
            raise RuntimeError("tcpdump did not start: " + proc.output()[-300:])
        time.sleep(0.05)
    time.sleep(0.3)
    return proc


def prom_query(port: int, q: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": q})
    with urllib.request.urlopen(url, timeout=10) as r:
        return list(json.loads(r.read())["data"]["result"])


def memory_verdict(samples: list[dict[str, Any]], warmup: float) -> dict[str, Any]:
    after = [s for s in samples if s["t"] >= warmup and s["rss_kb"]]
    if len(after) < 3:
        return {"flat": None, "note": "too few samples after the warm-up"}
    first = [s["rss_kb"] for s in after if s["t"] < warmup + 60] or [after[0]["rss_kb"]]
    base = statistics.median(first)
    peak = max(s["rss_kb"] for s in after)
    last = statistics.median([s["rss_kb"] for s in after if s["t"] >= after[-1]["t"] - 60])
    ts = [s["t"] for s in after]
    ys = [s["rss_kb"] for s in after]
    mt, my = statistics.fmean(ts), statistics.fmean(ys)
    den = sum((t - mt) ** 2 for t in ts)
    slope = sum((t - mt) * (y - my) for t, y in zip(ts, ys, strict=True)) / den if den else 0.0
    fds = [s["fds"] for s in after if s["fds"] is not None]
    return {"baseline_rss_kb": base, "peak_rss_kb": peak, "last_minute_rss_kb": last,
            "growth_peak_pct": round(100 * (peak - base) / base, 2),
            "growth_last_pct": round(100 * (last - base) / base, 2),
            "slope_kb_per_hour": round(slope * 3600, 1),
            "fds_min": min(fds) if fds else None, "fds_max": max(fds) if fds else None,
            "flat": (peak - base) / base <= 0.10}


def run(a: argparse.Namespace) -> dict[str, Any]:
    why = lab.can_capture()
    if why:
        sys.exit(f"bench_live_metrics: {why}")
    tmp = Path(a.work_dir or tempfile.mkdtemp(prefix="kws-bench-metrics-"))
    tmp.mkdir(parents=True, exist_ok=True)
    life = a.duration + 600
    broker = lab.start_tansu(lifetime=life, logdir=tmp)
    procs: list[Any] = []
    live = None
    result: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "duration_s": a.duration,
                              "rate_records_per_s": a.rate, "churn_every_s": a.churn_every,
                              "max_series": a.max_series, "sample_every_s": a.sample_every, "warmup_s": a.warmup,
                              "cpus": os.cpu_count(), "tansu": broker.description}
    try:
        pcap = tmp / "peer.pcap"
        cap = start_tcpdump(pcap, broker.port, life, a.install)
        procs.append(cap)
        endpoint = lab.free_port()
        url = f"http://127.0.0.1:{endpoint}/metrics"
        err_path, out_path = tmp / "live.err", tmp / "live.out"
        live = subprocess.Popen(
            [sys.executable, "-m", "analyzer", "live", "-i", "lo", "-p", str(broker.port),
             "--metrics", f"127.0.0.1:{endpoint}", "--metrics-max-series", str(a.max_series),
             "-d", str(a.duration + 300)],
            stdout=open(out_path, "w"), stderr=open(err_path, "w"), cwd=ROOT, start_new_session=True)  # noqa: SIM115
        deadline = time.monotonic() + 30
        while "capturing on" not in err_path.read_text():
            if live.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("live did not start: " + err_path.read_text()[-500:])
            time.sleep(0.1)
        prom = start_prometheus(f"127.0.0.1:{endpoint}", tmp, a.scrape_interval, life) if a.prometheus else None
        if prom is not None:
            procs.append(prom[0])
        result["prometheus"] = prom is not None
        print(f"live pid {live.pid}, metrics at {url}; Prometheus: {'port ' + str(prom[1]) if prom else 'no'}; "
              f"work dir {tmp}", flush=True)
        wl = lab.spawn("workload", lab.bounded([sys.executable, "-c", WORKLOAD, broker.bootstrap, str(a.duration),
                                                str(a.rate), str(a.churn_every)], a.duration + 120),
                       tmp / "workload.log", env={**os.environ, "PYTHONUNBUFFERED": "1"})
        procs.append(wl)
        t0 = time.monotonic()
        samples: list[dict[str, Any]] = []
        scrapes: list[float] = []
        errors: list[str] = []
        next_sample = t0
        while wl.alive() and time.monotonic() - t0 < a.duration + 120:
            now = time.monotonic()
            if now < next_sample:
                time.sleep(min(0.5, next_sample - now))
                continue
            next_sample += a.sample_every
            s: dict[str, Any] = {"t": round(now - t0, 1), "rss_kb": rss_kb(live.pid), "fds": open_fds(live.pid),
                                 "cpu_s": cpu_seconds(live.pid)}
            try:
                took, got, size = scrape(url)
                scrapes.append(took)
                s.update(scrape_ms=round(took * 1000, 2), scrape_bytes=size,
                         packets=int(total(got, "kafkawire_capture_packets_total")),
                         requests=int(total(got, "kafkawire_requests_total")),
                         kernel_dropped=int(total(got, "kafkawire_capture_kernel_dropped_packets_total")),
                         lost_bytes=int(total(got, "kafkawire_capture_lost_bytes_total")),
                         open_connections=int(total(got, "kafkawire_open_connections")),
                         folded=int(total(got, "kafkawire_metrics_folded_series_total")),
                         series=sum(1 for k in got if not k.endswith("_created")))
            except OSError as e:
                errors.append(f"{s['t']}: {e}")
            samples.append(s)
            if len(samples) % max(1, int(60 / a.sample_every)) == 0:
                print(f"{s['t']:>7.0f} s  rss {s['rss_kb'] / 1024 if s['rss_kb'] else 0:7.1f} MiB  fds {s['fds']}  "
                      f"cpu {s['cpu_s']:.1f} s  requests {s.get('requests')}  packets {s.get('packets')}  "
                      f"scrape {s.get('scrape_ms')} ms  series {s.get('series')}  folded {s.get('folded')}",
                      flush=True)
        wl.stop(signal.SIGTERM, timeout=60)
        result["workload"] = lab.parse_result(wl.output())
        time.sleep(3)                       # the last packets, then a tick of live's capture figures
        took, final, _size = scrape(url)
        scrapes.append(took)
        if prom is not None:
            time.sleep(a.scrape_interval + 1)
            rows = prom_query(prom[1], f'max_over_time(scrape_duration_seconds{{job="kafkawire"}}[{int(a.duration) + 300}s])')
            up = prom_query(prom[1], f'min_over_time(up{{job="kafkawire"}}[{int(a.duration) + 300}s])')
            n = prom_query(prom[1], f'count_over_time(up{{job="kafkawire"}}[{int(a.duration) + 300}s])')
            result["prometheus_scrapes"] = int(float(n[0]["value"][1])) if n else 0
            result["prometheus_max_scrape_ms"] = round(float(rows[0]["value"][1]) * 1000, 2) if rows else None
            result["prometheus_always_up"] = bool(up) and up[0]["value"][1] == "1"
        live.send_signal(signal.SIGTERM)
        try:
            rc = live.wait(timeout=60)
        except subprocess.TimeoutExpired:
            live.kill()
            rc = live.wait(10)
        live_text = out_path.read_text() + err_path.read_text()
        result["live_exit"] = rc
        result["live_clean_stop"] = rc == 143 and "== live summary: stopped by SIGTERM" in live_text \
            and "Traceback" not in live_text
        time.sleep(0.5)
        cap.stop(signal.SIGINT)
        tcpdump_err = cap.output()
        m = re.search(r"(\d+) packets? captured", tcpdump_err)
        peer_packets = int(m.group(1)) if m else None
        m = re.search(r"(\d+) packets? dropped by kernel", tcpdump_err)
        result["peer_kernel_dropped"] = int(m.group(1)) if m else None
        st = subprocess.run([sys.executable, "-m", "analyzer", "stats", str(pcap), "-p", str(broker.port), "-f", "json",
                             "-j", "1"], capture_output=True, text=True, timeout=1800, cwd=ROOT)
        peer_requests: dict[str, int] = {}
        if st.returncode == 0:
            for g in json.loads(st.stdout)["groups"]:
                n_req = g["count"] - g["orphans"]
                if n_req:
                    peer_requests[f"{g['api']} v{'' if g['version'] is None else g['version']}"] = n_req
        live_requests = requests_by_api(final)
        elapsed = samples[-1]["t"] if samples else 0.0
        cpu = [s["cpu_s"] for s in samples if s["cpu_s"] is not None]
        result.update({
            "samples": samples,
            "scrape_errors": errors,
            "scrapes": len(scrapes),
            "scrape_ms_max": round(max(scrapes) * 1000, 2) if scrapes else None,
            "scrape_ms_p99": round(statistics.quantiles(scrapes, n=100, method="inclusive")[98] * 1000, 2) if len(scrapes) > 2 else None,
            "scrape_ms_median": round(statistics.median(scrapes) * 1000, 2) if scrapes else None,
            "scrapes_over_100ms": sum(1 for x in scrapes if x > 0.1),
            "memory": memory_verdict(samples, a.warmup),
            "live_packets": int(total(final, "kafkawire_capture_packets_total")),
            "peer_packets": peer_packets,
            "kernel_dropped": int(total(final, "kafkawire_capture_kernel_dropped_packets_total")),
            "lost_bytes": int(total(final, "kafkawire_capture_lost_bytes_total")),
            "live_requests": sum(live_requests.values()),
            "peer_requests": sum(peer_requests.values()),
            "requests_equal": live_requests == peer_requests,
            "requests_differ": {k: (live_requests.get(k), peer_requests.get(k))
                                for k in sorted(set(live_requests) | set(peer_requests))
                                if live_requests.get(k) != peer_requests.get(k)},
            "requests_per_s": round(sum(live_requests.values()) / elapsed, 1) if elapsed else None,
            "packets_per_s": round(int(total(final, "kafkawire_capture_packets_total")) / elapsed, 1) if elapsed else None,
            "live_cpu_share": round((cpu[-1] - cpu[0]) / (samples[-1]["t"] - samples[0]["t"]), 3)
            if len(cpu) > 1 and samples[-1]["t"] > samples[0]["t"] else None,
            "folded_series": int(total(final, "kafkawire_metrics_folded_series_total")),
            "final_series": sum(1 for k in final if not k.endswith("_created")),
            "pcap_bytes": pcap.stat().st_size if pcap.exists() else None,
        })
        # (the comparison with the peer holds when the peer lost nothing itself)
        result["no_loss"] = (result["kernel_dropped"] == 0 and result["lost_bytes"] == 0
                             and (result["peer_kernel_dropped"] != 0
                                  or (result["live_packets"] == peer_packets and result["requests_equal"])))
        if not a.keep:
            pcap.unlink(missing_ok=True)
            shutil.rmtree(tmp / "tsdb", ignore_errors=True)
        return result
    finally:
        if live is not None and live.poll() is None:
            live.kill()
            live.wait(10)
        for p in reversed(procs):
            p.stop()
        broker.stop()


def markdown(r: dict[str, Any]) -> str:
    mem = r["memory"]
    lines = [
        "# live --metrics for hours",
        "",
        f"Started {r['started']}, {r['duration_s']:.0f} s of workload on loopback ({r['cpus']} CPUs, shared), "
        f"Tansu ({r['tansu']}); {r['rate_records_per_s']:g} records/s produced to `steady` and read by a group "
        f"member, a churn round every {r['churn_every_s']:g} s (topic created, new producer and group member on "
        f"new connections, previous topic deleted); --metrics-max-series {r['max_series']}; "
        f"Prometheus scraping: {'yes' if r.get('prometheus') else 'no'}.",
        "",
        "| figure | value |",
        "|---|---|",
        f"| rate held | {r['requests_per_s']} requests/s, {r['packets_per_s']} packets/s |",
        f"| workload | {json.dumps(r.get('workload', {}))} |",
        f"| RSS after warm-up ({r['warmup_s']:g} s) | baseline {mem.get('baseline_rss_kb', 0) / 1024:.1f} MiB, "
        f"peak {mem.get('peak_rss_kb', 0) / 1024:.1f} MiB (+{mem.get('growth_peak_pct')} %), last minute "
        f"{mem.get('last_minute_rss_kb', 0) / 1024:.1f} MiB ({mem.get('growth_last_pct'):+} %), "
        f"slope {mem.get('slope_kb_per_hour')} KiB/h |",
        f"| memory flat (peak within 10 %) | {mem.get('flat')} |",
        f"| open descriptors after warm-up | {mem.get('fds_min')}..{mem.get('fds_max')} |",
        f"| scrapes by the bench | {r['scrapes']}: median {r['scrape_ms_median']} ms, p99 {r['scrape_ms_p99']} ms, "
        f"max {r['scrape_ms_max']} ms, over 100 ms: {r['scrapes_over_100ms']}; errors: {len(r['scrape_errors'])} |",
        f"| Prometheus | {r.get('prometheus_scrapes', '-')} scrapes, max scrape_duration "
        f"{r.get('prometheus_max_scrape_ms', '-')} ms, always up: {r.get('prometheus_always_up', '-')} |",
        f"| series at the end | {r['final_series']} samples, {r['folded_series']} series folded into 'other' |",
        f"| packets | live {r['live_packets']}, tcpdump {r['peer_packets']} (tcpdump's kernel drops "
        f"{r['peer_kernel_dropped']}); live's kernel drops {r['kernel_dropped']}, bytes never captured "
        f"{r['lost_bytes']} |",
        f"| requests | live {r['live_requests']}, stats of tcpdump's pcap {r['peer_requests']}; equal per API and "
        f"version: {r['requests_equal']} {r['requests_differ'] or ''} |",
        f"| no packet lost by us | {r['no_loss']} |",
        f"| live's CPU | {r['live_cpu_share']} of one core |",
        f"| stop by SIGTERM | exit {r['live_exit']}, summary printed: {r['live_clean_stop']} |",
        "",
        "## Samples (one a minute)",
        "",
        "| t s | RSS MiB | fds | CPU s | requests | packets | scrape ms | series | folded |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    per = max(1, int(60 / r["sample_every_s"]))
    for s in r["samples"][::per]:
        lines.append(f"| {s['t']:.0f} | {(s['rss_kb'] or 0) / 1024:.1f} | {s['fds']} | {s['cpu_s']:.1f} | "
                     f"{s.get('requests', '')} | {s.get('packets', '')} | {s.get('scrape_ms', '')} | "
                     f"{s.get('series', '')} | {s.get('folded', '')} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=1800.0, help="seconds of workload (default 1800)")
    ap.add_argument("--warmup", type=float, default=None, help="seconds before memory is judged (default: duration/6)")
    ap.add_argument("--rate", type=float, default=100.0, help="records/s the steady producer writes (default 100)")
    ap.add_argument("--churn-every", type=float, default=10.0, help="seconds between churn rounds (default 10)")
    ap.add_argument("--max-series", type=int, default=100, help="live --metrics-max-series (default 100)")
    ap.add_argument("--sample-every", type=float, default=5.0, help="seconds between samples (default 5)")
    ap.add_argument("--scrape-interval", type=float, default=5.0, help="Prometheus' scrape interval (default 5)")
    ap.add_argument("--no-prometheus", dest="prometheus", action="store_false", help="no Prometheus scraping")
    ap.add_argument("--install", action="store_true", help="apt-get install tcpdump when missing")
    ap.add_argument("--work-dir", help="where the pcap and logs go (default: a new temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep tcpdump's pcap and Prometheus' data")
    ap.add_argument("--json", help="write the report as JSON here")
    ap.add_argument("--markdown", help="write the report as markdown here")
    a = ap.parse_args()
    if a.warmup is None:
        a.warmup = a.duration / 6
    r = run(a)
    text = markdown(r)
    print(text)
    if a.json:
        Path(a.json).write_text(json.dumps(r, indent=1))
    if a.markdown:
        Path(a.markdown).write_text(text)


if __name__ == "__main__":
    main()
