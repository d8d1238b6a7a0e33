#!/usr/bin/env python3
"""Bounded Kafka client workloads for samples and slow tests (loopback only).

Standalone on purpose: it imports only the standard library and the client library it
drives, so it also runs in the kafka-python 2.0.2 venv.  Every loop is bounded by a
message count and a wall-clock deadline.  The last line is ``RESULT {json}`` with
what the client saw (records delivered / consumed per topic, errors).

    python lab_workloads.py create --bs 127.0.0.1:9092 --topic t --partitions 2
    python lab_workloads.py pf --bs ... --client rdkafka|kafka-python|aiokafka|kafkajs --codec gzip --n 20
    python lab_workloads.py group|admin|txn --bs ...
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time

VOCAB = ("kafka", "record", "batch", "offset", "partition", "leader", "replica",
         "broker", "topic", "segment", "consumer", "producer", "wire", "sniff")


def log(*a: object) -> None:
    print("[workload]", *a, flush=True)


def result(**kw: object) -> None:
    print("RESULT " + json.dumps(kw, sort_keys=True), flush=True)


def messages(seed: int, n: int, min_size: int, max_size: int, headers: bool, tag: str) -> list:
    """Deterministic (key, value, headers) triples: seeded, compressible text."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        size = rng.randint(min_size, max_size)
        words = []
        total = 0
        while total < size:
            w = rng.choice(VOCAB)
            words.append(w)
            total += len(w) + 1
        value = (f"{i:05d} " + " ".join(words))[:size].encode()
        key = f"key-{i % 7}".encode()
        hdrs = [("trace-id", f"{seed}-{i}".encode()), ("source", tag.encode())] if headers else None
        out.append((key, value, hdrs))
    return out


def parse_version(s: str | None) -> tuple[int, ...] | None:
    return tuple(int(x) for x in s.split(".")) if s else None


# ---------------------------------------------------------------- topic creation (rdkafka admin)
def cmd_create(a: argparse.Namespace) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": a.bs, "client.id": "kws-setup"})
    created = []
    for t in a.topic.split(","):
        fut = admin.create_topics([NewTopic(t, a.partitions, 1)], request_timeout=10)[t]
        try:
            fut.result(timeout=10)
            created.append(t)
        except Exception as e:  # noqa: BLE001 - already exists is fine
            log("create", t, "->", e)
    result(created=created)


# ---------------------------------------------------------------- produce + fetch
def pf_rdkafka(a: argparse.Namespace, msgs: list) -> tuple[int, int, int]:
    from confluent_kafka import Consumer, Producer, TopicPartition

    conf = {"bootstrap.servers": a.bs, "compression.codec": a.codec, "linger.ms": a.linger_ms,
            "client.id": a.client_id or "kws-rdkafka-producer", "batch.num.messages": a.batch}
    old = {"api.version.request": False, "broker.version.fallback": a.old} if a.old else {}
    conf.update(old)
    p = Producer(conf)
    errors: list[str] = []
    ok = [0]

    def dr(err: object, _msg: object) -> None:
        if err:
            errors.append(str(err))
        else:
            ok[0] += 1

    for i, (k, v, h) in enumerate(msgs):
        kw = {"key": k, "value": v, "partition": i % a.partitions, "on_delivery": dr}
        if h and not a.old:
            kw["headers"] = h
        p.produce(a.topic, **kw)
        p.poll(0)
        if a.pace:
            time.sleep(a.pace)
    p.flush(20)
    if errors:
        log("delivery errors", len(errors), errors[:2])
    if a.no_fetch:
        return ok[0], len(errors), 0
    c = Consumer({"bootstrap.servers": a.bs, "group.id": f"kws-fetch-{a.seed}", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "client.id": "kws-rdkafka-consumer",
                  "fetch.wait.max.ms": 200, **old})
    c.assign([TopicPartition(a.topic, i, 0) for i in range(a.partitions)])
    n = 0
    deadline = time.monotonic() + a.fetch_secs
    while n < ok[0] and time.monotonic() < deadline:
        m = c.poll(0.3)
        if m is not None and not m.error():
            n += 1
    c.close()
    return ok[0], len(errors), n


def pf_kafka_python(a: argparse.Namespace, msgs: list) -> tuple[int, int, int]:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    api = parse_version(a.api_version)
    kw: dict = dict(bootstrap_servers=a.bs, compression_type=None if a.codec == "none" else a.codec,
                    linger_ms=a.linger_ms, client_id=a.client_id or "kws-kafka-python-producer",
                    request_timeout_ms=10000, retries=0)
    if api:
        kw["api_version"] = api
    p = KafkaProducer(**kw)
    futs = []
    for i, (k, v, h) in enumerate(msgs):
        skw: dict = {"key": k, "value": v, "partition": i % a.partitions}
        if h and (api is None or api >= (0, 11)):
            skw["headers"] = h
        futs.append(p.send(a.topic, **skw))
        if a.pace:
            time.sleep(a.pace)
    p.flush(20)
    ok = errs = 0
    for f in futs:
        try:
            f.get(timeout=5)
            ok += 1
        except Exception as e:  # noqa: BLE001
            errs += 1
            last = e
    if errs:
        log("produce errors", errs, repr(last)[:200])
    p.close(5)
    if a.no_fetch:
        return ok, errs, 0
    ckw: dict = dict(bootstrap_servers=a.bs, group_id=None, auto_offset_reset="earliest",
                     enable_auto_commit=False, client_id="kws-kafka-python-consumer",
                     fetch_max_wait_ms=200, request_timeout_ms=15000)
    if api:
        ckw["api_version"] = api
    c = KafkaConsumer(**ckw)
    tps = [TopicPartition(a.topic, i) for i in range(a.partitions)]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    n = 0
    deadline = time.monotonic() + a.fetch_secs
    while n < max(ok, 1) and time.monotonic() < deadline:
        n += sum(len(v) for v in c.poll(timeout_ms=300).values())
    c.close()
    return ok, errs, n


def pf_aiokafka(a: argparse.Namespace, msgs: list) -> tuple[int, int, int]:
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    async def run() -> tuple[int, int, int]:
        p = AIOKafkaProducer(bootstrap_servers=a.bs, compression_type=None if a.codec == "none" else a.codec,
                             linger_ms=a.linger_ms, client_id=a.client_id or "kws-aiokafka-producer")
        await p.start()
        futs = []
        for i, (k, v, h) in enumerate(msgs):
            futs.append(await p.send(a.topic, key=k, value=v, headers=h, partition=i % a.partitions))
            if a.pace:
                await asyncio.sleep(a.pace)
        await p.flush()
        res = await asyncio.gather(*futs, return_exceptions=True)
        await p.stop()
        errs = sum(1 for r in res if isinstance(r, BaseException))
        ok = len(res) - errs
        if a.no_fetch:
            return ok, errs, 0
        c = AIOKafkaConsumer(bootstrap_servers=a.bs, group_id=None, auto_offset_reset="earliest",
                             enable_auto_commit=False, client_id="kws-aiokafka-consumer", fetch_max_wait_ms=200)
        await c.start()
        tps = [TopicPartition(a.topic, i) for i in range(a.partitions)]
        c.assign(tps)
        await c.seek_to_beginning(*tps)
        n = 0
        deadline = time.monotonic() + a.fetch_secs
        while n < ok and time.monotonic() < deadline:
            r = await c.getmany(timeout_ms=300)
            n += sum(len(v) for v in r.values())
        await c.stop()
        return ok, errs, n

    return asyncio.run(asyncio.wait_for(run(), timeout=a.deadline))


def pf_kafkajs(a: argparse.Namespace, msgs: list) -> tuple[int, int, int]:
    """Node.js kafkajs (``lab_kafkajs.js``): the same records, on its stdin as JSON; it reads them
    back with a consumer group (kafkajs cannot assign partitions) and prints its own counts."""
    import os
    import subprocess
    from pathlib import Path

    import lab  # tests/lab.py: the pinned kafkajs, installed with npm on first use

    modules = lab.kafkajs_modules()
    script = Path(__file__).resolve().with_name("lab_kafkajs.js")
    argv = [lab.find_node(), str(script), "--bs", a.bs, "--topic", a.topic, "--codec", a.codec,
            "--partitions", str(a.partitions), "--client-id", a.client_id or "kws-kafkajs",
            "--group", f"kws-kafkajs-{a.seed}", "--fetch-secs", str(a.fetch_secs), "--deadline", str(a.deadline)]
    records = [{"key": k.decode(), "value": v.decode(), "headers": [[n, hv.decode()] for n, hv in h] if h else None}
               for k, v, h in msgs]
    env = {**os.environ, "NODE_PATH": str(modules), "KAFKAJS_NO_PARTITIONER_WARNING": "1"}
    r = subprocess.run(argv, input=json.dumps(records), capture_output=True, text=True, env=env,
                       timeout=a.deadline + 10)
    res = lab.parse_result(r.stdout)
    for line in (r.stdout + r.stderr).splitlines():
        if not line.startswith(lab.RESULT_PREFIX):
            log(line)
    if r.returncode != 0 or not res:
        raise SystemExit(f"lab_kafkajs.js exit {r.returncode}")
    return res["produced"][a.topic], res["produce_errors"], res["consumed"][a.topic]  # type: ignore[index]


def cmd_pf(a: argparse.Namespace) -> None:
    msgs = messages(a.seed, a.n, a.min_size, a.max_size, a.headers, a.client)
    fn = {"rdkafka": pf_rdkafka, "kafka-python": pf_kafka_python, "aiokafka": pf_aiokafka,
          "kafkajs": pf_kafkajs}[a.client]
    ok, errs, got = fn(a, msgs)
    log(f"{a.client}: delivered {ok}, errors {errs}, consumed {got}")
    result(topic=a.topic, sent=len(msgs), produced={a.topic: ok}, produce_errors=errs, consumed={a.topic: got})


# ---------------------------------------------------------------- consumer group
def cmd_group(a: argparse.Namespace) -> None:
    from confluent_kafka import Consumer, Producer

    msgs = messages(a.seed, a.n, a.min_size, a.max_size, a.headers, "group")
    p = Producer({"bootstrap.servers": a.bs, "client.id": "kws-group-producer", "linger.ms": 5,
                  "compression.codec": a.codec})
    for i, (k, v, h) in enumerate(msgs):
        p.produce(a.topic, key=k, value=v, headers=h, partition=i % a.partitions)
    left = p.flush(20)
    members = [Consumer({"bootstrap.servers": a.bs, "group.id": a.group, "client.id": f"kws-member-{m}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                         "max.poll.interval.ms": 10000, "fetch.wait.max.ms": 200,
                         "partition.assignment.strategy": "range"}) for m in range(a.members)]
    for c in members:
        c.subscribe([a.topic])
    got = commits = 0
    deadline = time.monotonic() + a.group_secs
    while time.monotonic() < deadline:
        for c in members:
            m = c.poll(0.1)
            if m is not None and not m.error():
                got += 1
                if got % 10 == 0:
                    c.commit(message=m, asynchronous=False)
                    commits += 1
    for c in members:
        try:
            c.commit(asynchronous=False)
            commits += 1
        except Exception as e:  # noqa: BLE001 - nothing to commit
            log("commit:", e)
    for c in members:
        c.close()
    result(topic=a.topic, produced={a.topic: len(msgs) - left}, consumed={a.topic: got}, commits=commits)


# ---------------------------------------------------------------- a consumer falling behind
def cmd_lag(a: argparse.Namespace) -> None:
    """A kafka-python group member that reads 5 records per poll and sleeps 150 ms between
    polls while an idempotent producer writes ``--n`` records in 4 bursts 1.2 s apart: the
    consumer falls behind after each burst and catches up (bounded by --group-secs)."""
    import threading

    from kafka import KafkaConsumer, KafkaProducer

    msgs = messages(a.seed, a.n, a.min_size, a.max_size, a.headers, "lag")
    produced = [0]
    stop = threading.Event()

    def produce() -> None:
        p = KafkaProducer(bootstrap_servers=a.bs, client_id="kws-lag-producer", linger_ms=20, acks="all",
                          compression_type=None if a.codec == "none" else a.codec, enable_idempotence=True)
        per = max(1, len(msgs) // 4)
        for b in range(0, len(msgs), per):
            for i, (k, v, h) in enumerate(msgs[b:b + per], start=b):
                p.send(a.topic, key=k, value=v, headers=h, partition=i % a.partitions)
                produced[0] += 1
            p.flush(10)
            if stop.wait(1.2):
                break
        p.close(5)

    c = KafkaConsumer(a.topic, bootstrap_servers=a.bs, group_id=a.group, client_id="kws-slow-consumer",
                      auto_offset_reset="earliest", enable_auto_commit=True, auto_commit_interval_ms=1000,
                      max_poll_records=5, fetch_max_wait_ms=200, max_partition_fetch_bytes=2048,
                      session_timeout_ms=10000, heartbeat_interval_ms=1000)
    got = 0
    join_deadline = time.monotonic() + 20
    while not c.assignment() and time.monotonic() < join_deadline:
        got += sum(len(v) for v in c.poll(timeout_ms=200, max_records=5).values())
    t = threading.Thread(target=produce)
    t.start()
    deadline = time.monotonic() + a.group_secs
    while time.monotonic() < deadline:
        got += sum(len(v) for v in c.poll(timeout_ms=100, max_records=5).values())
        time.sleep(0.15)
    stop.set()
    t.join(20)
    c.close()
    result(topic=a.topic, produced={a.topic: produced[0]}, consumed={a.topic: got})


# ---------------------------------------------------------------- admin
def cmd_admin(a: argparse.Namespace) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

    admin = AdminClient({"bootstrap.servers": a.bs, "client.id": "kws-admin"})
    steps: dict[str, str] = {}

    def step(name: str, fn) -> None:  # type: ignore[no-untyped-def]
        try:
            r = fn()
            steps[name] = "ok"
            log(name, "ok", str(r)[:120])
        except Exception as e:  # noqa: BLE001 - errors are part of the session
            steps[name] = "error"
            log(name, "error", repr(e)[:160])

    def wait(fs: dict) -> dict:
        return {str(k): v.result(timeout=10) for k, v in fs.items()}

    t1, t2 = f"{a.topic}-a", f"{a.topic}-b"
    step("create_topics", lambda: wait(admin.create_topics(
        [NewTopic(t1, 3, 1, config={"cleanup.policy": "delete"}), NewTopic(t2, 1, 1)], request_timeout=10)))
    step("create_duplicate", lambda: wait(admin.create_topics([NewTopic(t1, 3, 1)], request_timeout=10)))
    step("list_topics", lambda: sorted(admin.list_topics(timeout=5).topics))
    step("describe_configs", lambda: wait(admin.describe_configs(
        [ConfigResource(ResourceType.TOPIC, t1)], request_timeout=10)))
    step("delete_topics", lambda: wait(admin.delete_topics([t1, t2], request_timeout=10)))
    step("delete_missing", lambda: wait(admin.delete_topics([f"{a.topic}-missing"], request_timeout=10)))
    result(steps=steps, topics=[t1, t2])


# ---------------------------------------------------------------- idempotent + transactional
def cmd_txn(a: argparse.Namespace) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    msgs = messages(a.seed, a.n, a.min_size, a.max_size, a.headers, "txn")
    third = len(msgs) // 3
    idem = Producer({"bootstrap.servers": a.bs, "client.id": "kws-idempotent", "enable.idempotence": True,
                     "compression.codec": a.codec, "linger.ms": 5})
    for i, (k, v, h) in enumerate(msgs[:third]):
        idem.produce(a.topic, key=k, value=v, headers=h, partition=i % a.partitions)
    idem.flush(15)
    p = Producer({"bootstrap.servers": a.bs, "transactional.id": f"kws-txn-{a.seed}", "client.id": "kws-txn",
                  "transaction.timeout.ms": 10000, "compression.codec": a.codec, "linger.ms": 5})
    p.init_transactions(15)
    rest = msgs[third:]
    half = len(rest) // 2
    committed = aborted = 0
    for chunk, commit in ((rest[:half], True), (rest[half:], False)):
        p.begin_transaction()
        for i, (k, v, h) in enumerate(chunk):
            p.produce(a.topic, key=k, value=v, headers=h, partition=i % a.partitions)
        p.flush(10)
        if commit:
            p.commit_transaction(15)
            committed += len(chunk)
        else:
            p.abort_transaction(15)
            aborted += len(chunk)
    c = Consumer({"bootstrap.servers": a.bs, "group.id": f"kws-txn-reader-{a.seed}", "client.id": "kws-txn-reader",
                  "isolation.level": "read_committed", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "fetch.wait.max.ms": 200})
    c.assign([TopicPartition(a.topic, i, 0) for i in range(a.partitions)])
    got = 0
    deadline = time.monotonic() + a.fetch_secs
    while time.monotonic() < deadline and got < third + committed:
        m = c.poll(0.3)
        if m is not None and not m.error():
            got += 1
    c.close()
    result(topic=a.topic, idempotent=third, committed=committed, aborted=aborted,
           produced={a.topic: third + committed + aborted}, consumed={a.topic: got})


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["create", "pf", "group", "admin", "txn", "lag"])
    ap.add_argument("--bs", required=True)
    ap.add_argument("--client", default="rdkafka", choices=["rdkafka", "kafka-python", "aiokafka", "kafkajs"])
    ap.add_argument("--client-id", default=None)
    ap.add_argument("--topic", default="kws")
    ap.add_argument("--codec", default="none")
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--min-size", type=int, default=30)
    ap.add_argument("--max-size", type=int, default=300)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--headers", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--linger-ms", type=int, default=10)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--pace", type=float, default=0.0, help="seconds between sends")
    ap.add_argument("--no-fetch", action="store_true")
    ap.add_argument("--fetch-secs", type=float, default=6.0)
    ap.add_argument("--old", default=None, help="librdkafka broker.version.fallback (no ApiVersions)")
    ap.add_argument("--api-version", default=None, help="kafka-python api_version, e.g. 0.10.1")
    ap.add_argument("--group", default="kws-group")
    ap.add_argument("--members", type=int, default=2)
    ap.add_argument("--group-secs", type=float, default=5.0)
    ap.add_argument("--deadline", type=float, default=40.0)
    a = ap.parse_args(argv)
    {"create": cmd_create, "pf": cmd_pf, "group": cmd_group, "admin": cmd_admin, "txn": cmd_txn,
     "lag": cmd_lag}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
