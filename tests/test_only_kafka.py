"""Only Kafka is Kafka: a connection on no --port port is Kafka only on the evidence of its
exchanges (core/src/evidence.rs), a response pairs only with a request that came before it,
and every byte of a connection judged not Kafka is counted apart.

The other protocols here are written as their wire formats are (length-prefixed binary
protocols above all, the hard cases for a Kafka size prefix); the public captures of other
protocols (tests/negative_corpus.tsv) are read when they have been laid out
(tools/negative_corpus.py) at $KWS_NEGATIVE_CORPUS or ~/.cache/kafkawire-sniff/negative-corpus.
"""
from __future__ import annotations

import glob
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyzer._core import UNIDENTIFIED
from analyzer.pipeline import Options, Run
from tests.pcapgen import TcpFlow, kafka_request, kafka_response, write_pcap

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "captures"


def _le32(n: int) -> bytes:
    return struct.pack("<i", n)


def _be32(n: int) -> bytes:
    return struct.pack(">i", n)


def _netbios(payload: bytes) -> bytes:
    return b"\x00" + len(payload).to_bytes(3, "big") + payload


def _smb1(cmd: int, mid: int) -> bytes:
    return _netbios(b"\xffSMB" + bytes([cmd]) + b"\x00" * 4 + b"\x18\x07\xc8" + b"\x00" * 12 + b"\xff\xfe"
                    + struct.pack("<HHH", 0, 0, mid) + b"\x00\x0c\x00\x02NT LM 0.12\x00")


def _smb2(cmd: int, msg_id: int) -> bytes:
    header = b"\xfeSMB" + struct.pack("<HHIHHIIQIIQ", 64, 0, 0, cmd, 1, 0, 0, msg_id, 0, 0, 0) + b"\x00" * 16
    return _netbios(header + struct.pack("<HH", 36, 2) + b"\x00" * 32)


def _modbus(tid: int, func: int, data: bytes) -> bytes:
    return struct.pack(">HHHB", tid, 0, len(data) + 2, 1) + bytes([func]) + data


def _mongo(req_id: int, reply_to: int, doc: bytes) -> bytes:
    body = struct.pack("<iii", req_id, reply_to, 2013) + b"\x00\x00\x00\x00\x00" + doc
    return _le32(len(body) + 4) + body


def _bson(key: str, value: int) -> bytes:
    e = b"\x10" + key.encode() + b"\x00" + _le32(value)
    return _le32(len(e) + 5) + e + b"\x00"


def _dns(qid: int, name: str, response: bool) -> bytes:
    q = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\x00\x00\x01\x00\x01"
    msg = struct.pack(">HHHHHH", qid, 0x8180 if response else 0x0100, 1, 1 if response else 0, 0, 0) + q
    if response:
        msg += b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x0e\x10\x00\x04\x0a\x00\x00\x01"
    return struct.pack(">H", len(msg)) + msg


def _pg(tag: bytes, body: bytes) -> bytes:
    return tag + _be32(len(body) + 4) + body


def _mysql(seq: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "little") + bytes([seq]) + payload


def _amqp_frame(kind: int, channel: int, payload: bytes) -> bytes:
    return struct.pack(">BHI", kind, channel, len(payload)) + payload + b"\xce"


def _mqtt(kind: int, body: bytes) -> bytes:
    return bytes([kind, len(body)]) + body


def _h2(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + _be32(stream) + payload


def _thrift(name: str, kind: int, seqid: int, body: bytes) -> bytes:
    msg = _be32(-0x7FFEFFFF + kind - 1) + _be32(len(name)) + name.encode() + _be32(seqid) + body + b"\x00"
    return _be32(len(msg)) + msg


def _ssh_packet(payload: bytes) -> bytes:
    pad = 8 - (len(payload) + 5) % 8 + 4
    return _be32(len(payload) + pad + 1) + bytes([pad]) + payload + b"\x00" * pad


def _tds(kind: int, payload: bytes) -> bytes:
    return bytes([kind, 1]) + struct.pack(">HHBB", len(payload) + 8, 0, 1, 0) + payload


# each protocol: its conversation as (side, message) in order, side 0 the client
PROTOCOLS: dict[str, list[tuple[int, bytes]]] = {
    "smb1": [(0, _smb1(0x72, 1)), (1, _smb1(0x72, 1)), (0, _smb1(0x73, 2)), (1, _smb1(0x73, 2))],
    "smb2": [(0, _smb2(0, i)) if k == 0 else (1, _smb2(0, i)) for i in range(1, 4) for k in (0, 1)],
    "modbus": [(s, _modbus(t, 3, b"\x00\x00\x00\x0a" if s == 0 else b"\x14" + b"\x00\x01" * 10))
               for t in range(1, 5) for s in (0, 1)],
    "mongodb": [(s, _mongo(i * 2 + s, i * 2 if s else 0, _bson("isMaster", 1))) for i in range(3) for s in (0, 1)],
    "dns-tcp": [(s, _dns(0x1234 + i, "kafka.example.org", s == 1)) for i in range(3) for s in (0, 1)],
    "postgresql": [(0, _be32(41) + _be32(196608) + b"user\x00kafka\x00database\x00kafka\x00\x00\x00"),
                   (1, _pg(b"R", _be32(0)) + _pg(b"Z", b"I")),
                   (0, _pg(b"Q", b"SELECT 1\x00")),
                   (1, _pg(b"T", b"\x00\x01?column?\x00" + b"\x00" * 18) + _pg(b"D", b"\x00\x01" + _be32(1) + b"1")
                    + _pg(b"C", b"SELECT 1\x00") + _pg(b"Z", b"I"))],
    "mysql": [(1, _mysql(0, b"\x0a8.0.36\x00" + _le32(7) + b"abcdefgh\x00\xff\xf7\x21\x02\x00" + b"\x00" * 13)),
              (0, _mysql(1, _le32(0x000FA685) + _le32(1 << 24) + b"\x21" + b"\x00" * 23 + b"kafka\x00\x00")),
              (1, _mysql(2, b"\x00\x00\x00\x02\x00\x00\x00")),
              (0, _mysql(0, b"\x03SELECT 1")), (1, _mysql(1, b"\x01") + _mysql(2, b"\x03def\x00\x00\x00\x011"))],
    "redis": [(s, m) for i in range(3)
              for s, m in ((0, b"*2\r\n$3\r\nGET\r\n$5\r\nkey:%d\r\n" % i), (1, b"$5\r\nvalue\r\n"))],
    "amqp": [(0, b"AMQP\x00\x00\x09\x01"),
             (1, _amqp_frame(1, 0, struct.pack(">HHBB", 10, 10, 0, 9) + _be32(0) + _be32(5) + b"PLAIN")),
             (0, _amqp_frame(1, 0, struct.pack(">HH", 10, 11) + _be32(0) + b"\x05PLAIN" + _be32(0))),
             (1, _amqp_frame(1, 0, struct.pack(">HHHIH", 10, 30, 2047, 131072, 60))),
             (0, _amqp_frame(8, 0, b"")), (1, _amqp_frame(8, 0, b""))],
    "mqtt": [(0, _mqtt(0x10, b"\x00\x04MQTT\x04\x02\x00\x3c\x00\x06client")), (1, _mqtt(0x20, b"\x00\x00")),
             (0, _mqtt(0x82, b"\x00\x01\x00\x05topic\x00")), (1, _mqtt(0x90, b"\x00\x01\x00")),
             (0, _mqtt(0xC0, b"")), (1, _mqtt(0xD0, b""))],
    "http2": [(0, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + _h2(4, 0, 0, b"\x00\x03\x00\x00\x00\x64")),
              (1, _h2(4, 0, 0, b"") + _h2(4, 1, 0, b"")),
              (0, _h2(1, 5, 1, b"\x82\x86\x84\x41\x8a\x08\x9d\x5c\x0b\x81\x70\xdc\x78\x0f\x03")),
              (1, _h2(1, 4, 1, b"\x88") + _h2(0, 1, 1, b"hello"))],
    "thrift": [(s, _thrift("getVersion", 1 if s == 0 else 2, i, b"" if s == 0 else b"\x0b\x00\x00" + _be32(3) + b"1.0"))
               for i in range(1, 4) for s in (0, 1)],
    "ssh": [(1, b"SSH-2.0-OpenSSH_9.6\r\n"), (0, b"SSH-2.0-OpenSSH_9.2p1\r\n"),
            (0, _ssh_packet(b"\x14" + b"\x11" * 16 + _be32(10) + b"curve25519" + b"\x00" * 40)),
            (1, _ssh_packet(b"\x14" + b"\x22" * 16 + _be32(10) + b"curve25519" + b"\x00" * 40)),
            (0, _ssh_packet(b"\x1e" + _be32(32) + b"\x33" * 32)),
            (1, _ssh_packet(b"\x1f" + _be32(51) + b"\x44" * 51 + _be32(32) + b"\x55" * 32))],
    "tds": [(0, _tds(0x12, b"\x00\x00\x1a\x00\x06\x01\x00\x20\x00\x01\xff" + b"\x00" * 16)),
            (1, _tds(0x04, b"\x00\x00\x1a\x00\x06\x01\x00\x20\x00\x01\xff" + b"\x00" * 16)),
            (0, _tds(0x01, "SELECT 1".encode("utf-16-le"))),
            (1, _tds(0x04, b"\x81\x01\x00" + b"\x00" * 20 + b"\xfd\x10\x00\xc1\x00\x01" + b"\x00" * 8))],
    "http": [(0, b"GET / HTTP/1.1\r\nHost: kafka\r\n\r\n"), (1, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")] * 2,
    "socks5": [(0, b"\x05\x01\x00"), (1, b"\x05\x00"), (0, b"\x05\x01\x00\x01\x0a\x00\x00\x01\x23\x84"),
               (1, b"\x05\x00\x00\x01\x0a\x00\x00\x01\x23\x84")],
}


def _conversation(tmp_path: Path, name: str, messages: list[tuple[int, bytes]], port: int,
                  handshake: bool = True) -> tuple[str, int]:
    """A pcap of one connection to ``port`` carrying ``messages``: its path and payload bytes."""
    flow = TcpFlow(("10.1.0.1", 41000), ("10.1.0.2", port))
    pkts = flow.handshake() if handshake else []
    for side, data in messages:
        pkts += flow.send(side, data)
    pkts += flow.fin(0) + flow.fin(1)
    path = str(tmp_path / f"{name}.pcap")
    write_pcap(path, pkts)
    return path, sum(len(m) for _s, m in messages)


def _analyse(path: str, **opts: object) -> tuple[list, dict]:
    run = Run(path, Options(**opts))    # type: ignore[arg-type]
    exchanges = list(run)
    return exchanges, run.summary.to_json()


@pytest.mark.parametrize("name", sorted(PROTOCOLS))
@pytest.mark.parametrize("port", [9093, 2775, 445, 40000])
def test_other_protocols_on_other_ports_are_unidentified_tcp(tmp_path: Path, name: str, port: int) -> None:
    path, n = _conversation(tmp_path, name, PROTOCOLS[name], port)
    exchanges, s = _analyse(path)
    assert exchanges == []
    assert s["kafka_connections"] == 0 and s["other_connections"] == 1
    assert s["request_frames"] == s["response_frames"] == 0
    # every byte is accounted for, as unidentified
    assert s["bytes_skipped"] == {UNIDENTIFIED: n}
    assert s["detection"] == {}


def test_kafka_on_an_odd_port_is_found_with_its_evidence_and_decoded_from_its_start(tmp_path: Path) -> None:
    # an ApiVersions v0 and a Metadata v0 (no topics) exchange, then an unanswered one
    api_versions = kafka_response(1, b"\x00\x00" + struct.pack(">ihhh", 1, 18, 0, 3))
    metadata = kafka_response(2, struct.pack(">iih", 1, 1, 4) + b"host" + struct.pack(">ii", 9092, 0))
    messages = [(0, kafka_request(18, 0, 1, "cli")), (1, api_versions),
                (0, kafka_request(3, 0, 2, "cli", struct.pack(">i", 0))), (1, metadata),
                (0, kafka_request(3, 0, 3, "cli", struct.pack(">i", 0)))]
    path, _n = _conversation(tmp_path, "kafka", messages, 19093)
    exchanges, s = _analyse(path)
    assert [(e.api_name, e.status) for e in exchanges] == [
        ("ApiVersions", "ok"), ("Metadata", "ok"), ("Metadata", "unanswered")]
    assert s["detection"] == {"auto": 1}
    assert s["auto_detected"][0]["evidence"] == "2 exchanges parsed and answered"
    assert exchanges[0].conn.detection == "auto: 2 exchanges parsed and answered"
    assert s["bytes_skipped"] == {}
    # read says why, and stats too
    out = subprocess.run([sys.executable, "-m", "analyzer", "read", path], capture_output=True, text=True, check=True)
    assert "kafka found by: auto-detected 1" in out.stdout
    assert "conn 0 10.1.0.1:41000 -> 10.1.0.2:19093: auto-detected (2 exchanges parsed and answered)" in out.stdout
    out = subprocess.run([sys.executable, "-m", "analyzer", "stats", "-f", "json", path], capture_output=True,
                         text=True, check=True)
    assert json.loads(out.stdout)["connections"]["detection"] == {"auto": 1}
    # with -p, the port says it
    _exchanges, s = _analyse(path, ports=(19093,))
    assert s["detection"] == {"port 19093": 1}


def test_one_request_alone_on_an_odd_port_is_too_thin(tmp_path: Path) -> None:
    path, n = _conversation(tmp_path, "lone", [(0, kafka_request(3, 0, 2, "cli", struct.pack(">i", 0)))], 19093)
    exchanges, s = _analyse(path)
    assert exchanges == [] and s["other_connections"] == 1 and s["bytes_skipped"] == {UNIDENTIFIED: n}
    # on the Kafka port it is a request with no answer
    exchanges, s = _analyse(path, ports=(19093,))
    assert [e.status for e in exchanges] == ["unanswered"]


def test_a_response_captured_before_its_request_is_an_orphan(tmp_path: Path) -> None:
    flow = TcpFlow(("10.1.0.1", 41000), ("10.1.0.2", 9092))
    pkts = flow.handshake()
    req = flow.send(0, kafka_request(18, 0, 5, "cli"))
    head, tail = flow.send(1, kafka_response(5, b"\x00\x00" + struct.pack(">i", 0)), sizes=[6])
    # the response's last bytes are captured before the request, its first bytes after it:
    # the frame is whole only then, but its last byte came first
    tail.ts, req[0].ts, head.ts = req[0].ts, head.ts, tail.ts
    path = str(tmp_path / "early.pcap")
    write_pcap(path, pkts + [tail] + req + [head] + flow.fin(0) + flow.fin(1))
    exchanges, s = _analyse(path)
    assert [(e.status, e.latency_ms) for e in exchanges] == [("orphan_response", None), ("unanswered", None)]
    assert exchanges[0].notes[0] == "response captured before the request with its correlation id"
    assert s["notes"]["responses before their request"] == 1


_random_conversation = st.lists(st.tuples(st.integers(0, 1), st.binary(min_size=1, max_size=300)),
                                min_size=1, max_size=12)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(messages=_random_conversation, port=st.integers(1, 65535).filter(lambda p: p != 9092),
       handshake=st.booleans())
def test_random_byte_streams_on_random_ports_are_never_kafka(tmp_path: Path, messages: list[tuple[int, bytes]],
                                                              port: int, handshake: bool) -> None:
    path, n = _conversation(tmp_path, "random", messages, port, handshake)
    exchanges, s = _analyse(path)
    assert exchanges == [] and s["kafka_connections"] == 0
    assert s["bytes_skipped"].get(UNIDENTIFIED, 0) == n


@st.composite
def _shaped(draw: st.DrawFn) -> list[tuple[int, bytes]]:
    """A protocol's conversation with its fields redrawn: the same shapes, other values."""
    name = draw(st.sampled_from(sorted(PROTOCOLS)))
    out = []
    for side, msg in PROTOCOLS[name]:
        b = bytearray(msg)
        for _ in range(draw(st.integers(0, 4))):
            if b:
                b[draw(st.integers(0, len(b) - 1))] = draw(st.integers(0, 255))
        out.append((side, bytes(b)))
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(messages=_shaped(), port=st.integers(1, 65535).filter(lambda p: p != 9092))
def test_protocol_shaped_streams_on_random_ports_are_never_kafka(tmp_path: Path, messages: list[tuple[int, bytes]],
                                                                 port: int) -> None:
    path, _n = _conversation(tmp_path, "shaped", messages, port)
    exchanges, s = _analyse(path)
    assert exchanges == [] and s["kafka_connections"] == 0


def _kafka_captures() -> list[str]:
    paths = sorted(glob.glob(str(ROOT / "samples" / "*.pcap*")))
    if SHARED.is_dir():
        paths += sorted(glob.glob(str(SHARED / "*.pcap*")) + glob.glob(str(SHARED / "public" / "*.pcap*")))
    return paths


@pytest.mark.parametrize("path", _kafka_captures(), ids=os.path.basename)
def test_every_kafka_capture_is_found_whatever_its_ports(path: str) -> None:
    """Each Kafka connection of our captures is found by auto-detection: none is
    unidentified, and the exchanges are those found with every connection's port given."""
    exchanges, s = _analyse(path, decode="lite")
    assert s["kafka_connections"] > 0
    assert UNIDENTIFIED not in s["bytes_skipped"], s
    ports = sorted({e.conn.broker.port for e in exchanges})
    given_ports, _s = _analyse(path, decode="lite", ports=tuple(ports), autodetect=False)

    def sig(es: list) -> list:
        return sorted(((e.conn.id, e.api_key, e.correlation_id, e.status) for e in es), key=repr)

    assert sig(exchanges) == sig(given_ports)


def _negative_corpus() -> Path | None:
    d = Path(os.environ.get("KWS_NEGATIVE_CORPUS") or Path.home() / ".cache" / "kafkawire-sniff" / "negative-corpus")
    return d if d.is_dir() and any(d.iterdir()) else None


@pytest.mark.skipif(_negative_corpus() is None,
                    reason="the public captures of other protocols are not laid out (tools/negative_corpus.py)")
def test_public_captures_of_other_protocols_hold_no_kafka() -> None:
    corpus = _negative_corpus()
    assert corpus is not None
    listed = [line.split("\t")[0] for line in (ROOT / "tests" / "negative_corpus.tsv").read_text().splitlines()[1:]
              if line.strip()]
    found = []
    read = 0
    for name in listed:
        path = corpus / name
        if not path.exists():
            continue
        try:
            _exchanges, s = _analyse(str(path), decode="lite")
        except Exception as e:  # a file the reader refuses is no Kafka either
            if type(e).__name__ != "CaptureError":
                raise
            continue
        read += 1
        if s["kafka_connections"] or s["kafka_tls_connections"]:
            found.append((name, s["kafka_connections"], s["exchanges"]))
    assert read >= 300, f"only {read} of the listed captures are laid out"
    assert found == []
