"""Rules on what responses say: error codes, quota throttling, slow answers."""
from __future__ import annotations

from collections import Counter
from typing import Any

from analyzer.model import Exchange
from dissectors.field import body_of as _body
from dissectors.field import int_value as _int

from .common import (
    API_VERSIONS,
    FETCH,
    JOIN_GROUP,
    SASL_AUTHENTICATE,
    SHARE_FETCH,
    ConnState,
    Unit,
    allowance_ms,
    literal_text,
)

# Error names that are part of normal protocol flow: reported as info.
FLOW_ERRORS = frozenset({
    "MEMBER_ID_REQUIRED", "REBALANCE_IN_PROGRESS", "NOT_COORDINATOR",
    "COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE", "LEADER_NOT_AVAILABLE",
    "NOT_LEADER_OR_FOLLOWER", "NOT_LEADER_FOR_PARTITION", "FENCED_LEADER_EPOCH",
    "UNKNOWN_LEADER_EPOCH", "OFFSET_NOT_AVAILABLE", "UNSTABLE_OFFSET_COMMIT",
    "CONCURRENT_TRANSACTIONS", "FETCH_SESSION_TOPIC_ID_ERROR",
})
# Retriable (per Kafka's error table) or recoverable by the client: reported as warning.
RETRIABLE_ERRORS = frozenset({
    "CORRUPT_MESSAGE", "UNKNOWN_TOPIC_OR_PARTITION", "REQUEST_TIMED_OUT", "REPLICA_NOT_AVAILABLE",
    "NETWORK_EXCEPTION", "NOT_ENOUGH_REPLICAS", "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
    "NOT_CONTROLLER", "KAFKA_STORAGE_ERROR", "FETCH_SESSION_ID_NOT_FOUND",
    "INVALID_FETCH_SESSION_EPOCH", "LISTENER_NOT_FOUND", "PREFERRED_LEADER_NOT_AVAILABLE",
    "ELIGIBLE_LEADERS_NOT_AVAILABLE", "THROTTLING_QUOTA_EXCEEDED", "UNKNOWN_TOPIC_ID",
    "INCONSISTENT_TOPIC_ID", "UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION", "FENCED_MEMBER_EPOCH",
    "UNRELEASED_INSTANCE_ID", "OFFSET_OUT_OF_RANGE", "STALE_MEMBER_EPOCH",
    "OFFSET_MOVED_TO_TIERED_STORAGE", "DUPLICATE_SEQUENCE_NUMBER", "GROUP_COORDINATOR_NOT_AVAILABLE",
})

_ACL = "grant the client's principal the ACL the request needs (kafka-acls), or give the client credentials that have it"
_REPLICAS = ("fewer in-sync replicas than the topic's min.insync.replicas: bring the lagging or stopped brokers back, "
             "or lower min.insync.replicas")
_TOO_LARGE = ("lower the producer's batch.size / max.request.size, or raise the topic's max.message.bytes (and the "
              "broker's message.max.bytes)")
_LEADER = "nothing, unless it persists: the client refreshes its metadata and retries on the new leader"
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
    "PRODUCER_FENCED": "another producer took over the transactional.id: give each producer instance its own id",
    "INVALID_PRODUCER_EPOCH": "another producer took over the transactional.id: give each producer instance its own id",
    "UNKNOWN_MEMBER_ID": "nothing, unless it repeats: the group removed the member (session.timeout.ms or "
                         "max.poll.interval.ms passed) and it joins again; raise those if it keeps happening",
    "ILLEGAL_GENERATION": "nothing, unless it repeats: the group rebalanced without the member, which joins again; "
                          "raise session.timeout.ms / max.poll.interval.ms if it keeps happening",
    "OFFSET_OUT_OF_RANGE": "the consumer's offset no longer exists (retention) or is not written yet: "
                           "auto.offset.reset decides where it restarts; keep retention longer than its lag",
}

# errors another rule tells, when it is on: (API key or None: any, error name or None: any) -> that rule
_TOLD_ELSEWHERE = (
    (API_VERSIONS, "UNSUPPORTED_VERSION", "apiversions-fallback"),
    (SASL_AUTHENTICATE, None, "sasl-auth-failed"),
    (None, "UNSUPPORTED_SASL_MECHANISM", "sasl-mechanism"),
    (None, "FETCH_SESSION_ID_NOT_FOUND", "fetch-session"),
    (None, "INVALID_FETCH_SESSION_EPOCH", "fetch-session"),
    (None, "OUT_OF_ORDER_SEQUENCE_NUMBER", "sequence-error-response"),
    (None, "DUPLICATE_SEQUENCE_NUMBER", "sequence-error-response"),
)


class ErrorResponses(Unit):
    """Error codes in responses, by API and error name (those another rule tells, left to
    it); UNSUPPORTED_VERSION told with the versions the broker advertised (Versions keeps them)."""
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
                    adv = None
                    said = "the broker's versions are not known (no ApiVersions answer on the connection)"
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
    """Responses throttled by a quota, exchanges slower than --slow-ms beyond what the
    request allows the broker to wait."""
    ids = ("throttled", "slow-exchange")
    legacy = True

    def add(self, ex: Exchange, cs: ConnState) -> None:
        body = _body(ex.response_tree)
        if body is None:
            return
        if ex.api_key == API_VERSIONS and _int(body.get("error_code")):
            return      # an UNSUPPORTED_VERSION answer has the v0 shape: its other fields mean nothing
        if "throttled" in self.on:
            tt = _int(body.get("throttle_time_ms"))
            if tt is not None and tt > 0:
                b = self.bucket("throttled", "warning", cs, (ex.api_name,),
                                "{count} {api_name} response(s) throttled, up to {max_throttle_ms} ms",
                                {"api_name": ex.api_name, "max_throttle_ms": tt},
                                advice="the client is over its quota: raise the quota of its user or client id "
                                       "(kafka-configs --entity-type users/clients: producer_byte_rate, "
                                       "consumer_byte_rate, request_percentage), or make it ask for less")
                b.most("max_throttle_ms", tt)
                b.add(ex, "response")
        lat = ex.latency_ms
        slow_ms = self.settings.slow_ms
        # (only these APIs' allowance can be below 0: the others' is 0 or infinite)
        if "slow-exchange" in self.on and lat is not None and (
                lat > slow_ms or ex.api_key in (FETCH, SHARE_FETCH, JOIN_GROUP)) and lat > allowance_ms(ex) + slow_ms:
            b = self.bucket("slow-exchange", "warning", cs, (ex.api_name,),
                            "{count} {api_name} exchange(s) slower than {limit_ms:g} ms "
                            "(beyond what the request allows), up to {max_latency_ms:.0f} ms",
                            {"api_name": ex.api_name, "limit_ms": slow_ms, "max_latency_ms": lat})
            b.most("max_latency_ms", lat)
            b.add(ex)
