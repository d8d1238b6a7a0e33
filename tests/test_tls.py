"""TLS connections are recognised and reported (version, SNI), not taken for malformed Kafka."""
from __future__ import annotations

import json
import re
import ssl
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner

from analyzer.cli import main
from analyzer.pipeline import Options, Run
from tests.pcapgen import kafka_request, kafka_response
from tests.tlsgen import tls_kafka_pcap


def _pcap(tmp_path: Path, version: ssl.TLSVersion) -> Path:
    p = tmp_path / "tls.pcap"
    req = kafka_request(18, 0, 1, "tls-client")
    resp = kafka_response(1, struct.pack(">hi", 0, 0))
    tls_kafka_pcap(str(p), [req], [resp], host="broker-1.kafka.test", version=version)
    return p


def test_tls13_connection_reported(tmp_path: Path) -> None:
    r = Run(str(_pcap(tmp_path, ssl.TLSVersion.TLSv1_3)), Options(ports=(9093,)))
    assert list(r) == []
    s = r.summary
    assert s.tls_connections == 1 and s.request_frames == 0 and s.exchanges == {}
    (t,) = s.tls
    assert t["sni"] == "broker-1.kafka.test"
    assert t["version"] == "TLS 1.3"
    assert t["client"] == "127.0.0.1:45000" and t["broker"] == "127.0.0.1:9093"
    assert s.bytes_skipped.get("tls (not decrypted)", 0) > 0


def test_tls12_version(tmp_path: Path) -> None:
    r = Run(str(_pcap(tmp_path, ssl.TLSVersion.TLSv1_2)), Options(ports=(9093,)))
    list(r)
    assert r.summary.tls[0]["version"] == "TLS 1.2"


def test_tls_keylog_decrypts_kafka(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    p = tmp_path / "tls.pcap"
    keylog = tmp_path / "keys.log"
    reqs = [kafka_request(18, 0, 1, "tls-client"), kafka_request(3, 0, 2, "tls-client", struct.pack(">i", 0))]
    resps = [kafka_response(1, struct.pack(">hi", 0, 0)), kafka_response(2, struct.pack(">ii", 0, 0))]
    tls_kafka_pcap(str(p), reqs, resps, host="b.kafka.test", keylog=str(keylog))
    r = subprocess.run([sys.executable, "-m", "analyzer", "read", str(p), "-p", "9093", "--tls-keylog", str(keylog),
                        "-f", "ndjson"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    objs = [json.loads(x) for x in r.stdout.splitlines()]
    assert [(o["api_name"], o["correlation_id"], o["status"]) for o in objs] == [
        ("ApiVersions", 1, "ok"), ("Metadata", 2, "ok")]
    assert objs[0]["client_id"] == "tls-client"
    assert "decrypting" in r.stderr and "SNI b.kafka.test" in r.stderr
    # stats reads the plaintext handed back to the core through its lean walk
    r = subprocess.run([sys.executable, "-m", "analyzer", "stats", str(p), "-p", "9093", "--tls-keylog", str(keylog),
                        "-f", "json", "-j", "1"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    groups = json.loads(r.stdout)["groups"]
    assert [(g["api"], g["count"], g["errors"], g["unanswered"]) for g in groups] == [
        ("ApiVersions", 1, {}, 0), ("Metadata", 1, {}, 0)]
    bad = tmp_path / "bad.log"
    bad.write_text("CLIENT_RANDOM nothex\n")
    r = subprocess.run([sys.executable, "-m", "analyzer", "read", str(p), "--tls-keylog", str(bad)],
                       capture_output=True, text=True)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1
    assert r.stderr.startswith("kafkawire-sniff: error:")


# ---------------------------------------------------------------- each connection counted once


def _summary_line(*args: str) -> str:
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "analyzer", "read", *args], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    (line,) = [x.strip() for x in r.stdout.splitlines() if x.strip().startswith("connections:")]
    return line


def test_each_connection_is_one_kind(tmp_path: Path) -> None:
    from tests.pcapgen import TcpFlow, write_pcap

    kafka = TcpFlow(("10.0.0.1", 40000), ("10.0.0.9", 9092))
    pkts = kafka.handshake() + kafka.send(0, kafka_request(18, 0, 1, "c")) \
        + kafka.send(1, kafka_response(1, struct.pack(">hi", 0, 0))) + kafka.fin(0) + kafka.fin(1)
    http = TcpFlow(("10.0.0.2", 40001), ("10.0.0.9", 9092), ts=1_700_000_001.0)
    pkts += http.handshake() + http.send(0, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n") + http.fin(0)
    lone = TcpFlow(("10.0.0.3", 40002), ("10.0.0.9", 9092), ts=1_700_000_002.0)
    pkts += lone.rst(0)                      # a one-packet stream: no payload
    write_pcap(str(tmp_path / "mixed.pcap"), pkts)
    assert _summary_line(str(tmp_path / "mixed.pcap")) == "connections: 3 (kafka 1, unidentified TCP 1, no payload 1)"
    r = Run(str(tmp_path / "mixed.pcap"), Options())
    list(r)
    d = r.summary.to_json()
    assert (d["kafka_connections"], d["kafka_tls_connections"], d["tls_connections"], d["other_connections"],
            d["empty_connections"]) == (1, 0, 0, 1, 1)


def test_tls_connection_counted_once_decrypted_or_not(tmp_path: Path) -> None:
    p, keylog = tmp_path / "tls.pcap", tmp_path / "keys.log"
    tls_kafka_pcap(str(p), [kafka_request(18, 0, 1, "tls-client")], [kafka_response(1, struct.pack(">hi", 0, 0))],
                   keylog=str(keylog))
    assert _summary_line(str(p), "-p", "9093") == "connections: 1 (TLS not decrypted 1)"
    assert _summary_line(str(p), "-p", "9093", "--tls-keylog", str(keylog)) == \
        "connections: 1 (kafka in decrypted TLS 1)"


def test_real_captures_connections_add_up() -> None:
    """On every sample (and shared capture, when present) the kinds add up to the connections;
    the rdkafka 0.9 sample has a connection with no payload (one ACK, of a connection made
    before the capture started)."""
    from tests.conftest import SAMPLES, SHARED_CAPTURES

    paths = sorted(SAMPLES.glob("*.pcap*"))
    if SHARED_CAPTURES.is_dir():
        paths += sorted(SHARED_CAPTURES.rglob("*.pcap*"))
    kinds = ("kafka_connections", "kafka_tls_connections", "tls_connections", "other_connections",
             "empty_connections")
    for path in paths:
        r = Run(str(path), Options(decode="lite"))
        for _ in r:
            pass
        d = r.summary.to_json()
        assert sum(d[k] for k in kinds) == d["connections"], (path.name, d)
    assert _summary_line(str(SAMPLES / "old_rdkafka_090_mock.pcap")) == "connections: 5 (kafka 4, no payload 1)"


def test_check_does_not_call_an_encrypted_capture_clean(tmp_path: Path) -> None:
    """A TLS capture read without its key log: check warns that the connections were not
    decrypted (one process and worker processes alike), and says what to do; with the key
    log, nothing of the kind."""
    pytest.importorskip("cryptography")
    pcap, keys = str(tmp_path / "tls.pcap"), str(tmp_path / "keys")
    tls_kafka_pcap(pcap, [kafka_request(18, 0, 1, "c")], [kafka_response(1, b"\x00\x00\x00\x00\x00\x00")],
                   keylog=keys, port=9092)
    for jobs in ("1", "2"):
        r = CliRunner().invoke(main, ["check", "-j", jobs, "-f", "json", pcap])
        assert r.exit_code == 0, r.output
        (f,) = json.loads(r.output)["captures"][0]["findings"]
        assert (f["rule"], f["severity"], f["conn"]) == ("tls-not-decrypted", "warning",
                                                          "127.0.0.1:45000 -> 127.0.0.1:9092")
        assert f["message"].startswith("1 TLS connection not decrypted (") and "its Kafka traffic" in f["message"]
        assert "--tls-keylog" in f["advice"] and f["details"]["connections"] == 1
    r = CliRunner().invoke(main, ["check", pcap])
    assert "1 warning" in r.output and "no findings" not in r.output
    r = CliRunner().invoke(main, ["check", "-f", "json", "--tls-keylog", keys, pcap])
    assert r.exit_code == 0 and json.loads(r.output)["captures"][0]["findings"] == []


def test_stats_says_what_was_encrypted(tmp_path: Path) -> None:
    pytest.importorskip("cryptography")
    pcap = str(tmp_path / "tls.pcap")
    tls_kafka_pcap(pcap, [kafka_request(18, 0, 1, "c")], [kafka_response(1, b"\x00\x00\x00\x00\x00\x00")], port=9092)
    r = CliRunner().invoke(main, ["stats", pcap])
    assert r.exit_code == 0
    assert re.search(r"TLS not decrypted: 1 connection \(1\.\d KiB not analysed; give --tls-keylog FILE to decode "
                     r"them\)", r.output), r.output
    for jobs in ("1", "2"):
        c = json.loads(CliRunner().invoke(main, ["stats", "-j", jobs, "-f", "json", pcap]).output)["connections"]
        assert c["tls_not_decrypted"] == 1 and c["tls_not_decrypted_bytes"] > 1000
