"""Pairing, statuses, latency and the `read` command, on crafted captures."""
from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from analyzer._core import open_capture
from analyzer.pipeline import Options, Run
from tests.pcapgen import TcpFlow, kafka_frame, kafka_request, kafka_response, write_pcap

CLIENT = ("10.1.0.5", 51000)
BROKER = ("10.1.0.9", 9092)


def api_versions_response_v0(corr: int, keys: list[tuple[int, int, int]], error: int = 0) -> bytes:
    body = struct.pack(">hi", error, len(keys)) + b"".join(struct.pack(">hhh", *k) for k in keys)
    return kafka_response(corr, body)


def metadata_request_v0(corr: int, topics: list[str]) -> bytes:
    body = struct.pack(">i", len(topics)) + b"".join(struct.pack(">h", len(t)) + t.encode() for t in topics)
    return kafka_request(3, 0, corr, "meta-client", body)


def produce_v0_acks0(corr: int) -> bytes:
    # acks=0, timeout, no topics
    return kafka_request(0, 0, corr, "fire-and-forget", struct.pack(">hii", 0, 1000, 0))


def run(path: Path, **kw) -> tuple[list, Run]:
    r = Run(str(path), Options(**kw))
    return list(r), r


def test_pairs_by_correlation_id_with_latency(tmp_path: Path) -> None:
    f = TcpFlow(CLIENT, BROKER, ts=1000.0)
    pkts = f.handshake()
    # two requests in one segment
    f.ts = 1000.010
    pkts += f.send(0, kafka_request(18, 0, 7, "c1") + metadata_request_v0(8, ["orders"]))
    # responses out of order; the first split across two packets 5 ms apart
    f.ts = 1000.020
    pkts += f.send(1, kafka_response(8, struct.pack(">ii", 0, 0)))
    f.ts = 1000.030
    resp = api_versions_response_v0(7, [(0, 0, 9), (18, 0, 3)])
    pkts += f.send(1, resp[:10])
    f.ts = 1000.035
    pkts += f.send(1, resp[10:])
    pkts += f.fin(0) + f.fin(1)
    p = tmp_path / "pair.pcap"
    write_pcap(str(p), pkts)
    exs, r = run(p)
    by = {e.correlation_id: e for e in exs}
    assert set(by) == {7, 8}
    av = by[7]
    assert (av.api_name, av.api_version, av.status, av.client_id) == ("ApiVersions", 0, "ok", "c1")
    assert av.request_frame == 4 and av.response_frame == 7
    assert av.latency_ms == pytest.approx(25.0, abs=1e-3)
    assert av.ttfb_ms == pytest.approx(20.0, abs=1e-3)
    assert av.conn.client.port == 51000 and av.conn.broker.port == 9092
    md = by[8]
    assert md.api_name == "Metadata" and md.latency_ms == pytest.approx(10.0, abs=1e-3)
    body = md.request_tree.child("body")
    assert [t.get("name") for t in body.child("topics").children] == ["orders"]
    assert r.summary.request_frames == 2 and r.summary.response_frames == 2
    assert r.summary.exchanges == {"ok": 2}


def test_acks0_unanswered_and_orphans(tmp_path: Path) -> None:
    f = TcpFlow(CLIENT, BROKER, ts=50.0)
    pkts = f.handshake()
    pkts += f.send(0, produce_v0_acks0(1))
    pkts += f.send(0, metadata_request_v0(2, []))
    pkts += f.fin(0) + f.fin(1)
    # a second connection seen mid-stream: a response first (orphan), then a request
    g = TcpFlow(("10.1.0.6", 52000), BROKER, ts=60.0)
    pkts += g.send(1, kafka_response(99, struct.pack(">i", 0)))
    pkts += g.send(0, metadata_request_v0(100, ["x"]))
    p = tmp_path / "statuses.pcap"
    write_pcap(str(p), pkts)
    exs, r = run(p)
    st = {(e.conn.id, e.correlation_id): e for e in exs}
    assert st[(0, 1)].status == "no_response_expected" and st[(0, 1)].api_name == "Produce"
    assert st[(0, 2)].status == "unanswered"
    assert any("connection closed (fin)" in n for n in st[(0, 2)].notes)
    assert st[(1, 99)].status == "orphan_response" and st[(1, 99)].response_frame is not None
    assert st[(1, 100)].status == "unanswered"
    assert any("end of capture" in n for n in st[(1, 100)].notes)
    assert st[(1, 99)].conn.client.port == 52000   # the side sending to 9092 is the client
    assert r.summary.exchanges == {"no_response_expected": 1, "unanswered": 2, "orphan_response": 1}


def test_client_side_found_from_traffic_on_unknown_port(tmp_path: Path) -> None:
    f = TcpFlow(("127.0.0.1", 40001), ("127.0.0.1", 30000), ts=1.0)
    pkts = f.send(0, kafka_request(18, 0, 1, "auto"))        # no handshake captured
    pkts += f.send(1, api_versions_response_v0(1, [(18, 0, 3)]))
    p = tmp_path / "auto.pcap"
    write_pcap(str(p), pkts)
    exs, _ = run(p)
    assert len(exs) == 1 and exs[0].status == "ok"
    assert exs[0].conn.broker.port == 30000
    exs, r = run(p, autodetect=False)
    assert exs == [] and r.summary.packets_skipped.get("not a Kafka port") == 2


def test_sasl_handshake_v0_then_raw_tokens(tmp_path: Path) -> None:
    f = TcpFlow(CLIENT, BROKER, ts=5.0)
    pkts = f.handshake()
    mech = b"PLAIN"
    pkts += f.send(0, kafka_request(17, 0, 1, "sasl", struct.pack(">h", len(mech)) + mech))
    pkts += f.send(1, kafka_response(1, struct.pack(">hi", 0, 1) + struct.pack(">h", 5) + b"PLAIN"))
    pkts += f.send(0, kafka_frame(b"\x00alice\x00secret-pw"))
    pkts += f.send(1, kafka_frame(b""))
    pkts += f.send(0, metadata_request_v0(2, []))
    pkts += f.send(1, kafka_response(2, struct.pack(">ii", 0, 0)))
    p = tmp_path / "sasl.pcap"
    write_pcap(str(p), pkts)
    exs, _ = run(p)
    names = [e.api_name for e in exs]
    assert names == ["SaslHandshake", "SaslToken", "Metadata"]
    tok = exs[1]
    text = json.dumps(tok.request_tree.to_json())
    assert "secret-pw" not in text and "alice" in text


def test_read_formats_and_filters(tmp_path: Path) -> None:
    f = TcpFlow(CLIENT, BROKER, ts=1000.0)
    pkts = f.handshake()
    pkts += f.send(0, kafka_request(18, 0, 7, "c1"))
    pkts += f.send(1, api_versions_response_v0(7, [(18, 0, 3)], error=35))
    pkts += f.send(0, metadata_request_v0(8, ["t"]))
    pkts += f.send(1, kafka_response(8, struct.pack(">ii", 0, 0)))
    p = tmp_path / "fmt.pcap"
    write_pcap(str(p), pkts)
    cmd = [sys.executable, "-m", "analyzer", "read", str(p)]
    out = subprocess.run(cmd + ["--format", "ndjson"], capture_output=True, text=True, check=True)
    objs = [json.loads(line) for line in out.stdout.splitlines()]
    assert [o["api_name"] for o in objs] == ["ApiVersions", "Metadata"]
    o = objs[0]
    for key in ("conn", "client", "broker", "protocol", "api_key", "api_name", "api_version", "correlation_id",
                "client_id", "request_frame", "response_frame", "request_time", "response_time", "latency_ms",
                "status", "error_codes", "request", "response"):
        assert key in o
    assert o["protocol"] == "kafka" and o["error_codes"] == ["UNSUPPORTED_VERSION"]
    assert o["client"] == "10.1.0.5:51000" and o["broker"] == "10.1.0.9:9092"
    hdr = o["request"]["children"][0]
    assert hdr["name"] == "header" and hdr["children"][2]["name"] == "correlation_id"
    assert hdr["children"][2]["value"] == 7 and hdr["children"][2]["offset"] == 4
    assert "summary" in out.stderr and "exchanges: ok 2" in out.stderr
    arr = subprocess.run(cmd + ["--format", "json", "--errors-only"], capture_output=True, text=True, check=True)
    assert [x["correlation_id"] for x in json.loads(arr.stdout)] == [7]
    txt = subprocess.run(cmd + ["--api", "Metadata"], capture_output=True, text=True, check=True).stdout
    assert "Metadata v0" in txt and "ApiVersions" not in txt.split("==")[0]
    tree = subprocess.run(cmd + ["--format", "tree"], capture_output=True, text=True, check=True).stdout
    assert "error_code (int16) = 35" in tree and "UNSUPPORTED_VERSION" in tree


@pytest.mark.parametrize("content, expect", [
    (None, "cannot open"),
    (b"hello, this is not a capture at all", "not a pcap or pcapng"),
])
def test_bad_input_is_one_line(tmp_path: Path, content: bytes | None, expect: str) -> None:
    p = tmp_path / "bad.pcap"
    if content is not None:
        p.write_bytes(content)
    r = subprocess.run([sys.executable, "-m", "analyzer", "read", str(p)], capture_output=True, text=True)
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kafkawire-sniff: error:") and expect in lines[0]
    assert "Traceback" not in r.stderr


def test_usage_error_exit_2() -> None:
    r = subprocess.run([sys.executable, "-m", "analyzer", "read", "--format", "nope", "x"],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "kafkawire-sniff: error:" in r.stderr


def test_cut_capture_keeps_what_came_before(tmp_path: Path) -> None:
    f = TcpFlow(CLIENT, BROKER, ts=1.0)
    pkts = f.handshake()
    pkts += f.send(0, kafka_request(18, 0, 7, "c1"))
    pkts += f.send(1, api_versions_response_v0(7, [(18, 0, 3)]))
    pkts += f.send(0, metadata_request_v0(8, ["t"]))
    p = tmp_path / "cut.pcap"
    write_pcap(str(p), pkts)
    data = p.read_bytes()
    p.write_bytes(data[:-20])   # cut inside the last record
    r = subprocess.run([sys.executable, "-m", "analyzer", "read", str(p), "--format", "ndjson"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    objs = [json.loads(line) for line in r.stdout.splitlines()]
    assert [o["correlation_id"] for o in objs] == [7]
    assert "capture ends inside packet" in r.stderr


def test_summary_lines_on_quickstart_sample() -> None:
    sample = Path(__file__).resolve().parents[1] / "samples" / "produce_fetch_rdkafka_gzip.pcap"
    r = subprocess.run([sys.executable, "-m", "analyzer", "read", str(sample)], capture_output=True, text=True,
                       check=True)
    body, summary = r.stdout.split("== summary")
    lines = body.strip().splitlines()
    assert len(lines) == 14
    produce = [x for x in lines if "Produce v10" in x]
    assert len(produce) == 2 and all("records=10 (" in x and "quickstart[" in x for x in produce)
    fetch = [x for x in lines if "Fetch v16" in x]
    assert fetch and "quickstart[0:10,1:10] records=20" in fetch[0]
    assert "exchanges: ok 14" in summary and "CRC: 4 valid, 0 INVALID" in summary


def test_correlation_id_reused_while_in_flight(tmp_path: Path) -> None:
    # requests 5, 6, 5, 5 (the id 5 reused while in flight): responses with id 5 pair
    # with the requests of id 5 in order; what is left is unanswered at the close, in order
    f = TcpFlow(CLIENT, BROKER, ts=1000.0)
    pkts = f.handshake()
    for i, corr in enumerate((5, 6, 5, 5)):
        f.ts = 1000.010 + i / 1000
        pkts += f.send(0, metadata_request_v0(corr, [f"t{i}"]))
    for i in range(2):
        f.ts = 1000.020 + i / 1000
        pkts += f.send(1, kafka_response(5, struct.pack(">ii", 0, 0)))
    pkts += f.fin(0) + f.fin(1)
    p = tmp_path / "reuse.pcap"
    write_pcap(str(p), pkts)
    exs, r = run(p)
    got = [(e.correlation_id, e.status, e.request_frame) for e in exs]
    first = [e.request_frame for e in exs if e.status == "ok"]
    left = [e.request_frame for e in exs if e.status == "unanswered"]
    assert [g[:2] for g in got] == [(5, "ok"), (5, "ok"), (6, "unanswered"), (5, "unanswered")]
    assert first[0] < left[0] < first[1] < left[1]
    assert r.summary.notes["correlation id reused while in flight"] == 2
    assert r.summary.notes["responses out of request order"] == 1


def test_unanswered_timeout_with_a_reused_correlation_id(tmp_path: Path) -> None:
    f = TcpFlow(CLIENT, BROKER, ts=1000.0)
    pkts = f.handshake()
    for i, corr in enumerate((5, 5, 6)):
        f.ts = 1000.0 + i
        pkts += f.send(0, metadata_request_v0(corr, ["t"]))
    p = tmp_path / "expire.pcap"
    write_pcap(str(p), pkts)
    pipe = Run(str(p), Options(unanswered_timeout=1.5)).pipeline
    with open_capture(str(p)) as reader:
        for pkt in reader:
            pipe.feed(pkt)
    # nothing answered; at t=1002.6 the requests older than 1.5 s expire: both of id 5
    out = pipe.expire(1002.6)
    assert [(e.correlation_id, e.status) for e in out] == [(5, "unanswered"), (5, "unanswered")]
    # id 6 still waits: it is unanswered at the end
    assert [(e.correlation_id, e.status) for e in pipe.finish()] == [(6, "unanswered")]
