//! `read -w`: which packets of a capture carry the selected exchanges' frames.
//!
//! A [`Cut`] is told the selected frames (connection, direction, stream range of the frame
//! with its size prefix) and the decrypted TLS connections (the last packet of their selected
//! frames); it then judges every packet by the place reassembly gave it ([`Place`]: the same
//! reassembly, with the same options, as the pass that selected the exchanges, so the
//! connection numbers and stream offsets are those frames were cut at). It keeps a packet of a
//! selected connection that carries bytes of a selected frame (retransmissions too), the
//! connection's handshake (SYN, SYN-ACK, and the SYN sender's ACK that completes it) and every
//! FIN or RST; of a decrypted TLS connection (its frames' offsets count in the plaintext, and a
//! TLS record cannot be read without the records before it), every packet with payload up to
//! the last packet of its selected frames.

use rustc_hash::FxHashMap;

use crate::net::{TCP_ACK, TCP_FIN, TCP_RST, TCP_SYN};
use crate::tcp::Place;

/// A selected connection: its frames' ranges by direction, sorted and merged, and its
/// handshake as seen so far.
#[derive(Debug, Default)]
struct Selected {
    ranges: [Vec<(i64, i64)>; 2],
    /// decrypted TLS: the last packet of its selected frames
    tls_last: Option<u64>,
    syn_dir: Option<u8>,
    synack: bool,
    acked: bool,
}

impl Selected {
    /// Do stream bytes `[off, off + n)` of direction `dir` meet a selected frame?
    fn holds(&self, dir: u8, off: i64, n: u64) -> bool {
        let r = &self.ranges[usize::from(dir & 1)];
        let end = off + n as i64;
        // the last range starting before `end`
        let i = r.partition_point(|&(start, _)| start < end);
        i > 0 && r[i - 1].1 > off
    }
}

/// The packets to keep (see the module's doc).
#[derive(Debug, Default)]
pub struct Cut {
    conns: FxHashMap<u64, Selected>,
}

impl Cut {
    /// `frames`: (connection, direction, start, end) of each selected frame's bytes;
    /// `tls`: (connection, last packet of its selected frames) of decrypted TLS connections.
    pub fn new(frames: &[(u64, u8, i64, i64)], tls: &[(u64, u64)]) -> Self {
        let mut conns: FxHashMap<u64, Selected> = FxHashMap::default();
        for &(conn, dir, start, end) in frames {
            conns.entry(conn).or_default().ranges[usize::from(dir & 1)].push((start, end));
        }
        for &(conn, last) in tls {
            let c = conns.entry(conn).or_default();
            c.tls_last = Some(c.tls_last.map_or(last, |l| l.max(last)));
        }
        for c in conns.values_mut() {
            for r in &mut c.ranges {
                r.sort_unstable();
                let mut merged: Vec<(i64, i64)> = Vec::with_capacity(r.len());
                for &(s, e) in r.iter() {
                    match merged.last_mut() {
                        Some(last) if s <= last.1 => last.1 = last.1.max(e),
                        _ => merged.push((s, e)),
                    }
                }
                *r = merged;
            }
        }
        Cut { conns }
    }

    /// Nothing selected: no packet is kept.
    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }

    /// Does packet `index`, placed at `p` by reassembly, go in the cut?
    pub fn keep(&mut self, p: &Place, index: u64) -> bool {
        let Some(c) = self.conns.get_mut(&p.conn) else {
            return false;
        };
        let syn = p.flags & TCP_SYN != 0;
        let ack = p.flags & TCP_ACK != 0;
        let mut keep = false;
        if syn {
            if ack {
                c.synack = true;
            } else if c.syn_dir.is_none() {
                c.syn_dir = Some(p.dir);
            }
            keep = true;
        } else if ack && c.synack && !c.acked && c.syn_dir == Some(p.dir) {
            // the ACK that completes the handshake
            c.acked = true;
            keep = true;
        }
        if p.flags & (TCP_FIN | TCP_RST) != 0 {
            keep = true;
        }
        if p.len > 0 && !keep {
            keep = match (c.tls_last, p.offset) {
                (Some(last), _) => index <= last,
                (None, Some(off)) => c.holds(p.dir, off, p.len),
                (None, None) => false,
            };
        }
        keep
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(conn: u64, dir: u8, flags: u8, offset: Option<i64>, len: u64) -> Place {
        Place {
            conn,
            dir,
            flags,
            offset,
            len,
        }
    }

    #[test]
    fn frames_handshake_and_ends() {
        let mut cut = Cut::new(&[(3, 0, 0, 10), (3, 1, 0, 20), (3, 0, 30, 40)], &[]);
        assert!(cut.keep(&place(3, 0, TCP_SYN, None, 0), 1));
        assert!(cut.keep(&place(3, 1, TCP_SYN | TCP_ACK, None, 0), 2));
        assert!(
            cut.keep(&place(3, 0, TCP_ACK, None, 0), 3),
            "the ACK completing the handshake"
        );
        assert!(
            !cut.keep(&place(3, 0, TCP_ACK, None, 0), 4),
            "a later bare ACK"
        );
        assert!(
            cut.keep(&place(3, 0, TCP_ACK, Some(5), 10), 5),
            "bytes 5..15 meet 0..10"
        );
        assert!(
            !cut.keep(&place(3, 0, TCP_ACK, Some(10), 20), 6),
            "bytes 10..30 meet none"
        );
        assert!(cut.keep(&place(3, 0, TCP_ACK, Some(39), 5), 7));
        assert!(!cut.keep(&place(3, 1, TCP_ACK, Some(20), 5), 8));
        assert!(cut.keep(&place(3, 1, TCP_ACK | TCP_FIN, Some(20), 5), 9));
        assert!(
            !cut.keep(&place(4, 0, TCP_SYN, None, 0), 10),
            "another connection"
        );
    }

    #[test]
    fn tls_connections_keep_their_payload_up_to_the_last_frame() {
        let mut cut = Cut::new(&[(1, 0, 0, 50)], &[(1, 7)]);
        assert!(cut.keep(&place(1, 0, TCP_ACK, Some(900), 10), 7));
        assert!(!cut.keep(&place(1, 0, TCP_ACK, Some(0), 10), 8));
        assert!(!cut.keep(&place(1, 0, TCP_ACK, None, 0), 6));
    }
}
