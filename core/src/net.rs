//! The net stage: one captured packet -> one TCP segment, or the reason it is none.
//!
//! Link types: Ethernet (1) with any stack of 802.1Q / 802.1ad / QinQ tags (0x8100,
//! 0x88a8, 0x9100), Linux cooked SLL (113) and SLL2 (276), BSD NULL (0) and LOOP (108)
//! with the address family in either byte order, raw IP (101, 12, 14), IPv4 (228) and
//! IPv6 (229). IPv6 extension headers (hop-by-hop, routing, destination options,
//! mobility, HIP, shim6, authentication, a first fragment) are skipped.
//!
//! [`Segment::missing`] counts the TCP payload bytes that were on the wire but not in the
//! capture (snaplen): from the IP total / payload length, bounded by the packet's length
//! on the wire. Bytes after the IP datagram (Ethernet padding, trailers) are never payload.
//! Every offset is checked against the captured length before it is read.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What a reader of packets counts of them: how many, the first one's time and the
/// latest time, and those that gave no TCP segment (or were set aside), by reason.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    pub packets: u64,
    pub first_ts: Option<f64>,
    pub last_ts: Option<f64>,
    pub skips: BTreeMap<String, u64>,
}

impl Tally {
    /// One more packet, of time `ts`.
    pub fn packet(&mut self, ts: f64) {
        self.packets += 1;
        if self.first_ts.is_none() {
            self.first_ts = Some(ts);
        }
        if self.last_ts.is_none_or(|t| ts > t) {
            self.last_ts = Some(ts);
        }
    }

    /// A packet set aside for `reason`.
    pub fn skip(&mut self, reason: String) {
        *self.skips.entry(reason).or_insert(0) += 1;
    }
}

/// An address and a port, as the TCP header and the IP header name them.
pub type Endpoint = (IpAddr, u16);

/// The TCP flags the reassembler reads.
pub const TCP_FIN: u8 = 1;
pub const TCP_SYN: u8 = 2;
pub const TCP_RST: u8 = 4;
pub const TCP_ACK: u8 = 16;

/// One TCP segment of a captured packet; `payload` borrows the packet's bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment<'a> {
    pub src: Endpoint,
    pub dst: Endpoint,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub payload: &'a [u8],
    /// payload bytes on the wire but not captured (snaplen)
    pub missing: u64,
}

/// Why a packet gave no TCP segment (counted by the caller under `reason()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    NotIp,
    NotTcp,
    Fragment,
    Truncated,
    BadIp,
    BadTcp,
    LinkType(i32),
}

impl Skip {
    /// The reason as the summary names it.
    pub fn reason(&self) -> String {
        match self {
            Skip::NotIp => "not IP".into(),
            Skip::NotTcp => "not TCP".into(),
            Skip::Fragment => "IP fragment".into(),
            Skip::Truncated => "truncated header".into(),
            Skip::BadIp => "bad IP header".into(),
            Skip::BadTcp => "bad TCP header".into(),
            Skip::LinkType(lt) => format!("unsupported link type {lt}"),
        }
    }
}

const ETH_VLAN: [u16; 3] = [0x8100, 0x88A8, 0x9100];
const ETH_IP4: u16 = 0x0800;
const ETH_IP6: u16 = 0x86DD;
/// BSD loopback address families for IPv6 differ between systems.
const AF_INET6: [u32; 5] = [10, 23, 24, 28, 30];
/// IPv6 extension headers skipped by their length in 8-octet units.
const IP6_EXT: [u8; 6] = [0, 43, 60, 135, 139, 140];

fn be16(d: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([d[at], d[at + 1]])
}

fn be32(d: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([d[at], d[at + 1], d[at + 2], d[at + 3]])
}

/// The EtherType at `off` past any VLAN tags, and the offset after it.
fn ethertype(data: &[u8], mut off: usize) -> Result<(u16, usize), Skip> {
    let mut etype = be16(data, off);
    while ETH_VLAN.contains(&etype) {
        off += 4;
        if data.len() < off + 2 {
            return Err(Skip::Truncated);
        }
        etype = be16(data, off);
    }
    Ok((etype, off + 2))
}

/// Where the IP header starts and its version (4 or 6).
fn link(linktype: i32, data: &[u8]) -> Result<(usize, u8), Skip> {
    let n = data.len();
    let (etype, off) = match linktype {
        1 => {
            if n < 14 {
                return Err(Skip::Truncated);
            }
            ethertype(data, 12)?
        }
        113 => {
            if n < 16 {
                return Err(Skip::Truncated);
            }
            ethertype(data, 14)?
        }
        276 => {
            if n < 20 {
                return Err(Skip::Truncated);
            }
            // SLL2 does not strip VLAN tags: they follow the header
            let mut etype = be16(data, 0);
            let mut off = 20;
            while ETH_VLAN.contains(&etype) {
                if n < off + 4 {
                    return Err(Skip::Truncated);
                }
                etype = be16(data, off + 2);
                off += 4;
            }
            (etype, off)
        }
        0 | 108 => {
            if n < 4 {
                return Err(Skip::Truncated);
            }
            let raw = [data[0], data[1], data[2], data[3]];
            let (le, be) = (u32::from_le_bytes(raw), u32::from_be_bytes(raw));
            if le == 2 || be == 2 {
                return Ok((4, 4));
            }
            if AF_INET6.contains(&le) || AF_INET6.contains(&be) {
                return Ok((4, 6));
            }
            return Err(Skip::NotIp);
        }
        101 | 12 | 14 => {
            if n < 1 {
                return Err(Skip::Truncated);
            }
            return match data[0] >> 4 {
                4 => Ok((0, 4)),
                6 => Ok((0, 6)),
                _ => Err(Skip::NotIp),
            };
        }
        228 => return Ok((0, 4)),
        229 => return Ok((0, 6)),
        other => return Err(Skip::LinkType(other)),
    };
    match etype {
        ETH_IP4 => Ok((off, 4)),
        ETH_IP6 => Ok((off, 6)),
        _ => Err(Skip::NotIp),
    }
}

/// Parse one captured packet (`data`, of `orig_len` bytes on the wire) down to TCP.
pub fn parse(linktype: i32, data: &[u8], orig_len: u32) -> Result<Segment<'_>, Skip> {
    let n = data.len();
    let (off, version) = link(linktype, data)?;
    // bytes of the IP datagram on the wire (the capture may hold fewer, or more with
    // padding the original length does not count)
    let wire_left = (orig_len as usize).saturating_sub(off);
    let captured = n - off.min(n);
    let (t, total, src, dst) = if version == 4 {
        if n < off + 20 {
            return Err(Skip::Truncated);
        }
        let vihl = data[off];
        if vihl >> 4 != 4 {
            return Err(Skip::BadIp);
        }
        let ihl = ((vihl & 15) as usize) * 4;
        if ihl < 20 {
            return Err(Skip::BadIp);
        }
        let mut total = be16(data, off + 2) as usize;
        let frag = be16(data, off + 6);
        if frag & 0x3FFF != 0 {
            return Err(Skip::Fragment);
        }
        if data[off + 9] != 6 {
            return Err(Skip::NotTcp);
        }
        if total == 0 {
            // segmentation offload: the length was not filled in
            total = wire_left.max(captured);
        } else if total < ihl {
            return Err(Skip::BadIp);
        }
        let a = |at: usize| {
            IpAddr::V4(Ipv4Addr::new(
                data[at],
                data[at + 1],
                data[at + 2],
                data[at + 3],
            ))
        };
        (off + ihl, total, a(off + 12), a(off + 16))
    } else {
        if n < off + 40 {
            return Err(Skip::Truncated);
        }
        if data[off] >> 4 != 6 {
            return Err(Skip::BadIp);
        }
        let mut plen = be16(data, off + 4) as usize;
        let mut nh = data[off + 6];
        let mut t = off + 40;
        if plen == 0 {
            // a jumbogram, or offload
            plen = wire_left.max(captured).saturating_sub(40);
        }
        let total = 40 + plen;
        while nh != 6 {
            if IP6_EXT.contains(&nh) {
                if n < t + 8 {
                    return Err(Skip::Truncated);
                }
                let hl = (data[t + 1] as usize + 1) * 8;
                nh = data[t];
                t += hl;
            } else if nh == 44 {
                // fragment header: only a whole datagram (offset 0, no more fragments) is TCP
                if n < t + 8 {
                    return Err(Skip::Truncated);
                }
                if be16(data, t + 2) & 0xFFF9 != 0 {
                    return Err(Skip::Fragment);
                }
                nh = data[t];
                t += 8;
            } else if nh == 51 {
                // authentication header: length in 4-octet units
                if n < t + 8 {
                    return Err(Skip::Truncated);
                }
                let hl = (data[t + 1] as usize + 2) * 4;
                nh = data[t];
                t += hl;
            } else {
                return Err(Skip::NotTcp);
            }
            if t > off + total {
                return Err(Skip::BadIp);
            }
        }
        let a = |at: usize| {
            let mut b = [0u8; 16];
            b.copy_from_slice(&data[at..at + 16]);
            IpAddr::V6(Ipv6Addr::from(b))
        };
        (t, total, a(off + 8), a(off + 24))
    };
    if n < t + 20 {
        return Err(Skip::Truncated);
    }
    let thl = ((data[t + 12] >> 4) as usize) * 4;
    if thl < 20 {
        return Err(Skip::BadTcp);
    }
    let p = t + thl;
    if n < p {
        return Err(Skip::Truncated);
    }
    let end_wire = off + total.min(wire_left.max(captured));
    let (payload, missing) = if end_wire <= n {
        (
            if end_wire > p {
                &data[p..end_wire]
            } else {
                &data[p..p]
            },
            0,
        )
    } else {
        (&data[p..], (end_wire - n) as u64)
    };
    Ok(Segment {
        src: (src, be16(data, t)),
        dst: (dst, be16(data, t + 2)),
        seq: be32(data, t + 4),
        ack: be32(data, t + 8),
        flags: data[t + 13],
        payload,
        missing,
    })
}

/// A number that is the same for both directions of a connection (and for every
/// connection on the same addresses and ports): which of `n` shares a packet belongs to.
pub fn share_of(a: &Endpoint, b: &Endpoint, n: u32) -> u32 {
    fn mix(e: &Endpoint) -> u64 {
        let bits: u128 = match e.0 {
            IpAddr::V4(v) => u32::from(v) as u128,
            IpAddr::V6(v) => u128::from(v),
        };
        // splitmix64's finalizer over the address folded with the port
        let mut h = (bits as u64) ^ ((bits >> 64) as u64).rotate_left(17) ^ ((e.1 as u64) << 32);
        h = (h ^ (h >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        h = (h ^ (h >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        h ^ (h >> 31)
    }
    // symmetric: the sum of the two sides' mixes
    let h = mix(a).wrapping_add(mix(b));
    ((h >> 32) % n.max(1) as u64) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Ethernet IPv4 TCP packet with `payload`; `total` overrides the IP total length.
    fn eth4(payload: &[u8], flags: u8, total: Option<u16>) -> Vec<u8> {
        let mut p = vec![0u8; 12];
        p.extend_from_slice(&[0x08, 0x00]);
        let tot = total.unwrap_or(40 + payload.len() as u16);
        p.extend_from_slice(&[
            0x45,
            0,
            (tot >> 8) as u8,
            tot as u8,
            0,
            0,
            0x40,
            0,
            64,
            6,
            0,
            0,
        ]);
        p.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        p.extend_from_slice(&[0x9c, 0x40, 0x23, 0x84]); // ports 40000 -> 9092
        p.extend_from_slice(&1000u32.to_be_bytes());
        p.extend_from_slice(&7u32.to_be_bytes());
        p.extend_from_slice(&[0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
        p.extend_from_slice(payload);
        p
    }

    fn ip6_tcp(ext: &[u8], first_nh: u8, payload: &[u8]) -> Vec<u8> {
        let plen = (ext.len() + 20 + payload.len()) as u16;
        let mut p = vec![0x60, 0, 0, 0, (plen >> 8) as u8, plen as u8, first_nh, 64];
        p.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
        p.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
        p.extend_from_slice(ext);
        p.extend_from_slice(&[
            0x9c, 0x40, 0x23, 0x84, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x18, 0, 0, 0, 0, 0, 0,
        ]);
        p.extend_from_slice(payload);
        p
    }

    #[test]
    fn ethernet_ipv4() {
        let pkt = eth4(b"hello", 0x18, None);
        let s = parse(1, &pkt, pkt.len() as u32).unwrap();
        assert_eq!(s.src, (IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 40000));
        assert_eq!(s.dst.1, 9092);
        assert_eq!((s.seq, s.ack, s.flags), (1000, 7, 0x18));
        assert_eq!((s.payload, s.missing), (&b"hello"[..], 0));
    }

    #[test]
    fn padding_is_not_payload_and_snaplen_is_missing() {
        let mut pkt = eth4(b"", 0x10, None);
        pkt.extend_from_slice(&[0; 6]); // Ethernet padding to 60 bytes
        let s = parse(1, &pkt, pkt.len() as u32).unwrap();
        assert_eq!((s.payload.len(), s.missing), (0, 0));
        let full = eth4(&[7u8; 100], 0x18, None);
        let cut = &full[..64];
        let s = parse(1, cut, full.len() as u32).unwrap();
        assert_eq!((s.payload.len(), s.missing), (10, 90));
    }

    #[test]
    fn offload_total_zero_takes_the_wire_length() {
        let pkt = eth4(b"abcdef", 0x18, Some(0));
        let s = parse(1, &pkt, pkt.len() as u32).unwrap();
        assert_eq!(s.payload, b"abcdef");
    }

    #[test]
    fn vlan_stack_sll_sll2_null_raw() {
        let base = eth4(b"x", 0x18, None);
        let mut q = base[..12].to_vec();
        q.extend_from_slice(&[0x88, 0xa8, 0, 1, 0x81, 0x00, 0, 2]);
        q.extend_from_slice(&base[12..]);
        assert_eq!(parse(1, &q, q.len() as u32).unwrap().payload, b"x");
        let ip = &base[14..];
        let mut sll = vec![0u8; 14];
        sll.extend_from_slice(&[0x08, 0x00]);
        sll.extend_from_slice(ip);
        assert_eq!(parse(113, &sll, sll.len() as u32).unwrap().payload, b"x");
        let mut sll2 = vec![0x81, 0x00];
        sll2.extend_from_slice(&[0u8; 18]);
        sll2.extend_from_slice(&[0, 5, 0x08, 0x00]);
        sll2.extend_from_slice(ip);
        assert_eq!(parse(276, &sll2, sll2.len() as u32).unwrap().payload, b"x");
        for af in [2u32.to_le_bytes(), 2u32.to_be_bytes()] {
            let mut null = af.to_vec();
            null.extend_from_slice(ip);
            assert_eq!(parse(0, &null, null.len() as u32).unwrap().payload, b"x");
        }
        let mut null6 = 30u32.to_le_bytes().to_vec();
        null6.extend_from_slice(&ip6_tcp(&[], 6, b"y"));
        assert_eq!(
            parse(108, &null6, null6.len() as u32).unwrap().payload,
            b"y"
        );
        assert_eq!(parse(101, ip, ip.len() as u32).unwrap().payload, b"x");
        assert_eq!(parse(228, ip, ip.len() as u32).unwrap().payload, b"x");
        assert_eq!(parse(0, &[9, 0, 0, 0, 1], 5), Err(Skip::NotIp));
        assert_eq!(parse(101, &[0x20], 1), Err(Skip::NotIp));
    }

    #[test]
    fn ipv6_extension_headers() {
        // hop-by-hop (8 bytes) then TCP
        let p = ip6_tcp(&[6, 0, 0, 0, 0, 0, 0, 0], 0, b"data");
        let s = parse(229, &p, p.len() as u32).unwrap();
        assert_eq!(s.payload, b"data");
        assert_eq!(s.src.0, IpAddr::V6(Ipv6Addr::LOCALHOST));
        // a first fragment of a whole datagram (offset 0, M clear) is TCP
        let p = ip6_tcp(&[6, 0, 0, 0, 0, 0, 0, 1], 44, b"z");
        assert_eq!(parse(229, &p, p.len() as u32).unwrap().payload, b"z");
        // more fragments follow: a fragment
        let p = ip6_tcp(&[6, 0, 0, 1, 0, 0, 0, 1], 44, b"z");
        assert_eq!(parse(229, &p, p.len() as u32), Err(Skip::Fragment));
        // authentication header: (len + 2) * 4 bytes
        let p = ip6_tcp(&[6, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], 51, b"a");
        assert_eq!(parse(229, &p, p.len() as u32).unwrap().payload, b"a");
        // UDP
        let p = ip6_tcp(&[], 17, b"");
        assert_eq!(parse(229, &p, p.len() as u32), Err(Skip::NotTcp));
        // an extension header claiming more than the datagram
        let p = ip6_tcp(&[6, 200, 0, 0, 0, 0, 0, 0], 60, b"");
        assert_eq!(parse(229, &p, p.len() as u32), Err(Skip::BadIp));
    }

    #[test]
    fn bad_and_short_headers() {
        let pkt = eth4(b"", 0x10, None);
        assert_eq!(parse(1, &pkt[..13], 60), Err(Skip::Truncated));
        assert_eq!(parse(1, &pkt[..40], 60), Err(Skip::Truncated));
        let mut frag = pkt.clone();
        frag[20] = 0x20; // MF
        assert_eq!(parse(1, &frag, 60), Err(Skip::Fragment));
        let mut udp = pkt.clone();
        udp[23] = 17;
        assert_eq!(parse(1, &udp, 60), Err(Skip::NotTcp));
        let mut ihl = pkt.clone();
        ihl[14] = 0x44;
        assert_eq!(parse(1, &ihl, 60), Err(Skip::BadIp));
        let mut doff = pkt.clone();
        doff[46] = 0x40;
        assert_eq!(parse(1, &doff, 60), Err(Skip::BadTcp));
        let mut arp = pkt.clone();
        arp[12] = 0x08;
        arp[13] = 0x06;
        assert_eq!(parse(1, &arp, 60), Err(Skip::NotIp));
        assert_eq!(parse(147, &pkt, 60), Err(Skip::LinkType(147)));
        assert_eq!(Skip::LinkType(-1).reason(), "unsupported link type -1");
    }

    #[test]
    fn shares_are_symmetric() {
        let a = (IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 40000);
        let b = (IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 9092);
        for n in 1..9 {
            assert_eq!(share_of(&a, &b, n), share_of(&b, &a, n));
            assert!(share_of(&a, &b, n) < n);
        }
        // connections spread over the shares
        let mut seen = [0u32; 4];
        for port in 40000..40400u16 {
            seen[share_of(&(a.0, port), &b, 4) as usize] += 1;
        }
        assert!(seen.iter().all(|&c| c > 50), "{seen:?}");
    }
}
