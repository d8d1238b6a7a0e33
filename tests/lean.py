"""The core's lean walk (``analyzer._core.Figures``, core/src/figures/) one message at a
time, for tests: what the pipeline hands a ``stats`` run with each exchange's record, its
counts added to a DecodeContext and the topic ids a Metadata-like answer teaches learnt, as
``analyzer.decoding.Decoder`` does."""
from __future__ import annotations

import random
from pathlib import Path

from analyzer._core import Figures
from analyzer.decoding import add_counts, take_lean_response
from dissectors import consumer, kafka
from dissectors.context import DecodeContext
from dissectors.errors import ERRORS
from dissectors.field import ErrorsRoot, Field
from dissectors.schema import APIS
from tests.conftest import SAMPLES
from tests.pcapgen import TcpFlow, kafka_frame, write_pcap

_FIGURES: dict[tuple[int, int], Figures] = {}


def figures(ctx: DecodeContext) -> Figures:
    """The walk under ``ctx``'s limits."""
    key = (ctx.limits.max_array_len, ctx.limits.max_decompressed)
    f = _FIGURES.get(key)
    if f is None:
        f = _FIGURES[key] = Figures((Field, ErrorsRoot), APIS, ERRORS, *key, consumer=(consumer.SUBSCRIPTION, consumer.ASSIGNMENT))
    return f


def lean_request(data: bytes, header_len: int, ctx: DecodeContext) -> Field:
    got = figures(ctx).request(data, header_len)
    if got is None:         # a consumer payload with bad bytes: the full decoder's
        return kafka.decode_request(data, ctx)
    tree, counts = got
    add_counts(ctx, counts)
    return tree


def lean_response(data: bytes, api_key: int, api_version: int, ctx: DecodeContext) -> Field:
    assert api_key in APIS, f"API {api_key} is not in the schema"
    got = figures(ctx).response(data, api_key, api_version)
    if got is None:         # a consumer payload with bad bytes: the full decoder's
        return kafka.decode_response(data, api_key, api_version, ctx)
    tree, counts = got
    take_lean_response(ctx, api_key, tree, counts)
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


def _damage(data: bytes, lo: int, rng: random.Random) -> bytes:
    """Bit flips or a run of random bytes at or after ``lo``; the size is kept (the frame's
    size prefix still holds)."""
    b = bytearray(data)
    if len(b) <= lo:
        return data
    if rng.random() < 0.6:
        for _ in range(rng.randint(1, 3)):
            b[rng.randrange(lo, len(b))] ^= 1 << rng.randrange(8)
    else:
        i = rng.randrange(lo, len(b))
        run = rng.randbytes(min(8, len(b) - i))
        b[i:i + len(run)] = run
    return bytes(b)


def damaged_capture(path: Path, seed: int = 7) -> tuple[Path, set[int]]:
    """A capture of every answered exchange of the samples, its request body and its
    response after the correlation id damaged (twice each), one connection each; and the
    API keys of those exchanges."""
    from analyzer.pipeline import Options, Run

    rng = random.Random(seed)
    packets = []
    port = 20000
    apis = set()
    for sample in sorted(SAMPLES.glob("*.pcap*")):
        for ex in Run(str(sample), Options()):
            q, r = ex.request, ex.response
            if q is None or r is None or ex.api_key is None or q.truncated or r.truncated:
                continue
            header = ex.request_tree.child("header") if ex.request_tree is not None else None
            if header is None:
                continue
            apis.add(ex.api_key)
            for _ in range(2):
                flow = TcpFlow(("10.1.0.1", port), ("10.1.0.2", 9092))
                port += 1
                packets += flow.handshake()
                packets += flow.send(0, kafka_frame(_damage(q.data, header.length, rng)))
                packets += flow.send(1, kafka_frame(_damage(r.data, 4, rng)))
                packets += flow.fin(0) + flow.fin(1)
    write_pcap(str(path), packets)
    return path, apis
