"""What the rules share: the finding, the counted finding (``Bucket``) and how findings are
told, what the rules keep of a connection, and the ``Unit`` a rule (or a family of rules
sharing state) is written as."""
from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Iterable
from copy import deepcopy
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple, TypeVar

from analyzer.model import Conn, Exchange, Frame
from dissectors.field import Field

SEVERITIES = ("error", "warning", "info")
MAX_LIST = 50               # frames / exchanges kept per finding (counts stay exact)
INT32_SPAN = 1 << 31

# API keys the rules look at
PRODUCE, FETCH, JOIN_GROUP, SYNC_GROUP, SASL_HANDSHAKE, API_VERSIONS, SASL_AUTHENTICATE, SHARE_FETCH = \
    0, 1, 11, 14, 17, 18, 36, 78

# the names of the few error codes the rules read from trees (Exchange.error_codes carries names)
ERROR_NAMES = {33: "UNSUPPORTED_SASL_MECHANISM", 35: "UNSUPPORTED_VERSION", 45: "OUT_OF_ORDER_SEQUENCE_NUMBER",
               46: "DUPLICATE_SEQUENCE_NUMBER", 58: "SASL_AUTHENTICATION_FAILED", 70: "FETCH_SESSION_ID_NOT_FOUND",
               71: "INVALID_FETCH_SESSION_EPOCH"}


class Rule(NamedTuple):
    id: str
    severity: str       # the highest severity the rule reports
    scope: str          # "connection" | "global"
    summary: str


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
                             "exchanges": [dict(e) for e in self.exchanges], "details": deepcopy(self.details)}
        if self.capture is not None:
            d["capture"] = self.capture
        if self.occurrences:
            d["occurrences"] = [o.to_json() for o in self.occurrences]
        return d

    @property
    def first_frame(self) -> int:
        return min(self.frames) if self.frames else 0


def count_by_severity(findings: Iterable[Finding]) -> dict[str, int]:
    c = Counter(f.severity for f in findings)
    return {s: c.get(s, 0) for s in SEVERITIES}


REF_KEYS = ("api_name", "api_version", "correlation_id", "request_frame", "response_frame")


def exchange_ref(ex: Exchange) -> dict[str, Any]:
    return dict(zip(REF_KEYS, (ex.api_name, ex.api_version, ex.correlation_id, ex.request_frame,
                               ex.response_frame), strict=True))


def ref_of(d: dict[str, Any]) -> dict[str, Any]:
    """The exchange reference among a dict's items (a group event, an ApiVersions answer)."""
    return {k: d[k] for k in REF_KEYS}


def order_key(fr: Frame | None) -> tuple[int, int] | None:
    """Where a request or response comes in the capture (to compare with others), if there."""
    return (fr.last_index, fr.stream_offset) if fr is not None else None


def batch_summaries(records: Field | None) -> list[dict[str, Any]]:
    """Batch summaries of a records field: extra["batches"] when the record decoder wrote it,
    else what a full tree's batches say of their producer and sequence."""
    if records is None:
        return []
    batches = (records.extra or {}).get("batches")
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


def literal_text(text: str) -> str:
    """``text`` as a part of a template (its braces doubled)."""
    return text.replace("{", "{{").replace("}", "}}")


def render(template: str, details: dict[str, Any]) -> str:
    """A finding's message (or advice) from its template and details; words made of them:
    {age} (max_wait_ms: "less than 1 ms", "12 ms", "3.4 s"), {versions} (api_versions:
    "v0, v1, v2"), {clients} (client_ids)."""
    if not template:
        return ""
    extra: dict[str, Any] = {}
    if "max_wait_ms" in details:
        ms = details["max_wait_ms"]
        extra["age"] = "less than 1 ms" if ms < 1.0 else f"{ms:.0f} ms" if ms < 10_000 else f"{ms / 1000:.1f} s"
    if "api_versions" in details:
        extra["versions"] = ", ".join(f"v{v}" for v in details["api_versions"])
    if "client_ids" in details:
        ids = [c for c in details["client_ids"] if c]
        named = "client " + ", ".join(ids[:3]) + (f" (and {len(ids) - 3} more)" if len(ids) > 3 else "")
        extra["clients"] = named if ids else "a client without client id"
        if ids and None in details["client_ids"]:
            extra["clients"] += " and a client without client id"
    return template.format(**details, **extra) if extra else template.format(**details)


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
class Bucket:
    """Findings of one rule and key, counted; the message and the advice are templates over details."""
    rule: str
    severity: str
    conn: str
    template: str
    details: dict[str, Any]
    count: int = 0
    frames: list[int] = field(default_factory=list)
    exchanges: list[dict[str, Any]] = field(default_factory=list)
    advice: str = ""

    def add(self, ex: Exchange | dict[str, Any], frames: Iterable[int] | str = "both", n: int = 1,
            **unite: Any) -> None:
        """Count ``n`` more, listing ``ex`` and ``frames`` (or those of a side of ``ex``: "both",
        "request", "response"); ``unite``: values added to list details."""
        if isinstance(frames, str):
            assert not isinstance(ex, dict)
            if frames == "both":
                frames = [f for f in (ex.request_frame, ex.response_frame) if f is not None]
            else:
                f = ex.request_frame if frames == "request" else ex.response_frame
                frames = [f] if f else []
        for k, v in unite.items():
            self.unite(k, v)
        self.count += n
        if len(self.frames) < MAX_LIST:
            for f in frames:
                if f not in self.frames:
                    self.frames.append(f)
        if len(self.exchanges) < MAX_LIST:
            self.exchanges.append(ex if isinstance(ex, dict) else exchange_ref(ex))

    def merge(self, other: Bucket) -> None:
        self.count += other.count
        self.frames = (self.frames + [f for f in other.frames if f not in self.frames])[:MAX_LIST]
        self.exchanges = (self.exchanges + other.exchanges)[:MAX_LIST]
        _fold_details(self.details, other.details)

    def unite(self, key: str, value: Any) -> None:
        """Add ``value`` to the list detail ``key`` (one of _UNITED)."""
        have = self.details[key]
        if value not in have:
            self.details[key] = _united(have, [value])

    def most(self, key: str, value: Any) -> None:
        """Keep the largest ``value`` in the detail ``key`` (a max_* figure)."""
        self.details[key] = max(self.details[key], value)

    def finding(self, story: tuple[Any, ...] = ()) -> Finding:
        details = dict(self.details, count=self.count)
        if self.count > len(self.exchanges) and self.exchanges:
            details["listed"] = len(self.exchanges)
        return Finding(self.rule, self.severity, render(self.template, details), self.conn,
                       sorted(self.frames), list(self.exchanges), details, advice=render(self.advice, details) or None,
                       story=story, template=self.template, advice_template=self.advice)


class Buckets(dict[tuple[Any, ...], Bucket]):
    """The counted findings of a run, by (rule, severity, connection, *key): one store for
    every rule (``Unit.bucket``), merged with a worker's as a whole."""

    def merge(self, other: Buckets) -> None:
        for k, b in other.items():
            if k in self:
                self[k].merge(b)
            else:
                self[k] = b

    def findings(self, on: frozenset[str]) -> list[Finding]:
        return [b.finding(k[3:]) for k, b in self.items() if b.rule in on]


def tell_once(findings: list[Finding]) -> list[Finding]:
    """The same story on several connections, told once: findings of one rule, severity,
    capture and story (what the message says but for counts and waits) become one: their
    total count, the largest max_* figures, each connection's first frame and exchange,
    ``details["connections"]`` and ``["occurrences"]`` (how many), the findings themselves in
    ``occurrences``. Findings without a story (the global rules) stay; the order is that of
    each story's first finding."""
    groups: dict[Any, list[Finding]] = {}
    for f in findings:
        k = id(f) if f.story is None or not f.template else (f.rule, f.severity, f.capture, f.story)
        groups.setdefault(k, []).append(f)
    out: list[Finding] = []
    for g in groups.values():
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
        det["connections"], det["occurrences"] = conns[:MAX_LIST], len(g)
        heads = sorted(((min(f.frames), f) for f in g if f.frames), key=lambda x: x[0])[:MAX_LIST]
        out.append(Finding(first.rule, first.severity,
                       render(first.template, det) + f" (on {len(conns)} connections)",
                       f"{len(conns)} connections: " + ", ".join(conns[:3]) + (", ..." if len(conns) > 3 else ""),
                       [fr for fr, _f in heads],
                       [f.exchanges[0] for _fr, f in heads if f.exchanges], det, first.capture,
                       render(first.advice_template, det) or first.advice,
                       story=first.story, template=first.template, advice_template=first.advice_template,
                       occurrences=list(g)))
    return out


T = TypeVar("T")


class Kept(list[T]):
    """What a unit keeps over the run, up to ``most`` items, and how many it dropped beyond."""

    def __init__(self, most: int) -> None:
        super().__init__()
        self.most, self.dropped = most, 0

    def room(self) -> bool:
        """Whether there is room for more (if not, one more is counted as dropped)."""
        if len(self) < self.most:
            return True
        self.dropped += 1
        return False

    def merge(self, other: Kept[T]) -> None:
        self.extend(other)
        self.dropped += other.dropped


@dataclass
class Pending:
    """A request without response, kept until finish() can tell why."""
    ref: dict[str, Any]
    req_key: tuple[int, int]
    request_time: float
    allowance_ms: float


@dataclass(slots=True)
class ConnState:
    """What the rules keep of one connection (one per connection seen: kept small; the
    lists are made when first needed). The first fields are the driver's; then each
    unit's, by the rules that keep them."""
    name: str
    syn_seen: bool = False
    closed: str | None = None
    closer: str | None = None       # "client" | "broker" | None (not known)
    last_ts: float = 0.0
    # the connection while it may have exchanges to come; then what finish() reads of it:
    # the sides whose bytes the capture lost, and which is the client
    conn: Conn | None = None
    lost_from: int = 0
    client_dir: int | None = None
    seq: int = 0                    # Exchange.seq of the latest exchange seen
    # orphan responses on a connection seen from its start: an error, unless the capture lost
    # bytes of the client's side (a request it missed), which finish() can tell (Orphans)
    orphans: Bucket | None = None
    # Answers: the latest-sent request answered so far, the requests without answer
    last_answered: tuple[int, int] | None = None
    unanswered: list[Pending] | None = None
    # Correlations: the correlation ids of the latest requests
    corr: OrderedDict[int, list[tuple[tuple[int, int], tuple[int, int] | None, tuple[Any, ...]]]] | None = None
    # Versions: the broker's ApiVersions answer; its UNSUPPORTED_VERSION answers
    advertised: dict[int, tuple[int, int]] | None = None
    advertised_frame: int = 0
    fallback: list[dict[str, Any]] | None = None
    # Sasl
    sasl_handshake_frame: int | None = None
    sasl_handshake_version: int | None = None
    sasl_ok_frame: int | None = None
    # FetchSessions: the established session id (0: none), the epoch to come
    fetch_sid: int = 0
    fetch_next_epoch: int | None = None
    # InFlightRules: the latest-sent Produce answered so far
    last_produce: tuple[int, int] | None = None

    def lost(self) -> tuple[int, int]:
        """(lost_from, client direction) of the connection (see Conn)."""
        c = self.conn
        return (c.lost_from, c.client_dir or 0) if c is not None else (self.lost_from, self.client_dir or 0)

    def merge(self, other: ConnState) -> None:
        """The same connection split over checkers: what the units judge at its end, joined."""
        if self.orphans is None:
            self.orphans = other.orphans
        elif other.orphans is not None:
            self.orphans.merge(other.orphans)
        if other.unanswered:
            self.unanswered = (self.unanswered or []) + other.unanswered
        if other.fallback:
            self.fallback = (self.fallback or []) + other.fallback
        self.last_ts = max(self.last_ts, other.last_ts)


@dataclass
class Settings:
    """What every unit of a checker reads: the rules on, the thresholds, the findings store."""
    on: frozenset[str]
    slow_ms: float
    storm_rebalances: int
    storm_window_s: float
    buckets: Buckets


class Unit:
    """A rule, or a family of rules sharing state: it follows the exchanges its class
    attributes say, keeps its state (per run; per connection in the ConnState fields named
    after it) and counts findings in the shared buckets as they come (``add``). ``retire``:
    a connection ended (forget what only its next exchanges read; say whether ``conn_end``
    has something left to judge); ``conn_end``, ``finish``: judge what is left of a
    connection, of the run (the state unchanged); ``merge``: fold a worker's unit into this
    one (``ConnState.merge``: a connection's state)."""
    ids: ClassVar[tuple[str, ...]]
    # what it follows: these API keys (None: every key); exchanges without API key; those
    # without request (orphan responses: then only them); legacy framing (pre-0.8); even
    # when none of its rules is on (what other rules or the timeline read)
    apis: ClassVar[frozenset[int] | None] = None
    keyless: ClassVar[bool] = False
    requestless: ClassVar[bool] = False
    legacy: ClassVar[bool] = False
    always: ClassVar[bool] = False

    def __init__(self, settings: Settings) -> None:
        self.settings, self.on = settings, settings.on

    def follows(self, api_key: int | None, legacy: bool, requestless: bool) -> bool:
        if requestless != self.requestless or not (self.always or self.on.intersection(self.ids)):
            return False
        if api_key is None:
            return self.keyless
        return (self.legacy or not legacy) and (self.apis is None or api_key in self.apis)

    def bucket(self, rule: str, severity: str, cs: ConnState, key: tuple[Any, ...], template: str,
               details: dict[str, Any], advice: str = "") -> Bucket:
        """The bucket of (rule, severity, connection, *key), made with the rest when new."""
        k, buckets = (rule, severity, cs.name, *key), self.settings.buckets
        b = buckets.get(k)
        if b is None:
            b = buckets[k] = Bucket(rule, severity, cs.name, template, details, advice=advice)
        return b

    def add(self, ex: Exchange, cs: ConnState) -> None:
        pass

    def retire(self, cs: ConnState) -> bool:
        return False

    def conn_end(self, cs: ConnState, end: float) -> list[Finding]:
        return []

    def finish(self) -> list[Finding]:
        return []

    def merge(self, other: Any) -> None:
        for k, v in vars(self).items():     # (what it Kept over the run; the rest is its own)
            if isinstance(v, Kept):
                v.merge(getattr(other, k))

    def stats(self) -> dict[str, int]:
        return {}
