"""Kafka messages for tests: schema-shaped ones built for every API and version with random
content (``Encoder``, ``schema_calls``), and the 0.8+ messages of the repo's captures (and
../shared's when present) with what a walk needs to read them (``capture_calls``).

A call is ``("q", frame, header_len)`` for a request, ``("s", frame, api_key, api_version)``
for a response: the arguments of the core's lean walk (``tests.lean``)."""
from __future__ import annotations

import functools
import random
import struct

from analyzer.pipeline import Options, Run
from dissectors.context import DecodeContext, Presentation
from dissectors.schema import APIS, FieldDef, in_range, is_flexible, request_header_version
from tests.conftest import SAMPLES, SHARED_CAPTURES
from tests.pcapgen import uvarint

Call = tuple

_FIXED_SIZE = {"int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint16": 2, "uint32": 4, "float64": 8,
               "bool": 1, "uuid": 16}


class Encoder:
    """A valid message of one API version from its FieldDefs, with random content."""

    def __init__(self, version: int, flexible: bool, rng: random.Random) -> None:
        self.version, self.flexible, self.rng = version, flexible, rng

    def sized(self, payload: bytes | None, wide: bool) -> bytes:
        if self.flexible:
            return uvarint(0 if payload is None else len(payload) + 1) + (payload or b"")
        if payload is None:
            return b"\xff\xff\xff\xff" if wide else b"\xff\xff"
        return struct.pack(">i" if wide else ">h", len(payload)) + payload

    def value(self, typ: str, name: str = "") -> bytes:
        rng = self.rng
        if typ in _FIXED_SIZE:
            if typ == "bool":
                return bytes([rng.randint(0, 1)])
            if typ == "int16" and "error" in name:
                return struct.pack(">h", rng.choice([0, 0, 3, 6, 87]))
            return bytes(rng.getrandbits(8) for _ in range(_FIXED_SIZE[typ]))
        if typ in ("varint", "varlong"):
            return uvarint(rng.randint(0, 1000))
        if typ == "string":
            return self.sized(None if rng.random() < 0.1 else
                              "".join(rng.choice("abcxyz-é") for _ in range(rng.randint(0, 12))).encode(), False)
        if typ in ("bytes", "records"):
            return self.sized(None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 20)), True)
        raise AssertionError(typ)

    def field(self, fd: FieldDef) -> bytes:
        rng = self.rng
        if fd.type == "struct":
            if in_range(self.version, fd.nullable):
                if rng.random() < 0.3:
                    return b"\xff"
                return b"\x01" + self.struct(fd.fields)
            return self.struct(fd.fields)
        if fd.type == "array":
            n = -1 if rng.random() < 0.1 else rng.randint(0, 3)
            head = (uvarint(n + 1) if self.flexible else struct.pack(">i", n))
            el = fd.element or "struct"
            return head + b"".join(self.struct(fd.fields) if el == "struct" else self.value(el)
                                   for _ in range(max(n, 0)))
        return self.value(fd.type, fd.name)

    def struct(self, fields: tuple[FieldDef, ...]) -> bytes:
        v, flexible = self.version, self.flexible
        out = b""
        tagged: list[tuple[int, bytes]] = []
        for fd in fields:
            if flexible and fd.tag is not None and (fd.tagged is None or in_range(v, fd.tagged)):
                if (fd.tagged is not None or in_range(v, fd.versions)) and self.rng.random() < 0.5:
                    tagged.append((fd.tag, self.field(fd)))
                continue
            if not in_range(v, fd.versions) or (fd.tag is not None and not flexible):
                continue
            out += self.field(fd)
        if flexible:
            if self.rng.random() < 0.2:
                tagged.append((90 + self.rng.randint(0, 9), self.rng.randbytes(self.rng.randint(0, 5))))
            tagged.sort()
            out += uvarint(len(tagged)) + b"".join(uvarint(t) + uvarint(len(p)) + p for t, p in tagged)
        return out


def schema_calls(seeds: int) -> list[Call]:
    """``seeds`` requests and responses of every API version, schema-shaped."""
    calls: list[Call] = []
    for api in sorted(APIS.values(), key=lambda a: a.key):
        for version in range(api.min_version, api.max_version + 1):
            flexible = is_flexible(api, version)
            for seed in range(seeds):
                rng = random.Random(f"{api.key}/{version}/{seed}")
                enc = Encoder(version, flexible, rng)
                hv = request_header_version(api.key, version)
                cid = b"" if hv == 0 else b"\x00\x03cli" + (b"\x00" if hv == 2 else b"")
                head = struct.pack(">hhi", api.key, version, 7) + cid
                calls.append(("q", head + enc.struct(api.request), len(head)))
                rhead = struct.pack(">i", 7) + (b"\x00" if flexible and api.key != 18 else b"")
                calls.append(("s", rhead + enc.struct(api.response), api.key, version))
    return calls


def recorded_calls(paths: list[str]) -> list[Call]:
    """The messages of these captures a ``stats`` run walks: each 0.8+ request and response
    of a known API and version whose frame the capture holds whole."""
    calls: list[Call] = []
    for path in paths:
        for ex in Run(path, Options(), DecodeContext(presentation=Presentation(decode_records=False))):
            api = APIS.get(ex.api_key) if ex.api_key is not None else None
            if api is None or ex.api_version is None or ex.api_version > api.max_version \
                    or ex.request is None or ex.request_tree is None:
                continue
            header = ex.request_tree.child("header")
            if header is None or ex.request.truncated:
                continue
            calls.append(("q", ex.request.data, header.length))
            if ex.response is not None and not ex.response.truncated:
                calls.append(("s", ex.response.data, ex.api_key, ex.api_version))
    return calls


@functools.lru_cache(maxsize=1)
def capture_calls() -> tuple[Call, ...]:
    paths = sorted(str(p) for p in SAMPLES.glob("*.pcap*"))
    if SHARED_CAPTURES.is_dir():
        paths += sorted(str(p) for p in SHARED_CAPTURES.rglob("*.pcap*"))
    return tuple(recorded_calls(paths))
