"""The one list of the rules: what ``check --list-rules`` shows of each, and the units that
report them, in the order the Checker hands each exchange to them."""
from __future__ import annotations

from . import connection as conn
from . import spanning
from .common import Rule, Unit

# (Versions before ErrorResponses: an UNSUPPORTED_VERSION error is told with the versions
# the broker advertised on the connection)
UNITS: tuple[type[Unit], ...] = (
    conn.Orphans, conn.Answers, conn.Correlations, conn.Frames, conn.Versions, conn.Sasl, conn.ErrorResponses,
    conn.Timing, spanning.Sequences, conn.FetchSessions, conn.InFlightRules, spanning.Groups, spanning.Encrypted)

RULES: dict[str, Rule] = {r.id: r for r in (
    Rule("unanswered-request", "error", "connection", "request without response when the capture ended "
         "(error if later requests were answered, unless the capture missed bytes of the broker's side)"),
    Rule("closed-in-flight", "error", "connection", "connection closed (FIN) or reset (RST) with requests "
         "still waiting for a response"),
    Rule("orphan-response", "error", "connection", "response to no request seen (info when the capture "
         "started mid-connection, or missed bytes of the client's side)"),
    Rule("error-response", "error", "connection", "responses carrying error codes, by API and error name "
         "(flow errors info, retriable warning); UNSUPPORTED_VERSION with the client, its version and the "
         "broker's advertised range"),
    Rule("throttled", "warning", "connection", "responses with throttle_time_ms > 0 (quota throttling)"),
    Rule("slow-exchange", "warning", "connection", "latency over --slow-ms, beyond what the request allows "
         "the broker to wait (Fetch max_wait_ms, JoinGroup rebalance timeout; SyncGroup not judged)"),
    Rule("version-unadvertised", "error", "connection", "request version outside the range the broker "
         "advertised in ApiVersions on that connection"),
    Rule("apiversions-fallback", "warning", "connection", "ApiVersions answered UNSUPPORTED_VERSION and "
         "the client retried lower (info), or did not (warning)"),
    Rule("kafka4-removed", "warning", "connection", "API version removed in Kafka 4.0 (KIP-896): the "
         "client breaks on upgrade (one finding per API and connection, its versions and clients listed)"),
    Rule("unknown-api", "warning", "connection", "request whose API key, or version, is newer than the "
         "schema knows: framed and paired, its body not judged (raw bytes, or the newest layout when it "
         "fits)"),
    Rule("producer-sequence", "error", "global", "idempotent producer base_sequence gap, reordering or "
         "re-send of an acknowledged batch, per producer id, epoch and partition"),
    Rule("sequence-error-response", "error", "global", "OUT_OF_ORDER_SEQUENCE_NUMBER / "
         "DUPLICATE_SEQUENCE_NUMBER tied to the batches that caused them"),
    Rule("crc-mismatch", "error", "connection", "record batch or message whose CRC does not match (said "
         "apart: control batches whose CRC field is 0, the data batches sound)"),
    Rule("malformed-frame", "error", "connection", "frame that does not decode against the schema"),
    Rule("truncated-frame", "info", "connection", "frame with bytes missing from the capture (snaplen or "
         "lost segment): not judged"),
    Rule("undecodable-records", "warning", "connection", "records that cannot be decoded (bad batch, "
         "unknown codec, decompression failure)"),
    Rule("correlation-reuse", "error", "connection", "correlation id reused while a request with it is in "
         "flight"),
    Rule("response-order", "error", "connection", "responses not in request order on a connection"),
    Rule("in-flight-idempotent", "error", "connection", "idempotent producer with more than 5 Produce "
         "requests in flight on one connection (the broker rejects the sixth with "
         "OUT_OF_ORDER_SEQUENCE_NUMBER)"),
    Rule("in-flight-reorder", "warning", "connection", "Produce responses out of request order while more "
         "than one Produce is in flight on a connection of a producer without idempotence (a retry can "
         "reorder its batches)"),
    Rule("fetch-session", "error", "connection", "fetch session (KIP-227) misuse: epoch not incrementing, "
         "session id 0 with epoch > 0, FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH"),
    Rule("rebalance-storm", "warning", "global", "more than --storm-rebalances group generations per "
         "minute, or JoinGroups by members that get back the generation they had (rejoining without the "
         "generation moving)"),
    Rule("sasl-before-auth", "error", "connection", "non-SASL request sent before SaslAuthenticate "
         "succeeded on a connection that did SaslHandshake"),
    Rule("sasl-mechanism", "error", "connection", "SASL mechanism the broker did not offer "
         "(UNSUPPORTED_SASL_MECHANISM); refused although the broker's own list names it: said to be a "
         "broker bug"),
    Rule("sasl-auth-failed", "error", "connection", "SaslAuthenticate answered with an error"),
    Rule("tls-not-decrypted", "warning", "global", "TLS connections not decrypted (no --tls-keylog, or no "
         "key for them): their Kafka traffic was not checked"),
)}

# every rule reported by one unit, every unit's rules listed
assert sorted(i for u in UNITS for i in u.ids) == sorted(RULES), "registry: RULES and UNITS disagree"
