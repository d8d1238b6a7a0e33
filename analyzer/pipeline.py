"""Wire the stages together: packets in, paired and decoded Exchanges out.

    capture / packets -> [core: net, tcp reassembly] -> stream events (in batches)
           -> framing.Framer (per connection direction) -> Frame
           -> pairing (this module) -> Exchange (+ field trees from dissectors)

The core (``analyzer._core``, the Rust crate in core/) reads the capture, parses link
layer, IP and TCP and reassembles each direction; it hands this module a list of
stream events per batch of packets. The same Pipeline object serves a capture file
(``Run``/``analyze_file``), a live interface (``feed_packets`` as packets arrive,
``expire`` for timeouts) and a Spark task.

Which side is the client: the SYN sender when the handshake was captured, else the
side that sends to one of the ``--port`` ports, else the side whose first frame is
a plausible request. Which protocol: ``--protocol`` or, on ``auto``, the first
client frame scored as a 0.8+ request header against a pre-0.8 request (see
``dissectors.legacy`` for the heuristic).

Pairing: 0.8+ by (connection, correlation_id); pre-0.8 by order (FIFO) since it has
no correlation id. Produce with acks=0 and pre-0.8 PRODUCE/MULTIPRODUCE expect no
response. After a SaslHandshake v0 exchange, the following frames on that
connection are raw SASL tokens with no Kafka header, paired by order.
"""
from __future__ import annotations

import struct
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NamedTuple

from analyzer._core import END_OF_CAPTURE, Capture, Stream, open_capture
from analyzer.framing import Framer
from analyzer.model import (
    Conn,
    Endpoint,
    Exchange,
    Frame,
    PacketRecord,
    StreamData,
    StreamGap,
)
from dissectors import digest, kafka, legacy
from dissectors.context import DecodeContext
from dissectors.field import Field
from dissectors.header import (
    MAX_PLAUSIBLE_API_KEY,
    RequestHeader,
    parse_request_header,
    plausible_request,
    read_uvarint,
    request_header,
    response_correlation_id,
    sane_request,
)
from dissectors.schema import APIS as _APIS
from dissectors.schema import api_name
from dissectors.summary import partitions_of
from dissectors.tls import looks_like_tls, parse_hello

_I16 = struct.Struct(">h")
_new = tuple.__new__
_obj_new = object.__new__

SASL_HANDSHAKE = 17
_API_NAMES: dict[int, str] = {}    # api_key (an int16) -> api_name(api_key), asked once per exchange
_BATCH = 2048              # packets the core reads per call of feed_capture
API_VERSIONS = 18


@dataclass
class Options:
    ports: tuple[int, ...] = (9092,)
    autodetect: bool = True
    protocol: str = "auto"            # auto | legacy | modern
    decode: str = "full"              # full | lite (digest trees: what stats reads) | none
    max_frame_size: int = 100 * 1024 * 1024
    unanswered_timeout: float | None = None
    tls_keylog: Any = None            # analyzer.tlsdecrypt.TlsKeyLog: decrypt TLS connections
    conn_ids_from_index: bool = False  # Conn.id = its first packet's number (a shard of a capture)
    share: tuple[int, int] | None = None  # (k, n): only the connections of share k of n (analyzer.shards)


@dataclass
class Summary:
    """Counts that account for every packet, frame and skipped byte."""
    packets: int = 0
    packets_skipped: Counter = field(default_factory=Counter)      # reason -> packets
    # every connection is one of these, counted when it ends (they add up to ``connections``)
    connections: int = 0
    kafka_connections: int = 0          # Kafka in clear text
    kafka_tls_connections: int = 0      # Kafka inside TLS, decrypted with --tls-keylog
    tls_connections: int = 0            # TLS not decrypted
    other_connections: int = 0          # bytes that are not Kafka
    empty_connections: int = 0          # no payload: a handshake, a lone ACK/FIN/RST
    request_frames: int = 0
    response_frames: int = 0
    exchanges: Counter = field(default_factory=Counter)            # status -> count
    truncated_frames: int = 0
    bytes_skipped: Counter = field(default_factory=Counter)        # reason -> bytes
    gaps: int = 0
    gap_bytes: int = 0
    notes: Counter = field(default_factory=Counter)                # anything else worth counting
    first_ts: float | None = None
    last_ts: float | None = None
    capture_warning: str | None = None
    tls: list[dict[str, Any]] = field(default_factory=list)            # one entry per TLS connection

    def to_json(self, ctx: DecodeContext | None = None) -> dict[str, Any]:
        d: dict[str, Any] = {
            "packets": self.packets,
            "packets_skipped": dict(self.packets_skipped),
            "connections": self.connections,
            "kafka_connections": self.kafka_connections,
            "kafka_tls_connections": self.kafka_tls_connections,
            "tls_connections": self.tls_connections,
            "other_connections": self.other_connections,
            "empty_connections": self.empty_connections,
            "request_frames": self.request_frames,
            "response_frames": self.response_frames,
            "exchanges": dict(self.exchanges),
            "truncated_frames": self.truncated_frames,
            "bytes_skipped": dict(self.bytes_skipped),
            "gaps": self.gaps,
            "gap_bytes": self.gap_bytes,
            "notes": dict(self.notes),
            "first_time": self.first_ts,
            "last_time": self.last_ts,
        }
        if self.capture_warning:
            d["capture_warning"] = self.capture_warning
        if self.tls:
            d["tls"] = self.tls
        if ctx is not None:
            d["malformed_fields"] = ctx.malformed
            d["cut_messages"] = ctx.cut
            d["crc_valid"] = ctx.crc_valid
            d["crc_invalid"] = ctx.crc_invalid
            d["limits_hit"] = dict(ctx.limits_hit)
        return d


class _Pending(NamedTuple):
    """A request waiting for its response (a tuple: one per request, built with _new)."""
    frame: Frame
    header: RequestHeader | None
    legacy_type: int | None = None
    tree: Field | None = None
    sasl_token: bool = False


class _ConnState:
    """Pairing state of one connection (made in ``Pipeline._state``)."""
    __slots__ = ("conn", "framers", "inflight", "reused", "fifo", "sasl_raw", "sasl_mechanism",
                 "ignored", "first_data_seen", "last_cid", "sasl_tokens_left", "tls_info", "tls", "tls_offsets",
                 "responses_only")
    conn: Conn
    framers: list[Framer | None]
    # correlation id -> the oldest request with it awaiting its response; later requests
    # reusing an id still in flight (rare) wait in ``reused`` in order, so that the common
    # case keeps one tuple per request and no queue
    inflight: dict[int, _Pending]
    reused: dict[int, deque[_Pending]] | None
    fifo: deque[_Pending]                   # legacy requests / raw SASL tokens, in order
    sasl_raw: bool                          # after SaslHandshake v0: raw SASL tokens
    sasl_mechanism: str | None
    ignored: str | None                     # reason the connection is not analysed
    first_data_seen: list[bool]
    last_cid: int | None                    # correlation id of the latest request
    sasl_tokens_left: int                   # raw SASL client tokens still expected (-1: unknown)
    tls_info: dict[str, Any] | None
    tls: Any                                # TlsStreamDecryptor with --tls-keylog
    tls_offsets: list[int] | None           # plaintext stream offsets per direction
    responses_only: bool                    # Kafka responses seen before any request (mid-stream)


class Pipeline:
    def __init__(self, options: Options | None = None, ctx: DecodeContext | None = None) -> None:
        self.options = options or Options()
        self.ctx = ctx or DecodeContext(max_frame_size=self.options.max_frame_size)
        if self.options.decode == "lite":
            # records give counts, sizes, codecs and CRCs without per-record Fields (the
            # digest's memo, made under another setting, goes)
            if self.ctx.decode_records:
                self.ctx.decode_records = False
                self.ctx.digest_memo = None
        self.summary = Summary()
        o = self.options
        # the packet path (core/): link layer, IP, TCP reassembly
        self.stream = Stream(ports=list(o.ports), autodetect=o.autodetect, ids_from_index=o.conn_ids_from_index,
                             share=o.share)
        self._conn_objs: dict[int, Conn] = {}      # the connections the core has open, by id
        self._conns: dict[int, _ConnState] = {}
        self._ports = frozenset(o.ports)
        self._seq = 0
        self._now = 0.0
        # the packet the core was handling when it made the event being handled (END_OF_CAPTURE
        # at the end of the capture): the clock of a share's topic-id learnings (analyzer.shards)
        self.packet_now = 0

    # -- public ---------------------------------------------------------------
    def feed(self, packet: PacketRecord) -> list[Exchange]:
        """One packet (a ``Packet`` or a tuple laid out as one). Prefer ``feed_packets``."""
        return list(self.feed_packets([packet]))

    def feed_packets(self, packets: list[PacketRecord]) -> Iterator[Exchange]:
        """Packets handed in (live capture, Spark), in one batch: the exchanges they complete,
        each as soon as it is complete (its connection as of the packet that completed it).
        The packets are counted in the summary at once."""
        events = self.stream.feed(packets)
        self._sync()
        return self._exchanges(events)

    def feed_capture(self, cap: Capture, tick: Callable[[], None] | None = None) -> Iterator[Exchange]:
        """Every packet of ``cap`` through the core, a batch at a time: the exchanges, in
        order, as ``feed_packets`` gives them. ``tick()`` is called after each batch. The
        summary counts a batch's packets before its exchanges are yielded."""
        stream = self.stream
        while (events := stream.feed_capture(cap, _BATCH)) is not None:
            # (counted before the exchanges go: `read` shows times since the first packet)
            self._sync()
            yield from self._exchanges(events)
            if tick is not None:
                tick()

    def _sync(self) -> None:
        """The summary's packet counts from the core's."""
        s = self.summary
        stream = self.stream
        s.packets = stream.packets
        s.first_ts = stream.first_ts
        s.last_ts = stream.last_ts
        s.packets_skipped = Counter(stream.skips)
        if s.last_ts is not None:
            self._now = s.last_ts

    def _exchanges(self, events: list[tuple[Any, ...]]) -> Iterator[Exchange]:
        """The core's stream events (see core/src/py.rs) through connections, framers and
        pairing: each exchange as soon as the event that completes it is handled."""
        out: list[Exchange] = []
        conns = self._conn_objs
        for ev in events:
            kind = ev[0]
            if kind == 0:           # stream bytes
                _k, cid, d, off, data, ts, index, now, now_ts = ev
                conn = conns[cid]
                self.packet_now = now
                if now < END_OF_CAPTURE:
                    conn.last_ts = now_ts
                self._data(conn, d, off, data, ts, index, out)
            elif kind == 3:         # a new connection
                _k, cid, a_ip, a_port, b_ip, b_port, ts = ev
                conns[cid] = Conn(cid, _new(Endpoint, (a_ip, a_port)), _new(Endpoint, (b_ip, b_port)),
                                  first_ts=ts, last_ts=ts)
                continue
            elif kind == 4:         # its state changed
                conn = conns[ev[1]]
                _k, _cid, conn.syn_seen, conn.closed, conn.closed_by, conn.lost_from, conn.last_ts = ev
                continue
            elif kind == 1:         # bytes never captured
                _k, cid, d, off, length, ts, index, reason, now, now_ts = ev
                conn = conns[cid]
                self.packet_now = now
                if now < END_OF_CAPTURE:
                    conn.last_ts = now_ts
                self._gap(StreamGap(conn, d, off, length, ts, index, reason), out)
            else:                   # a direction or the connection ended
                _k, cid, d, reason, ts, index, self.packet_now = ev
                self._end(conns[cid] if d is not None else conns.pop(cid), d, reason, out)
            if out:
                yield from out
                out.clear()

    def expire(self, now: float) -> list[Exchange]:
        """Requests older than ``options.unanswered_timeout`` become unanswered exchanges."""
        timeout = self.options.unanswered_timeout
        out: list[Exchange] = []
        if timeout is None:
            return out
        p: _Pending | None
        for st in list(self._conns.values()):
            for cid, p in list(st.inflight.items()):
                while p is not None and now - p.frame.last_ts > timeout:
                    self._pop_pending(st, cid)
                    out.append(self._unanswered(st, p, f"no response after {timeout:g} s"))
                    p = st.inflight.get(cid)
            while st.fifo and now - st.fifo[0].frame.last_ts > timeout:
                out.append(self._unanswered(st, st.fifo.popleft(), f"no response after {timeout:g} s"))
        return out

    def finish(self) -> list[Exchange]:
        out: list[Exchange] = []
        out.extend(self._exchanges(self.stream.finish(self._now)))
        for st in list(self._conns.values()):
            self._close(st, "end of capture", out)
        self._conns.clear()
        return out

    # -- stream events --------------------------------------------------------
    def _state(self, conn: Conn) -> _ConnState:
        """The pairing state of a connection, made at its first event."""
        st = self._conns.get(conn.id)
        if st is not None:
            return st
        # one per connection (the slots stored here cost less than a class call with __init__)
        st = _obj_new(_ConnState)
        st.conn = conn
        st.framers = [None, None]
        st.inflight = {}
        st.fifo = deque()
        st.first_data_seen = [False, False]
        st.reused = st.sasl_mechanism = st.ignored = st.last_cid = st.tls_info = st.tls = st.tls_offsets = None
        st.sasl_raw = st.responses_only = False
        st.sasl_tokens_left = -1
        self._conns[conn.id] = st
        self.summary.connections += 1
        if conn.syn_seen:
            conn.client_dir = 0
        else:
            ports = self._ports
            if conn.b.port in ports and conn.a.port not in ports:
                conn.client_dir = 0
            elif conn.a.port in ports and conn.b.port not in ports:
                conn.client_dir = 1
        return st

    def _framer(self, st: _ConnState, d: int) -> Framer:
        fr = st.framers[d]
        if fr is None:
            # positional (plausible, max_frame_size, min_frame_size, peek): two per connection
            fr = st.framers[d] = Framer(st.conn, d, self._plausible_for(st, d), self.options.max_frame_size,
                                        0 if st.sasl_raw else 2, 64)
            fr.sane = partial(_sane_request_check, st, d, self._ports)
        return fr

    def _data(self, conn: Conn, d: int, off: int, data: bytes, ts: float, index: int,
              out: list[Exchange]) -> None:
        """Stream bytes of direction ``d`` at stream offset ``off`` (packet ``index``)."""
        st = self._state(conn)
        if st.ignored is not None:
            if not st.first_data_seen[d]:
                st.first_data_seen[d] = True
                if conn.protocol == "tls":
                    self._classify_first_bytes(st, d, data)
            self.summary.bytes_skipped[st.ignored] += len(data)
            return
        if not st.first_data_seen[d]:
            st.first_data_seen[d] = True
            # (a TLS record header has its major version, 3, second: Kafka bytes seldom do)
            if data[1:2] == b"\x03" and not self._classify_first_bytes(st, d, data):
                self.summary.bytes_skipped[st.ignored or "not kafka"] += len(data)
                self._drop_framers(st)
                return
        if st.tls is not None:
            plain = self._decrypt(st, StreamData(conn, d, off, data, ts, index))
            if plain is None:
                return
            off, data = plain.offset, plain.data
        # (a direction's first bytes too: a new framer cuts them straight, see Framer._at)
        frames: list[Frame] = []
        f = self._framer(st, d).feed_data(off, data, ts, index, frames)
        if f is not None:
            self._frame(st, f, out)
            return
        for frame in frames:
            self._frame(st, frame, out)

    def _gap(self, ev: StreamGap, out: list[Exchange]) -> None:
        """Bytes of a direction the capture does not have."""
        st = self._state(ev.conn)
        if st.ignored is not None:
            return
        self.summary.gaps += 1
        self.summary.gap_bytes += ev.length
        if st.tls is not None:
            self._decrypt(st, ev)       # (the decryptor notes the gap; no plaintext comes of it)
            return
        for frame in self._framer(st, ev.direction).feed(ev):
            self._frame(st, frame, out)

    def _end(self, conn: Conn, d: int | None, reason: str, out: list[Exchange]) -> None:
        """Direction ``d`` (None: the whole connection) ended."""
        st = self._state(conn)
        if d is None:
            self._close(st, reason, out)
            del self._conns[conn.id]
            return
        fr = st.framers[d]
        # a direction mostly ends at a frame boundary with nothing held or skipped: then
        # there is nothing to finish (no more bytes come for it; _close drops it)
        if fr is not None and (fr.buf or fr.skipped or fr.over_max_frames) and st.ignored is None:
            for frame in fr.finish():
                self._frame(st, frame, out)
            if fr.skipped or fr.over_max_frames:
                self._collect_skipped(fr)

    def _classify_first_bytes(self, st: _ConnState, d: int, data: bytes) -> bool:
        """Spot TLS and obviously non-Kafka traffic from the first bytes of a direction."""
        if looks_like_tls(data):
            info = parse_hello(data)
            if st.tls_info is None:
                entry: dict[str, Any] = {"conn": st.conn.id, "client": None, "broker": None}
                self.summary.tls.append(entry)
                st.tls_info = entry
                if self.options.tls_keylog is not None:
                    from analyzer.tlsdecrypt import TlsStreamDecryptor
                    st.tls = TlsStreamDecryptor(self.options.tls_keylog)
                    entry["decryption"] = st.tls.status
                else:
                    st.conn.protocol = "tls"
            entry = st.tls_info
            if info.get("hello") == "client":
                st.conn.client_dir = d
                self._set_checks(st)        # the framers' checks follow the client side
                entry["client"], entry["broker"] = str(st.conn.endpoint(d)), str(st.conn.endpoint(1 - d))
                entry["sni"] = info.get("sni")
                entry["offered"] = info.get("offered")
                entry.setdefault("version", info.get("version"))
            elif info.get("hello") == "server":
                entry["version"] = info.get("version")
                if entry["client"] is None:
                    entry["client"], entry["broker"] = str(st.conn.endpoint(1 - d)), str(st.conn.endpoint(d))
            if st.tls is not None:
                return True
            st.ignored = "tls (not decrypted)"
            return False
        return True

    def _decrypt(self, st: _ConnState, ev: StreamData | StreamGap) -> StreamData | None:
        """TLS bytes in, the Kafka bytes they carry out (``--tls-keylog``)."""
        tls = st.tls
        d = ev.direction
        from_client = d == (st.conn.client_dir if st.conn.client_dir is not None else 0)
        if isinstance(ev, StreamGap):
            tls.gap(d, from_client)
            plain = b""
        else:
            plain = tls.feed(d, ev.data, from_client)
        entry = st.tls_info
        assert entry is not None        # set with st.tls (_classify_first_bytes)
        entry["decryption"] = tls.status
        if tls.version:
            entry["version"] = tls.version
        if getattr(tls, "cipher_suite", None):
            entry["cipher_suite"] = tls.cipher_suite
        if getattr(tls, "detail", None):
            entry["detail"] = tls.detail
        if not plain:
            return None
        offsets = st.tls_offsets
        if offsets is None:
            offsets = st.tls_offsets = [0, 0]
        off = offsets[d]
        offsets[d] = off + len(plain)
        return StreamData(ev.conn, d, off, plain, ev.ts, ev.index)

    @staticmethod
    def _min_frame(st: _ConnState, n: int, d: int | None = None) -> None:
        """Smallest frame size the framers (or direction ``d``'s) accept (2: a pre-0.8
        error-only response; 0 in SASL raw mode)."""
        for i, fr in enumerate(st.framers):
            if fr is not None and d in (None, i):
                fr.min_frame_size = n

    def _drop_framers(self, st: _ConnState) -> None:
        """A connection found not to carry Kafka: what its framers held is skipped, not framed."""
        for d in (0, 1):
            fr = st.framers[d]
            if fr is not None:
                self._collect_skipped(fr)
                st.framers[d] = None

    def _plausible_for(self, st: _ConnState, d: int) -> Callable[[bytes], RequestHeader | _Pending | bool]:
        """The framer's check of direction ``d`` (asked for every frame), for the connection's
        state now: once it carries 0.8+ Kafka outside raw SASL with its client side known, the
        request side's check is ``request_header`` (``plausible_request`` of the peek, called
        with one argument) and the response side's the lookup of the request it answers,
        without the tests that lead there (_set_checks gives the framers their new check
        whenever that state changes). A request header parsed
        here, or the request a response answers, is returned: the framer keeps it on the frame
        (Frame.peeked) for _frame."""
        conn = st.conn
        client_dir = conn.client_dir
        if client_dir is not None and not st.sasl_raw and (d == client_dir or not _tokens_waiting(st)):
            protocol = conn.protocol
            if protocol == "kafka":
                return request_header if d == client_dir else partial(_response_check, st)
            if protocol is None and d == client_dir:
                # the client side of a connection whose first request is still to come (most
                # connections' first framer): no closure, the first request decides the rest
                return _undecided_request

        def plausible(data: bytes) -> RequestHeader | _Pending | bool:
            client_dir = conn.client_dir
            if st.sasl_raw or (client_dir != d and _tokens_waiting(st)):
                return True
            protocol = conn.protocol
            if client_dir is None or client_dir == d:
                if protocol == "kafka-legacy":
                    return legacy.legacy_request_plausible(data)
                # (a peek: plausible_request of a prefix; before the first request, a pre-0.8
                # request is plausible too)
                h = _undecided_request(data) if protocol is None else request_header(data)
                if h or client_dir == d:
                    return h
            # a response
            if protocol == "kafka-legacy":
                return legacy.legacy_response_plausible(data, st.fifo[0].legacy_type if st.fifo else None)
            return _response_check(st, data)
        return plausible

    def _set_checks(self, st: _ConnState) -> None:
        """Give the framers the checks for the connection's new state (see _plausible_for)."""
        framers = st.framers
        for d in (0, 1):
            fr = framers[d]
            if fr is not None:
                fr.plausible = self._plausible_for(st, d)

    def _collect_skipped(self, fr: Framer) -> None:
        for reason, n in fr.skipped.items():
            if n:
                self.summary.bytes_skipped[reason] += n
        fr.skipped.clear()
        over = getattr(fr, "over_max_frames", 0)
        if over:
            self.ctx.limits_hit["max_frame_size"] = self.ctx.limits_hit.get("max_frame_size", 0) + over
            fr.over_max_frames = 0

    # -- frames ---------------------------------------------------------------
    def _frame(self, st: _ConnState, frame: Frame, out: list[Exchange]) -> None:
        """Pair one frame: a 0.8+ request waits for its response (by correlation id); a
        response makes the exchange with its request. One function for both (the requests
        and responses of every exchange come through here; pre-0.8 and odd frames branch off)."""
        # the common frames first, told by what the framer's check returned for them (the
        # check ran on the connection's state as this frame's segment found it):
        # - the request a response answers: a response of a 0.8+ connection whose client
        #   side is known (the check looks requests up only then), cut whole from a segment;
        # - a request header: a whole frame from the client side once the protocol is known.
        peeked = frame.peeked
        if peeked.__class__ is _Pending:
            self.summary.response_frames += 1
            response = True
        else:
            conn = st.conn
            if peeked.__class__ is RequestHeader and conn.protocol == "kafka" and frame.direction == conn.client_dir:
                self.summary.request_frames += 1
                response = False
            else:
                kind = self._frame_kind(st, frame, out)
                if kind is None:
                    return
                response = kind
        if response:
            if st.fifo and st.fifo[0].sasl_token:
                self._sasl_token_response(st, frame, out)
                return
            inflight = st.inflight
            cid: int | None                 # None: a response too short to carry one
            if peeked.__class__ is _Pending and not st.reused:
                # the framer's check found the request waiting for this response (the common
                # case); None if an earlier response of this segment took it (ids reused while
                # in flight, rare, keep their order through _pop_pending)
                held = peeked[1]
                assert held is not None     # a request in inflight is a 0.8+ one: its header parsed
                p = inflight.pop(cid := held[2], None)
            else:
                cid = response_correlation_id(frame.data)
                p = self._pop_pending(st, cid)      # None (too short) is no key either
            if p is None:
                self._new_exchange(
                    st, protocol="kafka", api_key=None, api_name="Unknown", api_version=None,
                    correlation_id=cid, client_id=None, request=None, response=frame,
                    status="orphan_response", response_tree=self._orphan_tree(frame), out=out,
                    note="response whose request was not captured")
                return
            req, h = p[0], p[1]
            assert h is not None            # a request in inflight is a 0.8+ one: its header parsed
            if inflight and min(x.frame.last_index for x in inflight.values()) < req.last_index:
                self.summary.notes["responses out of request order"] += 1
            api_key = h[0]
            name = _API_NAMES.get(api_key)
            if name is None:
                name = _API_NAMES[api_key] = api_name(api_key)
            ex = self._new_exchange(st, "kafka", api_key, name, h[1], h[2], h[3], req, frame, "ok",
                                    None, None, h, out)
            if api_key == SASL_HANDSHAKE:
                self._after_sasl_handshake(st, ex)
            return
        # a request
        if st.sasl_raw and self._sasl_token_request(st, frame):
            return
        h = peeked
        if h.__class__ is not RequestHeader:     # not parsed by the framer's check
            h = parse_request_header(frame.data, partial=frame.truncated)
            if h is None:
                # an API or version newer than the schema (framed by the framer's looser
                # check): its header as far as it parses
                h = sane_request(frame.data, frame.size)
            if h is None:
                tree = Field("request", "Request", None, 0, len(frame.data))
                tree.mark_malformed(f"not a request header ({len(frame.data)} bytes)", self.ctx)
                self._new_exchange(
                    st, protocol="kafka", api_key=None, api_name="Unknown", api_version=None,
                    correlation_id=None, client_id=None, request=frame, response=None, status="malformed",
                    request_tree=tree, out=out)
                return
        cid = h[2]
        if h[0] == 0 and self._acks(frame.data, h) == 0:
            self._new_exchange(st, "kafka", 0, "Produce", h[1], cid, h[3], frame, None, "no_response_expected",
                               None, None, h, out)
            return
        st.last_cid = cid
        p = _new(_Pending, (frame, h, None, None, False))
        if st.inflight.setdefault(cid, p) is not p:
            if st.reused is None:
                st.reused = {}
            q = st.reused.get(cid)
            if q is None:
                q = st.reused[cid] = deque()
            q.append(p)
            self.summary.notes["correlation id reused while in flight"] += 1

    def _frame_kind(self, st: _ConnState, frame: Frame, out: list[Exchange]) -> bool | None:
        """A frame that is not one of the common two (see _frame): counted, the client side
        and protocol decided if not yet; True for a 0.8+ response, False for a 0.8+ request,
        None for a pre-0.8 frame (handled here)."""
        conn = st.conn
        if frame.truncated:
            self.summary.truncated_frames += 1
        client_dir = conn.client_dir
        if client_dir is None:
            if _modern(frame) or legacy.legacy_request_score(frame.data) >= 50:
                client_dir = conn.client_dir = frame.direction
            else:
                # a response before any request (mid-stream start): the other side is the client
                client_dir = conn.client_dir = 1 - frame.direction
        if frame.direction == client_dir:
            self.summary.request_frames += 1
            protocol = conn.protocol
            if protocol is None:
                # the connection's first request decides its protocol (once per connection:
                # decided here, where the frame is, without another call): --protocol, or on
                # auto the frame scored as a 0.8+ request header against a pre-0.8 request
                forced = self.options.protocol
                if forced == "legacy":
                    protocol = "kafka-legacy"
                elif forced == "modern":
                    protocol = "kafka"
                else:
                    score = legacy.legacy_request_score(frame.data)
                    if _modern(frame) and score < 80:
                        protocol = "kafka"
                    elif score >= 50:
                        protocol = "kafka-legacy"
                    else:
                        protocol = "kafka"
                conn.protocol = protocol
                self._set_checks(st)
            if protocol == "kafka-legacy":
                self._legacy_request(st, frame, out)
                return None
            return False
        self.summary.response_frames += 1
        if conn.protocol == "kafka-legacy":
            self._legacy_response(st, frame, out)
            return None
        if conn.protocol is None:
            st.responses_only = True
        return True

    def _sasl_token_request(self, st: _ConnState, frame: Frame) -> bool:
        """A client frame after SaslHandshake v0: True if it is a raw SASL token (queued for
        the broker's), False once authentication is over (Kafka requests again)."""
        if st.sasl_tokens_left == 0 or (st.sasl_tokens_left < 0 and plausible_request(frame.data)):
            # authentication is over: Kafka requests again; the broker's side stays raw until
            # it has answered the tokens still waiting (a client may send its next request
            # with its last token, before the broker's answer)
            st.sasl_raw = False
            self._min_frame(st, 2, frame.direction if _tokens_waiting(st) else None)
            self._set_checks(st)
            return False
        st.sasl_tokens_left -= 1
        tree = kafka.decode_sasl_token(frame.data, self.ctx, st.sasl_mechanism, True)
        st.fifo.append(_Pending(frame, None, tree=tree, sasl_token=True))
        return True

    def _sasl_token_response(self, st: _ConnState, frame: Frame, out: list[Exchange]) -> None:
        p = st.fifo.popleft()
        if not st.sasl_raw and not st.fifo:
            # the last token the client sent before its Kafka requests: the broker's side
            # answers those now
            self._min_frame(st, 2)
            self._set_checks(st)
        tree = kafka.decode_sasl_token(frame.data, self.ctx, st.sasl_mechanism, False)
        self._new_exchange(
            st, protocol="kafka", api_key=None, api_name="SaslToken", api_version=None,
            correlation_id=None, client_id=None, request=p.frame, response=frame, status="ok",
            request_tree=p.tree, response_tree=tree, out=out)

    def _new_exchange(self, st: _ConnState, protocol: str, api_key: int | None, api_name: str,
                      api_version: int | None, correlation_id: int | None, client_id: str | None,
                      request: Frame | None, response: Frame | None, status: str,
                      request_tree: Field | None = None, response_tree: Field | None = None,
                      header: RequestHeader | None = None, out: list[Exchange] | None = None,
                      note: str | None = None) -> Exchange:
        """The Exchange; emitted (counted and appended) to ``out`` if given. ``note`` is its
        first note. With the ``header`` of a 0.8+ request, its trees (and the response's) are
        decoded here as the options ask, and its error codes and partitions are found.

        A tree whose decoding counted malformed fields says how many (_count_bad) and makes an
        emitted ``ok`` exchange malformed, unless its frame was cut short in the capture."""
        # once per exchange, one call: decoding, finishing and emitting where it is built
        error_codes: list[str] | None = None
        partitions: list[dict[str, Any]] | None = None
        if header is not None:
            mode = self.options.decode
            if mode != "none":
                ctx = self.ctx
                before = ctx.malformed
                if mode == "lite":
                    # (a frame cut by the capture, or of an API or version newer than the table,
                    # gets the full decoder, which knows its declared size and keeps a body it
                    # cannot read raw: a cut rather than malformed, no error codes read from a
                    # layout that is not its own; such exchanges are few)
                    api = _APIS.get(api_key)    # type: ignore[arg-type]
                    full = api is None or api_version > api.max_version   # type: ignore[operator]
                    if full or request.truncated:   # type: ignore[union-attr]
                        request_tree = kafka.decode_request(request.data, ctx,   # type: ignore[union-attr]
                                                            request.size if request.truncated else None)  # type: ignore[union-attr]
                    else:
                        request_tree = digest.digest_request(request.data, header[4], ctx)   # type: ignore[union-attr]
                    mid = ctx.malformed
                    if response is not None:
                        if full:
                            response_tree = kafka.decode_response(response.data, api_key, api_version, ctx,  # type: ignore[arg-type]
                                                                  response.size if response.truncated else None)
                        elif response.truncated:
                            response_tree = kafka.decode_response(response.data, api_key, api_version, ctx,  # type: ignore[arg-type]
                                                                  response.size)
                        else:
                            response_tree = digest.digest_response(response.data, api_key, api_version, ctx)  # type: ignore[arg-type]
                else:
                    # (a frame cut by the capture is decoded as far as it goes: its declared size)
                    request_tree = kafka.decode_request(request.data, ctx,   # type: ignore[union-attr]
                                                        request.size if request.truncated else None)  # type: ignore[union-attr]
                    mid = ctx.malformed
                    if response is not None:
                        response_tree = kafka.decode_response(response.data, api_key, api_version, ctx,  # type: ignore[arg-type]
                                                              response.size if response.truncated else None)
                # (only _count_bad marks a tree: what it marks here is known without reading it)
                if mid != before:
                    _count_bad(request_tree, mid - before)
                    if status == "ok" and out is not None and not request.truncated:   # type: ignore[union-attr]
                        status = "malformed"
                if ctx.malformed != mid:
                    _count_bad(response_tree, ctx.malformed - mid)   # type: ignore[arg-type]
                    if status == "ok" and out is not None and not response.truncated:   # type: ignore[union-attr]
                        status = "malformed"
                if response_tree is not None:
                    error_codes = kafka.error_codes(response_tree)
                if (api_key == 0 or api_key == 1) and (request_tree is not None or response_tree is not None):
                    partitions = partitions_of(api_key, request_tree, response_tree, self.ctx.topic_names)
        elif status == "ok" and out is not None:
            # trees decoded by the caller (an ok exchange has both frames; the tests ordered so
            # that the common tree without extra costs least)
            t = request_tree
            if t is not None and t.extra and t.extra.get("malformed") and not request.truncated:   # type: ignore[union-attr]
                status = "malformed"
            else:
                t = response_tree
                if t is not None and t.extra and t.extra.get("malformed") and not response.truncated:   # type: ignore[union-attr]
                    status = "malformed"
        self._seq = seq = self._seq + 1
        # the slots stored here cost less than Exchange's 16-argument __init__
        ex = _obj_new(Exchange)
        ex.conn = st.conn
        ex.protocol = protocol
        ex.api_key = api_key
        ex.api_name = api_name
        ex.api_version = api_version
        ex.correlation_id = correlation_id
        ex.client_id = client_id
        ex.request = request
        ex.response = response
        ex.status = status
        ex.request_tree = request_tree
        ex.response_tree = response_tree
        ex.error_codes = [] if error_codes is None else error_codes
        ex.partitions = [] if partitions is None else partitions
        ex.notes = notes = [] if note is None else [note]
        ex.seq = seq
        if out is not None:
            if (request is not None and request.truncated) or (response is not None and response.truncated):
                for fr in (request, response):
                    if fr is not None and fr.truncated:
                        notes.append(f"frame {fr.last_index}: {len(fr.data)} of {fr.size} bytes captured")
            self.summary.exchanges[status] += 1
            out.append(ex)
        return ex

    @staticmethod
    def _pop_pending(st: _ConnState, cid: int | None) -> _Pending | None:
        """The oldest request with correlation id ``cid`` awaiting its response, taken out."""
        if cid is None:         # (a response too short to carry an id: None is no key)
            return None
        inflight = st.inflight
        p = inflight.get(cid)
        if p is not None:
            reused = st.reused
            if reused and (later := reused.get(cid)):
                inflight[cid] = later.popleft()     # the next one keeps the id's place
                if not later:
                    del reused[cid]
            else:
                del inflight[cid]
        return p

    @staticmethod
    def _acks(data: bytes, h: RequestHeader) -> int | None:
        """Produce acks, read straight from the body (v3+ has transactional_id first)."""
        pos = h.header_len
        try:
            if h.api_version >= 3:
                if h.api_version >= 9:  # compact nullable string
                    n, pos = read_uvarint(data, pos, len(data))
                    pos += max(n - 1, 0)
                else:
                    (n,) = _I16.unpack_from(data, pos)
                    pos += 2 + max(n, 0)
            return _I16.unpack_from(data, pos)[0]
        except (struct.error, ValueError):
            return None

    def _orphan_tree(self, frame: Frame) -> Field:
        tree = Field("response", "Response", None, 0, len(frame.data))
        hdr = tree.add(Field("header", "ResponseHeader", None, 0, min(4, len(frame.data))))
        cid = response_correlation_id(frame.data)
        if cid is not None:
            hdr.add(Field("correlation_id", "int32", cid, 0, 4))
        tree.add(Field("body", "bytes", None, 4, max(len(frame.data) - 4, 0),
                       notes=["request not captured: API unknown, body not decoded"]))
        return tree

    def _after_sasl_handshake(self, st: _ConnState, ex: Exchange) -> None:
        body = ex.request_tree.child("body") if ex.request_tree else None
        if body is not None:
            st.sasl_mechanism = body.get("mechanism")
        if ex.api_version == 0 and not ex.error_codes:
            st.sasl_raw = True
            mech = (st.sasl_mechanism or "").upper()
            st.sasl_tokens_left = 1 if mech == "PLAIN" else 2 if mech.startswith("SCRAM-") else -1
            self._min_frame(st, 0)      # raw SASL tokens may be empty
            self._set_checks(st)

    # -- pre-0.8 --------------------------------------------------------------
    def _legacy_request(self, st: _ConnState, frame: Frame, out: list[Exchange]) -> None:
        before = self.ctx.malformed
        tree = _count_bad(legacy.decode_legacy_request(frame.data, self.ctx), self.ctx.malformed - before)
        hdr = tree.child("header")
        rtype = hdr.get("request_type") if hdr is not None else None
        name = legacy.LEGACY_API_NAMES.get(rtype, f"UNKNOWN({rtype})") if isinstance(rtype, int) else "UNKNOWN"
        if isinstance(rtype, int) and legacy.legacy_expects_response(rtype):
            st.fifo.append(_Pending(frame, None, legacy_type=rtype, tree=tree))
            return
        ex = self._new_exchange(
            st, protocol="kafka-legacy", api_key=rtype if isinstance(rtype, int) else None, api_name=name,
            api_version=None, correlation_id=None, client_id=None, request=frame, response=None,
            status="no_response_expected" if isinstance(rtype, int) and rtype in legacy.LEGACY_API_NAMES
            else "malformed", request_tree=tree, out=out)
        ex.partitions = legacy.legacy_partitions(tree, True)

    def _legacy_response(self, st: _ConnState, frame: Frame, out: list[Exchange]) -> None:
        if not st.fifo:
            self._new_exchange(
                st, protocol="kafka-legacy", api_key=None, api_name="UNKNOWN", api_version=None,
                correlation_id=None, client_id=None, request=None, response=frame, status="orphan_response",
                out=out, note="response whose request was not captured")
            return
        p = st.fifo.popleft()
        rtype = p.legacy_type if p.legacy_type is not None else -1
        before = self.ctx.malformed
        tree = _count_bad(legacy.decode_legacy_response(frame.data, rtype, self.ctx, p.tree),
                          self.ctx.malformed - before)
        ex = self._new_exchange(
            st, protocol="kafka-legacy", api_key=rtype, api_name=legacy.LEGACY_API_NAMES.get(rtype, "UNKNOWN"),
            api_version=None, correlation_id=None, client_id=None, request=p.frame, response=frame, status="ok",
            request_tree=p.tree, response_tree=tree, out=out)
        ex.error_codes = legacy.legacy_error_codes(tree)
        ex.partitions = legacy.legacy_partitions(tree, False)

    # -- endings --------------------------------------------------------------
    def _unanswered(self, st: _ConnState, p: _Pending, why: str) -> Exchange:
        h = p.header
        legacy_conn = st.conn.protocol == "kafka-legacy"
        if p.sasl_token:
            ex = self._new_exchange(
                st, protocol="kafka", api_key=None, api_name="SaslToken", api_version=None, correlation_id=None,
                client_id=None, request=p.frame, response=None, status="unanswered", request_tree=p.tree)
        elif legacy_conn:
            rtype = p.legacy_type
            ex = self._new_exchange(
                st, protocol="kafka-legacy", api_key=rtype,
                api_name=legacy.LEGACY_API_NAMES.get(rtype, "UNKNOWN") if rtype is not None else "UNKNOWN",
                api_version=None, correlation_id=None, client_id=None, request=p.frame, response=None,
                status="unanswered", request_tree=p.tree)
        else:
            assert h is not None
            ex = self._new_exchange(st, "kafka", h.api_key, api_name(h.api_key), h.api_version, h.correlation_id,
                                    h.client_id, p.frame, None, "unanswered", None, None, h)
        ex.notes.append(why)
        self.summary.exchanges[ex.status] += 1
        return ex

    def _close(self, st: _ConnState, reason: str, out: list[Exchange]) -> None:
        framers = st.framers
        for fr in framers:
            # a direction that ended with its FIN was finished and collected then, or held
            # nothing (finish() cuts nothing from an empty buffer)
            if fr is not None and (fr.buf or fr.skipped or fr.over_max_frames):
                if st.ignored is None:
                    for frame in fr.finish():
                        self._frame(st, frame, out)
                self._collect_skipped(fr)
        framers[0] = framers[1] = None
        conn = st.conn
        if conn.closed is None and (reason == "fin" or reason == "rst"):
            conn.closed = reason
        if st.inflight or st.fifo:
            why = "connection ended (end of capture)" if reason == "end of capture" else f"connection closed ({reason})"
            reused = st.reused or {}
            pending: list[_Pending] = []
            for cid, p in st.inflight.items():
                pending.append(p)
                pending += reused.get(cid, ())
            pending += st.fifo
            pending.sort(key=lambda p: p.frame.last_index)
            for p in pending:
                out.append(self._unanswered(st, p, why))
            st.inflight.clear()
            st.reused = None
            st.fifo.clear()
        self._count_conn(st)

    def _count_conn(self, st: _ConnState) -> None:
        """The one kind an ended connection counts as in the summary."""
        s = self.summary
        if st.conn.protocol in ("kafka", "kafka-legacy") or st.responses_only:
            if st.tls_info is not None:
                s.kafka_tls_connections += 1
            else:
                s.kafka_connections += 1
        elif st.tls_info is not None:
            s.tls_connections += 1
        elif st.first_data_seen[0] or st.first_data_seen[1]:
            s.other_connections += 1
        else:
            s.empty_connections += 1


def _response_check(st: _ConnState, data: bytes) -> _Pending | bool:
    """The framer's check of a 0.8+ response (see Pipeline._plausible_for): the request it
    answers, or whether an orphan response is plausible."""
    cid = response_correlation_id(data)
    if cid is None or cid < 0:
        return False
    p = st.inflight.get(cid)
    if p is not None:
        return p
    # an orphan (its request not captured, e.g. a mid-stream start) is plausible
    # while no request was seen yet, or when its id is close to the ones in use
    last = st.last_cid
    return last is None or abs(cid - last) <= 4096


def _sane_request_check(st: _ConnState, d: int, ports: frozenset[int], data: bytes, size: int) -> bool:
    """The framer's looser check of a frame at a known boundary (Framer.sane): on the client
    side of a 0.8+ connection outside raw SASL, a request header of any API key and version,
    so that one newer than the schema is framed and paired. A connection's first request
    (its protocol not decided yet) to a port that is no ``--port`` needs an API key in the
    plausible range (0-127) too, lest some other length-prefixed protocol pass for Kafka."""
    conn = st.conn
    if st.sasl_raw or conn.client_dir != d:
        return False
    protocol = conn.protocol
    if protocol != "kafka" and protocol is not None:
        return False
    h = sane_request(data, size)
    if h is None:
        return False
    return protocol is not None or conn.endpoint(1 - d).port in ports or h.api_key <= MAX_PLAUSIBLE_API_KEY


def _undecided_request(data: bytes) -> RequestHeader | bool:
    """The client side's framer check before the protocol is decided (see
    Pipeline._plausible_for): a 0.8+ request header, else whether a pre-0.8 request is
    plausible."""
    return request_header(data) or legacy.legacy_request_plausible(data)


def _tokens_waiting(st: _ConnState) -> bool:
    """Raw SASL tokens of the client wait for the broker's (queued first in ``fifo``)."""
    return bool(st.fifo) and st.fifo[0].sasl_token


def _modern(frame: Frame) -> bool:
    """``plausible_request`` of the frame, or the header the framer's check parsed (which
    it returns only for a plausible request: that of the whole frame too)."""
    return frame.peeked.__class__ is RequestHeader or bool(plausible_request(frame.data, prefix=frame.truncated))


def _count_bad(tree: Field, n: int) -> Field:
    """Remember on the root how many malformed notes decoding it produced."""
    if n:
        if tree.extra is None:
            tree.extra = {}
        tree.extra["malformed"] = n
    return tree


class Run:
    """Analyse one capture file: ``for ex in Run(path, options): ...``; then ``run.summary``."""

    def __init__(self, path: str, options: Options | None = None, ctx: DecodeContext | None = None,
                 progress: Callable[[int, int], None] | None = None) -> None:
        self.path = path
        self.pipeline = Pipeline(options, ctx)
        self.progress = progress

    @property
    def summary(self) -> Summary:
        return self.pipeline.summary

    @property
    def ctx(self) -> DecodeContext:
        return self.pipeline.ctx

    def __iter__(self) -> Iterator[Exchange]:
        pipe = self.pipeline
        with open_capture(self.path) as cap:
            progress = self.progress
            size = cap.size
            tick = None
            if progress is not None:
                def tick() -> None:
                    progress(cap.bytes_read(), size)
            yield from pipe.feed_capture(cap, tick)
            if cap.truncated:
                pipe.summary.capture_warning = cap.truncated
            for what, n in cap.counters.items():
                if n:
                    pipe.summary.notes[what] += n
            if progress is not None:
                progress(size, size)
        yield from pipe.finish()


def analyze_file(path: str, options: Options | None = None, ctx: DecodeContext | None = None) -> Iterator[Exchange]:
    return iter(Run(path, options, ctx))
