"""Packet -> TCP Segment: link layer, IPv4/IPv6, TCP, parsed with ``struct``.

``parse_packet(pkt, skips)`` returns a ``Segment`` or ``None``; every ``None`` is counted
in ``skips`` (a ``SkipCounter``, a dict of reason -> packets) with one of the reasons

    "not IP", "not TCP", "IP fragment", "truncated header", "bad IP header",
    "bad TCP header", "unsupported link type N"

(``skips`` may be None: nothing is counted.) IPv4 without options in Ethernet, SLL or SLL2
takes a fast path (one ``struct`` unpack for the IP and TCP headers, cached Endpoints);
everything else goes through the general path.

Link types: Ethernet (1) with any stack of 802.1Q / 802.1ad / QinQ tags (0x8100, 0x88a8,
0x9100), Linux cooked SLL (113) and SLL2 (276), BSD NULL (0) and LOOP (108) with the
address family in either byte order, raw IP (101, 12, 14), IPv4 (228), IPv6 (229).

``Segment.missing`` is the number of TCP payload bytes that were on the wire but not in
the capture (snaplen): computed from the IP total/payload length, bounded by the
packet's original length. Bytes after the IP datagram (Ethernet padding, trailers) are
never payload.
"""
from __future__ import annotations

import socket
import struct

from analyzer.capture import SUPPORTED_LINKTYPES
from analyzer.model import Endpoint, PacketRecord, Segment

__all__ = ["SkipCounter", "parse_packet", "SUPPORTED_LINKTYPES"]



class SkipCounter(dict[str, int]):
    """Packets that produced no TCP segment, by reason."""

    def add(self, reason: str, n: int = 1) -> None:
        self[reason] = self.get(reason, 0) + n

    @property
    def total(self) -> int:
        return sum(self.values())


_ETH_VLAN = frozenset({0x8100, 0x88A8, 0x9100})
_ETH_IP4, _ETH_IP6 = 0x0800, 0x86DD
# BSD loopback address families for IPv6 differ between systems.
_AF_INET6 = frozenset({10, 23, 24, 28, 30})
_IP6_EXT = frozenset({0, 43, 60, 135, 139, 140})   # skipped: length in 8-octet units
_IP6_NONE = 59

_u32le = struct.Struct("<I").unpack_from
_u32be = struct.Struct(">I").unpack_from
_ip4 = struct.Struct(">BxHxxHxB").unpack_from          # vihl, total, frag, proto

_addr_cache: dict[bytes, str] = {}


def _ip_str(raw: bytes) -> str:
    s = _addr_cache.get(raw)
    if s is None:
        if len(_addr_cache) > 65536:
            _addr_cache.clear()
        s = socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, raw)
        _addr_cache[raw] = s
    return s


def _ethertype(data: bytes, off: int, n: int, skips: SkipCounter) -> tuple[int, int] | None:
    """The EtherType at ``off`` past any 802.1Q/802.1ad/QinQ tags: (type, offset after it), or None (counted)."""
    etype = data[off] << 8 | data[off + 1]
    while etype in _ETH_VLAN:
        off += 4
        if n < off + 2:
            skips.add("truncated header")
            return None
        etype = data[off] << 8 | data[off + 1]
    return etype, off + 2


def _link(lt: int, data: bytes, skips: SkipCounter) -> tuple[int, int] | None:
    """(offset of the IP header, IP version 4/6) or None (counted)."""
    n = len(data)
    if lt == 1:
        if n < 14:
            skips.add("truncated header")
            return None
        r = _ethertype(data, 12, n, skips)
        if r is None:
            return None
        etype, off = r
    elif lt == 113:
        if n < 16:
            skips.add("truncated header")
            return None
        r = _ethertype(data, 14, n, skips)
        if r is None:
            return None
        etype, off = r
    elif lt == 276:
        if n < 20:
            skips.add("truncated header")
            return None
        etype = data[0] << 8 | data[1]
        off = 20
        while etype in _ETH_VLAN:        # not stripped: tag follows the header
            if n < off + 4:
                skips.add("truncated header")
                return None
            etype = data[off + 2] << 8 | data[off + 3]
            off += 4
    elif lt == 0 or lt == 108:
        if n < 4:
            skips.add("truncated header")
            return None
        le, be = _u32le(data, 0)[0], _u32be(data, 0)[0]
        if le == 2 or be == 2:
            return (4, 4)
        if le in _AF_INET6 or be in _AF_INET6:
            return (4, 6)
        skips.add("not IP")
        return None
    elif lt == 101 or lt == 12 or lt == 14:
        if n < 1:
            skips.add("truncated header")
            return None
        v = data[0] >> 4
        if v == 4 or v == 6:
            return (0, v)
        skips.add("not IP")
        return None
    elif lt == 228:
        return (0, 4)
    elif lt == 229:
        return (0, 6)
    else:
        skips.add(f"unsupported link type {lt}")
        return None
    if etype == _ETH_IP4:
        return (off, 4)
    if etype == _ETH_IP6:
        return (off, 6)
    skips.add("not IP")
    return None


_tcp_rest = struct.Struct(">IIBB").unpack_from         # seq, ack, off, flags (after the ports)
_new = tuple.__new__
# the endpoint caches hold the connections seen lately; past this many entries they start
# again (memory stays flat on captures of millions of connections)
EP_CACHE_MAX = 16_384
# (src addr, dst addr, ports) bytes -> (src Endpoint, dst Endpoint): one lookup per packet
_ep_cache: dict[bytes, tuple[Endpoint, Endpoint]] = {}


def _endpoints(key: bytes, alen: int) -> tuple[Endpoint, Endpoint]:
    eps = _ep_cache.get(key)
    if eps is None:
        if len(_ep_cache) > EP_CACHE_MAX:
            _ep_cache.clear()
        a = 2 * alen
        eps = (_new(Endpoint, (_ip_str(key[:alen]), key[a] << 8 | key[a + 1])),
               _new(Endpoint, (_ip_str(key[alen:a]), key[a + 2] << 8 | key[a + 3])))
        _ep_cache[key] = eps
    return eps


# IPv4 header without options followed by the TCP header up to the flags, in one unpack:
# vihl, total, frag, proto, src, dst, sport, dport, seq, ack, data offset, flags
_v4tcp = struct.Struct(">BxHxxHxBxxIIHHIIBB").unpack_from
_ep4_cache: dict[tuple[int, int, int, int], tuple[Endpoint, Endpoint]] = {}


_ip4_cache: dict[int, str] = {}     # IPv4 address as a number -> its text (cleared with _ep4_cache)


def _endpoints4(key: tuple[int, int, int, int]) -> tuple[Endpoint, Endpoint]:
    # one call per connection (its ephemeral port): the addresses, few, are looked up by number
    ips = _ip4_cache
    if len(_ep4_cache) > EP_CACHE_MAX:
        _ep4_cache.clear()
        ips.clear()
    s, d, sp, dp = key
    sip = ips.get(s)
    if sip is None:
        sip = ips[s] = _ip_str(s.to_bytes(4, "big"))
    dip = ips.get(d)
    if dip is None:
        dip = ips[d] = _ip_str(d.to_bytes(4, "big"))
    src = _new(Endpoint, (sip, sp))
    dst = _new(Endpoint, (dip, dp))
    eps = _ep4_cache[key] = (src, dst)
    # the answer comes next: its direction is learnt at the same time (one miss per connection)
    _ep4_cache[(d, s, dp, sp)] = (dst, src)
    return eps


# the same layout and cache as parse_packet's fast path (analyzer.shards reads it)
unpack_v4tcp = _v4tcp
ep4_cache = _ep4_cache
# for the fused fast path of analyzer.pipeline: from the Ethernet type (offset 12 of the
# frame), the IPv4 header without options and the TCP header up to the flags, without
# addresses and ports, the fields that are checked together read as one number each:
# ethertype << 16 | vihl << 8 | tos, total, frag << 16 | ttl << 8 | proto, seq, data offset,
# flags; then the addresses and ports (at offset 12 of the IP header) as the ep4_cache key
unpack_v4seg = struct.Struct(">IH2xI14xI4xBB").unpack_from
# the TCP data offset byte -> where the payload starts after an Ethernet header and an IPv4
# header without options (TCP_PAYLOAD4) or an IPv6 fixed header (TCP_PAYLOAD6); past any
# packet for a data offset under 5 words (a bad TCP header)
TCP_PAYLOAD4 = tuple(34 + (b >> 4) * 4 if b >= 0x50 else 1 << 20 for b in range(256))
TCP_PAYLOAD6 = tuple(54 + (b >> 4) * 4 if b >= 0x50 else 1 << 20 for b in range(256))
unpack_v4addrs = struct.Struct(">IIHH").unpack_from
# the same layout packed: the key of a connection's other direction from the numbers
pack_v4addrs = struct.Struct(">IIHH").pack
# IPv6 fixed header then the TCP header up to the flags: version/class byte, payload length,
# next header, seq, data offset, flags (addresses and ports are the ``ep_cache`` key bytes)
unpack_v6tcp = struct.Struct(">B3xHBx32x4xI4xBB").unpack_from
ep_cache = _ep_cache
# for the fused path's SYN/FIN/RST packets, which it makes Segments of: the ack number
# (at offset 8 of the TCP header) and the Endpoints of a cache miss
unpack_u32 = _u32be
endpoints4 = _endpoints4
endpoints = _endpoints


def parse_packet(pkt: PacketRecord, skips: SkipCounter | None = None) -> Segment | None:
    """Parse one captured packet down to TCP. None (and a counted reason) if it is not TCP.
    ``pkt`` is read by position: a ``Packet`` or a reader's record tuple (``CaptureReader.records``)."""
    _index, ts, lt, data, orig_len = pkt
    n = len(data)
    # fast path: IPv4 without options in Ethernet / SLL / SLL2 / raw IP
    if lt == 1:
        off = 14 if data[12:14] == b"\x08\x00" else 0
    elif lt == 113:
        off = 16 if data[14:16] == b"\x08\x00" else 0
    elif lt == 276:
        off = 20 if data[0:2] == b"\x08\x00" else 0
    else:
        off = 0
    if off and n >= off + 40:
        vihl, total, frag, proto, s, d, sp, dp, seq, ack, doff, flags = _v4tcp(data, off)
        if vihl == 0x45 and proto == 6 and not frag & 0x3FFF and total >= 40 and doff >= 0x50:
            p = off + 20 + (doff >> 4) * 4
            if p <= n:
                key = (s, d, sp, dp)
                eps = _ep4_cache.get(key)
                if eps is None:
                    eps = _endpoints4(key)
                wire = orig_len if orig_len > n else n
                end_wire = off + total if off + total <= wire else wire
                if end_wire <= n:
                    return _new(Segment, (eps[0], eps[1], seq, ack, flags,
                                          data[p:end_wire] if end_wire > p else b"", 0, ts, _index))
                return _new(Segment, (eps[0], eps[1], seq, ack, flags, data[p:],
                                      end_wire - n if n > p else end_wire - p, ts, _index))
    # general path
    if lt == 1 and data[12:14] == b"\x86\xdd":
        off, ver = 14, 6
    else:
        if skips is None:
            skips = SkipCounter()
        where = _link(lt, data, skips)
        if where is None:
            return None
        off, ver = where
    # bytes of the IP datagram that were on the wire (orig_len may exceed the capture)
    wire_left = orig_len - off
    if ver == 4:
        if n < off + 20:
            return _skip(skips, "truncated header")
        vihl, total, frag, proto = _ip4(data, off)
        if vihl >> 4 != 4:
            return _skip(skips, "bad IP header")
        ihl = (vihl & 15) * 4
        if ihl < 20:
            return _skip(skips, "bad IP header")
        if frag & 0x3FFF:               # MF set or a non-zero offset
            return _skip(skips, "IP fragment")
        if proto != 6:
            return _skip(skips, "not TCP")
        if total == 0:                  # segmentation offload: length not filled in
            total = max(wire_left, n - off)
        elif total < ihl:
            return _skip(skips, "bad IP header")
        t = off + ihl
        alen = 4
        addrs = off + 12
    else:
        if n < off + 40:
            return _skip(skips, "truncated header")
        if data[off] >> 4 != 6:
            return _skip(skips, "bad IP header")
        plen = data[off + 4] << 8 | data[off + 5]
        nh = data[off + 6]
        t = off + 40
        if plen == 0:                   # jumbogram or offload
            plen = max(wire_left, n - off) - 40
        total = 40 + plen
        while nh != 6:
            if nh in _IP6_EXT:
                if n < t + 8:
                    return _skip(skips, "truncated header")
                nh, hl = data[t], (data[t + 1] + 1) * 8
                t += hl
            elif nh == 44:              # fragment header
                if n < t + 8:
                    return _skip(skips, "truncated header")
                fo = data[t + 2] << 8 | data[t + 3]
                if fo & 0xFFF9:         # offset != 0 or more fragments
                    return _skip(skips, "IP fragment")
                nh = data[t]
                t += 8
            elif nh == 51:              # authentication header: length in 4-octet units
                if n < t + 8:
                    return _skip(skips, "truncated header")
                nh, hl = data[t], (data[t + 1] + 2) * 4
                t += hl
            else:
                return _skip(skips, "not TCP")
            if t > off + total:
                return _skip(skips, "bad IP header")
        alen = 16
        addrs = off + 8
    if n < t + 20:
        return _skip(skips, "truncated header")
    seq, ack, doff, flags = _tcp_rest(data, t + 4)
    thl = (doff >> 4) * 4
    if thl < 20:
        return _skip(skips, "bad TCP header")
    p = t + thl
    if n < p:
        return _skip(skips, "truncated header")
    src, dst = _endpoints(data[addrs:addrs + 2 * alen] + data[t:t + 4], alen)
    end_wire = off + min(total, wire_left if wire_left > n - off else n - off)
    if end_wire <= n:
        payload = data[p:end_wire] if end_wire > p else b""
        missing = 0
    else:
        payload = data[p:]
        missing = end_wire - n if n > p else end_wire - p
    return _new(Segment, (src, dst, seq, ack, flags, payload, missing, ts, _index))


def _skip(skips: SkipCounter | None, reason: str) -> None:
    if skips is not None:
        skips.add(reason)
    return None
