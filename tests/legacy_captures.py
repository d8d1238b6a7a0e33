"""Writers for the legacy (pre-0.8) Kafka wire protocol, and the test captures built from them.

Everything here follows the protocol description in ../shared/seeds (000: request
and response headers, PRODUCE / FETCH / OFFSETS and the MESSAGE format; 001: the
multi-request header), so the bytes are ours, derived from the spec, not copied
from any capture. The frame writers return whole frames (4-byte length prefix
included); ``build_*`` functions describe connections as lists of
(direction, frame bytes) and :func:`write_captures` turns them into pcaps through
``tests/pcapgen.py``.

Run ``python tests/legacy_captures.py OUTDIR`` to write the captures by hand.
"""
from __future__ import annotations

import gzip
import struct
import sys
import zlib
from pathlib import Path
from typing import Any

import cramjam

CODECS = {"none": 0, "gzip": 1, "snappy": 2}
XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)


# --- messages -----------------------------------------------------------------

def message(payload: bytes, magic: int = 1, codec: str = "none", crc: int | None = None) -> bytes:
    """One message: LENGTH, MAGIC, [COMPRESSION], CHECKSUM, PAYLOAD. ``crc`` overrides the checksum."""
    c = zlib.crc32(payload) & 0xFFFFFFFF if crc is None else crc
    if magic == 0:
        body = struct.pack(">BI", 0, c) + payload
    else:
        body = struct.pack(">BBI", magic, CODECS[codec], c) + payload
    return struct.pack(">i", len(body)) + body


def snappy_xerial(data: bytes, block: int = 32 * 1024) -> bytes:
    """The xerial snappy-java stream: magic header, then [int32 size, raw snappy block]*."""
    out = [XERIAL_HEADER]
    for i in range(0, max(len(data), 1), block):
        raw = bytes(cramjam.snappy.compress_raw(data[i:i + block]))
        out.append(struct.pack(">i", len(raw)) + raw)
    return b"".join(out)


def compress(codec: str, data: bytes) -> bytes:
    if codec == "gzip":
        return gzip.compress(data, mtime=0)
    if codec == "snappy":
        return snappy_xerial(data)
    raise ValueError(codec)


def compressed_message(inner: list[bytes], codec: str) -> bytes:
    """A magic-1 wrapper whose payload is the compressed message set ``inner``."""
    return message(compress(codec, b"".join(inner)), magic=1, codec=codec)


# --- frames ---------------------------------------------------------------------

def frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def short_string(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def produce_request(topic: str, partition: int, messages: bytes) -> bytes:
    return frame(struct.pack(">h", 0) + short_string(topic) + struct.pack(">ii", partition, len(messages))
                 + messages)


def fetch_request(topic: str, partition: int, offset: int, max_size: int) -> bytes:
    return frame(struct.pack(">h", 1) + short_string(topic) + struct.pack(">iqi", partition, offset, max_size))


def offsets_request(topic: str, partition: int, time: int, max_number: int) -> bytes:
    return frame(struct.pack(">h", 4) + short_string(topic) + struct.pack(">iqi", partition, time, max_number))


def multifetch_request(parts: list[tuple[str, int, int, int]]) -> bytes:
    """parts: (topic, partition, offset, max_size)."""
    body = b"".join(short_string(t) + struct.pack(">iqi", p, o, m) for t, p, o, m in parts)
    return frame(struct.pack(">hh", 2, len(parts)) + body)


def multiproduce_request(parts: list[tuple[str, int, bytes]]) -> bytes:
    """parts: (topic, partition, message set bytes)."""
    body = b"".join(short_string(t) + struct.pack(">ii", p, len(m)) + m for t, p, m in parts)
    return frame(struct.pack(">hh", 3, len(parts)) + body)


def fetch_response(error: int, messages: bytes = b"") -> bytes:
    return frame(struct.pack(">h", error) + messages)


def offsets_response(error: int, offsets: list[int]) -> bytes:
    return frame(struct.pack(f">hi{len(offsets)}q", error, len(offsets), *offsets))


def multifetch_response(parts: list[tuple[int, bytes]], error: int = 0) -> bytes:
    """parts: (error code, message set bytes), one per requested topic-partition."""
    body = b"".join(struct.pack(">ih", len(m) + 2, e) + m for e, m in parts)
    return frame(struct.pack(">h", error) + body)


# --- the scenario ----------------------------------------------------------------

C2B, B2C = 0, 1   # client -> broker, broker -> client


def sample_messages() -> dict[str, bytes]:
    """Message sets used by the captures, one per magic/codec combination."""
    return {
        "magic0": message(b"hello legacy", magic=0) + message(b"second v0", magic=0),
        "magic1_none": message(b"plain v1", magic=1),
        "gzip": compressed_message([message(b"gz-a", magic=0), message(b"gz-b", magic=1),
                                    message(b"gz-c", magic=1)], "gzip"),
        "snappy": compressed_message([message(b"sn-%d" % i, magic=1) for i in range(4)], "snappy"),
        "bad_crc": message(b"corrupted", magic=1, crc=0xDEADBEEF),
    }


def build_main_connection() -> list[tuple[int, bytes]]:
    """The frames of the main legacy connection, in order, as (direction, frame)."""
    m = sample_messages()
    fetched = m["magic0"] + m["magic1_none"] + m["gzip"] + m["snappy"]
    return [
        (C2B, produce_request("events", 0, m["magic0"])),
        (C2B, produce_request("events", 1, m["gzip"])),
        (C2B, produce_request("events", -1, m["snappy"])),
        (C2B, fetch_request("events", 0, 0, 1 << 20)),
        (B2C, fetch_response(0, fetched)),
        (C2B, fetch_request("events", 0, 1 << 40, 1 << 20)),
        (B2C, fetch_response(1)),                                   # OFFSET_OUT_OF_RANGE
        (C2B, offsets_request("events", 0, -1, 4)),
        (B2C, offsets_response(0, [4096, 0])),
        (C2B, multiproduce_request([("events", 0, m["magic1_none"]), ("audit", 2, m["snappy"] + m["bad_crc"])])),
        (C2B, multifetch_request([("events", 0, 0, 4096), ("audit", 2, 0, 4096), ("audit", 9, 0, 4096)])),
        (B2C, multifetch_response([(0, m["magic1_none"]), (0, m["snappy"] + m["bad_crc"]), (3, b"")])),
    ]


def main_connection_packets(flow: Any) -> list[Any]:
    """The main connection as TCP packets (``flow`` is a pcapgen.TcpFlow).

    The first three requests share one segment; the first FETCH response is split
    across three segments (one cut inside its length prefix); the MULTIPRODUCE
    request is cut every 40 bytes; the other frames take one segment each.
    """
    frames = build_main_connection()
    pkts = flow.handshake()
    pkts += flow.send(C2B, frames[0][1] + frames[1][1] + frames[2][1])
    pkts += flow.send(C2B, frames[3][1])
    pkts += flow.send(B2C, frames[4][1], sizes=[2, 38])
    for d, f in frames[5:]:
        if f is frames[9][1]:
            pkts += flow.send(d, f, mss=40)
        else:
            pkts += flow.send(d, f)
        if d == C2B and not legacy_expects(f):
            pkts += flow.ack(B2C)
    pkts += flow.fin(C2B) + flow.fin(B2C) + flow.ack(C2B)
    return pkts


def legacy_expects(frame_bytes: bytes) -> bool:
    return struct.unpack(">h", frame_bytes[4:6])[0] in (1, 2, 4)


def four_byte_topic_connection() -> list[tuple[int, bytes]]:
    """A legacy connection on a 4-byte topic: its first header also parses as 0.8+ (Fetch v4)."""
    m = message(b"tiny", magic=0)
    return [
        (C2B, fetch_request("test", 0, 0, 1024)),
        (B2C, fetch_response(0, m)),
        (C2B, offsets_request("test", 0, -2, 1)),
        (B2C, offsets_response(0, [0])),
    ]


def write_captures(outdir: str | Path) -> dict[str, Path]:
    """Write the legacy test captures into ``outdir``; returns name -> path.

    - legacy_07.pcap: the main connection (:func:`build_main_connection`), segmented
      as :func:`main_connection_packets` says;
    - legacy_mixed.pcap: the main connection, then a 0.8+ connection (ApiVersions v0,
      Metadata v0) and a legacy connection on the 4-byte topic "test", so that the
      protocol is decided per connection.
    """
    from tests import pcapgen  # the shared pcap writer

    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    out: dict[str, Path] = {}

    flow = pcapgen.TcpFlow(("127.0.0.1", 40123), ("127.0.0.1", 9092))
    main = main_connection_packets(flow)
    out["legacy_07"] = outdir / "legacy_07.pcap"
    pcapgen.write_pcap(str(out["legacy_07"]), main)

    modern = pcapgen.TcpFlow(("127.0.0.1", 40200), ("127.0.0.1", 9092), ts=flow.ts + 1)
    mp = modern.handshake()
    mp += modern.send(C2B, pcapgen.kafka_request(18, 0, 1, "modern-client"))
    mp += modern.send(B2C, pcapgen.kafka_response(1, struct.pack(">hi", 0, 0)))
    mp += modern.send(C2B, pcapgen.kafka_request(3, 0, 2, "modern-client", struct.pack(">i", 0)))
    mp += modern.send(B2C, pcapgen.kafka_response(2, struct.pack(">ii", 0, 0)))
    mp += modern.fin(C2B) + modern.fin(B2C)
    tiny = pcapgen.TcpFlow(("127.0.0.1", 40300), ("127.0.0.1", 9092), ts=modern.ts + 1)
    tp = tiny.handshake()
    for d, f in four_byte_topic_connection():
        tp += tiny.send(d, f)
    tp += tiny.fin(C2B) + tiny.fin(B2C)
    out["legacy_mixed"] = outdir / "legacy_mixed.pcap"
    pcapgen.write_pcap(str(out["legacy_mixed"]), main + mp + tp)
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # run as a script from anywhere
    for name, p in write_captures(sys.argv[1] if len(sys.argv) > 1 else ".").items():
        print(name, p)
