"""Rules on producers: an idempotent producer's sequence numbers (followed across
connections: judged when the run ends), Produce requests in flight on a connection."""
from __future__ import annotations

from typing import Any, NamedTuple

from analyzer.model import Exchange
from analyzer.sinks.insights import (
    InFlight,
    elements,
    partition_number,
    produce_partitions,
    topic_name,
)
from dissectors.field import Field
from dissectors.field import body_of as _body
from dissectors.field import int_value as _int

from .common import (
    ERROR_NAMES,
    INT32_SPAN,
    MAX_LIST,
    PRODUCE,
    REF_KEYS,
    ConnState,
    Finding,
    Kept,
    Settings,
    Unit,
    req_key,
)

MAX_BATCHES = 2_000_000     # idempotent producer batches kept for the sequence rules (~150 B each)


class Batch(NamedTuple):
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
        return dict(zip(REF_KEYS, self.ref_t, strict=True))


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


def _seq_before(a: int, b: int) -> bool:
    """a comes before b in int32 sequence space (with wrap-around)."""
    return a != b and (b - a) % INT32_SPAN < INT32_SPAN // 2


class Sequences(Unit):
    """Idempotent producers' batches (producer id, epoch, partition, base_sequence), kept
    over the run (a producer's partition may move to another connection) and judged in
    request order when it ends: gaps, reorderings, overlaps and re-sends of acknowledged
    batches; OUT_OF_ORDER_SEQUENCE_NUMBER / DUPLICATE_SEQUENCE_NUMBER tied to their batches."""
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
            for b in _records_batches(rec):
                pid, ep = _int(b.get("producer_id")), _int(b.get("producer_epoch"))
                seq, n = _int(b.get("base_sequence")), _int(b.get("record_count"))
                if pid is None or pid < 0 or seq is None or seq < 0 or n is None:
                    continue
                code = errors.get((topic, part), 0)
                err = None if not code else ERROR_NAMES.get(code, f"error {code}")
                topic = self.names.setdefault(topic, topic)
                self.batches.append(Batch(pid, ep if ep is not None else -1, topic, part, seq, n,
                                          ex.request_time or 0.0, ex.request_frame, order, cs.name, ref,
                                          err, ex.response is not None))
                order += 1

    def merge(self, other: Sequences) -> None:
        self.batches.merge(other.batches)

    def stats(self) -> dict[str, int]:
        return {"producer_batches": len(self.batches), "producer_requests_dropped": self.batches.dropped}

    def finish(self) -> list[Finding]:
        by_key: dict[tuple[int, int, str, int], list[Batch]] = {}
        for b in self.batches:
            by_key.setdefault((b.producer_id, b.epoch, b.topic, b.partition), []).append(b)
        out: list[Finding] = []
        for key, batches in by_key.items():
            batches.sort(key=lambda b: (b.request_time, b.request_frame, b.order))
            out.extend(self._run(key, batches))
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


def _produce_errors(body: Field | None) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    for t in elements(body.child("responses") if body is not None else None):
        topic = topic_name(t)
        for p in elements(t.child("partition_responses")):
            out[(topic, partition_number(p))] = _int(p.get("error_code")) or 0
    return out


class InFlightRules(Unit):
    """Produce requests in flight among Produce requests on a connection: more than 5 from
    an idempotent producer; answered out of order from a producer without idempotence."""
    ids = ("in-flight-idempotent", "in-flight-reorder")
    apis = frozenset({PRODUCE})

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.inflight = InFlight()      # requests in flight per connection (retired when it ends)

    def add(self, ex: Exchange, cs: ConnState) -> None:
        depths = self.inflight.add(ex)
        if depths is None:
            return
        body = _body(ex.request_tree)
        pids = sorted({pid for _t, _p, rec in produce_partitions(body) for b in _records_batches(rec)
                       if (pid := _int(b.get("producer_id"))) is not None and pid >= 0})
        produce_depth = depths[1]
        if pids and produce_depth > 5 and "in-flight-idempotent" in self.on:
            b = self.bucket("in-flight-idempotent", "error", cs, (),
                            "{count} Produce request(s) sent with more than 5 Produce requests in flight "
                            "(up to {max_in_flight}) by idempotent producer id(s) {producer_ids_text} "
                            "({clients})",
                            {"max_in_flight": produce_depth, "client_ids": [ex.client_id],
                             "producer_ids_text": ", ".join(map(str, pids))},
                            advice="an idempotent producer may have at most 5 requests in flight per "
                                   "connection: the broker keeps the sequence numbers of the last 5 batches "
                                   "per partition and rejects others with OUT_OF_ORDER_SEQUENCE_NUMBER; set "
                                   "max.in.flight.requests.per.connection (librdkafka: max.in.flight) to 5 "
                                   "or less")
            b.unite("client_ids", ex.client_id)
            b.most("max_in_flight", produce_depth)
            b.add(ex)
        rk = req_key(ex)
        if ex.response is None or rk is None:
            return
        last = cs.last_produce
        if last is not None and rk < last and not pids and "in-flight-reorder" in self.on:
            self.bucket("in-flight-reorder", "warning", cs, (),
                        "{count} Produce response(s) came after the response to a later Produce while "
                        "several were in flight, from a producer without idempotence ({clients}): "
                        "its batches can be written out of order",
                        {"client_ids": [ex.client_id]},
                        advice="set max.in.flight.requests.per.connection=1 (librdkafka: max.in.flight=1) "
                               "or enable idempotence (enable.idempotence=true), which keeps the order "
                               "with up to 5 in flight").add(ex, client_ids=ex.client_id)
        if last is None or rk > last:
            cs.last_produce = rk
