"""Decrypt TLS 1.2 / 1.3 streams with the secrets of an NSS key log (SSLKEYLOGFILE).

Which path and why: scapy's TLS layer does the work that is easy to get wrong. Its
``tlsSession`` takes the key log as ``nss_keys`` (the same dict shape that
``conf.tls_nss_filename`` loads), follows the handshake record by record, picks the
cipher suite from the ServerHello, runs the TLS 1.2 PRF / TLS 1.3 HKDF key schedule,
commits the read states at ChangeCipherSpec / Finished and handles KeyUpdate. We drive
one session per connection with whole records cut from the two byte streams, calling
``tlsSession.mirror()`` whenever the direction changes (scapy's documented way to read
both sides of a connection).

Building a scapy Packet costs about 2 ms a record (5 MB/s), so application-data records
take a fast path once the keys are in place: the record is opened with the very cipher
object scapy installed in the session's read state (``rcs.cipher.auth_decrypt``, the
call scapy's own record parser makes) and its sequence number is advanced as scapy
does. Any record whose inner content type is not application data (TLS 1.3
post-handshake messages, alerts) is handed back to scapy unchanged. Block and stream
cipher suites (CBC, RC4) and TLS compression always take scapy's full record parser.

One addition to scapy's flow: for TLS 1.2 the master secret is installed right after
the ServerHello (scapy only does it on a ClientKeyExchange, which an abbreviated,
resumed handshake does not have).
"""
from __future__ import annotations

import binascii
import logging
import struct
from types import SimpleNamespace
from typing import Any

from analyzer.errors import UserError
from dissectors.tls import parse_hello

# RFC 5246 6.2.3: a TLSCiphertext fragment is at most 2^14 + 2048 bytes.
MAX_RECORD = (1 << 14) + 2048
# Bytes of handshake / non-application records we let scapy parse per connection.
MAX_SLOW_BYTES = 4 * 1024 * 1024

CT_CCS, CT_ALERT, CT_HANDSHAKE, CT_APPDATA, CT_HEARTBEAT = 20, 21, 22, 23, 24
_HDR = struct.Struct(">BHH")
_SEQ = struct.Struct(">Q")

TLS12_LABELS = ("CLIENT_RANDOM",)
TLS13_LABELS = ("CLIENT_HANDSHAKE_TRAFFIC_SECRET", "SERVER_HANDSHAKE_TRAFFIC_SECRET",
                "CLIENT_TRAFFIC_SECRET_0", "SERVER_TRAFFIC_SECRET_0")
_VERSIONS = {0x0300: "SSL 3.0", 0x0301: "TLS 1.0", 0x0302: "TLS 1.1", 0x0303: "TLS 1.2", 0x0304: "TLS 1.3"}

STATUS_WAITING = "waiting for handshake"
STATUS_DECRYPTING = "decrypting"
STATUS_NO_KEY = "no key for this session"


class TlsKeyLog:
    """A parsed NSS key log: ``keys[label][client_random] = secret`` (scapy's ``nss_keys`` shape)."""

    def __init__(self, keys: dict[str, dict[bytes, bytes]], path: str = "<memory>") -> None:
        self.keys = keys
        self.path = path

    @classmethod
    def load(cls, path: str) -> TlsKeyLog:
        """The key log of ``--tls-keylog``: a one-line UserError when it cannot be read or
        used (decrypting needs the ``cryptography`` package)."""
        try:
            import cryptography  # noqa: F401
        except ImportError:
            raise UserError("--tls-keylog needs the 'cryptography' package "
                            "(pip install 'kafkawire-sniff[tls]')") from None
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            raise UserError(f"TLS key log {path}: no such file") from None
        except IsADirectoryError:
            raise UserError(f"TLS key log {path}: is a directory") from None
        except OSError as e:
            raise UserError(f"TLS key log {path}: cannot read ({e.strerror or e})") from None
        return cls.parse(raw, path)

    @classmethod
    def parse(cls, raw: bytes | str, path: str = "<memory>") -> TlsKeyLog:
        """Parse key log text; any malformed line is a one-line UserError naming the line."""
        if isinstance(raw, bytes):
            try:
                text = raw.decode("ascii")
            except UnicodeDecodeError:
                raise UserError(f"TLS key log {path}: not an SSLKEYLOGFILE (non-ASCII bytes)") from None
        else:
            text = raw
        keys: dict[str, dict[bytes, bytes]] = {}
        for n, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split()
            if len(parts) != 3 or not parts[0].replace("_", "").isalnum() or parts[0] != parts[0].upper():
                raise UserError(f"TLS key log {path} line {n}: expected '<LABEL> <client_random hex> "
                                f"<secret hex>' (SSLKEYLOGFILE format)")
            label, cr_hex, secret_hex = parts
            try:
                cr = binascii.unhexlify(cr_hex)
                secret = binascii.unhexlify(secret_hex)
            except (binascii.Error, ValueError):
                raise UserError(f"TLS key log {path} line {n}: {label} has a value that is not hex") from None
            # The RSA label (pre-master secret by encrypted-PMS prefix) keys by 8 bytes.
            if label != "RSA" and len(cr) != 32:
                raise UserError(f"TLS key log {path} line {n}: client random must be 32 bytes "
                                f"(64 hex digits), got {len(cr)}")
            if not secret:
                raise UserError(f"TLS key log {path} line {n}: empty secret")
            keys.setdefault(label, {})[cr] = secret
        if not keys:
            raise UserError(f"TLS key log {path}: no secrets in the file (is it an SSLKEYLOGFILE?)")
        return cls(keys, path)

    def lookup(self, label: str, client_random: bytes) -> bytes | None:
        return self.keys.get(label, {}).get(client_random)

    def __len__(self) -> int:
        return sum(len(v) for v in self.keys.values())


def _scapy() -> Any:
    """Import scapy's TLS layer on first use (it takes a while). A str: why it cannot work."""
    global _SCAPY
    if _SCAPY is None:
        try:
            from scapy.config import conf
            if not conf.crypto_valid:
                _SCAPY = "scapy's TLS layer needs the 'cryptography' package, not installed"
                return _SCAPY
            from scapy.layers.tls.crypto.cipher_aead import AEADTagError
            from scapy.layers.tls.crypto.cipher_stream import Cipher_NULL
            from scapy.layers.tls.crypto.common import CipherError
            from scapy.layers.tls.crypto.compression import Comp_NULL
            from scapy.layers.tls.crypto.h_mac import HMACError
            from scapy.layers.tls.crypto.suites import _tls_cipher_suites_cls
            from scapy.layers.tls.record import TLS, TLSApplicationData, _TLSEncryptedContent
            from scapy.layers.tls.record_tls13 import TLS13
            from scapy.layers.tls.session import tlsSession
        except ImportError as e:
            _SCAPY = f"scapy's TLS layer cannot be imported ({e})"
            return _SCAPY
        _SCAPY = SimpleNamespace(
            TLS=TLS, TLS13=TLS13, AppData=TLSApplicationData, Encrypted=_TLSEncryptedContent,
            tlsSession=tlsSession, AEADTagError=AEADTagError, CipherError=CipherError,
            HMACError=HMACError, Comp_NULL=Comp_NULL, Cipher_NULL=Cipher_NULL,
            suites=_tls_cipher_suites_cls)
    return _SCAPY


_SCAPY: Any = None


class _ScapyQuiet(logging.Filter):
    """Keeps scapy's runtime warnings ("Unknown cipher suite ...") off the user's stderr
    while we call it; the first one is kept for ``detail``."""

    def __init__(self) -> None:
        super().__init__()
        self.active = 0
        self.caught: list[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.active:
            return True
        if len(self.caught) < 4:
            self.caught.append(record.getMessage().splitlines()[0][:200])
        return False


_QUIET = _ScapyQuiet()
logging.getLogger("scapy.runtime").addFilter(_QUIET)


class _Failed(Exception):
    """Stop decrypting this connection; the message becomes ``status``."""


class TlsStreamDecryptor:
    """Decrypt one TLS connection, fed with both directions' in-order TCP bytes.

    ``feed`` returns the application data carried by the complete records of ``data``
    (partial records are buffered: at most one record, < 18.5 KiB, per direction).
    Problems never raise: they set ``status`` and later input is dropped.
    """

    def __init__(self, keylog: TlsKeyLog) -> None:
        self.keylog = keylog
        self.status: str = STATUS_WAITING
        self.version: str | None = None
        self.cipher_suite: str | None = None
        self.detail: str = ""                     # longer explanation of status, when useful
        self.records = 0                          # TLS records read (both directions)
        self.plaintext_bytes = [0, 0]             # application data out: [from client, from server]
        self.skipped_records = 0                  # records not decrypted (e.g. early data)
        self._bufs = (bytearray(), bytearray())   # [0]: client -> server, [1]: server -> client
        m = _scapy()
        self._m: Any = m
        self._sess: Any = None
        self._reading_client = True               # the session's read state is the client's write state
        self._client_random: bytes | None = None
        self._keys_checked = False
        self._slow_bytes = 0
        self._opened = [False, False]             # a record of this side passed authentication
        self._side = 0
        self._done = False
        if isinstance(m, str):
            self._fail(f"unsupported: {m}")

    # -- public ------------------------------------------------------------------------------

    def feed(self, direction: int, data: bytes, from_client: bool) -> bytes:
        """The next in-order bytes of one direction -> the application data they complete.

        ``from_client`` says whose bytes these are (``direction`` is the pipeline's own
        index of that side and is not needed here). Call in capture order across both
        directions: the handshake of one side unlocks the other side's keys.
        """
        if self._done or not data:
            return b""
        side = self._side = 0 if from_client else 1
        buf = self._bufs[side]
        buf += data
        out: list[bytes] = []
        pos, end = 0, len(buf)
        _QUIET.active += 1
        _QUIET.caught.clear()
        try:
            while end - pos >= 5:
                ctype, ver, length = _HDR.unpack_from(buf, pos)
                if not (CT_CCS <= ctype <= CT_HEARTBEAT) or ver >> 8 != 3 or length > MAX_RECORD:
                    raise _Failed(f"decryption failed: not a TLS record at this point of the "
                                  f"{'client' if from_client else 'server'} stream "
                                  f"(type {ctype}, version 0x{ver:04x}, length {length})")
                if end - pos < 5 + length:
                    break
                rec = bytes(buf[pos:pos + 5 + length])
                pos += 5 + length
                self.records += 1
                plain = self._record(from_client, ctype, rec)
                if plain:
                    out.append(plain)
                    self.plaintext_bytes[side] += len(plain)
        except _Failed as e:
            self._fail(str(e))
        except Exception as e:  # scapy raising on bytes it did not expect: never the user's problem
            why = str(e).splitlines()
            self._fail(f"decryption failed: {type(e).__name__} in scapy's TLS layer", why[0][:200] if why else "")
        finally:
            _QUIET.active -= 1
        if self._done:
            return b"".join(out)
        del buf[:pos]
        return b"".join(out)

    def gap(self, direction: int, from_client: bool) -> None:
        """Bytes of one direction were lost: record boundaries and sequence numbers are gone."""
        if not self._done:
            self._fail(f"decryption failed: gap in the {'client' if from_client else 'server'} TCP stream")

    # -- internals ---------------------------------------------------------------------------

    def _fail(self, status: str, detail: str = "") -> None:
        self.status = status
        if detail:
            self.detail = detail
        elif _QUIET.caught and not self.detail:
            self.detail = "scapy: " + _QUIET.caught[0]
        self._done = True
        self._bufs[0].clear()
        self._bufs[1].clear()
        self._sess = None

    def _session_for(self, from_client: bool) -> Any:
        s = self._sess
        if s is None:
            # Reading what the client writes means standing at the server's end.
            s = self._sess = self._m.tlsSession(connection_end="server")
            s.nss_keys = self.keylog.keys
            self._reading_client = True
        if from_client != self._reading_client:
            s.mirror()
            self._reading_client = from_client
        return s

    def _record(self, from_client: bool, ctype: int, rec: bytes) -> bytes:
        if self._client_random is None:
            # Nothing can be decrypted without the ClientHello's random (it names the keys).
            if not (from_client and ctype == CT_HANDSHAKE and len(rec) > 5 and rec[5] == 1):
                raise _Failed("unsupported: capture starts after the TLS handshake (no ClientHello)")
        s = self._session_for(from_client)
        if ctype == CT_APPDATA and self._keys_checked:
            plain = self._fast(s, rec)
            if plain is not None:
                return plain
        plain = self._slow(s, from_client, ctype, rec)
        if self._opened[0] and self._opened[1]:
            # Handshake over: drop what scapy keeps only to verify it (parsed messages,
            # certificates): ~130 KB -> ~10 KB a connection.
            if s.handshake_messages_parsed:
                s.handshake_messages_parsed = []
            if s.server_certs:
                s.server_certs = type(s.server_certs)([])
        return plain

    def _fast(self, s: Any, rec: bytes) -> bytes | None:
        """Open an application-data record with the session's own read cipher; None: use scapy."""
        tv = s.tls_version
        if tv == 0x0304 and s.triggered_prcs_commit and s.prcs is not None:
            # What scapy's TLS13.pre_dissect does first: commit the pending read state.
            s.rcs, s.prcs, s.triggered_prcs_commit = s.prcs, None, False
        rcs = s.rcs
        cipher = rcs.cipher
        if s.triggered_prcs_commit or getattr(cipher, "type", None) != "aead":
            return None
        seq = rcs.seq_num
        seq_b = _SEQ.pack(seq)
        rcs.seq_num = seq + 1
        try:
            if tv == 0x0304:
                p, _tag = cipher.auth_decrypt(rec[:5], rec[5:], seq_b)
                inner = p.rstrip(b"\0")
                if not inner:
                    raise _Failed("decryption failed: TLS 1.3 record with no content type")
                self._opened[self._side] = True
                if inner[-1] != CT_APPDATA:
                    rcs.seq_num = seq           # a post-handshake message or alert: scapy reads it
                    return None
                return inner[:-1]
            if tv is not None and tv <= 0x0303 and rcs.compression.__class__ is self._m.Comp_NULL:
                res = cipher.auth_decrypt(seq_b + rec[:3], rec[5:], seq_b)
                self._opened[self._side] = True
                return res[-2]
        except self._m.AEADTagError:
            raise self._auth_failed() from None
        except self._m.CipherError:
            raise _Failed(STATUS_NO_KEY) from None
        rcs.seq_num = seq
        return None

    def _slow(self, s: Any, from_client: bool, ctype: int, rec: bytes) -> bytes:
        """Let scapy parse the record, then pick up what it learnt (versions, keys)."""
        m = self._m
        self._slow_bytes += len(rec)
        if self._slow_bytes > MAX_SLOW_BYTES:
            raise _Failed(f"unsupported: more than {MAX_SLOW_BYTES >> 20} MiB of TLS handshake records")
        if not from_client and not self._keys_checked and ctype == CT_HANDSHAKE and len(rec) > 5 and rec[5] == 2:
            self._check_server_hello(rec)
        rcs = s.prcs if (s.tls_version == 0x0304 and s.triggered_prcs_commit and s.prcs) else s.rcs
        encrypted = rcs.cipher.__class__ is not m.Cipher_NULL and ctype != CT_CCS
        if ctype == CT_APPDATA:
            if not encrypted:
                # Application data before keys: TLS 1.3 early data (0-RTT) or a handshake we
                # could not follow. Never pass ciphertext on as plaintext.
                self.skipped_records += 1
                if not self._keys_checked:
                    self.detail = "application data before the handshake finished (early data?) skipped"
                return b""
        try:
            pkt = m.TLS(rec, tls_session=s, strict_integrity=True)
        except (m.AEADTagError, m.HMACError):
            raise self._auth_failed() from None
        if encrypted and self._keys_checked:
            self._opened[self._side] = True
        if self._client_random is None:
            cr = s.client_random
            if not cr:
                raise _Failed("decryption failed: scapy could not read the ClientHello")
            self._client_random = cr
        if not self._keys_checked and not from_client and s.server_random and s.tls_version:
            self._after_server_hello(s, pkt)
        out: list[bytes] = []
        layer = pkt
        while layer is not None and layer.__class__ in (m.TLS, m.TLS13):
            msgs = layer.inner.msg if layer.__class__ is m.TLS13 and layer.inner is not None \
                else getattr(layer, "msg", None)
            for msg in msgs or ():
                if isinstance(msg, m.Encrypted):
                    if self._keys_checked:
                        raise _Failed(STATUS_NO_KEY)
                elif isinstance(msg, m.AppData):
                    out.append(bytes(msg.data))
            layer = layer.payload if layer.payload.__class__ in (m.TLS, m.TLS13) else None
        return b"".join(out)

    def _auth_failed(self) -> _Failed:
        if self._opened[self._side]:
            who = "client" if self._side == 0 else "server"
            return _Failed(f"decryption failed: a {who} record failed authentication (corrupted capture?)")
        return _Failed("decryption failed: wrong key (record authentication failed)")

    def _check_server_hello(self, rec: bytes) -> None:
        """Read version and suite from the ServerHello bytes before scapy does: scapy's
        TLS 1.3 code does not survive a suite it does not know."""
        info = parse_hello(rec)
        if isinstance(info.get("version"), str):
            self.version = str(info["version"])
            if self.version not in ("TLS 1.2", "TLS 1.3"):
                raise _Failed(f"unsupported: {self.version} (TLS 1.2 and 1.3 only)")
        at = 44 + rec[43] if len(rec) > 43 else len(rec)
        if at + 2 <= len(rec):
            (suite,) = struct.unpack_from(">H", rec, at)
            if suite not in self._m.suites:
                raise _Failed(f"unsupported: cipher suite 0x{suite:04x} (not known to scapy's TLS layer)")

    def _after_server_hello(self, s: Any, pkt: Any) -> None:
        """The ServerHello has been read: version and suite are known; are the keys?"""
        tv = s.tls_version
        self.version = _VERSIONS.get(tv, f"0x{tv:04x}")
        self._keys_checked = True
        if tv not in (0x0303, 0x0304):
            raise _Failed(f"unsupported: {self.version} (TLS 1.2 and 1.3 only)")
        pcs = s.prcs if s.prcs is not None else s.rcs
        name = pcs.ciphersuite.__class__.__name__
        if name == "TLS_NULL_WITH_NULL_NULL" or not getattr(pcs.ciphersuite, "usable", False):
            suite = next((getattr(x, "cipher", None) for x in getattr(pkt, "msg", None) or ()
                          if hasattr(x, "cipher")), None)
            what = f"0x{suite:04x}" if isinstance(suite, int) else "(unknown)"
            raise _Failed(f"unsupported: cipher suite {what} (not known to scapy's TLS layer)")
        self.cipher_suite = name
        if pcs.compression.__class__ is not self._m.Comp_NULL:
            self.detail = "TLS compression: records take scapy's slow path"
        cr = self._client_random or b""
        labels = TLS13_LABELS if tv == 0x0304 else TLS12_LABELS
        missing = [lb for lb in labels if self.keylog.lookup(lb, cr) is None]
        if missing:
            self.detail = f"client random {cr.hex()}: no {', '.join(missing)} in {self.keylog.path}"
            raise _Failed(STATUS_NO_KEY)
        if tv == 0x0303 and not s.master_secret:
            # Install the master secret now: a resumed (abbreviated) handshake has no
            # ClientKeyExchange, which is where scapy would otherwise look it up.
            if s.use_nss_master_secret_if_present():
                s.compute_ms_and_derive_keys()
        self.status = STATUS_DECRYPTING
