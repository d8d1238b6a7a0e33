"""Compact one-line JSON for ndjson/json output: orjson when installed, else the json module.

Both give the same JSON values (compact separators, non-ASCII kept as UTF-8); orjson is
several times faster on big field trees. Anything orjson refuses (integers beyond 64
bits, non-string keys, lone surrogates) falls back to the json module. One difference:
a NaN or infinite float (possible in a float64 field on the wire) is ``null`` with
orjson, and the non-standard ``NaN``/``Infinity`` with the json module.
"""
from __future__ import annotations

import json
from types import ModuleType
from typing import Any

from dissectors.field import Field

_orjson: ModuleType | None     # None: orjson not installed
try:
    import orjson as _orjson
except ImportError:  # pragma: no cover - optional speedup
    _orjson = None


def dumps_line(obj: Any) -> str:
    """``obj`` as compact JSON text (no newline)."""
    if _orjson is not None:
        try:
            return _orjson.dumps(obj).decode()
        except (TypeError, ValueError):
            pass
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _tree_default(o: Any) -> Any:
    """orjson's hook in ``dumps_tree``: a Field as the dict ``to_json`` gives, but one
    level at a time (its children stay Field objects, serialised through this hook in
    turn), and bytes as hex. The empty lists are shared: orjson only reads them."""
    if o.__class__ is Field:
        return {"name": o.name, "type": o.type, "value": o.value, "offset": o.offset, "length": o.length,
                "children": o.children or _EMPTY, "notes": o.notes or _EMPTY}
    if isinstance(o, (bytes, bytearray, memoryview)):
        return bytes(o).hex()
    raise TypeError(f"{type(o).__name__} is not JSON serializable")


_EMPTY: list[Any] = []


def dumps_tree(f: Field | None) -> str:
    """A field tree as compact JSON text: exactly ``dumps_line(f.to_json())``, without
    building the whole dict tree first (orjson asks ``_tree_default`` field by field).
    Anything the hook or orjson refuses goes the ``to_json`` way."""
    if f is None:
        return "null"
    if _orjson is not None:
        try:
            return _orjson.dumps(f, default=_tree_default).decode()
        except (TypeError, ValueError):
            pass
    return dumps_line(f.to_json())
