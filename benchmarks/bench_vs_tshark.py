#!/usr/bin/env python3
"""Time kafkawire-sniff against tshark (and a bare record loop) on one large capture.

Builds (once, cached under /tmp) a pcap of at least ``--packets`` packets made of the
real client traffic in ``samples/``: every sample's connections are cloned many times,
each clone with its own client address and port, shifted sequence numbers and shifted
timestamps, all clones interleaved in time and re-addressed to one broker port so one
``-d tcp.port==P,kafka`` covers every connection for tshark. Then, in the same run and
on the same file, it times each command as a child process (wall clock) and reads that
child's peak RSS from ``os.wait4``:

- ``floor``:        a bare Python loop over the pcap records, reading only record headers;
- ``stats``:        ``kafkawire-sniff stats -f json`` (as a user runs it: on a capture of 8 MB or
  more, one worker process per CPU, each taking a share of the connections);
- ``stats-1proc``:  the same with ``-j 1``: one process;
- ``read-summary``: ``kafkawire-sniff read`` (one summary line per exchange) > /dev/null;
- ``read-ndjson``:  ``kafkawire-sniff read --format ndjson`` (full field trees) > /dev/null;
- ``check``:        ``kafkawire-sniff check -f json`` > /dev/null (as a user runs it: workers
  on a capture of 8 MB or more, as ``stats``);
- ``check-1proc``:  the same with ``-j 1``: one process;
- ``tshark-fields``: ``tshark -n -r F -d tcp.port==P,kafka -T fields -e kafka.request_key
  -e kafka.request.version -e kafka.correlation_id`` > /dev/null;
- ``tshark-json``:  ``tshark ... -T json`` > /dev/null (slow: ``--tshark-json-packets``
  runs it, and ``read-ndjson`` again, on a smaller capture built the same way; the
  ratio is taken on that file, and the full-size tshark time is extrapolated and
  labelled as such).

Usage::

    python benchmarks/bench_vs_tshark.py                    # 1,000,000 packets
    python benchmarks/bench_vs_tshark.py --packets 250000 --repeat 3
    python benchmarks/bench_vs_tshark.py --skip-tshark-json
"""
from __future__ import annotations

import argparse
import heapq
import json
import math
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analyzer._core import open_capture, parse_packet  # noqa: E402
from analyzer.model import TCP_ACK, TCP_FIN, TCP_RST, TCP_SYN, Endpoint, Packet, Segment  # noqa: E402

BROKER_PORT = 9092
CACHE_DIR = Path(tempfile.gettempdir()) / "kafkawire-bench"
GENERATOR_VERSION = 3            # bump when the capture recipe changes (invalidates the cache)
DEFAULT_SAMPLES = (
    "produce_fetch_rdkafka_none.pcap", "produce_fetch_rdkafka_gzip.pcap",
    "produce_fetch_rdkafka_zstd_ipv6.pcap", "produce_fetch_aiokafka_lz4.pcap",
    "produce_fetch_kafkapython_snappy.pcap", "produce_fetch_kafkapython_zstd.pcap",
    "produce_fetch_kafkapython_gzip_pcapng.pcapng", "group_rdkafka.pcap", "txn_rdkafka.pcap",
    "admin_rdkafka.pcap", "old_kafkapython2_0101_tansu.pcap", "old_rdkafka_090_mock.pcap",
)


# -- building the capture ---------------------------------------------------------------

class Tmpl(NamedTuple):
    """One packet of a sample, ready to be cloned."""
    dt: float            # seconds since the sample's first packet
    v6: bool
    client_src: bool     # sent by the client
    client_port: int
    flags: int
    seq: int
    ack: int
    payload: bytes


def load_sample(path: Path) -> list[Tmpl]:
    """A sample's TCP packets (client side = the SYN sender, else the non-broker port)."""
    segs = []
    with open_capture(str(path)) as reader:
        for pkt in map(Packet._make, reader):
            seg = parse_packet(pkt.linktype, pkt.data, pkt.orig_len)
            if not isinstance(seg, str):        # (a str: why the packet is no TCP segment)
                sip, sport, dip, dport, seq, ack, flags, payload, _missing = seg
                segs.append(Segment(Endpoint(sip, sport), Endpoint(dip, dport), seq, ack, flags, payload, 0,
                                    pkt.ts, pkt.index))
    if not segs:
        return []
    servers = {s.dst.port for s in segs if s.flags & TCP_SYN and not s.flags & TCP_ACK}
    if not servers:
        servers = {min((s.src.port, s.dst.port)) for s in segs}
    t0 = segs[0].ts
    out = []
    # connection -> (last client segment, ended with FIN or RST)
    last: dict[int, tuple[Tmpl, bool]] = {}
    for s in segs:
        client_src = s.src.port not in servers
        cport = s.src.port if client_src else s.dst.port
        t = Tmpl(s.ts - t0, ":" in s.src.ip, client_src, cport, s.flags, s.seq, s.ack, s.payload)
        out.append(t)
        ended = bool(s.flags & (TCP_FIN | TCP_RST)) or last.get(cport, (t, False))[1]
        last[cport] = (t if client_src else last.get(cport, (t, False))[0], ended)
    # a connection still open when the sample's capture stopped is closed by a client RST
    # after its last packet, so clones do not pile up open connections (that would make
    # memory grow with the capture for a reason no real capture has)
    end = out[-1].dt
    for cport, (t, ended) in last.items():
        if not ended and t.client_src:
            seq = (t.seq + len(t.payload) + (1 if t.flags & TCP_SYN else 0)) & 0xFFFFFFFF
            out.append(Tmpl(end + 0.0005, t.v6, True, cport, TCP_RST | TCP_ACK, seq, t.ack, b""))
    return out


_ETH4 = b"\x02\x00\x00\x00\x00\x02\x02\x00\x00\x00\x00\x01\x08\x00"
_ETH6 = b"\x02\x00\x00\x00\x00\x02\x02\x00\x00\x00\x00\x01\x86\xdd"
_BROKER4 = socket.inet_aton("10.200.0.1")
_BROKER6 = socket.inet_pton(socket.AF_INET6, "fd00::1")
_tcp = struct.Struct("!HHIIBBHHH")
_rec = struct.Struct("<IIII")


def _csum(b: bytes) -> int:
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def _clone(tmpls: list[Tmpl], sample_no: int, copy: int, start: float) -> Iterator[tuple[float, bytes]]:
    """(ts, pcap record) for one clone of a sample: client address 10.<sample>.<copy>,
    client ports and sequence numbers shifted by the copy number."""
    c4 = bytes((10, sample_no, (copy >> 8) & 0xFF, copy & 0xFF))
    c6 = socket.inet_pton(socket.AF_INET6, f"fd00::{sample_no:x}:{copy >> 16:x}:{copy & 0xFFFF:x}")
    pshift = (copy * 7) % 20000
    sshift = copy * 104729
    for t in tmpls:
        cport = (t.client_port + pshift - 1024) % 64000 + 1024
        seq = (t.seq + sshift) & 0xFFFFFFFF
        ack = (t.ack + sshift) & 0xFFFFFFFF if t.flags & TCP_ACK else 0
        if t.client_src:
            tcp = _tcp.pack(cport, BROKER_PORT, seq, ack, 0x50, t.flags, 65535, 0, 0) + t.payload
            src4, dst4, src6, dst6 = c4, _BROKER4, c6, _BROKER6
        else:
            tcp = _tcp.pack(BROKER_PORT, cport, seq, ack, 0x50, t.flags, 65535, 0, 0) + t.payload
            src4, dst4, src6, dst6 = _BROKER4, c4, _BROKER6, c6
        if t.v6:
            frame = _ETH6 + struct.pack("!IHBB", 6 << 28, len(tcp), 6, 64) + src6 + dst6 + tcp
        else:
            hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 1, 0x4000, 64, 6, 0, src4, dst4)
            frame = _ETH4 + hdr[:10] + struct.pack("!H", _csum(hdr)) + hdr[12:] + tcp
        ts = start + t.dt
        sec = int(ts)
        usec = int(round((ts - sec) * 1e6))
        if usec >= 1_000_000:
            sec, usec = sec + 1, usec - 1_000_000
        yield ts, _rec.pack(sec, usec, len(frame), len(frame)) + frame


def build_capture(path: Path, packets: int, samples: list[Path], step: float) -> dict:
    """Write the pcap (>= ``packets`` packets); return its description."""
    loaded = [(i + 1, load_sample(p)) for i, p in enumerate(samples)]
    loaded = [(i, t) for i, t in loaded if t]
    per_set = sum(len(t) for _i, t in loaded)
    copies = max(1, math.ceil(packets / per_set))
    base = 1_700_000_000.0
    streams = []
    for k, (i, tmpls) in enumerate(loaded):
        for c in range(copies):
            # clones of one sample start ``step`` apart; samples are offset inside a step
            streams.append(_clone(tmpls, i, c, base + c * step + k * step / len(loaded)))
    tmp = path.with_suffix(".partial")
    n = 0
    with open(tmp, "wb", buffering=1 << 20) as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1))
        for _ts, rec in heapq.merge(*streams, key=lambda x: x[0]):
            f.write(rec)
            n += 1
    tmp.replace(path)
    info = {"packets": n, "bytes": path.stat().st_size, "copies": copies,
            "connections_per_set": None, "samples": [p.name for p in samples],
            "generator": GENERATOR_VERSION}
    path.with_suffix(".json").write_text(json.dumps(info))
    return info


def get_capture(packets: int, samples: list[Path], step: float, rebuild: bool) -> tuple[Path, dict]:
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    key = f"kafka-{packets}-{len(samples)}s-{step:g}-v{GENERATOR_VERSION}"
    path = CACHE_DIR / f"{key}.pcap"
    meta = path.with_suffix(".json")
    if path.exists() and meta.exists() and not rebuild:
        return path, json.loads(meta.read_text())
    t = time.perf_counter()
    print(f"building {path} ...", file=sys.stderr, flush=True)
    info = build_capture(path, packets, samples, step)
    print(f"  built {info['packets']:,} packets, {info['bytes'] / 1e6:.1f} MB in "
          f"{time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)
    return path, info


# -- timing -----------------------------------------------------------------------------

FLOOR_CODE = r"""
import struct, sys, time
t = time.perf_counter()
unpack = struct.Struct("<IIII").unpack_from
n = 0
nbytes = 0
with open(sys.argv[1], "rb") as f:
    buf = f.read(24)
    rest = b""
    while True:
        chunk = f.read(1 << 20)
        if not chunk:
            break
        buf = rest + chunk
        pos, end = 0, len(buf)
        while end - pos >= 16:
            sec, usec, incl, orig = unpack(buf, pos)
            if pos + 16 + incl > end:
                break
            pos += 16 + incl
            n += 1
            nbytes += incl
        rest = buf[pos:]
print(n, nbytes, time.perf_counter() - t)
"""


class Timing(NamedTuple):
    seconds: float       # wall clock
    max_rss_mb: float
    rc: int
    cpu: float = 0.0     # user + system CPU seconds of the child


def _child_env() -> dict[str, str]:
    """The children's environment: bytecode caching on (as for an installed tool; kept
    out of the checkout under the cache directory)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(CACHE_DIR / "pycache")
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def run_child(argv: list[str], stdout_path: str = os.devnull) -> Timing:
    """Run argv, stdout to ``stdout_path``; wall time and the child's own peak RSS."""
    with open(stdout_path, "wb") as out:
        t = time.perf_counter()
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE, env=_child_env())
        assert p.stderr is not None
        err = p.stderr.read()
        _pid, status, ru = os.wait4(p.pid, 0)
        dt = time.perf_counter() - t
        p.returncode = os.waitstatus_to_exitcode(status)
    # (check exits 1 when a finding has severity error: the benchmark's clones have some)
    if p.returncode != 0 and not (p.returncode == 1 and "check" in argv):
        print(f"  warning: {argv[0]} exited {p.returncode}: {err.decode(errors='replace')[-500:]}",
              file=sys.stderr)
    return Timing(dt, ru.ru_maxrss / 1024.0, p.returncode, ru.ru_utime + ru.ru_stime)


def best_of(runs: list[Timing]) -> Timing:
    """The fastest wall time, the lowest CPU time, the highest peak RSS and exit code."""
    t = min(runs, key=lambda r: r.seconds)
    return Timing(t.seconds, max(r.max_rss_mb for r in runs), max(r.rc for r in runs),
                  min(r.cpu for r in runs))


def best(argv: list[str], repeat: int, stdout_path: str = os.devnull) -> Timing:
    return best_of([run_child(argv, stdout_path) for _ in range(repeat)])


def sniff() -> list[str]:
    return [sys.executable, "-m", "analyzer"]


EXPORT_DIR = os.path.join(tempfile.gettempdir(), "kafkawire-bench-export")
SQL_QUERY = ("SELECT client_id, api_name, count(*) AS n, quantile_cont(latency_ms, 0.99) AS p99_ms "
             "FROM exchanges GROUP BY ALL ORDER BY n DESC")


def commands(cap: Path) -> dict[str, list[str]]:
    f = str(cap)
    tshark = ["tshark", "-n", "-r", f, "-d", f"tcp.port=={BROKER_PORT},kafka"]
    return {
        "floor": [sys.executable, "-c", FLOOR_CODE, f],
        "stats": sniff() + ["stats", "-f", "json", "-p", str(BROKER_PORT), f],
        "stats-1proc": sniff() + ["stats", "-f", "json", "-j", "1", "-p", str(BROKER_PORT), f],
        "read-summary": sniff() + ["read", "-p", str(BROKER_PORT), f],
        "read-ndjson": sniff() + ["read", "--format", "ndjson", "-p", str(BROKER_PORT), f],
        "check": sniff() + ["check", "-f", "json", "-p", str(BROKER_PORT), f],
        "check-1proc": sniff() + ["check", "-f", "json", "-j", "1", "-p", str(BROKER_PORT), f],
        # the exchange tables (issue 35): Parquet of one capture, and a group-by over them
        "export": sniff() + ["export", "--overwrite", "-p", str(BROKER_PORT), f, "--out", EXPORT_DIR],
        "sql": sniff() + ["sql", "-p", str(BROKER_PORT), f, SQL_QUERY],
        "tshark-fields": tshark + ["-T", "fields", "-e", "kafka.request_key", "-e", "kafka.request.version",
                                   "-e", "kafka.correlation_id"],
        "tshark-json": tshark + ["-T", "json"],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--packets", type=int, default=1_000_000, help="at least this many packets (default 1,000,000)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="rounds: each round runs every command once, in turn; the fastest run counts, "
                         "and the ratios are also given per round (default 1)")
    ap.add_argument("--skip-tshark-json", action="store_true", help="do not run tshark -T json at all")
    ap.add_argument("--tshark-json-packets", type=int, default=200_000,
                    help="run tshark -T json (and read-ndjson again) on a capture of this many packets "
                         "(default 200,000; 0: on the main capture)")
    ap.add_argument("--step", type=float, default=0.02,
                    help="seconds between clones of one sample (default 0.02; smaller: more connections open at once)")
    ap.add_argument("--rebuild", action="store_true", help="rebuild the cached capture")
    ap.add_argument("--only", help="comma-separated subset of: " + ", ".join(commands(Path("x"))))
    ap.add_argument("--json", dest="json_out", help="also write the figures to this JSON file")
    args = ap.parse_args()

    if shutil.which("tshark") is None:
        print("tshark not found: install it (apt-get install tshark)", file=sys.stderr)
        return 1
    samples = [ROOT / "samples" / s for s in DEFAULT_SAMPLES if (ROOT / "samples" / s).exists()]
    cap, info = get_capture(args.packets, samples, args.step, args.rebuild)
    only = set(args.only.split(",")) if args.only else None
    cmds = commands(cap)
    results: dict[str, Timing] = {}
    print(f"capture: {cap} ({info['packets']:,} packets, {info['bytes'] / 1e6:.1f} MB; "
          f"{len(info['samples'])} samples x {info['copies']} clones)")
    tver = subprocess.run(["tshark", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    print(f"python {sys.version.split()[0]}, {tver}, {os.cpu_count()} CPUs, best of {args.repeat}")
    def show(name: str, r: Timing, packets: int, extra: str = "") -> None:
        print(f"  {name:<17} {r.seconds:8.2f} s wall {r.cpu:8.2f} s cpu {packets / r.seconds / 1e3:7.0f} kpkt/s"
              f"   peak RSS {r.max_rss_mb:7.1f} MB{extra}", flush=True)

    print(f"  {'':<17} {'(best of ' + str(args.repeat) + ')':>13}")
    # with --repeat, the commands take turns (round after round) rather than each running
    # its repeats in a row: this machine's speed drifts within minutes, and a drift should
    # hit every command alike; the ratios are also given per round
    names = [n for n in ("floor", "stats", "stats-1proc", "read-summary", "read-ndjson", "check", "check-1proc",
                         "export", "sql", "tshark-fields")
             if not only or n in only]
    rounds: dict[str, list[Timing]] = {n: [] for n in names}
    for r in range(args.repeat):
        for name in names:
            t = run_child(cmds[name])
            rounds[name].append(t)
            if args.repeat > 1:
                show(f"{name} #{r + 1}", t, info["packets"])
    for name in names:
        results[name] = best_of(rounds[name])
        show(name, results[name], info["packets"])

    json_note = None
    sub_info = None
    if not args.skip_tshark_json and (not only or "tshark-json" in only):
        if args.tshark_json_packets and args.tshark_json_packets < info["packets"]:
            sub, sub_info = get_capture(args.tshark_json_packets, samples, args.step, args.rebuild)
            sc = commands(sub)
            rj = results["tshark-json(sub)"] = best(sc["tshark-json"], args.repeat)
            rr = results["read-ndjson(sub)"] = best(sc["read-ndjson"], args.repeat)
            scale = info["packets"] / sub_info["packets"]
            results["tshark-json"] = Timing(rj.seconds * scale, rj.max_rss_mb, rj.rc, rj.cpu * scale)
            json_note = (f"tshark -T json ran on a {sub_info['packets']:,}-packet capture built the same way "
                         f"(and read-ndjson again, on that file: the JSON ratio compares those two runs); "
                         f"the full-size tshark-json line is that time x {scale:.2f}, extrapolated")
            show("tshark-json(sub)", rj, sub_info["packets"], f"   [{sub_info['packets']:,} packets]")
            show("read-ndjson(sub)", rr, sub_info["packets"], f"   [{sub_info['packets']:,} packets]")
            show("tshark-json", results["tshark-json"], info["packets"], "   [extrapolated]")
        else:
            results["tshark-json"] = best(cmds["tshark-json"], args.repeat)
            show("tshark-json", results["tshark-json"], info["packets"])

    print("ratios (wall; cpu in brackets):")
    ratios: dict[str, list[float]] = {}

    def ratio(label: str, a: str, b: str, target: str) -> None:
        if a in results and b in results:
            ra, rb = results[a], results[b]
            w, c = ra.seconds / rb.seconds, (ra.cpu / rb.cpu if rb.cpu else math.nan)
            ratios[label] = [w, c]
            print(f"  {label:<40} {w:7.2f}  [{c:6.2f}]   target {target}")
            ta, tb = rounds.get(a, []), rounds.get(b, [])
            if len(ta) > 1 and len(ta) == len(tb):
                per = [x.seconds / y.seconds for x, y in zip(ta, tb, strict=True)]
                ratios[label + " (per round)"] = per
                # (the median round: a steadier figure than the best times' ratio on a drifting machine)
                print(f"  {'':<40} per round: {', '.join(f'{v:.2f}' for v in per)}"
                      f" (median {statistics.median(per):.2f})")

    # the targets of issue 22 (the native core)
    ratio("tshark-fields / stats", "tshark-fields", "stats", "> stats -j 1's")
    ratio("tshark-fields / stats-1proc", "tshark-fields", "stats-1proc", ">= 10")
    if "read-ndjson(sub)" in results:
        ratio("tshark-json / read-ndjson (same file)", "tshark-json(sub)", "read-ndjson(sub)", ">= 3")
    else:
        ratio("tshark-json / read-ndjson", "tshark-json", "read-ndjson", ">= 3")
    ratio("tshark-fields / read-summary", "tshark-fields", "read-summary", ">= 10")
    ratio("tshark-fields / check", "tshark-fields", "check", ">= 3")
    ratio("tshark-fields / check-1proc", "tshark-fields", "check-1proc", "(none)")
    ratio("stats / floor", "stats", "floor", "(none)")
    ratio("stats-1proc / floor", "stats-1proc", "floor", "<= 3 (moonshot)")
    ratio("read-ndjson / stats", "read-ndjson", "stats", "(none)")
    # the targets of issue 35 (one exchange table)
    ratio("export / stats-1proc", "export", "stats-1proc", "<= 2")
    ratio("sql group-by / stats-1proc", "sql", "stats-1proc", "<= 2")
    if json_note:
        print("note: " + json_note)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({
            "capture": info, "subset": sub_info,
            "results": {k: v._asdict() for k, v in results.items()}, "ratios": ratios}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
