"""The rules of connection scope: how client and broker keep to the protocol on one
connection. How requests and responses pair (responses to no request, requests without
response, out of order, correlation ids reused), what the answers say (error codes,
throttling, slow answers), what the connection negotiates (API versions, SASL, fetch
sessions), what the bytes allowed to judge (frames cut short or malformed, records whose
CRC fails or that cannot be decoded), Produce requests in flight."""
from __future__ import annotations

import re
from collections import Counter, OrderedDict
from dataclasses import replace
from typing import Any

from analyzer.model import Exchange
from analyzer.sinks.insights import InFlight, elements, fetch_partitions, produce_partitions
from dissectors.field import MALFORMED, Field
from dissectors.field import body_of as _body
from dissectors.field import int_value as _int

from .common import (
    API_VERSIONS,
    ERROR_NAMES,
    FETCH,
    INT32_SPAN,
    JOIN_GROUP,
    MAX_LIST,
    PRODUCE,
    REF_KEYS,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    SHARE_FETCH,
    SYNC_GROUP,
    Bucket,
    ConnState,
    Finding,
    Pending,
    Settings,
    Unit,
    batch_summaries,
    exchange_ref,
    literal_text,
    order_key,
    ref_of,
    render,
)

try:  # the schema table may still be a placeholder: every use tolerates a missing API
    from dissectors.schema import APIS
except ImportError:  # pragma: no cover - contracts are in the repo
    APIS = {}

MAX_CORR_TRACKED = 1024     # correlation ids remembered per connection for the reuse rule

_ORPHAN_LOST = ("{count} response(s) to requests the capture missed (bytes of the client's side "
                "were not captured)")


class Orphans(Unit):
    """On a connection seen from its start, orphans are judged at its end (when the capture's
    losses are known); before that, they are counted in the connection's state."""
    ids = ("orphan-response",)
    requestless = keyless = legacy = True

    def add(self, ex: Exchange, cs: ConnState) -> None:
        if ex.status != "orphan_response":
            return
        if not cs.syn_seen:
            self.bucket("orphan-response", "info", cs, (),
                        "{count} response(s) to requests sent before the capture started", {}).add(ex)
            return
        if cs.orphans is None:
            cs.orphans = Bucket("orphan-response", "error", cs.name,
                                "{count} response(s) matching no request on a connection seen from its start", {})
        cs.orphans.add(ex)

    def retire(self, cs: ConnState) -> bool:
        return cs.orphans is not None

    def conn_end(self, cs: ConnState, end: float) -> list[Finding]:
        if cs.orphans is None or "orphan-response" not in self.on:
            return []
        f = cs.orphans.finding(("capture start",))
        lost, client = cs.lost()
        if lost & (1 << client):
            # a request in bytes the capture missed (a lost segment): not the broker's fault
            f = replace(f, severity="info", message=_ORPHAN_LOST.format(**f.details), template=_ORPHAN_LOST)
        return [f]


class Answers(Unit):
    """Responses out of order are told as they come; requests left without one at the end
    (passed over by the broker, waiting when the connection closed or the capture ended)."""
    ids = ("response-order", "unanswered-request", "closed-in-flight")
    keyless = legacy = True

    def add(self, ex: Exchange, cs: ConnState) -> None:
        if (rk := order_key(ex.request)) is None:
            return
        if ex.status in ("ok", "malformed") and ex.response is not None:
            last = cs.last_answered
            if last is not None and rk < last and "response-order" in self.on:
                self.bucket("response-order", "error", cs, (),
                            "{count} response(s) arrived before the response to an earlier request", {},
                            advice="a broker bug (Kafka answers a connection's requests in order), or a proxy "
                                   "between client and broker that reorders them").add(ex)
            if last is None or rk > last:
                cs.last_answered = rk
        elif ex.status == "unanswered":
            cs.unanswered = cs.unanswered or []
            cs.unanswered.append(Pending(exchange_ref(ex), rk, ex.request_time or 0.0, allowance_ms(ex)))

    def retire(self, cs: ConnState) -> bool:
        return bool(cs.unanswered)

    def conn_end(self, cs: ConnState, end: float) -> list[Finding]:
        if not cs.unanswered:
            return []
        out: list[Finding] = []
        if cs.closed:
            end = cs.last_ts
        # requests the broker passed over (later ones on the connection were answered): not
        # in flight when the connection closed, but skipped
        skipped = [p for p in cs.unanswered if cs.last_answered is not None and p.req_key < cs.last_answered]
        waiting = [p for p in cs.unanswered if p not in skipped]
        if cs.closed and "closed-in-flight" in self.on:
            if waiting:
                how, fix = "reset (RST)" if cs.closed == "rst" else "closed (FIN)", ""
                if cs.closer == "broker":
                    sev, who = "error", f"the broker {how} the connection"
                    fix = ("look in the broker's log for why it closed the connection: a broker closes it on a "
                           "request it does not take (an unknown API or version, a SASL mechanism it does not "
                           "enable, a request over socket.request.max.bytes, failed authentication)")
                elif cs.closer == "client":
                    sev, who = "info", f"the client {how} the connection"
                else:
                    sev, who = ("warning" if cs.closed == "rst" else "info"), f"connection {how}"
                out.append(_pending("closed-in-flight", sev, cs, waiting, end, who + " with {count} request(s) "
                                    "in flight ({names}), {age} after the oldest was sent", fix, who,
                                    closed=cs.closed, closed_by=cs.closer))
            waiting = []     # in flight at the close: closed-in-flight, above, judged them
        if "unanswered-request" not in self.on:
            return out
        late = [p for p in waiting if (end - p.request_time) * 1000.0 > p.allowance_ms + self.settings.slow_ms]
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
                ([p for p in waiting if p not in late], "info", "were still waiting when the capture ended", "")):
            if pending:
                out.append(_pending("unanswered-request", sev, cs, pending, end, "{count} request(s) ({names}) "
                                    + what + ", the oldest sent {age} before the end", fix, what, listed=True))
        return out


def _pending(rule: str, sev: str, cs: ConnState, pending: list[Pending], end: float, template: str, fix: str,
             story: str, listed: bool = False, **details: Any) -> Finding:
    """A finding on requests without response: ``template`` over {count}, {names} (their
    APIs and versions, most common first) and {age} (how long the oldest waited); ``listed``:
    each one's wait in the details."""
    waits = [max(0.0, (end - p.request_time) * 1000.0) for p in pending]
    c = Counter(f"{p.ref['api_name']} v{p.ref['api_version']}" for p in pending)
    names = ", ".join(f"{n}x{k}" if n > 1 else k for k, n in c.most_common(4)).replace(" v None", "")
    tmpl = template.replace("{names}", literal_text(names))
    det = {"count": len(pending), **details, "max_wait_ms": round(max(waits), 3)}
    if listed:
        det["waited_ms"] = [round(w, 3) for w in waits][:MAX_LIST]
    return Finding(rule, sev, render(tmpl, det), cs.name, sorted({p.ref["request_frame"] for p in pending})[:MAX_LIST],
                   [p.ref for p in pending][:MAX_LIST], det, advice=fix or None, story=(story, names),
                   template=tmpl, advice_template=literal_text(fix))


class Correlations(Unit):
    ids = ("correlation-reuse",)
    keyless = True

    def add(self, ex: Exchange, cs: ConnState) -> None:
        rk, cid = order_key(ex.request), ex.correlation_id
        if rk is None or cid is None:
            return
        mine = (rk, order_key(ex.response), (ex.api_name, ex.api_version, cid, ex.request_frame, ex.response_frame))
        if (corr := cs.corr) is None:
            corr = cs.corr = OrderedDict()
        if (prior := corr.get(cid)) is None:
            corr[cid] = [mine]
            if len(corr) > MAX_CORR_TRACKED:
                corr.popitem(last=False)
            return
        for other in prior:
            a, b = (other, mine) if other[0] <= mine[0] else (mine, other)
            # b was sent while a was in flight: a's response came after b's request, or never
            if a[1] is None or a[1] > b[0]:
                self.bucket("correlation-reuse", "error", cs, (),
                            "{count} request(s) reused a correlation id still in flight", {},
                            advice="a client bug (a correlation id must be unique among the requests in "
                                   "flight on a connection): upgrade the client"
                            ).add(dict(zip(REF_KEYS, b[2], strict=True)),
                                  [f for r in (a[2], b[2]) for f in r[3:] if f is not None])
                break
        prior.append(mine)
        del prior[:-8]
        corr.move_to_end(cid)

    def retire(self, cs: ConnState) -> bool:
        cs.corr = None
        return False


def allowance_ms(ex: Exchange) -> float:
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
    # (SyncGroup: followers wait for the leader's assignment, not judged)
    return float("inf") if ex.api_key == SYNC_GROUP else 0.0


# error names that are part of normal protocol flow (info), retriable per Kafka's error table or
# recoverable by the client (warning); the others are errors
FLOW_ERRORS = frozenset({
    "MEMBER_ID_REQUIRED", "REBALANCE_IN_PROGRESS", "NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS",
    "COORDINATOR_NOT_AVAILABLE", "LEADER_NOT_AVAILABLE", "NOT_LEADER_OR_FOLLOWER", "NOT_LEADER_FOR_PARTITION",
    "FENCED_LEADER_EPOCH", "UNKNOWN_LEADER_EPOCH", "OFFSET_NOT_AVAILABLE", "UNSTABLE_OFFSET_COMMIT",
    "CONCURRENT_TRANSACTIONS", "FETCH_SESSION_TOPIC_ID_ERROR"})
RETRIABLE_ERRORS = frozenset({
    "CORRUPT_MESSAGE", "UNKNOWN_TOPIC_OR_PARTITION", "REQUEST_TIMED_OUT", "REPLICA_NOT_AVAILABLE",
    "NETWORK_EXCEPTION", "NOT_ENOUGH_REPLICAS", "NOT_ENOUGH_REPLICAS_AFTER_APPEND", "NOT_CONTROLLER",
    "KAFKA_STORAGE_ERROR", "FETCH_SESSION_ID_NOT_FOUND", "INVALID_FETCH_SESSION_EPOCH", "LISTENER_NOT_FOUND",
    "PREFERRED_LEADER_NOT_AVAILABLE", "ELIGIBLE_LEADERS_NOT_AVAILABLE", "THROTTLING_QUOTA_EXCEEDED",
    "UNKNOWN_TOPIC_ID", "INCONSISTENT_TOPIC_ID", "UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION", "FENCED_MEMBER_EPOCH",
    "UNRELEASED_INSTANCE_ID", "OFFSET_OUT_OF_RANGE", "STALE_MEMBER_EPOCH", "OFFSET_MOVED_TO_TIERED_STORAGE",
    "DUPLICATE_SEQUENCE_NUMBER", "GROUP_COORDINATOR_NOT_AVAILABLE"})

_ACL = "grant the client's principal the ACL the request needs (kafka-acls), or give the client credentials that have it"
_REPLICAS = ("fewer in-sync replicas than the topic's min.insync.replicas: bring the lagging or stopped brokers back, "
             "or lower min.insync.replicas")
_TOO_LARGE = ("lower the producer's batch.size / max.request.size, or raise the topic's max.message.bytes (and the "
              "broker's message.max.bytes)")
_LEADER = "nothing, unless it persists: the client refreshes its metadata and retries on the new leader"
_FENCED = "another producer took over the transactional.id: give each producer instance its own id"
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
    "PRODUCER_FENCED": _FENCED, "INVALID_PRODUCER_EPOCH": _FENCED,
    "UNKNOWN_MEMBER_ID": "nothing, unless it repeats: the group removed the member (session.timeout.ms or "
                         "max.poll.interval.ms passed) and it joins again; raise those if it keeps happening",
    "ILLEGAL_GENERATION": "nothing, unless it repeats: the group rebalanced without the member, which joins again; "
                          "raise session.timeout.ms / max.poll.interval.ms if it keeps happening",
    "OFFSET_OUT_OF_RANGE": "the consumer's offset no longer exists (retention) or is not written yet: "
                           "auto.offset.reset decides where it restarts; keep retention longer than its lag",
}

# errors another rule tells, when it is on: (API key or None: any, error name or None: any) -> that rule
_TOLD_ELSEWHERE = (
    (API_VERSIONS, "UNSUPPORTED_VERSION", "apiversions-fallback"), (SASL_AUTHENTICATE, None, "sasl-auth-failed"),
    (None, "UNSUPPORTED_SASL_MECHANISM", "sasl-mechanism"), (None, "FETCH_SESSION_ID_NOT_FOUND", "fetch-session"),
    (None, "INVALID_FETCH_SESSION_EPOCH", "fetch-session"),
    (None, "OUT_OF_ORDER_SEQUENCE_NUMBER", "sequence-error-response"),
    (None, "DUPLICATE_SEQUENCE_NUMBER", "sequence-error-response"))


class ErrorResponses(Unit):
    """Errors another rule tells are left to it (_TOLD_ELSEWHERE); UNSUPPORTED_VERSION is
    told with the versions the broker advertised on the connection (Versions keeps them)."""
    ids = ("error-response",)
    legacy = True

    def add(self, ex: Exchange, cs: ConnState) -> None:
        if ex.response_tree is None or not ex.error_codes:
            return
        for name, n in Counter(ex.error_codes).items():
            if self._told_elsewhere(ex.api_key, name):
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
                    adv, said = None, "the broker's versions are not known (no ApiVersions answer on the connection)"
                elif rng is None:
                    adv, said = "none", f"the broker did not advertise {ex.api_name} on the connection"
                else:
                    adv = f"v{rng[0]}-v{rng[1]}"
                    said = f"the broker advertised {adv} on the connection"
                tmpl += ": {clients} sent {api_name} {versions}; " + literal_text(said)
                det["advertised"] = adv
                key += (adv,)
            fix = ERROR_ADVICE.get((ex.api_name, name), ERROR_ADVICE.get(name, ""))
            b = self.bucket("error-response", sev, cs, key, tmpl, det, advice=literal_text(fix))
            if ex.api_version is not None:
                b.unite("api_versions", ex.api_version)
            b.add(ex, "response", n=n, client_ids=ex.client_id)

    def _told_elsewhere(self, api_key: int | None, name: str) -> bool:
        for key, error, rule in _TOLD_ELSEWHERE:
            if (key is None or key == api_key) and (error is None or error == name):
                return rule in self.on
        return False


class Timing(Unit):
    ids = ("throttled", "slow-exchange")
    legacy = True

    def add(self, ex: Exchange, cs: ConnState) -> None:
        if (body := _body(ex.response_tree)) is None:
            return
        if ex.api_key == API_VERSIONS and _int(body.get("error_code")):
            return      # an UNSUPPORTED_VERSION answer has the v0 shape: its other fields mean nothing
        tt = _int(body.get("throttle_time_ms")) if "throttled" in self.on else None
        if tt is not None and tt > 0:
            b = self.bucket("throttled", "warning", cs, (ex.api_name,),
                            "{count} {api_name} response(s) throttled, up to {max_throttle_ms} ms",
                            {"api_name": ex.api_name, "max_throttle_ms": tt},
                            advice="the client is over its quota: raise the quota of its user or client id "
                                   "(kafka-configs --entity-type users/clients: producer_byte_rate, "
                                   "consumer_byte_rate, request_percentage), or make it ask for less")
            b.most("max_throttle_ms", tt)
            b.add(ex, "response")
        lat, slow_ms = ex.latency_ms, self.settings.slow_ms
        # (only these APIs' allowance can be below 0: the others' is 0 or infinite)
        if "slow-exchange" in self.on and lat is not None and (
                lat > slow_ms or ex.api_key in (FETCH, SHARE_FETCH, JOIN_GROUP)) and lat > allowance_ms(ex) + slow_ms:
            b = self.bucket("slow-exchange", "warning", cs, (ex.api_name,),
                            "{count} {api_name} exchange(s) slower than {limit_ms:g} ms "
                            "(beyond what the request allows), up to {max_latency_ms:.0f} ms",
                            {"api_name": ex.api_name, "limit_ms": slow_ms, "max_latency_ms": lat})
            b.most("max_latency_ms", lat)
            b.add(ex)


_FALLBACK = (
    ("retried", "info", "ApiVersions v{api_version} answered UNSUPPORTED_VERSION; the client retried with "
                        "v{retry_version}",
     "nothing: the client is newer than the broker and asked again in a version the broker takes"),
    ("stuck", "warning", "ApiVersions v{api_version} answered UNSUPPORTED_VERSION and the client did not retry "
                         "on this connection",
     "upgrade the client: on this answer it should ask again with a version the broker takes (KIP-511)"))


class Versions(Unit):
    """Keeps the broker's ApiVersions answer on the connection whatever the rules (error-response
    reads it too)."""
    ids = ("unknown-api", "version-unadvertised", "apiversions-fallback", "kafka4-removed")
    always = True

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        # one dict for the same advertised versions (a broker answers every connection alike)
        self.tables: dict[tuple[tuple[int, tuple[int, int]], ...], dict[int, tuple[int, int]]] = {}

    def add(self, ex: Exchange, cs: ConnState) -> None:
        on, key, ver = self.on, ex.api_key, ex.api_version
        assert key is not None
        if ver is None:
            return
        api = APIS.get(key)
        if (api is None or ver > api.max_version) and "unknown-api" in on:
            what = (f"unknown API key {key}" if api is None
                    else f"{ex.api_name} v{ver}, newer than the newest known (v{api.max_version})")
            self.bucket("unknown-api", "warning", cs, (key, ver),
                        "{count} request(s) with {what}: framed and paired, body not judged",
                        {"what": what, "api_key": key, "api_version": ver}).add(ex, "request")
        if api is None:
            return
        if key == API_VERSIONS:
            self._answer(ex, cs)
        elif "version-unadvertised" in on and cs.advertised is not None \
                and (ex.request_frame or 0) > cs.advertised_frame:
            rng = cs.advertised.get(key)
            if rng is None or not rng[0] <= ver <= rng[1]:
                self.bucket("version-unadvertised", "error", cs, (key, ver),
                            "{count} {api_name} v{api_version} request(s) from {clients}, but the broker "
                            + ("advertised {advertised}" if rng else "did not advertise {api_name}")
                            + " on this connection",
                            {"api_name": ex.api_name, "api_version": ver,
                             "advertised": f"v{rng[0]}-v{rng[1]}" if rng else "not advertised",
                             "advertised_frame": cs.advertised_frame, "client_ids": [ex.client_id]},
                            advice="the client did not keep to the broker's ApiVersions answer (a client "
                                   "bug): upgrade the client, or pin it to the versions the broker advertised"
                            ).add(ex, [f for f in (cs.advertised_frame, ex.request_frame) if f],
                                  client_ids=ex.client_id)
        k4 = api.kafka4_versions
        if "kafka4-removed" in on and ver <= api.max_version and (k4 is None or not k4[0] <= ver <= k4[1]):
            # (one finding per API, its versions listed)
            fix = (f"upgrade the client to one that sends {ex.api_name} v{k4[0]} or later before the brokers "
                   "move to Kafka 4.0" if k4 else
                   f"stop using {ex.api_name} (or upgrade the client) before the brokers move to Kafka 4.0")
            self.bucket("kafka4-removed", "warning", cs, (key,),
                        "{count} {api_name} {versions} request(s) from {clients}: Kafka {kafka4} (KIP-896)",
                        {"api_name": ex.api_name, "api_versions": [ver], "client_ids": [ex.client_id],
                         "kafka4": f"4.0 serves v{k4[0]}-v{k4[1]}" if k4 else "4.0 removed the API"},
                        advice=literal_text(fix)).add(ex, "request", api_versions=ver, client_ids=ex.client_id)

    def _answer(self, ex: Exchange, cs: ConnState) -> None:
        """An ApiVersions exchange: the versions the broker advertises on the connection, or
        its UNSUPPORTED_VERSION answer (and later, the client's retry)."""
        if (body := _body(ex.response_tree)) is None:
            return
        code = _int(body.get("error_code")) or 0
        # the versions by API key: api_keys' extra["versions"], which full and lean trees both
        # carry (dissectors.kafka.versions_table)
        keys = body.child("api_keys")
        adv = keys.extra.get("versions") if keys is not None and keys.extra else None
        adv = adv if isinstance(adv, dict) else {}
        if code == 0:
            # (a list the capture cut short is not the broker's whole answer)
            if adv and not (ex.response is not None and ex.response.truncated):
                if (table := self.tables.get(k := tuple(adv.items()))) is None:
                    if len(self.tables) >= 1024:
                        self.tables.clear()
                    table = self.tables[k] = adv
                cs.advertised, cs.advertised_frame = table, ex.response_frame or 0
            for fb in cs.fallback or ():   # a successful ApiVersions after an UNSUPPORTED_VERSION answer
                if fb.get("retry") is None and (ex.request_frame or 0) > fb["response_frame"]:
                    fb["retry"] = exchange_ref(ex)
        elif ERROR_NAMES.get(code) == "UNSUPPORTED_VERSION" and "apiversions-fallback" in self.on:
            cs.fallback = cs.fallback or []
            cs.fallback.append(dict(exchange_ref(ex), supported=adv.get(API_VERSIONS), retry=None))

    def retire(self, cs: ConnState) -> bool:
        cs.advertised = None
        return bool(cs.fallback)

    def conn_end(self, cs: ConnState, end: float) -> list[Finding]:
        if not cs.fallback or "apiversions-fallback" not in self.on:
            return []
        out = []
        for kind, sev, msg, fix in _FALLBACK:
            group = [fb for fb in cs.fallback if bool(fb.get("retry")) == (kind == "retried")]
            if not group:
                continue
            fb, retries = group[0], [g["retry"] for g in group if g.get("retry")]
            frames = {f for r in group + retries for f in (r["request_frame"], r["response_frame"]) if f}
            rv = fb["retry"]["api_version"] if fb.get("retry") else None
            det = {"count": len(group), "broker_supports": fb.get("supported"), "retry_version": rv,
                   "api_version": fb["api_version"]}
            out.append(Finding("apiversions-fallback", sev, render(msg, det), cs.name, sorted(frames)[:MAX_LIST],
                               ([ref_of(g) for g in group] + retries)[:MAX_LIST], det, advice=fix,
                               story=(fb["api_version"], rv), template=msg, advice_template=fix))
        return out


PRE_AUTH_APIS = {SASL_HANDSHAKE, API_VERSIONS, SASL_AUTHENTICATE}


class Sasl(Unit):
    ids = ("sasl-before-auth", "sasl-mechanism", "sasl-auth-failed")

    def add(self, ex: Exchange, cs: ConnState) -> None:
        key, on = ex.api_key, self.on
        if key not in (SASL_HANDSHAKE, SASL_AUTHENTICATE) and cs.sasl_handshake_frame is None:
            return
        rbody = _body(ex.response_tree)
        code = _int(rbody.get("error_code")) if rbody is not None else None
        if key == SASL_HANDSHAKE:
            if cs.sasl_handshake_frame is None:
                cs.sasl_handshake_frame, cs.sasl_handshake_version = ex.request_frame, ex.api_version
            qbody = _body(ex.request_tree)
            mech = qbody.get("mechanism") if qbody is not None else None
            offered = [m.value for m in elements(rbody.child("mechanisms"))] if rbody is not None else None
            error = ERROR_NAMES.get(code or 0)
            if "sasl-mechanism" in on and rbody is not None and (
                    error == "UNSUPPORTED_SASL_MECHANISM" or (offered and mech is not None and mech not in offered)):
                if offered and mech in offered:
                    # refused, yet the broker's own list names it: the broker contradicts itself
                    how, fix, tmpl = "broker-bug", "", ("{count} SaslHandshake(s): the broker refused {mechanism} "
                                                        "({error}) but lists {mechanism} as enabled (a broker bug)")
                else:
                    how, tmpl = "not-offered", "SaslHandshake asked for {mechanism}, the broker offers {offered}"
                    fix = ("configure the client with a mechanism the broker offers ({offered}), or enable "
                           "{mechanism} on the broker's listener (sasl.enabled.mechanisms)")
                self.bucket("sasl-mechanism", "error", cs, (str(mech), how), tmpl,
                            {"mechanism": mech, "offered": ", ".join(map(str, offered or [])) or "nothing",
                             "error": error}, advice=fix).add(ex)
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
                if code:
                    err = ERROR_NAMES.get(code, f"error {code}")
                    why = f" ({msg})" if msg and msg != "NONE" else ""
                else:
                    err, why = f"{step or 'SASL'} error '{mech_error}'", " although error_code is 0"
                self.bucket("sasl-auth-failed", "error", cs, (err,),
                            "{count} SaslAuthenticate failure(s): {error}{why}", {"error": err, "why": why},
                            advice=literal_text(_sasl_advice(err, mech_error))).add(ex)
        elif key not in PRE_AUTH_APIS and "sasl-before-auth" in on and cs.sasl_handshake_version != 0:
            hs, rf = cs.sasl_handshake_frame, ex.request_frame or 0
            if hs is not None and rf > hs and (cs.sasl_ok_frame is None or rf < cs.sasl_ok_frame):
                self.bucket("sasl-before-auth", "error", cs, (),
                            "{count} request(s) sent before SASL authentication completed", {"handshake_frame": hs},
                            advice="a client bug (after SaslHandshake it must finish SaslAuthenticate before "
                                   "other requests): upgrade the client").add(ex, "request")


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


class FetchSessions(Unit):
    """Follows the session id and epoch the Fetch requests (v7+) use, and the broker's
    session errors."""
    ids = ("fetch-session",)
    apis = frozenset({FETCH})

    def add(self, ex: Exchange, cs: ConnState) -> None:
        q = _body(ex.request_tree) if (ex.api_version or 0) >= 7 else None
        if q is None:
            return
        sid, epoch = _int(q.get("session_id")), _int(q.get("session_epoch"))
        if sid is None or epoch is None:
            return

        def report(kind: str, sev: str, msg: str, **extra: Any) -> None:
            self.bucket("fetch-session", sev, cs, (kind,), msg, dict(extra, kind=kind)
                        ).add(ex, "request" if kind not in ("not-found", "invalid-epoch") else "both")

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
        error = ERROR_NAMES.get(_int(r.get("error_code")) or 0) if r is not None else None
        new = _int(r.get("session_id")) if r is not None else None
        if error in ("FETCH_SESSION_ID_NOT_FOUND", "INVALID_FETCH_SESSION_EPOCH"):
            report("not-found" if error == "FETCH_SESSION_ID_NOT_FOUND" else "invalid-epoch", "warning",
                   "{count} {error} response(s) (first for session {sid}, epoch {epoch})",
                   error=error, sid=sid, epoch=epoch)
            cs.fetch_sid, cs.fetch_next_epoch = 0, None
        elif epoch == -1 or (epoch == 0 and sid == 0 and r is not None and not new):
            cs.fetch_sid, cs.fetch_next_epoch = 0, None
        elif epoch == 0:
            if new:
                cs.fetch_sid, cs.fetch_next_epoch = new, 1
        elif sid == cs.fetch_sid:
            cs.fetch_next_epoch = 1 if epoch >= INT32_SPAN - 1 else epoch + 1


class Frames(Unit):
    ids = ("truncated-frame", "crc-mismatch", "malformed-frame", "undecodable-records")
    keyless = legacy = True

    def add(self, ex: Exchange, cs: ConnState) -> None:
        q, r, on = ex.request, ex.response, self.on
        cut = [(side, fr) for side, fr in (("request", q), ("response", r)) if fr is not None and fr.truncated]
        if ex.status != "malformed" and ex.api_key not in (PRODUCE, FETCH) and not ex.partitions and not cut:
            return      # (nothing here to judge)
        truncated = [side for side, _fr in cut]
        if cut and "truncated-frame" in on:
            self.bucket("truncated-frame", "info", cs, (),
                        "{count} frame(s) with bytes missing from the capture (not judged)",
                        {}, advice="to have them judged, capture whole packets (tcpdump -s 0) with a buffer "
                                   "large enough that none is dropped (tcpdump -B)"
                        ).add(ex, [fr.last_index for _side, fr in cut], n=len(cut))
        crc_frames: list[int] = []
        crc_counts = [0, 0]     # the batches whose CRC fails, of them control batches with CRC 0
        undecodable: list[tuple[int, str]] = []
        legacy = ex.protocol == "kafka-legacy"
        if (ex.api_key in (PRODUCE, FETCH) or (legacy and ex.partitions)) and (
                {"crc-mismatch", "undecodable-records"} & on):
            # pre-0.8: PRODUCE (0) and MULTIPRODUCE (3) carry messages in the request
            prod = ex.api_key in ((PRODUCE, 3) if legacy else (PRODUCE,))
            frame = ex.request_frame if prod else ex.response_frame
            if frame is not None and ("request" if prod else "response") not in truncated:
                if any(p.get("crc_ok") is False for p in ex.partitions):
                    crc_frames.append(frame)
                walker = produce_partitions if prod else fetch_partitions
                for _t, _p, rec in () if legacy else walker(_body(ex.request_tree if prod else ex.response_tree)):
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
            kind = "control-crc-zero" if n and zero == n else "data"
            if kind == "data":
                tmpl, fix = "{count} {api_name} frame(s) with a record CRC mismatch", ""
            else:   # transaction markers the broker wrote without a CRC: the data batches are sound
                tmpl = ("{count} {api_name} frame(s) with a record CRC mismatch, all in control batches "
                        "(transaction markers) whose CRC field is 0; the data batches' CRCs are valid")
                fix = ("the broker wrote these transaction markers without a CRC (a broker bug): the records "
                       "are intact, but clients that verify CRCs (check.crcs) reject the batches; report it to "
                       "the broker's maintainers")
            b = self.bucket("crc-mismatch", "error", cs, (ex.api_name, kind), tmpl,
                            {"api_name": ex.api_name, "kind": kind, "crc_batches": 0, "control_crc_zero": 0}, fix)
            b.details["crc_batches"] += n
            b.details["control_crc_zero"] += zero
            b.add(ex, crc_frames)
        if ex.status == "malformed" and ("malformed-frame" in on or "undecodable-records" in on):
            for side, fr, tree in (("request", q, ex.request_tree), ("response", r, ex.response_tree)):
                if fr is None or side in truncated or (hit := _first_malformed(tree)) is None:
                    continue
                reason, in_records = hit
                if in_records:
                    undecodable.append((fr.last_index, reason))
                elif "malformed-frame" in on:
                    self.bucket("malformed-frame", "error", cs, (ex.api_name, side),
                                "{count} malformed {api_name} {side}(s), first: {reason}",
                                {"api_name": ex.api_name, "side": side, "reason": reason}).add(ex, [fr.last_index])
        if undecodable and "undecodable-records" in on:
            self.bucket("undecodable-records", "warning", cs, (ex.api_name,),
                        "{count} {api_name} frame(s) with records that cannot be decoded, first: {reason}",
                        {"api_name": ex.api_name, "reason": undecodable[0][1]}
                        ).add(ex, sorted({f for f, _ in undecodable}))


def _first_malformed(tree: Field | None) -> tuple[str, bool] | None:
    """The first malformed note of a tree and whether it sits inside a records field."""
    stack: list[tuple[Field, bool]] = [(tree, False)] if tree is not None else []
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
    extra = records.extra or {}
    crc_bad, undecodable = extra.get("crc_ok") is False, None
    for n in records.notes or ():
        low = n.lower()
        if "crc invalid" in low or "crc mismatch" in low:
            crc_bad = True
        elif any(w in low for w in _UNDECODABLE_WORDS):
            undecodable = n
    batches = extra.get("batches")
    if isinstance(batches, list):
        for b in batches:
            if isinstance(b, dict):
                crc_bad = crc_bad or b.get("crc_ok") is False
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
        count = sum(1 for f in records.walk()
                    if f.name == "crc" and any(n.startswith("crc INVALID") for n in f.notes or ()))
        for e in records.children:
            crc = e.child("crc")
            if crc is not None and any(n.startswith("crc INVALID") for n in crc.notes or ()) \
                    and e.name.startswith("[") and e.name[1:-1].isdigit():
                failed.append((int(e.name[1:-1]), _int(crc.value) or 0))
    else:
        for m in filter(None, map(_CRC_NOTE.match, records.notes or ())):
            count += 1
            failed.append((int(m.group(1)), int(m.group(2), 16)))
    if not failed or not isinstance(batches, list) or \
            sum(_int(b.get("record_count")) or 0 for b in batches if isinstance(b, dict)) != extra.get("records"):
        return count, 0
    return count, sum(1 for i, stored in failed if stored == 0 and i < len(batches)
                      and isinstance(batches[i], dict) and batches[i].get("is_control") is True)


class InFlightRules(Unit):
    """Produce requests in flight among Produce requests on a connection: whether the producer
    is idempotent tells which rule judges them."""
    ids = ("in-flight-idempotent", "in-flight-reorder")
    apis = frozenset({PRODUCE})

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.inflight = InFlight()      # requests in flight per connection (retired when it ends)

    def add(self, ex: Exchange, cs: ConnState) -> None:
        if (depths := self.inflight.add(ex)) is None:
            return
        pids = sorted({pid for _t, _p, rec in produce_partitions(_body(ex.request_tree))
                       for b in batch_summaries(rec) if (pid := _int(b.get("producer_id"))) is not None and pid >= 0})
        produce_depth = depths[1]
        if pids and produce_depth > 5 and "in-flight-idempotent" in self.on:
            b = self.bucket("in-flight-idempotent", "error", cs, (),
                            "{count} Produce request(s) sent with more than 5 Produce requests in flight "
                            "(up to {max_in_flight}) by idempotent producer id(s) {producer_ids_text} ({clients})",
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
        if ex.response is None or (rk := order_key(ex.request)) is None:
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
