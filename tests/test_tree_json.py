"""The core's JSON writer of field trees (core/src/py/json.rs, ``analyzer._core.tree_json``):
byte for byte what orjson writes of ``Field.to_json()`` on every tree of the captures and on
odd values; what it does not write that way it refuses, and ``dumps_tree`` then takes the
``to_json`` way, so ``read -f ndjson`` gives the same lines either way."""
from __future__ import annotations

import enum
import json

import orjson
import pytest

from analyzer._core import tree_json
from analyzer.pipeline import Options, Run
from analyzer.sinks.fastjson import dumps_line, dumps_tree
from dissectors.field import ErrorsRoot, Field
from tests.conftest import SHARED_CAPTURES, capture_paths


def reference(f: Field) -> bytes:
    """What orjson writes of the dict form (the json module where orjson refuses)."""
    return dumps_line(f.to_json()).encode("utf-8", "backslashreplace")


def has_float(f: Field) -> bool:
    def in_value(v: object) -> bool:
        if isinstance(v, float):
            return True
        if isinstance(v, (list, tuple)):
            return any(map(in_value, v))
        if isinstance(v, dict):
            return any(map(in_value, v.values()))
        return False
    return in_value(f.value) or any(has_float(c) for c in f.children or ())


def test_every_capture_tree_is_written_as_orjson_writes_it() -> None:
    trees = written = 0
    for path in capture_paths():
        for ex in Run(str(path), Options()):
            for tree in (ex.request_tree, ex.response_tree):
                if tree is None:
                    continue
                trees += 1
                want = reference(tree)
                if has_float(tree):
                    with pytest.raises(ValueError):
                        tree_json(tree)
                else:
                    assert tree_json(tree) == want, (path.name, ex.seq)
                    written += 1
                assert dumps_tree(tree) == want
    # the writer takes (nearly) every tree of the wire: only float64 fields go the other way
    least = 2_000 if SHARED_CAPTURES.is_dir() else 500      # (the samples alone: 576 trees)
    assert trees > least and written >= trees - 20, (trees, written)


class Colour(enum.IntEnum):
    RED = 7


class Name(str):
    pass


ODD_VALUES = [
    None, True, False, 0, -1, 1, 2 ** 31, -(2 ** 63), 2 ** 63 - 1, 2 ** 63, 2 ** 64 - 1, Colour.RED,
    "", "plain", "é中\u2028\u2029\U0001f600", "".join(map(chr, range(0x80))), Name("sub"),
    b"", b"\x00\xff\x10", bytearray(b"\xab"), memoryview(b"\x01\x02"),
    [], (), [1, "a", None, b"\x01", (2, [3])], {}, {"k": b"\x02", "n": None, "l": (1, 2), "d": {"x": "y"}},
]

REFUSED_VALUES = [
    1.5, float("nan"), float("inf"), -0.0, [1, 2.5], {"f": 0.1},   # floats: orjson's own format
    2 ** 64, -(2 ** 63) - 1,                                        # beyond 64 bits
    "a\udc80b",                                                     # a lone surrogate
    {1: "x"}, {None: 1},                                            # keys that are not strings
    {1, 2}, object(), 3j,                                           # other types
]


def _leaf(v: object) -> Field:
    return Field("leaf", "T", v, 3, 4, None, ["a note \x01\"\\"])


@pytest.mark.parametrize("value", ODD_VALUES, ids=[f"{i}-{type(v).__name__}" for i, v in enumerate(ODD_VALUES)])
def test_odd_values_are_written_as_orjson_writes_them(value: object) -> None:
    root = Field("root", "Struct", None, 0, 9, [_leaf(value), Field("x", "int8", 1, 1, 1)], None)
    want = orjson.dumps(root.to_json())
    assert tree_json(root) == want
    assert dumps_tree(root) == want


@pytest.mark.parametrize("value", REFUSED_VALUES,
                         ids=[f"{i}-{type(v).__name__}" for i, v in enumerate(REFUSED_VALUES)])
def test_what_the_writer_refuses_goes_the_to_json_way(value: object) -> None:
    root = Field("root", "Struct", None, 0, 9, [_leaf(value)])
    with pytest.raises(ValueError):
        tree_json(root)
    try:
        want = reference(root)
    except TypeError:               # (neither orjson nor the json module writes it)
        with pytest.raises(TypeError):
            dumps_tree(root)
        return
    assert dumps_tree(root) == want
    json.loads(want)                # valid JSON (a lone surrogate as \udcxx)


def test_field_shapes() -> None:
    """Children and notes as tuples or None, a root that is an ErrorsRoot, a string's every
    control character, None as a tree."""
    root = object.__new__(ErrorsRoot)
    root.name, root.type, root.value, root.offset, root.length = "response", "Response", None, 0, 12
    root.children = (Field("a", "string", "".join(map(chr, range(0x20))), 0, 32),)
    root.notes = ("n1", "n2")
    root.extra = {"malformed": 1}
    root.error_codes = ["UNKNOWN_TOPIC_OR_PARTITION"]
    assert tree_json(root) == orjson.dumps(root.to_json())
    assert tree_json(None) == b"null" == dumps_tree(None)


def test_what_is_not_a_field_tree_is_refused() -> None:
    for bad in (Field("r", "S", None, 0, 1, [42]), Field("r", "S", None, 0, 1, None, [b"note"]),
                Field("r", "S", None, 0, 1, "children"), 42):
        with pytest.raises(ValueError):
            tree_json(bad)


def test_deep_trees_are_refused_not_overflowed() -> None:
    deep = Field("leaf", "T", 1, 0, 1)
    for _ in range(5_000):
        deep = Field("n", "S", None, 0, 1, [deep])
    with pytest.raises(ValueError):
        tree_json(deep)
    nested: object = 1
    for _ in range(5_000):
        nested = [nested]
    with pytest.raises(ValueError):
        tree_json(Field("v", "T", nested, 0, 1))
    shallow = Field("leaf", "T", 1, 0, 1)
    for _ in range(200):
        shallow = Field("n", "S", None, 0, 1, [shallow])
    assert tree_json(shallow) == reference(shallow)     # (beyond orjson's depth: the json module's)
