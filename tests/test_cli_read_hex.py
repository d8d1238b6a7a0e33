"""`read -x`: each selected frame's bytes (size prefix included) as `tshark -x` dumps them,
the fields that start on each line named beside it with their tree offsets (issue 39 item 3).

Conventions under test: the dump's offset column counts from the size prefix, a tree's
``@N`` from after it (dump offset N + 4); a records field is named from its size prefix
(INT32, or a varint in flexible versions) though its tree node starts after it; nothing is
named inside compressed data (those offsets count in the decompressed bytes)."""
from __future__ import annotations

import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "samples"
LINE = re.compile(r"^  ([0-9a-f]{4})  ((?:[0-9a-f]{2} ?){1,16})\s{2,}(.{1,16}?)(?:   (\S.*))?$")


def _read(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "analyzer", "read", *args], capture_output=True, text=True,
                          cwd=REPO)


def _dumps(out: str) -> list[tuple[str, bytes, dict[str, int]]]:
    """(heading, bytes, {label: dump offset of its line}) of each frame dumped."""
    dumps: list[tuple[str, bytes, dict[str, int]]] = []
    for line in out.splitlines():
        if re.match(r"^  (request|response) frame, ", line):
            dumps.append((line.strip(), b"", {}))
            continue
        m = LINE.match(line)
        if m and dumps:
            head, data, names = dumps[-1]
            assert int(m.group(1), 16) == len(data)
            chunk = bytes.fromhex(m.group(2))
            for label in (m.group(4) or "").split():
                names[label] = len(data)
            dumps[-1] = (head, data + chunk, names)
    return dumps


def _at(data: bytes, names: dict[str, int], label: str) -> int:
    """The dump offset of ``label`` (``name@N``), checked to lie on the line it is named beside."""
    tree_offset = int(label.rsplit("@", 1)[1])
    line = names[label]
    assert line <= tree_offset + 4 < line + 16
    return tree_offset + 4


def test_dump_is_the_kafka_frame_and_names_fields_where_their_bytes_are() -> None:
    r = _read(str(SAMPLES / "group_rdkafka.pcap"), "--frame", "73", "-x", "--no-summary")
    assert r.returncode == 0, r.stderr
    (req_head, req, req_names), (resp_head, resp, resp_names) = _dumps(r.stdout)
    assert req_head.startswith("request frame, packet 71: 99 bytes (size prefix 4 + 95)")
    assert resp_head.startswith("response frame, packet 73: 77 bytes (size prefix 4 + 73)")
    assert len(req) == 99 and struct.unpack(">i", req[:4])[0] == 95 and "size@-4" in req_names
    # the fields named beside the bytes are the tree's: JoinGroup v5, cid 3, kws-member-0, kws-group
    assert struct.unpack_from(">hhi", req, _at(req, req_names, "api_key@0")) == (11, 5, 3)
    at = _at(req, req_names, "client_id@8")
    assert req[at:at + 14] == b"\x00\x0ckws-member-0"
    at = _at(req, req_names, "group_id@22")
    assert req[at:at + 11] == b"\x00\x09kws-group"
    at = _at(resp, resp_names, "error_code@8")
    assert struct.unpack_from(">h", resp, at)[0] == 79          # MEMBER_ID_REQUIRED
    assert struct.unpack_from(">i", resp, _at(resp, resp_names, "correlation_id@0"))[0] == 3
    # and the tree says the same offsets
    tree = _read(str(SAMPLES / "group_rdkafka.pcap"), "--frame", "73", "-f", "tree", "-x", "--no-summary").stdout
    assert "client_id (string) = 'kws-member-0'  @8+14" in tree and "group_id@22" in tree
    if shutil.which("tshark"):
        payload = subprocess.run(["tshark", "-r", str(SAMPLES / "group_rdkafka.pcap"), "-Y", "frame.number == 71",
                                  "-T", "fields", "-e", "tcp.payload"], capture_output=True, text=True).stdout
        assert bytes.fromhex(payload.strip().replace(":", "")) == req


def test_records_named_from_their_size_prefix_and_not_inside_compressed_data() -> None:
    # Produce v10 (flexible: the records' length is a varint, 715 + 1), records gzip-compressed
    r = _read(str(SAMPLES / "produce_fetch_rdkafka_gzip.pcap"), "--frame", "20", "-x", "--no-summary")
    assert r.returncode == 0, r.stderr
    (_h, req, names), _resp = _dumps(r.stdout)
    at = _at(req, names, "records@55")
    assert req[at:at + 2] == b"\xcc\x05" and 0x4C + (0x05 << 7) == 715 + 1
    assert struct.unpack_from(">q", req, _at(req, names, "base_offset@57"))[0] == 0
    labels = list(names)
    # after the batch header's records count, the compressed records: nothing named until the tags
    i = labels.index("records_count@114")
    assert labels[i + 1:] == ["records@118", "tagged_fields@772", "tagged_fields@773", "tagged_fields@774"]
    # Produce v2 (INT32 length before the records): the tree's records node @65, named @61
    r = _read(str(SAMPLES / "old_kafkapython2_0101_tansu.pcap"), "--api", "Produce", "-x", "-f", "tree",
              "--no-summary")
    assert "records (records) = 5  @65+395" in r.stdout
    (_h, req, names), *_rest = _dumps(r.stdout)
    assert struct.unpack_from(">i", req, _at(req, names, "records@61"))[0] == 395


def test_x_without_kafka_bytes_is_one_line_and_exit_1() -> None:
    r = _read(str(SAMPLES / "group_rdkafka.pcap"), "--frame", "1", "-x")
    assert r.returncode == 1
    assert r.stderr.splitlines() == ["kafkawire-sniff: error: -x: no Kafka frame to dump "
                                     f"({SAMPLES / 'group_rdkafka.pcap'}: packet 1: a TCP packet without "
                                     "payload (no Kafka bytes))"]


@pytest.mark.parametrize("fmt", ["ndjson", "json"])
def test_x_with_json_is_a_usage_error(fmt: str) -> None:
    r = _read(str(SAMPLES / "group_rdkafka.pcap"), "--frame", "73", "-x", "-f", fmt)
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.splitlines()) == 1 and "-x" in r.stderr


def test_orphan_response_dumps_what_was_captured(tmp_path: Path) -> None:
    if not shutil.which("editcap"):
        pytest.skip("editcap is not installed")
    # the sample without packet 71 (the JoinGroup request): its response (now packet 72) an orphan
    cut = tmp_path / "orphan.pcap"
    subprocess.run(["editcap", str(SAMPLES / "group_rdkafka.pcap"), str(cut), "71"], check=True)
    r = _read(str(cut), "--frame", "72", "-x", "--no-summary")
    assert r.returncode == 0 and r.stderr == ""
    assert "ORPHAN_RESPONSE" in r.stdout
    assert "  request frame: not captured (no bytes to dump)" in r.stdout.splitlines()
    ((head, resp, names),) = _dumps(r.stdout)
    assert head.startswith("response frame, packet 72: 77 bytes") and len(resp) == 77
    assert struct.unpack_from(">i", resp, _at(resp, names, "correlation_id@0"))[0] == 3
