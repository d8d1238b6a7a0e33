"""Rules that find client and broker bugs in a stream of Exchanges (``kafkawire-sniff check``).

The rules consume :class:`analyzer.model.Exchange` objects and their Field trees, never
raw bytes, and do no I/O. Feed every exchange of a capture to :meth:`Checker.add` (in
the pipeline's completion order), then call :meth:`Checker.finish` for the findings.

State is compact (no Exchange or Field is kept) and picklable, and two checkers can be
combined with :meth:`Checker.merge`. Most rules look at one connection at a time; they
are exact whenever all exchanges of a connection go to the same checker. Two rules need
a global view, because what they follow spans connections:

- ``producer-sequence`` / ``sequence-error-response``: an idempotent producer's batches
  for one partition may move to another connection (leader change, reconnect);
- ``rebalance-storm`` and :meth:`Checker.timeline`: group members talk to the
  coordinator over their own connections.

A Spark job can therefore run one Checker per group of connections, ship the checkers
(or just their state) to the driver, ``merge`` them and ``finish`` once.
"""
from __future__ import annotations

import bisect
import re
from collections import Counter, OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from analyzer.model import Conn, Exchange
from analyzer.pipeline import TLS_SKIPPED, Summary
from analyzer.sinks.insights import InFlight, group_event, group_stories, rejoins_same_generation
from analyzer.sinks.insights import elements as _elements
from analyzer.sinks.insights import fetch_partitions as _fetch_partitions
from analyzer.sinks.insights import partition_number as _partition_number
from analyzer.sinks.insights import produce_partitions as _produce_partitions
from analyzer.sinks.insights import topic_name as _topic_name
from dissectors.field import MALFORMED, Field
from dissectors.field import body_of as _body
from dissectors.field import int_value as _int

try:  # the schema table may still be a placeholder: every use tolerates a missing API
    from dissectors.schema import APIS
except ImportError:  # pragma: no cover - contracts are in the repo
    APIS = {}

SEVERITIES = ("error", "warning", "info")
SEVERITY_RANK = {s: i for i, s in enumerate(SEVERITIES)}
MAX_LIST = 50               # frames / exchanges kept per finding (counts stay exact)
MAX_CORR_TRACKED = 1024     # correlation ids remembered per connection for the reuse rule
RETIRE_EVERY = 4096         # exchanges between two looks for connections that ended
MAX_GROUP_EVENTS = 200_000  # group timeline events kept in all
MAX_BATCHES = 2_000_000     # idempotent producer batches kept for the sequence rules (~150 B each)
INT32_SPAN = 1 << 31

# API keys the rules look at
PRODUCE, FETCH, OFFSET_COMMIT, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 0, 1, 8, 11, 12, 13, 14
SASL_HANDSHAKE, API_VERSIONS, SASL_AUTHENTICATE = 17, 18, 36
CONSUMER_GROUP_HEARTBEAT, SHARE_FETCH = 68, 78
GROUP_APIS = {JOIN_GROUP: "JoinGroup", SYNC_GROUP: "SyncGroup", HEARTBEAT: "Heartbeat",
              LEAVE_GROUP: "LeaveGroup", OFFSET_COMMIT: "OffsetCommit",
              CONSUMER_GROUP_HEARTBEAT: "ConsumerGroupHeartbeat"}
PRE_AUTH_APIS = {SASL_HANDSHAKE, API_VERSIONS, SASL_AUTHENTICATE}

# the few error codes the rules read from trees (Exchange.error_codes already carries names)
UNSUPPORTED_VERSION = 35
UNSUPPORTED_SASL_MECHANISM = 33
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
ERROR_NAMES = {
    UNSUPPORTED_SASL_MECHANISM: "UNSUPPORTED_SASL_MECHANISM",
    UNSUPPORTED_VERSION: "UNSUPPORTED_VERSION",
    OUT_OF_ORDER_SEQUENCE_NUMBER: "OUT_OF_ORDER_SEQUENCE_NUMBER",
    DUPLICATE_SEQUENCE_NUMBER: "DUPLICATE_SEQUENCE_NUMBER",
    58: "SASL_AUTHENTICATION_FAILED",
    FETCH_SESSION_ID_NOT_FOUND: "FETCH_SESSION_ID_NOT_FOUND",
    INVALID_FETCH_SESSION_EPOCH: "INVALID_FETCH_SESSION_EPOCH",
}

# Error names that are part of normal protocol flow: reported as info.
FLOW_ERRORS = frozenset({
    "MEMBER_ID_REQUIRED", "REBALANCE_IN_PROGRESS", "NOT_COORDINATOR",
    "COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE", "LEADER_NOT_AVAILABLE",
    "NOT_LEADER_OR_FOLLOWER", "NOT_LEADER_FOR_PARTITION", "FENCED_LEADER_EPOCH",
    "UNKNOWN_LEADER_EPOCH", "OFFSET_NOT_AVAILABLE", "UNSTABLE_OFFSET_COMMIT",
    "CONCURRENT_TRANSACTIONS", "FETCH_SESSION_TOPIC_ID_ERROR",
})
# Retriable (per Kafka's error table) or recoverable by the client: reported as warning.
RETRIABLE_ERRORS = frozenset({
    "CORRUPT_MESSAGE", "UNKNOWN_TOPIC_OR_PARTITION", "REQUEST_TIMED_OUT", "REPLICA_NOT_AVAILABLE",
    "NETWORK_EXCEPTION", "NOT_ENOUGH_REPLICAS", "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
    "NOT_CONTROLLER", "KAFKA_STORAGE_ERROR", "FETCH_SESSION_ID_NOT_FOUND",
    "INVALID_FETCH_SESSION_EPOCH", "LISTENER_NOT_FOUND", "PREFERRED_LEADER_NOT_AVAILABLE",
    "ELIGIBLE_LEADERS_NOT_AVAILABLE", "THROTTLING_QUOTA_EXCEEDED", "UNKNOWN_TOPIC_ID",
    "INCONSISTENT_TOPIC_ID", "UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION", "FENCED_MEMBER_EPOCH",
    "UNRELEASED_INSTANCE_ID", "OFFSET_OUT_OF_RANGE", "STALE_MEMBER_EPOCH",
    "OFFSET_MOVED_TO_TIERED_STORAGE", "DUPLICATE_SEQUENCE_NUMBER", "GROUP_COORDINATOR_NOT_AVAILABLE",
})

_ACL = "grant the client's principal the ACL the request needs (kafka-acls), or give the client credentials that have it"
_REPLICAS = ("fewer in-sync replicas than the topic's min.insync.replicas: bring the lagging or stopped brokers back, "
             "or lower min.insync.replicas")
_TOO_LARGE = ("lower the producer's batch.size / max.request.size, or raise the topic's max.message.bytes (and the "
              "broker's message.max.bytes)")
_LEADER = "nothing, unless it persists: the client refreshes its metadata and retries on the new leader"
_COORDINATOR = "nothing, unless it persists: the client finds the coordinator again (FindCoordinator) and retries"
# What to do about an error in responses (error-response), where it is clear: by error name,
# or by API name and error name
ERROR_ADVICE: dict[str | tuple[str, str], str] = {
    "UNSUPPORTED_VERSION": "upgrade the client, or pin it to API versions the broker supports",
    "TOPIC_ALREADY_EXISTS": "nothing, if the client only makes sure the topic exists; else choose another name",
    "UNKNOWN_TOPIC_OR_PARTITION": "check the topic name: no such topic or partition on the cluster (create the "
                                  "topic first)",
    ("DeleteTopics", "UNKNOWN_TOPIC_OR_PARTITION"): "nothing, if the client only makes sure the topic is gone; else "
                                                    "check the topic name",
    "MEMBER_ID_REQUIRED": "nothing: the broker asks a new member to join again with the member id it gave it "
                          "(KIP-394), and the client does",
    "REBALANCE_IN_PROGRESS": "nothing, unless it repeats: the member joins the group again for the rebalance",
    "NOT_COORDINATOR": _COORDINATOR, "COORDINATOR_NOT_AVAILABLE": _COORDINATOR,
    "COORDINATOR_LOAD_IN_PROGRESS": _COORDINATOR,
    "NOT_LEADER_OR_FOLLOWER": _LEADER, "NOT_LEADER_FOR_PARTITION": _LEADER, "LEADER_NOT_AVAILABLE": _LEADER,
    "FENCED_LEADER_EPOCH": _LEADER,
    "TOPIC_AUTHORIZATION_FAILED": _ACL, "GROUP_AUTHORIZATION_FAILED": _ACL, "CLUSTER_AUTHORIZATION_FAILED": _ACL,
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED": _ACL,
    "NOT_ENOUGH_REPLICAS": _REPLICAS, "NOT_ENOUGH_REPLICAS_AFTER_APPEND": _REPLICAS,
    "MESSAGE_TOO_LARGE": _TOO_LARGE, "RECORD_LIST_TOO_LARGE": _TOO_LARGE,
    "INVALID_REQUIRED_ACKS": "set the producer's acks to 0, 1 or all (-1)",
    "INVALID_REPLICATION_FACTOR": "ask for a replication factor no larger than the number of brokers",
    "UNSUPPORTED_COMPRESSION_TYPE": "use a codec the broker takes at this API version (zstd needs Produce v7+ and "
                                    "Kafka 2.1+), or upgrade the client or the broker",
    "PRODUCER_FENCED": "another producer took over the transactional.id: give each producer instance its own id",
    "INVALID_PRODUCER_EPOCH": "another producer took over the transactional.id: give each producer instance its own id",
    "UNKNOWN_MEMBER_ID": "nothing, unless it repeats: the group removed the member (session.timeout.ms or "
                         "max.poll.interval.ms passed) and it joins again; raise those if it keeps happening",
    "ILLEGAL_GENERATION": "nothing, unless it repeats: the group rebalanced without the member, which joins again; "
                          "raise session.timeout.ms / max.poll.interval.ms if it keeps happening",
    "OFFSET_OUT_OF_RANGE": "the consumer's offset no longer exists (retention) or is not written yet: "
                           "auto.offset.reset decides where it restarts; keep retention longer than its lag",
}


class Rule(NamedTuple):
    id: str
    severity: str       # the highest severity the rule reports
    scope: str          # "connection" | "global"
    summary: str


RULES: dict[str, Rule] = {r.id: r for r in (
    Rule("unanswered-request", "error", "connection",
         "request without response when the capture ended (error if later requests were answered, "
         "unless the capture missed bytes of the broker's side)"),
    Rule("closed-in-flight", "error", "connection",
         "connection closed (FIN) or reset (RST) with requests still waiting for a response"),
    Rule("orphan-response", "error", "connection",
         "response to no request seen (info when the capture started mid-connection, or missed bytes "
         "of the client's side)"),
    Rule("error-response", "error", "connection",
         "responses carrying error codes, by API and error name (flow errors info, retriable warning); "
         "UNSUPPORTED_VERSION with the client, its version and the broker's advertised range"),
    Rule("throttled", "warning", "connection", "responses with throttle_time_ms > 0 (quota throttling)"),
    Rule("slow-exchange", "warning", "connection",
         "latency over --slow-ms, beyond what the request allows the broker to wait "
         "(Fetch max_wait_ms, JoinGroup rebalance timeout; SyncGroup not judged)"),
    Rule("version-unadvertised", "error", "connection",
         "request version outside the range the broker advertised in ApiVersions on that connection"),
    Rule("apiversions-fallback", "warning", "connection",
         "ApiVersions answered UNSUPPORTED_VERSION and the client retried lower (info), or did not (warning)"),
    Rule("kafka4-removed", "warning", "connection",
         "API version removed in Kafka 4.0 (KIP-896): the client breaks on upgrade (one finding per API and "
         "connection, its versions and clients listed)"),
    Rule("unknown-api", "warning", "connection",
         "request whose API key, or version, is newer than the schema knows: framed and paired, "
         "its body not judged (raw bytes, or the newest layout when it fits)"),
    Rule("producer-sequence", "error", "global",
         "idempotent producer base_sequence gap, reordering or re-send of an acknowledged batch, "
         "per producer id, epoch and partition"),
    Rule("sequence-error-response", "error", "global",
         "OUT_OF_ORDER_SEQUENCE_NUMBER / DUPLICATE_SEQUENCE_NUMBER tied to the batches that caused them"),
    Rule("crc-mismatch", "error", "connection",
         "record batch or message whose CRC does not match (said apart: control batches whose CRC field is 0, "
         "the data batches sound)"),
    Rule("malformed-frame", "error", "connection", "frame that does not decode against the schema"),
    Rule("truncated-frame", "info", "connection",
         "frame with bytes missing from the capture (snaplen or lost segment): not judged"),
    Rule("undecodable-records", "warning", "connection",
         "records that cannot be decoded (bad batch, unknown codec, decompression failure)"),
    Rule("correlation-reuse", "error", "connection", "correlation id reused while a request with it is in flight"),
    Rule("response-order", "error", "connection", "responses not in request order on a connection"),
    Rule("in-flight-idempotent", "error", "connection",
         "idempotent producer with more than 5 Produce requests in flight on one connection (the broker "
         "rejects the sixth with OUT_OF_ORDER_SEQUENCE_NUMBER)"),
    Rule("in-flight-reorder", "warning", "connection",
         "Produce responses out of request order while more than one Produce is in flight on a connection "
         "of a producer without idempotence (a retry can reorder its batches)"),
    Rule("fetch-session", "error", "connection",
         "fetch session (KIP-227) misuse: epoch not incrementing, session id 0 with epoch > 0, "
         "FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH"),
    Rule("rebalance-storm", "warning", "global",
         "more than --storm-rebalances group generations per minute, or JoinGroups by members that get back "
         "the generation they had (rejoining without the generation moving)"),
    Rule("sasl-before-auth", "error", "connection",
         "non-SASL request sent before SaslAuthenticate succeeded on a connection that did SaslHandshake"),
    Rule("sasl-mechanism", "error", "connection",
         "SASL mechanism the broker did not offer (UNSUPPORTED_SASL_MECHANISM); refused although the broker's "
         "own list names it: said to be a broker bug"),
    Rule("sasl-auth-failed", "error", "connection", "SaslAuthenticate answered with an error"),
    Rule("tls-not-decrypted", "warning", "global",
         "TLS connections not decrypted (no --tls-keylog, or no key for them): their Kafka traffic was not "
         "checked"),
)}
GLOBAL_RULES = frozenset(r.id for r in RULES.values() if r.scope == "global")


@dataclass
class Finding:
    rule: str
    severity: str                   # "error" | "warning" | "info"
    message: str                    # one line
    conn: str                       # "client -> broker" ("a, b" when several connections)
    frames: list[int] = field(default_factory=list)
    exchanges: list[dict[str, Any]] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    capture: str | None = None      # set by the command when several captures are checked
    advice: str | None = None       # what to do about it, one line (None: nothing clear to say)
    # what makes two findings on different connections the same story (with the rule and
    # severity), and the message as a template over details (see tell_once); not output
    story: tuple[Any, ...] | None = field(default=None, repr=False, compare=False)
    template: str = field(default="", repr=False, compare=False)
    advice_template: str = field(default="", repr=False, compare=False)
    # a finding told once for several connections: the finding of each (tell_once)
    occurrences: list[Finding] = field(default_factory=list, repr=False)

    def to_json(self) -> dict[str, Any]:
        """The finding as plain values, copied (its fields in order; no story or template)."""
        d: dict[str, Any] = {"rule": self.rule, "severity": self.severity, "message": self.message,
                             "advice": self.advice, "conn": self.conn, "frames": list(self.frames),
                             "exchanges": [dict(e) for e in self.exchanges], "details": _plain(self.details)}
        if self.capture is not None:
            d["capture"] = self.capture
        if self.occurrences:
            d["occurrences"] = [o.to_json() for o in self.occurrences]
        return d

    @property
    def first_frame(self) -> int:
        return min(self.frames) if self.frames else 0


def _plain(v: Any) -> Any:
    """A copy of nested dicts and lists (what ``dataclasses.asdict`` made of details)."""
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


_REF_KEYS = ("api_name", "api_version", "correlation_id", "request_frame", "response_frame")


def exchange_ref(ex: Exchange) -> dict[str, Any]:
    return {"api_name": ex.api_name, "api_version": ex.api_version,
            "correlation_id": ex.correlation_id, "request_frame": ex.request_frame,
            "response_frame": ex.response_frame}


def _frames_of(ex: Exchange) -> list[int]:
    return [f for f in (ex.request_frame, ex.response_frame) if f is not None]


def _req_key(ex: Exchange) -> tuple[int, int] | None:
    r = ex.request
    return (r.last_index, r.stream_offset) if r is not None else None


def _resp_key(ex: Exchange) -> tuple[int, int] | None:
    r = ex.response
    return (r.last_index, r.stream_offset) if r is not None else None


_ORPHAN_ERROR = "{count} response(s) matching no request on a connection seen from its start"
_ORPHAN_LOST = ("{count} response(s) to requests the capture missed (bytes of the client's side "
                "were not captured)")


def conn_key(conn: Conn) -> tuple[int, str, str, float]:
    return (conn.id, str(conn.a), str(conn.b), conn.first_ts)


def _vstr(ex: Exchange) -> str:
    return f"{ex.api_name} v{ex.api_version}" if ex.api_version is not None else ex.api_name


# -- accumulation -----------------------------------------------------------------

# details that add up when findings are merged or told once (else the first's value stays;
# max_* take the largest), and lists that unite (sorted)
_SUMMED = frozenset({"crc_batches", "control_crc_zero"})
_UNITED = frozenset({"api_versions", "client_ids"})


def _fold_details(into: dict[str, Any], other: dict[str, Any]) -> None:
    """``other``'s details folded into ``into``: max_* the largest, _SUMMED added, _UNITED united."""
    for k, v in other.items():
        if k.startswith("max_") and isinstance(v, (int, float)):
            into[k] = max(into.get(k, v), v)
        elif k in _SUMMED and isinstance(v, int):
            into[k] = into.get(k, 0) + v
        elif k in _UNITED and isinstance(v, list):
            into[k] = _united(into.get(k) or [], v)


def _united(a: list[Any], b: list[Any]) -> list[Any]:
    both = list(dict.fromkeys(a + b))
    try:
        return sorted(both)
    except TypeError:       # (None among strings)
        return sorted(both, key=lambda x: (x is None, str(x)))


@dataclass
class _Bucket:
    """Findings of one rule and key, counted; the message and the advice are templates over details."""
    rule: str
    severity: str
    conn: str
    template: str
    details: dict[str, Any]
    count: int = 0
    frames: list[int] = field(default_factory=list)
    exchanges: list[dict[str, Any]] = field(default_factory=list)
    first: float = 0.0
    advice: str = ""

    def add(self, frames: Iterable[int], ex: Exchange | dict[str, Any] | None, n: int = 1) -> None:
        self.count += n
        if len(self.frames) < MAX_LIST:
            for f in frames:
                if f not in self.frames:
                    self.frames.append(f)
        if ex is not None and len(self.exchanges) < MAX_LIST:
            self.exchanges.append(ex if isinstance(ex, dict) else exchange_ref(ex))

    def merge(self, other: _Bucket) -> None:
        self.count += other.count
        self.frames = (self.frames + [f for f in other.frames if f not in self.frames])[:MAX_LIST]
        self.exchanges = (self.exchanges + other.exchanges)[:MAX_LIST]
        _fold_details(self.details, other.details)

    def unite(self, key: str, value: Any) -> None:
        """Add ``value`` to the list detail ``key`` (one of _UNITED)."""
        have = self.details[key]
        if value not in have:
            self.details[key] = _united(have, [value])

    def finding(self, story: tuple[Any, ...] = ()) -> Finding:
        details = dict(self.details, count=self.count)
        frames = sorted(self.frames)
        if self.count > len(self.exchanges) and self.exchanges:
            details["listed"] = len(self.exchanges)
        return Finding(self.rule, self.severity, _render(self.template, details), self.conn,
                       frames, list(self.exchanges), details, advice=_render(self.advice, details) or None,
                       story=story, template=self.template, advice_template=self.advice)


@dataclass
class _Pending:
    """A request without response, kept until finish() can tell why."""
    ref: dict[str, Any]
    req_key: tuple[int, int]
    request_time: float
    allowance_ms: float


@dataclass(slots=True)
class _ConnState:
    """What the rules keep of one connection (one per connection seen: kept small; the
    lists are made when first needed)."""
    name: str
    syn_seen: bool = False
    closed: str | None = None
    closer: str | None = None       # "client" | "broker" | None (not known)
    last_ts: float = 0.0
    advertised: dict[int, tuple[int, int]] | None = None
    advertised_frame: int = 0
    fallback: list[dict[str, Any]] | None = None    # ApiVersions UNSUPPORTED_VERSION answers
    last_answered: tuple[int, int] | None = None
    last_produce: tuple[int, int] | None = None     # the latest-sent Produce answered so far
    corr: OrderedDict[int, list[tuple[tuple[int, int], tuple[int, int] | None, tuple[Any, ...]]]] | None = None
    unanswered: list[_Pending] | None = None
    fetch_sid: int = 0              # established fetch session id (0: none)
    fetch_next_epoch: int | None = None
    sasl_handshake_frame: int | None = None
    sasl_handshake_version: int | None = None
    sasl_ok_frame: int | None = None
    # the connection while it may have exchanges to come; then what finish() reads of it:
    # the sides whose bytes the capture lost, and which is the client
    conn: Conn | None = None
    lost_from: int = 0
    client_dir: int | None = None
    seq: int = 0                    # Exchange.seq of the latest exchange seen
    # orphan responses on a connection seen from its start: an error, unless the capture lost
    # bytes of the client's side (a request it missed), which finish() can tell
    orphans: _Bucket | None = None

    def lost(self) -> tuple[int, int]:
        """(lost_from, client direction) of the connection (see Conn)."""
        c = self.conn
        if c is not None:
            return c.lost_from, c.client_dir or 0
        return self.lost_from, self.client_dir or 0


class _Batch(NamedTuple):
    """One producer batch of a Produce request, for the global sequence rules."""
    producer_id: int
    epoch: int
    topic: str
    partition: int
    base_sequence: int
    record_count: int
    request_time: float
    request_frame: int
    order: int                      # tie-break within a request
    conn: str
    ref_t: tuple[Any, ...]          # (api_name, api_version, correlation_id, request_frame, response_frame)
    error: str | None               # the partition's error in the response; None if no error
    answered: bool

    @property
    def ref(self) -> dict[str, Any]:
        return dict(zip(_REF_KEYS, self.ref_t, strict=True))


# -- tree helpers -------------------------------------------------------------------

def _records_batches(records: Field | None) -> list[dict[str, Any]]:
    """Batch summaries of a records field: extra["batches"] when the record decoder wrote it."""
    if records is None:
        return []
    extra = records.extra or {}
    batches = extra.get("batches")
    if isinstance(batches, list):
        return [b for b in batches if isinstance(b, dict)]
    found: list[dict[str, Any]] = []
    for f in records.walk():
        if f is not records and f.child("base_sequence") is not None and f.child("producer_id") is not None:
            count = f.get("record_count")
            if count is None:
                lod = f.get("last_offset_delta")
                count = lod + 1 if isinstance(lod, int) else None
            found.append({"producer_id": f.get("producer_id"), "producer_epoch": f.get("producer_epoch"),
                          "base_sequence": f.get("base_sequence"), "record_count": count})
    return found


def _advertised(body: Field) -> dict[int, tuple[int, int]]:
    """An ApiVersions answer's versions by API key: its api_keys' extra["versions"], which
    full and lean trees both carry (dissectors.kafka.versions_table)."""
    keys = body.child("api_keys")
    table = keys.extra.get("versions") if keys is not None and keys.extra else None
    return table if isinstance(table, dict) else {}


def _produce_errors(body: Field | None) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    for t in _elements(body.child("responses") if body is not None else None):
        topic = _topic_name(t)
        for p in _elements(t.child("partition_responses")):
            out[(topic, _partition_number(p))] = _int(p.get("error_code")) or 0
    return out


def _first_malformed(tree: Field | None) -> tuple[str, bool] | None:
    """The first malformed note of a tree and whether it sits inside a records field."""
    if tree is None:
        return None
    stack: list[tuple[Field, bool]] = [(tree, False)]
    while stack:
        f, in_records = stack.pop()
        in_records = in_records or f.type == "records" or f.name == "records"
        for n in f.notes or ():
            if n.startswith(MALFORMED):
                return n[len(MALFORMED):], in_records
        if f.children:
            stack.extend((c, in_records) for c in reversed(f.children))
    return None


_UNDECODABLE_WORDS = ("undecodable", "cannot decode", "unknown codec", "unsupported codec")


def _records_trouble(records: Field | None) -> tuple[bool, str | None]:
    """(crc invalid, undecodable reason) of a records field, from its notes and batch summaries."""
    if records is None:
        return False, None
    crc_bad = False
    undecodable: str | None = None
    for n in records.notes or ():
        low = n.lower()
        if "crc invalid" in low or "crc mismatch" in low:
            crc_bad = True
        elif any(w in low for w in _UNDECODABLE_WORDS):
            undecodable = n
    extra = records.extra or {}
    if extra.get("crc_ok") is False:
        crc_bad = True
    batches = extra.get("batches")
    if isinstance(batches, list):
        for b in batches:
            if isinstance(b, dict):
                if b.get("crc_ok") is False:
                    crc_bad = True
                err = b.get("error") or b.get("undecodable")
                if err and undecodable is None:
                    undecodable = str(err)
    elif records.children:   # no summary: look at the notes below (CRC verdicts sit on crc fields)
        for f in records.walk():
            for n in f.notes or ():
                low = n.lower()
                if "crc invalid" in low or "crc mismatch" in low:
                    crc_bad = True
                elif undecodable is None and any(w in low for w in _UNDECODABLE_WORDS):
                    undecodable = n
    return crc_bad, undecodable


_CRC_NOTE = re.compile(r"^\[(\d+)\]: crc INVALID \(0x([0-9a-f]{8})\)")


def _crc_failures(records: Field | None) -> tuple[int, int]:
    """(the batches and messages of a records field whose CRC does not match, how many of
    them are v2 control batches whose CRC field is 0): from the CRC fields of a full tree,
    or the notes of a lean one ("[i]: crc INVALID (0x...)", entry i being
    extra["batches"][i]). Control batches are told only when the field holds v2 batches
    alone (their records add up to the field's)."""
    if records is None:
        return 0, 0
    extra = records.extra or {}
    batches = extra.get("batches")
    failed: list[tuple[int, int]] = []     # (entry index, stored CRC) of the field's own entries
    count = 0
    if records.children:
        for f in records.walk():
            if f.name == "crc" and any(n.startswith("crc INVALID") for n in f.notes or ()):
                count += 1
        for e in records.children:
            crc = e.child("crc")
            if crc is not None and any(n.startswith("crc INVALID") for n in crc.notes or ()) \
                    and e.name.startswith("[") and e.name[1:-1].isdigit():
                failed.append((int(e.name[1:-1]), _int(crc.value) or 0))
    else:
        for n in records.notes or ():
            m = _CRC_NOTE.match(n)
            if m:
                count += 1
                failed.append((int(m.group(1)), int(m.group(2), 16)))
    if not failed or not isinstance(batches, list) or \
            sum(_int(b.get("record_count")) or 0 for b in batches if isinstance(b, dict)) != extra.get("records"):
        return count, 0
    zero = sum(1 for i, stored in failed if stored == 0 and i < len(batches) and isinstance(batches[i], dict)
               and batches[i].get("is_control") is True)
    return count, zero


# -- the checker --------------------------------------------------------------------

class Checker:
    """Runs the rules over exchanges; see the module docstring for scope and merging."""

    def __init__(self, rules: set[str] | None = None, slow_ms: float = 1000.0,
                 storm_rebalances: int = 5, storm_window_s: float = 60.0) -> None:
        unknown = set(rules or ()) - set(RULES)
        if unknown:
            raise ValueError(f"unknown rule(s): {', '.join(sorted(unknown))}")
        self.rules: frozenset[str] = frozenset(RULES) if rules is None else frozenset(rules)
        self.slow_ms = slow_ms
        self.storm_rebalances = storm_rebalances
        self.storm_window_s = storm_window_s
        self.exchanges = 0
        self.capture_end = 0.0
        self._conns: dict[tuple[int, str, str, float], _ConnState] = {}
        self._buckets: dict[tuple[Any, ...], _Bucket] = {}
        self._batches: list[_Batch] = []
        self._batches_dropped = 0                   # Produce requests not followed beyond MAX_BATCHES
        self._names: dict[str, str] = {}            # one str object per topic name
        self._group_events: list[dict[str, Any]] = []
        self._group_events_dropped = 0
        # id(conn) -> its state, for the connections not retired (the state holds the Conn,
        # so the id is its own): what ``add`` finds without making the connection's key of
        # strings each time; those whose Conn says they ended are retired from there
        self._by_object: dict[int, _ConnState] = {}
        self._tables: dict[tuple[tuple[int, tuple[int, int]], ...], dict[int, tuple[int, int]]] = {}
        self._quiet = 0     # connections that ended with nothing left to judge (no state kept)
        # TLS connections not decrypted: how many, their bytes, and the first MAX_LIST of them
        self._encrypted = 0
        self._encrypted_bytes = 0
        self._encrypted_conns: list[str] = []
        self._inflight = InFlight()     # requests in flight per connection (retired when it ends)

    # -- public API ------------------------------------------------------------
    def add(self, ex: Exchange) -> None:
        self.exchanges += 1
        if self.exchanges % RETIRE_EVERY == 0:
            self._retire()
        conn = ex.conn
        cs = self._by_object.get(id(conn))
        if cs is None or cs.conn is not conn:
            key = conn_key(conn)
            cs = self._conns.get(key)
            if cs is None:
                cs = self._conns[key] = _ConnState(str(conn), conn=conn)
            self._by_object[id(conn)] = cs
        cs.seq = ex.seq
        cs.syn_seen = conn.syn_seen
        cs.closed = conn.closed
        closed_by = conn.closed_by
        if closed_by is not None:
            cs.closer = "client" if closed_by == (conn.client_dir or 0) else "broker"
        last = conn.last_ts
        if last > cs.last_ts:
            cs.last_ts = last
        if last > self.capture_end:
            self.capture_end = last
        for fr in (ex.request, ex.response):
            if fr is not None and fr.last_ts > self.capture_end:
                self.capture_end = fr.last_ts
        on = self.rules
        legacy = ex.protocol != "kafka"
        status = ex.status

        if status == "orphan_response":
            if "orphan-response" in on:
                self._orphan(ex, cs)
            return
        if ex.request is None:
            return
        if status in ("ok", "malformed") and ex.response is not None:
            self._ordering(ex, cs)
        if "correlation-reuse" in on and ex.correlation_id is not None and not legacy:
            self._corr_reuse(ex, cs)
        if status == "unanswered":
            if cs.unanswered is None:
                cs.unanswered = []
            cs.unanswered.append(_Pending(exchange_ref(ex), _req_key(ex) or (0, 0),
                                          ex.request_time or 0.0, self._allowance_ms(ex)))
        self._frames(ex, cs)
        if ex.api_key is None:
            return
        if not legacy:
            self._versions(ex, cs)
            if ex.api_key in (SASL_HANDSHAKE, SASL_AUTHENTICATE) or cs.sasl_handshake_frame is not None:
                self._sasl(ex, cs)
        if ex.response_tree is not None:
            self._response_checks(ex, cs)
        if legacy:
            return
        if ex.api_key == PRODUCE and ({"producer-sequence", "sequence-error-response"} & on):
            self._produce(ex, cs)
        elif ex.api_key == FETCH and "fetch-session" in on and (ex.api_version or 0) >= 7:
            self._fetch_session(ex, cs)
        # (the rules judge Produce requests in flight among Produce requests: only they are followed)
        if ex.api_key == PRODUCE and {"in-flight-idempotent", "in-flight-reorder"} & on:
            self._in_flight(ex, cs)
        if ex.api_key in GROUP_APIS:
            self._group(ex, cs)

    def add_all(self, exchanges: Iterable[Exchange]) -> Checker:
        for ex in exchanges:
            self.add(ex)
        return self

    def encrypted(self, summary: Summary) -> None:
        """The TLS connections of a run (``summary.tls``) and the bytes it skipped as TLS not
        decrypted: those not decrypted are judged at ``finish``."""
        for t in summary.tls:
            if t.get("decryption", "").startswith("decrypting"):
                continue
            self._encrypted += 1
            if len(self._encrypted_conns) < MAX_LIST:
                self._encrypted_conns.append(f"{t.get('client')} -> {t.get('broker')}")
        self._encrypted_bytes += summary.bytes_skipped.get(TLS_SKIPPED, 0)

    def merge(self, other: Checker) -> Checker:
        """Fold another checker's state into this one (for per-partition Spark runs)."""
        self.exchanges += other.exchanges
        self._encrypted += other._encrypted
        self._encrypted_bytes += other._encrypted_bytes
        self._encrypted_conns = (self._encrypted_conns + other._encrypted_conns)[:MAX_LIST]
        self._quiet += other._quiet
        self.capture_end = max(self.capture_end, other.capture_end)
        for k, cs in other._conns.items():
            mine = self._conns.get(k)
            if mine is None:
                self._conns[k] = cs
            else:   # the same connection split over checkers: keep what can be kept
                if cs.orphans is not None:
                    if mine.orphans is None:
                        mine.orphans = cs.orphans
                    else:
                        mine.orphans.merge(cs.orphans)
                if cs.unanswered:
                    mine.unanswered = (mine.unanswered or []) + cs.unanswered
                if cs.fallback:
                    mine.fallback = (mine.fallback or []) + cs.fallback
                mine.last_ts = max(mine.last_ts, cs.last_ts)
        for k, b in other._buckets.items():
            mine_b = self._buckets.get(k)
            if mine_b is None:
                self._buckets[k] = b
            else:
                mine_b.merge(b)
        self._batches.extend(other._batches)
        self._batches_dropped += other._batches_dropped
        self._group_events.extend(other._group_events)
        self._group_events_dropped += other._group_events_dropped
        return self

    def finish(self, capture_end: float | None = None, fold: bool = True) -> list[Finding]:
        """All findings, errors first, then by first frame; the same story on several
        connections told once (``tell_once``; ``fold=False``: one finding per connection).
        Does not change the state."""
        end = max(self.capture_end, capture_end or 0.0)
        findings = [b.finding(k[3:]) for k, b in self._buckets.items() if b.rule in self.rules]
        for cs in self._conns.values():
            findings.extend(self._conn_end(cs, end))
        if {"producer-sequence", "sequence-error-response"} & self.rules:
            findings.extend(self._sequences())
        if "rebalance-storm" in self.rules:
            findings.extend(self._storms())
        if "tls-not-decrypted" in self.rules and self._encrypted:
            n = self._encrypted
            findings.append(Finding(
                "tls-not-decrypted", "warning",
                f"{n} TLS connection{'s' if n != 1 else ''} not decrypted ({self._encrypted_bytes} bytes): "
                f"{'its' if n == 1 else 'their'} Kafka traffic was not checked",
                ", ".join(self._encrypted_conns) + (", ..." if n > len(self._encrypted_conns) else ""),
                details={"connections": n, "bytes": self._encrypted_bytes},
                advice="give the key log the clients wrote (SSLKEYLOGFILE) with --tls-keylog FILE"))
        # (ties broken by connection and message: the order does not depend on which worker
        # or Spark task judged a connection)
        findings.sort(key=lambda f: (SEVERITY_RANK[f.severity], f.first_frame, f.rule, f.conn, f.message))
        return tell_once(findings) if fold else findings

    def stats(self) -> dict[str, int]:
        """What the checker holds, and what its memory bounds made it drop."""
        return {"exchanges": self.exchanges, "connections": len(self._conns) + self._quiet,
                "producer_batches": len(self._batches), "producer_requests_dropped": self._batches_dropped,
                "group_events": len(self._group_events), "group_events_dropped": self._group_events_dropped}

    def groups(self) -> list[str]:
        return sorted({e["group_id"] for e in self._group_events if e.get("group_id") is not None})

    def timeline(self, group_id: str) -> list[dict[str, Any]]:
        """The group's JoinGroup/SyncGroup/Heartbeat/LeaveGroup/OffsetCommit/ConsumerGroupHeartbeat
        exchanges in request order, with generations, member ids and assignments."""
        evs = [e for e in self._group_events if e.get("group_id") == group_id]
        evs.sort(key=lambda e: (e["time"], e["request_frame"] or 0))
        return evs

    # -- helpers -------------------------------------------------------------------
    def _retire(self) -> None:
        """Forget what only a connection's next exchanges read (the correlation ids in
        flight, the versions advertised) for the connections that ended once their last
        exchange is here (exchanges handed over in a list may come after the connection's
        end): the state kept per connection is then what finish() judges, and none at all
        for a connection with nothing left to judge."""
        ended = [k for k, cs in self._by_object.items()
                 if cs.conn is not None and cs.conn.ended and cs.seq == cs.conn.last_seq]
        for k in ended:
            cs = self._by_object.pop(k)
            conn = cs.conn
            assert conn is not None
            if not (cs.unanswered or cs.fallback or cs.orphans):
                # nothing left for finish() to judge (its findings are in the buckets): counted
                del self._conns[conn_key(conn)]
                self._quiet += 1
                continue
            cs.lost_from, cs.client_dir = conn.lost_from, conn.client_dir
            cs.conn = None
            cs.corr = None
            cs.advertised = None

    def _same_table(self, table: dict[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
        """One dict for the same advertised versions (a broker answers every connection alike)."""
        key = tuple(table.items())
        mine = self._tables.get(key)
        if mine is None:
            if len(self._tables) >= 1024:
                self._tables.clear()
            mine = self._tables[key] = table
        return mine

    def _bucket(self, rule: str, severity: str, cs_name: str, key: tuple[Any, ...], template: str,
                details: dict[str, Any], time: float = 0.0, advice: str = "") -> _Bucket:
        k = (rule, severity, cs_name, *key)
        b = self._buckets.get(k)
        if b is None:
            b = self._buckets[k] = _Bucket(rule, severity, cs_name, template, details, first=time, advice=advice)
        return b

    def _allowance_ms(self, ex: Exchange) -> float:
        """How long the broker may legitimately hold this request, beyond --slow-ms. A request
        the capture cut short before the field that grants the wait is not judged (inf)."""
        body = _body(ex.request_tree)
        cut = ex.request is not None and ex.request.truncated
        if body is None:
            return float("inf") if cut and ex.api_key in (FETCH, SHARE_FETCH, JOIN_GROUP) else 0.0
        if ex.api_key in (FETCH, SHARE_FETCH):
            wait = _int(body.get("max_wait_ms"))
            return float("inf") if wait is None and cut else float(wait or 0)
        if ex.api_key == JOIN_GROUP:
            t = _int(body.get("rebalance_timeout_ms"))
            if t is None or t < 0:
                t = _int(body.get("session_timeout_ms"))
            return float("inf") if t is None and cut else float(t or 0)
        if ex.api_key == SYNC_GROUP:
            return float("inf")     # followers wait for the leader's assignment: not judged
        return 0.0

    # -- rules: pairing ----------------------------------------------------------
    def _orphan(self, ex: Exchange, cs: _ConnState) -> None:
        if cs.syn_seen:
            # judged at finish (_conn_end): the bytes the capture lost show only when more come
            b = cs.orphans
            if b is None:
                b = cs.orphans = _Bucket("orphan-response", "error", cs.name, _ORPHAN_ERROR, {})
        else:
            b = self._bucket("orphan-response", "info", cs.name, (),
                             "{count} response(s) to requests sent before the capture started", {})
        b.add(_frames_of(ex), ex)

    def _ordering(self, ex: Exchange, cs: _ConnState) -> None:
        rk = _req_key(ex)
        if rk is None:
            return
        last = cs.last_answered
        if last is not None and rk < last and "response-order" in self.rules:
            b = self._bucket("response-order", "error", cs.name, (),
                             "{count} response(s) arrived before the response to an earlier request", {},
                             advice="a broker bug (Kafka answers a connection's requests in order), or a proxy "
                                    "between client and broker that reorders them")
            b.add(_frames_of(ex), ex)
        if last is None or rk > last:
            cs.last_answered = rk

    def _corr_reuse(self, ex: Exchange, cs: _ConnState) -> None:
        rk = _req_key(ex)
        if rk is None:
            return
        cid = ex.correlation_id
        assert cid is not None
        mine = (rk, _resp_key(ex), (ex.api_name, ex.api_version, cid, ex.request_frame, ex.response_frame))
        corr = cs.corr
        if corr is None:
            corr = cs.corr = OrderedDict()
        prior = corr.get(cid)
        if prior is not None:
            for other in prior:
                a, b = (other, mine) if other[0] <= mine[0] else (mine, other)
                # b was sent while a was in flight: a's response came after b's request, or never
                if a[1] is None or a[1] > b[0]:
                    bucket = self._bucket(
                        "correlation-reuse", "error", cs.name, (),
                        "{count} request(s) reused a correlation id still in flight", {},
                        advice="a client bug (a correlation id must be unique among the requests in flight on a "
                               "connection): upgrade the client")
                    frames = [f for r in (a[2], b[2]) for f in r[3:] if f is not None]
                    bucket.add(frames, dict(zip(_REF_KEYS, b[2], strict=True)))
                    break
            prior.append(mine)
            del prior[:-8]
            corr.move_to_end(cid)
        else:
            corr[cid] = [mine]
            if len(corr) > MAX_CORR_TRACKED:
                corr.popitem(last=False)

    def _frames(self, ex: Exchange, cs: _ConnState) -> None:
        """CRC mismatches, malformed and truncated frames, undecodable records."""
        q, r = ex.request, ex.response
        if ex.status != "malformed" and ex.api_key not in (PRODUCE, FETCH) and not ex.partitions \
                and not (q is not None and q.truncated) and not (r is not None and r.truncated):
            return      # (nothing here to judge)
        on = self.rules
        truncated = [side for side, fr in (("request", ex.request), ("response", ex.response))
                     if fr is not None and fr.truncated]
        if truncated and "truncated-frame" in on:
            frames = [fr.last_index for fr in (ex.request, ex.response) if fr is not None and fr.truncated]
            self._bucket("truncated-frame", "info", cs.name, (),
                         "{count} frame(s) with bytes missing from the capture (not judged)",
                         {}, advice="to have them judged, capture whole packets (tcpdump -s 0) with a buffer "
                                    "large enough that none is dropped (tcpdump -B)").add(frames, ex, n=len(frames))
        crc_frames: list[int] = []
        crc_counts = [0, 0]     # the batches whose CRC fails, of them control batches with CRC 0
        undecodable: list[tuple[int, str]] = []
        legacy = ex.protocol == "kafka-legacy"
        if (ex.api_key in (PRODUCE, FETCH) or (legacy and ex.partitions)) and (
                {"crc-mismatch", "undecodable-records"} & on):
            # pre-0.8: PRODUCE (0) and MULTIPRODUCE (3) carry messages in the request
            prod = ex.api_key in ((PRODUCE, 3) if legacy else (PRODUCE,))
            frame = ex.request_frame if prod else ex.response_frame
            tree = ex.request_tree if prod else ex.response_tree
            side_truncated = ("request" if prod else "response") in truncated
            if frame is not None and not side_truncated:
                if any(p.get("crc_ok") is False for p in ex.partitions):
                    crc_frames.append(frame)
            if frame is not None and not side_truncated and not legacy:
                walker = _produce_partitions if prod else _fetch_partitions
                for _t, _p, rec in walker(_body(tree)):
                    bad, why = _records_trouble(rec)
                    if bad:
                        if frame not in crc_frames:
                            crc_frames.append(frame)
                        n, zero = _crc_failures(rec)
                        crc_counts[0] += n
                        crc_counts[1] += zero
                    if why:
                        undecodable.append((frame, why))
        if crc_frames and "crc-mismatch" in on:
            n, zero = crc_counts
            if n and zero == n:
                # transaction markers the broker wrote without a CRC: the data batches are sound
                b = self._bucket("crc-mismatch", "error", cs.name, (ex.api_name, "control-crc-zero"),
                                 "{count} {api_name} frame(s) with a record CRC mismatch, all in control batches "
                                 "(transaction markers) whose CRC field is 0; the data batches' CRCs are valid",
                                 {"api_name": ex.api_name, "kind": "control-crc-zero", "crc_batches": 0,
                                  "control_crc_zero": 0},
                                 advice="the broker wrote these transaction markers without a CRC (a broker bug): "
                                        "the records are intact, but clients that verify CRCs (check.crcs) "
                                        "reject the batches; report it to the broker's maintainers")
            else:
                b = self._bucket("crc-mismatch", "error", cs.name, (ex.api_name, "data"),
                                 "{count} {api_name} frame(s) with a record CRC mismatch",
                                 {"api_name": ex.api_name, "kind": "data", "crc_batches": 0, "control_crc_zero": 0})
            b.details["crc_batches"] += n
            b.details["control_crc_zero"] += zero
            b.add(crc_frames, ex)
        if ex.status == "malformed" and ("malformed-frame" in on or "undecodable-records" in on):
            for side, fr, tree in (("request", ex.request, ex.request_tree),
                                   ("response", ex.response, ex.response_tree)):
                if fr is None or side in truncated:
                    continue
                hit = _first_malformed(tree)
                if hit is None:
                    continue
                reason, in_records = hit
                if in_records:
                    undecodable.append((fr.last_index, reason))
                elif "malformed-frame" in on:
                    self._bucket("malformed-frame", "error", cs.name, (ex.api_name, side),
                                 "{count} malformed {api_name} {side}(s), first: {reason}",
                                 {"api_name": ex.api_name, "side": side, "reason": reason}
                                 ).add([fr.last_index], ex)
        if undecodable and "undecodable-records" in on:
            b = self._bucket("undecodable-records", "warning", cs.name, (ex.api_name,),
                             "{count} {api_name} frame(s) with records that cannot be decoded, first: {reason}",
                             {"api_name": ex.api_name, "reason": undecodable[0][1]})
            b.add(sorted({f for f, _ in undecodable}), ex)

    # -- rules: versions ---------------------------------------------------------
    def _versions(self, ex: Exchange, cs: _ConnState) -> None:
        on = self.rules
        key, ver = ex.api_key, ex.api_version
        assert key is not None
        if ver is None:
            return
        api = APIS.get(key)
        if api is None or ver > api.max_version:
            if "unknown-api" in on:
                what = (f"unknown API key {key}" if api is None
                        else f"{ex.api_name} v{ver}, newer than the newest known (v{api.max_version})")
                self._bucket("unknown-api", "warning", cs.name, (key, ver),
                             "{count} request(s) with {what}: framed and paired, body not judged",
                             {"what": what, "api_key": key, "api_version": ver}).add(
                    [ex.request_frame] if ex.request_frame else [], ex)
            if api is None:
                return
        if key == API_VERSIONS:
            body = _body(ex.response_tree)
            if body is not None:
                code = _int(body.get("error_code")) or 0
                adv = _advertised(body)
                if code == 0:
                    # (a list the capture cut short is not the broker's whole answer)
                    if adv and not (ex.response is not None and ex.response.truncated):
                        cs.advertised = self._same_table(adv)
                        cs.advertised_frame = ex.response_frame or 0
                    if cs.fallback:   # a successful ApiVersions after an UNSUPPORTED_VERSION answer
                        for fb in cs.fallback:
                            if fb.get("retry") is None and (ex.request_frame or 0) > fb["response_frame"]:
                                fb["retry"] = exchange_ref(ex)
                elif code == UNSUPPORTED_VERSION and "apiversions-fallback" in on:
                    if cs.fallback is None:
                        cs.fallback = []
                    cs.fallback.append(dict(exchange_ref(ex), supported=adv.get(API_VERSIONS), retry=None))
        elif "version-unadvertised" in on and cs.advertised is not None \
                and (ex.request_frame or 0) > cs.advertised_frame:
            rng = cs.advertised.get(key)
            if rng is None or not rng[0] <= ver <= rng[1]:
                adv_s = f"v{rng[0]}-v{rng[1]}" if rng else "not advertised"
                b = self._bucket("version-unadvertised", "error", cs.name, (key, ver),
                                 "{count} {api_name} v{api_version} request(s) from {clients}, but the broker "
                                 + ("advertised {advertised}" if rng else "did not advertise {api_name}")
                                 + " on this connection",
                                 {"api_name": ex.api_name, "api_version": ver, "advertised": adv_s,
                                  "advertised_frame": cs.advertised_frame, "client_ids": [ex.client_id]},
                                 advice="the client did not keep to the broker's ApiVersions answer (a client "
                                        "bug): upgrade the client, or pin it to the versions the broker advertised")
                b.unite("client_ids", ex.client_id)
                b.add([f for f in (cs.advertised_frame, ex.request_frame) if f], ex)
        if "kafka4-removed" in on and ver <= api.max_version:
            k4 = api.kafka4_versions
            if k4 is None or not k4[0] <= ver <= k4[1]:
                # (one finding per API, its versions listed)
                still = f"4.0 serves v{k4[0]}-v{k4[1]}" if k4 else "4.0 removed the API"
                fix = (f"upgrade the client to one that sends {ex.api_name} v{k4[0]} or later before the brokers "
                       "move to Kafka 4.0" if k4 else
                       f"stop using {ex.api_name} (or upgrade the client) before the brokers move to Kafka 4.0")
                b = self._bucket("kafka4-removed", "warning", cs.name, (key,),
                                 "{count} {api_name} {versions} request(s) from {clients}: Kafka {kafka4} (KIP-896)",
                                 {"api_name": ex.api_name, "api_versions": [ver], "client_ids": [ex.client_id],
                                  "kafka4": still},
                                 advice=_literal_text(fix))
                b.unite("api_versions", ver)
                b.unite("client_ids", ex.client_id)
                b.add([ex.request_frame] if ex.request_frame else [], ex)

    # -- rules: response contents -----------------------------------------------
    def _response_checks(self, ex: Exchange, cs: _ConnState) -> None:
        on = self.rules
        body = _body(ex.response_tree)
        if "error-response" in on and ex.error_codes:
            for name, n in Counter(ex.error_codes).items():
                if self._covered_elsewhere(ex, name):
                    continue
                sev = "info" if name in FLOW_ERRORS else "warning" if name in RETRIABLE_ERRORS else "error"
                tmpl = "{count} {error} error(s) in {api_name} responses"
                det: dict[str, Any] = {"error": name, "api_name": ex.api_name, "api_versions": [],
                                       "client_ids": [ex.client_id]}
                key: tuple[Any, ...] = (ex.api_name, name)
                if name == "UNSUPPORTED_VERSION" and ex.api_key is not None:
                    # what the client sent, and what the broker said it takes on the connection
                    rng = cs.advertised.get(ex.api_key) if cs.advertised is not None else None
                    adv: str | None
                    if cs.advertised is None:
                        adv = None
                        said = "the broker's versions are not known (no ApiVersions answer on the connection)"
                    elif rng is None:
                        adv, said = "none", f"the broker did not advertise {ex.api_name} on the connection"
                    else:
                        adv = f"v{rng[0]}-v{rng[1]}"
                        said = f"the broker advertised {adv} on the connection"
                    tmpl += ": {clients} sent {api_name} {versions}; " + _literal_text(said)
                    det["advertised"] = adv
                    key += (adv,)
                fix = ERROR_ADVICE.get((ex.api_name, name), ERROR_ADVICE.get(name, ""))
                b = self._bucket("error-response", sev, cs.name, key, tmpl, det, advice=_literal_text(fix))
                if ex.api_version is not None:
                    b.unite("api_versions", ex.api_version)
                b.unite("client_ids", ex.client_id)
                b.add([ex.response_frame] if ex.response_frame else [], ex, n=n)
        if body is None:
            return
        if ex.api_key == API_VERSIONS and _int(body.get("error_code")):
            return      # an UNSUPPORTED_VERSION answer has the v0 shape: its other fields mean nothing
        if "throttled" in on:
            tt = _int(body.get("throttle_time_ms"))
            if tt is not None and tt > 0:
                b = self._bucket("throttled", "warning", cs.name, (ex.api_name,),
                                 "{count} {api_name} response(s) throttled, up to {max_throttle_ms} ms",
                                 {"api_name": ex.api_name, "max_throttle_ms": tt},
                                 advice="the client is over its quota: raise the quota of its user or client id "
                                        "(kafka-configs --entity-type users/clients: producer_byte_rate, "
                                        "consumer_byte_rate, request_percentage), or make it ask for less")
                b.details["max_throttle_ms"] = max(b.details["max_throttle_ms"], tt)
                b.add([ex.response_frame] if ex.response_frame else [], ex)
        if "slow-exchange" in on:
            lat = ex.latency_ms
            # (only these APIs' allowance can be below 0: the others' is 0 or infinite)
            if lat is not None and (lat > self.slow_ms or ex.api_key in (FETCH, SHARE_FETCH, JOIN_GROUP)):
                allowed = self._allowance_ms(ex) + self.slow_ms
                if lat > allowed:
                    b = self._bucket("slow-exchange", "warning", cs.name, (ex.api_name,),
                                     "{count} {api_name} exchange(s) slower than {limit_ms:g} ms "
                                     "(beyond what the request allows), up to {max_latency_ms:.0f} ms",
                                     {"api_name": ex.api_name, "limit_ms": self.slow_ms, "max_latency_ms": lat})
                    b.details["max_latency_ms"] = max(b.details["max_latency_ms"], lat)
                    b.add(_frames_of(ex), ex)

    def _covered_elsewhere(self, ex: Exchange, name: str) -> bool:
        on = self.rules
        if ex.api_key == API_VERSIONS and name == "UNSUPPORTED_VERSION":
            return "apiversions-fallback" in on
        if ex.api_key == SASL_AUTHENTICATE:
            return "sasl-auth-failed" in on
        if name == "UNSUPPORTED_SASL_MECHANISM":
            return "sasl-mechanism" in on
        if name in ("FETCH_SESSION_ID_NOT_FOUND", "INVALID_FETCH_SESSION_EPOCH"):
            return "fetch-session" in on
        if name in ("OUT_OF_ORDER_SEQUENCE_NUMBER", "DUPLICATE_SEQUENCE_NUMBER"):
            return "sequence-error-response" in on
        return False

    # -- rules: SASL ------------------------------------------------------------
    def _sasl(self, ex: Exchange, cs: _ConnState) -> None:
        on = self.rules
        key = ex.api_key
        rbody = _body(ex.response_tree)
        code = _int(rbody.get("error_code")) if rbody is not None else None
        if key == SASL_HANDSHAKE:
            if cs.sasl_handshake_frame is None:
                cs.sasl_handshake_frame = ex.request_frame
                cs.sasl_handshake_version = ex.api_version
            qbody = _body(ex.request_tree)
            mech = qbody.get("mechanism") if qbody is not None else None
            offered = [m.value for m in _elements(rbody.child("mechanisms"))] if rbody is not None else None
            if "sasl-mechanism" in on and rbody is not None and (
                    code == UNSUPPORTED_SASL_MECHANISM or (offered and mech is not None and mech not in offered)):
                if offered and mech in offered:
                    # refused, yet the broker's own list names it: the broker contradicts itself
                    how, tmpl = "broker-bug", ("{count} SaslHandshake(s): the broker refused {mechanism} "
                                               "({error}) but lists {mechanism} as enabled (a broker bug)")
                    fix = ""
                else:
                    how, tmpl = "not-offered", "SaslHandshake asked for {mechanism}, the broker offers {offered}"
                    fix = ("configure the client with a mechanism the broker offers ({offered}), or enable "
                           "{mechanism} on the broker's listener (sasl.enabled.mechanisms)")
                b = self._bucket("sasl-mechanism", "error", cs.name, (str(mech), how), tmpl,
                                 {"mechanism": mech, "offered": ", ".join(map(str, offered or [])) or "nothing",
                                  "error": ERROR_NAMES.get(code or 0)}, advice=fix)
                b.add(_frames_of(ex), ex)
        elif key == SASL_AUTHENTICATE:
            sasl = rbody.child("auth_bytes") if rbody is not None else None
            sasl = sasl.child("sasl") if sasl is not None else None
            mech_error = sasl.get("error") if sasl is not None else None
            step = (sasl.type or "") if sasl is not None else ""
            if code == 0 and mech_error is None and ex.response is not None:
                if cs.sasl_ok_frame is None and "server-first" not in step:
                    cs.sasl_ok_frame = ex.response_frame
            elif (code or mech_error) and "sasl-auth-failed" in on:
                msg = rbody.get("error_message") if rbody is not None else None
                if msg in ("NONE", ""):
                    msg = None
                if code:
                    err = ERROR_NAMES.get(code, f"error {code}")
                    why = f" ({msg})" if msg else ""
                else:
                    err = f"{step or 'SASL'} error '{mech_error}'"
                    why = " although error_code is 0"
                b = self._bucket("sasl-auth-failed", "error", cs.name, (err,),
                                 "{count} SaslAuthenticate failure(s): {error}{why}",
                                 {"error": err, "why": why}, advice=_literal_text(_sasl_advice(err, mech_error)))
                b.add(_frames_of(ex), ex)
        elif key not in PRE_AUTH_APIS and "sasl-before-auth" in on and cs.sasl_handshake_version != 0:
            hs = cs.sasl_handshake_frame
            rf = ex.request_frame or 0
            if hs is not None and rf > hs and (cs.sasl_ok_frame is None or rf < cs.sasl_ok_frame):
                b = self._bucket("sasl-before-auth", "error", cs.name, (),
                                 "{count} request(s) sent before SASL authentication completed",
                                 {"handshake_frame": hs},
                                 advice="a client bug (after SaslHandshake it must finish SaslAuthenticate before "
                                        "other requests): upgrade the client")
                b.add([ex.request_frame] if ex.request_frame else [], ex)

    # -- rules: fetch sessions -------------------------------------------------------
    def _fetch_session(self, ex: Exchange, cs: _ConnState) -> None:
        q = _body(ex.request_tree)
        if q is None:
            return
        sid, epoch = _int(q.get("session_id")), _int(q.get("session_epoch"))
        if sid is None or epoch is None:
            return
        frames = [ex.request_frame] if ex.request_frame else []

        def report(kind: str, sev: str, msg: str, **extra: Any) -> None:
            b = self._bucket("fetch-session", sev, cs.name, (kind,), msg, dict(extra, kind=kind))
            b.add(frames if kind not in ("not-found", "invalid-epoch") else _frames_of(ex), ex)

        if epoch > 0:
            if sid == 0:
                report("zero-id", "error",
                       "{count} Fetch request(s) with session_epoch > 0 but session_id 0 (no session)")
            elif cs.fetch_next_epoch is not None and sid == cs.fetch_sid and epoch != cs.fetch_next_epoch:
                report("epoch", "error",
                       "{count} Fetch request(s) whose session_epoch does not follow the previous one "
                       "(first: {got}, expected {expected})", got=epoch, expected=cs.fetch_next_epoch)
            elif cs.fetch_sid and sid != cs.fetch_sid:
                report("unknown-id", "warning",
                       "{count} Fetch request(s) using session id {sid} while the broker gave {given}",
                       sid=sid, given=cs.fetch_sid)
        r = _body(ex.response_tree)
        code = _int(r.get("error_code")) if r is not None else None
        if code in (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH):
            kind = "not-found" if code == FETCH_SESSION_ID_NOT_FOUND else "invalid-epoch"
            report(kind, "warning", "{count} {error} response(s) (first for session {sid}, epoch {epoch})",
                   error=ERROR_NAMES[code], sid=sid, epoch=epoch)
            cs.fetch_sid, cs.fetch_next_epoch = 0, None
            return
        if epoch == -1 or (epoch == 0 and sid == 0 and r is not None and not _int(r.get("session_id"))):
            cs.fetch_sid, cs.fetch_next_epoch = 0, None
        elif epoch == 0:
            new = _int(r.get("session_id")) if r is not None else None
            if new:
                cs.fetch_sid, cs.fetch_next_epoch = new, 1
        elif sid == cs.fetch_sid:
            cs.fetch_next_epoch = 1 if epoch >= INT32_SPAN - 1 else epoch + 1

    # -- rules: requests in flight ------------------------------------------------------
    def _in_flight(self, ex: Exchange, cs: _ConnState) -> None:
        depths = self._inflight.add(ex)
        if depths is None:
            return
        body = _body(ex.request_tree)
        pids = sorted({pid for _t, _p, rec in _produce_partitions(body) for b in _records_batches(rec)
                       if (pid := _int(b.get("producer_id"))) is not None and pid >= 0})
        produce_depth = depths[1]
        if pids and produce_depth > 5 and "in-flight-idempotent" in self.rules:
            b = self._bucket("in-flight-idempotent", "error", cs.name, (),
                             "{count} Produce request(s) sent with more than 5 Produce requests in flight "
                             "(up to {max_in_flight}) by idempotent producer id(s) {producer_ids_text} "
                             "({clients})",
                             {"max_in_flight": produce_depth, "client_ids": [ex.client_id],
                              "producer_ids_text": ", ".join(map(str, pids))},
                             time=ex.request_time or 0.0,
                             advice="an idempotent producer may have at most 5 requests in flight per "
                                    "connection: the broker keeps the sequence numbers of the last 5 batches "
                                    "per partition and rejects others with OUT_OF_ORDER_SEQUENCE_NUMBER; set "
                                    "max.in.flight.requests.per.connection (librdkafka: max.in.flight) to 5 "
                                    "or less")
            b.unite("client_ids", ex.client_id)
            b.details["max_in_flight"] = max(b.details["max_in_flight"], produce_depth)
            b.add(_frames_of(ex), ex)
        rk = _req_key(ex)
        if ex.response is None or rk is None:
            return
        last = cs.last_produce
        if last is not None and rk < last and not pids and "in-flight-reorder" in self.rules:
            b = self._bucket("in-flight-reorder", "warning", cs.name, (),
                             "{count} Produce response(s) came after the response to a later Produce while "
                             "several were in flight, from a producer without idempotence ({clients}): "
                             "its batches can be written out of order",
                             {"client_ids": [ex.client_id]}, time=ex.request_time or 0.0,
                             advice="set max.in.flight.requests.per.connection=1 (librdkafka: max.in.flight=1) "
                                    "or enable idempotence (enable.idempotence=true), which keeps the order "
                                    "with up to 5 in flight")
            b.unite("client_ids", ex.client_id)
            b.add(_frames_of(ex), ex)
        if last is None or rk > last:
            cs.last_produce = rk

    # -- rules: producers (state; judged in finish) ------------------------------------
    def _produce(self, ex: Exchange, cs: _ConnState) -> None:
        body = _body(ex.request_tree)
        if body is None or ex.request_frame is None:
            return
        errors = _produce_errors(_body(ex.response_tree))
        ref = (ex.api_name, ex.api_version, ex.correlation_id, ex.request_frame, ex.response_frame)
        if len(self._batches) >= MAX_BATCHES:
            self._batches_dropped += 1
            return
        order = 0
        for topic, part, rec in _produce_partitions(body):
            for b in _records_batches(rec):
                pid, ep = _int(b.get("producer_id")), _int(b.get("producer_epoch"))
                seq, n = _int(b.get("base_sequence")), _int(b.get("record_count"))
                if pid is None or pid < 0 or seq is None or seq < 0 or n is None:
                    continue
                code = errors.get((topic, part), 0)
                err = None if not code else ERROR_NAMES.get(code, f"error {code}")
                topic = self._names.setdefault(topic, topic)
                self._batches.append(_Batch(pid, ep if ep is not None else -1, topic, part, seq, n,
                                            ex.request_time or 0.0, ex.request_frame, order, cs.name, ref,
                                            err, ex.response is not None))
                order += 1

    def _sequences(self) -> list[Finding]:
        by_key: dict[tuple[int, int, str, int], list[_Batch]] = {}
        for b in self._batches:
            by_key.setdefault((b.producer_id, b.epoch, b.topic, b.partition), []).append(b)
        out: list[Finding] = []
        for key, batches in by_key.items():
            batches.sort(key=lambda b: (b.request_time, b.request_frame, b.order))
            out.extend(self._sequence_run(key, batches))
        return out

    def _sequence_run(self, key: tuple[int, int, str, int], batches: list[_Batch]) -> list[Finding]:
        """Judge the batches of one producer id, epoch and partition, in request order."""
        pid, ep, topic, part = key
        on = self.rules
        where = f"producer id {pid} epoch {ep}, topic {topic} partition {part}"
        ident = {"producer_id": pid, "producer_epoch": ep, "topic": topic, "partition": part}
        out: list[Finding] = []
        kinds: dict[str, Finding] = {}
        expected: int | None = None
        starts: dict[int, _Batch] = {}      # base_sequence -> latest batch sent with it
        fillers: set[int] = set()           # indexes of late batches already reported with their gap

        def note(kind: str, sev: str, msg: str, involved: list[_Batch], **det: Any) -> None:
            f = kinds.get(kind)
            if f is None:
                f = kinds[kind] = Finding("producer-sequence", sev, msg, involved[-1].conn, [], [],
                                          dict(ident, kind=kind, count=0, **det))
                out.append(f)
            f.details["count"] += 1
            for x in involved:
                if x.conn not in f.conn.split(", "):
                    f.conn += ", " + x.conn
                if len(f.frames) < MAX_LIST and x.request_frame not in f.frames:
                    f.frames.append(x.request_frame)
                    f.exchanges.append(x.ref)

        for i, b in enumerate(batches):
            seq, n = b.base_sequence, b.record_count
            nxt = (seq + n) % INT32_SPAN
            prev = starts.get(seq)
            if b.error in ("OUT_OF_ORDER_SEQUENCE_NUMBER", "DUPLICATE_SEQUENCE_NUMBER") \
                    and "sequence-error-response" in on:
                exp = "unknown" if expected is None else str(expected)
                f = Finding("sequence-error-response",
                            "error" if b.error == "OUT_OF_ORDER_SEQUENCE_NUMBER" else "warning",
                            f"{b.error} for {where}: batch base_sequence {seq} ({n} records), "
                            f"expected {exp} from the batches seen before",
                            b.conn, [x for x in (b.request_frame, b.ref_t[4]) if x], [b.ref],
                            dict(ident, error=b.error, base_sequence=seq, record_count=n,
                                 expected_sequence=expected,
                                 previous_frame=prev.request_frame if prev else None))
                if prev is not None and prev.request_frame not in f.frames:   # the batch it repeats
                    f.frames.insert(0, prev.request_frame)
                    f.exchanges.insert(0, prev.ref)
                out.append(f)
            if "producer-sequence" in on and expected is not None and seq != expected and i not in fillers:
                if prev is not None:
                    if prev.answered and prev.error is None:
                        note("duplicate", "warning",
                             f"{where}: batch re-sent after the broker acknowledged it (base_sequence {seq})",
                             [prev, b], base_sequence=seq)
                    # else: a retry of a batch that failed or got no answer, as it should be
                elif _seq_before(seq, expected):
                    note("overlap", "error",
                         f"{where}: base_sequence went back from {expected} to {seq}, "
                         "inside batches already sent", [b], expected=expected, got=seq)
                else:
                    late = [j for j in range(i + 1, len(batches))
                            if _seq_before(batches[j].base_sequence, seq)
                            and not _seq_before(batches[j].base_sequence, expected)]
                    if late:
                        fillers.update(late)
                        note("reorder", "error",
                             f"{where}: batch {seq} sent before batch {batches[late[0]].base_sequence} "
                             "(out of sequence order)", [b] + [batches[j] for j in late],
                             expected=expected, got=seq)
                    else:
                        note("gap", "error",
                             f"{where}: base_sequence jumped from {expected} to {seq} "
                             f"({(seq - expected) % INT32_SPAN} records never sent)", [b],
                             expected=expected, got=seq)
            starts[seq] = b
            if expected is None or not _seq_before(nxt, expected):
                expected = nxt
        for f in kinds.values():
            order = sorted(range(len(f.frames)), key=lambda k: f.frames[k])
            f.frames = [f.frames[k] for k in order]
            f.exchanges = [f.exchanges[k] for k in order]
        return out

    # -- rules: groups ------------------------------------------------------------------
    def _group(self, ex: Exchange, cs: _ConnState) -> None:
        if len(self._group_events) >= MAX_GROUP_EVENTS:
            self._group_events_dropped += 1
            return
        # (the timeline's offsets are OffsetCommit's: the other group APIs' events are whole
        # in lean trees, and JoinGroup and SyncGroup have full ones)
        ev = group_event(ex, cs.name, full=ex.api_key == OFFSET_COMMIT)
        if ev is not None:
            self._group_events.append(ev)

    def _storms(self) -> list[Finding]:
        """Groups with more than storm_rebalances generations within the window, or more
        than storm_rebalances JoinGroups by members answered with the generation they
        already had (rejoining without the generation moving)."""
        out: list[Finding] = []
        by_group: dict[str, dict[int, dict[str, Any]]] = {}
        joins: dict[str, list[dict[str, Any]]] = {}
        for e in sorted(self._group_events, key=lambda e: (e["time"], e["request_frame"] or 0, e["conn"])):
            if e.get("group_id") is None:
                continue
            if e["api_name"] == "JoinGroup":
                joins.setdefault(e["group_id"], []).append(e)
            gen = e.get("generation_id")
            if e["api_name"] not in ("JoinGroup", "ConsumerGroupHeartbeat") or e.get("error") or gen is None \
                    or gen < 0:
                continue
            gens = by_group.setdefault(e["group_id"], {})
            if gen not in gens or e["time"] < gens[gen]["time"]:
                gens[gen] = e
        for group, gens in by_group.items():
            evs = sorted(gens.values(), key=lambda e: e["time"])
            sel = self._densest(evs)
            if len(sel) > self.storm_rebalances:
                out.append(self._storm(group, sel, f"group {group}: {len(sel)} generations within "
                                                   f"{self.storm_window_s:g} s (generation "
                                                   f"{sel[0]['generation_id']} to {sel[-1]['generation_id']})",
                                       {"generations": len(sel), "total_generations": len(evs)}))
        for group, js in joins.items():
            sel = self._densest(rejoins_same_generation(js))
            if len(sel) > self.storm_rebalances:
                out.append(self._storm(group, sel, f"group {group}: {len(sel)} JoinGroups within "
                                                   f"{self.storm_window_s:g} s by members that got back the "
                                                   f"generation they had ({sel[0]['generation_id']}): rejoining "
                                                   "without the generation moving",
                                       {"rejoins": len(sel), "kind": "rejoin"}))
        return out

    def _densest(self, evs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The most events (in time order) within one storm window."""
        times = [e["time"] for e in evs]
        worst, worst_i = 0, 0
        for i, t in enumerate(times):
            j = bisect.bisect_right(times, t + self.storm_window_s)
            if j - i > worst:
                worst, worst_i = j - i, i
        return evs[worst_i:worst_i + worst]

    def _storm(self, group: str, sel: list[dict[str, Any]], message: str, details: dict[str, Any]) -> Finding:
        conns = sorted({e["conn"] for e in sel})
        return Finding(
            "rebalance-storm", "warning", message, ", ".join(conns),
            sorted(e["request_frame"] for e in sel if e["request_frame"])[:MAX_LIST],
            [{k: e[k] for k in ("api_name", "api_version", "correlation_id", "request_frame",
                                "response_frame")} for e in sel][:MAX_LIST],
            {"group_id": group, "window_s": self.storm_window_s, **details},
            advice=f"read what starts the rebalances with --timeline {group}: members that time out "
                   "(raise session.timeout.ms or max.poll.interval.ms, or make the poll loop faster) or that "
                   "restart again and again")

    def stories(self) -> list[dict[str, Any]]:
        """Each group's story (analyzer.sinks.insights.group_stories) from the events seen."""
        return group_stories(self._group_events)

    # -- end of connection ------------------------------------------------------------
    def _conn_end(self, cs: _ConnState, capture_end: float) -> list[Finding]:
        out: list[Finding] = []
        on = self.rules
        if cs.orphans is not None and "orphan-response" in on:
            f = cs.orphans.finding(("capture start",))
            lost, client = cs.lost()
            if lost & (1 << client):
                # a request in bytes the capture missed (a lost segment): not the broker's fault
                f = replace(f, severity="info", message=_ORPHAN_LOST.format(**f.details), template=_ORPHAN_LOST)
            out.append(f)
        if cs.fallback and "apiversions-fallback" in on:
            retried = [fb for fb in cs.fallback if fb.get("retry")]
            stuck = [fb for fb in cs.fallback if not fb.get("retry")]
            for group, sev, msg, fix in (
                    (retried, "info", "ApiVersions v{api_version} answered UNSUPPORTED_VERSION; the client "
                                      "retried with v{retry_version}",
                     "nothing: the client is newer than the broker and asked again in a version the broker takes"),
                    (stuck, "warning", "ApiVersions v{api_version} answered UNSUPPORTED_VERSION and the client "
                                       "did not retry on this connection",
                     "upgrade the client: on this answer it should ask again with a version the broker takes "
                     "(KIP-511)")):
                if not group:
                    continue
                fb = group[0]
                refs = [{k: v for k, v in g.items() if k in ("api_name", "api_version", "correlation_id",
                                                               "request_frame", "response_frame")}
                        for g in group]
                frames: list[int] = []
                for g in group:
                    frames += [f for f in (g["request_frame"], g["response_frame"]) if f]
                    if g.get("retry"):
                        refs.append(g["retry"])
                        frames += [f for f in (g["retry"]["request_frame"], g["retry"]["response_frame"]) if f]
                rv = fb["retry"]["api_version"] if fb.get("retry") else None
                det = {"count": len(group), "broker_supports": fb.get("supported"), "retry_version": rv,
                       "api_version": fb["api_version"]}
                out.append(Finding("apiversions-fallback", sev, _render(msg, det),
                                   cs.name, sorted(set(frames))[:MAX_LIST], refs[:MAX_LIST], det, advice=fix,
                                   story=(fb["api_version"], rv), template=msg, advice_template=fix))
        if not cs.unanswered:
            return out
        end = cs.last_ts if cs.closed else capture_end
        end = max(end, capture_end if not cs.closed else end)
        # requests the broker passed over (later ones on the connection were answered): not
        # in flight when the connection closed, but skipped
        skipped = [p for p in cs.unanswered if cs.last_answered is not None and p.req_key < cs.last_answered]
        waiting = [p for p in cs.unanswered if p not in skipped]
        if cs.closed and "closed-in-flight" in on:
            if waiting:
                how = "reset (RST)" if cs.closed == "rst" else "closed (FIN)"
                fix = ""
                if cs.closer == "broker":
                    sev, who = "error", f"the broker {how} the connection"
                    fix = ("look in the broker's log for why it closed the connection: a broker closes it on a "
                           "request it does not take (an unknown API or version, a SASL mechanism it does not "
                           "enable, a request over socket.request.max.bytes, failed authentication)")
                elif cs.closer == "client":
                    sev, who = "info", f"the client {how} the connection"
                else:
                    sev, who = ("warning" if cs.closed == "rst" else "info"), f"connection {how}"
                waits = [max(0.0, (end - p.request_time) * 1000.0) for p in waiting]
                names = _names(waiting)
                tmpl = who + " with {count} request(s) in flight (" + names.replace("{", "{{").replace(
                    "}", "}}") + "), {age} after the oldest was sent"
                det = {"count": len(waiting), "closed": cs.closed, "closed_by": cs.closer,
                       "max_wait_ms": round(max(waits), 3)}
                out.append(Finding(
                    "closed-in-flight", sev, _render(tmpl, det),
                    cs.name, sorted({p.ref['request_frame'] for p in waiting})[:MAX_LIST],
                    [p.ref for p in waiting][:MAX_LIST], det, advice=fix or None, story=(who, names),
                    template=tmpl, advice_template=fix))
            waiting = []     # in flight at the close: closed-in-flight, above, judged them
        if "unanswered-request" not in on:
            return out
        late = [p for p in waiting if (end - p.request_time) * 1000.0 > p.allowance_ms + self.slow_ms]
        recent = [p for p in waiting if p not in late]
        lost, client = cs.lost()
        if lost & (1 << (1 - client)):
            # the capture missed bytes of the broker's side: their responses may be there
            skip = ("info", "got no response the capture shows, although later requests were answered "
                            "(bytes of the broker's side were not captured)", "")
        else:
            skip = ("error", "got no response although later requests on the connection were answered",
                    "a broker bug (a broker answers each request of a connection, in order): look in its log "
                    "around the time these requests were sent")
        for pending, sev, what, fix in (
                (skipped, *skip),
                (late, "warning", "got no response before the capture ended", ""),
                (recent, "info", "were still waiting when the capture ended", "")):
            if not pending:
                continue
            waits = [max(0.0, (end - p.request_time) * 1000.0) for p in pending]
            names = _names(pending)
            tmpl = ("{count} request(s) (" + names.replace("{", "{{").replace("}", "}}") + ") " + what
                    + ", the oldest sent {age} before the end")
            det = {"count": len(pending), "max_wait_ms": round(max(waits), 3),
                   "waited_ms": [round(w, 3) for w in waits][:MAX_LIST]}
            out.append(Finding(
                "unanswered-request", sev, _render(tmpl, det),
                cs.name, sorted({p.ref['request_frame'] for p in pending})[:MAX_LIST],
                [p.ref for p in pending][:MAX_LIST], det, advice=fix or None, story=(what, names),
                template=tmpl, advice_template=_literal_text(fix)))
        return out


def _sasl_advice(error: str, mech_error: Any) -> str:
    """What to do about a failed SaslAuthenticate."""
    if mech_error == "unknown-user":
        return ("create the user's SCRAM credentials on the broker (kafka-configs --alter --entity-type users "
                "--add-config 'SCRAM-SHA-256=[password=...]'), or correct the client's username")
    if mech_error == "invalid-proof":
        return "the password is wrong: correct the client's password (or reset the user's SCRAM credentials)"
    if error.startswith("SASL_AUTHENTICATION_FAILED"):
        return "check the client's username, password and mechanism against the users the broker knows"
    return ""


def _literal_text(text: str) -> str:
    """``text`` as a part of a template (its braces doubled)."""
    return text.replace("{", "{{").replace("}", "}}")


def _age(ms: float) -> str:
    """A wait in words: "less than 1 ms", "12 ms", "3.4 s"."""
    if ms < 1.0:
        return "less than 1 ms"
    return f"{ms:.0f} ms" if ms < 10_000 else f"{ms / 1000:.1f} s"


def _render(template: str, details: dict[str, Any]) -> str:
    """A finding's message (or advice) from its template and details; words made of them:
    {age} (max_wait_ms), {versions} (api_versions: "v0, v1, v2"), {clients} (client_ids)."""
    if not template:
        return ""
    extra: dict[str, Any] = {}
    if "max_wait_ms" in details:
        extra["age"] = _age(details["max_wait_ms"])
    if "api_versions" in details:
        extra["versions"] = ", ".join(f"v{v}" for v in details["api_versions"])
    if "client_ids" in details:
        ids = [c for c in details["client_ids"] if c]
        named = "client " + ", ".join(ids[:3]) + (f" (and {len(ids) - 3} more)" if len(ids) > 3 else "")
        extra["clients"] = named if ids else "a client without client id"
        if ids and None in details["client_ids"]:
            extra["clients"] += " and a client without client id"
    return template.format(**details, **extra) if extra else template.format(**details)


def _conn_list(conns: list[str]) -> str:
    shown = ", ".join(conns[:3])
    return f"{len(conns)} connections: {shown}" + (", ..." if len(conns) > 3 else "")


def tell_once(findings: list[Finding]) -> list[Finding]:
    """The same story on several connections, told once: findings of one rule, severity,
    capture and story (what the message says but for counts and waits) become one, whose
    count is their total, whose max_* figures are the largest, whose frames and exchanges
    are each connection's first, with ``details["connections"]`` and ``details["occurrences"]``
    (how many) and the findings themselves in ``occurrences``. Findings without a story
    (the global rules: already one per producer or group) stay as they are. The order is
    that of each story's first finding."""
    groups: dict[tuple[Any, ...], list[Finding]] = {}
    order: list[tuple[Any, ...] | Finding] = []
    for f in findings:
        if f.story is None or not f.template:
            order.append(f)
            continue
        k = (f.rule, f.severity, f.capture, f.story)
        g = groups.get(k)
        if g is None:
            g = groups[k] = []
            order.append(k)
        g.append(f)
    out: list[Finding] = []
    for item in order:
        if isinstance(item, Finding):
            out.append(item)
            continue
        g = groups[item]
        if len(g) == 1:
            out.append(g[0])
            continue
        first = g[0]
        det = dict(first.details)
        for f in g[1:]:
            _fold_details(det, f.details)
        det["count"] = sum(int(f.details.get("count", 1)) for f in g)
        det.pop("listed", None)
        det.pop("waited_ms", None)
        conns = list(dict.fromkeys(f.conn for f in g))
        det["connections"] = conns[:MAX_LIST]
        det["occurrences"] = len(g)
        heads = sorted(((min(f.frames), f) for f in g if f.frames), key=lambda x: x[0])[:MAX_LIST]
        told = Finding(first.rule, first.severity,
                       _render(first.template, det) + f" (on {len(conns)} connections)",
                       _conn_list(conns), [fr for fr, _f in heads],
                       [f.exchanges[0] for _fr, f in heads if f.exchanges], det, first.capture,
                       _render(first.advice_template, det) or first.advice,
                       story=first.story, template=first.template, advice_template=first.advice_template,
                       occurrences=list(g))
        out.append(told)
    return out


def _names(pending: list[_Pending]) -> str:
    c = Counter(f"{p.ref['api_name']} v{p.ref['api_version']}" for p in pending)
    return ", ".join(f"{n}x{k}" if n > 1 else k for k, n in c.most_common(4)).replace(" v None", "")


def _seq_before(a: int, b: int) -> bool:
    """a comes before b in int32 sequence space (with wrap-around)."""
    return a != b and (b - a) % INT32_SPAN < INT32_SPAN // 2


def count_by_severity(findings: Iterable[Finding]) -> dict[str, int]:
    c = Counter(f.severity for f in findings)
    return {s: c.get(s, 0) for s in SEVERITIES}


def check_exchanges(exchanges: Iterable[Exchange], **kwargs: Any) -> list[Finding]:
    """Convenience: run a fresh Checker over ``exchanges`` and return its findings."""
    return Checker(**kwargs).add_all(exchanges).finish()
