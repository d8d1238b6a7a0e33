"""A real TLS session (Python's ssl over memory BIOs), written as a TCP flow in a pcap.

The client and server are OpenSSL through Python's ``ssl`` module; only the transport
is in memory. ``keylog`` writes the session keys in the SSLKEYLOGFILE format.
"""
from __future__ import annotations

import datetime as dt
import ssl
import tempfile
from pathlib import Path

from tests.pcapgen import TcpFlow, write_pcap


def _self_signed(tmp: Path, host: str) -> tuple[str, str]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now - dt.timedelta(days=1))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
            .sign(key, hashes.SHA256()))
    cp, kp = tmp / "cert.pem", tmp / "key.pem"
    cp.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    kp.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption()))
    return str(cp), str(kp)


def _pump(src: ssl.MemoryBIO) -> bytes:
    return src.read()


def tls_kafka_pcap(path: str, requests: list[bytes], responses: list[bytes], host: str = "kafka.test",
                   keylog: str | None = None, version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_3,
                   port: int = 9093) -> None:
    """Write a pcap of one TLS connection carrying the given Kafka frames, in order."""
    with tempfile.TemporaryDirectory() as td:
        cert, key = _self_signed(Path(td), host)
        sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        sctx.load_cert_chain(cert, key)
        sctx.minimum_version = sctx.maximum_version = version
        cctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        cctx.load_verify_locations(cert)
        cctx.minimum_version = cctx.maximum_version = version
        if keylog:
            cctx.keylog_filename = keylog
        c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
        client = cctx.wrap_bio(c_in, c_out, server_hostname=host)
        server = sctx.wrap_bio(s_in, s_out, server_side=True)
        flow = TcpFlow(("127.0.0.1", 45000), ("127.0.0.1", port), ts=100.0)
        pkts = flow.handshake()

        def step(obj: ssl.SSLObject) -> None:
            try:
                obj.do_handshake()
            except ssl.SSLWantReadError:
                pass

        for _ in range(10):
            step(client)
            data = c_out.read()
            if data:
                pkts += flow.send(0, data)
                s_in.write(data)
            step(server)
            data = s_out.read()
            if data:
                pkts += flow.send(1, data)
                c_in.write(data)
            if not data and client.pending() == 0 and _done(client) and _done(server):
                break
        for req, resp in zip(requests, responses, strict=False):
            client.write(req)
            data = c_out.read()
            pkts += flow.send(0, data)
            s_in.write(data)
            got = b""
            while len(got) < len(req):
                got += server.read(65536)
            server.write(resp)
            data = s_out.read()
            pkts += flow.send(1, data)
            c_in.write(data)
            got = b""
            while len(got) < len(resp):
                got += client.read(65536)
        pkts += flow.fin(0) + flow.fin(1)
        write_pcap(path, pkts)


def _done(obj: ssl.SSLObject) -> bool:
    try:
        obj.do_handshake()
        return True
    except ssl.SSLWantReadError:
        return False
