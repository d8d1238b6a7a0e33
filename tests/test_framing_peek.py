"""The per-frame shortcuts between framing and pairing give the same answers as the long way.

- ``plausible_request`` returns the header it parsed whole from a peek; that header is
  ``parse_request_header`` of the whole frame (so pairing does not parse it again);
- the framer keeps what the plausibility check returned on ``Frame.peeked``;
- framer state kept as class defaults is never shared between framers.
"""
from __future__ import annotations

import random

from analyzer import pipeline as pipeline_mod
from analyzer.framing import Framer
from analyzer.model import Conn, Endpoint, StreamData, StreamEnd
from analyzer.pipeline import Options, Pipeline
from dissectors.header import RequestHeader, parse_request_header, plausible_request
from tests.pcapgen import TcpFlow, kafka_frame, kafka_request, kafka_response, uvarint, write_pcap

CONN = Conn(0, Endpoint("1.1.1.1", 1), Endpoint("2.2.2.2", 9092))


def _random_request(rng: random.Random) -> bytes:
    """A request body (after the size prefix): sometimes flexible with tagged fields, sometimes
    with a client id that is long, null, unprintable or running past the frame."""
    api_key, version = rng.choice([(3, 1), (3, 12), (18, 3), (1, 4), (1, 13), (0, 9), (7, 0), (0, 3)])
    head = api_key.to_bytes(2, "big", signed=True) + version.to_bytes(2, "big") \
        + rng.randrange(-5, 1 << 31).to_bytes(4, "big", signed=True)
    kind = rng.random()
    if kind < 0.1:
        cid = b"\xff\xff"                                     # null client id
    elif kind < 0.2:
        cid = rng.randrange(0, 300).to_bytes(2, "big")        # length past what follows
    else:
        s = bytes(rng.choice(b"abcxyz-_.\x01\x7f\xc3") for _ in range(rng.choice([0, 3, 20, 60, 120])))
        cid = len(s).to_bytes(2, "big") + s
    tags = b""
    if rng.random() < 0.7:
        count = rng.choice([0, 0, 1, 2, 200])
        tags = uvarint(count) + b"".join(uvarint(t) + uvarint(3) + b"abc" for t in range(min(count, 2)))
    return head + cid + tags + bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40)))


def test_header_from_a_peek_is_that_of_the_whole_frame() -> None:
    rng = random.Random(11)
    kept = 0
    for _ in range(4000):
        frame = _random_request(rng)
        for peek in (8, 10, 16, 30, 64):
            h = plausible_request(frame[:peek], prefix=True)
            if isinstance(h, RequestHeader):
                kept += 1
                assert h == parse_request_header(frame) == parse_request_header(frame, partial=True)
                assert plausible_request(frame) and plausible_request(frame, prefix=True)
            else:
                assert h is True or h is False
        whole = plausible_request(frame)
        assert bool(whole) == (whole is not False)
    assert kept > 1000


def test_plausible_request_result_kinds() -> None:
    full = b"\x00\x12\x00\x03\x00\x00\x00\x07\x00\x03abc\x00body"
    h = plausible_request(full)
    assert isinstance(h, RequestHeader) and tuple(h) == (18, 3, 7, "abc", 14, 2)
    # a client id cut by the peek: judged on what is there, no header to keep
    assert plausible_request(b"\x00\x03\x00\x01\x00\x00\x00\x01\x00\x40abc", prefix=True) is True
    assert plausible_request(b"\x00\x03\x00\x01\x00\x00\x00\x01\x00\x01\x01") is False


def test_framer_keeps_what_the_check_returned() -> None:
    seen: list[bytes] = []

    def check(head: bytes) -> object:
        seen.append(head)
        return ("parsed", head[:8]) if len(head) >= 8 else False

    a, b = kafka_request(3, 12, 1, "c", b"x" * 100), kafka_request(3, 12, 2, "c", b"y" * 3)
    fr = Framer(CONN, 0, plausible=check, peek=64)
    out = fr.feed(StreamData(CONN, 0, 0, a + b + b[:6], 1.0, 1))      # the first event
    assert [f.peeked for f in out] == [("parsed", a[4:12]), ("parsed", b[4:12])]
    assert seen[0] == a[4:68] and seen[1] == b[4:]                   # min(size, peek) bytes
    out = []
    assert fr.feed_data(len(a + b) + 6, b[6:] + a, 2.0, 2, out) is None   # completes a buffered frame
    assert [f.data for f in out] == [b[4:], a[4:]]
    assert [f.peeked for f in out] == [None, None]                    # cut from the buffer
    out = []
    # in sync again: straight cut; a segment that is exactly one frame returns it
    f = fr.feed_data(len(a + b + b + a), b, 3.0, 3, out)
    assert out == [] and f is not None and f.data == b[4:] and f.peeked == ("parsed", b[4:12])
    assert (f.first_index, f.last_index, f.stream_offset) == (3, 3, len(a + b + b + a))
    # two whole frames and a cut third: both appended, the rest waits in the buffer
    base = len(a + b + b + a + b)
    assert fr.feed_data(base, a + b + a[:10], 4.0, 4, out) is None
    assert [f.data for f in out] == [a[4:], b[4:]] and fr._at == -1
    out = []
    assert fr.feed_data(base + len(a + b) + 10, a[10:], 5.0, 5, out) is None
    assert [(f.data, f.first_index, f.last_index) for f in out] == [(a[4:], 4, 5)]
    assert fr._at == base + len(a + b + a)
    # bytes that are not the expected offset go through feed (an overlap is dropped)
    out = []
    assert fr.feed_data(base, a, 6.0, 6, out) is None and out == []
    # without a check, nothing is kept
    fr = Framer(CONN, 1)
    out = fr.feed(StreamData(CONN, 1, 0, kafka_response(5, b"z"), 1.0, 1))
    assert len(out) == 1 and out[0].peeked is None


def test_framers_do_not_share_class_default_state() -> None:
    one, two = Framer(CONN, 0), Framer(CONN, 1, min_frame_size=0)
    one.feed(StreamData(CONN, 0, 0, b"\x00\x00\x00\x01", 1.0, 1))     # size 1 < 4: skipped
    one.finish()
    assert one.skipped == {"before first frame": 1, "end of stream": 3} and one.finished
    assert two.skipped == {} and not two.finished and two.frames == 0 and two._off is None
    out = two.feed(StreamData(CONN, 1, 0, b"\x00\x00\x00\x00", 1.0, 1))   # an empty SASL token
    assert [f.size for f in out] == [0] and two.frames == 1 and one.frames == 0
    # the scan pattern follows a later min_frame_size change
    three = Framer(CONN, 0, min_frame_size=4)
    three.min_frame_size = 0
    out = three.feed(StreamData(CONN, 0, 0, b"\x00\x00\x00\x00" + kafka_frame(b"abcd"), 1.0, 1))
    assert [f.data for f in out] == [b"", b"abcd"]
    assert three.feed(StreamEnd(CONN, 0, "fin", 2.0, 2)) == [] and three.skipped == {}


def test_pairing_uses_the_header_the_framer_parsed(tmp_path, monkeypatch) -> None:
    f = TcpFlow(("10.0.0.1", 40000), ("10.0.0.2", 9092))
    pkts = f.handshake()
    for i in range(1, 6):
        pkts += f.send(0, kafka_request(18, 0, i, "client-a"))
        pkts += f.send(1, kafka_response(i, b"\x00" * 6))        # ApiVersions v0: no error, no keys
    pkts += f.fin(0) + f.fin(1)
    path = tmp_path / "p.pcap"
    write_pcap(str(path), pkts)
    calls = []
    real = pipeline_mod.parse_request_header

    def counting(data: bytes, partial: bool = False) -> RequestHeader | None:
        calls.append(len(data))
        return real(data, partial)

    monkeypatch.setattr(pipeline_mod, "parse_request_header", counting)
    from analyzer._core import open_capture
    pipe = Pipeline(Options(decode="lite"))
    with open_capture(str(path)) as reader:
        exs = list(pipe.feed_capture(reader)) + pipe.finish()
    assert [(e.status, e.api_name, e.api_version, e.correlation_id, e.client_id) for e in exs] == \
        [("ok", "ApiVersions", 0, i, "client-a") for i in range(1, 6)]
    assert calls == []


def test_responses_paired_from_the_request_the_check_found(tmp_path) -> None:
    """A response's check returns the request it answers (Frame.peeked); pairing takes it
    unless an earlier response of the same segment took it (then the second is an orphan),
    and ids reused while in flight still pair in request order."""
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
    run = pipeline_mod.Run(str(p), Options(decode="lite"))
    got = [(e.status, e.correlation_id, e.api_name) for e in run]
    assert got == [("ok", 5, "Metadata"), ("orphan_response", 5, "Unknown"),
                   ("ok", 9, "Metadata"), ("ok", 9, "ApiVersions")]
    assert run.summary.notes["correlation id reused while in flight"] == 1
    assert run.summary.request_frames == 3 and run.summary.response_frames == 4
