"""The decode policy: how one exchange record of the core becomes an Exchange, with its
field trees, status, error codes, partitions and notes, as the run's decode mode
(``analyzer.runs.Decode``) asks.

A Pipeline holds one ``Decoder`` and calls ``Decoder.exchange(conn, record)`` once per
exchange record (core/src/py/mod.rs); it counts and emits what comes back. By the
record's kind:

- ``kafka``, a 0.8+ exchange with its request header. ``none``: no trees. ``full``: the
  full decoder (dissectors/). A lite mode: the lean trees the core walked
  (core/src/figures/, the record's ``lean``), their counts added to the context and the
  topic ids a Metadata-like answer teaches learnt; a frame the walk left out gets the full
  decoder: one cut by the capture (decoded as far as its declared size goes), one of an
  API or version newer than the schema (its body kept raw), a consumer-protocol payload
  with bad bytes, and the APIs ``Figures(full_apis=...)`` leaves to full trees (SASL
  tokens it does not read; with check's reads, the consumer-protocol APIs and
  SaslHandshake). With check's reads (``lite-check``) the walk also keeps what check's
  rules read (the v2 batches' producer state, an ApiVersions answer's table), and a
  message whose walk counted malformed fields is decoded again in full, so that a finding
  quotes the field ``read`` shows. A Produce or Fetch decoded in full carries the rows
  the core's walk reads of it (``body.extra["produce"]`` / ``["fetch"]``; the full
  decoder does not read them). Error codes come from the response tree; partitions from
  a Produce's or Fetch's trees.
- ``orphan``: a response whose request was not captured: its correlation id, the rest raw.
- ``not_request``: a client frame that is no request header: one malformed note.
- ``sasl_token``: raw SASL frames (after SaslHandshake v0), decoded per mechanism.
- ``legacy``: a pre-0.8 exchange (dissectors.legacy): trees, error codes, partitions.

Status: a tree whose decoding counted malformed fields carries the count on its root
(``extra["malformed"]``) and makes an ``ok`` exchange ``malformed``, unless its frame was
cut short by the capture (counted as a cut, not as malformed). Notes: the record's note
first, then, unless the exchange is unanswered, one per frame the capture cut short.
Exchanges are numbered (``seq``) in the order they are made; the connection's
``last_seq`` follows.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from analyzer._core import Figures
from analyzer.model import Conn, Exchange, Frame
from analyzer.runs import Decode
from dissectors import consumer, kafka, legacy
from dissectors.context import DecodeContext
from dissectors.errors import ERRORS
from dissectors.field import ErrorsRoot, Field
from dissectors.header import RequestHeader
from dissectors.kafka import learn_topic_ids
from dissectors.schema import APIS, api_name
from dissectors.summary import partitions_of

_new = tuple.__new__
_obj_new = object.__new__

_API_NAMES: dict[int, str] = {}    # api_key (an int16) -> api_name(api_key), asked once per exchange
SASL_HANDSHAKE = 17
# Metadata, CreateTopics, DescribeTopicPartitions: their answers teach topic ids
_TEACHES_TOPIC_IDS = frozenset({3, 19, 75})


class Decoder:
    """The decode policy of one run: ``exchange`` once per exchange record of the core."""

    def __init__(self, ctx: DecodeContext, decode: Decode | str) -> None:
        mode = Decode(decode)
        self.ctx = ctx
        # a lite mode: the core's lean walk under ctx's limits, handed to the core's Stream
        self.figures: Figures | None = figures(ctx, mode.topics, mode.check) if mode.lean else None
        # the rows of a Produce or Fetch body decoded in full come from the core's walk too
        self._rows_walk = self.figures or figures(ctx, False, False)
        self._full_when_malformed = mode.check
        self._trees = mode != Decode.NONE
        self._seq = 0

    def exchange(self, conn: Conn, r: tuple[Any, ...]) -> Exchange:
        """The Exchange of one exchange record of the core (its connection ``conn``)."""
        (_k, _cid, _now, kind, status, h, legacy_type, corr, req, resp, note, mechanism,
         _client_dir, _protocol, _last_ts, lean) = r
        request = _new(Frame, (conn, *req)) if req is not None else None
        response = _new(Frame, (conn, *resp)) if resp is not None else None
        if kind == "kafka":
            assert request is not None      # a request header comes with its request
            header = _new(RequestHeader, h)
            api_key = header[0]
            name = _API_NAMES.get(api_key)
            if name is None:
                name = _API_NAMES[api_key] = api_name(api_key)
            if not self._trees:
                return self._new(conn, "kafka", api_key, name, header[1], header[2], header[3], request, response,
                                 status, None, None, None, None, note)
            status, request_tree, response_tree, error_codes, partitions = self._kafka(
                header, request, response, status, lean)
            return self._new(conn, "kafka", api_key, name, header[1], header[2], header[3], request, response,
                             status, request_tree, response_tree, error_codes, partitions, note)
        if kind == "orphan":
            assert response is not None
            return self._new(conn, "kafka", None, "Unknown", None, corr, None, None, response, status,
                             None, orphan_tree(response, corr), None, None, note)
        if kind == "not_request":
            assert request is not None
            tree = Field("request", "Request", None, 0, len(request.data))
            tree.mark_malformed(f"not a request header ({len(request.data)} bytes)", self.ctx)
            return self._new(conn, "kafka", None, "Unknown", None, None, None, request, None, status,
                             tree, None, None, None, note)
        if kind == "sasl_token":
            assert request is not None
            ctx = self.ctx
            request_tree = kafka.decode_sasl_token(request.data, ctx, mechanism, True)
            response_tree = None
            if status != "unanswered":
                assert response is not None
                response_tree = kafka.decode_sasl_token(response.data, ctx, mechanism, False)
                status = _judged(status, request, request_tree, response, response_tree)
            return self._new(conn, "kafka", None, "SaslToken", None, None, None, request, response, status,
                             request_tree, response_tree, None, None, note)
        return self._legacy(conn, legacy_type, request, response, status, note)

    def _kafka(self, header: RequestHeader, request: Frame, response: Frame | None, status: str,
               lean: tuple[Any, ...] | None
               ) -> tuple[str, Field, Field | None, list[str] | None, list[dict[str, Any]] | None]:
        """A 0.8+ exchange's status, trees, error codes and partitions (``lean``: the core's
        request tree and its counts, response tree and its counts; see the module's text)."""
        api_key, api_version = header[0], header[1]
        ctx = self.ctx
        before = ctx.counts.malformed
        response_tree: Field | None = None
        if lean is not None:
            request_tree, rq_counts, response_tree, rs_counts = lean
            lean_rq, lean_rs = request_tree, response_tree
            if self._full_when_malformed:
                if rq_counts is not None and rq_counts[0]:
                    request_tree = None
                if rs_counts is not None and rs_counts[0]:
                    response_tree = None
        else:
            request_tree = rq_counts = rs_counts = lean_rq = lean_rs = None
        if request_tree is None:
            # (a frame cut by the capture is decoded as far as it goes: its declared size)
            request_tree = kafka.decode_request(request.data, ctx, request.size if request.truncated else None)
            if api_key == 0 or api_key == 1:
                if lean_rq is None:
                    got = self._rows_walk.request(request.data, header[4])
                    lean_rq = got[0] if got is not None else None
                _core_rows(request_tree, lean_rq)
        else:
            add_counts(ctx, rq_counts)
        mid = ctx.counts.malformed
        if response is not None:
            if response_tree is None:
                response_tree = kafka.decode_response(response.data, api_key, api_version, ctx,
                                                      response.size if response.truncated else None)
                if api_key == 1:
                    if lean_rs is None:
                        got = self._rows_walk.response(response.data, api_key, api_version)
                        lean_rs = got[0] if got is not None else None
                    _core_rows(response_tree, lean_rs)
            else:
                take_lean_response(ctx, api_key, response_tree, rs_counts)
        # (only _count_bad marks a tree: what it marks here is known without reading it)
        if mid != before:
            _count_bad(request_tree, mid - before)
            if status == "ok" and not request.truncated:
                status = "malformed"
        if response_tree is not None and ctx.counts.malformed != mid:
            _count_bad(response_tree, ctx.counts.malformed - mid)
            if status == "ok" and response is not None and not response.truncated:
                status = "malformed"
        error_codes = kafka.error_codes(response_tree) if response_tree is not None else None
        partitions = None
        if api_key == 0 or api_key == 1:
            partitions = partitions_of(api_key, request_tree, response_tree, ctx.topic_names)
        return status, request_tree, response_tree, error_codes, partitions

    def _legacy(self, conn: Conn, rtype: int | None, request: Frame | None, response: Frame | None,
                status: str, note: str | None) -> Exchange:
        """A pre-0.8 exchange: its trees, error codes and partitions."""
        ctx = self.ctx
        if request is None:
            assert response is not None
            return self._new(conn, "kafka-legacy", None, "UNKNOWN", None, None, None, None, response, status,
                             None, None, None, None, note)
        before = ctx.counts.malformed
        req_tree = _count_bad(legacy.decode_legacy_request(request.data, ctx), ctx.counts.malformed - before)
        if status == "unanswered":
            name = legacy.LEGACY_API_NAMES.get(rtype, "UNKNOWN") if rtype is not None else "UNKNOWN"
            return self._new(conn, "kafka-legacy", rtype, name, None, None, None, request, None, status,
                             req_tree, None, None, None, note)
        if response is None:
            name = legacy.LEGACY_API_NAMES.get(rtype, f"UNKNOWN({rtype})") if rtype is not None else "UNKNOWN"
            return self._new(conn, "kafka-legacy", rtype, name, None, None, None, request, None,
                             _judged(status, request, req_tree, None, None), req_tree, None, None,
                             legacy.legacy_partitions(req_tree, True), note)
        assert rtype is not None
        before = ctx.counts.malformed
        tree = _count_bad(legacy.decode_legacy_response(response.data, rtype, ctx, req_tree),
                          ctx.counts.malformed - before)
        return self._new(conn, "kafka-legacy", rtype, legacy.LEGACY_API_NAMES.get(rtype, "UNKNOWN"), None,
                         None, None, request, response, _judged(status, request, req_tree, response, tree),
                         req_tree, tree, legacy.legacy_error_codes(tree), legacy.legacy_partitions(tree, False), note)

    def _new(self, conn: Conn, protocol: str, api_key: int | None, api_name: str, api_version: int | None,
             correlation_id: int | None, client_id: str | None, request: Frame | None, response: Frame | None,
             status: str, request_tree: Field | None, response_tree: Field | None,
             error_codes: list[str] | None, partitions: list[dict[str, Any]] | None,
             note: str | None) -> Exchange:
        """The Exchange, numbered, with its notes (see the module's text)."""
        self._seq = seq = self._seq + 1
        # the slots stored here cost less than Exchange's 16-argument __init__
        ex = _obj_new(Exchange)
        ex.conn = conn
        ex.protocol = protocol
        ex.api_key = api_key
        ex.api_name = api_name
        ex.api_version = api_version
        ex.correlation_id = correlation_id
        ex.client_id = client_id
        ex.request = request
        ex.response = response
        ex.status = status
        ex.request_tree = request_tree
        ex.response_tree = response_tree
        ex.error_codes = [] if error_codes is None else error_codes
        ex.partitions = [] if partitions is None else partitions
        ex.notes = notes = [] if note is None else [note]
        ex.seq = conn.last_seq = seq
        if ((request is not None and request.truncated) or (response is not None and response.truncated)) \
                and status != "unanswered":
            for fr in (request, response):
                if fr is not None and fr.truncated:
                    notes.append(f"frame {fr.last_index}: {len(fr.data)} of {fr.size} bytes captured")
        return ex


def _judged(status: str, request: Frame | None, request_tree: Field | None, response: Frame | None,
            response_tree: Field | None) -> str:
    """The status of an exchange whose trees were decoded (an ``ok`` one whose tree counted
    malformed fields is malformed, unless its frame was cut short in the capture)."""
    if status != "ok":
        return status
    t = request_tree
    if t is not None and t.extra and t.extra.get("malformed") and request is not None and not request.truncated:
        return "malformed"
    t = response_tree
    if t is not None and t.extra and t.extra.get("malformed") and response is not None and not response.truncated:
        return "malformed"
    return status


def orphan_tree(frame: Frame, cid: int | None) -> Field:
    """A response whose request was not captured: its correlation id (the core read it,
    None in a frame under 4 bytes), the rest raw."""
    tree = Field("response", "Response", None, 0, len(frame.data))
    hdr = tree.add(Field("header", "ResponseHeader", None, 0, min(4, len(frame.data))))
    if cid is not None:
        hdr.add(Field("correlation_id", "int32", cid, 0, 4))
    tree.add(Field("body", "bytes", None, 4, max(len(frame.data) - 4, 0),
                   notes=["request not captured: API unknown, body not decoded"]))
    return tree


# What every Pipeline of a process can share, made once from the schema (the Spark job
# makes a Pipeline per connection group): the core's header table and the figures walk
# (its plans are compiled on first use, then reused). Keyed by the schema's ApiDef objects
# too, so that a schema changed in place (tests) makes new ones.
_SHARED: dict[tuple[Any, ...], Any] = {}


def shared(key: tuple[Any, ...], make: Callable[[], Any]) -> Any:
    """``make()``, made once per process for ``key`` and the schema."""
    key = (*key, tuple(map(id, APIS.values())))
    got = _SHARED.get(key)
    if got is None:
        if len(_SHARED) >= 16:
            _SHARED.clear()
        got = _SHARED[key] = make()
    return got


def figures(ctx: DecodeContext, topics: bool, check: bool) -> Figures:
    """The core's lean walk under ``ctx``'s limits, keeping the requests' topics and what
    check's rules read as asked; the consumer-protocol payloads of JoinGroup and SyncGroup
    judged in the walk unless check reads them decoded (shared: ``shared``)."""
    full_apis = (kafka.NESTED_PAYLOAD_APIS - kafka.CONSUMER_PAYLOAD_APIS) | \
        ((kafka.CONSUMER_PAYLOAD_APIS | {SASL_HANDSHAKE}) if check else set())
    return shared(("figures", ctx.limits.max_array_len, ctx.limits.max_decompressed, topics, check),
                  lambda: Figures((Field, ErrorsRoot), APIS, ERRORS, ctx.limits.max_array_len,
                                  ctx.limits.max_decompressed,
                                  topics=topics, full_apis=full_apis, check=check,
                                  consumer=(consumer.SUBSCRIPTION, consumer.ASSIGNMENT)))


def add_counts(ctx: DecodeContext, counts: tuple[int, int, int, int, tuple[str, ...]]) -> None:
    """What one of the core's lean walks adds to the run's counters."""
    malformed, valid, invalid, trailing, limits = counts
    if malformed:
        ctx.counts.malformed += malformed
    if valid:
        ctx.counts.crc_valid += valid
    if invalid:
        ctx.counts.crc_invalid += invalid
    if trailing:
        ctx.counts.trailing += trailing
    for name in limits:
        ctx.counts.hit_limit(name)


def take_lean_response(ctx: DecodeContext, api_key: int, tree: Field,
                       counts: tuple[int, int, int, int, tuple[str, ...]]) -> None:
    """A response's lean tree taken into the run: its counts added, and the topic ids a
    Metadata-like answer teaches learnt (from its body: a tree whose header could not be
    read has none)."""
    add_counts(ctx, counts)
    if api_key in _TEACHES_TOPIC_IDS and isinstance(tree, ErrorsRoot) and tree.children:
        learn_topic_ids(tree.children[0], ctx, annotate=False)



def _core_rows(tree: Field, lean: Field | None) -> None:
    """Put the rows the core's walk read of a Produce or Fetch message (``lean``: its lean
    tree, its counts not added again) into the full tree's body."""
    if lean is None:
        return
    body = tree.child("body")
    got = lean.children[0].extra if lean.children else None
    if body is None or not got:
        return
    for key in ("fetch", "produce"):
        if key in got:
            if body.extra is None:
                body.extra = {}
            body.extra[key] = got[key]


def _count_bad(tree: Field, n: int) -> Field:
    """Remember on the root how many malformed notes decoding it produced."""
    if n:
        if tree.extra is None:
            tree.extra = {}
        tree.extra["malformed"] = n
    return tree
