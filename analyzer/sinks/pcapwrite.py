"""``read -w OUT``: the capture cut to the selected exchanges.

The first pass (``read`` itself) hands each selected exchange to ``CutCapture.add``, which
keeps where its frames lie: connection, direction and stream offsets (``Frame.stream_offset``
is that of the size prefix, the frame ``4 + size`` bytes long). The second pass
(``CutCapture.write``) reads the capture again and copies, unchanged, every packet of those
connections whose TCP payload holds bytes of a selected frame (retransmissions too), plus
each connection's handshake packets (SYN, SYN-ACK, the client's ACK that completes it) and
every FIN or RST. Memory holds the frames' offsets, not packets.

A packet belongs to a connection by its 4-tuple from the connection's first packet on, until
a SYN with another sequence number starts a new connection on that 4-tuple. Of a connection
decrypted with ``--tls-keylog`` (frames' offsets count in the plaintext, and a TLS record
cannot be decrypted without the handshake and the records before it), every packet with
payload up to the last packet of its selected frames is written: the cut, read with the key
log, shows that connection's earlier exchanges too. Stream offsets count as the core's
reassembly counts them: from the SYN's sequence number + 1, or from the first packet of a
direction when the handshake was not captured (the SYN-ACK's ack for the client's side).

The file: a classic pcap when the capture has one link type (microsecond timestamps, as
tcpdump writes them, or nanosecond ones when the capture's are finer), else a pcapng with one
interface per link type; bytes and lengths on the wire unchanged. Packet numbers are those of
the new file.
"""
from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass, field
from typing import BinaryIO

from analyzer.errors import UserError
from analyzer.model import Conn, Exchange, Packet

FIN, SYN, RST, ACK = 0x01, 0x02, 0x04, 0x10
SNAPLEN = 262144


@dataclass
class _Dir:
    starts: list[int] = field(default_factory=list)     # sorted frame ranges [start, end)
    ends: list[int] = field(default_factory=list)
    base: int | None = None                             # sequence number of stream offset 0

    def add(self, start: int, end: int) -> None:
        i = bisect.bisect_left(self.starts, start)
        if i < len(self.starts) and self.starts[i] == start:
            self.ends[i] = max(self.ends[i], end)
            return
        self.starts.insert(i, start)
        self.ends.insert(i, end)

    def holds(self, off: int, n: int) -> bool:
        """Whether bytes [off, off + n) of the stream meet a selected frame."""
        i = bisect.bisect_left(self.starts, off + n) - 1
        return i >= 0 and self.ends[i] > off


@dataclass
class _Conn:
    conn: Conn
    dirs: tuple[_Dir, _Dir] = field(default_factory=lambda: (_Dir(), _Dir()))
    syn_dir: int | None = None          # the direction that sent the SYN (the client)
    synack: bool = False
    acked: bool = False
    done: bool = False                  # a new SYN on its 4-tuple: a later connection's packets
    tls: bool = False                   # decrypted TLS: frames' offsets count in the plaintext
    hi: int = 0                         # (TLS) the last packet of its selected frames


class CutCapture:
    """The packets of the selected exchanges, written to ``path`` (opened at once: a path
    that cannot be written is a ``UserError`` before the capture is read)."""

    def __init__(self, path: str, source: str) -> None:
        import os

        self.path = path
        if os.path.exists(path) and os.path.samefile(path, source):
            raise UserError(f"-w: {path} is the capture being read (write the cut to another file)")
        try:
            self.out: BinaryIO = open(path, "wb")  # noqa: SIM115 (closed by write)
        except OSError as e:
            raise UserError(f"-w: cannot write {path}: {e.strerror or e}") from None
        self.conns: dict[int, _Conn] = {}
        self.exchanges = 0

    def add(self, ex: Exchange, tls: bool = False) -> None:
        """Keep where the frames of ``ex`` lie (``tls``: its connection is decrypted TLS)."""
        self.exchanges += 1
        for fr in (ex.request, ex.response):
            if fr is None:
                continue
            c = self.conns.get(fr.conn.id)
            if c is None:
                c = self.conns[fr.conn.id] = _Conn(fr.conn, tls=tls)
            c.dirs[fr.direction].add(fr.stream_offset, fr.stream_offset + 4 + fr.size)
            c.hi = max(c.hi, fr.last_index)

    def close(self) -> None:
        self.out.close()

    def write(self, capture: str, linktypes: list[int], fine_times: bool) -> tuple[int, int]:
        """Copy the packets of ``capture`` that carry the selected frames, and the handshakes
        of their connections: (packets written, packets in the capture). ``linktypes`` and
        ``fine_times`` (times finer than microseconds): the capture's, as the first pass read
        them (a pcapng's interfaces are known once read)."""
        from analyzer._core import open_capture, parse_packet

        by_pair: dict[tuple[tuple[str, int], tuple[str, int]], list[tuple[_Conn, int]]] = {}
        for c in self.conns.values():
            a, b = (c.conn.a.ip, c.conn.a.port), (c.conn.b.ip, c.conn.b.port)
            by_pair.setdefault((a, b), []).append((c, 0))
            by_pair.setdefault((b, a), []).append((c, 1))
        written = total = 0
        try:
            with open_capture(capture) as cap:
                kinds = list(dict.fromkeys(linktypes)) or [1]
                snaplen = cap.snaplen or SNAPLEN
                pcapng = len(kinds) > 1
                nanos = fine_times
                self.out.write(_pcapng_head(kinds, snaplen, nanos) if pcapng
                               else _pcap_head(kinds[0], snaplen, nanos))
                for p in map(Packet._make, cap):
                    total += 1
                    if not by_pair:
                        continue
                    seg = parse_packet(p.linktype, p.data, p.orig_len)
                    if isinstance(seg, str):
                        continue
                    sip, sport, dip, dport, seq, ack, flags, payload, missing = seg
                    for c, d in by_pair.get(((sip, sport), (dip, dport)), ()):
                        if not c.done and p.ts >= c.conn.first_ts and _keep(c, d, p.index, seq, ack, flags,
                                                                            len(payload) + missing):
                            self.out.write(_pcapng_packet(p.ts, kinds.index(p.linktype), p.data, p.orig_len,
                                                          nanos)
                                           if pcapng else _pcap_packet(p.ts, p.data, p.orig_len, nanos))
                            written += 1
                            break
        finally:
            self.out.close()
        return written, total


def _keep(c: _Conn, d: int, index: int, seq: int, ack: int, flags: int, n: int) -> bool:
    """Whether packet ``index`` of direction ``d`` of a selected connection goes in the cut (and
    the direction's stream base, as the core's reassembly sets it)."""
    me, other = c.dirs[d], c.dirs[1 - d]
    syn = 1 if flags & SYN else 0
    keep = False
    if syn and not flags & ACK and me.base is not None and (seq + 1) & 0xFFFFFFFF != me.base:
        c.done = True                   # the 4-tuple used again: another connection
        return False
    if syn:
        if me.base is None:
            me.base = (seq + 1) & 0xFFFFFFFF
        if flags & ACK:
            c.synack = True
            if other.base is None:
                other.base = ack
        elif c.syn_dir is None:
            c.syn_dir = d
        keep = True
    elif me.base is None:
        me.base = seq
    if not syn and flags & ACK and c.synack and not c.acked and d == c.syn_dir:
        c.acked = keep = True           # the ACK that completes the handshake
    if flags & (FIN | RST):
        keep = True
    if n > 0 and c.tls:
        keep = keep or index <= c.hi
    elif n > 0 and me.base is not None:
        off = (seq + syn - me.base) & 0xFFFFFFFF
        keep = keep or me.holds(off, n)
    return keep


def _ts(ts: float, nanos: bool) -> tuple[int, int]:
    """(seconds, fraction in micro- or nanoseconds) of a packet time, as the core reads it back."""
    unit = 1_000_000_000 if nanos else 1_000_000
    sec = int(ts)
    frac = round((ts - sec) * unit)
    if frac >= unit:
        sec, frac = sec + 1, frac - unit
    return sec, frac


def _pcap_head(linktype: int, snaplen: int, nanos: bool) -> bytes:
    return struct.pack("<IHHiIII", 0xA1B23C4D if nanos else 0xA1B2C3D4, 2, 4, 0, 0, snaplen, linktype)


def _pcap_packet(ts: float, data: bytes, orig_len: int, nanos: bool) -> bytes:
    sec, frac = _ts(ts, nanos)
    return struct.pack("<IIII", sec, frac, len(data), orig_len) + data


def _pcapng_head(linktypes: list[int], snaplen: int, nanos: bool) -> bytes:
    shb = struct.pack("<IIIHHqI", 0x0A0D0D0A, 28, 0x1A2B3C4D, 1, 0, -1, 28)
    # an interface per link type; with nanoseconds, if_tsresol 9 and the end of options
    opts = struct.pack("<HHB3xHH", 9, 1, 9, 0, 0) if nanos else b""
    size = 20 + len(opts)
    return shb + b"".join(struct.pack("<IIHHI", 1, size, lt, 0, snaplen) + opts + struct.pack("<I", size)
                          for lt in linktypes)


def _pcapng_packet(ts: float, interface: int, data: bytes, orig_len: int, nanos: bool) -> bytes:
    sec, frac = _ts(ts, nanos)
    ticks = sec * (1_000_000_000 if nanos else 1_000_000) + frac
    pad = b"\0" * (-len(data) % 4)
    size = 32 + len(data) + len(pad)
    return (struct.pack("<IIIIIII", 6, size, interface, ticks >> 32, ticks & 0xFFFFFFFF, len(data), orig_len)
            + data + pad + struct.pack("<I", size))
