//! Cutting a capture file into byte ranges (the Spark job reads a big capture as many
//! tasks): a range's first record boundary, found from any offset, and the packets whose
//! records start in it, so that packet numbers stay the file's own.
//!
//! A pcap record header is taken as a boundary when [`CHAIN`] records chain from it with
//! sane lengths and times (or end exactly at the end of the file); a pcapng block when its
//! type is known and its leading and trailing lengths agree, [`CHAIN`] blocks in a row.
//! From its boundary a range is walked record by record up to the first record at or past
//! its end (the next range's boundary, as far as this one can tell): the caller checks
//! that the ranges chain and counts a range again from where the previous one's walk
//! ended when they do not.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use crate::capture::{
    EPB, IDB, KNOWN_SKIPPED, MAX_BLOCK, MAX_RECORD, PB, PCAP_NS, PCAP_US, SHB, SPB,
};
use crate::wire::u32_in;

/// Consecutive records that must chain for an offset to be taken as a boundary.
pub const CHAIN: usize = 8;
/// A pcap record's time must be this close to the file's first record (seconds).
const TS_SLACK: i64 = 400 * 86400;
/// The file is read through a window of this size.
const WINDOW: usize = 1 << 20;

/// What the walk of a range found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeScan {
    /// the first record (block) at or after the range's start; None: none in the range
    pub boundary: Option<u64>,
    /// the first record at or after the range's end (or where the walk stopped)
    pub hop_end: u64,
    /// packets whose records start in `[boundary, hop_end)`
    pub packets: u64,
    /// pcapng: the section header and interface blocks met, with their offsets
    pub context: Vec<(u64, Vec<u8>)>,
    /// the walk met the end of the file inside a record, or a section of another byte order
    pub damaged: bool,
}

/// What a pcap file header tells the boundary search.
struct PcapHead {
    big: bool,
    nanos: bool,
    snaplen: u32,
    /// the first record's seconds (a record's time must be near it)
    first_sec: u32,
}

/// The file's format, as its header tells it.
enum Format {
    Pcap(PcapHead),
    /// its byte order (big-endian)
    Pcapng(bool),
}

/// Up to `buf.len()` bytes of `file` from `off` (fewer at its end).
fn read_upto(file: &File, off: u64, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], off + got as u64)? {
            0 => break,
            k => got += k,
        }
    }
    Ok(got)
}

/// Random access to a file through a window.
struct Window {
    file: File,
    size: u64,
    base: u64,
    buf: Vec<u8>,
}

impl Window {
    fn get(&mut self, off: u64, n: usize) -> io::Result<&[u8]> {
        if off < self.base || off + n as u64 > self.base + self.buf.len() as u64 {
            let want = n.max(WINDOW).min((self.size.saturating_sub(off)) as usize);
            self.buf.resize(want, 0);
            let got = read_upto(&self.file, off, &mut self.buf)?;
            self.buf.truncate(got);
            self.base = off;
        }
        let at = (off - self.base) as usize;
        let end = (at + n).min(self.buf.len());
        Ok(&self.buf[at.min(end)..end])
    }

    fn u32_at(&mut self, off: u64, big: bool) -> io::Result<Option<u32>> {
        Ok(u32_in(self.get(off, 4)?, 0, big))
    }
}

/// The format of `file` from its first bytes (a pcap header, or a pcapng section header
/// and its byte-order magic).
fn format_of(file: &File) -> io::Result<Option<Format>> {
    let mut head = [0u8; 28];
    let n = read_upto(file, 0, &mut head)?;
    let head = &head[..n];
    let word = |at: usize, big: bool| u32_in(head, at, big);
    for big in [false, true] {
        let magic = word(0, big);
        if magic == Some(PCAP_US) || magic == Some(PCAP_NS) {
            return Ok(Some(Format::Pcap(PcapHead {
                big,
                nanos: magic == Some(PCAP_NS),
                snaplen: word(16, big).unwrap_or(0),
                first_sec: word(24, big).unwrap_or(0),
            })));
        }
    }
    if word(0, false) == Some(SHB) {
        return Ok(match head.get(8..12) {
            Some(b"\x4d\x3c\x2b\x1a") => Some(Format::Pcapng(false)),
            Some(b"\x1a\x2b\x3c\x4d") => Some(Format::Pcapng(true)),
            _ => None,
        });
    }
    Ok(None)
}

/// Walk the range `[start, end)` of the capture at `path` (`known`: its boundary is known,
/// where the previous range's walk ended: no search). Err for a file that cannot be read,
/// None for one that is neither pcap nor pcapng.
pub fn scan_range(
    path: &str,
    start: u64,
    end: u64,
    known: Option<u64>,
) -> io::Result<Option<RangeScan>> {
    let file = File::open(path)?;
    let size = file.metadata()?.len();
    let Some(format) = format_of(&file)? else {
        return Ok(None);
    };
    let mut w = Window {
        file,
        size,
        base: 0,
        buf: Vec::new(),
    };
    match format {
        Format::Pcap(h) => pcap(&mut w, &h, start, end, known).map(Some),
        Format::Pcapng(big) => pcapng(&mut w, big, start, end, known).map(Some),
    }
}

/// (seconds, fraction, captured length, length on the wire) of the pcap record at `off`.
fn record(w: &mut Window, off: u64, big: bool) -> io::Result<Option<[u32; 4]>> {
    let h = w.get(off, 16)?;
    if h.len() < 16 {
        return Ok(None);
    }
    let v = [0, 4, 8, 12].map(|at| u32_in(h, at, big).unwrap_or_default());
    Ok(Some(v))
}

fn pcap_chains(w: &mut Window, h: &PcapHead, mut off: u64) -> io::Result<bool> {
    let limit = if h.snaplen > 0 && h.snaplen <= MAX_RECORD {
        h.snaplen
    } else {
        1 << 18
    };
    let units = if h.nanos { 1_000_000_000 } else { 1_000_000 };
    let mut prev: Option<i64> = None;
    for _ in 0..CHAIN {
        if off == w.size {
            return Ok(true);
        }
        let Some([sec, frac, incl, orig]) = record(w, off, h.big)? else {
            return Ok(false);
        };
        if frac >= units || incl > limit || orig < incl || orig > MAX_RECORD {
            return Ok(false);
        }
        let sec = i64::from(sec);
        if (sec - i64::from(h.first_sec)).abs() > TS_SLACK || prev.is_some_and(|p| sec + 60 < p) {
            return Ok(false);
        }
        prev = Some(sec);
        off += 16 + u64::from(incl);
        if off > w.size {
            return Ok(false);
        }
    }
    Ok(true)
}

fn pcap(
    w: &mut Window,
    h: &PcapHead,
    start: u64,
    end: u64,
    known: Option<u64>,
) -> io::Result<RangeScan> {
    let mut off = known.unwrap_or(start.max(24));
    if start > 24 && known.is_none() {
        while off < end && !pcap_chains(w, h, off)? {
            off += 1;
        }
        if off >= end {
            return Ok(none_in(end));
        }
    }
    let boundary = off;
    let (mut packets, mut damaged) = (0, false);
    while off < end {
        let Some([_, _, incl, _]) = record(w, off, h.big)? else {
            damaged = off < w.size;
            break;
        };
        if off + 16 + u64::from(incl) > w.size {
            damaged = true;
            break;
        }
        packets += 1;
        off += 16 + u64::from(incl);
    }
    Ok(RangeScan {
        boundary: Some(boundary),
        hop_end: off,
        packets,
        context: Vec::new(),
        damaged,
    })
}

fn none_in(end: u64) -> RangeScan {
    RangeScan {
        boundary: None,
        hop_end: end,
        packets: 0,
        context: Vec::new(),
        damaged: false,
    }
}

fn known_block(btype: u32) -> bool {
    [SHB, IDB, PB, SPB, EPB].contains(&btype) || KNOWN_SKIPPED.contains(&btype)
}

/// The length of a sane block at `off` (known type, lengths that agree), else None.
fn block_ok(w: &mut Window, off: u64, big: bool) -> io::Result<Option<u32>> {
    let (Some(btype), Some(blen)) = (w.u32_at(off, big)?, w.u32_at(off + 4, big)?) else {
        return Ok(None);
    };
    if !known_block(btype)
        || blen < 12
        || blen % 4 != 0
        || blen > MAX_BLOCK
        || off + u64::from(blen) > w.size
    {
        return Ok(None);
    }
    Ok((w.u32_at(off + u64::from(blen) - 4, big)? == Some(blen)).then_some(blen))
}

fn pcapng_chains(w: &mut Window, big: bool, mut off: u64) -> io::Result<bool> {
    for _ in 0..CHAIN {
        if off == w.size {
            return Ok(true);
        }
        let Some(blen) = block_ok(w, off, big)? else {
            return Ok(false);
        };
        off += u64::from(blen);
    }
    Ok(true)
}

fn pcapng(
    w: &mut Window,
    big: bool,
    start: u64,
    end: u64,
    known: Option<u64>,
) -> io::Result<RangeScan> {
    let mut off = known.unwrap_or(start + (4 - start % 4) % 4);
    if start > 0 && known.is_none() {
        while off < end && !pcapng_chains(w, big, off)? {
            off += 4;
        }
        if off >= end {
            return Ok(none_in(end));
        }
    }
    let boundary = off;
    let (mut packets, mut damaged, mut context) = (0, false, Vec::new());
    while off < end {
        if off + 12 > w.size {
            damaged = off < w.size;
            break;
        }
        let btype = w.u32_at(off, big)?.unwrap_or_default();
        let blen = w.u32_at(off + 4, big)?.unwrap_or_default();
        if btype == SHB {
            let bom = w.get(off + 8, 4)?;
            let same = match bom {
                b"\x4d\x3c\x2b\x1a" => !big,
                b"\x1a\x2b\x3c\x4d" => big,
                _ => false,
            };
            if !same {
                // another byte order: this file is not cut (the caller reads it whole)
                damaged = true;
                break;
            }
        }
        if blen < 12 || blen % 4 != 0 || blen > MAX_BLOCK || off + u64::from(blen) > w.size {
            damaged = true;
            break;
        }
        if btype == SHB || btype == IDB {
            context.push((off, w.get(off, blen as usize)?.to_vec()));
        } else if (btype == EPB || btype == PB) && blen >= 32 || btype == SPB {
            packets += 1;
        }
        off += u64::from(blen);
    }
    Ok(RangeScan {
        boundary: Some(boundary),
        hop_end: off,
        packets,
        context,
        damaged,
    })
}
