"""A reader that goes away (``kafkawire-sniff read ... | head``) ends the command quietly."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import SAMPLES

SAMPLE = SAMPLES / "group_rdkafka.pcap"


@pytest.mark.parametrize("args", [["read", "-f", "ndjson"], ["read", "-f", "tree"], ["read", "-f", "json"]])
def test_closed_pipe_exits_zero_without_message(args: list[str]) -> None:
    if not SAMPLE.exists():
        pytest.skip("samples/group_rdkafka.pcap missing")
    p = subprocess.Popen([sys.executable, "-m", "analyzer", *args, str(SAMPLE)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None and p.stderr is not None
    first = p.stdout.readline()
    assert first                       # it did write
    p.stdout.close()                   # the reader goes away long before the output ends
    err = p.stderr.read()
    assert p.wait(timeout=60) == 0
    assert err == b""
