//! Any bytes as a capture, through net, reassembly, Kafka framing and pairing with the real
//! header checks: no panic, and nothing lost: every frame cut is in exactly one exchange
//! record, and every byte reassembly delivered is in a frame, counted as skipped, or
//! handed to the front (TLS); every connection ends once; a connection with exchanges
//! ends taken as Kafka (by its port, or by the evidence of its exchanges, judged against
//! the real schema when `tests/fuzz_core.sh` hands it over).
#![no_main]

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock};

use kws_core::capture::CaptureReader;
use kws_core::evidence;
use kws_core::figures::Figures;
use kws_core::kafka::ApiTable;
use kws_core::pair::{Forced, Out, PairConfig};
use kws_core::session::{Session, SessionConfig};
use kws_core::tcp::Config;
use libfuzzer_sys::fuzz_target;

#[path = "schema.rs"]
mod schema;

#[derive(Default)]
struct Tally {
    frames: u64,
    frame_bytes: u64,
    handed_bytes: u64,
    opened: HashSet<u64>,
    closed: HashSet<u64>,
    /// connections with exchanges: each must end taken as Kafka (by port or by evidence)
    with_exchanges: HashSet<u64>,
}

/// Take the stage's output; a handed connection's end is answered as the front answers
/// one it does not decrypt (ignore, then end).
fn drain(s: &mut Session, t: &mut Tally) {
    loop {
        let out = s.take();
        if out.is_empty() {
            return;
        }
        for o in out {
            match o {
                Out::Open(c) => assert!(t.opened.insert(c.id), "connection {} opened twice", c.id),
                Out::Exchange(r) => {
                    t.with_exchanges.insert(r.conn);
                    for f in [&r.request, &r.response].into_iter().flatten() {
                        assert!(f.data.len() <= f.size as usize);
                        assert_eq!(f.truncated, f.data.len() < f.size as usize);
                        t.frames += 1;
                        t.frame_bytes += 4 + f.data.len() as u64;
                    }
                }
                Out::Closed(c) => {
                    assert!(
                        t.closed.insert(c.conn),
                        "connection {} closed twice",
                        c.conn
                    );
                    assert!(
                        !t.with_exchanges.contains(&c.conn)
                            || c.detection.starts_with("port ")
                            || c.detection.starts_with("auto: "),
                        "exchanges of a connection not taken as Kafka ({})",
                        c.detection
                    );
                }
                Out::Data { data, .. } => t.handed_bytes += data.len() as u64,
                Out::Gap { length, .. } => t.handed_bytes += length,
                Out::End {
                    conn,
                    dir: None,
                    reason,
                    ..
                } => {
                    s.ignore(conn, None);
                    s.end(conn, None, reason, s.pair.now);
                }
                Out::Update(_) | Out::End { .. } => {}
            }
        }
    }
}

/// The header table and the schema the evidence judges bodies by: the real schema when
/// `tests/fuzz_core.sh` hands it over (`KWS_FIGURES_SCHEMA`), else a small table alone.
#[allow(clippy::type_complexity)]
fn setup() -> &'static (ApiTable, Option<Arc<Mutex<Figures>>>) {
    static SETUP: OnceLock<(ApiTable, Option<Arc<Mutex<Figures>>>)> = OnceLock::new();
    SETUP.get_or_init(|| {
        if let Some(s) = schema::load() {
            return (
                s.table,
                Some(Arc::new(Mutex::new(evidence::walker(s.apis)))),
            );
        }
        let hv = |max: i16, flex: i16| -> Vec<u8> {
            (0..=max).map(|v| if v >= flex { 2 } else { 1 }).collect()
        };
        let table = ApiTable::new(vec![
            (0, 11, 19, hv(11, 9)),
            (1, 13, 21, hv(13, 12)),
            (3, 12, 20, hv(12, 9)),
            (17, 1, 9, hv(1, 99)),
            (18, 4, 12, hv(4, 3)),
        ])
        .expect("a valid table");
        (table, None)
    })
}

fuzz_target!(|data: &[u8]| {
    let src = Box::new(std::io::Cursor::new(data.to_vec()));
    let Ok(mut r) = CaptureReader::from_reader("fuzz", src, data.len() as u64, false) else {
        return;
    };
    let (table, schema) = setup();
    let forced = match data.last().map(|b| b % 3) {
        Some(1) => Forced::Legacy,
        Some(2) => Forced::Modern,
        _ => Forced::Auto,
    };
    let mut s = Session::new(SessionConfig {
        ports: vec![9092],
        autodetect: true,
        share: None,
        tcp: Config {
            max_buffer: 4096,
            max_total_buffer: 16384,
            max_closed: 4,
            ..Config::default()
        },
        pair: PairConfig {
            ports: vec![9092],
            forced,
            max_frame_size: 1 << 16,
            table: table.clone(),
            schema: schema.clone(),
        },
        hand_all: false,
    })
    .expect("no share");
    let mut tally = Tally::default();
    while let Ok(Some(p)) = r.next_packet() {
        let (index, ts) = (p.index, p.ts);
        s.packet(index, ts, p.linktype, p.data, p.orig_len);
        drain(&mut s, &mut tally);
        if index % 7 == 0 {
            s.expire(ts, 0.5);
            drain(&mut s, &mut tally);
        }
    }
    s.finish(None);
    drain(&mut s, &mut tally);
    let c = &s.pair.counts;
    assert_eq!(
        s.pair.open_states(),
        0,
        "a connection was never closed (by the reassembler's ends alone)"
    );
    assert_eq!(
        tally.opened, tally.closed,
        "every connection opened is closed once"
    );
    assert_eq!(
        tally.frames,
        c.request_frames + c.response_frames,
        "a frame is in no exchange record"
    );
    let skipped: u64 = c.bytes_skipped.values().sum();
    assert_eq!(
        s.delivered,
        tally.frame_bytes + skipped + tally.handed_bytes,
        "bytes not accounted for"
    );
});
