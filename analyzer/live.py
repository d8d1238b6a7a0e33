"""Live capture: packets from an interface, fed to the Pipeline as they arrive.

    PacketSource.read(timeout) -> [(ts, data, orig_len)]  (a PF_PACKET socket, raw bytes)
        -> a batch of packet records (analyzer.model.PacketRecord) -> Pipeline.feed_packets
        -> Exchange -> callback (printed at once)
        -> optional PcapSink (the raw packets, the interface's link type)
    or, without --write: PacketSource.feed(pipeline, first_index, timeout)
        -> the core reads the socket into its stages itself (no Python object per packet)
        -> Exchange -> callback

``LiveSession.run`` is the loop: bounded waits (so --duration, Ctrl-C and the
unanswered timeout are honoured within a quarter of a second), ``Pipeline.expire``
twice a second, a tick callback once a second (the --stats dashboard), and on the way
out ``Pipeline.finish`` so requests still in flight are reported as unanswered, as
``read`` reports them at the end of the file that ``--write`` saved.

The socket is opened with scapy (interface, BPF filter compiled and attached in the
kernel, permissions and their errors) and read by the core (``analyzer._core.PacketReader``:
``recvmmsg`` batches of what is queued, the kernel's timestamps, lengths on the wire, VLAN
tags put back); the loop waits for the first packet with ``select``. On a loopback
interface every packet is seen twice by a PF_PACKET socket (outgoing and incoming);
like libpcap we keep only the incoming copy, with ``inbound`` added to the kernel's filter
(the buffer then holds each packet once, and a drop counts once; the reader also skips a
PACKET_OUTGOING copy, should one pass).
"""
from __future__ import annotations

import errno
import os
import select
import signal
import struct
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

from analyzer.model import Exchange, PacketRecord

if TYPE_CHECKING:
    from analyzer._core import PacketReader

SNAPLEN = 262144
BUFFER_BYTES = 32 * 1024 * 1024   # kernel receive buffer: loopback packets reach 64 KiB each
SOL_PACKET = 263
PACKET_STATISTICS = 6
SO_RCVBUFFORCE = 33
SO_TIMESTAMPNS = 35
PACKET_AUXDATA = 8
MAX_BATCH = 256             # packets read per wake-up before the loop looks at the clock again
MAX_BATCH_BYTES = 4 * 1024 * 1024
# after a read that was not full, the next one starts this long after it at the earliest, so
# that packets gather in the kernel's buffer meanwhile: fewer wake-ups, each with its fixed
# cost (a select, a crossing into the core, the summary's counts), at 1 ms of delay at most
GATHER = 0.001

LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
# Linux ARPHRD_* (from /sys/class/net/IFACE/type) -> pcap LINKTYPE_* for a PF_PACKET SOCK_RAW socket
_ARPHRD_TO_LINKTYPE = {1: LINKTYPE_ETHERNET, 772: LINKTYPE_ETHERNET, 65534: LINKTYPE_RAW, 776: LINKTYPE_RAW,
                       768: LINKTYPE_RAW, 778: LINKTYPE_RAW, 823: LINKTYPE_RAW}
ARPHRD_LOOPBACK = 772


class LiveError(Exception):
    """A capture cannot start (unknown interface, permission, bad filter): one line for the user."""


class PacketSource(Protocol):
    linktype: int

    def read(self, timeout: float) -> list[tuple[float, bytes, int]] | None:
        """Packets that arrived within ``timeout`` s ([] if none); None when the source is exhausted."""

    def close(self) -> None: ...


# ---------------------------------------------------------------- BPF and interfaces


def port_filter(ports: Sequence[int]) -> str:
    """The BPF expression for TCP to or from any of ``ports``."""
    if not ports:
        return "tcp"
    return "tcp and (" + " or ".join(f"port {int(p)}" for p in sorted(set(ports))) + ")"


def interfaces() -> list[str]:
    try:
        import scapy.arch  # noqa: F401  (loads the platform's interface provider)
        from scapy.interfaces import get_if_list

        names = get_if_list()
        if names:
            return sorted(names)
        return sorted(os.listdir("/sys/class/net"))
    except Exception:  # noqa: BLE001 - fall back to the kernel's view
        try:
            return sorted(os.listdir("/sys/class/net"))
        except OSError:
            return []


def _arphrd(iface: str) -> int | None:
    try:
        with open(f"/sys/class/net/{iface}/type") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def check_filter(expr: str, iface: str | None = None) -> None:
    """Compile ``expr`` as BPF (libpcap / tcpdump through scapy); LiveError when it does not."""
    from scapy.arch.common import compile_filter
    from scapy.error import Scapy_Exception

    try:
        compile_filter(expr, iface=iface)
    except Scapy_Exception as e:
        raise LiveError(f"bad BPF filter {expr!r}: {_why(e)}") from None
    except (OSError, ImportError) as e:
        raise LiveError(f"cannot compile the BPF filter {expr!r} ({e}; is libpcap or tcpdump installed?)") from None


def _why(e: BaseException) -> str:
    text = str(e)
    if "(" in text and text.endswith(")"):
        inner = text[text.rfind("(") + 1:-1]
        if inner:
            return inner
    return text


# ---------------------------------------------------------------- the socket source


class ScapySource:
    """Raw packets from ``iface``: a PF_PACKET socket scapy opens with ``bpf`` attached in the
    kernel, read by the core's ``PacketReader``."""

    def __init__(self, iface: str, bpf: str, snaplen: int = SNAPLEN, promisc: bool = False,
                 buffer_bytes: int = BUFFER_BYTES) -> None:
        names = interfaces()
        if iface not in names:
            raise LiveError(f"unknown interface {iface!r} (available: {', '.join(names) or 'none'})")
        check_filter(bpf, iface)
        hw = _arphrd(iface)
        self.iface = iface
        self.bpf = bpf
        self.snaplen = snaplen
        self.loopback = hw == ARPHRD_LOOPBACK
        import logging

        logging.getLogger("scapy.runtime").setLevel(logging.ERROR)   # "Unable to guess type" on lo
        try:
            from scapy.config import conf

            kernel_bpf = bpf
            if self.loopback:
                # on lo the kernel hands a PF_PACKET socket each packet twice (sent and
                # received): the filter keeps only the received copy in the kernel, so the
                # buffer holds each packet once and a drop is counted once (L2Socket also drops
                # PACKET_OUTGOING copies, should any pass)
                kernel_bpf = f"inbound and ({bpf})" if bpf.strip() else "inbound"
                from scapy.arch.linux import L2Socket as SockClass
            else:
                from scapy.arch.linux import L2ListenSocket as SockClass
            self.sock: Any = SockClass(iface=iface, filter=kernel_bpf, promisc=promisc)
        except PermissionError:
            raise LiveError(f"no permission to capture on {iface} (needs root or CAP_NET_RAW, "
                            "e.g. sudo, or setcap cap_net_raw+eip on the python binary)") from None
        except OSError as e:
            if e.errno in (errno.EPERM, errno.EACCES):
                raise LiveError(f"no permission to capture on {iface} (needs root or CAP_NET_RAW)") from None
            raise LiveError(f"cannot capture on {iface}: {e.strerror or e}") from None
        except Exception as e:  # noqa: BLE001 - scapy reports filter/interface problems as plain exceptions
            msg = str(e)
            if "filter" in msg.lower():
                raise LiveError(f"bad BPF filter {bpf!r}: {_why(e)}") from None
            if "not found" in msg.lower():
                raise LiveError(f"unknown interface {iface!r} (available: {', '.join(names)})") from None
            raise LiveError(f"cannot capture on {iface}: {msg}") from None
        if hw in _ARPHRD_TO_LINKTYPE:
            self.linktype = _ARPHRD_TO_LINKTYPE[hw]
        else:
            self.linktype = int(conf.l2types.layer2num.get(self.sock.LL, LINKTYPE_ETHERNET))
        self._fd = self.sock.fileno()
        self._last_read = 0.0
        self._full = True               # the last read took all it might (no gathering wait)
        self.received = 0
        self.dropped = 0
        self._set_buffer(buffer_bytes)
        self._set_options()
        # read() and feed() wait for the first packet with select, then the reader takes what
        # is queued (recvmmsg, without blocking) until none is left: no select per packet
        from analyzer._core import PacketReader

        try:
            self.reader: PacketReader = PacketReader(self._fd, snaplen, skip_outgoing=self.loopback,
                                                     vlan_tags=self.linktype == LINKTYPE_ETHERNET)
        except (OSError, ValueError) as e:
            self.sock.close()
            raise LiveError(f"cannot capture on {iface}: {e}") from None
        self.kernel_stats()                     # reset the kernel's counters: count from here

    def _set_buffer(self, nbytes: int) -> None:
        import socket

        s = self.sock.ins
        for opt in (SO_RCVBUFFORCE, socket.SO_RCVBUF):   # FORCE passes rmem_max when privileged
            try:
                s.setsockopt(socket.SOL_SOCKET, opt, nbytes)
                return
            except OSError:
                continue

    def _set_options(self) -> None:
        """The kernel's receive time and the packet's auxiliary data (length on the wire, VLAN
        tag) with each packet: scapy's L2Socket turns both on; said again, as the reader
        relies on them (without them: the clock's time, the length as queued)."""
        import socket

        s = self.sock.ins
        for level, opt in ((socket.SOL_SOCKET, SO_TIMESTAMPNS), (SOL_PACKET, PACKET_AUXDATA)):
            try:
                s.setsockopt(level, opt, 1)
            except OSError:
                pass

    def kernel_stats(self) -> tuple[int, int]:
        """(packets, drops) the kernel counted since the last call; drops also add up in ``dropped``."""
        try:
            raw = self.sock.ins.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8)
            packets, drops = struct.unpack("II", raw)
        except (OSError, struct.error):
            return 0, 0
        self.dropped += drops
        return packets, drops

    def _ready(self, timeout: float) -> bool:
        """A packet is queued (waiting at most ``timeout`` s for one); after a read that was not
        full, no sooner than GATHER after it."""
        try:
            ready, _, _ = select.select([self._fd], [], [], max(0.0, timeout))
        except InterruptedError:
            return False
        if not ready:
            return False
        now = time.monotonic()
        if not self._full and now < self._last_read + GATHER:
            time.sleep(self._last_read + GATHER - now)
            now = time.monotonic()
        self._last_read = now
        return True

    def read(self, timeout: float) -> list[tuple[float, bytes, int]]:
        """The packets queued once one arrived within ``timeout`` s (at most MAX_BATCH, about
        MAX_BATCH_BYTES): ``(ts, data, orig_len)`` each, ``data`` at most snaplen bytes."""
        if not self._ready(timeout):
            return []
        out = self.reader.read(MAX_BATCH, MAX_BATCH_BYTES)
        self.received += len(out)
        self._full = len(out) >= MAX_BATCH
        return out

    def feed(self, pipeline: _ReaderPipeline, first_index: int, timeout: float) -> tuple[int, Iterable[Exchange]]:
        """As ``read``, the packets handed straight to ``pipeline`` (numbered from
        ``first_index``): how many, and the exchanges they completed."""
        if not self._ready(timeout):
            return 0, ()
        n, exchanges = pipeline.feed_reader(self.reader, self.linktype, first_index, MAX_BATCH, MAX_BATCH_BYTES)
        self.received += n
        self._full = n >= MAX_BATCH
        return n, exchanges

    def close(self) -> None:
        if getattr(self.sock, "closed", False):
            return
        self.kernel_stats()
        self.reader.close()          # (it borrows the socket's descriptor: forgotten first)
        try:
            self.sock.close()
        except Exception:  # noqa: BLE001 - closing twice or after an error
            pass


class ReplaySource:
    """Packets from a list (tests, or replaying a capture through the live loop)."""

    def __init__(self, packets: Iterable[tuple[float, bytes, int]], linktype: int = LINKTYPE_ETHERNET,
                 per_read: int = 10, pace: float = 0.0) -> None:
        self._it = iter(packets)
        self.linktype = linktype
        self.per_read = per_read
        self.pace = pace
        self.closed = False

    def read(self, timeout: float) -> list[tuple[float, bytes, int]] | None:
        out = []
        for pkt in self._it:
            out.append(pkt)
            if len(out) >= self.per_read:
                break
        if self.pace:
            time.sleep(self.pace)
        return out or None

    def close(self) -> None:
        self.closed = True


# ---------------------------------------------------------------- writing what was captured


class PcapSink:
    """A pcap file (nanosecond timestamps) of the raw packets, in the interface's link type."""

    def __init__(self, path: str, linktype: int, snaplen: int = SNAPLEN) -> None:
        try:
            self.f: BinaryIO = open(path, "wb")  # noqa: SIM115 - closed in close()
        except OSError as e:
            raise LiveError(f"cannot write {path}: {e.strerror or e}") from None
        self.path = path
        self.packets = 0
        self.f.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, snaplen, linktype))
        self.f.flush()
        self._rec = struct.Struct("<IIII")

    def write(self, ts: float, data: bytes, orig_len: int) -> None:
        sec = int(ts)
        nsec = int(round((ts - sec) * 1e9))
        if nsec >= 1_000_000_000:
            sec, nsec = sec + 1, nsec - 1_000_000_000
        self.f.write(self._rec.pack(sec, nsec, len(data), orig_len))
        self.f.write(data)
        self.packets += 1

    def flush(self) -> None:
        self.f.flush()

    def close(self) -> None:
        if not self.f.closed:
            self.f.close()


# ---------------------------------------------------------------- the loop


class _Pipeline(Protocol):
    """What LiveSession asks of its pipeline (analyzer.pipeline.Pipeline)."""
    def feed_packets(self, packets: list[PacketRecord]) -> Iterable[Exchange]: ...
    def expire(self, now: float) -> list[Exchange]: ...
    def finish(self) -> list[Exchange]: ...


class _ReaderPipeline(Protocol):
    """What ScapySource.feed asks of its pipeline (analyzer.pipeline.Pipeline)."""
    def feed_reader(self, reader: PacketReader, linktype: int, first_index: int, max_packets: int,
                    max_bytes: int) -> tuple[int, Iterable[Exchange]]: ...


@dataclass
class LiveResult:
    reason: str                 # "count" | "duration" | "interrupted" (SIGINT) | "terminated" (SIGTERM)
                                # | "output closed" (the reader of stdout went away) | "source ended"
    packets: int = 0
    exchanges: int = 0
    seconds: float = 0.0
    written: int | None = None  # packets written with --write
    dropped: int | None = None  # packets the kernel dropped (receive buffer full), when known


@dataclass
class LiveSession:
    pipeline: _Pipeline
    source: PacketSource
    on_exchange: Callable[[Exchange], None]
    sink: PcapSink | None = None
    count: int | None = None            # stop after this many exchanges
    duration: float | None = None       # stop after this many seconds
    on_tick: Callable[[float], None] | None = None   # called about once a second
    expire_every: float = 0.5
    tick_every: float = 1.0
    clock: Callable[[], float] = time.time
    handle_signals: bool = True         # SIGINT/SIGTERM stop the loop cleanly
    keep: Callable[[Exchange], bool] | None = None      # only these exchanges are handed on and counted
    _stop: str | None = field(default=None, init=False)
    _packets: int = field(default=0, init=False)
    _exchanges: int = field(default=0, init=False)

    @property
    def packets(self) -> int:
        return self._packets

    def stop(self, reason: str = "interrupted") -> None:
        if self._stop is None:
            self._stop = reason

    def _emit(self, exchanges: Iterable[Exchange]) -> None:
        """Show the exchanges (those the filter keeps), up to ``count``. The iterable is
        always consumed to its end: the pipeline hands a batch's exchanges out as it
        analyses the batch, and what comes after the count is still analysed (the summary
        accounts for it) without being shown."""
        keep, count, on_exchange = self.keep, self.count, self.on_exchange
        for ex in exchanges:
            if keep is not None and not keep(ex):
                continue
            if count is not None and self._exchanges >= count:
                self.stop("count")
                continue
            self._exchanges += 1
            on_exchange(ex)
            if count is not None and self._exchanges >= count:
                self.stop("count")

    def run(self) -> LiveResult:
        old: dict[int, Any] = {}
        if self.handle_signals:
            old = self._install_signals()
        start = self.clock()
        last_expire = last_tick = start
        pipe = self.pipeline
        linktype = self.source.linktype
        sink = self.sink
        # without --write no Python object need be made per packet: a source that can
        # (ScapySource.feed) hands its packets to the pipeline in the core
        feed = getattr(self.source, "feed", None) if sink is None and hasattr(pipe, "feed_reader") else None
        try:
            while self._stop is None:
                now = self.clock()
                wait = 0.25
                if self.duration is not None:
                    left = start + self.duration - now
                    if left <= 0:
                        self.stop("duration")
                        break
                    wait = min(wait, left)
                # a batch crosses into the core at once (packets numbered from 1, as tshark does)
                first = self._packets + 1
                if feed is not None:
                    n, exchanges = feed(pipe, first, wait)
                    self._packets += n
                    self._emit(exchanges)
                else:
                    batch = self.source.read(wait)
                    if batch is None:
                        self.stop("source ended")
                        break
                    if sink is not None:
                        for ts, data, orig_len in batch:
                            sink.write(ts, data, orig_len)
                    self._packets += len(batch)
                    self._emit(pipe.feed_packets([(first + i, ts, linktype, data, orig_len)
                                                  for i, (ts, data, orig_len) in enumerate(batch)]))
                now = self.clock()
                if self._stop is None and now - last_expire >= self.expire_every:
                    last_expire = now
                    self._emit(pipe.expire(now))
                if now - last_tick >= self.tick_every:
                    last_tick = now
                    # the kernel's drop count as it goes (each read resets the kernel's
                    # counters; the source adds them up in ``dropped``)
                    stats = getattr(self.source, "kernel_stats", None)
                    if stats is not None:
                        stats()
                    if sink is not None:
                        sink.flush()
                    if self.on_tick is not None:
                        self.on_tick(now)
        finally:
            self.source.close()
            if self.handle_signals:
                self._restore_signals(old)
        # the pipeline is finished in every case, so the summary accounts for every
        # connection and request; after --count the exchanges this reports are not shown
        ended = pipe.finish()
        if self._stop != "count":
            self._emit(ended)
        if sink is not None:
            sink.close()
        return LiveResult(self._stop or "interrupted", self._packets, self._exchanges, self.clock() - start,
                          sink.packets if sink is not None else None, getattr(self.source, "dropped", None))

    def _install_signals(self) -> dict[int, Any]:
        old: dict[int, Any] = {}

        def handler(signum: int, frame: FrameType | None) -> None:
            if self._stop is not None and signum == signal.SIGINT:
                raise KeyboardInterrupt          # a second Ctrl-C: stop now
            self.stop("interrupted" if signum == signal.SIGINT else "terminated")

        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                old[sig] = signal.signal(sig, handler)
            except ValueError:                    # not the main thread
                pass
        return old

    @staticmethod
    def _restore_signals(old: dict[int, Any]) -> None:
        for sig, h in old.items():
            try:
                signal.signal(sig, h)
            except ValueError:
                pass


# ---------------------------------------------------------------- the --stats dashboard


class _ApiFigures:
    """One API's running figures on the dashboard. Its latencies wait in ``pending`` (an
    append per exchange) and reach the Quantiles (exact up to 1000 values, then a bounded
    sketch) a batch at a time: ``settle`` when the figures are read or ``pending`` is full."""

    __slots__ = ("count", "errors", "unanswered", "latency", "pending")

    def __init__(self) -> None:
        from analyzer._core import Quantiles

        self.count = 0
        self.errors = 0              # error codes of the responses (each name of ex.error_codes)
        self.unanswered = 0
        self.latency = Quantiles()   # ms, answered exchanges only
        self.pending: list[float] = []

    def settle(self) -> None:
        if self.pending:
            self.latency.extend(self.pending)
            self.pending = []


class Dashboard:
    """Running figures for ``live --stats``: per API (requests, latency quantiles, errors,
    unanswered), rates and top clients, in memory bounded however long it runs.

    ``add`` takes each exchange; ``renderable`` builds the rich view (refreshed once a
    second by the command); ``report`` the closing one, printed when the capture stops.
    """

    WINDOW = 5                      # seconds of per-API counts kept for the recent rate
    MAX_CLIENTS = 10_000            # distinct clients tracked before the rest count as "(other)"
    SETTLE_EVERY = 1024             # latencies an API keeps pending before its Quantiles takes them

    def __init__(self, title: str, clock: Callable[[], float] = time.time) -> None:
        self.title = title
        self.clock = clock
        self.start = clock()
        self.apis: dict[str, _ApiFigures] = {}
        self.exchanges = 0
        self.statuses: dict[str, int] = {}
        self.errors: dict[str, int] = {}
        self.clients: dict[tuple[str, str], list[int]] = {}     # (client_id, address) -> [requests, errors]
        self._recent: dict[int, dict[str, int]] = {}            # second -> api -> count
        self.packets = 0
        self.dropped: int | None = None                         # packets the kernel dropped, when known

    def add(self, ex: Exchange) -> None:
        api = ex.api_name
        status = ex.status
        errs = ex.error_codes
        f = self.apis.get(api)
        if f is None:
            f = self.apis[api] = _ApiFigures()
        f.count += 1
        if status == "unanswered":
            f.unanswered += 1
        lat = ex.latency_ms
        if lat is not None:
            pending = f.pending
            pending.append(lat)
            if len(pending) >= self.SETTLE_EVERY:
                f.settle()
        self.exchanges += 1
        self.statuses[status] = self.statuses.get(status, 0) + 1
        if errs:
            f.errors += len(errs)
            for e in errs:
                self.errors[e] = self.errors.get(e, 0) + 1
        sec = int(self.clock())
        bucket = self._recent.get(sec)
        if bucket is None:
            bucket = self._recent[sec] = {}
            for old in [s for s in self._recent if s <= sec - self.WINDOW - 1]:
                del self._recent[old]
        bucket[api] = bucket.get(api, 0) + 1
        key = (ex.client_id or "-", ex.conn.client.ip if ex.conn is not None else "-")
        row = self.clients.get(key)
        if row is None:
            if len(self.clients) >= self.MAX_CLIENTS:
                key = ("(other)", "-")
                row = self.clients.setdefault(key, [0, 0])
            else:
                row = self.clients[key] = [0, 0]
        row[0] += 1
        if errs or status not in ("ok", "no_response_expected"):
            row[1] += 1

    def rates(self, now: float | None = None) -> dict[str, float]:
        """Requests per second per API over the last WINDOW whole seconds, divided by the time
        they cover since the start (the first second is counted from the start, not from
        its beginning); before a whole second has passed since the start: the average
        since the start, as ``avg/s`` gives it."""
        now_f = self.clock() if now is None else now
        now_s = int(now_f)
        since = max(self.start, now_s - self.WINDOW)        # the window, cut at the start
        if now_s - since >= 1.0:
            secs, span = range(int(since), now_s), now_s - since
        else:
            secs, span = range(int(self.start), now_s + 1), max(1e-9, now_f - self.start)
        out: dict[str, float] = {}
        for s in secs:
            for api, n in self._recent.get(s, {}).items():
                out[api] = out.get(api, 0) + n
        return {k: v / span for k, v in out.items()}

    def rows(self, now: float | None = None) -> list[dict[str, Any]]:
        """Per API, most requests first: count, rate (last WINDOW s, as ``rates``), avg_rate
        (since the start), p50, p99 and max latency in ms (None when none was answered),
        errors (error codes in its responses), unanswered."""
        rates = self.rates(now)
        elapsed = max(1e-9, (self.clock() if now is None else now) - self.start)
        rows: list[dict[str, Any]] = []
        for api, f in self.apis.items():
            f.settle()
            q = f.latency
            rows.append({"api": api, "count": f.count, "rate": rates.get(api, 0.0), "avg_rate": f.count / elapsed,
                         "p50": q.quantile(0.5), "p99": q.quantile(0.99),
                         "max": q.max if q.count else None, "errors": f.errors,
                         "unanswered": f.unanswered})
        rows.sort(key=lambda r: (-r["count"], str(r["api"])))
        return rows

    def renderable(self, now: float | None = None) -> Any:
        from rich import box
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        from analyzer.sinks.stats_render import fmt_num

        now = self.clock() if now is None else now
        elapsed = now - self.start
        total_rate = sum(self.rates(now).values())
        st = self.statuses
        head = Text.assemble(
            (self.title, "bold"),
            f"  {elapsed:.0f} s  packets {self.packets}  exchanges {self.exchanges}  {total_rate:.1f} req/s",
            ("  unanswered " + str(st.get("unanswered", 0)), "yellow" if st.get("unanswered") else ""),
            ("  malformed " + str(st.get("malformed", 0)), "red" if st.get("malformed") else ""),
            ("  orphans " + str(st.get("orphan_response", 0)), "yellow" if st.get("orphan_response") else ""),
            (f"  kernel drops {self.dropped}" if self.dropped is not None else "",
             "bold red" if self.dropped else ""),
        )
        t = Table(title="per API (req/s: last 5 s; avg/s: since start; latency in ms)", title_justify="left", expand=False, box=box.SIMPLE_HEAD,
                  pad_edge=False)
        t.add_column("API", max_width=22, overflow="ellipsis", no_wrap=True)
        for col in ("reqs", "req/s", "avg/s", "p50", "p99", "max", "errors"):
            t.add_column(col, justify="right", no_wrap=True)
        for r in self.rows(now)[:20]:
            t.add_row(str(r["api"]), str(r["count"]), f"{r['rate']:.1f}", f"{r['avg_rate']:.1f}",
                      fmt_num(r["p50"]), fmt_num(r["p99"]), fmt_num(r["max"]),
                      Text(str(r["errors"]), style="red") if r["errors"] else "0")
        parts: list[Any] = [head, t, self._clients_table(8)]
        e = self._errors_table(8)
        if e is not None:
            parts.append(e)
        return Group(*parts)

    def report(self, now: float | None = None) -> Any:
        """The closing report (a rich renderable, plain text on a console that is not a
        terminal): every API's figures since the start, the top clients, the errors."""
        from rich import box
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        from analyzer.sinks.stats_render import fmt_num

        now = self.clock() if now is None else now
        head = Text(f"live --stats: per API over {now - self.start:.1f} s, {self.exchanges} exchanges "
                    "(avg/s: since the start; latency in ms)", style="bold")
        t = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
        t.add_column("API", no_wrap=True)
        for col in ("reqs", "avg/s", "p50", "p99", "max", "errors", "unanswered"):
            t.add_column(col, justify="right", no_wrap=True)
        for r in self.rows(now):
            t.add_row(str(r["api"]), str(r["count"]), f"{r['avg_rate']:.1f}",
                      fmt_num(r["p50"]), fmt_num(r["p99"]), fmt_num(r["max"]),
                      Text(str(r["errors"]), style="red") if r["errors"] else "0",
                      Text(str(r["unanswered"]), style="yellow") if r["unanswered"] else "0")
        parts: list[Any] = [head, t, "", self._clients_table(10, show_edge=False)]
        e = self._errors_table(None, show_edge=False)
        if e is not None:
            parts += ["", e]
        return Group(*parts)

    def _clients_table(self, limit: int, show_edge: bool = True) -> Any:
        from rich import box
        from rich.table import Table
        from rich.text import Text

        c = Table(title="top clients", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                  show_edge=show_edge)
        for col in ("client_id", "address", "requests", "errors"):
            c.add_column(col, justify="right" if col in ("requests", "errors") else "left")
        for (cid, addr), (n, errs) in sorted(self.clients.items(), key=lambda kv: -kv[1][0])[:limit]:
            c.add_row(cid, addr, str(n), Text(str(errs), style="red") if errs else "0")
        return c

    def _errors_table(self, limit: int | None, show_edge: bool = True) -> Any:
        """The error codes by count (the first ``limit``), or None when there was none."""
        if not self.errors:
            return None
        from rich import box
        from rich.table import Table
        from rich.text import Text

        e = Table(title="errors", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                  show_edge=show_edge)
        e.add_column("error")
        e.add_column("count", justify="right")
        for name, n in sorted(self.errors.items(), key=lambda kv: -kv[1])[:limit]:
            e.add_row(Text(name, style="red"), str(n))
        return e
