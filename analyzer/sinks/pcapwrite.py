"""``read -w OUT``: the capture cut to the selected exchanges.

The first pass (``read`` itself) hands each selected exchange to ``CutCapture.add``, which
keeps where its frames lie: connection, direction and stream offsets (``Frame.stream_offset``
is that of the size prefix, the frame ``4 + size`` bytes long). The second pass
(``CutCapture.write``) is the core's (``Stream.cut``, core/src/cut.rs): a stream made as the
first pass's was reads the capture again, its reassembly placing every packet in its
connection and stream, and names the packets that carry bytes of a selected frame
(retransmissions too), each selected connection's handshake (SYN, SYN-ACK, the client's ACK
that completes it) and every FIN or RST; of a connection decrypted with ``--tls-keylog``
(frames' offsets count in the plaintext, and a TLS record cannot be decrypted without the
handshake and the records before it), every packet with payload up to the last packet of its
selected frames: the cut, read with the key log, shows that connection's earlier exchanges
too. Those packets are then copied, unchanged. Memory holds the frames' offsets and the
numbers of the packets kept, not packets.

The file: a classic pcap when the capture has one link type (microsecond timestamps, as
tcpdump writes them, or nanosecond ones when the capture's are finer), else a pcapng with one
interface per link type; bytes and lengths on the wire unchanged. Packet numbers are those of
the new file.
"""
from __future__ import annotations

import struct
from typing import TYPE_CHECKING, BinaryIO

from analyzer.errors import UserError
from analyzer.model import Exchange, Packet

if TYPE_CHECKING:
    from analyzer._core import Stream

SNAPLEN = 262144


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
        # (connection, direction, start, end) of each selected frame; connection -> the last
        # packet of its selected frames, for decrypted TLS connections
        self.frames: list[tuple[int, int, int, int]] = []
        self.tls: dict[int, int] = {}
        self.exchanges = 0

    def add(self, ex: Exchange, tls: bool = False) -> None:
        """Keep where the frames of ``ex`` lie (``tls``: its connection is decrypted TLS)."""
        self.exchanges += 1
        for fr in (ex.request, ex.response):
            if fr is None:
                continue
            self.frames.append((fr.conn.id, fr.direction, fr.stream_offset, fr.stream_offset + 4 + fr.size))
            if tls:
                self.tls[fr.conn.id] = max(self.tls.get(fr.conn.id, 0), fr.last_index)

    def close(self) -> None:
        self.out.close()

    def write(self, capture: str, linktypes: list[int], fine_times: bool, stream: Stream) -> tuple[int, int]:
        """Copy the packets of ``capture`` that carry the selected frames, and the handshakes
        and ends of their connections: (packets written, packets in the capture). ``stream``:
        a new stream made as the first pass's was (``Pipeline.new_stream``); ``linktypes``
        and ``fine_times`` (times finer than microseconds): the capture's, as the first pass
        read them (a pcapng's interfaces are known once read)."""
        from analyzer._core import open_capture

        written = total = 0
        try:
            with open_capture(capture) as cap:
                keep = set(stream.cut(cap, self.frames, list(self.tls.items())))
                total = cap.packets
            kinds = list(dict.fromkeys(linktypes)) or [1]
            with open_capture(capture) as cap:
                snaplen = cap.snaplen or SNAPLEN
                pcapng = len(kinds) > 1
                nanos = fine_times
                self.out.write(_pcapng_head(kinds, snaplen, nanos) if pcapng
                               else _pcap_head(kinds[0], snaplen, nanos))
                last = max(keep, default=0)
                for p in map(Packet._make, cap):
                    if p.index > last:
                        break
                    if p.index in keep:
                        self.out.write(_pcapng_packet(p.ts, kinds.index(p.linktype), p.data, p.orig_len, nanos)
                                       if pcapng else _pcap_packet(p.ts, p.data, p.orig_len, nanos))
                        written += 1
        finally:
            self.out.close()
        return written, total


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
