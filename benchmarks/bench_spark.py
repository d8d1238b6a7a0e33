"""Time `kafkawire-sniff spark` with 1 and 2 cores against the single-process `stats` on a big capture.

    python benchmarks/bench_spark.py [--packets 1000000] [--keep /tmp/big.pcap]

The capture is made by replicating a sample (its TCP connections cloned with shifted
client ports, sequence numbers and timestamps; copies do not overlap in time) until it
holds at least --packets packets. Reported: seconds for `stats` in one process (the
same StatsAccumulator over the same pipeline), for the Spark job on local[1] and
local[2] (the job alone, and with the session start), and the ratios; the figures of
the three runs are compared.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analyzer.capture import open_capture  # noqa: E402
from analyzer.net import parse_packet  # noqa: E402
from tests.pcapgen import TcpPacket, replicate, write_pcap  # noqa: E402


def make_capture(sample: Path, packets: int, path: str) -> int:
    pkts: list[TcpPacket] = []
    with open_capture(str(sample)) as r:
        for p in r:
            seg = parse_packet(p)
            if seg is not None:
                pkts.append(TcpPacket(p.ts, seg.src.ip, seg.dst.ip, seg.src.port, seg.dst.port, seg.flags,
                                      seg.seq, seg.ack, seg.payload))
    span = pkts[-1].ts - pkts[0].ts + 0.5
    copies = -(-packets // len(pkts))
    out = replicate(pkts, copies, port_step=1, time_step=span)
    write_pcap(path, out)
    return len(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--packets", type=int, default=1_000_000)
    ap.add_argument("--sample", default=str(ROOT / "samples" / "produce_fetch_rdkafka_gzip.pcap"))
    ap.add_argument("--keep", help="write the capture here (and reuse it if it exists)")
    args = ap.parse_args()

    path = args.keep or os.path.join(tempfile.mkdtemp(prefix="kafkawire-bench-"), "big.pcap")
    t = time.monotonic()
    if not os.path.exists(path):
        n = make_capture(Path(args.sample), args.packets, path)
        print(f"generated {path}: {n} packets, {os.path.getsize(path) / 2**20:.0f} MiB "
              f"in {time.monotonic() - t:.0f} s", flush=True)

    from analyzer.options import options_from_kwargs
    from analyzer.pipeline import Run
    from analyzer.stats import StatsAccumulator

    options, ctx = options_from_kwargs({})
    t = time.monotonic()
    acc = StatsAccumulator(("api", "version"), keep_top=0)
    run = Run(path, options, ctx)
    for ex in run:
        acc.add(ex)
    single = time.monotonic() - t
    ref = json.dumps(acc.result(), sort_keys=True)
    print(f"stats (one process): {single:.1f} s, {run.summary.packets} packets, {acc.exchanges} exchanges",
          flush=True)

    from analyzer.spark_job import JobConfig, make_session, run_spark

    results = {}
    for cores in (1, 2):
        t0 = time.monotonic()
        spark = make_session(f"local[{cores}]", shuffle_partitions=cores * 2)
        t1 = time.monotonic()
        res = run_spark(spark, [path], None, JobConfig(options=options, ctx=ctx, split_size=32 << 20))
        t2 = time.monotonic()
        spark.stop()
        same = json.dumps(res.stats.result(), sort_keys=True) == ref
        results[cores] = t2 - t1
        print(f"spark local[{cores}]: job {t2 - t1:.1f} s (+ session start {t1 - t0:.1f} s), "
              f"{res.reads} read ranges, figures equal to stats: {same}", flush=True)
    print(f"ratio job time / one process: 1 core {results[1] / single:.2f}, 2 cores {results[2] / single:.2f}; "
          f"2 cores vs 1 core speed-up {results[1] / results[2]:.2f}x")


if __name__ == "__main__":
    main()
