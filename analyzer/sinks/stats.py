"""What ``stats`` computes in Python, and the readings of an exchange its tables share.

``stats``' figures (groups, slowest exchanges, throughput, histograms, consumer lag,
producers) are queries over the exchange tables (``analyzer.figures``, run by
``analyzer.engine``); what stays here is what follows exchanges in order, the stories
(``analyzer.sinks.insights``: consumer-group generations, and when asked the committed-offset
lag and the requests in flight), held by ``Stories``: mergeable, shipped by the worker
processes and the Spark tasks as plain JSON-safe state. (The consumer lag follows Fetch
sessions in order too: the core makes the ``lag`` table's rows.)

Readings shared with the tables' rows (``analyzer.tables``) and the metrics:

- waits (``wait_kind``): exchanges whose latency is the broker waiting on purpose, reported
  apart: ``fetch_max_wait`` (a Fetch whose latency >= 0.9 * max_wait_ms and that returned
  fewer record bytes than max(min_bytes, 1)), ``join_group`` (JoinGroup, held until the
  rebalance completes; not MEMBER_ID_REQUIRED answers), and ``sync_group_follower``
  (SyncGroup with no assignments: a follower held until the leader sends the assignment).
  A Produce's wait for its in-sync replicas (acks=-1) is the work it asks for: service time.
- throttling (``throttle_ms``): a response whose body has throttle_time_ms > 0.
- bytes (``frame_bytes``): Kafka frame bytes on the wire including the 4-byte size prefix.
- the topic-partitions an exchange names (``named_topic_partitions``): what grouping by
  ``topic``/``partition`` counts.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from analyzer.figures import KEY_COLUMNS
from analyzer.model import Exchange
from analyzer.sinks.insights import (
    COMMITTED_APIS,
    GROUP_FAILED_APIS,
    GROUP_MEMBER_APIS,
    GROUP_TELLING_APIS,
    CommittedLag,
    GroupStories,
    InFlight,
)
from dissectors.field import body_of as _body
from dissectors.field import int_value as _int

WAIT_FETCH_FRACTION = 0.9
GROUP_KEYS = tuple(KEY_COLUMNS)
DEFAULT_BY = ("api", "version")
STATE_VERSION = 7
# the API keys whose every exchange the committed lag reads (Fetch for the high watermarks)
COMMITTED_KEYS = COMMITTED_APIS | {1}
# API keys the stories read: the group APIs, and the committed lag's
STORY_KEYS = GROUP_MEMBER_APIS | COMMITTED_KEYS
# views that cost much of stats' time (the committed lag decodes its APIs in full, the
# in-flight depth follows every request): kept only when asked for (``views``)
COSTLY_VIEWS = ("committed_lag", "in_flight")


def fmt_ms(v: float) -> str:
    """Compact human text for a duration in ms: 500us, 2ms, 1.5s."""
    if v < 1:
        return f"{v * 1000:g}us"
    if v < 1000:
        return f"{v:g}ms"
    return f"{v / 1000:g}s"


# -- what one exchange contributes --------------------------------------------------


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

# -- the stories ------------------------------------------------------------------


class Stories:
    """The figures that follow exchanges in order: feed Exchanges with ``add`` (those of
    ``STORY_KEYS`` are all it reads, unless the in-flight view is kept: every request);
    combine partials with ``merge``; read ``result``."""

    def __init__(self, views: Iterable[str] = COSTLY_VIEWS) -> None:
        # set when several captures are merged: the in-flight view's connections become
        # "<source>#<id>", since connection numbers restart per file
        self.source: str | None = None
        self.group_stories = GroupStories()
        # the views of COSTLY_VIEWS that are kept (None: not asked for, not computed)
        self.views = views = frozenset(views)
        # committed-offset lag per group and topic-partition
        self.committed: CommittedLag | None = CommittedLag() if "committed_lag" in views else None
        # requests outstanding at once, per connection and client id
        self.in_flight: InFlight | None = InFlight() if "in_flight" in views else None

    @property
    def keys(self) -> frozenset[int]:
        """The API keys whose every exchange ``add`` reads (the committed lag's only when kept)."""
        return GROUP_TELLING_APIS | (COMMITTED_KEYS if self.committed is not None else frozenset())

    @property
    def failed_keys(self) -> frozenset[int]:
        """The API keys of ``keys``' complement whose exchanges ``add`` reads only when
        unanswered or answered with an error code."""
        return GROUP_FAILED_APIS - self.keys

    @property
    def every_exchange(self) -> bool:
        """Whether ``add`` reads every exchange (the in-flight view), not only STORY_KEYS'."""
        return self.in_flight is not None

    def add_all(self, exchanges: Iterable[Exchange]) -> Stories:
        for ex in exchanges:
            self.add(ex)
        return self

    def add(self, ex: Exchange) -> None:
        inf = self.in_flight
        if inf is not None:
            inf.capture = self.source
            inf.add(ex)
        if ex.api_key in STORY_KEYS:
            if self.committed is not None:
                self.committed.add(ex)
            if ex.api_key in GROUP_MEMBER_APIS:
                self.group_stories.add(ex)

    def renumber_conns(self, number: Callable[[int], int], source: str | None) -> Stories:
        """Connection keys given as first-packet numbers (a shard of a capture, see
        analyzer.shards) -> the capture's connection numbers, as ``<source>#<n>`` when
        ``source`` is given."""
        if self.in_flight is not None:
            self.in_flight.renumber(number, source)
        return self

    def merge(self, other: Stories) -> Stories:
        """Fold ``other`` into these stories (in place) and return self."""
        self.group_stories.merge(other.group_stories)
        if self.committed is not None and other.committed is not None:
            self.committed.merge(other.committed)
        if self.in_flight is not None and other.in_flight is not None:
            self.in_flight.merge(other.in_flight)
        return self

    def to_state(self) -> dict[str, Any]:
        """Plain JSON-safe dicts and lists (also picklable)."""
        return {
            "v": STATE_VERSION,
            "views": sorted(self.views),
            "group_stories": self.group_stories.to_state(),
            "committed_lag": self.committed.to_state() if self.committed is not None else None,
            "in_flight": self.in_flight.to_state() if self.in_flight is not None else None,
        }

    @classmethod
    def from_state(cls, st: dict[str, Any]) -> Stories:
        if st.get("v") != STATE_VERSION:
            raise ValueError(f"stats state version {st.get('v')!r} is not {STATE_VERSION}")
        out = cls(views=st["views"])
        out.group_stories = GroupStories.from_state(st["group_stories"])
        if out.committed is not None:
            out.committed = CommittedLag.from_state(st["committed_lag"])
        if out.in_flight is not None:
            out.in_flight = InFlight.from_state(st["in_flight"])
        return out

    def result(self, group_counts: Mapping[str, int]) -> dict[str, Any]:
        """The stories told; ``group_counts``: each group's exchanges (``figures.group_counts``)."""
        return {
            "consumer_groups": self.group_stories.result(group_counts),
            **({"committed_lag": self.committed.result()} if self.committed is not None else {}),
            **({"in_flight": self.in_flight.result()} if self.in_flight is not None else {}),
        }


def parse_by(text: str) -> tuple[str, ...]:
    """``"api,version"`` -> ("api", "version"), checked against GROUP_KEYS."""
    parts = tuple(p.strip() for p in text.split(",") if p.strip())
    bad = [p for p in parts if p not in GROUP_KEYS]
    if bad or not parts:
        raise ValueError(f"--by takes a comma-separated list of {', '.join(GROUP_KEYS)} (got {text!r})")
    return parts
