"""Lean decoding for statistics: sparse Field trees that keep only what ``stats`` reads.

``digest_request(data, header_len, ctx)`` and ``digest_response(data, api_key,
api_version, ctx)`` walk the same declarative schema as ``dissectors.decoder`` but
build a Field only for:

- error codes anywhere in the message (the fields ``kafka.error_codes`` collects),
- records fields (``dissectors.records``; pass a context with ``decode_records=False``
  to get counts, sizes, codecs and CRC verdicts without per-record Fields),
- a few top-level figures: throttle_time_ms, max_wait_ms, min_bytes, acks,
  assignments (an array: its elements are kept as empty structs), mechanism,
- topic ids, and the names and partition indexes next to any of the above,
- and the structs / arrays that lead to them.

Everything else is skipped by length without creating objects. The shape of what is
kept is the full decoder's (same names, types, values, offsets), so
``kafka.error_codes``, ``summary.partitions_of`` and ``kafka.learn_topic_ids`` work
on a digest tree unchanged. Bad bytes stop decoding with a ``malformed:`` Field, as
in the full decoder; nested payloads (consumer protocol, SASL tokens) and
annotations are not decoded, so malformed spots inside those are not seen here.
"""
from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from dissectors.context import DecodeContext
from dissectors.decoder import _FIXED, _Bad, _conv, _fix_lengths, _len_prefix, _min_size, _uvar
from dissectors.field import Field
from dissectors.schema import APIS, ApiDef, FieldDef, in_range, is_flexible

__all__ = ["digest_request", "digest_response", "KEPT_NAMES"]

# a field with one of these names (or an error code, or records) is kept with its path
ANCHORS = frozenset({"throttle_time_ms", "max_wait_ms", "min_bytes", "acks", "assignments", "mechanism",
                     "topic_id"})
# kept too when their struct is kept for another reason
COMPANIONS = frozenset({"name", "topic", "index", "partition_index"})
KEPT_NAMES = ANCHORS | COMPANIONS

_LAST_NON_FLEXIBLE_KEY = 67
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

Op = Callable[[bytes, int, int, list], int]


class _Plan:
    __slots__ = ("ops", "tags", "flexible", "keep", "fixed_size", "min_size", "type_name", "skip_size")

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.tags: dict[int, Op] = {}
        self.flexible = False
        self.keep = False            # builds at least one Field
        self.fixed_size = -1         # >= 0: fixed size and nothing to keep (non-flexible)
        self.skip_size = -1          # >= 0: only fixed-size fields, none kept (tagged fields aside)
        self.min_size = 0
        self.type_name = ""


class _Ctx:
    """Per-message state: the decode context and the records decoder."""
    ctx: DecodeContext | None = None


_cur = _Ctx()


def _is_error(fd: FieldDef) -> bool:
    if fd.meaning == "error_code":
        return True
    return fd.type == "int16" and (fd.name == "error_code" or fd.name.endswith("_error_code"))


def _wanted(fd: FieldDef) -> bool:
    """Does this field, or anything below it, have to be kept?"""
    if fd.name in ANCHORS or fd.type == "records" or _is_error(fd):
        return True
    return any(_wanted(c) for c in fd.fields)


def _run(plan: _Plan, buf: bytes, pos: int, end: int, out: list) -> int:
    for op in plan.ops:
        pos = op(buf, pos, end, out)
    if plan.flexible:
        if pos < end and buf[pos] == 0:     # the usual empty tagged-field section
            return pos + 1
        pos = _tagged(plan.tags, buf, pos, end, out)
    return pos


_INDEX_NAMES = tuple(f"[{i}]" for i in range(256))


def _tagged(tags: dict[int, Op], buf: bytes, pos: int, end: int, out: list) -> int:
    start = pos
    if pos < end and buf[pos] < 0x80:
        n = buf[pos]
        pos += 1
    else:
        n, pos = _uvar(buf, pos, end, "tagged_fields", "tagged_fields", out)
    if n == 0:
        return pos
    if n > end - pos:
        raise _Bad(f"tagged field count {n} exceeds the {end - pos} bytes left",
                   "tagged_fields", "tagged_fields", start, out)
    kept: list[Field] = []
    container = Field("tagged_fields", "tagged_fields", n, start, 0, kept)
    for _ in range(n):
        tstart = pos
        tag, pos = _uvar(buf, pos, end, "tag", "tag", kept)
        size, pos = _uvar(buf, pos, end, f"tag_{tag}", "bytes", kept)
        if size > end - pos:
            out.append(container)
            raise _Bad(f"tagged field {tag} size {size} exceeds the {end - pos} bytes left",
                       f"tag_{tag}", "bytes", tstart, kept)
        op = tags.get(tag)
        if op is not None:
            op(buf, pos, pos + size, kept)
        pos += size
    if kept:
        container.length = pos - start
        out.append(container)
    return pos



def _fixed_op(run: list[tuple[FieldDef, bool]]) -> Op:
    fmt = struct.Struct(">" + "".join(_FIXED[fd.type][0] for fd, _k in run))
    size = fmt.size
    rows = []
    off = 0
    for i, (fd, keep) in enumerate(run):
        ln = _FIXED[fd.type][1]
        if keep:
            rows.append((i, fd.name, fd.type, off, ln, _conv(fd.type), fd.meaning == "error_code"))
        off += ln
    unpack_from = fmt.unpack_from
    if not rows:
        def skip(buf: bytes, pos: int, end: int, out: list) -> int:
            if pos + size > end:
                _short(run, buf, pos, end, out)
            return pos + size
        return skip

    def op(buf: bytes, pos: int, end: int, out: list) -> int:
        if pos + size > end:
            _short(run, buf, pos, end, out)
        vals = unpack_from(buf, pos)
        for i, name, typ, o, ln, conv, err in rows:
            v = vals[i]
            f = Field(name, typ, v if conv is None else conv(v), pos + o, ln)
            if err and v:
                f.extra = {"error_code": v}     # as the full decoder's annotation
            out.append(f)
        return pos + size
    return op


def _short(run: list[tuple[FieldDef, bool]], buf: bytes, pos: int, end: int, out: list) -> None:
    p = pos
    for fd, _keep in run:
        ln = _FIXED[fd.type][1]
        if p + ln > end:
            raise _Bad(f"{fd.type} needs {ln} bytes, {max(0, end - p)} left", fd.name, fd.type, p, out)
        p += ln
    raise AssertionError("unreachable")  # pragma: no cover


def _varint_op(fd: FieldDef) -> Op:
    max_bytes = 5 if fd.type == "varint" else 10
    name, typ = fd.name, fd.type

    def op(buf: bytes, pos: int, end: int, out: list) -> int:
        return _uvar(buf, pos, end, name, typ, out, max_bytes)[1]
    return op


def _string_op(fd: FieldDef, flexible: bool, keep: bool) -> Op:
    rd = _len_prefix(flexible, False)
    name = fd.name

    def op(buf: bytes, pos: int, end: int, out: list) -> int:
        n, p = rd(buf, pos, end, name, "string", out)
        if n < 0:
            if keep:
                out.append(Field(name, "string", None, pos, p - pos))
            return p
        if n > end - p:
            raise _Bad(f"string length {n} exceeds the {end - p} bytes left", name, "string", pos, out)
        if keep:
            out.append(Field(name, "string", buf[p:p + n].decode(errors="replace"), pos, p + n - pos))
        return p + n
    return op


def _bytes_op(fd: FieldDef, flexible: bool) -> Op:
    rd = _len_prefix(flexible, True)
    name = fd.name

    def op(buf: bytes, pos: int, end: int, out: list) -> int:
        n, p = rd(buf, pos, end, name, "bytes", out)
        if n < 0:
            return p
        if n > end - p:
            raise _Bad(f"bytes length {n} exceeds the {end - p} bytes left", name, "bytes", pos, out)
        return p + n
    return op


def _records_op(fd: FieldDef, flexible: bool) -> Op:
    from dissectors.records import decode_records

    rd = _len_prefix(flexible, True)
    name = fd.name

    def op(buf: bytes, pos: int, end: int, out: list) -> int:
        n, p = rd(buf, pos, end, name, "records", out)
        ctx = _cur.ctx
        assert ctx is not None
        if n < 0:
            try:
                f = decode_records(buf, p, p, ctx, name, null=True)
                f.offset, f.length = pos, p - pos
            except Exception:
                f = Field(name, "records", None, pos, p - pos)
            out.append(f)
            return p
        if n > end - p:
            raise _Bad(f"records length {n} exceeds the {end - p} bytes left", name, "records", pos, out)
        try:
            f = decode_records(buf, p, p + n, ctx, name)
        except Exception as e:  # as in the full decoder: a bug there must not lose the frame
            f = Field(name, "bytes", None, pos, p + n - pos)
            f.mark_malformed(f"records decoder failed: {type(e).__name__}: {e}", ctx)
        out.append(f)
        return p + n
    return op


def _array_op(fd: FieldDef, flexible: bool, nullable: bool, elem: _Plan | None, elem_op: Op | None,
              elem_min: int, keep: bool) -> Op:
    rd = _len_prefix(flexible, True)
    name = fd.name

    def head(buf: bytes, pos: int, end: int, out: list) -> tuple[int, int]:
        n, p = rd(buf, pos, end, name, "array", out)
        ctx = _cur.ctx
        assert ctx is not None
        if n > ctx.max_array_len:
            ctx.hit_limit("max_array_len")
            raise _Bad(f"array count {n} exceeds max_array_len {ctx.max_array_len}",
                       name, "array", pos, out, limit="max_array_len")
        if n * elem_min > end - p:
            raise _Bad(f"array count {n} exceeds the {end - p} bytes left", name, "array", pos, out)
        return n, p

    if elem is not None and keep:
        tname = elem.type_name
        eops, eflex, etags = elem.ops, elem.flexible, elem.tags

        def op(buf: bytes, pos: int, end: int, out: list) -> int:
            n, p = head(buf, pos, end, out)
            if n < 0:
                out.append(Field(name, "array", None, pos, p - pos))
                return p
            children: list[Field] = []
            arr = Field(name, "array", n, pos, 0, children)
            out.append(arr)
            for i in range(n):
                ech: list[Field] = []
                e = Field(_INDEX_NAMES[i] if i < 256 else f"[{i}]", tname, None, p, 0, ech)
                children.append(e)
                q = p
                for o in eops:              # _run(elem, ...), inlined
                    q = o(buf, q, end, ech)
                if eflex:
                    if q < end and buf[q] == 0:
                        q += 1
                    else:
                        q = _tagged(etags, buf, q, end, ech)
                e.length = q - p
                p = q
            arr.length = p - pos
            return p
        return op

    if elem is not None and elem.fixed_size >= 0:
        esize = elem.fixed_size

        def op(buf: bytes, pos: int, end: int, out: list) -> int:
            n, p = head(buf, pos, end, out)
            if n <= 0:
                return p
            q = p + n * esize
            if q > end:
                tmp: list[Field] = []
                for _ in range(n):      # find the element that runs out, for the same error
                    p = _run(elem, buf, p, end, tmp)
            return q
        return op

    if elem is not None and elem.flexible and elem.skip_size >= 0:
        # fixed-size elements with nothing kept, each followed by its tagged fields: the
        # common empty tag section (one zero byte) is stepped over without running the plan
        ssize = elem.skip_size

        def op(buf: bytes, pos: int, end: int, out: list) -> int:
            n, p = head(buf, pos, end, out)
            for _ in range(n):
                q = p + ssize
                if q < end and buf[q] == 0:
                    p = q + 1
                else:
                    p = _run(elem, buf, p, end, out)
            return p
        return op

    if elem is not None:
        def op(buf: bytes, pos: int, end: int, out: list) -> int:
            n, p = head(buf, pos, end, out)
            if n <= 0:
                return p
            for _ in range(n):
                p = _run(elem, buf, p, end, out)
            return p
        return op

    assert elem_op is not None
    fixed = _FIXED.get(fd.element or "")
    esize = fixed[1] if fixed is not None else -1

    def op(buf: bytes, pos: int, end: int, out: list) -> int:
        n, p = head(buf, pos, end, out)
        if n <= 0:
            return p
        if esize >= 0 and p + n * esize <= end:
            return p + n * esize
        for _ in range(n):
            p = elem_op(buf, p, end, out)
        return p
    return op


def _struct_op(fd: FieldDef, plan: _Plan, nullable: bool, keep: bool) -> Op:
    name, tname = fd.name, plan.type_name

    def op(buf: bytes, pos: int, end: int, out: list) -> int:
        p = pos
        if nullable:
            if p >= end:
                raise _Bad("struct presence byte missing", name, tname, pos, out)
            marker = buf[p]
            p += 1
            if marker == 0xFF:
                if keep:
                    out.append(Field(name, tname, None, pos, 1))
                return p
        if not keep:
            return _run(plan, buf, p, end, out)
        children: list[Field] = []
        f = Field(name, tname, None, pos, 0, children)
        out.append(f)
        p = _run(plan, buf, p, end, children)
        f.length = p - pos
        return p
    return op


def _field_op(fd: FieldDef, version: int, flexible: bool, keep_companions: bool) -> tuple[Op, int]:
    nullable = in_range(version, fd.nullable)
    t = fd.type
    keep = fd.name in ANCHORS or _is_error(fd) or (keep_companions and fd.name in COMPANIONS)
    if t in _FIXED:
        return _fixed_op([(fd, keep)]), _FIXED[t][1]
    if t in ("varint", "varlong"):
        return _varint_op(fd), 1
    if t == "string":
        return _string_op(fd, flexible, keep), _min_size(fd, flexible)
    if t == "bytes":
        return _bytes_op(fd, flexible), _min_size(fd, flexible)
    if t == "records":
        return _records_op(fd, flexible), _min_size(fd, flexible)
    if t == "struct":
        plan = _compile(fd.fields, version, flexible, fd.struct or fd.name)
        return _struct_op(fd, plan, nullable, _wanted(fd)), (1 if nullable else plan.min_size)
    if t == "array":
        el = fd.element or "struct"
        if el == "struct":
            plan = _compile(fd.fields, version, flexible, fd.struct or fd.name)
            return (_array_op(fd, flexible, nullable, plan, None, max(plan.min_size, 1), _wanted(fd)),
                    _min_size(fd, flexible))
        efd = FieldDef(name="[]", type=el, versions=(0, 0x7FFF))
        eop, emin = _field_op(efd, version, flexible, False)
        return _array_op(fd, flexible, nullable, None, eop, max(emin, 1), False), _min_size(fd, flexible)

    def unsupported(buf: bytes, pos: int, end: int, out: list) -> int:
        raise _Bad(f"type {t!r} is not supported by the decoder", fd.name, t, pos, out)
    return unsupported, 0


_PLANS: dict[tuple[int, int, bool], tuple[tuple[FieldDef, ...], _Plan]] = {}


def _compile(fields: tuple[FieldDef, ...], version: int, flexible: bool, type_name: str) -> _Plan:
    key = (id(fields), version, flexible)
    hit = _PLANS.get(key)
    if hit is not None and hit[0] is fields and hit[1].type_name == type_name:
        return hit[1]
    plan = _Plan()
    plan.flexible = flexible
    plan.type_name = type_name
    present = []
    for fd in fields:
        if flexible and fd.tag is not None and (fd.tagged is None or in_range(version, fd.tagged)):
            if fd.tagged is None and not in_range(version, fd.versions):
                continue
            present.append((fd, True))
            continue
        if not in_range(version, fd.versions) or (fd.tag is not None and not flexible):
            continue
        present.append((fd, False))
    # companions (names, indexes) are kept only in a struct kept for another reason
    companions = any(_wanted(fd) for fd, _t in present)
    plan.keep = companions
    run: list[tuple[FieldDef, bool]] = []
    fixed = not flexible
    only_fixed = True
    size = 0
    for fd, tagged in present:
        if tagged:
            plan.tags[fd.tag], _ = _field_op(fd, version, flexible, companions)  # type: ignore[index]
            continue
        if fd.type in _FIXED:
            keep = fd.name in ANCHORS or _is_error(fd) or (companions and fd.name in COMPANIONS)
            run.append((fd, keep))
            plan.min_size += _FIXED[fd.type][1]
            size += _FIXED[fd.type][1]
            if keep:
                fixed = only_fixed = False
            continue
        fixed = only_fixed = False
        if run:
            plan.ops.append(_fixed_op(run))
            run = []
        op, sz = _field_op(fd, version, flexible, companions)
        plan.ops.append(op)
        plan.min_size += sz
    if run:
        plan.ops.append(_fixed_op(run))
    if flexible:
        plan.min_size += 1
    plan.fixed_size = size if fixed else -1
    plan.skip_size = size if only_fixed else -1
    _PLANS[key] = (fields, plan)
    return plan


# -- entry points ---------------------------------------------------------------------------

def _clamp(api: ApiDef, version: int) -> int:
    if version > api.max_version:
        return api.max_version
    if version < api.min_version:
        return max(version, 0)
    return version


# (api_key, version, request) -> (the ApiDef, body type name, plan)
_BODIES: dict[tuple[int, int, bool], tuple[ApiDef, str, _Plan]] = {}


def _body(api: ApiDef, version: int, request: bool, buf: bytes, start: int, end: int,
          ctx: DecodeContext) -> Field:
    hit = _BODIES.get((api.key, version, request))
    if hit is None or hit[0] is not api:
        flexible = is_flexible(api, version)
        tname = f"{api.name}{'Request' if request else 'Response'} v{version}"
        hit = _BODIES[(api.key, version, request)] = (
            api, tname, _compile(api.request if request else api.response, version, flexible, tname))
    _api, tname, plan = hit
    children: list[Field] = []
    body = Field("body", tname, None, start, end - start, children)
    prev = _cur.ctx
    _cur.ctx = ctx
    try:
        pos = _run(plan, buf, start, end, children)
    except _Bad as e:
        bad = Field(e.name, e.typ, None, e.offset, max(0, end - e.offset))
        bad.mark_malformed(e.reason, ctx)
        e.out.append(bad)
        for c in children:
            _fix_lengths(c)
        body.extra = {"malformed_at": e.offset}
        return body
    finally:
        _cur.ctx = prev
    if pos < end:
        ctx.trailing += 1
    else:
        body.length = pos - start
    return body


def digest_request(data: bytes, header_len: int, ctx: DecodeContext) -> Field:
    """The digest tree of a request whose header (already parsed) is ``header_len`` bytes."""
    buf = bytes(data)
    n = len(buf)
    root = Field("request", "Request", None, 0, n, [Field("header", "RequestHeader", None, 0, header_len)])
    if n < 8:
        root.children[0].mark_malformed(f"request header needs 8 bytes, {n} present", ctx)  # type: ignore[index]
        return root
    api_key, api_version = struct.unpack_from(">hh", buf, 0)
    api = APIS.get(api_key)
    if api is None:
        return root
    root.type = f"{api.name}Request"
    root.add(_body(api, _clamp(api, api_version), True, buf, header_len, n, ctx))
    return root


def digest_response(data: bytes, api_key: int, api_version: int, ctx: DecodeContext) -> Field:
    """The digest tree of a response to a request of ``api_key`` v``api_version``."""
    from dissectors.kafka import response_header

    buf = bytes(data)
    n = len(buf)
    root, api, pos = response_header(buf, api_key, api_version, ctx,
                                     lambda b, p, end, out: _tagged({}, b, p, end, out),  # type: ignore[arg-type]
                                     with_correlation_id=False)
    if pos is None:
        return root
    if api is None:
        return root
    used = _clamp(api, api_version)
    if api_key == 18 and used > 0 and n - pos >= 2 and _I16.unpack_from(buf, pos)[0] == 35:
        body = _api_versions_unsupported(api, used, buf, pos, n, ctx)
    else:
        body = _body(api, used, False, buf, pos, n, ctx)
    root.add(body)
    if api_key in (3, 19, 75):
        from dissectors.kafka import learn_topic_ids
        learn_topic_ids(body, ctx)
    return root


def _api_versions_unsupported(api: ApiDef, version: int, buf: bytes, pos: int, n: int,
                              ctx: DecodeContext) -> Field:
    """As the full decoder: an UNSUPPORTED_VERSION answer may be in the v0 layout."""
    trial = DecodeContext(max_array_len=ctx.max_array_len, max_depth=ctx.max_depth, decode_records=False)
    probe = _body(api, version, False, buf, pos, n, trial)
    if trial.malformed or trial.trailing:
        trial0 = DecodeContext(max_array_len=ctx.max_array_len, max_depth=ctx.max_depth, decode_records=False)
        _body(api, 0, False, buf, pos, n, trial0)
        if not trial0.malformed and not trial0.trailing:
            return _body(api, 0, False, buf, pos, n, ctx)
    del probe
    return _body(api, version, False, buf, pos, n, ctx)


def describe() -> dict[str, Any]:
    """What a digest keeps (for documentation and tests)."""
    return {"anchors": sorted(ANCHORS), "companions": sorted(COMPANIONS)}
