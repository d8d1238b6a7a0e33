"""What Kafka clients are living through, told from their exchanges: consumer lag.

``ConsumerLag`` follows each connection's Fetch traffic and measures, per client id and
topic-partition, how far the consumer is behind the log:

- lag = the response's ``high_watermark`` minus the request's ``fetch_offset`` (records);
  for a read_committed consumer (``isolation_level`` 1) the lag against the
  ``last_stable_offset`` is kept too (``stable_last`` / ``stable_max``);
- incremental fetch sessions (KIP-227, Fetch v7+): a request with ``session_epoch`` > 0
  names only the partitions whose fetch offset changed, and its answer only those with
  news. Each connection keeps its session's partitions with their fetch offsets (advanced
  by the records each answer returned) and high watermarks, so every answered Fetch gives
  a lag figure for every partition of the session. ``forgotten_topics_data`` drops
  partitions from the session; a full fetch (epoch 0 or -1) starts it again from what it
  names; a session error (FETCH_SESSION_ID_NOT_FOUND, ...) ends it;
- the group of a client id is the ``group_id`` its JoinGroup, SyncGroup, Heartbeat,
  LeaveGroup, OffsetCommit or ConsumerGroupHeartbeat requests name (the one named most
  often when there are several); null when the capture shows none.

Figures per (client id, topic, partition): samples, last (at the latest answer), max and
the time of its first occurrence, mean, and the per-second maximum for plots (seconds are
folded two by two past ``MAX_SERIES`` buckets, so memory stays bounded). The state is
plain, JSON-safe and mergeable in any order (``StatsAccumulator`` ships it with its own);
the fetch sessions are per connection and a connection is never split between workers,
so they are not shipped.

The figures are read from the digest trees of ``stats`` (dissectors.digest keeps the
fields above) and from full trees alike; a request that forgets partitions is decoded
again in full to learn which (the digest keeps only how many).
"""
from __future__ import annotations

from typing import Any

from analyzer.model import Conn, Exchange
from dissectors.context import DecodeContext
from dissectors.field import Field
from dissectors.field import body_of as _body
from dissectors.field import int_value as _int

# API keys whose requests tie a client id to a consumer group
GROUP_MEMBER_APIS = frozenset({8, 11, 12, 13, 14, 68})
MAX_SERIES = 2048           # per-key buckets of the lag series before seconds are folded
MAX_SESSION_PARTITIONS = 100_000    # partitions followed per connection


def _kids(f: Field | None) -> list[Field]:
    return (f.children or []) if f is not None else []


def _topic_key(t: Field) -> str | None:
    name = t.get("topic")
    if name is None:
        name = t.get("name")
    if name is None:
        name = t.get("topic_id")
    return str(name) if name is not None else None


def _part_index(p: Field) -> int | None:
    idx = p.get("partition")
    if idx is None:
        idx = p.get("partition_index")
    return _int(idx)


class _Session:
    """One connection's fetch state: session id and, per (topic key, partition),
    [fetch offset, high watermark, last stable offset] (None: not known yet)."""
    __slots__ = ("sid", "parts")

    def __init__(self) -> None:
        self.sid = 0
        self.parts: dict[tuple[str, int], list[int | None]] = {}


class _Lag:
    """The lag figures of one (client id, topic, partition)."""
    __slots__ = ("n", "total", "max", "max_time", "last", "last_time", "stable_last", "stable_max",
                 "width", "series")

    def __init__(self) -> None:
        self.n = 0
        self.total = 0
        self.max = 0
        self.max_time = 0.0
        self.last = 0
        self.last_time = 0.0
        self.stable_last: int | None = None
        self.stable_max: int | None = None
        self.width = 1                              # seconds per series bucket
        self.series: dict[int, int] = {}            # bucket start (epoch s) -> max lag in it

    def add(self, lag: int, stable: int | None, t: float) -> None:
        if self.n == 0 or lag > self.max or (lag == self.max and t < self.max_time):
            self.max, self.max_time = lag, t
        self.n += 1
        self.total += lag
        if t >= self.last_time:
            self.last, self.last_time = lag, t
            if stable is not None:
                self.stable_last = stable
        if stable is not None and (self.stable_max is None or stable > self.stable_max):
            self.stable_max = stable
        b = int(t) // self.width * self.width
        if self.series.get(b, -1) < lag:
            self.series[b] = lag
            if len(self.series) > MAX_SERIES:
                self._fold(self.width * 2)

    def _fold(self, width: int) -> None:
        out: dict[int, int] = {}
        for b, v in self.series.items():
            k = b // width * width
            if out.get(k, -1) < v:
                out[k] = v
        self.width, self.series = width, out

    def merge(self, o: _Lag) -> None:
        if o.n == 0:
            return
        if self.n == 0 or o.max > self.max or (o.max == self.max and o.max_time < self.max_time):
            self.max, self.max_time = o.max, o.max_time
        if o.last_time > self.last_time or (o.last_time == self.last_time and o.last > self.last):
            self.last, self.last_time = o.last, o.last_time
            if o.stable_last is not None:
                self.stable_last = o.stable_last
        if o.stable_max is not None and (self.stable_max is None or o.stable_max > self.stable_max):
            self.stable_max = o.stable_max
        self.n += o.n
        self.total += o.total
        theirs = o.series
        if o.width < self.width:
            tmp = _Lag()
            tmp.width, tmp.series = o.width, dict(o.series)
            tmp._fold(self.width)
            theirs = tmp.series
        elif o.width > self.width:
            self._fold(o.width)
        for b, v in theirs.items():
            if self.series.get(b, -1) < v:
                self.series[b] = v
        while len(self.series) > MAX_SERIES:
            self._fold(self.width * 2)

    def to_state(self) -> list[Any]:
        return [self.n, self.total, self.max, self.max_time, self.last, self.last_time, self.stable_last,
                self.stable_max, self.width, [[b, v] for b, v in sorted(self.series.items())]]

    @classmethod
    def from_state(cls, st: list[Any]) -> _Lag:
        g = cls()
        (g.n, g.total, g.max, g.max_time, g.last, g.last_time, g.stable_last, g.stable_max, g.width,
         series) = st
        g.series = {int(b): int(v) for b, v in series}
        return g


LagKey = tuple[str | None, str | None, int | None]      # (client_id, topic, partition)


class ConsumerLag:
    """Feed every exchange to ``add`` (it looks at Fetch and the group APIs); ``merge``,
    ``to_state``/``from_state`` and ``result`` as ``StatsAccumulator`` does."""

    def __init__(self) -> None:
        self.lags: dict[LagKey, _Lag] = {}
        self.members: dict[tuple[str | None, str], int] = {}     # (client_id, group_id) -> requests
        self.read_committed: set[str | None] = set()             # client ids fetching read_committed
        self._sessions: dict[Conn, _Session] = {}
        self._names: dict[str, str] = {}                         # topic id -> name, from the answers

    # -- feeding -----------------------------------------------------------------------
    def add(self, ex: Exchange) -> None:
        key = ex.api_key
        if key == 1 and ex.protocol == "kafka":
            self._fetch(ex)
        elif key in GROUP_MEMBER_APIS:
            body = _body(ex.request_tree)
            group = body.get("group_id") if body is not None else None
            if isinstance(group, str) and group:
                k = (ex.client_id, group)
                self.members[k] = self.members.get(k, 0) + 1

    def _fetch(self, ex: Exchange) -> None:
        q = _body(ex.request_tree)
        r = _body(ex.response_tree)
        if q is None or r is None or ex.response is None or ex.request is None or ex.request.truncated:
            return
        conn = ex.conn
        s = self._sessions.get(conn)
        if s is None:
            s = self._sessions[conn] = _Session()
        sid = _int(q.get("session_id")) or 0
        epoch = _int(q.get("session_epoch"))
        incremental = epoch is not None and epoch > 0 and sid != 0 and sid == s.sid
        if not incremental:
            s.parts = {}
        if _int(q.get("isolation_level")) == 1:
            self.read_committed.add(ex.client_id)
        parts = s.parts
        for t in _kids(q.child("topics")):
            tk = _topic_key(t)
            if tk is None:
                continue
            for p in _kids(t.child("partitions")):
                idx, off = _part_index(p), _int(p.get("fetch_offset"))
                if idx is None or off is None:
                    continue
                st = parts.get((tk, idx))
                if st is None:
                    if len(parts) >= MAX_SESSION_PARTITIONS:
                        continue
                    parts[(tk, idx)] = [off, None, None]
                else:
                    st[0] = off
        if incremental:
            for tk, idx in self._forgotten(ex, q):
                parts.pop((tk, idx), None)
        if _int(r.get("error_code")):       # a session error: the session is gone
            s.sid, s.parts = 0, {}
            return
        new_sid = _int(r.get("session_id")) or 0
        s.sid = new_sid if epoch is not None and epoch >= 0 else 0
        # the answer's partitions, in wire order, as ex.partitions lists them (names resolved)
        named = ex.partitions
        t_resp = ex.response.last_ts
        sampled: set[tuple[str, int]] = set()
        i = 0
        for t in _kids(r.child("responses")):
            tk = _topic_key(t)
            for p in _kids(t.child("partitions")):
                pd = named[i] if i < len(named) else None
                i += 1
                idx = _part_index(p)
                if tk is None or idx is None:
                    continue
                if pd is not None and pd.get("topic") is not None and pd["topic"] != tk:
                    self._names[tk] = str(pd["topic"])
                st = parts.get((tk, idx))
                if st is None or _int(p.get("error_code")):
                    continue
                hw, lso = _int(p.get("high_watermark")), _int(p.get("last_stable_offset"))
                if hw is not None and hw >= 0:
                    st[1] = hw
                    st[2] = lso if lso is not None and lso >= 0 else None
                # lag is taken before the offset moves on: hw - the offset this request asked from
                if st[0] is not None and st[1] is not None:
                    self._sample(ex.client_id, tk, idx, st, t_resp)
                    sampled.add((tk, idx))
                if pd is not None and st[0] is not None:
                    st[0] += int(pd.get("records") or 0)
        # the partitions the answer left out: nothing new, their lag stands
        for (tk, idx), st in parts.items():
            if (tk, idx) not in sampled and st[0] is not None and st[1] is not None:
                self._sample(ex.client_id, tk, idx, st, t_resp)

    def _sample(self, client_id: str | None, tk: str, idx: int, st: list[int | None], t: float) -> None:
        off, hw, lso = st[0], st[1], st[2]
        assert off is not None and hw is not None
        key = (client_id, tk, idx)
        g = self.lags.get(key)
        if g is None:
            g = self.lags[key] = _Lag()
        g.add(max(0, hw - off), max(0, lso - off) if lso is not None else None, t)

    @staticmethod
    def _forgotten(ex: Exchange, q: Field) -> list[tuple[str, int]]:
        """(topic key, partition) the request drops from its session. A digest tree keeps the
        forgotten topics as empty structs: then the request is decoded again in full."""
        ft = q.child("forgotten_topics_data")
        if ft is None or not ft.children:
            return []
        if not any(c.children for c in ft.children):
            from dissectors.kafka import decode_request

            assert ex.request is not None
            full = _body(decode_request(ex.request.data, DecodeContext(decode_records=False)))
            ft = full.child("forgotten_topics_data") if full is not None else None
        out: list[tuple[str, int]] = []
        for t in _kids(ft):
            tk = _topic_key(t)
            if tk is None:
                continue
            for p in _kids(t.child("partitions")):
                if _int(p.value) is not None:
                    out.append((tk, p.value))
        return out

    # -- merging and state -----------------------------------------------------------
    def merge(self, other: ConsumerLag) -> ConsumerLag:
        for k, g in other.lags.items():
            mine = self.lags.get(k)
            if mine is None:
                mine = self.lags[k] = _Lag()
            mine.merge(g)
        for k, n in other.members.items():
            self.members[k] = self.members.get(k, 0) + n
        self.read_committed |= other.read_committed
        self._names.update(other._names)
        return self

    def renamed(self, names: dict[str, str]) -> ConsumerLag:
        """The same figures with topic ids replaced by names (keys that meet are merged)."""
        names = {**self._names, **names}
        out = ConsumerLag()
        out.members = dict(self.members)
        out.read_committed = set(self.read_committed)
        for (cid, t, p), g in self.lags.items():
            one = ConsumerLag()
            one.lags[(cid, names.get(t, t) if t is not None else t, p)] = g
            out.merge(one)
        return out

    def to_state(self) -> dict[str, Any]:
        named = self.renamed({}) if self._names else self
        return {"lags": [[list(k), g.to_state()] for k, g in named.lags.items()],
                "members": [[c, g, n] for (c, g), n in self.members.items()],
                "read_committed": sorted(self.read_committed, key=lambda c: (c is None, c or ""))}

    @classmethod
    def from_state(cls, st: dict[str, Any]) -> ConsumerLag:
        out = cls()
        out.lags = {(k[0], k[1], k[2]): _Lag.from_state(g) for k, g in st["lags"]}
        out.members = {(c, g): n for c, g, n in st["members"]}
        out.read_committed = set(st["read_committed"])
        return out

    # -- reading ------------------------------------------------------------------------
    def group_of(self, client_id: str | None) -> str | None:
        best: tuple[int, str] | None = None
        for (c, g), n in self.members.items():
            if c == client_id and (best is None or (-n, g) < (-best[0], best[1])):
                best = (n, g)
        return best[1] if best else None

    def result(self) -> list[dict[str, Any]]:
        """One object per (client_id, topic, partition), by client id, topic and partition."""
        named = self.renamed({}) if self._names else self
        out = []
        for (cid, t, p), g in sorted(named.lags.items(),
                                     key=lambda kv: tuple((x is None, x if x is not None else 0) for x in kv[0])):
            committed = cid in self.read_committed
            out.append({
                "client_id": cid, "group": self.group_of(cid), "topic": t, "partition": p,
                "isolation": "read_committed" if committed else "read_uncommitted",
                "samples": g.n, "last": g.last, "max": g.max, "mean": round(g.total / g.n, 3),
                "max_time": g.max_time, "last_time": g.last_time,
                "stable_last": g.stable_last if committed else None,
                "stable_max": g.stable_max if committed else None,
            })
        return out

    def series(self) -> dict[str, list[tuple[int, int]]]:
        """"group-or-client topic-partition" -> [(bucket start epoch s, max lag in it)], for plots."""
        named = self.renamed({}) if self._names else self
        out: dict[str, list[tuple[int, int]]] = {}
        for (cid, t, p), g in named.lags.items():
            who = self.group_of(cid) or cid or "-"
            out[f"{who} {t}-{p}"] = sorted(g.series.items())
        return out
