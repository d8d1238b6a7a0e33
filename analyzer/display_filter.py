"""Display filters (``-Y/--filter``): choose exchanges as tshark's ``-Y`` chooses packets.

The language, parsed by lark (LALR) from ``GRAMMAR``::

    latency_ms > 250ms && api_name == JoinGroup
    topic == "orders" || group matches "^payments-"
    !(status == ok) and client_id in {"rdkafka" "kafkajs"}
    response.responses.partitions.high_watermark > 1000

- comparisons ``== != < <= > >=`` (or tshark's words ``eq ne lt le gt ge``), ``contains``,
  ``matches`` or ``~`` (a regular expression, case-insensitive as in Wireshark), ``in {a b c}``
  (numbers may be ranges ``1..5``);
- ``&&``/``and``, ``||``/``or``, ``!``/``not``, parentheses; a field alone tests that it is
  present (``error``: the exchange has an error code);
- values: double-quoted strings (``\\"`` and ``\\\\`` escaped), numbers, bare words; numbers
  on time fields (``*_ms``) take ``us ms s min``, on size fields (``*_bytes``)
  ``B kB KiB MB MiB GB GiB``.

The enumerated fields (``api_name``, ``error``, ``status``) take only their own names,
compared without case (``api_name == fetch``, as ``--api fetch``); any other value is an
error naming the close ones.

A field may carry several values (a topic name per topic, an error per partition): a
comparison holds when one of them satisfies it, and ``!=`` holds when the field is
there and none of its values equals the value (Wireshark's ``!=``). A field that is
not there satisfies no comparison.

Fields are the exchange's own (the ``read -f ndjson`` names: ``EXCHANGE_FIELDS``),
shorthands found anywhere in the field trees (``SHORTHANDS``), and any tree field by
its dotted path under ``request.`` or ``response.`` (the body's fields, or
``header.``...; an array on the way matches when any of its elements does). Paths are
checked against the schema, so a misspelt one is an error naming the close ones (and
tshark's names, ``kafka.error``, ``tcp.stream``..., the ones they are called here).

Cost: the exchange fields are read from the exchange; shorthands and paths need the
full field trees. A command that reads lean trees (``stats``) gets full trees decoded
only for the exchanges that reach such a test: ``&&`` and ``||`` test their cheap
operands first.
"""
from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken, VisitError

from analyzer.model import EXCHANGE_STATUSES, Exchange
from dissectors.context import DecodeContext, Presentation
from dissectors.errors import ERRORS, error_name
from dissectors.field import Field
from dissectors.legacy import LEGACY_API_NAMES, LEGACY_ERROR_NAMES
from dissectors.schema import APIS, FieldDef

GRAMMAR = r"""
?start: or_test
?or_test: and_test (("||" | "or") and_test)*
?and_test: not_test (("&&" | "and") not_test)*
?not_test: ("!" | "not") not_test            -> negation
         | atom
?atom: "(" or_test ")"
     | FIELD CMP value                       -> compare
     | FIELD _IN "{" value (","? value)* "}"   -> member
     | FIELD _CONTAINS value                 -> contains
     | FIELD _MATCHES STRING                 -> matches
     | FIELD                                 -> exists
?value: STRING | BARE
CMP: "==" | "!=" | "<=" | ">=" | "<" | ">" | /(eq|ne|gt|lt|ge|le)\b/
_IN: /in\b/
_CONTAINS: /contains\b/
_MATCHES: /matches\b/ | "~"
FIELD: /[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*/
BARE: /[^\s{}()!&|=<>",]+/
STRING: /"(\\.|[^"\\])*"/
%ignore /\s+/
"""


class FilterError(ValueError):
    """A filter that cannot be used: a syntax error, an unknown field or a bad value."""


# -- the fields ------------------------------------------------------------------------

def _one(v: Any) -> tuple[Any, ...]:
    return () if v is None else (v,)


# name -> (value type, getter). The value type says which values a comparison may take:
# "str", "int", "time" (ms: time units), "size" (bytes: size units), "errors" (error names)
EXCHANGE_FIELDS: dict[str, tuple[str, Callable[[Exchange], tuple[Any, ...]]]] = {
    "api_name": ("str", lambda ex: (ex.api_name,)),
    "api_key": ("int", lambda ex: _one(ex.api_key)),
    "api_version": ("int", lambda ex: _one(ex.api_version)),
    "correlation_id": ("int", lambda ex: _one(ex.correlation_id)),
    "client_id": ("str", lambda ex: _one(ex.client_id)),
    "client": ("str", lambda ex: (str(ex.conn.client),)),
    "broker": ("str", lambda ex: (str(ex.conn.broker),)),
    "conn": ("int", lambda ex: (ex.conn.id,)),
    "status": ("str", lambda ex: (ex.status,)),
    "protocol": ("str", lambda ex: (ex.protocol,)),
    "latency_ms": ("time", lambda ex: _one(ex.latency_ms)),
    "ttfb_ms": ("time", lambda ex: _one(ex.ttfb_ms)),
    "request_frame": ("int", lambda ex: _one(ex.request_frame)),
    "response_frame": ("int", lambda ex: _one(ex.response_frame)),
    "request_bytes": ("size", lambda ex: () if ex.request is None else (ex.request.size + 4,)),
    "response_bytes": ("size", lambda ex: () if ex.response is None else (ex.response.size + 4,)),
    "error": ("errors", lambda ex: tuple(ex.error_codes)),
}

# shorthand -> value type; what each collects: _collect_shorthands
SHORTHANDS: dict[str, str] = {
    "topic": "str",
    "partition": "int",
    "group": "str",
    "member": "str",
    "transactional_id": "str",
    "producer_id": "int",
}

_TIME_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "min": 60_000.0}
_SIZE_UNITS = {"b": 1, "kb": 1000, "kib": 1024, "mb": 1000**2, "mib": 1024**2, "gb": 1000**3, "gib": 1024**3}
_NUMBER = re.compile(r"^(-?(?:0x[0-9a-fA-F]+|\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)([A-Za-z]*)$")
_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)$")
# every api_name an exchange can carry: Kafka's, the pre-0.8 protocol's, raw SASL tokens
API_NAMES: tuple[str, ...] = tuple(sorted({a.name for a in APIS.values()} | set(LEGACY_API_NAMES.values())
                                          | {"SaslToken", "Unknown", "UNKNOWN"}))
_UNKNOWN_API = re.compile(r"^Unknown\(-?\d+\)$", re.IGNORECASE)
_ERROR_NAMES = frozenset(ERRORS.values()) | frozenset(LEGACY_ERROR_NAMES.values())
_UNKNOWN_ERROR = re.compile(r"^UNKNOWN_ERROR_CODE_-?\d+$", re.IGNORECASE)     # (dissectors.errors.error_name)
# the fields whose values are names from a fixed list: a value not in the list is an error
# (with the close names), and ==, !=, in and contains compare them without case, as --api
# takes API names
_ENUMERATED = frozenset({"api_name", "error", "status"})
# (a name spelt two ways, Kafka's Fetch and the pre-0.8 FETCH, suggested as Kafka's)
_API_LOWER = {n.lower(): n for n in sorted(API_NAMES, key=str.isupper, reverse=True)}
_ERROR_LOWER = {n.lower(): n for n in _ERROR_NAMES}
# what people call a status otherwise
_STATUS_WORDS = {**dict.fromkeys(("lost", "missing", "pending", "timeout", "timed_out", "no_response",
                                  "noresponse", "unanswered_request"), "unanswered"),
                 **dict.fromkeys(("orphan", "orphaned", "unmatched"), "orphan_response"),
                 **dict.fromkeys(("error", "errors", "failed", "bad"), "malformed, or the field error (error codes)"),
                 "answered": "ok", "success": "ok", "good": "ok"}
# tshark's word operators
_WORD_OPS = {"eq": "==", "ne": "!=", "gt": ">", "lt": "<", "ge": ">=", "le": "<="}


# -- tree paths, checked against the schema ----------------------------------------------

# bytes fields whose payload the dissectors decode (consumer protocol, SASL tokens):
# any path below them is accepted
_OPEN_MEANINGS = frozenset({"consumer_subscription", "consumer_assignment", "sasl_auth_bytes", "sasl_server_bytes"})
_HEADER_PATHS = {
    "request": ("header", "header.api_key", "header.api_version", "header.correlation_id", "header.client_id"),
    "response": ("header", "header.correlation_id"),
}


def _walk_schema(fields: tuple[FieldDef, ...], prefix: str, paths: set[str], open_: set[str]) -> None:
    for f in fields:
        p = prefix + f.name
        paths.add(p)
        if f.type == "records" or f.meaning in _OPEN_MEANINGS:
            open_.add(p + ".")
        if f.fields:
            _walk_schema(f.fields, p + ".", paths, open_)


@lru_cache(maxsize=1)
def _schema_paths() -> dict[str, tuple[frozenset[str], tuple[str, ...]]]:
    """Per direction: (every body path of every API and version, paths below which anything goes)."""
    out: dict[str, tuple[frozenset[str], tuple[str, ...]]] = {}
    for d in ("request", "response"):
        paths: set[str] = set()
        open_: set[str] = set()
        for api in APIS.values():
            _walk_schema(api.request if d == "request" else api.response, "", paths, open_)
        paths.update(_HEADER_PATHS[d])
        paths.update("body." + p for p in list(paths) if not p.startswith("header"))
        open_.update("body." + p for p in list(open_))
        open_.add("header.tagged_fields.")
        out[d] = (frozenset(paths), tuple(sorted(open_)))
    return out


def _known_path(direction: str, rest: str) -> bool:
    paths, open_ = _schema_paths()[direction]
    if rest in paths or rest in ("body", "tagged_fields") or rest.endswith(".tagged_fields"):
        return True
    return any(rest.startswith(o) for o in open_) or ".tagged_fields." in f".{rest}."


# tshark's names (its Kafka dissector's, and the names people give them) for what a filter
# here calls otherwise: suggested, not taken as aliases, since the values may differ
# (tshark's kafka.error is a number, error here a name)
TSHARK_NAMES = {
    "kafka.api_key": "api_key", "kafka.request_key": "api_key", "kafka.response_key": "api_key",
    "kafka.api_version": "api_version", "kafka.request_version": "api_version",
    "kafka.request.version": "api_version", "kafka.response.version": "api_version",
    "kafka.correlation_id": "correlation_id", "kafka.client_id": "client_id", "kafka.topic_name": "topic",
    "kafka.forgotten_topic_name": "topic", "kafka.partition_id": "partition", "kafka.error": "error",
    "kafka.error_code": "error", "kafka.error_message": "response.error_message",
    "kafka.throttle_time": "response.throttle_time_ms", "kafka.consumer_group": "group",
    "kafka.member_id": "member", "kafka.consumer_group_instance": "member", "kafka.group_leader_id": "member",
    "kafka.coordinator_key": "group or transactional_id", "kafka.transactional_id": "transactional_id",
    "kafka.producer_id": "producer_id", "kafka.response_frame": "response_frame",
    "kafka.request_frame": "request_frame", "tcp.stream": "conn",
    "frame.number": "request_frame or response_frame (or read --frame N)",
}
_TSHARK_VALUES = {"error": "it holds error names here, e.g. error == NOT_LEADER_OR_FOLLOWER"}


def _unknown_field(name: str) -> FilterError:
    ours = TSHARK_NAMES.get(name.lower())
    if ours is None and name.lower().startswith("kafka."):
        # another tshark name: the close names to what follows "kafka."
        rest = name.split(".", 1)[1].lower()
        close = difflib.get_close_matches(rest, list(EXCHANGE_FIELDS) + list(SHORTHANDS), n=2, cutoff=0.75)
        ours = " or ".join(close) or None
    if ours is not None:
        more = f" {_TSHARK_VALUES[ours]}" if ours in _TSHARK_VALUES else ""
        return FilterError(f"unknown field {name!r} (tshark's name: did you mean {ours}?{more})")
    if "." in name and name.split(".", 1)[0] in ("request", "response"):
        d, rest = name.split(".", 1)
        pool = [f"{d}.{p}" for p in _schema_paths()[d][0] if not p.startswith("body.")]
        last = rest.rsplit(".", 1)[-1]
        close = difflib.get_close_matches(name, pool, n=4, cutoff=0.75)
        if not close:   # the right name on the wrong path: offer the paths that end with it
            close = sorted(p for p in pool if p.rsplit(".", 1)[-1] == last)[:4]
        if not close:
            close = difflib.get_close_matches(name, pool, n=4, cutoff=0.6)
    else:
        pool = list(EXCHANGE_FIELDS) + list(SHORTHANDS)
        close = difflib.get_close_matches(name, pool, n=4, cutoff=0.6)
        if "." not in name:     # a body field without its request./response. prefix
            paths = sorted((f"{d}.{p}" for d, (ps, _o) in _schema_paths().items() for p in ps
                            if not p.startswith("body.") and p.rsplit(".", 1)[-1] == name), key=len)
            close += [p for p in paths if p not in close][:4 - min(len(close), 2)]
    hint = f"did you mean {' or '.join(close)}?" if close else \
        "fields: " + ", ".join(list(EXCHANGE_FIELDS) + list(SHORTHANDS)) + ", request.PATH, response.PATH"
    return FilterError(f"unknown field {name!r} ({hint})")


# -- values ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Literal:
    """A value as written, and its number (units applied) when it reads as one."""
    text: str
    quoted: bool
    number: float | int | None
    span: tuple[int, int] | None = None     # a range a..b (in {...} only): (a, b)


def _unit_scale(field: str, kind: str, unit: str) -> float:
    if kind == "time" or (kind == "any" and field.endswith("_ms")):
        scale = _TIME_UNITS.get(unit.lower())
        if scale is not None:
            return scale
        raise FilterError(f"{field}: unknown time unit {unit!r} (use {', '.join(_TIME_UNITS)})")
    if kind == "size" or (kind == "any" and field.endswith("_bytes")):
        scale = _SIZE_UNITS.get(unit.lower())
        if scale is not None:
            return scale
        raise FilterError(f"{field}: unknown size unit {unit!r} (use B, kB, KiB, MB, MiB, GB, GiB)")
    raise FilterError(f"{field}: a unit ({unit}) applies only to times (*_ms) and sizes (*_bytes)")


def _literal(tok: Token, field: str, kind: str) -> Literal:
    raw = str(tok)
    if tok.type == "STRING":
        text = re.sub(r"\\(.)", r"\1", raw[1:-1])
        return Literal(text, True, None)
    m = _RANGE.match(raw)
    if m:
        return Literal(raw, False, None, (int(m.group(1)), int(m.group(2))))
    m = _NUMBER.match(raw)
    number: float | int | None = None
    if m:
        num, unit = m.group(1), m.group(2)
        if unit:
            if num.lower().startswith(("0x", "-0x")):
                raise FilterError(f"{field}: {raw!r} is not a number")
            number = float(num) * _unit_scale(field, kind, unit)
        elif num.lower().startswith(("0x", "-0x")):
            number = int(num, 16)
        elif re.fullmatch(r"-?\d+", num):
            number = int(num)
        else:
            number = float(num)
    elif raw.lower() in ("true", "false"):
        number = 1 if raw.lower() == "true" else 0
    return Literal(raw, False, number)


def _check_literal(field: str, kind: str, lit: Literal, op: str) -> None:
    """Values that can never match a field of a known kind are errors, not silent misses."""
    if kind in ("int", "time", "size") and lit.number is None and lit.span is None and op != "contains":
        raise FilterError(f"{field} is a number: {lit.text!r} is not one")
    if lit.span is not None and kind not in ("int", "any"):
        raise FilterError(f"{field}: a range {lit.text} applies to integer fields only")
    if field not in _ENUMERATED or op not in ("==", "!=", "in"):
        if kind == "errors" and op in ("<", "<=", ">", ">="):
            raise FilterError(f"{field} holds error names: use ==, !=, in, contains or matches")
        return
    low = lit.text.lower()
    if field == "api_name" and low not in _API_LOWER and not _UNKNOWN_API.match(lit.text):
        close = _close(low, _API_LOWER)
        raise FilterError(f"unknown API {lit.text!r}" + (f" (did you mean {' or '.join(close)}?)" if close else
                                                         " (see 'kafkawire-sniff apis')"))
    if field == "error" and low not in _ERROR_LOWER and not _UNKNOWN_ERROR.match(lit.text):
        code = lit.number if isinstance(lit.number, int) else None
        if code is not None:    # tshark's kafka.error is the code
            hint = f" (error holds names: code {code} is {error_name(code)}, so: error == {error_name(code)})"
        else:
            close = _close(low, _ERROR_LOWER)
            hint = f" (did you mean {' or '.join(close)}?)" if close else ""
        raise FilterError(f"unknown error name {lit.text!r}{hint}")
    if field == "status" and low not in EXCHANGE_STATUSES:
        close = [_STATUS_WORDS[low]] if low in _STATUS_WORDS else _close(low, {s: s for s in EXCHANGE_STATUSES})
        raise FilterError(f"unknown status {lit.text!r} ("
                          + (f"did you mean {' or '.join(close)}? " if close else "")
                          + f"statuses: {', '.join(EXCHANGE_STATUSES)})")


def _close(low: str, names: dict[str, str]) -> list[str]:
    """The names (as spelt) close to ``low``, a lower-cased value, compared without case."""
    return [names[c] for c in difflib.get_close_matches(low, list(names), n=3, cutoff=0.6)]


# -- comparing one value -------------------------------------------------------------------

def _as_number(v: Any) -> float | int | None:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, (int, float)):
        return v
    return None


def _as_text(v: Any) -> str:
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _equal(v: Any, lit: Literal) -> bool:
    span = lit.span
    if span is not None:
        n = _as_number(v)
        return n is not None and span[0] <= n <= span[1]
    n = _as_number(v)
    if n is not None and not lit.quoted:
        return lit.number is not None and n == lit.number
    return _as_text(v) == lit.text


_ORDER: dict[str, Callable[[Any, Any], bool]] = {
    "<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
}


def _ordered(v: Any, op: str, lit: Literal) -> bool:
    n = _as_number(v)
    if n is not None and lit.number is not None:
        return _ORDER[op](n, lit.number)
    if isinstance(v, str) and n is None:
        return _ORDER[op](v, lit.text)
    return False


def _contains(v: Any, lit: Literal) -> bool:
    if isinstance(v, (bytes, bytearray, memoryview)):
        b = bytes(v)
        return lit.text.encode() in b or lit.text.lower().replace(":", "") in b.hex()
    return lit.text in _as_text(v)


# -- the tree under test ---------------------------------------------------------------------

class Subject:
    """One exchange under test: its full trees (decoded on first need) and shorthand values."""

    __slots__ = ("ex", "_trees", "_short", "_source")

    def __init__(self, ex: Exchange, source: TreeSource) -> None:
        self.ex = ex
        self._source = source
        self._trees: tuple[Field | None, Field | None] | None = None
        self._short: dict[str, list[Any]] | None = None

    def trees(self) -> tuple[Field | None, Field | None]:
        if self._trees is None:
            self._trees = self._source.full_trees(self.ex)
        return self._trees

    def shorthand(self, name: str) -> list[Any]:
        if self._short is None:
            self._short = _collect_shorthands(self.ex, self.trees(), self._source.topic_names)
        return self._short[name]


class TreeSource:
    """Full field trees for an exchange: its own, or decoded again when the run decoded
    lean trees (the core's figures walk: their roots are ``ErrorsRoot``). Decoding again uses a
    context of its own (the run's counters stay the run's) that shares the run's topic
    names, so topic ids resolve as in a full run."""

    def __init__(self, ctx: DecodeContext | None = None) -> None:
        self.ctx = ctx
        self.decodes = 0            # exchanges decoded again (what the filter cost)
        self._scratch: DecodeContext | None = None

    @property
    def topic_names(self) -> dict[str, str]:
        return self.ctx.topic_names if self.ctx is not None else {}

    def full_trees(self, ex: Exchange) -> tuple[Field | None, Field | None]:
        if ex.lean:
            self.decodes += 1
            return ex.full_trees(self._scratch_ctx())
        return ex.request_tree, ex.response_tree

    def _scratch_ctx(self) -> DecodeContext:
        if self._scratch is None:
            base = self.ctx or DecodeContext()
            self._scratch = DecodeContext(base.limits, Presentation(show_secrets=base.presentation.show_secrets),
                                          base.topic_names)
        return self._scratch


def _is_array(f: Field) -> bool:
    if f.type in ("array", "records"):
        return True
    ch = f.children
    if not ch:
        return False
    return ch[0].name.startswith("[")


def _members(f: Field) -> Iterator[Field]:
    """The children of a struct, its tagged fields among them."""
    for c in f.children or ():
        if c.type == "tagged_fields":
            yield from c.children or ()
        else:
            yield c


def _elements(f: Field) -> list[Field]:
    """A node as the containers a path step looks into: an array's elements, else itself."""
    if _is_array(f):
        out: list[Field] = []
        for e in f.children or ():
            out.extend(_elements(e) if _is_array(e) else (e,))
        return out
    return [f]


def path_values(root: Field | None, parts: list[str]) -> list[Any]:
    """The values of the fields at ``parts`` below a request/response root: the body's
    fields unless the first part is ``header`` or ``body``; every element of an array on
    the way; the element values of an array of plain values at the end (the element count
    of an array of structs)."""
    if root is None:
        return []
    first = parts[0]
    start = root.child(first) if first in ("header", "body") else root.child("body")
    if start is None:
        return []
    steps = parts[1:] if first in ("header", "body") else parts
    nodes = [start]
    for name in steps:
        nxt: list[Field] = []
        for n in nodes:
            for el in _elements(n):
                for c in _members(el):
                    if c.name == name:
                        nxt.append(c)
        if not nxt:
            return []
        nodes = nxt
    out: list[Any] = []
    for n in nodes:
        if _is_array(n) and n.children and not any(e.children for e in n.children):
            out.extend(e.value for e in n.children)
        elif n.value is not None:
            out.append(n.value)
    return out


_TOPIC_FIELDS = frozenset({"topic", "topic_name", "sink_topic"})
_TOPIC_ARRAYS = frozenset({"topics", "topic_names", "subscribed_topic_names", "source_topics",
                           "repartition_sink_topics"})
_PARTITION_FIELDS = frozenset({"partition_index", "partition", "partition_id"})
_PARTITION_ARRAYS = frozenset({"partitions", "partition_indexes"})
_GROUP_FIELDS = frozenset({"group_id"})
_GROUP_ARRAYS = frozenset({"group_ids", "groups", "groups_names"})
_MEMBER_FIELDS = frozenset({"member_id", "group_instance_id", "leader"})   # leader: JoinGroup's, a member id
_TXN_FIELDS = frozenset({"transactional_id", "v3_and_below_transactional_id"})
_TXN_ARRAYS = frozenset({"transactional_ids"})
_SKIP_TYPES = frozenset({"Record", "RecordHeader"})


_NAMED = _TOPIC_FIELDS | _PARTITION_FIELDS | _GROUP_FIELDS | _MEMBER_FIELDS | _TXN_FIELDS | {
    "name", "topic_id", "index", "producer_id"}
_NAMED_ARRAYS = _TOPIC_ARRAYS | _PARTITION_ARRAYS | _GROUP_ARRAYS | _TXN_ARRAYS


def _collect_shorthands(ex: Exchange, trees: tuple[Field | None, Field | None],
                        topic_names: dict[str, str]) -> dict[str, list[Any]]:
    """Every shorthand's values in one walk of both trees (records below their batch
    headers are not walked: only a batch's producer_id counts there)."""
    out: dict[str, list[Any]] = {k: [] for k in SHORTHANDS}
    topic, part, group, member, txn, pid = (out["topic"], out["partition"], out["group"], out["member"],
                                            out["transactional_id"], out["producer_id"])
    for p in ex.partitions:
        if p.get("topic") is not None:
            topic.append(p["topic"])
        if p.get("partition") is not None:
            part.append(p["partition"])
    stack: list[Field] = [t for t in trees if t is not None]
    while stack:
        f = stack.pop()
        struct_type = f.type
        if struct_type in _SKIP_TYPES:
            continue
        children = f.children
        if not children:
            continue
        for c in children:
            ch = c.children
            n = c.name
            if ch:
                if c.type == "tagged_fields":        # its fields are the struct's
                    stack.append(_as_struct(f, ch))
                    continue
                if c.type == "array" and not ch[0].children:     # an array of plain values
                    if n in _NAMED_ARRAYS:
                        vals = [e.value for e in ch]
                        if n in _TOPIC_ARRAYS:
                            topic.extend(x for x in vals if isinstance(x, str))
                        elif n in _PARTITION_ARRAYS:
                            part.extend(x for x in vals if isinstance(x, int))
                        elif n in _GROUP_ARRAYS:
                            group.extend(x for x in vals if isinstance(x, str))
                        else:
                            txn.extend(x for x in vals if isinstance(x, str))
                    continue
                stack.append(c)
                if n == "key_type" or n not in _NAMED:
                    continue
            elif n == "key_type":
                v = c.value
                if v == 0 or v == 1:    # FindCoordinator: its key is a group id (0) or a transactional id (1)
                    keys = [f.get("key")]
                    arr = f.child("coordinator_keys")
                    if arr is not None:
                        keys.extend(e.value for e in arr.children or ())
                    (group if v == 0 else txn).extend(k for k in keys if isinstance(k, str))
                continue
            if n not in _NAMED:
                continue
            v = c.value
            if v is None:
                continue
            if n in _TOPIC_FIELDS or (n == "name" and "Topic" in struct_type and "Config" not in struct_type):
                if isinstance(v, str):
                    topic.append(v)
            elif n == "topic_id":
                if isinstance(v, str):
                    topic.append(v)
                    name = topic_names.get(v)
                    if name is not None:
                        topic.append(name)
            elif n in _PARTITION_FIELDS or (n == "index" and "Partition" in struct_type):
                if isinstance(v, int) and not isinstance(v, bool):
                    part.append(v)
            elif n in _GROUP_FIELDS:
                group.append(v)
            elif n in _MEMBER_FIELDS:
                member.append(v)
            elif n in _TXN_FIELDS:
                txn.append(v)
            elif n == "producer_id":
                pid.append(v)
    return out


def _as_struct(f: Field, members: list[Field]) -> Field:
    """The tagged fields of struct ``f`` as a struct of the same type (walked like its own fields)."""
    return Field(f.name, f.type, None, f.offset, 0, members)


# -- the expression tree ------------------------------------------------------------------------

class Node:
    cost = 0                    # 0: the exchange's own fields; 1: full trees

    def test(self, s: Subject) -> bool:
        raise NotImplementedError


@dataclass
class FieldRef:
    name: str
    kind: str                   # where the values come from: "exchange", "short" or "tree"
    cost: int
    vtype: str                  # what they are: an EXCHANGE_FIELDS value type, or "any" (a tree field)

    def values(self, s: Subject) -> list[Any] | tuple[Any, ...]:
        if self.kind == "short":
            return s.shorthand(self.name)
        if self.kind == "tree":
            direction, rest = self.name.split(".", 1)
            req, resp = s.trees()
            return path_values(req if direction == "request" else resp, rest.split("."))
        return EXCHANGE_FIELDS[self.name][1](s.ex)


def field_ref(name: str) -> FieldRef:
    if name in EXCHANGE_FIELDS:
        return FieldRef(name, "exchange", 0, EXCHANGE_FIELDS[name][0])
    if name in SHORTHANDS:
        return FieldRef(name, "short", 1, SHORTHANDS[name])
    if "." in name:
        direction, rest = name.split(".", 1)
        if direction in ("request", "response") and _known_path(direction, rest):
            return FieldRef(name, "tree", 1, "any")
    raise _unknown_field(name)


class Compare(Node):
    def __init__(self, ref: FieldRef, op: str, lits: list[Literal], pattern: re.Pattern[str] | None = None) -> None:
        # (the names of an enumerated field compare without case: both sides lower-cased)
        self.fold = ref.kind == "exchange" and ref.name in _ENUMERATED and op in ("==", "!=", "in", "contains")
        if self.fold:
            lits = [replace(lit, text=lit.text.lower()) for lit in lits]
        self.ref, self.op, self.lits, self.pattern = ref, op, lits, pattern
        self.cost = ref.cost

    def test(self, s: Subject) -> bool:
        vals = self.ref.values(s)
        op = self.op
        if op == "exists":
            return any(v is not None for v in vals)
        if not vals:
            return False
        if self.fold:
            vals = [_as_text(v).lower() for v in vals]
        if op == "==":
            return any(_equal(v, self.lits[0]) for v in vals)
        if op == "!=":
            return not any(_equal(v, self.lits[0]) for v in vals)
        if op == "in":
            return any(_equal(v, lit) for v in vals for lit in self.lits)
        if op == "contains":
            return any(_contains(v, self.lits[0]) for v in vals)
        if op == "matches":
            pat = self.pattern
            assert pat is not None      # matches() gives its pattern
            return any(pat.search(_as_text(v)) for v in vals)
        return any(_ordered(v, op, self.lits[0]) for v in vals)


class Not(Node):
    def __init__(self, item: Node) -> None:
        self.item = item
        self.cost = item.cost

    def test(self, s: Subject) -> bool:
        return not self.item.test(s)


class AllOf(Node):
    def __init__(self, items: list[Node]) -> None:
        self.items = sorted(items, key=lambda n: n.cost)   # cheap tests first (stable)
        self.cost = max(n.cost for n in items)

    def test(self, s: Subject) -> bool:
        return all(n.test(s) for n in self.items)


class AnyOf(AllOf):
    def test(self, s: Subject) -> bool:
        return any(n.test(s) for n in self.items)


@v_args(inline=True)
class _Build(Transformer):
    def or_test(self, *items: Node) -> Node:
        return AnyOf(list(items))

    def and_test(self, *items: Node) -> Node:
        return AllOf(list(items))

    def negation(self, item: Node) -> Node:
        return Not(item)

    def exists(self, name: Token) -> Node:
        return Compare(field_ref(str(name)), "exists", [])

    def compare(self, name: Token, op_token: Token, value: Token) -> Node:
        ref = field_ref(str(name))
        op = _WORD_OPS.get(str(op_token), str(op_token))
        lit = _literal(value, ref.name, ref.vtype)
        if lit.span is not None:
            raise FilterError(f"{ref.name}: a range {lit.text} goes in a set: {ref.name} in {{{lit.text}}}")
        _check_literal(ref.name, ref.vtype, lit, op)
        if op in _ORDER and ref.vtype in ("str", "errors") and lit.number is not None and not lit.quoted:
            raise FilterError(f"{ref.name} is text: compare it with ==, !=, contains or matches")
        return Compare(ref, op, [lit])

    def member(self, name: Token, *values: Token) -> Node:
        ref = field_ref(str(name))
        lits = [_literal(v, ref.name, ref.vtype) for v in values]
        for lit in lits:
            _check_literal(ref.name, ref.vtype, lit, "in")
        return Compare(ref, "in", lits)

    def contains(self, name: Token, value: Token) -> Node:
        ref = field_ref(str(name))
        lit = _literal(value, ref.name, ref.vtype)
        return Compare(ref, "contains", [Literal(lit.text, True, None)])

    def matches(self, name: Token, value: Token) -> Node:
        ref = field_ref(str(name))
        lit = _literal(value, ref.name, ref.vtype)
        try:
            pattern = re.compile(lit.text, re.IGNORECASE)
        except re.error as e:
            raise FilterError(f"{ref.name} matches {value}: not a regular expression ({e})") from None
        return Compare(ref, "matches", [lit], pattern)


@lru_cache(maxsize=1)
def _parser() -> Lark:
    return Lark(GRAMMAR, parser="lalr", maybe_placeholders=False)


_EXPECTED = {"CMP": "a comparison (== != < <= > >=, or eq ne lt le gt ge)", "FIELD": "a field name",
             "BARE": "a value", "STRING": "a quoted string", "LPAR": "'('", "RPAR": "')'", "RBRACE": "'}'",
             "LBRACE": "'{'", "__ANON_1": "&&", "__ANON_0": "||", "BANG": "!", "_IN": "in",
             "_CONTAINS": "contains", "_MATCHES": "matches (~)", "COMMA": "','", "$END": "the end"}
_SAID_OTHERWISE = frozenset({"AND", "OR", "NOT"})     # and/or/not: said as && || !


def _syntax_error(text: str, e: UnexpectedInput) -> FilterError:
    col = getattr(e, "column", None)
    pos = getattr(e, "pos_in_stream", None)
    if isinstance(e, UnexpectedEOF) or pos is None or pos < 0:
        pos = len(text)
    elif isinstance(e, UnexpectedToken) and e.token.type == "$END":
        pos = len(text)
    col = pos + 1
    expected = sorted(getattr(e, "expected", None) or getattr(e, "allowed", None) or ())
    want = [_EXPECTED.get(x, x.lower()) for x in expected if x not in _SAID_OTHERWISE and x != "__IGNORE_0"]
    if isinstance(e, UnexpectedCharacters):
        what = f"unexpected {text[pos]!r}"
    elif isinstance(e, UnexpectedToken) and e.token.type != "$END":
        what = f"unexpected {str(e.token)!r}"
    else:
        what = "unexpected end of filter"
    if want:
        what += ", expected " + " or ".join(dict.fromkeys(want))
    return FilterError(f"filter syntax error at column {col}: {what}: {text[:pos]}\u2192{text[pos:]}")


@dataclass
class DisplayFilter:
    """A compiled filter: ``flt.matcher(ctx)`` gives the test for one run's exchanges."""
    text: str
    root: Node

    @property
    def fields(self) -> set[str]:
        """The names of the fields the filter reads."""
        out: set[str] = set()
        stack = [self.root]
        while stack:
            n = stack.pop()
            if isinstance(n, Compare):
                out.add(n.ref.name)
            elif isinstance(n, Not):
                stack.append(n.item)
            elif isinstance(n, AllOf):
                stack.extend(n.items)
        return out

    def matcher(self, ctx: DecodeContext | None = None) -> Matcher:
        return Matcher(self.root, TreeSource(ctx))


class Matcher:
    """``matcher(ex)``: does the exchange pass? ``source.decodes`` counts the exchanges
    whose full trees were decoded again for it."""

    def __init__(self, root: Node, source: TreeSource) -> None:
        self.root = root
        self.source = source

    def __call__(self, ex: Exchange) -> bool:
        return self.root.test(Subject(ex, self.source))


def compile_filter(text: str) -> DisplayFilter:
    """Parse and check a filter; ``FilterError`` (one line) when it cannot be used."""
    if not text.strip():
        raise FilterError("empty filter")
    try:
        tree = _parser().parse(text)
        root = _Build().transform(tree)
    except UnexpectedInput as e:
        raise _syntax_error(text, e) from None
    except VisitError as e:
        if isinstance(e.orig_exc, FilterError):
            raise e.orig_exc from None
        raise
    if isinstance(root, Token):     # not reached by the grammar; kept for type checkers
        raise FilterError(f"not a filter: {text!r}")
    return DisplayFilter(text, root)


def all_of(filters: list[DisplayFilter]) -> DisplayFilter | None:
    """One filter that holds when every one of ``filters`` does (None for none)."""
    if not filters:
        return None
    if len(filters) == 1:
        return filters[0]
    return DisplayFilter(" && ".join(f"({f.text})" for f in filters), AllOf([f.root for f in filters]))


def quote(text: str) -> str:
    """A filter string literal for ``text``."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


# -- --frame N ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class PacketSpot:
    """Where a packet's TCP payload went: the sender and receiver, and its length."""
    index: int
    src: Any
    dst: Any
    payload: int


def packet_spots(path: str, numbers: set[int]) -> dict[int, PacketSpot | None]:
    """The packets ``numbers`` of a capture (read up to the last of them), None for a
    packet that is not TCP; a number past the capture's end is left out."""
    from analyzer._core import open_capture, parse_packet
    from analyzer.model import Endpoint, Packet

    out: dict[int, PacketSpot | None] = {}
    last = max(numbers)
    with open_capture(path) as reader:
        for p in map(Packet._make, reader):
            if p.index in numbers:
                seg = parse_packet(p.linktype, p.data, p.orig_len)
                if isinstance(seg, str):        # (why the packet is no TCP segment)
                    out[p.index] = None
                else:
                    sip, sport, dip, dport, _seq, _ack, _flags, payload, missing = seg
                    out[p.index] = PacketSpot(p.index, Endpoint(sip, sport), Endpoint(dip, dport),
                                              len(payload) + missing)
            if p.index >= last:
                break
    return out


class FrameSelector:
    """``--frame N``: the exchanges whose request or response frame includes packet N (a
    packet with TCP payload from that frame's sender to its receiver, numbered from the
    frame's first packet to the one that completed it). Several exchanges when one packet
    carries bytes of several frames."""

    def __init__(self, spots: dict[int, PacketSpot | None]) -> None:
        self.spots = [s for s in spots.values() if s is not None and s.payload > 0]

    def __call__(self, ex: Exchange) -> bool:
        for fr in (ex.request, ex.response):
            if fr is None:
                continue
            for s in self.spots:
                if fr.first_index <= s.index <= fr.last_index:
                    conn = fr.conn
                    if s.src == conn.endpoint(fr.direction) and s.dst == conn.endpoint(1 - fr.direction):
                        return True
        return False


def frame_selector(path: str, numbers: tuple[int, ...]) -> tuple[FrameSelector, list[str]]:
    """The selector for packets ``numbers`` of ``path``, and a line for each packet that
    can hold no Kafka bytes (past the end, not TCP, no payload)."""
    spots = packet_spots(path, set(numbers))
    notes: list[str] = []
    for n in sorted(set(numbers)):
        if n not in spots:
            notes.append(f"packet {n}: the capture has fewer packets")
        elif (spot := spots[n]) is None:
            notes.append(f"packet {n}: not a TCP packet")
        elif spot.payload == 0:
            notes.append(f"packet {n}: a TCP packet without payload (no Kafka bytes)")
    return FrameSelector(spots), notes
