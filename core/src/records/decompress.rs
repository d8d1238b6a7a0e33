//! Bounded decompression of a compressed magic 0/1 wrapper's value, as
//! `dissectors.compression.decompress_detail` does it: the same output (hence the same
//! record counts) and the same verdict, a size-limit hit or bad data, on any gzip, snappy
//! or zstd input and on any well-formed lz4 one.
//!
//! Python reads each codec in chunks of at most [`CHUNK`] bytes (one library call per
//! chunk, asking for one byte more than the limit allows), and keeps only the chunks of
//! the calls that returned: a library error drops the chunk of the call that raised it.
//! Each reader here makes the same calls in the same sizes to a library (or code) that
//! accepts and rejects what Python's does:
//!
//! - gzip: zlib-rs, zlib's inflate (Python's zlib), auto-detecting a gzip or zlib header
//!   (window bits 47), member after member;
//! - snappy: the `snap` crate, the one cramjam's snappy is (raw blocks, xerial framing,
//!   the snappy framing format);
//! - lz4: `lz4_flex`'s frame decoder, frame by frame (the frames walked here by their
//!   block sizes, the pre-0.10 Kafka header checksum rewritten to the standard one); on
//!   well-formed frames it reads what python-lz4's liblz4 reads, on damaged ones it may
//!   stop elsewhere or in other words (`tests/test_core_records.py` lists how);
//! - zstd: libzstd 1.5.7 (the version python-zstandard 0.25 bundles) through
//!   `ZSTD_decompressStream`, as python-zstandard's stream reader calls it.
//!
//! Notes in our own words are Python's exactly; where Python's note quotes a library's
//! exception, the note here is the same when the library's message is known (zlib,
//! liblz4, libzstd) and the `snap` crate's own message for snappy.

use zlib_rs::{Inflate, InflateError, InflateFlush, Status};

/// The largest chunk Python asks a codec for in one call.
pub(crate) const CHUNK: usize = 1 << 20;

/// How a decompression ended (besides its output).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The whole input was read.
    Done,
    /// The output reached the limit ("decompressed size limit N hit"); it is cut there.
    Limit,
    /// Bad data: the note, as Python writes it.
    Bad(String),
}

/// `decompress_detail(CODEC_NAMES[codec_id], data, limit)` for codec ids 1..=7 (5..=7
/// are unknown codecs): the output and the verdict.
pub(crate) fn decompress(codec_id: u8, data: &[u8], limit: i64) -> (Vec<u8>, Verdict) {
    // a negative limit reads as 0; on a 32-bit target a limit past the address space is
    // no limit at all
    let limit = usize::try_from(limit.max(0)).unwrap_or(usize::MAX - 1);
    match codec_id {
        1 => gzip(data, limit),
        2 => snappy(data, limit),
        3 => lz4(data, limit),
        4 => zstd(data, limit),
        other => (
            Vec::new(),
            Verdict::Bad(format!("unknown codec 'unknown({other})'")),
        ),
    }
}

/// What Python asks for in one call: a chunk, or one byte more than the limit leaves.
fn want(limit: usize, total: usize) -> usize {
    CHUNK.min(limit.saturating_sub(total).saturating_add(1))
}

/// `_why(exc)`: the first line of a library's message, at most 120 characters.
fn why(text: &str) -> String {
    let line = text.trim().lines().next().unwrap_or("");
    line.chars().take(120).collect()
}

// -- gzip -------------------------------------------------------------------------

/// Python's zlib error text for an inflate error (`zlib_error`).
fn zlib_message(err: InflateError, msg: Option<&str>) -> String {
    match err {
        InflateError::NeedDict { .. } => "Error 2 while decompressing data".to_string(),
        InflateError::StreamError => format!(
            "Error -2 while decompressing data: {}",
            msg.unwrap_or("inconsistent stream state")
        ),
        // (zlib-rs names some errors found on its fast path "repeated call with bad
        // state", where zlib gives the reason: both are an error of that call)
        InflateError::DataError => format!(
            "Error -3 while decompressing data: {}",
            msg.filter(|m| !m.starts_with("repeated call"))
                .unwrap_or("invalid input data")
        ),
        InflateError::MemError => format!(
            "Error -4 while decompressing data: {}",
            msg.unwrap_or("out of memory")
        ),
    }
}

/// One `decompressobj.decompress(input, max_length=want)` call: inflate into output
/// blocks that grow to `want` bytes in all (CPython's output buffer does the same; the
/// block sizes do not change what inflate does). Returns (input consumed, stream end).
fn inflate_call(
    d: &mut Inflate,
    input: &[u8],
    out: &mut Vec<u8>,
    want: usize,
) -> Result<(usize, bool), String> {
    let mut consumed = 0usize;
    let mut produced = 0usize;
    let mut block = 32 * 1024;
    loop {
        let room = (want - produced).min(block);
        if room == 0 {
            return Ok((consumed, false)); // max_length reached
        }
        block = block.saturating_mul(4);
        let start = out.len();
        out.resize(start + room, 0);
        let (in0, out0) = (d.total_in(), d.total_out());
        let r = d.decompress(
            &input[consumed..],
            &mut out[start..],
            InflateFlush::SyncFlush,
        );
        let n_in = usize::try_from(d.total_in() - in0).unwrap_or(0);
        let n_out = usize::try_from(d.total_out() - out0).unwrap_or(0).min(room);
        out.truncate(start + n_out);
        consumed = (consumed + n_in).min(input.len());
        produced += n_out;
        match r {
            Err(e) => return Err(zlib_message(e, d.error_message())),
            Ok(Status::StreamEnd) => return Ok((consumed, true)),
            Ok(_) => {
                if n_out < room {
                    return Ok((consumed, false));
                }
            }
        }
    }
}

/// `_gzip`: gzip members (or a zlib stream) one after the other.
fn gzip(data: &[u8], limit: usize) -> (Vec<u8>, Verdict) {
    let mut out = Vec::new();
    let mut rest = data;
    let mut members = 0usize;
    while !rest.is_empty() {
        let mut d = Inflate::new(true, 47);
        let mut pos = 0usize;
        let mut eof;
        loop {
            let call_start = out.len();
            let pos_before = pos;
            match inflate_call(&mut d, &rest[pos..], &mut out, want(limit, call_start)) {
                Ok((consumed, end)) => {
                    pos += consumed;
                    eof = end;
                }
                Err(msg) => {
                    out.truncate(call_start);
                    return (out, Verdict::Bad(format!("bad gzip data: {}", why(&msg))));
                }
            }
            let chunk = out.len() - call_start;
            if chunk > 0 && out.len() > limit {
                out.truncate(limit);
                return (out, Verdict::Limit);
            }
            // (a call that neither reads nor writes cannot be followed by one that does)
            if eof || (chunk == 0 && (pos >= rest.len() || pos == pos_before)) {
                break;
            }
        }
        if !eof {
            return (
                out,
                Verdict::Bad(
                    "bad gzip data: stream ends before the end of the gzip member".to_string(),
                ),
            );
        }
        members += 1;
        rest = &rest[pos.min(rest.len())..];
        if !rest.is_empty() && !rest.starts_with(b"\x1f\x8b") {
            if rest.iter().any(|&b| b != 0) {
                let note = format!("bad gzip data: {} bytes of trailing garbage", rest.len());
                return (out, Verdict::Bad(note));
            }
            break;
        }
    }
    if members == 0 {
        return (
            Vec::new(),
            Verdict::Bad("bad gzip data: empty input".to_string()),
        );
    }
    (out, Verdict::Done)
}

// -- snappy -----------------------------------------------------------------------

const XERIAL_MAGIC: &[u8] = b"\x82SNAPPY\x00";
const SNAPPY_FRAMED_MAGIC: &[u8] = b"\xff\x06\x00\x00sNaPpY";

/// What a raw snappy block gave: its output, the budget exceeded, or bad data.
enum Raw {
    Out(Vec<u8>),
    Limit,
    Bad(String),
}

/// `_varint_len`: the uncompressed length preamble of a raw block, (value, size).
fn varint_len(data: &[u8]) -> Option<(u64, usize)> {
    let (v, n) = crate::wire::uvarint(data, 0, data.len(), 5).ok()?;
    Some((v as u64, n))
}

/// `_snappy_raw`.
fn snappy_raw(block: &[u8], budget: usize) -> Raw {
    let Some((len, _)) = varint_len(block) else {
        return Raw::Bad("bad snappy data: no length preamble".to_string());
    };
    if len > budget as u64 {
        return Raw::Limit;
    }
    match snap::raw::Decoder::new().decompress_vec(block) {
        Ok(v) => Raw::Out(v),
        Err(e) => Raw::Bad(format!("bad snappy data: {}", why(&e.to_string()))),
    }
}

/// `_snappy`: a raw block, or xerial / framing-format framed blocks.
fn snappy(data: &[u8], limit: usize) -> (Vec<u8>, Verdict) {
    if data.starts_with(XERIAL_MAGIC) {
        return snappy_xerial(data, limit);
    }
    if data.starts_with(SNAPPY_FRAMED_MAGIC) {
        return snappy_framed(data, limit);
    }
    match snappy_raw(data, limit) {
        Raw::Out(v) => (v, Verdict::Done),
        Raw::Limit => (Vec::new(), Verdict::Limit),
        Raw::Bad(note) => (Vec::new(), Verdict::Bad(note)),
    }
}

fn bad(out: Vec<u8>, note: &str) -> (Vec<u8>, Verdict) {
    (out, Verdict::Bad(note.to_string()))
}

fn snappy_xerial(data: &[u8], limit: usize) -> (Vec<u8>, Verdict) {
    let mut pos = 16usize;
    if data.len() < pos {
        return bad(Vec::new(), "bad snappy data: xerial header cut short");
    }
    let mut out = Vec::new();
    while pos < data.len() {
        let Some(head) = data.get(pos..pos + 4) else {
            return bad(out, "bad snappy data: xerial block length cut short");
        };
        let size = i32::from_be_bytes([head[0], head[1], head[2], head[3]]);
        pos += 4;
        let end = usize::try_from(size).ok().and_then(|s| pos.checked_add(s));
        let Some(end) = end.filter(|&e| e <= data.len()) else {
            let note = format!("bad snappy data: xerial block of {size} bytes exceeds the data");
            return (out, Verdict::Bad(note));
        };
        match snappy_raw(&data[pos..end], limit - out.len()) {
            Raw::Out(v) => out.extend_from_slice(&v),
            Raw::Limit => return (out, Verdict::Limit),
            Raw::Bad(note) => return (out, Verdict::Bad(note)),
        }
        pos = end;
    }
    (out, Verdict::Done)
}

fn snappy_framed(data: &[u8], limit: usize) -> (Vec<u8>, Verdict) {
    let mut pos = 0usize;
    let mut out = Vec::new();
    while pos < data.len() {
        let Some(head) = data.get(pos..pos + 4) else {
            return bad(out, "bad snappy data: chunk header cut short");
        };
        let kind = head[0];
        let size = usize::from(head[1]) | usize::from(head[2]) << 8 | usize::from(head[3]) << 16;
        pos += 4;
        if pos + size > data.len() {
            return bad(out, "bad snappy data: chunk exceeds the data");
        }
        let body = &data[pos..pos + size];
        pos += size;
        let payload = body.get(4..).unwrap_or(&[]);
        match kind {
            0x00 => match snappy_raw(payload, limit - out.len()) {
                Raw::Out(v) => out.extend_from_slice(&v),
                Raw::Limit => return (out, Verdict::Limit),
                Raw::Bad(note) => return (out, Verdict::Bad(note)),
            },
            0x01 => {
                if out.len() + payload.len() > limit {
                    return (out, Verdict::Limit);
                }
                out.extend_from_slice(payload);
            }
            0x80..=0xFF => {} // stream identifier, padding, skippable
            _ => {
                let note = format!("bad snappy data: reserved chunk type 0x{kind:02x}");
                return (out, Verdict::Bad(note));
            }
        }
    }
    (out, Verdict::Done)
}

// -- lz4 ----------------------------------------------------------------------------

const LZ4_MAGIC: &[u8] = b"\x04\x22\x4d\x18";

/// XXH32 with seed 0 (the frame header checksum is its second byte).
pub(crate) fn xxh32(data: &[u8]) -> u32 {
    twox_hash::XxHash32::oneshot(0, data)
}

/// `_lz4_fix_header`: (the header checksum byte to decode with, where it is) when one of
/// the two forms matches, None when the header is too short or neither does.
fn lz4_header_check(frame: &[u8]) -> Option<(u8, usize)> {
    if frame.len() < 7 || !frame.starts_with(LZ4_MAGIC) {
        return None;
    }
    let flg = frame[4];
    let end = 6 + if flg & 0x08 != 0 { 8 } else { 0 } + if flg & 0x01 != 0 { 4 } else { 0 };
    if frame.len() <= end {
        return None;
    }
    let hc = frame[end];
    let good = (xxh32(&frame[4..end]) >> 8) as u8;
    if hc == good || hc == (xxh32(&frame[..end]) >> 8) as u8 {
        return Some((good, end));
    }
    None
}

/// The length of the frame at the start of `frame` (its header checksum at `hc_at`),
/// walked by its block sizes; None when the input ends inside it.
fn lz4_frame_len(frame: &[u8], hc_at: usize) -> Option<usize> {
    let flg = frame[4];
    let block_checksum = if flg & 0x10 != 0 { 4 } else { 0 };
    let mut pos = hc_at + 1;
    loop {
        let size = u32::from_le_bytes(frame.get(pos..pos + 4)?.try_into().ok()?);
        pos += 4;
        if size == 0 {
            break;
        }
        pos = pos
            .checked_add((size & 0x7FFF_FFFF) as usize + block_checksum)
            .filter(|&end| end <= frame.len())?;
    }
    if flg & 0x04 != 0 {
        pos += 4;
    }
    (pos <= frame.len()).then_some(pos)
}

/// `_lz4`: LZ4 frames one after the other, each decoded by lz4_flex's frame decoder (the
/// header checksum of the pre-0.10 Kafka form rewritten to the standard one first), in
/// calls of Python's sizes: a call that fails drops what it decoded.
fn lz4(data: &[u8], limit: usize) -> (Vec<u8>, Verdict) {
    use std::io::Read;

    let mut out = Vec::new();
    let mut rest = data;
    let mut frames = 0usize;
    while !rest.is_empty() {
        let Some((hc, hc_at)) = lz4_header_check(rest) else {
            if frames > 0 && rest.iter().all(|&b| b == 0) {
                break;
            }
            if !rest.starts_with(LZ4_MAGIC) {
                return bad(out, "bad lz4 data: no lz4 frame magic");
            }
            return bad(
                out,
                "bad lz4 data: frame header checksum matches neither form",
            );
        };
        let len = lz4_frame_len(rest, hc_at);
        let frame = &rest[..len.unwrap_or(rest.len())];
        let head = [&frame[..hc_at], &[hc][..]].concat();
        let mut dec =
            lz4_flex::frame::FrameDecoder::new(Read::chain(&head[..], &frame[hc_at + 1..]));
        loop {
            let call_start = out.len();
            let want = want(limit, call_start);
            // (a call's output is appended as it comes, up to `want` bytes: nothing zeroed
            // ahead of it; on an error what it read so far is appended too)
            if let Err(e) = (&mut dec).take(want as u64).read_to_end(&mut out) {
                if e.kind() == std::io::ErrorKind::UnexpectedEof {
                    // (the input ends inside a block: what came before it stays)
                    return bad(out, "bad lz4 data: frame cut short");
                }
                out.truncate(call_start);
                return bad(out, &format!("bad lz4 data: {}", why(&e.to_string())));
            }
            if out.len() > limit {
                out.truncate(limit);
                return (out, Verdict::Limit);
            }
            if out.len() - call_start < want {
                break;
            }
        }
        if len.is_none() {
            return bad(out, "bad lz4 data: frame cut short");
        }
        frames += 1;
        rest = &rest[frame.len()..];
    }
    if frames == 0 {
        return bad(Vec::new(), "bad lz4 data: empty input");
    }
    (out, Verdict::Done)
}

// -- zstd ---------------------------------------------------------------------------

/// `_zstd_structure`: walk the frames and block headers so that a frame cut short is
/// reported (Python's words).
fn zstd_structure(data: &[u8]) -> Option<String> {
    const FCS_SIZE: [u64; 4] = [0, 2, 4, 8];
    const DID_SIZE: [u64; 4] = [0, 1, 2, 4];
    let n = data.len() as u64;
    let at = |p: u64| data[p as usize];
    let le32 = |p: u64| {
        let p = p as usize;
        u32::from_le_bytes([data[p], data[p + 1], data[p + 2], data[p + 3]])
    };
    let mut pos = 0u64;
    while pos < n {
        if pos + 4 > n {
            return Some("frame magic cut short".into());
        }
        let magic = le32(pos);
        if magic & 0xFFFF_FFF0 == 0x184D_2A50 {
            if pos + 8 > n {
                return Some("skippable frame cut short".into());
            }
            pos += 8 + u64::from(le32(pos + 4));
            if pos > n {
                return Some("skippable frame cut short".into());
            }
            continue;
        }
        if magic != 0xFD2F_B528 {
            return Some(if pos == 0 {
                "unknown frame magic".into()
            } else {
                format!("trailing bytes after frame at {pos}")
            });
        }
        pos += 4;
        if pos >= n {
            return Some("frame header cut short".into());
        }
        let fhd = at(pos);
        let single = fhd & 0x20 != 0;
        let fcs_flag = usize::from(fhd >> 6);
        let fcs = if fcs_flag == 0 && single {
            1
        } else {
            FCS_SIZE[fcs_flag]
        };
        pos += 1 + u64::from(!single) + DID_SIZE[usize::from(fhd & 3)] + fcs;
        let checksum = if fhd & 0x04 != 0 { 4 } else { 0 };
        loop {
            if pos + 3 > n {
                return Some("frame cut short".into());
            }
            let bh =
                u64::from(at(pos)) | u64::from(at(pos + 1)) << 8 | u64::from(at(pos + 2)) << 16;
            pos += 3;
            let (last, btype, bsize) = (bh & 1, (bh >> 1) & 3, bh >> 3);
            if btype == 3 {
                return Some("reserved block type".into());
            }
            pos += if btype == 1 { 1 } else { bsize };
            if pos > n {
                return Some("frame cut short".into());
            }
            if last != 0 {
                break;
            }
        }
        pos += checksum;
        if pos > n {
            return Some("frame checksum cut short".into());
        }
    }
    None
}

/// python-zstandard's stream reader over a buffer (`read_across_frames=True`).
struct ZstdReader<'a> {
    dctx: &'a mut zstd_safe::DCtx<'static>,
    src: &'a [u8],
    pos: usize,
    active: bool,
    finished_input: bool,
}

impl ZstdReader<'_> {
    /// `reader.read(size)`: appends at most `size` bytes to `out`. Err: libzstd's error
    /// name.
    fn read(&mut self, out: &mut Vec<u8>, size: usize) -> Result<(), &'static str> {
        let start = out.len();
        let mut produced = 0usize;
        let mut idle = 0u32;
        let result = loop {
            // decompress_input
            if self.active && self.pos < self.src.len() {
                let (moved_in, r) = self.stream(out, start, &mut produced, size);
                self.pos += moved_in;
                if self.pos >= self.src.len() {
                    self.active = false;
                    self.finished_input = true;
                }
                if let Err(code) = r {
                    break Err(zstd_safe::get_error_name(code));
                }
                let moved_out = r.unwrap_or(0);
                if produced > 0 && produced == size {
                    break Ok(());
                }
                // (libzstd errors after a few calls without progress; stop anyway)
                idle = if moved_in == 0 && moved_out == 0 {
                    idle + 1
                } else {
                    0
                };
                if idle > 64 {
                    break Err("no forward progress");
                }
            }
            // read_decompressor_input: the buffer is handed over once
            if !self.finished_input && !self.active {
                self.active = true;
            }
            if !self.active {
                break Ok(()); // EOF
            }
        };
        out.truncate(start + produced);
        result
    }

    /// One `ZSTD_decompressStream` call with room for `size` bytes of output in all (past
    /// the `produced` ones, from `start` in `out`): (input consumed, output made or the
    /// error code). The room is zero-filled as it fills, 32 KiB first, four times more each
    /// time, rather than `size` (up to 1 MiB) at once for a batch of a few kilobytes;
    /// calling again while the output fills the room makes what one call with all of it
    /// makes (libzstd stops a call only when its output is full or its input done).
    fn stream(
        &mut self,
        out: &mut Vec<u8>,
        start: usize,
        produced: &mut usize,
        size: usize,
    ) -> (usize, Result<usize, zstd_safe::ErrorCode>) {
        let first = *produced;
        let mut moved_in = 0usize;
        let mut block = 32 * 1024;
        loop {
            let room = (*produced + block).min(size);
            block = block.saturating_mul(4);
            if out.len() < start + room {
                out.resize(start + room, 0);
            }
            let mut output =
                zstd_safe::OutBuffer::around_pos(&mut out[start..start + room], *produced);
            let mut input = zstd_safe::InBuffer::around(&self.src[self.pos + moved_in..]);
            let r = self.dctx.decompress_stream(&mut output, &mut input);
            moved_in += input.pos();
            *produced = output.pos();
            if let Err(code) = r {
                return (moved_in, Err(code));
            }
            if *produced < room || room == size {
                return (moved_in, Ok(*produced - first));
            }
        }
    }
}

/// `_zstd`.
fn zstd(data: &[u8], limit: usize) -> (Vec<u8>, Verdict) {
    if data.is_empty() {
        return bad(Vec::new(), "bad zstd data: empty input");
    }
    if let Some(problem) = zstd_structure(data) {
        return (
            Vec::new(),
            Verdict::Bad(format!("bad zstd data: {problem}")),
        );
    }
    let mut window_log = 23u32;
    while (1usize << window_log) < limit && window_log < 27 {
        window_log += 1;
    }
    ZSTD_DCTX.with(|cell| {
        let mut dctx = cell.borrow_mut();
        // (reset to a new context's state: what python-zstandard's new decompressor starts from)
        if dctx
            .reset(zstd_safe::ResetDirective::SessionAndParameters)
            .is_err()
            || dctx
                .set_parameter(zstd_safe::DParameter::WindowLogMax(window_log))
                .is_err()
        {
            return bad(Vec::new(), "bad zstd data: could not set the window limit");
        }
        zstd_frames(&mut dctx, data, limit)
    })
}

thread_local! {
    /// One zstd decompression context per thread, reset for each call: making one cost
    /// about as much as decompressing a producer's small batch.
    static ZSTD_DCTX: std::cell::RefCell<zstd_safe::DCtx<'static>> =
        std::cell::RefCell::new(zstd_safe::DCtx::create());
}

/// The frames of `data` through `dctx` (set up by `zstd`), at most `limit` bytes out.
fn zstd_frames(
    dctx: &mut zstd_safe::DCtx<'static>,
    data: &[u8],
    limit: usize,
) -> (Vec<u8>, Verdict) {
    let mut reader = ZstdReader {
        dctx,
        src: data,
        pos: 0,
        active: false,
        finished_input: false,
    };
    let mut out = Vec::new();
    loop {
        let call_start = out.len();
        if let Err(name) = reader.read(&mut out, want(limit, call_start)) {
            out.truncate(call_start);
            let why = why(&format!("zstd decompress error: {name}"));
            return (out, Verdict::Bad(format!("bad zstd data: {why}")));
        }
        if out.len() == call_start {
            break;
        }
        if out.len() > limit {
            out.truncate(limit);
            return (out, Verdict::Limit);
        }
    }
    (out, Verdict::Done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xxh32_vectors() {
        assert_eq!(xxh32(b""), 0x02CC_5D05);
        assert_eq!(xxh32(b"abc"), 0x32D1_53FF);
    }

    /// A frame of lz4_flex's encoder (content checksum on, independent or linked blocks of
    /// 64 KiB).
    fn frame(data: &[u8], linked: bool) -> Vec<u8> {
        use std::io::Write;
        let info = lz4_flex::frame::FrameInfo::new()
            .content_checksum(true)
            .block_size(lz4_flex::frame::BlockSize::Max64KB)
            .block_mode(if linked {
                lz4_flex::frame::BlockMode::Linked
            } else {
                lz4_flex::frame::BlockMode::Independent
            });
        let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::new());
        enc.write_all(data).unwrap();
        enc.finish().unwrap()
    }

    #[test]
    fn lz4_frames_and_their_verdicts() {
        let data: Vec<u8> = (0..200_000u32).map(|i| (i / 7 % 13) as u8).collect();
        let ok = |f: &[u8]| decompress(3, f, 1 << 30);
        for linked in [false, true] {
            assert_eq!(ok(&frame(&data, linked)), (data.clone(), Verdict::Done));
        }
        // two frames, then zeros after them
        let mut two = [frame(&data[..70_000], false), frame(&data[70_000..], true)].concat();
        assert_eq!(ok(&two), (data.clone(), Verdict::Done));
        two.extend_from_slice(&[0; 9]);
        assert_eq!(ok(&two), (data.clone(), Verdict::Done));
        // the pre-0.10 Kafka header checksum (over the magic too)
        let mut old = frame(&data, false);
        old[6] = (xxh32(&old[..6]) >> 8) as u8;
        assert_eq!(ok(&old), (data.clone(), Verdict::Done));
        old[6] ^= 0x55;
        assert_eq!(
            ok(&old),
            (
                vec![],
                Verdict::Bad("bad lz4 data: frame header checksum matches neither form".into())
            )
        );
        // the limit: the output is cut there
        assert_eq!(decompress(3, &frame(&data, false), 1000).1, Verdict::Limit);
        // cut short: the blocks before the cut stay
        let f = frame(&data, false);
        let (out, v) = ok(&f[..f.len() - 10]);
        assert_eq!(v, Verdict::Bad("bad lz4 data: frame cut short".into()));
        assert!(!out.is_empty() && data.starts_with(&out));
        let (out, v) = ok(&f[..f.len() - 4]); // (the content checksum missing)
        assert_eq!(v, Verdict::Bad("bad lz4 data: frame cut short".into()));
        assert_eq!(out, data);
        // a wrong content checksum, and bad bytes in a block: the library's word
        let mut f = frame(&data, false);
        let n = f.len();
        f[n - 1] ^= 1;
        assert!(
            matches!(ok(&f).1, Verdict::Bad(n) if n.starts_with("bad lz4 data: ") && n.contains("hecksum"))
        );
        let bad = |v: &str| (vec![], Verdict::Bad(v.into()));
        assert_eq!(ok(b"abcdefgh"), bad("bad lz4 data: no lz4 frame magic"));
        assert_eq!(ok(b""), bad("bad lz4 data: empty input"));
        assert_eq!(
            ok(b"\x04\x22\x4d\x18"),
            bad("bad lz4 data: frame header checksum matches neither form")
        );
    }

    #[test]
    fn zstd_structure_words() {
        assert_eq!(
            zstd_structure(b"\x28\xb5\x2f"),
            Some("frame magic cut short".into())
        );
        assert_eq!(zstd_structure(b"abcd"), Some("unknown frame magic".into()));
        assert_eq!(
            zstd_structure(b"\x28\xb5\x2f\xfd"),
            Some("frame header cut short".into())
        );
        let (out, v) = decompress(4, b"\x28\xb5\x2f\xfd\x00\x00", 100);
        assert_eq!(
            (out, v),
            (
                vec![],
                Verdict::Bad("bad zstd data: frame cut short".into())
            )
        );
    }
}
