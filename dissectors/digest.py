"""Lean decoding for statistics: sparse Field trees that keep only what ``stats`` reads.

``digest_request(data, header_len, ctx)`` and ``digest_response(data, api_key,
api_version, ctx)`` walk the same declarative schema as ``dissectors.decoder`` but
build a Field only for:

- error codes anywhere in the message that are not zero (what ``kafka.error_codes``
  collects: a zero code reads as an absent one),
- records fields (``dissectors.records``; pass a context with ``decode_records=False``
  to get counts, sizes, codecs and CRC verdicts without per-record Fields),
- a few figures: throttle_time_ms, max_wait_ms, min_bytes, acks,
  assignments (an array: its elements are kept as empty structs), mechanism,
  group_id (the group a client belongs to), and what consumer lag reads from Fetch:
  isolation_level, session_id, session_epoch, fetch_offset, high_watermark,
  last_stable_offset and forgotten_topics_data (kept as empty structs: a request that
  forgets partitions is decoded again in full by whoever needs which), transactional_id,
  member_id, generation_id, generation_id_or_member_epoch, protocol_name and leader
  (what a group story reads from JoinGroup, SyncGroup, Heartbeat, LeaveGroup and
  OffsetCommit),
- the topic ids, names and partition indexes next to any of the above,
- and the structs / arrays that lead to them; but an array element whose struct keeps
  error codes and their companions alone (the partitions of a Metadata or Produce
  answer) is kept only when one of its codes is not zero (the array's value still
  counts them all).

The root carries the names of the non-zero error codes in wire order
(``field.ErrorsRoot``), collected as they are read: ``kafka.error_codes`` walks nothing.

Everything else is skipped by length without creating objects. Each body is decoded by
Python source generated per (API, version, direction) on first use; the closure plan
that describes the same walk decodes the messages that source gives up on (bad bytes),
so it alone defines the malformed cases (see "generated decoders" below). The shape of what is
kept is the full decoder's (same names, types, values, offsets), but for the header,
whose Field is there only when it is malformed (a root holds the body alone), so
``kafka.error_codes``, ``summary.partitions_of`` and ``kafka.learn_topic_ids`` work
on a digest tree unchanged. Bad bytes stop decoding with a ``malformed:`` Field, as
in the full decoder; nested payloads (consumer protocol, SASL tokens) and
annotations are not decoded, so malformed spots inside those are not seen here.
"""
from __future__ import annotations

import struct
from collections.abc import Callable
from functools import partial
from typing import Any

from dissectors.context import DecodeContext
from dissectors.decoder import (
    _FIXED,
    _Bad,
    _conv,
    _fix_lengths,
    _len_prefix,
    _min_size,
    _uuid_str,
    _uvar,
    read_uvarint,
)
from dissectors.errors import error_name
from dissectors.field import ErrorsRoot, Field
from dissectors.kafka import error_codes, learn_topic_ids, response_header
from dissectors.schema import APIS, ApiDef, FieldDef, in_range, is_flexible, response_header_version

__all__ = ["digest_request", "digest_response", "KEPT_NAMES"]

# a field with one of these names (or an error code, or records) is kept with its path
ANCHORS = frozenset({"throttle_time_ms", "max_wait_ms", "min_bytes", "acks", "assignments", "mechanism",
                     "group_id", "isolation_level", "session_id", "session_epoch", "fetch_offset",
                     "high_watermark", "last_stable_offset", "forgotten_topics_data", "transactional_id",
                     "member_id", "generation_id", "generation_id_or_member_epoch", "protocol_name", "leader"})
# kept too when their struct is kept for another reason: topic ids are read where names are
# (the topics of Produce, Fetch and Metadata-like answers, kept for their records or error
# codes), never alone (as in a Fetch or Metadata request)
COMPANIONS = frozenset({"name", "topic", "index", "partition", "partition_index", "topic_id"})
KEPT_NAMES = ANCHORS | COMPANIONS

_LAST_NON_FLEXIBLE_KEY = 67
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

Op = Callable[[bytes, int, int, list], int]


class _Plan:
    __slots__ = ("ops", "tags", "flexible", "keep", "fixed_size", "min_size", "type_name", "skip_size",
                 "errors_only")

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.tags: dict[int, Op] = {}
        self.flexible = False
        self.keep = False            # builds at least one Field
        self.fixed_size = -1         # >= 0: fixed size and nothing to keep (non-flexible)
        self.skip_size = -1          # >= 0: only fixed-size fields, none kept (tagged fields aside)
        self.min_size = 0
        self.type_name = ""
        # keeps error codes (fixed, not tagged) and companions alone: as an array element it
        # is kept only when one of its error codes is not zero (see _errors_only)
        self.errors_only = False


class _Ctx:
    """Per-message state: the decode context, and the names of the non-zero error codes
    read so far (in wire order: the root carries them for ``kafka.error_codes``)."""
    ctx: DecodeContext | None = None
    errs: list[str] = []


_cur = _Ctx()


def _is_error(fd: FieldDef) -> bool:
    if fd.meaning == "error_code":
        return True
    return fd.type == "int16" and (fd.name == "error_code" or fd.name.endswith("_error_code"))


def _kept(fd: FieldDef, companions: bool) -> bool:
    """Is this field itself kept (``companions``: in a struct kept for another reason)?"""
    return fd.name in ANCHORS or _is_error(fd) or (companions and fd.name in COMPANIONS)


# id(FieldDef) -> (that FieldDef, _wanted of it): asked for every field of every struct of
# every generated body, and recursive (schema tables live as long as the process)
_WANTED: dict[int, tuple[FieldDef, bool]] = {}


def _wanted(fd: FieldDef) -> bool:
    """Does this field, or anything below it, have to be kept?"""
    hit = _WANTED.get(id(fd))
    if hit is not None and hit[0] is fd:
        return hit[1]
    w = fd.name in ANCHORS or fd.type == "records" or _is_error(fd) or any(_wanted(c) for c in fd.fields)
    _WANTED[id(fd)] = (fd, w)
    return w


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
            rows.append((i, fd.name, fd.type, off, ln, _conv(fd.type), _is_error(fd), fd.meaning == "error_code"))
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
        for i, name, typ, o, ln, conv, err, meaning in rows:
            v = vals[i]
            if err:
                if not v:
                    continue                    # an error code is kept when not zero
                _cur.errs.append(error_name(v))
            f = Field(name, typ, v if conv is None else conv(v), pos + o, ln)
            if meaning:
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
            f = _records_failed(name, pos, p + n - pos, e, ctx)
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
        lazy = elem.errors_only

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
                errs = _cur.errs
                k = len(errs)
                q = p
                for o in eops:              # _run(elem, ...), inlined
                    q = o(buf, q, end, ech)
                if eflex:
                    if q < end and buf[q] == 0:
                        q += 1
                    else:
                        q = _tagged(etags, buf, q, end, ech)
                if lazy and len(errs) == k:
                    children.pop()          # its error codes are all zero: nothing to keep
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

    def op_each(buf: bytes, pos: int, end: int, out: list) -> int:
        n, p = head(buf, pos, end, out)
        if n <= 0:
            return p
        if esize >= 0 and p + n * esize <= end:
            return p + n * esize
        for _ in range(n):
            p = elem_op(buf, p, end, out)
        return p
    return op_each


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
    keep = _kept(fd, keep_companions)
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


def _present(fields: tuple[FieldDef, ...], version: int, flexible: bool) -> list[tuple[FieldDef, bool]]:
    """(field, tagged) for the fields of a struct present at this version, in wire order."""
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
    return present


def _errors_only(present: list[tuple[FieldDef, bool]]) -> bool:
    """Does a struct keep fixed-size error codes and companions alone (companions not tagged)?
    Then an element of an array of it is kept only when an error code in it is not zero:
    such elements (the partitions of a Metadata or Produce answer) are read for their
    error codes alone (kafka.error_codes; summary.partitions_of for Produce answers), an
    element without one has nothing to tell."""
    wanted = [(fd, tagged) for fd, tagged in present if _wanted(fd)]
    return (bool(wanted) and all(not tagged and fd.type in _FIXED and _is_error(fd) and fd.name not in ANCHORS
                                 for fd, tagged in wanted)
            and not any(tagged and fd.name in COMPANIONS for fd, tagged in present))


def _compile(fields: tuple[FieldDef, ...], version: int, flexible: bool, type_name: str) -> _Plan:
    key = (id(fields), version, flexible)
    hit = _PLANS.get(key)
    if hit is not None and hit[0] is fields and hit[1].type_name == type_name:
        return hit[1]
    plan = _Plan()
    plan.flexible = flexible
    plan.type_name = type_name
    present = _present(fields, version, flexible)
    # companions (names, indexes) are kept only in a struct kept for another reason
    companions = any(_wanted(fd) for fd, _t in present)
    plan.keep = companions
    run: list[tuple[FieldDef, bool]] = []
    fixed = not flexible
    only_fixed = True
    size = 0
    for fd, tagged in present:
        if tagged:
            assert fd.tag is not None       # a field _present calls tagged has its tag
            plan.tags[fd.tag], _ = _field_op(fd, version, flexible, companions)
            continue
        if fd.type in _FIXED:
            keep = _kept(fd, companions)
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
    plan.errors_only = _errors_only(present)
    _PLANS[key] = (fields, plan)
    return plan


# -- generated decoders -------------------------------------------------------------------
#
# Walking a plan costs one Python call per field op (about a hundred per message). So each
# (API, version, direction) body is also written out as the source of one Python function,
# compiled on first use: one bound check and one struct unpack per run of fixed fields (pad
# bytes for the fields not kept), loops for arrays, skips by arithmetic (a strided slice
# checks the tag bytes of a whole array of skipped fixed-size elements), and a Field built
# exactly where the plan builds one. It makes the plan's checks at the same places but does
# not report them: where one fails (or on any other exception) it raises, and ``_decode``
# drops the partial tree and decodes the message again with the plan, so the plan stays the
# one definition of what a bad message gives (notes, partial tree, ctx counters). Generated bodies that decode records
# save the ctx counters first and restore them before that re-run. The rare paths (a skipped
# element with a non-empty tag section, varints, unknown types) call the plan's own ops.
# tests/test_digest_gen.py runs both over real, damaged and schema-built messages.


class _Fallback(Exception):
    """Raised by generated code where the plan would report bad bytes."""


class _Stats:
    fallbacks = 0        # messages the generated code handed to the plan (tests read it)


_stats = _Stats()
_GENERATED = True       # False: plans only (the tests' reference)


# 16 bytes -> the uuid text: topic ids repeat in every Metadata / Fetch message, so
# generated code looks the text up before formatting it (bounded: ids come from the wire)
_UUIDS: dict[bytes, str] = {}


def _uuid_new(b: bytes) -> str:
    if len(_UUIDS) >= 16384:
        _UUIDS.clear()
    s = _UUIDS[b] = _uuid_str(b)
    return s


class _Source:
    """The source text of one generated body decoder, and the names it refers to."""

    def __init__(self, version: int, flexible: bool) -> None:
        self.version = version
        self.flexible = flexible
        self.lines: list[str] = []
        self.env: dict[str, Any] = {
            "Field": Field, "_new": object.__new__, "_F": _Fallback, "_IDX": _INDEX_NAMES, "_run": _run, "_gen_tagged": _gen_tagged,
            "read_uvarint": read_uvarint, "_I16": _I16.unpack_from, "_I32": _I32.unpack_from,
            "_UUIDS": _UUIDS, "_uuid_new": _uuid_new, "_records_failed": _records_failed,
            "_cur": _cur, "_error_name": error_name,
        }
        self.count = 0
        self.has_records = False
        self.functions: list[list[str]] = []     # tag-field functions, written before ``decode``
        self.tag_tables: list[str] = []          # names of {tag: function name}, linked after exec
        self.detect: str | None = None           # see errors_only_elements

    def var(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def const(self, prefix: str, obj: Any) -> str:
        name = self.var("_" + prefix)
        self.env[name] = obj
        return name

    def emit(self, ind: int, *lines: str) -> None:
        pad = "    " * ind
        self.lines += [pad + line for line in lines]

    @staticmethod
    def new(var: str, name: str, typ: str, value: str, offset: str, length: str, children: str = "None",
            extra: str = "None") -> str:
        """One line that builds a Field in ``var`` (arguments are source text): as
        ``Field(...)``, without the call of ``__init__`` (~2,500 instructions per Field,
        this ~1,600; a digest builds a dozen Fields per exchange)."""
        return (f"{var} = _new(Field); {var}.name = {name}; {var}.type = {typ}; {var}.value = {value}; "
                f"{var}.offset = {offset}; {var}.length = {length}; {var}.children = {children}; "
                + (f"{var}.notes = {var}.extra = None" if extra == "None" else f"{var}.notes = None; {var}.extra = {extra}"))

    def block(self, ind: int, body: Callable[[], None]) -> None:
        """Emit ``body`` as an indented block at ``ind``; ``pass`` if it wrote nothing."""
        n = len(self.lines)
        body()
        if len(self.lines) == n:
            self.emit(ind, "pass")

    # -- structs ---------------------------------------------------------------------------

    def struct(self, fields: tuple[FieldDef, ...], type_name: str, out: str, ind: int) -> None:
        """The fields of a struct (as ``_compile`` selects them) into the list ``out``."""
        present = _present(fields, self.version, self.flexible)
        # while detecting (errors_only_elements) nothing is kept: companions are not read
        companions = self.detect is None and any(_wanted(fd) for fd, _t in present)
        run: list[tuple[FieldDef, bool]] = []
        for fd, tagged in present:
            if tagged:
                continue
            if fd.type in _FIXED:
                keep = _kept(fd, companions)
                run.append((fd, keep))
                continue
            if run:
                self.fixed(run, out, ind)
                run = []
            self.field(fd, companions, out, ind)
        if run:
            self.fixed(run, out, ind)
        if self.flexible:
            fns = {}
            for fd, tagged in present:
                if not tagged:
                    continue
                if fd.type in _FIXED and not _kept(fd, companions):
                    fns[fd.tag] = _FIXED[fd.type][1]    # nothing kept: its size is all to check
                else:           # as _compile: one function per tag, companions kept as there
                    fns[fd.tag] = self.function("tag", partial(self.tag_field, fd, companions))
            tags = self.const("tags", fns)
            self.tag_tables.append(tags)
            # (usually the tag section is one zero byte)
            self.emit(ind, "if p < end and buf[p] == 0: p += 1",
                      f"else: p = _gen_tagged({tags}, buf, p, end, {out}, ctx, limit)")

    def tag_field(self, fd: FieldDef, companions: bool) -> None:
        if fd.type in _FIXED:
            keep = _kept(fd, companions)
            self.fixed([(fd, keep)], "out", 1)
        else:
            self.field(fd, companions, "out", 1)

    def function(self, prefix: str, body: Callable[[], None]) -> Any:
        """Generate a separate function ``(buf, p, end, out, ctx, limit) -> p``; its name."""
        name = self.var("_" + prefix)
        saved, self.lines = self.lines, [f"def {name}(buf, p, end, out, ctx, limit):"]
        body()
        self.emit(1, "return p")
        self.functions.append(self.lines)
        self.lines = saved
        return name

    def fixed(self, run: list[tuple[FieldDef, bool]], out: str, ind: int) -> None:
        """A run of fixed-size fields: one bound check, one unpack of the kept ones."""
        fmt = ">"
        size = 0
        kept = []
        for fd, keep in run:
            code, ln = _FIXED[fd.type]
            if keep:
                fmt += code
                kept.append((fd, size, ln))
            else:
                fmt += f"{ln}x"
            size += ln
        self.emit(ind, f"if p + {size} > end: raise _F")
        if kept:
            unpack = self.const("unpack", struct.Struct(fmt).unpack_from)
            names = [self.var("v") for _ in kept]
            self.emit(ind, f"{', '.join(names)}, = {unpack}(buf, p)")
            for v, (fd, off, ln) in zip(names, kept, strict=True):
                if self.detect is not None:     # error codes alone are unpacked: note a non-zero one
                    self.emit(ind, f"if {v}:", f"    {self.detect} = True")
                    continue
                value = {"bool": f"bool({v})", "uuid": f"(_UUIDS.get({v}) or _uuid_new({v}))"}.get(fd.type, v)
                # an error code is kept when not zero, its extra as the full decoder's annotation
                extra = f"{{'error_code': {v}}}" if fd.meaning == "error_code" else "None"
                f = self.var("f")
                i = ind
                if _is_error(fd):
                    self.emit(ind, f"if {v}:", f"    _cur.errs.append(_error_name({v}))")
                    i += 1
                self.emit(i, self.new(f, repr(fd.name), repr(fd.type), value, f"p + {off}" if off else "p",
                                      str(ln), extra=extra),
                          f"{out}.append({f})")
        self.emit(ind, f"p += {size}")

    def field(self, fd: FieldDef, companions: bool, out: str, ind: int) -> None:
        t = fd.type
        if t == "string":
            keep = _kept(fd, companions)
            self.string(fd.name, keep, out, ind)
        elif t == "bytes":
            self.skip_sized(fd.name, ind)
        elif t == "records":
            self.records(fd.name, out, ind)
        elif t == "struct":
            self.nested(fd, out, ind)
        elif t == "array":
            self.array(fd, out, ind)
        else:       # varints, unknown types: the plan's op
            op = self.const("op", _field_op(fd, self.version, self.flexible, companions)[0])
            self.emit(ind, f"p = {op}(buf, p, end, {out})")

    # -- length-prefixed items ---------------------------------------------------------------

    def prefix(self, wide: bool, n: str, q: str, ind: int) -> None:
        """Read a length/count prefix at p: ``n`` (-1 for null), ``q`` after it."""
        if self.flexible:
            # (simple statements on their if/else lines here and below: fewer tokens to compile)
            self.emit(ind, f"if p < end and buf[p] < 128: {n} = buf[p] - 1; {q} = p + 1",
                      f"else: {n}, {q} = read_uvarint(buf, p, end); {n} -= 1")
            return
        size = 4 if wide else 2
        self.emit(ind, f"if p + {size} > end: raise _F",
                  f"{n} = {'_I32' if wide else '_I16'}(buf, p)[0]",
                  f"if {n} < -1: raise _F",
                  f"{q} = p + {size}")

    def skip_sized(self, name: str, ind: int, wide: bool = True) -> None:
        """Step over a string or bytes field that is not kept."""
        if self.flexible:
            # a one-byte prefix L: L - 1 bytes follow (none for null, L == 0)
            # (else, the longer prefix: read_uvarint, without prefix()'s one-byte test again)
            n, q = self.var("n"), self.var("q")
            self.emit(ind, "if p < end and buf[p] < 128: p += buf[p] or 1",
                      f"else: {n}, {q} = read_uvarint(buf, p, end); p = {q} if {n} < 1 else {q} + {n} - 1",
                      "if p > end: raise _F")
            return
        n = self.var("n")
        size = 4 if wide else 2
        self.emit(ind, f"if p + {size} > end: raise _F",
                  f"{n} = {'_I32' if wide else '_I16'}(buf, p)[0]",
                  f"if {n} >= 0:",
                  f"    p += {size} + {n}",
                  "    if p > end: raise _F",
                  f"elif {n} == -1:",
                  f"    p += {size}",
                  "else: raise _F")

    def string(self, name: str, keep: bool, out: str, ind: int) -> None:
        if not keep:
            self.skip_sized(name, ind, wide=False)
            return
        n, q, f = self.var("n"), self.var("q"), self.var("f")
        self.prefix(False, n, q, ind)
        self.emit(ind, f"if {n} < 0:",
                  "    " + self.new(f, repr(name), "'string'", "None", "p", f"{q} - p"),
                  f"    p = {q}",
                  f"elif {n} > end - {q}: raise _F",
                  "else:",
                  "    " + self.new(f, repr(name), "'string'", f"buf[{q}:{q} + {n}].decode(errors='replace')",
                                    "p", f"{q} + {n} - p"),
                  f"    p = {q} + {n}",
                  f"{out}.append({f})")

    def records(self, name: str, out: str, ind: int) -> None:
        from dissectors.records import decode_records

        self.env["decode_records"] = decode_records
        self.has_records = True
        n, q, f = self.var("n"), self.var("q"), self.var("f")
        self.prefix(True, n, q, ind)
        self.emit(ind, f"if {n} < 0:",
                  "    try:",
                  f"        {f} = decode_records(buf, {q}, {q}, ctx, {name!r}, null=True)",
                  f"        {f}.offset, {f}.length = p, {q} - p",
                  "    except Exception:",
                  f"        {f} = Field({name!r}, 'records', None, p, {q} - p)",
                  f"    p = {q}",
                  f"elif {n} > end - {q}: raise _F",
                  "else:",
                  "    try:",
                  f"        {f} = decode_records(buf, {q}, {q} + {n}, ctx, {name!r})",
                  "    except Exception as e:",
                  f"        {f} = _records_failed({name!r}, p, {q} + {n} - p, e, ctx)",
                  f"    p = {q} + {n}",
                  f"{out}.append({f})")

    # -- structs and arrays ------------------------------------------------------------------

    def nested(self, fd: FieldDef, out: str, ind: int) -> None:
        tname = fd.struct or fd.name
        keep = _wanted(fd)
        s = self.var("s")
        self.emit(ind, f"{s} = p")

        def inner(i: int) -> None:
            if not keep:
                self.struct(fd.fields, tname, out, i)
                return
            ch, f = self.var("ch"), self.var("f")
            self.emit(i, f"{ch} = []", self.new(f, repr(fd.name), repr(tname), "None", s, "0", ch),
                      f"{out}.append({f})")
            self.struct(fd.fields, tname, ch, i)
            self.emit(i, f"{f}.length = p - {s}")

        if not in_range(self.version, fd.nullable):
            inner(ind)
            return
        self.emit(ind, "if p >= end: raise _F",
                  "if buf[p] == 255:",
                  *([f"    {out}.append(Field({fd.name!r}, {tname!r}, None, {s}, 1))"] if keep else []),  # rare
                  "    p += 1",
                  "else:",
                  "    p += 1")
        inner(ind + 1)

    def array(self, fd: FieldDef, out: str, ind: int) -> None:
        version, flexible = self.version, self.flexible
        el = fd.element or "struct"
        s, n, q = self.var("s"), self.var("n"), self.var("q")
        self.emit(ind, f"{s} = p")
        self.prefix(True, n, q, ind)
        if el == "struct":
            tname = fd.struct or fd.name
            plan = _compile(fd.fields, version, flexible, tname)
            emin = max(plan.min_size, 1)
        else:
            efd = FieldDef(name="[]", type=el, versions=(0, 0x7FFF))
            eop, emin = _field_op(efd, version, flexible, False)
            emin = max(emin, 1)
        self.emit(ind, f"if {n} > limit or {n} * {emin} > end - {q}: raise _F",
                  f"p = {q}")
        if el != "struct":
            self.primitive_elements(el, eop, n, out, ind)
            return
        i = self.var("i")
        if _wanted(fd) and plan.errors_only:
            self.errors_only_elements(fd, plan, n, s, i, out, ind)
            return
        if _wanted(fd):
            ch, arr = self.kept_array(fd, n, s, i, out, ind)
            e, ech = self.var("e"), self.var("ech")
            self.emit(ind, f"        {ech} = []",
                      "        " + self.new(e, f"_IDX[{i}] if {i} < 256 else f'[{{{i}}}]'", repr(tname), "None", "p",
                                            "0", ech),
                      f"        {ch}.append({e})")
            self.struct(fd.fields, tname, ech, ind + 2)
            self.emit(ind, f"        {e}.length = p - {e}.offset",
                      f"    {arr}.length = p - {s}")
            return
        if plan.fixed_size >= 0:
            # (within end: the count was checked against the bytes left, elements of this size)
            self.emit(ind, f"if {n} > 0:",
                      f"    p += {n} * {plan.fixed_size}")
            return
        if plan.flexible and plan.skip_size >= 0:
            # fixed-size elements, nothing kept, each followed by its tag section: when every
            # section is the usual zero byte, one strided slice checks them all
            step = plan.skip_size + 1
            r, pl = self.var("r"), self.const("plan", plan)
            self.emit(ind, f"if {n} > 0:",
                      f"    {r} = p + {n} * {step}",
                      f"    if {r} <= end and buf[p + {plan.skip_size}:{r}:{step}].count(0) == {n}:",
                      f"        p = {r}",
                      "    else:",
                      f"        for {i} in range({n}):",
                      f"            {r} = p + {plan.skip_size}",
                      f"            if {r} < end and buf[{r}] == 0:",
                      f"                p = {r} + 1",
                      "            else:",
                      f"                p = _run({pl}, buf, p, end, {out})")
            return
        self.emit(ind, f"for {i} in range({n}):")
        self.block(ind + 1, lambda: self.struct(fd.fields, tname, out, ind + 1))

    def kept_array(self, fd: FieldDef, n: str, s: str, i: str, out: str, ind: int) -> tuple[str, str]:
        """The head of a kept array of structs, its count in ``n`` read from ``s``: its Field
        (null: value None) in ``out`` and ``for i in range(n):``, whose body goes at ind + 2.
        Returns the names of its children list and of its Field."""
        ch, arr = self.var("ch"), self.var("arr")
        self.emit(ind, f"if {n} < 0:",
                  f"    {out}.append(Field({fd.name!r}, 'array', None, {s}, p - {s}))",     # rare
                  "else:",
                  f"    {ch} = []",
                  "    " + self.new(arr, repr(fd.name), "'array'", n, s, "0", ch),
                  f"    {out}.append({arr})",
                  f"    for {i} in range({n}):")
        return ch, arr

    def errors_only_elements(self, fd: FieldDef, plan: _Plan, n: str, s: str, i: str, out: str, ind: int) -> None:
        """An array whose elements keep non-zero error codes and their companions alone
        (_Plan.errors_only): each element is read for its error codes only, and the rare
        one with a non-zero code is decoded again by the plan, which builds its Field."""
        tname = fd.struct or fd.name
        ch, arr = self.kept_array(fd, n, s, i, out, ind)
        e, ech, es, hit = (self.var(x) for x in ("e", "ech", "es", "hit"))
        pl = self.const("plan", plan)
        self.emit(ind, f"        {es} = p",
                  f"        {hit} = False")
        saved, self.detect = self.detect, hit
        # nothing is kept while detecting (companions are off, tags keep nothing): ``ch`` stays as it is
        self.struct(fd.fields, tname, ch, ind + 2)
        self.detect = saved
        self.emit(ind, f"        if {hit}:",
                  f"            {ech} = []",
                  "            " + self.new(e, f"_IDX[{i}] if {i} < 256 else f'[{{{i}}}]'", repr(tname), "None",
                                            es, f"p - {es}", ech),
                  f"            {ch}.append({e})",
                  f"            _run({pl}, buf, {es}, end, {ech})",
                  f"    {arr}.length = p - {s}")

    def primitive_elements(self, el: str, eop: Op, n: str, out: str, ind: int) -> None:
        fixed = _FIXED.get(el)
        if fixed is not None:
            self.emit(ind, f"if {n} > 0:",      # within end: the count was checked (elements of this size)
                      f"    p += {n} * {fixed[1]}")
            return
        i = self.var("i")
        self.emit(ind, f"for {i} in range({n}):")
        if el == "string":
            self.skip_sized("[]", ind + 1, wide=False)
        else:
            op = self.const("op", eop)
            self.emit(ind + 1, f"p = {op}(buf, p, end, {out})")


def _records_failed(name: str, pos: int, length: int, e: Exception, ctx: DecodeContext) -> Field:
    """The Field of a records field whose decoder raised (a bug there must not lose the frame)."""
    f = Field(name, "bytes", None, pos, length)
    f.mark_malformed(f"records decoder failed: {type(e).__name__}: {e}", ctx)
    return f


GenFn = Callable[[bytes, int, int, list, DecodeContext], int]


def _generate(fields: tuple[FieldDef, ...], version: int, flexible: bool, type_name: str) -> GenFn:
    """The generated decoder of a body."""
    src = _Source(version, flexible)
    src.struct(fields, type_name, "out", 2)
    body = src.lines
    src.lines = ["def decode(buf, p, end, out, ctx):", "    limit = ctx.max_array_len"]
    if src.has_records:
        # the records decoder counts in ctx: undone before the plan decodes again
        src.emit(1, "saved = ctx.malformed, ctx.crc_valid, ctx.crc_invalid, dict(ctx.limits_hit)",
                 "try:")
        src.lines += body
        src.emit(1, "except Exception:",
                 "    ctx.malformed, ctx.crc_valid, ctx.crc_invalid, lh = saved",
                 "    ctx.limits_hit.clear()",
                 "    ctx.limits_hit.update(lh)",
                 "    raise")
    else:
        src.lines += [line[4:] for line in body]
    src.emit(1, "return p")
    text = "\n".join(["\n".join(f) for f in (*src.functions, src.lines)])
    exec(compile(text, f"<digest {type_name}>", "exec"), src.env)
    # the tag tables name functions that exist only now
    for table in src.tag_tables:
        src.env[table] = {tag: fn if fn.__class__ is int else src.env[fn] for tag, fn in src.env[table].items()}
    return src.env["decode"]


def _gen_tagged(fns: dict[int, Callable | int], buf: bytes, pos: int, end: int, out: list, ctx: DecodeContext,
                limit: int) -> int:
    """A non-empty tagged-field section, for generated code: ``_tagged`` with generated
    functions for the known tags (or, for a fixed-size field not kept, its size: no call),
    raising _Fallback where ``_tagged`` reports bad bytes."""
    start = pos
    if pos < end and buf[pos] < 0x80:
        n = buf[pos]
        pos += 1
    else:
        n, pos = read_uvarint(buf, pos, end)
    if n == 0:
        return pos
    if n > end - pos:
        raise _Fallback
    kept: list[Field] = []
    for _ in range(n):
        if pos + 1 < end and buf[pos] < 0x80 and buf[pos + 1] < 0x80:     # one-byte tag and size
            tag, size = buf[pos], buf[pos + 1]
            pos += 2
        else:
            tag, pos = read_uvarint(buf, pos, end)
            size, pos = read_uvarint(buf, pos, end)
        if size > end - pos:
            raise _Fallback
        fn = fns.get(tag)
        if fn is not None:
            if not isinstance(fn, int):
                fn(buf, pos, pos + size, kept, ctx, limit)
            elif size < fn:
                raise _Fallback
        pos += size
    if kept:
        out.append(Field("tagged_fields", "tagged_fields", n, start, pos - start, kept))
    return pos


# -- entry points ---------------------------------------------------------------------------

def _clamp(api: ApiDef, version: int) -> int:
    if version > api.max_version:
        return api.max_version
    if version < api.min_version:
        return max(version, 0)
    return version


class _BodyDef:
    """What decodes one (api, version, direction) body: the plan and its generated twin."""
    __slots__ = ("api", "version", "type_name", "root_type", "plan", "fast")

    def __init__(self, api: ApiDef, version: int, request: bool) -> None:
        flexible = is_flexible(api, version)
        fields = api.request if request else api.response
        self.api = api
        self.version = version
        self.type_name = f"{api.name}{'Request' if request else 'Response'} v{version}"
        self.root_type = f"{api.name}{'Request' if request else 'Response'}"
        self.plan = _compile(fields, version, flexible, self.type_name)
        self.fast = _generate(fields, version, flexible, self.type_name) if _GENERATED else None


# (api_key, version, request) -> its _BodyDef; the entry points also cache by the version
# on the wire (before clamping), which saves the clamping per message (a response: with the
# length of its header when it has no tagged fields, 4 or 5, and what else it takes:
# _LEARN or _PROBE, worked out once per pair rather than tested per message)
_BODIES: dict[tuple[int, int, bool], _BodyDef] = {}
_REQUESTS: dict[tuple[int, int], _BodyDef] = {}
_RESPONSES: dict[tuple[int, int], tuple[_BodyDef, int, int]] = {}
_LEARN = 1      # Metadata, CreateTopics, DescribeTopicPartitions: they teach topic ids
_PROBE = 2      # ApiVersions v1+: an UNSUPPORTED_VERSION answer may be in the v0 layout


def _body_def(api: ApiDef, version: int, request: bool) -> _BodyDef:
    bd = _BODIES.get((api.key, version, request))
    if bd is None or bd.api is not api:
        bd = _BODIES[(api.key, version, request)] = _BodyDef(api, version, request)
    return bd


def _set_generated(on: bool) -> None:
    """Use the generated decoders (the default) or the plans alone (the tests' reference)."""
    global _GENERATED
    _GENERATED = on
    _BODIES.clear()
    _REQUESTS.clear()
    _RESPONSES.clear()


def _decode(bd: _BodyDef, buf: bytes, start: int, end: int, ctx: DecodeContext) -> Field:
    children: list[Field] = []
    cur = _cur
    cur.ctx = ctx       # read by the plan's ops, which generated code calls too
    cur.errs = []
    try:
        if bd.fast is None:
            pos = _run(bd.plan, buf, start, end, children)
        else:
            try:
                pos = bd.fast(buf, start, end, children, ctx)
            except Exception:   # bad bytes (mostly): the plan decodes and reports them
                _stats.fallbacks += 1
                del children[:]
                cur.errs = []
                pos = _run(bd.plan, buf, start, end, children)
    except _Bad as e:
        bad = Field(e.name, e.typ, None, e.offset, max(0, end - e.offset))
        bad.mark_malformed(e.reason, ctx)
        e.out.append(bad)
        for c in children:
            _fix_lengths(c)
        body = Field("body", bd.type_name, None, start, end - start, children)
        body.extra = {"malformed_at": e.offset}
        # the codes of the tree bad bytes leave (a tag section cut short is not in it)
        cur.errs = error_codes(body)
        return body
    if pos < end:
        ctx.trailing += 1
        pos = end
    # Field("body", bd.type_name, None, start, pos - start, children) without the call of
    # __init__, as generated code builds its Fields (see _Source.new): twice per exchange
    body = _new(Field)
    body.name, body.type, body.value, body.offset, body.length = "body", bd.type_name, None, start, pos - start
    body.children, body.notes, body.extra = children, None, None
    return body


def _body(api: ApiDef, version: int, request: bool, buf: bytes, start: int, end: int,
          ctx: DecodeContext) -> Field:
    return _decode(_body_def(api, version, request), buf, start, end, ctx)


_HH = struct.Struct(">hh").unpack_from
_new = object.__new__

# The digest roots hold the body only: a well-formed header has nothing a reader of the
# digest wants (the pipeline parsed it already), so its Field is built only to carry a
# malformed note.


def digest_request(data: bytes, header_len: int, ctx: DecodeContext) -> Field:
    """The digest tree of a request whose header (already parsed) is ``header_len`` bytes."""
    buf = data if data.__class__ is bytes else bytes(data)
    n = len(buf)
    if n < 8:
        header = Field("header", "RequestHeader", None, 0, header_len)
        header.mark_malformed(f"request header needs 8 bytes, {n} present", ctx)
        return Field("request", "Request", None, 0, n, [header])
    key = _HH(buf, 0)       # (api_key, api_version)
    bd = _REQUESTS.get(key)
    if bd is None or bd.api is not APIS.get(key[0]):
        api = APIS.get(key[0])
        if api is None:
            return Field("request", "Request", None, 0, n, [])
        bd = _REQUESTS[key] = _body_def(api, _clamp(api, key[1]), True)
    return _root("request", bd, buf, header_len, n, ctx, 0)


def _root(name: str, bd: _BodyDef, buf: bytes, start: int, n: int, ctx: DecodeContext, then: int) -> Field:
    """The digest root ``name`` of the body ``buf[start:n]`` (``then``: what else the body
    takes, _LEARN or _PROBE): remembered from an earlier identical body if there is one (see
    "the memo" below), else decoded (and remembered)."""
    if then == _PROBE and n - start >= 2 and _I16.unpack_from(buf, start)[0] == 35:
        body = _api_versions_unsupported(bd.api, bd.version, buf, start, n, ctx)
        body_bytes = memo = counts = None
    else:
        memo = ctx.digest_memo
        if n - start <= MEMO_MAX_BODY:
            body_bytes = buf[start:]
            if memo is None:
                memo = ctx.digest_memo = {}
            hit = memo.get(body_bytes)
            if hit is not None and hit[0] is bd and hit[1] == start:
                if hit[3]:
                    _replay(hit, ctx)
                root = hit[2]
                if then == _LEARN:
                    learn_topic_ids(root.children[0], ctx, annotate=False)
                return root
        else:
            body_bytes = None
        counts = (ctx.malformed, ctx.crc_valid, ctx.crc_invalid, ctx.trailing, _limits(ctx))
        body = _decode(bd, buf, start, n, ctx)
        if then == _LEARN:
            learn_topic_ids(body, ctx, annotate=False)
    root = _new(ErrorsRoot)     # Field(name, bd.root_type, None, 0, n, [body]) without __init__
    root.name, root.type, root.value, root.offset, root.length = name, bd.root_type, None, 0, n
    root.children, root.notes, root.extra = [body], None, None
    root.error_codes = _cur.errs
    if body_bytes is not None:
        assert memo is not None and counts is not None      # set with body_bytes
        _remember(memo, body_bytes, bd, start, root, body, counts, ctx)
    return root


# -- the memo: a body decoded once per run -------------------------------------------------
# Clients repeat themselves: every connection's ApiVersions, the Metadata refreshes, the
# heartbeats, the long-poll Fetch that finds nothing, the OffsetCommit of an idle consumer
# carry the same body bytes again and again (a third of the bodies of the shared real
# captures, most of those of an idle consumer group). The digest of a body is a function of
# its bytes, of where it starts (the offsets in the tree) and of the run's limits, so a
# body seen before (the same API and version, at the same offset) takes the digest root
# made for it then: one dict lookup instead of a decode. The root's Fields are shared by
# the exchanges that carry those bytes; nothing changes a digest tree once made (only
# malformed ones are marked afterwards, and those are not remembered). What a decode adds
# to the run's counters (CRC verdicts of records, trailing bytes) is added again on a hit;
# a decode that found bad bytes or hit a limit is not remembered. Topic ids a Metadata
# answer teaches are learnt again on every hit (the clock of analyzer.shards.TopicNames
# sees each). Bounded: bodies of at most MEMO_MAX_BODY bytes, MEMO_MAX_ENTRIES of them,
# forgotten all at once when full (at most ~16 MB).
MEMO_MAX_BODY = 4096
MEMO_MAX_ENTRIES = 4096


def _limits(ctx: DecodeContext) -> int:
    return sum(ctx.limits_hit.values()) if ctx.limits_hit else 0


def _remember(memo: dict[bytes, tuple], body_bytes: bytes, bd: _BodyDef, start: int, root: Field,
              body: Field, counts: tuple[int, int, int, int, int], ctx: DecodeContext) -> None:
    """Remember ``root`` (whose child is ``body``) for ``body_bytes``."""
    malformed, valid, invalid, trailing, limits = counts
    if ctx.malformed != malformed or _limits(ctx) != limits or body.extra is not None:
        return
    if len(memo) >= MEMO_MAX_ENTRIES:
        memo.clear()
    adds = (ctx.crc_valid - valid, ctx.crc_invalid - invalid, ctx.trailing - trailing)
    memo[body_bytes] = (bd, start, root, adds if any(adds) else None)


def _replay(hit: tuple, ctx: DecodeContext) -> None:
    valid, invalid, trailing = hit[3]
    ctx.crc_valid += valid
    ctx.crc_invalid += invalid
    ctx.trailing += trailing


def _header_tags(buf: bytes, pos: int, end: int, out: list) -> int:
    if pos < end and buf[pos] == 0:     # the usual empty section
        return pos + 1
    return _tagged({}, buf, pos, end, out)


def digest_response(data: bytes, api_key: int, api_version: int, ctx: DecodeContext) -> Field:
    """The digest tree of a response to a request of ``api_key`` v``api_version``."""
    buf = data if data.__class__ is bytes else bytes(data)
    n = len(buf)
    hit = _RESPONSES.get((api_key, api_version))
    if hit is None or hit[0].api is not APIS.get(api_key):
        api = APIS.get(api_key)
        if api is None:
            return response_header(buf, api_key, api_version, ctx, _header_tags, with_correlation_id=False)[0]
        bd = _body_def(api, _clamp(api, api_version), False)
        then = _LEARN if api_key in (3, 19, 75) else _PROBE if api_key == 18 and bd.version > 0 else 0
        hit = _RESPONSES[(api_key, api_version)] = (bd, 4 + response_header_version(api_key, api_version), then)
    bd, pos, then = hit
    if n < pos or (pos == 5 and buf[4] != 0):   # short, or header tagged fields: read as the full decoder
        root, _api, p = response_header(buf, api_key, api_version, ctx, _header_tags, with_correlation_id=False)
        if p is None:
            return root
        pos = p
    return _root("response", bd, buf, pos, n, ctx, then)


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
