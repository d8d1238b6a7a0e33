//! The lean summary of the records of a Produce request or Fetch response partition,
//! which `stats` reads once per partition: no Field per record, but the full decoder's
//! verdicts.
//!
//! Three on-wire formats share one framing (offset int64, size int32, then the rest) and
//! the magic byte at offset 16 of each entry tells them apart: magic 0 / 1 messages
//! (CRC-32 over magic..end; a compressed message carries an inner message set in its
//! value) and magic 2 record batches (CRC-32C over attributes..end). The summary counts
//! records (a v2 batch's records_count, one per magic 0/1 message, the inner messages of
//! a compressed wrapper), names the codec of the outer entries, checks every CRC, walks
//! the records of each v2 batch one by one (decompressed first when compressed), and
//! notes what is malformed: [`lean_summary`]. Its counts, CRC verdicts, limits and
//! malformed marks are those of the full decoder (`dissectors.records.decode_records`), so
//! `stats` counts the bad bytes inside a batch with a good CRC that `read` marks.
//!
//! Every length from the wire is checked before use; decompression stops at the
//! `max_decompressed` budget, shared by all the wrappers of one records field, and
//! wrappers nest at most [`MAX_WRAPPER_DEPTH`] deep.

mod decompress;

use crate::wire::{self, be_i16, be_i32, be_i64, be_u32};
use decompress::Verdict;

/// A compressed message inside a compressed message, at most twice.
pub const MAX_WRAPPER_DEPTH: u32 = 2;
/// The smallest record: length, attributes, ts delta, offset delta, key/value lengths,
/// header count.
const MIN_RECORD_SIZE: i64 = 7;
/// A v2 batch's header, log header included.
const V2_HEADER: usize = 61;
/// The smallest batch_length of a v2 batch.
const V2_MIN_LENGTH: i32 = (V2_HEADER - 12) as i32;
/// The smallest message_size of a magic 0 and a magic 1 message.
const LEGACY_MIN_SIZE: [i32; 2] = [14, 22];
/// The codec id of a set whose outer entries have several codecs.
const MIXED: i32 = 8;
const MALFORMED: &str = "malformed: ";

/// The codec names of the lean summary by codec id (`_LEAN_CODECS`; 8 is "mixed").
const LEAN_CODECS: [&str; 9] = [
    "none",
    "gzip",
    "snappy",
    "lz4",
    "zstd",
    "unknown(5)",
    "unknown(6)",
    "unknown(7)",
    "mixed",
];

/// The lean summary of one records field, and what it adds to the decode context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordsSummary {
    /// The records (v2 records_count, magic 0/1 messages after decompression): the
    /// Field's value and extra["records"].
    pub records: i64,
    /// extra["codec"]: the outer entries' codec, "mixed", or "none" for no entry.
    pub codec: &'static str,
    /// No invalid CRC in it.
    pub crc_ok: bool,
    /// A partial entry ends it (cut by max_bytes): not counted, not malformed.
    pub truncated: bool,
    /// What it adds to ctx.crc_valid and ctx.crc_invalid.
    pub crc_valid: u32,
    pub crc_invalid: u32,
    /// How many notes are malformed marks (ctx.malformed += malformed).
    pub malformed: u32,
    /// The Field's notes in order, as Python writes them.
    pub notes: Vec<String>,
    /// Each ctx.hit_limit(...) in order: "max_array_len" or "max_decompressed".
    pub limits: Vec<&'static str>,
    /// The header of each whole v2 batch of the field, in order: extra["batches"] of the
    /// full decoder (what the producer-sequence rules of `check` read).
    pub batches: Vec<BatchHead>,
}

/// A v2 batch's producer state, as the full decoder's extra["batches"] has it, and its
/// sizes (the `batches` table's row of it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHead {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    /// records_count as on the wire
    pub record_count: i32,
    pub base_offset: i64,
    pub transactional: bool,
    pub control: bool,
    /// the whole batch on the wire (its 12-byte log header included)
    pub bytes: usize,
    /// the same with its records decompressed (None: they could not be, within the limit)
    pub bytes_before: Option<usize>,
    pub codec: &'static str,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
}

/// What a summary gathers on its way.
struct Acc {
    max_array_len: i64,
    budget: i64,
    crc_valid: u32,
    crc_invalid: u32,
    malformed: u32,
    notes: Vec<String>,
    limits: Vec<&'static str>,
    batches: Vec<BatchHead>,
}

impl Acc {
    fn malformed(&mut self, reason: String) {
        self.notes.push(format!("{MALFORMED}{reason}"));
        self.malformed += 1;
    }

    /// `data` decompressed under the records field's budget (what it made is taken off
    /// the budget, a hit of the limit counted).
    fn decompress(&mut self, codec_id: u8, data: &[u8]) -> (Vec<u8>, Verdict) {
        let (out, verdict) = decompress::decompress(codec_id, data, self.budget);
        self.budget = (self.budget.max(0) - out.len() as i64).max(0);
        if verdict == Verdict::Limit {
            self.limits.push("max_decompressed");
        }
        (out, verdict)
    }

    fn crc(&mut self, index: usize, stored: u32, computed: u32) {
        if stored == computed {
            self.crc_valid += 1;
        } else {
            self.crc_invalid += 1;
            self.notes.push(format!(
                "[{index}]: crc INVALID (0x{stored:08x}), computed 0x{computed:08x}"
            ));
        }
    }
}

/// The lean summary of the records bytes `buf[start..end]` (`end` clamped to the
/// buffer, as Python does), under the limits `max_array_len` (a v2 records_count above it
/// is not counted) and `max_decompressed` (the bytes all compressed wrappers of the field
/// may decompress to, together). Never panics.
pub fn lean_summary(
    buf: &[u8],
    start: usize,
    end: usize,
    max_array_len: i64,
    max_decompressed: i64,
) -> RecordsSummary {
    let end = end.min(buf.len());
    let mut acc = Acc {
        max_array_len,
        budget: max_decompressed,
        crc_valid: 0,
        crc_invalid: 0,
        malformed: 0,
        notes: Vec::new(),
        limits: Vec::new(),
        batches: Vec::new(),
    };
    let (records, cid, truncated) = summary_set(buf, start, end, &mut acc, 0, None, false);
    let codec = usize::try_from(cid).map_or("none", |c| LEAN_CODECS[c]);
    RecordsSummary {
        records,
        codec,
        crc_ok: acc.crc_invalid == 0,
        truncated,
        crc_valid: acc.crc_valid,
        crc_invalid: acc.crc_invalid,
        malformed: acc.malformed,
        notes: acc.notes,
        limits: acc.limits,
        batches: acc.batches,
    }
}

/// `_summary_set`: the entries of `buf[pos..end]`: (records, codec id of the outer
/// entries: -1 none, [`MIXED`] several; whether a truncated batch ends the set). Depth 0
/// is the records field itself; deeper sets are a compressed wrapper's inner messages
/// (`wrapper_magic` its magic; `cut_by_limit`: the decompressed size limit cut them).
fn summary_set(
    buf: &[u8],
    mut pos: usize,
    end: usize,
    acc: &mut Acc,
    depth: u32,
    wrapper_magic: Option<u8>,
    cut_by_limit: bool,
) -> (i64, i32, bool) {
    let mut count = 0i64;
    let mut cid = -1i32;
    let mut index = 0usize;
    while pos < end {
        let left = end - pos;
        let size = if left >= 12 {
            be_i32(buf, pos + 8)
        } else {
            None
        };
        let fits = size.is_some_and(|s| s >= 0 && 12 + s as usize <= left);
        let Some(size) = size.filter(|_| fits) else {
            let negative = size.filter(|&s| s < 0);
            if depth == 0 && negative.is_none() {
                return (count, cid, true);
            }
            if cut_by_limit {
                acc.notes
                    .push("message cut by the decompressed size limit".to_string());
            } else if let Some(s) = negative {
                acc.malformed(format!("[{index}]: negative entry size {s}"));
            } else {
                acc.malformed(format!("entry [{index}] of {left} bytes cut short"));
            }
            return (count, cid, false);
        };
        if size < 5 {
            acc.malformed(format!(
                "[{index}]: entry size {size} too small to hold a magic byte"
            ));
            return (count, cid, false);
        }
        let magic = buf[pos + 16];
        let entry_end = pos + 12 + size as usize;
        match magic {
            2 => {
                if let Some(wm) = wrapper_magic {
                    acc.malformed(format!(
                        "[{index}]: a magic 2 batch inside a magic {wm} wrapper"
                    ));
                    return (count, cid, false);
                }
                if size < V2_MIN_LENGTH {
                    acc.malformed(format!(
                        "[{index}]: batch_length {size} shorter than the {V2_MIN_LENGTH}-byte v2 header"
                    ));
                } else {
                    // crc at 17, attributes at 21, records_count at 57: within the entry
                    let crc = be_u32(buf, pos + 17).unwrap_or(0);
                    let attrs = buf[pos + 22];
                    let n = be_i32(buf, pos + 57).unwrap_or(0);
                    let whole = entry_end - pos;
                    acc.batches.push(BatchHead {
                        producer_id: be_i64(buf, pos + 43).unwrap_or(0),
                        producer_epoch: be_i16(buf, pos + 51).unwrap_or(0),
                        base_sequence: be_i32(buf, pos + 53).unwrap_or(0),
                        record_count: n,
                        base_offset: be_i64(buf, pos).unwrap_or(0),
                        transactional: attrs & 0x10 != 0,
                        control: attrs & 0x20 != 0,
                        bytes: whole,
                        // (a compressed batch's: once its records are decompressed)
                        bytes_before: (attrs & 7 == 0).then_some(whole),
                        codec: LEAN_CODECS[usize::from(attrs & 7)],
                        base_timestamp: be_i64(buf, pos + 27).unwrap_or(0),
                        max_timestamp: be_i64(buf, pos + 35).unwrap_or(0),
                    });
                    acc.crc(index, crc, crc32c::crc32c(&buf[pos + 21..entry_end]));
                    let c = i32::from(attrs & 7);
                    if c != cid {
                        cid = if cid < 0 { c } else { MIXED };
                    }
                    let room = (entry_end - pos - V2_HEADER) as i64;
                    let sane = match bad_records_count(i64::from(n), c, room, acc) {
                        None => true,
                        Some(why) => {
                            acc.malformed(format!("[{index}]: {why}"));
                            false
                        }
                    };
                    count += v2_records(buf, pos + V2_HEADER, entry_end, c, n, sane, acc, index);
                }
            }
            0 | 1 => {
                if size < LEGACY_MIN_SIZE[usize::from(magic)] {
                    acc.malformed(format!(
                        "[{index}]: message_size {size} shorter than a magic {magic} message"
                    ));
                } else {
                    if depth == 0 {
                        let c = i32::from(buf[pos + 17] & 7);
                        if c != cid {
                            cid = if cid < 0 { c } else { MIXED };
                        }
                    }
                    count += summary_message(buf, pos, entry_end, magic, acc, depth, index);
                }
            }
            _ => {
                acc.malformed(format!("[{index}]: unknown magic {magic}"));
                return (count, cid, false);
            }
        }
        pos = entry_end;
        index += 1;
    }
    (count, cid, false)
}

/// The records of the v2 batch whose records run `buf[rstart..batch_end]` (`index` in
/// its set), decompressed when `codec_id` says so and walked record by record as
/// `_decode_v2` and `_decode_v2_records` walk them, with their malformed marks: the
/// records it counts (records_count when `sane`, else those present).
#[allow(clippy::too_many_arguments)]
fn v2_records(
    buf: &[u8],
    rstart: usize,
    batch_end: usize,
    codec_id: i32,
    count: i32,
    mut sane: bool,
    acc: &mut Acc,
    index: usize,
) -> i64 {
    let count = i64::from(count);
    // `marked`: the records field's own mark (a bad decompression, bytes after the last
    // record), after which records_count is not held against the records present
    let mut marked = false;
    let mut limited = false;
    let inner;
    let (rbuf, rpos, rend) = if codec_id == 0 {
        (buf, rstart, batch_end)
    } else {
        let (out, verdict) = acc.decompress(codec_id as u8, &buf[rstart..batch_end]);
        match verdict {
            Verdict::Done => {
                // (the batch's head, pushed before its records: its size before compression)
                if let Some(head) = acc.batches.last_mut() {
                    head.bytes_before = Some(V2_HEADER + out.len());
                }
                if sane && count > out.len() as i64 / MIN_RECORD_SIZE {
                    acc.malformed(format!(
                        "[{index}]: records_count {count} exceeds what {} decompressed bytes can hold",
                        out.len()
                    ));
                    sane = false;
                }
            }
            Verdict::Limit => limited = true,
            Verdict::Bad(note) => {
                acc.malformed(format!("[{index}]: {note}"));
                marked = true;
            }
        }
        if (limited || marked) && out.is_empty() {
            return if sane { count } else { 0 };
        }
        inner = out;
        (&inner[..], 0, inner.len())
    };
    let limit = if sane { count } else { acc.max_array_len };
    let decoded = walk_records(rbuf, rpos, rend, limit, limited, &mut marked, acc, index);
    if sane && decoded != count && !marked && !limited {
        acc.malformed(format!(
            "[{index}]: records_count {count} but {decoded} records present"
        ));
    }
    if sane {
        count
    } else {
        decoded
    }
}

/// `_varint`: a zigzag varint of at most 10 bytes at `pos` before `end`: (value, next
/// position), or why not.
fn zigzag(buf: &[u8], pos: usize, end: usize) -> Result<(i128, usize), &'static str> {
    match wire::uvarint(buf, pos, end, 10) {
        Ok((v, next)) => Ok((wire::unzigzag(v), next)),
        Err(wire::Varint::Cut) => Err("varint cut short"),
        Err(wire::Varint::TooLong) => Err("varint longer than 10 bytes"),
    }
}

/// Why a record stops the walk.
enum Stop {
    /// Bad bytes: the mark's text.
    Bad(String),
    /// Its length could not be read or held (before any field of it was).
    Length(String),
}

/// `_decode_v2_records` without Fields: the records of `buf[pos..end]` (at most `limit`),
/// each record's bad bytes marked `[index]: record [n]: ...`, the field's own mark setting
/// `marked`; `cut_by_limit`: the decompressed size limit cut the data (a record it cut is
/// not malformed). The records walked.
#[allow(clippy::too_many_arguments)]
fn walk_records(
    buf: &[u8],
    mut pos: usize,
    end: usize,
    limit: i64,
    cut_by_limit: bool,
    marked: &mut bool,
    acc: &mut Acc,
    index: usize,
) -> i64 {
    let mut n = 0i64;
    while pos < end && n < limit {
        match one_record(buf, pos, end) {
            Ok((rend, length, early)) => {
                if early > 0 {
                    acc.malformed(format!(
                        "[{index}]: record [{n}]: record length {length} but its fields end {early} bytes early"
                    ));
                }
                pos = rend;
                n += 1;
            }
            Err(Stop::Length(_)) if cut_by_limit => {
                acc.notes
                    .push("record cut by the decompressed size limit".to_string());
                return n;
            }
            Err(Stop::Bad(why) | Stop::Length(why)) => {
                acc.malformed(format!("[{index}]: record [{n}]: {why}"));
                return n;
            }
        }
    }
    if pos < end && !*marked {
        acc.malformed(format!(
            "[{index}]: {} bytes after the last record",
            end - pos
        ));
        *marked = true;
    }
    n
}

/// One record at `pos`: (its end, its declared length, how many of its bytes its fields
/// left unread), or why it stops the walk.
fn one_record(buf: &[u8], pos: usize, end: usize) -> Result<(usize, i128, usize), Stop> {
    let (length, p) = zigzag(buf, pos, end).map_err(|e| Stop::Length(e.to_string()))?;
    let left = (end - p) as i128;
    if length < MIN_RECORD_SIZE as i128 - 1 || length > left {
        return Err(Stop::Length(format!(
            "record length {length} does not fit the {left} bytes left"
        )));
    }
    let rend = p + length as usize;
    let read = |at: usize| zigzag(buf, at, rend).map_err(|e| Stop::Bad(e.to_string()));
    // attributes, then the timestamp and offset deltas
    let (_, q) = read(p + 1)?;
    let (_, mut q) = read(q)?;
    for part in ["key", "value"] {
        let (len, r) = read(q)?;
        q = r;
        if len < 0 {
            if len != -1 {
                return Err(Stop::Bad(format!("negative {part} length {len}")));
            }
        } else if len > (rend - q) as i128 {
            return Err(Stop::Bad(format!("{part} length {len} exceeds the record")));
        } else {
            q += len as usize;
        }
    }
    let (headers, r) = read(q)?;
    q = r;
    if headers < 0 || headers > ((rend - q) / 2) as i128 {
        return Err(Stop::Bad(format!(
            "headers count {headers} does not fit the record"
        )));
    }
    for _ in 0..headers {
        let (klen, r) = read(q)?;
        if klen < 0 || klen > (rend - r) as i128 {
            return Err(Stop::Bad(format!(
                "header key length {klen} does not fit the record"
            )));
        }
        let (vlen, r) = read(r + klen as usize)?;
        q = r;
        if vlen >= 0 {
            if vlen > (rend - q) as i128 {
                return Err(Stop::Bad(format!(
                    "header value length {vlen} does not fit the record"
                )));
            }
            q += vlen as usize;
        } else if vlen != -1 {
            return Err(Stop::Bad(format!("negative header value length {vlen}")));
        }
    }
    Ok((rend, length, rend - q))
}

/// `_bad_records_count`: why a v2 batch's records_count cannot be counted (`room`: the
/// bytes after its header), or None when it can.
fn bad_records_count(count: i64, codec_id: i32, room: i64, acc: &mut Acc) -> Option<String> {
    if count < 0 {
        return Some(format!("negative records_count {count}"));
    }
    if count > acc.max_array_len {
        acc.limits.push("max_array_len");
        return Some(format!(
            "records_count {count} over the limit {}",
            acc.max_array_len
        ));
    }
    if codec_id == 0 && count > room.div_euclid(MIN_RECORD_SIZE) {
        return Some(format!(
            "records_count {count} exceeds what {room} bytes can hold"
        ));
    }
    None
}

/// `_summary_message`: a magic 0/1 message of a sane size (`buf[pos..msg_end]`): its
/// CRC, its key and value lengths and, for a compressed wrapper, its inner messages. The
/// records it counts.
fn summary_message(
    buf: &[u8],
    pos: usize,
    msg_end: usize,
    magic: u8,
    acc: &mut Acc,
    depth: u32,
    index: usize,
) -> i64 {
    let crc = be_u32(buf, pos + 12).unwrap_or(0);
    acc.crc(index, crc, crc32fast::hash(&buf[pos + 16..msg_end]));
    let mut p = if magic == 0 { pos + 18 } else { pos + 26 };
    let mut n = 0i32;
    for part in ["key", "value"] {
        let Some(len) = be_i32(buf, p).filter(|_| p + 4 <= msg_end) else {
            acc.malformed(format!("[{index}]: {part} length cut short"));
            return 1;
        };
        n = len;
        p += 4;
        if n < -1 || (n > 0 && p + n as usize > msg_end) {
            acc.malformed(format!(
                "[{index}]: {part} length {n} does not fit the {} bytes left",
                msg_end - p
            ));
            return 1;
        }
        if n > 0 {
            p += n as usize;
        }
    }
    if p != msg_end {
        acc.malformed(format!("[{index}]: {} bytes after the value", msg_end - p));
    }
    let codec_id = buf[pos + 17] & 7;
    if codec_id == 0 {
        return 1;
    }

    // a compressed wrapper: its value (the last n bytes before p) is an inner message set
    if n < 0 {
        acc.malformed(format!("[{index}]: compressed message with a null value"));
        return 0;
    }
    if depth >= MAX_WRAPPER_DEPTH {
        acc.malformed(format!(
            "[{index}]: compressed messages nested more than {MAX_WRAPPER_DEPTH} deep"
        ));
        return 0;
    }
    let value = &buf[p - n as usize..p];
    let (inner, verdict) = acc.decompress(codec_id, value);
    let limited = match verdict {
        Verdict::Done => false,
        Verdict::Limit => true,
        Verdict::Bad(note) => {
            acc.malformed(note);
            false
        }
    };
    if inner.is_empty() {
        return 0;
    }
    summary_set(&inner, 0, inner.len(), acc, depth + 1, Some(magic), limited).0
}

#[cfg(test)]
mod tests;
