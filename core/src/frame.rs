//! The framing stage: one direction's byte stream -> Kafka frames, split on the 4-byte
//! size prefix.
//!
//! A faithful port of `analyzer/framing.py`'s `Framer` (its module docstring is the
//! specification; this says what the Rust shape adds). A [`Framer`] takes one direction's
//! in-order stream events ([`Framer::data`], [`Framer::gap`], then [`Framer::finish`])
//! and appends the [`Frame`]s they complete to the caller's vector.
//!
//! The caller's judgement of frame headers is a [`Judge`], handed to every call instead of
//! being stored: the pipeline's checks read the connection's pairing state (the requests
//! in flight, the protocol), which lives beside the framer and changes between events.
//! `Judge::plausible` is asked for every frame with the first `min(size, peek)` bytes after
//! the size prefix (fewer when a gap or the end cuts the frame short).
//!
//! Desynchronisation: a size below `min_frame_size` or above `max_frame_size`, or a header
//! the judge rejects, makes the framer scan forward for the next offset whose size and
//! header are plausible; the bytes passed over are counted in [`Framer::skipped`] by
//! reason ([`BEFORE_FIRST_FRAME`], [`DESYNC`], [`GAP`], [`END_OF_STREAM`]), and a size above
//! `max_frame_size` met where a frame should start in [`Framer::over_max_frames`]. At a
//! boundary known to be one, a rejected header within the size limits still makes a frame
//! when it ends exactly where a TCP segment ends (`damaged_frames`) or when
//! [`Judge::sane`] accepts it (`unknown_frames`). After a guess (a frame found by a scan),
//! a later packet whose first bytes make a strong frame (a parsed request header, or the
//! response a pending request waits for) wins over the guess: peers write whole frames, so
//! a packet's first byte is the likelier boundary.
//!
//! A gap inside a frame whose size is known ends that frame at once (`truncated`, `data`
//! the bytes captured before the gap, `size` kept) and the framer drops the rest of it
//! and stays in sync: that is how snaplen-cut captures are read.
//!
//! Accounting invariant: every byte of the stream (data and gaps) is either in a frame
//! (its 4-byte prefix and `data`) or counted in `skipped`, so after `finish`
//! `sum(4 + data.len()) + sum(skipped)` equals the stream's length.
//!
//! Memory: nothing is allocated from a declared size. The framer holds the current
//! frame's captured bytes (plus what a scan still judges), in one vector read from an
//! offset: cutting frames moves the offset, and the live bytes are moved down only once
//! the consumed prefix outgrows them, so a segment of many frames costs no copying
//! beyond each frame's own `data`.

use std::collections::BTreeMap;

/// The pipeline's default `max_frame_size` (Python's `DEFAULT_MAX_FRAME_SIZE`).
pub const DEFAULT_MAX_FRAME_SIZE: u32 = 100 * 1024 * 1024;

/// Bytes skipped before the first frame of a stream that starts mid-frame.
pub const BEFORE_FIRST_FRAME: &str = "before first frame";
/// Bytes skipped after an implausible size or header.
pub const DESYNC: &str = "desync";
/// Bytes never captured, and captured bytes a gap made unframeable.
pub const GAP: &str = "gap";
/// A size prefix or header cut by the end of the stream.
pub const END_OF_STREAM: &str = "end of stream";

/// Header bytes enough to reject a scan candidate before its whole peek is in: waiting
/// for the whole peek of a candidate that already fails would hold back the real frames
/// behind it.
const PARTIAL: usize = 16;

/// A vector's capacity past which an emptied buffer gives its memory back: a framer is
/// kept per connection direction (tens of thousands), and one big frame must not leave
/// its allocation behind for the rest of the connection.
const KEEP_CAPACITY: usize = 64 * 1024;

/// What a framer's plausibility check says of a frame's first bytes (Python: `False` /
/// `True` / a parsed value).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Verdict {
    /// implausible (Python: any falsy value)
    No,
    /// plausible (Python: `True`)
    Yes,
    /// plausible, and parsed on the way: a request header read whole, or the request a
    /// response answers (Python: a truthy value that is not `True`). Only this reading
    /// moves a guessed frame's boundary to a later packet's start (see the module doc).
    Strong,
}

/// The caller's judgement of frame headers; the framer asks it for every frame. Passed to
/// each call (not stored) so that it can borrow the connection's pairing state beside the
/// framer.
pub trait Judge {
    /// Whether there is a check at all (Python's `plausible is not None`): without one,
    /// every size within the limits is a frame and `plausible` is never asked.
    fn checks(&self) -> bool;
    /// Python's `plausible(head)`: `head` is the frame's first `min(size, peek)` bytes
    /// after its size prefix, or fewer when the frame is cut short.
    fn plausible(&mut self, head: &[u8]) -> Verdict;
    /// Python's `Framer.sane(head, size)`: the looser check of a frame at a known
    /// boundary (false when the caller has none).
    fn sane(&mut self, head: &[u8], size: u32) -> bool;
    /// For a rejected header at the stream's first byte: (the connection's handshake was
    /// captured, the connection is known to carry Kafka).
    fn first_known(&self) -> (bool, bool);
}

/// One Kafka PDU: the bytes after its 4-byte size prefix, and where it came from
/// (Python's `analyzer.model.Frame` without the connection).
#[derive(Clone, Debug, PartialEq)]
pub struct Frame {
    pub dir: u8,
    /// the captured bytes (fewer than `size` when `truncated`)
    pub data: Vec<u8>,
    /// the size prefix
    pub size: u32,
    /// the packet that carried its first byte
    pub first_index: u64,
    /// the packet that completed it (tshark shows the PDU there)
    pub last_index: u64,
    pub first_ts: f64,
    pub last_ts: f64,
    /// stream offset of the size prefix
    pub offset: i64,
    /// bytes of it are missing (a gap, a snaplen cut, the end of the stream)
    pub truncated: bool,
    /// the verdict when the frame was cut straight from a segment by the fast path
    /// (Python `Frame.peeked` not None), else None (also when the judge has no check)
    pub seen: Option<Verdict>,
}

/// `check`'s answer on a frame start.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Checked {
    /// implausible size or header
    Bad,
    /// undecided until more bytes come
    Wait,
    /// plausible: its size
    Size(u32),
}

/// (stream offset, packet index, ts) of a packet whose bytes are held.
type Mark = (i64, u64, f64);

fn size_at(b: &[u8], i: usize) -> u32 {
    u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

/// Frames of one direction of one connection. See the module documentation.
#[derive(Debug)]
pub struct Framer {
    dir: u8,
    max_frame_size: u32,
    min_frame_size: u32,
    peek: usize,
    /// frames emitted
    pub frames: u64,
    pub truncated_frames: u64,
    /// size prefixes above `max_frame_size` met at a frame boundary
    pub over_max_frames: u64,
    /// frames kept although their header was rejected (ending where a segment ends)
    pub damaged_frames: u64,
    /// frames kept at a known boundary by `Judge::sane`
    pub unknown_frames: u64,
    /// bytes skipped, by reason (only reasons with bytes appear)
    pub skipped: BTreeMap<&'static str, u64>,
    /// stream offset where the last frame a scan guessed ends (a boundary not known
    /// without a guess, so `sane` is not asked there)
    guess_end: Option<i64>,
    finished: bool,
    /// an event has set `off` (Python: `_off is not None`)
    started: bool,
    /// stream offset of the first held byte (`buf[head]`)
    off: i64,
    /// the first held byte is a frame boundary
    synced: bool,
    /// size of the frame at the first held byte once judged plausible
    decided: Option<u32>,
    /// why bytes are skipped while scanning
    reason: &'static str,
    /// bytes of a gap-broken frame still to drop
    drop: u64,
    /// packet of the last bytes buffered: `packet_of` of an offset before every mark
    last_index: u64,
    last_ts: f64,
    /// the stream offset at which in-order bytes are cut straight into frames (the fast
    /// path): set when nothing is held, in sync at a frame boundary, nothing is to be
    /// dropped and not finished. Before the first event it is 0: a direction's bytes
    /// mostly start at stream offset 0 (a first event elsewhere moves it there).
    at: Option<i64>,
    /// the frame in progress was found by a scan and none is cut since: a later packet
    /// that starts with a strong frame may still prove it wrong (`aligned`)
    guess: bool,
    /// the packets whose bytes are held, by offset
    marks: Vec<Mark>,
    /// held bytes are `buf[head..]`
    buf: Vec<u8>,
    head: usize,
}

impl Framer {
    /// A framer of direction `dir`; `peek` is how many header bytes the judge is shown.
    pub fn new(dir: u8, max_frame_size: u32, min_frame_size: u32, peek: usize) -> Self {
        Framer {
            dir,
            max_frame_size,
            min_frame_size,
            peek,
            frames: 0,
            truncated_frames: 0,
            over_max_frames: 0,
            damaged_frames: 0,
            unknown_frames: 0,
            skipped: BTreeMap::new(),
            guess_end: None,
            finished: false,
            started: false,
            off: 0,
            synced: true,
            decided: None,
            reason: BEFORE_FIRST_FRAME,
            drop: 0,
            last_index: 0,
            last_ts: 0.0,
            at: Some(0),
            guess: false,
            marks: Vec::new(),
            buf: Vec::new(),
            head: 0,
        }
    }

    pub fn dir(&self) -> u8 {
        self.dir
    }

    pub fn max_frame_size(&self) -> u32 {
        self.max_frame_size
    }

    pub fn min_frame_size(&self) -> u32 {
        self.min_frame_size
    }

    /// Smallest plausible size prefix; may change between events (0 for raw SASL tokens,
    /// 2 for a pre-0.8 error-only response). Like Python's setter it forgets the last
    /// packet seen (the fallback of a frame's first and last packet).
    pub fn set_min_frame_size(&mut self, n: u32) {
        self.min_frame_size = n;
        self.last_index = 0;
        self.last_ts = 0.0;
    }

    pub fn finished(&self) -> bool {
        self.finished
    }

    /// Bytes held (a frame in progress, or what a scan still judges).
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.head
    }

    /// Whether finishing or collecting this framer can give anything (Python's
    /// `fr.buf or fr.skipped or fr.over_max_frames`): a direction mostly ends at a frame
    /// boundary with nothing held or skipped, and then its owner skips both.
    pub fn holds(&self) -> bool {
        self.buffered() > 0 || !self.skipped.is_empty() || self.over_max_frames > 0
    }

    /// The bytes skipped by reason and the `over_max_frames` count since the last call,
    /// both reset (Python's `Pipeline._collect_skipped`).
    pub fn take_skipped(&mut self) -> (BTreeMap<&'static str, u64>, u64) {
        (
            std::mem::take(&mut self.skipped),
            std::mem::take(&mut self.over_max_frames),
        )
    }

    // -- helpers ------------------------------------------------------------------------

    fn held(&self) -> &[u8] {
        &self.buf[self.head..]
    }

    fn skip(&mut self, reason: &'static str, n: u64) {
        if n > 0 {
            *self.skipped.entry(reason).or_insert(0) += n;
        }
    }

    /// Forget the held bytes; an allocation grown by a big frame goes back.
    fn clear_buf(&mut self) {
        self.head = 0;
        if self.buf.capacity() > KEEP_CAPACITY {
            self.buf = Vec::new();
        } else {
            self.buf.clear();
        }
    }

    fn hold(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// Packet index and ts of the packet that carried stream offset `off`.
    fn packet_of(&self, off: i64) -> (u64, f64) {
        let i = self.marks.partition_point(|m| m.0 <= off);
        if i == 0 {
            (self.last_index, self.last_ts)
        } else {
            let m = self.marks[i - 1];
            (m.1, m.2)
        }
    }

    /// Drop the first `n` held bytes.
    fn consume(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        if n >= self.buffered() {
            self.clear_buf();
        } else {
            self.head += n;
            if self.head > self.buf.len() - self.head {
                // the consumed prefix outgrew the live bytes: move them down (amortised:
                // each byte moves at most as often as a prefix as long as it is consumed)
                self.buf.drain(..self.head);
                self.head = 0;
            }
        }
        self.off += n as i64;
        // keep the mark that covers the new start
        let off = self.off;
        let i = self.marks.partition_point(|m| m.0 <= off);
        if i > 1 {
            self.marks.drain(..i - 1);
        }
        self.decided = None;
    }

    /// Judge a frame starting at held byte `i` with `avail` bytes from it (at least 4).
    fn check(&self, i: usize, avail: usize, fin: bool, judge: &mut impl Judge) -> Checked {
        let b = self.held();
        let size = size_at(b, i);
        if size < self.min_frame_size || size > self.max_frame_size {
            return Checked::Bad;
        }
        if !judge.checks() {
            return Checked::Size(size);
        }
        let need = (size as usize).min(self.peek);
        if avail - 4 < need && !fin {
            if !self.synced
                && avail - 4 >= PARTIAL
                && judge.plausible(&b[i + 4..i + avail]) == Verdict::No
            {
                return Checked::Bad;
            }
            return Checked::Wait;
        }
        let head = &b[i + 4..i + 4 + need.min(avail - 4)];
        if judge.plausible(head) == Verdict::No {
            Checked::Bad
        } else {
            Checked::Size(size)
        }
    }

    /// A frame cut from held bytes (not by the fast path, so no verdict goes with it).
    fn emit(
        &mut self,
        start: i64,
        size: u32,
        data: Vec<u8>,
        truncated: bool,
        last: Option<(u64, f64)>,
    ) -> Frame {
        let (first_index, first_ts) = self.packet_of(start);
        let (last_index, last_ts) =
            last.unwrap_or_else(|| self.packet_of(start + 3 + data.len() as i64));
        self.frames += 1;
        if truncated {
            self.truncated_frames += 1;
        }
        if self.guess {
            self.guess_end = Some(start + 4 + size as i64);
        }
        self.reason = DESYNC;
        self.guess = false;
        Frame {
            dir: self.dir,
            data,
            size,
            first_index,
            last_index,
            first_ts,
            last_ts,
            offset: start,
            truncated,
            seen: None,
        }
    }

    // -- the state machine --------------------------------------------------------------

    /// The first held position at or after `j` that can start a size prefix: its size is
    /// within the limits, or (fewer than 4 bytes left) its first byte can start one.
    /// Python finds these with a regex that lets through some sizes out of the limits,
    /// which its check then rejects at once: the same candidates survive, in order.
    fn candidate(&self, j: usize) -> Option<usize> {
        let b = self.held();
        let n = b.len();
        let top = (self.max_frame_size >> 24) as u8;
        (j..n).find(|&c| {
            if n - c >= 4 {
                let size = size_at(b, c);
                size >= self.min_frame_size && size <= self.max_frame_size
            } else {
                b[c] <= top
            }
        })
    }

    /// Cut every complete frame out of the held bytes; scan when out of sync.
    fn run(&mut self, out: &mut Vec<Frame>, fin: bool, judge: &mut impl Judge) {
        let n = self.buffered();
        let mut pos = 0usize;
        loop {
            let avail = n - pos;
            if self.synced {
                if avail < 4 {
                    break;
                }
                let size = match (self.decided, pos) {
                    (Some(d), 0) => d,
                    _ => match self.check(pos, avail, fin, judge) {
                        Checked::Wait => break,
                        Checked::Size(s) => s,
                        Checked::Bad => match self.damaged(pos, n, judge) {
                            Some(s) => s,
                            None => {
                                // out of sync; `reason` tells why (desync once a frame was seen)
                                self.synced = false;
                                self.skip(self.reason, 1);
                                pos += 1;
                                continue;
                            }
                        },
                    },
                };
                if size as usize > avail - 4 {
                    if self.guess {
                        let b = self.aligned(pos, size, n, fin, judge);
                        if b != pos {
                            // a packet inside the guessed frame starts a strong frame: sync there
                            self.skip(self.reason, (b - pos) as u64);
                            pos = b;
                            self.decided = None;
                            continue;
                        }
                    }
                    // incomplete: remember the decision, keep the bytes
                    self.consume(pos);
                    self.decided = Some(size);
                    return;
                }
                let end = pos + 4 + size as usize;
                let start = self.off + pos as i64;
                let data = self.held()[pos + 4..end].to_vec();
                let f = self.emit(start, size, data, false, None);
                out.push(f);
                pos = end;
            } else {
                // scanning for a plausible frame start
                let mut found = false;
                let mut j = pos;
                loop {
                    match self.candidate(j) {
                        None => {
                            j = n; // no byte here can start a frame
                            break;
                        }
                        Some(c) => j = c,
                    }
                    if n - j < 4 {
                        break; // keep from j: wait for more bytes
                    }
                    match self.check(j, n - j, fin, judge) {
                        Checked::Wait => {
                            // undecided: wait for more bytes from j, unless a later packet
                            // inside the frame it claims starts with a strong frame
                            let size = size_at(self.held(), j);
                            let b = self.aligned(j, size, n, fin, judge);
                            if b != j {
                                j = b;
                                found = true;
                            }
                            break;
                        }
                        Checked::Size(size) => {
                            found = true;
                            j = self.aligned(j, size, n, fin, judge);
                            break;
                        }
                        Checked::Bad => j += 1,
                    }
                }
                self.skip(self.reason, (j - pos) as u64);
                pos = j;
                if found {
                    self.synced = true;
                    self.guess = true;
                    continue;
                }
                break;
            }
        }
        self.consume(pos);
    }

    /// The scan's candidate at `j` (a frame of `size`, judged plausible or still
    /// undecided), or the start of a later packet inside it whose bytes make a strong
    /// frame: clients and brokers write whole frames, so a packet's first byte is the
    /// likelier boundary, and a candidate that begins elsewhere and swallows it (or holds
    /// it back while waiting for more bytes) is mostly a misreading after a desync.
    fn aligned(&self, j: usize, size: u32, n: usize, fin: bool, judge: &mut impl Judge) -> usize {
        if self.marks.len() < 2 || !judge.checks() {
            return j;
        }
        let stop = j as i64 + 4 + size as i64;
        for m in &self.marks {
            let b = m.0 - self.off;
            if b == j as i64 || b >= stop {
                return j; // the candidate starts a packet, or no packet starts inside it
            }
            if (j as i64) < b && b + 4 <= n as i64 {
                let b = b as usize;
                if let Checked::Size(r) = self.check(b, n - b, fin, judge) {
                    // only a strong reading wins, not a mere plausible orphan (which bytes
                    // inside a big frame can look like); asked again, as Python does
                    let k = (r as usize).min(self.peek).min(n - b - 4);
                    if judge.plausible(&self.held()[b + 4..b + 4 + k]) != Verdict::Yes {
                        return b;
                    }
                }
            }
        }
        j
    }

    /// A size prefix at a frame boundary whose header was rejected: its size if the frame
    /// still counts as one (damaged or unknown, not a desync), else None.
    ///
    /// It counts when `pos` is a known boundary (this direction already had frames, or it
    /// is the first byte of a connection whose handshake was captured and which is known
    /// to carry Kafka), the size is within the limits and the frame ends exactly where
    /// the held bytes end (the end of a TCP segment): a damaged header then costs only
    /// its own frame instead of a scan that can misframe the frames after it. It counts
    /// too, wherever it ends, when `sane` accepts its header at a boundary known without a
    /// guess: the first byte of a connection whose handshake was captured, or the end of a
    /// frame cut in sync (an API key or version newer than `plausible` knows).
    fn damaged(&mut self, pos: usize, n: usize, judge: &mut impl Judge) -> Option<u32> {
        let size = size_at(self.held(), pos);
        if size > self.max_frame_size {
            self.over_max_frames += 1;
            return None;
        }
        if size < self.min_frame_size {
            return None;
        }
        let (syn_seen, kafka) = judge.first_known();
        let at = self.off + pos as i64;
        let first = syn_seen && at == 0;
        if (self.frames > 0 || (first && kafka)) && size as usize == n - pos - 4 {
            self.damaged_frames += 1;
            return Some(size);
        }
        if first || (self.frames > 0 && Some(at) != self.guess_end) {
            let k = (size as usize).min(self.peek).min(n - pos - 4);
            if judge.sane(&self.held()[pos + 4..pos + 4 + k], size) {
                self.unknown_frames += 1;
                return Some(size);
            }
        }
        None
    }

    /// Set `at` after anything but the straight cut (see its doc).
    fn sync_at(&mut self) {
        self.at = if self.buffered() == 0
            && self.synced
            && self.drop == 0
            && !self.finished
            && self.started
        {
            Some(self.off)
        } else {
            None
        };
    }

    // -- public -------------------------------------------------------------------------

    /// In-order stream bytes `data` at stream offset `off` of packet `index` (time `ts`)
    /// (Python's `feed_data`, or `feed` of a `StreamData`: the same frames). Bytes at the
    /// expected offset of a framer in sync with nothing held are cut straight from `data`
    /// (most TCP segments are whole frames), with the judge's verdict on each; the first
    /// event of a stream starts at a frame boundary wherever it is. An overlap with bytes
    /// already had is dropped (the first copy wins); a hole is a gap.
    pub fn data(
        &mut self,
        off: i64,
        data: &[u8],
        ts: f64,
        index: u64,
        judge: &mut impl Judge,
        out: &mut Vec<Frame>,
    ) {
        if !self.started && !self.finished {
            self.at = Some(off); // the first event: it starts at a frame boundary
        }
        if self.at == Some(off) {
            self.cut(off, data, ts, index, judge, out);
            return;
        }
        self.data_event(off, data, ts, index, judge, out);
        self.sync_at();
    }

    /// The straight cut: in sync at a frame boundary with nothing held, whole frames come
    /// out of `data` without being held; the rest is held for the state machine.
    fn cut(
        &mut self,
        off: i64,
        data: &[u8],
        ts: f64,
        index: u64,
        judge: &mut impl Judge,
        out: &mut Vec<Frame>,
    ) {
        self.started = true;
        let n = data.len();
        let mut pos = 0usize;
        let checks = judge.checks();
        let mut seen = None;
        while n - pos >= 4 {
            let size = size_at(data, pos);
            if size < self.min_frame_size
                || size > self.max_frame_size
                || size as usize > n - pos - 4
            {
                break;
            }
            let end = pos + 4 + size as usize;
            let body = &data[pos + 4..end];
            if checks {
                // the peek: the frame's bytes when no longer (mostly)
                let v = judge.plausible(&body[..body.len().min(self.peek)]);
                seen = Some(v);
                if v == Verdict::No {
                    break;
                }
            }
            out.push(Frame {
                dir: self.dir,
                data: body.to_vec(),
                size,
                first_index: index,
                last_index: index,
                first_ts: ts,
                last_ts: ts,
                offset: off + pos as i64,
                truncated: false,
                seen,
            });
            self.frames += 1;
            self.reason = DESYNC;
            if end == n {
                self.off = off + n as i64;
                self.at = Some(self.off);
                return;
            }
            pos = end;
        }
        if pos == n {
            // no bytes
            self.off = off;
            return;
        }
        // the rest is not a whole plausible frame: held for the state machine
        self.last_index = index;
        self.last_ts = ts;
        self.off = off + pos as i64;
        self.marks.clear();
        self.marks.push((self.off, index, ts));
        self.hold(&data[pos..]);
        self.run(out, false, judge);
        self.sync_at();
    }

    /// `data` of bytes not at `at`.
    fn data_event(
        &mut self,
        off: i64,
        data: &[u8],
        ts: f64,
        index: u64,
        judge: &mut impl Judge,
        out: &mut Vec<Frame>,
    ) {
        if self.finished {
            return;
        }
        if !self.started {
            self.started = true;
            self.off = off;
        }
        let end_held = self.off + self.buffered() as i64;
        let (mut off, mut data) = (off, data);
        if off < end_held {
            // overlap with what we have: keep the first copy
            let cut = (end_held - off) as u64;
            if cut >= data.len() as u64 {
                return;
            }
            data = &data[cut as usize..];
            off = end_held;
        } else if off > end_held {
            // a hole the reassembler did not report: a gap
            self.gap_at(end_held, (off - end_held) as u64, judge, out);
        }
        self.last_index = index;
        self.last_ts = ts;
        if self.buffered() == 0 && self.synced && self.drop == 0 {
            // whole frames straight out of this segment's bytes
            self.at = Some(off);
            self.cut(off, data, ts, index, judge, out);
            return;
        }
        if self.drop > 0 {
            let k = self.drop.min(data.len() as u64);
            self.drop -= k;
            self.skip(GAP, k);
            data = &data[k as usize..];
            off += k as i64;
            self.off = off;
            if data.is_empty() {
                return;
            }
        }
        if self.buffered() == 0 {
            self.off = off;
            self.marks.clear();
        }
        self.marks.push((off, index, ts));
        self.hold(data);
        self.run(out, false, judge);
    }

    /// Bytes `off..off + length` the capture does not have (Python's `feed` of a
    /// `StreamGap`). `ts` and `index` are unused, as in Python: a frame's packets are
    /// those that carried its bytes.
    pub fn gap(
        &mut self,
        off: i64,
        length: u64,
        _ts: f64,
        _index: u64,
        judge: &mut impl Judge,
        out: &mut Vec<Frame>,
    ) {
        if !self.finished {
            if !self.started {
                self.started = true;
                self.off = off;
            }
            let end_held = self.off + self.buffered() as i64;
            let gap_end = off + length as i64;
            if gap_end > end_held {
                let start = off.max(end_held);
                self.gap_at(start, (gap_end - start) as u64, judge, out);
            }
        }
        self.sync_at();
    }

    /// The gap `off..off + length`, which starts where the held bytes end.
    fn gap_at(
        &mut self,
        mut off: i64,
        mut length: u64,
        judge: &mut impl Judge,
        out: &mut Vec<Frame>,
    ) {
        if self.drop > 0 {
            let k = self.drop.min(length);
            self.drop -= k;
            self.skip(GAP, k);
            length -= k;
            off += k as i64;
            if self.drop > 0 {
                self.clear_buf();
                self.off = off;
                return;
            }
            if length == 0 {
                // the gap ends exactly at the frame boundary
                self.clear_buf();
                self.marks.clear();
                self.off = off;
                self.synced = true;
                return;
            }
        }
        // a frame in progress, or (scanning) the candidate the scan waits on, cut here:
        // judged on the bytes there are (after a lost segment, a capture cut by the
        // snaplen has only such candidates: each packet's frame head, then a gap)
        let held = self.buffered();
        if held >= 4 && (self.synced || held - 4 >= PARTIAL) {
            let r = match self.decided {
                Some(d) => Checked::Size(d),
                None => self.check(0, held, true, judge),
            };
            if let Checked::Size(size) = r {
                let start = self.off;
                let data = self.held()[4..4 + (size as usize).min(held - 4)].to_vec();
                let frame_end = start + 4 + size as i64;
                let last = if data.is_empty() {
                    self.packet_of(start)
                } else {
                    self.packet_of(start + 3 + data.len() as i64)
                };
                let f = self.emit(start, size, data, true, Some(last));
                out.push(f);
                self.clear_buf();
                self.marks.clear();
                self.decided = None;
                let gap_end = off + length as i64;
                self.skip(GAP, length);
                self.off = gap_end;
                if gap_end <= frame_end {
                    // in sync again at frame_end, after dropping the rest of this frame
                    self.drop = (frame_end - gap_end) as u64;
                    self.synced = true;
                } else {
                    // the frame ends inside the gap: next boundary unknown
                    self.synced = false;
                    self.reason = GAP;
                }
                return;
            }
        }
        // a cut header, or scanning: bytes held are lost; resync after the gap
        self.skip(GAP, held as u64 + length);
        self.clear_buf();
        self.marks.clear();
        self.decided = None;
        self.off = off + length as i64;
        self.synced = false;
        self.reason = GAP;
    }

    /// The end of the stream: a partial frame becomes a truncated frame, other held
    /// bytes are skipped. Later events are ignored.
    pub fn finish(&mut self, judge: &mut impl Judge, out: &mut Vec<Frame>) {
        if self.finished {
            return;
        }
        self.finished = true;
        self.at = None;
        if self.buffered() == 0 {
            // most directions end with their last frame complete: nothing to cut
            self.marks = Vec::new();
            return;
        }
        self.run(out, true, judge);
        let held = self.buffered();
        if held > 0 && self.synced && held >= 4 {
            let r = match self.decided {
                Some(d) => Checked::Size(d),
                None => self.check(0, held, true, judge),
            };
            if let Checked::Size(size) = r {
                let data = self.held()[4..4 + (size as usize).min(held - 4)].to_vec();
                let f = self.emit(self.off, size, data, true, None);
                out.push(f);
                self.clear_buf();
            }
        }
        let held = self.buffered();
        if held > 0 {
            self.skip(END_OF_STREAM, held as u64);
            self.clear_buf();
        }
        self.marks = Vec::new();
    }
}
