"""Write pcap / pcapng files from crafted TCP packets (a test helper; no scapy).

Build packets with ``TcpFlow``, which tracks sequence numbers for both sides::

    flow = TcpFlow(("10.0.0.1", 40000), ("10.0.0.2", 9092), ts=1000.0)
    pkts = flow.handshake()                               # SYN, SYN-ACK, ACK
    pkts += flow.send(0, kafka_frame(b"...request..."))   # side 0 = client, 1 = server
    pkts += flow.send(1, big, sizes=[100, 50])            # split: 100, 50, then the rest
    pkts += flow.send(0, b"x" * 5000, mss=1460)           # split every 1460 bytes
    pkts += flow.fin(0) + flow.fin(1)                     # or flow.rst(0)
    write_pcap("x.pcap", pkts)                            # Ethernet, microseconds, LE

Every packet is a ``TcpPacket(ts, src, dst, sport, dport, flags, seq, ack, payload)``
(src/dst are IP strings; IPv6 when they contain ":"); edit or reorder the list freely
to make retransmissions, losses and reordering. ``snap`` on a packet (or ``snaplen`` on
the writer) cuts the captured bytes; ``orig_len`` keeps the wire length.

Writers:
- ``write_pcap(path, packets, linktype=1, nanos=False, big_endian=False, snaplen=0,
  gz=False, raw_tail=b"")`` (VLAN tags: ``TcpPacket.vlans``)
- ``write_pcapng(path, packets, interfaces=(1,), big_endian=False, tsresol=6,
  extra_blocks=(), gz=False)``: ``packets`` items may carry ``iface`` (index into
  ``interfaces``); ``extra_blocks`` are raw block bytes inserted after the IDBs (e.g.
  ``pcapng_block(0x0BADBEEF, b"....")`` for an unknown block type).

``encap(ip_bytes, linktype, vlans=())`` wraps an IP datagram for link types 0, 1, 12,
14, 101, 108, 113, 228, 229, 276. ``RawPacket(ts, data, orig_len=None, iface=0)`` writes
arbitrary bytes as a record. ``kafka_frame(body)`` prefixes a 4-byte size;
``kafka_request(api_key, version, corr, client_id, body)`` and ``kafka_response(corr, body)``
build plausible frames; ``request_plausible(header)`` is a simple request-header check.
``replicate(packets, copies, ...)`` clones a flow over many connections (shifted ports,
sequence numbers and timestamps) for benchmarks. ``run_pipeline(path, plausible_for=None,
ports=None)`` reads a file back through capture -> net -> tcp -> framing and returns the
reader, skip counts, reassembler, framers, events and frames.
"""
from __future__ import annotations

import gzip
import heapq
import socket
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from analyzer._core import END_OF_CAPTURE
from analyzer.model import Conn, Endpoint

# -- the core's reassembly events, as tests read them (``Stream()`` without ``apis``) ----------

class StreamData(NamedTuple):
    """Contiguous in-order bytes of one direction of a connection."""
    conn: Conn
    direction: int
    offset: int         # stream offset of data[0] (bytes since the first byte seen)
    data: bytes
    ts: float           # time of the packet that delivered these bytes
    index: int  # type: ignore[assignment]  # shadows tuple.index: its packet number


class StreamGap(NamedTuple):
    """Bytes of one direction that were never captured (lost segment or snaplen)."""
    conn: Conn
    direction: int
    offset: int
    length: int
    ts: float
    index: int  # type: ignore[assignment]  # shadows tuple.index
    reason: str         # "lost segment" | "snaplen" | "memory bound" ...


class StreamEnd(NamedTuple):
    """One direction (or the whole connection) ended: FIN, RST, port reuse or end of capture."""
    conn: Conn
    direction: int | None   # None: the whole connection
    reason: str             # "fin" | "rst" | "reused" | "end of capture"
    ts: float
    index: int  # type: ignore[assignment]  # shadows tuple.index


StreamEvent = StreamData | StreamGap | StreamEnd


FIN, SYN, RST, PSH, ACK = 1, 2, 4, 8, 16


@dataclass
class TcpPacket:
    ts: float
    src: str
    dst: str
    sport: int
    dport: int
    flags: int
    seq: int
    ack: int
    payload: bytes = b""
    snap: int = 0            # >0: keep only this many bytes of the link-layer frame
    iface: int = 0           # pcapng interface index
    vlans: tuple[int, ...] = ()


@dataclass
class RawPacket:
    ts: float
    data: bytes
    orig_len: int | None = None
    iface: int = 0


def _csum(b: bytes) -> int:
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def ip_packet(p: TcpPacket) -> bytes:
    """The IP datagram (IPv4 or IPv6) carrying p's TCP segment."""
    tcp = struct.pack("!HHIIBBHHH", p.sport, p.dport, p.seq & 0xFFFFFFFF, p.ack & 0xFFFFFFFF,
                      5 << 4, p.flags, 65535, 0, 0) + p.payload
    if ":" in p.src:
        hdr = struct.pack("!IHBB", 6 << 28, len(tcp), 6, 64)
        return hdr + socket.inet_pton(socket.AF_INET6, p.src) + socket.inet_pton(socket.AF_INET6, p.dst) + tcp
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 1, 0x4000, 64, 6, 0,
                      socket.inet_aton(p.src), socket.inet_aton(p.dst))
    hdr = hdr[:10] + struct.pack("!H", _csum(hdr)) + hdr[12:]
    return hdr + tcp


def encap(ip: bytes, linktype: int = 1, vlans: Sequence[int] = (), null_big_endian: bool = False,
          af6: int = 30) -> bytes:
    """Wrap an IP datagram in the link layer ``linktype``."""
    v6 = ip[0] >> 4 == 6
    etype = 0x86DD if v6 else 0x0800
    if linktype == 1:
        tags = b""
        tpids = [0x88A8] + [0x8100] * (len(vlans) - 1) if len(vlans) > 1 else [0x8100] * len(vlans)
        for tpid, vid in zip(tpids, vlans, strict=True):
            tags += struct.pack("!HH", tpid, vid)
        return b"\x02\0\0\0\0\x02" + b"\x02\0\0\0\0\x01" + tags + struct.pack("!H", etype) + ip
    if linktype == 113:
        return struct.pack("!HHH8sH", 0, 772, 6, b"\0" * 8, etype) + ip
    if linktype == 276:
        return struct.pack("!HHIHBB8s", etype, 0, 1, 772, 0, 6, b"\0" * 8) + ip
    if linktype in (0, 108):
        af = af6 if v6 else 2
        big = null_big_endian or linktype == 108
        return struct.pack(">I" if big else "<I", af) + ip
    if linktype in (101, 12, 14, 228, 229):
        return ip
    raise ValueError(f"linktype {linktype} not supported by pcapgen")


def frame_bytes(p: TcpPacket | RawPacket, linktype: int) -> tuple[bytes, int]:
    """(captured bytes, original length) of one packet."""
    if isinstance(p, RawPacket):
        return p.data, p.orig_len if p.orig_len is not None else len(p.data)
    data = encap(ip_packet(p), linktype, p.vlans)
    orig = len(data)
    if p.snap:
        data = data[:p.snap]
    return data, orig


def pcapng_block(btype: int, body: bytes, big_endian: bool = False) -> bytes:
    e = ">" if big_endian else "<"
    body += b"\0" * (-len(body) % 4)
    n = len(body) + 12
    return struct.pack(e + "II", btype, n) + body + struct.pack(e + "I", n)


def _open(path: str, gz: bool):  # noqa: ANN202
    return gzip.open(path, "wb") if gz else open(path, "wb")


def write_pcap(path: str, packets: Iterable[TcpPacket | RawPacket], linktype: int = 1,
               nanos: bool = False, big_endian: bool = False, snaplen: int = 0,
               gz: bool = False, raw_tail: bytes = b"") -> None:
    """Write a classic pcap file. ``raw_tail`` is appended verbatim (to cut/corrupt files)."""
    e = ">" if big_endian else "<"
    magic = 0xA1B23C4D if nanos else 0xA1B2C3D4
    with _open(path, gz) as f:
        f.write(struct.pack(e + "IHHiIII", magic, 2, 4, 0, 0, snaplen or 262144, linktype))
        for p in packets:
            data, orig = frame_bytes(p, linktype)
            if snaplen and len(data) > snaplen:
                data = data[:snaplen]
            sec = int(p.ts)
            frac = round((p.ts - sec) * (1e9 if nanos else 1e6))
            f.write(struct.pack(e + "IIII", sec, frac, len(data), orig) + data)
        f.write(raw_tail)


def write_pcapng(path: str, packets: Iterable[TcpPacket | RawPacket],
                 interfaces: Sequence[int] = (1,), big_endian: bool = False, tsresol: int = 6,
                 extra_blocks: Sequence[bytes] = (), gz: bool = False, snaplen: int = 0) -> None:
    """Write a pcapng file: SHB, one IDB per entry of ``interfaces`` (its link type),
    ``extra_blocks``, then one EPB per packet. ``tsresol`` is the if_tsresol option byte
    (6 = microseconds, 9 = ns, 0x80|n = 2^-n)."""
    e = ">" if big_endian else "<"
    units = 2 ** (tsresol & 0x7F) if tsresol & 0x80 else 10 ** tsresol
    with _open(path, gz) as f:
        f.write(pcapng_block(0x0A0D0D0A, struct.pack(e + "IHHq", 0x1A2B3C4D, 1, 0, -1), big_endian))
        for lt in interfaces:
            opts = struct.pack(e + "HH", 9, 1) + bytes([tsresol]) + b"\0\0\0" + struct.pack(e + "HH", 0, 0)
            f.write(pcapng_block(1, struct.pack(e + "HHI", lt, 0, snaplen) + opts, big_endian))
        for blk in extra_blocks:
            f.write(blk)
        for p in packets:
            data, orig = frame_bytes(p, interfaces[p.iface])
            t = round(p.ts * units)
            body = struct.pack(e + "IIIII", p.iface, t >> 32, t & 0xFFFFFFFF, len(data), orig) + data
            f.write(pcapng_block(6, body, big_endian))


def uvarint(n: int) -> bytes:
    """Kafka's unsigned varint (compact lengths, tagged fields)."""
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def kafka_frame(body: bytes) -> bytes:
    return struct.pack("!I", len(body)) + body


def kafka_request(api_key: int, version: int, corr: int, client_id: str = "cli", body: bytes = b"") -> bytes:
    cid = client_id.encode()
    return kafka_frame(struct.pack("!hhih", api_key, version, corr, len(cid)) + cid + body)


def kafka_response(corr: int, body: bytes = b"") -> bytes:
    return kafka_frame(struct.pack("!i", corr) + body)


def request_plausible(h: bytes) -> bool:
    """A simple request-header check for tests: api_key < 100, version < 30."""
    if len(h) < 4:
        return len(h) >= 2 and int.from_bytes(h[:2], "big") < 100
    return int.from_bytes(h[:2], "big") < 100 and int.from_bytes(h[2:4], "big") < 30


class TcpFlow:
    """One TCP connection; side 0 is the client (``client``), side 1 the server.

    Each method returns the packets it made and advances sequence numbers and time
    (``dt`` seconds per packet). ``seq[side]`` / ``ack`` follow real TCP (SYN and FIN
    consume one sequence number).
    """

    def __init__(self, client: tuple[str, int], server: tuple[str, int], isn: tuple[int, int] = (1000, 5000),
                 ts: float = 1_700_000_000.0, dt: float = 0.001) -> None:
        self.ends = (client, server)
        self.seq = [isn[0], isn[1]]
        self.ts = ts
        self.dt = dt

    def _pkt(self, side: int, flags: int, payload: bytes = b"", seq: int | None = None) -> TcpPacket:
        (sip, sport), (dip, dport) = self.ends[side], self.ends[1 - side]
        p = TcpPacket(self.ts, sip, dip, sport, dport, flags,
                      (self.seq[side] if seq is None else seq) & 0xFFFFFFFF,
                      self.seq[1 - side] & 0xFFFFFFFF if flags & ACK else 0, payload)
        self.ts += self.dt
        return p

    def handshake(self) -> list[TcpPacket]:
        out = [self._pkt(0, SYN)]
        self.seq[0] += 1
        out.append(self._pkt(1, SYN | ACK))
        self.seq[1] += 1
        out.append(self._pkt(0, ACK))
        return out

    def send(self, side: int, data: bytes, sizes: Sequence[int] = (), mss: int = 0) -> list[TcpPacket]:
        """Data segments from ``side``: first the ``sizes`` given, then ``mss``-sized pieces
        (or the rest in one piece when mss is 0)."""
        out: list[TcpPacket] = []
        pos = 0
        for n in sizes:
            if pos >= len(data):
                break
            out.append(self._pkt(side, PSH | ACK, data[pos:pos + n]))
            self.seq[side] += len(data[pos:pos + n])
            pos += n
        while pos < len(data):
            n = mss or len(data) - pos
            out.append(self._pkt(side, PSH | ACK, data[pos:pos + n]))
            self.seq[side] += len(data[pos:pos + n])
            pos += n
        return out

    def ack(self, side: int) -> list[TcpPacket]:
        return [self._pkt(side, ACK)]

    def fin(self, side: int) -> list[TcpPacket]:
        p = self._pkt(side, FIN | ACK)
        self.seq[side] += 1
        return [p]

    def rst(self, side: int) -> list[TcpPacket]:
        return [self._pkt(side, RST | ACK)]


def replicate(packets: Sequence[TcpPacket], copies: int, port_step: int = 0, seq_step: int = 7919,
              time_step: float = 0.0005, server_ports: Iterable[int] = ()) -> list[TcpPacket]:
    """``copies`` clones of a flow, one after the other, each on its own client ports (shifted
    by ``port_step``; 0: the span of the flow's client ports, so no two clones collide), with sequence numbers shifted by ``c * seq_step`` and timestamps by
    ``c * time_step``. The server side is ``server_ports``, or else the destination of
    the flow's SYNs."""
    out: list[TcpPacket] = []
    if not packets:
        return out
    server_ports = set(server_ports) or {p.dport for p in packets if p.flags & SYN and not p.flags & ACK}
    client_ports = {p.sport for p in packets if p.sport not in server_ports}
    if not port_step and client_ports:
        port_step = max(client_ports) - min(client_ports) + 1
    for c in range(copies):
        shift = c * port_step
        for p in packets:
            client_is_src = p.sport not in server_ports
            q = replace(p, ts=p.ts + c * time_step,
                        seq=(p.seq + c * seq_step) & 0xFFFFFFFF,
                        ack=((p.ack + c * seq_step) & 0xFFFFFFFF) if p.flags & ACK else 0)
            if client_is_src:
                q.sport = (p.sport + shift - 1024) % 64000 + 1024
            else:
                q.dport = (p.dport + shift - 1024) % 64000 + 1024
            out.append(q)
    return out


class CoreRun:
    """What the core's stream stages gave for a capture (``run_pipeline``, ``stream_events``):
    the reassembly's ``counters`` and ``notes``, and ``conns``, every connection in id
    order, as the model's ``Conn`` (kept up to date by the core's events)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.conns: list[Conn] = []
        self._by_id: dict[int, Conn] = {}

    @property
    def counters(self) -> dict[str, int]:
        return self.stream.counters

    @property
    def notes(self) -> list[str]:
        return self.stream.notes

    def model(self, events: list[tuple]) -> list[StreamEvent]:
        """The core's event tuples (core/src/py/mod.rs) as the model's StreamData, StreamGap and
        StreamEnd, carrying ``Conn`` objects; connection openings and updates fold into them."""
        out: list[StreamEvent] = []
        for ev in events:
            kind = ev[0]
            if kind == 3:
                c = Conn(ev[1], Endpoint(ev[2], ev[3]), Endpoint(ev[4], ev[5]), first_ts=ev[6], last_ts=ev[6])
                self.conns.append(c)
                self._by_id[c.id] = c
            elif kind == 4:
                c = self._by_id[ev[1]]
                c.syn_seen, c.closed, c.closed_by, c.lost_from, c.last_ts = ev[2:7]
            elif kind == 0:
                c = self._by_id[ev[1]]
                if ev[7] < END_OF_CAPTURE:      # (the time of the packet being handled)
                    c.last_ts = ev[8]
                out.append(StreamData(c, *ev[2:7]))
            elif kind == 1:
                c = self._by_id[ev[1]]
                if ev[8] < END_OF_CAPTURE:
                    c.last_ts = ev[9]
                out.append(StreamGap(c, *ev[2:8]))
            else:
                out.append(StreamEnd(self._by_id[ev[1]], *ev[2:6]))
        return out


def stream_events(path: str, ports: Iterable[int] | None = None, max_buffer: int = 4 * 1024 * 1024,
                  **stream_kw: Any) -> tuple[Any, CoreRun, list[StreamEvent]]:
    """(capture, CoreRun, every stream event) of ``path`` read by the core's stages."""
    from analyzer._core import Stream, open_capture

    kw: dict[str, Any] = {"max_buffer": max_buffer, **stream_kw}
    if ports is not None:
        kw.update(ports=list(ports), autodetect=False)
    stream = Stream(**kw)
    run = CoreRun(stream)
    events: list[StreamEvent] = []
    with open_capture(path) as cap:
        while (batch := stream.feed_capture(cap, 1024)) is not None:
            events += run.model(batch)
    events += run.model(stream.finish())
    return cap, run, events


def run_pipeline(path: str, ports: Iterable[int] | None = None, max_buffer: int = 4 * 1024 * 1024) -> dict:
    """Read ``path`` through the whole packet path (the core's capture, net, tcp, framing and
    pairing) for tests of framing.

    Returns a dict: ``reader`` (the core's Capture), ``skips`` (net: reason -> packets),
    ``reasm`` (a CoreRun: counters, notes, conns), ``events`` (every StreamEvent, from a
    second run of the core that hands every connection over), ``exchanges``, ``frames``
    (their request and response frames: each direction's in stream order) and ``framing`` (``skipped``:
    bytes not framed by reason; ``truncated_frames``). ``ports``: keep only segments with a
    source or destination port in it (they are counted as skipped "not a Kafka port").
    """
    from types import SimpleNamespace

    from analyzer._core import open_capture
    from analyzer.pipeline import Options, Pipeline

    cap, run, events = stream_events(path, ports, max_buffer)
    opts = Options(ports=tuple(ports), autodetect=False) if ports is not None else Options()
    pipe = Pipeline(opts)
    pipe.stream = pipe.new_stream(max_buffer=max_buffer)
    with open_capture(path) as r:
        exs = list(pipe.feed_capture(r))
    exs += pipe.finish()
    # each direction's frames in stream order, the directions interleaved by the packets that
    # completed their frames (reordered segments complete several frames at once)
    streams: dict[tuple[int, int], list[Any]] = {}
    for ex in exs:
        for f in (ex.request, ex.response):
            if f is not None:
                streams.setdefault((f.conn.id, f.direction), []).append(f)
    frames = list(heapq.merge(*(sorted(fs, key=lambda f: f.stream_offset) for fs in streams.values()),
                              key=lambda f: f.last_index))
    s = pipe.summary
    framing = SimpleNamespace(skipped={k: v for k, v in s.bytes_skipped.items() if v},
                              truncated_frames=s.truncated_frames)
    skips = {k: v for k, v in run.stream.skips.items() if k != "not a Kafka port"}
    return {"reader": cap, "skips": skips, "reasm": run, "framing": framing, "events": events,
            "exchanges": exs, "frames": frames}


# -- a pipeline run, fed in batches (tests of the core's batching) ------------------------------

def exchange_sig(ex: Any) -> tuple[Any, ...]:
    return (ex.seq, ex.conn.id, ex.status, ex.api_name, ex.api_version, ex.correlation_id, ex.client_id,
            ex.request_frame, ex.response_frame, ex.request_time, ex.response_time, ex.response_first_time,
            list(ex.error_codes), ex.partitions, list(ex.notes), ex.conn.closed, ex.conn.client_dir)


def conn_sig(c: Conn) -> tuple[Any, ...]:
    return (c.id, c.a, c.b, c.syn_seen, c.client_dir, c.protocol, c.closed, c.first_ts, c.last_ts, c.closed_by)


def core_limits(**kw: Any) -> Any:
    """A ``setup`` giving the pipeline a core Stream with other limits (``overlap_window``...)."""

    def setup(pipe: Any) -> None:
        pipe.stream = pipe.new_stream(**kw)
    return setup


def run_batched(path: str, batch: int, setup: Any = None, **opts: Any) -> dict[str, Any]:
    """Everything a run shows: exchanges, connections, the core's reassembly counters and
    notes, summary. ``batch`` 0: through ``Pipeline.feed_capture``; else the packets through
    ``Pipeline.feed_packets``, ``batch`` at a time."""
    from analyzer import pipeline as pipeline_module
    from analyzer._core import open_capture
    from analyzer.pipeline import Options, Pipeline

    pipe = Pipeline(Options(**opts))
    if setup is not None:
        setup(pipe)
    conns: dict[int, Conn] = {}

    def recording_conn(*args: Any, **kw: Any) -> Conn:
        # every connection the core opens: the Conn objects the pipeline made
        c = Conn(*args, **kw)
        conns[c.id] = c
        return c

    pipeline_module.Conn = recording_conn  # type: ignore[misc,assignment]  # restored below
    exs: list[Any] = []
    try:
        with open_capture(path) as r:
            if not batch:
                exs += pipe.feed_capture(r)
            else:
                while pkts := r.read(batch):
                    exs += pipe.feed_packets(pkts)
        exs += pipe.finish()
    finally:
        pipeline_module.Conn = Conn  # type: ignore[misc]
    stream = pipe.stream
    assert stream.open_conns == 0 and stream.conn_count == len(conns)
    return {"exchanges": [exchange_sig(ex) for ex in exs], "conns": [conn_sig(conns[k]) for k in sorted(conns)],
            "counters": dict(stream.counters), "notes": list(stream.notes),
            "summary": pipe.summary.to_json(pipe.ctx)}


def share_of_each(packets: list[tuple], n: int) -> list[int]:
    """The share (0..n-1) each packet falls in: the one whose ``Stream(share=(k, n))`` counts
    it (packets are fed one at a time, in order; exactly one share must count each)."""
    from analyzer._core import Stream

    counted: list[list[int]] = [[] for _ in packets]
    for k in range(n):
        s = Stream(share=(k, n))
        for i, p in enumerate(packets):
            before = s.packets
            s.feed([tuple(p)])
            assert s.packets - before in (0, 1)
            if s.packets > before:
                counted[i].append(k)
    assert all(len(c) == 1 for c in counted), counted
    return [c[0] for c in counted]


def conn_key(linktype: int, data: bytes, orig_len: int
             ) -> tuple[tuple[str, int, str, int] | None, str | None]:
    """A packet's connection as (ip, port, ip, port), the endpoint whose (ip text, port) is
    the smaller first (the same for both directions, as the Spark job keys its batches), or
    (None, why it is no TCP segment): read through the core's net stage (``parse_packet``)."""
    from analyzer._core import parse_packet

    seg = parse_packet(linktype, data, orig_len)
    if isinstance(seg, str):
        return None, seg
    a, b = (seg[0], seg[1]), (seg[2], seg[3])
    if b < a:
        a, b = b, a
    return (a[0], a[1], b[0], b[1]), None
