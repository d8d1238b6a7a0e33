"""Precision and recall of Kafka auto-detection, the figures the README quotes.

    python tools/detection_eval.py --kafka samples ../shared/captures ../shared/captures/public \
        --other ~/.cache/kafkawire-sniff/negative-corpus

Every capture is read with no Kafka port configured (``--port 1``), so that each Kafka
connection found is found by its evidence alone (core/src/evidence.rs):

- the ``--kafka`` captures hold Kafka alone (made with a capture filter on the brokers'
  ports): each of their connections that carries bytes and is not TLS is a Kafka
  connection to find;
- the ``--other`` captures hold no Kafka: each connection found in them is a false one.

Recall is the Kafka connections found over those to find; precision, the Kafka connections
found in the Kafka captures over every connection found. Prints one line per capture with a
connection found wrongly or missed, then the totals; exits 0.
"""
from __future__ import annotations

import argparse
import glob
import os
import sys
from collections.abc import Iterator

from analyzer._core import CaptureError
from analyzer.pipeline import Options, Run

CAPTURE_GLOBS = ("*.pcap", "*.pcapng", "*.cap", "*.pcap.gz", "*.pcapng.gz")


def captures(dirs: list[str]) -> Iterator[str]:
    for d in dirs:
        if os.path.isfile(d):
            yield d
            continue
        if not os.path.isdir(d):
            sys.exit(f"detection_eval: error: no such folder: {d}")
        for pattern in CAPTURE_GLOBS:
            yield from sorted(glob.glob(os.path.join(d, pattern)))


def connections(path: str) -> tuple[int, int] | None:
    """(Kafka connections found, connections with bytes that are not TLS), or None for a
    file the reader refuses."""
    try:
        run = Run(path, Options(ports=(1,), decode="lite"))
        for _ in run:
            pass
    except CaptureError:
        return None
    s = run.summary
    found = s.kafka_connections + s.kafka_tls_connections
    return found, s.connections - s.empty_connections - s.tls_connections


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kafka", nargs="*", default=[], help="captures (or folders of them) of Kafka alone")
    ap.add_argument("--other", nargs="*", default=[], help="captures (or folders of them) with no Kafka")
    args = ap.parse_args()
    found_true = to_find = 0
    kafka_files = 0
    for path in captures(args.kafka):
        r = connections(path)
        if r is None:
            continue
        kafka_files += 1
        found, carrying = r
        found_true += found
        to_find += carrying
        if found != carrying:
            print(f"missed   {carrying - found} of {carrying} connections: {path}")
    found_false = other_files = other_with = unreadable = 0
    for path in captures(args.other):
        r = connections(path)
        if r is None:
            unreadable += 1
            continue
        other_files += 1
        if r[0]:
            other_with += 1
            found_false += r[0]
            print(f"wrong    {r[0]} connections taken as Kafka: {path}")
    recall = found_true / to_find if to_find else float("nan")
    found_all = found_true + found_false
    precision = found_true / found_all if found_all else float("nan")
    print(f"Kafka captures: {kafka_files}, Kafka connections {to_find}, found {found_true}: recall {recall:.4f}")
    print(f"other captures: {other_files} read ({unreadable} unreadable), {other_with} with a connection taken "
          f"as Kafka, {found_false} connections: precision {precision:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
