"""TCP reassembly: Segments -> per-direction contiguous byte streams with explicit gaps.

``Reassembler.feed(seg)`` returns the ``StreamData`` / ``StreamGap`` / ``StreamEnd``
events that segment made possible; ``Reassembler.finish(ts)`` flushes everything at the
end of the capture. Stream offsets count payload bytes from the first byte of the
direction (after the SYN when the handshake was captured, else from the first sequence
number seen), so they stay true across 32-bit sequence wrap-around, gaps and snaplen cuts:
every byte of the direction is delivered exactly once, either as data or inside a gap.

Connections. Keyed by the 4-tuple; ``Conn.id`` counts from 0 in order of first packet
(like tshark's tcp.stream). ``Conn.a`` is the first sender, or the SYN sender when the
first packet is a SYN-ACK. A SYN without ACK on a 4-tuple whose connection is closed,
or whose ISN differs from the one recorded for that side, ends the old connection with
``StreamEnd(None, "reused")`` and starts a new ``Conn`` (port reuse); a SYN with the
same ISN is a retransmitted SYN.

Events. ``StreamEnd(direction, "fin")`` when a direction's FIN is reached in order (or when the
connection ends with a hole before that FIN, after the gap); ``StreamEnd(None, reason)``
once for the whole connection: "fin" (both sides sent FIN; holes still open then become
gaps), "rst", "reused" or "end of capture". After ``StreamEnd(None, ...)`` no more
events carry that ``Conn``.

Retransmissions and overlaps: the first copy wins. Overlapping bytes are compared with
what was already delivered (a recent-history window of ``overlap_window`` bytes per
direction); a difference increments ``counters["overlap differs"]`` and appends a line to
``notes`` (bounded list of strings). A 1-byte segment just below the expected offset is a
keep-alive and not compared. Out-of-order segments wait in a per-direction buffer; when
the other side acknowledges the bytes of a hole (the receiver has them: the capture missed
them, and they will not be sent again), when the buffered bytes beyond a hole exceed
``max_buffer`` (default 4 MiB), or when the connection ends, the hole becomes
``StreamGap(reason="lost segment")`` and delivery continues.
A segment cut by the snaplen (``seg.missing > 0``) is delivered as its captured bytes
followed by ``StreamGap(reason="snaplen")`` of the missing bytes.

Memory: per direction at most ``max_buffer`` buffered bytes plus ``overlap_window`` bytes
of history; over all connections at most ``max_total_buffer`` buffered bytes (past it, the
direction that adds more gives up on its holes); closed connections are forgotten after
``max_closed`` newer ones closed. ``conns`` lists every ``Conn`` (one small record per
connection); pass ``keep_conns=False`` for captures with millions of connections and use
``conn_count``.

Counters (``counters``): "out of order", "retransmission", "overlap differs",
"keep-alive", "lost segments", "lost bytes", "snaplen bytes", "port reuse",
"retransmitted SYN", "data after close", "data after FIN", "total buffer bound".
"""
from __future__ import annotations

import bisect
from collections import deque

from analyzer.model import (
    TCP_ACK,
    TCP_FIN,
    TCP_RST,
    TCP_SYN,
    Conn,
    Endpoint,
    Segment,
    StreamData,
    StreamEnd,
    StreamEvent,
    StreamGap,
)

__all__ = ["Reassembler"]

_MASK = 0xFFFFFFFF
_HALF = 1 << 31
_WRAP = 1 << 32
_MAX_NOTES = 1000
_new = tuple.__new__
_obj_new = object.__new__


class _Dir:
    """One direction of a connection (made in ``Reassembler._new_conn``)."""

    __slots__ = ("base", "isn", "expected", "pending", "pending_bytes", "fin_at", "ended",
                 "recent", "recent_bytes")
    base: int | None            # sequence number of stream offset 0
    isn: int | None             # ISN from a captured SYN
    expected: int               # next stream offset to deliver
    # out-of-order entries: [offset, payload, missing, ts, index], sorted by offset; a list
    # once a segment waits (most directions of short connections never have one)
    pending: list[list] | tuple[()]
    pending_bytes: int
    fin_at: int | None          # stream offset of the FIN
    ended: bool
    recent: deque[tuple[int, bytes]]    # delivered (offset, bytes)
    recent_bytes: int

    def offset(self, seq: int) -> int:
        """Stream offset of ``seq``, unwrapped to the 2^31 window around ``expected``."""
        diff = (((seq - self.base) & _MASK) - self.expected) & _MASK  # type: ignore[operator]
        if diff >= _HALF:
            diff -= _WRAP
        return self.expected + diff


class _ConnState:
    """One connection (made in ``Reassembler._new_conn``)."""

    __slots__ = ("conn", "dirs", "closed", "forgotten", "holes")
    conn: Conn
    dirs: tuple[_Dir, _Dir]
    closed: bool
    forgotten: bool             # closed and dropped from the 4-tuple map (max_closed)
    # a direction has out-of-order bytes waiting (a hole): its segments, and the other
    # direction's (whose ACKs may end the hole: Reassembler._acked), take no fast path
    holes: bool


class Reassembler:
    """Per-connection, per-direction TCP reassembly. See the module docstring."""

    def __init__(self, max_buffer: int = 4 * 1024 * 1024, overlap_window: int = 32 * 1024,
                 max_closed: int = 10000, max_total_buffer: int = 256 * 1024 * 1024,
                 keep_conns: bool = True, ids_from_index: bool = False) -> None:
        self.max_buffer = max_buffer
        # ids_from_index: a Conn's id is the number of its first packet (a shard of a capture
        # numbers its connections so that the whole capture's numbers can be restored)
        self.ids_from_index = ids_from_index
        self.first_indexes: list[int] = []      # with ids_from_index: every connection's id
        self.max_total_buffer = max_total_buffer
        self.overlap_window = overlap_window
        self.max_closed = max_closed
        self.keep_conns = keep_conns
        self.conns: list[Conn] = []     # every connection, by id (if keep_conns)
        self.conn_count = 0
        self.pending_total = 0          # out-of-order bytes buffered over all connections
        self.counters: dict[str, int] = {}
        self.notes: list[str] = []
        self._pairs: dict[tuple[Endpoint, Endpoint], tuple[_ConnState, int]] = {}
        self._closed: deque[_ConnState] = deque()
        self._open: dict[int, _ConnState] = {}

    # -- helpers ---------------------------------------------------------------------

    def _count(self, what: str, n: int = 1) -> None:
        self.counters[what] = self.counters.get(what, 0) + n

    def _note(self, text: str) -> None:
        if len(self.notes) < _MAX_NOTES:
            self.notes.append(text)

    def _new_conn(self, src: Endpoint, dst: Endpoint, flags: int, ts: float,
                  index: int) -> tuple[_ConnState, int]:
        """A new connection whose first packet goes ``src`` -> ``dst``: its state and the
        packet's direction."""
        if flags & (TCP_SYN | TCP_ACK) == TCP_SYN | TCP_ACK:
            # first packet is the SYN-ACK: a is the SYN sender (a packet to its own endpoint
            # keeps direction 0)
            a, b, direction = dst, src, 1 if src != dst else 0
        else:
            a, b, direction = src, dst, 0
        cid = index if self.ids_from_index else self.conn_count
        # one Conn, one _ConnState and two _Dirs per connection, millions on big captures: their
        # slots stored here cost less than calls of their classes
        conn = _obj_new(Conn)
        conn.id = cid
        conn.a = a
        conn.b = b
        conn.syn_seen = False
        conn.client_dir = conn.protocol = conn.closed = conn.closed_by = None
        conn.lost_from = 0
        conn.first_ts = conn.last_ts = ts
        self.conn_count += 1
        if self.ids_from_index:
            self.first_indexes.append(index)
        if self.keep_conns:
            self.conns.append(conn)
        st = _obj_new(_ConnState)
        st.conn = conn
        st.dirs = (d0, d1) = (_obj_new(_Dir), _obj_new(_Dir))
        # (both directions' slots in one chained store each: no loop)
        d0.base = d0.isn = d0.fin_at = d1.base = d1.isn = d1.fin_at = None
        d0.expected = d0.pending_bytes = d0.recent_bytes = d1.expected = d1.pending_bytes = d1.recent_bytes = 0
        d0.pending = d1.pending = ()
        d0.ended = d1.ended = st.closed = st.forgotten = st.holes = False
        d0.recent = deque()
        d1.recent = deque()
        pairs = self._pairs
        pairs[(a, b)] = (st, 0)
        pairs[(b, a)] = (st, 1)
        self._open[cid] = st
        return st, direction

    def _close(self, st: _ConnState, reason: str, ts: float, index: int,
               events: list[StreamEvent]) -> None:
        """Flush both directions (holes become gaps) and end the connection."""
        st.closed = True
        conn = st.conn
        d0, d1 = st.dirs
        if not d0.ended:
            self._flush(st, 0, ts, index, events)
        if not d1.ended:
            self._flush(st, 1, ts, index, events)
        if conn.closed is None and (reason == "fin" or reason == "rst"):
            conn.closed = reason
        events.append(_new(StreamEnd, (conn, None, reason, ts, index)))
        self._open.pop(conn.id, None)
        # free buffers; keep only what reuse detection needs (out-of-order bytes rarely wait)
        st.holes = False
        if d0.pending_bytes or d1.pending_bytes or d0.pending or d1.pending:
            for d in (d0, d1):
                if d.pending:
                    d.pending = ()
                if d.pending_bytes:
                    self.pending_total -= d.pending_bytes
                    d.pending_bytes = 0
        d0.recent.clear()
        d1.recent.clear()
        d0.recent_bytes = d1.recent_bytes = 0
        closed = self._closed
        closed.append(st)
        if len(closed) > self.max_closed:
            pairs = self._pairs
            while len(closed) > self.max_closed:
                old = closed.popleft()
                old.forgotten = True
                a, b = old.conn.a, old.conn.b
                for k in ((a, b), (b, a)):
                    ent = pairs.get(k)
                    if ent is not None and ent[0] is old:
                        del pairs[k]

    # -- main entry points ---------------------------------------------------------------

    def feed(self, seg: Segment) -> list[StreamEvent]:
        """The events ``seg`` makes possible; ``seg`` is read by position (a plain tuple laid
        out as ``Segment`` will do)."""
        src, dst, seq, ack, flags, payload, missing, ts, index = seg
        ent = self._pairs.get((src, dst))
        if ent is None:
            return self.segment(None, 0, src, dst, seq, ack, flags, payload, missing, ts, index)
        st, direction = ent
        if not flags & 7:
            # fast path: no SYN/FIN/RST on a known connection with no holes (an ACK may end
            # the other direction's: segment)
            d = st.dirs[direction]
            if d.base is not None and not st.closed and d.fin_at is None and not st.holes:
                st.conn.last_ts = ts
                if not payload and not missing:
                    return []
                if not missing:
                    exp = d.expected
                    diff = (((seq - d.base) & _MASK) - exp) & _MASK
                    if diff == 0:
                        ev = _new(StreamData, (st.conn, direction, exp, payload, ts, index))
                        d.expected = exp + len(payload)
                        if self.overlap_window:
                            recent = d.recent
                            recent.append((exp, payload))
                            d.recent_bytes += len(payload)
                            while d.recent_bytes > self.overlap_window and len(recent) > 1:
                                d.recent_bytes -= len(recent.popleft()[1])
                        return [ev]
        return self.segment(st, direction, src, dst, seq, ack, flags, payload, missing, ts, index)

    def segment(self, st: _ConnState | None, direction: int, src: Endpoint | None,
                dst: Endpoint | None, seq: int, ack: int, flags: int, payload: bytes, missing: int,
                ts: float, index: int) -> list[StreamEvent]:
        """``feed`` of a SYN, FIN, RST, data out of order...: every connection passes here a few
        times (its SYN, SYN-ACK and FINs). ``st`` and ``direction``: the connection and
        direction ``_pairs`` holds for (src, dst), st None when it holds none (the fused path
        of analyzer.pipeline knows them for the packets of its connections and calls this).
        ``ack`` is read for a SYN-ACK, and for an ACK while the other direction has holes
        (``_acked``); ``src`` and ``dst`` only to make a new connection (st None, or a SYN),
        so a caller that knows ``st`` may pass None for a segment without SYN."""
        events: list[StreamEvent] = []
        if st is None:
            st, direction = self._new_conn(src, dst, flags, ts, index)
        else:
            if flags & TCP_SYN:
                d = st.dirs[direction]
                if not flags & TCP_ACK:
                    if st.closed or (d.isn is not None and d.isn != seq) or (
                            d.isn is None and d.base is not None):
                        if not st.closed:
                            self._close(st, "reused", ts, index, events)
                        self._count("port reuse")
                        st, direction = self._new_conn(src, dst, flags, ts, index)
                    elif d.isn == seq:
                        self._count("retransmitted SYN")
                        st.conn.last_ts = ts
                        return events
                elif st.closed or (d.isn is not None and d.isn != seq):
                    if st.closed and d.isn != seq:
                        # new connection whose SYN was not captured
                        self._count("port reuse")
                        st, direction = self._new_conn(src, dst, flags, ts, index)
                    else:
                        self._count("retransmitted SYN")
                        st.conn.last_ts = ts
                        return events
            if st.closed:
                if payload or missing:
                    self._count("data after close")
                st.conn.last_ts = ts
                return events
        conn = st.conn
        conn.last_ts = ts
        dirs = st.dirs
        d = dirs[direction]
        if flags & TCP_SYN:
            syn = 1
            if d.base is None:
                d.isn = seq
                d.base = (seq + 1) & _MASK
                if direction == 0 and not flags & TCP_ACK:
                    conn.syn_seen = True
            elif d.isn is None and d.expected == 0 and not d.pending:
                d.isn = seq
                d.base = (seq + 1) & _MASK
            if flags & TCP_ACK and direction == 1 and dirs[0].base is None:
                # the connection starts at b's SYN-ACK: a's ISN is its ack - 1
                dirs[0].isn = (ack - 1) & _MASK
                dirs[0].base = ack
        else:
            syn = 0
            if d.base is None:
                d.base = seq
        if flags & TCP_ACK and st.holes:
            o = dirs[1 - direction]
            if o.pending:
                self._acked(st, 1 - direction, o, ack, ts, index, events)
        if d.ended:
            if payload or missing:
                self._count("data after FIN")
        else:
            n = len(payload) + missing
            if n:
                off = d.offset((seq + syn) & _MASK)
                self._data(st, direction, d, off, payload, missing, ts, index, events)
            if flags & TCP_FIN and d.fin_at is None:
                if conn.closed_by is None:
                    conn.closed_by = direction      # the side that closed first
                fin = d.offset((seq + syn + n) & _MASK)
                if fin >= d.expected:
                    d.fin_at = fin
                self._check_fin(st, direction, d, ts, index, events)
                if not st.closed and dirs[1 - direction].fin_at is not None:
                    # both sides sent FIN: the connection is over even if a hole remains
                    self._close(st, "fin", ts, index, events)
        if flags & TCP_RST:
            if conn.closed_by is None:
                conn.closed_by = direction
            self._close(st, "rst", ts, index, events)
        return events

    def finish(self, ts: float | None = None) -> list[StreamEvent]:
        """End of capture: flush every open connection, in id order."""
        events: list[StreamEvent] = []
        for cid in sorted(self._open):
            st = self._open[cid]
            self._close(st, "end of capture", ts if ts is not None else st.conn.last_ts,
                        0, events)
        return events

    # -- per direction -------------------------------------------------------------------

    def _check_fin(self, st: _ConnState, direction: int, d: _Dir, ts: float, index: int,
                   events: list[StreamEvent]) -> None:
        if d.fin_at is not None and not d.ended and d.expected >= d.fin_at:
            d.ended = True
            events.append(_new(StreamEnd, (st.conn, direction, "fin", ts, index)))
            if st.dirs[1 - direction].ended and not st.closed:
                st.conn.closed = "fin"
                self._close(st, "fin", ts, index, events)

    def _compare(self, st: _ConnState, direction: int, d: _Dir, off: int, data: bytes,
                 index: int) -> None:
        """Compare retransmitted ``data`` at ``off`` (all below ``expected``) with history."""
        if not data:
            return
        if len(data) == 1 and off == d.expected - 1:
            self._count("keep-alive")
            return
        self._count("retransmission")
        end = off + len(data)
        for roff, rdata in d.recent:
            rend = roff + len(rdata)
            if rend <= off or roff >= end:
                continue
            lo, hi = max(off, roff), min(end, rend)
            if data[lo - off:hi - off] != rdata[lo - roff:hi - roff]:
                self._count("overlap differs")
                self._note(f"conn {st.conn.id} dir {direction}: retransmitted bytes {lo}-{hi} "
                           f"in packet {index} differ from the first copy")
                return

    def _deliver(self, st: _ConnState, direction: int, d: _Dir, off: int, payload: bytes,
                 missing: int, ts: float, index: int, events: list[StreamEvent]) -> None:
        if payload:
            events.append(_new(StreamData, (st.conn, direction, off, payload, ts, index)))
            if self.overlap_window:
                d.recent.append((off, payload))
                d.recent_bytes += len(payload)
                while d.recent_bytes > self.overlap_window and len(d.recent) > 1:
                    d.recent_bytes -= len(d.recent.popleft()[1])
        if missing:
            events.append(StreamGap(st.conn, direction, off + len(payload), missing, ts, index,
                                    "snaplen"))
            self._count("snaplen bytes", missing)
        d.expected = off + len(payload) + missing

    def _trim(self, st: _ConnState, direction: int, d: _Dir, off: int, payload: bytes, missing: int,
              index: int) -> tuple[int, bytes, int] | None:
        """Cut what was already delivered off a segment starting before ``d.expected`` (the overlap is
        compared, first copy wins); None when nothing new is left."""
        exp = d.expected
        cut = exp - off
        self._compare(st, direction, d, off, payload[:cut], index)
        if cut >= len(payload) + missing:
            return None
        if cut <= len(payload):
            return exp, payload[cut:], missing
        return exp, b"", missing - (cut - len(payload))

    def _data(self, st: _ConnState, direction: int, d: _Dir, off: int, payload: bytes,
              missing: int, ts: float, index: int, events: list[StreamEvent]) -> None:
        exp = d.expected
        if off < exp:
            t = self._trim(st, direction, d, off, payload, missing, index)
            if t is None:
                return
            off, payload, missing = t
        if off == exp:
            self._deliver(st, direction, d, off, payload, missing, ts, index, events)
            if d.pending:
                self._drain(st, direction, d, ts, index, events)
            return
        # out of order: buffer
        self._count("out of order")
        pend = d.pending
        i = bisect.bisect_left(pend, off, key=lambda e: e[0])
        if i < len(pend) and pend[i][0] == off:
            first = pend[i]
            if len(first[1]) + first[2] >= len(payload) + missing:
                # duplicate of a buffered segment: first copy wins
                if payload[:len(first[1])] != first[1][:len(payload)]:
                    self._count("overlap differs")
                    self._note(f"conn {st.conn.id} dir {direction}: buffered bytes at offset {off} "
                               f"differ in packet {index}")
                self._count("retransmission")
                return
        if not pend:
            pend = d.pending = []
        pend.insert(i, [off, payload, missing, ts, index])
        st.holes = True
        d.pending_bytes += len(payload)
        self.pending_total += len(payload)
        if self.pending_total > self.max_total_buffer:
            # too much waiting over all connections: give up on this direction's holes
            self._count("total buffer bound")
            while d.pending:
                self._gap_to_first(st, direction, d, ts, index, events)
                self._drain(st, direction, d, ts, index, events)
        while d.pending_bytes > self.max_buffer and d.pending:
            self._gap_to_first(st, direction, d, ts, index, events)
            self._drain(st, direction, d, ts, index, events)

    def _acked(self, st: _ConnState, direction: int, d: _Dir, ack: int, ts: float, index: int,
               events: list[StreamEvent]) -> None:
        """The other side acknowledged ``direction``'s bytes up to ``ack``: a hole below it is a
        loss of the capture, not of the network (the receiver has those bytes; nobody sends
        them again). It becomes a gap now and what waited behind it is delivered, in time
        with the other side's answers, instead of at the connection's end."""
        acked = d.offset(ack)
        pend = d.pending
        while pend and pend[0][0] <= acked:
            self._gap_to_first(st, direction, d, ts, index, events)
            self._drain(st, direction, d, ts, index, events)
            pend = d.pending

    def _gap_to_first(self, st: _ConnState, direction: int, d: _Dir, ts: float, index: int,
                      events: list[StreamEvent]) -> None:
        first = d.pending[0][0]
        if first > d.expected:
            self._lost(st, direction, d, first, ts, index, events)

    def _lost(self, st: _ConnState, direction: int, d: _Dir, end: int, ts: float, index: int,
              events: list[StreamEvent]) -> None:
        """The bytes from ``d.expected`` to ``end`` were never captured: a "lost segment" gap,
        counted, and noted on the connection (``Conn.lost_from``)."""
        n = end - d.expected
        st.conn.lost_from |= 1 << direction
        events.append(StreamGap(st.conn, direction, d.expected, n, ts, index, "lost segment"))
        self._count("lost segments")
        self._count("lost bytes", n)
        d.expected = end

    def _drain(self, st: _ConnState, direction: int, d: _Dir, now_ts: float, now_index: int,
               events: list[StreamEvent]) -> None:
        pend = d.pending
        while pend and pend[0][0] <= d.expected:
            off, payload, missing, ts, index = pend.pop(0)
            d.pending_bytes -= len(payload)
            self.pending_total -= len(payload)
            if off < d.expected:
                t = self._trim(st, direction, d, off, payload, missing, index)
                if t is None:
                    continue
                off, payload, missing = t
            self._deliver(st, direction, d, off, payload, missing, ts, index, events)
        if not pend:
            st.holes = bool(st.dirs[1 - direction].pending)
        self._check_fin(st, direction, d, now_ts, now_index, events)

    def _flush(self, st: _ConnState, direction: int, ts: float, index: int,
               events: list[StreamEvent]) -> None:
        """Turn every hole into a gap and deliver everything buffered (connection ends)."""
        d = st.dirs[direction]
        if d.ended:
            return
        while d.pending:
            self._gap_to_first(st, direction, d, ts, index, events)
            self._drain(st, direction, d, ts, index, events)
        if d.fin_at is not None and d.fin_at > d.expected and not d.ended:
            self._lost(st, direction, d, d.fin_at, ts, index, events)
        if d.fin_at is not None and not d.ended:
            d.ended = True
            events.append(StreamEnd(st.conn, direction, "fin", ts, index))

