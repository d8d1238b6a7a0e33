//! The exchange tables' columns: their Arrow schemas (`analyzer/tables.py` defines the
//! tables; the Python side checks every batch against that definition), and the builders
//! that take an exchange's row and its partitions' rows ([`Row`]) and make record batches of
//! them ([`Tables::take`]).

use std::sync::Arc;

use arrow_array::builder::{
    BooleanBuilder, Float64Builder, Int32Builder, Int64Builder, ListBuilder, StringBuilder,
};
use arrow_array::{ArrayRef, ListArray, RecordBatch, StringArray, StructArray};
use arrow_buffer::{NullBuffer, OffsetBuffer};
use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef};

use crate::frame::Frame;
use crate::records::BatchHead;

use super::lag::Sample;

/// One topic-partition of a Produce or Fetch exchange (`PARTITION` in `analyzer/tables.py`,
/// and the Fetch offsets the `partitions` table adds).
#[derive(Debug, Clone, PartialEq)]
pub struct Part {
    pub topic: Option<String>,
    pub partition: Option<i32>,
    pub records: i64,
    pub bytes: i64,
    pub codec: Option<&'static str>,
    pub crc_ok: bool,
    pub error: Option<String>,
    pub fetch_offset: Option<i64>,
    pub high_watermark: Option<i64>,
    pub last_stable_offset: Option<i64>,
}

/// One record batch (v2) of a Produce request's partition (`analyzer.tables.BATCHES`):
/// `part` is the index of its partition in the exchange's [`Part`]s.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    pub part: usize,
    pub head: BatchHead,
}

/// A Fetch's session and the partitions it asks for (`FETCH` in `analyzer/tables.py`: the
/// `fetch_session` column of `exchanges`), its topics named.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fetch {
    pub isolation_level: Option<i32>,
    pub session_id: Option<i32>,
    pub session_epoch: Option<i32>,
    pub error_code: Option<i32>,
    pub response_session_id: Option<i32>,
    /// (topic, partition, fetch_offset)
    pub asked: Vec<(Option<String>, Option<i32>, Option<i64>)>,
    /// (topic, partition)
    pub forgotten: Vec<(Option<String>, Option<i32>)>,
}

fn field(name: &str, ty: DataType, nullable: bool) -> Field {
    Field::new(name, ty, nullable)
}

/// The struct of a partition, as `exchanges.partitions` holds it.
fn part_fields() -> Fields {
    Fields::from(vec![
        field("topic", DataType::Utf8, true),
        field("partition", DataType::Int32, true),
        field("records", DataType::Int64, false),
        field("bytes", DataType::Int64, false),
        field("codec", DataType::Utf8, true),
        field("crc_ok", DataType::Boolean, true),
        field("error", DataType::Utf8, true),
    ])
}

/// The struct of a topic-partition an exchange names (`exchanges.topic_partitions`).
fn topic_partition_fields() -> Fields {
    Fields::from(vec![
        field("topic", DataType::Utf8, true),
        field("partition", DataType::Int32, true),
    ])
}

/// The struct of a partition a Fetch asks for (`FETCH_ASK`).
fn fetch_ask_fields() -> Fields {
    Fields::from(vec![
        field("topic", DataType::Utf8, true),
        field("partition", DataType::Int32, true),
        field("fetch_offset", DataType::Int64, true),
    ])
}

/// The struct of a Fetch's session (`FETCH`).
fn fetch_fields() -> Fields {
    use DataType::*;
    Fields::from(vec![
        field("isolation_level", Int32, true),
        field("session_id", Int32, true),
        field("session_epoch", Int32, true),
        field("error_code", Int32, true),
        field("response_session_id", Int32, true),
        field("asked", list_of(Struct(fetch_ask_fields())), false),
        field(
            "forgotten",
            list_of(Struct(topic_partition_fields())),
            false,
        ),
    ])
}

/// A list array of `values` (a struct of `fields`) cut at `offsets`.
fn list_array(fields: Fields, values: Vec<ArrayRef>, offsets: Vec<i32>) -> ListArray {
    let DataType::List(item) = list_of(DataType::Struct(fields.clone())) else {
        unreachable!("a list type")
    };
    let values = StructArray::new(fields, values, None);
    ListArray::new(
        item,
        OffsetBuffer::new(offsets.into()),
        Arc::new(values),
        None,
    )
}

/// The `fetch_session` column's builders: one struct per exchange, null but for a Fetch.
struct FetchCols {
    valid: Vec<bool>,
    ints: [Int32Builder; 5],
    ask_topic: StringBuilder,
    ask_partition: Int32Builder,
    ask_offset: Int64Builder,
    ask_offsets: Vec<i32>,
    gone_topic: StringBuilder,
    gone_partition: Int32Builder,
    gone_offsets: Vec<i32>,
}

impl Default for FetchCols {
    fn default() -> Self {
        FetchCols {
            valid: Vec::new(),
            ints: Default::default(),
            ask_topic: StringBuilder::new(),
            ask_partition: Int32Builder::new(),
            ask_offset: Int64Builder::new(),
            ask_offsets: vec![0],
            gone_topic: StringBuilder::new(),
            gone_partition: Int32Builder::new(),
            gone_offsets: vec![0],
        }
    }
}

impl FetchCols {
    fn push(&mut self, f: Option<&Fetch>) {
        self.valid.push(f.is_some());
        let d = Fetch::default();
        let f = f.unwrap_or(&d);
        let values = [
            f.isolation_level,
            f.session_id,
            f.session_epoch,
            f.error_code,
            f.response_session_id,
        ];
        for (b, v) in self.ints.iter_mut().zip(values) {
            b.append_option(v);
        }
        for (topic, partition, offset) in &f.asked {
            self.ask_topic.append_option(topic.as_deref());
            self.ask_partition.append_option(*partition);
            self.ask_offset.append_option(*offset);
        }
        let end = self.ask_offsets.last().copied().unwrap_or(0) + f.asked.len() as i32;
        self.ask_offsets.push(end);
        for (topic, partition) in &f.forgotten {
            self.gone_topic.append_option(topic.as_deref());
            self.gone_partition.append_option(*partition);
        }
        let end = self.gone_offsets.last().copied().unwrap_or(0) + f.forgotten.len() as i32;
        self.gone_offsets.push(end);
    }

    fn finish(&mut self) -> ArrayRef {
        let valid = std::mem::take(&mut self.valid);
        let asked = list_array(
            fetch_ask_fields(),
            vec![
                Arc::new(self.ask_topic.finish()),
                Arc::new(self.ask_partition.finish()),
                Arc::new(self.ask_offset.finish()),
            ],
            std::mem::replace(&mut self.ask_offsets, vec![0]),
        );
        let forgotten = list_array(
            topic_partition_fields(),
            vec![
                Arc::new(self.gone_topic.finish()),
                Arc::new(self.gone_partition.finish()),
            ],
            std::mem::replace(&mut self.gone_offsets, vec![0]),
        );
        let mut children: Vec<ArrayRef> = self
            .ints
            .iter_mut()
            .map(|b| Arc::new(b.finish()) as ArrayRef)
            .collect();
        children.push(Arc::new(asked));
        children.push(Arc::new(forgotten));
        Arc::new(StructArray::new(
            fetch_fields(),
            children,
            Some(NullBuffer::from(valid)),
        ))
    }
}

fn list_of(ty: DataType) -> DataType {
    DataType::List(Arc::new(Field::new("item", ty, true)))
}

/// What names an exchange in both tables, after its connection: api_name .. request_time
/// (the columns of [`Key`] but `conn`).
fn key_fields() -> [Field; 7] {
    use DataType::*;
    [
        field("api_name", Utf8, false),
        field("api_version", Int32, true),
        field("correlation_id", Int32, true),
        field("client_id", Utf8, true),
        field("request_frame", Int64, true),
        field("response_frame", Int64, true),
        field("request_time", Float64, true),
    ]
}

/// The `exchanges` table's schema (`analyzer.tables.EXCHANGES`).
pub fn exchanges_schema() -> SchemaRef {
    use DataType::*;
    let mut fields = vec![
        field("capture", Utf8, false),
        field("conn", Int64, false),
        field("client", Utf8, false),
        field("broker", Utf8, false),
        field("protocol", Utf8, false),
        field("api_key", Int32, true),
    ];
    fields.extend(key_fields());
    fields.extend([
        field("response_time", Float64, true),
        field("response_first_time", Float64, true),
        field("latency_ms", Float64, true),
        field("ttfb_ms", Float64, true),
        field("wait", Utf8, true),
        field("throttle_ms", Int32, false),
        field("group_id", Utf8, true),
        field("request_bytes", Int64, true),
        field("response_bytes", Int64, true),
        field("status", Utf8, false),
        field("error_codes", list_of(Utf8), false),
        field("partitions", list_of(Struct(part_fields())), false),
        field(
            "topic_partitions",
            list_of(Struct(topic_partition_fields())),
            false,
        ),
        field("notes", list_of(Utf8), false),
        field("fetch_session", Struct(fetch_fields()), true),
    ]);
    Arc::new(Schema::new(fields))
}

/// The `partitions` table's schema (`analyzer.tables.PARTITIONS`).
pub fn partitions_schema() -> SchemaRef {
    use DataType::*;
    let mut fields = vec![field("capture", Utf8, false), field("conn", Int64, false)];
    fields.extend(key_fields());
    fields.push(field("status", Utf8, false));
    fields.extend(part_fields().iter().map(|f| f.as_ref().clone()));
    fields.extend([
        field("fetch_offset", Int64, true),
        field("high_watermark", Int64, true),
        field("last_stable_offset", Int64, true),
    ]);
    Arc::new(Schema::new(fields))
}

/// The `batches` table's schema (`analyzer.tables.BATCHES`).
pub fn batches_schema() -> SchemaRef {
    use DataType::*;
    Arc::new(Schema::new(vec![
        field("capture", Utf8, false),
        field("conn", Int64, false),
        field("client_id", Utf8, true),
        field("api_version", Int32, true),
        field("correlation_id", Int32, true),
        field("request_frame", Int64, true),
        field("request_time", Float64, true),
        field("acks", Int32, true),
        field("transactional_id", Utf8, true),
        field("topic", Utf8, true),
        field("partition", Int32, true),
        field("producer_id", Int64, false),
        field("producer_epoch", Int32, false),
        field("base_sequence", Int32, false),
        field("records", Int64, false),
        field("bytes", Int64, false),
        field("bytes_before", Int64, true),
        field("codec", Utf8, false),
        field("base_timestamp", Int64, false),
        field("max_timestamp", Int64, false),
        field("transactional", Boolean, false),
        field("control", Boolean, false),
    ]))
}

/// The `lag` table's schema (`analyzer.tables.LAG`).
pub fn lag_schema() -> SchemaRef {
    use DataType::*;
    Arc::new(Schema::new(vec![
        field("capture", Utf8, false),
        field("conn", Int64, false),
        field("client_id", Utf8, true),
        field("request_frame", Int64, true),
        field("response_time", Float64, false),
        field("isolation_level", Int32, true),
        field("topic", Utf8, false),
        field("partition", Int32, false),
        field("position", Int64, false),
        field("high_watermark", Int64, false),
        field("last_stable_offset", Int64, true),
        field("lag", Int64, false),
        field("stable_lag", Int64, true),
    ]))
}

/// The `lag` table's columns but its capture.
#[derive(Default)]
struct LagCols {
    rows: usize,
    conn: Int64Builder,
    client_id: StringBuilder,
    request_frame: Int64Builder,
    response_time: Float64Builder,
    isolation_level: Int32Builder,
    topic: StringBuilder,
    partition: Int32Builder,
    position: Int64Builder,
    high_watermark: Int64Builder,
    last_stable_offset: Int64Builder,
    lag: Int64Builder,
    stable_lag: Int64Builder,
}

impl LagCols {
    fn push(&mut self, r: &Row<'_>, s: &Sample) {
        self.rows += 1;
        self.conn.append_value(r.conn as i64);
        self.client_id.append_option(r.client_id);
        self.request_frame
            .append_option(r.request.map(|f| f.last_index as i64));
        self.response_time
            .append_value(r.response.map_or(0.0, |f| f.last_ts));
        self.isolation_level
            .append_option(r.fetch.and_then(|f| f.isolation_level));
        self.topic.append_value(&s.topic);
        self.partition.append_value(s.partition);
        self.position.append_value(s.position);
        self.high_watermark.append_value(s.high_watermark);
        self.last_stable_offset.append_option(s.last_stable_offset);
        self.lag.append_value(s.lag);
        self.stable_lag.append_option(s.stable_lag);
    }

    fn finish(&mut self, capture: ArrayRef) -> RecordBatch {
        self.rows = 0;
        let columns: Vec<ArrayRef> = vec![
            capture,
            Arc::new(self.conn.finish()),
            Arc::new(self.client_id.finish()),
            Arc::new(self.request_frame.finish()),
            Arc::new(self.response_time.finish()),
            Arc::new(self.isolation_level.finish()),
            Arc::new(self.topic.finish()),
            Arc::new(self.partition.finish()),
            Arc::new(self.position.finish()),
            Arc::new(self.high_watermark.finish()),
            Arc::new(self.last_stable_offset.finish()),
            Arc::new(self.lag.finish()),
            Arc::new(self.stable_lag.finish()),
        ];
        RecordBatch::try_new(lag_schema(), columns).expect("the lag columns match their schema")
    }
}

/// The `batches` table's columns but its capture.
#[derive(Default)]
struct BatchCols {
    rows: usize,
    conn: Int64Builder,
    client_id: StringBuilder,
    api_version: Int32Builder,
    correlation_id: Int32Builder,
    request_frame: Int64Builder,
    request_time: Float64Builder,
    acks: Int32Builder,
    transactional_id: StringBuilder,
    topic: StringBuilder,
    partition: Int32Builder,
    producer_id: Int64Builder,
    producer_epoch: Int32Builder,
    base_sequence: Int32Builder,
    records: Int64Builder,
    bytes: Int64Builder,
    bytes_before: Int64Builder,
    codec: StringBuilder,
    base_timestamp: Int64Builder,
    max_timestamp: Int64Builder,
    transactional: BooleanBuilder,
    control: BooleanBuilder,
}

impl BatchCols {
    fn push(&mut self, r: &Row<'_>, b: &Batch) {
        let s = &b.head;
        let part = r.parts.get(b.part);
        self.rows += 1;
        self.conn.append_value(r.conn as i64);
        self.client_id.append_option(r.client_id);
        self.api_version.append_option(r.api_version);
        self.correlation_id.append_option(r.correlation_id);
        self.request_frame
            .append_option(r.request.map(|f| f.last_index as i64));
        self.request_time
            .append_option(r.request.map(|f| f.last_ts));
        self.acks.append_option(r.acks);
        self.transactional_id.append_option(r.transactional_id);
        self.topic
            .append_option(part.and_then(|p| p.topic.as_deref()));
        self.partition.append_option(part.and_then(|p| p.partition));
        self.producer_id.append_value(s.producer_id);
        self.producer_epoch
            .append_value(i32::from(s.producer_epoch));
        self.base_sequence.append_value(s.base_sequence);
        self.records.append_value(i64::from(s.record_count));
        self.bytes.append_value(s.bytes as i64);
        self.bytes_before
            .append_option(s.bytes_before.map(|u| u as i64));
        self.codec.append_value(s.codec);
        self.base_timestamp.append_value(s.base_timestamp);
        self.max_timestamp.append_value(s.max_timestamp);
        self.transactional.append_value(s.transactional);
        self.control.append_value(s.control);
    }

    fn finish(&mut self, capture: ArrayRef) -> RecordBatch {
        self.rows = 0;
        let columns: Vec<ArrayRef> = vec![
            capture,
            Arc::new(self.conn.finish()),
            Arc::new(self.client_id.finish()),
            Arc::new(self.api_version.finish()),
            Arc::new(self.correlation_id.finish()),
            Arc::new(self.request_frame.finish()),
            Arc::new(self.request_time.finish()),
            Arc::new(self.acks.finish()),
            Arc::new(self.transactional_id.finish()),
            Arc::new(self.topic.finish()),
            Arc::new(self.partition.finish()),
            Arc::new(self.producer_id.finish()),
            Arc::new(self.producer_epoch.finish()),
            Arc::new(self.base_sequence.finish()),
            Arc::new(self.records.finish()),
            Arc::new(self.bytes.finish()),
            Arc::new(self.bytes_before.finish()),
            Arc::new(self.codec.finish()),
            Arc::new(self.base_timestamp.finish()),
            Arc::new(self.max_timestamp.finish()),
            Arc::new(self.transactional.finish()),
            Arc::new(self.control.finish()),
        ];
        RecordBatch::try_new(batches_schema(), columns)
            .expect("the batches columns match their schema")
    }
}

/// The columns of partitions (a struct's children, or the `partitions` table's columns).
#[derive(Default)]
struct PartCols {
    topic: StringBuilder,
    partition: Int32Builder,
    records: Int64Builder,
    bytes: Int64Builder,
    codec: StringBuilder,
    crc_ok: BooleanBuilder,
    error: StringBuilder,
}

impl PartCols {
    fn push(&mut self, p: &Part) {
        self.topic.append_option(p.topic.as_deref());
        self.partition.append_option(p.partition);
        self.records.append_value(p.records);
        self.bytes.append_value(p.bytes);
        self.codec.append_option(p.codec);
        self.crc_ok.append_value(p.crc_ok);
        self.error.append_option(p.error.as_deref());
    }

    fn finish(&mut self) -> Vec<ArrayRef> {
        vec![
            Arc::new(self.topic.finish()),
            Arc::new(self.partition.finish()),
            Arc::new(self.records.finish()),
            Arc::new(self.bytes.finish()),
            Arc::new(self.codec.finish()),
            Arc::new(self.crc_ok.finish()),
            Arc::new(self.error.finish()),
        ]
    }
}

/// The columns an exchange's row and its partitions' rows share.
#[derive(Default)]
struct Key {
    conn: Int64Builder,
    api_name: StringBuilder,
    api_version: Int32Builder,
    correlation_id: Int32Builder,
    client_id: StringBuilder,
    request_frame: Int64Builder,
    response_frame: Int64Builder,
    request_time: Float64Builder,
}

impl Key {
    fn push(&mut self, r: &Row<'_>) {
        self.conn.append_value(r.conn as i64);
        self.api_name.append_value(r.api_name);
        self.api_version.append_option(r.api_version);
        self.correlation_id.append_option(r.correlation_id);
        self.client_id.append_option(r.client_id);
        self.request_frame
            .append_option(r.request.map(|f| f.last_index as i64));
        self.response_frame
            .append_option(r.response.map(|f| f.last_index as i64));
        self.request_time
            .append_option(r.request.map(|f| f.last_ts));
    }

    /// conn, api_name, api_version, correlation_id, client_id, request_frame,
    /// response_frame, request_time.
    fn finish(&mut self) -> [ArrayRef; 8] {
        [
            Arc::new(self.conn.finish()),
            Arc::new(self.api_name.finish()),
            Arc::new(self.api_version.finish()),
            Arc::new(self.correlation_id.finish()),
            Arc::new(self.client_id.finish()),
            Arc::new(self.request_frame.finish()),
            Arc::new(self.response_frame.finish()),
            Arc::new(self.request_time.finish()),
        ]
    }
}

/// One exchange as its rows read it.
pub struct Row<'a> {
    pub conn: u64,
    pub client: &'a str,
    pub broker: &'a str,
    pub protocol: &'a str,
    pub api_key: Option<i32>,
    pub api_name: &'a str,
    pub api_version: Option<i32>,
    pub correlation_id: Option<i32>,
    pub client_id: Option<&'a str>,
    pub request: Option<&'a Frame>,
    pub response: Option<&'a Frame>,
    pub status: &'a str,
    pub wait: Option<&'static str>,
    pub throttle_ms: i32,
    pub group_id: Option<&'a str>,
    pub error_codes: &'a [String],
    pub parts: &'a [Part],
    /// the topic-partitions it names: its partitions', else those its request lists
    pub topics: &'a [(Option<String>, Option<i32>)],
    pub notes: &'a [String],
    /// a Fetch's session and asks, and the consumer-lag figures its answer gives
    pub fetch: Option<&'a Fetch>,
    pub lag: &'a [Sample],
    /// a Produce request's acks and transactional id, and its record batches
    pub acks: Option<i32>,
    pub transactional_id: Option<&'a str>,
    pub batches: &'a [Batch],
}

/// `round(v, 3)` as Python rounds (the nearest of the decimals with three digits, read
/// back): `exchange_to_json`'s latency figures.
fn round3(v: f64) -> f64 {
    format!("{v:.3}").parse().unwrap_or(v)
}

/// The rows of both tables, appended one exchange at a time, taken as record batches.
pub struct Tables {
    capture: String,
    rows: usize,
    part_rows: usize,
    // exchanges
    key: Key,
    client: StringBuilder,
    broker: StringBuilder,
    protocol: StringBuilder,
    api_key: Int32Builder,
    response_time: Float64Builder,
    response_first_time: Float64Builder,
    latency_ms: Float64Builder,
    ttfb_ms: Float64Builder,
    wait: StringBuilder,
    throttle_ms: Int32Builder,
    group_id: StringBuilder,
    request_bytes: Int64Builder,
    response_bytes: Int64Builder,
    status: StringBuilder,
    error_codes: ListBuilder<StringBuilder>,
    parts: PartCols,
    part_offsets: Vec<i32>,
    tp_topic: StringBuilder,
    tp_partition: Int32Builder,
    tp_offsets: Vec<i32>,
    notes: ListBuilder<StringBuilder>,
    fetch: FetchCols,
    // partitions
    p_key: Key,
    p_status: StringBuilder,
    p_parts: PartCols,
    fetch_offset: Int64Builder,
    high_watermark: Int64Builder,
    last_stable_offset: Int64Builder,
    batches: BatchCols,
    lag: LagCols,
}

impl Tables {
    /// Empty tables of the capture named `capture` (its `capture` column).
    pub fn new(capture: &str) -> Self {
        Tables {
            capture: capture.to_string(),
            rows: 0,
            part_rows: 0,
            key: Key::default(),
            client: StringBuilder::new(),
            broker: StringBuilder::new(),
            protocol: StringBuilder::new(),
            api_key: Int32Builder::new(),
            response_time: Float64Builder::new(),
            response_first_time: Float64Builder::new(),
            latency_ms: Float64Builder::new(),
            ttfb_ms: Float64Builder::new(),
            wait: StringBuilder::new(),
            throttle_ms: Int32Builder::new(),
            group_id: StringBuilder::new(),
            request_bytes: Int64Builder::new(),
            response_bytes: Int64Builder::new(),
            status: StringBuilder::new(),
            error_codes: ListBuilder::new(StringBuilder::new()),
            parts: PartCols::default(),
            part_offsets: vec![0],
            tp_topic: StringBuilder::new(),
            tp_partition: Int32Builder::new(),
            tp_offsets: vec![0],
            notes: ListBuilder::new(StringBuilder::new()),
            fetch: FetchCols::default(),
            p_key: Key::default(),
            p_status: StringBuilder::new(),
            p_parts: PartCols::default(),
            fetch_offset: Int64Builder::new(),
            high_watermark: Int64Builder::new(),
            last_stable_offset: Int64Builder::new(),
            batches: BatchCols::default(),
            lag: LagCols::default(),
        }
    }

    /// Rows of `exchanges` held (not taken yet).
    pub fn len(&self) -> usize {
        self.rows
    }

    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// Append an exchange's row and its partitions' rows.
    pub fn push(&mut self, r: &Row<'_>) {
        self.rows += 1;
        self.key.push(r);
        self.client.append_value(r.client);
        self.broker.append_value(r.broker);
        self.protocol.append_value(r.protocol);
        self.api_key.append_option(r.api_key);
        self.response_time
            .append_option(r.response.map(|f| f.last_ts));
        self.response_first_time
            .append_option(r.response.map(|f| f.first_ts));
        let both = r.request.zip(r.response);
        self.latency_ms
            .append_option(both.map(|(q, s)| round3((s.last_ts - q.last_ts) * 1000.0)));
        self.ttfb_ms
            .append_option(both.map(|(q, s)| round3((s.first_ts - q.last_ts) * 1000.0)));
        self.wait.append_option(r.wait);
        self.throttle_ms.append_value(r.throttle_ms);
        self.group_id.append_option(r.group_id);
        self.request_bytes
            .append_option(r.request.map(|f| i64::from(f.size) + 4));
        self.response_bytes
            .append_option(r.response.map(|f| i64::from(f.size) + 4));
        self.status.append_value(r.status);
        for e in r.error_codes {
            self.error_codes.values().append_value(e);
        }
        self.error_codes.append(true);
        for n in r.notes {
            self.notes.values().append_value(n);
        }
        self.notes.append(true);
        self.fetch.push(r.fetch);
        for p in r.parts {
            self.parts.push(p);
            self.part_rows += 1;
            self.p_key.push(r);
            self.p_status.append_value(r.status);
            self.p_parts.push(p);
            self.fetch_offset.append_option(p.fetch_offset);
            self.high_watermark.append_option(p.high_watermark);
            self.last_stable_offset.append_option(p.last_stable_offset);
        }
        let end = self.part_offsets.last().copied().unwrap_or(0) + r.parts.len() as i32;
        self.part_offsets.push(end);
        for (topic, partition) in r.topics {
            self.tp_topic.append_option(topic.as_deref());
            self.tp_partition.append_option(*partition);
        }
        let end = self.tp_offsets.last().copied().unwrap_or(0) + r.topics.len() as i32;
        self.tp_offsets.push(end);
        for b in r.batches {
            self.batches.push(r, b);
        }
        for x in r.lag {
            self.lag.push(r, x);
        }
    }

    fn captures(&self, n: usize) -> ArrayRef {
        Arc::new(StringArray::from_iter_values(std::iter::repeat_n(
            self.capture.as_str(),
            n,
        )))
    }

    /// The rows held as record batches of `exchanges`, `partitions`, `batches` and `lag`
    /// (`TABLES`' order), the builders emptied.
    pub fn take(&mut self) -> [RecordBatch; 4] {
        let (n, np, nb, nl) = (self.rows, self.part_rows, self.batches.rows, self.lag.rows);
        self.rows = 0;
        self.part_rows = 0;
        let parts = StructArray::new(part_fields(), self.parts.finish(), None);
        let offsets = std::mem::replace(&mut self.part_offsets, vec![0]);
        let DataType::List(item) = list_of(DataType::Struct(part_fields())) else {
            unreachable!("a list type")
        };
        let partitions = ListArray::new(
            item,
            OffsetBuffer::new(offsets.into()),
            Arc::new(parts),
            None,
        );
        let tps = StructArray::new(
            topic_partition_fields(),
            vec![
                Arc::new(self.tp_topic.finish()) as ArrayRef,
                Arc::new(self.tp_partition.finish()),
            ],
            None,
        );
        let offsets = std::mem::replace(&mut self.tp_offsets, vec![0]);
        let DataType::List(item) = list_of(DataType::Struct(topic_partition_fields())) else {
            unreachable!("a list type")
        };
        let topic_partitions =
            ListArray::new(item, OffsetBuffer::new(offsets.into()), Arc::new(tps), None);
        let [conn, api_name, api_version, correlation_id, client_id, request_frame, response_frame, request_time] =
            self.key.finish();
        let columns: Vec<ArrayRef> = vec![
            self.captures(n),
            conn,
            Arc::new(self.client.finish()),
            Arc::new(self.broker.finish()),
            Arc::new(self.protocol.finish()),
            Arc::new(self.api_key.finish()),
            api_name,
            api_version,
            correlation_id,
            client_id,
            request_frame,
            response_frame,
            request_time,
            Arc::new(self.response_time.finish()),
            Arc::new(self.response_first_time.finish()),
            Arc::new(self.latency_ms.finish()),
            Arc::new(self.ttfb_ms.finish()),
            Arc::new(self.wait.finish()),
            Arc::new(self.throttle_ms.finish()),
            Arc::new(self.group_id.finish()),
            Arc::new(self.request_bytes.finish()),
            Arc::new(self.response_bytes.finish()),
            Arc::new(self.status.finish()),
            Arc::new(self.error_codes.finish()),
            Arc::new(partitions),
            Arc::new(topic_partitions),
            Arc::new(self.notes.finish()),
            self.fetch.finish(),
        ];
        let exchanges = RecordBatch::try_new(exchanges_schema(), columns)
            .expect("the exchanges columns match their schema");
        let mut columns: Vec<ArrayRef> = vec![self.captures(np)];
        columns.extend(self.p_key.finish());
        columns.push(Arc::new(self.p_status.finish()));
        columns.extend(self.p_parts.finish());
        columns.extend([
            Arc::new(self.fetch_offset.finish()) as ArrayRef,
            Arc::new(self.high_watermark.finish()),
            Arc::new(self.last_stable_offset.finish()),
        ]);
        let partitions = RecordBatch::try_new(partitions_schema(), columns)
            .expect("the partitions columns match their schema");
        let batches = self.batches.finish(self.captures(nb));
        let lag = self.lag.finish(self.captures(nl));
        [exchanges, partitions, batches, lag]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(dir: u8, size: u32, index: u64, first: f64, last: f64) -> Frame {
        Frame {
            dir,
            data: Vec::new(),
            size,
            first_index: index,
            last_index: index,
            first_ts: first,
            last_ts: last,
            offset: 0,
            truncated: false,
            seen: None,
        }
    }

    #[test]
    fn rows_become_batches_of_the_schemas() {
        let mut t = Tables::new("a.pcap");
        let (q, s) = (frame(0, 10, 1, 1.0, 1.0), frame(1, 20, 2, 1.001, 1.0025));
        let parts = vec![Part {
            topic: Some("t".into()),
            partition: Some(3),
            records: 5,
            bytes: 70,
            codec: Some("none"),
            crc_ok: true,
            error: None,
            fetch_offset: Some(9),
            high_watermark: Some(12),
            last_stable_offset: None,
        }];
        let row = |parts: &'static [Part]| Row {
            conn: 7,
            client: "127.0.0.1:5000",
            broker: "127.0.0.1:9092",
            protocol: "kafka",
            api_key: Some(1),
            api_name: "Fetch",
            api_version: Some(12),
            correlation_id: Some(4),
            client_id: None,
            request: Some(&q),
            response: Some(&s),
            status: "ok",
            wait: None,
            throttle_ms: 0,
            group_id: None,
            error_codes: &[],
            parts,
            topics: &[],
            notes: &[],
            fetch: None,
            lag: &[],
            acks: None,
            transactional_id: None,
            batches: &[],
        };
        let leaked: &'static [Part] = Box::leak(parts.into_boxed_slice());
        t.push(&row(leaked));
        t.push(&row(&[]));
        assert_eq!(t.len(), 2);
        let [ex, parts, batches, lag] = t.take();
        assert_eq!(ex.schema(), exchanges_schema());
        assert_eq!(parts.schema(), partitions_schema());
        assert_eq!(batches.schema(), batches_schema());
        assert_eq!(lag.schema(), lag_schema());
        assert_eq!((ex.num_rows(), parts.num_rows()), (2, 1));
        assert!(t.is_empty());
        let lat = ex
            .column_by_name("latency_ms")
            .unwrap()
            .as_any()
            .downcast_ref::<arrow_array::Float64Array>()
            .unwrap()
            .value(0);
        assert_eq!(lat, 2.5);
        let [ex2, ..] = t.take();
        assert_eq!(ex2.num_rows(), 0);
    }

    #[test]
    fn latency_rounds_as_python() {
        // Python: round(0.0015, 3) == 0.002 (0.0015 is above the tie in binary), round(2.675, 2)...
        assert_eq!(round3(0.0015), 0.002);
        assert_eq!(round3(1.0625), 1.062);
        assert_eq!(round3(-0.0004), -0.0);
    }
}
