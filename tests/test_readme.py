"""The README shows what the tool prints: its sample output is checked against a real run."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _block_after(text: str, marker: str) -> list[str]:
    start = text.index(marker)
    end = text.index("```", start)
    return text[start:end].splitlines()


def test_read_sample_output_is_what_read_prints() -> None:
    readme = (REPO / "README.md").read_text()
    cmd = "$ kafkawire-sniff read samples/produce_fetch_rdkafka_gzip.pcap"
    shown = _block_after(readme, cmd)[1:]
    r = subprocess.run([sys.executable, "-m", "analyzer", "read", "samples/produce_fetch_rdkafka_gzip.pcap"],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    printed = r.stdout.splitlines()
    cut = shown.index("    ...")
    # the first lines as printed, then (after "...") the end as printed
    assert shown[:cut] == printed[:cut]
    assert shown[cut + 1:] == printed[len(printed) - len(shown) + cut + 1:]
    assert len(shown) - 1 < len(printed)
