"""Rules that find client and broker bugs in a stream of Exchanges (``kafkawire-sniff check``).

The rules consume :class:`analyzer.model.Exchange` objects and their Field trees, never
raw bytes, and do no I/O. Feed every exchange of a capture to :meth:`Checker.add` (in
the pipeline's completion order), then call :meth:`Checker.finish` for the findings.

Each rule, or a small family of rules sharing state, is a unit (``common.Unit``: what it
follows, what it keeps, what it judges, how it merges); ``registry`` lists the rules and
the units. The Checker is the driver: it keeps each connection's state, hands each
exchange to the units that follow its API, and gathers, sorts and tells the findings.

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

from collections.abc import Iterable
from typing import Any, TypeVar

from analyzer.model import Conn, Exchange
from analyzer.pipeline import Summary

from .common import SEVERITIES, Buckets, ConnState, Finding, Settings, Unit, count_by_severity, tell_once
from .frames import Encrypted
from .groups import Groups
from .producers import Batch, Sequences
from .registry import RULES, UNITS

__all__ = ["RULES", "SEVERITIES", "Checker", "Finding", "check_exchanges", "count_by_severity"]

RETIRE_EVERY = 4096         # exchanges between two looks for connections that ended
SEVERITY_RANK = {s: i for i, s in enumerate(SEVERITIES)}

U = TypeVar("U", bound=Unit)


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
        self._buckets = Buckets()
        settings = Settings(self.rules, slow_ms, storm_rebalances, storm_window_s, self._buckets)
        self._units = [u(settings) for u in UNITS]
        # the units that keep something of each connection to the end (their conn_end, retire, merge_conn)
        self._ender = [u for u in self._units if type(u).conn_end is not Unit.conn_end]
        # (api_key, legacy, without request) -> the units that follow such exchanges
        self._routes: dict[tuple[int | None, bool, bool], list[Unit]] = {}
        self._conns: dict[tuple[int, str, str, float], ConnState] = {}
        # id(conn) -> its state, for the connections not retired (the state holds the Conn,
        # so the id is its own): what ``add`` finds without making the connection's key of
        # strings each time; those whose Conn says they ended are retired from there
        self._by_object: dict[int, ConnState] = {}
        self._quiet = 0     # connections that ended with nothing left to judge (no state kept)

    def _unit(self, cls: type[U]) -> U:
        return next(u for u in self._units if isinstance(u, cls))

    @property
    def _batches(self) -> list[Batch]:
        return self._unit(Sequences).batches

    # -- public API ------------------------------------------------------------
    def add(self, ex: Exchange) -> None:
        self.exchanges += 1
        if self.exchanges % RETIRE_EVERY == 0:
            self._retire()
        conn = ex.conn
        cs = self._by_object.get(id(conn))
        if cs is None or cs.conn is not conn:
            key = _conn_key(conn)
            cs = self._conns.get(key)
            if cs is None:
                cs = self._conns[key] = ConnState(str(conn), conn=conn)
            self._by_object[id(conn)] = cs
        cs.seq = ex.seq
        cs.syn_seen = conn.syn_seen
        cs.closed = conn.closed
        closed_by = conn.closed_by
        if closed_by is not None:
            cs.closer = "client" if closed_by == (conn.client_dir or 0) else "broker"
        last = conn.last_ts
        cs.last_ts = max(cs.last_ts, last)
        self.capture_end = max(self.capture_end, last)
        for fr in (ex.request, ex.response):
            if fr is not None and fr.last_ts > self.capture_end:
                self.capture_end = fr.last_ts
        route = (ex.api_key, ex.protocol != "kafka", ex.request is None)
        units = self._routes.get(route)
        if units is None:
            units = self._routes[route] = [u for u in self._units if u.follows(*route)]
        for u in units:
            u.add(ex, cs)

    def add_all(self, exchanges: Iterable[Exchange]) -> Checker:
        for ex in exchanges:
            self.add(ex)
        return self

    def encrypted(self, summary: Summary) -> None:
        """The TLS connections of a run (``summary.tls``) and the bytes it skipped as TLS not
        decrypted: those not decrypted are judged at ``finish``."""
        self._unit(Encrypted).summary(summary)

    def merge(self, other: Checker) -> Checker:
        """Fold another checker's state into this one (for per-partition Spark runs)."""
        self.exchanges += other.exchanges
        self._quiet += other._quiet
        self.capture_end = max(self.capture_end, other.capture_end)
        for k, cs in other._conns.items():
            mine = self._conns.get(k)
            if mine is None:
                self._conns[k] = cs
            else:   # the same connection split over checkers: keep what can be kept
                for u in self._ender:
                    u.merge_conn(mine, cs)
                mine.last_ts = max(mine.last_ts, cs.last_ts)
        self._buckets.merge(other._buckets)
        for u, o in zip(self._units, other._units, strict=True):
            u.merge(o)
        return self

    def finish(self, capture_end: float | None = None, fold: bool = True) -> list[Finding]:
        """All findings, errors first, then by first frame; the same story on several
        connections told once (``tell_once``; ``fold=False``: one finding per connection).
        Does not change the state."""
        end = max(self.capture_end, capture_end or 0.0)
        findings = self._buckets.findings(self.rules)
        for cs in self._conns.values():
            for u in self._ender:
                findings.extend(u.conn_end(cs, end))
        for u in self._units:
            findings.extend(u.finish())
        # (ties broken by connection and message: the order does not depend on which worker
        # or Spark task judged a connection)
        findings.sort(key=lambda f: (SEVERITY_RANK[f.severity], f.first_frame, f.rule, f.conn, f.message))
        return tell_once(findings) if fold else findings

    def stats(self) -> dict[str, int]:
        """What the checker holds, and what its memory bounds made it drop."""
        out = {"exchanges": self.exchanges, "connections": len(self._conns) + self._quiet}
        for u in self._units:
            out.update(u.stats())
        return out

    def groups(self) -> list[str]:
        return self._unit(Groups).groups()

    def timeline(self, group_id: str) -> list[dict[str, Any]]:
        """The group's JoinGroup/SyncGroup/Heartbeat/LeaveGroup/OffsetCommit/ConsumerGroupHeartbeat
        exchanges in request order, with generations, member ids and assignments."""
        return self._unit(Groups).timeline(group_id)

    def stories(self) -> list[dict[str, Any]]:
        """Each group's story (analyzer.sinks.insights.group_stories) from the events seen."""
        return self._unit(Groups).stories()

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
            if not [u for u in self._units if u.retire(cs)]:
                # nothing left for finish() to judge (its findings are in the buckets): counted
                del self._conns[_conn_key(conn)]
                self._quiet += 1
                continue
            cs.lost_from, cs.client_dir = conn.lost_from, conn.client_dir
            cs.conn = None


def _conn_key(conn: Conn) -> tuple[int, str, str, float]:
    return (conn.id, str(conn.a), str(conn.b), conn.first_ts)


def check_exchanges(exchanges: Iterable[Exchange], **kwargs: Any) -> list[Finding]:
    """Convenience: run a fresh Checker over ``exchanges`` and return its findings."""
    return Checker(**kwargs).add_all(exchanges).finish()
