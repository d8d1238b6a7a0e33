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


@pytest.mark.parametrize("cmd", ["read", "stats", "check", "live"])
@pytest.mark.parametrize("port", ["abc", "0", "65536", "-1", "9092x"])
def test_a_port_is_a_port_number(cmd: str, port: str) -> None:
    r = _run(cmd, *([SAMPLE] if cmd != "live" else ["-i", "lo"]), "--port", port)
    assert r.returncode == 2
    assert r.stderr.splitlines() == [f"kafkawire-sniff: error: invalid value for '-p' / '--port': '{port}' is not "
                                     f"a port number (1-65535) (see 'kafkawire-sniff {cmd} --help')"]


@pytest.mark.parametrize("cmd", ["read", "stats", "check"])
def test_every_capture_is_checked_before_the_first_is_read(cmd: str, tmp_path: Path) -> None:
    """`read a.pcap b.pcap /missing.pcap` printed a and b before failing: each path is looked at
    first, every bad one named on its own line, and nothing else is printed."""
    not_capture = tmp_path / "notes.txt"
    not_capture.write_text("hi\n")
    missing = tmp_path / "missing.pcap"
    r = _run(cmd, SAMPLE, str(missing), SAMPLE, str(not_capture))
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.splitlines() == [f"kafkawire-sniff: error: {missing}: cannot open: No such file or directory",
                                     f"kafkawire-sniff: error: {not_capture}: not a pcap or pcapng file (only 3 bytes)"]


def test_a_capture_from_a_pipe_is_read_once() -> None:
    """A path that is not a regular file (``<(zcat x.pcap)``) is not opened ahead: its bytes
    would be gone when it is read."""
    r = subprocess.run(["bash", "-c", f"{sys.executable} -m analyzer read <(cat {SAMPLE}) | tail -1"],
                       capture_output=True, text=True, cwd=REPO, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "CRC: 4 valid, 0 INVALID", r.stderr
