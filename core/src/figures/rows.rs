//! The partitions of Fetch requests and answers and of Produce requests read off their lean
//! trees into rows, in wire order, as `dissectors.summary` reads them off the full
//! decoder's: the binding (`py/figures.rs`) hands them over as the body's `extra["fetch"]`
//! or `extra["produce"]`, and `table/` makes the `partitions` table's rows of them. What
//! they read is kept by the walk (`keep.rs`: the Fetch figures are anchors, the topic names
//! and ids and partition indexes companions, records fields kept wherever they are).

use super::keep::{PARTITION_ARRAYS, PARTITION_INDEXES, TOPIC_ARRAYS, TOPIC_NAMES};
use super::tree::{Extra, Node, Tree, Value};
use super::Figures;
use crate::records::BatchHead;

/// A records field's figures: records, bytes, codec, CRC verdict (its summary's, else its
/// value and length), as `dissectors.summary.records_figures` reads them.
fn records_figures(n: &Node) -> (i64, i64, Option<&'static str>, bool) {
    match &n.extra {
        Extra::Records {
            records,
            bytes,
            codec,
            crc_ok,
            ..
        } => (*records, *bytes as i64, Some(*codec), *crc_ok),
        _ => (n.int().unwrap_or(0), n.length as i64, None, true),
    }
}

/// One partition of a Produce request as its body's `extra["produce"]` holds it (see
/// [`Figures::produce_request_rows`]): its digest's figures, where its records field is
/// (offset and length in the message), and its v2 batches' heads (the `batches` table's rows).
#[derive(Debug, Clone, PartialEq)]
pub struct ProduceRow {
    pub topic: Option<String>,
    pub topic_id: Option<[u8; 16]>,
    pub partition: Option<i64>,
    pub records: i64,
    pub bytes: i64,
    pub codec: Option<&'static str>,
    pub crc_ok: bool,
    pub at: Option<(usize, usize)>,
    pub batches: Vec<BatchHead>,
}

/// One partition of a Fetch request as its body's `extra["fetch"]` holds it (see
/// [`Figures::fetch_request_rows`]): what the consumer lag reads of it.
#[derive(Debug, Clone, PartialEq)]
pub struct FetchAsk {
    pub topic: Option<String>,
    pub topic_id: Option<[u8; 16]>,
    pub partition: Option<i64>,
    pub fetch_offset: Option<i64>,
}

/// One partition of a Fetch answer as `extra["fetch"]` holds it (see [`Figures::fetch_rows`]):
/// what the partition digests and the consumer lag read of it.
#[derive(Debug, Clone, PartialEq)]
pub struct FetchRow {
    pub topic: Option<String>,
    pub topic_id: Option<[u8; 16]>,
    pub partition: Option<i64>,
    /// 0 when the answer has none
    pub error_code: i64,
    pub high_watermark: Option<i64>,
    pub last_stable_offset: Option<i64>,
    /// the records field's figures: records, bytes, codec, CRC verdict (0, 0, None, true
    /// without one)
    pub records: i64,
    pub bytes: i64,
    pub codec: Option<&'static str>,
    pub crc_ok: bool,
}

impl Figures {
    /// The partition elements of a body's topics array `array` (a Fetch request's `topics`,
    /// an answer's `responses`, a Produce request's `topic_data`), whose partitions array is
    /// `parts_name`, each with its topic's name (`name`, else `topic`) and id: the ids of
    /// the body and of the array, and (topic, topic_id, partition element) in wire order.
    /// None for a tree without a body.
    #[allow(clippy::type_complexity)]
    pub fn topic_partitions(
        &self,
        t: &Tree,
        array: &str,
        parts_name: &str,
    ) -> Option<(
        usize,
        Option<usize>,
        Vec<(Option<String>, Option<[u8; 16]>, usize)>,
    )> {
        let kids = |id: usize| t.kids(id);
        let child = |id: usize, name: &str| self.child(t, id, name);
        let body = child(t.root, "body")?;
        let topics = child(body, array);
        let mut out = Vec::new();
        for &topic in topics.map(kids).unwrap_or(&[]) {
            let (mut name, mut other, mut id, mut parts) = (None, None, None, None);
            for &c in kids(topic) {
                match (self.name_of(t, c), &t.nodes[c].value) {
                    ("name", Value::Str(s)) => name = Some(s.clone()),
                    ("topic", Value::Str(s)) => other = Some(s.clone()),
                    ("topic_id", Value::Uuid(u)) => id = Some(*u),
                    (n, _) if n == parts_name => parts = Some(c),
                    _ => {}
                }
            }
            let name = name.or(other);
            for &p in parts.map(kids).unwrap_or(&[]) {
                out.push((name.clone(), id, p));
            }
        }
        Some((body, topics, out))
    }

    /// A Fetch request's partitions, in wire order, read off its tree as
    /// `dissectors.summary.fetch_request_rows` reads them off the full decoder's (its body's
    /// `extra["fetch"]`), with the ids of its body and of the `topics` array they come
    /// from. None for a tree without a body.
    pub fn fetch_request_rows(&self, t: &Tree) -> Option<(usize, Option<usize>, Vec<FetchAsk>)> {
        let (body, topics, parts) = self.topic_partitions(t, "topics", "partitions")?;
        let mut rows = Vec::new();
        for (topic, topic_id, p) in parts {
            let mut row = FetchAsk {
                topic,
                topic_id,
                partition: None,
                fetch_offset: None,
            };
            for &c in t.kids(p) {
                match self.name_of(t, c) {
                    "partition" | "partition_index" => row.partition = t.nodes[c].int(),
                    "fetch_offset" => row.fetch_offset = t.nodes[c].int(),
                    _ => {}
                }
            }
            rows.push(row);
        }
        Some((body, topics, rows))
    }

    /// A Produce request's partitions, in wire order, read off its tree as
    /// `dissectors.summary.produce_request_rows` reads them off the full decoder's (its
    /// body's `extra["produce"]`), with the ids of its body and of the `topic_data` array
    /// they come from. None for a tree without a body.
    pub fn produce_request_rows(
        &self,
        t: &Tree,
    ) -> Option<(usize, Option<usize>, Vec<ProduceRow>)> {
        let (body, topic_data, parts) = self.topic_partitions(t, "topic_data", "partition_data")?;
        let mut rows = Vec::new();
        for (topic, topic_id, p) in parts {
            let mut row = ProduceRow {
                topic,
                topic_id,
                partition: None,
                records: 0,
                bytes: 0,
                codec: None,
                crc_ok: true,
                at: None,
                batches: Vec::new(),
            };
            for &c in t.kids(p) {
                match self.name_of(t, c) {
                    "index" => row.partition = t.nodes[c].int(),
                    "records" => {
                        let n = &t.nodes[c];
                        (row.records, row.bytes, row.codec, row.crc_ok) = records_figures(n);
                        row.at = Some((n.offset, n.length));
                        if let Extra::Records {
                            batches: Some(b), ..
                        } = &n.extra
                        {
                            row.batches.clone_from(b);
                        }
                    }
                    _ => {}
                }
            }
            rows.push(row);
        }
        Some((body, topic_data, rows))
    }

    /// A Fetch answer's partitions, in wire order, read off its tree as
    /// `dissectors.summary.fetch_rows` reads them off the full decoder's (the rows its
    /// body's `extra["fetch"]` holds), with the ids of its body and of the `responses`
    /// array they come from. None for a tree without a body.
    pub fn fetch_rows(&self, t: &Tree) -> Option<(usize, Option<usize>, Vec<FetchRow>)> {
        let int = |id: usize| t.nodes[id].int();
        let (body, responses, parts) = self.topic_partitions(t, "responses", "partitions")?;
        let mut rows = Vec::new();
        for (topic, topic_id, p) in parts {
            let mut row = FetchRow {
                topic,
                topic_id,
                partition: None,
                error_code: 0,
                high_watermark: None,
                last_stable_offset: None,
                records: 0,
                bytes: 0,
                codec: None,
                crc_ok: true,
            };
            for &c in t.kids(p) {
                match self.name_of(t, c) {
                    "partition_index" => row.partition = int(c),
                    "error_code" => row.error_code = int(c).unwrap_or(0),
                    "high_watermark" => row.high_watermark = int(c),
                    "last_stable_offset" => row.last_stable_offset = int(c),
                    "records" => {
                        (row.records, row.bytes, row.codec, row.crc_ok) =
                            records_figures(&t.nodes[c]);
                    }
                    _ => {}
                }
            }
            rows.push(row);
        }
        Some((body, responses, rows))
    }
}

impl Figures {
    /// The topic-partitions a request lists in its top-level topics array ([`TOPIC_ARRAYS`]:
    /// kept with `topics` on), in wire order, as `analyzer.sinks.stats.topic_partitions`
    /// reads them off a request tree: each topic's name (the first of [`TOPIC_NAMES`] that
    /// has one, or the element itself in an array of names) with each of its partitions (an
    /// index, or the first of [`PARTITION_INDEXES`] in a partition's struct), a topic with
    /// none once with None.
    pub fn request_topics(&self, t: &Tree) -> Vec<(Option<String>, Option<i64>)> {
        let kids = |id: usize| t.kids(id);
        let child = |id: usize, name: &str| self.child(t, id, name);
        let text = |id: usize| match &t.nodes[id].value {
            Value::Str(s) => Some(s.clone()),
            _ => None,
        };
        let Some(body) = child(t.root, "body") else {
            return Vec::new();
        };
        let Some(topics) = TOPIC_ARRAYS.iter().find_map(|&n| child(body, n)) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for &topic in kids(topics) {
            let name = TOPIC_NAMES
                .iter()
                .find_map(|&n| child(topic, n).and_then(text))
                .or_else(|| text(topic));
            let parts = PARTITION_ARRAYS.iter().find_map(|&n| child(topic, n));
            let mut pids: Vec<Option<i64>> = parts
                .map(kids)
                .unwrap_or(&[])
                .iter()
                .map(|&p| {
                    t.nodes[p].int().or_else(|| {
                        PARTITION_INDEXES
                            .iter()
                            .find_map(|&n| child(p, n).and_then(|c| t.nodes[c].int()))
                    })
                })
                .collect();
            if pids.is_empty() {
                pids.push(None);
            }
            out.extend(pids.into_iter().map(|p| (name.clone(), p)));
        }
        out
    }
}
