#!/usr/bin/env node
// kafkajs client for the capture lab: produce the records it is given, then read them back
// with a consumer group (kafkajs has no assign()), then disconnect.  Bounded: a fixed record
// list and a hard deadline.  Normally started by `lab_workloads.py pf --client kafkajs`,
// which writes the records to stdin as JSON and puts kafkajs on NODE_PATH (lab.kafkajs_modules()).
//
//   node lab_kafkajs.js --bs 127.0.0.1:9092 --topic t --codec none|gzip --partitions 2 \
//        [--group G] [--client-id ID] [--fetch-secs 6] [--deadline 60]  < records.json
//
// records.json: [{"key": "...", "value": "...", "headers": [["name", "value"], ...] | null}, ...]
// Prints "RESULT {json}" (the line tests/lab.py parse_result reads) with the same counts as
// the Python workloads; exits 0 when every record was delivered and consumed, 1 when not,
// 2 on an error, 3 at the deadline.
'use strict';

const { Kafka, CompressionTypes, logLevel } = require('kafkajs');

function options(argv) {
  const o = { codec: 'none', partitions: 2, fetchSecs: 6, deadline: 60, group: null, clientId: 'kws-kafkajs' };
  const names = { '--bs': 'bs', '--topic': 'topic', '--codec': 'codec', '--partitions': 'partitions',
    '--group': 'group', '--client-id': 'clientId', '--fetch-secs': 'fetchSecs', '--deadline': 'deadline' };
  for (let i = 0; i < argv.length; i += 2) {
    const name = names[argv[i]];
    if (!name || i + 1 >= argv.length) throw new Error(`bad argument ${argv[i]}`);
    o[name] = argv[i + 1];
  }
  for (const k of ['partitions', 'fetchSecs', 'deadline']) o[k] = Number(o[k]);
  if (!o.bs || !o.topic) throw new Error('--bs and --topic are required');
  if (!(o.codec in CODECS)) throw new Error(`codec ${o.codec}: only none and gzip are built into kafkajs`);
  return o;
}

const CODECS = { none: CompressionTypes.None, gzip: CompressionTypes.GZIP };

const say = (...a) => console.log('[kafkajs]', ...a);

function readStdin() {
  return new Promise((resolve, reject) => {
    const parts = [];
    process.stdin.on('data', (c) => parts.push(c));
    process.stdin.on('end', () => resolve(Buffer.concat(parts).toString('utf8')));
    process.stdin.on('error', reject);
  });
}

// kafkajs logs through this: one short line on stderr per entry (WARN and above).
const logCreator = () => ({ namespace, level, log }) => {
  const name = Object.keys(logLevel).find((k) => logLevel[k] === level) || level;
  console.error(`[kafkajs ${name}] ${namespace}: ${log.message}`);
};

async function main() {
  const o = options(process.argv.slice(2));
  const timer = setTimeout(() => {
    console.error(`[kafkajs] deadline of ${o.deadline}s reached`);
    process.exit(3);
  }, o.deadline * 1000);
  timer.unref();

  const records = JSON.parse(await readStdin());
  const kafka = new Kafka({ clientId: o.clientId, brokers: [o.bs], logLevel: logLevel.WARN, logCreator,
    connectionTimeout: 5000, requestTimeout: 10000, retry: { retries: 2, initialRetryTime: 200 } });

  // produce: explicit partitions (record i -> partition i % partitions), two send() calls
  const producer = kafka.producer({ allowAutoTopicCreation: false, idempotent: false });
  await producer.connect();
  let produced = 0;
  let errors = 0;
  const half = Math.ceil(records.length / 2);
  for (const [start, end] of [[0, half], [half, records.length]]) {
    if (start >= end) continue;
    const messages = records.slice(start, end).map((r, j) => ({
      key: r.key, value: r.value, partition: (start + j) % o.partitions,
      headers: r.headers ? Object.fromEntries(r.headers) : undefined,
    }));
    try {
      const meta = await producer.send({ topic: o.topic, compression: CODECS[o.codec], acks: -1, messages });
      const bad = meta.filter((m) => m.errorCode).length;
      if (bad) throw new Error(`${bad} partition(s) answered an error`);
      produced += messages.length;
    } catch (e) {
      errors += messages.length;
      say('produce error:', e.message);
    }
  }
  await producer.disconnect();

  // consume back with a group, from the beginning, until every delivered record is seen
  const consumer = kafka.consumer({ groupId: o.group || `kws-kafkajs-${o.topic}`, sessionTimeout: 6000,
    rebalanceTimeout: 6000, heartbeatInterval: 1000, maxWaitTimeInMs: 200, allowAutoTopicCreation: false });
  let consumed = 0;
  await consumer.connect();
  await consumer.subscribe({ topics: [o.topic], fromBeginning: true });
  await consumer.run({ eachMessage: async () => { consumed += 1; } });
  const until = Date.now() + o.fetchSecs * 1000;
  while (consumed < produced && Date.now() < until) await new Promise((r) => setTimeout(r, 100));
  await consumer.disconnect();

  say(`delivered ${produced}, errors ${errors}, consumed ${consumed}`);
  console.log('RESULT ' + JSON.stringify({ consumed: { [o.topic]: consumed }, produce_errors: errors,
    produced: { [o.topic]: produced }, sent: records.length, topic: o.topic }));
  return produced === records.length && consumed >= produced ? 0 : 1;
}

main().then((code) => process.exit(code), (e) => {
  console.error('[kafkajs] error:', e && e.stack ? e.stack : e);
  process.exit(2);
});
