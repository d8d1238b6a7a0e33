"""Wire the stages together: packets in, paired and decoded Exchanges out.

    capture / packets -> [core: net, tcp reassembly, Kafka framing, pairing, lean walk]
           -> records (in batches) -> Summary (every packet, frame and skipped byte)
                                   -> connections (Conn)
                                   -> Decoder (analyzer.decoding): one Exchange per record
                                   -> the exchange tables' rows (Options.tables)

The core (``analyzer._core``, the Rust crate in core/) reads the capture, parses link
layer, IP and TCP, reassembles each direction, cuts it into Kafka frames and pairs
requests with responses (see core/src/pair.rs for the rules: which side is the
client, which protocol, correlation ids, pre-0.8 FIFO, acks=0, raw SASL tokens). It
hands this module a list of records per batch of packets (core/src/py/mod.rs): the
connections, which this module keeps; the exchanges, each of which the run's
``Decoder`` makes an Exchange with field trees as ``Options.decode`` asks, and which this
module counts in the summary and yields in order. The same Pipeline object serves a
capture file (``Run``/``analyze_file``), a live interface (``feed_packets`` as packets
arrive, ``expire`` for timeouts) and a Spark task.

With ``Options.tables`` the core builds the rows of the exchanges its walk reads to their
end (a lean decode) as Arrow record batches, handed to ``Pipeline.on_tables``, and hands
only the other exchanges as records; what those it took count is added to the summary.

A connection whose first bytes are a TLS record is handed to the front as stream events
(``analyzer.handover``): with ``--tls-keylog`` it is decrypted and the plaintext goes back
to the core's framing (``Stream.plain``); without, its bytes are counted as skipped.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from analyzer._core import END_OF_CAPTURE, UNIDENTIFIED, Capture, HeaderTable, Stream, open_capture
from analyzer.decoding import Decoder, shared
from analyzer.handover import TLS_SKIPPED as TLS_SKIPPED  # (the summary's name, shared by the sinks)
from analyzer.handover import Handover
from analyzer.model import Conn, Endpoint, Exchange, PacketRecord
from analyzer.runs import Decode
from dissectors.context import Counters, DecodeContext
from dissectors.header import api_table
from dissectors.schema import APIS

if TYPE_CHECKING:
    from analyzer._core import PacketReader  # (Linux only)

_new = tuple.__new__

_BATCH = 2048              # packets the core reads per call of feed_capture
_TABLE_ROWS = 16384        # exchanges per record batch of the core's tables (Options.tables)


@dataclass
class Options:
    ports: tuple[int, ...] = (9092,)
    autodetect: bool = True
    protocol: str = "auto"            # auto | legacy | modern
    decode: Decode = Decode.FULL      # (or its value: "lite", ...): see analyzer.decoding
    # larger size prefixes mean a desynchronised stream (the core's framing; each one met
    # is counted in the run's ``limits_hit`` as ``max_frame_size``)
    max_frame_size: int = 100 * 1024 * 1024
    unanswered_timeout: float | None = None
    tls_keylog: Any = None            # analyzer.tlsdecrypt.TlsKeyLog: decrypt TLS connections
    conn_ids_from_index: bool = False  # Conn.id = its first packet's number (a shard of a capture)
    share: tuple[int, int] | None = None  # (k, n): only the connections of share k of n (analyzer.shards)
    # the capture's name in the exchange tables: the core builds the rows of the exchanges its
    # walk reads (a lean decode), handed to Pipeline.on_tables, and yields only the others;
    # the exchanges it tables of the API keys ``hand`` go to Pipeline.on_tabled too (those of
    # ``hand_failed`` when unanswered or answered with an error code), and the topic ids the
    # tabled answers name are learnt as they come
    tables: str | None = None
    hand: frozenset[int] = frozenset()
    hand_failed: frozenset[int] = frozenset()


# the connections found by auto-detection that a summary lists one by one
AUTO_LISTED = 50


def _by_conn(a: dict[str, Any]) -> int:
    return int(a["conn"])


def merge_connections(a: dict[str, Any] | None, b: dict[str, Any]) -> dict[str, Any]:
    """Two ``Summary.connections_json`` blocks added (``a`` None: ``b``): ``b``'s connections
    listed after ``a``'s (another capture, or a later share renumbered and sorted after)."""
    if a is None:
        return b
    detection = Counter(a["detection"])
    detection.update(b["detection"])
    return {"detection": dict(detection), "auto_detected": (a["auto_detected"] + b["auto_detected"])[:AUTO_LISTED],
            "unidentified": a["unidentified"] + b["unidentified"],
            "unidentified_bytes": a["unidentified_bytes"] + b["unidentified_bytes"],
            "tls_not_decrypted": a["tls_not_decrypted"] + b["tls_not_decrypted"],
            "tls_not_decrypted_bytes": a["tls_not_decrypted_bytes"] + b["tls_not_decrypted_bytes"]}


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
    linktypes: list[int] = field(default_factory=list)  # the capture's interfaces' link types (read to its end)
    fine_times: bool = False            # its times finer than microseconds (read to its end)
    tls: list[dict[str, Any]] = field(default_factory=list)            # one entry per TLS connection
    # why each Kafka connection was taken as Kafka: "port 9092" or "auto" -> connections
    detection: Counter = field(default_factory=Counter)
    # the AUTO_LISTED first connections (by id) found by auto-detection, with their evidence
    auto_detected: list[dict[str, Any]] = field(default_factory=list)

    def found(self, conn: Conn | None, detection: str) -> None:
        """A Kafka connection ended: count why it was taken as Kafka."""
        auto = detection.startswith("auto")
        self.detection["auto" if auto else detection] += 1
        if auto and conn is not None:
            listed = self.auto_detected
            listed.append({"conn": conn.id, "client": str(conn.client), "broker": str(conn.broker),
                           "evidence": detection.removeprefix("auto: ")})
            if len(listed) > 2 * AUTO_LISTED:
                listed.sort(key=_by_conn)
                del listed[AUTO_LISTED:]

    def auto_listed(self) -> list[dict[str, Any]]:
        """The connections found by auto-detection that are listed: the AUTO_LISTED first by id."""
        return sorted(self.auto_detected, key=_by_conn)[:AUTO_LISTED]

    def connections_json(self) -> dict[str, Any]:
        """Why connections were taken as Kafka, and those that were not: ``detection``
        (``port 9092`` or ``auto`` -> Kafka connections), ``auto_detected`` (the first ones
        found by auto-detection, with their evidence), ``unidentified`` connections and their
        bytes, TLS connections not decrypted and their bytes (``stats`` reports it;
        ``merge_connections`` adds two)."""
        return {"detection": dict(self.detection), "auto_detected": self.auto_listed(),
                "unidentified": self.other_connections,
                "unidentified_bytes": self.bytes_skipped.get(UNIDENTIFIED, 0),
                "tls_not_decrypted": self.tls_connections,
                "tls_not_decrypted_bytes": self.bytes_skipped.get(TLS_SKIPPED, 0)}

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
            "detection": dict(self.detection),
            "auto_detected": self.auto_listed(),
        }
        if self.capture_warning:
            d["capture_warning"] = self.capture_warning
        if self.tls:
            d["tls"] = self.tls
        if ctx is not None:
            d["malformed_fields"] = ctx.counts.malformed
            d["cut_messages"] = ctx.counts.cut
            d["crc_valid"] = ctx.counts.crc_valid
            d["crc_invalid"] = ctx.counts.crc_invalid
            d["limits_hit"] = dict(ctx.counts.limits_hit)
        return d



# the core's additive counts (Stream.kafka_counts) -> the summary's fields they add to
_COUNTED = ("connections", "request_frames", "response_frames", "truncated_frames", "gaps", "gap_bytes")


class Pipeline:
    """One run's flow: packets to the core's ``Stream``, its records to the summary, the
    connections and the ``Decoder``, Exchanges out (and the tables' rows, Options.tables)."""

    def __init__(self, options: Options | None = None, ctx: DecodeContext | None = None) -> None:
        self.options = options or Options()
        self.ctx = ctx or DecodeContext()
        # how each exchange record becomes an Exchange with its trees, as options.decode asks
        self.decoder = Decoder(self.ctx, self.options.decode)
        self.summary = Summary()
        self.stream = self.new_stream()
        self._taken: dict[str, Any] = {}           # the core's tables' counts as last added
        if self.options.tables is not None:
            if self.decoder.figures is None:
                raise ValueError("the core builds tables with a lean decode")
            # (the exchanges handed on read topic names: the ids the tables' answers name are told)
            hand, failed = sorted(self.options.hand), sorted(self.options.hand_failed)
            self.stream.keep_tables(self.options.tables, hand, bool(hand or failed), failed)
        self._conn_objs: dict[int, Conn] = {}      # the connections the core has open, by id
        self.handover = Handover(self.summary, lambda cid, client_dir: self.stream.ignore(cid, client_dir),
                                 self.options.tls_keylog)
        self._counted: dict[str, Any] = {}         # the core's counts as last added to the summary
        self._now = 0.0
        # the packet the core was handling when it made the record being handled (END_OF_CAPTURE
        # at the end of the capture): the clock of a share's topic-id learnings (analyzer.shards)
        self.packet_now = 0
        # called with each connection as it ends, after its last exchange (the connections table)
        self.on_closed: Callable[[Conn], None] | None = None
        # with Options.tables: called with the record batches of ``exchanges``, ``partitions``
        # and ``batches`` the core built (``analyzer._core.ArrowBatch``, read through the Arrow
        # PyCapsule interface), every _TABLE_ROWS exchanges and at the end
        self.on_tables: Callable[[Any, Any, Any], None] | None = None
        # with Options.tables and hand: called with each exchange of those API keys whose rows the
        # core built (it is not yielded: its rows are in the tables already)
        self.on_tabled: Callable[[Exchange], None] | None = None
        self._scratch = Counters()                 # what their decoding counts (the tables counted it)

    def new_stream(self, **limits: Any) -> Stream:
        """The packet path (core/) for the options: link layer, IP, TCP reassembly, Kafka
        framing and pairing; ``limits`` are the reassembler's (``max_buffer``...)."""
        o = self.options
        return Stream(ports=list(o.ports), autodetect=o.autodetect, ids_from_index=o.conn_ids_from_index,
                      share=o.share, apis=shared(("api_table",), lambda: HeaderTable(api_table(), list(APIS.values()))),
                      protocol=o.protocol, max_frame_size=o.max_frame_size, figures=self.decoder.figures, **limits)

    # -- public ---------------------------------------------------------------
    def feed(self, packet: PacketRecord) -> list[Exchange]:
        """One packet (a ``Packet`` or a tuple laid out as one). Prefer ``feed_packets``."""
        return list(self.feed_packets([packet]))

    def feed_packets(self, packets: list[PacketRecord]) -> Iterator[Exchange]:
        """Packets handed in (live capture), in one batch: the exchanges they complete,
        each as soon as it is complete (its connection as of the packet that completed it).
        The packets are counted in the summary at once."""
        records = self.stream.feed(packets)
        self._sync()
        return self._exchanges(records)

    def feed_batch(self, batch: tuple[bytes, bytes, bytes, bytes, bytes, bytes]) -> Iterator[Exchange]:
        """A connection's packets as the Spark job's shuffle carries them (the columns of
        ``analyzer._core.ConnBatcher``), fed by the core without a Python object per
        packet: the exchanges they complete, as ``feed_packets`` gives them."""
        records = self.stream.feed_batch(*batch)
        self._sync()
        return self._exchanges(records)

    def feed_reader(self, reader: PacketReader, linktype: int, first_index: int, max_packets: int,
                    max_bytes: int) -> tuple[int, Iterator[Exchange]]:
        """The packets queued on a live capture's socket (``reader``), read and fed by the core
        without a Python object per packet, numbered from ``first_index``: how many, and the
        exchanges they complete, as ``feed_packets`` gives them."""
        n, records = self.stream.feed_reader(reader, linktype, first_index, max_packets, max_bytes)
        if not n:
            return 0, iter(())
        self._sync()
        return n, self._exchanges(records)

    def feed_capture(self, cap: Capture, tick: Callable[[], None] | None = None) -> Iterator[Exchange]:
        """Every packet of ``cap`` through the core, a batch at a time: the exchanges, in
        order, as ``feed_packets`` gives them. ``tick()`` is called after each batch. The
        summary counts a batch's packets before its exchanges are yielded."""
        stream = self.stream
        while (records := stream.feed_capture(cap, _BATCH)) is not None:
            # (counted before the exchanges go: `read` shows times since the first packet)
            self._sync()
            yield from self._exchanges(records)
            if tick is not None:
                tick()

    def expire(self, now: float) -> list[Exchange]:
        """Requests older than ``options.unanswered_timeout`` become unanswered exchanges."""
        timeout = self.options.unanswered_timeout
        if timeout is None:
            return []
        return list(self._exchanges(self.stream.expire(now, timeout)))

    def finish(self) -> list[Exchange]:
        out = list(self._exchanges(self.stream.finish(self._now)))
        for cid in self.handover.open_ids():
            out += self._exchanges(self.stream.end(cid, None, "end of capture", END_OF_CAPTURE))
        self._sync()
        if self.options.tables is not None:
            self._hand_tables()
        return out

    def _sync(self) -> None:
        """The summary's counts from the core's: packets, and what framing and pairing added."""
        s = self.summary
        stream = self.stream
        s.packets = stream.packets
        s.first_ts = stream.first_ts
        s.last_ts = stream.last_ts
        s.packets_skipped = Counter(stream.skips)
        if s.last_ts is not None:
            self._now = s.last_ts
        # (the summary's counters take additions of the front's too: the core's are added as deltas)
        counts = stream.kafka_counts
        seen = self._counted
        for name in _COUNTED:
            n = counts[name]
            setattr(s, name, getattr(s, name) + n - seen.get(name, 0))
        for name, target in (("bytes_skipped", s.bytes_skipped), ("notes", s.notes)):
            before = seen.get(name, {})
            for k, n in counts[name].items():
                if n != before.get(k, 0):
                    target[k] += n - before.get(k, 0)
        over = counts["over_max_frames"] - seen.get("over_max_frames", 0)
        if over:
            limits = self.ctx.counts.limits_hit
            limits["max_frame_size"] = limits.get("max_frame_size", 0) + over
        self._counted = counts
        if self.options.tables is not None:
            self._sync_tables()
            if self.stream.table_rows >= _TABLE_ROWS:
                self._hand_tables()

    def _sync_tables(self) -> None:
        """What the exchanges the core's tables took add to the summary and the counters."""
        taken = self.stream.tables_taken
        before = self._taken or {"statuses": {}, "limits": {}}
        for status, n in taken["statuses"].items():
            if n != before["statuses"].get(status, 0):
                self.summary.exchanges[status] += n - before["statuses"].get(status, 0)
        counts = self.ctx.counts
        for name in ("malformed", "crc_valid", "crc_invalid", "trailing"):
            n = taken[name] - before.get(name, 0)
            if n:
                setattr(counts, name, getattr(counts, name) + n)
        limits = counts.limits_hit
        for name, n in taken["limits"].items():
            if n != before["limits"].get(name, 0):
                limits[name] = limits.get(name, 0) + n - before["limits"].get(name, 0)
        self._taken = taken

    def _hand_tables(self) -> None:
        """The rows the core built since the last call, to ``on_tables``."""
        if self.on_tables is not None and self.stream.table_rows:
            self.on_tables(*self.stream.take_tables())

    def _exchanges(self, records: list[tuple[Any, ...]]) -> Iterator[Exchange]:
        """The core's records (see core/src/py/mod.rs): connections, exchanges to decode, and the
        stream events of the connections handed to the front; each exchange as soon as the
        record that completes it is handled."""
        out: list[Exchange] = []
        conns = self._conn_objs
        for r in records:
            kind = r[0]
            if kind == 5:           # an exchange: its connection as it completed, then its trees
                conn = conns[r[1]]
                self.packet_now = r[2]
                conn.client_dir = r[12]
                conn.protocol = r[13]
                conn.last_ts = r[14]
                ex = self.decoder.exchange(conn, r)
                self.summary.exchanges[ex.status] += 1
                out.append(ex)
            elif kind == 8:         # a topic id an answer the tables have named
                self.packet_now = r[3]
                self.ctx.topic_names[r[1]] = r[2]
                continue
            elif kind == 7:         # an exchange the tables have, handed too (Options.hand)
                conn = conns[r[1]]
                self.packet_now = r[2]
                conn.client_dir = r[12]
                conn.protocol = r[13]
                conn.last_ts = r[14]
                ctx = self.ctx
                counts, ctx.counts = ctx.counts, self._scratch
                try:
                    ex = self.decoder.exchange(conn, r)
                finally:
                    ctx.counts = counts
                if self.on_tabled is not None:
                    self.on_tabled(ex)
            elif kind == 3:         # a new connection
                _k, cid, a_ip, a_port, b_ip, b_port, ts = r
                conns[cid] = Conn(cid, _new(Endpoint, (a_ip, a_port)), _new(Endpoint, (b_ip, b_port)),
                                  first_ts=ts, last_ts=ts)
                continue
            elif kind == 4:         # its state changed
                conn = conns[r[1]]
                _k, _cid, conn.syn_seen, conn.closed, conn.closed_by, conn.lost_from, conn.last_ts = r
                continue
            elif kind == 6:         # it ended, after its last exchanges
                self._closed(r)
                continue
            elif kind == 0:         # bytes of a handed connection
                _k, cid, d, off, data, ts, index, now, now_ts = r
                conn = conns[cid]
                self.packet_now = now
                if now < END_OF_CAPTURE:
                    conn.last_ts = now_ts
                fed = self.handover.data(conn, d, off, data)
                if fed is not None:
                    out += self._exchanges(self.stream.plain(cid, d, fed[0], fed[1], ts, index, now,
                                                             conn.client_dir))
            elif kind == 1:         # bytes of a handed connection never captured
                _k, cid, d, off, length, ts, index, reason, now, now_ts = r
                conn = conns[cid]
                self.packet_now = now
                if now < END_OF_CAPTURE:
                    conn.last_ts = now_ts
                self.handover.gap(conn, d, length)
            else:                   # a handed connection's direction or the connection ended
                _k, cid, d, reason, ts, index, self.packet_now = r
                out += self._exchanges(self.stream.end(cid, d, reason, self.packet_now))
            if out:
                yield from out
                out.clear()

    def _closed(self, r: tuple[Any, ...]) -> None:
        """A connection ended: the one kind it counts as in the summary."""
        _k, cid, protocol, client_dir, responses_only, any_data, _handed, detection, last_ts = r
        conn = self._conn_objs.pop(cid, None)
        if conn is not None:
            if last_ts is not None:     # (told by the exchanges the core's tables took)
                conn.last_ts = last_ts
            conn.protocol = protocol
            conn.client_dir = client_dir
            conn.ended = True
            conn.detection = detection
            if self.on_closed is not None:
                self.on_closed(conn)
        h = self.handover.closed(cid)
        tls_info = h.tls_info if h is not None else None
        s = self.summary
        if protocol in ("kafka", "kafka-legacy") or responses_only:
            if tls_info is not None:
                s.kafka_tls_connections += 1
            else:
                s.kafka_connections += 1
            s.found(conn, detection)
        elif tls_info is not None:
            s.tls_connections += 1
        elif any_data or (h is not None and any(h.first_data_seen)):
            s.other_connections += 1
        else:
            s.empty_connections += 1


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
            pipe.summary.linktypes = list(cap.linktypes)
            pipe.summary.fine_times = cap.fine_times
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
