"""TLS connections are recognised and reported (version, SNI), not taken for malformed Kafka."""
from __future__ import annotations

import ssl
import struct
from pathlib import Path

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
    bad = tmp_path / "bad.log"
    bad.write_text("CLIENT_RANDOM nothex\n")
    r = subprocess.run([sys.executable, "-m", "analyzer", "read", str(p), "--tls-keylog", str(bad)],
                       capture_output=True, text=True)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1
    assert r.stderr.startswith("kafkawire-sniff: error:")
