"""The core's lean walk (``analyzer._core.Figures``, core/src/figures.rs) one message at a
time, for tests: what the pipeline hands a ``stats`` run with each exchange's record, its
counts added to a DecodeContext and the topic ids a Metadata-like answer teaches learnt, as
``Pipeline._decode`` does."""
from __future__ import annotations

from analyzer._core import Figures
from analyzer.pipeline import _add_counts, _take_lean_response
from dissectors.context import DecodeContext
from dissectors.errors import ERRORS
from dissectors.field import Field
from dissectors.schema import APIS

_FIGURES: dict[tuple[int, int], Figures] = {}


def figures(ctx: DecodeContext) -> Figures:
    """The walk under ``ctx``'s limits."""
    key = (ctx.max_array_len, ctx.max_decompressed)
    f = _FIGURES.get(key)
    if f is None:
        f = _FIGURES[key] = Figures(APIS, ERRORS, *key)
    return f


def lean_request(data: bytes, header_len: int, ctx: DecodeContext) -> Field:
    tree, counts = figures(ctx).request(data, header_len)
    _add_counts(ctx, counts)
    return tree


def lean_response(data: bytes, api_key: int, api_version: int, ctx: DecodeContext) -> Field:
    got = figures(ctx).response(data, api_key, api_version)
    assert got is not None, f"API {api_key} is not in the schema"
    tree, counts = got
    _take_lean_response(ctx, api_key, tree, counts)
    return tree


def dump(f: Field) -> tuple:
    """A Field tree as plain tuples (names, types, values, offsets, lengths, notes, extra)."""
    return (f.name, f.type, repr(f.value), f.offset, f.length, tuple(f.notes or ()), repr(f.extra),
            None if f.children is None else tuple(dump(c) for c in f.children))


class Learning(dict):
    """A topic_names dict that counts what it is taught."""

    def __init__(self) -> None:
        super().__init__()
        self.learnt = 0

    def __setitem__(self, k: str, v: str) -> None:
        super().__setitem__(k, v)
        self.learnt += 1
