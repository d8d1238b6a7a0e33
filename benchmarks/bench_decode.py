"""Decode time per message: our generic decoder vs kafka-python 3's, on the same bytes.

Frames come from real captures (../shared/captures by default) through our own
pipeline; every request and response whose (api_key, version) kafka-python 3 can
decode is timed both ways, header included:

- ours:         dissectors.kafka.decode_request / decode_response -> annotated Field tree
                (records decoding off for the like-for-like figure; kafka-python
                leaves record bytes undecoded; a second figure has it on)
- kafka-python: <Api>Request/Response.decode(data, version=v, header=True)

Usage: python benchmarks/bench_decode.py [CAPTURE ...] [--repeat N]
Prints per-API medians and the overall ratio ours / kafka-python (lower is better).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analyzer.pipeline import analyze_file  # noqa: E402
from dissectors.context import DecodeContext, Presentation  # noqa: E402
from dissectors.kafka import decode_request, decode_response  # noqa: E402
from dissectors.schema import api_name  # noqa: E402

DEFAULT = ["group_rdkafka_tansu.pcap", "admin_kafkajs_tansu.pcap", "comp_none_kafkajs_tansu.pcap",
           "comp_gzip_kp3_tansu.pcap", "txn_rdkafka_tansu.pcap", "concurrent_mixed_tansu.pcapng"]


def kp_classes() -> dict[tuple[int, str], type]:
    import kafka.protocol.admin  # noqa: F401
    import kafka.protocol.consumer  # noqa: F401
    import kafka.protocol.metadata  # noqa: F401
    import kafka.protocol.producer  # noqa: F401
    from kafka.protocol.api_message import ApiMessage

    def subs(c: type):
        for s in c.__subclasses__():
            yield s
            yield from subs(s)
    out = {}
    for c in subs(ApiMessage):
        if getattr(c, "_class_version", 1) is None and getattr(c, "_json", None):
            out[(c.API_KEY, c.type)] = c
    return out


def collect(paths: list[str]) -> list[tuple[int, int, bool, bytes]]:
    msgs = []
    for p in paths:
        for ex in analyze_file(p):
            if ex.api_key is None or ex.api_version is None:
                continue
            if ex.request is not None and not ex.request.truncated:
                msgs.append((ex.api_key, ex.api_version, True, ex.request.data))
            if ex.response is not None and not ex.response.truncated:
                msgs.append((ex.api_key, ex.api_version, False, ex.response.data))
    return msgs


def time_each(fn, items, repeat: int) -> list[float]:
    best = [float("inf")] * len(items)
    for _ in range(repeat):
        for i, it in enumerate(items):
            t = time.perf_counter()
            fn(it)
            dt = time.perf_counter() - t
            if dt < best[i]:
                best[i] = dt
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("captures", nargs="*")
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    shared = ROOT.parent / "shared" / "captures"
    paths = a.captures or [str(shared / n) for n in DEFAULT if (shared / n).exists()]
    if not paths:
        sys.exit("bench_decode: no captures (give paths, or provide ../shared/captures)")
    classes = kp_classes()
    usable = []
    for key, ver, req, data in collect(paths):
        cls = classes.get((key, "request" if req else "response"))
        if cls is None or not 0 <= ver <= cls.max_version:
            continue
        try:
            cls.decode(data, version=ver, header=True)
        except Exception:
            continue  # kafka-python cannot read it (e.g. the mock's odd ApiVersions answer)
        usable.append((key, ver, req, data, cls))
    if not usable:
        sys.exit("bench_decode: no message both decoders can read")

    ctx_plain = DecodeContext(presentation=Presentation(decode_records=False))
    ctx_full = DecodeContext()

    def ours(it, ctx=ctx_plain):
        key, ver, req, data, _ = it
        if req:
            decode_request(data, ctx)
        else:
            decode_response(data, key, ver, ctx)

    def ours_full(it):
        ours(it, ctx_full)

    def theirs(it):
        key, ver, req, data, cls = it
        cls.decode(data, version=ver, header=True)

    # warm both (compiled plans / kafka-python's generated decoders)
    for it in usable:
        ours(it)
        ours_full(it)
        theirs(it)
    t_ours = time_each(ours, usable, a.repeat)
    t_full = time_each(ours_full, usable, a.repeat)
    t_kp = time_each(theirs, usable, a.repeat)

    groups: dict[tuple[str, int, str], list[int]] = defaultdict(list)
    for i, (key, ver, req, _d, _c) in enumerate(usable):
        groups[(api_name(key), ver, "request" if req else "response")].append(i)
    print(f"{len(usable)} messages from {len(paths)} capture(s); best of {a.repeat} runs each; times in µs")
    print(f"{'api':<28}{'ver':>4} {'dir':<9}{'n':>5}{'bytes':>8}{'ours':>9}{'ours+rec':>10}{'kp3':>9}{'ratio':>7}")
    for (name, ver, d), idx in sorted(groups.items()):
        mo = statistics.median(t_ours[i] for i in idx) * 1e6
        mf = statistics.median(t_full[i] for i in idx) * 1e6
        mk = statistics.median(t_kp[i] for i in idx) * 1e6
        size = statistics.median(len(usable[i][3]) for i in idx)
        print(f"{name:<28}{ver:>4} {d:<9}{len(idx):>5}{size:>8.0f}{mo:>9.1f}{mf:>10.1f}{mk:>9.1f}{mo / mk:>7.2f}")
    so, sf, sk = sum(t_ours), sum(t_full), sum(t_kp)
    print(f"total: ours {so * 1e3:.1f} ms, ours with records {sf * 1e3:.1f} ms, kafka-python {sk * 1e3:.1f} ms")
    print(f"ratio ours/kafka-python: {so / sk:.2f} (with records decoded: {sf / sk:.2f}); "
          f"per message: ours {so / len(usable) * 1e6:.1f} µs, kafka-python {sk / len(usable) * 1e6:.1f} µs")


if __name__ == "__main__":
    main()
