//! Kafka framing and pairing of every connection: the reassembler's stream events in,
//! exchange records out.
//!
//! Each connection gets a [`Framer`] per direction and the pairing state that judges
//! their frames (`ConnJudge`): which side is the client (the SYN sender when the
//! handshake was captured, else the side that sends to one of the `--port` ports, else
//! the side whose first frame is a plausible request), which protocol (`--protocol`, or
//! on auto the first client frame scored as a 0.8+ request header against a pre-0.8
//! request), and the requests waiting for their responses:
//!
//! - 0.8+ requests by correlation id (a request reusing an id still in flight waits
//!   behind it, in order); Produce with acks=0 expects no response;
//! - pre-0.8 requests in order (FIFO): they have no correlation id; PRODUCE and
//!   MULTIPRODUCE expect no response;
//! - after a SaslHandshake v0 exchange that succeeded, raw SASL tokens without a Kafka
//!   header, in order, until authentication is over.
//!
//! A connection whose first bytes in a direction are a TLS record is *handed* to the
//! front: its stream events go up as they are ([`Out::Data`], [`Out::Gap`],
//! [`Out::End`]); the front decrypts it (with a key log) and hands the plaintext back
//! ([`Pairing::plain`]), or tells it to be ignored ([`Pairing::ignore`]), and ends it
//! ([`Pairing::end`]).
//!
//! What this stage does not do is decode: an exchange record carries the request header
//! fields and both frames; the front builds the field trees.

use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use crate::evidence::{self, Evidence};
use crate::figures::Figures;
use crate::frame::{Frame, Framer, Judge, Verdict};
use crate::kafka::{self, ApiTable, HeaderCheck, RequestHeader};
use crate::legacy;
use crate::tcp::{Conn, Event, Sink};

/// `now` of the events made at the end of the capture (`analyzer._core.END_OF_CAPTURE`).
pub const END_OF_CAPTURE: u64 = 1 << 62;
const PRODUCE: i16 = 0;
/// A response's correlation id this close to the latest request's is a plausible orphan.
const ORPHAN_CID_WINDOW: i64 = 4096;
/// How far a framer peeks into a frame for its checks.
const PEEK: usize = 64;

/// `--protocol`: decide per connection, or force one generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forced {
    Auto,
    Legacy,
    Modern,
}

/// What a connection carries, as far as known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Undecided,
    Kafka,
    Legacy,
    /// TLS the front does not decrypt
    Tls,
}

impl Protocol {
    /// The name the front uses (`Conn.protocol`).
    pub fn name(self) -> Option<&'static str> {
        match self {
            Protocol::Undecided => None,
            Protocol::Kafka => Some("kafka"),
            Protocol::Legacy => Some("kafka-legacy"),
            Protocol::Tls => Some("tls"),
        }
    }
}

/// The settings of the stage.
#[derive(Clone, Debug)]
pub struct PairConfig {
    pub ports: Vec<u16>,
    pub forced: Forced,
    pub max_frame_size: u32,
    pub table: ApiTable,
    /// the schema's walk, which judges the bodies of a connection on no `--port` port
    /// ([`evidence`]; one per process, its plans compiled once); without it the headers
    /// alone do
    pub schema: Option<Arc<Mutex<Figures>>>,
}

/// An exchange's status (the front's `EXCHANGE_STATUSES`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Ok,
    Unanswered,
    NoResponseExpected,
    OrphanResponse,
    Malformed,
}

impl Status {
    /// Every status, in declaration order (`status as usize` is its place here).
    pub const ALL: [Status; 5] = [
        Status::Ok,
        Status::Unanswered,
        Status::NoResponseExpected,
        Status::OrphanResponse,
        Status::Malformed,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Unanswered => "unanswered",
            Status::NoResponseExpected => "no_response_expected",
            Status::OrphanResponse => "orphan_response",
            Status::Malformed => "malformed",
        }
    }
}

/// What kind of exchange a record is, which tells the front how to decode it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// 0.8+ with a request header (`header` set)
    Kafka,
    /// 0.8+ response whose request was not captured
    Orphan,
    /// a client frame on a 0.8+ connection that is no request header
    NotRequest,
    /// pre-0.8 (`legacy_type` set when the request had one)
    Legacy,
    /// a raw SASL token and the broker's answer
    SaslToken,
}

/// One exchange, for the front to decode and emit.
#[derive(Debug)]
pub struct ExchangeRec {
    pub conn: u64,
    /// the packet being handled when the exchange was complete (END_OF_CAPTURE at the end)
    pub now: u64,
    pub kind: Kind,
    pub status: Status,
    pub header: Option<RequestHeader>,
    /// pre-0.8 request type; the correlation id of an orphan response
    pub legacy_type: Option<i16>,
    pub correlation_id: Option<i32>,
    pub request: Option<Frame>,
    pub response: Option<Frame>,
    pub note: Option<String>,
    /// the SASL mechanism of a raw token's connection
    pub mechanism: Option<String>,
    pub client_dir: Option<u8>,
    pub protocol: Protocol,
    pub last_ts: f64,
}

/// A connection ended (after its last exchanges): what the front counts it as.
#[derive(Debug)]
pub struct Closed {
    pub conn: u64,
    pub protocol: Protocol,
    pub client_dir: Option<u8>,
    pub responses_only: bool,
    pub any_data: bool,
    pub handed: bool,
    /// why it was taken as Kafka, or not ([`Detect::describe`])
    pub detection: String,
}

/// How a connection is found to be Kafka, or not.
#[derive(Debug)]
enum Detect {
    /// one of its ports is a `--port` port (0: every connection is handed to the front)
    Port(u16),
    /// on no `--port` port and not decided yet: its records and counts held
    Held(Box<Held>),
    /// on no `--port` port, taken as Kafka on this evidence
    Kafka(String),
    /// on no `--port` port and not Kafka: its bytes are counted as unidentified
    Unidentified,
    /// TLS the front does not decrypt
    Encrypted,
}

impl Detect {
    /// What the front shows of it.
    fn describe(&self) -> String {
        match self {
            Detect::Port(p) => format!("port {p}"),
            Detect::Held(h) => h.evidence.describe(),
            Detect::Kafka(why) => why.clone(),
            Detect::Unidentified => "unidentified".into(),
            Detect::Encrypted => "tls".into(),
        }
    }
}

/// An undecided connection's records, and the counts they would add.
#[derive(Debug, Default)]
struct Held {
    #[allow(clippy::vec_box)] // (they go out as they came, in `Out::Exchange`'s box)
    recs: Vec<Box<ExchangeRec>>,
    /// bytes of the frames held, in records and in flight
    bytes: usize,
    evidence: Evidence,
    request_frames: u64,
    response_frames: u64,
    truncated_frames: u64,
    over_max_frames: u64,
    skipped: BTreeMap<&'static str, u64>,
    notes: BTreeMap<&'static str, u64>,
}

/// What the stage gives the front, in stream order.
#[derive(Debug)]
pub enum Out {
    Open(Conn),
    Update(Conn),
    Exchange(Box<ExchangeRec>),
    /// the ending connection's unanswered requests follow as exchanges before this
    Closed(Closed),
    /// stream events of a handed connection
    Data {
        conn: u64,
        dir: u8,
        offset: i64,
        data: Vec<u8>,
        ts: f64,
        index: u64,
        now: u64,
        now_ts: f64,
    },
    Gap {
        conn: u64,
        dir: u8,
        offset: i64,
        length: u64,
        ts: f64,
        index: u64,
        reason: &'static str,
        now: u64,
        now_ts: f64,
    },
    End {
        conn: u64,
        dir: Option<u8>,
        reason: &'static str,
        ts: f64,
        index: u64,
        now: u64,
    },
}

/// A request waiting for its response.
#[derive(Debug)]
struct Pending {
    frame: Frame,
    header: Option<RequestHeader>,
    legacy_type: Option<i16>,
    sasl_token: bool,
}

/// The judging and pairing state of one connection (its framers apart, so that a
/// framer can be fed while its judge borrows this).
#[derive(Debug)]
struct Link {
    /// creation order (the order `expire` visits connections in)
    order: u64,
    a_port: u16,
    b_port: u16,
    syn_seen: bool,
    last_ts: f64,
    client_dir: Option<u8>,
    protocol: Protocol,
    /// correlation id -> (key order, the oldest request with it awaiting its response)
    inflight: HashMap<i32, (u64, Pending)>,
    key_seq: u64,
    /// later requests reusing an id still in flight, in order
    reused: HashMap<i32, VecDeque<Pending>>,
    /// pre-0.8 requests / raw SASL tokens, in order
    fifo: VecDeque<Pending>,
    sasl_raw: bool,
    sasl_mechanism: Option<String>,
    /// raw SASL client tokens still expected (-1: unknown)
    sasl_tokens_left: i32,
    last_cid: Option<i32>,
    first_data_seen: [bool; 2],
    responses_only: bool,
    handed: bool,
    ignored: bool,
    detect: Detect,
}

impl Link {
    fn tokens_waiting(&self) -> bool {
        self.fifo.front().is_some_and(|p| p.sasl_token)
    }

    /// The receiver's port of direction `d`.
    fn dst_port(&self, d: u8) -> u16 {
        if d == 0 {
            self.b_port
        } else {
            self.a_port
        }
    }

    /// The correlation ids in flight, in the order they were first waited on (a reused
    /// id's later requests keep its place).
    fn inflight_order(&self) -> Vec<i32> {
        let mut keyed: Vec<(u64, i32)> = self.inflight.iter().map(|(c, (s, _))| (*s, *c)).collect();
        keyed.sort_unstable();
        keyed.into_iter().map(|(_, c)| c).collect()
    }

    fn pop_pending(&mut self, cid: Option<i32>) -> Option<Pending> {
        let cid = cid?;
        let (seq, p) = self.inflight.remove(&cid)?;
        if let Some(later) = self.reused.get_mut(&cid) {
            if let Some(next) = later.pop_front() {
                // the next one keeps the id's place
                self.inflight.insert(cid, (seq, next));
            }
            if later.is_empty() {
                self.reused.remove(&cid);
            }
        }
        Some(p)
    }
}

/// A framer's judge: the connection's state as it is when the frame is judged.
struct ConnJudge<'a> {
    link: &'a Link,
    dir: u8,
    table: &'a ApiTable,
    ports: &'a [u16],
}

fn verdict(c: HeaderCheck) -> Verdict {
    match c {
        HeaderCheck::Header(_) => Verdict::Strong,
        HeaderCheck::Cut => Verdict::Yes,
        HeaderCheck::Rejected => Verdict::No,
    }
}

fn yes(b: bool) -> Verdict {
    if b {
        Verdict::Yes
    } else {
        Verdict::No
    }
}

impl ConnJudge<'_> {
    /// Before the protocol is decided: a 0.8+ request header, else whether a pre-0.8
    /// request is plausible.
    fn undecided_request(&self, head: &[u8]) -> Verdict {
        match kafka::request_header(self.table, head, true, true) {
            HeaderCheck::Rejected => yes(legacy::legacy_request_plausible(head)),
            c => verdict(c),
        }
    }

    /// A 0.8+ response: strong when its request is waiting, else whether an orphan is plausible.
    fn response_check(&self, head: &[u8]) -> Verdict {
        let link = self.link;
        match kafka::response_correlation_id(head) {
            Some(cid) if cid >= 0 => {
                if link.inflight.contains_key(&cid) {
                    Verdict::Strong
                } else {
                    // an orphan (its request not captured, e.g. a mid-stream start) is
                    // plausible while no request was seen yet, or when its id is close
                    // to the ones in use
                    yes(link
                        .last_cid
                        .is_none_or(|last| (cid as i64 - last as i64).abs() <= ORPHAN_CID_WINDOW))
                }
            }
            _ => Verdict::No,
        }
    }
}

impl Judge for ConnJudge<'_> {
    fn checks(&self) -> bool {
        true
    }

    fn plausible(&mut self, head: &[u8]) -> Verdict {
        let link = self.link;
        let d = self.dir;
        let client_dir = link.client_dir;
        if link.sasl_raw || (client_dir != Some(d) && link.tokens_waiting()) {
            return Verdict::Yes;
        }
        let protocol = link.protocol;
        if client_dir.is_none() || client_dir == Some(d) {
            if protocol == Protocol::Legacy {
                return yes(legacy::legacy_request_plausible(head));
            }
            let h = if protocol == Protocol::Undecided {
                self.undecided_request(head)
            } else {
                verdict(kafka::request_header(self.table, head, true, true))
            };
            if h != Verdict::No || client_dir == Some(d) {
                return h;
            }
        }
        if protocol == Protocol::Legacy {
            let rtype = link.fifo.front().and_then(|p| p.legacy_type);
            return yes(legacy::legacy_response_plausible(
                head,
                rtype.map(i32::from),
            ));
        }
        self.response_check(head)
    }

    /// On the client side of a 0.8+ connection outside raw SASL, a request header of any
    /// API key and version, so that one newer than the schema is framed and paired. A
    /// connection's first request (its protocol not decided yet) to a port that is no
    /// `--port` needs an API key in the plausible range too, lest some other
    /// length-prefixed protocol pass for Kafka.
    fn sane(&mut self, head: &[u8], size: u32) -> bool {
        let link = self.link;
        if link.sasl_raw || link.client_dir != Some(self.dir) {
            return false;
        }
        let protocol = link.protocol;
        if protocol != Protocol::Kafka && protocol != Protocol::Undecided {
            return false;
        }
        let Some(h) = kafka::sane_request(self.table, head, size as usize) else {
            return false;
        };
        protocol != Protocol::Undecided
            || self.ports.contains(&link.dst_port(self.dir))
            || h.api_key <= kafka::MAX_PLAUSIBLE_API_KEY
    }

    fn first_known(&self) -> (bool, bool) {
        let p = self.link.protocol;
        (
            self.link.syn_seen,
            p == Protocol::Kafka || p == Protocol::Legacy,
        )
    }
}

/// A connection: its framers and its pairing state.
#[derive(Debug)]
struct ConnState {
    framers: [Option<Framer>; 2],
    link: Link,
}

/// Counts that account for every frame and skipped byte (the front's summary).
#[derive(Debug, Default, Clone)]
pub struct Counts {
    pub connections: u64,
    pub request_frames: u64,
    pub response_frames: u64,
    pub truncated_frames: u64,
    pub gaps: u64,
    pub gap_bytes: u64,
    pub bytes_skipped: BTreeMap<&'static str, u64>,
    pub notes: BTreeMap<&'static str, u64>,
    /// size prefixes above the largest frame allowed, met at a frame boundary
    pub over_max_frames: u64,
}

/// The framing and pairing stage: a [`Sink`] of the reassembler.
#[derive(Debug)]
pub struct Pairing {
    cfg: PairConfig,
    /// the connections the reassembler has open: their addresses and flags
    /// (keyed by the reassembler's connection ids: a fast hash, no input chooses them)
    conns: FxHashMap<u64, Conn>,
    states: FxHashMap<u64, ConnState>,
    order: u64,
    pub counts: Counts,
    pub out: Vec<Out>,
    /// the packet being handled (index, ts)
    pub now: u64,
    pub now_ts: f64,
    /// hand every connection to the front (its stream events as they are): the
    /// reassembler's events without framing, for tools and tests of that stage
    pub hand_all: bool,
    /// the frame bytes all undecided connections hold (bounded by [`evidence::MAX_HELD_TOTAL`])
    held_bytes: usize,
}

impl Sink for Pairing {
    fn event(&mut self, ev: Event<'_>) {
        match ev {
            Event::Open(c) => {
                self.conns.insert(c.id, c.clone());
                self.out.push(Out::Open(c.clone()));
            }
            Event::Update(c) => {
                if let Some(st) = self.states.get_mut(&c.id) {
                    st.link.syn_seen = c.syn_seen;
                    st.link.last_ts = c.last_ts;
                }
                self.conns.insert(c.id, c.clone());
                self.out.push(Out::Update(c.clone()));
            }
            Event::Data {
                conn,
                dir,
                offset,
                data,
                ts,
                index,
            } => self.data(conn, dir, offset, data, ts, index),
            Event::Gap {
                conn,
                dir,
                offset,
                length,
                ts,
                index,
                reason,
            } => self.gap(conn, dir, offset, length, ts, index, reason),
            Event::End {
                conn,
                dir,
                reason,
                ts,
                index,
            } => {
                self.state(conn);
                let st = self.states.get(&conn).expect("state made above");
                if st.link.handed {
                    let now = self.now;
                    self.out.push(Out::End {
                        conn,
                        dir,
                        reason,
                        ts,
                        index,
                        now,
                    });
                    if dir.is_none() {
                        self.conns.remove(&conn);
                    }
                } else {
                    self.end(conn, dir, reason);
                }
            }
        }
    }
}

impl Pairing {
    pub fn new(cfg: PairConfig) -> Self {
        Pairing {
            cfg,
            conns: FxHashMap::default(),
            states: FxHashMap::default(),
            order: 0,
            counts: Counts::default(),
            out: Vec::new(),
            now: 0,
            now_ts: 0.0,
            hand_all: false,
            held_bytes: 0,
        }
    }

    /// Connections with pairing state (open, or handed and not yet ended by the front).
    pub fn open_states(&self) -> usize {
        self.states.len()
    }

    /// The pairing state of a connection, made at its first data, gap or end.
    fn state(&mut self, conn: u64) -> &mut ConnState {
        if !self.states.contains_key(&conn) {
            let c = self.conns.get(&conn);
            let (a_port, b_port, syn_seen, last_ts) = c.map_or((0, 0, false, 0.0), |c| {
                (c.a.1, c.b.1, c.syn_seen, c.last_ts)
            });
            let ports = &self.cfg.ports;
            // the SYN sender, else the side that sends to a --port port
            let client_dir = if syn_seen || (ports.contains(&b_port) && !ports.contains(&a_port)) {
                Some(0)
            } else if ports.contains(&a_port) && !ports.contains(&b_port) {
                Some(1)
            } else {
                None
            };
            self.order += 1;
            self.counts.connections += 1;
            let port = [b_port, a_port].into_iter().find(|p| ports.contains(p));
            let detect = match port {
                Some(p) => Detect::Port(p),
                None if self.hand_all => Detect::Port(0),
                None => Detect::Held(Box::default()),
            };
            let link = Link {
                order: self.order,
                a_port,
                b_port,
                syn_seen,
                last_ts,
                client_dir,
                protocol: Protocol::Undecided,
                inflight: HashMap::new(),
                key_seq: 0,
                reused: HashMap::new(),
                fifo: VecDeque::new(),
                sasl_raw: false,
                sasl_mechanism: None,
                sasl_tokens_left: -1,
                last_cid: None,
                first_data_seen: [false, false],
                responses_only: false,
                handed: false,
                ignored: false,
                detect,
            };
            let link = Link {
                handed: self.hand_all,
                ..link
            };
            self.states.insert(
                conn,
                ConnState {
                    framers: [None, None],
                    link,
                },
            );
        }
        self.states.get_mut(&conn).expect("inserted above")
    }

    fn touch(&mut self, conn: u64) {
        if self.now < END_OF_CAPTURE {
            let now_ts = self.now_ts;
            if let Some(st) = self.states.get_mut(&conn) {
                st.link.last_ts = now_ts;
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn data(&mut self, conn: u64, d: u8, off: i64, data: &[u8], ts: f64, index: u64) {
        let st = self.state(conn);
        let link = &mut st.link;
        if matches!(link.detect, Detect::Unidentified) {
            self.touch(conn);
            self.skip_unidentified(data.len() as u64);
            return;
        }
        if !link.first_data_seen[d as usize] {
            link.first_data_seen[d as usize] = true;
            // (a TLS record header has its major version, 3, second: Kafka bytes seldom do)
            if data.get(1) == Some(&3) && looks_like_tls(data) {
                link.handed = true;
            }
        }
        if link.handed {
            let (now, now_ts) = (self.now, self.now_ts);
            self.touch(conn);
            self.out.push(Out::Data {
                conn,
                dir: d,
                offset: off,
                data: data.to_vec(),
                ts,
                index,
                now,
                now_ts,
            });
            return;
        }
        self.touch(conn);
        self.frames_of(conn, d, |fr, judge, out| {
            fr.data(off, data, ts, index, judge, out)
        });
    }

    #[allow(clippy::too_many_arguments)]
    fn gap(
        &mut self,
        conn: u64,
        d: u8,
        off: i64,
        length: u64,
        ts: f64,
        index: u64,
        reason: &'static str,
    ) {
        let st = self.state(conn);
        if matches!(st.link.detect, Detect::Unidentified) {
            self.touch(conn);
            return;
        }
        if st.link.handed {
            let (now, now_ts) = (self.now, self.now_ts);
            self.touch(conn);
            self.out.push(Out::Gap {
                conn,
                dir: d,
                offset: off,
                length,
                ts,
                index,
                reason,
                now,
                now_ts,
            });
            return;
        }
        self.touch(conn);
        self.counts.gaps += 1;
        self.counts.gap_bytes += length;
        self.frames_of(conn, d, |fr, judge, out| {
            fr.gap(off, length, ts, index, judge, out)
        });
    }

    /// Feed direction `d`'s framer (made at its first use) through `f`, then pair the
    /// frames it cut in order: a framer judges all the frames of one segment on the
    /// connection's state as the segment found it.
    fn frames_of(
        &mut self,
        conn: u64,
        d: u8,
        f: impl FnOnce(&mut Framer, &mut ConnJudge<'_>, &mut Vec<Frame>),
    ) {
        let max = self.cfg.max_frame_size;
        let st = self
            .states
            .get_mut(&conn)
            .expect("state made by the caller");
        let min = if st.link.sasl_raw { 0 } else { 2 };
        let fr = st.framers[d as usize].get_or_insert_with(|| Framer::new(d, max, min, PEEK));
        let mut judge = ConnJudge {
            link: &st.link,
            dir: d,
            table: &self.cfg.table,
            ports: &self.cfg.ports,
        };
        let mut frames = Vec::new();
        f(fr, &mut judge, &mut frames);
        for frame in frames {
            self.frame(conn, frame);
        }
    }

    /// A direction (`dir`) or the whole connection (`None`) ended.
    pub fn end(&mut self, conn: u64, dir: Option<u8>, reason: &'static str) {
        self.state(conn);
        match dir {
            None => {
                self.close(conn, reason);
                self.conns.remove(&conn);
            }
            Some(d) => self.finish_direction(conn, d),
        }
    }

    /// Plaintext of a handed connection (TLS decrypted by the front).
    #[allow(clippy::too_many_arguments)]
    pub fn plain(
        &mut self,
        conn: u64,
        d: u8,
        off: i64,
        data: &[u8],
        ts: f64,
        index: u64,
        client_dir: Option<u8>,
    ) {
        let st = self.state(conn);
        if matches!(st.link.detect, Detect::Unidentified) {
            self.skip_unidentified(data.len() as u64);
            return;
        }
        if client_dir.is_some() {
            st.link.client_dir = client_dir;
        }
        self.frames_of(conn, d, |fr, judge, out| {
            fr.data(off, data, ts, index, judge, out)
        });
    }

    /// A handed connection the front does not decrypt: what its framers held is
    /// skipped, not framed.
    pub fn ignore(&mut self, conn: u64, client_dir: Option<u8>) {
        let st = self.state(conn);
        st.link.ignored = true;
        st.link.protocol = Protocol::Tls;
        if client_dir.is_some() {
            st.link.client_dir = client_dir;
        }
        if let Detect::Held(h) = std::mem::replace(&mut st.link.detect, Detect::Encrypted) {
            self.add_held_counts(&h);
        }
        for d in 0..2u8 {
            self.collect(conn, d);
            if let Some(st) = self.states.get_mut(&conn) {
                st.framers[d as usize] = None;
            }
        }
    }

    /// Direction `d` ended: a framer holding bytes or counts cuts what it holds (unless the
    /// connection is ignored) and adds its counts. A direction mostly ends at a frame
    /// boundary with nothing held or skipped: then there is nothing to finish.
    fn finish_direction(&mut self, conn: u64, d: u8) {
        let Some(st) = self.states.get(&conn) else {
            return;
        };
        if !st.framers[d as usize].as_ref().is_some_and(|f| f.holds()) {
            return;
        }
        if !st.link.ignored {
            self.frames_of(conn, d, |fr, judge, out| fr.finish(judge, out));
        }
        self.collect(conn, d);
    }

    /// Add a framer's skipped bytes and limit hits to the counts.
    fn collect(&mut self, conn: u64, d: u8) {
        let Some(st) = self.states.get_mut(&conn) else {
            return;
        };
        if let Some(fr) = st.framers[d as usize].as_mut() {
            let (skipped, over) = fr.take_skipped();
            let (into, overs) = match &mut st.link.detect {
                Detect::Held(h) => (&mut h.skipped, &mut h.over_max_frames),
                _ => (
                    &mut self.counts.bytes_skipped,
                    &mut self.counts.over_max_frames,
                ),
            };
            for (reason, n) in skipped {
                if n > 0 {
                    *into.entry(reason).or_insert(0) += n;
                }
            }
            *overs += over;
        }
    }

    /// Requests older than `timeout` seconds at `now` become unanswered exchanges.
    pub fn expire(&mut self, now: f64, timeout: f64) {
        let mut ids: Vec<(u64, u64)> = self
            .states
            .iter()
            .map(|(id, st)| (st.link.order, *id))
            .collect();
        ids.sort_unstable();
        let why = format!("no response after {} s", fmt_g(timeout));
        for (_, id) in ids {
            let st = self.states.get_mut(&id).expect("listed above");
            let mut expired = Vec::new();
            for cid in st.link.inflight_order() {
                while st
                    .link
                    .inflight
                    .get(&cid)
                    .is_some_and(|(_, p)| now - p.frame.last_ts > timeout)
                {
                    let p = st.link.pop_pending(Some(cid)).expect("present");
                    expired.push(p);
                }
            }
            while st
                .link
                .fifo
                .front()
                .is_some_and(|p| now - p.frame.last_ts > timeout)
            {
                expired.push(st.link.fifo.pop_front().expect("present"));
            }
            for p in expired {
                self.unanswered(id, p, why.clone());
            }
        }
    }

    // -- frames -------------------------------------------------------------------------

    fn set_min_frame(&mut self, conn: u64, n: u32, dir: Option<u8>) {
        if let Some(st) = self.states.get_mut(&conn) {
            for (i, fr) in st.framers.iter_mut().enumerate() {
                if let Some(fr) = fr {
                    if dir.is_none_or(|d| d as usize == i) {
                        fr.set_min_frame_size(n);
                    }
                }
            }
        }
    }

    fn link(&mut self, conn: u64) -> &mut Link {
        &mut self
            .states
            .get_mut(&conn)
            .expect("a connection with state")
            .link
    }

    /// Pair one frame: a 0.8+ request waits for its response (by correlation id); a
    /// response makes the exchange with its request.
    fn frame(&mut self, conn: u64, frame: Frame) {
        // (judged not Kafka while its framer still held frames; or undecided, holding
        // more than an undecided connection may)
        let total = self.held_bytes;
        let (unidentified, over) = match &self.link(conn).detect {
            Detect::Unidentified => (true, false),
            Detect::Held(h) => (
                false,
                h.bytes > evidence::MAX_HELD_BYTES || total > evidence::MAX_HELD_TOTAL,
            ),
            _ => (false, false),
        };
        if over {
            self.unidentified(conn);
        }
        if unidentified || over {
            self.skip_unidentified(4 + frame.data.len() as u64);
            return;
        }
        let Some(response) = self.frame_kind(conn, &frame) else {
            // (a pre-0.8 frame)
            self.legacy(conn, frame);
            return;
        };
        if response {
            if self.link(conn).tokens_waiting() {
                self.sasl_token_response(conn, frame);
                return;
            }
            let cid = kafka::response_correlation_id(&frame.data);
            let link = self.link(conn);
            // (a response pairs only with a request that came before it)
            let before = cid
                .and_then(|c| link.inflight.get(&c))
                .map(|(_, p)| p.frame.last_index < frame.last_index);
            let p = if before == Some(true) {
                link.pop_pending(cid)
            } else {
                None
            };
            let Some(p) = p else {
                let mut rec = self.rec(conn, Kind::Orphan, Status::OrphanResponse);
                rec.correlation_id = cid;
                rec.response = Some(frame);
                rec.note = Some(if before == Some(false) {
                    "response captured before the request with its correlation id".into()
                } else {
                    "response whose request was not captured".into()
                });
                if before == Some(false) {
                    self.note(conn, "responses before their request");
                }
                self.emit(rec);
                return;
            };
            let link = self.link(conn);
            if link
                .inflight
                .values()
                .map(|(_, x)| x.frame.last_index)
                .min()
                .is_some_and(|m| m < p.frame.last_index)
            {
                self.note(conn, "responses out of request order");
            }
            let h = p.header.expect("a 0.8+ request in flight has its header");
            let sasl = h.api_key == kafka::SASL_HANDSHAKE;
            let handshake = if sasl {
                Some((
                    h.api_version,
                    kafka::sasl_handshake_mechanism(&p.frame.data, &h),
                    kafka::response_error_code(&frame.data, 4),
                ))
            } else {
                None
            };
            let mut rec = self.rec(conn, Kind::Kafka, Status::Ok);
            rec.correlation_id = Some(h.correlation_id);
            rec.header = Some(h);
            rec.request = Some(p.frame);
            rec.response = Some(frame);
            self.emit(rec);
            if let Some((version, mechanism, error)) = handshake {
                self.after_sasl_handshake(conn, version, mechanism, error);
            }
            return;
        }
        // a request
        if self.link(conn).sasl_raw && self.sasl_token_request(conn, &frame) {
            let link = self.link(conn);
            link.sasl_tokens_left -= 1;
            link.fifo.push_back(Pending {
                frame,
                header: None,
                legacy_type: None,
                sasl_token: true,
            });
            return;
        }
        let table = &self.cfg.table;
        let h = kafka::parse_request_header(table, &frame.data, frame.truncated)
            .or_else(|| kafka::sane_request(table, &frame.data, frame.size as usize));
        let Some(h) = h else {
            let mut rec = self.rec(conn, Kind::NotRequest, Status::Malformed);
            rec.request = Some(frame);
            self.emit(rec);
            return;
        };
        let cid = h.correlation_id;
        if h.api_key == PRODUCE && kafka::produce_acks(&frame.data, &h) == Some(0) {
            let mut rec = self.rec(conn, Kind::Kafka, Status::NoResponseExpected);
            rec.correlation_id = Some(cid);
            rec.header = Some(h);
            rec.request = Some(frame);
            self.emit(rec);
            return;
        }
        let link = self.link(conn);
        link.last_cid = Some(cid);
        let p = Pending {
            frame,
            header: Some(h),
            legacy_type: None,
            sasl_token: false,
        };
        if let std::collections::hash_map::Entry::Vacant(e) = link.inflight.entry(cid) {
            link.key_seq += 1;
            e.insert((link.key_seq, p));
        } else {
            link.reused.entry(cid).or_default().push_back(p);
            self.note(conn, "correlation id reused while in flight");
        }
    }

    /// Count a frame and decide the client side and protocol if not yet: `Some(true)`
    /// for a 0.8+ response, `Some(false)` for a 0.8+ request, None for a pre-0.8 frame.
    fn frame_kind(&mut self, conn: u64, frame: &Frame) -> Option<bool> {
        let forced = self.cfg.forced;
        let table = &self.cfg.table;
        let link = &mut self.states.get_mut(&conn).expect("state").link;
        // (an undecided connection's counts are held with its records)
        let counts = match &mut link.detect {
            Detect::Held(h) => {
                h.bytes += frame.data.len();
                self.held_bytes += frame.data.len();
                (
                    &mut h.request_frames,
                    &mut h.response_frames,
                    &mut h.truncated_frames,
                )
            }
            _ => (
                &mut self.counts.request_frames,
                &mut self.counts.response_frames,
                &mut self.counts.truncated_frames,
            ),
        };
        let (request_frames, response_frames, truncated_frames) = counts;
        if frame.truncated {
            *truncated_frames += 1;
        }
        let modern = || {
            !matches!(
                kafka::plausible_request(table, &frame.data, frame.truncated),
                HeaderCheck::Rejected
            )
        };
        let client_dir = match link.client_dir {
            Some(c) => c,
            None => {
                let c = if modern() || legacy::legacy_request_score(&frame.data, true) >= 50 {
                    frame.dir
                } else {
                    // a response before any request (mid-stream start): the other side is the client
                    1 - frame.dir
                };
                link.client_dir = Some(c);
                c
            }
        };
        if frame.dir == client_dir {
            *request_frames += 1;
            if link.protocol == Protocol::Undecided {
                // the connection's first request decides its protocol
                link.protocol = match forced {
                    Forced::Legacy => Protocol::Legacy,
                    Forced::Modern => Protocol::Kafka,
                    Forced::Auto => {
                        let score = legacy::legacy_request_score(&frame.data, true);
                        if modern() && score < 80 {
                            Protocol::Kafka
                        } else if score >= 50 {
                            Protocol::Legacy
                        } else {
                            Protocol::Kafka
                        }
                    }
                };
            }
            if link.protocol == Protocol::Legacy {
                return None;
            }
            return Some(false);
        }
        *response_frames += 1;
        if link.protocol == Protocol::Legacy {
            return None;
        }
        if link.protocol == Protocol::Undecided {
            link.responses_only = true;
        }
        Some(true)
    }

    /// A frame of a pre-0.8 connection: requests wait in order; responses take the oldest.
    fn legacy(&mut self, conn: u64, frame: Frame) {
        let link = self.link(conn);
        if Some(frame.dir) == link.client_dir {
            let rtype =
                (frame.data.len() >= 2).then(|| i16::from_be_bytes([frame.data[0], frame.data[1]]));
            if let Some(t) = rtype {
                if legacy::legacy_expects_response(t as i32) {
                    link.fifo.push_back(Pending {
                        frame,
                        header: None,
                        legacy_type: Some(t),
                        sasl_token: false,
                    });
                    return;
                }
            }
            let known = rtype.is_some_and(|t| (0..=4).contains(&t));
            let status = if known {
                Status::NoResponseExpected
            } else {
                Status::Malformed
            };
            let mut rec = self.rec(conn, Kind::Legacy, status);
            rec.legacy_type = rtype;
            rec.request = Some(frame);
            self.emit(rec);
            return;
        }
        match link.fifo.pop_front() {
            None => {
                let mut rec = self.rec(conn, Kind::Legacy, Status::OrphanResponse);
                rec.response = Some(frame);
                rec.note = Some("response whose request was not captured".into());
                self.emit(rec);
            }
            Some(p) => {
                let mut rec = self.rec(conn, Kind::Legacy, Status::Ok);
                rec.legacy_type = Some(p.legacy_type.unwrap_or(-1));
                rec.request = Some(p.frame);
                rec.response = Some(frame);
                self.emit(rec);
            }
        }
    }

    // -- SASL ---------------------------------------------------------------------------

    fn after_sasl_handshake(
        &mut self,
        conn: u64,
        version: i16,
        mechanism: Option<String>,
        error: Option<i16>,
    ) {
        let link = self.link(conn);
        if mechanism.is_some() {
            link.sasl_mechanism = mechanism;
        }
        if version == 0 && error.is_none_or(|e| e == 0) {
            link.sasl_raw = true;
            let mech = link.sasl_mechanism.as_deref().unwrap_or("").to_uppercase();
            link.sasl_tokens_left = if mech == "PLAIN" {
                1
            } else if mech.starts_with("SCRAM-") {
                2
            } else {
                -1
            };
            // raw SASL tokens may be empty
            self.set_min_frame(conn, 0, None);
        }
    }

    /// A client frame after SaslHandshake v0: true if it is a raw SASL token (the caller
    /// queues it for the broker's), false once authentication is over (Kafka requests
    /// again).
    fn sasl_token_request(&mut self, conn: u64, frame: &Frame) -> bool {
        let table = &self.cfg.table;
        let link = &mut self.states.get_mut(&conn).expect("state").link;
        let over = link.sasl_tokens_left == 0
            || (link.sasl_tokens_left < 0
                && !matches!(
                    kafka::plausible_request(table, &frame.data, false),
                    HeaderCheck::Rejected
                ));
        if !over {
            return true;
        }
        // authentication is over: Kafka requests again; the broker's side stays raw
        // until it has answered the tokens still waiting
        link.sasl_raw = false;
        let dir = if link.tokens_waiting() {
            Some(frame.dir)
        } else {
            None
        };
        self.set_min_frame(conn, 2, dir);
        false
    }

    fn sasl_token_response(&mut self, conn: u64, frame: Frame) {
        let link = self.link(conn);
        let p = link.fifo.pop_front().expect("a token waits");
        let reset = !link.sasl_raw && link.fifo.is_empty();
        let mechanism = link.sasl_mechanism.clone();
        if reset {
            // the last token the client sent before its Kafka requests: the broker's
            // side answers those now
            self.set_min_frame(conn, 2, None);
        }
        let mut rec = self.rec(conn, Kind::SaslToken, Status::Ok);
        rec.request = Some(p.frame);
        rec.response = Some(frame);
        rec.mechanism = mechanism;
        self.emit(rec);
    }

    // -- endings ------------------------------------------------------------------------

    fn unanswered(&mut self, conn: u64, p: Pending, why: String) {
        let link = self.link(conn);
        let legacy_conn = link.protocol == Protocol::Legacy;
        let mechanism = link.sasl_mechanism.clone();
        let mut rec = if p.sasl_token {
            let mut r = self.rec(conn, Kind::SaslToken, Status::Unanswered);
            r.mechanism = mechanism;
            r
        } else if legacy_conn {
            let mut r = self.rec(conn, Kind::Legacy, Status::Unanswered);
            r.legacy_type = p.legacy_type;
            r
        } else {
            let mut r = self.rec(conn, Kind::Kafka, Status::Unanswered);
            r.correlation_id = p.header.as_ref().map(|h| h.correlation_id);
            r.header = p.header;
            r
        };
        rec.request = Some(p.frame);
        rec.note = Some(why);
        self.emit(rec);
    }

    fn close(&mut self, conn: u64, reason: &'static str) {
        if !self.states.contains_key(&conn) {
            return;
        }
        for d in 0..2u8 {
            self.finish_direction(conn, d);
        }
        let link = &mut self.states.get_mut(&conn).expect("present").link;
        let why = if reason == "end of capture" {
            "connection ended (end of capture)".to_string()
        } else {
            format!("connection closed ({reason})")
        };
        let mut pending: Vec<Pending> = Vec::new();
        for cid in link.inflight_order() {
            let (_, p) = link.inflight.remove(&cid).expect("listed");
            pending.push(p);
            if let Some(q) = link.reused.remove(&cid) {
                pending.extend(q);
            }
        }
        pending.extend(link.fifo.drain(..));
        pending.sort_by_key(|p| p.frame.last_index);
        // (the unanswered exchanges are made with the state still there)
        for p in pending {
            self.unanswered(conn, p, why.clone());
        }
        self.decide(conn, true);
        let link = &self.states.get(&conn).expect("present").link;
        let unidentified = matches!(link.detect, Detect::Unidentified);
        let closed = Closed {
            conn,
            protocol: if unidentified {
                Protocol::Undecided
            } else {
                link.protocol
            },
            client_dir: link.client_dir,
            responses_only: link.responses_only && !unidentified,
            any_data: link.first_data_seen[0] || link.first_data_seen[1],
            handed: link.handed,
            detection: link.detect.describe(),
        };
        self.states.remove(&conn);
        self.out.push(Out::Closed(closed));
    }

    // -- evidence -----------------------------------------------------------------------

    /// Count a note: held with an undecided connection's records.
    fn note(&mut self, conn: u64, name: &'static str) {
        let into = match self.states.get_mut(&conn).map(|st| &mut st.link.detect) {
            Some(Detect::Held(h)) => &mut h.notes,
            _ => &mut self.counts.notes,
        };
        *into.entry(name).or_insert(0) += 1;
    }

    fn skip_unidentified(&mut self, n: u64) {
        if n > 0 {
            *self
                .counts
                .bytes_skipped
                .entry(evidence::UNIDENTIFIED)
                .or_insert(0) += n;
        }
    }

    /// The counts an undecided connection held, added as they are (it is Kafka, or TLS);
    /// its frames held no more.
    fn add_held_counts(&mut self, h: &Held) {
        self.held_bytes -= h.bytes;
        let c = &mut self.counts;
        c.request_frames += h.request_frames;
        c.response_frames += h.response_frames;
        c.truncated_frames += h.truncated_frames;
        c.over_max_frames += h.over_max_frames;
        for (k, n) in &h.skipped {
            *c.bytes_skipped.entry(k).or_insert(0) += n;
        }
        for (k, n) in &h.notes {
            *c.notes.entry(k).or_insert(0) += n;
        }
    }

    /// Judge an undecided connection on its evidence so far (`at_end`: it ended): Kafka,
    /// with its held records let go in order; unidentified (at its end, or when it holds
    /// too much); or still undecided.
    fn decide(&mut self, conn: u64, at_end: bool) {
        let Some(st) = self.states.get_mut(&conn) else {
            return;
        };
        let Detect::Held(h) = &st.link.detect else {
            return;
        };
        let ev = &h.evidence;
        let full = h.recs.len() > evidence::MAX_HELD
            || h.bytes > evidence::MAX_HELD_BYTES
            || self.held_bytes > evidence::MAX_HELD_TOTAL;
        if ev.confirmed() || (at_end && ev.confirmed_at_end()) {
            let why = ev.describe();
            let Detect::Held(h) = std::mem::replace(&mut st.link.detect, Detect::Kafka(why)) else {
                unreachable!("matched above")
            };
            self.add_held_counts(&h);
            self.out.extend(h.recs.into_iter().map(Out::Exchange));
        } else if at_end || full {
            self.unidentified(conn);
        }
    }

    /// Not Kafka: the records held go, and every byte of the connection, framed or not, is
    /// counted as unidentified; its framers go too (what comes after is counted as it comes).
    fn unidentified(&mut self, conn: u64) {
        for d in 0..2u8 {
            self.collect(conn, d);
        }
        let Some(st) = self.states.get_mut(&conn) else {
            return;
        };
        let Detect::Held(h) = std::mem::replace(&mut st.link.detect, Detect::Unidentified) else {
            return;
        };
        self.held_bytes -= h.bytes;
        let link = &mut st.link;
        let frame_bytes = |f: &Frame| 4 + f.data.len() as u64;
        let mut n: u64 = h.skipped.values().sum();
        for r in &h.recs {
            n += r
                .request
                .iter()
                .chain(r.response.iter())
                .map(frame_bytes)
                .sum::<u64>();
        }
        for (_, (_, p)) in link.inflight.drain() {
            n += frame_bytes(&p.frame);
        }
        for p in link
            .reused
            .drain()
            .flat_map(|(_, q)| q)
            .chain(link.fifo.drain(..))
        {
            n += frame_bytes(&p.frame);
        }
        for fr in st.framers.iter_mut() {
            if let Some(f) = fr.take() {
                n += f.buffered() as u64;
            }
        }
        self.skip_unidentified(n);
    }

    // -- records ------------------------------------------------------------------------

    fn rec(&self, conn: u64, kind: Kind, status: Status) -> Box<ExchangeRec> {
        let link = &self.states.get(&conn).expect("state").link;
        Box::new(ExchangeRec {
            conn,
            now: self.now,
            kind,
            status,
            header: None,
            legacy_type: None,
            correlation_id: None,
            request: None,
            response: None,
            note: None,
            mechanism: None,
            client_dir: link.client_dir,
            protocol: link.protocol,
            last_ts: link.last_ts,
        })
    }

    /// An exchange for the front, or held with its undecided connection's evidence.
    fn emit(&mut self, rec: Box<ExchangeRec>) {
        let conn = rec.conn;
        let held = self
            .states
            .get(&conn)
            .is_some_and(|st| matches!(st.link.detect, Detect::Held(_)));
        if !held {
            self.out.push(Out::Exchange(rec));
            return;
        }
        let proof = match &self.cfg.schema {
            // (a walk that panicked elsewhere left its plans as they were: still usable)
            Some(w) => {
                let mut w = w.lock().unwrap_or_else(|e| e.into_inner());
                evidence::judge(&rec, &self.cfg.table, Some(&mut w))
            }
            None => evidence::judge(&rec, &self.cfg.table, None),
        };
        let st = self.states.get_mut(&conn).expect("held above");
        if let Detect::Held(h) = &mut st.link.detect {
            h.evidence.add(proof);
            h.recs.push(rec);
        }
        self.decide(conn, false);
    }
}

/// A TLS record header: content type 20-23, major version 3, minor 0-4.
pub fn looks_like_tls(data: &[u8]) -> bool {
    data.len() >= 3 && (0x14..=0x17).contains(&data[0]) && data[1] == 3 && data[2] <= 4
}

/// Python's `f"{x:g}"` for the timeouts a user gives (six significant digits).
fn fmt_g(x: f64) -> String {
    if x == x.trunc() && x.abs() < 1e6 {
        format!("{}", x as i64)
    } else {
        let s = format!("{x:.6}");
        let s = s.trim_end_matches('0').trim_end_matches('.');
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table that knows ApiVersions (18) v0-4, Metadata (3) v0-12, Produce (0) v0-11 and
    /// SaslHandshake (17) v0-1, flexible where Kafka's are.
    fn table() -> ApiTable {
        let hv = |max: i16, flex: i16| -> Vec<u8> {
            (0..=max).map(|v| if v >= flex { 2 } else { 1 }).collect()
        };
        ApiTable::new(vec![
            (0, 11, 19, hv(11, 9)),
            (3, 12, 20, hv(12, 9)),
            (17, 1, 9, hv(1, 99)),
            (18, 4, 12, hv(4, 3)),
        ])
        .expect("a valid table")
    }

    fn pairing(forced: Forced) -> Pairing {
        Pairing::new(PairConfig {
            ports: vec![9092],
            forced,
            max_frame_size: 1 << 20,
            table: table(),
            schema: None,
        })
    }

    fn conn(syn_seen: bool) -> Conn {
        Conn {
            id: 1,
            a: ("10.0.0.1".parse().unwrap(), 40000),
            b: ("10.0.0.2".parse().unwrap(), 9092),
            syn_seen,
            closed: None,
            first_ts: 0.0,
            last_ts: 0.0,
            closed_by: None,
            lost_from: 0,
        }
    }

    fn frame(body: &[u8]) -> Vec<u8> {
        let mut v = (body.len() as u32).to_be_bytes().to_vec();
        v.extend_from_slice(body);
        v
    }

    /// A v1-header request (non-flexible versions).
    fn request(key: i16, version: i16, cid: i32, client: &str, body: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&key.to_be_bytes());
        b.extend_from_slice(&version.to_be_bytes());
        b.extend_from_slice(&cid.to_be_bytes());
        b.extend_from_slice(&(client.len() as i16).to_be_bytes());
        b.extend_from_slice(client.as_bytes());
        b.extend_from_slice(body);
        frame(&b)
    }

    /// A SaslHandshake request body naming PLAIN.
    fn plain_mechanism() -> Vec<u8> {
        let mut b = 5i16.to_be_bytes().to_vec();
        b.extend_from_slice(b"PLAIN");
        b
    }

    fn response(cid: i32, body: &[u8]) -> Vec<u8> {
        let mut b = cid.to_be_bytes().to_vec();
        b.extend_from_slice(body);
        frame(&b)
    }

    /// Feed `(dir, bytes)` segments of one connection, one packet each, then end it.
    fn run(p: &mut Pairing, syn: bool, segs: &[(u8, Vec<u8>)]) -> Vec<ExchangeRec> {
        feed(p, syn, segs);
        p.out
            .drain(..)
            .filter_map(|o| match o {
                Out::Exchange(r) => Some(*r),
                _ => None,
            })
            .collect()
    }

    /// `run`, its records left in `p.out`.
    fn feed(p: &mut Pairing, syn: bool, segs: &[(u8, Vec<u8>)]) {
        let c = conn(syn);
        p.event(Event::Open(&c));
        let mut off = [0i64; 2];
        for (i, (d, data)) in segs.iter().enumerate() {
            p.now = i as u64 + 1;
            p.now_ts = i as f64;
            p.event(Event::Data {
                conn: 1,
                dir: *d,
                offset: off[*d as usize],
                data,
                ts: i as f64,
                index: i as u64 + 1,
            });
            off[*d as usize] += data.len() as i64;
        }
        p.now = END_OF_CAPTURE;
        p.event(Event::End {
            conn: 1,
            dir: None,
            reason: "end of capture",
            ts: 9.0,
            index: 0,
        });
    }

    /// Bytes of connection 1 in direction `d` at stream offset `offset`, from packet `index`.
    fn deliver(p: &mut Pairing, d: u8, offset: i64, data: &[u8], index: u64) {
        p.event(Event::Data {
            conn: 1,
            dir: d,
            offset,
            data,
            ts: index as f64,
            index,
        });
    }

    fn sig(r: &ExchangeRec) -> (Kind, Status, Option<i16>, Option<i32>) {
        (
            r.kind,
            r.status,
            r.header.as_ref().map(|h| h.api_key).or(r.legacy_type),
            r.correlation_id,
        )
    }

    #[test]
    fn requests_pair_by_correlation_id_in_any_order() {
        let mut p = pairing(Forced::Auto);
        let got = run(
            &mut p,
            true,
            &[
                (0, request(18, 0, 1, "c", b"")),
                (0, request(3, 1, 2, "c", &[0, 0, 0, 0])),
                (1, response(2, &[0; 8])),
                (1, response(1, &[0; 6])),
                (1, response(77, &[0; 6])),
            ],
        );
        let s: Vec<_> = got.iter().map(sig).collect();
        assert_eq!(
            s,
            vec![
                (Kind::Kafka, Status::Ok, Some(3), Some(2)),
                (Kind::Kafka, Status::Ok, Some(18), Some(1)),
                (Kind::Orphan, Status::OrphanResponse, None, Some(77)),
            ]
        );
        assert_eq!(
            p.counts.notes.get("responses out of request order"),
            Some(&1)
        );
        assert_eq!((p.counts.request_frames, p.counts.response_frames), (2, 3));
        assert_eq!(got[0].protocol, Protocol::Kafka);
        assert_eq!(got[0].client_dir, Some(0));
    }

    #[test]
    fn a_reused_id_waits_behind_the_first_and_the_rest_are_unanswered_in_order() {
        let mut p = pairing(Forced::Auto);
        let got = run(
            &mut p,
            true,
            &[
                (0, request(18, 0, 5, "c", b"")),
                (0, request(18, 0, 5, "c", b"")),
                (0, request(18, 0, 6, "c", b"")),
                (1, response(5, &[0; 6])),
            ],
        );
        let s: Vec<_> = got.iter().map(sig).collect();
        assert_eq!(
            s,
            vec![
                (Kind::Kafka, Status::Ok, Some(18), Some(5)),
                (Kind::Kafka, Status::Unanswered, Some(18), Some(5)),
                (Kind::Kafka, Status::Unanswered, Some(18), Some(6)),
            ]
        );
        assert_eq!(got[1].request.as_ref().unwrap().last_index, 2);
        assert_eq!(
            got[1].note.as_deref(),
            Some("connection ended (end of capture)")
        );
        assert_eq!(
            p.counts.notes.get("correlation id reused while in flight"),
            Some(&1)
        );
    }

    #[test]
    fn produce_with_acks_0_expects_no_response() {
        let mut p = pairing(Forced::Auto);
        // Produce v2: acks -1... then acks 0
        let body = |acks: i16| {
            let mut b = acks.to_be_bytes().to_vec();
            b.extend_from_slice(&[0, 0, 0x27, 0x10, 0, 0, 0, 0]);
            b
        };
        let got = run(
            &mut p,
            true,
            &[
                (0, request(0, 2, 1, "p", &body(0))),
                (0, request(0, 2, 2, "p", &body(1))),
            ],
        );
        let s: Vec<_> = got.iter().map(|r| (r.status, r.correlation_id)).collect();
        assert_eq!(
            s,
            vec![
                (Status::NoResponseExpected, Some(1)),
                (Status::Unanswered, Some(2))
            ]
        );
    }

    #[test]
    fn the_client_side_comes_from_the_port_or_the_first_frame() {
        // no handshake, the broker on 9092: b (9092) receives requests, direction 0 is the client
        let mut p = pairing(Forced::Auto);
        // (an id whose bytes read as no request header: api_key 0x7f7f)
        let got = run(&mut p, false, &[(1, response(0x7f7f_0001, &[0; 6]))]);
        assert_eq!(got[0].client_dir, Some(0));
        assert_eq!(got[0].status, Status::OrphanResponse);
        // neither port is a Kafka port: a response first makes the other side the client
        let mut p = Pairing::new(PairConfig {
            ports: vec![1234],
            forced: Forced::Auto,
            max_frame_size: 1 << 20,
            table: table(),
            schema: None,
        });
        let lone = response(0x7f7f_0001, &[0; 6]);
        p.event(Event::Open(&conn(false)));
        deliver(&mut p, 1, 0, &lone, 1);
        p.end(1, None, "fin");
        // (a lone response is too thin to be Kafka on no --port port: its bytes are counted)
        assert!(!p.out.iter().any(|o| matches!(o, Out::Exchange(_))));
        let Some(Out::Closed(closed)) = p.out.last() else {
            panic!("closed")
        };
        assert_eq!(closed.client_dir, Some(0));
        assert_eq!(closed.protocol, Protocol::Undecided);
        assert_eq!(closed.detection, "unidentified");
        assert_eq!(
            p.counts.bytes_skipped.get(evidence::UNIDENTIFIED),
            Some(&(lone.len() as u64))
        );
        // a response whose bytes read as a request header is taken for one: its side is the client
        let mut p = pairing(Forced::Auto);
        let c = Conn {
            a: ("10.0.0.1".parse().unwrap(), 5555),
            b: ("10.0.0.2".parse().unwrap(), 6666),
            ..conn(false)
        };
        p.event(Event::Open(&c));
        p.now = 1;
        p.event(Event::Data {
            conn: 1,
            dir: 1,
            offset: 0,
            data: &response(4, &[0; 6]),
            ts: 0.0,
            index: 1,
        });
        p.end(1, None, "fin");
        let Some(Out::Closed(closed)) = p.out.last() else {
            panic!("closed")
        };
        assert_eq!(closed.client_dir, Some(1));
    }

    /// `run` on a connection between two ports that are no `--port` port: the exchanges,
    /// and how it ended.
    fn run_auto(segs: &[(u8, Vec<u8>)]) -> (Vec<ExchangeRec>, Closed, Counts) {
        let mut p = pairing(Forced::Auto);
        p.cfg.ports = vec![1];
        feed(&mut p, true, segs);
        let mut got = Vec::new();
        let mut closed = None;
        for o in p.out.drain(..) {
            match o {
                Out::Exchange(r) => got.push(*r),
                Out::Closed(c) => closed = Some(c),
                _ => {}
            }
        }
        (got, closed.expect("closed"), p.counts.clone())
    }

    #[test]
    fn on_no_kafka_port_two_answered_exchanges_make_kafka_and_nothing_is_lost() {
        let segs = vec![
            (1, response(7, &[0; 6])), // an orphan first: held, then let go in order
            (0, request(18, 3, 1, "c", &[0, 0])),
            (1, response(1, &[0; 6])),
            (0, request(3, 1, 2, "c", &[0; 4])),
            (1, response(2, &[0; 8])),
            (0, request(3, 1, 3, "c", &[0; 4])),
        ];
        let (got, closed, counts) = run_auto(&segs);
        assert_eq!(
            got.iter().map(sig).collect::<Vec<_>>(),
            [
                (Kind::Orphan, Status::OrphanResponse, None, Some(7)),
                (Kind::Kafka, Status::Ok, Some(18), Some(1)),
                (Kind::Kafka, Status::Ok, Some(3), Some(2)),
                (Kind::Kafka, Status::Unanswered, Some(3), Some(3)),
            ]
        );
        assert_eq!(closed.protocol, Protocol::Kafka);
        assert_eq!(closed.detection, "auto: 2 exchanges parsed and answered");
        assert_eq!((counts.request_frames, counts.response_frames), (3, 3));
        assert!(counts.bytes_skipped.is_empty());
    }

    #[test]
    fn on_no_kafka_port_one_answered_exchange_is_kafka_only_at_the_end() {
        let segs = vec![
            (0, request(18, 3, 1, "c", &[0, 0])),
            (1, response(1, &[0; 6])),
        ];
        let (got, closed, _) = run_auto(&segs);
        assert_eq!(got.len(), 1);
        assert_eq!(closed.detection, "auto: 1 exchange parsed and answered");
    }

    #[test]
    fn on_no_kafka_port_thin_or_bad_evidence_is_unidentified_tcp() {
        // every byte of an unidentified connection is counted as such, framed or not
        let unidentified = |segs: &[(u8, Vec<u8>)]| {
            let n: u64 = segs.iter().map(|(_, b)| b.len() as u64).sum();
            let (got, closed, counts) = run_auto(segs);
            assert!(got.is_empty());
            assert_eq!(closed.detection, "unidentified");
            assert!(!closed.responses_only);
            assert_eq!(counts.request_frames + counts.response_frames, 0);
            assert_eq!(counts.bytes_skipped.get(evidence::UNIDENTIFIED), Some(&n));
        };
        // requests alone, never answered: too thin
        let segs: Vec<(u8, Vec<u8>)> = (0..3)
            .map(|i| (0, request(3, 1, i, "c", &[0; 4])))
            .collect();
        unidentified(&segs);
        // more held than the bound allows: unidentified at once, the rest counted as it comes
        let segs: Vec<(u8, Vec<u8>)> = (0..evidence::MAX_HELD as i32 + 10)
            .map(|i| (1, response(i, &[0; 2])))
            .collect();
        unidentified(&segs);
        // requests never answered, more bytes than an undecided connection may hold: the
        // same, whatever comes after
        let big = vec![0u8; 1000 * 1000];
        let segs: Vec<(u8, Vec<u8>)> = (0..7)
            .map(|i| (0, request(3, 1, i, "c", &big)))
            .chain([(1, response(1, &[0; 6]))])
            .collect();
        unidentified(&segs);
    }

    #[test]
    fn a_response_pairs_only_with_a_request_that_came_before_it() {
        let mut p = pairing(Forced::Auto);
        let c = conn(true);
        p.event(Event::Open(&c));
        // the response's bytes come first (packet 1), the request with its id later (2)
        let resp = response(5, &[0; 6]);
        let req = request(18, 3, 5, "c", &[0, 0]);
        p.now = 2;
        deliver(&mut p, 0, 0, &req, 2);
        deliver(&mut p, 1, 0, &resp, 1);
        p.end(1, None, "fin");
        let got: Vec<_> = p
            .out
            .iter()
            .filter_map(|o| match o {
                Out::Exchange(r) => Some((r.status, r.note.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(got[0].0, Status::OrphanResponse);
        assert_eq!(
            got[0].1.as_deref(),
            Some("response captured before the request with its correlation id")
        );
        assert_eq!(got[1].0, Status::Unanswered);
        assert_eq!(
            p.counts.notes.get("responses before their request"),
            Some(&1)
        );
    }

    #[test]
    fn pre_08_requests_pair_in_order_and_produce_gets_no_response() {
        let mut p = pairing(Forced::Legacy);
        // FETCH (1): topic "t", partition 0, offset 0, max size 100
        let mut fetch = vec![0, 1, 0, 1, b't', 0, 0, 0, 0];
        fetch.extend_from_slice(&[0; 8]);
        fetch.extend_from_slice(&[0, 0, 0, 100]);
        // PRODUCE (0): topic "t", partition 0, an empty message set
        let produce = vec![0, 0, 0, 1, b't', 0, 0, 0, 0, 0, 0, 0, 0];
        let got = run(
            &mut p,
            true,
            &[
                (0, frame(&fetch)),
                (0, frame(&produce)),
                (1, frame(&[0, 0])),
            ],
        );
        let s: Vec<_> = got.iter().map(sig).collect();
        assert_eq!(
            s,
            vec![
                (Kind::Legacy, Status::NoResponseExpected, Some(0), None),
                (Kind::Legacy, Status::Ok, Some(1), None),
            ]
        );
        assert_eq!(got[1].protocol, Protocol::Legacy);
    }

    #[test]
    fn raw_sasl_tokens_follow_a_sasl_handshake_v0_then_kafka_again() {
        let mut p = pairing(Forced::Auto);
        let mech = plain_mechanism();
        let got = run(
            &mut p,
            true,
            &[
                (0, request(17, 0, 1, "c", &mech)),
                (1, response(1, &[0, 0, 0, 0, 0, 0])),
                (0, frame(b"\0alice\0pw")),
                (1, frame(b"")),
                (0, request(18, 0, 2, "c", b"")),
                (1, response(2, &[0; 6])),
            ],
        );
        let s: Vec<_> = got.iter().map(sig).collect();
        assert_eq!(
            s,
            vec![
                (Kind::Kafka, Status::Ok, Some(17), Some(1)),
                (Kind::SaslToken, Status::Ok, None, None),
                (Kind::Kafka, Status::Ok, Some(18), Some(2)),
            ]
        );
        assert_eq!(got[1].mechanism.as_deref(), Some("PLAIN"));
        assert_eq!(got[1].response.as_ref().unwrap().data, b"");
    }

    #[test]
    fn a_failed_handshake_keeps_kafka_framing() {
        let mut p = pairing(Forced::Auto);
        let mech = plain_mechanism();
        let got = run(
            &mut p,
            true,
            &[
                (0, request(17, 0, 1, "c", &mech)),
                // UNSUPPORTED_SASL_MECHANISM (33)
                (1, response(1, &[0, 33, 0, 0, 0, 0])),
                (0, request(18, 0, 2, "c", b"")),
                (1, response(2, &[0; 6])),
            ],
        );
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].correlation_id, Some(2));
    }

    #[test]
    fn expire_makes_old_requests_unanswered() {
        let mut p = pairing(Forced::Auto);
        let c = conn(true);
        p.event(Event::Open(&c));
        let reqs = [request(18, 0, 1, "c", b""), request(18, 0, 2, "c", b"")];
        let mut off = 0;
        for (i, r) in reqs.iter().enumerate() {
            p.now = i as u64 + 1;
            p.event(Event::Data {
                conn: 1,
                dir: 0,
                offset: off,
                data: r,
                ts: 10.0 * i as f64,
                index: i as u64 + 1,
            });
            off += r.len() as i64;
        }
        p.expire(11.0, 2.5);
        let got: Vec<_> = p
            .out
            .drain(..)
            .filter_map(|o| match o {
                Out::Exchange(r) => Some(*r),
                _ => None,
            })
            .collect();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].correlation_id, Some(1));
        assert_eq!(got[0].note.as_deref(), Some("no response after 2.5 s"));
    }

    #[test]
    fn tls_first_bytes_hand_the_connection_over() {
        let mut p = pairing(Forced::Auto);
        let c = conn(true);
        p.event(Event::Open(&c));
        p.event(Event::Data {
            conn: 1,
            dir: 0,
            offset: 0,
            data: &[0x16, 3, 1, 0, 5, 1, 0, 0, 1, 0],
            ts: 0.0,
            index: 1,
        });
        assert!(matches!(p.out.last(), Some(Out::Data { .. })));
        p.event(Event::End {
            conn: 1,
            dir: None,
            reason: "fin",
            ts: 1.0,
            index: 2,
        });
        assert!(matches!(p.out.last(), Some(Out::End { dir: None, .. })));
        assert_eq!(p.open_states(), 1);
        p.ignore(1, Some(0));
        p.end(1, None, "fin");
        assert!(matches!(
            p.out.last(),
            Some(Out::Closed(Closed {
                protocol: Protocol::Tls,
                handed: true,
                ..
            }))
        ));
        assert_eq!(p.open_states(), 0);
    }

    #[test]
    fn judge_before_the_protocol_is_decided() {
        // a 0.8+ header, a pre-0.8 fetch peek (no version 80), and neither
        let t = table();
        let link = pairing(Forced::Auto);
        let mut p = link;
        p.event(Event::Open(&conn(true)));
        let st = p.state(1);
        let j = ConnJudge {
            link: &st.link,
            dir: 0,
            table: &t,
            ports: &[9092],
        };
        assert_eq!(
            j.undecided_request(b"\x00\x12\x00\x00\x00\x00\x00\x01\x00\x03abc"),
            Verdict::Strong
        );
        let mut fetch = b"\x00\x01\x00\x50".to_vec();
        fetch.extend_from_slice(&[b't'; 60]);
        assert_eq!(j.undecided_request(&fetch), Verdict::Yes);
        assert_eq!(
            j.undecided_request(b"\x7f\x7f\x00\x00\x00\x00\x00\x01"),
            Verdict::No
        );
    }

    /// Bytes reassembly gave the stage: counted on their way in.
    struct Tee {
        pair: Pairing,
        delivered: u64,
    }

    impl Sink for Tee {
        fn event(&mut self, ev: Event<'_>) {
            match &ev {
                Event::Data { data, .. } => self.delivered += data.len() as u64,
                Event::Gap { length, .. } => self.delivered += *length,
                _ => {}
            }
            self.pair.event(ev);
        }
    }

    #[test]
    fn bytes_after_a_fin_are_counted() {
        // found by the `pair` fuzz target: a direction's bytes 8 MB past its FIN (a lost
        // segment, then data) came after the framer had finished and were in no count
        use crate::capture::CaptureReader;
        use crate::net;
        let file = include_bytes!("../testdata/bytes_after_fin.pcap");
        let src = Box::new(std::io::Cursor::new(file.to_vec()));
        let mut r = CaptureReader::from_reader("t", src, file.len() as u64, false).unwrap();
        let mut ra = crate::tcp::Reassembler::new(crate::tcp::Config::default());
        let mut pair = pairing(Forced::Auto);
        pair.cfg.ports = vec![48497];
        let mut tee = Tee { pair, delivered: 0 };
        while let Ok(Some(p)) = r.next_packet() {
            if let Ok(seg) = net::parse(p.linktype, p.data, p.orig_len) {
                ra.segment(&seg, p.ts, p.index, &mut tee);
            }
        }
        ra.finish(None, &mut tee);
        assert_eq!(tee.pair.open_states(), 0);
        let mut framed = 0;
        for o in &tee.pair.out {
            if let Out::Exchange(r) = o {
                for f in [&r.request, &r.response].into_iter().flatten() {
                    framed += 4 + f.data.len() as u64;
                }
            }
        }
        let c = &tee.pair.counts;
        let skipped: u64 = c.bytes_skipped.values().sum();
        assert_eq!(
            c.bytes_skipped.get(crate::frame::AFTER_END),
            Some(&8_388_600)
        );
        assert_eq!(tee.delivered, framed + skipped);
    }

    #[test]
    fn fmt_g_is_pythons_general_format() {
        assert_eq!(fmt_g(30.0), "30");
        assert_eq!(fmt_g(0.5), "0.5");
        assert_eq!(fmt_g(2.25), "2.25");
    }
}
