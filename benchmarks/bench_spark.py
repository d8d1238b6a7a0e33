"""Time `kafkawire-sniff spark` with 1 and 2 cores against one process on a big capture.

    python benchmarks/bench_spark.py [--packets 1000000] [--keep /tmp/big.pcap] [--tables] [--lite]

The capture is made by replicating a sample (its TCP connections cloned with shifted
client ports, sequence numbers and timestamps; copies do not overlap in time) until it
holds at least --packets packets; with --keep it is written there and reused.

Reported, each as wall-clock seconds and CPU seconds (this process and every process it
started: `stats`, the JVM and Spark's Python workers), with the machine's load average:
- one process: `kafkawire-sniff stats -j 1 -f json` (the captures' tables written by the
  core, its figures queried by DuckDB), and `check`'s rules over lean trees as `check`
  decodes them (``decode="lite-check"``): together, what the Spark job computes;
- the Spark job on local[1] and local[2] (the job alone, plus the session start), stats
  and check, no tables written (its exchanges' rows are made all the same: its figures are
  Spark SQL's queries over them); its figures compared with those of `stats -f json`, its
  findings with the one-process ones;
- with --tables: the same job writing its Parquet tables (exchanges, partitions,
  connections, and the figures' small ones) to a temporary directory;
- with --lite: the job asked for the stats only (no rule, no table), which decodes with the
  lean mode `stats` uses. (The job decodes lean trees whenever its rows carry no field
  trees and no display filter is given: ``lite_if_enough``.)
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analyzer._core import open_capture, parse_packet  # noqa: E402
from tests.pcapgen import TcpPacket, replicate, write_pcap  # noqa: E402


def make_capture(sample: Path, packets: int, path: str) -> int:
    pkts: list[TcpPacket] = []
    with open_capture(str(sample)) as r:
        for _i, ts, linktype, data, orig_len in r:
            seg = parse_packet(linktype, data, orig_len)
            if not isinstance(seg, str):        # (a str: why the packet is no TCP segment)
                sip, sport, dip, dport, seq, ack, flags, payload, _missing = seg
                pkts.append(TcpPacket(ts, sip, dip, sport, dport, flags, seq, ack, payload))
    span = pkts[-1].ts - pkts[0].ts + 0.5
    copies = -(-packets // len(pkts))
    out = replicate(pkts, copies, port_step=1, time_step=span)
    write_pcap(path, out)
    return len(out)


def tree_cpu() -> float:
    """CPU seconds of this process and all its descendants (live ones, and the waited-for dead)."""
    tick = os.sysconf("SC_CLK_TCK")
    parent: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
        except OSError:
            continue
        fields = st[st.rindex(")") + 2:].split()
        parent[int(d)] = int(fields[1])
        cpu[int(d)] = sum(int(x) for x in fields[11:15]) / tick     # utime stime cutime cstime
    me = os.getpid()
    total = 0.0
    for pid in cpu:
        p = pid
        while p > 1 and p != me:
            p = parent.get(p, 0)
        if p == me:
            total += cpu[pid]
    return total


def differences(a: object, b: object, path: str = "") -> list[str]:
    """Where two JSON values differ (paths), for the report."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            out += differences(a.get(k), b.get(k), f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


class Timer:
    def __enter__(self) -> Timer:
        self.w, self.c = time.monotonic(), tree_cpu()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.monotonic() - self.w
        self.cpu = tree_cpu() - self.c

    def __str__(self) -> str:
        return f"{self.wall:.1f} s wall, {self.cpu:.1f} s CPU"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--packets", type=int, default=1_000_000)
    ap.add_argument("--sample", default=str(ROOT / "samples" / "produce_fetch_rdkafka_gzip.pcap"))
    ap.add_argument("--keep", help="write the capture here (and reuse it if it exists)")
    ap.add_argument("--cores", default="1,2", help="Spark local[N] runs (comma-separated N)")
    ap.add_argument("--tables", action="store_true", help="also time the job writing the Parquet tables")
    ap.add_argument("--lite", action="store_true", help="also time the stats-only job (lean decoding)")
    args = ap.parse_args()

    path = args.keep or os.path.join(tempfile.mkdtemp(prefix="kafkawire-bench-"), "big.pcap")
    t = time.monotonic()
    if not os.path.exists(path):
        n = make_capture(Path(args.sample), args.packets, path)
        print(f"generated {path}: {n} packets, {os.path.getsize(path) / 2**20:.0f} MiB "
              f"in {time.monotonic() - t:.0f} s", flush=True)
    print(f"{os.cpu_count()} CPUs, load average {load()}", flush=True)

    from analyzer.commands.options import options_from_kwargs
    from analyzer.pipeline import Run
    from analyzer.runs import Decode
    from analyzer.sinks.check import Checker

    options, ctx = options_from_kwargs({}, decode=Decode.LITE_CHECK)
    full, _ = options_from_kwargs({})       # (the job chooses its decoding: lite_if_enough)
    with Timer() as stats_t:
        r = subprocess.run([sys.executable, "-m", "analyzer", "stats", "-j", "1", "-f", "json", path],
                           capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        sys.exit(f"stats failed: {r.stderr[-2000:]}")
    ref_res = json.loads(r.stdout)
    del ref_res["connections"]          # (why connections were taken as Kafka: not a figure of the job)
    ref = json.dumps(ref_res, sort_keys=True)
    checker = Checker()
    with Timer() as check_t:
        run = Run(path, options, ctx)
        for ex in run:
            checker.add(ex)
        findings = checker.finish(capture_end=run.summary.last_ts)
    ref_findings = sorted(json.dumps(f.to_json(), sort_keys=True, default=str) for f in findings)
    single = stats_t.wall + check_t.wall
    print(f"one process: stats -j 1 {stats_t}, check {check_t}, together {single:.1f} s (load {load()}), "
          f"{run.summary.packets} packets, {ref_res['throughput']['exchanges']} exchanges, {len(findings)} findings",
          flush=True)

    from analyzer.spark.gather import JobResult
    from analyzer.spark.inputs import JobConfig
    from analyzer.spark.job import run_spark
    from analyzer.spark.session import make_session, stop_session

    def figures_of(res: JobResult) -> dict[str, object]:
        """The job's figures that `stats -f json` gives (it keeps the costly stories besides)."""
        got = json.loads(json.dumps(res.stats, default=str))
        return {k: got.get(k) for k in ref_res}

    results: dict[int, float] = {}
    for cores in (int(c) for c in args.cores.split(",")):
        with Timer() as start:
            spark = make_session(f"local[{cores}]", shuffle_partitions=cores * 2)
        cfg = JobConfig(options=full, ctx=ctx, split_size=32 << 20)
        with Timer() as job:
            res = run_spark(spark, [path], None, cfg)
        got = figures_of(res)
        same = json.dumps(got, sort_keys=True) == ref
        same_f = sorted(json.dumps(f.to_json(), sort_keys=True, default=str) for f in res.findings) == ref_findings
        results[cores] = job.wall
        print(f"spark local[{cores}]: job {job} (+ session start {start.wall:.1f} s; load {load()}), "
              f"{res.reads} read ranges, {res.tasks} read tasks; figures equal to stats: {same}, "
              f"findings equal to check: {same_f}", flush=True)
        if not same:
            diff = differences(got, ref_res)
            print(f"  {len(diff)} differences: " + "; ".join(diff[:5]), flush=True)
        if args.tables:
            out = tempfile.mkdtemp(prefix="kafkawire-bench-out-")
            with Timer() as tab:
                run_spark(spark, [path], out, cfg)
            shutil.rmtree(out, ignore_errors=True)
            print(f"spark local[{cores}] writing the Parquet tables: {tab} (load {load()})", flush=True)
        if args.lite:
            with Timer() as lite:
                res = run_spark(spark, [path], None, JobConfig(options=full, ctx=ctx, split_size=32 << 20,
                                                                   rules=frozenset()))
            same = json.dumps(figures_of(res), sort_keys=True) == ref
            print(f"spark local[{cores}] stats only (lean decoding): {lite}, figures equal to stats: {same}",
                  flush=True)
        stop_session(spark)
    line = ", ".join(f"{c} core(s) {w / single:.2f}" for c, w in results.items())
    print(f"ratio job time / one process (stats + check): {line}"
          + (f"; 2 cores vs 1 core speed-up {results[1] / results[2]:.2f}x" if {1, 2} <= set(results) else ""))


if __name__ == "__main__":
    main()
