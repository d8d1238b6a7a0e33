//! The legacy (pre-0.8, Kafka 0.6/0.7) protocol's detection and framing checks. Ported from
//! `dissectors/legacy.py` and proved equal to it (8d05a88); the Python versions were then
//! removed, and `tests/test_core_headers.py` checks these through `analyzer._core`'s probes
//! against the legacy captures and the 0.8+ requests of every capture.
//!
//! That protocol had no API versions, correlation ids or client ids. A request is
//! `REQUEST_TYPE int16` then, for PRODUCE (0), FETCH (1) and OFFSETS (4), `topic string16,
//! partition int32` and a body (PRODUCE: `messages_length int32, messages`; FETCH and
//! OFFSETS: an int64 and an int32, 12 bytes); MULTIFETCH (2) and MULTIPRODUCE (3) have a
//! `topic_count int16` and that many (topic, partition, body) parts. A response starts
//! with `ERROR_CODE int16` (-1..4); PRODUCE and MULTIPRODUCE get none. A message is
//! `length int32, magic int8, [compression int8 when magic is 1], crc uint32, payload`,
//! the CRC-32 over the payload.
//!
//! [`legacy_request_plausible`] and [`legacy_response_plausible`] are the framer's checks of
//! a frame's first bytes. [`legacy_request_score`] says how plausible a connection's first
//! request frame is as a legacy request (0 impossible .. 100 certain), the heuristic below.
//!
//! # Detection heuristic
//!
//! The score needs a REQUEST_TYPE of 0-4; for the single-topic types a topic length of
//! 1-255 and a topic of printable ASCII (bonus when it uses only the legal topic characters
//! `[A-Za-z0-9._-]`), then a body whose size matches the frame EXACTLY: FETCH and OFFSETS
//! have a fixed 12-byte body, PRODUCE's MESSAGES_LENGTH must end at the frame end and its
//! messages must parse (magic 0/1, sane lengths; a valid CRC on each adds confidence). The
//! multi types need a topic count of 1..frame/10 and every part to parse and end exactly at
//! the frame end. A header that parses but whose size does not add up scores at most 20.
//!
//! How a modern (0.8+) request separates: its header is api_key int16, api_version int16,
//! correlation_id int32, client_id string16. Read as legacy, api_key 0-4 becomes
//! REQUEST_TYPE and api_version becomes the TOPIC_LENGTH, so the "topic" is the first bytes
//! of the correlation id, then the client id. Version 0 gives an empty topic (score 0);
//! small versions give topic bytes from a small correlation id, which are NUL bytes (score
//! 0). Only a correlation id of four printable bytes (>= 0x21212121) gets past the topic
//! test, and then the exact-size test fails unless the frame happens to add up. For
//! api_keys 2 and 3 (ListOffsets, Metadata) the multi-request reading applies: the topic
//! count is the api_version and the first part's topic length is the high half of the
//! correlation id (0 for small ids: score 0).
//!
//! The reverse ambiguity matters to whoever scores the modern reading: a legacy request
//! whose topic is 4 bytes long reads as api_version 4 with the topic as correlation id and
//! the partition's high half (0) as an empty client id, so its header alone parses as
//! modern. The body then decides (the legacy size arithmetic adds up, the modern body
//! usually does not), and a correlation id made of four ASCII letters is itself a hint
//! (`pair.rs` takes a first request as pre-0.8 from a score of 50, and over a plausible
//! 0.8+ reading from 80). Limits: one frame is a small sample; a frame cut by the capture
//! start or by a snaplen cannot show its exact size (`complete = false` scores such a
//! prefix without the size checks, at most 70); a legacy PRODUCE with an empty message set
//! has nothing to CRC-check and scores lower.
//!
//! A framer peeking at the first bytes of each frame uses the framing checks, not the
//! score. A legacy FETCH error response is a 2-byte frame (just the error code), so the
//! minimum frame size is 2 on legacy connections.

use crate::wire::{be_i16, be_i32, be_i64, be_u32};

/// Request type names, by request type (0-4).
pub const LEGACY_API_NAMES: [&str; 5] =
    ["PRODUCE", "FETCH", "MULTIFETCH", "MULTIPRODUCE", "OFFSETS"];

pub const PRODUCE: i16 = 0;
pub const FETCH: i16 = 1;
pub const MULTIFETCH: i16 = 2;
pub const MULTIPRODUCE: i16 = 3;
pub const OFFSETS: i16 = 4;

/// That era's error codes: -1 UNKNOWN .. 4 INVALID_FETCH_SIZE.
const ERROR_CODES: std::ops::RangeInclusive<i16> = -1..=4;
/// magic + crc: the smallest legal message length (magic 0, empty payload)
const MIN_MESSAGE: i32 = 5;
/// A multi-fetch part: topic length, partition, offset, max_size.
const MIN_FETCH_PART: i64 = 2 + 4 + 8 + 4;
/// A multi-produce part: topic length, partition, messages_length.
const MIN_PRODUCE_PART: i64 = 2 + 4 + 4;
/// FETCH and OFFSETS bodies: offset / time int64, max_size / max_number_of_offsets int32.
const FETCH_BODY: usize = 12;

fn is_type(rtype: i16) -> bool {
    (PRODUCE..=OFFSETS).contains(&rtype)
}

/// Printable ASCII without the space, at least one byte (Python's `[\x21-\x7e]+\Z`).
fn printable(raw: &[u8]) -> bool {
    !raw.is_empty() && raw.iter().all(|b| (0x21..=0x7E).contains(b))
}

/// The legal topic characters `[A-Za-z0-9._-]`, at least one.
fn legal_topic(raw: &[u8]) -> bool {
    !raw.is_empty()
        && raw
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

/// The CRC-32 (IEEE, as java.util.zip.CRC32) a legacy message carries for `payload`.
pub fn legacy_crc(payload: &[u8]) -> u32 {
    let mut crc = flate2::Crc::new();
    crc.update(payload);
    crc.sum()
}

/// FETCH, MULTIFETCH and OFFSETS are answered; PRODUCE and MULTIPRODUCE never are.
pub fn legacy_expects_response(request_type: i32) -> bool {
    [FETCH, MULTIFETCH, OFFSETS]
        .iter()
        .any(|&t| i32::from(t) == request_type)
}

/// (structurally ok, messages, messages with a valid CRC) of the
/// top-level message set in `data[pos..end]`; with `partial_ok` the bytes may stop inside
/// the last message (a frame prefix).
fn scan_messages(data: &[u8], mut pos: usize, end: usize, partial_ok: bool) -> (bool, u32, u32) {
    let (mut count, mut good) = (0, 0);
    while pos < end {
        if end - pos < 4 {
            return (partial_ok, count, good);
        }
        let length = be_i32(data, pos).unwrap_or_default();
        if length < MIN_MESSAGE {
            return (false, count, good);
        }
        if end - pos < 6 {
            return (partial_ok, count, good);
        }
        let crc_pos = match data[pos + 4] {
            0 => pos + 5,
            1 if length > MIN_MESSAGE && data[pos + 5] <= 2 => pos + 6,
            _ => return (false, count, good),
        };
        // length >= 5 here
        let length = length as usize;
        if length > end - pos - 4 {
            return (partial_ok, count, good);
        }
        let stop = pos + 4 + length;
        if legacy_crc(&data[crc_pos + 4..stop]) == be_u32(data, crc_pos).unwrap_or_default() {
            good += 1;
        }
        count += 1;
        pos = stop;
    }
    (true, count, good)
}

/// (score 0-40, position after the topic) of the topic string16 at
/// `pos`; None when it is not a plausible topic (a score of 0).
fn topic_score(data: &[u8], pos: usize, end: usize) -> Option<(i32, usize)> {
    if end - pos < 2 {
        return None;
    }
    let tl = be_i16(data, pos).unwrap_or_default();
    if tl <= 0 || tl > 255 || pos + 2 + tl as usize > end {
        return None;
    }
    let raw = &data[pos + 2..pos + 2 + tl as usize];
    if !printable(raw) {
        return None;
    }
    Some((
        if legal_topic(raw) { 40 } else { 25 },
        pos + 2 + tl as usize,
    ))
}

/// (score 0-40, position after the messages) of `messages_length` and
/// messages at `pos`; None for a score of 0. Without `complete` the position is `end`
/// when the set runs past it.
fn produce_score(data: &[u8], pos: usize, end: usize, complete: bool) -> Option<(i32, usize)> {
    if end - pos < 4 {
        return (!complete).then_some((10, end));
    }
    let ml = usize::try_from(be_i32(data, pos).unwrap_or_default()).ok()?;
    let mut stop = pos + 4 + ml;
    if stop > end {
        if complete {
            return None;
        }
        stop = end;
    }
    let (ok, count, good) = scan_messages(data, pos + 4, stop, !complete);
    if !ok {
        return None;
    }
    if count == 0 {
        return Some((15, stop));
    }
    Some((if good == count { 40 } else { 25 }, stop))
}

/// How plausible `data` (a connection's first request frame, after its length) is as a
/// legacy request: 0..=100. `complete == false` says `data` may be only the start of the
/// frame: the checks that need its end (exact sizes) are skipped and the score is at most
/// 70.
pub fn legacy_request_score(data: &[u8], complete: bool) -> i32 {
    let n = data.len();
    if n < 8 {
        return 0;
    }
    let rtype = be_i16(data, 0).unwrap_or_default();
    if !is_type(rtype) {
        return 0;
    }
    if rtype == MULTIFETCH || rtype == MULTIPRODUCE {
        return multi_score(data, rtype, complete);
    }
    let Some((tscore, mut pos)) = topic_score(data, 2, n) else {
        return 0;
    };
    if n - pos < 4 {
        return if complete { 0 } else { tscore / 2 };
    }
    let partition = be_i32(data, pos).unwrap_or_default();
    pos += 4;
    let mut score = tscore;
    if !(-1..=0xFFFF).contains(&partition) {
        score -= 15; // -1 is the 0.7 producer's "random partition"
    }
    if rtype == PRODUCE {
        return match produce_score(data, pos, n, complete) {
            Some((pscore, end)) if end == n => {
                (score + 20 + pscore).clamp(0, if complete { 100 } else { 70 })
            }
            _ => score.clamp(0, 20),
        };
    }
    if n - pos != FETCH_BODY {
        if complete || n - pos > FETCH_BODY {
            return score.clamp(0, 20);
        }
        return (score / 2 + 10).max(0);
    }
    let (a, b) = (
        be_i64(data, pos).unwrap_or_default(),
        be_i32(data, pos + 8).unwrap_or_default(),
    );
    score += 40;
    let least = if rtype == FETCH { 0 } else { -2 };
    score += if a >= least { 10 } else { 0 } + if b > 0 { 10 } else { 0 };
    score.clamp(0, 100)
}

/// The score of a MULTIFETCH or MULTIPRODUCE, whose parts must all parse (and, when
/// `complete`, end exactly at the frame's end).
fn multi_score(data: &[u8], rtype: i16, complete: bool) -> i32 {
    let n = data.len();
    let count = be_i16(data, 2).unwrap_or_default();
    let minimum = if rtype == MULTIFETCH {
        MIN_FETCH_PART
    } else {
        MIN_PRODUCE_PART
    };
    if count <= 0 || (complete && i64::from(count) * minimum > n as i64 - 4) {
        return 0;
    }
    let mut pos = 4;
    let (mut topic_total, mut body_total, mut seen) = (0, 0, 0);
    for _ in 0..count {
        if !complete && pos >= n {
            break;
        }
        let topic = topic_score(data, pos, n);
        let Some((tscore, after)) = topic.filter(|&(_, after)| n - after >= 4) else {
            if let (false, 0, Some((tscore, _))) = (complete, seen, topic) {
                return tscore / 2;
            }
            return if complete || seen == 0 {
                0
            } else {
                20 + topic_total / seen
            };
        };
        topic_total += tscore;
        pos = after + 4; // partition
        seen += 1;
        if rtype == MULTIFETCH {
            if n - pos < FETCH_BODY {
                if complete {
                    return 0;
                }
                body_total += 20;
                pos = n;
                break;
            }
            let (off, size) = (
                be_i64(data, pos).unwrap_or_default(),
                be_i32(data, pos + 8).unwrap_or_default(),
            );
            body_total += if off >= 0 { 20 } else { 0 } + if size > 0 { 20 } else { 0 };
            pos += FETCH_BODY;
        } else {
            let Some((pscore, stop)) = produce_score(data, pos, n, complete) else {
                return 0;
            };
            body_total += pscore;
            pos = stop;
        }
    }
    if seen == 0 {
        return 0;
    }
    if complete && pos != n {
        return 20;
    }
    let score = 20 + topic_total / seen + body_total / seen;
    score.clamp(0, if complete { 100 } else { 70 })
}

/// Could `head` start a legacy request? The framer's check of a frame's first bytes
/// (`min(size, 16)` of them: a shorter head is the whole frame). The request type, a
/// topic length of 1-255 with printable topic bytes as far as they go, the partition when
/// present, the topic count of the multi types; and a whole frame must hold its type's
/// fixed-size fields. Sizes that need the frame's end are [`legacy_request_score`]'s.
pub fn legacy_request_plausible(head: &[u8]) -> bool {
    let n = head.len();
    if n < 8 {
        return false;
    }
    let (rtype, second) = (
        be_i16(head, 0).unwrap_or_default(),
        be_i16(head, 2).unwrap_or_default(),
    );
    if !is_type(rtype) {
        return false;
    }
    let pos = if rtype == MULTIFETCH || rtype == MULTIPRODUCE {
        if second <= 0 {
            return false;
        }
        4
    } else {
        2
    };
    let tl = be_i16(head, pos).unwrap_or_default();
    if tl <= 0 || tl > 255 {
        return false;
    }
    let after = pos + 2 + tl as usize;
    if !printable(&head[pos + 2..after.min(n)]) {
        return false;
    }
    if after + 4 <= n && !(-1..=0xFFFF).contains(&be_i32(head, after).unwrap_or_default()) {
        return false;
    }
    // the whole frame: it must hold the fixed-size fields
    if n < 16 && rtype != MULTIPRODUCE {
        let minimum = if rtype == PRODUCE {
            after + 8
        } else {
            after + 16
        };
        if n < minimum {
            return false;
        }
    }
    true
}

/// Could `head` start a legacy response to `request_type` (None: to any answered type)?
/// The framer's check: an error code of that era (-1..4), then by type a FETCH body that
/// starts with a message (length >= 5, magic 0/1), an OFFSETS count that fits, a
/// MULTIFETCH part (size >= 2, error code -1..4). A head shorter than 16 bytes is the
/// whole frame. Any other type: false.
pub fn legacy_response_plausible(head: &[u8], request_type: Option<i32>) -> bool {
    let n = head.len();
    if n < 2 {
        return false;
    }
    let err = be_i16(head, 0).unwrap_or_default();
    if !ERROR_CODES.contains(&err) {
        return false;
    }
    let Some(request_type) = request_type else {
        return [FETCH, MULTIFETCH, OFFSETS]
            .iter()
            .any(|&t| legacy_response_plausible(head, Some(i32::from(t))));
    };
    let whole = n < 16;
    if request_type == i32::from(FETCH) {
        if n >= 6 {
            let length = be_i32(head, 2).unwrap_or_default();
            if length < MIN_MESSAGE || (n >= 7 && head[6] > 1) {
                return false;
            }
        }
        return !(whole && 2 < n && n < 6);
    }
    if request_type == i32::from(OFFSETS) {
        if n == 2 {
            return true;
        }
        if n < 6 {
            return !whole;
        }
        let count = be_i32(head, 2).unwrap_or_default();
        return count >= 0 && (!whole || n as i64 == 6 + 8 * i64::from(count));
    }
    if request_type == i32::from(MULTIFETCH) {
        if err != 0 {
            return false;
        }
        if n >= 6 && be_i32(head, 2).unwrap_or_default() < 2 {
            return false;
        }
        if n >= 8 && !ERROR_CODES.contains(&be_i16(head, 6).unwrap_or_default()) {
            return false;
        }
        return !(whole && n < 8 && n != 2);
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string16(s: &[u8]) -> Vec<u8> {
        let mut v = (s.len() as i16).to_be_bytes().to_vec();
        v.extend_from_slice(s);
        v
    }

    /// A message: length, magic, [compression], crc (computed unless given), payload.
    fn message(payload: &[u8], magic: u8, crc: Option<u32>) -> Vec<u8> {
        let c = crc.unwrap_or_else(|| legacy_crc(payload));
        let mut body = vec![magic];
        if magic == 1 {
            body.push(0);
        }
        body.extend_from_slice(&c.to_be_bytes());
        body.extend_from_slice(payload);
        let mut m = (body.len() as i32).to_be_bytes().to_vec();
        m.extend(body);
        m
    }

    fn produce(topic: &[u8], partition: i32, messages: &[u8]) -> Vec<u8> {
        let mut d = PRODUCE.to_be_bytes().to_vec();
        d.extend(string16(topic));
        d.extend_from_slice(&partition.to_be_bytes());
        d.extend_from_slice(&(messages.len() as i32).to_be_bytes());
        d.extend_from_slice(messages);
        d
    }

    fn fetch(rtype: i16, topic: &[u8], partition: i32, a: i64, b: i32) -> Vec<u8> {
        let mut d = rtype.to_be_bytes().to_vec();
        d.extend(string16(topic));
        d.extend_from_slice(&partition.to_be_bytes());
        d.extend_from_slice(&a.to_be_bytes());
        d.extend_from_slice(&b.to_be_bytes());
        d
    }

    #[test]
    fn crc_is_ieee() {
        assert_eq!(legacy_crc(b"123456789"), 0xCBF4_3926);
        assert_eq!(legacy_crc(b""), 0);
    }

    #[test]
    fn expects_response() {
        assert!(!legacy_expects_response(0));
        assert!(legacy_expects_response(1));
        assert!(legacy_expects_response(2));
        assert!(!legacy_expects_response(3));
        assert!(legacy_expects_response(4));
        assert!(!legacy_expects_response(5));
        assert!(!legacy_expects_response(-1));
        assert_eq!(LEGACY_API_NAMES[OFFSETS as usize], "OFFSETS");
    }

    #[test]
    fn single_topic_scores() {
        let msgs = [message(b"hello", 0, None), message(b"x", 1, None)].concat();
        let p = produce(b"test", 0, &msgs);
        assert_eq!(legacy_request_score(&p, true), 100);
        assert_eq!(legacy_request_score(&p, false), 70);
        // the prefix of a frame: the set runs past it
        assert_eq!(legacy_request_score(&p[..p.len() - 3], false), 70);
        assert_eq!(legacy_request_score(&p[..p.len() - 3], true), 20);
        // a bad CRC, an empty set, an illegal topic character, a wild partition
        let bad = produce(b"test", 0, &message(b"hello", 0, Some(1)));
        assert_eq!(legacy_request_score(&bad, true), 85);
        assert_eq!(legacy_request_score(&produce(b"test", 0, b""), true), 75);
        assert_eq!(legacy_request_score(&produce(b"t$t", 0, b""), true), 60);
        assert_eq!(
            legacy_request_score(&produce(b"t", 1 << 20, &msgs), true),
            85
        );
        // FETCH and OFFSETS: the 12-byte body
        assert_eq!(
            legacy_request_score(&fetch(FETCH, b"t", 0, 0, 100), true),
            100
        );
        assert_eq!(
            legacy_request_score(&fetch(FETCH, b"t", 0, -1, 0), true),
            80
        );
        assert_eq!(
            legacy_request_score(&fetch(OFFSETS, b"t", 0, -2, 1), true),
            100
        );
        let f = fetch(FETCH, b"t", 0, 0, 100);
        assert_eq!(legacy_request_score(&f[..f.len() - 1], true), 20);
        assert_eq!(legacy_request_score(&f[..f.len() - 1], false), 30);
        assert_eq!(
            legacy_request_score(&[f.clone(), vec![0]].concat(), false),
            20
        );
        // the topic runs out before the partition
        assert_eq!(legacy_request_score(&f[..8], false), 20);
        assert_eq!(legacy_request_score(&f[..8], true), 0);
        // not a legacy request: too short, a modern header (version 0: empty topic)
        assert_eq!(legacy_request_score(&f[..7], false), 0);
        assert_eq!(
            legacy_request_score(&[0, 1, 0, 0, 0, 0, 0, 5, 0, 0], true),
            0
        );
        assert_eq!(
            legacy_request_score(&[0, 9, 0, 1, b'a', 0, 0, 0, 0], true),
            0
        );
    }

    #[test]
    fn message_scan() {
        let m = message(b"abc", 1, None);
        assert_eq!(scan_messages(&m, 0, m.len(), false), (true, 1, 1));
        assert_eq!(scan_messages(&m, 0, m.len() - 1, false), (false, 0, 0));
        assert_eq!(scan_messages(&m, 0, m.len() - 1, true), (true, 0, 0));
        assert_eq!(scan_messages(&m, 0, 3, true), (true, 0, 0));
        let mut bad = m.clone();
        bad[5] = 3; // codec 3
        assert_eq!(scan_messages(&bad, 0, bad.len(), false), (false, 0, 0));
        bad[4] = 2; // magic 2
        assert_eq!(scan_messages(&bad, 0, bad.len(), false), (false, 0, 0));
        let short = [0, 0, 0, 4, 0, 0, 0, 0];
        assert_eq!(scan_messages(&short, 0, 8, true), (false, 0, 0));
    }

    #[test]
    fn multi_scores() {
        let mut mf = vec![0, 2, 0, 2];
        for t in [b"ab", b"cd"] {
            mf.extend(string16(t));
            mf.extend_from_slice(&0i32.to_be_bytes());
            mf.extend_from_slice(&5i64.to_be_bytes());
            mf.extend_from_slice(&100i32.to_be_bytes());
        }
        assert_eq!(legacy_request_score(&mf, true), 100);
        assert_eq!(legacy_request_score(&mf[..mf.len() - 4], true), 0);
        assert_eq!(legacy_request_score(&mf[..mf.len() - 4], false), 70);
        assert_eq!(
            legacy_request_score(&[mf.clone(), vec![0]].concat(), true),
            20
        );
        // a count too large for the frame
        let mut big = mf.clone();
        big[3] = 9;
        assert_eq!(legacy_request_score(&big, true), 0);
        assert_eq!(legacy_request_score(&big, false), 70);
        // a second topic that is not one, after a good first part
        let mut broken = mf.clone();
        broken[24] = 0x01;
        assert_eq!(legacy_request_score(&broken, false), 60);

        let msgs = message(b"v", 0, None);
        let mut mp = vec![0, 3, 0, 1];
        mp.extend(string16(b"top"));
        mp.extend_from_slice(&0i32.to_be_bytes());
        mp.extend_from_slice(&(msgs.len() as i32).to_be_bytes());
        mp.extend_from_slice(&msgs);
        assert_eq!(legacy_request_score(&mp, true), 100);
        assert_eq!(legacy_request_score(&mp[..13], false), 70);
        assert_eq!(legacy_request_score(&mp[..12], false), 20); // no partition: half the topic's
        assert_eq!(legacy_request_score(&mp[..8], false), 0); // the topic cut
        assert_eq!(legacy_request_score(&[0, 3, 0, 0, 0, 1, b'a', 0], true), 0);
    }

    #[test]
    fn request_plausible() {
        let f = fetch(FETCH, b"topic", 0, 0, 100);
        assert!(legacy_request_plausible(&f[..16]));
        assert!(legacy_request_plausible(&f));
        assert!(!legacy_request_plausible(&f[..12])); // a whole frame too short for FETCH
        assert!(!legacy_request_plausible(&f[..7]));
        let p = produce(b"t", -1, b"");
        assert!(legacy_request_plausible(&p)); // 2 + 3 + 4 + 4 = 13 bytes
        assert!(!legacy_request_plausible(&p[..12]));
        assert!(!legacy_request_plausible(&produce(b"t", -2, b"")));
        assert!(!legacy_request_plausible(&produce(b"a b", 0, b"")));
        assert!(!legacy_request_plausible(&[0, 5, 0, 1, b'a', 0, 0, 0, 0]));
        // multi types: the topic count first
        assert!(legacy_request_plausible(&[0, 3, 0, 1, 0, 1, b'a', 0]));
        assert!(!legacy_request_plausible(&[0, 3, 0, 0, 0, 1, b'a', 0]));
        assert!(!legacy_request_plausible(&[0, 2, 0, 1, 0, 1, b'a', 0]));
        // a topic running past the head: judged on the bytes there
        let mut long = vec![0, 1, 0, 200];
        long.extend_from_slice(b"abcdefghijkl");
        assert!(legacy_request_plausible(&long));
        long[15] = 1;
        assert!(!legacy_request_plausible(&long));
    }

    /// Every function on pseudo-random bytes and all their prefixes: no panic, scores in
    /// range.
    #[test]
    fn any_bytes() {
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..3000 {
            let len = (next() % 48) as usize;
            let mut d: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if len >= 6 && next() % 2 == 0 {
                // a legacy request type and small counts and lengths
                d[0] = 0;
                d[1] = (next() % 5) as u8;
                d[2] = 0;
                d[3] = (next() % 6) as u8;
                d[4] = 0;
                d[5] = (next() % 6) as u8;
            }
            for end in 0..=d.len() {
                let p = &d[..end];
                for complete in [true, false] {
                    assert!((0..=100).contains(&legacy_request_score(p, complete)));
                }
                let _ = legacy_request_plausible(p);
                for t in [
                    None,
                    Some(-1),
                    Some(0),
                    Some(1),
                    Some(2),
                    Some(3),
                    Some(4),
                    Some(5),
                ] {
                    let _ = legacy_response_plausible(p, t);
                }
            }
        }
    }

    #[test]
    fn response_plausible() {
        assert!(!legacy_response_plausible(&[0], None));
        assert!(!legacy_response_plausible(&[0, 5], None));
        assert!(legacy_response_plausible(&[0, 0], Some(1)));
        assert!(legacy_response_plausible(&[0, 0], None));
        assert!(!legacy_response_plausible(&[0, 0], Some(0)));
        assert!(!legacy_response_plausible(&[0, 0, 0, 0, 0], Some(1)));
        assert!(legacy_response_plausible(&[0, 0, 0, 0, 0, 5, 1], Some(1)));
        assert!(!legacy_response_plausible(&[0, 0, 0, 0, 0, 5, 2], Some(1)));
        assert!(!legacy_response_plausible(&[0, 0, 0, 0, 0, 4], Some(1)));
        // OFFSETS: the count must fill a whole frame
        let mut off = vec![0, 1, 0, 0, 0, 1];
        off.extend_from_slice(&7i64.to_be_bytes());
        assert!(legacy_response_plausible(&off, Some(4)));
        assert!(!legacy_response_plausible(&off[..13], Some(4)));
        assert!(!legacy_response_plausible(&off[..4], Some(4)));
        assert!(legacy_response_plausible(
            &[off.clone(), vec![0; 8]].concat(),
            Some(4)
        ));
        // MULTIFETCH: error 0, then a part
        assert!(legacy_response_plausible(
            &[0, 0, 0, 0, 0, 2, 0, 0],
            Some(2)
        ));
        assert!(!legacy_response_plausible(
            &[0, 1, 0, 0, 0, 2, 0, 0],
            Some(2)
        ));
        assert!(!legacy_response_plausible(
            &[0, 0, 0, 0, 0, 1, 0, 0],
            Some(2)
        ));
        assert!(!legacy_response_plausible(
            &[0, 0, 0, 0, 0, 2, 0, 9],
            Some(2)
        ));
        assert!(!legacy_response_plausible(&[0, 0, 0, 0, 0, 2, 0], Some(2)));
        assert!(legacy_response_plausible(&[0, 0, 0, 0, 0, 2, 0, 0], None));
    }
}
