"""Seed corpus of the core's figures fuzz target (core/fuzz/fuzz_targets/figures.rs):
every request and response frame of the repo's sample captures, with the target's
five-byte prefix (mode, API index, version) in front.

    python3 tests/figures_corpus.py OUT_DIR CAPTURE...
"""
from __future__ import annotations

import hashlib
import os
import struct
import sys

from analyzer.pipeline import Options, analyze_file
from dissectors.schema import APIS

# the target picks the API by its index among the known keys, sorted
_INDEX = {k: i for i, k in enumerate(sorted(APIS))}


def prefix(response: bool, api_key: int, api_version: int) -> bytes | None:
    """The target's prefix that selects this API and version (None: one it cannot name)."""
    i = _INDEX.get(api_key)
    if i is None or not 0 <= api_version < 0x8000:
        return None
    # mode: bit 0 response; bits 1-2 limits 0 (the pipeline's); requests: the parsed header
    return struct.pack(">BHH", 1 if response else 0, i, api_version)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    out = argv[1]
    os.makedirs(out, exist_ok=True)
    written = 0
    for path in argv[2:]:
        for ex in analyze_file(path, Options()):
            if ex.protocol != "kafka" or ex.api_key is None or ex.api_version is None:
                continue
            for response, frame in ((False, ex.request), (True, ex.response)):
                if frame is None:
                    continue
                head = prefix(response, ex.api_key, ex.api_version)
                if head is None:
                    continue
                data = head + bytes(frame.data)
                name = hashlib.sha1(data).hexdigest()
                target = os.path.join(out, name)
                if not os.path.exists(target):
                    with open(target, "wb") as f:
                        f.write(data)
                    written += 1
    print(f"{written} seed inputs in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
