//! Any bytes as a capture file (plain, and gzip when they start with its magic): the
//! reader never panics, never gives a packet past its record, and stops for good.
#![no_main]

use kws_core::capture::CaptureReader;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for strict in [false, true] {
        let src = Box::new(std::io::Cursor::new(data.to_vec()));
        let Ok(mut r) = CaptureReader::from_reader("fuzz", src, data.len() as u64, strict) else {
            continue;
        };
        let mut last = 0;
        while let Ok(Some(p)) = r.next_packet() {
            assert_eq!(p.index, last + 1);
            last = p.index;
            assert!(p.data.len() <= data.len().max(1 << 20) * 64);
        }
        assert!(matches!(r.next_packet(), Ok(None)));
        let _ = r.counters();
    }
});
