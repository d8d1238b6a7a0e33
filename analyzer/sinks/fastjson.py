"""Compact one-line JSON for ndjson/json output.

``dumps_line``: orjson (a dependency of the package), or the json module for what orjson
refuses (integers beyond 64 bits, non-string keys, lone surrogates) and where orjson is
missing; both give the same JSON values (compact separators, non-ASCII kept as UTF-8).
One difference: a NaN or infinite float (possible in a float64 field on the wire) is
``null`` with orjson, and the non-standard ``NaN``/``Infinity`` with the json module.

``dumps_tree``: a field tree in UTF-8 bytes, written by the core (``analyzer._core.tree_json``)
as orjson writes ``to_json()``'s dicts, with no Python call per field; what the core refuses
goes the ``dumps_line`` way. Bytes, because they go to the output as they are.
"""
from __future__ import annotations

import json
from types import ModuleType
from typing import Any

from analyzer._core import tree_json
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


def dumps_tree(f: Field | None) -> bytes:
    """A field tree as compact JSON text in UTF-8: exactly ``dumps_line(f.to_json()).encode()``,
    written by the core (``analyzer._core.tree_json``) without a Python call per field. What
    the core refuses (floats, integers beyond 64 bits, lone surrogates, other value types)
    goes the ``to_json`` way."""
    try:
        return tree_json(f)
    except ValueError:
        assert f is not None        # (None is always written)
        return dumps_line(f.to_json()).encode("utf-8", "backslashreplace")   # (a lone surrogate as \\udcxx)
