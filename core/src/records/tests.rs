//! The lean summary's edge cases, with inputs built here (compressed ones with the
//! crates' encoders); tests/test_core_records.py compares it with Python at large.

use super::decompress::{self, xxh32, Verdict};
use super::*;
use std::io::Write;

const BIG: i64 = 64 << 20;

fn sum(buf: &[u8]) -> RecordsSummary {
    lean_summary(buf, 0, buf.len(), 1_000_000, BIG)
}

fn be32(v: i32) -> [u8; 4] {
    v.to_be_bytes()
}

/// A magic 0/1 message (offset 0), its CRC right unless `bad_crc`.
fn message(magic: u8, codec: u8, key: Option<&[u8]>, value: Option<&[u8]>) -> Vec<u8> {
    let mut body = vec![magic, codec];
    if magic == 1 {
        body.extend_from_slice(&1_700_000_000_000i64.to_be_bytes());
    }
    for part in [key, value] {
        match part {
            None => body.extend_from_slice(&be32(-1)),
            Some(p) => {
                body.extend_from_slice(&be32(p.len() as i32));
                body.extend_from_slice(p);
            }
        }
    }
    let mut m = 0i64.to_be_bytes().to_vec();
    m.extend_from_slice(&be32(body.len() as i32 + 4));
    m.extend_from_slice(&crc32fast::hash(&body).to_be_bytes());
    m.extend_from_slice(&body);
    m
}

fn inner_set(magic: u8, n: usize) -> Vec<u8> {
    (0..n)
        .flat_map(|i| {
            message(
                magic,
                0,
                Some(b"key"),
                Some(format!("value {i}").as_bytes()),
            )
        })
        .collect()
}

/// `n` records of 7 bytes, the least a record takes: length 6, attributes, timestamp
/// and offset deltas 0, null key and value, no headers.
fn records(n: usize) -> Vec<u8> {
    [12u8, 0, 0, 0, 1, 1, 0].repeat(n)
}

/// A v2 batch of `count` records around `payload`.
fn batch(count: i32, codec: i16, payload: &[u8], good_crc: bool) -> Vec<u8> {
    let mut body = codec.to_be_bytes().to_vec();
    body.extend_from_slice(&be32(count.wrapping_sub(1)));
    for v in [1i64, 2, -1] {
        body.extend_from_slice(&v.to_be_bytes());
    }
    body.extend_from_slice(&(-1i16).to_be_bytes());
    body.extend_from_slice(&be32(-1));
    body.extend_from_slice(&be32(count));
    body.extend_from_slice(payload);
    let crc = crc32c::crc32c(&body) ^ u32::from(!good_crc);
    let mut b = 0i64.to_be_bytes().to_vec();
    b.extend_from_slice(&be32(body.len() as i32 + 9));
    b.extend_from_slice(&be32(0));
    b.push(2);
    b.extend_from_slice(&crc.to_be_bytes());
    b.extend_from_slice(&body);
    b
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn zlib(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn snappy_raw(data: &[u8]) -> Vec<u8> {
    snap::raw::Encoder::new().compress_vec(data).unwrap()
}

fn snappy_xerial(data: &[u8]) -> Vec<u8> {
    let mut out = b"\x82SNAPPY\x00".to_vec();
    out.extend_from_slice(&be32(1));
    out.extend_from_slice(&be32(1));
    for chunk in data.chunks(100) {
        let c = snappy_raw(chunk);
        out.extend_from_slice(&be32(c.len() as i32));
        out.extend_from_slice(&c);
    }
    out
}

fn snappy_framed(data: &[u8]) -> Vec<u8> {
    let mut e = snap::write::FrameEncoder::new(Vec::new());
    e.write_all(data).unwrap();
    e.into_inner().unwrap()
}

/// An LZ4 frame of independent 64 KiB blocks, made by hand around lz4_flex's blocks.
fn lz4_frame(data: &[u8], old_kafka: bool, content_checksum: bool, stored: bool) -> Vec<u8> {
    let flg = 0x60 | if content_checksum { 0x04 } else { 0 };
    let mut f = vec![0x04, 0x22, 0x4d, 0x18, flg, 0x40];
    let hc = xxh32(if old_kafka { &f[..6] } else { &f[4..6] }) >> 8;
    f.push(hc as u8);
    for chunk in data.chunks(65536) {
        let c = lz4_flex::block::compress(chunk);
        if stored || c.len() >= chunk.len() {
            f.extend_from_slice(&(chunk.len() as u32 | 0x8000_0000).to_le_bytes());
            f.extend_from_slice(chunk);
        } else {
            f.extend_from_slice(&(c.len() as u32).to_le_bytes());
            f.extend_from_slice(&c);
        }
    }
    f.extend_from_slice(&0u32.to_le_bytes());
    if content_checksum {
        f.extend_from_slice(&xxh32(data).to_le_bytes());
    }
    f
}

fn zstd(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(zstd_safe::compress_bound(data.len()));
    zstd_safe::compress(&mut out, data, 3).unwrap();
    out
}

fn malformed(s: &RecordsSummary) -> Vec<&str> {
    s.notes
        .iter()
        .filter_map(|n| n.strip_prefix("malformed: "))
        .collect()
}

#[test]
fn empty_and_out_of_range() {
    let s = sum(b"");
    assert_eq!(
        (s.records, s.codec, s.crc_ok, s.truncated),
        (0, "none", true, false)
    );
    assert!(s.notes.is_empty() && s.limits.is_empty() && s.malformed == 0);
    // end clamped to the buffer; start past it: nothing
    let b = batch(3, 0, &[0; 21], true);
    assert_eq!(lean_summary(&b, 0, usize::MAX, 100, BIG).records, 3);
    assert_eq!(lean_summary(&b, 500, 10, 100, BIG), sum(b""));
}

#[test]
fn v2_crc_valid_and_invalid() {
    let good = batch(3, 0, &records(3), true);
    let s = sum(&good);
    assert_eq!((s.records, s.codec, s.crc_ok), (3, "none", true));
    assert_eq!((s.crc_valid, s.crc_invalid), (1, 0));
    let bad = batch(2, 1, &gzip(&records(2)), false);
    let s = sum(&[good.clone(), bad].concat());
    assert_eq!((s.records, s.codec, s.crc_ok), (5, "mixed", false));
    assert_eq!((s.crc_valid, s.crc_invalid, s.malformed), (1, 1, 0));
    assert_eq!(s.notes.len(), 1);
    assert!(
        s.notes[0].starts_with("[1]: crc INVALID (0x"),
        "{:?}",
        s.notes
    );
    assert!(s.notes[0].contains("), computed 0x"));
}

#[test]
fn v2_records_count_negative_huge_and_room() {
    // a records_count that cannot be counted: the records present are (as _decode_v2 counts)
    let s = sum(&batch(-1, 0, &records(3), true));
    assert_eq!(s.records, 3);
    assert_eq!(malformed(&s), ["[0]: negative records_count -1"]);
    let s = lean_summary(
        &batch(i32::MAX, 0, &records(1), true),
        0,
        100,
        1_000_000,
        BIG,
    );
    assert_eq!(
        malformed(&s),
        ["[0]: records_count 2147483647 over the limit 1000000"]
    );
    assert_eq!((s.records, &s.limits[..]), (1, &["max_array_len"][..]));
    // uncompressed: at most one record per 7 bytes after the header
    let s = sum(&batch(4, 0, &records(3), true));
    assert_eq!(
        malformed(&s),
        ["[0]: records_count 4 exceeds what 21 bytes can hold"]
    );
    assert_eq!(s.records, 3);
    // compressed: no room check before decompressing; after, the decompressed bytes'
    let s = sum(&batch(4, 1, &gzip(&records(4)), true));
    assert_eq!((s.records, s.malformed), (4, 0));
    let s = sum(&batch(4, 1, &gzip(&records(3)), true));
    assert_eq!(
        malformed(&s),
        ["[0]: records_count 4 exceeds what 21 decompressed bytes can hold"]
    );
    assert_eq!(s.records, 3);
}

#[test]
fn v2_shorter_than_its_header_and_truncated_trailing_entry() {
    let mut b = batch(1, 0, &[0; 7], true);
    b[8..12].copy_from_slice(&be32(30));
    b.truncate(42);
    let s = sum(&b);
    assert_eq!(
        malformed(&s),
        ["[0]: batch_length 30 shorter than the 49-byte v2 header"]
    );
    // a trailing batch cut by max_bytes: not counted, not malformed (size read or not)
    let good = batch(2, 0, &records(2), true);
    let both = [good.clone(), good.clone()].concat();
    for cut in [good.len() + 5, good.len() + 12, both.len() - 1] {
        let s = lean_summary(&both, 0, cut, 100, BIG);
        assert_eq!((s.records, s.truncated, s.malformed), (2, true, 0), "{cut}");
        assert!(s.notes.is_empty());
    }
    // a negative size is malformed, even at the end
    let mut neg = good.clone();
    neg.extend_from_slice(&0i64.to_be_bytes());
    neg.extend_from_slice(&be32(-5));
    let s = sum(&neg);
    assert_eq!(
        (s.records, s.truncated, malformed(&s)),
        (2, false, vec!["[1]: negative entry size -5"])
    );
    let s = sum(&[&good[..], &[0; 12], &[0, 0, 0, 3]].concat()[..good.len() + 12]);
    assert_eq!(
        malformed(&s),
        ["[1]: entry size 0 too small to hold a magic byte"]
    );
}

#[test]
fn unknown_magic_and_legacy_sizes() {
    let mut m = message(1, 0, None, Some(b"v"));
    m[16] = 7;
    assert_eq!(malformed(&sum(&m)), ["[0]: unknown magic 7"]);
    let mut m = message(0, 0, None, Some(b"v"));
    m[8..12].copy_from_slice(&be32(13));
    m.truncate(25);
    assert_eq!(
        malformed(&sum(&m)),
        ["[0]: message_size 13 shorter than a magic 0 message"]
    );
}

#[test]
fn legacy_key_and_value_lengths() {
    let s = sum(&message(1, 0, Some(b"k"), None));
    assert_eq!((s.records, s.crc_valid, s.malformed), (1, 1, 0));
    // a value length that does not fit, then bytes after the value (CRCs made right)
    let fix = |mut m: Vec<u8>| {
        let c = crc32fast::hash(&m[16..]);
        m[12..16].copy_from_slice(&c.to_be_bytes());
        m
    };
    let mut m = message(0, 0, Some(b"k"), Some(b"vv"));
    m[23..27].copy_from_slice(&be32(9));
    let s = sum(&fix(m));
    assert_eq!(
        (s.records, malformed(&s)),
        (1, vec!["[0]: value length 9 does not fit the 2 bytes left"])
    );
    let mut m = message(0, 0, Some(b"k"), Some(b"vv"));
    m[23..27].copy_from_slice(&be32(-2));
    assert_eq!(
        malformed(&sum(&fix(m))),
        ["[0]: value length -2 does not fit the 2 bytes left"]
    );
    let mut m = message(0, 0, Some(b"k"), Some(b"vv"));
    m[23..27].copy_from_slice(&be32(1));
    assert_eq!(malformed(&sum(&fix(m))), ["[0]: 1 bytes after the value"]);
    // a key whose value length is cut (message_size 14 holds the two lengths, no key)
    let mut m = message(0, 0, Some(b"k"), None);
    m[8..12].copy_from_slice(&be32(14));
    m.truncate(26);
    let s = sum(&fix(m));
    assert_eq!(malformed(&s), ["[0]: value length cut short"]);
    assert_eq!(s.records, 1);
    // a compressed message with a null value
    let s = sum(&message(1, 1, None, None));
    assert_eq!(
        (s.records, malformed(&s)),
        (0, vec!["[0]: compressed message with a null value"])
    );
    // a bad CRC is noted, the message still counted
    let mut m = message(1, 0, None, Some(b"v"));
    m[12] ^= 1;
    let s = sum(&m);
    assert_eq!((s.records, s.crc_ok, s.crc_invalid), (1, false, 1));
}

type Compressor = fn(&[u8]) -> Vec<u8>;

#[test]
fn each_codec_wrapper() {
    let compressors: [(&str, u8, Compressor); 9] = [
        ("gzip", 1, gzip),
        ("gzip", 1, zlib),
        ("snappy", 2, snappy_raw),
        ("snappy", 2, snappy_xerial),
        ("snappy", 2, snappy_framed),
        ("lz4", 3, |d| lz4_frame(d, false, true, false)),
        ("lz4", 3, |d| lz4_frame(d, true, false, false)),
        ("lz4", 3, |d| lz4_frame(d, false, false, true)),
        ("zstd", 4, zstd),
    ];
    for (name, codec, comp) in compressors {
        for magic in [0u8, 1] {
            let inner = inner_set(magic, 5);
            let w = message(magic, codec, None, Some(&comp(&inner)));
            let s = sum(&w);
            assert_eq!(
                (s.records, s.codec, s.crc_valid, s.malformed),
                (5, name, 6, 0),
                "{name} v{magic}: {:?}",
                s.notes
            );
            // two wrappers and a plain message: 11 records; mixed codecs
            let plain = message(magic, 0, None, Some(b"x"));
            let s = sum(&[w.clone(), w.clone(), plain].concat());
            assert_eq!((s.records, s.codec), (11, "mixed"), "{name}");
            // magic 2 inside a magic 0/1 wrapper
            let s = sum(&message(
                magic,
                codec,
                None,
                Some(&comp(&batch(1, 0, &[0; 7], true))),
            ));
            assert_eq!(
                malformed(&s),
                [format!(
                    "[0]: a magic 2 batch inside a magic {magic} wrapper"
                )],
                "{name}"
            );
            // an inner message cut short is malformed
            let s = sum(&message(
                magic,
                codec,
                None,
                Some(&comp(&inner[..inner.len() - 3])),
            ));
            assert_eq!(s.records, 4, "{name}");
            assert!(
                malformed(&s)[0].starts_with("entry [4] of "),
                "{:?}",
                s.notes
            );
            // bad data: malformed, not a limit
            let mut data = comp(&inner);
            let n = data.len();
            data[n / 2..].iter_mut().for_each(|b| *b ^= 0x55);
            let s = sum(&message(magic, codec, None, Some(&data)));
            assert!(
                s.malformed >= 1 && s.limits.is_empty(),
                "{name}: {:?}",
                s.notes
            );
        }
    }
    for codec in 5..=7u8 {
        let s = sum(&message(1, codec, None, Some(b"abc")));
        // (a decompression note has no entry index, as in Python)
        let want = format!("unknown codec 'unknown({codec})'");
        assert_eq!(
            (s.codec, malformed(&s)),
            (LEAN_CODECS[usize::from(codec)], vec![want.as_str()])
        );
    }
    let s = sum(&message(1, 1, None, Some(b"")));
    assert_eq!(malformed(&s), ["bad gzip data: empty input"]);
}

#[test]
fn decompression_budget() {
    let inner = inner_set(1, 10);
    let w = message(1, 1, None, Some(&gzip(&inner)));
    // the limit cuts the inner set: a limit, not malformed; the cut message noted
    let s = lean_summary(&w, 0, w.len(), 100, 100);
    assert_eq!(s.limits, ["max_decompressed"]);
    assert_eq!(s.malformed, 0);
    assert_eq!(
        s.notes.last().unwrap(),
        "message cut by the decompressed size limit"
    );
    assert!(s.records < 10);
    // the budget is shared by the wrappers of the field: the second one gets what is left
    let two = [w.clone(), w.clone()].concat();
    let s = lean_summary(&two, 0, two.len(), 100, inner.len() as i64 + 50);
    assert_eq!((s.limits.len(), s.records < 20), (1, true));
    let s = lean_summary(&two, 0, two.len(), 100, 2 * inner.len() as i64);
    assert_eq!((s.records, s.limits.len()), (20, 0));
    // a bomb costs the limit: 64 MiB of zeros in a few KiB, each codec
    let zeros = vec![0u8; 64 << 20];
    for (codec, data) in [
        (1u8, gzip(&zeros)),
        (3, lz4_frame(&zeros, false, false, false)),
        (4, zstd(&zeros)),
    ] {
        let (out, v) = decompress::decompress(codec, &data, 1 << 20);
        assert_eq!((out.len(), v), (1 << 20, Verdict::Limit), "codec {codec}");
        let (out, v) = decompress::decompress(codec, &data, -5);
        assert_eq!((out.len(), v), (0, Verdict::Limit), "codec {codec}");
    }
    // snappy knows its size first: nothing decompressed past the budget
    let (out, v) = decompress::decompress(2, &snappy_raw(&zeros[..1 << 20]), 1000);
    assert_eq!((out.len(), v), (0, Verdict::Limit));
}

#[test]
fn nesting_depth() {
    let mut payload = inner_set(1, 2);
    for _ in 0..4 {
        payload = message(1, 1, None, Some(&gzip(&payload)));
    }
    let s = sum(&payload);
    assert_eq!(s.records, 0);
    assert_eq!(
        malformed(&s),
        ["[0]: compressed messages nested more than 2 deep"]
    );
    let mut payload = inner_set(0, 2);
    for _ in 0..2 {
        payload = message(0, 2, None, Some(&snappy_raw(&payload)));
    }
    let s = sum(&payload);
    assert_eq!((s.records, s.malformed, s.crc_valid), (2, 0, 4));
}

#[test]
fn never_panics_on_damage() {
    // xorshift: deterministic damage of wrappers of each codec and of v2 batches
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut rnd = move |n: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % n.max(1) as u64) as usize
    };
    let inner = inner_set(1, 20);
    let seeds = [
        message(1, 1, None, Some(&gzip(&inner))),
        message(1, 2, None, Some(&snappy_xerial(&inner))),
        message(1, 2, None, Some(&snappy_framed(&inner))),
        message(1, 3, None, Some(&lz4_frame(&inner, false, true, false))),
        message(1, 4, None, Some(&zstd(&inner))),
        batch(3, 0, &[0; 30], true),
    ];
    for seed in &seeds {
        for _ in 0..400 {
            let mut b = seed.clone();
            for _ in 0..=rnd(4) {
                let i = rnd(b.len());
                b[i] = rnd(256) as u8;
            }
            let c = crc32fast::hash(&b[16..]);
            if rnd(2) == 0 {
                b[12..16].copy_from_slice(&c.to_be_bytes());
            }
            let end = rnd(b.len() + 1);
            let s = lean_summary(&b, rnd(3), end, 1000, rnd(5000) as i64);
            assert!(s.records >= 0 && s.malformed as usize <= s.notes.len());
        }
    }
}

/// The records of a v2 batch are walked one by one, compressed ones after decompression,
/// with the marks `_decode_v2_records` makes; a CRC over bad records is still valid.
#[test]
fn v2_records_walked_one_by_one() {
    // a record whose headers count does not fit (50 headers in 0 bytes)
    let bad_headers = [14u8, 0, 0, 0, 1, 1, 100];
    // (the walk stops there: the record is not counted, records_count is held against it)
    let both = [
        "[0]: record [0]: headers count 50 does not fit the record",
        "[0]: records_count 1 but 0 records present",
    ];
    let s = sum(&batch(1, 0, &[&bad_headers[..], &[0]].concat(), true));
    assert_eq!(malformed(&s), both);
    assert_eq!((s.crc_valid, s.records), (1, 1));
    // fields that end early (a 7-byte record declaring 8), then the count of records present
    let early = [14u8, 0, 0, 0, 1, 1, 0, 9];
    let s = sum(&batch(2, 0, &[&early[..], &records(1)].concat(), true));
    assert_eq!(
        malformed(&s),
        ["[0]: record [0]: record length 7 but its fields end 1 bytes early"]
    );
    let s = sum(&batch(3, 0, &records(2), true));
    assert_eq!(
        malformed(&s),
        ["[0]: records_count 3 exceeds what 14 bytes can hold"]
    );
    let s = sum(&batch(3, 0, &[&records(2)[..], &[0; 7]].concat(), true));
    assert_eq!(
        malformed(&s),
        [
            "[0]: record [2]: record length 0 does not fit the 6 bytes left",
            "[0]: records_count 3 but 2 records present"
        ]
    );
    // bytes after the last counted record, and a key longer than its record
    let s = sum(&batch(1, 0, &[&records(1)[..], &[1, 2, 3]].concat(), true));
    assert_eq!(malformed(&s), ["[0]: 3 bytes after the last record"]);
    let s = sum(&batch(1, 0, &[12u8, 0, 0, 0, 40, 1, 0], true));
    assert_eq!(
        malformed(&s),
        [
            "[0]: record [0]: key length 20 exceeds the record",
            "[0]: records_count 1 but 0 records present"
        ]
    );
    // the same inside gzip; a bad decompression is the records' own mark
    let s = sum(&batch(
        1,
        1,
        &gzip(&[&bad_headers[..], &[0]].concat()),
        true,
    ));
    assert_eq!(malformed(&s), both);
    let s = sum(&batch(1, 1, &[1, 2, 3], true));
    assert_eq!(s.malformed, 1);
    assert!(
        s.notes[0].starts_with("malformed: [0]: bad gzip data"),
        "{:?}",
        s.notes
    );
    // the decompressed size limit cuts a record: a note, not a mark
    let data = gzip(&records(100));
    let s = lean_summary(&batch(100, 1, &data, true), 0, 10_000, 100, 300);
    assert_eq!(s.malformed, 0, "{:?}", s.notes);
    assert_eq!(s.limits, ["max_decompressed"]);
    assert_eq!(s.notes, ["record cut by the decompressed size limit"]);
    assert_eq!(s.records, 100);
}

#[test]
fn every_whole_v2_batch_gives_its_producer_state() {
    let mut one = batch(3, 0, &records(3), true);
    one[43..51].copy_from_slice(&77i64.to_be_bytes());
    one[51..53].copy_from_slice(&4i16.to_be_bytes());
    one[53..57].copy_from_slice(&be32(10));
    one[22] |= 0x30; // transactional, control (the CRC is not what this reads)
    let two = batch(2, 0, &records(2), false);
    let mut short = batch(1, 0, &records(1), true);
    short[8..12].copy_from_slice(&be32(V2_MIN_LENGTH - 1));
    let set = [one.clone(), two.clone()].concat();
    let s = sum(&set);
    let head = |pid, epoch, seq, n, txn, bytes: usize, codec| BatchHead {
        producer_id: pid,
        producer_epoch: epoch,
        base_sequence: seq,
        record_count: n,
        base_offset: 0,
        transactional: txn,
        control: txn,
        bytes,
        bytes_before: Some(bytes),
        codec,
        base_timestamp: 1,
        max_timestamp: 2,
    };
    assert_eq!(
        s.batches,
        vec![
            head(77, 4, 10, 3, true, one.len(), "none"),
            head(-1, -1, -1, 2, false, two.len(), "none")
        ]
    );
    // a batch too short for its header, and one cut short, are no batches
    let mut cut = set.clone();
    cut.extend_from_slice(&two[..40]);
    assert_eq!(sum(&cut).batches.len(), 2);
    assert!(sum(&short[..V2_MIN_LENGTH as usize + 12 - 1])
        .batches
        .is_empty());
}
