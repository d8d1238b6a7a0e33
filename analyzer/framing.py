"""Kafka framing: one direction's byte stream -> Frames, split on the 4-byte size prefix.

``Framer(conn, direction, plausible=None, max_frame_size=100 MiB, min_frame_size=4)``
takes that direction's ``StreamData`` / ``StreamGap`` events in order (``feed``) and
returns the ``Frame`` records they complete; ``finish()`` (or feeding a ``StreamEnd``)
turns a partial frame into a ``Frame`` with ``truncated=True``.

``plausible(header: bytes) -> Peeked`` is the caller's judgement of a frame header (false:
implausible; true, or a truthy value it parsed, such as a request header: see ``Peeked``): it gets
the first bytes of the frame AFTER the size prefix, ``min(size, peek)`` of them (``peek``
defaults to 16), or fewer when a gap cuts the frame short. The caller knows whether this
direction carries requests or responses. It is asked for every frame.

Desynchronisation: a size below ``min_frame_size`` or above ``max_frame_size``, or a header
the callback rejects, makes the framer scan forward for the next offset whose size and
header are plausible (candidates are found with a regex on the size's top byte, so the
scan does not run Python code for every byte of ordinary data). Bytes passed over are
counted in ``framer.skipped`` by reason (and a size above ``max_frame_size`` met where a
frame should start is counted in ``framer.over_max_frames``, the limit being hit). One
exception keeps a damaged header from desynchronising the stream: at a boundary that
follows a frame in sync, a frame whose size is within the limits and which ends exactly
where a TCP segment ends is kept although ``plausible`` rejects it (counted in
``framer.damaged_frames``). And a frame at a known boundary of a stream in sync whose size
is within the limits and whose header ``sane`` (an optional second check, looser than
``plausible``: for requests, any API key and version) accepts is one frame too, wherever
it ends (counted in ``framer.unknown_frames``): an API or version newer than the caller
knows does not knock the stream out of sync. A known boundary is the first byte of a
connection whose handshake was captured, or the end of a frame cut in sync (not the end
of a frame a scan guessed). Bytes skipped are counted by reason:

- ``"before first frame"``: before the first frame of a stream that starts mid-frame;
- ``"desync"``: skipped after an implausible size/header;
- ``"gap"``: never captured (gaps), plus captured bytes that could not be framed because a
  gap broke the frame they belonged to (the tail after a gap, a cut header, the scan to
  resynchronise after a gap at an unknown position);
- ``"end of stream"``: a size prefix or header cut by the end of the stream.

A gap inside a frame whose size is known ends that frame at once: it is emitted with
``truncated=True``, ``data`` = the captured bytes before the gap and ``size`` kept; the
framer then skips to the frame's end, which it knows, and stays in sync (this is how
snaplen-cut captures are read: the missing bytes are a gap, not garbage). If the frame
ends inside the gap the next boundary is unknown and the framer resynchronises by
scanning the bytes after the gap.

Accounting invariant: every byte of the stream (data and gaps) is either in a frame
(its 4-byte prefix and ``frame.data``) or counted in ``skipped``, so after ``finish()``
``sum(4 + len(f.data) for f in frames) + sum(skipped.values())`` equals the stream length.

Memory: the framer never holds more than the current frame's captured bytes (nothing is
allocated from a declared size), plus at most ``4 + peek`` bytes while scanning.

``Framers`` routes a whole event stream (all connections) to one ``Framer`` per
(connection, direction) and finishes them on ``StreamEnd``.
"""
from __future__ import annotations

import re
import struct
from bisect import bisect_right
from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING, TypeAlias

from analyzer.model import Conn, Frame, StreamData, StreamEnd, StreamEvent, StreamGap

if TYPE_CHECKING:
    from analyzer.pipeline import _Pending
    from dissectors.header import RequestHeader

__all__ = ["Framer", "Framers", "DEFAULT_MAX_FRAME_SIZE"]

DEFAULT_MAX_FRAME_SIZE = 100 * 1024 * 1024
_size = struct.Struct(">I").unpack_from
_new = tuple.__new__       # Frame is a NamedTuple: built without a Python-level __new__

# What a plausibility check returns for a frame's first bytes: whether they are plausible,
# or (truthy) what it parsed from them on the way, which the frame keeps as Frame.peeked:
# the pipeline's checks return a request header, or the request a response answers
Peeked: TypeAlias = "RequestHeader | _Pending | bool"
Plausible: TypeAlias = "Callable[[bytes], Peeked]"
Sane = Callable[[bytes, int], bool]     # (a frame's first bytes, its size): see _damaged
_PARTIAL = 16        # header bytes enough to reject a scan candidate before its whole peek is in


@lru_cache(maxsize=16)
def _candidates(top: int, low: int) -> re.Pattern[bytes]:
    """Positions that can start a size prefix between ``low`` (< 256) and top << 24 | 0xFFFFFF.

    A zero-width pattern, so runs of zeros (sizes below the minimum) are skipped in C."""
    pat = b"(?=[\\x00-" + re.escape(bytes([top])) + b"])"
    if low > 0:
        pat += b"(?!\\x00\\x00\\x00[\\x00-" + re.escape(bytes([low - 1])) + b"])"
    return re.compile(pat, re.S)


class Framer:
    """Frames of one direction of one connection. See the module docstring."""

    # Per-instance state that starts at an immutable value lives here as a class default:
    # a framer is made per connection direction (tens of thousands of short connections),
    # so __init__ sets only what differs or is mutable. Assignments make instance values.
    frames = 0                      # frames emitted
    truncated_frames = 0
    over_max_frames = 0             # size prefixes above max_frame_size met at a frame boundary
    damaged_frames = 0              # frames kept although their header was rejected (see _damaged)
    unknown_frames = 0              # frames kept at a known boundary by the ``sane`` check (see _damaged)
    sane: Sane | None = None        # the looser check of a frame at a known boundary (see _damaged)
    _guess_end = -1                 # stream offset where the last frame a scan guessed ends
    finished = False
    _off: int | None = None         # stream offset of buf[0]; None before any event
    _synced = True                  # buf[0] is a frame boundary
    _decided = -1                   # size of the frame at buf[0] once judged plausible
    _reason = "before first frame"  # why bytes are skipped while scanning
    _drop = 0                       # bytes of a gap-broken frame still to drop
    _cand_re: re.Pattern[bytes] | None = None   # see _cand; made when first scanning
    _last_index = 0
    _last_ts = 0.0
    # the stream offset at which in-order bytes are cut straight into frames (feed_data's
    # fast path): set when nothing is buffered, in sync at a frame boundary, nothing is
    # to be dropped and not finished; -1 otherwise. One comparison instead of five. Before
    # the first event it is 0: a direction's bytes mostly start at stream offset 0, so its
    # first segment is cut straight too (a first event elsewhere goes through ``feed``,
    # which starts the stream there)
    _at = 0
    # the frame in progress was found by a scan (a guess after a desync) and none is cut since:
    # a later packet that starts with a plausible frame may still prove it wrong (_aligned)
    _guess = False
    # (offset, packet index, ts) of the packets whose bytes are in buf: a list once bytes
    # are buffered (every path that fills buf sets it first)
    _marks: list[tuple[int, int, float]] | tuple[()] = ()

    def __init__(self, conn: Conn, direction: int, plausible: Plausible | None = None,
                 max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, min_frame_size: int = 4,
                 peek: int = 16) -> None:
        self.conn = conn
        self.direction = direction
        self.plausible = plausible
        self.max_frame_size = max_frame_size
        self._min = min_frame_size
        self.peek = peek
        self.skipped: dict[str, int] = {}
        # the bytes held (from stream offset _off on): empty at a frame boundary, where a
        # direction mostly ends (its owner skips finish() then: there is nothing to cut)
        self.buf = bytearray()

    @property
    def min_frame_size(self) -> int:
        """Smallest plausible size prefix; may be changed between events (e.g. for SASL tokens)."""
        return self._min

    @min_frame_size.setter
    def min_frame_size(self, value: int) -> None:
        self._min = value
        self._cand_re = None
        self._last_index = 0
        self._last_ts = 0.0

    @property
    def _cand(self) -> re.Pattern[bytes]:
        """The scan's candidate pattern for the current size limits (most framers never scan)."""
        cand = self._cand_re
        if cand is None:
            cand = self._cand_re = _candidates(min(self.max_frame_size, 0xFFFFFFFF) >> 24,
                                               min(max(self._min, 0), 255))
        return cand

    # -- helpers ---------------------------------------------------------------------------

    def _skip(self, reason: str, n: int) -> None:
        if n > 0:
            self.skipped[reason] = self.skipped.get(reason, 0) + n

    def _where(self, off: int) -> tuple[int, float]:
        """Packet index and ts of the packet that carried stream offset ``off``."""
        marks = self._marks
        i = bisect_right(marks, off, key=lambda m: m[0]) - 1
        if i < 0:
            return (self._last_index, self._last_ts)
        return marks[i][1], marks[i][2]

    def _consume(self, n: int) -> None:
        """Drop the first n bytes of the buffer."""
        if n <= 0:
            return
        if n >= len(self.buf):
            self.buf.clear()
        else:
            del self.buf[:n]
        assert self._off is not None        # bytes were buffered: an event set it
        self._off += n
        marks = self._marks
        # keep the mark that covers the new start
        i = bisect_right(marks, self._off, key=lambda m: m[0]) - 1
        if i > 0:
            assert isinstance(marks, list)  # bytes were buffered: a list (see _marks)
            del marks[:i]
        self._decided = -1

    def _check(self, b: bytes | bytearray, i: int, avail: int, final: bool) -> int | None:
        """Judge a frame starting at b[i]: its size if plausible, -1 if not, None if undecided."""
        size = _size(b, i)[0]
        if size < self._min or size > self.max_frame_size:
            return -1
        if self.plausible is None:
            return size
        need = min(size, self.peek)
        if avail - 4 < need and not final:
            # while scanning, a candidate whose first bytes already fail is dropped at once:
            # waiting for its whole peek would hold back the real frames behind it
            if not self._synced and avail - 4 >= _PARTIAL and not self.plausible(bytes(b[i + 4:i + avail])):
                return -1
            return None
        hdr = bytes(b[i + 4:i + 4 + min(need, avail - 4)])
        return size if self.plausible(hdr) else -1

    def _emit(self, start: int, size: int, data: bytes, truncated: bool,
              last: tuple[int, float] | None = None) -> Frame:
        fi, fts = self._where(start)
        li, lts = last if last is not None else self._where(start + 3 + len(data))
        self.frames += 1
        if truncated:
            self.truncated_frames += 1
        if self._guess:
            self._guess_end = start + 4 + size
        self._reason = "desync"
        self._guess = False
        return _new(Frame, (self.conn, self.direction, data, size, fi, li, fts, lts, start, truncated, None))

    # -- the state machine -----------------------------------------------------------------

    def _run(self, out: list[Frame], final: bool = False) -> None:
        """Cut every complete frame out of the buffer; scan when out of sync."""
        buf = self.buf
        pos = 0
        n = len(buf)
        assert self._off is not None        # bytes were buffered: an event set it
        while True:
            avail = n - pos
            if self._synced:
                if avail < 4:
                    break
                if self._decided >= 0 and pos == 0:
                    size = self._decided
                else:
                    r = self._check(buf, pos, avail, final)
                    if r is None:
                        break
                    if r < 0:
                        r = self._damaged(buf, pos, n)
                    if r < 0:
                        # out of sync; _reason tells why ("desync" once a frame was seen)
                        self._synced = False
                        self._skip(self._reason, 1)
                        pos += 1
                        continue
                    size = r
                end = pos + 4 + size
                if end > n:
                    if self._guess:
                        b = self._aligned(buf, pos, size, n, final)
                        if b != pos:
                            # a packet inside the guessed frame starts a plausible frame: sync there
                            self._skip(self._reason, b - pos)
                            pos = b
                            self._decided = -1
                            continue
                    # incomplete: remember the decision, keep the bytes
                    self._consume_at(pos)
                    self._decided = size
                    return
                start = self._off + pos
                out.append(self._emit(start, size, bytes(buf[pos + 4:end]), False))
                pos = end
            else:
                # scanning for a plausible frame start
                found = False
                j = pos
                search = self._cand.search
                while True:
                    m = search(buf, j)
                    if m is None:
                        j = n              # no byte here can start a frame
                        break
                    j = m.start()
                    if n - j < 4:
                        break              # keep from j: wait for more bytes
                    r = self._check(buf, j, n - j, final)
                    if r is None:
                        # undecided: wait for more bytes from j, unless a later packet inside
                        # the frame it claims starts with a plausible frame
                        b = self._aligned(buf, j, _size(buf, j)[0], n, final)
                        if b != j:
                            j = b
                            found = True
                        break
                    if r >= 0:
                        found = True
                        j = self._aligned(buf, j, r, n, final)
                        break
                    j += 1
                self._skip(self._reason, j - pos)
                pos = j
                if found:
                    self._synced = True
                    self._guess = True
                    continue
                break
        self._consume_at(pos)

    def _aligned(self, buf: bytes | bytearray, j: int, size: int, n: int, final: bool) -> int:
        """The scan's candidate at ``j`` (a frame of ``size``, judged plausible or still
        undecided), or the start of a later packet inside it whose bytes make a plausible
        frame: clients and brokers write whole frames, so a packet's first byte is the
        likelier boundary, and a candidate that begins elsewhere and swallows it (or holds
        it back while waiting for more bytes) is mostly a misreading after a desync."""
        marks = self._marks
        plausible = self.plausible
        if len(marks) < 2 or plausible is None:
            return j
        base = self._off
        assert base is not None             # bytes were buffered: an event set it
        stop = j + 4 + size
        for m in marks:
            b = m[0] - base
            if b == j or b >= stop:
                return j       # the candidate starts a packet, or no packet starts inside it
            if j < b and b + 4 <= n:
                r = self._check(buf, b, n - b, final)
                # only a strong reading wins: a request header parsed whole, or a response
                # whose request is waiting (not a mere plausible orphan, which bytes inside
                # a big frame can look like)
                if r is not None and r >= 0 and \
                        plausible(bytes(buf[b + 4:b + 4 + min(r, self.peek, n - b - 4)])) is not True:
                    return b
        return j

    def _damaged(self, buf: bytes | bytearray, pos: int, n: int) -> int:
        """A size prefix at a frame boundary whose header was rejected: its size if the frame
        still counts as one (damaged or unknown, not a desync), else -1.

        It counts when ``pos`` is a known boundary (this direction already had frames, or
        it is the first byte of a connection whose handshake was captured and which the
        other direction showed to be Kafka), the size is within the limits and the frame
        ends exactly where the captured bytes end (the end of a TCP segment): a damaged
        header then costs only its own frame instead of a scan that can misframe the
        frames after it. It counts too, wherever it ends, when ``sane`` accepts its header
        at a boundary known without a guess: the first byte of a connection whose handshake
        was captured, or the end of a frame cut in sync (an API key or version newer than
        ``plausible`` knows)."""
        size = _size(buf, pos)[0]
        if size > self.max_frame_size:
            self.over_max_frames += 1
            return -1
        if size < self._min:
            return -1
        conn = self.conn
        assert self._off is not None        # bytes were buffered: an event set it
        at = self._off + pos
        first = conn.syn_seen and at == 0
        if (self.frames > 0 or (first and conn.protocol in ("kafka", "kafka-legacy"))) and pos + 4 + size == n:
            self.damaged_frames += 1
            return size
        sane = self.sane
        if sane is not None and (first or (self.frames > 0 and at != self._guess_end)) and \
                sane(bytes(buf[pos + 4:pos + 4 + min(size, self.peek, n - pos - 4)]), size):
            self.unknown_frames += 1
            return size
        return -1

    def _consume_at(self, pos: int) -> None:
        if pos:
            self._consume(pos)

    def _sync_at(self) -> None:
        """Set ``_at`` after anything but the straight cut (see its comment)."""
        self._at = self._off if (not self.buf and self._synced and not self._drop
                                 and not self.finished and self._off is not None) else -1

    # -- public ----------------------------------------------------------------------------

    def feed_data(self, off: int, data: bytes, ts: float, index: int, out: list[Frame]) -> Frame | None:
        """The frames of in-order stream bytes ``data`` at stream offset ``off`` (what
        ``feed(StreamData(conn, direction, off, data, ts, index))`` returns, without building
        the event on the common path): when ``data`` is exactly one whole frame (most TCP
        segments) that frame is returned and ``out`` is not touched; otherwise the frames
        are appended to ``out`` and None is returned.

        What ``plausible`` returned for a frame cut straight from ``data`` (True, or a value
        it parsed from the peek, such as a request header) goes with it as ``Frame.peeked``."""
        if off != self._at:
            out += self.feed(StreamData(self.conn, self.direction, off, data, ts, index))
            return None
        # in sync at a frame boundary with nothing buffered: frames are cut straight from
        # data. Mostly exactly one: no setup that pays back only over several, and that
        # frame returns before any list is touched
        n = len(data)
        pos = 0
        plausible = self.plausible
        seen: Peeked | None = None              # (None without a check)
        while n - pos >= 4:
            size = _size(data, pos)[0]
            end = pos + 4 + size
            if size < self._min or size > self.max_frame_size or end > n:
                break
            body = data[pos + 4:end]
            if plausible is not None:
                # the peek: the frame's bytes when no longer (mostly), no second slice
                seen = plausible(body if size <= self.peek else body[:self.peek])
                if not seen:
                    break
            f = _new(Frame, (self.conn, self.direction, body, size, index, index, ts, ts, off + pos, False, seen))
            self.frames += 1
            self._reason = "desync"
            if end == n:
                self._at = self._off = off + n
                if pos:
                    out.append(f)
                    return None
                return f
            out.append(f)
            pos = end
        if pos == n:           # no bytes
            self._off = off
            return None
        # the rest is not a whole plausible frame: buffered for the state machine
        self._last_index = index
        self._last_ts = ts
        self._off = off + pos
        self._marks = [(off + pos, index, ts)]
        self.buf += data[pos:] if pos else data
        self._run(out)
        self._sync_at()
        return None

    def feed(self, ev: StreamData | StreamGap | StreamEnd) -> list[Frame]:
        out: list[Frame] = []
        if type(ev) is StreamData:
            if self._off is None and not self.finished:
                self._at = ev[2]             # the first event: it starts at a frame boundary
            if ev[2] == self._at:
                f = self.feed_data(ev[2], ev[3], ev[4], ev[5], out)
                if f is not None:
                    out.append(f)
                return out
        self._feed_event(ev, out)
        self._sync_at()
        return out

    def _feed_event(self, ev: StreamData | StreamGap | StreamEnd, out: list[Frame]) -> None:
        """``feed`` of anything but in-order bytes at ``_at``."""
        if self.finished:
            return
        if isinstance(ev, StreamEnd):
            out += self.finish()
            return
        if self._off is None:
            self._off = ev.offset
        end_buf = self._off + len(self.buf)
        if isinstance(ev, StreamData):
            data = ev.data
            off = ev.offset
            if off < end_buf:            # overlap with what we have: keep the first copy
                cut = end_buf - off
                if cut >= len(data):
                    return
                data = data[cut:]
                off = end_buf
            elif off > end_buf:          # a hole the reassembler did not report: treat as gap
                out += self._gap(end_buf, off - end_buf, ev.index, ev.ts)
            self._last_index, self._last_ts = ev.index, ev.ts
            if not self.buf and self._synced and not self._drop:
                # whole frames straight out of this segment's bytes
                self._at = off
                f = self.feed_data(off, data, ev.ts, ev.index, out)
                if f is not None:
                    out.append(f)
                return
            if self._drop:
                k = min(self._drop, len(data))
                self._drop -= k
                self._skip("gap", k)
                data = data[k:]
                off += k
                self._off = off
                if not data:
                    return
            if not self.buf:
                self._off = off
                self._marks = []
            marks = self._marks
            assert isinstance(marks, list)      # set above, or bytes are buffered (see _marks)
            marks.append((off, ev.index, ev.ts))
            self.buf += data
            self._run(out)
        else:
            if ev.offset + ev.length <= end_buf:
                return
            start = max(ev.offset, end_buf)
            out += self._gap(start, ev.offset + ev.length - start, ev.index, ev.ts)

    def _gap(self, off: int, length: int, index: int, ts: float) -> list[Frame]:
        out: list[Frame] = []
        if self._drop:
            k = min(self._drop, length)
            self._drop -= k
            self._skip("gap", k)
            length -= k
            off += k
            if self._drop:
                self.buf.clear()
                self._off = off
                return out
            if length == 0:               # the gap ends exactly at the frame boundary
                self.buf.clear()
                self._marks = []
                self._off = off
                self._synced = True
                return out
        buf = self.buf
        # a frame in progress, or (scanning) the candidate the scan waits on, cut here: judged on
        # the bytes there are (after a lost segment, a capture cut by the snaplen has only such
        # candidates: each packet's frame head, then a gap)
        if len(buf) >= 4 and (self._synced or len(buf) - 4 >= _PARTIAL):
            r = self._decided if self._decided >= 0 else self._check(buf, 0, len(buf), True)
            if r is not None and r >= 0:
                size = r
                start = self._off
                assert start is not None    # bytes were buffered: an event set it
                data = bytes(buf[4:4 + size])
                frame_end = start + 4 + size
                last = self._where(start + 3 + len(data)) if data else self._where(start)
                out.append(self._emit(start, size, data, True, last))
                self.buf.clear()
                self._marks = []
                self._decided = -1
                gap_end = off + length
                if gap_end <= frame_end:
                    # in sync again at frame_end, after dropping the rest of this frame
                    self._skip("gap", length)
                    self._drop = frame_end - gap_end
                    self._off = gap_end
                    self._synced = True
                    return out
                # the frame ends inside the gap: next boundary unknown
                self._skip("gap", length)
                self._synced = False
                self._reason = "gap"
                self._off = gap_end
                return out
        # a cut header, or scanning: bytes held are lost; resync after the gap
        self._skip("gap", len(buf) + length)
        buf.clear()
        self._marks = []
        self._decided = -1
        self._off = off + length
        self._synced = False
        self._reason = "gap"
        return out

    def finish(self) -> list[Frame]:
        """End of the stream: a partial frame becomes a truncated Frame."""
        if self.finished:
            return []
        self.finished = True
        self._at = -1
        buf = self.buf
        if not buf:
            # most directions end with their last frame complete: nothing to cut
            if self._marks:
                self._marks = ()
            return []
        out: list[Frame] = []
        self._run(out, final=True)
        if buf:
            if self._synced and len(buf) >= 4:
                r = self._decided if self._decided >= 0 else self._check(buf, 0, len(buf), True)
                if r is not None and r >= 0:
                    assert self._off is not None    # bytes were buffered: an event set it
                    out.append(self._emit(self._off, r, bytes(buf[4:4 + r]), True))
                    buf.clear()
            if buf:
                self._skip("end of stream", len(buf))
                buf.clear()
        self._marks = ()
        return out


class Framers:
    """One ``Framer`` per (connection, direction) for a whole event stream.

    ``plausible_for(conn, direction)`` returns the header check for that direction (or
    None); it is called when the direction's first event arrives. Framers of a finished
    connection are dropped after their last frames; their skip counts are added to
    ``skipped``.
    """

    def __init__(self, plausible_for: Callable[[Conn, int], Plausible | None] | None = None,
                 max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, min_frame_size: int = 4) -> None:
        self.plausible_for = plausible_for
        self.max_frame_size = max_frame_size
        self.min_frame_size = min_frame_size
        self.skipped: dict[str, int] = {}
        self.frames = 0
        self.truncated_frames = 0
        self._framers: dict[tuple[int, int], Framer] = {}

    def framer(self, conn: Conn, direction: int) -> Framer:
        key = (conn.id, direction)
        fr = self._framers.get(key)
        if fr is None:
            pl = self.plausible_for(conn, direction) if self.plausible_for else None
            fr = Framer(conn, direction, pl, self.max_frame_size, self.min_frame_size)
            self._framers[key] = fr
        return fr

    def _retire(self, key: tuple[int, int], out: list[Frame]) -> None:
        fr = self._framers.pop(key, None)
        if fr is None:
            return
        out += fr.finish()
        for k, v in fr.skipped.items():
            self.skipped[k] = self.skipped.get(k, 0) + v
        self.frames += fr.frames
        self.truncated_frames += fr.truncated_frames

    def feed(self, ev: StreamEvent) -> list[Frame]:
        if isinstance(ev, StreamEnd):
            out: list[Frame] = []
            dirs = (0, 1) if ev.direction is None else (ev.direction,)
            for d in dirs:
                self._retire((ev.conn.id, d), out)
            return out
        fr = self._framers.get((ev[0].id, ev[1]))
        if fr is None:
            fr = self.framer(ev[0], ev[1])
        return fr.feed(ev)

    def finish(self) -> list[Frame]:
        out: list[Frame] = []
        for key in sorted(self._framers):
            self._retire(key, out)
        return out
