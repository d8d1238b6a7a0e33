"""The plain records that flow between the pipeline's stages.

source -> Packet -> (net, tcp, framing, pairing: the native core) -> Frame -> Exchange

The packet path runs in the native core (analyzer._core); the pipeline makes Conn, Frame and
Exchange of the core's records. Packet and Segment are the records of packets handed to or
read from the core, and of the tests' crafted segments.

Packet numbers are 1-based, as tshark counts them. Times are epoch seconds (float).
"""
from __future__ import annotations

import gc
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from dissectors.context import DecodeContext
from dissectors.field import ErrorsRoot, Field


def pace_collector(freeze: bool = True) -> None:
    """Run the cyclic garbage collector less often, for a process that handles exchanges.

    Every exchange makes a few dozen short-lived objects (frames, field trees, partition
    dicts) and none of them form reference cycles: the collector's default pace (a
    young-generation pass every 700 allocations) cost a third of a `stats` run scanning
    them. Cycles, should any form, are still collected, less often. ``freeze``: the
    objects alive now (the modules loaded) are never scanned again; a process that lives
    on after the run (a Spark worker, reused from task to task) does not freeze."""
    if freeze:
        gc.freeze()
    gc.set_threshold(50_000, 20, 20)


# Typing note: several records below have a public field named ``index`` (the packet
# number), which shadows ``tuple.index``. The code is right (a NamedTuple field may take
# any name that does not start with an underscore), but mypy reports every NamedTuple field
# named like a tuple method as an incompatible override of it; each such line carries a
# ``# type: ignore[assignment]`` for that reason alone.


class Packet(NamedTuple):
    index: int  # type: ignore[assignment]  # shadows tuple.index (typing note above); 1-based packet number in the capture
    ts: float           # epoch seconds
    linktype: int       # pcap LINKTYPE_* of the packet's interface
    data: bytes         # captured bytes (may be shorter than orig_len: snaplen)
    orig_len: int       # length on the wire


# a packet handed to the core (Pipeline.feed_packets): a plain tuple laid out as Packet, read
# by position; a Packet is one too
PacketRecord = tuple[int, float, int, bytes, int]


class Endpoint(NamedTuple):
    ip: str             # "127.0.0.1" or "::1"
    port: int

    def __str__(self) -> str:
        return f"[{self.ip}]:{self.port}" if ":" in self.ip else f"{self.ip}:{self.port}"


class Segment(NamedTuple):
    """One TCP segment, parsed with struct from a Packet."""
    src: Endpoint
    dst: Endpoint
    seq: int
    ack: int
    flags: int          # TCP flags byte (FIN=1, SYN=2, RST=4, PSH=8, ACK=16)
    payload: bytes      # captured payload bytes
    missing: int        # payload bytes on the wire but not captured (snaplen)
    ts: float
    index: int  # type: ignore[assignment]  # shadows tuple.index (typing note above); packet number


TCP_FIN, TCP_SYN, TCP_RST, TCP_PSH, TCP_ACK = 1, 2, 4, 8, 16


@dataclass(eq=False, slots=True)      # slotted: one per connection, last_ts set per packet
class Conn:
    """One TCP connection. ``id`` counts from 0 in order of first packet, like tshark's tcp.stream.

    ``a`` is the endpoint that sent the first packet seen (the SYN sender when the
    handshake was captured). Direction 0 is a->b, direction 1 is b->a. Which side is
    the Kafka client is decided later from the traffic (``client_dir``).
    """
    id: int
    a: Endpoint
    b: Endpoint
    syn_seen: bool = False
    client_dir: int | None = None       # set by pairing: the direction that carries requests
    protocol: str | None = None         # "kafka" | "kafka-legacy" | "tls" | None (undecided)
    # at its end, why it was taken as Kafka: "port 9092", "auto: 3 exchanges parsed and
    # answered"; or "unidentified" (not Kafka), "tls" (not decrypted); None before its end
    detection: str | None = None
    closed: str | None = None           # "fin" | "rst" | None
    first_ts: float = 0.0
    last_ts: float = 0.0                # the latest packet up to the connection's end
    closed_by: int | None = None        # direction that sent the first FIN or RST (None: not known)
    lost_from: int = 0                  # bit 1 << d: direction d had bytes the capture missed (lost segment)
    ended: bool = False                 # no more exchanges: its last is the one numbered last_seq
    last_seq: int = 0                   # Exchange.seq of its latest exchange
    text: tuple[int | None, str] | None = field(default=None, repr=False)   # str(): (client_dir, text)

    def endpoint(self, direction: int) -> Endpoint:
        """The sender of ``direction``."""
        return self.a if direction == 0 else self.b

    @property
    def client(self) -> Endpoint:
        return self.endpoint(self.client_dir or 0)

    @property
    def broker(self) -> Endpoint:
        return self.endpoint(1 - (self.client_dir or 0))

    def __str__(self) -> str:
        # (once per exchange in `read`'s lines and the rules: made again only when pairing
        # has told the client's side since)
        text = self.text
        if text is None or text[0] != self.client_dir:
            text = self.text = (self.client_dir, f"{self.client} -> {self.broker}")
        return text[1]


class Frame(NamedTuple):
    """One Kafka PDU (the bytes after its 4-byte size prefix), with where it came from.

    A NamedTuple, never changed once made: two are built per exchange, and
    ``tuple.__new__(Frame, (...))`` costs a fraction of a class instance's ``__init__``."""
    conn: Conn
    direction: int
    data: bytes
    size: int               # the size prefix (== len(data) unless truncated)
    first_index: int        # packet that carried its first byte
    last_index: int         # packet that completed it (tshark shows the PDU there)
    first_ts: float
    last_ts: float
    stream_offset: int      # stream offset of the size prefix
    truncated: bool = False # bytes missing inside the frame (gap/snaplen): data is partial


EXCHANGE_STATUSES = ("ok", "unanswered", "no_response_expected", "orphan_response", "malformed")


@dataclass(eq=False, slots=True)
class Exchange:
    """A request and its response (either may be missing), decoded.

    Slotted: one is built per exchange on the hot path (``analyzer.decoding.Decoder`` stores
    its slots without calling ``__init__``).

    Latency: ``request_time`` is the time of the packet that completed the request
    frame, ``response_time`` that of the packet that completed the response frame;
    ``latency_ms`` is their difference. ``response_first_time`` (first byte of the
    response) is kept too, for time-to-first-byte.
    """
    conn: Conn
    protocol: str                       # "kafka" | "kafka-legacy"
    api_key: int | None
    api_name: str
    api_version: int | None
    correlation_id: int | None
    client_id: str | None
    request: Frame | None
    response: Frame | None
    status: str                         # one of EXCHANGE_STATUSES
    request_tree: Field | None = None   # root Field: header + body
    response_tree: Field | None = None
    error_codes: list[str] = field(default_factory=list)   # names of non-zero error codes in the response
    partitions: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seq: int = 0                        # order of creation, for stable output

    @property
    def request_frame(self) -> int | None:
        return self.request.last_index if self.request else None

    @property
    def response_frame(self) -> int | None:
        return self.response.last_index if self.response else None

    @property
    def request_time(self) -> float | None:
        return self.request.last_ts if self.request else None

    @property
    def response_time(self) -> float | None:
        return self.response.last_ts if self.response else None

    @property
    def response_first_time(self) -> float | None:
        return self.response.first_ts if self.response else None

    @property
    def latency_ms(self) -> float | None:
        if self.request is None or self.response is None:
            return None
        return (self.response.last_ts - self.request.last_ts) * 1000.0

    @property
    def ttfb_ms(self) -> float | None:
        if self.request is None or self.response is None:
            return None
        return (self.response.first_ts - self.request.last_ts) * 1000.0

    @property
    def lean(self) -> bool:
        """Whether a tree of this exchange is a lean one (the core's figures walk,
        core/src/figures/: its root is an ``ErrorsRoot``), not the full decoder's."""
        return self.request_tree.__class__ is ErrorsRoot or self.response_tree.__class__ is ErrorsRoot

    def full_trees(self, ctx: DecodeContext) -> tuple[Field | None, Field | None]:
        """The request and response trees with every field: its own, or, where they are lean
        trees, its frames decoded again in ``ctx`` (whose counters then count that decoding,
        not the run's)."""
        req, resp = self.request_tree, self.response_tree
        if not self.lean or self.api_key is None or self.api_version is None:
            return req, resp
        from dissectors import kafka

        if self.request is not None and req.__class__ is ErrorsRoot:
            req = kafka.decode_request(self.request.data, ctx)
        if self.response is not None and resp.__class__ is ErrorsRoot:
            resp = kafka.decode_response(self.response.data, self.api_key, self.api_version, ctx)
        return req, resp
