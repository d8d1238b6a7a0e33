"""Hostile and broken input through the whole tool: limits, broken captures, exit codes.

Limits (``--max-frame-size``, ``--max-decompressed``, ``--max-array-len``, ``ctx.limits.max_depth``):
each is hit, counted and the analysis goes on. Broken captures (a record cut short,
snaplen-cut packets, bad file headers, odd pcapng blocks, caplen > orig_len, time going
backwards) go through the CLI: exit code, the one-line error or the summary warning, and
what is still decoded. Exit codes 0/1/2 with one-line errors naming the file, the packet
or the option at fault.
"""
from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from analyzer._core import open_capture
from analyzer.cli import main
from analyzer.model import Packet
from analyzer.pipeline import Options, Run
from dissectors.context import DecodeContext, Limits
from tests.conftest import REPO, SAMPLES, shared_captures, stats_of
from tests.pcapgen import (
    RawPacket,
    TcpFlow,
    kafka_frame,
    pcapng_block,
    write_pcap,
    write_pcapng,
)

COMMANDS = [("read",), ("stats", "-f", "json"), ("check", "-f", "json")]


# -- helpers ---------------------------------------------------------------------------

def cli(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("kafkawire-sniff: error: "), err
    assert "Traceback" not in err
    return lines[0]


def keys(exs: list) -> list[tuple]:  # noqa: ANN001
    return [(e.conn.id, e.api_name, e.api_version, e.correlation_id) for e in exs]


def analyse(path: str | Path, ctx: DecodeContext | None = None, **opts: object) -> tuple[list, Run]:
    run = Run(str(path), Options(**opts), ctx or DecodeContext())  # type: ignore[arg-type]
    return list(run), run


def ndjson(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def api_versions_pair(corr: int) -> tuple[bytes, bytes]:
    """ApiVersions v0: request with an empty body, response with three API ranges."""
    req = kafka_frame(struct.pack(">hhih", 18, 0, corr, 1) + b"c")
    body = struct.pack(">hi", 0, 3) + struct.pack(">hhh", 0, 0, 9) + struct.pack(">hhh", 1, 0, 13) \
        + struct.pack(">hhh", 3, 0, 12)
    return req, kafka_frame(struct.pack(">i", corr) + body)


def metadata_pair(corr: int, topics: int) -> tuple[bytes, bytes]:
    """Metadata v0 asking for ``topics`` topics (14 bytes each), answered with no broker/topic."""
    names = b"".join(struct.pack(">h", 10) + f"topic-{i:04d}".encode() for i in range(topics))
    req = kafka_frame(struct.pack(">hhih", 3, 0, corr, 1) + b"c" + struct.pack(">i", topics) + names)
    return req, kafka_frame(struct.pack(">iii", corr, 0, 0))


def conversation(path: Path, pairs: list[tuple[bytes, bytes]], mss: int = 1400, **kw: object) -> str:
    flow = TcpFlow(("10.2.0.1", 42000), ("10.2.0.2", 9092))
    pkts = flow.handshake()
    for req, resp in pairs:
        pkts += flow.send(0, req, mss=mss)
        pkts += flow.send(1, resp, mss=mss)
    pkts += flow.fin(0) + flow.fin(1)
    write_pcap(str(path), pkts, **kw)  # type: ignore[arg-type]
    return str(path)


def pcap_records(data: bytes) -> Iterator[tuple[int, int]]:
    """(offset, length) of each record of a little-endian microsecond pcap file."""
    pos = 24
    while pos + 16 <= len(data):
        incl = struct.unpack_from("<I", data, pos + 8)[0]
        yield pos, 16 + incl
        pos += 16 + incl


# -- limits ----------------------------------------------------------------------------

def test_max_frame_size_hit_counted_and_analysis_goes_on(tmp_path: Path) -> None:
    pairs = [api_versions_pair(1), metadata_pair(2, 400), api_versions_pair(3), api_versions_pair(4)]
    path = conversation(tmp_path / "big.pcap", pairs)
    assert len(pairs[1][0]) > 4096
    # default limit: everything decoded
    base, _ = analyse(path)
    assert [(e.correlation_id, e.status) for e in base] == [(1, "ok"), (2, "ok"), (3, "ok"), (4, "ok")]
    # 4 KiB: the big request is skipped, the rest still pairs
    code, out, err = cli("read", "-f", "ndjson", "--max-frame-size", "4KiB", path)
    assert code == 0, err
    rows = ndjson(out)
    ok = [(r["api_name"], r["correlation_id"]) for r in rows if r["status"] == "ok"]
    assert ok == [("ApiVersions", 1), ("ApiVersions", 3), ("ApiVersions", 4)]
    assert [r["status"] for r in rows if r["correlation_id"] == 2] == ["orphan_response"]
    assert "bytes skipped:" in err
    exs, run = analyse(path, max_frame_size=4096)
    assert [e.correlation_id for e in exs if e.status == "ok"] == [1, 3, 4]
    assert sum(run.summary.bytes_skipped.values()) == len(pairs[1][0])


def test_damaged_response_header_costs_one_exchange(tmp_path: Path) -> None:
    """A bit flip in the first response's correlation id: that exchange breaks, the next pairs."""
    pairs = [api_versions_pair(1), metadata_pair(2, 3), api_versions_pair(3)]
    resp = bytearray(pairs[0][1])
    resp[4] ^= 0x01                          # correlation id 1 -> 0x01000001
    pairs[0] = (pairs[0][0], bytes(resp))
    exs, _ = analyse(conversation(tmp_path / "flip.pcap", pairs))
    assert sorted((e.api_name, e.correlation_id, e.status) for e in exs) == [
        ("ApiVersions", 1, "unanswered"), ("ApiVersions", 3, "ok"), ("Metadata", 2, "ok"),
        ("Unknown", 0x01000001, "orphan_response")]


def test_max_frame_size_in_limits_hit(tmp_path: Path) -> None:
    path = conversation(tmp_path / "big.pcap", [api_versions_pair(1), metadata_pair(2, 400)])
    _, run = analyse(path, max_frame_size=4096)
    assert run.summary.to_json(run.ctx)["limits_hit"].get("max_frame_size") == 1


def test_max_array_len_hit_counted_and_analysis_goes_on() -> None:
    path = SAMPLES / "produce_fetch_rdkafka_none.pcap"
    base, _ = analyse(path)
    exs, run = analyse(path, DecodeContext(Limits(max_array_len=3)))
    assert keys(exs) == keys(base)
    hits = run.ctx.counts.limits_hit.get("max_array_len", 0)
    assert hits > 0
    # the exchanges whose trees have no array over 3 elements are untouched
    assert any(e.status == "ok" for e in exs) and any(e.status == "malformed" for e in exs)
    code, out, _ = cli("read", "--max-array-len", "3", str(path))
    assert code == 0
    assert f"limits hit: max_array_len {hits}" in out
    assert out.count("ApiVersions v3") == sum(1 for e in base if e.api_name == "ApiVersions")


def test_max_array_len_caps_a_record_batch_count() -> None:
    path = SAMPLES / "produce_fetch_rdkafka_none.pcap"
    exs, run = analyse(path, DecodeContext(Limits(max_array_len=2)))
    notes = [n for e in exs for t in (e.request_tree, e.response_tree) if t for f in t.walk()
             if f.name == "records_count" for n in f.notes or ()]
    assert any("over the limit 2" in n for n in notes)
    assert run.ctx.counts.limits_hit["max_array_len"] >= len(notes)


@pytest.mark.parametrize("sample", ["produce_fetch_rdkafka_gzip.pcap", "produce_fetch_kafkapython_zstd.pcap"])
def test_max_decompressed_hit_counted_and_analysis_goes_on(sample: str) -> None:
    path = SAMPLES / sample
    base, brun = analyse(path)
    assert not brun.ctx.counts.limits_hit
    exs, run = analyse(path, DecodeContext(Limits(max_decompressed=64)))
    assert keys(exs) == keys(base)
    hit = sum(v for k, v in run.ctx.counts.limits_hit.items() if "decompressed" in k)
    assert hit > 0
    # records cut by the limit are not malformed: the exchanges stay ok
    assert [e.status for e in exs] == [e.status for e in base]
    code, out, _ = cli("read", "--max-decompressed", "64", str(path))
    assert code == 0 and "limits hit: " in out and "decompressed" in out.split("limits hit: ")[1]


def test_max_depth_hit_counted_and_analysis_goes_on() -> None:
    path = SAMPLES / "produce_fetch_rdkafka_none.pcap"
    base, _ = analyse(path)
    exs, run = analyse(path, DecodeContext(Limits(max_depth=2)))
    assert keys(exs) == keys(base)
    assert run.ctx.counts.limits_hit.get("max_depth", 0) > 0
    assert run.summary.to_json(run.ctx)["limits_hit"]["max_depth"] == run.ctx.counts.limits_hit["max_depth"]
    # shallow messages are still fully decoded
    api = [e for e in exs if e.api_name == "FindCoordinator"]
    assert api and all(e.status == "ok" for e in api)
    code, out, _ = cli("read", "--max-depth", "2", str(path))
    assert code == 0 and f"max_depth {run.ctx.counts.limits_hit['max_depth']}" in out
    # stats honours the limit as read does: its figures are those of the trees read shows
    # (the lean walk, which stats reads otherwise, has no depth limit)
    code, out, _ = cli("stats", "-f", "json", "--max-depth", "2", str(path))
    got = json.loads(out)
    # (and says why its connections are Kafka, which the run's summary knows)
    assert got.pop("connections") == json.loads(json.dumps(run.summary.connections_json()))
    assert code == 0 and got == json.loads(json.dumps(stats_of(exs, names=run.ctx.topic_names)))
    assert sum(g["malformed"] for g in json.loads(out)["groups"]) > 0


# -- broken captures -----------------------------------------------------------------------

def test_record_cut_short(tmp_path: Path) -> None:
    src = SAMPLES / "admin_rdkafka.pcap"
    data = src.read_bytes()
    recs = list(pcap_records(data))
    off, length = recs[29]                       # packet 30
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(data[:off + length // 2])
    code, out, err = cli("read", str(cut))
    assert code == 0, err
    assert "warning: capture ends inside packet 30" in out
    base, _ = analyse(src)
    before = [k for e, k in zip(base, keys(base), strict=True)
              if max(e.request_frame or 0, e.response_frame or 0) < 30]
    exs, run = analyse(cut)
    assert set(before) <= set(keys(exs)) and len(before) >= 5
    assert run.summary.packets == 29
    # stats and check read what came before and say the capture was cut, on stderr
    for cmd in (("stats", "-j", "1"), ("check",)):
        code, out, err = cli(*cmd, str(cut))
        assert code in (0, 1) and "Traceback" not in err, err
        assert err.splitlines()[-1] == f"warning: {cut}: capture ends inside packet 30", (cmd, err)
    # a header cut short
    cut.write_bytes(data[:off + 7])
    code, out, _ = cli("read", str(cut))
    assert code == 0 and "warning: capture ends inside the header of packet 30" in out


def test_snaplen_cut_packets_are_gaps_not_garbage(tmp_path: Path) -> None:
    pairs = [api_versions_pair(1), metadata_pair(2, 300), api_versions_pair(3), metadata_pair(4, 250),
             api_versions_pair(5)]
    path = conversation(tmp_path / "snap.pcap", pairs, snaplen=200)
    code, out, err = cli("read", "-f", "ndjson", path)
    assert code == 0, err
    rows = ndjson(out)
    assert [(r["api_name"], r["correlation_id"]) for r in rows] == [
        ("ApiVersions", 1), ("Metadata", 2), ("ApiVersions", 3), ("Metadata", 4), ("ApiVersions", 5)]
    assert all(r["status"] == "ok" for r in rows if r["api_name"] == "ApiVersions")
    cut = [r for r in rows if r["api_name"] == "Metadata"]
    assert all(any("bytes captured" in n for n in r["notes"]) for r in cut)
    assert "gaps in TCP streams" in err and "truncated in the capture" in err
    _, run = analyse(path)
    assert run.summary.bytes_skipped.get("desync", 0) == 0      # no garbage framed or scanned
    assert run.summary.gap_bytes > 0


def test_shared_snaplen_capture() -> None:
    path = shared_captures() / "snap96_rdkafka_tansu.pcap"
    code, out, _ = cli("read", str(path))
    assert code == 0 and "gaps in TCP streams" in out
    exs, run = analyse(path)
    assert run.summary.bytes_skipped.get("desync", 0) == 0
    assert sum(1 for e in exs if e.status in ("ok", "malformed")) >= 10


@pytest.mark.parametrize("head,message", [
    (struct.pack("<IHHiIII", 0xA1B2C3D4, 7, 4, 0, 0, 65535, 1), "unsupported pcap version 7"),
    (struct.pack("<IHH", 0xA1B2C3D4, 2, 4), "pcap file header cut short"),
    (pcapng_block(0x0A0D0D0A, b"\x01\x02\x03\x04" + b"\0" * 12), "bad pcapng byte-order magic"),
    (struct.pack("<III", 0x0A0D0D0A, 13, 0x1A2B3C4D) + b"\0" * 8, "bad pcapng block length 13"),
    (b"GET / HTTP/1.1\r\n\r\n", "not a pcap or pcapng file"),
    (b"\x1f\x8b\x08\x00garbage-not-gzip", "bad gzip data"),
])
@pytest.mark.parametrize("command", COMMANDS)
def test_bad_file_header(tmp_path: Path, head: bytes, message: str, command: tuple[str, ...]) -> None:
    path = tmp_path / "bad.pcap"
    path.write_bytes(head)
    code, out, err = cli(*command, str(path))
    assert code == 1
    line = one_line_error(err)
    assert message in line and str(path) in line


def _sample_packets(name: str) -> list[RawPacket]:
    with open_capture(str(SAMPLES / name)) as r:
        return [RawPacket(ts, data, orig_len) for _i, ts, _lt, data, orig_len in r]


def test_pcapng_unknown_block_type_is_skipped(tmp_path: Path) -> None:
    pkts = _sample_packets("admin_rdkafka.pcap")
    path = tmp_path / "unknown.pcapng"
    write_pcapng(str(path), pkts, extra_blocks=[pcapng_block(0x0BADBEEF, b"hostile block body"),
                                                pcapng_block(0x00000004, b"\0\0\0\0")])
    base, _ = analyse(SAMPLES / "admin_rdkafka.pcap")
    exs, run = analyse(path)
    assert keys(exs) == keys(base) and run.summary.packets == len(pkts)
    code, out, _ = cli("read", str(path))
    assert code == 0 and "exchanges: ok 11" in out


def test_pcapng_unknown_block_type_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "unknown.pcapng"
    write_pcapng(str(path), _sample_packets("admin_rdkafka.pcap"),
                 extra_blocks=[pcapng_block(0x0BADBEEF, b"hostile block body")])
    code, out, _ = cli("read", str(path))
    assert code == 0 and "unknown pcapng block" in out


def test_pcapng_block_with_bad_length_mid_file(tmp_path: Path) -> None:
    pkts = _sample_packets("admin_rdkafka.pcap")
    good = tmp_path / "good.pcapng"
    write_pcapng(str(good), pkts[:20])
    rest = tmp_path / "rest.pcapng"
    write_pcapng(str(rest), pkts[20:])
    blocks_after_idb = rest.read_bytes()[28 + 32:]          # SHB 28 bytes, IDB 32 bytes
    bad = good.read_bytes() + struct.pack("<II", 6, 0x7FFFFFF1) + b"\0" * 24 + blocks_after_idb
    path = tmp_path / "badlen.pcapng"
    path.write_bytes(bad)
    code, out, err = cli("read", str(path))
    assert code == 0, err
    assert "warning: bad pcapng block length 2147483633" in out and "(after packet 20)" in out
    exs, run = analyse(path)
    assert run.summary.packets == 20
    base, _ = analyse(SAMPLES / "admin_rdkafka.pcap")
    before = [k for e, k in zip(base, keys(base), strict=True) if (e.response_frame or 99) <= 20]
    assert before and set(before) <= {k for e, k in zip(exs, keys(exs), strict=True) if e.status == "ok"}
    # trailing length that differs from the leading one
    blk = pcapng_block(6, b"\0" * 20)
    path.write_bytes(good.read_bytes() + blk[:-4] + struct.pack("<I", len(blk) + 4) + blocks_after_idb)
    code, out, _ = cli("read", str(path))
    assert code == 0 and "trailing length differs" in out


def test_caplen_larger_than_orig_len_shared_capture() -> None:
    path = shared_captures() / "public" / "go-sniffer-pr39__kafka.pcap"
    with open_capture(str(path)) as r:
        pkts = list(map(Packet._make, r))
        assert r.counters.get("caplen > orig_len", 0) > 0
    assert any(len(p.data) > p.orig_len for p in pkts)
    code, out, err = cli("read", "-f", "ndjson", str(path))
    assert code == 0, err
    rows = ndjson(out)
    assert [(r["api_name"], r["api_version"], r["correlation_id"], r["status"]) for r in rows] == [
        ("Metadata", 0, 1, "ok"), ("Produce", 1, 1, "ok")]


def test_caplen_larger_than_orig_len_crafted(tmp_path: Path) -> None:
    pkts = _sample_packets("admin_rdkafka.pcap")
    for i in range(0, len(pkts), 3):
        pkts[i].orig_len = max(len(pkts[i].data) - 10, 0)
    path = tmp_path / "caplen.pcap"
    write_pcap(str(path), pkts)
    base, _ = analyse(SAMPLES / "admin_rdkafka.pcap")
    exs, _ = analyse(path)
    assert keys(exs) == keys(base) and all(e.status == "ok" for e in exs)


def test_caplen_larger_than_orig_len_is_reported() -> None:
    path = shared_captures() / "public" / "go-sniffer-pr39__kafka.pcap"
    code, out, _ = cli("read", str(path))
    assert code == 0 and "caplen > orig_len" in out


def test_timestamps_going_backwards(tmp_path: Path) -> None:
    pkts = _sample_packets("admin_rdkafka.pcap")
    for p in pkts[10:20]:
        p.ts -= 3600.0                       # an hour back, in file order
    path = tmp_path / "back.pcap"
    write_pcap(str(path), pkts)
    base, _ = analyse(SAMPLES / "admin_rdkafka.pcap")
    exs, run = analyse(path)
    assert keys(exs) == keys(base) and all(e.status == "ok" for e in exs)
    assert run.summary.first_ts == pkts[0].ts and run.summary.last_ts == max(p.ts for p in pkts)
    for command in COMMANDS:
        code, out, err = cli(*command, str(path))
        assert code == cli(*command, str(SAMPLES / "admin_rdkafka.pcap"))[0], (command, err)
        assert "Traceback" not in err and out


def test_timestamps_going_backwards_are_reported(tmp_path: Path) -> None:
    pkts = _sample_packets("admin_rdkafka.pcap")
    pkts[10].ts -= 3600.0
    path = tmp_path / "back.pcap"
    write_pcap(str(path), pkts)
    code, out, _ = cli("read", str(path))
    assert code == 0 and "timestamp went backwards" in out


# -- exit codes and messages ------------------------------------------------------------

@pytest.mark.parametrize("command", COMMANDS)
def test_missing_file(tmp_path: Path, command: tuple[str, ...]) -> None:
    path = tmp_path / "nope.pcap"
    code, _, err = cli(*command, str(path))
    assert code == 1
    line = one_line_error(err)
    assert str(path) in line and "No such file" in line


@pytest.mark.parametrize("command", COMMANDS)
def test_directory_instead_of_file(tmp_path: Path, command: tuple[str, ...]) -> None:
    code, _, err = cli(*command, str(tmp_path))
    assert code == 1
    line = one_line_error(err)
    assert str(tmp_path) in line and "directory" in line.lower()


@pytest.mark.parametrize("command", COMMANDS)
def test_unreadable_file(tmp_path: Path, command: tuple[str, ...]) -> None:
    """A capture the user may not read: one line naming it, exit 1 (as root, run without the
    capabilities that let root read any file)."""
    path = tmp_path / "secret.pcap"
    path.write_bytes((SAMPLES / "admin_rdkafka.pcap").read_bytes())
    path.chmod(0)
    setpriv = shutil.which("setpriv")
    if os.geteuid() == 0:
        if not setpriv:
            pytest.skip("setpriv not available to drop root's right to read any file")
        prefix = [setpriv, "--inh-caps=-all", "--bounding-set=-all", "--"]
    else:
        prefix = []
    r = subprocess.run([*prefix, sys.executable, "-m", "analyzer", *command, str(path)],
                       capture_output=True, text=True, timeout=60, cwd=str(REPO))
    # the command line's check of its arguments tells first (a usage error)
    assert r.returncode == 2, r.stderr
    line = one_line_error(r.stderr)
    assert str(path) in line and "not readable" in line
    # and the core's reader, asked directly, names the file and the reason in one line
    probe = ("from analyzer._core import CaptureError, open_capture\n"
             "try:\n    open_capture(__import__('sys').argv[1])\nexcept CaptureError as e:\n    print(e)")
    r = subprocess.run([*prefix, sys.executable, "-c", probe, str(path)],
                       capture_output=True, text=True, timeout=60, cwd=str(REPO))
    assert r.stdout.strip() == f"{path}: cannot open: Permission denied", r.stderr


@pytest.mark.parametrize("command", COMMANDS)
def test_empty_file(tmp_path: Path, command: tuple[str, ...]) -> None:
    path = tmp_path / "empty.pcap"
    path.write_bytes(b"")
    code, _, err = cli(*command, str(path))
    assert code == 1
    line = one_line_error(err)
    assert str(path) in line and "only 0 bytes" in line


@pytest.mark.parametrize("command", COMMANDS)
def test_unsupported_link_type(tmp_path: Path, command: tuple[str, ...]) -> None:
    path = tmp_path / "usb.pcap"
    write_pcap(str(path), [RawPacket(1.0, b"\x00" * 40), RawPacket(2.0, b"\x01" * 40)], linktype=189)
    code, _, err = cli(*command, str(path))
    assert code == 1
    line = one_line_error(err)
    assert str(path) in line and "unsupported link type 189" in line and "packet 1" in line
    # pcapng: named by the packet on the unsupported interface
    path = tmp_path / "usb.pcapng"
    write_pcapng(str(path), [RawPacket(1.0, b"\x00" * 40)], interfaces=(189,))
    code, _, err = cli(*command, str(path))
    assert code == 1 and "unsupported link type 189 (packet 1)" in one_line_error(err)


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("args,option", [
    (("--max-frame-size", "lots"), "--max-frame-size"),
    (("--max-frame-size", "0"), "--max-frame-size"),
    (("--max-decompressed", "-5"), "--max-decompressed"),
    (("--max-array-len", "0"), "--max-array-len"),
    (("--max-depth", "zero"), "--max-depth"),
    (("--port", "70000"), "--port"),
    (("--protocol", "ancient"), "--protocol"),
    (("-f", "xml"), "--format"),
    (("--no-such-option",), "--no-such-option"),
])
def test_bad_option_values(command: tuple[str, ...], args: tuple[str, ...], option: str) -> None:
    cmd = command[0]
    code, _, err = cli(cmd, *args, str(SAMPLES / "admin_rdkafka.pcap"))
    assert code == 2, err
    line = one_line_error(err)
    assert option in line


def test_missing_capture_argument_is_a_usage_error() -> None:
    for cmd in ("read", "stats", "check"):
        code, _, err = cli(cmd)
        assert code == 2, (cmd, err)
        one_line_error(err)


def test_second_capture_missing_after_a_good_one(tmp_path: Path) -> None:
    missing = tmp_path / "gone.pcap"
    code, out, err = cli("read", str(SAMPLES / "admin_rdkafka.pcap"), str(missing))
    assert code == 1
    assert out == ""            # every capture is checked before the first is read (as check does)
    assert str(missing) in one_line_error(err)


def test_success_exit_codes() -> None:
    path = str(SAMPLES / "admin_rdkafka.pcap")
    assert cli("read", path)[0] == 0
    assert cli("stats", "-f", "json", path)[0] == 0
    code, out, _ = cli("check", "-f", "json", path)
    doc = json.loads(out)
    assert code == (1 if doc["counts"]["error"] else 0)
