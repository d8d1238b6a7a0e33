"""TLS 1.2 / 1.3 decryption from an SSLKEYLOGFILE (analyzer/tlsdecrypt.py).

Every session here is real: OpenSSL client and server through Python's ssl over memory
BIOs, the key log written by OpenSSL itself (``keylog_filename``).
"""
from __future__ import annotations

import random
import ssl
import struct
import tempfile
from pathlib import Path

import pytest
from cryptography.exceptions import InvalidTag

from analyzer.errors import UserError
from analyzer.tlsdecrypt import MAX_RECORD, TlsKeyLog, TlsStreamDecryptor
from tests.pcapgen import StreamData, TcpFlow, kafka_request, kafka_response, stream_events, write_pcap
from tests.tlsgen import _self_signed, tls_kafka_pcap

pytest.importorskip("cryptography")

Chunks = list[tuple[int, bytes]]          # (side: 0 client / 1 server, bytes as written to the wire)

REQS = [kafka_request(18, 3, 1, "tls-client"),
        kafka_request(3, 12, 2, "tls-client", b"\x00" * 40),
        kafka_request(0, 9, 3, "tls-client", bytes(range(256)) * 120)]           # > one 16 KiB record
RESPS = [kafka_response(1, struct.pack(">hi", 0, 0)),
         kafka_response(2, b"m" * 3000),
         kafka_response(3, bytes(range(255, -1, -1)) * 200)]


def _handshake(client: ssl.SSLObject, server: ssl.SSLObject, c_in: ssl.MemoryBIO, c_out: ssl.MemoryBIO,
               s_in: ssl.MemoryBIO, s_out: ssl.MemoryBIO, wire: Chunks) -> None:
    done = [False, False]
    for _ in range(20):
        for i, (obj, out, peer_in) in enumerate(((client, c_out, s_in), (server, s_out, c_in))):
            if not done[i]:
                try:
                    obj.do_handshake()
                    done[i] = True
                except ssl.SSLWantReadError:
                    pass
            data = out.read()
            if data:
                wire.append((i, data))
                peer_in.write(data)
        if all(done) and not c_out.pending and not s_out.pending:
            return
    raise AssertionError("TLS handshake did not finish")


def _conversations(tmp: Path, version: ssl.TLSVersion, keylog: Path, connections: int = 1,
                   ciphers: str | None = None, server_curve: str | None = None) -> list[tuple[Chunks, str]]:
    """Run ``connections`` TLS connections (the later ones resume the first one's session)
    carrying REQS/RESPS; return each one's wire chunks and negotiated cipher."""
    cert, key = _self_signed(tmp, "kafka.test")
    sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    sctx.load_cert_chain(cert, key)
    cctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    cctx.load_verify_locations(cert)
    for ctx in (sctx, cctx):
        ctx.minimum_version = ctx.maximum_version = version
        if ciphers:
            ctx.set_ciphers(ciphers)
    if server_curve:
        sctx.set_ecdh_curve(server_curve)
    cctx.keylog_filename = str(keylog)
    out: list[tuple[Chunks, str]] = []
    session = None
    for n in range(connections):
        c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
        client = cctx.wrap_bio(c_in, c_out, server_hostname="kafka.test", session=session)
        server = sctx.wrap_bio(s_in, s_out, server_side=True)
        wire: Chunks = []
        _handshake(client, server, c_in, c_out, s_in, s_out, wire)
        for req, resp in zip(REQS, RESPS, strict=True):
            client.write(req)
            data = c_out.read()
            wire.append((0, data))
            s_in.write(data)
            got = b""
            for _ in range(100):
                if len(got) >= len(req):
                    break
                got += server.read(65536)
            assert got == req
            server.write(resp)
            data = s_out.read()
            wire.append((1, data))
            c_in.write(data)
            got = b""
            for _ in range(100):
                if len(got) >= len(resp):
                    break
                got += client.read(65536)
            assert got == resp
        if n:
            assert client.session_reused
        session = client.session
        out.append((wire, client.cipher()[0]))
    return out


def _decrypt(d: TlsStreamDecryptor, chunks: Chunks) -> tuple[bytes, bytes]:
    got: tuple[list[bytes], list[bytes]] = ([], [])
    for side, data in chunks:
        got[side].append(d.feed(side, data, side == 0))
    return b"".join(got[0]), b"".join(got[1])


def _pcap_streams(path: Path) -> Chunks:
    """The in-order bytes of each direction, as the pipeline's stages deliver them."""
    _cap, _run, events = stream_events(str(path))
    return [(e.direction, e.data) for e in events if isinstance(e, StreamData)]


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tls")


@pytest.mark.parametrize("version,name", [(ssl.TLSVersion.TLSv1_2, "TLS 1.2"), (ssl.TLSVersion.TLSv1_3, "TLS 1.3")])
def test_tlsgen_capture_decrypts_both_directions(tmp_path: Path, version: ssl.TLSVersion, name: str) -> None:
    pcap, keylog = tmp_path / "tls.pcap", tmp_path / "keys.log"
    tls_kafka_pcap(str(pcap), REQS, RESPS, keylog=str(keylog), version=version)
    d = TlsStreamDecryptor(TlsKeyLog.load(str(keylog)))
    req, resp = _decrypt(d, _pcap_streams(pcap))
    assert req == b"".join(REQS)
    assert resp == b"".join(RESPS)
    assert d.status == "decrypting" and d.version == name
    assert d.cipher_suite in ("TLS_AES_256_GCM_SHA384", "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384")
    assert d.plaintext_bytes == [len(req), len(resp)]


def test_records_split_across_tcp_segments(tmp: Path) -> None:
    keylog = tmp / "split.log"
    ((wire, _),) = _conversations(tmp, ssl.TLSVersion.TLSv1_3, keylog)
    flow = TcpFlow(("127.0.0.1", 45001), ("127.0.0.1", 9093))
    pkts = flow.handshake()
    for side, data in wire:
        pkts += flow.send(side, data, sizes=[3, 2, 7], mss=700)     # cuts inside headers and bodies
    pkts += flow.fin(0) + flow.fin(1)
    write_pcap(str(tmp / "split.pcap"), pkts)
    streams = _pcap_streams(tmp / "split.pcap")
    assert len(streams) > 3 * len(wire)
    d = TlsStreamDecryptor(TlsKeyLog.load(str(keylog)))
    assert _decrypt(d, streams) == (b"".join(REQS), b"".join(RESPS))


def test_partial_records_are_buffered_until_complete(tmp: Path) -> None:
    keylog = tmp / "bytes.log"
    ((wire, _),) = _conversations(tmp, ssl.TLSVersion.TLSv1_2, keylog)
    d = TlsStreamDecryptor(TlsKeyLog.load(str(keylog)))
    got: tuple[list[bytes], list[bytes]] = ([], [])
    for side, data in wire:
        for i in range(0, len(data), 5):
            piece = d.feed(side, data[i:i + 5], side == 0)
            if i + 5 < 9:                       # never a whole record in the first 5..9 bytes
                assert piece == b""
            got[side].append(piece)
    assert (b"".join(got[0]), b"".join(got[1])) == (b"".join(REQS), b"".join(RESPS))


@pytest.mark.parametrize("ciphers,suite", [
    ("ECDHE-ECDSA-AES128-GCM-SHA256", "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"),
    ("ECDHE-ECDSA-CHACHA20-POLY1305", "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"),
    ("ECDHE-ECDSA-AES128-SHA256", "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256"),   # CBC + encrypt-then-MAC
])
def test_tls12_cipher_suites(tmp: Path, ciphers: str, suite: str) -> None:
    keylog = tmp / f"{ciphers}.log"
    ((wire, _),) = _conversations(tmp, ssl.TLSVersion.TLSv1_2, keylog, ciphers=ciphers)
    d = TlsStreamDecryptor(TlsKeyLog.load(str(keylog)))
    assert _decrypt(d, wire) == (b"".join(REQS), b"".join(RESPS))
    assert d.cipher_suite == suite and d.status == "decrypting"


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_session_resumption(tmp: Path, version: ssl.TLSVersion) -> None:
    keylog = tmp / f"resume{version.name}.log"
    convs = _conversations(tmp, version, keylog, connections=2)
    keys = TlsKeyLog.load(str(keylog))
    for wire, _ in convs:
        d = TlsStreamDecryptor(keys)
        assert _decrypt(d, wire) == (b"".join(REQS), b"".join(RESPS)), d.status


def test_tls13_hello_retry_request(tmp: Path) -> None:
    keylog = tmp / "hrr.log"
    ((wire, _),) = _conversations(tmp, ssl.TLSVersion.TLSv1_3, keylog, server_curve="secp384r1")
    d = TlsStreamDecryptor(TlsKeyLog.load(str(keylog)))
    assert _decrypt(d, wire) == (b"".join(REQS), b"".join(RESPS)), d.status


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_missing_key(tmp: Path, version: ssl.TLSVersion) -> None:
    k1, k2 = tmp / f"a{version.name}.log", tmp / f"b{version.name}.log"
    ((wire, _),) = _conversations(tmp, version, k1)
    _conversations(tmp, version, k2)                 # another session's keys
    d = TlsStreamDecryptor(TlsKeyLog.load(str(k2)))
    assert _decrypt(d, wire) == (b"", b"")
    assert d.status == "no key for this session"
    assert d.version == ("TLS 1.2" if version == ssl.TLSVersion.TLSv1_2 else "TLS 1.3")
    assert "client random" in d.detail


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_wrong_key(tmp: Path, version: ssl.TLSVersion) -> None:
    k = tmp / f"w{version.name}.log"
    ((wire, _),) = _conversations(tmp, version, k)
    bad = []
    for line in k.read_text().splitlines():
        if line.startswith("#"):
            continue
        label, cr, secret = line.split()
        bad.append(f"{label} {cr} {'00' * (len(secret) // 2)}")
    d = TlsStreamDecryptor(TlsKeyLog.parse("\n".join(bad)))
    req, resp = _decrypt(d, wire)
    assert (req, resp) == (b"", b"")
    assert d.status == "decryption failed: wrong key (record authentication failed)"


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_unknown_cipher_suite_is_reported(tmp: Path, version: ssl.TLSVersion) -> None:
    keylog = tmp / f"suite{version.name}.log"
    ((wire, _),) = _conversations(tmp, version, keylog)
    side, data = wire[1]
    assert side == 1 and data[5] == 2                     # the ServerHello
    at = 44 + data[43]                                    # after version, random, session id
    wire[1] = (1, data[:at] + b"\xca\xfe" + data[at + 2:])
    d = TlsStreamDecryptor(TlsKeyLog.load(str(keylog)))
    assert _decrypt(d, wire) == (b"", b"")
    assert d.status == "unsupported: cipher suite 0xcafe (not known to scapy's TLS layer)"
    assert d.version == ("TLS 1.2" if version == ssl.TLSVersion.TLSv1_2 else "TLS 1.3")


def test_capture_starting_after_handshake(tmp: Path) -> None:
    keylog = tmp / "late.log"
    ((wire, _),) = _conversations(tmp, ssl.TLSVersion.TLSv1_3, keylog)
    d = TlsStreamDecryptor(TlsKeyLog.load(str(keylog)))
    assert _decrypt(d, wire[-4:]) == (b"", b"")
    assert d.status == "unsupported: capture starts after the TLS handshake (no ClientHello)"


def test_garbage_gap_and_oversized_records_stop_cleanly(tmp: Path) -> None:
    keylog = tmp / "garbage.log"
    ((wire, _),) = _conversations(tmp, ssl.TLSVersion.TLSv1_2, keylog)
    keys = TlsKeyLog.load(str(keylog))
    hs = len(wire) - 2 * len(REQS)

    d = TlsStreamDecryptor(keys)
    _decrypt(d, wire[:hs])
    assert d.status == "decrypting"
    assert d.feed(0, b"\x00\x01garbage", True) == b""
    assert d.status.startswith("decryption failed: not a TLS record")
    assert d.feed(0, wire[hs][1], True) == b""          # stopped for good, nothing buffered
    assert len(d._bufs[0]) == 0

    d = TlsStreamDecryptor(keys)
    _decrypt(d, wire[:hs])
    d.gap(0, True)
    assert d.status == "decryption failed: gap in the client TCP stream"

    d = TlsStreamDecryptor(keys)
    _decrypt(d, wire[:hs])
    d.feed(1, struct.pack(">BHH", 23, 0x0303, MAX_RECORD + 1), False)
    assert d.status.startswith("decryption failed: not a TLS record") and "length 18433" in d.status


def test_mutated_streams_never_raise(tmp: Path) -> None:
    keylog = tmp / "fuzz.log"
    ((wire, _),) = _conversations(tmp, ssl.TLSVersion.TLSv1_3, keylog)
    keys = TlsKeyLog.load(str(keylog))
    rnd = random.Random(1234)
    statuses = set()
    for _ in range(40):
        chunks = list(wire)
        i = rnd.randrange(len(chunks))
        side, data = chunks[i]
        b = bytearray(data)
        for _ in range(rnd.randint(1, 4)):
            b[rnd.randrange(len(b))] ^= 1 << rnd.randrange(8)
        chunks[i] = (side, bytes(b[:rnd.randint(1, len(b))]) if rnd.random() < 0.3 else bytes(b))
        d = TlsStreamDecryptor(keys)
        req, resp = _decrypt(d, chunks)                  # must not raise
        statuses.add(d.status.split(":")[0])
        if d.status == "decrypting":
            # Only an unauthenticated field was hit (e.g. a ClientHello extension): the data is right.
            assert b"".join(REQS).startswith(req) and b"".join(RESPS).startswith(resp)
    assert "decryption failed" in statuses


def _hkdf_label(secret: bytes, label: bytes, length: int) -> bytes:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand

    full = b"tls13 " + label
    info = struct.pack(">HB", length, len(full)) + full + b"\x00"
    return HKDFExpand(hashes.SHA384(), length, info).derive(secret)


class _Tls13Keys:
    """An independent TLS 1.3 record layer (AES-256-GCM, SHA-384) for one direction."""

    def __init__(self, secret: bytes) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self.secret = secret
        self.aead = AESGCM(_hkdf_label(secret, b"key", 32))
        self.iv = _hkdf_label(secret, b"iv", 12)
        self.seq = 0

    def _nonce(self) -> bytes:
        return bytes(a ^ b for a, b in zip(self.iv, self.seq.to_bytes(12, "big"), strict=True))

    def open(self, rec: bytes) -> bytes:
        p = self.aead.decrypt(self._nonce(), rec[5:], rec[:5])
        self.seq += 1
        return p

    def seal(self, inner: bytes) -> bytes:
        hdr = struct.pack(">BHH", 23, 0x0303, len(inner) + 16)
        c = self.aead.encrypt(self._nonce(), inner, hdr)
        self.seq += 1
        return hdr + c

    def updated(self) -> _Tls13Keys:
        return _Tls13Keys(_hkdf_label(self.secret, b"traffic upd", 48))


def _records(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        (n,) = struct.unpack_from(">H", data, pos + 3)
        out.append(data[pos:pos + 5 + n])
        pos += 5 + n
    return out


def _with_key_update(wire: Chunks, secret: bytes, side: int, announce: bool = True) -> Chunks:
    """Re-encrypt ``side`` so that it sends a KeyUpdate before its second Kafka frame and
    uses the next traffic secret from then on (RFC 8446 4.6.3, 7.2). ``announce=False``
    switches keys without the KeyUpdate message."""
    reader, writer = _Tls13Keys(secret), _Tls13Keys(secret)
    out: Chunks = []
    started, frames = False, 0
    for s, data in wire:
        if s != side:
            out.append((s, data))
            continue
        recs = []
        for rec in _records(data):
            if not started:
                try:
                    plain = reader.open(rec) if rec[0] == 23 else None
                except InvalidTag:                        # a handshake-key record
                    plain = None
                if plain is None:
                    recs.append(rec)
                    continue
                started = True
            else:
                plain = reader.open(rec)
            if plain[-1] == 23:
                frames += 1
                if frames == 2:                           # the second Kafka frame
                    if announce:                          # KeyUpdate(update_not_requested)
                        recs.append(writer.seal(b"\x18\x00\x00\x01\x00" + b"\x16"))
                    writer = writer.updated()
            recs.append(writer.seal(plain))
        out.append((s, b"".join(recs)))
    assert frames > len(REQS)                             # the last frame needs two records
    return out


@pytest.mark.parametrize("side", [0, 1])
def test_tls13_key_update(tmp: Path, side: int) -> None:
    keylog = tmp / f"ku{side}.log"
    ((wire, suite),) = _conversations(tmp, ssl.TLSVersion.TLSv1_3, keylog)
    assert suite == "TLS_AES_256_GCM_SHA384"
    keys = TlsKeyLog.load(str(keylog))
    label = "CLIENT_TRAFFIC_SECRET_0" if side == 0 else "SERVER_TRAFFIC_SECRET_0"
    (secret,) = keys.keys[label].values()
    d = TlsStreamDecryptor(keys)
    assert _decrypt(d, _with_key_update(wire, secret, side)) == (b"".join(REQS), b"".join(RESPS)), d.status
    assert d.status == "decrypting"
    d = TlsStreamDecryptor(keys)                          # new keys without the message: cannot follow
    req, resp = _decrypt(d, _with_key_update(wire, secret, side, announce=False))
    who = ("client", "server")[side]
    assert d.status == f"decryption failed: a {who} record failed authentication (corrupted capture?)"
    assert (req, resp)[side] == (REQS, RESPS)[side][0]


# -- key log parsing ---------------------------------------------------------------------

CR = "ab" * 32


def test_keylog_parses_labels_comments_and_crlf(tmp_path: Path) -> None:
    p = tmp_path / "k.log"
    p.write_bytes(f"# comment\r\nCLIENT_RANDOM {CR} {'11' * 48}\r\n\r\n"
                  f"SERVER_TRAFFIC_SECRET_0 {CR} {'22' * 32}\n".encode())
    k = TlsKeyLog.load(str(p))
    assert len(k) == 2
    assert k.lookup("CLIENT_RANDOM", bytes.fromhex(CR)) == b"\x11" * 48
    assert k.lookup("SERVER_TRAFFIC_SECRET_0", bytes.fromhex(CR)) == b"\x22" * 32
    assert k.lookup("CLIENT_RANDOM", b"\x00" * 32) is None


@pytest.mark.parametrize("content,expect", [
    (f"CLIENT_RANDOM {CR}\n", "line 1: expected '<LABEL> <client_random hex> <secret hex>'"),
    (f"# x\nCLIENT_RANDOM {CR} zz11\n", "line 2: CLIENT_RANDOM has a value that is not hex"),
    (f"CLIENT_RANDOM {CR[:-2]} {'11' * 48}\n", "line 1: client random must be 32 bytes"),
    (f"client_random {CR} {'11' * 48}\n", "line 1: expected"),
    ("# only a comment\n", "no secrets in the file"),
    (b"\xff\xfe\x00binary", "not an SSLKEYLOGFILE"),
])
def test_malformed_keylog_is_one_line_user_error(tmp_path: Path, content: str | bytes, expect: str) -> None:
    p = tmp_path / "bad.log"
    p.write_bytes(content.encode() if isinstance(content, str) else content)
    with pytest.raises(UserError) as e:
        TlsKeyLog.load(str(p))
    msg = str(e.value)
    assert expect in msg and str(p) in msg and "\n" not in msg


def test_missing_keylog_file() -> None:
    with tempfile.TemporaryDirectory() as td:
        with pytest.raises(UserError, match=r"TLS key log .*nope\.log: no such file$"):
            TlsKeyLog.load(str(Path(td) / "nope.log"))
        with pytest.raises(UserError, match="is a directory"):
            TlsKeyLog.load(td)


def test_a_key_log_without_the_session_keeps_the_bytes_counted(tmp_path: Path) -> None:
    """With --tls-keylog, a connection of which nothing decrypts (its keys are not in the
    log) still counts its bytes as skipped: 'tls (not decrypted)', as without a key log."""
    from analyzer.pipeline import Options, Run

    pcap, other = str(tmp_path / "a.pcap"), str(tmp_path / "b.pcap")
    tls_kafka_pcap(pcap, REQS[:1], RESPS[:1], keylog=str(tmp_path / "a.keys"), port=9092)
    tls_kafka_pcap(other, REQS[:1], RESPS[:1], keylog=str(tmp_path / "b.keys"), port=9092)
    without = Run(pcap, Options())
    assert list(without) == []
    skipped = without.summary.bytes_skipped["tls (not decrypted)"]
    assert skipped > 1000
    run = Run(pcap, Options(tls_keylog=TlsKeyLog.load(str(tmp_path / "b.keys"))))
    assert list(run) == []
    assert run.summary.tls[0]["decryption"] == "no key for this session"
    assert dict(run.summary.bytes_skipped) == {"tls (not decrypted)": skipped}
    run = Run(pcap, Options(tls_keylog=TlsKeyLog.load(str(tmp_path / "a.keys"))))
    assert [e.api_name for e in run] == ["ApiVersions"] and not run.summary.bytes_skipped


def test_a_key_log_without_cryptography_is_one_line_up_front(tmp_path: Path) -> None:
    import subprocess
    import sys

    keys, pcap = tmp_path / "k", str(tmp_path / "a.pcap")
    tls_kafka_pcap(pcap, REQS[:1], RESPS[:1], keylog=str(keys), port=9092)
    code = ("import sys; sys.modules['cryptography'] = None; from analyzer.cli import main; "
            f"sys.argv = ['kafkawire-sniff', 'read', {pcap!r}, '--tls-keylog', {str(keys)!r}]; main()")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == ("kafkawire-sniff: error: --tls-keylog needs the 'cryptography' package "
                        "(pip install 'kafkawire-sniff[tls]')\n")
