//! The Spark job's shuffle records: the TCP packets of a capture range grouped by
//! connection into columnar batches, and a batch's columns read back as packets.
//!
//! A batch is six byte strings, little-endian: the packets' numbers (u64), times (f64),
//! link types (i32) and lengths on the wire (u32), where each packet's bytes end in the
//! blob (u64), and the blob (the captured bytes of the packets, one after another). The
//! job moves them through the shuffle as they are, and a task hands them to the stages
//! as they are (`Stream.feed_batch`): no Python object per packet on either side.
//!
//! A connection is keyed by its endpoints, the same for both directions; a batch is
//! sealed once its blob holds `batch_bytes`, and the open ones at the end of the range.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

use crate::net::{self, Endpoint, Tally};

/// A connection as `(ip, port, ip, port)`: the endpoint whose text is the smaller first.
pub type ConnKey = (String, u16, String, u16);

/// The endpoints of a connection, the smaller first (the key before it is text).
type Pair = (Endpoint, Endpoint);

fn pair_of(a: Endpoint, b: Endpoint) -> Pair {
    if b < a {
        (b, a)
    } else {
        (a, b)
    }
}

/// The text key of a connection, as the job names its groups: the endpoint whose
/// `(ip text, port)` is the smaller first.
fn text_key(p: &Pair) -> ConnKey {
    let mut a = (p.0 .0.to_string(), p.0 .1);
    let mut b = (p.1 .0.to_string(), p.1 .1);
    if b < a {
        std::mem::swap(&mut a, &mut b);
    }
    (a.0, a.1, b.0, b.1)
}

/// One connection's packets, in columns (see the module documentation).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Columns {
    pub index: Vec<u8>,
    pub ts: Vec<u8>,
    pub linktype: Vec<u8>,
    pub orig_len: Vec<u8>,
    pub ends: Vec<u8>,
    pub blob: Vec<u8>,
}

impl Columns {
    pub fn push(&mut self, index: u64, ts: f64, linktype: i32, data: &[u8], orig_len: u32) {
        self.index.extend_from_slice(&index.to_le_bytes());
        self.ts.extend_from_slice(&ts.to_le_bytes());
        self.linktype.extend_from_slice(&linktype.to_le_bytes());
        self.orig_len.extend_from_slice(&orig_len.to_le_bytes());
        self.blob.extend_from_slice(data);
        self.ends
            .extend_from_slice(&(self.blob.len() as u64).to_le_bytes());
    }

    /// Packets in the batch.
    pub fn len(&self) -> usize {
        self.index.len() / 8
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }
}

/// A packet of a batch: `(index, ts, linktype, data, orig_len)`.
pub type BatchPacket<'a> = (u64, f64, i32, &'a [u8], u32);

fn words<const N: usize>(col: &[u8]) -> impl Iterator<Item = [u8; N]> + '_ {
    col.chunks_exact(N)
        .map(|c| c.try_into().expect("chunks of N bytes"))
}

/// The packets of a batch's columns, or why the columns do not make one (their lengths
/// disagree, or a packet's end lies before the previous one's or beyond the blob).
pub fn packets<'a>(
    index: &[u8],
    ts: &[u8],
    linktype: &[u8],
    orig_len: &[u8],
    ends: &[u8],
    blob: &'a [u8],
) -> Result<Vec<BatchPacket<'a>>, String> {
    let n = index.len() / 8;
    if !index.len().is_multiple_of(8)
        || ts.len() != n * 8
        || linktype.len() != n * 4
        || orig_len.len() != n * 4
        || ends.len() != n * 8
    {
        return Err(format!(
            "batch columns of {}, {}, {}, {} and {} bytes do not describe the same packets",
            index.len(),
            ts.len(),
            linktype.len(),
            orig_len.len(),
            ends.len()
        ));
    }
    let mut out = Vec::with_capacity(n);
    let mut start = 0usize;
    let cols = words::<8>(index)
        .zip(words::<8>(ts))
        .zip(words::<4>(linktype))
        .zip(words::<4>(orig_len))
        .zip(words::<8>(ends));
    for ((((i, t), lt), o), e) in cols {
        let end = u64::from_le_bytes(e);
        let end = usize::try_from(end)
            .ok()
            .filter(|&e| e >= start && e <= blob.len())
            .ok_or_else(|| {
                format!(
                    "batch packet {} ends at byte {end}, outside {start}..={}",
                    out.len(),
                    blob.len()
                )
            })?;
        out.push((
            u64::from_le_bytes(i),
            f64::from_le_bytes(t),
            i32::from_le_bytes(lt),
            &blob[start..end],
            u32::from_le_bytes(o),
        ));
        start = end;
    }
    Ok(out)
}

/// Groups a range's packets by connection into batches (see the module documentation),
/// counting what it reads (`tally`: packets, first and last time, and the packets that
/// gave no TCP segment, by reason).
#[derive(Debug)]
pub struct Batcher {
    batch_bytes: usize,
    /// only these connections' packets (a second pass over a range)
    keys: Option<HashSet<Pair>>,
    /// the open batch of each connection: its text key, first packet number and columns
    open: HashMap<Pair, (ConnKey, u64, Columns)>,
    /// sealed batches, waiting to be taken
    pub sealed: Vec<(ConnKey, u64, Columns)>,
    pub tally: Tally,
}

impl Batcher {
    /// `keys`: only the packets of these connections; a key whose address is no IP
    /// address matches no packet.
    pub fn new(batch_bytes: usize, keys: Option<&[ConnKey]>) -> Self {
        let keys = keys.map(|ks| {
            ks.iter()
                .filter_map(|(a, ap, b, bp)| {
                    let a: IpAddr = a.parse().ok()?;
                    let b: IpAddr = b.parse().ok()?;
                    Some(pair_of((a, *ap), (b, *bp)))
                })
                .collect()
        });
        Batcher {
            batch_bytes: batch_bytes.max(1),
            keys,
            open: HashMap::new(),
            sealed: Vec::new(),
            tally: Tally::default(),
        }
    }

    pub fn packet(&mut self, index: u64, ts: f64, linktype: i32, data: &[u8], orig_len: u32) {
        self.tally.packet(ts);
        let seg = match net::parse(linktype, data, orig_len) {
            Ok(seg) => seg,
            Err(skip) => {
                self.tally.skip(skip.reason());
                return;
            }
        };
        let pair = pair_of(seg.src, seg.dst);
        if self.keys.as_ref().is_some_and(|ks| !ks.contains(&pair)) {
            return;
        }
        let (_, _, cols) = self
            .open
            .entry(pair)
            .or_insert_with(|| (text_key(&pair), index, Columns::default()));
        cols.push(index, ts, linktype, data, orig_len);
        if cols.blob.len() >= self.batch_bytes {
            let batch = self.open.remove(&pair).expect("the open batch");
            self.sealed.push(batch);
        }
    }

    /// The end of the range: every open batch sealed, in order of first packet.
    pub fn finish(&mut self) {
        let mut rest: Vec<_> = self.open.drain().map(|(_, b)| b).collect();
        rest.sort_by_key(|b| b.1);
        self.sealed.extend(rest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Ethernet + IPv4 + TCP packet from `a` to `b` carrying `payload`.
    fn packet(a: ([u8; 4], u16), b: ([u8; 4], u16), payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0u8; 12];
        p.extend_from_slice(&[0x08, 0x00]);
        let total = (20 + 20 + payload.len()) as u16;
        p.extend_from_slice(&[0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 6, 0, 0]);
        p[16..18].copy_from_slice(&total.to_be_bytes());
        p.extend_from_slice(&a.0);
        p.extend_from_slice(&b.0);
        p.extend_from_slice(&a.1.to_be_bytes());
        p.extend_from_slice(&b.1.to_be_bytes());
        p.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
        p.extend_from_slice(payload);
        p
    }

    fn feed(b: &mut Batcher, index: u64, bytes: &[u8]) {
        b.packet(index, index as f64 / 10.0, 1, bytes, bytes.len() as u32);
    }

    #[test]
    fn both_directions_share_a_batch_and_the_columns_read_back() {
        let c = ([10, 0, 0, 2], 50000);
        let s = ([9, 0, 0, 1], 9092);
        let mut b = Batcher::new(1 << 20, None);
        let p1 = packet(c, s, b"request");
        let p2 = packet(s, c, b"answer!!");
        feed(&mut b, 7, &p1);
        feed(&mut b, 8, &p2);
        feed(&mut b, 9, b"\x00\x01");
        b.finish();
        assert_eq!(b.tally.packets, 3);
        assert_eq!((b.tally.first_ts, b.tally.last_ts), (Some(0.7), Some(0.9)));
        assert_eq!(b.tally.skips.values().sum::<u64>(), 1);
        assert_eq!(b.sealed.len(), 1);
        let (key, first, cols) = &b.sealed[0];
        // the smaller endpoint as text first ("10.0.0.2" < "9.0.0.1")
        assert_eq!(key, &("10.0.0.2".into(), 50000, "9.0.0.1".into(), 9092));
        assert_eq!(*first, 7);
        assert_eq!(cols.len(), 2);
        let got = packets(
            &cols.index,
            &cols.ts,
            &cols.linktype,
            &cols.orig_len,
            &cols.ends,
            &cols.blob,
        )
        .unwrap();
        assert_eq!(
            got,
            vec![
                (7, 0.7, 1, &p1[..], p1.len() as u32),
                (8, 0.8, 1, &p2[..], p2.len() as u32)
            ]
        );
    }

    #[test]
    fn a_full_batch_is_sealed_and_the_next_opens() {
        let c = ([127, 0, 0, 1], 40000);
        let s = ([127, 0, 0, 9], 9092);
        let p = packet(c, s, &[0u8; 100]);
        let mut b = Batcher::new(2 * p.len(), None);
        for i in 1..=5 {
            feed(&mut b, i, &p);
        }
        assert_eq!(b.sealed.len(), 2);
        assert_eq!((b.sealed[0].1, b.sealed[1].1), (1, 3));
        b.finish();
        assert_eq!(b.sealed.len(), 3);
        assert_eq!(b.sealed[2].1, 5);
        assert_eq!(b.sealed[2].2.len(), 1);
    }

    #[test]
    fn keys_keep_only_their_connections() {
        let a = ([127, 0, 0, 1], 40000);
        let z = ([127, 0, 0, 1], 40001);
        let s = ([127, 0, 0, 9], 9092);
        let keys = [
            (
                "127.0.0.1".to_string(),
                40001,
                "127.0.0.9".to_string(),
                9092,
            ),
            (
                "not an address".to_string(),
                1,
                "127.0.0.9".to_string(),
                9092,
            ),
        ];
        let mut b = Batcher::new(1 << 20, Some(&keys));
        feed(&mut b, 1, &packet(a, s, b"x"));
        feed(&mut b, 2, &packet(s, z, b"y"));
        b.finish();
        assert_eq!(b.tally.packets, 2);
        assert_eq!(b.sealed.len(), 1);
        assert_eq!(b.sealed[0].0 .1, 40001);
        assert_eq!(b.sealed[0].1, 2);
    }

    #[test]
    fn columns_that_disagree_are_refused() {
        let mut c = Columns::default();
        c.push(1, 0.5, 1, b"abc", 3);
        c.push(2, 0.6, 1, b"de", 2);
        let ok = packets(&c.index, &c.ts, &c.linktype, &c.orig_len, &c.ends, &c.blob);
        assert_eq!(ok.unwrap().len(), 2);
        // a column short of a packet
        assert!(packets(
            &c.index,
            &c.ts[..8],
            &c.linktype,
            &c.orig_len,
            &c.ends,
            &c.blob
        )
        .is_err());
        // an end beyond the blob
        assert!(packets(
            &c.index,
            &c.ts,
            &c.linktype,
            &c.orig_len,
            &c.ends,
            &c.blob[..4]
        )
        .is_err());
        // an end before the previous one
        let mut ends = c.ends.clone();
        ends[8..16].copy_from_slice(&1u64.to_le_bytes());
        assert!(packets(&c.index, &c.ts, &c.linktype, &c.orig_len, &ends, &c.blob).is_err());
        // a ragged column
        assert!(packets(
            &c.index[..7],
            &c.ts,
            &c.linktype,
            &c.orig_len,
            &c.ends,
            &c.blob
        )
        .is_err());
        // no packets at all
        assert_eq!(packets(&[], &[], &[], &[], &[], &[]).unwrap(), vec![]);
    }
}
