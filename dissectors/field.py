"""The annotated field tree every dissector produces.

A Field is one decoded item of a Kafka frame: its name, its wire type, its value,
where it sits (``offset`` is counted from the first byte after the 4-byte size
prefix of the frame it belongs to; ``length`` in bytes) and notes (error-code
names, CRC verdicts, decoded timestamps, ``malformed: ...`` markers).

Conventions shared by every dissector:
- an array is ``Field(name, "array", value=<element count or None when null>,
  children=[elements])``; each element is named ``[i]``; a struct element has the
  struct's type name as ``type`` and its fields as children, a primitive element
  carries its value directly;
- a struct (nested, non-array) has ``type`` = its struct name and ``value`` None;
- bytes values are ``bytes`` in memory and hex strings in JSON;
- a note that starts with ``malformed:`` marks bad protocol bytes; use
  :meth:`Field.mark_malformed` so the decode context counts it;
- ``extra`` is an in-memory side channel for machine summaries (for example the
  record count of a records field); it is never serialised.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

MALFORMED = "malformed: "


class Field:
    __slots__ = ("name", "type", "value", "offset", "length", "children", "notes", "extra")

    def __init__(
        self,
        name: str,
        type: str,
        value: Any = None,
        offset: int = 0,
        length: int = 0,
        children: list[Field] | None = None,
        notes: list[str] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.type = type
        self.value = value
        self.offset = offset
        self.length = length
        self.children = children
        self.notes = notes
        self.extra = extra

    def __repr__(self) -> str:
        return (f"Field({self.name!r}, {self.type!r}, {self.value!r}, offset={self.offset}, "
                f"length={self.length}, children={len(self.children or ())}, notes={self.notes!r})")

    # -- building -------------------------------------------------------------
    def note(self, text: str) -> Field:
        if self.notes is None:
            self.notes = [text]
        else:
            self.notes.append(text)
        return self

    def add(self, child: Field) -> Field:
        if self.children is None:
            self.children = [child]
        else:
            self.children.append(child)
        return child

    def mark_malformed(self, reason: str, ctx: Any = None) -> Field:
        """Note bad protocol bytes here; count them in ``ctx`` (a DecodeContext) if given."""
        self.note(MALFORMED + reason)
        if ctx is not None:
            ctx.counts.malformed += 1
        return self

    # -- reading --------------------------------------------------------------
    @property
    def is_malformed(self) -> bool:
        return any(n.startswith(MALFORMED) for n in self.notes or ())

    def child(self, name: str) -> Field | None:
        """The first direct child called ``name``."""
        for c in self.children or ():
            if c.name == name:
                return c
        return None

    def get(self, name: str, default: Any = None) -> Any:
        """The value of the first direct child called ``name``."""
        for c in self.children or ():      # child() inlined: stats reads trees this way per exchange
            if c.name == name:
                return c.value
        return default

    def get_in(self, parent: str, name: str, default: Any = None) -> Any:
        """The value of child ``name`` of the first direct child called ``parent``
        (``child(parent).get(name)`` in one call: stats reads each exchange's body so)."""
        for p in self.children or ():
            if p.name == parent:
                for c in p.children or ():
                    if c.name == name:
                        return c.value
                return default
        return default

    def walk(self) -> Iterator[Field]:
        """This field and every descendant, depth first, in wire order."""
        stack = [self]
        while stack:
            f = stack.pop()
            yield f
            if f.children:
                stack.extend(reversed(f.children))

    def find_all(self, name: str) -> Iterator[Field]:
        return (f for f in self.walk() if f.name == name)

    def any_malformed(self) -> bool:
        return any(f.is_malformed for f in self.walk())

    # -- serialising ----------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        # the hot path of ndjson output (one call per field of every tree): plain
        # values skip json_value, children go through map (no comprehension frame)
        v = self.value
        ch = self.children
        nt = self.notes
        return {
            "name": self.name,
            "type": self.type,
            "value": v if v.__class__ in _PLAIN else json_value(v),
            "offset": self.offset,
            "length": self.length,
            "children": list(map(_to_json, ch)) if ch else [],
            "notes": list(nt) if nt else [],
        }


_to_json = Field.to_json


def int_value(v: Any) -> int | None:
    """A Field value as an int when it is one (a bool is not), else None."""
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def body_of(tree: Field | None) -> Field | None:
    """The ``body`` child of a request or response tree (None without a tree)."""
    return tree.child("body") if tree is not None else None


class ErrorsRoot(Field):
    """A root Field that also carries ``error_codes``: the names of the non-zero error
    codes of its tree in wire order (what ``kafka.error_codes`` gives), collected while
    the tree was decoded so that reading them walks nothing (the roots of the core's lean trees, core/src/figures/)."""
    __slots__ = ("error_codes",)
    error_codes: list[str]


# value types that are their own JSON form (json_value returns them unchanged)
_PLAIN = frozenset({int, str, bool, float, type(None)})


def json_value(v: Any) -> Any:
    """A JSON-native form of a field value: bytes as hex, tuples as lists."""
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    if isinstance(v, (list, tuple)):
        return [json_value(x) for x in v]
    if isinstance(v, dict):
        return {str(k): json_value(x) for k, x in v.items()}
    return v
