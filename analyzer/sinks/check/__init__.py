"""Rules that find client and broker bugs in a stream of Exchanges (``kafkawire-sniff check``).

The rules read :class:`analyzer.model.Exchange` objects and their Field trees, never raw
bytes, and do no I/O. Feed every exchange of a capture to :meth:`Checker.add` (in the
pipeline's completion order), then call :meth:`Checker.finish` for the findings.

Each rule, or a small family of rules sharing state, is a unit (``common.Unit``);
``registry`` lists the rules and the units. The Checker is the driver: it keeps each
connection's state, hands each exchange to the units that follow its API, and gathers,
sorts and tells the findings. State is compact (no Exchange or Field is kept) and
picklable; checkers combine with :meth:`Checker.merge`. Most rules are exact whenever all
exchanges of a connection go to the same checker; those of ``spanning`` (producer
sequences, rebalance storms, the timeline) follow what spans connections and are judged
at ``finish``. A Spark job can therefore run a Checker per group of connections, ``merge``
them on the driver and ``finish`` once.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from analyzer.model import Conn, Exchange
from analyzer.pipeline import Summary

from .common import SEVERITIES, Buckets, ConnState, Finding, Settings, Unit, count_by_severity, tell_once
from .registry import RULES, UNITS
from .spanning import Batch, Encrypted, Groups, Sequences

__all__ = ["RULES", "SEVERITIES", "Checker", "Finding", "check_exchanges", "count_by_severity"]

RETIRE_EVERY = 4096         # exchanges between two looks for connections that ended
SEVERITY_RANK = {s: i for i, s in enumerate(SEVERITIES)}

U = TypeVar("U", bound=Unit)


class Checker:
    """Runs the rules over exchanges; see the module docstring for scope and merging."""

    def __init__(self, rules: set[str] | None = None, slow_ms: float = 1000.0,
                 storm_rebalances: int = 5, storm_window_s: float = 60.0) -> None:
        if unknown := set(rules or ()) - set(RULES):
            raise ValueError(f"unknown rule(s): {', '.join(sorted(unknown))}")
        self.rules: frozenset[str] = frozenset(RULES) if rules is None else frozenset(rules)
        self.slow_ms, self.storm_rebalances, self.storm_window_s = slow_ms, storm_rebalances, storm_window_s
        self.exchanges, self.capture_end = 0, 0.0
        self._buckets = Buckets()
        self._units = [u(Settings(self.rules, slow_ms, storm_rebalances, storm_window_s, self._buckets))
                       for u in UNITS]
        # the units that keep something of each connection to the end (their conn_end)
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
        cs.seq, cs.syn_seen, cs.closed = ex.seq, conn.syn_seen, conn.closed
        if conn.closed_by is not None:
            cs.closer = "client" if conn.closed_by == (conn.client_dir or 0) else "broker"
        cs.last_ts = max(cs.last_ts, conn.last_ts)
        self.capture_end = max(self.capture_end, conn.last_ts)
        for fr in (ex.request, ex.response):
            if fr is not None and fr.last_ts > self.capture_end:
                self.capture_end = fr.last_ts
        route = (ex.api_key, ex.protocol != "kafka", ex.request is None)
        if (units := self._routes.get(route)) is None:
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
            if k in self._conns:    # the same connection split over checkers
                self._conns[k].merge(cs)
            else:
                self._conns[k] = cs
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
        """For the connections that ended whose last exchange is here (exchanges handed over in
        a list may come after the connection's end), forget what only their next exchanges
        read: what is kept is then what finish() judges, none for those with nothing left."""
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
