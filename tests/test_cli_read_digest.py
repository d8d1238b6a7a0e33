"""`read`'s summary line says what a Produce or a Fetch carried in one form, whatever the
answer held (README, `read`): ``TOPIC[PARTITION:RECORDS,...] records=TOTAL (BYTES B)``, with
``records=-`` when the records are not known (no answer, cut by the capture).

A consumer in an incremental fetch session (KIP-227) sends a full Fetch that returns
records, then Fetches that name the topic without partitions, or nothing at all, answered
empty: the summary line read `test-hardy[0:4] records=4 (.. B)`, then `topics=test-hardy`,
then nothing."""
from __future__ import annotations

import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.pcapgen import TcpFlow, kafka_request, kafka_response, uvarint, write_pcap

REPO = Path(__file__).resolve().parents[1]
TOPIC = "test-hardy"
# the digest of a Produce or Fetch: topic-partitions (if any), then the records
RECORDS_FORM = re.compile(r"^(\S+\[[0-9]+:([0-9]+|-)(,[0-9]+:([0-9]+|-))*\] )*records=([0-9]+ \([0-9]+ B\)|-)$")


def _s(text: str) -> bytes:
    """A compact string."""
    raw = text.encode()
    return uvarint(len(raw) + 1) + raw


def _batch(n: int) -> bytes:
    from kafka.record.memory_records import MemoryRecordsBuilder

    b = MemoryRecordsBuilder(2, 0, 1 << 20)
    for i in range(n):
        assert b.append(1_700_000_000_000 + i, b"k%d" % i, b"v%d" % i, []) is not None
    b.close()
    return bytes(b.buffer())


def fetch_v12_request(corr: int, epoch: int, topics: list[tuple[str, list[tuple[int, int]]]]) -> bytes:
    """A Fetch v12 request of session 77 (``epoch`` 0: a full fetch) naming ``topics``:
    (name, [(partition, fetch offset)])."""
    body = b"\x00" + struct.pack(">iiiibii", -1, 500, 1, 1 << 20, 0, 77 if epoch else 0, epoch)
    body += uvarint(len(topics) + 1)
    for name, parts in topics:
        body += _s(name) + uvarint(len(parts) + 1)
        for p, off in parts:
            body += struct.pack(">iiqiqi", p, -1, off, -1, 0, 1 << 20) + b"\x00"
        body += b"\x00"
    body += uvarint(1) + _s("") + b"\x00"        # no forgotten topics, rack_id "", no tags
    return kafka_request(1, 12, corr, "kws-digest", body)


def fetch_v12_response(corr: int, topics: list[tuple[str, list[tuple[int, int, bytes]]]]) -> bytes:
    """Its answer: (name, [(partition, high watermark, records)])."""
    body = b"\x00" + struct.pack(">ihi", 0, 0, 77) + uvarint(len(topics) + 1)
    for name, parts in topics:
        body += _s(name) + uvarint(len(parts) + 1)
        for p, hw, recs in parts:
            body += struct.pack(">ihqqq", p, 0, hw, hw, 0) + uvarint(0) + struct.pack(">i", -1)
            body += uvarint(len(recs) + 1) + recs + b"\x00"
        body += b"\x00"
    return kafka_response(corr, body + b"\x00")


@pytest.fixture(scope="module")
def session_capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("kafka")
    flow = TcpFlow(("127.0.0.1", 40100), ("127.0.0.1", 9092))
    pkts = flow.handshake()
    four = _batch(4)
    exchanges = [
        (fetch_v12_request(1, 0, [(TOPIC, [(0, 0)])]), fetch_v12_response(1, [(TOPIC, [(0, 4, four)])])),
        (fetch_v12_request(2, 1, [(TOPIC, [])]), fetch_v12_response(2, [])),    # names the topic, no partition
        (fetch_v12_request(3, 2, []), fetch_v12_response(3, [])),               # names nothing
        (fetch_v12_request(4, 3, [(TOPIC, [(0, 4)])]), None),                   # never answered
    ]
    for req, resp in exchanges:
        pkts += flow.send(0, req)
        if resp is not None:
            pkts += flow.send(1, resp)
    path = tmp_path_factory.mktemp("digest") / "session.pcap"
    write_pcap(str(path), pkts)
    return path


def test_fetch_digest_has_one_form_through_a_fetch_session(session_capture: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "analyzer", "read", str(session_capture), "--no-summary"],
                       capture_output=True, text=True, cwd=REPO, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stdout.splitlines() if "Fetch v12" in line]
    assert len(lines) == 4, r.stdout
    digests = [line.split("client_id=kws-digest  ", 1)[1].rsplit("  ", 1)[0] for line in lines]
    assert digests[0] == f"{TOPIC}[0:4] records=4 ({len(_batch(4))} B)"
    assert digests[1:3] == ["records=0 (0 B)", "records=0 (0 B)"]
    assert digests[3] == f"{TOPIC}[0:-] records=-" and lines[3].endswith("UNANSWERED")
    assert all(RECORDS_FORM.match(d) for d in digests), digests


def test_produce_and_fetch_digests_of_the_samples_have_the_records_form() -> None:
    """Every Produce and Fetch line of the samples (answered, acks=0, cut by the capture...)."""
    from analyzer.pipeline import Options, Run
    from analyzer.sinks.output import digest

    seen = 0
    for path in sorted((REPO / "samples").glob("*.pcap*")):
        for ex in Run(str(path), Options(decode="lite-topics")):
            if ex.protocol == "kafka" and ex.api_key in (0, 1):
                d = digest(ex, width=10_000)
                # (then CRC-INVALID and the error names, if any)
                assert RECORDS_FORM.match(re.sub(r"( [A-Z][A-Z0-9_-]*(x[0-9]+)?)+$", "", d)), (path.name, d)
                seen += 1
    assert seen > 50
