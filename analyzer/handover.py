"""The connections the core hands to the front: those whose first bytes in a direction are
a TLS record. Each is told apart (a ClientHello's server name and offers, a ServerHello's
version, kept in the run's summary), then decrypted with ``--tls-keylog`` (the plaintext goes
back to the core's framing, at plaintext stream offsets) or ignored (its bytes counted as
skipped)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from analyzer._core import looks_like_tls
from analyzer.model import Conn
from dissectors.tls import parse_hello

# why the bytes of a TLS connection not decrypted are skipped (Summary.bytes_skipped)
TLS_SKIPPED = "tls (not decrypted)"


class Handed:
    """A connection the core handed to the front because a direction's first bytes are a
    TLS record: decrypted with ``--tls-keylog`` (its plaintext goes back to the core's
    framing), or ignored."""
    __slots__ = ("first_data_seen", "ignored", "tls_info", "tls", "tls_offsets", "tls_bytes")

    def __init__(self) -> None:
        self.first_data_seen = [False, False]
        self.ignored: str | None = None                 # why its bytes are skipped
        self.tls_info: dict[str, Any] | None = None     # its entry in Summary.tls
        self.tls: Any = None                            # TlsStreamDecryptor with --tls-keylog
        self.tls_offsets = [0, 0]                       # plaintext stream offsets per direction
        self.tls_bytes = 0                              # TLS bytes fed to the decryptor


class Handover:
    """The handed connections of one run: ``summary`` (its ``tls`` entries, ``bytes_skipped``,
    gaps) is the run's; ``ignore(conn, client_dir)`` tells the core to ignore a connection."""

    def __init__(self, summary: Any, ignore: Callable[[int, int | None], None], keylog: Any) -> None:
        self.summary = summary
        self.ignore = ignore
        self.keylog = keylog                            # analyzer.tlsdecrypt.TlsKeyLog or None
        self.conns: dict[int, Handed] = {}

    def open_ids(self) -> list[int]:
        """The handed connections not ended yet."""
        return list(self.conns)

    def closed(self, cid: int) -> Handed | None:
        """A connection ended: what the hand-over knew of it (None: it was not handed). A
        key log was given but nothing of it decrypted: its bytes are counted as skipped."""
        h = self.conns.pop(cid, None)
        if h is not None and h.tls is not None and not any(h.tls_offsets):
            self.summary.bytes_skipped[TLS_SKIPPED] += h.tls_bytes
        return h

    def data(self, conn: Conn, d: int, off: int, data: bytes) -> tuple[int, bytes] | None:
        """Bytes of a handed connection at stream offset ``off`` of direction ``d``: the bytes
        for the core's framing and their offset (plaintext with a key log), or None when
        they are skipped (counted) or are not plaintext yet."""
        h = self.conns.get(conn.id)
        if h is None:
            h = self.conns[conn.id] = Handed()
        if h.ignored is not None:
            if not h.first_data_seen[d]:
                h.first_data_seen[d] = True
                if conn.protocol == "tls":
                    self._classify_first_bytes(conn, h, d, data)
            self.summary.bytes_skipped[h.ignored] += len(data)
            return None
        if not h.first_data_seen[d]:
            h.first_data_seen[d] = True
            if not self._classify_first_bytes(conn, h, d, data):
                self.summary.bytes_skipped[h.ignored or "not kafka"] += len(data)
                self.ignore(conn.id, conn.client_dir)
                return None
        if h.tls is not None:
            h.tls_bytes += len(data)
            plain = self._decrypt(conn, h, d, data, from_gap=False)
            if not plain:
                return None
            off = h.tls_offsets[d]
            h.tls_offsets[d] = off + len(plain)
            data = plain
        return off, data

    def gap(self, conn: Conn, d: int, length: int) -> None:
        """Bytes of a handed connection the capture does not have."""
        h = self.conns.get(conn.id)
        if h is None or h.ignored is not None:
            return
        self.summary.gaps += 1
        self.summary.gap_bytes += length
        if h.tls is not None:
            self._decrypt(conn, h, d, b"", from_gap=True)    # (the decryptor notes the gap)

    def _classify_first_bytes(self, conn: Conn, h: Handed, d: int, data: bytes) -> bool:
        """Spot TLS from the first bytes of a direction: False if its bytes are to be skipped."""
        if looks_like_tls(data):
            info = parse_hello(data)
            if h.tls_info is None:
                entry: dict[str, Any] = {"conn": conn.id, "client": None, "broker": None}
                self.summary.tls.append(entry)
                h.tls_info = entry
                if self.keylog is not None:
                    from analyzer.tlsdecrypt import TlsStreamDecryptor
                    h.tls = TlsStreamDecryptor(self.keylog)
                    entry["decryption"] = h.tls.status
                else:
                    conn.protocol = "tls"
            entry = h.tls_info
            if info.get("hello") == "client":
                conn.client_dir = d
                entry["client"], entry["broker"] = str(conn.endpoint(d)), str(conn.endpoint(1 - d))
                entry["sni"] = info.get("sni")
                entry["offered"] = info.get("offered")
                entry.setdefault("version", info.get("version"))
            elif info.get("hello") == "server":
                entry["version"] = info.get("version")
                if entry["client"] is None:
                    entry["client"], entry["broker"] = str(conn.endpoint(1 - d)), str(conn.endpoint(d))
            if h.tls is not None:
                return True
            h.ignored = TLS_SKIPPED
            return False
        return True

    def _decrypt(self, conn: Conn, h: Handed, d: int, data: bytes, from_gap: bool) -> bytes:
        """TLS bytes in, the Kafka bytes they carry out (``--tls-keylog``)."""
        tls = h.tls
        from_client = d == (conn.client_dir if conn.client_dir is not None else 0)
        if from_gap:
            tls.gap(d, from_client)
            plain = b""
        else:
            plain = tls.feed(d, data, from_client)
        entry = h.tls_info
        assert entry is not None        # set with h.tls (_classify_first_bytes)
        entry["decryption"] = tls.status
        if tls.version:
            entry["version"] = tls.version
        if getattr(tls, "cipher_suite", None):
            entry["cipher_suite"] = tls.cipher_suite
        if getattr(tls, "detail", None):
            entry["detail"] = tls.detail
        return plain
