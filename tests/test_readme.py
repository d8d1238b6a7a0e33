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


def _examples(text: str) -> list[tuple[str, list[str]]]:
    """Every ``$ kafkawire-sniff ...`` line of the README's code blocks with the output
    shown under it (up to the next ``$`` line or the block's end)."""
    out: list[tuple[str, list[str]]] = []
    current: list[str] | None = None       # the output lines of the example being read
    in_block = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_block = not in_block
            current = None
        elif in_block and line.startswith("$ kafkawire-sniff "):
            out.append((line[2:], []))
            current = out[-1][1]
        elif in_block and line.startswith("$ "):
            current = None
        elif current is not None:
            current.append(line)
    return out


def test_every_example_runs_as_written_from_a_clone() -> None:
    """Each command the README shows with its output runs from the repository as written
    (its captures are the repo's samples, or none for the errors shown) and prints what is
    shown: the lines before a "..." line as the first ones printed, those after it as the
    last ones."""
    import shlex

    examples = _examples((REPO / "README.md").read_text())
    assert len(examples) >= 8
    for cmd, shown in examples:
        args = shlex.split(cmd)[1:]
        r = subprocess.run([sys.executable, "-m", "analyzer", *args], capture_output=True, text=True, cwd=REPO,
                           timeout=300)
        printed = (r.stdout + r.stderr).splitlines()
        cut = next((i for i, line in enumerate(shown) if line.strip() == "..."), len(shown))
        assert [x.rstrip() for x in printed[:cut]] == [x.rstrip() for x in shown[:cut]], cmd
        tail = shown[cut + 1:]
        if tail:
            assert [x.rstrip() for x in printed[-len(tail):]] == [x.rstrip() for x in tail], cmd
