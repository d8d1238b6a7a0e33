"""The one generic decoder: walks a declarative FieldDef table, returns Field trees.

Every (field table, version, flexible) is compiled once, on first use, into a flat
list of closures ("ops"); decoding a message runs those ops over the frame bytes.
Consecutive fixed-size primitives are read with one precompiled ``struct.Struct``.

An op has the signature ``op(buf, pos, end, out, st) -> new_pos``: it reads from
``buf[pos:end]``, appends the Field(s) it decoded to the list ``out`` and returns the
position after them. Bad bytes raise the internal ``_Bad``, which the entry point
turns into a ``malformed:`` Field at the spot where decoding stopped, keeping every
field decoded before it.

Offsets are absolute indexes into ``buf``; callers pass the frame after its 4-byte
size prefix, so offsets are relative to the frame start.

A frame cut short by the capture (snaplen) is decoded as far as its captured bytes go:
``State.slack`` is how many of its declared bytes are missing after ``State.cap_end`` (the
captured end). Counts and lengths are checked against the declared size, so arrays,
strings, bytes and records show what was captured; running out of bytes at the captured
end stops decoding without a ``malformed:`` note (the caller notes the cut once).
"""
from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from dissectors import annotate
from dissectors.context import DecodeContext
from dissectors.field import Field
from dissectors.schema import ApiDef, FieldDef, in_range, is_flexible

Op = Callable[[bytes, int, int, list, "State"], int]


class State:
    """What one message's decoding shares between its ops."""

    __slots__ = ("ctx", "api_key", "depth", "deferred", "slack", "cap_end")

    def __init__(self, ctx: DecodeContext, api_key: int | None = None, slack: int = 0,
                 cap_end: int = -1) -> None:
        self.ctx = ctx
        self.api_key = api_key
        self.depth = 0
        # a frame cut by the capture: its bytes missing after cap_end (0: a whole frame)
        self.slack = slack
        self.cap_end = cap_end
        # (field, meaning) pairs whose nested payloads the caller decodes afterwards
        self.deferred: list[tuple[Field, str]] = []


class _Bad(Exception):
    """Bad protocol bytes: where decoding stops. ``at_end``: the bytes ran out at that
    end (a cut, not bad bytes, when it is the captured end of a frame cut by the capture)."""

    def __init__(self, reason: str, name: str, typ: str, offset: int, out: list,
                 limit: str | None = None, at_end: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.name = name
        self.typ = typ
        self.offset = offset
        self.out = out
        self.limit = limit
        self.at_end = at_end


def _room(st: State, end: int) -> int:
    """Bytes the capture cut off after ``end`` (0 unless ``end`` is a cut frame's captured end)."""
    return st.slack if end == st.cap_end else 0


def is_cut(e: _Bad, st: State) -> bool:
    """Did decoding stop because a frame cut by the capture ran out of captured bytes?"""
    return st.slack > 0 and e.at_end is not None and e.at_end == st.cap_end


# ---------------------------------------------------------------------------
# varints
# ---------------------------------------------------------------------------

def read_uvarint(buf: bytes, pos: int, end: int, max_bytes: int = 5) -> tuple[int, int]:
    """An unsigned LEB128 varint at ``pos``: (value, next position).

    Raises ValueError when it runs past ``end`` or is longer than ``max_bytes``.
    """
    result = 0
    shift = 0
    for i in range(max_bytes):
        if pos >= end:
            raise ValueError("varint runs past the end of the message")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if i == max_bytes - 1:
            break
    raise ValueError(f"varint longer than {max_bytes} bytes")


def _uvar(buf: bytes, pos: int, end: int, name: str, typ: str, out: list, max_bytes: int = 5) -> tuple[int, int]:
    try:
        return read_uvarint(buf, pos, end, max_bytes)
    except ValueError as e:
        raise _Bad(str(e), name, typ, pos, out,
                   at_end=end if str(e).startswith("varint runs past") else None) from None


def _zigzag(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


def _uuid_str(b: bytes) -> str:
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


_IDX = [f"[{i}]" for i in range(4096)]


def _idx(i: int) -> str:
    return _IDX[i] if i < 4096 else f"[{i}]"


def _text(raw: bytes) -> tuple[str, bool]:
    try:
        return raw.decode(), True
    except UnicodeDecodeError:
        return raw.decode(errors="replace"), False


# ---------------------------------------------------------------------------
# compiled plans
# ---------------------------------------------------------------------------

class Plan:
    """A compiled struct: its ops, its tagged fields, the least bytes it occupies."""

    __slots__ = ("ops", "tags", "flexible", "min_size", "type_name")

    def __init__(self, ops: list[Op], tags: dict[int, Op], flexible: bool, min_size: int,
                 type_name: str) -> None:
        self.ops = ops
        self.tags = tags
        self.flexible = flexible
        self.min_size = min_size
        self.type_name = type_name


def run_plan(plan: Plan, buf: bytes, pos: int, end: int, out: list, st: State) -> int:
    for op in plan.ops:
        pos = op(buf, pos, end, out, st)
    if plan.flexible:
        if pos < end and buf[pos] == 0:  # the usual empty tagged-field section
            out.append(Field("tagged_fields", "tagged_fields", 0, pos, 1))
            return pos + 1
        pos = read_tagged(plan.tags, buf, pos, end, out, st, True)
    return pos


def read_tagged(tags: dict[int, Op], buf: bytes, pos: int, end: int, out: list, st: State,
                always: bool) -> int:
    """A tagged-field section; a ``tagged_fields`` Field is added when it holds any
    (or always, when ``always``). Known tags decode by their FieldDef, with a ``tag <n>``
    note first; unknown ones are kept as raw ``tag_<n>`` bytes."""
    start = pos
    if pos < end and buf[pos] < 0x80:
        n = buf[pos]
        pos += 1
    else:
        n, pos = _uvar(buf, pos, end, "tagged_fields", "tagged_fields", out)
    if n == 0:
        if always:
            out.append(Field("tagged_fields", "tagged_fields", 0, start, pos - start))
        return pos
    children: list[Field] = []
    container = Field("tagged_fields", "tagged_fields", n, start, 0, children)
    out.append(container)
    if n > end - pos + _room(st, end):
        raise _Bad(f"tagged field count {n} exceeds the {end - pos} bytes left",
                   "tagged_fields", "tagged_fields", start, out)
    for _ in range(n):
        tstart = pos
        tag, pos = _uvar(buf, pos, end, "tag", "tag", children)
        size, pos = _uvar(buf, pos, end, f"tag_{tag}", "bytes", children)
        if size > end - pos:
            raise _Bad(f"tagged field {tag} size {size} exceeds the {end - pos} bytes left",
                       f"tag_{tag}", "bytes", tstart, children,
                       at_end=end if size <= end - pos + _room(st, end) else None)
        op = tags.get(tag)
        if op is None:
            f = Field(f"tag_{tag}", "bytes", buf[pos:pos + size], pos, size)
            f.note(f"unknown tagged field {tag}")
            children.append(f)
        else:
            first = len(children)
            done = op(buf, pos, pos + size, children, st)
            if len(children) > first:
                f = children[first]
                f.notes = [f"tag {tag}"] + (f.notes or [])
            if done != pos + size and children:
                children[-1].note(f"tagged field {tag}: {pos + size - done} bytes left unread")
        pos += size
    container.length = pos - start
    return pos


_FIXED = {
    "int8": ("b", 1), "int16": ("h", 2), "int32": ("i", 4), "int64": ("q", 8),
    "uint16": ("H", 2), "uint32": ("I", 4), "float64": ("d", 8), "bool": ("B", 1),
    "uuid": ("16s", 16),
}
_SINGLE = {t: struct.Struct(">" + c) for t, (c, _) in _FIXED.items()}


def _conv(typ: str) -> Callable[[Any], Any] | None:
    if typ == "bool":
        return bool
    if typ == "uuid":
        return _uuid_str
    return None


def _fixed_group(specs: list[tuple[str, str, Callable | None, str | None]]) -> Op:
    """One op for a run of fixed-size primitives ``(name, type, conv, meaning)``: a
    single unpack.

    The op is generated source (names and offsets as constants, one statement per
    field): this is the decoder's hottest path. Annotations that are one note looked
    up from the value (API names, enums) and error codes are built into the Field
    construction; other meanings call their annotator after it.
    """
    fmt = ">" + "".join(_FIXED[t][0] for _, t, _, _ in specs)
    st_ = struct.Struct(fmt)
    size = st_.size
    rows = []
    off = 0
    for name, typ, conv, meaning in specs:
        ln = _FIXED[typ][1]
        rows.append((name, typ, off, ln, conv, meaning))
        off += ln
    rows_t = tuple(rows)
    env: dict[str, Any] = {"Field": Field, "_short": _short, "rows": rows_t, "unpack_from": st_.unpack_from,
                           "errors": annotate.ERROR_NOTES}
    vals = ", ".join(f"v{i}" for i in range(len(rows_t)))
    lines = [
        "def op(buf, pos, end, out, st):",
        f"    if pos + {size} > end:",
        "        _short(rows, buf, pos, end, out)",
        f"    {vals}, = unpack_from(buf, pos)",
    ]
    plain: list[str] = []
    for i, (name, typ, off, ln, conv, meaning) in enumerate(rows_t):
        env[f"n{i}"], env[f"t{i}"] = name, typ
        value = f"v{i}"
        if conv is not None:
            env[f"c{i}"] = conv
            value = f"c{i}(v{i})"
        table = annotate.note_table(meaning) if conv is None else None
        ann = annotate.annotator(meaning) if table is None else None
        if table is not None:
            env[f"m{i}"] = table
            make = f"Field(n{i}, t{i}, v{i}, pos + {off}, {ln}, None, [m{i}[v{i}]])"
        elif meaning == "error_code" and conv is None:
            make = (f"Field(n{i}, t{i}, v{i}, pos + {off}, {ln}, None, [errors[v{i}]], "
                    f"{{'error_code': v{i}}} if v{i} else None)")
            ann = None
        else:
            make = f"Field(n{i}, t{i}, {value}, pos + {off}, {ln})"
        if ann is None:
            plain.append(make)
            continue
        if plain:
            lines.append(f"    out.extend(({', '.join(plain)},))")
            plain = []
        env[f"a{i}"] = ann
        lines += [f"    f{i} = {make}", f"    out.append(f{i})", f"    a{i}(f{i}, st, out)"]
    if plain:
        lines.append(f"    out.extend(({', '.join(plain)},))")
    lines.append(f"    return pos + {size}")
    exec(compile("\n".join(lines), f"<fixed group {'/'.join(r[0] for r in rows_t)}>", "exec"), env)
    return env["op"]


def _short(rows: tuple, buf: bytes, pos: int, end: int, out: list) -> None:
    """Decode what fits of a fixed run (with the notes looked up from the value), then raise
    at the first field that does not."""
    for name, typ, off, ln, conv, meaning in rows:
        p = pos + off
        if p + ln > end:
            raise _Bad(f"{typ} needs {ln} bytes, {max(0, end - p)} left", name, typ, p, out, at_end=end)
        v = _SINGLE[typ].unpack_from(buf, p)[0]
        f = Field(name, typ, v if conv is None else conv(v), p, ln)
        table = annotate.ERROR_NOTES if meaning == "error_code" else annotate.note_table(meaning)
        if table is not None and conv is None:
            f.note(table[v])
        out.append(f)
    raise AssertionError("unreachable")  # pragma: no cover


def _varint_op(name: str, typ: str, ann: Callable | None) -> Op:
    max_bytes = 5 if typ == "varint" else 10

    def op(buf: bytes, pos: int, end: int, out: list, st: State) -> int:
        raw, p = _uvar(buf, pos, end, name, typ, out, max_bytes)
        f = Field(name, typ, _zigzag(raw), pos, p - pos)
        out.append(f)
        if ann is not None:
            ann(f, st, out)
        return p
    return op


def _len_prefix(flexible: bool, wide: bool) -> Callable[[bytes, int, int, str, str, list], tuple[int, int]]:
    """A reader of a length/count prefix: returns (length or -1 for null, next pos)."""
    if flexible:
        def rd(buf: bytes, pos: int, end: int, name: str, typ: str, out: list) -> tuple[int, int]:
            if pos < end and buf[pos] < 0x80:
                return buf[pos] - 1, pos + 1
            n, p = _uvar(buf, pos, end, name, typ, out)
            return n - 1, p
        return rd
    fmt = struct.Struct(">i" if wide else ">h")
    size = fmt.size
    unpack_from = fmt.unpack_from

    def rd_fixed(buf: bytes, pos: int, end: int, name: str, typ: str, out: list) -> tuple[int, int]:
        if pos + size > end:
            raise _Bad(f"{typ} length needs {size} bytes, {max(0, end - pos)} left", name, typ, pos, out,
                       at_end=end)
        n = unpack_from(buf, pos)[0]
        if n < -1:
            raise _Bad(f"{typ} length {n} is negative", name, typ, pos, out)
        return n, pos + size
    return rd_fixed


def _string_op(name: str, flexible: bool, nullable: bool, ann: Callable | None) -> Op:
    rd = _len_prefix(flexible, False)

    def op(buf: bytes, pos: int, end: int, out: list, st: State) -> int:
        # the common short prefix read inline; rd() handles the rest and the errors
        if flexible and pos < end and buf[pos] < 0x80:
            n, p = buf[pos] - 1, pos + 1
        elif not flexible and pos + 2 <= end and buf[pos] < 0x80:
            n, p = (buf[pos] << 8) | buf[pos + 1], pos + 2
        else:
            n, p = rd(buf, pos, end, name, "string", out)
        if n < 0:
            f = Field(name, "string", None, pos, p - pos)
            if not nullable:
                f.note("null in a non-nullable string")
        else:
            if n > end - p:
                if n <= end - p + _room(st, end):
                    # cut by the capture: the part that was captured
                    out.append(Field(name, "string", _text(buf[p:end])[0], pos, end - pos))
                    raise _Bad("string cut by the capture", name, "string", pos, out, at_end=end)
                raise _Bad(f"string length {n} exceeds the {end - p} bytes left", name, "string", pos, out)
            raw = buf[p:p + n]
            try:
                v = raw.decode()
            except UnicodeDecodeError:
                v = raw.decode(errors="replace")
                p += n
                f = Field(name, "string", v, pos, p - pos)
                f.note("invalid UTF-8")
                out.append(f)
                if ann is not None:
                    ann(f, st, out)
                return p
            p += n
            f = Field(name, "string", v, pos, p - pos)
        out.append(f)
        if ann is not None:
            ann(f, st, out)
        return p
    return op


def _bytes_op(name: str, flexible: bool, nullable: bool, ann: Callable | None,
              deferred: str | None) -> Op:
    rd = _len_prefix(flexible, True)

    def op(buf: bytes, pos: int, end: int, out: list, st: State) -> int:
        n, p = rd(buf, pos, end, name, "bytes", out)
        if n < 0:
            f = Field(name, "bytes", None, pos, p - pos)
            if not nullable:
                f.note("null in non-nullable bytes")
            out.append(f)
            return p
        if n > end - p:
            if n <= end - p + _room(st, end):
                out.append(Field(name, "bytes", buf[p:end], pos, end - pos))
                raise _Bad("bytes cut by the capture", name, "bytes", pos, out, at_end=end)
            raise _Bad(f"bytes length {n} exceeds the {end - p} bytes left", name, "bytes", pos, out)
        f = Field(name, "bytes", buf[p:p + n], pos, p + n - pos)
        out.append(f)
        if deferred is not None:
            # nested payload: remember where its content starts
            f.extra = {"data_offset": p}
            st.deferred.append((f, deferred))
        if ann is not None:
            ann(f, st, out)
        return p + n
    return op


_records_fn: Any = None


def _records_decoder() -> Any:
    global _records_fn
    if _records_fn is None:
        try:
            from dissectors.records import decode_records
        except ImportError:
            return None
        _records_fn = decode_records
    return _records_fn


def _records_op(name: str, flexible: bool) -> Op:
    rd = _len_prefix(flexible, True)

    def op(buf: bytes, pos: int, end: int, out: list, st: State) -> int:
        n, p = rd(buf, pos, end, name, "records", out)
        fn = _records_decoder() if st.ctx.presentation.decode_records else None
        if n < 0:
            f = None
            if fn is not None:
                try:
                    f = fn(buf, p, p, st.ctx, name, null=True)
                    f.offset, f.length = pos, p - pos
                except Exception:
                    f = None
            out.append(f if f is not None else Field(name, "records", None, pos, p - pos))
            return p
        if n > end - p:
            if n <= end - p + _room(st, end):
                # cut by the capture: the batches captured (the last one partial)
                f = None
                if fn is not None:
                    try:
                        f = fn(buf, p, end, st.ctx, name)
                        f.offset, f.length = pos, end - pos
                    except Exception:
                        f = None
                out.append(f if f is not None else Field(name, "bytes", buf[p:end], pos, end - pos))
                raise _Bad("records cut by the capture", name, "records", pos, out, at_end=end)
            raise _Bad(f"records length {n} exceeds the {end - p} bytes left", name, "records", pos, out)
        if fn is None:
            f = Field(name, "bytes", buf[p:p + n], pos, p + n - pos)
            if st.ctx.presentation.decode_records:
                f.note("records decoder unavailable: kept as raw bytes")
            out.append(f)
            return p + n
        try:
            f = fn(buf, p, p + n, st.ctx, name)
        except Exception as e:  # a bug there must not lose the frame
            f = Field(name, "bytes", buf[p:p + n], pos, p + n - pos)
            f.mark_malformed(f"records decoder failed: {type(e).__name__}: {e}", st.ctx)
        out.append(f)
        return p + n
    return op


def _array_op(name: str, flexible: bool, nullable: bool, elem_type: str, elem_plan: Plan | None,
              elem_op: Op | None, elem_min: int) -> Op:
    rd = _len_prefix(flexible, True)
    fixed = _FIXED.get(elem_type) if elem_plan is None else None
    fast_fmt = fixed[0] if fixed is not None and elem_type not in ("uuid", "bool") else None
    esize = fixed[1] if fixed is not None else 0

    def head(buf: bytes, pos: int, end: int, out: list, st: State) -> tuple[int, int]:
        n, p = rd(buf, pos, end, name, "array", out)
        if n > st.ctx.limits.max_array_len:
            st.ctx.counts.hit_limit("max_array_len")
            raise _Bad(f"array count {n} exceeds max_array_len {st.ctx.limits.max_array_len}",
                       name, "array", pos, out, limit="max_array_len")
        if n * elem_min > end - p + _room(st, end):
            raise _Bad(f"array count {n} exceeds the {end - p} bytes left", name, "array", pos, out)
        return n, p

    if elem_plan is not None:
        tname = elem_plan.type_name
        eops, eflex, etags = tuple(elem_plan.ops), elem_plan.flexible, elem_plan.tags

        def op(buf: bytes, pos: int, end: int, out: list, st: State) -> int:
            n, p = head(buf, pos, end, out, st)
            if n < 0:
                f = Field(name, "array", None, pos, p - pos)
                if not nullable:
                    f.note("null in a non-nullable array")
                out.append(f)
                return p
            children: list[Field] = []
            arr = Field(name, "array", n, pos, 0, children)
            out.append(arr)
            st.depth += 1
            if st.depth > st.ctx.limits.max_depth:
                st.ctx.counts.hit_limit("max_depth")
                raise _Bad(f"nesting depth exceeds max_depth {st.ctx.limits.max_depth}", name, "array", pos, out,
                           limit="max_depth")
            for i in range(n):
                ech: list[Field] = []
                e = Field(_IDX[i] if i < 4096 else f"[{i}]", tname, None, p, 0, ech)
                children.append(e)
                q = p
                for o in eops:
                    q = o(buf, q, end, ech, st)
                if eflex:
                    if q < end and buf[q] == 0:
                        ech.append(Field("tagged_fields", "tagged_fields", 0, q, 1))
                        q += 1
                    else:
                        q = read_tagged(etags, buf, q, end, ech, st, True)
                e.length = q - p
                p = q
            st.depth -= 1
            arr.length = p - pos
            return p
        return op

    if fast_fmt is not None:
        def op(buf: bytes, pos: int, end: int, out: list, st: State) -> int:
            n, p = head(buf, pos, end, out, st)
            if n < 0:
                f = Field(name, "array", None, pos, p - pos)
                if not nullable:
                    f.note("null in a non-nullable array")
                out.append(f)
                return p
            count = n
            cut = p + n * esize > end
            if cut:       # cut by the capture (head checked the count against the declared size)
                n = (end - p) // esize
            vals = struct.unpack_from(f">{n}{fast_fmt}", buf, p)
            if n <= 4096:
                children = [Field(_IDX[i], elem_type, v, p + i * esize, esize) for i, v in enumerate(vals)]
            else:
                children = [Field(_idx(i), elem_type, v, p + i * esize, esize) for i, v in enumerate(vals)]
            q = p + n * esize
            out.append(Field(name, "array", count, pos, q - pos, children))
            if cut:
                raise _Bad("array cut by the capture", name, "array", q, out, at_end=end)
            return q
        return op

    assert elem_op is not None

    def op_each(buf: bytes, pos: int, end: int, out: list, st: State) -> int:
        n, p = head(buf, pos, end, out, st)
        if n < 0:
            f = Field(name, "array", None, pos, p - pos)
            if not nullable:
                f.note("null in a non-nullable array")
            out.append(f)
            return p
        children: list[Field] = []
        arr = Field(name, "array", n, pos, 0, children)
        out.append(arr)
        for i in range(n):
            p = elem_op(buf, p, end, children, st)
            children[-1].name = _idx(i)
        arr.length = p - pos
        return p
    return op_each


def _struct_op(name: str, plan: Plan, nullable: bool) -> Op:
    tname = plan.type_name

    def op(buf: bytes, pos: int, end: int, out: list, st: State) -> int:
        p = pos
        if nullable:
            if p >= end:
                raise _Bad("struct presence byte missing", name, tname, pos, out, at_end=end)
            marker = buf[p]
            p += 1
            if marker == 0xFF:
                out.append(Field(name, tname, None, pos, 1))
                return p
        children: list[Field] = []
        f = Field(name, tname, None, pos, 0, children)
        out.append(f)
        st.depth += 1
        if st.depth > st.ctx.limits.max_depth:
            st.ctx.counts.hit_limit("max_depth")
            raise _Bad(f"nesting depth exceeds max_depth {st.ctx.limits.max_depth}", name, tname, pos, out,
                       limit="max_depth")
        p = run_plan(plan, buf, p, end, children, st)
        st.depth -= 1
        f.length = p - pos
        return p
    return op


def _unsupported_op(name: str, typ: str) -> Op:
    def op(buf: bytes, pos: int, end: int, out: list, st: State) -> int:
        raise _Bad(f"type {typ!r} is not supported by the decoder", name, typ, pos, out)
    return op


# the meanings of bytes fields whose payload dissectors.kafka decodes after the body (_nested)
NESTED_MEANINGS = frozenset({"consumer_subscription", "consumer_assignment", "sasl_auth_bytes", "sasl_server_bytes"})

_MIN_SIZE = {"string": 2, "bytes": 4, "records": 4, "array": 4, "varint": 1, "varlong": 1}


def _min_size(fd: FieldDef, flexible: bool) -> int:
    if fd.type in _FIXED:
        return _FIXED[fd.type][1]
    if flexible and fd.type in ("string", "bytes", "records", "array"):
        return 1
    if fd.type == "struct":
        return 0
    return _MIN_SIZE.get(fd.type, 0)


def _field_op(fd: FieldDef, version: int, flexible: bool) -> tuple[Op, int]:
    """The op decoding one field (regular or tagged) in ``version``; and its least size."""
    nullable = in_range(version, fd.nullable)
    ann = annotate.annotator(fd.meaning)
    t = fd.type
    if t in _FIXED:
        return _fixed_group([(fd.name, t, _conv(t), fd.meaning)]), _FIXED[t][1]
    if t in ("varint", "varlong"):
        return _varint_op(fd.name, t, ann), 1
    if t == "string":
        return _string_op(fd.name, flexible, nullable, ann), _min_size(fd, flexible)
    if t == "bytes":
        deferred = fd.meaning if fd.meaning in NESTED_MEANINGS else None
        return _bytes_op(fd.name, flexible, nullable, ann, deferred), _min_size(fd, flexible)
    if t == "records":
        return _records_op(fd.name, flexible), _min_size(fd, flexible)
    if t == "struct":
        plan = compile_fields(fd.fields, version, flexible, fd.struct or fd.name)
        return _struct_op(fd.name, plan, nullable), (1 if nullable else plan.min_size)
    if t == "array":
        el = fd.element or "struct"
        if el == "struct":
            plan = compile_fields(fd.fields, version, flexible, fd.struct or fd.name)
            emin = max(plan.min_size, 1)
            return _array_op(fd.name, flexible, nullable, el, plan, None, emin), _min_size(fd, flexible)
        efd = FieldDef(name="[]", type=el, versions=(0, 0x7FFF), meaning=fd.meaning)
        eop, emin = _field_op(efd, version, flexible)
        return (_array_op(fd.name, flexible, nullable, el, None, eop, max(emin, 1)),
                _min_size(fd, flexible))
    return _unsupported_op(fd.name, t), 0


_PLANS: dict[tuple[int, int, bool], tuple[tuple[FieldDef, ...], Plan]] = {}


def compile_fields(fields: tuple[FieldDef, ...], version: int, flexible: bool,
                   type_name: str = "struct") -> Plan:
    """The compiled plan of a struct's fields in ``version`` (cached)."""
    key = (id(fields), version, flexible)
    hit = _PLANS.get(key)
    if hit is not None and hit[0] is fields and hit[1].type_name == type_name:
        return hit[1]
    ops: list[Op] = []
    tags: dict[int, Op] = {}
    run: list[tuple[str, str, Callable | None, str | None]] = []
    min_size = 0
    for fd in fields:
        if flexible and fd.tag is not None and (fd.tagged is None or in_range(version, fd.tagged)):
            if fd.tagged is None and not in_range(version, fd.versions):
                continue
            tags[fd.tag], _ = _field_op(fd, version, flexible)
            continue
        if not in_range(version, fd.versions) or (fd.tag is not None and not flexible):
            continue
        if fd.type in _FIXED:
            run.append((fd.name, fd.type, _conv(fd.type), fd.meaning))
            min_size += _FIXED[fd.type][1]
            continue
        if run:
            ops.append(_fixed_group(run))
            run = []
        op, sz = _field_op(fd, version, flexible)
        ops.append(op)
        min_size += sz
    if run:
        ops.append(_fixed_group(run))
    if flexible:
        min_size += 1
    plan = Plan(ops, tags, flexible, min_size, type_name)
    _PLANS[key] = (fields, plan)
    return plan


# ---------------------------------------------------------------------------
# entry points
# ---------------------------------------------------------------------------

def _fix_lengths(f: Field) -> int:
    """After an early stop: stretch containers over the children they hold.

    Records are left alone: their children's offsets may count from decompressed
    data, not from the frame."""
    end = f.offset + f.length
    if f.children and f.type != "records":
        for c in f.children:
            end = max(end, _fix_lengths(c))
        f.length = end - f.offset
    return end


def decode_struct(fields: tuple[FieldDef, ...], version: int, flexible: bool, buf: bytes, start: int,
                  end: int, ctx: DecodeContext, name: str, type_name: str,
                  api_key: int | None = None, st: State | None = None) -> tuple[Field, int]:
    """Decode one struct described by ``fields`` from ``buf[start:end]``.

    Returns the Field (``type_name``, children = the decoded fields) and the position
    where decoding stopped. A malformed spot is marked and ends decoding; the
    returned Field keeps everything decoded before it.
    """
    plan = compile_fields(fields, version, flexible, type_name)
    return _decode_plan(plan, buf, start, end, st if st is not None else State(ctx, api_key), name)


def _decode_plan(plan: Plan, buf: bytes, start: int, end: int, st: State, name: str) -> tuple[Field, int]:
    children: list[Field] = []
    root = Field(name, plan.type_name, None, start, end - start, children)
    st.depth = 1
    try:
        pos = run_plan(plan, buf, start, end, children, st)
    except _Bad as e:
        if is_cut(e, st):
            # the capture cut the frame here: what was captured is decoded, nothing is bad
            for c in children:
                _fix_lengths(c)
            return root, end
        bad = Field(e.name, e.typ, None, e.offset, max(0, end - e.offset))
        bad.mark_malformed(e.reason, st.ctx)
        e.out.append(bad)
        for c in children:
            _fix_lengths(c)
        root.extra = {"malformed_at": e.offset}
        return root, end
    root.length = pos - start
    return root, pos


_BODIES: dict[tuple[int, int, bool], tuple[ApiDef, Plan]] = {}


def decode_body(api: ApiDef, version: int, request: bool, buf: bytes, start: int, end: int,
                ctx: DecodeContext, st: State | None = None) -> Field:
    """The body of one request/response of ``api`` in ``version`` (already clamped to
    the known range by the caller). Trailing bytes are kept as a ``trailing_bytes``
    Field with a note, and counted in ``ctx.counts.trailing``."""
    hit = _BODIES.get((id(api), version, request))
    if hit is None or hit[0] is not api:
        flexible = is_flexible(api, version)
        tname = f"{api.name}{'Request' if request else 'Response'} v{version}"
        plan = compile_fields(api.request if request else api.response, version, flexible, tname)
        _BODIES[(id(api), version, request)] = (api, plan)
    else:
        plan = hit[1]
    body, pos = _decode_plan(plan, buf, start, end, st if st is not None else State(ctx, api.key), "body")
    if pos < end:
        n = end - pos
        t = Field("trailing_bytes", "bytes", buf[pos:end], pos, n)
        t.note(f"{n} trailing bytes after the message")
        body.add(t)
        body.note(f"{n} trailing bytes after the message")
        ctx.counts.trailing += 1
        body.length = end - start
    return body
