"""Framing and pairing in the core through a connection's changes of state: 0.8+ Kafka,
raw SASL tokens after a SaslHandshake v0, Kafka again; several responses in one segment.
"""
from __future__ import annotations

import struct
from pathlib import Path

from analyzer._core import open_capture
from analyzer.pipeline import Options, Pipeline, Run
from tests.pcapgen import TcpFlow, kafka_frame, kafka_request, kafka_response, write_pcap

CLIENT = ("10.0.0.1", 40000)
BROKER = ("10.0.0.2", 9092)


def _sasl_flow(tmp_path: Path) -> Path:
    f = TcpFlow(CLIENT, BROKER, ts=5.0)
    pkts = f.handshake()
    pkts += f.send(0, kafka_request(18, 0, 1, "c"))
    pkts += f.send(1, kafka_response(1, struct.pack(">hi", 0, 0)))
    mech = b"PLAIN"
    pkts += f.send(0, kafka_request(17, 0, 2, "sasl", struct.pack(">h", len(mech)) + mech))
    pkts += f.send(1, kafka_response(2, struct.pack(">hi", 0, 1) + struct.pack(">h", 5) + b"PLAIN"))
    pkts += f.send(0, kafka_frame(b"\x00alice\x00secret-pw"))
    pkts += f.send(1, kafka_frame(b""))
    pkts += f.send(0, kafka_request(3, 0, 3, "c", struct.pack(">i", 0)))
    pkts += f.send(1, kafka_response(3, struct.pack(">ii", 0, 0)))
    pkts += f.send(0, kafka_request(3, 0, 4, "c", struct.pack(">i", 0)))
    p = tmp_path / "glue.pcap"
    write_pcap(str(p), pkts)
    return p


def test_pairing_follows_the_connection_state(tmp_path: Path) -> None:
    """The same exchanges whether the capture is read whole or fed a packet at a time (the
    checks change with the state between packets)."""
    p = _sasl_flow(tmp_path)
    want = [("ApiVersions", "ok", 1), ("SaslHandshake", "ok", 2), ("SaslToken", "ok", None),
            ("Metadata", "ok", 3), ("Metadata", "unanswered", 4)]
    exs = list(Run(str(p), Options(decode="lite")))
    assert [(e.api_name, e.status, e.correlation_id) for e in exs] == want
    pipe = Pipeline(Options(decode="lite"))
    one_by_one = []
    with open_capture(str(p)) as reader:
        for pkt in reader:
            one_by_one += pipe.feed(pkt)
    one_by_one += pipe.finish()
    assert [(e.api_name, e.status, e.correlation_id) for e in one_by_one] == want


def test_responses_paired_from_the_request_the_check_found(tmp_path) -> None:
    """Responses cut from one segment pair in order: a second response with the id of a
    request already answered is an orphan, and ids reused while in flight still pair in
    request order."""
    f = TcpFlow(("10.0.0.1", 40000), ("10.0.0.2", 9092), ts=10.0)
    pkts = f.handshake()
    meta = kafka_request(3, 1, 5, "c", b"\x00\x00\x00\x00")
    pkts += f.send(0, meta)
    f.ts = 10.01
    # two responses with id 5 in one segment, one request in flight
    pkts += f.send(1, kafka_response(5, b"\x00" * 12) + kafka_response(5, b"\x00" * 12))
    f.ts = 10.02
    # id 9 used twice while in flight; both responses in one segment
    pkts += f.send(0, kafka_request(3, 1, 9, "c", b"\x00\x00\x00\x00"))
    pkts += f.send(0, kafka_request(18, 0, 9, "c"))
    f.ts = 10.03
    pkts += f.send(1, kafka_response(9, b"\x00" * 12) + kafka_response(9, b"\x00" * 6))
    pkts += f.fin(0) + f.fin(1)
    p = tmp_path / "peeked.pcap"
    write_pcap(str(p), pkts)
    run = Run(str(p), Options(decode="lite"))
    got = [(e.status, e.correlation_id, e.api_name) for e in run]
    assert got == [("ok", 5, "Metadata"), ("orphan_response", 5, "Unknown"),
                   ("ok", 9, "Metadata"), ("ok", 9, "ApiVersions")]
    assert run.summary.notes["correlation id reused while in flight"] == 1
    assert run.summary.request_frames == 3 and run.summary.response_frames == 4
