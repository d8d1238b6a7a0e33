"""The per-frame glue between framer and pairing (analyzer.pipeline, dissectors.header):

- ``request_header(data)`` (the framer's check of a 0.8+ client side) is
  ``plausible_request(data, prefix=True)``, and without ``check`` ``parse_request_header``;
- the framers get the check for the connection's state: the bare request-header check and
  the response lookup once the connection is 0.8+ Kafka, the general check again in raw SASL,
  and pairing stays right through those changes.
"""
from __future__ import annotations

import struct
from functools import partial
from pathlib import Path

from analyzer.pipeline import Options, Pipeline, Run, _response_check
from dissectors.header import parse_request_header, plausible_request, request_header
from tests.pcapgen import TcpFlow, kafka_frame, kafka_request, kafka_response, write_pcap

CLIENT = ("10.0.0.1", 40000)
BROKER = ("10.0.0.2", 9092)


def test_request_header_is_plausible_request_of_a_peek() -> None:
    cases = [
        kafka_request(3, 9, 7, "client-1", b"\x00" * 8)[4:],        # flexible, tagged fields
        kafka_request(18, 0, 1, "c")[4:],
        kafka_request(0, 8, 5, "x" * 100)[4:][:40],                  # client id cut by the peek
        b"\x00\x03\x00\x01\x00\x00\x00\x01\x00\x40abc",             # cut: judged on "abc"
        b"\x00\x03\x00\x01\x00\x00\x00\x01\x00\x01\x01",            # unprintable client id
        b"\x7f\x00\x00\x01\x00\x00\x00\x01\xff\xff",                # unknown api key
        b"\x00\x03",
    ]
    for data in cases:
        assert request_header(data) == plausible_request(data, prefix=True)
        assert request_header(data, False) == plausible_request(data)
        assert request_header(data, True, False) == parse_request_header(data, True)
    h = request_header(kafka_request(3, 1, 7, "client-1")[4:])
    assert h and h.client_id == "client-1" and h.correlation_id == 7
    assert request_header(b"\x00\x03\x00\x01\x00\x00\x00\x01\x00\x40abc") is True
    assert request_header(b"\x00\x03\x00\x01\x00\x00\x00\x01\x00\x01\x01") is False


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


def test_checks_follow_the_connection_state(tmp_path: Path) -> None:
    p = _sasl_flow(tmp_path)
    pipe = Pipeline(Options(decode="lite"))
    seen = []
    from analyzer._core import open_capture
    with open_capture(str(p)) as reader:
        for pkt in reader:
            for _ex in pipe.feed(pkt):
                pass
            st = next(iter(pipe._conns.values()), None)
            if st is not None and st.framers[0] is not None and st.framers[1] is not None:
                c, r = st.framers[0].plausible, st.framers[1].plausible
                seen.append(("raw" if st.sasl_raw else "kafka",
                             c is request_header, isinstance(r, partial) and r.func is _response_check))
    # 0.8+ Kafka: the bare checks; raw SASL: the general one on both sides; Kafka again after
    assert ("kafka", True, True) in seen and ("raw", False, False) in seen
    assert seen[-1] == ("kafka", True, True)
    exs = list(Run(str(p), Options(decode="lite")))
    assert [(e.api_name, e.status, e.correlation_id) for e in exs] == [
        ("ApiVersions", "ok", 1), ("SaslHandshake", "ok", 2), ("SaslToken", "ok", None),
        ("Metadata", "ok", 3), ("Metadata", "unanswered", 4)]
