//! The exchange tables as Arrow record batches: the rows of `exchanges` and `partitions`
//! (`analyzer/tables.py` defines them: names, types, nullability, meaning; the Python
//! side checks every batch's schema against that definition) for the exchanges the core
//! reads to their end, built while the stream pairs them, without a Python object per
//! exchange, partition or field.
//!
//! [`TableBuilder::exchange`] takes a paired exchange whose frames the lean walk reads
//! (`figures/`: a 0.8+ exchange of an API and version the schema has, neither frame cut
//! by the capture, no consumer-protocol payload with bad bytes) and appends its rows; any
//! other exchange it declines, and the stream hands it to the front as a record to decode
//! (`analyzer/pipeline.py`), whose rows `analyzer/tables.py` makes. What a row holds is
//! what the front's `Exchange` of the same exchange holds: the status an `ok` exchange
//! with bad bytes turns `malformed`, the names of its non-zero error codes in wire order,
//! a Produce's or Fetch's partitions (topic ids named by the Metadata, CreateTopics and
//! DescribeTopicPartitions answers read before it), an unanswered request's reason. The
//! counts it adds to a run (statuses, the walks' counters) are kept for the front's summary.

mod columns;
pub mod lag;

use std::collections::HashMap;
use std::sync::Mutex;

use rustc_hash::FxHashMap;

pub use columns::{
    batches_schema, exchanges_schema, lag_schema, partitions_schema, Batch, Fetch, Part, Row,
    Tables,
};

use crate::figures::{Counts, Figures, Node, Tree, Value};
use crate::net::Endpoint;
use crate::pair::{ExchangeRec, Kind, Status};
use crate::tcp::Conn;

/// An endpoint as the front writes it: `ip:port`, `[ip]:port` for IPv6.
fn endpoint_text(e: &Endpoint) -> String {
    match e.0 {
        std::net::IpAddr::V6(ip) => format!("[{ip}]:{}", e.1),
        std::net::IpAddr::V4(ip) => format!("{ip}:{}", e.1),
    }
}

/// What a table-building stream adds to a run besides rows: the exchanges it took by
/// status, and its walks' counts (what the front adds to its summary and counters).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Taken {
    /// by [`Status`], as `Status::ALL` orders them
    pub statuses: [u64; Status::ALL.len()],
    pub malformed: u64,
    pub crc_valid: u64,
    pub crc_invalid: u64,
    pub trailing: u64,
    /// each limit hit, and how often
    pub limits: Vec<(&'static str, u64)>,
}

impl Taken {
    fn add(&mut self, c: &Counts) {
        self.malformed += u64::from(c.malformed);
        self.crc_valid += u64::from(c.crc_valid);
        self.crc_invalid += u64::from(c.crc_invalid);
        self.trailing += u64::from(c.trailing);
        for &name in &c.limits {
            match self.limits.iter_mut().find(|(n, _)| *n == name) {
                Some((_, k)) => *k += 1,
                None => self.limits.push((name, 1)),
            }
        }
    }
}

/// The body's top-level field `name` (a tree's `get_in("body", name)`).
fn body_field<'t>(fig: &Figures, t: &'t Tree, name: &str) -> Option<&'t Node> {
    let body = fig.child(t, t.root, "body")?;
    fig.child(t, body, name).map(|c| &t.nodes[c])
}

/// A Fetch answered after at least this share of its max_wait_ms waited on purpose.
const WAIT_FETCH_FRACTION: f64 = 0.9;

/// Why the broker held an answered exchange on purpose (`analyzer.sinks.stats.wait_kind`),
/// `lat` its latency in ms: a Fetch answered near its max_wait_ms with less than its
/// min_bytes, a JoinGroup (but one answered MEMBER_ID_REQUIRED), a SyncGroup follower's
/// (no assignments to hand out); None for plain service time.
fn wait_kind(
    fig: &Figures,
    api_key: i16,
    rq: &Tree,
    lat: f64,
    parts: &[Part],
    error_codes: &[String],
) -> Option<&'static str> {
    let int = |name: &str| match body_field(fig, rq, name).map(|n| &n.value) {
        Some(Value::Int(v)) => Some(*v),
        _ => None,
    };
    match api_key {
        1 => {
            let max_wait = int("max_wait_ms").filter(|&w| w > 0)?;
            if lat < WAIT_FETCH_FRACTION * max_wait as f64 {
                return None;
            }
            let min_bytes = int("min_bytes").filter(|&b| b != 0).unwrap_or(1).max(1);
            let got: i64 = parts.iter().map(|p| p.bytes).sum();
            (got < min_bytes).then_some("fetch_max_wait")
        }
        11 => (!error_codes.iter().any(|e| e == "MEMBER_ID_REQUIRED")).then_some("join_group"),
        14 => body_field(fig, rq, "assignments")
            .filter(|n| n.children.as_deref().unwrap_or(&[]).is_empty())
            .map(|_| "sync_group_follower"),
        _ => None,
    }
}

/// The first Fetch version whose answer has a top-level error_code
/// (`analyzer.tables.FETCH_ERROR_CODE_SINCE`).
const FETCH_ERROR_CODE_SINCE: i16 = 7;

/// Metadata, CreateTopics, DescribeTopicPartitions: their answers name topic ids.
const TEACHES_TOPIC_IDS: [i16; 3] = [3, 19, 75];

/// A Fetch request's partition: its topic's name as written, else its id; its index.
type AskKey = (Option<String>, Option<[u8; 16]>, Option<i64>);

/// The rows of one capture's exchanges, as a stream pairs them (see the module's doc).
pub struct TableBuilder {
    pub tables: Tables,
    pub taken: Taken,
    /// the open connections' endpoints (a, b) as text
    conns: FxHashMap<u64, (String, String)>,
    /// the connection's last time as the latest exchange taken told it (an exchange handed
    /// on tells it to the front itself)
    last_ts: FxHashMap<u64, f64>,
    /// topic id -> name, as the answers read so far name them
    topic_names: HashMap<[u8; 16], String>,
    /// the error names by code (`dissectors.errors.ERRORS`)
    error_names: HashMap<i64, String>,
    /// with `tell`: each naming of a topic id (its id as text, the name) since the last take,
    /// repeats too, in the order the answers gave them
    pub learnt: Option<Vec<(String, String)>>,
    /// the connections' Fetch sessions (the `lag` rows)
    sessions: lag::Sessions,
    /// the packet of the exchange being taken, and the topic ids looked up in vain, each
    /// with the first and last packet of it (a worker's share names them after the fact)
    now: u64,
    misses: Mutex<FxHashMap<String, (u64, u64)>>,
}

impl TableBuilder {
    pub fn new(capture: &str, error_names: HashMap<i64, String>) -> Self {
        TableBuilder {
            tables: Tables::new(capture),
            taken: Taken::default(),
            conns: FxHashMap::default(),
            last_ts: FxHashMap::default(),
            topic_names: HashMap::new(),
            error_names,
            learnt: None,
            sessions: lag::Sessions::default(),
            now: 0,
            misses: Mutex::default(),
        }
    }

    /// The topic ids looked up in vain so far: (id as text, first packet, last packet).
    pub fn misses(&self) -> Vec<(String, u64, u64)> {
        let mut out: Vec<_> = self
            .misses
            .lock()
            .expect("not poisoned")
            .iter()
            .map(|(k, &(a, b))| (k.clone(), a, b))
            .collect();
        out.sort();
        out
    }

    /// A connection opened.
    pub fn open(&mut self, c: &Conn) {
        self.conns
            .insert(c.id, (endpoint_text(&c.a), endpoint_text(&c.b)));
    }

    /// A connection ended (its last exchange came before): the last time of it an exchange
    /// taken told, unless a record handed on since told one.
    pub fn closed(&mut self, id: u64) -> Option<f64> {
        self.conns.remove(&id);
        self.sessions.closed(id);
        self.last_ts.remove(&id)
    }

    /// A record of the connection handed on (an exchange, an update) told its last time.
    pub fn told(&mut self, id: u64) {
        if !self.last_ts.is_empty() {
            self.last_ts.remove(&id);
        }
    }

    fn error_name(&self, code: i64) -> String {
        match self.error_names.get(&code) {
            Some(s) => s.clone(),
            None => format!("UNKNOWN_ERROR_CODE_{code}"),
        }
    }

    /// A topic's name: its own, else the one its id was named with, else the id (a miss).
    fn topic_name(&self, topic: Option<String>, id: Option<[u8; 16]>) -> Option<String> {
        topic.or_else(|| {
            id.map(|u| match self.topic_names.get(&u) {
                Some(n) => n.clone(),
                None => {
                    let text = crate::figures::uuid_text(&u);
                    let now = self.now;
                    let mut misses = self.misses.lock().expect("not poisoned");
                    let m = misses.entry(text.clone()).or_insert((now, now));
                    m.1 = m.1.max(now);
                    text
                }
            })
        })
    }

    /// Append the rows of `r` when the walk reads it to its end: whether it went unanswered
    /// or was answered with an error code; None: the front's.
    pub fn exchange(&mut self, fig: &mut Figures, r: &ExchangeRec) -> Option<bool> {
        let (Kind::Kafka, Some(h), Some(req)) = (r.kind, &r.header, &r.request) else {
            return None;
        };
        if req.truncated || !fig.covers(h.api_key, h.api_version) {
            return None;
        }
        if r.response.as_ref().is_some_and(|f| f.truncated) {
            return None;
        }
        if !self.conns.contains_key(&r.conn) {
            return None;
        }
        self.now = r.now;
        let rq = fig.request(&req.data, h.header_len);
        if rq.full {
            return None;
        }
        let rs = match &r.response {
            Some(f) => match fig.response(&f.data, h.api_key, h.api_version) {
                Some(t) if !t.full => Some(t),
                _ => return None,
            },
            None => None,
        };
        let mut status = r.status;
        if status == Status::Ok
            && (rq.counts.malformed > 0 || rs.as_ref().is_some_and(|t| t.counts.malformed > 0))
        {
            status = Status::Malformed;
        }
        self.taken.statuses[status as usize] += 1;
        self.last_ts.insert(r.conn, r.last_ts);
        self.taken.add(&rq.counts);
        if let Some(t) = &rs {
            self.taken.add(&t.counts);
            if TEACHES_TOPIC_IDS.contains(&h.api_key) && t.errors_root {
                self.learn_topic_ids(fig, t);
            }
        }
        let error_codes: Vec<String> = rs
            .as_ref()
            .map(|t| t.errors.iter().map(|&c| self.error_name(c)).collect())
            .unwrap_or_default();
        let (parts, batches) = match h.api_key {
            0 => self.produce_parts(fig, &rq, rs.as_ref()),
            1 => (self.fetch_parts(fig, &rq, rs.as_ref()), Vec::new()),
            _ => (Vec::new(), Vec::new()),
        };
        let lat = r
            .response
            .as_ref()
            .map(|s| (s.last_ts - req.last_ts) * 1000.0);
        let wait = lat.and_then(|lat| wait_kind(fig, h.api_key, &rq, lat, &parts, &error_codes));
        let throttle_ms = rs
            .as_ref()
            .and_then(|t| body_field(fig, t, "throttle_time_ms"))
            .and_then(|n| match n.value {
                Value::Int(v) if v > 0 => i32::try_from(v).ok(),
                _ => None,
            })
            .unwrap_or(0);
        let text = |name: &str| {
            body_field(fig, &rq, name).and_then(|n| match &n.value {
                Value::Str(s) => Some(s.clone()),
                _ => None,
            })
        };
        let group_id = text("group_id");
        let (acks, transactional_id) = match h.api_key {
            0 => (
                body_field(fig, &rq, "acks").and_then(|n| match n.value {
                    Value::Int(v) => i32::try_from(v).ok(),
                    _ => None,
                }),
                text("transactional_id"),
            ),
            _ => (None, None),
        };
        let topics: Vec<(Option<String>, Option<i32>)> = if parts.is_empty() {
            fig.request_topics(&rq)
                .into_iter()
                .map(|(t, p)| (t, p.map(|p| p as i32)))
                .collect()
        } else {
            parts
                .iter()
                .map(|p| (p.topic.clone(), p.partition))
                .collect()
        };
        let notes: Vec<String> = match (&r.note, status) {
            (Some(n), Status::Unanswered) => vec![n.clone()],
            _ => Vec::new(),
        };
        let fetch = (h.api_key == 1).then(|| self.fetch(fig, &rq, rs.as_ref(), h.api_version));
        let lag = match (&fetch, &rs) {
            (Some(f), Some(_)) => self.sessions.fetch(r.conn, f, &parts),
            _ => Vec::new(),
        };
        let api_name = fig.api_name(h.api_key).unwrap_or("");
        let (a, b) = &self.conns[&r.conn];
        let (client, broker) = if r.client_dir.unwrap_or(0) == 0 {
            (a, b)
        } else {
            (b, a)
        };
        self.tables.push(&Row {
            conn: r.conn,
            client,
            broker,
            protocol: "kafka",
            api_key: Some(i32::from(h.api_key)),
            api_name,
            api_version: Some(i32::from(h.api_version)),
            correlation_id: Some(h.correlation_id),
            client_id: h.client_id.as_deref(),
            request: Some(req),
            response: r.response.as_ref(),
            status: status.name(),
            wait,
            throttle_ms,
            group_id: group_id.as_deref(),
            error_codes: &error_codes,
            parts: &parts,
            topics: &topics,
            notes: &notes,
            fetch: fetch.as_ref(),
            lag: &lag,
            acks,
            transactional_id: transactional_id.as_deref(),
            batches: &batches,
        });
        Some(rs.is_none() || !error_codes.is_empty())
    }

    /// Topic id -> name from a Metadata-like answer's `topics` (the null id named nothing).
    fn learn_topic_ids(&mut self, fig: &Figures, t: &Tree) {
        let Some(body) = t.kids(t.root).first().copied() else {
            return;
        };
        let Some(topics) = fig.child(t, body, "topics") else {
            return;
        };
        for &topic in t.kids(topics) {
            let (mut name, mut id) = (None, None);
            for &c in t.kids(topic) {
                match (fig.name_of(t, c), &t.nodes[c].value) {
                    ("name", Value::Str(s)) => name = Some(s.clone()),
                    ("topic_id", Value::Uuid(u)) => id = Some(*u),
                    _ => {}
                }
            }
            if let (Some(name), Some(id)) = (name, id) {
                if id != [0; 16] {
                    if let Some(told) = self.learnt.as_mut() {
                        told.push((crate::figures::uuid_text(&id), name.clone()));
                    }
                    self.topic_names.insert(id, name);
                }
            }
        }
    }

    /// A Produce's partitions: the request's, each with its answer's error; and their
    /// record batches (v2), as the walk's summary of each records field read them.
    fn produce_parts(
        &self,
        fig: &Figures,
        rq: &Tree,
        rs: Option<&Tree>,
    ) -> (Vec<Part>, Vec<Batch>) {
        let mut errors: HashMap<(Option<String>, Option<i64>), Option<String>> = HashMap::new();
        if let Some(t) = rs {
            if let Some((_, _, parts)) = fig.topic_partitions(t, "responses", "partition_responses")
            {
                for (topic, id, p) in parts {
                    let (mut idx, mut code) = (None, None);
                    for &c in t.kids(p) {
                        match (fig.name_of(t, c), &t.nodes[c].value) {
                            ("index", Value::Int(v)) => idx = Some(*v),
                            ("error_code", Value::Int(v)) => code = Some(*v),
                            _ => {}
                        }
                    }
                    let name = code.filter(|&c| c != 0).map(|c| self.error_name(c));
                    errors.insert((self.topic_name(topic, id), idx), name);
                }
            }
        }
        let Some((_, _, rows)) = fig.produce_request_rows(rq) else {
            return (Vec::new(), Vec::new());
        };
        // (the batch heads the walk's summary of each records field kept)
        let batches = rows
            .iter()
            .enumerate()
            .flat_map(|(part, r)| r.batches.iter().map(move |&head| Batch { part, head }))
            .collect();
        let parts = rows
            .into_iter()
            .map(|r| {
                let topic = self.topic_name(r.topic, r.topic_id);
                let error = errors.get(&(topic.clone(), r.partition)).cloned().flatten();
                Part {
                    topic,
                    partition: r.partition.map(|p| p as i32),
                    records: r.records,
                    bytes: r.bytes,
                    codec: r.codec,
                    crc_ok: r.crc_ok,
                    error,
                    fetch_offset: None,
                    high_watermark: None,
                    last_stable_offset: None,
                }
            })
            .collect();
        (parts, batches)
    }

    /// A Fetch's session, the partitions it asks for and those it forgets (topics named),
    /// and its answer's error and session id.
    fn fetch(&self, fig: &Figures, rq: &Tree, rs: Option<&Tree>, version: i16) -> Fetch {
        let int = |t: &Tree, name: &str| match body_field(fig, t, name).map(|n| &n.value) {
            Some(Value::Int(v)) => i32::try_from(*v).ok(),
            _ => None,
        };
        let asked = fig
            .fetch_request_rows(rq)
            .map(|(_, _, rows)| rows)
            .unwrap_or_default()
            .into_iter()
            .map(|a| {
                let topic = self.topic_name(a.topic, a.topic_id);
                (topic, a.partition.map(|p| p as i32), a.fetch_offset)
            })
            .collect();
        let forgotten = fig
            .topic_partitions(rq, "forgotten_topics_data", "partitions")
            .map(|(_, _, parts)| parts)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(topic, id, p)| {
                let Value::Int(p) = rq.nodes[p].value else {
                    return None;
                };
                Some((self.topic_name(topic, id), Some(p as i32)))
            })
            .collect();
        Fetch {
            isolation_level: int(rq, "isolation_level"),
            session_id: int(rq, "session_id"),
            session_epoch: int(rq, "session_epoch"),
            // (an answer of v7+ has one: the lean walk leaves a 0 out)
            error_code: rs.and_then(|t| {
                int(t, "error_code").or((version >= FETCH_ERROR_CODE_SINCE).then_some(0))
            }),
            response_session_id: rs.and_then(|t| int(t, "session_id")),
            asked,
            forgotten,
        }
    }

    /// A Fetch's partitions: the answer's, each with the offset the request asked from.
    fn fetch_parts(&self, fig: &Figures, rq: &Tree, rs: Option<&Tree>) -> Vec<Part> {
        let Some((_, _, rows)) = rs.and_then(|t| fig.fetch_rows(t)) else {
            return Vec::new();
        };
        // (keyed by the topic's name as written, else its id: as the request wrote it)
        let mut asked: HashMap<AskKey, Option<i64>> = HashMap::new();
        for a in fig
            .fetch_request_rows(rq)
            .map(|(_, _, rows)| rows)
            .unwrap_or_default()
        {
            let id = if a.topic.is_some() { None } else { a.topic_id };
            asked.insert((a.topic, id, a.partition), a.fetch_offset);
        }
        rows.into_iter()
            .map(|r| {
                let id = if r.topic.is_some() { None } else { r.topic_id };
                let fetch_offset = asked
                    .get(&(r.topic.clone(), id, r.partition))
                    .copied()
                    .flatten();
                Part {
                    topic: self.topic_name(r.topic, r.topic_id),
                    partition: r.partition.map(|p| p as i32),
                    records: r.records,
                    bytes: r.bytes,
                    codec: r.codec,
                    crc_ok: r.crc_ok,
                    error: (r.error_code != 0).then(|| self.error_name(r.error_code)),
                    fetch_offset,
                    high_watermark: r.high_watermark,
                    last_stable_offset: r.last_stable_offset,
                }
            })
            .collect()
    }
}
