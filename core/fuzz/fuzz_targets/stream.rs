//! Any bytes as a capture, through net and TCP reassembly: no panic, and every byte of
//! every direction is delivered exactly once, as data or inside a gap, in order. The same
//! packets grouped into the Spark job's batches (small ones) read back as they went in:
//! each TCP packet once, with its number, time, link type, bytes and length.
#![no_main]

use std::collections::HashMap;

use kws_core::batches::{self, Batcher};
use kws_core::capture::CaptureReader;
use kws_core::net;
use kws_core::tcp::{Config, Event, Reassembler, Sink};
use libfuzzer_sys::fuzz_target;

#[derive(Default)]
struct Check {
    next: HashMap<(u64, u8), i64>,
    open: HashMap<u64, bool>,
}

impl Sink for Check {
    fn event(&mut self, ev: Event<'_>) {
        match ev {
            Event::Open(c) => {
                assert!(
                    self.open.insert(c.id, true).is_none(),
                    "connection {} opened twice",
                    c.id
                );
            }
            Event::Update(c) => assert!(self.open.contains_key(&c.id)),
            Event::Data {
                conn,
                dir,
                offset,
                data,
                ..
            } => {
                assert!(!data.is_empty());
                let at = self.next.entry((conn, dir)).or_insert(offset);
                assert_eq!(*at, offset, "data of {conn}/{dir} not contiguous");
                *at += data.len() as i64;
            }
            Event::Gap {
                conn,
                dir,
                offset,
                length,
                ..
            } => {
                let at = self.next.entry((conn, dir)).or_insert(offset);
                assert_eq!(*at, offset, "gap of {conn}/{dir} not contiguous");
                *at += length as i64;
            }
            Event::End {
                conn, dir: None, ..
            } => {
                assert_eq!(
                    self.open.insert(conn, false),
                    Some(true),
                    "connection {conn} ended twice"
                );
            }
            Event::End { .. } => {}
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let src = Box::new(std::io::Cursor::new(data.to_vec()));
    let Ok(mut r) = CaptureReader::from_reader("fuzz", src, data.len() as u64, false) else {
        return;
    };
    let cfg = Config {
        max_buffer: 4096,
        max_total_buffer: 16384,
        max_closed: 4,
        ..Config::default()
    };
    let mut ra = Reassembler::new(cfg);
    let mut check = Check::default();
    let mut batcher = Batcher::new(256, None);
    let mut fed = Vec::new();
    let mut read = 0u64;
    while let Ok(Some(p)) = r.next_packet() {
        read += 1;
        batcher.packet(p.index, p.ts, p.linktype, p.data, p.orig_len);
        if let Ok(seg) = net::parse(p.linktype, p.data, p.orig_len) {
            fed.push((
                p.index,
                p.ts.to_bits(),
                p.linktype,
                p.data.to_vec(),
                p.orig_len,
            ));
            ra.segment(&seg, p.ts, p.index, &mut check);
        }
    }
    ra.finish(None, &mut check);
    batcher.finish();
    assert_eq!(batcher.tally.packets, read);
    assert_eq!(
        batcher.tally.skips.values().sum::<u64>() + fed.len() as u64,
        read
    );
    let mut back = Vec::new();
    for (_key, first, c) in &batcher.sealed {
        let got = batches::packets(&c.index, &c.ts, &c.linktype, &c.orig_len, &c.ends, &c.blob)
            .expect("a batch's own columns");
        assert_eq!(got.first().map(|p| p.0), Some(*first));
        back.extend(
            got.into_iter()
                .map(|(i, t, lt, d, o)| (i, t.to_bits(), lt, d.to_vec(), o)),
        );
    }
    back.sort_by_key(|p| p.0);
    assert_eq!(back, fed);
    assert!(
        check.open.values().all(|open| !open),
        "a connection was never ended"
    );
    assert_eq!(ra.stats.pending_total, 0);
});
