"""The rules of global scope, judged when the run ends: what they follow spans connections.
An idempotent producer's sequence numbers (its partitions may move to another connection),
consumer groups' rebalances (members talk to the coordinator over their own connections;
the group events are also the timeline's), TLS connections not decrypted (from the run's
summary)."""
from __future__ import annotations

import bisect
from typing import Any, NamedTuple

from analyzer.model import Exchange
from analyzer.pipeline import TLS_SKIPPED, Summary
from analyzer.sinks.insights import (
    elements,
    group_event,
    group_stories,
    partition_number,
    produce_partitions,
    rejoins_same_generation,
    topic_name,
)
from dissectors.field import Field
from dissectors.field import body_of as _body
from dissectors.field import int_value as _int

from .common import (
    ERROR_NAMES,
    INT32_SPAN,
    JOIN_GROUP,
    MAX_LIST,
    PRODUCE,
    REF_KEYS,
    SYNC_GROUP,
    ConnState,
    Finding,
    Kept,
    Settings,
    Unit,
    batch_summaries,
    ref_of,
)

MAX_BATCHES = 2_000_000     # idempotent producer batches kept for the sequence rules (~150 B each)


class Batch(NamedTuple):
    """One producer batch of a Produce request, for the sequence rules."""
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
        return dict(zip(REF_KEYS, self.ref_t, strict=True))


def _produce_errors(body: Field | None) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    for t in elements(body.child("responses") if body is not None else None):
        topic = topic_name(t)
        for p in elements(t.child("partition_responses")):
            out[(topic, partition_number(p))] = _int(p.get("error_code")) or 0
    return out


def _seq_before(a: int, b: int) -> bool:
    """a comes before b in int32 sequence space (with wrap-around)."""
    return a != b and (b - a) % INT32_SPAN < INT32_SPAN // 2


class Sequences(Unit):
    """Idempotent producers' batches, kept over the run and judged per producer id, epoch
    and partition in request order when it ends."""
    ids = ("producer-sequence", "sequence-error-response")
    apis = frozenset({PRODUCE})

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.batches: Kept[Batch] = Kept(MAX_BATCHES)     # (dropped: Produce requests not followed)
        self.names: dict[str, str] = {}     # one str object per topic name

    def add(self, ex: Exchange, cs: ConnState) -> None:
        body = _body(ex.request_tree)
        if body is None or ex.request_frame is None:
            return
        errors = _produce_errors(_body(ex.response_tree))
        ref = (ex.api_name, ex.api_version, ex.correlation_id, ex.request_frame, ex.response_frame)
        if not self.batches.room():
            return
        order = 0
        for topic, part, rec in produce_partitions(body):
            for b in batch_summaries(rec):
                pid, ep = _int(b.get("producer_id")), _int(b.get("producer_epoch"))
                seq, n = _int(b.get("base_sequence")), _int(b.get("record_count"))
                if pid is None or pid < 0 or seq is None or seq < 0 or n is None:
                    continue
                code = errors.get((topic, part), 0)
                topic = self.names.setdefault(topic, topic)
                self.batches.append(Batch(pid, ep if ep is not None else -1, topic, part, seq, n,
                                          ex.request_time or 0.0, ex.request_frame, order, cs.name, ref,
                                          ERROR_NAMES.get(code, f"error {code}") if code else None,
                                          ex.response is not None))
                order += 1

    def stats(self) -> dict[str, int]:
        return {"producer_batches": len(self.batches), "producer_requests_dropped": self.batches.dropped}

    def finish(self) -> list[Finding]:
        by_key: dict[tuple[int, int, str, int], list[Batch]] = {}
        for b in self.batches:
            by_key.setdefault((b.producer_id, b.epoch, b.topic, b.partition), []).append(b)
        out: list[Finding] = []
        for key, batches in by_key.items():
            out.extend(self._run(key, sorted(batches, key=lambda b: (b.request_time, b.request_frame, b.order))))
        return out

    def _run(self, key: tuple[int, int, str, int], batches: list[Batch]) -> list[Finding]:
        """Judge the batches of one producer id, epoch and partition, in request order."""
        pid, ep, topic, part = key
        on = self.on
        where = f"producer id {pid} epoch {ep}, topic {topic} partition {part}"
        ident = {"producer_id": pid, "producer_epoch": ep, "topic": topic, "partition": part}
        out: list[Finding] = []
        kinds: dict[str, Finding] = {}
        expected: int | None = None
        starts: dict[int, Batch] = {}       # base_sequence -> latest batch sent with it
        fillers: set[int] = set()           # indexes of late batches already reported with their gap

        def note(kind: str, sev: str, msg: str, involved: list[Batch], **det: Any) -> None:
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
            prev = starts.get(seq)
            if b.error in ("OUT_OF_ORDER_SEQUENCE_NUMBER", "DUPLICATE_SEQUENCE_NUMBER") \
                    and "sequence-error-response" in on:
                f = Finding("sequence-error-response",
                            "error" if b.error == "OUT_OF_ORDER_SEQUENCE_NUMBER" else "warning",
                            f"{b.error} for {where}: batch base_sequence {seq} ({n} records), "
                            f"expected {'unknown' if expected is None else expected} from the batches seen before",
                            b.conn, [x for x in (b.request_frame, b.ref_t[4]) if x], [b.ref],
                            dict(ident, error=b.error, base_sequence=seq, record_count=n, expected_sequence=expected,
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
                    note("overlap", "error", f"{where}: base_sequence went back from {expected} to {seq}, "
                         "inside batches already sent", [b], expected=expected, got=seq)
                elif late := [j for j in range(i + 1, len(batches)) if _seq_before(batches[j].base_sequence, seq)
                              and not _seq_before(batches[j].base_sequence, expected)]:
                    fillers.update(late)
                    note("reorder", "error", f"{where}: batch {seq} sent before batch "
                         f"{batches[late[0]].base_sequence} (out of sequence order)",
                         [b] + [batches[j] for j in late], expected=expected, got=seq)
                else:
                    note("gap", "error", f"{where}: base_sequence jumped from {expected} to {seq} "
                         f"({(seq - expected) % INT32_SPAN} records never sent)", [b], expected=expected, got=seq)
            starts[seq] = b
            nxt = (seq + n) % INT32_SPAN
            if expected is None or not _seq_before(nxt, expected):
                expected = nxt
        for f in kinds.values():
            order = sorted(range(len(f.frames)), key=lambda k: f.frames[k])
            f.frames, f.exchanges = [f.frames[k] for k in order], [f.exchanges[k] for k in order]
        return out


MAX_GROUP_EVENTS = 200_000  # group timeline events kept in all
OFFSET_COMMIT = 8
# JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, ConsumerGroupHeartbeat
GROUP_APIS = frozenset({JOIN_GROUP, SYNC_GROUP, 12, 13, OFFSET_COMMIT, 68})


class Groups(Unit):
    """The group APIs' exchanges as events, kept whatever the rules (the timeline and the
    stories read them); rebalance storms judged over them when the run ends."""
    ids = ("rebalance-storm",)
    apis = GROUP_APIS
    always = True

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.events: Kept[dict[str, Any]] = Kept(MAX_GROUP_EVENTS)

    def add(self, ex: Exchange, cs: ConnState) -> None:
        # (the timeline's offsets are OffsetCommit's: the other group APIs' events are whole
        # in lean trees, and JoinGroup and SyncGroup have full ones)
        if self.events.room() and (ev := group_event(ex, cs.name, full=ex.api_key == OFFSET_COMMIT)) is not None:
            self.events.append(ev)

    def stats(self) -> dict[str, int]:
        return {"group_events": len(self.events), "group_events_dropped": self.events.dropped}

    def groups(self) -> list[str]:
        return sorted({e["group_id"] for e in self.events if e.get("group_id") is not None})

    def timeline(self, group_id: str) -> list[dict[str, Any]]:
        return sorted((e for e in self.events if e.get("group_id") == group_id),
                      key=lambda e: (e["time"], e["request_frame"] or 0))

    def stories(self) -> list[dict[str, Any]]:
        return group_stories(self.events)

    def finish(self) -> list[Finding]:
        if "rebalance-storm" not in self.on:
            return []
        out: list[Finding] = []
        by_group: dict[str, dict[int, dict[str, Any]]] = {}     # group -> generation -> its first event
        joins: dict[str, list[dict[str, Any]]] = {}
        for e in sorted(self.events, key=lambda e: (e["time"], e["request_frame"] or 0, e["conn"])):
            if e.get("group_id") is None:
                continue
            if e["api_name"] == "JoinGroup":
                joins.setdefault(e["group_id"], []).append(e)
            gen = e.get("generation_id")
            if e["api_name"] in ("JoinGroup", "ConsumerGroupHeartbeat") and not e.get("error") \
                    and gen is not None and gen >= 0:
                gens = by_group.setdefault(e["group_id"], {})
                if gen not in gens or e["time"] < gens[gen]["time"]:
                    gens[gen] = e
        window, most = self.settings.storm_window_s, self.settings.storm_rebalances
        for group, gens in by_group.items():
            evs = sorted(gens.values(), key=lambda e: e["time"])
            if len(sel := self._densest(evs)) > most:
                out.append(self._storm(group, sel, f"group {group}: {len(sel)} generations within {window:g} s "
                                                   f"(generation {sel[0]['generation_id']} to "
                                                   f"{sel[-1]['generation_id']})",
                                       {"generations": len(sel), "total_generations": len(evs)}))
        for group, js in joins.items():
            if len(sel := self._densest(rejoins_same_generation(js))) > most:
                out.append(self._storm(group, sel, f"group {group}: {len(sel)} JoinGroups within {window:g} s by "
                                                   "members that got back the generation they had "
                                                   f"({sel[0]['generation_id']}): rejoining without the "
                                                   "generation moving",
                                       {"rejoins": len(sel), "kind": "rejoin"}))
        return out

    def _densest(self, evs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The most events (in time order) within one storm window."""
        times = [e["time"] for e in evs]
        worst, worst_i = 0, 0
        for i, t in enumerate(times):
            j = bisect.bisect_right(times, t + self.settings.storm_window_s)
            if j - i > worst:
                worst, worst_i = j - i, i
        return evs[worst_i:worst_i + worst]

    def _storm(self, group: str, sel: list[dict[str, Any]], message: str, details: dict[str, Any]) -> Finding:
        return Finding("rebalance-storm", "warning", message, ", ".join(sorted({e["conn"] for e in sel})),
                       sorted(e["request_frame"] for e in sel if e["request_frame"])[:MAX_LIST],
                       [ref_of(e) for e in sel][:MAX_LIST],
                       {"group_id": group, "window_s": self.settings.storm_window_s, **details},
                       advice=f"read what starts the rebalances with --timeline {group}: members that time out "
                              "(raise session.timeout.ms or max.poll.interval.ms, or make the poll loop faster) "
                              "or that restart again and again")


class Encrypted(Unit):
    """Read from a run's summary (``Checker.encrypted``), not from exchanges."""
    ids = ("tls-not-decrypted",)

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.count = self.bytes = 0
        self.conns: list[str] = []      # the first MAX_LIST of them

    def follows(self, api_key: int | None, legacy: bool, requestless: bool) -> bool:
        return False

    def summary(self, summary: Summary) -> None:
        for t in summary.tls:
            if not t.get("decryption", "").startswith("decrypting"):
                self.count += 1
                if len(self.conns) < MAX_LIST:
                    self.conns.append(f"{t.get('client')} -> {t.get('broker')}")
        self.bytes += summary.bytes_skipped.get(TLS_SKIPPED, 0)

    def merge(self, other: Encrypted) -> None:
        self.count += other.count
        self.bytes += other.bytes
        self.conns = (self.conns + other.conns)[:MAX_LIST]

    def finish(self) -> list[Finding]:
        n = self.count
        if not n or "tls-not-decrypted" not in self.on:
            return []
        return [Finding("tls-not-decrypted", "warning",
                        f"{n} TLS connection{'s' if n != 1 else ''} not decrypted ({self.bytes} bytes): "
                        f"{'its' if n == 1 else 'their'} Kafka traffic was not checked",
                        ", ".join(self.conns) + (", ..." if n > len(self.conns) else ""),
                        details={"connections": n, "bytes": self.bytes},
                        advice="give the key log the clients wrote (SSLKEYLOGFILE) with --tls-keylog FILE")]
