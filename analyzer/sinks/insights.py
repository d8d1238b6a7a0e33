"""What Kafka clients are living through, told from their exchanges in order: consumer-group
generations, committed-offset lag and requests in flight.

- ``GroupStories`` (``group_event``, ``group_stories``): each group's generations, rebalances
  and their triggers, from its JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit and
  ConsumerGroupHeartbeat exchanges;
- ``CommittedLag``: committed-offset lag per group and topic-partition, as
  ``kafka-consumer-groups --describe`` shows it;
- ``InFlight``: requests outstanding at once per connection and client id;
- the readers of Produce and Fetch bodies ``check`` uses (``elements``, ``topic_name``,
  ``partition_number``, ``produce_partitions``, ``fetch_partitions``).

Each is described where it is defined. Consumer lag and the producers are queries over the
tables (``analyzer.figures``: the ``lag`` table, followed by the core's Fetch sessions, and
the ``batches`` table).
"""
from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator, Mapping
from typing import Any

from analyzer import figures
from analyzer.model import Conn, Exchange
from dissectors.context import DecodeContext, Presentation
from dissectors.errors import error_name
from dissectors.field import Field
from dissectors.field import body_of as _body
from dissectors.field import int_value as _int
from dissectors.summary import fetch_table

# API keys whose requests tie a client id to a consumer group
GROUP_MEMBER_APIS = frozenset(figures.GROUP_MEMBER_APIS)


def elements(f: Field | None) -> list[Field]:
    """The children of an array (or struct) field; none for a missing one."""
    return (f.children or []) if f is not None else []


def topic_name(t: Field) -> str:
    """The topic of a topic element: its name, else its topic id, else "?"."""
    name = t.get("name")
    if name is None:
        name = t.get("topic")
    if name is None:
        tid = t.get("topic_id")
        name = str(tid) if tid is not None else "?"
    return str(name)


# the names a partition element's number has, in the order they are looked for: Produce
# calls it `index`, Fetch `partition_index`, pre-0.8 messages `partition`
_PRODUCE_INDEX = ("index", "partition_index", "partition")
_FETCH_INDEX = ("partition_index", "index", "partition")


def partition_number(p: Field, names: tuple[str, ...] = _PRODUCE_INDEX) -> int:
    """The partition number of a partition element: the first of ``names`` it has (-1 if none)."""
    for name in names:
        v = p.get(name)
        if v is not None:
            n = _int(v)
            return n if n is not None else -1
    return -1


def produce_partitions(body: Field | None) -> Iterator[tuple[str, int, Field | None]]:
    """(topic, partition, records field) of a Produce request body."""
    for t in elements(body.child("topic_data") if body is not None else None):
        topic = topic_name(t)
        for p in elements(t.child("partition_data")):
            yield topic, partition_number(p, _PRODUCE_INDEX), p.child("records")


def fetch_partitions(body: Field | None) -> Iterator[tuple[str, int, Field | None]]:
    """(topic, partition, records field) of a Fetch response body."""
    for t in elements(body.child("responses") if body is not None else None):
        topic = topic_name(t)
        for p in elements(t.child("partitions") or t.child("partition_responses")):
            yield topic, partition_number(p, _FETCH_INDEX), p.child("records")


# -- groups --------------------------------------------------------------------------------

OFFSET_COMMIT, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP, CONSUMER_GROUP_HEARTBEAT = 8, 11, 12, 13, 14, 68
MAX_GROUP_EVENTS = 200_000      # group events kept in all


def assignment(f: Field | None) -> dict[str, list[int]] | None:
    """Topic -> partitions of a decoded consumer-protocol Assignment (or KIP-848 assignment)."""
    if f is None:
        return None
    out: dict[str, list[int]] = {}
    for n in f.walk():
        topic = n.get("topic")
        if topic is None:
            topic = n.get("topic_id")
        parts = n.child("partitions")
        if topic is not None and parts is not None:
            out.setdefault(str(topic), []).extend(
                c.value for c in parts.children or () if _int(c.value) is not None)
    if not out and isinstance(f.value, (bytes, bytearray)):
        return {"<bytes>": [len(f.value)]}
    return out


def group_event(ex: Exchange, conn_name: str, full: bool = True) -> dict[str, Any] | None:
    """One JoinGroup/SyncGroup/Heartbeat/LeaveGroup/OffsetCommit/ConsumerGroupHeartbeat exchange
    as a group-story event (plain, JSON-safe): time, frames, group, member, generation (member
    epoch for ConsumerGroupHeartbeat), error, and per API protocols, leader, members,
    assignments, offsets. None for other APIs or a request without a body.

    ``full`` False: the trees as they are (a lean tree keeps group, member, generation,
    protocol name, leader and member lists: the story's fields, not protocols, plans and
    offsets), but for ConsumerGroupHeartbeat, whose assignment is read in full."""
    key = ex.api_key
    if key not in GROUP_MEMBER_APIS:
        return None
    if full or key == CONSUMER_GROUP_HEARTBEAT:
        qt, rt = ex.full_trees(DecodeContext(presentation=Presentation(decode_records=False)))
    else:
        qt, rt = ex.request_tree, ex.response_tree
    q, r = _body(qt), _body(rt)
    if q is None:
        return None
    ev: dict[str, Any] = {
        "time": ex.request_time or 0.0, "api_name": ex.api_name, "api_version": ex.api_version,
        "conn": conn_name, "request_frame": ex.request_frame, "response_frame": ex.response_frame,
        "correlation_id": ex.correlation_id, "group_id": q.get("group_id"),
        "member_id": q.get("member_id"), "generation_id": None, "error": None,
        "response_time": ex.response_time,
    }
    code = _int(r.get("error_code")) if r is not None else None
    if code:
        ev["error"] = ex.error_codes[0] if ex.error_codes else error_name(code)
    if ex.response is None:
        ev["error"] = ev["error"] or "no response"
    if key == JOIN_GROUP:
        ev["protocols"] = [p.get("name") for p in elements(q.child("protocols"))]
        if r is not None:
            ev["generation_id"] = _int(r.get("generation_id"))
            ev["protocol_name"] = r.get("protocol_name")
            ev["leader"] = r.get("leader")
            if r.get("member_id"):
                ev["assigned_member_id"] = r.get("member_id")
            members = r.child("members")
            if members is not None and members.children:
                ev["members"] = [m.get("member_id") for m in members.children]
    elif key == SYNC_GROUP:
        ev["generation_id"] = _int(q.get("generation_id"))
        plan = {str(a.get("member_id")): assignment(a.child("assignment"))
                for a in elements(q.child("assignments"))}
        if plan:
            ev["assignments"] = plan
        if r is not None:
            ev["assignment"] = assignment(r.child("assignment"))
    elif key in (HEARTBEAT, OFFSET_COMMIT):
        gen = q.get("generation_id")
        if gen is None:
            gen = q.get("generation_id_or_member_epoch")
        ev["generation_id"] = _int(gen)
        if key == OFFSET_COMMIT:
            ev["offsets"] = {f"{topic_name(t)}-{p.get('partition_index')}": p.get("committed_offset")
                             for t in elements(q.child("topics")) for p in elements(t.child("partitions"))}
    elif key == LEAVE_GROUP:
        members = q.child("members")
        if members is not None and members.children:
            ev["members"] = [m.get("member_id") for m in members.children]
    elif key == CONSUMER_GROUP_HEARTBEAT:
        ev["member_epoch"] = _int(q.get("member_epoch"))
        if r is not None:
            ev["assigned_member_id"] = r.get("member_id")
            ev["generation_id"] = _int(r.get("member_epoch"))
            asg = r.child("assignment")
            if asg is not None and asg.children:
                ev["assignment"] = assignment(asg)
    return ev


def _order(e: dict[str, Any]) -> tuple[Any, ...]:
    return (e["time"], e["request_frame"] or 0, e["conn"], e["correlation_id"] or 0)


def group_stories(events: list[dict[str, Any]], counts: Mapping[str, int] | None = None) -> list[dict[str, Any]]:
    """Each group's story from its events (``group_event``), by group id:

    - ``generations`` (classic protocol): per generation the members (the JoinGroup answers'
      member list, else the members that joined into it), protocol, leader, when its rebalance
      started (the first JoinGroup after the previous generation's last SyncGroup answer) and
      ended (the last SyncGroup answer of the generation), ``rebalance_ms`` between the two,
      and ``triggers``: what started it, as far as the capture shows: ``new member`` (a
      JoinGroup with no member id), ``MEMBER_ID_REQUIRED``, ``REBALANCE_IN_PROGRESS on
      heartbeat`` (member), ``LeaveGroup`` (members), ``session timeout`` (a member of the
      previous generation gone without a LeaveGroup), ``first seen`` (the capture starts
      within or before it);
    - ``rejoins_same_generation``: JoinGroups by a known member answered with the generation it
      already had (a member rejoining without the generation moving);
    - ``members_kip848``: ConsumerGroupHeartbeat members with their first and last member
      epoch, the number of assignments handed to them and the last one.

    ``counts``: per group, its exchanges (``exchanges``; without, its events), where the events
    are only those that tell (``GroupStories``).
    """
    by_group: dict[str, list[dict[str, Any]]] = {g: [] for g in counts or ()}
    for e in events:
        g = e.get("group_id")
        if isinstance(g, str):
            by_group.setdefault(g, []).append(e)
    out = []
    for group in sorted(by_group):
        evs = sorted(by_group[group], key=_order)
        out.append(_story(group, evs, counts[group] if counts is not None else len(evs)))
    return out


def _story(group: str, evs: list[dict[str, Any]], exchanges: int) -> dict[str, Any]:
    gens: dict[int, dict[str, Any]] = {}
    joins = [e for e in evs if e["api_name"] == "JoinGroup"]
    for e in joins:
        gen = e.get("generation_id")
        if e.get("error") or gen is None or gen < 0:
            continue
        g = gens.get(gen)
        if g is None:
            g = gens[gen] = {"generation": gen, "protocol": None, "leader": None, "members": [],
                             "joined": [], "first_answer": e.get("response_time") or e["time"]}
        g["first_answer"] = min(g["first_answer"], e.get("response_time") or e["time"])
        if e.get("protocol_name"):
            g["protocol"] = e["protocol_name"]
        if e.get("leader"):
            g["leader"] = e["leader"]
        if e.get("members"):
            g["members"] = list(e["members"])
        who = e.get("assigned_member_id") or e.get("member_id")
        if who and who not in g["joined"]:
            g["joined"].append(who)
    syncs = [e for e in evs if e["api_name"] == "SyncGroup" and e.get("response_frame") is not None
             and not e.get("error")]
    generations = []
    prev: dict[str, Any] | None = None
    prev_end: float | None = None
    for gen in sorted(gens, key=lambda k: gens[k]["first_answer"]):
        g = gens[gen]
        members = sorted(g["members"] or g["joined"])
        first_answer = g["first_answer"]
        window = [e for e in evs if (prev_end is None or e["time"] > prev_end) and e["time"] <= first_answer]
        start_join = [e for e in window if e["api_name"] == "JoinGroup"]
        start = start_join[0]["time"] if start_join else None
        ends = [e.get("response_time") or e["time"] for e in syncs if e.get("generation_id") == gen]
        end = max(ends) if ends else None
        triggers: list[str] = []
        if any(e["api_name"] == "JoinGroup" and not e.get("member_id") for e in window):
            triggers.append("new member")
        if any(e.get("error") == "MEMBER_ID_REQUIRED" for e in window):
            triggers.append("MEMBER_ID_REQUIRED")
        hb = sorted({str(e.get("member_id")) for e in window
                     if e["api_name"] == "Heartbeat" and e.get("error") == "REBALANCE_IN_PROGRESS"})
        if hb:
            triggers.append("REBALANCE_IN_PROGRESS on heartbeat (" + ", ".join(hb) + ")")
        left = sorted({str(m) for e in window if e["api_name"] == "LeaveGroup"
                       for m in (e.get("members") or [e.get("member_id")]) if m})
        if left:
            triggers.append("LeaveGroup (" + ", ".join(left) + ")")
        if prev is not None:
            gone = sorted(set(prev["members"]) - set(members) - set(left))
            if gone:
                triggers.append("session timeout (" + ", ".join(gone) + " gone without LeaveGroup)")
        if prev is None and not triggers:
            triggers.append("first seen")
        generations.append({
            "generation": gen, "protocol": g["protocol"], "leader": g["leader"], "members": members,
            "rebalance_start": start, "rebalance_end": end,
            "rebalance_ms": round((end - start) * 1000.0, 3) if start is not None and end is not None else None,
            "triggers": triggers,
        })
        prev, prev_end = generations[-1], end if end is not None else first_answer
    rejoins = len(rejoins_same_generation(joins))
    kip848: dict[str, dict[str, Any]] = {}
    for e in evs:
        if e["api_name"] != "ConsumerGroupHeartbeat" or e.get("error"):
            continue
        m = e.get("assigned_member_id") or e.get("member_id")
        ep = e.get("generation_id")
        if not m or ep is None:
            continue
        k = kip848.setdefault(m, {"member_id": m, "first_epoch": ep, "last_epoch": ep, "assignments": 0,
                                  "assignment": None})
        k["last_epoch"] = ep
        if e.get("assignment") is not None:
            k["assignments"] += 1
            k["assignment"] = e["assignment"]
    return {"group_id": group, "exchanges": exchanges, "joins": len(joins), "generations": generations,
            "rejoins_same_generation": rejoins, "members_kip848": [kip848[m] for m in sorted(kip848)]}


def rejoins_same_generation(joins: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The JoinGroup events (in time order) of a known member (its request names it) answered
    with the generation it already had: a rejoin that did not move the generation."""
    had: dict[str, int] = {}
    out = []
    for e in joins:
        gen, m = e.get("generation_id"), e.get("member_id")
        if e["api_name"] != "JoinGroup" or e.get("error") or gen is None or gen < 0:
            continue
        if m and had.get(m) == gen:
            out.append(e)
        who = e.get("assigned_member_id") or m
        if who:
            had[who] = gen
    return out


_UNTOLD = ("offsets", "protocols", "assignments", "assignment")


# the group APIs whose exchanges tell a group's story, and those that tell it only when
# unanswered or answered with an error (a Heartbeat); an OffsetCommit tells it nothing but
# that it happened (each group's exchanges are counted from the exchanges table)
GROUP_TELLING_APIS = frozenset({JOIN_GROUP, LEAVE_GROUP, SYNC_GROUP, CONSUMER_GROUP_HEARTBEAT})
GROUP_FAILED_APIS = frozenset({HEARTBEAT})


class GroupStories:
    """Group events (``group_event``) of the exchanges fed to ``add`` that tell a story (those
    of ``GROUP_TELLING_APIS``, and of ``GROUP_FAILED_APIS`` with an error): mergeable;
    ``result(counts)`` tells each group's story (``group_stories``), ``counts`` its exchanges."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.dropped = 0

    def add(self, ex: Exchange) -> None:
        if ex.api_key not in GROUP_MEMBER_APIS or ex.protocol != "kafka":
            return
        if len(self.events) >= MAX_GROUP_EVENTS:
            self.dropped += 1
            return
        if ex.api_key not in GROUP_TELLING_APIS and (ex.api_key not in GROUP_FAILED_APIS
                                                      or (ex.response is not None and not ex.error_codes)):
            return
        ev = group_event(ex, str(ex.conn), full=False)
        if ev is None:
            return
        # what a story does not tell (and a lean tree does not keep): state stays small
        for k in _UNTOLD if ex.api_key != CONSUMER_GROUP_HEARTBEAT else ():
            ev.pop(k, None)
        self.events.append(ev)

    def merge(self, other: GroupStories) -> GroupStories:
        self.events.extend(other.events)
        self.dropped += other.dropped
        return self

    def to_state(self) -> dict[str, Any]:
        return {"events": self.events, "dropped": self.dropped}

    @classmethod
    def from_state(cls, st: dict[str, Any]) -> GroupStories:
        out = cls()
        out.events = list(st["events"])
        out.dropped = st["dropped"]
        return out

    def result(self, counts: Mapping[str, int]) -> list[dict[str, Any]]:
        return group_stories(self.events, counts)


# -- committed-offset lag ------------------------------------------------------------------

OFFSET_FETCH, LIST_OFFSETS, TXN_OFFSET_COMMIT = 9, 2, 28
COMMITTED_APIS = frozenset({LIST_OFFSETS, OFFSET_COMMIT, OFFSET_FETCH, SYNC_GROUP, TXN_OFFSET_COMMIT})
UNKNOWN_NO_HW_AFTER = "unknown: no high watermark after the commit"
UNKNOWN_NO_HW = "unknown: no high watermark seen"


def _later(mine: list[Any] | None, other: list[Any]) -> bool:
    """Whether ``other`` ([value, time, ...]) is later than ``mine`` (ties: the larger value),
    so that merging in any order keeps the same one."""
    if mine is None:
        return True
    return (other[1], str(other[0])) > (mine[1], str(mine[0]))


class CommittedLag:
    """Committed-offset lag per group and topic-partition, as ``kafka-consumer-groups
    --describe`` shows it: the latest high watermark seen for the partition (Fetch answers;
    ListOffsets answers for the latest offset, timestamp -1) minus the last committed offset
    seen for the group (OffsetCommit and TxnOffsetCommit requests whose answer has error 0
    for the partition, OffsetFetch answers), with the member and client id the group's
    SyncGroup answers assigned the partition to. Each value keeps the time it was seen (the
    answer's); a high watermark seen before the commit does not give a figure (null, with
    ``note``). All state is latest-wins by (time, value): mergeable in any order. OffsetCommit,
    OffsetFetch, TxnOffsetCommit, ListOffsets and SyncGroup are decoded in full (the lean trees
    do not keep offsets and assignments); they are few."""

    def __init__(self) -> None:
        # (group, topic, partition) -> [offset, time, api, client_id]
        self.commits: dict[tuple[str, str, int], list[Any]] = {}
        # (topic, partition) -> [high watermark, time, api]
        self.hws: dict[tuple[str, int], list[Any]] = {}
        # (group, topic, partition) -> [member_id, time, client_id]
        self.owners: dict[tuple[str, str, int], list[Any]] = {}

    def _commit(self, key: tuple[str, str, int], offset: int, t: float, api: str, client_id: str | None) -> None:
        new = [offset, t, api, client_id]
        if _later(self.commits.get(key), new):
            self.commits[key] = new

    def _hw(self, key: tuple[str, int], hw: int, t: float, api: str) -> None:
        new = [hw, t, api]
        if _later(self.hws.get(key), new):
            self.hws[key] = new

    def add(self, ex: Exchange) -> None:
        key = ex.api_key
        if ex.protocol != "kafka" or ex.response is None or ex.request is None:
            return
        t = ex.response.last_ts
        if key == 1:
            rf = _body(ex.response_tree)
            if rf is None or _int(rf.get("error_code")):
                return
            named = ex.partitions
            for i, (topic, tid, idx, err, hw, _lso, _r, _b, _c, _k) in enumerate(fetch_table(rf)):
                pn = named[i] if i < len(named) else None
                tk = pn.get("topic") if pn is not None and pn.get("topic") is not None else (topic or tid)
                if tk is None or idx is None or err or hw is None or hw < 0:
                    continue
                self._hw((str(tk), idx), hw, t, "Fetch")
            return
        if key not in COMMITTED_APIS:
            return
        qt, rt = ex.full_trees(DecodeContext(presentation=Presentation(decode_records=False)))
        q, r = _body(qt), _body(rt)
        if q is None or r is None:
            return
        if key == LIST_OFFSETS:
            latest = {(topic_name(tq), partition_number(p, ("partition_index", "partition")))
                      for tq in elements(q.child("topics")) for p in elements(tq.child("partitions"))
                      if _int(p.get("timestamp")) == -1}
            for tr in elements(r.child("topics")):
                for p in elements(tr.child("partitions")):
                    k = (topic_name(tr), partition_number(p, ("partition_index", "partition")))
                    off = p.get("offset")
                    if off is None:
                        olds = elements(p.child("old_style_offsets"))
                        off = olds[0].value if olds else None
                    if k in latest and not _int(p.get("error_code")) and _int(off) is not None and off >= 0:
                        self._hw(k, off, t, "ListOffsets")
        elif key in (OFFSET_COMMIT, TXN_OFFSET_COMMIT):
            group = q.get("group_id")
            if not isinstance(group, str):
                return
            ok = {(topic_name(tr), partition_number(p, ("partition_index",)))
                  for tr in elements(r.child("topics")) for p in elements(tr.child("partitions"))
                  if _int(p.get("error_code")) == 0}
            if _int(r.get("error_code")):
                return
            for tq in elements(q.child("topics")):
                for p in elements(tq.child("partitions")):
                    k = (topic_name(tq), partition_number(p, ("partition_index",)))
                    off = _int(p.get("committed_offset"))
                    if k in ok and off is not None and off >= 0:
                        self._commit((group, k[0], k[1]), off, t, ex.api_name, ex.client_id)
        elif key == OFFSET_FETCH:
            groups = elements(r.child("groups"))
            answers = [(g.get("group_id"), g) for g in groups] if groups else [(q.get("group_id"), r)]
            for group, g in answers:
                if not isinstance(group, str) or _int(g.get("error_code")):
                    continue
                for tr in elements(g.child("topics")):
                    for p in elements(tr.child("partitions")):
                        off = _int(p.get("committed_offset"))
                        if off is not None and off >= 0 and not _int(p.get("error_code")):
                            self._commit((group, topic_name(tr), partition_number(p, ("partition_index",))),
                                         off, t, "OffsetFetch", ex.client_id)
        elif key == SYNC_GROUP:
            group, member = q.get("group_id"), q.get("member_id")
            if not isinstance(group, str) or _int(r.get("error_code")):
                return
            for topic, parts in (assignment(r.child("assignment")) or {}).items():
                if topic == "<bytes>":
                    continue
                for idx in parts:
                    owner_key = (group, topic, idx)
                    new = [member, t, ex.client_id]
                    if _later(self.owners.get(owner_key), new):
                        self.owners[owner_key] = new

    # -- merging and state -----------------------------------------------------------
    def merge(self, other: CommittedLag) -> CommittedLag:
        for mine, theirs in ((self.commits, other.commits), (self.hws, other.hws), (self.owners, other.owners)):
            for k, v in theirs.items():
                if _later(mine.get(k), v):      # type: ignore[arg-type]
                    mine[k] = v                 # type: ignore[index]
        return self

    def to_state(self) -> dict[str, Any]:
        return {"commits": [[list(k), v] for k, v in self.commits.items()],
                "hws": [[list(k), v] for k, v in self.hws.items()],
                "owners": [[list(k), v] for k, v in self.owners.items()]}

    @classmethod
    def from_state(cls, st: dict[str, Any]) -> CommittedLag:
        out = cls()
        out.commits = {(k[0], k[1], k[2]): list(v) for k, v in st["commits"]}
        out.hws = {(k[0], k[1]): list(v) for k, v in st["hws"]}
        out.owners = {(k[0], k[1], k[2]): list(v) for k, v in st["owners"]}
        return out

    # -- reading ------------------------------------------------------------------------
    def result(self) -> list[dict[str, Any]]:
        """One object per (group, topic, partition) with a committed offset, in that order."""
        out = []
        for (group, topic, part), (off, t_commit, api, cid) in sorted(self.commits.items()):
            hw = self.hws.get((topic, part))
            owner = self.owners.get((group, topic, part))
            lag: int | None = None
            note = None
            if hw is None:
                note = UNKNOWN_NO_HW
            elif hw[1] < t_commit:
                note = UNKNOWN_NO_HW_AFTER
            else:
                lag = hw[0] - off
            out.append({
                "group": group, "topic": topic, "partition": part, "committed_offset": off,
                "commit_time": t_commit, "commit_api": api, "committed_by": cid,
                "high_watermark": hw[0] if hw is not None else None,
                "high_watermark_time": hw[1] if hw is not None else None,
                "high_watermark_api": hw[2] if hw is not None else None,
                "lag": lag, "note": note,
                "member_id": owner[0] if owner is not None else None,
                "client_id": owner[2] if owner is not None else None,
            })
        return out


# -- in-flight depth -----------------------------------------------------------------------

DEPTH_BUCKETS = ("1", "2", "3-5", "6+")
_NO_APIS: set[str] = set()       # (never changed: apis are added to it only when depth > 1)
MAX_INFLIGHT_CONNS = 100        # connections listed (the deepest), per accumulator
RECENT = 64                     # a connection's latest requests whose depth can still be raised
RETIRE_EVERY = 4096             # exchanges between two looks for connections that ended
JAVA_DEFAULT_IN_FLIGHT = 5


def depth_bucket(depth: int) -> str:
    return "1" if depth <= 1 else "2" if depth == 2 else "3-5" if depth <= 5 else "6+"


def max_in_flight_verdict(depth: int) -> str:
    """What the deepest depth seen says of the client's max.in.flight.requests.per.connection."""
    if depth <= 1:
        return "at most 1 seen: consistent with max.in.flight=1, or a client that waits for each answer"
    if depth <= JAVA_DEFAULT_IN_FLIGHT:
        return f"at most {depth} seen: consistent with the default 5"
    return (f"at most {depth} seen: above the Java client's default 5 (max.in.flight raised, or librdkafka, "
            "whose default is 1000000)")


class _Figures:
    """Depth figures of a connection or a client id: requests, max depths, the depth
    distribution (of each request at the moment it was sent) and the APIs in flight together."""

    __slots__ = ("requests", "max_depth", "max_produce", "hist", "overlaps")

    def __init__(self) -> None:
        self.requests = 0
        self.max_depth = 0
        self.max_produce = 0
        self.hist: dict[str, int] = {}
        self.overlaps: dict[str, int] = {}

    def merge(self, o: _Figures) -> None:
        self.requests += o.requests
        self.max_depth = max(self.max_depth, o.max_depth)
        self.max_produce = max(self.max_produce, o.max_produce)
        for d, od in ((self.hist, o.hist), (self.overlaps, o.overlaps)):
            for k, n in od.items():
                d[k] = d.get(k, 0) + n

    def to_state(self) -> list[Any]:
        return [self.requests, self.max_depth, self.max_produce, self.hist, self.overlaps]

    @classmethod
    def from_state(cls, st: list[Any]) -> _Figures:
        f = cls()
        f.requests, f.max_depth, f.max_produce = st[0], st[1], st[2]
        f.hist, f.overlaps = dict(st[3]), dict(st[4])
        return f

    def result(self) -> dict[str, Any]:
        return {"requests": self.requests, "max_depth": self.max_depth, "max_produce_depth": self.max_produce,
                "depths": {b: self.hist.get(b, 0) for b in DEPTH_BUCKETS},
                "overlapping_apis": dict(sorted(self.overlaps.items(), key=lambda kv: (-kv[1], kv[0]))),
                "max_in_flight": max_in_flight_verdict(self.max_depth)}


class _Live:
    """A connection's requests still in flight, while its exchanges come (in response order)."""

    __slots__ = ("conn", "heap", "last_s", "recent", "fig", "client_id", "info", "seq")

    def __init__(self, conn: Conn) -> None:
        self.conn = conn
        self.heap: list[tuple[float, float, str]] = []       # (end, start, api) of requests in flight
        self.last_s = -1.0
        self.recent: deque[list[Any]] = deque(maxlen=RECENT)    # [start, end, depth, produce depth, api]
        self.fig = _Figures()
        self.client_id: str | None = None
        self.info = (conn.id, str(conn.client), str(conn.broker))
        self.seq = 0                                         # Exchange.seq of its latest exchange


def _conn_order(label: int | str) -> tuple[str, int]:
    """A connection label (n, or "capture#n") in the order of its captures and numbers."""
    if isinstance(label, int):
        return "", label
    head, _, n = label.rpartition("#")
    return (head, int(n)) if n.isdigit() else (label, 0)


class InFlight:
    """How many requests each connection had outstanding at once: a request is in flight from
    its request time (the packet that completed it) to its response time; an unanswered one
    to the connection's end; a Produce with acks=0 never. Exchanges come in response order:
    each connection keeps the requests still in flight (a heap by end) and its latest
    ``RECENT`` requests, whose depth an earlier request answered later (or never) raises; the
    state of a connection is retired once its last exchange is here (``Conn.ended`` and
    ``last_seq``; looked for every ``RETIRE_EVERY`` exchanges, as ``check`` does), so memory
    stays flat over millions of connections. Exact while no request is answered
    more than ``RECENT`` requests out of order.

    ``add`` returns the exchange's (depth, Produce depth) at the moment it was sent, as far as
    the exchanges so far tell (what ``check`` judges)."""

    def __init__(self) -> None:
        self._live: dict[int, _Live] = {}
        self.clients: dict[str | None, _Figures] = {}
        self.conns: list[list[Any]] = []        # [conn id, client, broker, client id, figures state]
        self.capture: str | None = None
        self._seen = 0

    def add(self, ex: Exchange) -> tuple[int, int] | None:
        self._seen += 1
        if self._seen % RETIRE_EVERY == 0:
            for key in [k for k, lv in self._live.items() if lv.conn.ended and lv.seq == lv.conn.last_seq]:
                self._retire(key)
        req = ex.request
        if req is None or ex.status == "no_response_expected" or ex.conn is None:
            return None
        conn = ex.conn
        live = self._live.get(id(conn))
        if live is None or live.conn is not conn:
            live = self._live[id(conn)] = _Live(conn)
        if live.client_id is None:
            live.client_id = ex.client_id
        live.seq = ex.seq
        s = req.last_ts
        e = ex.response.last_ts if ex.response is not None else max(conn.last_ts, s)
        api = ex.api_name or "Unknown"
        produce = api == "Produce"
        fig = live.fig
        fig.requests += 1
        heap = live.heap
        if s >= live.last_s:
            live.last_s = s
            while heap and heap[0][0] <= s:
                heapq.heappop(heap)
            if heap:
                depth = len(heap) + 1
                pdepth = sum(1 for h in heap if h[2] == "Produce") + 1 if produce else 0
                apis = {h[2] for h in heap}
            else:           # (most requests: nothing else in flight)
                depth, pdepth, apis = 1, 1 if produce else 0, _NO_APIS
        else:       # answered after a later request, or never: count what covers it, raise the later ones
            cover = [r for r in live.recent if r[0] <= s < r[1]]
            depth = len(cover) + 1
            pdepth = sum(1 for r in cover if r[4] == "Produce") + 1 if produce else 0
            apis = {r[4] for r in cover}
            for r in live.recent:
                if s < r[0] < e:
                    fig.hist[depth_bucket(r[2])] -= 1
                    r[2] += 1
                    fig.hist[depth_bucket(r[2])] = fig.hist.get(depth_bucket(r[2]), 0) + 1
                    fig.max_depth = max(fig.max_depth, r[2])
                    if produce and r[4] == "Produce":
                        r[3] += 1
                        fig.max_produce = max(fig.max_produce, r[3])
        if e > live.last_s:
            heapq.heappush(heap, (e, s, api))
        live.recent.append([s, e, depth, pdepth, api])      # (a deque: the oldest leaves)
        b = "1" if depth == 1 else depth_bucket(depth)
        hist = fig.hist
        hist[b] = hist.get(b, 0) + 1
        if depth > fig.max_depth:
            fig.max_depth = depth
        if pdepth > fig.max_produce:
            fig.max_produce = pdepth
        if depth > 1:
            apis.add(api)
            combo = "+".join(sorted(apis))
            fig.overlaps[combo] = fig.overlaps.get(combo, 0) + 1
        if conn.ended and ex.seq == conn.last_seq:
            self._retire(id(conn))
        return depth, pdepth

    def _retire(self, key: int) -> None:
        live = self._live.pop(key)
        fig = live.fig
        mine = self.clients.get(live.client_id)
        if mine is None:
            mine = self.clients[live.client_id] = _Figures()
        mine.merge(fig)
        cid, client, broker = live.info
        self.conns.append([cid if self.capture is None else f"{self.capture}#{cid}", client, broker,
                           live.client_id, fig.to_state()])
        if len(self.conns) >= 2 * MAX_INFLIGHT_CONNS:        # (the deepest kept: sorted now and then)
            self._list([])

    def _list(self, rows: list[list[Any]]) -> None:
        self.conns = sorted(self.conns + rows, key=lambda r: (-r[4][1], _conn_order(r[0])))[:MAX_INFLIGHT_CONNS]

    def settle(self) -> None:
        """Retire the connections still followed (the capture ended)."""
        for key in list(self._live):
            self._retire(key)

    def renumber(self, number: Any, source: str | None) -> None:
        self.settle()
        for r in self.conns:
            if isinstance(r[0], int):
                n = number(r[0])
                r[0] = n if source is None else f"{source}#{n}"
        self._list([])

    def merge(self, other: InFlight) -> InFlight:
        self.settle()
        other.settle()
        for cid, f in other.clients.items():
            mine = self.clients.get(cid)
            if mine is None:
                mine = self.clients[cid] = _Figures()
            mine.merge(f)
        self._list([list(r) for r in other.conns])
        return self

    def to_state(self) -> dict[str, Any]:
        self.settle()
        self._list([])
        return {"clients": [[c, f.to_state()] for c, f in self.clients.items()], "conns": self.conns}

    @classmethod
    def from_state(cls, st: dict[str, Any]) -> InFlight:
        out = cls()
        out.clients = {c: _Figures.from_state(f) for c, f in st["clients"]}
        out.conns = [list(r) for r in st["conns"]]
        return out

    def result(self) -> dict[str, Any]:
        self.settle()
        self._list([])
        clients = [{"client_id": c, **f.result()}
                   for c, f in sorted(self.clients.items(), key=lambda kv: (kv[0] is None, kv[0] or ""))]
        conns = [{"conn": r[0], "client": r[1], "broker": r[2], "client_id": r[3],
                  **_Figures.from_state(r[4]).result()} for r in self.conns]
        return {"clients": clients, "connections": conns}
