//! One capture's packet path, wired once: net (with the share and port filters and the
//! tally that accounts for every packet), tcp reassembly, then Kafka framing and pairing.
//! The Python binding's `Stream` (files, live captures, the Spark job's batches) and the
//! fuzz targets drive this one type; what it makes waits in [`Session::take`].

use crate::net;
use crate::pair::{Out, PairConfig, Pairing, END_OF_CAPTURE};
use crate::tcp::{Config, Event, Reassembler, Sink};

/// What a session reads packets with.
pub struct SessionConfig {
    /// Kafka ports; without `autodetect`, a packet on none of them is skipped
    pub ports: Vec<u16>,
    pub autodetect: bool,
    /// `(k, n)`: keep only the connections of share `k` of `n` (a worker's part of a
    /// capture); a packet with no TCP segment belongs to share 0
    pub share: Option<(u32, u32)>,
    pub tcp: Config,
    pub pair: PairConfig,
    /// hand every connection's stream to the caller (reassembly alone: tests, tools)
    pub hand_all: bool,
}

/// The stages of one capture. See the module documentation.
pub struct Session {
    pub ra: Reassembler,
    pub pair: Pairing,
    pub tally: net::Tally,
    /// stream bytes reassembly handed to framing (data and gaps)
    pub delivered: u64,
    ports: Vec<u16>,
    autodetect: bool,
    share: Option<(u32, u32)>,
}

/// Reassembly's events on to pairing, their bytes counted.
struct Counted<'a> {
    pair: &'a mut Pairing,
    delivered: &'a mut u64,
}

impl Sink for Counted<'_> {
    fn event(&mut self, ev: Event<'_>) {
        match &ev {
            Event::Data { data, .. } => *self.delivered += data.len() as u64,
            Event::Gap { length, .. } => *self.delivered += *length,
            _ => {}
        }
        self.pair.event(ev);
    }
}

impl Session {
    /// A session; Err names a share that is none of `n` (`k >= n`, or `n` 0).
    pub fn new(cfg: SessionConfig) -> Result<Self, String> {
        if let Some((k, n)) = cfg.share {
            if n == 0 || k >= n {
                return Err(format!("share {k} of {n}"));
            }
        }
        let mut pair = Pairing::new(cfg.pair);
        pair.hand_all = cfg.hand_all;
        Ok(Session {
            ra: Reassembler::new(cfg.tcp),
            pair,
            tally: net::Tally::default(),
            delivered: 0,
            ports: cfg.ports,
            autodetect: cfg.autodetect,
            share: cfg.share,
        })
    }

    fn sink(&mut self) -> (&mut Reassembler, Counted<'_>) {
        (
            &mut self.ra,
            Counted {
                pair: &mut self.pair,
                delivered: &mut self.delivered,
            },
        )
    }

    /// One packet through the stages (a packet of another share is not counted).
    pub fn packet(&mut self, index: u64, ts: f64, linktype: i32, data: &[u8], orig_len: u32) {
        let parsed = net::parse(linktype, data, orig_len);
        if let Some((k, n)) = self.share {
            let mine = match &parsed {
                Ok(seg) => net::share_of(&seg.src, &seg.dst, n) == k,
                Err(_) => k == 0,
            };
            if !mine {
                return;
            }
        }
        self.tally.packet(ts);
        match parsed {
            Err(skip) => self.tally.skip(skip.reason()),
            Ok(seg) => {
                if !self.autodetect
                    && !self.ports.contains(&seg.src.1)
                    && !self.ports.contains(&seg.dst.1)
                {
                    self.tally.skip("not a Kafka port".into());
                    return;
                }
                self.pair.now = index;
                self.pair.now_ts = ts;
                let (ra, mut sink) = self.sink();
                ra.segment(&seg, ts, index, &mut sink);
            }
        }
    }

    /// The end of the capture: every open connection ends (at `ts`, else at its last packet).
    pub fn finish(&mut self, ts: Option<f64>) {
        self.pair.now = END_OF_CAPTURE;
        let (ra, mut sink) = self.sink();
        ra.finish(ts, &mut sink);
    }

    /// Requests waiting longer than `timeout` seconds at time `now` become unanswered.
    pub fn expire(&mut self, now: f64, timeout: f64) {
        self.pair.expire(now, timeout);
    }

    /// Plaintext of a handed connection (TLS the caller decrypts) at stream offset
    /// `offset` of direction `dir`, as of packet `now`.
    #[allow(clippy::too_many_arguments)] // (the bytes and where they are)
    pub fn plain(
        &mut self,
        conn: u64,
        dir: u8,
        offset: i64,
        data: &[u8],
        ts: f64,
        index: u64,
        now: u64,
        client_dir: Option<u8>,
    ) {
        let saved = std::mem::replace(&mut self.pair.now, now);
        self.pair
            .plain(conn, dir, offset, data, ts, index, client_dir);
        self.pair.now = saved;
    }

    /// A handed connection the caller does not analyse (TLS not decrypted).
    pub fn ignore(&mut self, conn: u64, client_dir: Option<u8>) {
        self.pair.ignore(conn, client_dir);
    }

    /// A handed connection's direction (or, `dir` None, the whole of it) ended, as of
    /// packet `now`.
    pub fn end(&mut self, conn: u64, dir: Option<u8>, reason: &'static str, now: u64) {
        let saved = std::mem::replace(&mut self.pair.now, now);
        self.pair.end(conn, dir, reason);
        self.pair.now = saved;
    }

    /// What the stages made since the last call, in order.
    pub fn take(&mut self) -> Vec<Out> {
        std::mem::take(&mut self.pair.out)
    }
}
