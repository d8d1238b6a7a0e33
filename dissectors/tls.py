"""Recognise TLS on a connection and read what its handshake says in clear text.

Kafka over TLS (port 9093 by convention) is opaque without keys; we still tell the
user what it is: the record-layer version, the SNI host name and the versions the
client offers (ClientHello), and the version the server chose (ServerHello).
"""
from __future__ import annotations

import struct

TLS_VERSIONS = {0x0300: "SSL 3.0", 0x0301: "TLS 1.0", 0x0302: "TLS 1.1", 0x0303: "TLS 1.2", 0x0304: "TLS 1.3"}


def version_name(v: int) -> str:
    return TLS_VERSIONS.get(v, f"0x{v:04x}")


def parse_hello(data: bytes) -> dict[str, object]:
    """What a ClientHello or ServerHello at the start of ``data`` says; {} when it is not one.

    Keys: ``hello`` ("client" | "server"), ``record_version``, ``version`` (for a server:
    the negotiated one, from supported_versions when present), ``sni``, ``offered``.
    """
    out: dict[str, object] = {}
    try:
        # (a handshake record, TLS 1.0-1.3 or SSL 3.0 in its header)
        if len(data) < 9 or data[0] != 0x16 or data[1] != 0x03 or data[2] > 0x04:
            return out
        rec_ver, rec_len = struct.unpack_from(">HH", data, 1)
        end = min(len(data), 5 + rec_len)
        htype = data[5]
        if htype not in (1, 2):
            return out
        pos = 9
        (legacy_ver,) = struct.unpack_from(">H", data, pos)
        pos += 2 + 32
        out["hello"] = "client" if htype == 1 else "server"
        out["record_version"] = version_name(rec_ver)
        out["version"] = version_name(legacy_ver)
        sid = data[pos]
        pos += 1 + sid
        if htype == 1:
            (n,) = struct.unpack_from(">H", data, pos)
            pos += 2 + n
            pos += 1 + data[pos]
        else:
            pos += 2 + 1
        if pos + 2 > end:
            return out
        (ext_len,) = struct.unpack_from(">H", data, pos)
        pos += 2
        ext_end = min(end, pos + ext_len)
        while pos + 4 <= ext_end:
            etype, elen = struct.unpack_from(">HH", data, pos)
            body = data[pos + 4:pos + 4 + elen]
            pos += 4 + elen
            if etype == 0 and htype == 1 and len(body) >= 5:
                (name_len,) = struct.unpack_from(">H", body, 3)
                out["sni"] = body[5:5 + name_len].decode("ascii", "replace")
            elif etype == 43:
                if htype == 1 and body:
                    vs = [struct.unpack_from(">H", body, 1 + 2 * i)[0] for i in range(body[0] // 2)]
                    out["offered"] = [version_name(v) for v in vs if (v & 0x0F0F) != 0x0A0A]
                elif htype == 2 and len(body) >= 2:
                    out["version"] = version_name(struct.unpack_from(">H", body, 0)[0])
    except (struct.error, IndexError):
        pass
    return out
