"""Kafka requests and responses as annotated Field trees.

``decode_request`` / ``decode_response`` take one frame without its 4-byte size
prefix; every offset in the returned tree counts from that frame's first byte.
The body is decoded by the generic schema walker (``dissectors.decoder``) from the
declarative tables in ``dissectors.schema_data``; this module adds the header, the
version policy, nested payloads (consumer protocol, SASL) and topic-id learning.
"""
from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from dissectors import consumer, sasl
from dissectors.annotate import redacted, topic_note
from dissectors.context import DecodeContext, Presentation
from dissectors.decoder import NESTED_MEANINGS, State, decode_body, is_cut, read_tagged
from dissectors.decoder import _Bad as _DecodeStop
from dissectors.errors import error_name
from dissectors.field import ErrorsRoot, Field
from dissectors.header import MAX_NEWER_PLAUSIBLE
from dissectors.schema import APIS, ApiDef, FieldDef, api_name, is_flexible

_HDR = struct.Struct(">hhi")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

# APIs whose responses teach topic ids (Metadata, CreateTopics, DescribeTopicPartitions)
_LEARN_FROM = frozenset({3, 19, 75})
# APIs added after KIP-482 are flexible from v0: guess header v2 for unknown keys past this
_LAST_NON_FLEXIBLE_KEY = 67
# a trial of a newer version's layout reads no records
_NO_RECORDS = Presentation(decode_records=False)


# a version at most this far above the newest known is decoded with the newest layout (when
# it fits); further above, the body is kept as raw bytes (the window of the core's header
# check, core/src/kafka.rs, which finds such a request plausible)
NEWER_VERSIONS_TRIED = MAX_NEWER_PLAUSIBLE


def _clamp(api: ApiDef, version: int) -> tuple[None, str] | tuple[int, str | None]:
    """The version to decode with (None: none, keep the body raw, and the note says so), and
    the note that says why it differs."""
    if version > api.max_version:
        if version - api.max_version > NEWER_VERSIONS_TRIED:
            return None, (f"version {version} is beyond the newest we know ({api.max_version}): "
                          "body kept as raw bytes")
        return api.max_version, (f"version {version} is newer than the newest known ({api.max_version}): "
                                 f"decoded as v{api.max_version}")
    if version < api.min_version:
        return max(version, 0), f"version {version} is older than the oldest known ({api.min_version})"
    return version, None


def _raw_body(buf: bytes, pos: int, n: int, note: str) -> Field:
    body = Field("body", "bytes", buf[pos:], pos, n - pos)
    body.note(note)
    return body


def _newer_fits(api: ApiDef, used: int, request: bool, buf: bytes, pos: int, n: int, ctx: DecodeContext,
                st: State) -> bool:
    """Does a version newer than the newest known decode with the newest layout (``used``)
    without a malformed field or trailing bytes? (A trial, on a scratch context.)"""
    trial = DecodeContext(ctx.limits, _NO_RECORDS)
    probe = decode_body(api, used, request, buf, pos, n, trial, State(trial, api.key, st.slack, st.cap_end))
    return not trial.counts.malformed and not trial.counts.trailing and not probe.any_malformed()


def _request_header_version(api: ApiDef | None, api_key: int, api_version: int) -> int:
    if api is None:
        return 2 if api_key > _LAST_NON_FLEXIBLE_KEY else 1
    if api_key == 7 and api_version == 0:
        return 0
    return 2 if is_flexible(api, min(api_version, api.max_version)) else 1


def _cut_note(root: Field, n: int, size: int | None, ctx: DecodeContext) -> int:
    """A frame the capture cut short (``size`` declared, ``n`` bytes captured): its one note,
    counted in ``ctx.counts.cut``; returns how many bytes are missing (0 for a whole frame)."""
    if size is None or size <= n:
        return 0
    root.note(f"cut by the capture: {n} of {size} bytes captured, decoded as far as they go")
    ctx.counts.cut += 1
    return size - n


def decode_request(data: bytes, ctx: DecodeContext, size: int | None = None) -> Field:
    """A request frame (after the size prefix) as a Field tree rooted at ``request``.

    ``size``: the frame's declared size when the capture cut it short (``data`` holds the
    captured bytes): it is decoded as far as they go, with one note saying so."""
    buf = bytes(data)
    n = len(buf)
    root = Field("request", "Request", None, 0, n, [])
    header = root.add(Field("header", "RequestHeader", None, 0, 0, []))
    slack = _cut_note(root, n, size, ctx)
    if n < 8:
        header.length = n
        if not slack:
            header.mark_malformed(f"request header needs 8 bytes, {n} present", ctx)
        return root
    api_key, api_version, correlation_id = _HDR.unpack_from(buf, 0)
    api = APIS.get(api_key)
    root.type = f"{api.name}Request" if api else f"Unknown({api_key})Request"
    hv = _request_header_version(api, api_key, api_version)
    header.type = f"RequestHeader v{hv}"
    header.add(Field("api_key", "int16", api_key, 0, 2)).note(api_name(api_key))
    header.add(Field("api_version", "int16", api_version, 2, 2))
    header.add(Field("correlation_id", "int32", correlation_id, 4, 4))
    pos = 8
    if hv >= 1:
        if n < 10:
            header.length = n
            f = header.add(Field("client_id", "string", None, 8, n - 8))
            if not slack:
                f.mark_malformed("client_id length cut short", ctx)
            return root
        (slen,) = _I16.unpack_from(buf, 8)
        if slen < -1 or slen > n - 10:
            header.length = n
            if slack and -1 <= slen <= n - 10 + slack:
                # cut by the capture: the part of the client_id that was captured
                header.add(Field("client_id", "string", buf[10:].decode("utf-8", "replace"), 8, n - 8))
            else:
                header.add(Field("client_id", "string", None, 8, n - 8)).mark_malformed(
                    f"client_id length {slen} exceeds the {n - 10} bytes left", ctx)
            return root
        cid = None if slen < 0 else buf[10:10 + slen].decode("utf-8", "replace")
        pos = 10 + max(slen, 0)
        header.add(Field("client_id", "string", cid, 8, pos - 8))
    if hv == 2:
        hst = State(ctx, api_key, slack, n)
        hkids = header.children
        assert hkids is not None        # the header is made with a list of children above
        kept = len(hkids)
        try:
            pos = read_tagged({}, buf, pos, n, hkids, hst, True)
        except _DecodeStop as e:
            if not is_cut(e, hst) and (api is None or api_version > api.max_version):
                # the header version of an API or version we do not know is a guess: without
                # a tagged-field section that parses, it is taken as v1
                del hkids[kept:]
                header.type = "RequestHeader v1"
                header.note("no tagged-field section after the client_id: header taken as v1")
                hv = 1
            else:
                header.length = n
                if not is_cut(e, hst):
                    e.out.append(Field(e.name, e.typ, None, e.offset, n - e.offset).mark_malformed(e.reason, ctx))
                return root
    header.length = pos
    _add_body(root, api, api_key, api_version, True, buf, pos, n, ctx, slack,
              " (header assumed flexible)" if hv == 2 else "")
    return root


def _add_body(root: Field, api: ApiDef | None, api_key: int, api_version: int, request: bool, buf: bytes,
              pos: int, n: int, ctx: DecodeContext, slack: int, unknown_note: str = "") -> Field | None:
    """Add the body of a message whose header ends at ``pos`` to ``root``: decoded with its
    version's layout (or the newest known, when a newer version fits it), else kept as raw
    bytes with a note that says why (an unknown API key, a version beyond the layouts known).
    The decoded body is returned (None when kept raw)."""
    if api is None:
        body = Field("body", "bytes", buf[pos:], pos, n - pos)
        body.note(f"unknown API key {api_key}: body kept as raw bytes" + unknown_note)
        root.add(body)
        return None
    clamp = _clamp(api, api_version)
    st = State(ctx, api_key, slack, n)
    if clamp[0] is None:
        root.add(_raw_body(buf, pos, n, clamp[1]))
        return None
    used, why = clamp
    # (a broker answers an ApiVersions version it does not support with error 35 in the v0
    # layout, whatever the version asked: decoded below, not judged on the newest layout)
    api_versions_refusal = not request and api_key == 18 and n - pos >= 2 and _I16.unpack_from(buf, pos)[0] == 35
    if used < api_version and not api_versions_refusal and not _newer_fits(api, used, request, buf, pos, n, ctx, st):
        root.add(_raw_body(buf, pos, n, f"version {api_version} is newer than the newest known "
                                        f"({api.max_version}) and the v{used} layout does not fit: "
                                        "body kept as raw bytes"))
        return None
    if not request and api_key == 18 and used > 0:
        body = _api_versions_response(api, used, buf, pos, n, ctx, st)
    else:
        body = decode_body(api, used, request, buf, pos, n, ctx, st)
    root.add(body)
    if why:
        body.note(why)
    _nested(api_key, body, buf, st, request)
    if api_key == 18 and not request:
        versions_table(body)
    return body


def versions_table(body: Field) -> None:
    """An ApiVersions answer's api_keys read into one value, ``extra["versions"]``:
    ``{api_key: (min_version, max_version)}`` of its whole elements, what `check`'s rules
    read (the core's lean walk gives the same without the elements: ``Figures(check=True)``)."""
    keys = body.child("api_keys")
    if keys is None or keys.type != "array" or keys.value is None:
        return
    table: dict[int, tuple[int, int]] = {}
    for e in keys.children or ():
        k, lo, hi = e.get("api_key"), e.get("min_version"), e.get("max_version")
        if type(k) is int and type(lo) is int and type(hi) is int:
            table[k] = (lo, hi)
    keys.extra = {"versions": table}


def response_header(buf: bytes, api_key: int, api_version: int, ctx: DecodeContext,
                    read_tags: Any, with_correlation_id: bool = True,
                    slack: int = 0) -> tuple[Field, ApiDef | None, int | None]:
    """The root "response" Field with its header decoded.

    Returns (root, api, position of the body), the position None when the header is bad
    (marked malformed) or, in a frame the capture cut short (``slack`` bytes missing), cut.
    ``read_tags(buf, pos, end, out) -> pos`` reads the tagged-field section of a v1 header
    (the full decoder brings its own).
    """
    n = len(buf)
    api = APIS.get(api_key)
    head = _HEADS.get((api_key, api_version))
    if head is None or head[0] is not api:
        head = _response_head(api, api_key, api_version)
    _api, root_type, header_type, hv = head
    header = Field("header", header_type, None, 0, 0, [])
    root = Field("response", root_type, None, 0, n, [header])
    if n < 4:
        header.length = n
        if not slack:
            header.mark_malformed(f"response header needs 4 bytes, {n} present", ctx)
        return root, api, None
    if with_correlation_id:
        header.add(Field("correlation_id", "int32", _I32.unpack_from(buf, 0)[0], 0, 4))
    pos = 4
    if hv == 1:
        try:
            pos = read_tags(buf, pos, n, header.children)
        except _DecodeStop as e:
            header.length = n
            if not (slack and e.at_end == n):
                e.out.append(Field(e.name, e.typ, None, e.offset, n - e.offset).mark_malformed(e.reason, ctx))
            return root, api, None
    header.length = pos
    return root, api, pos


# (api_key, api_version) -> (api, root type, header type, header version) of a response:
# once per message on the hot path, so worked out once per pair (bounded: versions come
# from the wire)
_HEADS: dict[tuple[int, int], tuple[ApiDef | None, str, str, int]] = {}


def _response_head(api: ApiDef | None, api_key: int, api_version: int) -> tuple[ApiDef | None, str, str, int]:
    if api is None:
        hv = 1 if api_key > _LAST_NON_FLEXIBLE_KEY else 0
    elif api_key == 18:
        hv = 0
    else:
        hv = 1 if is_flexible(api, min(api_version, api.max_version)) else 0
    if len(_HEADS) >= 4096:
        _HEADS.clear()
    head = _HEADS[(api_key, api_version)] = (
        api, f"{api.name}Response" if api else f"Unknown({api_key})Response", f"ResponseHeader v{hv}", hv)
    return head


def decode_response(data: bytes, api_key: int, api_version: int, ctx: DecodeContext,
                    size: int | None = None) -> Field:
    """A response frame (after the size prefix) to a request of ``api_key`` v``api_version``
    (``size``: see decode_request)."""
    buf = bytes(data)
    n = len(buf)
    slack = 0 if size is None or size <= n else size - n
    root, api, pos = response_header(
        buf, api_key, api_version, ctx,
        lambda b, p, end, out: read_tagged({}, b, p, end, out, State(ctx, api_key, slack, n), True),
        slack=slack)
    _cut_note(root, n, size, ctx)
    if pos is None:
        return root
    body = _add_body(root, api, api_key, api_version, False, buf, pos, n, ctx, slack)
    if body is not None and api_key in _LEARN_FROM:
        learn_topic_ids(body, ctx)
    return root


def _api_versions_response(api: ApiDef, version: int, buf: bytes, pos: int, n: int,
                           ctx: DecodeContext, st: State) -> Field:
    """A broker that does not support the requested ApiVersions version answers with
    error UNSUPPORTED_VERSION in the v0 layout; decode it so when the v<N> layout fails."""
    if n - pos >= 2 and _I16.unpack_from(buf, pos)[0] == 35:
        trial = DecodeContext(ctx.limits)
        probe = decode_body(api, version, False, buf, pos, n, trial, State(trial, 18, st.slack, st.cap_end))
        if probe.any_malformed() or trial.counts.trailing:
            trial0 = DecodeContext(ctx.limits)
            probe0 = decode_body(api, 0, False, buf, pos, n, trial0, State(trial0, 18, st.slack, st.cap_end))
            if not probe0.any_malformed() and not trial0.counts.trailing:
                body = decode_body(api, 0, False, buf, pos, n, ctx, st)
                body.note(f"UNSUPPORTED_VERSION answer in the v0 layout (requested v{version})")
                return body
    return decode_body(api, version, False, buf, pos, n, ctx, st)


def _payload_apis(meanings: frozenset[str]) -> frozenset[int]:
    """The API keys with a bytes field of one of these meanings, from the schema."""
    def has(fields: Sequence[FieldDef]) -> bool:
        return any(fd.meaning in meanings or has(fd.fields) for fd in fields)
    return frozenset(k for k, a in APIS.items() if has(a.request) or has(a.response))


# JoinGroup, SyncGroup, DescribeGroups, SaslAuthenticate: the APIs with a bytes field whose
# payload ``_nested`` decodes further (the consumer protocol, SASL tokens). The core's lean
# walk judges the consumer protocol's payloads as the full decoder does (a message whose
# payload has bad bytes it leaves to the full decoder); SASL tokens it does not read.
NESTED_PAYLOAD_APIS = _payload_apis(NESTED_MEANINGS)
CONSUMER_PAYLOAD_APIS = _payload_apis(frozenset({"consumer_subscription", "consumer_assignment"}))


def _protocol_type(body: Field) -> str | None:
    v = body.get("protocol_type")
    return v if isinstance(v, str) else None


def _nested(api_key: int, body: Field, buf: bytes, st: State, request: bool) -> None:
    """Decode payloads nested in bytes fields (consumer protocol, SASL tokens)."""
    if not st.deferred:
        return
    ctx = st.ctx
    ptype = _protocol_type(body) if api_key in (11, 14) else None
    for f, meaning in st.deferred:
        if f.value is None or not f.extra:
            continue
        start = f.extra["data_offset"]
        end = f.offset + f.length
        if meaning in ("consumer_subscription", "consumer_assignment"):
            if end == start or (ptype is not None and ptype != "consumer"):
                continue
            fn: Any = consumer.decode_subscription if meaning == "consumer_subscription" else \
                consumer.decode_assignment
            if ptype == "consumer":
                f.add(fn(buf, start, end, ctx))
            else:  # unknown protocol type: keep it only if it parses cleanly
                trial = DecodeContext(ctx.limits)
                sub = fn(buf, start, end, trial)
                if not sub.any_malformed() and sub.child("trailing_bytes") is None:
                    f.add(sub)
        elif meaning in ("sasl_auth_bytes", "sasl_server_bytes"):
            if end == start:
                continue
            tok = sasl.decode_token(buf, start, end, ctx, None, meaning == "sasl_auth_bytes")
            f.add(tok)
            if tok.extra and tok.extra.get("secret") and not ctx.presentation.show_secrets:
                f.value = redacted(end - start)
                f.note("contains a secret: raw bytes redacted (--show-secrets reveals them)")


def decode_sasl_token(data: bytes, ctx: DecodeContext, mechanism: str | None, from_client: bool) -> Field:
    """A raw SASL frame (after SaslHandshake v0, without the size prefix)."""
    buf = bytes(data)
    return sasl.decode_token(buf, 0, len(buf), ctx, mechanism, from_client)


def learn_topic_ids(body: Field, ctx: DecodeContext, annotate: bool = True) -> None:
    """Record topic id -> name from a Metadata / CreateTopics / DescribeTopicPartitions
    response body, and annotate those ids with the name just learnt (unless ``annotate``
    is false: a lean tree, whose readers never see notes)."""
    topics = body.child("topics")
    if topics is None or not topics.children:
        return
    for t in topics.children:
        name = t.get("name")
        tid = t.child("topic_id")
        if tid is None or not isinstance(name, str) or not isinstance(tid.value, str):
            continue
        if tid.value == "00000000-0000-0000-0000-000000000000":
            continue
        ctx.topic_names[tid.value] = name
        if annotate:
            tid.notes = [topic_note(tid.value, ctx.topic_names)]


def error_codes(tree: Field) -> list[str]:
    """Names of the non-zero error codes anywhere in a tree, in wire order: from a lean
    root (the core's) the list it carries (collected while decoding: that list itself, no copy)."""
    if tree.__class__ is ErrorsRoot:
        return tree.error_codes
    out: list[str] = []
    _collect_errors((tree,), out)
    return out


def _collect_errors(fields: Sequence[Field], out: list[str]) -> None:
    # once per exchange on the hot path: recursion beats an explicit stack on these small
    # trees, each Field is tested here without a call of its own, and records subtrees
    # (dissectors.records: offsets, CRCs, keys, never an error code) are not walked
    for f in fields:
        v = f.value
        if v and ((f.extra is not None and "error_code" in f.extra)
                  or (f.type == "int16" and (f.name == "error_code" or f.name.endswith("_error_code")))):
            out.append(error_name(v))
        children = f.children
        if children and f.type != "records":
            _collect_errors(children, out)


def list_apis() -> list[dict[str, Any]]:
    """What the schema covers: one dict per API key, in key order."""
    return [{"api_key": a.key, "name": a.name, "min_version": a.min_version,
             "max_version": a.max_version, "flexible_from": a.flexible_from}
            for a in sorted(APIS.values(), key=lambda a: a.key)]
