"""Usage errors read the same in every command: one line, lower-case, one hint, exit 2."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLE = str(REPO / "samples" / "group_rdkafka.pcap")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "analyzer", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=120)


@pytest.mark.parametrize("cmd", ["read", "stats", "check"])
def test_missing_capture_argument_reads_the_same(cmd: str) -> None:
    r = _run(cmd)
    assert r.returncode == 2
    assert r.stderr.splitlines() == [f"kafkawire-sniff: error: missing argument 'CAPTURES...' "
                                     f"(see 'kafkawire-sniff {cmd} --help')"]


def test_unknown_rule_gives_one_hint() -> None:
    r = _run("check", SAMPLE, "--rule", "nosuchrule")
    assert r.returncode == 2
    assert r.stderr.splitlines() == ["kafkawire-sniff: error: invalid value for '--rule': unknown rule nosuchrule "
                                     "(see 'kafkawire-sniff check --list-rules')"]
    r = _run("spark", SAMPLE, "--out", "/nonexistent/o", "--skip-rule", "crc-mismatch,nope")
    assert r.returncode == 2
    assert r.stderr.splitlines() == ["kafkawire-sniff: error: invalid value for '--skip-rule': unknown rule nope "
                                     "(see 'kafkawire-sniff check --list-rules')"]


def test_a_split_size_without_a_unit_is_bytes_and_too_small() -> None:
    """"--split-size 8" (meant as 8MiB) would cut a file into a task per 8 bytes: refused."""
    r = _run("spark", SAMPLE, "--out", "/nonexistent/o", "--split-size", "8")
    assert r.returncode == 2
    assert r.stderr.splitlines() == ["kafkawire-sniff: error: invalid value for '--split-size': 8 bytes is too "
                                     "small: at least 64KiB (a number without a unit is bytes: e.g. 8MiB) "
                                     "(see 'kafkawire-sniff spark --help')"]


def test_click_messages_in_our_style() -> None:
    r = _run("read", "--nope", SAMPLE)
    assert r.returncode == 2
    assert r.stderr.splitlines() == ["kafkawire-sniff: error: no such option '--nope' "
                                     "(see 'kafkawire-sniff read --help')"]


def test_spark_rule_options_say_they_repeat() -> None:
    r = _run("spark", "--help")
    assert r.returncode == 0
    text = " ".join(r.stdout.split()).replace("comma- separated", "comma-separated")   # wrapped by click
    assert "--rule RULE Only this check rule (repeatable, or comma-separated)." in text
    assert "--skip-rule RULE Not this check rule (repeatable, or comma-separated)." in text


def test_timeline_exit_status_says_whether_the_group_was_seen() -> None:
    seen = _run("check", SAMPLE, "--timeline", "kws-group")
    assert seen.returncode == 0, seen.stderr
    assert "JoinGroup" in seen.stdout
    missing = _run("check", SAMPLE, "--timeline", "nosuchgroup")
    assert missing.returncode == 1
    assert missing.stderr.splitlines() == ["kafkawire-sniff: error: group 'nosuchgroup' not found "
                                           "(groups seen: kws-group)"]
