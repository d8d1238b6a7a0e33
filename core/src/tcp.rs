//! The tcp stage: TCP segments -> per-direction contiguous byte streams with explicit gaps.
//!
//! [`Reassembler::segment`] hands a [`Sink`] the events a segment made possible;
//! [`Reassembler::finish`] flushes every open connection at the end of the capture.
//! Stream offsets count payload bytes from the first byte of the direction (after the
//! SYN when the handshake was captured, else from the first sequence number seen), so
//! they stay true across 32-bit wrap-around, gaps and snaplen cuts: every byte of a
//! direction is delivered exactly once, as data or inside a gap.
//!
//! Connections are keyed by their 4-tuple; [`Conn::id`] counts from 0 in order of first
//! packet (like tshark's tcp.stream), or is the first packet's number (`ids_from_index`).
//! [`Conn::a`] is the first sender, or the SYN sender when the first packet is a
//! SYN-ACK. A SYN without ACK on a 4-tuple whose connection is closed, or whose ISN
//! differs from the one recorded for that side, ends the old connection (`End(None,
//! "reused")`) and starts a new one (port reuse); a SYN with the same ISN is a
//! retransmitted SYN.
//!
//! Retransmissions and overlaps: the first copy wins; overlapping bytes are compared
//! with what was delivered lately (`overlap_window` bytes per direction) and a
//! difference is counted ("overlap differs") and noted. A 1-byte segment just below the
//! expected offset is a keep-alive. Out-of-order segments wait per direction; when the
//! other side acknowledges the bytes of a hole (the receiver has them: the capture
//! missed them), when more than `max_buffer` bytes wait behind a hole, or when the
//! connection ends, the hole becomes a "lost segment" gap and delivery goes on. A
//! segment cut by the snaplen is delivered as its captured bytes and a "snaplen" gap.
//!
//! Memory: per direction at most `max_buffer` buffered bytes plus `overlap_window` bytes
//! of history; over all connections at most `max_total_buffer` buffered bytes (past it,
//! the direction that adds more gives up on its holes); closed connections are forgotten
//! after `max_closed` newer ones closed.

use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::net::{Endpoint, Segment, TCP_ACK, TCP_FIN, TCP_RST, TCP_SYN};

const MAX_NOTES: usize = 1000;
const HALF: u64 = 1 << 31;
const WRAP: i64 = 1 << 32;

/// One TCP connection, as the Python front sees it (`analyzer.model.Conn`).
#[derive(Debug, Clone, PartialEq)]
pub struct Conn {
    pub id: u64,
    pub a: Endpoint,
    pub b: Endpoint,
    pub syn_seen: bool,
    /// "fin" | "rst" once closed that way
    pub closed: Option<&'static str>,
    pub first_ts: f64,
    pub last_ts: f64,
    /// the direction that sent the first FIN or RST
    pub closed_by: Option<u8>,
    /// bit `1 << d`: direction `d` had bytes the capture missed
    pub lost_from: u8,
}

/// What reassembly tells its consumer, in stream order.
#[derive(Debug, PartialEq)]
pub enum Event<'a> {
    /// a new connection (before any other event of it)
    Open(&'a Conn),
    /// `syn_seen`, `closed`, `closed_by`, `lost_from` or (before `End(None)`) `last_ts` changed
    Update(&'a Conn),
    Data {
        conn: u64,
        dir: u8,
        offset: i64,
        data: &'a [u8],
        ts: f64,
        index: u64,
    },
    Gap {
        conn: u64,
        dir: u8,
        offset: i64,
        length: u64,
        ts: f64,
        index: u64,
        reason: &'static str,
    },
    /// one direction (`dir`) or the whole connection (`None`) ended
    End {
        conn: u64,
        dir: Option<u8>,
        reason: &'static str,
        ts: f64,
        index: u64,
    },
}

/// Where the events go.
pub trait Sink {
    fn event(&mut self, ev: Event<'_>);
}

/// Limits of the reassembler.
#[derive(Debug, Clone)]
pub struct Config {
    pub max_buffer: u64,
    pub overlap_window: u64,
    pub max_closed: usize,
    pub max_total_buffer: u64,
    pub ids_from_index: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_buffer: 4 * 1024 * 1024,
            overlap_window: 32 * 1024,
            max_closed: 10_000,
            max_total_buffer: 256 * 1024 * 1024,
            ids_from_index: false,
        }
    }
}

#[derive(Debug)]
struct Pending {
    off: i64,
    payload: Vec<u8>,
    missing: u64,
    ts: f64,
    index: u64,
}

#[derive(Debug, Default)]
struct Dir {
    /// sequence number of stream offset 0
    base: Option<u32>,
    /// ISN from a captured SYN
    isn: Option<u32>,
    /// next stream offset to deliver
    expected: i64,
    /// out-of-order segments, sorted by offset
    pending: VecDeque<Pending>,
    pending_bytes: u64,
    fin_at: Option<i64>,
    ended: bool,
    /// delivered (offset, bytes), for comparing retransmissions
    recent: VecDeque<(i64, Vec<u8>)>,
    recent_bytes: u64,
}

impl Dir {
    /// Stream offset of `seq`, unwrapped to the 2^31 window around `expected`.
    fn offset(&self, seq: u32) -> i64 {
        let rel = seq.wrapping_sub(self.base.unwrap_or(seq)) as u64;
        let diff = rel.wrapping_sub(self.expected as u64) & 0xFFFF_FFFF;
        let diff = if diff >= HALF {
            diff as i64 - WRAP
        } else {
            diff as i64
        };
        self.expected + diff
    }
}

#[derive(Debug)]
struct ConnState {
    conn: Conn,
    dirs: [Dir; 2],
    closed: bool,
    /// out-of-order bytes wait in a direction (an ACK of the other may end the hole)
    holes: bool,
}

/// Counts, notes and the bytes buffered over all connections.
#[derive(Debug, Default)]
pub struct Stats {
    pub counters: BTreeMap<&'static str, u64>,
    pub notes: Vec<String>,
    pub pending_total: u64,
    pub conn_count: u64,
    /// with `ids_from_index`: every connection's first packet number, in order
    pub first_indexes: Vec<u64>,
}

impl Stats {
    fn count(&mut self, what: &'static str, n: u64) {
        *self.counters.entry(what).or_insert(0) += n;
    }

    fn note(&mut self, text: String) {
        if self.notes.len() < MAX_NOTES {
            self.notes.push(text);
        }
    }
}

/// Where a segment went: its connection and direction, and the stream offset of its first
/// payload byte (None when it has none, or its direction's start is not known), counted as
/// the reassembly counts it (from the SYN's sequence number + 1, else from the direction's
/// first segment). What `read -w` cuts a capture by (`crate::cut`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    pub conn: u64,
    pub dir: u8,
    pub flags: u8,
    pub offset: Option<i64>,
    /// payload bytes on the wire (captured or not)
    pub len: u64,
}

/// Per-connection, per-direction TCP reassembly. See the module documentation.
pub struct Reassembler {
    pub cfg: Config,
    pub stats: Stats,
    /// where the last segment handed to [`Reassembler::segment`] went (None: to no connection)
    pub last_place: Option<Place>,
    pairs: HashMap<(Endpoint, Endpoint), (u64, u8)>,
    /// (keyed by our own ids: a fast hash, no input chooses them)
    states: FxHashMap<u64, ConnState>,
    closed: VecDeque<u64>,
    /// open connections by id -> state key
    open: BTreeMap<u64, u64>,
    next_key: u64,
    /// states closed by the segment being handled (their bookkeeping waits for its end)
    just_closed: Vec<u64>,
}

/// The shared parts a connection's handling reads and writes (split from the state map).
struct Ctx<'s> {
    cfg: &'s Config,
    stats: &'s mut Stats,
    sink: &'s mut dyn Sink,
}

impl Reassembler {
    pub fn new(cfg: Config) -> Self {
        Reassembler {
            cfg,
            stats: Stats::default(),
            last_place: None,
            pairs: HashMap::new(),
            states: FxHashMap::default(),
            closed: VecDeque::new(),
            open: BTreeMap::new(),
            next_key: 0,
            just_closed: Vec::new(),
        }
    }

    /// Connections open now.
    pub fn open_count(&self) -> usize {
        self.open.len()
    }

    fn new_conn(
        &mut self,
        src: Endpoint,
        dst: Endpoint,
        flags: u8,
        ts: f64,
        index: u64,
        sink: &mut dyn Sink,
    ) -> (u64, u8) {
        let (a, b, direction) = if flags & (TCP_SYN | TCP_ACK) == TCP_SYN | TCP_ACK {
            // the first packet is the SYN-ACK: a is the SYN sender (a packet to its own
            // endpoint keeps direction 0)
            (dst, src, if src != dst { 1 } else { 0 })
        } else {
            (src, dst, 0)
        };
        let id = if self.cfg.ids_from_index {
            index
        } else {
            self.stats.conn_count
        };
        self.stats.conn_count += 1;
        if self.cfg.ids_from_index {
            self.stats.first_indexes.push(index);
        }
        let conn = Conn {
            id,
            a,
            b,
            syn_seen: false,
            closed: None,
            first_ts: ts,
            last_ts: ts,
            closed_by: None,
            lost_from: 0,
        };
        sink.event(Event::Open(&conn));
        let key = self.next_key;
        self.next_key += 1;
        self.pairs.insert((a, b), (key, 0));
        self.pairs.insert((b, a), (key, 1));
        self.open.insert(id, key);
        self.states.insert(
            key,
            ConnState {
                conn,
                dirs: [Dir::default(), Dir::default()],
                closed: false,
                holes: false,
            },
        );
        (key, direction)
    }

    /// Feed one segment of packet `index` (time `ts`).
    pub fn segment(&mut self, seg: &Segment<'_>, ts: f64, index: u64, sink: &mut dyn Sink) {
        self.last_place = None;
        self.segment_inner(seg, ts, index, sink);
        self.settle();
    }

    /// The segment's place in its connection (`last_place`).
    fn place(&mut self, key: u64, dir: u8, seg: &Segment<'_>) {
        let st = &self.states[&key];
        let d = &st.dirs[dir as usize];
        let len = seg.payload.len() as u64 + seg.missing;
        let syn = u32::from(seg.flags & TCP_SYN != 0);
        self.last_place = Some(Place {
            conn: st.conn.id,
            dir,
            flags: seg.flags,
            offset: (len > 0 && d.base.is_some()).then(|| d.offset(seg.seq.wrapping_add(syn))),
            len,
        });
    }

    fn segment_inner(&mut self, seg: &Segment<'_>, ts: f64, index: u64, sink: &mut dyn Sink) {
        let flags = seg.flags;
        let (seq, ack) = (seg.seq, seg.ack);
        let (payload, missing) = (seg.payload, seg.missing);
        let (key, direction) = match self.pairs.get(&(seg.src, seg.dst)) {
            None => self.new_conn(seg.src, seg.dst, flags, ts, index, sink),
            Some(&(k, d)) => {
                let st = self.states.get_mut(&k).expect("paired state");
                let mut ctx = Ctx {
                    cfg: &self.cfg,
                    stats: &mut self.stats,
                    sink: &mut *sink,
                };
                let mut reuse = false;
                if flags & TCP_SYN != 0 {
                    let dd = &st.dirs[d as usize];
                    if flags & TCP_ACK == 0 {
                        if st.closed
                            || (dd.isn.is_some() && dd.isn != Some(seq))
                            || (dd.isn.is_none() && dd.base.is_some())
                        {
                            if !st.closed {
                                close(&mut ctx, st, "reused", ts, index);
                                self.just_closed.push(k);
                            }
                            ctx.stats.count("port reuse", 1);
                            reuse = true;
                        } else if dd.isn == Some(seq) {
                            ctx.stats.count("retransmitted SYN", 1);
                            st.conn.last_ts = ts;
                            self.place(k, d, seg);
                            return;
                        }
                    } else if st.closed || (dd.isn.is_some() && dd.isn != Some(seq)) {
                        if st.closed && dd.isn != Some(seq) {
                            // a new connection whose SYN was not captured
                            ctx.stats.count("port reuse", 1);
                            reuse = true;
                        } else {
                            ctx.stats.count("retransmitted SYN", 1);
                            st.conn.last_ts = ts;
                            self.place(k, d, seg);
                            return;
                        }
                    }
                }
                if reuse {
                    self.new_conn(seg.src, seg.dst, flags, ts, index, sink)
                } else {
                    if st.closed {
                        if !payload.is_empty() || missing > 0 {
                            ctx.stats.count("data after close", 1);
                        }
                        st.conn.last_ts = ts;
                        self.place(k, d, seg);
                        return;
                    }
                    (k, d)
                }
            }
        };
        let st = self.states.get_mut(&key).expect("state");
        let mut ctx = Ctx {
            cfg: &self.cfg,
            stats: &mut self.stats,
            sink: &mut *sink,
        };
        st.conn.last_ts = ts;
        let di = direction as usize;
        let syn: u32;
        if flags & TCP_SYN != 0 {
            syn = 1;
            let d = &mut st.dirs[di];
            if d.base.is_none() {
                d.isn = Some(seq);
                d.base = Some(seq.wrapping_add(1));
                if direction == 0 && flags & TCP_ACK == 0 {
                    st.conn.syn_seen = true;
                    ctx.sink.event(Event::Update(&st.conn));
                }
            } else if d.isn.is_none() && d.expected == 0 && d.pending.is_empty() {
                d.isn = Some(seq);
                d.base = Some(seq.wrapping_add(1));
            }
            if flags & TCP_ACK != 0 && direction == 1 && st.dirs[0].base.is_none() {
                // the connection starts at b's SYN-ACK: a's ISN is its ack - 1
                st.dirs[0].isn = Some(ack.wrapping_sub(1));
                st.dirs[0].base = Some(ack);
            }
        } else {
            syn = 0;
            let d = &mut st.dirs[di];
            if d.base.is_none() {
                d.base = Some(seq);
            }
        }
        let len = payload.len() as u64 + missing;
        let d = &st.dirs[di];
        self.last_place = Some(Place {
            conn: st.conn.id,
            dir: direction,
            flags,
            offset: (len > 0 && d.base.is_some()).then(|| d.offset(seq.wrapping_add(syn))),
            len,
        });
        if flags & TCP_ACK != 0 && st.holes && !st.dirs[1 - di].pending.is_empty() {
            acked(&mut ctx, st, 1 - direction, ack, ts, index);
        }
        if st.dirs[di].ended {
            if !payload.is_empty() || missing > 0 {
                ctx.stats.count("data after FIN", 1);
            }
        } else {
            let n = payload.len() as u64 + missing;
            if n > 0 {
                let off = st.dirs[di].offset(seq.wrapping_add(syn));
                data(&mut ctx, st, direction, off, payload, missing, ts, index);
            }
            if flags & TCP_FIN != 0 && st.dirs[di].fin_at.is_none() {
                if st.conn.closed_by.is_none() {
                    // the side that closed first
                    st.conn.closed_by = Some(direction);
                    ctx.sink.event(Event::Update(&st.conn));
                }
                let d = &mut st.dirs[di];
                let fin = d.offset(seq.wrapping_add(syn).wrapping_add(n as u32));
                if fin >= d.expected {
                    d.fin_at = Some(fin);
                }
                check_fin(&mut ctx, st, direction, ts, index);
                if !st.closed && st.dirs[1 - di].fin_at.is_some() {
                    // both sides sent FIN: the connection is over even if a hole remains
                    close(&mut ctx, st, "fin", ts, index);
                }
            }
        }
        if flags & TCP_RST != 0 && !st.closed {
            if st.conn.closed_by.is_none() {
                st.conn.closed_by = Some(direction);
            }
            close(&mut ctx, st, "rst", ts, index);
        }
        if st.closed {
            self.just_closed.push(key);
        }
    }

    /// The bookkeeping of connections closed by the last segment: no longer open, and the
    /// oldest closed ones forgotten past `max_closed`.
    fn settle(&mut self) {
        for key in std::mem::take(&mut self.just_closed) {
            let Some(st) = self.states.get(&key) else {
                continue;
            };
            if self.open.get(&st.conn.id) == Some(&key) {
                self.open.remove(&st.conn.id);
                self.closed.push_back(key);
            }
        }
        while self.closed.len() > self.cfg.max_closed {
            let old = self.closed.pop_front().expect("closed");
            if let Some(st) = self.states.remove(&old) {
                let (a, b) = (st.conn.a, st.conn.b);
                for k in [(a, b), (b, a)] {
                    if self.pairs.get(&k).map(|e| e.0) == Some(old) {
                        self.pairs.remove(&k);
                    }
                }
            }
        }
    }

    /// End of capture: flush every open connection, in id order (at `ts`, or at the
    /// connection's last packet).
    pub fn finish(&mut self, ts: Option<f64>, sink: &mut dyn Sink) {
        let open: Vec<u64> = self.open.values().copied().collect();
        for key in open {
            let st = self.states.get_mut(&key).expect("open state");
            let mut ctx = Ctx {
                cfg: &self.cfg,
                stats: &mut self.stats,
                sink: &mut *sink,
            };
            let t = ts.unwrap_or(st.conn.last_ts);
            close(&mut ctx, st, "end of capture", t, 0);
            self.just_closed.push(key);
        }
        self.settle();
    }
}

// -- one connection's handling -------------------------------------------------------

/// Flush both directions (holes become gaps) and end the connection.
fn close(ctx: &mut Ctx<'_>, st: &mut ConnState, reason: &'static str, ts: f64, index: u64) {
    st.closed = true;
    for d in 0..2u8 {
        if !st.dirs[d as usize].ended {
            flush(ctx, st, d, ts, index);
        }
    }
    if st.conn.closed.is_none() && (reason == "fin" || reason == "rst") {
        st.conn.closed = Some(reason);
    }
    ctx.sink.event(Event::Update(&st.conn));
    ctx.sink.event(Event::End {
        conn: st.conn.id,
        dir: None,
        reason,
        ts,
        index,
    });
    // free the buffers; keep only what reuse detection needs
    st.holes = false;
    for d in st.dirs.iter_mut() {
        ctx.stats.pending_total -= d.pending_bytes;
        d.pending_bytes = 0;
        d.pending = VecDeque::new();
        d.recent = VecDeque::new();
        d.recent_bytes = 0;
    }
}

fn check_fin(ctx: &mut Ctx<'_>, st: &mut ConnState, dir: u8, ts: f64, index: u64) {
    let d = &mut st.dirs[dir as usize];
    if let Some(fin) = d.fin_at {
        if !d.ended && d.expected >= fin {
            fin_reached(ctx, st, dir, ts, index);
            if st.dirs[1 - dir as usize].ended && !st.closed {
                st.conn.closed = Some("fin");
                close(ctx, st, "fin", ts, index);
            }
        }
    }
}

/// Direction `dir` ended with its FIN (all its bytes delivered or given up as gaps).
fn fin_reached(ctx: &mut Ctx<'_>, st: &mut ConnState, dir: u8, ts: f64, index: u64) {
    st.dirs[dir as usize].ended = true;
    ctx.sink.event(Event::End {
        conn: st.conn.id,
        dir: Some(dir),
        reason: "fin",
        ts,
        index,
    });
}

/// Compare retransmitted `data` at `off` (all below `expected`) with the history.
fn compare(ctx: &mut Ctx<'_>, st: &ConnState, dir: u8, off: i64, data: &[u8], index: u64) {
    if data.is_empty() {
        return;
    }
    let d = &st.dirs[dir as usize];
    if data.len() == 1 && off == d.expected - 1 {
        ctx.stats.count("keep-alive", 1);
        return;
    }
    ctx.stats.count("retransmission", 1);
    let end = off + data.len() as i64;
    for (roff, rdata) in &d.recent {
        let rend = roff + rdata.len() as i64;
        if rend <= off || *roff >= end {
            continue;
        }
        let (lo, hi) = (off.max(*roff), end.min(rend));
        if data[(lo - off) as usize..(hi - off) as usize]
            != rdata[(lo - roff) as usize..(hi - roff) as usize]
        {
            ctx.stats.count("overlap differs", 1);
            ctx.stats.note(format!(
                "conn {} dir {dir}: retransmitted bytes {lo}-{hi} in packet {index} differ from the first copy",
                st.conn.id
            ));
            return;
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn deliver(
    ctx: &mut Ctx<'_>,
    st: &mut ConnState,
    dir: u8,
    off: i64,
    payload: &[u8],
    missing: u64,
    ts: f64,
    index: u64,
) {
    let window = ctx.cfg.overlap_window;
    let id = st.conn.id;
    let d = &mut st.dirs[dir as usize];
    if !payload.is_empty() {
        ctx.sink.event(Event::Data {
            conn: id,
            dir,
            offset: off,
            data: payload,
            ts,
            index,
        });
        if window > 0 {
            d.recent.push_back((off, payload.to_vec()));
            d.recent_bytes += payload.len() as u64;
            while d.recent_bytes > window && d.recent.len() > 1 {
                let (_, old) = d.recent.pop_front().expect("recent");
                d.recent_bytes -= old.len() as u64;
            }
        }
    }
    if missing > 0 {
        let at = off + payload.len() as i64;
        ctx.sink.event(Event::Gap {
            conn: id,
            dir,
            offset: at,
            length: missing,
            ts,
            index,
            reason: "snaplen",
        });
        ctx.stats.count("snaplen bytes", missing);
    }
    d.expected = off + payload.len() as i64 + missing as i64;
}

/// Cut what was delivered already off a segment starting before `expected` (the overlap
/// is compared; the first copy wins): (offset, bytes of the payload to skip, missing), or
/// None when nothing new is left.
fn trim(
    ctx: &mut Ctx<'_>,
    st: &ConnState,
    dir: u8,
    off: i64,
    payload: &[u8],
    missing: u64,
    index: u64,
) -> Option<(i64, usize, u64)> {
    let exp = st.dirs[dir as usize].expected;
    let cut = (exp - off) as u64;
    let head = &payload[..(cut as usize).min(payload.len())];
    compare(ctx, st, dir, off, head, index);
    let len = payload.len() as u64;
    if cut >= len + missing {
        return None;
    }
    if cut <= len {
        return Some((exp, cut as usize, missing));
    }
    Some((exp, payload.len(), missing - (cut - len)))
}

#[allow(clippy::too_many_arguments)]
fn data(
    ctx: &mut Ctx<'_>,
    st: &mut ConnState,
    dir: u8,
    mut off: i64,
    mut payload: &[u8],
    mut missing: u64,
    ts: f64,
    index: u64,
) {
    let di = dir as usize;
    let exp = st.dirs[di].expected;
    if off < exp {
        let Some((o, skip, m)) = trim(ctx, st, dir, off, payload, missing, index) else {
            return;
        };
        off = o;
        payload = &payload[skip..];
        missing = m;
    }
    if off == exp {
        deliver(ctx, st, dir, off, payload, missing, ts, index);
        if !st.dirs[di].pending.is_empty() {
            drain(ctx, st, dir, ts, index);
        }
        return;
    }
    // out of order: buffer
    ctx.stats.count("out of order", 1);
    let id = st.conn.id;
    let d = &mut st.dirs[di];
    let i = d.pending.partition_point(|p| p.off < off);
    if let Some(first) = d.pending.get(i) {
        if first.off == off
            && first.payload.len() as u64 + first.missing >= payload.len() as u64 + missing
        {
            // a duplicate of a buffered segment: the first copy wins
            let n = first.payload.len().min(payload.len());
            if payload[..n] != first.payload[..n] {
                ctx.stats.count("overlap differs", 1);
                ctx.stats.note(format!(
                    "conn {id} dir {dir}: buffered bytes at offset {off} differ in packet {index}"
                ));
            }
            ctx.stats.count("retransmission", 1);
            return;
        }
    }
    d.pending.insert(
        i,
        Pending {
            off,
            payload: payload.to_vec(),
            missing,
            ts,
            index,
        },
    );
    st.holes = true;
    d.pending_bytes += payload.len() as u64;
    ctx.stats.pending_total += payload.len() as u64;
    if ctx.stats.pending_total > ctx.cfg.max_total_buffer {
        // too much waits over all connections: this direction gives up on its holes
        ctx.stats.count("total buffer bound", 1);
        while !st.dirs[di].pending.is_empty() {
            gap_to_first(ctx, st, dir, ts, index);
            drain(ctx, st, dir, ts, index);
        }
    }
    while st.dirs[di].pending_bytes > ctx.cfg.max_buffer && !st.dirs[di].pending.is_empty() {
        gap_to_first(ctx, st, dir, ts, index);
        drain(ctx, st, dir, ts, index);
    }
}

/// The other side acknowledged `dir`'s bytes up to `ack`: a hole below it is a loss of
/// the capture, not of the network (the receiver has those bytes; nobody sends them
/// again). It becomes a gap now, and what waited behind it is delivered in time with the
/// other side's answers instead of at the connection's end.
fn acked(ctx: &mut Ctx<'_>, st: &mut ConnState, dir: u8, ack: u32, ts: f64, index: u64) {
    let acked = st.dirs[dir as usize].offset(ack);
    while st.dirs[dir as usize]
        .pending
        .front()
        .is_some_and(|p| p.off <= acked)
    {
        gap_to_first(ctx, st, dir, ts, index);
        drain(ctx, st, dir, ts, index);
    }
}

fn gap_to_first(ctx: &mut Ctx<'_>, st: &mut ConnState, dir: u8, ts: f64, index: u64) {
    let d = &st.dirs[dir as usize];
    if let Some(first) = d.pending.front().map(|p| p.off) {
        if first > d.expected {
            lost(ctx, st, dir, first, ts, index);
        }
    }
}

/// The bytes from `expected` to `end` were never captured: a "lost segment" gap, counted
/// and noted on the connection (`lost_from`).
fn lost(ctx: &mut Ctx<'_>, st: &mut ConnState, dir: u8, end: i64, ts: f64, index: u64) {
    let expected = st.dirs[dir as usize].expected;
    let n = (end - expected) as u64;
    if st.conn.lost_from & (1 << dir) == 0 {
        st.conn.lost_from |= 1 << dir;
        ctx.sink.event(Event::Update(&st.conn));
    }
    ctx.sink.event(Event::Gap {
        conn: st.conn.id,
        dir,
        offset: expected,
        length: n,
        ts,
        index,
        reason: "lost segment",
    });
    ctx.stats.count("lost segments", 1);
    ctx.stats.count("lost bytes", n);
    st.dirs[dir as usize].expected = end;
}

fn drain(ctx: &mut Ctx<'_>, st: &mut ConnState, dir: u8, now_ts: f64, now_index: u64) {
    let di = dir as usize;
    while st.dirs[di]
        .pending
        .front()
        .is_some_and(|p| p.off <= st.dirs[di].expected)
    {
        let p = st.dirs[di].pending.pop_front().expect("pending");
        st.dirs[di].pending_bytes -= p.payload.len() as u64;
        ctx.stats.pending_total -= p.payload.len() as u64;
        let (mut off, mut skip, mut missing) = (p.off, 0usize, p.missing);
        if off < st.dirs[di].expected {
            let Some(t) = trim(ctx, st, dir, off, &p.payload, missing, p.index) else {
                continue;
            };
            (off, skip, missing) = t;
        }
        deliver(
            ctx,
            st,
            dir,
            off,
            &p.payload[skip..],
            missing,
            p.ts,
            p.index,
        );
    }
    if st.dirs[di].pending.is_empty() {
        st.holes = !st.dirs[1 - di].pending.is_empty();
    }
    check_fin(ctx, st, dir, now_ts, now_index);
}

/// Turn every hole into a gap and deliver everything buffered (the connection ends).
fn flush(ctx: &mut Ctx<'_>, st: &mut ConnState, dir: u8, ts: f64, index: u64) {
    let di = dir as usize;
    if st.dirs[di].ended {
        return;
    }
    while !st.dirs[di].pending.is_empty() {
        gap_to_first(ctx, st, dir, ts, index);
        drain(ctx, st, dir, ts, index);
    }
    let d = &st.dirs[di];
    if let Some(fin) = d.fin_at {
        if fin > d.expected && !d.ended {
            lost(ctx, st, dir, fin, ts, index);
        }
        if !st.dirs[di].ended {
            fin_reached(ctx, st, dir, ts, index);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    const C: Endpoint = (IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 40000);
    const B: Endpoint = (IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 9092);

    /// Collects events as text, for the assertions.
    #[derive(Debug, Default)]
    pub struct Recorder(pub Vec<String>);

    impl Sink for Recorder {
        fn event(&mut self, ev: Event<'_>) {
            self.0.push(match ev {
                Event::Open(c) => format!("open {} {:?} {:?}", c.id, c.a, c.b),
                Event::Update(c) => format!(
                    "update {} syn={} closed={:?} by={:?} lost={}",
                    c.id, c.syn_seen, c.closed, c.closed_by, c.lost_from
                ),
                Event::Data {
                    conn,
                    dir,
                    offset,
                    data,
                    index,
                    ..
                } => {
                    format!(
                        "data {conn}/{dir} @{offset} {:?} #{index}",
                        String::from_utf8_lossy(data)
                    )
                }
                Event::Gap {
                    conn,
                    dir,
                    offset,
                    length,
                    reason,
                    ..
                } => {
                    format!("gap {conn}/{dir} @{offset}+{length} {reason}")
                }
                Event::End {
                    conn, dir, reason, ..
                } => format!("end {conn}/{dir:?} {reason}"),
            });
        }
    }

    struct T {
        r: Reassembler,
        rec: Recorder,
        index: u64,
    }

    impl T {
        fn new() -> Self {
            T {
                r: Reassembler::new(Config::default()),
                rec: Recorder::default(),
                index: 0,
            }
        }
        fn seg(
            &mut self,
            from_client: bool,
            seq: u32,
            ack: u32,
            flags: u8,
            payload: &[u8],
            missing: u64,
        ) {
            self.index += 1;
            let (src, dst) = if from_client { (C, B) } else { (B, C) };
            let s = Segment {
                src,
                dst,
                seq,
                ack,
                flags,
                payload,
                missing,
            };
            self.r
                .segment(&s, self.index as f64, self.index, &mut self.rec);
        }
        fn take(&mut self) -> Vec<String> {
            std::mem::take(&mut self.rec.0)
        }
        fn handshake(&mut self) {
            self.seg(true, 100, 0, TCP_SYN, b"", 0);
            self.seg(false, 500, 101, TCP_SYN | TCP_ACK, b"", 0);
            self.seg(true, 101, 501, TCP_ACK, b"", 0);
        }
    }

    #[test]
    fn each_segment_is_placed_in_its_stream() {
        let mut t = T::new();
        let place = |t: &T| t.r.last_place.map(|p| (p.conn, p.dir, p.offset, p.len));
        t.handshake();
        assert_eq!(place(&t), Some((0, 0, None, 0)));
        t.seg(true, 101, 501, TCP_ACK, b"abc", 0);
        assert_eq!(place(&t), Some((0, 0, Some(0), 3)));
        t.seg(false, 501, 104, TCP_ACK, b"xy", 4);
        assert_eq!(
            place(&t),
            Some((0, 1, Some(0), 6)),
            "uncaptured bytes count"
        );
        t.seg(true, 101, 501, TCP_ACK, b"abc", 0);
        assert_eq!(
            place(&t),
            Some((0, 0, Some(0), 3)),
            "a retransmission is placed too"
        );
        t.seg(true, 104, 507, TCP_ACK | TCP_RST, b"", 0);
        t.seg(true, 104, 507, TCP_ACK, b"late", 0);
        assert_eq!(
            place(&t),
            Some((0, 0, Some(3), 4)),
            "data after the close is placed"
        );
    }

    #[test]
    fn in_order_with_handshake_and_fin() {
        let mut t = T::new();
        t.handshake();
        t.seg(true, 101, 501, TCP_ACK, b"abc", 0);
        t.seg(false, 501, 104, TCP_ACK, b"xy", 0);
        t.seg(true, 104, 503, TCP_ACK | TCP_FIN, b"", 0);
        t.seg(false, 503, 105, TCP_ACK | TCP_FIN, b"", 0);
        let ev = t.take();
        assert_eq!(ev[0], "open 0 (10.0.0.1, 40000) (10.0.0.2, 9092)");
        assert_eq!(ev[1], "update 0 syn=true closed=None by=None lost=0");
        assert_eq!(ev[2], "data 0/0 @0 \"abc\" #4");
        assert_eq!(ev[3], "data 0/1 @0 \"xy\" #5");
        assert_eq!(
            &ev[4..],
            &[
                "update 0 syn=true closed=None by=Some(0) lost=0",
                "end 0/Some(0) fin",
                "end 0/Some(1) fin",
                "update 0 syn=true closed=Some(\"fin\") by=Some(0) lost=0",
                "end 0/None fin",
            ]
        );
        assert_eq!(t.r.open_count(), 0);
    }

    #[test]
    fn reorder_retransmit_and_differing_overlap() {
        let mut t = T::new();
        t.handshake();
        t.seg(true, 104, 501, TCP_ACK, b"def", 0);
        t.seg(true, 101, 501, TCP_ACK, b"abc", 0);
        t.seg(true, 101, 501, TCP_ACK, b"abX", 0); // a retransmission that differs
        t.seg(true, 106, 501, TCP_ACK, b"f", 0); // a keep-alive-like 1 byte below expected
        let ev = t.take();
        assert_eq!(
            &ev[2..],
            &["data 0/0 @0 \"abc\" #5", "data 0/0 @3 \"def\" #4"]
        );
        let c = &t.r.stats.counters;
        assert_eq!(c.get("out of order"), Some(&1));
        assert_eq!(c.get("overlap differs"), Some(&1));
        assert_eq!(c.get("retransmission"), Some(&1));
        assert_eq!(c.get("keep-alive"), Some(&1));
        assert!(t.r.stats.notes[0].contains("retransmitted bytes 0-3 in packet 6"));
    }

    #[test]
    fn an_acknowledged_hole_is_a_lost_segment_at_the_ack() {
        let mut t = T::new();
        t.handshake();
        t.seg(true, 101, 501, TCP_ACK, b"aaaa", 0);
        // 105..109 never captured
        t.seg(true, 109, 501, TCP_ACK, b"cccc", 0);
        assert_eq!(t.take().len(), 3);
        // the broker acknowledges up to 109: the receiver had the missing bytes
        t.seg(false, 501, 109, TCP_ACK, b"", 0);
        assert_eq!(
            t.take(),
            vec![
                "update 0 syn=true closed=None by=None lost=1",
                "gap 0/0 @4+4 lost segment",
                "data 0/0 @8 \"cccc\" #5",
            ]
        );
    }

    #[test]
    fn snaplen_gap_port_reuse_and_end_of_capture() {
        let mut t = T::new();
        t.handshake();
        t.seg(true, 101, 501, TCP_ACK, b"ab", 10);
        assert_eq!(
            &t.take()[2..],
            &["data 0/0 @0 \"ab\" #4", "gap 0/0 @2+10 snaplen"]
        );
        // a SYN with another ISN on the same 4-tuple: a new connection
        t.seg(true, 9000, 0, TCP_SYN, b"", 0);
        let ev = t.take();
        assert_eq!(ev[0], "update 0 syn=true closed=None by=None lost=0");
        assert_eq!(ev[1], "end 0/None reused");
        assert_eq!(ev[2], "open 1 (10.0.0.1, 40000) (10.0.0.2, 9092)");
        assert_eq!(t.r.stats.counters.get("port reuse"), Some(&1));
        t.seg(true, 9000, 0, TCP_SYN, b"", 0);
        assert_eq!(t.r.stats.counters.get("retransmitted SYN"), Some(&1));
        t.r.finish(None, &mut t.rec);
        assert_eq!(t.take().last().unwrap(), "end 1/None end of capture");
    }

    #[test]
    fn midstream_start_and_sequence_wraparound() {
        let mut t = T::new();
        t.seg(true, u32::MAX - 1, 7, TCP_ACK, b"abcd", 0);
        t.seg(true, 2, 7, TCP_ACK, b"ef", 0);
        let ev = t.take();
        assert_eq!(
            &ev[1..],
            &["data 0/0 @0 \"abcd\" #1", "data 0/0 @4 \"ef\" #2"]
        );
    }

    #[test]
    fn buffer_bound_gives_up_on_a_hole() {
        let mut t = T::new();
        t.r.cfg.max_buffer = 8;
        t.handshake();
        t.seg(true, 111, 501, TCP_ACK, b"12345", 0);
        t.seg(true, 116, 501, TCP_ACK, b"6789", 0);
        let ev = t.take();
        assert_eq!(
            &ev[2..],
            &[
                "update 0 syn=true closed=None by=None lost=1",
                "gap 0/0 @0+10 lost segment",
                "data 0/0 @10 \"12345\" #4",
                "data 0/0 @15 \"6789\" #5"
            ]
        );
    }

    #[test]
    fn rst_closes_and_later_data_is_counted() {
        let mut t = T::new();
        t.handshake();
        t.seg(false, 501, 101, TCP_RST | TCP_ACK, b"", 0);
        t.seg(true, 101, 501, TCP_ACK, b"late", 0);
        let ev = t.take();
        assert_eq!(ev.last().unwrap(), "end 0/None rst");
        assert_eq!(t.r.stats.counters.get("data after close"), Some(&1));
    }

    #[test]
    fn forgotten_connections_free_their_state() {
        let mut t = T::new();
        t.r.cfg.max_closed = 2;
        for port in 0..5u16 {
            t.index += 1;
            let c = (C.0, 1000 + port);
            let s = Segment {
                src: c,
                dst: B,
                seq: 1,
                ack: 0,
                flags: TCP_SYN,
                payload: b"",
                missing: 0,
            };
            t.r.segment(&s, 1.0, t.index, &mut t.rec);
            let s = Segment {
                src: c,
                dst: B,
                seq: 2,
                ack: 0,
                flags: TCP_RST,
                payload: b"",
                missing: 0,
            };
            t.r.segment(&s, 1.0, t.index, &mut t.rec);
        }
        assert_eq!(t.r.states.len(), 2);
        assert_eq!(t.r.pairs.len(), 4);
    }
}
