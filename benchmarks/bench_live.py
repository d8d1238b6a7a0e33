#!/usr/bin/env python3
"""Does ``kafkawire-sniff live`` keep up? Replay a capture onto ``lo`` at several rates.

Issue 22: "``live`` keeps up with at least 200,000 packets/s replayed onto ``lo``".

The capture is the one ``bench_vs_tshark.py`` builds (its builder is imported: real
client traffic from ``samples/``, every sample's connections cloned), rewritten for
loopback:

- every address moved into 127.0.0.0/8: a client 10.S.H.L becomes 127.S.H.L, the broker
  10.200.0.1 becomes 127.200.0.1; the IPv6 sample's packets become IPv4 packets
  (fd00::S:0:C -> 127.S.C, fd00::1 -> 127.200.0.1), so no packet leaves 127.0.0.0/8;
- the broker's port moved to ``--port`` (39092), away from the tests' brokers on lo;
- the IPv4 header checksum recomputed; the TCP checksum left as the builder wrote it
  (zero): nothing on the way checks it (see the next point), and neither ``live``
  nor tcpdump validates it;
- Ethernet framing kept (``lo`` is ARPHRD_LOOPBACK with Ethernet headers), with
  locally administered MACs that are not lo's 00:00:00:00:00:00: the kernel marks the
  frames PACKET_OTHERHOST and drops them before IP, so the host's TCP stack never answers
  them (no RSTs join the replayed traffic) while every packet socket on lo sees them.

For each rate (``tcpreplay -i lo --pps=N``, or ``--topspeed``) and each round it runs
``kafkawire-sniff live -i lo -p PORT --bpf 'host 127.200.0.1 and tcp port PORT'`` as
a child, waits until the socket is open, replays, waits until live's socket queue is
empty (``/proc/net/packet``, bounded by ``--drain``), stops live with SIGINT and reads
its closing summary. Then the same with the peer (``tcpdump -i lo -w /dev/null`` with
the same filter and the same 32 MiB buffer). It reports per rate:

- packets sent (tcpreplay's count) and the rate it reached;
- packets live captured, and the kernel's drops as live's summary prints them (from
  PACKET_STATISTICS; on lo the kernel queues both copies of a packet, outgoing and
  incoming, so a lost packet can count twice there);
- our own losses: the exchanges live reported (by status) against those ``read``
  finds in the same capture file;
- live's CPU seconds from the start of the replay to the end of the drain (from
  /proc/PID/stat, start-up left out) and the share of one core that is;
- the lag: seconds live needed after the replay ended to empty its socket queue;
- the peer's packets and drops, and live's captured packets / the peer's;
- the highest rate at which live lost nothing (no kernel drop, every exchange).

The numbers are ratios and counts; nothing is asserted on time. Traffic goes to ``lo``
only, all of it in 127.0.0.0/8. Every wait is bounded, and ``--time-limit`` (default
20 minutes) stops the run between steps. Needs root (or CAP_NET_RAW and CAP_NET_ADMIN)
for capturing and replaying, and tcpreplay (Debian: ``apt-get install tcpreplay``; with
``--install`` the script runs ``apt-get update`` and the install itself when root).

Usage::

    sudo python benchmarks/bench_live.py                      # 200,000 packets, 10k..200k pps and top speed
    sudo python benchmarks/bench_live.py --rates 100000,200000 --rounds 3
    sudo python benchmarks/bench_live.py --format stats       # live --stats: no per-exchange output
    sudo python benchmarks/bench_live.py --peers tcpdump,tshark --json live.json
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_vs_tshark import (  # noqa: E402  (the capture builder: imported, not copied)
    BROKER_PORT,
    CACHE_DIR,
    DEFAULT_SAMPLES,
    ROOT,
    _child_env,
    _csum,
    get_capture,
    run_child,
)

LO_VERSION = 1                   # bump when the rewrite changes (invalidates the cached file)
DEFAULT_PORT = 39092
DEFAULT_RATES = "10000,25000,50000,100000,200000,top"
BROKER_LO = bytes((127, 200, 0, 1))
BUFFER_MIB = 32                  # live's default -B; the peer gets the same
TICK = os.sysconf("SC_CLK_TCK")


# -- the capture for lo -----------------------------------------------------------------

_rec = struct.Struct("<IIII")


def _lo4(addr: bytes) -> bytes:
    """10.a.b.c -> 127.a.b.c (the builder's IPv4 clients and broker)."""
    if addr == bytes((10, 200, 0, 1)):
        return BROKER_LO
    if addr[0] != 10:
        raise ValueError(f"unexpected address {socket.inet_ntoa(addr)} in the bench capture")
    return b"\x7f" + addr[1:]


def _lo6(addr: bytes) -> bytes:
    """fd00::S:H:L (a clone of the IPv6 sample) -> 127.S.L>>8.L; fd00::1 (the broker) -> 127.200.0.1."""
    if addr == socket.inet_pton(socket.AF_INET6, "fd00::1"):
        return BROKER_LO
    if addr[:2] != b"\xfd\x00":
        raise ValueError(f"unexpected address {socket.inet_ntop(socket.AF_INET6, addr)} in the bench capture")
    return bytes((127, addr[11], addr[14], addr[15]))


def _ip4(src: bytes, dst: bytes, tcp: bytes, ttl: int = 64) -> bytes:
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 1, 0x4000, ttl, 6, 0, src, dst)
    return hdr[:10] + struct.pack("!H", _csum(hdr)) + hdr[12:]


def to_loopback(frame: bytes, port: int) -> bytes:
    """One of the builder's Ethernet frames, its addresses in 127.0.0.0/8 and its broker port ``port``."""
    eth, etype = frame[:12], frame[12:14]
    if etype == b"\x08\x00":
        ihl = (frame[14] & 0x0F) * 4
        ip, tcp = frame[14:14 + ihl], frame[14 + ihl:]
        src, dst = _lo4(ip[12:16]), _lo4(ip[16:20])
        ttl = ip[8]
    elif etype == b"\x86\xdd":
        if frame[14 + 6] != 6:
            raise ValueError("IPv6 extension headers are not expected in the bench capture")
        src, dst = _lo6(frame[22:38]), _lo6(frame[38:54])
        tcp = frame[54:]
        ttl = frame[14 + 7]
    else:
        raise ValueError(f"unexpected ethertype {etype.hex()} in the bench capture")
    sport, dport = struct.unpack_from("!HH", tcp)
    if src == BROKER_LO and sport == BROKER_PORT:
        sport = port
    if dst == BROKER_LO and dport == BROKER_PORT:
        dport = port
    tcp = struct.pack("!HH", sport, dport) + tcp[4:]
    return eth + b"\x08\x00" + _ip4(src, dst, tcp, ttl) + tcp


def loopback_capture(packets: int, port: int, rebuild: bool) -> tuple[Path, dict[str, Any]]:
    """The bench capture (built by bench_vs_tshark's builder), rewritten for lo; cached."""
    samples = [ROOT / "samples" / s for s in DEFAULT_SAMPLES if (ROOT / "samples" / s).exists()]
    src, info = get_capture(packets, samples, 0.02, rebuild)
    path = CACHE_DIR / f"lo-{src.stem}-p{port}-v{LO_VERSION}.pcap"
    meta = path.with_suffix(".json")
    if path.exists() and meta.exists() and not rebuild:
        return path, json.loads(meta.read_text())
    print(f"rewriting {src.name} for lo -> {path} ...", file=sys.stderr, flush=True)
    n = 0
    tmp = path.with_suffix(".partial")
    with open(src, "rb") as f, open(tmp, "wb", buffering=1 << 20) as out:
        head = f.read(24)
        magic, _maj, _min, _tz, _sig, _snap, linktype = struct.unpack("<IHHiIII", head)
        if magic != 0xA1B2C3D4 or linktype != 1:
            raise SystemExit(f"{src}: not the builder's little-endian Ethernet pcap")
        out.write(head)
        while rec := f.read(16):
            sec, usec, incl, _orig = _rec.unpack(rec)
            frame = to_loopback(f.read(incl), port)
            out.write(_rec.pack(sec, usec, len(frame), len(frame)) + frame)
            n += 1
    tmp.replace(path)
    lo_info = dict(info, packets=n, bytes=path.stat().st_size, source=str(src), port=port)
    meta.write_text(json.dumps(lo_info))
    return path, lo_info


# -- reading the tools' reports ---------------------------------------------------------

def sniff() -> list[str]:
    return [sys.executable, "-m", "analyzer"]


def exchanges_line(text: str) -> dict[str, int]:
    """``exchanges: ok 5, unanswered 1`` (the summary's line) -> {status: count}."""
    found = re.findall(r"^\s*exchanges: (.*)$", text, re.M)
    if not found or found[-1].strip() == "none":
        return {}
    return {k: int(v) for k, v in (item.rsplit(" ", 1) for item in found[-1].split(", "))}


def read_exchanges(cap: Path, port: int) -> dict[str, int]:
    """The exchanges ``read`` finds in ``cap`` (cached next to it)."""
    cache = cap.with_suffix(".read.json")
    if cache.exists() and cache.stat().st_mtime >= cap.stat().st_mtime:
        return json.loads(cache.read_text())
    print(f"reading {cap.name} with `kafkawire-sniff read` ...", file=sys.stderr, flush=True)
    p = subprocess.run(sniff() + ["read", "-p", str(port), str(cap)], capture_output=True, text=True,
                       env=_child_env(), timeout=1200, check=False)
    if p.returncode != 0:
        raise SystemExit(f"read failed ({p.returncode}): {p.stderr[-500:]}")
    ex = exchanges_line(p.stdout)
    cache.write_text(json.dumps(ex))
    return ex


def cpu_seconds(pid: int) -> float:
    """user + system CPU seconds of a running process (its threads included)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / TICK


def exited(pid: int) -> bool:
    """The process has ended (a zombie not yet reaped, or gone); it is not reaped here."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def cpu_tree(pid: int) -> float:
    """CPU seconds of a process and its children (tshark's dumpcap), as now."""
    total = cpu_seconds(pid)
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            kids = [int(k) for k in f.read().split()]
    except OSError:
        kids = []
    return total + sum(cpu_tree(k) for k in kids)


def socket_inodes(pid: int) -> set[str]:
    out = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                out.add(link[8:-1])
    except OSError:
        pass
    return out


def packet_rmem(inodes: set[str]) -> int | None:
    """Bytes queued on the process's packet sockets (/proc/net/packet), None when none is found."""
    total = None
    try:
        with open("/proc/net/packet") as f:
            next(f)
            for line in f:
                cols = line.split()
                if len(cols) >= 9 and cols[8] in inodes:
                    total = (total or 0) + int(cols[6])
    except OSError:
        return None
    return total


def wait_for(path: Path, needle: str, proc: subprocess.Popen, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if needle in path.read_text(errors="replace"):
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.05)
    return False


def stop(proc: subprocess.Popen, timeout: float = 60.0) -> tuple[int, float]:
    """SIGINT, then wait (SIGKILL after ``timeout`` s); (exit code, total CPU seconds from wait4)."""
    if proc.returncode is not None:          # already reaped (it died early)
        return proc.returncode, float("nan")
    if not exited(proc.pid):
        proc.send_signal(signal.SIGINT)
    deadline = time.monotonic() + timeout
    while True:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, ru.ru_utime + ru.ru_stime
        if time.monotonic() > deadline:
            proc.kill()
            _pid, status, ru = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, ru.ru_utime + ru.ru_stime
        time.sleep(0.05)


def replay(cap: Path, rate: str, timeout: float) -> dict[str, Any]:
    """tcpreplay onto lo; packets sent, seconds, the rate reached."""
    argv = ["tcpreplay", "-i", "lo", "-q"] + (["--topspeed"] if rate == "top" else [f"--pps={rate}"]) + [str(cap)]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    text = p.stdout + p.stderr
    m = re.search(r"Actual: (\d+) packets \((\d+) bytes\) sent in ([\d.]+) seconds", text)
    r = re.search(r"Rated: [\d.]+ Bps, [\d.]+ Mbps, ([\d.]+) pps", text)
    f = re.search(r"Failed packets:\s+(\d+)", text)
    if p.returncode != 0 or not m:
        raise RuntimeError(f"tcpreplay failed ({p.returncode}): {text[-400:]}")
    return {"sent": int(m.group(1)), "replay_s": float(m.group(3)), "pps": float(r.group(1)) if r else float("nan"),
            "failed": int(f.group(1)) if f else 0}


def offline_cpu(cap: Path, port: int, fmt: str) -> float:
    """CPU seconds the same pipeline takes on the file, with no socket: ``read -f FMT`` (or ``stats
    -j 1`` for --stats), less the CPU of the same command on an empty capture (start-up, imports)."""
    def argv(f: str) -> list[str]:
        if fmt == "stats":
            return sniff() + ["stats", "-j", "1", "-f", "json", "-p", str(port), f]
        return sniff() + ["read", "-f", fmt, "-p", str(port), f]

    empty = cap.with_name("empty-eth.pcap")
    if not empty.exists():
        empty.write_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1))
    base = run_child(argv(str(empty)))
    full = run_child(argv(str(cap)))
    return max(0.0, full.cpu - base.cpu)


LOOP_CODE = r"""
import os, sys, time
from analyzer import live
from analyzer._core import open_capture
from analyzer.commands.options import options_from_kwargs
from analyzer.pipeline import Pipeline

cap, port, fmt = sys.argv[1], int(sys.argv[2]), sys.argv[3]
packets = []
with open_capture(cap) as reader:
    for _i, ts, _lt, data, orig_len in reader:
        packets.append((ts, data, orig_len))
options, ctx = options_from_kwargs({"ports": (port,)}, decode="lite" if fmt == "stats" else "full")
pipe = Pipeline(options, ctx)
if fmt == "stats":
    on_exchange = live.Dashboard("bench").add
else:
    from analyzer.commands.live import _Printer
    on_exchange = _Printer(fmt, 64, pipe)
report, sys.stdout = sys.stdout, open(os.devnull, "w")    # the printer's lines go nowhere
t = time.process_time()
res = live.LiveSession(pipe, live.ReplaySource(packets, per_read=live.MAX_BATCH), on_exchange,
                       handle_signals=False).run()
print(res.packets, res.exchanges, time.process_time() - t, file=report)
"""


def loop_cpu(cap: Path, port: int, fmt: str) -> float:
    """CPU seconds live's own loop takes with no socket: LiveSession fed the file's packets from
    memory (ReplaySource, MAX_BATCH a read), the format's printer to /dev/null (loading the packets and start-up
    left out)."""
    p = subprocess.run([sys.executable, "-c", LOOP_CODE, str(cap), str(port), fmt], capture_output=True,
                       text=True, env=_child_env(), timeout=1200, check=False)
    last = p.stdout.strip().splitlines()[-1:]
    if p.returncode != 0 or not last:
        print(f"  warning: the loop without a socket failed: {p.stderr[-300:]}", file=sys.stderr)
        return float("nan")
    return float(last[0].split()[-1])


# -- one run of a tool at one rate ------------------------------------------------------

def run_live(cap: Path, port: int, rate: str, fmt: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    bpf = f"host 127.200.0.1 and tcp port {port}"
    if args.bpf_extra:
        bpf = f"({bpf}) and {args.bpf_extra}"
    argv = sniff() + ["live", "-i", "lo", "-p", str(port), "--bpf", bpf, "-B", str(BUFFER_MIB)]
    argv += ["--stats"] if fmt == "stats" else ["-f", fmt]
    out, err = work / "live.out", work / "live.err"
    with open(out, "wb") as fo, open(err, "wb") as fe:
        proc = subprocess.Popen(argv, stdout=fo, stderr=fe, env=_child_env())
    try:
        if not wait_for(err, "capturing on", proc, 60):
            raise RuntimeError(f"live did not start: {err.read_text()[-400:]}")
        inodes = socket_inodes(proc.pid)
        spy = None
        if args.py_spy:
            spy = subprocess.Popen(["py-spy", "record", "--pid", str(proc.pid), "--rate", "200", "--format",
                                    "raw", "--nonblocking", "-o", str(Path(args.py_spy) / f"live-{rate}.txt")],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.0)
        cpu0 = cpu_seconds(proc.pid)
        t0 = time.monotonic()
        rep = replay(cap, rate, args.replay_timeout)
        t1 = time.monotonic()
        # the lag: live empties its socket queue (two looks in a row), bounded by --drain
        empty = 0
        drained = None
        while time.monotonic() - t1 < args.drain:
            q = packet_rmem(inodes)
            empty = empty + 1 if q == 0 else 0
            if empty >= 2:
                drained = time.monotonic() - t1
                break
            time.sleep(0.05)
        cpu1 = cpu_seconds(proc.pid)
        busy = time.monotonic() - t0
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            try:
                spy.wait(30)
            except subprocess.TimeoutExpired:
                spy.kill()
                spy.wait()
    finally:
        rc, cpu_total = stop(proc)
    text = out.read_text(errors="replace") + "\n" + err.read_text(errors="replace")
    head = re.search(r"== live summary: .*?; (\d+) packets captured in ([\d.]+) s(.*)", text)
    if not head:
        raise RuntimeError(f"no live summary (exit {rc}): {text[-400:]}")
    dropped = re.search(r"(\d+) DROPPED by the kernel", head.group(3))
    cpu = cpu1 - cpu0
    return dict(rep, tool="live", rc=rc, captured=int(head.group(1)),
                kernel_drops=int(dropped.group(1)) if dropped else 0, exchanges=exchanges_line(text),
                cpu=cpu, cpu_share=cpu / busy if busy else float("nan"), cpu_total=cpu_total,
                lag=drained, busy_s=busy)


def run_peer(peer: str, cap: Path, port: int, rate: str, args: argparse.Namespace, work: Path,
             packets: int) -> dict[str, Any]:
    bpf = f"host 127.200.0.1 and tcp port {port}"
    if peer == "tcpdump":
        argv = ["tcpdump", "-i", "lo", "-n", "-q", "-B", str(BUFFER_MIB * 1024), "-w", os.devnull, bpf]
        ready = "listening on"
    else:
        # tshark dissects Kafka as it goes (fields to /dev/null) behind dumpcap, which captures into a
        # file; -c: it exits when it has dissected every packet, which gives its lag
        argv = ["tshark", "-i", "lo", "-n", "-B", str(BUFFER_MIB), "-f", bpf, "-d", f"tcp.port=={port},kafka",
                "-c", str(packets), "-T", "fields", "-e", "kafka.request_key", "-e", "kafka.correlation_id"]
        ready = "Capturing on"
    err = work / f"{peer}.err"
    with open(os.devnull, "wb") as fo, open(err, "wb") as fe:
        proc = subprocess.Popen(argv, stdout=fo, stderr=fe)
    try:
        if not wait_for(err, ready, proc, 60):
            raise RuntimeError(f"{peer} did not start: {err.read_text()[-400:]}")
        time.sleep(0.3)
        cpu0 = cpu_tree(proc.pid)
        t0 = time.monotonic()
        rep = replay(cap, rate, args.replay_timeout)
        t1 = time.monotonic()
        lag = None
        if peer == "tshark":                 # -c: it exits once it has dissected them all
            while time.monotonic() - t1 < args.drain and not exited(proc.pid):
                time.sleep(0.05)
            cpu1 = float("nan")              # taken from wait4 below (dumpcap included)
            if exited(proc.pid):
                lag = time.monotonic() - t1
        else:
            time.sleep(1.0)                  # its ring and its writer catch up
            cpu1 = cpu_tree(proc.pid)
        busy = time.monotonic() - t0
    finally:
        rc, cpu_total = stop(proc)
    if peer == "tshark":
        cpu1 = cpu_total
    text = err.read_text(errors="replace")
    cap_m = re.search(r"(\d+) packets? captured", text)
    drop_m = re.search(r"(\d+) packets? dropped by kernel", text) or re.search(r"(\d+) packets? dropped", text)
    cpu = cpu1 - cpu0
    return dict(rep, tool=peer, rc=rc, captured=int(cap_m.group(1)) if cap_m else None,
                kernel_drops=int(drop_m.group(1)) if drop_m else 0, cpu=cpu,
                cpu_share=cpu / busy if busy else float("nan"), lag=lag)


# -- main -------------------------------------------------------------------------------

def ensure_tcpreplay(install: bool) -> bool:
    if shutil.which("tcpreplay"):
        return True
    cmd = "apt-get update && apt-get install -y tcpreplay"
    if install and os.geteuid() == 0:
        print(f"installing tcpreplay: {cmd}", file=sys.stderr, flush=True)
        subprocess.run(["apt-get", "update"], check=False)
        subprocess.run(["apt-get", "install", "-y", "tcpreplay"], check=False, env=dict(os.environ,
                       DEBIAN_FRONTEND="noninteractive"))
        return shutil.which("tcpreplay") is not None
    print(f"tcpreplay not found: run `{cmd}` as root (or pass --install when root)", file=sys.stderr)
    return False


def fmt_ex(ex: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(ex.items())) or "none"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--packets", type=int, default=200_000, help="at least this many packets (default 200,000)")
    ap.add_argument("--rates", default=DEFAULT_RATES,
                    help=f"comma-separated packets/s for tcpreplay --pps, 'top' for --topspeed (default {DEFAULT_RATES})")
    ap.add_argument("--rounds", type=int, default=1, help="rounds over all rates (default 1)")
    ap.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"the broker port on lo (default {DEFAULT_PORT})")
    ap.add_argument("--format", dest="fmt", choices=["summary", "ndjson", "stats"], default="summary",
                    help="live's output: summary lines or ndjson (to a file), or --stats (no per-exchange "
                         "output; lean decoding) (default summary)")
    ap.add_argument("--peers", default="tcpdump", help="comma-separated: tcpdump, tshark, or none (default tcpdump)")
    ap.add_argument("--bpf-extra", help="ANDed to live's BPF filter (e.g. 'inbound': a trial, see the README)")
    ap.add_argument("--drain", type=float, default=20.0,
                    help="seconds live may take after the replay to empty its socket queue (default 20)")
    ap.add_argument("--replay-timeout", type=float, default=300.0, help="seconds one replay may take (default 300)")
    ap.add_argument("--time-limit", type=float, default=1200.0,
                    help="stop starting new runs after this many seconds (default 1200)")
    ap.add_argument("--no-offline", action="store_true",
                    help="do not time the same pipeline on the file (read / stats -j 1) and live's loop "
                         "fed from memory each round")
    ap.add_argument("--py-spy", metavar="DIR", help="sample live with py-spy (raw stacks per rate into DIR)")
    ap.add_argument("--install", action="store_true", help="apt-get install tcpreplay if missing (as root)")
    ap.add_argument("--rebuild", action="store_true", help="rebuild the cached captures")
    ap.add_argument("--json", dest="json_out", help="also write the figures to this JSON file")
    args = ap.parse_args()
    started = time.monotonic()

    if not sys.platform.startswith("linux") or not os.path.exists("/sys/class/net/lo"):
        print("needs Linux and its lo interface", file=sys.stderr)
        return 1
    if not ensure_tcpreplay(args.install):
        return 1
    peers = [p for p in args.peers.split(",") if p and p != "none"]
    for p in peers:
        if p not in ("tcpdump", "tshark") or shutil.which(p) is None:
            print(f"peer {p!r} unknown or not installed (tcpdump, tshark)", file=sys.stderr)
            return 1
    if args.py_spy:
        Path(args.py_spy).mkdir(parents=True, exist_ok=True)
    rates = [r.strip() for r in args.rates.split(",") if r.strip()]
    for r in rates:
        if r != "top" and not r.isdigit():
            ap.error(f"bad rate {r!r}")

    cap, info = loopback_capture(args.packets, args.port, args.rebuild)
    expected = read_exchanges(cap, args.port)
    n_expected = sum(expected.values())
    print(f"capture: {cap} ({info['packets']:,} packets, {info['bytes'] / 1e6:.1f} MB, all in 127.0.0.0/8, "
          f"broker 127.200.0.1:{args.port})")
    print(f"read finds {n_expected:,} exchanges: {fmt_ex(expected)}")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; live -f {args.fmt}"
          + (f", BPF extra {args.bpf_extra!r}" if args.bpf_extra else "") + f"; peers: {', '.join(peers) or 'none'}")
    hdr = (f"{'round':>5} {'rate':>7} {'tool':<8} {'sent':>8} {'pps':>8} {'captured':>8} {'k.drops':>8} "
           f"{'exch':>8} {'lost ex':>7} {'cpu s':>6} {'core%':>6} {'lag s':>6}")
    print(hdr, flush=True)
    results: list[dict[str, Any]] = []
    offline: list[float] = []
    in_memory: list[float] = []
    stopped = None
    with tempfile.TemporaryDirectory(prefix="bench-live-") as tmp:
        work = Path(tmp)
        for rnd in range(1, args.rounds + 1):
            for rate in rates:
                for tool in ["live"] + peers:
                    if time.monotonic() - started > args.time_limit:
                        stopped = f"time limit ({args.time_limit:g} s) reached"
                        break
                    if tool == "live" and rate == rates[0] and not args.no_offline:
                        cpu = offline_cpu(cap, args.port, args.fmt)
                        offline.append(cpu)
                        print(f"{rnd:>5} {'file':>7} {'offline':<8} {info['packets']:>8} {'':>8} "
                              f"{info['packets']:>8} {'':>8} {'':>8} {'':>7} {cpu:>6.2f}   (the same pipeline on "
                              f"the file: {info['packets'] / cpu if cpu else 0:,.0f} packets per CPU second)",
                              flush=True)
                        cpu = loop_cpu(cap, args.port, args.fmt)
                        in_memory.append(cpu)
                        print(f"{rnd:>5} {'memory':>7} {'loop':<8} {info['packets']:>8} {'':>8} "
                              f"{info['packets']:>8} {'':>8} {'':>8} {'':>7} {cpu:>6.2f}   (live's loop, no socket: "
                              f"{info['packets'] / cpu if cpu else 0:,.0f} packets per CPU second)", flush=True)
                    try:
                        if tool == "live":
                            res = run_live(cap, args.port, rate, args.fmt, args, work)
                        else:
                            res = run_peer(tool, cap, args.port, rate, args, work, info["packets"])
                    except (RuntimeError, subprocess.TimeoutExpired) as e:
                        print(f"{rnd:>5} {rate:>7} {tool:<8} failed: {e}", flush=True)
                        continue
                    res.update(round=rnd, rate=rate)
                    if tool == "live":
                        got = sum(res["exchanges"].values())
                        res["lost_exchanges"] = n_expected - got
                        res["same_exchanges"] = res["exchanges"] == expected
                        res["lossless"] = res["kernel_drops"] == 0 and res["same_exchanges"] and res["lag"] is not None
                    results.append(res)
                    lag = res.get("lag")
                    print(f"{rnd:>5} {rate:>7} {tool:<8} {res['sent']:>8} {res['pps']:>8.0f} "
                          f"{res['captured'] if res['captured'] is not None else '?':>8} {res['kernel_drops']:>8} "
                          f"{sum(res['exchanges'].values()) if 'exchanges' in res else '':>8} "
                          f"{res.get('lost_exchanges', ''):>7} {res['cpu']:>6.2f} {100 * res['cpu_share']:>6.0f} "
                          f"{(f'{lag:.2f}' if lag is not None else ('-' if tool == 'tcpdump' else '>' + str(args.drain))):>6}",
                          flush=True)
                if stopped:
                    break
            if stopped:
                break
        if stopped:
            print(f"stopped early: {stopped}")

    # per rate: the median over rounds, live against each peer
    print("\nper rate (median over rounds):")
    lossless_rates = []
    for rate in rates:
        lv = [r for r in results if r["tool"] == "live" and r["rate"] == rate]
        if not lv:
            continue
        med = {k: statistics.median(r[k] for r in lv) for k in ("pps", "captured", "kernel_drops", "lost_exchanges",
                                                                  "cpu_share")}
        med["per_cpu_s"] = statistics.median(r["captured"] / r["cpu"] for r in lv if r["cpu"] > 0) if any(
            r["cpu"] > 0 for r in lv) else float("nan")
        ok = all(r["lossless"] for r in lv)
        if ok:
            lossless_rates.append(med["pps"])
        line = (f"  {rate:>7}: reached {med['pps']:,.0f} pps; live captured {med['captured']:,.0f} of "
                f"{lv[0]['sent']:,}, kernel drops {med['kernel_drops']:,.0f}, exchanges lost {med['lost_exchanges']:,.0f}"
                f" of {n_expected:,}, {100 * med['cpu_share']:.0f} % of a core, "
                f"{med['per_cpu_s']:,.0f} captured packets per CPU second; "
                f"{'nothing lost in ' + str(len(lv)) + ' round(s)' if ok else 'LOSSES'}")
        for peer in peers:
            pr = [r for r in results if r["tool"] == peer and r["rate"] == rate and r["captured"]]
            if pr:
                pc = statistics.median(r["captured"] for r in pr)
                pd = statistics.median(r["kernel_drops"] for r in pr)
                per = statistics.median(r["captured"] / r["cpu"] for r in pr if r["cpu"] > 0) if any(
                    r["cpu"] > 0 for r in pr) else float("nan")
                lags = [r["lag"] for r in pr if r.get("lag") is not None]
                line += (f"\n           {peer}: captured {pc:,.0f}, drops {pd:,.0f}, {per:,.0f} packets per CPU second"
                         + (f", lag {statistics.median(lags):.1f} s" if lags else "")
                         + f"; live/{peer}: captured {med['captured'] / pc:.3f}, packets per CPU second "
                         f"{med['per_cpu_s'] / per:.3g}")
        print(line)
    if offline:
        off = statistics.median(offline)
        print(f"the same pipeline on the file ({'stats -j 1' if args.fmt == 'stats' else 'read -f ' + args.fmt}, "
              f"start-up left out): {off:.2f} CPU s, {info['packets'] / off if off else 0:,.0f} packets per CPU "
              "second (median over rounds): the ceiling for live without its socket")
    if in_memory:
        mem = statistics.median(in_memory)
        print(f"live's loop fed from memory (LiveSession + ReplaySource, no socket): {mem:.2f} CPU s, "
              f"{info['packets'] / mem if mem else 0:,.0f} packets per CPU second (median over rounds)")
    best = max(lossless_rates) if lossless_rates else None
    print("highest rate with nothing lost (every round): "
          + (f"{best:,.0f} pps (tcpreplay's measured rate)" if best else "none of those tried")
          + "; target >= 200,000 pps")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"capture": info, "read_exchanges": expected, "results": results,
                                                   "highest_lossless_pps": best, "offline_cpu": offline,
                                                   "loop_cpu": in_memory,
                                                   "stopped": stopped}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
