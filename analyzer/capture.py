"""Capture files -> Packet records: pcap, pcapng, and either of them gzip-compressed.

``open_capture(path)`` sniffs the file's magic and returns a ``CaptureReader``; iterate
it for ``Packet`` records (1-based index, epoch-seconds timestamp, the link type of the
packet's interface, the captured bytes, the length on the wire)::

    with open_capture("x.pcapng") as reader:
        for pkt in reader:
            ...
        if reader.truncated:
            print("warning:", reader.truncated)

The reader is a plain ``struct`` loop over large buffered reads: no per-packet objects
beyond one tuple. ``records()`` gives the same records as plain tuples, laid out as
``Packet`` (what ``Pipeline.feed_all`` reads: a plain tuple costs a fraction of a
NamedTuple instance); iterating the reader makes ``Packet`` records of them.

Errors. A file that cannot be read as a capture at all (not pcap/pcapng, bad file header,
first pcapng block malformed, only unsupported link types) raises ``CaptureError`` with
a one-line message naming the file. Damage further into the file (a record cut short at
the end, a pcapng block with a bad length, corrupt gzip data) does not raise: the reader
yields every packet before the damage, stops, and sets ``reader.truncated`` to a one-line
description ("capture ends inside packet 1234", "bad pcapng block length at offset N
(after packet K)"). Pass ``strict=True`` to get a ``CaptureError`` instead.

Oddities that are kept and counted in ``reader.counters``:
``"caplen > orig_len"`` (the packet is kept as captured), ``"timestamp went backwards"``
(packets stay in file order), ``"unknown pcapng block"``, ``"packet on unknown interface"``.
"""
from __future__ import annotations

import functools
import gzip
import os
import struct
import zlib
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import IO, BinaryIO, cast

from analyzer.model import Packet, PacketRecord

__all__ = ["CaptureError", "CaptureReader", "open_capture", "SUPPORTED_LINKTYPES"]

# Link types the net stage understands (kept here so the reader can refuse a file that
# holds nothing else; analyzer.net uses the same set).
SUPPORTED_LINKTYPES = frozenset({0, 1, 12, 14, 101, 108, 113, 228, 229, 276})

_CHUNK = 1 << 20                 # bulk read size
_MAX_RECORD = 1 << 28            # a captured length above this is corruption, not a packet
_MAX_BLOCK = 1 << 28

_PCAP_US = 0xA1B2C3D4
_PCAP_NS = 0xA1B23C4D
_SHB = 0x0A0D0D0A
_BOM = 0x1A2B3C4D
_IDB, _PB, _SPB, _EPB = 0x00000001, 0x00000002, 0x00000003, 0x00000006
_KNOWN_SKIPPED = frozenset({
    0x00000004,  # Name Resolution Block
    0x00000005,  # Interface Statistics Block
    0x0000000A,  # Decryption Secrets Block
    0x00000BAD, 0x40000BAD,  # custom blocks
    0x00000007,  # IRIG timestamp (obsolete)
    0x00000008,  # ARINC 429 (obsolete)
    0x00000009,  # systemd journal export
})


class CaptureError(Exception):
    """The capture cannot be read. The message is one line naming the file."""


class _Buf:
    """A byte buffer refilled from a file in large reads; ``need(n)`` guarantees n bytes ahead."""

    __slots__ = ("read", "buf", "pos", "base", "eof", "error")

    def __init__(self, f: IO[bytes], initial: bytes = b"") -> None:
        # gzip: read1 returns what one step of decompression gives, so a cut or corrupt
        # stream loses nothing that was decompressed before the damage
        self.read = getattr(f, "read1", f.read) if isinstance(f, gzip.GzipFile) else f.read
        self.buf = initial
        self.pos = 0
        self.base = 0        # file offset of buf[0]
        self.eof = False
        self.error: str | None = None

    def need(self, n: int) -> bool:
        """Make at least ``n`` bytes available from ``pos``; False at end of file."""
        have = len(self.buf) - self.pos
        if have >= n:
            return True
        if self.eof:
            return False
        parts = [self.buf[self.pos:]]
        self.base += self.pos
        self.pos = 0
        want = max(n - have, _CHUNK)
        while have < n:
            try:
                more = self.read(want)
            except (OSError, EOFError, zlib.error) as e:
                self.error = str(e)
                more = b""
            if not more:
                self.eof = True
                break
            parts.append(more)
            have += len(more)
            want = max(n - have, _CHUNK)
        self.buf = b"".join(parts)
        return have >= n

    @property
    def offset(self) -> int:
        return self.base + self.pos


# a record tuple -> a Packet (in C: map() over the records calls no Python code)
_as_packet = functools.partial(tuple.__new__, Packet)


# a share's record loop, per byte order of the file: one unpack of a pcap record header and,
# as if an Ethernet IPv4 TCP packet followed, the bytes that tell one (the EtherType's two,
# version/IHL, the flags/fragment offset's two, protocol: small numbers, cheap to compare)
# and its address and port bytes (share_of_key's key). An IPv4 packet without options, not
# a fragment, carrying TCP has EtherType 08 00, version/IHL 0x45, fragment offset and MF
# bits 0 (the first byte's low six bits, the second byte), protocol 6
_REC_V4 = {e: struct.Struct(e + "IIII12xBBBx4xBBxB2x12s").unpack_from for e in "<>"}
# the addresses and TCP ports of IPv4 (12 bytes) and IPv6 (36 bytes, each address in two halves)
_V4_ADDRS = struct.Struct(">IIHH").unpack
_V6_ADDRS = struct.Struct(">QQQQHH").unpack


def share_of_conn(a: int, b: int, pa: int, pb: int, n: int) -> int:
    """The share (0..n-1) of a TCP connection between addresses ``a`` and ``b`` (IPv4 or
    IPv6, as integers) and ports ``pa`` and ``pb``: the same in both directions and for
    every connection on the same addresses and ports. The record loop of a shared pcap
    reader asks ``share_of_key`` of Ethernet IPv4/IPv6 TCP packets, once per connection."""
    return ((a ^ b) * 0x9E3779B1 + (pa ^ pb) * 0x85EBCA77 >> 7) % n


def share_of_key(key: bytes, n: int) -> int:
    """``share_of_conn`` of a packet's address and port bytes as they stand in it: source
    and destination address, then ports (12 bytes for IPv4, 36 for IPv6)."""
    if len(key) == 12:
        return share_of_conn(*_V4_ADDRS(key), n)
    s1, s2, d1, d2, sp, dp = _V6_ADDRS(key)
    return share_of_conn(s1 << 64 | s2, d1 << 64 | d2, sp, dp, n)


class CaptureReader:
    """Iterable of ``Packet`` over one capture file. See the module docstring."""

    def __init__(self, path: str, strict: bool = False) -> None:
        self.path = path
        self.strict = strict
        self.truncated: str | None = None
        self.counters: dict[str, int] = {}
        self.format = ""                       # "pcap" | "pcapng"
        self.compressed = False
        self.linktypes: list[int] = []         # pcap: [linktype]; pcapng: per interface seen
        self.packets = 0                       # packets read so far (yielded or left to another share)
        self._iterated = False
        self.finished = False                  # the records are all read (or the reading stopped)
        self._share: tuple[int, int, Callable[[PacketRecord, int], int]] | None = None
        try:
            self.size = os.path.getsize(path)
            self._raw: BinaryIO = open(path, "rb")  # noqa: SIM115 (closed by close())
        except OSError as e:
            raise CaptureError(f"{path}: cannot open: {e.strerror or e}") from None
        try:
            head = self._raw.read(4)
            self._f: IO[bytes] = self._raw
            if head[:2] == b"\x1f\x8b":
                self.compressed = True
                self._raw.seek(0)
                self._f = gzip.GzipFile(fileobj=self._raw, mode="rb")
                try:
                    head = self._f.read(4)
                except (OSError, EOFError, zlib.error) as e:
                    raise CaptureError(f"{path}: bad gzip data: {e}") from None
            if len(head) < 4:
                raise CaptureError(f"{path}: not a pcap or pcapng file (only {len(head)} bytes)")
            self._buf = _Buf(self._f, head)
            self._start(head)
        except BaseException:
            self.close()
            raise

    # -- public helpers ---------------------------------------------------------------

    def bytes_read(self) -> int:
        """Bytes of the file (compressed bytes for gzip) consumed so far, for a progress bar."""
        try:
            return self._raw.tell()
        except (OSError, ValueError):
            return self.size

    def close(self) -> None:
        f = getattr(self, "_f", None)
        if f is not None and f is not self._raw:
            try:
                f.close()
            except OSError:
                pass
        raw = getattr(self, "_raw", None)
        if raw is not None:
            raw.close()

    def __enter__(self) -> CaptureReader:
        return self

    def __exit__(self, t: type[BaseException] | None, v: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def keep_share(self, k: int, n: int, share_of: Callable[[PacketRecord, int], int]) -> None:
        """Yield only the packets ``p`` with ``share_of(p, n) == k`` (analyzer.shards).

        A pcap file tells the share of an Ethernet IPv4/IPv6 TCP packet (the common case)
        in the record loop, before any Packet is built: ``share_of_conn`` of its addresses
        and ports, which is what ``share_of`` must give for such a packet; other packets
        are built and given to ``share_of``. The packets of other shares still count in
        ``packets`` (the number of the record last read); the reader's notes (timestamps
        going back, caplen > orig_len) are those of the share's own Ethernet IPv4/IPv6 TCP
        packets and of every other packet, noted before ``share_of`` is asked (pcap files:
        a pcapng reader notes every packet's)."""
        self._share = (k, n, share_of)

    def __iter__(self) -> Iterator[Packet]:
        records = self.records()
        # (a pcapng reader's records are Packets already)
        return map(_as_packet, records) if self.format == "pcap" else cast(Iterator[Packet], records)

    def records(self) -> Iterator[PacketRecord]:
        """The packets as tuples laid out as ``Packet`` (index, ts, linktype, data, orig_len):
        plain tuples for pcap, read by position. Iterate the reader for ``Packet`` records."""
        if self._iterated:
            raise CaptureError(f"{self.path}: a capture can be iterated once")
        self._iterated = True
        # read errors (gzip cut short or corrupt, I/O) end the data in _Buf.need and are
        # reported through ``truncated``
        if self.format == "pcap":
            return self._iter_pcap()
        if self._share is None:
            return self._iter_pcapng()
        k, n, share_of = self._share
        return (p for p in self._iter_pcapng() if share_of(p, n) == k)

    # -- internals ----------------------------------------------------------------------

    def _count(self, what: str) -> None:
        self.counters[what] = self.counters.get(what, 0) + 1

    def _damaged(self, msg: str) -> None:
        if self._buf.error:
            msg += f" ({self._buf.error})"
        if self.strict:
            raise CaptureError(f"{self.path}: {msg}")
        self.truncated = msg

    def _start(self, head: bytes) -> None:
        magic_le = struct.unpack("<I", head)[0]
        magic_be = struct.unpack(">I", head)[0]
        if magic_le in (_PCAP_US, _PCAP_NS) or magic_be in (_PCAP_US, _PCAP_NS):
            self.format = "pcap"
            self._e = "<" if magic_le in (_PCAP_US, _PCAP_NS) else ">"
            magic = magic_le if self._e == "<" else magic_be
            self._nanos = magic == _PCAP_NS
            if not self._buf.need(24):
                raise CaptureError(f"{self.path}: pcap file header cut short")
            (_m, vmaj, _vmin, _zone, _sig, self.snaplen, network) = struct.unpack_from(
                self._e + "IHHiIII", self._buf.buf, 0)
            self._buf.pos = 24
            if vmaj not in (2, 1):
                raise CaptureError(f"{self.path}: unsupported pcap version {vmaj}")
            self._linktype = network & 0x03FFFFFF      # upper bits: FCS information
            self.linktypes = [self._linktype]
        elif magic_le == _SHB:
            self.format = "pcapng"
            self.snaplen = 0
        else:
            raise CaptureError(f"{self.path}: not a pcap or pcapng file")

    def _unsupported(self, linktype: int, index: int) -> CaptureError:
        return CaptureError(f"{self.path}: unsupported link type {linktype} (packet {index})")

    def _iter_pcap(self) -> Iterator[PacketRecord]:
        try:
            # plain tuples laid out as Packet (see records())
            b = self._buf
            hdr = struct.Struct(self._e + "IIII")
            unpack = hdr.unpack_from
            div = 1e9 if self._nanos else 1e6
            linktype = self._linktype
            if linktype not in SUPPORTED_LINKTYPES:
                if b.need(16):
                    raise self._unsupported(linktype, 1)
                return
            index = 0
            last_ts = 0.0
            # a share (keep_share): the packets of other shares are dropped here, most of them
            # (Ethernet, IPv4 without options, TCP) from the record bytes alone
            shared = self._share is not None
            share_k, share_n, share_of = self._share if self._share is not None else (0, 1, None)
            eth = linktype == 1
            # a share's record loop reads an Ethernet IPv4 TCP record's header, the bytes that
            # tell it is one and its address and port bytes in one unpack
            rec_v4 = _REC_V4[self._e]
            # the addresses and ports (share_of_key's key, as in the packet) -> whether the
            # connection is this share's: a dict hit per packet instead of unpacking and hashing them
            mine: dict[bytes, bool] = {}
            while True:
                # the records wholly inside the buffer, with local variables only (the hot loop)
                buf = b.buf
                pos = b.pos
                n = len(buf)
                while pos + 16 <= n:
                    if not shared:
                        sec, frac, incl, orig = unpack(buf, pos)
                    elif eth and pos + 70 <= n:
                        sec, frac, incl, orig, t0, t1, vihl, f0, f1, proto, key = rec_v4(buf, pos)
                        if incl < 54 or vihl != 0x45 or proto != 6 or t0 != 8 or t1 or f1 or f0 & 0x3F:
                            key = None
                    else:
                        sec, frac, incl, orig = unpack(buf, pos)
                        key = None
                    end = pos + 16 + incl
                    if end > n:
                        break
                    index += 1
                    if shared:
                        # ``packets`` is set only before a yield: no one reads it while other
                        # shares' packets are dropped (a worker drops most of the file). The
                        # reader's notes below are of the packets kept here and of those left
                        # to share_of (see keep_share)
                        q = pos + 16
                        if key is None and eth and incl >= 74 and buf[q + 12:q + 14] == b"\x86\xdd" \
                                and buf[q + 14] >> 4 == 6 and buf[q + 20] == 6:
                            key = buf[q + 22:q + 58]     # IPv6, TCP next: addresses and ports
                        if key is not None:
                            keep = mine.get(key)
                            if keep is None:
                                if len(mine) >= 65536:
                                    mine.clear()        # a cache: memory stays flat
                                keep = mine[key] = share_of_key(key, share_n) == share_k
                            if not keep:
                                pos = end
                                continue
                    ts = sec + frac / div
                    if ts < last_ts:
                        self._count("timestamp went backwards")
                    last_ts = ts
                    if incl > orig:
                        self._count("caplen > orig_len")
                    pkt = (index, ts, linktype, buf[pos + 16:end], orig)
                    pos = end
                    # a share's other packets: share_of tells (the reader's rules for them)
                    if shared and key is None and share_of(pkt, share_n) != share_k:   # type: ignore[misc]
                        continue
                    self.packets = index
                    yield pkt
                b.pos = pos
                self.packets = index
                # a record header or body runs past the buffer: read more (the loop above then
                # takes the record), or the file ends
                if not b.need(16):
                    if len(b.buf) - b.pos:
                        self._damaged(f"capture ends inside the header of packet {index + 1}")
                    return
                incl = unpack(b.buf, b.pos)[2]
                if incl > _MAX_RECORD:
                    self._damaged(f"bad record length {incl} at offset {b.offset} (packet {index + 1})")
                    return
                if not b.need(16 + incl):
                    self._damaged(f"capture ends inside packet {index + 1}")
                    return
        finally:
            self.finished = True     # (analyzer.shards: the capture's end for the topic-id clock)

    def _iter_pcapng(self) -> Iterator[Packet]:
        try:
            b = self._buf
            e = "<"
            ifaces: list[tuple[int, float, float]] = []   # (linktype, units per second, offset s)
            index = 0
            last_ts = 0.0
            any_supported = False
            first_block = True
            u32 = struct.Struct("<I")
            while True:
                if not b.need(12):
                    if len(b.buf) - b.pos:
                        self._damaged(f"capture ends inside a block header at offset {b.offset}"
                                      f" (after packet {index})")
                    return
                buf, pos = b.buf, b.pos
                btype = u32.unpack_from(buf, pos)[0]
                if btype == _SHB:
                    bom = buf[pos + 8:pos + 12]
                    if bom == b"\x4d\x3c\x2b\x1a":
                        e = "<"
                    elif bom == b"\x1a\x2b\x3c\x4d":
                        e = ">"
                    else:
                        msg = f"bad pcapng byte-order magic at offset {b.offset}"
                        if first_block:
                            raise CaptureError(f"{self.path}: {msg}")
                        self._damaged(msg + f" (after packet {index})")
                        return
                    u32 = struct.Struct(e + "I")
                    ifaces = []
                blen = u32.unpack_from(buf, pos + 4)[0]
                if blen < 12 or blen % 4 or blen > _MAX_BLOCK:
                    msg = f"bad pcapng block length {blen} at offset {b.offset}"
                    if first_block:
                        raise CaptureError(f"{self.path}: {msg}")
                    self._damaged(msg + f" (after packet {index})")
                    return
                if not b.need(blen):
                    if first_block:
                        raise CaptureError(f"{self.path}: pcapng file header cut short")
                    self._damaged(f"capture ends inside a block at offset {b.offset} (after packet {index})"
                                  if btype not in (_EPB, _SPB, _PB) else f"capture ends inside packet {index + 1}")
                    return
                buf, pos = b.buf, b.pos
                if u32.unpack_from(buf, pos + blen - 4)[0] != blen:
                    msg = f"bad pcapng block length at offset {b.offset} (trailing length differs)"
                    if first_block:
                        raise CaptureError(f"{self.path}: {msg}")
                    self._damaged(msg + f" (after packet {index})")
                    return
                b.pos = pos + blen
                first_block = False
                if btype == _EPB:
                    if blen < 32:
                        self._count("malformed pcapng block")
                        continue
                    if_id, hi, lo, incl, orig = struct.unpack_from(e + "IIIII", buf, pos + 8)
                    if incl > blen - 32:
                        self._count("malformed pcapng block")
                        incl = blen - 32
                    data = buf[pos + 28:pos + 28 + incl]
                elif btype == _SPB:
                    orig = u32.unpack_from(buf, pos + 8)[0]
                    incl = min(orig, blen - 16)
                    if_id = 0
                    hi = lo = -1
                    data = buf[pos + 12:pos + 12 + incl]
                elif btype == _PB:
                    if blen < 32:
                        self._count("malformed pcapng block")
                        continue
                    if_id, _drops, hi, lo, incl, orig = struct.unpack_from(e + "HHIIII", buf, pos + 8)
                    if incl > blen - 32:
                        self._count("malformed pcapng block")
                        incl = blen - 32
                    data = buf[pos + 28:pos + 28 + incl]
                elif btype == _IDB:
                    ifaces.append(self._parse_idb(buf, pos, blen, e))
                    self.linktypes.append(ifaces[-1][0])
                    if ifaces[-1][0] in SUPPORTED_LINKTYPES:
                        any_supported = True
                    continue
                else:
                    if btype != _SHB and btype not in _KNOWN_SKIPPED:
                        self._count("unknown pcapng block")
                    continue
                index += 1
                if if_id >= len(ifaces):
                    self._count("packet on unknown interface")
                    linktype, units, toff = -1, 1e6, 0.0
                else:
                    linktype, units, toff = ifaces[if_id]
                if hi < 0:          # simple packet block: no timestamp; keep the previous one
                    ts = last_ts
                else:
                    ts = ((hi << 32) | lo) / units + toff
                if ts < last_ts:
                    self._count("timestamp went backwards")
                last_ts = ts
                if incl > orig:
                    self._count("caplen > orig_len")
                if linktype not in SUPPORTED_LINKTYPES and not any_supported and linktype >= 0:
                    raise self._unsupported(linktype, index)
                self.packets = index
                yield Packet(index, ts, linktype, data, orig)
        finally:
            self.finished = True     # (analyzer.shards: the capture's end for the topic-id clock)

    def _parse_idb(self, buf: bytes, pos: int, blen: int, e: str) -> tuple[int, float, float]:
        if blen < 20:
            self._count("malformed pcapng block")
            return (-1, 1e6, 0.0)
        linktype = struct.unpack_from(e + "H", buf, pos + 8)[0]
        units = 1e6
        toff = 0.0
        p, end = pos + 16, pos + blen - 4
        while p + 4 <= end:
            code, olen = struct.unpack_from(e + "HH", buf, p)
            if code == 0:
                break
            val = buf[p + 4:p + 4 + olen]
            if code == 9 and olen >= 1:        # if_tsresol
                r = val[0]
                units = float(2 ** (r & 0x7F)) if r & 0x80 else float(10 ** r)
            elif code == 14 and olen >= 8:     # if_tsoffset, seconds
                toff = float(struct.unpack(e + "q", val[:8])[0])
            p += 4 + ((olen + 3) & ~3)
        return (linktype, units, toff)


def open_capture(path: str, strict: bool = False) -> CaptureReader:
    """Open a pcap or pcapng file (optionally gzip-compressed) for reading.

    Raises ``CaptureError`` when the file is missing, unreadable or not a capture.
    """
    return CaptureReader(path, strict=strict)
