"""Secrets never reach the output unless --show-secrets: SASL PLAIN passwords, SCRAM
client proofs, OAUTHBEARER tokens, delegation-token HMACs, SCRAM credentials and
password-like config values, in every output format of read, check and stats.

Each test builds real frames (kafka-python's protocol classes where they cover the
API, hand-encoded otherwise) into a crafted pcap, runs the CLI in-process and greps
everything it wrote for the secret, both as text and as hex.
"""
from __future__ import annotations

import base64
import json
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner

from analyzer.cli import main
from tests.pcapgen import TcpFlow, kafka_frame, write_pcap

# every output format that can show a field value
FORMATS: list[tuple[str, ...]] = [
    ("read",), ("read", "-f", "tree"), ("read", "-f", "ndjson"), ("read", "-f", "json"),
    ("check", "-f", "json"), ("check",), ("stats", "-f", "json"),
]


def response_frame(corr: int, body: bytes, flexible: bool) -> bytes:
    """A response frame: correlation id, the empty tagged-field section when flexible, body."""
    return kafka_frame(struct.pack(">i", corr) + (b"\x00" if flexible else b"") + bytes(body))


def request_frame(msg, version: int, corr: int, client_id: str = "secret-test") -> bytes:  # noqa: ANN001
    """A kafka-python request object encoded with its header and size prefix."""
    msg.with_header(correlation_id=corr, client_id=client_id)
    return bytes(msg.encode(version=version, header=True, framed=True))


def hand_request(api_key: int, version: int, corr: int, body: bytes, flexible: bool,
                 client_id: str = "secret-test") -> bytes:
    cid = client_id.encode()
    hdr = struct.pack(">hhih", api_key, version, corr, len(cid)) + cid + (b"\x00" if flexible else b"")
    return kafka_frame(hdr + body)


def write_conv(path: Path, frames: list[tuple[bytes, bytes | None]], port: int = 9092) -> str:
    """One TCP connection carrying (request, response) frame pairs in order."""
    flow = TcpFlow(("10.1.1.1", 41000), ("10.1.1.2", port))
    pkts = flow.handshake()
    for req, resp in frames:
        pkts += flow.send(0, req, mss=1400)
        if resp is not None:
            pkts += flow.send(1, resp, mss=1400)
    pkts += flow.fin(0) + flow.fin(1)
    write_pcap(str(path), pkts)
    return str(path)


def run_cli(args: list[str]) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, args, catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def leaks(path: str, secrets: list[bytes], show: bool = False) -> dict[str, list[str]]:
    """For each output format: the secrets (as text or hex) found in what it printed."""
    found: dict[str, list[str]] = {}
    for fmt in FORMATS:
        args = [*fmt, path] + (["--show-secrets"] if show else [])
        code, out, err = run_cli(args)
        assert code in (0, 1), (fmt, code, err)
        assert "Traceback" not in err
        text = out + err
        hits = [s.decode("latin-1") for s in secrets
                if s.decode("latin-1") in text or s.hex() in text]
        found[" ".join(fmt)] = hits
    return found


def assert_redacted(path: str, secrets: list[bytes], must_show_in: str = "read -f ndjson") -> None:
    hidden = leaks(path, secrets)
    assert all(not v for v in hidden.values()), f"secret leaked: {hidden}"
    shown = leaks(path, secrets, show=True)
    assert set(shown[must_show_in]) == {s.decode("latin-1") for s in secrets}, shown
    # the redaction says what it did
    code, out, _ = run_cli(["read", "-f", "ndjson", path])
    assert "redacted" in out


# -- SASL ------------------------------------------------------------------------------

def _sasl_handshake(mech: str, corr: int) -> tuple[bytes, bytes]:
    from kafka.protocol.sasl import SaslHandshakeRequest, SaslHandshakeResponse

    req = request_frame(SaslHandshakeRequest(mechanism=mech), 1, corr)
    resp = response_frame(corr, SaslHandshakeResponse(error_code=0, mechanisms=[mech]).encode(version=1), False)
    return req, resp


def _sasl_authenticate(token: bytes, corr: int, server: bytes = b"") -> tuple[bytes, bytes]:
    from kafka.protocol.sasl import SaslAuthenticateRequest, SaslAuthenticateResponse

    req = request_frame(SaslAuthenticateRequest(auth_bytes=token), 2, corr)
    resp = response_frame(corr, SaslAuthenticateResponse(
        error_code=0, error_message=None, auth_bytes=server, session_lifetime_ms=0).encode(version=2), True)
    return req, resp


PLAIN_PW = b"Pl41n-Passw0rd-xyzzy"
SCRAM_PROOF = base64.b64encode(b"scram-client-proof-32-bytes-long!")
OAUTH_TOKEN = b"eyJhbGciOiJub25lIn0.eyJzdWIiOiJhbGljZSJ9.c2VjcmV0LXNpZw"


def test_sasl_plain_password_redacted(tmp_path: Path) -> None:
    token = b"\x00alice\x00" + PLAIN_PW
    path = write_conv(tmp_path / "plain.pcap", [_sasl_handshake("PLAIN", 1), _sasl_authenticate(token, 2)])
    assert_redacted(path, [PLAIN_PW])


def test_sasl_plain_raw_token_after_handshake_v0_redacted(tmp_path: Path) -> None:
    """SaslHandshake v0: the token follows as a raw frame with no Kafka header."""
    from kafka.protocol.sasl import SaslHandshakeRequest, SaslHandshakeResponse

    req = request_frame(SaslHandshakeRequest(mechanism="PLAIN"), 0, 1)
    resp = response_frame(1, SaslHandshakeResponse(error_code=0, mechanisms=["PLAIN"]).encode(version=0), False)
    raw = kafka_frame(b"\x00alice\x00" + PLAIN_PW)
    path = write_conv(tmp_path / "plain0.pcap", [(req, resp), (raw, kafka_frame(b""))])
    assert_redacted(path, [PLAIN_PW])


def test_scram_client_proof_redacted(tmp_path: Path) -> None:
    first = b"n,,n=alice,r=clientnonce123"
    server_first = b"r=clientnonce123servernonce,s=c2FsdA==,i=4096"
    final = b"c=biws,r=clientnonce123servernonce,p=" + SCRAM_PROOF
    path = write_conv(tmp_path / "scram.pcap", [
        _sasl_handshake("SCRAM-SHA-256", 1),
        _sasl_authenticate(first, 2, server_first),
        _sasl_authenticate(final, 3, b"v=c2VydmVyLXNpZ25hdHVyZQ=="),
    ])
    assert_redacted(path, [SCRAM_PROOF])


def test_oauthbearer_token_redacted(tmp_path: Path) -> None:
    token = b"n,,\x01auth=Bearer " + OAUTH_TOKEN + b"\x01\x01"
    path = write_conv(tmp_path / "oauth.pcap", [_sasl_handshake("OAUTHBEARER", 1), _sasl_authenticate(token, 2)])
    assert_redacted(path, [OAUTH_TOKEN])


# -- delegation tokens (not in kafka-python: encoded by hand, v1, non-flexible) ---------

HMAC = b"\x8a\x17HMAC-of-the-delegation-token\x01\xfe"


def _bytes(b: bytes) -> bytes:
    return struct.pack(">i", len(b)) + b


def _str(s: str) -> bytes:
    e = s.encode()
    return struct.pack(">h", len(e)) + e


def test_create_delegation_token_hmac_redacted(tmp_path: Path) -> None:
    req = hand_request(38, 1, 5, struct.pack(">i", 0) + struct.pack(">q", -1), False)
    body = (struct.pack(">h", 0) + _str("User") + _str("alice") + struct.pack(">qqq", 1, 2, 3)
            + _str("token-id-1") + _bytes(HMAC) + struct.pack(">i", 0))
    path = write_conv(tmp_path / "cdt.pcap", [(req, response_frame(5, body, False))])
    assert_redacted(path, [HMAC])


@pytest.mark.parametrize("api_key", [39, 40])
def test_renew_and_expire_delegation_token_hmac_redacted(tmp_path: Path, api_key: int) -> None:
    req = hand_request(api_key, 1, 6, _bytes(HMAC) + struct.pack(">q", 86_400_000), False)
    resp = response_frame(6, struct.pack(">hqi", 0, 1_700_000_000_000, 0), False)
    path = write_conv(tmp_path / f"dt{api_key}.pcap", [(req, resp)])
    assert_redacted(path, [HMAC])


def test_describe_delegation_token_hmac_redacted(tmp_path: Path) -> None:
    req = hand_request(41, 1, 8, struct.pack(">i", -1), False)
    token = (_str("User") + _str("alice") + struct.pack(">qqq", 1, 2, 3) + _str("token-id-1")
             + _bytes(HMAC) + struct.pack(">i", 0))
    body = struct.pack(">hi", 0, 1) + token + struct.pack(">i", 0)
    path = write_conv(tmp_path / "ddt.pcap", [(req, response_frame(8, body, False))])
    assert_redacted(path, [HMAC])


# -- SCRAM credentials -------------------------------------------------------------------

SALT = b"\x01salt-of-alice\xff"
SALTED = b"\x02salted-password-of-alice-32by\xfe"


def test_alter_user_scram_credentials_redacted(tmp_path: Path) -> None:
    from kafka.protocol.admin import AlterUserScramCredentialsRequest as R
    from kafka.protocol.admin import AlterUserScramCredentialsResponse as P

    up = R.ScramCredentialUpsertion(name="alice", mechanism=1, iterations=8192, salt=SALT, salted_password=SALTED)
    req = request_frame(R(deletions=[], upsertions=[up]), 0, 9)
    resp = response_frame(9, P(throttle_time_ms=0, results=[P.AlterUserScramCredentialsResult(
        user="alice", error_code=0, error_message=None)]).encode(version=0), True)
    path = write_conv(tmp_path / "scramcred.pcap", [(req, resp)])
    assert_redacted(path, [SALT, SALTED])


# -- config values -----------------------------------------------------------------------

CFG_PW = b"Keyst0re-Pa55-zz9"
JAAS_PW = b"J44s-pw-77"
JAAS = b"org.apache.kafka.common.security.plain.PlainLoginModule required username=bob password=" + JAAS_PW + b";"


def _alter_configs(version: int) -> bytes:
    from kafka.protocol.admin import AlterConfigsRequest as R

    res = R.AlterConfigsResource(resource_type=4, resource_name="1", configs=[
        R.AlterConfigsResource.AlterableConfig(name="ssl.keystore.password", value=CFG_PW.decode()),
        R.AlterConfigsResource.AlterableConfig(name="sasl.jaas.config", value=JAAS.decode()),
        R.AlterConfigsResource.AlterableConfig(name="log.retention.ms", value="604800123"),
    ])
    return request_frame(R(resources=[res], validate_only=False), version, 11)


def _alter_configs_response(version: int) -> bytes:
    from kafka.protocol.admin import AlterConfigsResponse as P

    return response_frame(11, P(throttle_time_ms=0, responses=[P.AlterConfigsResourceResponse(
        error_code=0, error_message=None, resource_type=4, resource_name="1")]).encode(version=version),
        version >= 2)


@pytest.mark.parametrize("version", [0, 2])
def test_alter_configs_secret_values_redacted(tmp_path: Path, version: int) -> None:
    path = write_conv(tmp_path / "ac.pcap", [(_alter_configs(version), _alter_configs_response(version))])
    assert_redacted(path, [CFG_PW, JAAS_PW])
    # an ordinary config value stays visible
    assert "604800123" in run_cli(["read", "-f", "ndjson", path])[1]


def test_incremental_alter_configs_secret_values_redacted(tmp_path: Path) -> None:
    from kafka.protocol.admin import IncrementalAlterConfigsRequest as R
    from kafka.protocol.admin import IncrementalAlterConfigsResponse as P

    res = R.AlterConfigsResource(resource_type=4, resource_name="1", configs=[
        R.AlterConfigsResource.AlterableConfig(name="listener.name.sasl_ssl.plain.sasl.jaas.config",
                                               config_operation=0, value=JAAS.decode()),
        R.AlterConfigsResource.AlterableConfig(name="ssl.truststore.password", config_operation=0,
                                               value=CFG_PW.decode()),
    ])
    req = request_frame(R(resources=[res], validate_only=False), 1, 12)
    resp = response_frame(12, P(throttle_time_ms=0, responses=[P.AlterConfigsResourceResponse(
        error_code=0, error_message=None, resource_type=4, resource_name="1")]).encode(version=1), True)
    path = write_conv(tmp_path / "iac.pcap", [(req, resp)])
    assert_redacted(path, [CFG_PW, JAAS_PW])


def test_create_topics_secret_config_redacted(tmp_path: Path) -> None:
    from kafka.protocol.admin import CreateTopicsRequest as R
    from kafka.protocol.admin import CreateTopicsResponse as P

    topic = R.CreatableTopic(name="secret-topic", num_partitions=1, replication_factor=1, assignments=[],
                             configs=[R.CreatableTopic.CreatableTopicConfig(name="ssl.key.password",
                                                                            value=CFG_PW.decode())])
    req = request_frame(R(topics=[topic], timeout_ms=1000, validate_only=False), 5, 13)
    resp_body = P(throttle_time_ms=0, topics=[P.CreatableTopicResult(
        name="secret-topic", topic_id=None, error_code=0, error_message=None, num_partitions=1,
        replication_factor=1, configs=[P.CreatableTopicResult.CreatableTopicConfigs(
            name="ssl.key.password", value=CFG_PW.decode(), read_only=False, config_source=1,
            is_sensitive=True)])]).encode(version=5)
    path = write_conv(tmp_path / "ct.pcap", [(req, response_frame(13, resp_body, True))])
    assert_redacted(path, [CFG_PW])


@pytest.mark.parametrize("version", [1, 4])
def test_describe_configs_response_secret_values_redacted(tmp_path: Path, version: int) -> None:
    from kafka.protocol.admin import DescribeConfigsRequest as R
    from kafka.protocol.admin import DescribeConfigsResponse as P

    req = request_frame(R(resources=[R.DescribeConfigsResource(resource_type=4, resource_name="1",
                                                                 configuration_keys=None)],
                          include_synonyms=True, include_documentation=False), version, 14)
    C = P.DescribeConfigsResult.DescribeConfigsResourceResult
    syn = C.DescribeConfigsSynonym(name="listener.name.internal.ssl.keystore.password", value=CFG_PW.decode(),
                                   source=4)
    cfgs = [C(name="ssl.keystore.password", value=CFG_PW.decode(), read_only=False, config_source=4,
              is_sensitive=False, synonyms=[syn], config_type=9, documentation=None),
            C(name="sasl.jaas.config", value=JAAS.decode(), read_only=False, config_source=4,
              is_sensitive=False, synonyms=[], config_type=9, documentation=None),
            C(name="num.io.threads", value="8123", read_only=False, config_source=4,
              is_sensitive=False, synonyms=[], config_type=3, documentation=None)]
    body = P(throttle_time_ms=0, results=[P.DescribeConfigsResult(
        error_code=0, error_message=None, resource_type=4, resource_name="1", configs=cfgs)]).encode(version=version)
    path = write_conv(tmp_path / "dc.pcap", [(req, response_frame(14, body, version >= 4))])
    assert_redacted(path, [CFG_PW, JAAS_PW])
    assert "8123" in run_cli(["read", "-f", "ndjson", path])[1]


def test_secret_in_a_malformed_message_is_still_redacted(tmp_path: Path) -> None:
    """A config message cut short after the secret value: the value is decoded, and hidden."""
    full = _alter_configs(0)
    cut = full[4:]
    cut = cut[: cut.index(b"sasl.jaas.config")]   # stops after the keystore password
    req = kafka_frame(cut)
    path = write_conv(tmp_path / "cut.pcap", [(req, _alter_configs_response(0))])
    code, out, _ = run_cli(["read", "-f", "ndjson", path])
    assert code == 0 and '"malformed"' in out
    assert CFG_PW.decode() not in out and CFG_PW.hex() not in out



@pytest.mark.parametrize("token,secret", [
    (b"\x00alice\x00" + PLAIN_PW, PLAIN_PW),
    (b"c=biws,r=clientnonce123servernonce,p=" + SCRAM_PROOF, SCRAM_PROOF),
    (b"n,,\x01auth=Bearer " + OAUTH_TOKEN + b"\x01\x01", OAUTH_TOKEN),
], ids=["plain", "scram", "oauthbearer"])
def test_sasl_token_redacted_without_the_handshake_in_the_capture(tmp_path: Path, token: bytes,
                                                                  secret: bytes) -> None:
    """The capture starts after SaslHandshake: the mechanism is guessed from the token."""
    path = write_conv(tmp_path / "nohs.pcap", [_sasl_authenticate(token, 2)])
    assert_redacted(path, [secret])


def test_scram_raw_tokens_after_handshake_v0_redacted(tmp_path: Path) -> None:
    from kafka.protocol.sasl import SaslHandshakeRequest, SaslHandshakeResponse

    req = request_frame(SaslHandshakeRequest(mechanism="SCRAM-SHA-512"), 0, 1)
    resp = response_frame(1, SaslHandshakeResponse(error_code=0, mechanisms=["SCRAM-SHA-512"]).encode(version=0),
                          False)
    first = kafka_frame(b"n,,n=alice,r=clientnonce123")
    server_first = kafka_frame(b"r=clientnonce123servernonce,s=c2FsdA==,i=4096")
    final = kafka_frame(b"c=biws,r=clientnonce123servernonce,p=" + SCRAM_PROOF)
    server_final = kafka_frame(b"v=c2VydmVyLXNpZ25hdHVyZQ==")
    after = _sasl_handshake("SCRAM-SHA-512", 2)      # Kafka requests again after the tokens
    path = write_conv(tmp_path / "scram0.pcap", [(req, resp), (first, server_first), (final, server_final), after])
    assert_redacted(path, [SCRAM_PROOF])
    code, out, _ = run_cli(["read", "-f", "ndjson", path])
    assert [json.loads(x)["api_name"] for x in out.splitlines()] == [
        "SaslHandshake", "SaslToken", "SaslToken", "SaslHandshake"]
