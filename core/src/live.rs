//! Live capture's reading: the packets queued on a PF_PACKET socket, taken in batches of
//! `recvmmsg(2)` calls without blocking.
//!
//! The front opens the socket (interface, kernel BPF filter, buffer size, options) and
//! hands its file descriptor in; the reader borrows it (it never closes it, and must not be
//! used once the front has). For each packet it gives the kernel's receive time, at most
//! `snaplen` bytes and the packet's length on the wire:
//!
//! - the time is the `SO_TIMESTAMPNS` control message (the front turns the option on;
//!   the clock when a packet comes without it);
//! - the length on the wire is the `PACKET_AUXDATA` control message's `tp_len` (the length
//!   before the BPF filter cut the packet to its snap length), else what the call
//!   returned with `MSG_TRUNC` (the length as queued, longer than the buffer when cut);
//! - with `vlan_tags`, a VLAN tag the kernel took out of an Ethernet frame (and reported in
//!   `PACKET_AUXDATA`) is put back after the MAC addresses, as libpcap and scapy do;
//! - with `skip_outgoing`, a packet whose `sll_pkttype` is `PACKET_OUTGOING` is skipped
//!   (on loopback each packet is seen twice, sent and received: the front's filter keeps
//!   only the received copy in the kernel, this is the second guard).
//!
//! No `unsafe` here: the system calls go through `nix`'s safe API over the raw fd.

use std::io::IoSliceMut;
use std::os::fd::RawFd;
use std::time::{SystemTime, UNIX_EPOCH};

use nix::errno::Errno;
use nix::sys::socket::{
    getsockname, recvmmsg, AddressFamily, ControlMessageOwned, LinkAddr, MsgFlags, MultiHeaders,
    SockaddrLike, SockaddrStorage,
};

/// `sll_pkttype` of a packet the host sent (linux/if_packet.h)
pub const PACKET_OUTGOING: u8 = 4;
const SOL_PACKET: i32 = 263;
const PACKET_AUXDATA: i32 = 8;
const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
const TP_STATUS_VLAN_TPID_VALID: u32 = 1 << 6;
const ETH_P_8021Q: u16 = 0x8100;
/// room kept in front of each packet's buffer for a VLAN tag put back
const VLAN_TAG: usize = 4;
/// bytes of the MAC addresses a VLAN tag follows
const MACS: usize = 12;
/// the packet buffers of one `recvmmsg` call: about this many bytes, `MIN_SLOTS..=MAX_SLOTS` packets
const BATCH_BYTES: usize = 8 * 1024 * 1024;
const MIN_SLOTS: usize = 4;
const MAX_SLOTS: usize = 64;
/// control data room per packet: a timespec and a tpacket_auxdata take 40 bytes on 64-bit
/// Linux; the rest for any other message an option turned on (a packet whose control data
/// did not fit keeps its data, and takes the clock's time)
const CMSG_ROOM: usize = 128;
/// the largest snap length a reader takes
pub const MAX_SNAPLEN: usize = 1 << 24;

/// Why a reader cannot be made on a descriptor.
#[derive(Debug, PartialEq, Eq)]
pub enum OpenError {
    /// `getsockname` failed: not an open socket (EBADF, ENOTSOCK)
    Sys(Errno),
    /// a socket, but not a packet socket
    NotPacket(Option<AddressFamily>),
    /// snap length 0 or above [`MAX_SNAPLEN`]
    Snaplen(usize),
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Sys(e) => write!(f, "{}", strerror(*e)),
            OpenError::NotPacket(fam) => write!(
                f,
                "not a packet (AF_PACKET) socket (family {})",
                fam.map_or_else(|| "unknown".to_string(), |a| format!("{a:?}"))
            ),
            OpenError::Snaplen(n) => write!(f, "snap length {n} (1 to {MAX_SNAPLEN})"),
        }
    }
}

/// A packet as read: valid until the next read.
#[derive(Debug, Clone, Copy)]
pub struct Packet<'a> {
    /// seconds since the epoch (the kernel's receive time)
    pub ts: f64,
    /// at most the snap length
    pub data: &'a [u8],
    /// the packet's length on the wire
    pub orig_len: u32,
}

/// What a reader has done since it was made.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Counts {
    /// packets handed out
    pub packets: u64,
    /// their bytes (as handed out, at most the snap length each)
    pub bytes: u64,
    /// packets longer than the snap length (cut)
    pub truncated: u64,
    /// `PACKET_OUTGOING` copies skipped
    pub outgoing: u64,
    /// packets that came without a kernel timestamp (the clock's time given)
    pub clock_times: u64,
    /// VLAN tags put back
    pub vlan_tags: u64,
    /// `recvmmsg` calls that returned packets
    pub calls: u64,
}

/// The `tpacket_auxdata` fields the reader uses (linux/if_packet.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuxData {
    pub status: u32,
    pub len: u32,
    pub vlan_tci: u16,
    pub vlan_tpid: u16,
}

impl AuxData {
    /// `struct tpacket_auxdata { u32 tp_status, tp_len, tp_snaplen; u16 tp_mac, tp_net,
    /// tp_vlan_tci, tp_vlan_tpid; }` in the host's byte order; None when shorter.
    pub fn parse(b: &[u8]) -> Option<AuxData> {
        let u32_at = |i: usize| Some(u32::from_ne_bytes(b.get(i..i + 4)?.try_into().ok()?));
        let u16_at = |i: usize| Some(u16::from_ne_bytes(b.get(i..i + 2)?.try_into().ok()?));
        Some(AuxData {
            status: u32_at(0)?,
            len: u32_at(4)?,
            vlan_tci: u16_at(16)?,
            vlan_tpid: u16_at(18)?,
        })
    }

    /// The VLAN tag the kernel took out of the frame (TPID, TCI), as libpcap's VLAN_VALID
    /// tells it: a TCI, or the status saying one is valid (TCI 0 is a valid tag).
    pub fn vlan_tag(&self) -> Option<(u16, u16)> {
        if self.vlan_tci == 0 && self.status & TP_STATUS_VLAN_VALID == 0 {
            return None;
        }
        let tpid = if self.status & TP_STATUS_VLAN_TPID_VALID != 0 {
            self.vlan_tpid
        } else {
            ETH_P_8021Q
        };
        Some((tpid, self.vlan_tci))
    }
}

/// What one packet of a batch came with.
#[derive(Debug, Clone, Copy)]
struct Meta {
    /// what recvmmsg returned for it (MSG_TRUNC: its queued length, maybe beyond the buffer)
    len: usize,
    ts: Option<f64>,
    pkttype: Option<u8>,
    aux: Option<AuxData>,
}

/// A batch reader over a packet socket the caller owns.
pub struct Reader {
    fd: RawFd,
    snaplen: usize,
    skip_outgoing: bool,
    vlan_tags: bool,
    slots: usize,
    /// `slots` buffers of VLAN_TAG + snaplen bytes, each packet read at VLAN_TAG
    buf: Vec<u8>,
    meta: Vec<Meta>,
    /// an error met after packets were handed out: reported by the next read
    pending: Option<Errno>,
    pub counts: Counts,
}

impl Reader {
    /// A reader of the packet socket `fd` (checked: an open AF_PACKET socket).
    pub fn new(
        fd: RawFd,
        snaplen: usize,
        skip_outgoing: bool,
        vlan_tags: bool,
    ) -> Result<Reader, OpenError> {
        if snaplen == 0 || snaplen > MAX_SNAPLEN {
            return Err(OpenError::Snaplen(snaplen));
        }
        let addr: SockaddrStorage = getsockname(fd).map_err(OpenError::Sys)?;
        if addr.family() != Some(AddressFamily::Packet) {
            return Err(OpenError::NotPacket(addr.family()));
        }
        let slots = (BATCH_BYTES / (VLAN_TAG + snaplen)).clamp(MIN_SLOTS, MAX_SLOTS);
        Ok(Reader {
            fd,
            snaplen,
            skip_outgoing,
            vlan_tags,
            slots,
            // zeroed: the pages a packet never reached are never touched
            buf: vec![0; slots * (VLAN_TAG + snaplen)],
            meta: Vec::with_capacity(slots),
            pending: None,
            counts: Counts::default(),
        })
    }

    pub fn fd(&self) -> RawFd {
        self.fd
    }

    pub fn snaplen(&self) -> usize {
        self.snaplen
    }

    /// packets one system call takes at most
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Forget the descriptor (before the caller closes it): reads then fail with EBADF.
    pub fn close(&mut self) {
        self.fd = -1;
        self.pending = None;
    }

    pub fn closed(&self) -> bool {
        self.fd < 0
    }

    /// Hand `visit` the packets queued now, in order, until the queue is empty (the call
    /// would block), or `max_packets` packets or `max_bytes` bytes were handed (the last
    /// batch may pass `max_bytes`). Returns how many were handed. An error after some
    /// packets were handed ends the read quietly and is returned by the next one; an
    /// interrupted call (EINTR) ends the read as an empty queue does.
    pub fn read<F: FnMut(Packet<'_>)>(
        &mut self,
        max_packets: usize,
        max_bytes: usize,
        mut visit: F,
    ) -> Result<usize, Errno> {
        if let Some(e) = self.pending.take() {
            return Err(e);
        }
        if self.fd < 0 {
            return Err(Errno::EBADF);
        }
        let (mut handed, mut bytes) = (0usize, 0usize);
        while handed < max_packets && bytes < max_bytes {
            let want = (max_packets - handed).min(self.slots);
            let got = match self.recv(want) {
                Ok(n) => n,
                Err(Errno::EAGAIN | Errno::EINTR) => break,
                Err(e) if handed > 0 => {
                    self.pending = Some(e);
                    break;
                }
                Err(e) => return Err(e),
            };
            self.counts.calls += 1;
            let mut clock = None;
            for i in 0..got {
                if let Some(p) = self.packet(i, &mut clock) {
                    handed += 1;
                    bytes += p.data.len();
                    visit(p);
                }
            }
            if got < want {
                break; // the queue was emptied: another call would say EAGAIN
            }
        }
        Ok(handed)
    }

    /// One `recvmmsg` of up to `want` packets into the buffers; what each came with in `meta`.
    fn recv(&mut self, want: usize) -> Result<usize, Errno> {
        // (new headers each call: recvmmsg writes each message's name and control lengths
        // back into its header, and nix's MultiHeaders does not restore them before the
        // next call, so a reused slot would offer the kernel only the room its last
        // message used: nix-rust/nix PR 2813)
        let mut headers =
            MultiHeaders::<LinkAddr>::preallocate(want, Some(Vec::with_capacity(CMSG_ROOM)));
        let slot = VLAN_TAG + self.snaplen;
        let mut iovs: Vec<[IoSliceMut<'_>; 1]> = self
            .buf
            .chunks_exact_mut(slot)
            .take(want)
            .map(|b| [IoSliceMut::new(&mut b[VLAN_TAG..])])
            .collect();
        let msgs = recvmmsg(
            self.fd,
            &mut headers,
            iovs.iter_mut(),
            MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_TRUNC,
            None,
        )?;
        self.meta.clear();
        for m in msgs {
            let mut meta = Meta {
                len: m.bytes,
                ts: None,
                pkttype: m.address.map(|a| a.pkttype()),
                aux: None,
            };
            // (control data cut short, MSG_CTRUNC, is an error here: the packet keeps its bytes)
            if let Ok(cmsgs) = m.cmsgs() {
                for c in cmsgs {
                    match c {
                        ControlMessageOwned::ScmTimestampns(t) => {
                            meta.ts = Some(t.tv_sec() as f64 + t.tv_nsec() as f64 * 1e-9);
                        }
                        ControlMessageOwned::Unknown(u)
                            if u.cmsg_header.cmsg_level == SOL_PACKET
                                && u.cmsg_header.cmsg_type == PACKET_AUXDATA =>
                        {
                            meta.aux = AuxData::parse(&u.data_bytes);
                        }
                        _ => {}
                    }
                }
            }
            self.meta.push(meta);
        }
        Ok(self.meta.len())
    }

    /// Packet `i` of the last batch, or None for an outgoing copy skipped.
    fn packet(&mut self, i: usize, clock: &mut Option<f64>) -> Option<Packet<'_>> {
        let m = self.meta[i];
        if self.skip_outgoing && m.pkttype == Some(PACKET_OUTGOING) {
            self.counts.outgoing += 1;
            return None;
        }
        let snaplen = self.snaplen;
        let slot = VLAN_TAG + snaplen;
        let caplen = m.len.min(snaplen);
        let mut orig = m.aux.map_or(m.len, |a| (a.len as usize).max(m.len));
        let ts = match m.ts {
            Some(t) => t,
            None => {
                self.counts.clock_times += 1;
                *clock.get_or_insert_with(now)
            }
        };
        let b = &mut self.buf[i * slot..(i + 1) * slot];
        let tag = if self.vlan_tags && caplen >= MACS {
            m.aux.and_then(|a| a.vlan_tag())
        } else {
            None
        };
        let data: &[u8] = match tag {
            Some((tpid, tci)) => {
                self.counts.vlan_tags += 1;
                let caplen = put_vlan_tag(b, caplen, tpid, tci).min(snaplen);
                orig += VLAN_TAG;
                &b[..caplen]
            }
            None => &b[VLAN_TAG..VLAN_TAG + caplen],
        };
        if orig > data.len() {
            self.counts.truncated += 1;
        }
        self.counts.packets += 1;
        self.counts.bytes += data.len() as u64;
        Some(Packet {
            ts,
            data,
            orig_len: u32::try_from(orig).unwrap_or(u32::MAX),
        })
    }
}

/// A frame read at `VLAN_TAG` in `b` (`caplen` bytes) with its VLAN tag put back after the
/// MAC addresses: the frame then starts at 0; returns its new length.
pub fn put_vlan_tag(b: &mut [u8], caplen: usize, tpid: u16, tci: u16) -> usize {
    b.copy_within(VLAN_TAG..VLAN_TAG + MACS, 0);
    b[MACS..MACS + 2].copy_from_slice(&tpid.to_be_bytes());
    b[MACS + 2..MACS + 4].copy_from_slice(&tci.to_be_bytes());
    caplen + VLAN_TAG
}

/// The C library's text for `e` ("Bad file descriptor"), as Python's OSError says it.
pub fn strerror(e: Errno) -> String {
    let code = e as i32;
    let text = std::io::Error::from_raw_os_error(code).to_string();
    match text.strip_suffix(&format!(" (os error {code})")) {
        Some(t) => t.to_string(),
        None => text,
    }
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::socket::{setsockopt, socket, sockopt, SockFlag, SockProtocol, SockType};
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;

    fn aux_bytes(status: u32, len: u32, tci: u16, tpid: u16) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&status.to_ne_bytes());
        b.extend_from_slice(&len.to_ne_bytes());
        b.extend_from_slice(&len.to_ne_bytes()); // tp_snaplen
        b.extend_from_slice(&14u16.to_ne_bytes()); // tp_mac
        b.extend_from_slice(&34u16.to_ne_bytes()); // tp_net
        b.extend_from_slice(&tci.to_ne_bytes());
        b.extend_from_slice(&tpid.to_ne_bytes());
        b
    }

    #[test]
    fn auxdata_parse_and_vlan_tag() {
        let a = AuxData::parse(&aux_bytes(1, 1514, 0, 0)).unwrap();
        assert_eq!(a.len, 1514);
        assert_eq!(a.vlan_tag(), None);
        let a = AuxData::parse(&aux_bytes(TP_STATUS_VLAN_VALID, 60, 0, 0)).unwrap();
        assert_eq!(
            a.vlan_tag(),
            Some((ETH_P_8021Q, 0)),
            "TCI 0 is a tag when the status says so"
        );
        let a = AuxData::parse(&aux_bytes(0, 60, 42, 0x88a8)).unwrap();
        assert_eq!(
            a.vlan_tag(),
            Some((ETH_P_8021Q, 42)),
            "TPID only when marked valid"
        );
        let st = TP_STATUS_VLAN_VALID | TP_STATUS_VLAN_TPID_VALID;
        let a = AuxData::parse(&aux_bytes(st, 60, 7, 0x88a8)).unwrap();
        assert_eq!(a.vlan_tag(), Some((0x88a8, 7)));
        assert_eq!(AuxData::parse(&aux_bytes(0, 60, 0, 0)[..19]), None);
    }

    #[test]
    fn vlan_tag_goes_after_the_macs() {
        let frame: Vec<u8> = (0u8..20).collect();
        let mut b = vec![0xee; VLAN_TAG];
        b.extend_from_slice(&frame);
        let n = put_vlan_tag(&mut b, frame.len(), 0x8100, 0x0123);
        assert_eq!(n, 24);
        assert_eq!(&b[..12], &frame[..12]);
        assert_eq!(&b[12..16], &[0x81, 0x00, 0x01, 0x23]);
        assert_eq!(&b[16..24], &frame[12..]);
    }

    #[test]
    fn a_closed_descriptor_or_another_socket_is_refused() {
        // a descriptor number far above any this process opened
        assert_eq!(
            Reader::new(1 << 20, 65535, false, false).err(),
            Some(OpenError::Sys(Errno::EBADF))
        );
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let e = Reader::new(udp.as_raw_fd(), 65535, false, false).err();
        assert_eq!(e, Some(OpenError::NotPacket(Some(AddressFamily::Inet))));
        assert!(e
            .unwrap()
            .to_string()
            .starts_with("not a packet (AF_PACKET) socket"));
        assert!(matches!(
            Reader::new(udp.as_raw_fd(), 0, false, false),
            Err(OpenError::Snaplen(0))
        ));
        let f = std::fs::File::open("/dev/null").unwrap();
        assert_eq!(
            Reader::new(f.as_raw_fd(), 65535, false, false).err(),
            Some(OpenError::Sys(Errno::ENOTSOCK))
        );
    }

    #[test]
    fn slots_follow_the_snap_length() {
        let n = |snap: usize| (BATCH_BYTES / (VLAN_TAG + snap)).clamp(MIN_SLOTS, MAX_SLOTS);
        assert_eq!(n(262144), 31);
        assert_eq!(n(65535), MAX_SLOTS);
        assert_eq!(n(MAX_SNAPLEN), MIN_SLOTS);
    }

    /// A packet socket on every interface (root only) and UDP datagrams to a port of lo:
    /// what the reader gives of them. Without CAP_NET_RAW the test says so and passes.
    #[test]
    fn reads_udp_datagrams_sent_on_loopback() {
        let sock = match socket(
            AddressFamily::Packet,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::EthAll,
        ) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("skipped: no packet socket ({e}): needs root or CAP_NET_RAW");
                return;
            }
        };
        setsockopt(&sock, sockopt::ReceiveTimestampns, &true).unwrap();
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = rx.local_addr().unwrap().port();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let snap = 200;
        // drained of what came before: only packets sent from here on are looked at
        let mut r = Reader::new(sock.as_raw_fd(), snap, true, false).unwrap();
        while r.read(1000, usize::MAX, |_| ()).unwrap() > 0 {}
        let t0 = now();
        let sizes = [1usize, 100, 150, 1000];
        for (i, &n) in sizes.iter().enumerate() {
            let payload = vec![b'a' + i as u8; n];
            tx.send_to(&payload, ("127.0.0.1", port)).unwrap();
        }
        let t1 = now();
        let mut got: Vec<(f64, Vec<u8>, u32)> = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while got.len() < sizes.len() && std::time::Instant::now() < deadline {
            r.read(1000, usize::MAX, |p| {
                // Ethernet (lo) + IPv4 + UDP to our port
                let d = p.data;
                if d.len() >= 14 + 20 + 8
                    && d[12..14] == [8, 0]
                    && d[14 + 9] == 17
                    && u16::from_be_bytes([d[36], d[37]]) == port
                {
                    got.push((p.ts, d.to_vec(), p.orig_len));
                }
            })
            .unwrap();
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(
            got.len(),
            sizes.len(),
            "each datagram once (the outgoing copy skipped)"
        );
        for ((ts, data, orig), (i, &n)) in got.iter().zip(sizes.iter().enumerate()) {
            let wire = 14 + 20 + 8 + n;
            assert_eq!(*orig as usize, wire);
            assert_eq!(data.len(), wire.min(snap));
            assert!(data[42..].iter().all(|&b| b == b'a' + i as u8));
            assert!(
                *ts >= t0 - 0.001 && *ts <= t1 + 0.001,
                "{ts} not in {t0}..{t1}"
            );
        }
        assert!(r.counts.truncated >= 1 && r.counts.outgoing >= sizes.len() as u64);
        r.close();
        assert_eq!(r.read(1, 1, |_| ()), Err(Errno::EBADF));
    }
}
