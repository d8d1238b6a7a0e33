//! Any bytes as a capture, through net and TCP reassembly into one Framer per connection
//! direction, with limits and a judge chosen by the input's last bytes (so the samples of
//! the seed corpus stay captures): no panic, no allocation from a declared size (the rss
//! limit), and every byte of every direction is in a frame or counted as skipped.
#![no_main]

use std::collections::HashMap;

use kws_core::capture::CaptureReader;
use kws_core::frame::{Frame, Framer, Judge, Verdict, DEFAULT_MAX_FRAME_SIZE};
use kws_core::net;
use kws_core::tcp::{Config, Event, Reassembler, Sink};
use libfuzzer_sys::fuzz_target;

/// A judge driven by the input: a request-like or response-like check, or verdicts that
/// hang on the header's bytes, a seed and how often it was asked.
struct Fuzzed {
    mode: u8,
    seed: u8,
    calls: u64,
    sane: bool,
    syn_seen: bool,
    kafka: bool,
}

fn be(h: &[u8]) -> u32 {
    h.iter().fold(0, |a, &x| a << 8 | x as u32)
}

impl Judge for Fuzzed {
    fn checks(&self) -> bool {
        !self.mode.is_multiple_of(4)
    }
    fn plausible(&mut self, head: &[u8]) -> Verdict {
        self.calls += 1;
        let ok = match self.mode % 4 {
            1 => {
                head.len() >= 2 && be(&head[..2]) < 100 && (head.len() < 4 || be(&head[2..4]) < 30)
            }
            2 => head.len() >= 4 && be(&head[..4]) < 100,
            _ => {
                let h = head.iter().fold(self.seed as u64 ^ self.calls, |a, &x| {
                    a.wrapping_mul(31) ^ x as u64
                });
                return [Verdict::No, Verdict::Yes, Verdict::Strong][(h % 3) as usize];
            }
        };
        match (ok, head.len() >= 8) {
            (false, _) => Verdict::No,
            (true, true) => Verdict::Strong,
            (true, false) => Verdict::Yes,
        }
    }
    fn sane(&mut self, head: &[u8], size: u32) -> bool {
        self.sane && !(size as u64 + head.len() as u64 + self.seed as u64).is_multiple_of(3)
    }
    fn first_known(&self) -> (bool, bool) {
        (self.syn_seen, self.kafka)
    }
}

/// One direction's framer, its frames and what the stream held.
struct Dir {
    framer: Framer,
    frames: Vec<Frame>,
    stream: u64,
    skipped: u64,
}

struct Check {
    max: u32,
    min: u32,
    peek: usize,
    mode: u8,
    seed: u8,
    syn_seen: HashMap<u64, bool>,
    dirs: HashMap<(u64, u8), Dir>,
    events: u64,
}

impl Check {
    fn judge(&self, conn: u64) -> Fuzzed {
        Fuzzed {
            mode: self.mode,
            seed: self.seed,
            calls: self.events,
            sane: self.mode & 4 != 0,
            syn_seen: self.syn_seen.get(&conn).copied().unwrap_or(false),
            kafka: self.mode & 8 != 0,
        }
    }

    fn dir(&mut self, conn: u64, d: u8) -> &mut Dir {
        let (max, min, peek) = (self.max, self.min, self.peek);
        self.dirs.entry((conn, d)).or_insert_with(|| Dir {
            framer: Framer::new(d, max, min, peek),
            frames: Vec::new(),
            stream: 0,
            skipped: 0,
        })
    }

    /// Now and then, as the pipeline does: collect what was skipped, change the minimum.
    fn poke(&mut self, conn: u64, d: u8) {
        self.events += 1;
        let (events, seed) = (self.events, self.seed as u64);
        let dir = self.dir(conn, d);
        if (events ^ seed) % 5 == 0 {
            let (skipped, _over) = dir.framer.take_skipped();
            dir.skipped += skipped.values().sum::<u64>();
            assert!(!dir.framer.holds() || dir.framer.buffered() > 0);
        }
        if (events + seed) % 11 == 0 {
            dir.framer
                .set_min_frame_size([0, 2, 4][(events % 3) as usize]);
        }
    }

    fn end(&mut self, conn: u64, d: u8) {
        let mut judge = self.judge(conn);
        let Some(mut dir) = self.dirs.remove(&(conn, d)) else {
            return;
        };
        dir.framer.finish(&mut judge, &mut dir.frames);
        assert_eq!(dir.framer.buffered(), 0);
        assert!(dir.framer.finished());
        let frames = &dir.frames;
        let framed: u64 = frames.iter().map(|f| 4 + f.data.len() as u64).sum();
        let skipped = dir.skipped + dir.framer.skipped.values().sum::<u64>();
        assert_eq!(
            framed + skipped,
            dir.stream,
            "conn {conn} dir {d}: bytes not accounted for"
        );
        assert_eq!(dir.framer.frames, frames.len() as u64);
        for f in frames {
            assert!(f.dir == d && f.data.len() as u64 <= f.size as u64);
            assert!(f.truncated || f.data.len() as u64 == f.size as u64);
            assert!(f.size <= self.max);
        }
        for w in frames.windows(2) {
            assert!(
                w[0].offset + 4 + w[0].size as i64 <= w[1].offset,
                "frames overlap"
            );
        }
    }
}

impl Sink for Check {
    fn event(&mut self, ev: Event<'_>) {
        match ev {
            Event::Open(c) | Event::Update(c) => {
                self.syn_seen.insert(c.id, c.syn_seen);
            }
            Event::Data {
                conn,
                dir,
                offset,
                data,
                ts,
                index,
            } => {
                let mut judge = self.judge(conn);
                let d = self.dir(conn, dir);
                d.stream += data.len() as u64;
                d.framer
                    .data(offset, data, ts, index, &mut judge, &mut d.frames);
                self.poke(conn, dir);
            }
            Event::Gap {
                conn,
                dir,
                offset,
                length,
                ts,
                index,
                ..
            } => {
                let mut judge = self.judge(conn);
                let d = self.dir(conn, dir);
                d.stream += length;
                d.framer
                    .gap(offset, length, ts, index, &mut judge, &mut d.frames);
                self.poke(conn, dir);
            }
            Event::End {
                conn, dir: Some(d), ..
            } => self.end(conn, d),
            Event::End {
                conn, dir: None, ..
            } => {
                self.end(conn, 0);
                self.end(conn, 1);
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let cfg = if data.len() >= 3 {
        &data[data.len() - 3..]
    } else {
        &[0, 0, 0][..]
    };
    let mut check = Check {
        max: [64, 1024, 65536, DEFAULT_MAX_FRAME_SIZE, u32::MAX][(cfg[0] % 5) as usize],
        min: [0, 2, 4][((cfg[0] >> 3) % 3) as usize],
        peek: [1, 4, 16, 64][((cfg[0] >> 5) % 4) as usize],
        mode: cfg[1],
        seed: cfg[2],
        syn_seen: HashMap::new(),
        dirs: HashMap::new(),
        events: 0,
    };
    let src = Box::new(std::io::Cursor::new(data.to_vec()));
    let Ok(mut r) = CaptureReader::from_reader("fuzz", src, data.len() as u64, false) else {
        return;
    };
    let tcfg = Config {
        max_buffer: 4096,
        max_total_buffer: 16384,
        max_closed: 4,
        ..Config::default()
    };
    let mut ra = Reassembler::new(tcfg);
    while let Ok(Some(p)) = r.next_packet() {
        if let Ok(seg) = net::parse(p.linktype, p.data, p.orig_len) {
            ra.segment(&seg, p.ts, p.index, &mut check);
        }
    }
    ra.finish(None, &mut check);
    // every connection ended, so every direction was finished and checked
    assert!(
        check.dirs.is_empty(),
        "directions never ended: {:?}",
        check.dirs.keys().collect::<Vec<_>>()
    );
});
