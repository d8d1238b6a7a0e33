"""Latency, error and throughput statistics over Exchanges: a mergeable accumulator.

No click, no I/O: ``cmd_stats`` feeds exchanges in and renders ``result()``; the
Spark job builds one accumulator per partition, ships ``to_state()`` (plain,
JSON-safe dicts) and merges them with ``merge``/``from_state``, so both print the
same figures.

Figures and their definitions
-----------------------------
- latency: request completion to response completion (``Exchange.latency_ms``:
  time of the packet that completed the response frame minus that of the packet
  that completed the request frame); ttfb: request completion to the packet that
  carried the response's first byte (``Exchange.ttfb_ms``).
- percentiles: nearest-rank. For ``n`` values sorted ascending, ``pX`` is the value
  at 1-based rank ``ceil(X/100 * n)`` (at least 1): the smallest value that at
  least X % of the values do not exceed. EXACT while a group holds at most
  ``EXACT_LIMIT`` values; beyond that a DDSketch (core/src/quantiles.rs: logarithmic
  mapping, unbounded dense stores, the ``ddsketch`` package's bins) answers the same rank query with
  a relative error of at most ``RELATIVE_ACCURACY`` (1 %) of the true value at
  that rank, clamped to the exact min and max. min, max and mean are always
  exact (the sum is kept in integer nanoseconds, so merging in any order gives
  the same mean).
- merging two exact partials stays exact while the combined count is within the
  limit; otherwise all values go to the sketch, whose buckets do not depend on
  the order values arrive in, so ``merge(a, b)`` gives the same figures as one
  accumulator over everything.
- bytes_in / bytes_out: Kafka frame bytes on the wire including the 4-byte size
  prefix (request: client to broker; response: broker to client).
- waits: exchanges whose latency is the broker waiting on purpose, reported
  apart (``waits`` counts by kind, ``latency_ms_excl_waits`` = service only):
  ``fetch_max_wait`` (a Fetch whose latency >= 0.9 * max_wait_ms and that
  returned fewer record bytes than max(min_bytes, 1)), ``join_group`` (JoinGroup,
  held until the rebalance completes; not MEMBER_ID_REQUIRED answers),
  and ``sync_group_follower`` (SyncGroup with no assignments: a follower held
  until the leader sends the assignment). A Produce's wait for its in-sync
  replicas (acks=-1) is the work it asks for, not an idle wait: it is service
  time (the producers' acks are counted per producer).
- throttling: a response whose body has throttle_time_ms > 0 counts as throttled;
  the total and max throttle_time_ms are reported.
- unanswered, orphan (response without captured request) and no-response
  (Produce acks=0) exchanges are counted per group, never in latency.
- grouping by ``topic``/``partition`` expands an exchange into one entry per
  topic-partition it names (Produce/Fetch: ``ex.partitions``; other APIs: the
  request's ``topics`` array, when present); such an exchange counts once in
  each group it touches, with its whole latency and bytes.
"""
from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from itertools import filterfalse
from operator import itemgetter
from typing import Any

from analyzer._core import EXACT_LIMIT, RELATIVE_ACCURACY, Quantiles, sum_ns
from analyzer.figures import KEY_COLUMNS, PERCENTILES
from analyzer.model import Exchange
from analyzer.sinks.insights import (
    COMMITTED_APIS,
    GROUP_MEMBER_APIS,
    CommittedLag,
    ConsumerLag,
    GroupStories,
    InFlight,
    ProducerStories,
)
from dissectors.field import body_of as _body
from dissectors.field import int_value as _int

_FOLD_BATCH = 1024          # latencies a group hands its Quantiles at once (GroupStats.settle)
# latency (ms) -> hist_bucket(latency) (_buckets_of)
_BUCKETS: dict[float, int] = {}
WAIT_FETCH_FRACTION = 0.9
GROUP_KEYS = tuple(KEY_COLUMNS)
DEFAULT_BY = ("api", "version")
DEFAULT_KEEP_TOP = 100
STATE_VERSION = 3


def keep_top_for(top: int) -> int:
    """The slowest exchanges an accumulator keeps to list ``top`` of them (0: none)."""
    return max(top, DEFAULT_KEEP_TOP) if top else 0

# -- quantiles ----------------------------------------------------------------

# Quantiles (analyzer._core, core/src/quantiles.rs): exact values up to a limit, then a
# DDSketch; add / extend, merge, count, min, max, sum_ns, exact, quantile(s), to_state /
# from_state


def quantile_summary(q: Quantiles) -> dict[str, float | None]:
    """min, p50, p90, p99, p999, max, mean in ms (rounded to the microsecond)."""
    values = q.quantiles([p for _name, p in PERCENTILES])
    if values is None:
        return {k: None for k in ("min", "p50", "p90", "p99", "p999", "max", "mean")}
    out: dict[str, float | None] = {"min": _r(q.min)}
    for (name, _p), v in zip(PERCENTILES, values, strict=True):
        out[name] = _r(v)
    out["max"] = _r(q.max)
    out["mean"] = _r(q.sum_ns / q.count / 1e6)
    return out


def _r(v: float) -> float:
    return round(v, 3)


# -- histogram buckets (1-2-5 log scale, ms) ------------------------------------

_SUB_EDGES = (1.0, 2.0, 5.0)


def hist_bucket(v: float) -> int:
    """Bucket index of a latency in ms on a 1-2-5 log scale; values <= 1 us share the lowest."""
    v = max(round(v, 3), 0.001)  # to the us: epoch-float timestamps make 1 ms come out as 0.99993
    d = math.floor(math.log10(v))
    m = v / 10.0 ** d
    if m >= 9.999999:  # float fuzz at decade boundaries
        d, m = d + 1, 1.0
    sub = 0 if m < 2.0 else (1 if m < 5.0 else 2)
    return d * 3 + sub


def _buckets_of(values: list[float]) -> list[int]:
    """``hist_bucket`` of each latency through a cache: a bucket costs two logs, and latencies
    repeat (timestamps in us), so mostly dict hits in C; a miss raises KeyError, so hits are
    not scanned for it. The cache is emptied when full (memory stays flat)."""
    cache = _BUCKETS
    try:
        return list(map(cache.__getitem__, values))
    except KeyError:
        if len(cache) >= 65536:
            cache.clear()
        for v in filterfalse(cache.__contains__, values):     # the misses, found in C
            cache[v] = hist_bucket(v)
        return list(map(cache.__getitem__, values))


def hist_bucket_lower(i: int) -> float:
    d, sub = divmod(i, 3)
    return _SUB_EDGES[sub] * 10.0 ** d


def fmt_ms(v: float) -> str:
    """Compact human text for a duration in ms: 500us, 2ms, 1.5s."""
    if v < 1:
        return f"{v * 1000:g}us"
    if v < 1000:
        return f"{v:g}ms"
    return f"{v / 1000:g}s"


# -- what one exchange contributes ----------------------------------------------


def _part_error(e: Any) -> str | None:
    if e is None or e == 0 or e == "NONE" or e == "":
        return None
    return str(e)


def topic_partitions(ex: Exchange) -> list[tuple[str | None, int | None, dict[str, Any] | None]]:
    """(topic, partition, partition dict or None) for every topic-partition the exchange names
    (one (None, None, None) when it names none): what grouping by topic or partition counts."""
    return named_topic_partitions(ex) or [(None, None, None)]


def named_topic_partitions(ex: Exchange) -> list[tuple[str | None, int | None, dict[str, Any] | None]]:
    """(topic, partition, partition dict or None) of the topic-partitions the exchange names:
    its partitions (Produce, Fetch), else those its request's top-level topics array lists
    (the core reads them alike: ``Figures::request_topics``)."""
    if ex.partitions:
        return [(p.get("topic"), _int(p.get("partition")), p) for p in ex.partitions]
    body = _body(ex.request_tree)
    out: list[tuple[str | None, int | None, dict[str, Any] | None]] = []
    if body is not None:
        topics = body.child("topics") or body.child("topic_data")
        for t in (topics.children or ()) if topics is not None else ():
            name = t.get("name")
            if name is None:
                name = t.get("topic")
            if name is None:
                name = t.get("topic_name")
            if name is None and t.value is not None and isinstance(t.value, str):
                name = t.value  # an array of topic-name strings
            parts = None
            for pname in ("partitions", "partition_indexes", "partition_data"):
                parts = t.child(pname)
                if parts is not None:
                    break
            pids: list[int | None] = []
            for p in (parts.children or ()) if parts is not None else ():
                if isinstance(p.value, int):
                    pids.append(p.value)
                else:
                    pid = p.get("partition_index")
                    if pid is None:
                        pid = p.get("partition")
                    if pid is None:
                        pid = p.get("index")
                    pids.append(_int(pid))
            if not pids:
                pids = [None]
            out.extend((name, pid, None) for pid in pids)
    return out


def wait_kind(ex: Exchange, lat: float | None = None) -> str | None:
    """Why the broker held this exchange on purpose, or None for plain service time
    (``lat``: its latency_ms when the caller has it already)."""
    if lat is None:
        lat = ex.latency_ms
        if lat is None:
            return None
    name = ex.api_name
    tree = ex.request_tree
    if name == "Fetch":
        if tree is None:
            return None
        max_wait = _int(tree.get_in("body", "max_wait_ms"))
        if not max_wait or max_wait <= 0 or lat < WAIT_FETCH_FRACTION * max_wait:
            return None
        min_bytes = _int(tree.get_in("body", "min_bytes")) or 1
        got = 0
        for p in ex.partitions:
            got += int(p.get("bytes") or 0)
        return "fetch_max_wait" if got < max(min_bytes, 1) else None
    if name == "JoinGroup":
        if "MEMBER_ID_REQUIRED" in ex.error_codes:
            return None
        return "join_group"
    if name == "SyncGroup":
        # a follower (no assignments to hand out) is held until the leader's SyncGroup arrives
        body = _body(tree)
        if body is not None:
            assignments = body.child("assignments")
            if assignments is not None and not assignments.children:
                return "sync_group_follower"
    return None


def throttle_ms(ex: Exchange) -> int:
    """The response body's throttle_time_ms when an int (not a bool) > 0, else 0."""
    tree = ex.response_tree
    t = tree.get_in("body", "throttle_time_ms") if tree is not None else None
    if t.__class__ is not int:      # _int's answer, without its call for a plain int
        t = _int(t)
    return t if t and t > 0 else 0


def frame_bytes(fr: Any) -> int:
    return fr.size + 4 if fr is not None else 0


# -- groups ---------------------------------------------------------------------


class GroupStats:
    """One group's figures. Its latencies wait in the ``*_pending`` lists (``StatsAccumulator.add``
    appends to them: a list append, not a call into the core per value) and go to the
    Quantiles ``_FOLD_BATCH`` at a time (``settle``); reading ``latency``, ``ttfb`` or
    ``service`` settles first."""
    __slots__ = ("count", "answered", "unanswered", "orphans", "no_response", "malformed",
                 "errors", "error_exchanges", "_latency", "_ttfb", "_service", "waits",
                 "bytes_in", "bytes_out", "throttled", "throttle_total", "throttle_max",
                 "records", "record_bytes", "latency_pending", "ttfb_pending", "service_pending")

    def __init__(self) -> None:
        self.count = 0
        self.answered = 0
        self.unanswered = 0
        self.orphans = 0
        self.no_response = 0
        self.malformed = 0
        self.errors: Counter[str] = Counter()
        self.error_exchanges = 0
        self._latency = Quantiles()
        self._ttfb = Quantiles()
        self._service = Quantiles()
        self.latency_pending: list[float] = []
        self.ttfb_pending: list[float] = []
        self.service_pending: list[float] = []
        self.waits: Counter[str] = Counter()
        self.bytes_in = 0
        self.bytes_out = 0
        self.throttled = 0
        self.throttle_total = 0
        self.throttle_max = 0
        self.records = 0
        self.record_bytes = 0

    def settle(self) -> None:
        """Hand the pending latencies to the Quantiles (in arrival order)."""
        if self.latency_pending:
            self._latency.extend(self.latency_pending)
            self._ttfb.extend(self.ttfb_pending)
            self.latency_pending, self.ttfb_pending = [], []
        if self.service_pending:
            self._service.extend(self.service_pending)
            self.service_pending = []

    @property
    def latency(self) -> Quantiles:
        self.settle()
        return self._latency

    @property
    def ttfb(self) -> Quantiles:
        self.settle()
        return self._ttfb

    @property
    def service(self) -> Quantiles:
        """The latencies of the exchanges that were not waits."""
        self.settle()
        return self._service

    _INTS = ("count", "answered", "unanswered", "orphans", "no_response", "malformed", "error_exchanges",
             "bytes_in", "bytes_out", "throttled", "throttle_total", "records", "record_bytes")

    def merge(self, o: GroupStats) -> None:
        for a in self._INTS:
            setattr(self, a, getattr(self, a) + getattr(o, a))
        self.throttle_max = max(self.throttle_max, o.throttle_max)
        self.errors.update(o.errors)
        self.waits.update(o.waits)
        self.latency.merge(o.latency)
        self.ttfb.merge(o.ttfb)
        self.service.merge(o.service)

    def to_state(self) -> dict[str, Any]:
        st: dict[str, Any] = {a: getattr(self, a) for a in self._INTS}
        st["throttle_max"] = self.throttle_max
        st["errors"] = dict(self.errors)
        st["waits"] = dict(self.waits)
        st["latency"] = self.latency.to_state()
        st["ttfb"] = self.ttfb.to_state()
        st["service"] = self.service.to_state()
        return st

    @classmethod
    def from_state(cls, st: dict[str, Any]) -> GroupStats:
        g = cls()
        for a in cls._INTS:
            setattr(g, a, st[a])
        g.throttle_max = st["throttle_max"]
        g.errors = Counter(st["errors"])
        g.waits = Counter(st["waits"])
        g._latency = Quantiles.from_state(st["latency"])
        g._ttfb = Quantiles.from_state(st["ttfb"])
        g._service = Quantiles.from_state(st["service"])
        return g

    def result(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "answered": self.answered,
            "unanswered": self.unanswered,
            "orphans": self.orphans,
            "no_response": self.no_response,
            "malformed": self.malformed,
            "errors": dict(sorted(self.errors.items())),
            "error_exchanges": self.error_exchanges,
            "latency_ms": quantile_summary(self.latency),
            "ttfb_ms": quantile_summary(self.ttfb),
            "latency_ms_excl_waits": quantile_summary(self.service),
            "waits": dict(sorted(self.waits.items())),
            "service": self.service.count,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "throttled": self.throttled,
            "throttle_time_ms": {"total": self.throttle_total, "max": self.throttle_max},
            "records": self.records,
            "record_bytes": self.record_bytes,
            "exact": self.latency.exact,
        }


def _sort_key(key: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((x is None, isinstance(x, str), x if x is not None else 0) for x in key)


def _top_sort_key(rec: dict[str, Any]) -> tuple[Any, ...]:
    return (-rec["latency_ms"], rec["conn"] if rec["conn"] is not None else -1,
            rec["request_frame"] or 0, rec["correlation_id"] if rec["correlation_id"] is not None else -1)


# exchanges whose latency can be a deliberate wait (see wait_kind)
_WAIT_APIS = frozenset({"Fetch", "JoinGroup", "Produce", "SyncGroup"})
_NO_CONN: tuple[None, None, None, None] = (None, None, None, None)
# API keys the stories read (analyzer.sinks.insights): Produce, Fetch, the requests that name a group
_STORY_KEYS = frozenset({0, 1}) | GROUP_MEMBER_APIS | COMMITTED_APIS
# views that cost much of stats' time (the committed lag decodes its APIs in full, the
# in-flight depth follows every request): kept only when asked for (``views``)
COSTLY_VIEWS = ("committed_lag", "in_flight")
# the figures of a per_second row, in order
_PER_SECOND = ("requests", "produced_records", "produced_bytes", "fetched_records", "fetched_bytes")


class StatsAccumulator:
    """Feed Exchanges with ``add``; combine partials with ``merge``; read ``result``."""

    def __init__(self, by: Sequence[str] = DEFAULT_BY, keep_top: int = DEFAULT_KEEP_TOP,
                 views: Iterable[str] = COSTLY_VIEWS) -> None:
        bad = [b for b in by if b not in GROUP_KEYS]
        if bad:
            raise ValueError(f"unknown group key(s) {', '.join(bad)} (choose from {', '.join(GROUP_KEYS)})")
        if not by:
            raise ValueError("at least one group key is needed")
        self.by: tuple[str, ...] = tuple(by)
        self.keep_top = keep_top
        self.groups: dict[tuple[Any, ...], GroupStats] = {}
        self._expand = "topic" in self.by or "partition" in self.by
        # set when several captures are merged: conn keys become "<source>#<id>" and top
        # records carry "capture", since connection and frame numbers restart per file
        self.source: str | None = None
        self._conn_info: dict[Any, tuple[str | None, str | None, int | str | None, int | None]] = {}
        _plain = ("api", "version", "client_id", "client", "broker", "conn")
        key_index = tuple(_plain.index(b) for b in self.by) if not self._expand else ()
        self._api_version = key_index == (0, 1)        # the default grouping: a plain pair
        # client, broker or conn in the key
        self._need_conn = self._expand or any(i >= 3 for i in key_index)
        # the group key out of (api, version, client_id, client, broker, conn)
        self._pick: Callable[[tuple[Any, ...]], tuple[Any, ...]]
        if len(key_index) > 1:
            self._pick = itemgetter(*key_index)
        elif key_index:
            one = key_index[0]
            self._pick = lambda v: (v[one],)
        else:                       # (grouping by topic or partition: keys come from _expanded)
            self._pick = lambda v: ()
        # top: a min-heap of (priority, seq tiebreak, record) of the slowest exchanges
        self._top: list[tuple[tuple[Any, ...], int, dict[str, Any]]] = []
        # a latency (ms) below this cannot enter the top (see _push_top): most exchanges
        # are turned away by one comparison, without rounding or reading the heap (all of
        # them when there is no top: keep_top 0)
        self._top_floor = -math.inf if keep_top > 0 else math.inf
        self._top_seq = 0
        self.first_time: float | None = None
        self.last_time: float | None = None
        self.exchanges = 0
        # throughput: (topic, partition) -> [prod_records, prod_bytes, fetch_records, fetch_bytes]
        self.tp: dict[tuple[str | None, int | None], list[int]] = {}
        # per second: sec -> [requests, produced_records, produced_bytes, fetched_records, fetched_bytes]
        self.per_second: dict[int, list[int]] = {}
        # per second per api: sec -> {api: [count, latency sum ns, max latency]}
        self.api_second: dict[int, dict[str, list[float]]] = {}
        # the second add() last counted in and its per_second row: exchanges arrive in time order
        self._sec: int | None = None
        self._sec_row: list[int] = []
        # the latencies (None: no response) add() has not yet counted in per_second (requests),
        # api_second and hist: sec -> api -> [latency, ...], counted in batches in C
        # (_settle_seconds) when a new second starts and before those are read; _sec_pend is
        # _sec's dict; _sec_nones: some are None (filtered out when counted)
        self._sec_lats: dict[int, dict[str, list[float | None]]] = {}
        self._sec_pend: dict[str, list[float | None]] = {}
        self._sec_nones = False
        # latency histogram per api: api -> {bucket: n}
        self.hist: dict[str, dict[int, int]] = {}
        # consumer lag per client id and topic-partition, producers (analyzer.sinks.insights)
        self.lag = ConsumerLag()
        self.producers = ProducerStories()
        self.group_stories = GroupStories()
        # the views of COSTLY_VIEWS that are kept (None: not asked for, not computed)
        self.views = views = frozenset(views)
        # committed-offset lag per group and topic-partition
        self.committed: CommittedLag | None = CommittedLag() if "committed_lag" in views else None
        # requests outstanding at once, per connection and client id
        self.in_flight: InFlight | None = InFlight() if "in_flight" in views else None

    # -- feeding ------------------------------------------------------------------
    def add_all(self, exchanges: Iterable[Exchange]) -> StatsAccumulator:
        for ex in exchanges:
            self.add(ex)
        return self

    def add(self, ex: Exchange) -> None:
        # once per exchange, and every bytecode costs here: locals over attributes, each
        # field of the Exchange read once, no call on the plain paths but the two tree
        # lookups, plain dicts and lists (a Counter update costs twice a dict's), latencies
        # appended to the groups' pending lists (see GroupStats)
        self.exchanges += 1
        req, resp = ex.request, ex.response
        inf = self.in_flight
        if inf is not None:
            inf.capture = self.source
            inf.add(ex)
        api = ex.api_name
        if ex.api_key in _STORY_KEYS:
            if ex.api_key == 0:
                self.producers.add(ex)
            else:
                self.lag.add(ex)
                if self.committed is not None:
                    self.committed.add(ex)
                if ex.api_key != 1:
                    self.group_stories.add(ex)
        # as Exchange.latency_ms / ttfb_ms / request_time / response_time, without the properties;
        # t0 and t1, lat and ttfb are None together (declared apart: an assignment narrows them)
        t0: float | None
        t1: float | None
        lat: float | None
        ttfb: float | None
        if req is not None and resp is not None:
            t0 = req.last_ts
            t1 = resp.last_ts
            lat = (t1 - t0) * 1000.0
            ttfb = (resp.first_ts - t0) * 1000.0
            wait = wait_kind(ex, lat) if api in _WAIT_APIS else None
        else:
            lat = ttfb = wait = None
            t0 = t1 = req.last_ts if req is not None else (resp.last_ts if resp is not None else None)
        thr = throttle_ms(ex)
        b_in = req.size + 4 if req is not None else 0
        b_out = resp.size + 4 if resp is not None else 0

        # records and bytes of the topic-partitions (Produce/Fetch also per topic-partition)
        parts = ex.partitions
        nrec = nbytes = 0
        col = -1
        if parts:
            col = 0 if api == "Produce" else (2 if api == "Fetch" else -1)
            tp = self.tp
            for p in parts:
                r = int(p.get("records") or 0)
                b = int(p.get("bytes") or 0)
                nrec += r
                nbytes += b
                if col >= 0:
                    pid = p.get("partition")
                    tpk = (p.get("topic"), pid if pid.__class__ is int else _int(pid))
                    row = tp.get(tpk)
                    if row is None:
                        row = tp[tpk] = [0, 0, 0, 0]
                    row[col] += r
                    row[col + 1] += b

        # time: span, per second, per second and api, histogram per api
        if t0 is not None:
            ft = self.first_time
            if ft is None or t0 < ft:
                self.first_time = t0
            lt = self.last_time
            assert t1 is not None       # None together with t0
            if lt is None or t1 > lt:
                self.last_time = t1
            sec = int(t0)
            if sec != self._sec:
                self._to_second(sec)
            if col >= 0:
                srow = self._sec_row
                srow[col + 1] += nrec
                srow[col + 2] += nbytes
            # the request, its latency per second and api and in the histogram: one append
            lats = self._sec_pend.get(api)
            if lats is None:
                self._sec_pend[api] = [lat]
            else:
                lats.append(lat)
            if lat is None:
                self._sec_nones = True

        # the groups: one, or one per topic-partition key when grouping by topic/partition
        entries: Iterable[tuple[tuple[Any, ...], list[dict[str, Any]] | None]]
        if self._api_version:
            entries = (((api, ex.api_version), None),)
        else:
            if self._need_conn:
                conn = ex.conn
                cinfo = self._conn_info.get(conn)
                if cinfo is None or cinfo[3] != conn.client_dir:
                    if len(self._conn_info) >= 4096:
                        self._conn_info.clear()     # a cache: memory stays flat over millions of connections
                    cinfo = self._conn_info[conn] = self._describe_conn(conn)
            else:
                cinfo = _NO_CONN
            if self._expand:
                entries = self._expanded(ex, api, cinfo)
            else:
                entries = ((self._pick((api, ex.api_version, ex.client_id, cinfo[0], cinfo[1], cinfo[2])), None),)
        groups = self.groups
        status = ex.status
        for key, pds in entries:
            g = groups.get(key)
            if g is None:
                g = groups[key] = GroupStats()
            g.count += 1
            if status != "ok":
                if status == "unanswered":
                    g.unanswered += 1
                elif status == "orphan_response":
                    g.orphans += 1
                elif status == "no_response_expected":
                    g.no_response += 1
                elif status == "malformed":
                    g.malformed += 1
            if pds is None:         # the whole exchange
                errs = ex.error_codes
                if errs:
                    g.error_exchanges += 1
                    g.errors.update(errs)
                if parts:
                    g.records += nrec
                    g.record_bytes += nbytes
            else:                   # this key's share of ex.partitions
                errs = [e for e in (_part_error(pd.get("error")) for pd in pds) if e]
                if errs:
                    g.error_exchanges += 1
                    g.errors.update(errs)
                for pd in pds:
                    g.records += int(pd.get("records") or 0)
                    g.record_bytes += int(pd.get("bytes") or 0)
            g.bytes_in += b_in
            g.bytes_out += b_out
            if lat is not None:
                g.answered += 1
                pending = g.latency_pending
                pending.append(lat)
                assert ttfb is not None     # None together with lat
                g.ttfb_pending.append(ttfb)
                if wait is None:
                    g.service_pending.append(lat)
                else:
                    g.waits[wait] += 1
                if len(pending) >= _FOLD_BATCH:  # ttfb's and service's are no longer
                    g.settle()
            if thr:
                g.throttled += 1
                g.throttle_total += thr
                if thr > g.throttle_max:
                    g.throttle_max = thr

        if lat is not None and lat >= self._top_floor and \
                (len(self._top) < self.keep_top or round(lat, 3) >= self._top[0][0][0]):
            rec = self._top_record(ex, lat, ttfb, wait)
            if self.source is not None:
                rec["capture"] = self.source
            self._push_top(rec)

    def _to_second(self, sec: int) -> None:
        """Make ``sec`` the second add() counts in; a second not seen before first counts the
        latencies the others hold (they arrive in time order, give or take long waits)."""
        self._sec = sec
        srow = self.per_second.get(sec)
        if srow is None:
            srow = self.per_second[sec] = [0, 0, 0, 0, 0]
            self._settle_seconds()
            self._sec = sec
        self._sec_row = srow
        pend = self._sec_lats.get(sec)
        if pend is None:
            pend = self._sec_lats[sec] = {}
        self._sec_pend = pend

    def _settle_seconds(self) -> None:
        """Count the latencies add() left pending (``_sec_lats``): requests per second, and
        count, sum (ns) and max per second and api, and the histogram per api."""
        nones, self._sec_nones = self._sec_nones, False
        for sec, apis in self._sec_lats.items():
            srow = self.per_second.get(sec)
            if srow is None:
                srow = self.per_second[sec] = [0, 0, 0, 0, 0]
            rows = self.api_second.get(sec)
            if rows is None:
                rows = self.api_second[sec] = {}
            for api, pend in apis.items():
                srow[0] += len(pend)
                lats: list[float] = [v for v in pend if v is not None] if nones else pend  # type: ignore[assignment]  # pend holds no None unless _sec_nones was set
                if not lats:
                    continue
                ns = sum_ns(lats)
                hi = max(lats)
                a = rows.get(api)
                if a is None:
                    rows[api] = [len(lats), ns, hi]
                else:
                    a[0] += len(lats)
                    a[1] += ns
                    if hi > a[2]:
                        a[2] = hi
                h = self.hist.get(api)
                if h is None:
                    h = self.hist[api] = {}
                for b, n in Counter(_buckets_of(lats)).items():
                    h[b] = h.get(b, 0) + n
        self._sec_lats = {}
        self._sec = None            # the next add() takes its second's rows again

    def _expanded(self, ex: Exchange, api: str, cinfo: tuple[Any, ...]
                  ) -> list[tuple[tuple[Any, ...], list[dict[str, Any]] | None]]:
        """(group key, its partition dicts or None) of each key the exchange's topic-partitions
        fall in (grouping by topic/partition); several can share a key (e.g. group by topic
        only): the exchange counts once per key."""
        base = {"api": api, "version": ex.api_version, "client_id": ex.client_id,
                "client": cinfo[0], "broker": cinfo[1], "conn": cinfo[2]}
        by_key: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        for topic, part, pd in topic_partitions(ex):
            base["topic"] = topic
            base["partition"] = part
            pds = by_key.setdefault(tuple([base[b] for b in self.by]), [])
            if pd is not None:
                pds.append(pd)
        # the partition dicts come from ex.partitions, all or none (request topics): a key
        # without any is the whole exchange's (None)
        return [(k, pds or None) for k, pds in by_key.items()]

    def renumber_conns(self, number: Callable[[int], int], source: str | None) -> StatsAccumulator:
        """Connection keys given as first-packet numbers (a shard of a capture, see
        analyzer.shards) -> the capture's connection numbers, as ``<source>#<n>`` when
        ``source`` is given (several captures merged, as ``source`` does in ``add``)."""
        def label(first: int) -> int | str:
            n = number(first)
            return n if source is None else f"{source}#{n}"

        if "conn" in self.by:
            i = self.by.index("conn")
            self.groups = {k[:i] + (label(k[i]),) + k[i + 1:] if isinstance(k[i], int) else k: g
                           for k, g in self.groups.items()}
        recs = [rec for _p, _s, rec in self._top]
        self._top = []
        self._top_floor = -math.inf if self.keep_top > 0 else math.inf
        for rec in recs:
            if isinstance(rec.get("conn"), int):
                rec["conn"] = number(rec["conn"])
            if source is not None:
                rec["capture"] = source
            self._push_top(rec)
        if self.in_flight is not None:
            self.in_flight.renumber(number, source)
        return self

    def _describe_conn(self, conn: Any) -> tuple[str | None, str | None, int | str | None, int | None]:
        if conn is None:
            return None, None, None, None
        key: int | str = conn.id if self.source is None else f"{self.source}#{conn.id}"
        return str(conn.client), str(conn.broker), key, conn.client_dir

    @staticmethod
    def _top_record(ex: Exchange, lat: float, ttfb: float | None, wait: str | None) -> dict[str, Any]:
        conn = ex.conn
        return {
            "api": ex.api_name, "version": ex.api_version, "correlation_id": ex.correlation_id,
            "conn": conn.id if conn is not None else None,
            "client": str(conn.client) if conn is not None else None,
            "broker": str(conn.broker) if conn is not None else None,
            "client_id": ex.client_id,
            "request_frame": ex.request_frame, "response_frame": ex.response_frame,
            "request_time": ex.request_time,
            "latency_ms": _r(lat), "ttfb_ms": _r(ttfb) if ttfb is not None else None,
            "wait": wait, "status": ex.status, "error_codes": list(ex.error_codes),
        }

    def _push_top(self, rec: dict[str, Any]) -> None:
        # priority: the reverse of _top_sort_key, so the heap root is the first to drop
        self._top_seq += 1
        prio = tuple(-x for x in _top_sort_key(rec))
        item = (prio, -self._top_seq, rec)
        if len(self._top) < self.keep_top:
            heapq.heappush(self._top, item)
        elif item[0] > self._top[0][0]:
            heapq.heapreplace(self._top, item)
        if self._top and len(self._top) >= self.keep_top:
            # the root's rounded latency, less a margin over rounding to the microsecond
            self._top_floor = self._top[0][0][0] - 0.001

    # -- merging ------------------------------------------------------------------
    def merge(self, other: StatsAccumulator) -> StatsAccumulator:
        """Fold ``other`` into this accumulator (in place) and return self."""
        if other.by != self.by:
            raise ValueError(f"cannot merge stats grouped by {other.by} into stats grouped by {self.by}")
        self._settle_seconds()
        other._settle_seconds()
        for key, g in other.groups.items():
            mine = self.groups.get(key)
            if mine is None:
                mine = self.groups[key] = GroupStats()
            mine.merge(g)
        self.exchanges += other.exchanges
        for t in (other.first_time,):
            if t is not None and (self.first_time is None or t < self.first_time):
                self.first_time = t
        if other.last_time is not None and (self.last_time is None or other.last_time > self.last_time):
            self.last_time = other.last_time
        for tpk, row in other.tp.items():
            mine_row = self.tp.setdefault(tpk, [0, 0, 0, 0])
            for i in range(4):
                mine_row[i] += row[i]
        for sec, srow in other.per_second.items():
            mine_srow = self.per_second.get(sec)
            if mine_srow is None:
                self.per_second[sec] = list(srow)
            else:                       # in place: add() may hold it (_sec_row)
                for i in range(5):
                    mine_srow[i] += srow[i]
        for sec, apis in other.api_second.items():
            mine_apis = self.api_second.setdefault(sec, {})
            for api, a in apis.items():
                m = mine_apis.get(api)
                if m is None:
                    mine_apis[api] = list(a)
                else:
                    m[0] += a[0]
                    m[1] += a[1]
                    m[2] = max(m[2], a[2])
        for api, h in other.hist.items():
            mine_h = self.hist.setdefault(api, {})
            for b, n in h.items():
                mine_h[b] = mine_h.get(b, 0) + n
        if other.keep_top > self.keep_top:
            self.keep_top = other.keep_top
            self._top_floor = -math.inf
        for _lat, _s, rec in other._top:
            self._push_top(rec)
        self.lag.merge(other.lag)
        self.producers.merge(other.producers)
        self.group_stories.merge(other.group_stories)
        if self.committed is not None and other.committed is not None:
            self.committed.merge(other.committed)
        if self.in_flight is not None and other.in_flight is not None:
            self.in_flight.merge(other.in_flight)
        return self

    # -- state for shipping -------------------------------------------------------
    def to_state(self) -> dict[str, Any]:
        """Plain JSON-safe dicts and lists (also picklable)."""
        self._settle_seconds()
        return {
            "v": STATE_VERSION,
            "by": list(self.by),
            "keep_top": self.keep_top,
            "views": sorted(self.views),
            "exchanges": self.exchanges,
            "first_time": self.first_time,
            "last_time": self.last_time,
            "groups": [[list(k), g.to_state()] for k, g in self.groups.items()],
            "top": [rec for _l, _s, rec in sorted(self._top, key=lambda x: _top_sort_key(x[2]))],
            "tp": [[t, p, row] for (t, p), row in self.tp.items()],
            "per_second": [[sec, dict(zip(_PER_SECOND, srow, strict=True))] for sec, srow in self.per_second.items()],
            "api_second": [[sec, api, a] for sec, apis in self.api_second.items() for api, a in apis.items()],
            "hist": {api: [[b, n] for b, n in h.items()] for api, h in self.hist.items()},
            "consumer_lag": self.lag.to_state(),
            "producers": self.producers.to_state(),
            "group_stories": self.group_stories.to_state(),
            "committed_lag": self.committed.to_state() if self.committed is not None else None,
            "in_flight": self.in_flight.to_state() if self.in_flight is not None else None,
        }

    @classmethod
    def from_state(cls, st: dict[str, Any]) -> StatsAccumulator:
        if st.get("v") != STATE_VERSION:
            raise ValueError(f"stats state version {st.get('v')!r} is not {STATE_VERSION}")
        acc = cls(st["by"], st["keep_top"], views=st["views"])
        acc.exchanges = st["exchanges"]
        acc.first_time = st["first_time"]
        acc.last_time = st["last_time"]
        acc.groups = {tuple(k): GroupStats.from_state(g) for k, g in st["groups"]}
        for rec in st["top"]:
            acc._push_top(rec)
        acc.tp = {(t, p): list(row) for t, p, row in st["tp"]}
        acc.per_second = {int(sec): [c.get(k, 0) for k in _PER_SECOND] for sec, c in st["per_second"]}
        for sec, api, a in st["api_second"]:
            acc.api_second.setdefault(int(sec), {})[api] = list(a)
        acc.hist = {api: {int(b): n for b, n in h} for api, h in st["hist"].items()}
        acc.lag = ConsumerLag.from_state(st["consumer_lag"])
        acc.producers = ProducerStories.from_state(st["producers"])
        acc.group_stories = GroupStories.from_state(st["group_stories"])
        if acc.committed is not None:
            acc.committed = CommittedLag.from_state(st["committed_lag"])
        if acc.in_flight is not None:
            acc.in_flight = InFlight.from_state(st["in_flight"])
        return acc

    # -- reading ------------------------------------------------------------------
    def top(self, n: int) -> list[dict[str, Any]]:
        recs = sorted((rec for _l, _s, rec in self._top), key=_top_sort_key)
        return recs[:n]

    @property
    def duration_s(self) -> float:
        if self.first_time is None or self.last_time is None:
            return 0.0
        return max(0.0, self.last_time - self.first_time)

    def throughput(self) -> dict[str, Any]:
        self._settle_seconds()
        dur = self.duration_s
        rate_div = dur if dur > 0 else None

        def rate(x: int) -> float | None:
            return round(x / rate_div, 3) if rate_div else None

        tps = []
        for (t, p), row in sorted(self.tp.items(), key=lambda kv: _sort_key(kv[0])):
            tps.append({
                "topic": t, "partition": p,
                "produced_records": row[0], "produced_bytes": row[1],
                "fetched_records": row[2], "fetched_bytes": row[3],
                "produced_records_per_s": rate(row[0]), "produced_bytes_per_s": rate(row[1]),
                "fetched_records_per_s": rate(row[2]), "fetched_bytes_per_s": rate(row[3]),
            })
        per_second = []
        for sec in sorted(self.per_second):
            d: dict[str, Any] = {"t": sec}
            d.update(zip(_PER_SECOND, self.per_second[sec], strict=True))
            per_second.append(d)
        total_req = sum(srow[0] for srow in self.per_second.values())
        return {
            "first_time": self.first_time,
            "last_time": self.last_time,
            "duration_s": round(dur, 6),
            "exchanges": self.exchanges,
            "requests_per_s": rate(total_req),
            "topic_partitions": tps,
            "per_second": per_second,
        }

    def latency_series(self) -> dict[str, list[tuple[int, int, float, float]]]:
        """api -> [(second, count, mean ms, max ms)], for plots of latency over time."""
        self._settle_seconds()
        out: dict[str, list[tuple[int, int, float, float]]] = {}
        for sec, api, (n, ns, mx) in sorted((sec, api, a) for sec, apis in self.api_second.items()
                                            for api, a in apis.items()):
            out.setdefault(api, []).append((sec, int(n), ns / n / 1e6, mx))
        return out

    def histograms(self) -> dict[str, list[tuple[float, int]]]:
        """api -> [(bucket lower edge ms, count)] over the buckets from the lowest to the highest used."""
        self._settle_seconds()
        out: dict[str, list[tuple[float, int]]] = {}
        for api in sorted(self.hist):
            h = self.hist[api]
            if not h:
                continue
            lo, hi = min(h), max(h)
            out[api] = [(hist_bucket_lower(i), h.get(i, 0)) for i in range(lo, hi + 1)]
        return out

    def accuracy(self) -> dict[str, Any]:
        sketch_groups = sum(1 for g in self.groups.values() if not g.latency.exact)
        return {
            "percentile_definition": "nearest-rank: pX = value at 1-based rank ceil(X/100 * n)",
            "exact_limit": EXACT_LIMIT,
            "relative_accuracy": RELATIVE_ACCURACY,
            "sketch": "DDSketch (logarithmic mapping, the ddsketch package's bins) beyond exact_limit values per group",
            "exact_groups": len(self.groups) - sketch_groups,
            "sketch_groups": sketch_groups,
        }

    def result(self, top: int = 0) -> dict[str, Any]:
        groups = []
        for key in sorted(self.groups, key=_sort_key):
            d: dict[str, Any] = dict(zip(self.by, key, strict=True))
            d.update(self.groups[key].result())
            groups.append(d)
        return {
            "by": list(self.by),
            "groups": groups,
            "top": self.top(top) if top > 0 else [],
            "throughput": self.throughput(),
            "consumer_lag": self.lag.result(),
            "producers": self.producers.result(),
            "consumer_groups": self.group_stories.result(),
            **({"committed_lag": self.committed.result()} if self.committed is not None else {}),
            **({"in_flight": self.in_flight.result()} if self.in_flight is not None else {}),
            "accuracy": self.accuracy(),
        }


def parse_by(text: str) -> tuple[str, ...]:
    """``"api,version"`` -> ("api", "version"), checked against GROUP_KEYS."""
    parts = tuple(p.strip() for p in text.split(",") if p.strip())
    bad = [p for p in parts if p not in GROUP_KEYS]
    if bad or not parts:
        raise ValueError(f"--by takes a comma-separated list of {', '.join(GROUP_KEYS)} (got {text!r})")
    return parts


class PointSample:
    """(time, latency) points per API for plots, bounded: past ``cap`` points it keeps
    every other point and doubles its stride, so the sample stays evenly spread."""

    def __init__(self, cap: int = 50_000) -> None:
        self.cap = cap
        self.stride = 1
        self.seen = 0
        self.points: list[tuple[str, float, float]] = []

    def add(self, ex: Exchange) -> None:
        lat = ex.latency_ms
        if lat is None or ex.request_time is None:
            return
        self.seen += 1
        if self.seen % self.stride:
            return
        self.points.append((ex.api_name, ex.request_time, lat))
        if len(self.points) > self.cap:
            self.points = self.points[1::2]
            self.stride *= 2

    def absorb(self, more: list[tuple[str, float, float]], stride: int) -> None:
        """Add another sample's points (taken every ``stride``-th exchange), thinning both to
        the coarser stride and then while over the cap, as ``add`` does."""
        while self.stride < stride:
            self.points = self.points[1::2]
            self.stride *= 2
        while stride < self.stride:
            more = more[1::2]
            stride *= 2
        self.points.extend(more)
        self.seen += len(more) * stride
        while len(self.points) > self.cap:
            self.points = self.points[1::2]
            self.stride *= 2

    def by_api(self) -> dict[str, list[tuple[float, float]]]:
        out: dict[str, list[tuple[float, float]]] = {}
        for api, t, lat in self.points:
            out.setdefault(api, []).append((t, lat))
        return out
