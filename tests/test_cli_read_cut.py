"""`read -w OUT`: the capture cut to the selected exchanges (issue 39 item 4): the packets
that hold bytes of their request and response frames, plus their connections' handshakes
(SYN, SYN-ACK, the ACK) and FIN/RST packets, bytes and times unchanged. `read` of the cut
finds the same exchanges (api, correlation id, status, latency), tshark the same
correlation ids; packet numbers are the new file's."""
from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "samples"


def _read(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "analyzer", "read", *args], capture_output=True, text=True,
                          cwd=REPO)


def _exchanges(path: Path, *sel: str) -> list[dict[str, object]]:
    r = _read(str(path), "-f", "ndjson", "--no-summary", *sel)
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()]


def _key(d: dict[str, object]) -> tuple[object, ...]:
    return (d["client"], d["broker"], d["api_name"], d["api_version"], d["correlation_id"], d["status"],
            d["latency_ms"], d["ttfb_ms"], d["request_bytes"], d["response_bytes"])


def _tshark(path: Path, port: int, *fields: str) -> list[list[str]]:
    out = subprocess.run(["tshark", "-r", str(path), "-d", f"tcp.port=={port},kafka", "-T", "fields",
                          *[a for f in fields for a in ("-e", f)]], capture_output=True, text=True, check=True)
    return [line.split("\t") for line in out.stdout.splitlines()]


CASES = [
    ("produce_fetch_rdkafka_gzip.pcap", ["-Y", "api_name == Fetch"], 1, 7, 69),
    ("produce_fetch_kafkapython_gzip_pcapng.pcapng", ["-Y", "api_name == Fetch"], 1, None, 50),
    ("group_rdkafka.pcap", ["--frame", "73"], 1, None, None),
    ("group_rdkafka.pcap", ["--api", "Heartbeat", "--api", "SyncGroup"], None, None, None),
    ("group_rdkafka.pcap", ["--errors-only"], None, None, None),
    ("txn_rdkafka.pcap", ["-Y", "api_name in {InitProducerId AddPartitionsToTxn EndTxn}"], None, None, None),
]


@pytest.mark.parametrize(("sample", "sel", "n_exchanges", "n_packets", "n_total"), CASES)
def test_cut_holds_the_selected_exchanges(tmp_path: Path, sample: str, sel: list[str], n_exchanges: int | None,
                                          n_packets: int | None, n_total: int | None) -> None:
    src = SAMPLES / sample
    out = tmp_path / "cut.pcap"
    r = _read(str(src), *sel, "-w", str(out), "--no-summary")
    assert r.returncode == 0, r.stderr
    wanted = _exchanges(src, *sel)
    assert wanted and (n_exchanges is None or len(wanted) == n_exchanges)
    # what read prints on stdout is unchanged by -w; stderr says what was written
    assert r.stdout == _read(str(src), *sel, "--no-summary").stdout
    (said,) = r.stderr.splitlines()
    m = re.fullmatch(rf"kafkawire-sniff: wrote {re.escape(str(out))}: ([0-9]+) packets of ([0-9]+) "
                     r"\(packet numbers differ from the capture's\)", said)
    assert m, said
    written, total = int(m.group(1)), int(m.group(2))
    assert n_packets is None or written == n_packets
    assert n_total is None or total == n_total
    # (a) read of the cut finds the same exchanges, nothing else
    got = _exchanges(out)
    assert sorted(map(_key, got)) == sorted(map(_key, wanted))
    assert len(_read(str(out), "-f", "ndjson").stdout.splitlines()) == len(wanted)
    # handshake and close of every connection: a SYN each, FIN or RST packets
    if not shutil.which("tshark"):
        pytest.skip("tshark is not installed")
    port = int(str(wanted[0]["broker"]).rsplit(":", 1)[1])
    rows = _tshark(out, port, "tcp.flags.syn", "tcp.flags.ack", "tcp.flags.fin", "tcp.flags.reset")
    assert len(rows) == written
    conns = {(d["client"], d["broker"]) for d in wanted}
    assert sum(1 for s, a, _f, _r in rows if s in ("1", "True") and a in ("0", "False")) == len(conns)
    assert sum(1 for s, a, _f, _r in rows if s in ("1", "True") and a in ("1", "True")) == len(conns)
    assert any(f in ("1", "True") or x in ("1", "True") for _s, _a, f, x in rows)
    # (b) tshark finds the same correlation ids, requests and responses
    ids = [int(c) for row in _tshark(out, port, "kafka.correlation_id") for c in row[0].split(",") if c]
    assert sorted(ids) == sorted(2 * [int(str(d["correlation_id"])) for d in wanted])


def test_cut_keeps_bytes_and_times(tmp_path: Path) -> None:
    """Every packet of the cut is one of the capture's, unchanged, with its time."""
    if not shutil.which("tshark"):
        pytest.skip("tshark is not installed")
    src = SAMPLES / "produce_fetch_rdkafka_gzip.pcap"
    out = tmp_path / "cut.pcap"
    assert _read(str(src), "--frame", "54", "-w", str(out), "--no-summary").returncode == 0
    fields = ("frame.time_epoch", "frame.len", "frame.cap_len", "tcp.stream", "tcp.seq_raw", "tcp.flags")
    orig = {tuple(r[:3] + r[4:]) for r in _tshark(src, 49781, *fields)}
    cut = [tuple(r[:3] + r[4:]) for r in _tshark(out, 49781, *fields)]
    assert len(cut) == 7 and set(cut) <= orig
    with out.open("rb") as f:
        assert struct.unpack("<IHHiIII", f.read(24))[0::6] == (0xA1B2C3D4, 1)     # µs pcap, Ethernet


def test_nothing_selected_writes_an_empty_capture(tmp_path: Path) -> None:
    out = tmp_path / "none.pcap"
    r = _read(str(SAMPLES / "group_rdkafka.pcap"), "-Y", "api_name == DeleteTopics", "-w", str(out), "--no-summary")
    assert r.returncode == 0 and r.stdout == ""
    assert r.stderr == f"kafkawire-sniff: wrote {out}: 0 packets of 231 (packet numbers differ from the capture's)\n"
    assert out.stat().st_size == 24
    assert _read(str(out)).returncode == 0
    if shutil.which("tshark"):
        assert subprocess.run(["tshark", "-r", str(out)], capture_output=True).returncode == 0


def test_unwritable_path_is_one_line_and_exit_1(tmp_path: Path) -> None:
    r = _read(str(SAMPLES / "group_rdkafka.pcap"), "-w", str(tmp_path / "no" / "such" / "dir.pcap"))
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.splitlines() == [f"kafkawire-sniff: error: -w: cannot write {tmp_path}/no/such/dir.pcap: "
                                     "No such file or directory"]


def test_w_takes_one_capture(tmp_path: Path) -> None:
    r = _read(str(SAMPLES / "group_rdkafka.pcap"), str(SAMPLES / "txn_rdkafka.pcap"), "-w", str(tmp_path / "o"))
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and not (tmp_path / "o").exists()


def test_cut_of_a_decrypted_tls_connection_keeps_what_decryption_needs(tmp_path: Path) -> None:
    """Frames of decrypted TLS count in the plaintext: the cut keeps the connection's packets
    up to the selected frames' last (handshake and earlier records included), none after."""
    from tests.test_tlsdecrypt import REQS, RESPS
    from tests.tlsgen import tls_kafka_pcap

    pcap, keylog, out = tmp_path / "tls.pcap", tmp_path / "keys.log", tmp_path / "cut.pcap"
    tls_kafka_pcap(str(pcap), REQS, RESPS, keylog=str(keylog))
    sel = ["--tls-keylog", str(keylog), "-p", "9093"]
    r = _read(str(pcap), *sel, "-Y", "correlation_id == 2", "-w", str(out), "--no-summary")
    assert r.returncode == 0, r.stderr
    (wanted,) = _exchanges(pcap, *sel, "-Y", "correlation_id == 2")
    got = {d["correlation_id"]: d for d in _exchanges(out, *sel)}
    assert sorted(got) == [1, 2] and _key(got[2]) == _key(wanted)


def test_w_never_overwrites_the_capture_it_reads(tmp_path: Path) -> None:
    cap = tmp_path / "cap.pcap"
    cap.write_bytes((SAMPLES / "group_rdkafka.pcap").read_bytes())
    r = _read(str(cap), "--frame", "73", "-w", str(cap))
    assert r.returncode == 1 and r.stdout == "" and len(r.stderr.splitlines()) == 1
    assert "is the capture being read" in r.stderr
    assert cap.read_bytes() == (SAMPLES / "group_rdkafka.pcap").read_bytes()


def test_cut_of_a_pcapng_keeps_its_link_type(tmp_path: Path) -> None:
    """A pcapng of Linux cooked (SLL) packets: the cut is a pcap of link type 113, as tshark
    reads it (the interfaces of a pcapng are known only once it is read: the first pass
    tells them)."""
    import struct

    from analyzer._core import open_capture
    from analyzer.model import Packet
    from analyzer.sinks.pcapwrite import _pcapng_head, _pcapng_packet

    def sll(eth: bytes) -> bytes:
        return struct.pack(">HHH8sH", 0, 1, 6, eth[6:12] + b"\0\0", struct.unpack(">H", eth[12:14])[0]) + eth[14:]

    with open_capture(str(SAMPLES / "produce_fetch_kafkapython_gzip_pcapng.pcapng")) as cap:
        packets = list(map(Packet._make, cap))
    src = tmp_path / "sll.pcapng"
    src.write_bytes(_pcapng_head([113], 65535, False)
                    + b"".join(_pcapng_packet(p.ts, 0, sll(p.data), p.orig_len + 2, False) for p in packets))
    out = tmp_path / "cut.pcap"
    r = _read(str(src), "-Y", "api_name == Fetch", "-w", str(out), "--no-summary")
    assert r.returncode == 0, r.stderr
    with open_capture(str(out)) as cap:
        assert (cap.format, cap.linktypes) == ("pcap", [113])
    assert [_key(d) for d in _exchanges(out)] == [_key(d) for d in _exchanges(src, "-Y", "api_name == Fetch")]
    ids = [c for row in _tshark(out, 36101, "kafka.correlation_id") for c in row[0].split(",") if c]
    assert ids and len(ids) == 2 * len(_exchanges(out))


@pytest.mark.parametrize("nanos", [False, True])
def test_cut_keeps_nanosecond_times(tmp_path: Path, nanos: bool) -> None:
    """A pcapng whose interface counts nanoseconds is cut to a nanosecond pcap (the times
    read back as they were), one in microseconds to a microsecond pcap."""
    from analyzer._core import open_capture
    from analyzer.model import Packet
    from analyzer.sinks.pcapwrite import _pcapng_head, _pcapng_packet

    with open_capture(str(SAMPLES / "produce_fetch_kafkapython_gzip_pcapng.pcapng")) as cap:
        packets = list(map(Packet._make, cap))
    src = tmp_path / "times.pcapng"
    src.write_bytes(_pcapng_head([1], 65535, nanos)
                    + b"".join(_pcapng_packet(p.ts + i * 1e-9, 0, p.data, p.orig_len, nanos)
                               for i, p in enumerate(packets)))
    out = tmp_path / "cut.pcap"
    assert _read(str(src), "-w", str(out), "--no-summary").returncode == 0
    with open_capture(str(src)) as a, open_capture(str(out)) as b:
        assert (b.format, b.fine_times) == ("pcap", nanos)
        times = {Packet._make(p).ts for p in a}
        assert {Packet._make(p).ts for p in b} <= times


@pytest.mark.parametrize("nanos", [False, True])
def test_pcapng_of_several_link_types_reads_back(tmp_path: Path, nanos: bool) -> None:
    """With several link types in the capture the cut is a pcapng, an interface per link type:
    the core and tshark read it back, packets and times as written."""
    from analyzer._core import open_capture
    from analyzer.model import Packet
    from analyzer.sinks.pcapwrite import _pcapng_head, _pcapng_packet

    with open_capture(str(SAMPLES / "produce_fetch_kafkapython_gzip_pcapng.pcapng")) as cap:
        packets = list(map(Packet._make, cap))
    out = tmp_path / "multi.pcapng"
    out.write_bytes(_pcapng_head([113, 1], 65535, nanos)
                    + b"".join(_pcapng_packet(p.ts, 1, p.data, p.orig_len, nanos) for p in packets))
    with open_capture(str(out)) as cap:
        back = list(map(Packet._make, cap))
        assert cap.format == "pcapng" and sorted(cap.linktypes) == [1, 113]
    assert [(p.linktype, p.data, p.orig_len) for p in back] == [(1, p.data, p.orig_len) for p in packets]
    unit = 1e-9 if nanos else 1e-6
    assert all(abs(a.ts - b.ts) <= unit for a, b in zip(back, packets, strict=True))
    if nanos:
        assert [a.ts for a in back] == [b.ts for b in packets]
    if shutil.which("tshark"):
        r = subprocess.run(["tshark", "-r", str(out)], capture_output=True, text=True)
        assert r.returncode == 0 and len(r.stdout.splitlines()) == len(packets)
