"""Compact one-line JSON for ndjson/json output: orjson when installed, else the json module.

Both give the same JSON values (compact separators, non-ASCII kept as UTF-8); orjson is
several times faster on big field trees. Anything orjson refuses (integers beyond 64
bits, non-string keys, lone surrogates) falls back to the json module. One difference:
a NaN or infinite float (possible in a float64 field on the wire) is ``null`` with
orjson, and the non-standard ``NaN``/``Infinity`` with the json module.
"""
from __future__ import annotations

import json
from typing import Any

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
