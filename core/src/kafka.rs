//! Kafka (0.8+) request and response headers: the checks that framing and pairing run on
//! every frame. Ported from `dissectors/header.py` and proved equal to it (8d05a88); the
//! Python versions were then removed, and `tests/test_core_headers.py` checks these through
//! `analyzer._core`'s probes against the full decoder (`dissectors.kafka`) on every capture
//! and on random bytes.
//!
//! Header versions: request header v0 (api_key, api_version, correlation_id) is used only
//! by ControlledShutdown v0; v1 adds the nullable client_id string (int16 length); v2 (the
//! flexible versions) adds a tagged-field section. Response header v0 is the
//! correlation_id; v1 adds tagged fields.
//!
//! Which API keys exist, each one's newest version and each version's header version are
//! the schema's (`dissectors/schema.py`), handed over at start-up as an [`ApiTable`]: the
//! core keeps no second copy of them.
//!
//! Text is decoded as Python's `bytes.decode("utf-8", "replace")` does (one U+FFFD per
//! maximal invalid subpart, which is what `String::from_utf8_lossy` does too) and judged
//! as `str.isprintable()` does ([`is_printable`]).

use crate::wire::{self, be_i16, be_i32};
use unicode_general_category::{get_general_category, GeneralCategory};

/// API keys accepted as plausible when the schema table is empty.
pub const MAX_PLAUSIBLE_API_KEY: i16 = 127;
/// The highest version a request may claim and still be plausible.
pub const MAX_PLAUSIBLE_VERSION: i16 = 40;

/// ControlledShutdown: its v0 is the one request with header v0, a rule of
/// `schema.request_header_version` that holds whether the table knows the key or not.
const CONTROLLED_SHUTDOWN: i16 = 7;
/// SaslHandshake: after its v0 the connection carries raw SASL tokens.
pub const SASL_HANDSHAKE: i16 = 17;
/// A client_id cut by the capture is judged plausible only up to this announced length.
const MAX_CUT_CLIENT_ID: i16 = 2048;

/// A request header, as `dissectors.header.RequestHeader`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHeader {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
    pub client_id: Option<String>,
    /// bytes from the frame start to the first body byte
    pub header_len: usize,
    pub header_version: u8,
}

/// What [`request_header`] makes of a frame's first bytes: three outcomes (the probe's
/// header tuple, `True`, and `False` or `None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderCheck {
    /// A header that parsed (with `check`: and is plausible).
    Header(RequestHeader),
    /// With `check` only: plausible as far as a cut client_id (or a cut tagged-field
    /// section) lets one judge (the probe's `True`).
    Cut,
    /// With `check`: implausible (the probe's `False`); without: no header (`None`).
    Rejected,
}

/// Bytes that do not hold what they should: a cut or overlong varint, a tagged-field
/// count or size running past the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

/// Why an [`ApiTable`] could not be built from the entries handed over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableError(pub String);

impl std::fmt::Display for TableError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TableError {}

/// One API the schema knows.
#[derive(Debug, Clone)]
struct Api {
    max_version: i16,
    /// the newest version still plausible (a broker or client newer than the schema)
    newest_plausible: i16,
    /// request header version of versions 0, 1, ...; the last stands for every later one
    header_versions: Vec<u8>,
}

/// The schema's knowledge that the header checks need, handed over by the Python side
/// (`dissectors.schema.APIS` and `request_header_version`), never written out twice.
///
/// Each entry is `(api_key, max_version, header_versions)`, where `header_versions[v]` is
/// `request_header_version(api_key, v)`; the Python side (`dissectors.header.api_table`)
/// passes versions `0..=max_version`. Versions past the vector take its last
/// element: `request_header_version` clamps the version to `max_version` before asking
/// whether it is flexible (`is_flexible(api, min(api_version, api.max_version))`), so
/// every version from `max_version` on has the header version of `max_version`.
///
/// A key the table does not know has header v1 (v0 for ControlledShutdown v0), and is
/// implausible unless the table is empty, when every key up to
/// [`MAX_PLAUSIBLE_API_KEY`] is (the checks of a schema-less build).
#[derive(Debug, Clone, Default)]
pub struct ApiTable {
    /// indexed by api_key
    apis: Vec<Option<Api>>,
    known: usize,
}

impl ApiTable {
    /// The table of `entries` (see the type's doc); an error for a negative or repeated
    /// key, a negative max_version, an empty vector or a header version other than 0-2.
    pub fn new(entries: Vec<(i16, i16, i16, Vec<u8>)>) -> Result<ApiTable, TableError> {
        let mut table = ApiTable::default();
        for (key, max_version, newest_plausible, header_versions) in entries {
            let Ok(slot) = usize::try_from(key) else {
                return Err(TableError(format!("negative api_key {key}")));
            };
            if max_version < 0 {
                return Err(TableError(format!(
                    "api_key {key}: negative max_version {max_version}"
                )));
            }
            if newest_plausible < max_version {
                return Err(TableError(format!(
                    "api_key {key}: newest plausible version {newest_plausible} below {max_version}"
                )));
            }
            if header_versions.is_empty() {
                return Err(TableError(format!("api_key {key}: no header versions")));
            }
            if let Some(hv) = header_versions.iter().find(|&&hv| hv > 2) {
                return Err(TableError(format!("api_key {key}: header version {hv}")));
            }
            if table.apis.len() <= slot {
                table.apis.resize(slot + 1, None);
            }
            if table.apis[slot].is_some() {
                return Err(TableError(format!("api_key {key} given twice")));
            }
            table.apis[slot] = Some(Api {
                max_version,
                newest_plausible,
                header_versions,
            });
            table.known += 1;
        }
        Ok(table)
    }

    /// No API known: small unknown keys are plausible (`dissectors.schema.APIS` empty).
    pub fn is_empty(&self) -> bool {
        self.known == 0
    }

    fn api(&self, api_key: i16) -> Option<&Api> {
        self.apis.get(usize::try_from(api_key).ok()?)?.as_ref()
    }

    /// The newest version the schema knows of `api_key`, if it knows the key.
    pub fn max_version(&self, api_key: i16) -> Option<i16> {
        self.api(api_key).map(|a| a.max_version)
    }

    /// `_header_version`: the request header version (0, 1 or 2) of a key and version;
    /// 1 for a negative version (a header with a client_id, at least).
    pub fn header_version(&self, api_key: i16, api_version: i16) -> u8 {
        let Ok(v) = usize::try_from(api_version) else {
            return 1;
        };
        match self.api(api_key) {
            Some(api) => match api.header_versions.get(v) {
                Some(&hv) => hv,
                // not empty: ApiTable::new refuses an empty vector
                None => api.header_versions.last().copied().unwrap_or(1),
            },
            None if api_key == CONTROLLED_SHUTDOWN && api_version == 0 => 0,
            None => 1,
        }
    }

    /// `_api_plausible`: a known API key (or a small one when the table is empty) and a
    /// version from 0 to [`MAX_PLAUSIBLE_VERSION`], and for a known key at most its newest
    /// plausible version (the schema's newest, and the few after it that
    /// `dissectors.header.api_table` allows).
    pub fn api_plausible(&self, api_key: i16, api_version: i16) -> bool {
        let api = self.api(api_key);
        if api.is_none() && (!self.is_empty() || !(0..=MAX_PLAUSIBLE_API_KEY).contains(&api_key)) {
            return false;
        }
        if !(0..=MAX_PLAUSIBLE_VERSION).contains(&api_version) {
            return false;
        }
        api.is_none_or(|a| api_version <= a.newest_plausible)
    }

    /// The header version of a plausible key and version, else None.
    pub fn checked_version(&self, api_key: i16, api_version: i16) -> Option<u8> {
        self.api_plausible(api_key, api_version)
            .then(|| self.header_version(api_key, api_version))
    }
}

/// The unsigned varint at `pos`: (value, next position). Malformed when it runs past the
/// end of `data` or is longer than 10 bytes.
///
/// The tenth byte can take the value past `u64::MAX`, which saturates here (Python's
/// `dissectors.decoder.read_uvarint` gives it exact): every caller compares it with byte
/// counts, where both mean "more than the frame".
pub fn read_uvarint(data: &[u8], pos: usize) -> Result<(u64, usize), Malformed> {
    let (v, next) = wire::uvarint(data, pos, data.len(), 10).map_err(|_| Malformed)?;
    Ok((u64::try_from(v).unwrap_or(u64::MAX), next))
}

/// Skip the tagged-field section at `pos`: the position after it, or Malformed when a
/// varint is cut or a count or size runs past the end of `data`.
pub fn skip_tagged_fields(data: &[u8], pos: usize) -> Result<usize, Malformed> {
    let left = |pos: usize| (data.len() - pos) as u64;
    let (count, mut pos) = read_uvarint(data, pos)?;
    if count > left(pos) {
        return Err(Malformed);
    }
    for _ in 0..count {
        let (_tag, p) = read_uvarint(data, pos)?;
        let (size, p) = read_uvarint(data, p)?;
        if size > left(p) {
            return Err(Malformed);
        }
        // size <= the bytes left, so it fits a usize
        pos = p + size as usize;
    }
    Ok(pos)
}

/// Python's `str.isprintable()`: every character printable, where the non-printable ones
/// are the categories Cc, Cf, Cs, Co, Cn, Zl, Zp and Zs but for the ASCII space. (Unicode
/// 14.0.0, as Python 3.11.)
pub fn is_printable(s: &str) -> bool {
    s.chars().all(|c| {
        if c.is_ascii() {
            return (' '..='~').contains(&c);
        }
        !matches!(
            get_general_category(c),
            GeneralCategory::Control
                | GeneralCategory::Format
                | GeneralCategory::Surrogate
                | GeneralCategory::PrivateUse
                | GeneralCategory::Unassigned
                | GeneralCategory::LineSeparator
                | GeneralCategory::ParagraphSeparator
                | GeneralCategory::SpaceSeparator
        )
    })
}

/// Python's `bytes.decode("utf-8", "replace")`.
pub fn decode_utf8(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The request header of a frame's first bytes (after the size prefix); with `check`,
/// whether they are plausible as well (`plausible_request`), else whether they parse
/// (`parse_request_header`).
///
/// With `partial` the bytes are a frame cut short (by the capture, or the framer's peek):
/// a client_id or tagged-field section running past them is kept as far as it goes, and
/// with `check` judged on the part that is there ([`HeaderCheck::Cut`]: a client_id that
/// announces at most 2048 bytes and is printable so far). A header parsed without
/// `partial` is the header of the whole frame too: nothing past `header_len` is read.
pub fn request_header(table: &ApiTable, data: &[u8], partial: bool, check: bool) -> HeaderCheck {
    let n = data.len();
    let (Some(api_key), Some(api_version), Some(correlation_id)) =
        (be_i16(data, 0), be_i16(data, 2), be_i32(data, 4))
    else {
        return HeaderCheck::Rejected;
    };
    let header = |client_id: Option<String>, header_len: usize, header_version: u8| {
        HeaderCheck::Header(RequestHeader {
            api_key,
            api_version,
            correlation_id,
            client_id,
            header_len,
            header_version,
        })
    };
    let Some(slen) = be_i16(data, 8) else {
        // 8 or 9 bytes: only a v0 header fits
        if table.header_version(api_key, api_version) != 0
            || (check && !table.api_plausible(api_key, api_version))
        {
            return HeaderCheck::Rejected;
        }
        return header(None, 8, 0);
    };
    let hv = if check {
        match table.checked_version(api_key, api_version) {
            Some(hv) => hv,
            None => return HeaderCheck::Rejected,
        }
    } else {
        table.header_version(api_key, api_version)
    };
    if hv == 0 {
        return header(None, 8, 0);
    }
    let client_id;
    let mut pos;
    if slen < 0 {
        if slen != -1 {
            return HeaderCheck::Rejected;
        }
        client_id = None;
        pos = 10;
    } else {
        // slen >= 0 here
        pos = 10 + slen as usize;
        if pos > n {
            if !partial {
                return HeaderCheck::Rejected;
            }
            // (borrowed when valid UTF-8: the check of a cut client_id copies nothing)
            let cut = String::from_utf8_lossy(&data[10..]);
            if check {
                return if slen <= MAX_CUT_CLIENT_ID && is_printable(&cut) {
                    HeaderCheck::Cut
                } else {
                    HeaderCheck::Rejected
                };
            }
            return header(Some(cut.into_owned()), n, hv);
        }
        let text = String::from_utf8_lossy(&data[10..pos]);
        if check && !is_printable(&text) {
            return HeaderCheck::Rejected;
        }
        client_id = Some(text.into_owned());
    }
    if hv == 2 {
        if data.get(pos) == Some(&0) {
            pos += 1; // no tagged fields: the common case
        } else {
            match skip_tagged_fields(data, pos) {
                Ok(p) => pos = p,
                Err(Malformed) => {
                    if !partial {
                        return HeaderCheck::Rejected;
                    }
                    if check {
                        // a cut section: judged on the client_id (printable, checked above)
                        return if (0..=MAX_CUT_CLIENT_ID).contains(&slen) {
                            HeaderCheck::Cut
                        } else {
                            HeaderCheck::Rejected
                        };
                    }
                    pos = n;
                }
            }
        }
    }
    header(client_id, pos, hv)
}

/// The request header of a frame, or None when it cannot be one (too short, bad lengths);
/// `request_header` without `check` (see it for `partial`).
pub fn parse_request_header(table: &ApiTable, data: &[u8], partial: bool) -> Option<RequestHeader> {
    match request_header(table, data, partial, false) {
        HeaderCheck::Header(h) => Some(h),
        _ => None,
    }
}

/// Could these frame bytes (after the size prefix) be a 0.8+ request? A known API key (or
/// a small one when the table is empty), a version in a sane range, a client_id that fits
/// and is printable; with `prefix` the bytes are only the start of the frame, and a
/// client_id running past them is judged on the part that is there. `request_header` with
/// `check`.
pub fn plausible_request(table: &ApiTable, data: &[u8], prefix: bool) -> HeaderCheck {
    request_header(table, data, prefix, true)
}

/// A request header of any API key and version at the start of a frame of `size` bytes
/// (`data` maybe fewer): what a frame at a known boundary of a stream in sync must start
/// with to count as a request although [`plausible_request`] rejects its key or version
/// (an API or version newer than the schema). A key and version that are not negative,
/// a client_id that is null or fits the frame and is printable as far as it goes; its
/// tagged-field section (a guess for such a version) taken as far as it parses. Else None.
pub fn sane_request(table: &ApiTable, data: &[u8], size: usize) -> Option<RequestHeader> {
    if let Some(slen) = be_i16(data, 8) {
        if i64::from(slen) > size as i64 - 10 {
            return None;
        }
    }
    let h = parse_request_header(table, data, true)?;
    if h.api_key < 0 || h.api_version < 0 || !h.client_id.as_deref().is_none_or(is_printable) {
        return None;
    }
    Some(h)
}

/// The correlation id that starts a response frame, if it has 4 bytes.
pub fn response_correlation_id(data: &[u8]) -> Option<i32> {
    be_i32(data, 0)
}

/// The error code (int16) right after a response header of `header_len` bytes, if the
/// frame holds it. (For SaslHandshake the response header is v0: `header_len` 4.)
pub fn response_error_code(data: &[u8], header_len: usize) -> Option<i16> {
    be_i16(data, header_len)
}

/// A Produce request's acks, read straight from the body (`Pipeline._acks`): v3+ has the
/// transactional_id first (a compact nullable string from v9). None when the body is too
/// short. The body is read as Produce's whatever `h.api_key`: the caller asks for Produce.
pub fn produce_acks(data: &[u8], h: &RequestHeader) -> Option<i16> {
    let mut pos = h.header_len;
    if h.api_version >= 3 {
        if h.api_version >= 9 {
            let (n, p) = read_uvarint(data, pos).ok()?;
            pos = p.checked_add(usize::try_from(n.saturating_sub(1)).ok()?)?;
        } else {
            let n = be_i16(data, pos)?;
            pos += 2 + usize::try_from(n.max(0)).ok()?;
        }
    }
    be_i16(data, pos)
}

/// The `mechanism` of a SaslHandshake (API 17) v0/v1 request (a non-flexible string after
/// the header), decoded as the Python decoder does; None for another API or version, a
/// null string, or one that runs past the bytes.
pub fn sasl_handshake_mechanism(data: &[u8], h: &RequestHeader) -> Option<String> {
    if h.api_key != SASL_HANDSHAKE || !(0..=1).contains(&h.api_version) {
        return None;
    }
    let len = usize::try_from(be_i16(data, h.header_len)?).ok()?;
    let start = h.header_len + 2;
    Some(decode_utf8(data.get(start..start + len)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// versions above an API's newest still plausible (the Python side's
    /// `dissectors.header.MAX_NEWER_PLAUSIBLE`)
    const NEWER: i16 = 8;

    /// A table like the schema's for a few keys: Produce (0) max 11 flexible from 9,
    /// ControlledShutdown (7) max 3 flexible from 3, ApiVersions (18) max 4 flexible from 3.
    fn table() -> ApiTable {
        let hv = |key: i16, max: i16, flex: i16| {
            let n = max + NEWER + 1;
            let v: Vec<u8> = (0..n)
                .map(|v| {
                    if key == 7 && v == 0 {
                        0
                    } else if v.min(max) >= flex {
                        2
                    } else {
                        1
                    }
                })
                .collect();
            (key, max, max + NEWER, v)
        };
        ApiTable::new(vec![hv(0, 11, 9), hv(7, 3, 3), hv(18, 4, 3)]).unwrap()
    }

    fn req(key: i16, ver: i16, cid: i32, client: Option<&[u8]>, rest: &[u8]) -> Vec<u8> {
        let mut d = Vec::new();
        d.extend_from_slice(&key.to_be_bytes());
        d.extend_from_slice(&ver.to_be_bytes());
        d.extend_from_slice(&cid.to_be_bytes());
        match client {
            None => d.extend_from_slice(&(-1i16).to_be_bytes()),
            Some(c) => {
                d.extend_from_slice(&(c.len() as i16).to_be_bytes());
                d.extend_from_slice(c);
            }
        }
        d.extend_from_slice(rest);
        d
    }

    fn hdr(h: HeaderCheck) -> RequestHeader {
        match h {
            HeaderCheck::Header(h) => h,
            other => panic!("not a header: {other:?}"),
        }
    }

    #[test]
    fn table_rules() {
        let t = table();
        assert_eq!(t.header_version(0, 8), 1);
        assert_eq!(t.header_version(0, 9), 2);
        assert_eq!(t.header_version(0, 30_000), 2); // past the vector: its last
        assert_eq!(t.header_version(7, 0), 0);
        assert_eq!(t.header_version(7, -1), 1);
        assert_eq!(t.header_version(99, 5), 1);
        assert!(t.api_plausible(0, 19));
        assert!(!t.api_plausible(0, 20));
        assert!(!t.api_plausible(0, -1));
        assert!(!t.api_plausible(1, 0)); // unknown in a non-empty table
        assert_eq!(t.checked_version(18, 3), Some(2));
        assert_eq!(t.checked_version(18, 13), None);
        assert_eq!(t.max_version(18), Some(4));
        assert_eq!(t.max_version(-3), None);

        let e = ApiTable::new(vec![]).unwrap();
        assert!(e.is_empty());
        assert!(e.api_plausible(127, 40));
        assert!(!e.api_plausible(128, 0));
        assert!(!e.api_plausible(-1, 0));
        assert!(!e.api_plausible(5, 41));
        assert_eq!(e.header_version(7, 0), 0); // ControlledShutdown v0 without a table
        assert_eq!(e.header_version(3, 12), 1);

        assert!(ApiTable::new(vec![(-1, 0, 0, vec![1])]).is_err());
        assert!(ApiTable::new(vec![(1, -1, 0, vec![1])]).is_err());
        assert!(ApiTable::new(vec![(1, 2, 1, vec![1])]).is_err());
        assert!(ApiTable::new(vec![(1, 0, 0, vec![])]).is_err());
        assert!(ApiTable::new(vec![(1, 0, 0, vec![3])]).is_err());
        assert!(ApiTable::new(vec![(1, 0, 0, vec![1]), (1, 2, 2, vec![1])]).is_err());
    }

    #[test]
    fn varints_and_tagged_fields() {
        assert_eq!(read_uvarint(&[0x05], 0), Ok((5, 1)));
        assert_eq!(read_uvarint(&[0xAC, 0x02], 0), Ok((300, 2)));
        assert_eq!(read_uvarint(&[0x80], 0), Err(Malformed));
        assert_eq!(read_uvarint(&[], 0), Err(Malformed));
        let mut ten = vec![0xFF; 9];
        ten.push(0x01);
        assert_eq!(read_uvarint(&ten, 0), Ok((u64::MAX, 10)));
        ten[9] = 0x7F; // past 64 bits: saturates (Python's value is larger still)
        assert_eq!(read_uvarint(&ten, 0), Ok((u64::MAX, 10)));
        ten[9] = 0x80; // an 11th byte
        ten.push(0);
        assert_eq!(read_uvarint(&ten, 0), Err(Malformed));

        assert_eq!(skip_tagged_fields(&[0], 0), Ok(1));
        assert_eq!(skip_tagged_fields(&[1, 0, 2, 9, 9], 0), Ok(5));
        assert_eq!(skip_tagged_fields(&[1, 0, 3, 9, 9], 0), Err(Malformed));
        assert_eq!(skip_tagged_fields(&[2, 0, 0], 0), Err(Malformed));
        assert_eq!(skip_tagged_fields(&[3, 0], 0), Err(Malformed)); // count > bytes left
        assert_eq!(skip_tagged_fields(&[], 0), Err(Malformed));
    }

    #[test]
    fn printable_as_python() {
        assert!(is_printable(""));
        assert!(is_printable("rdkafka producer-1 é€"));
        assert!(is_printable("\u{FFFD}")); // the replacement character is So
        assert!(!is_printable("a\tb"));
        assert!(!is_printable("\u{7F}"));
        assert!(!is_printable("\u{A0}")); // no-break space: Zs
        assert!(!is_printable("\u{200B}")); // zero width space: Cf
        assert!(!is_printable("\u{2028}"));
        assert!(!is_printable("\u{E000}")); // private use
        assert!(!is_printable("\u{0378}")); // unassigned
    }

    #[test]
    fn lossy_decoding_as_python() {
        // one U+FFFD per maximal invalid subpart, as Python's "replace"
        assert_eq!(decode_utf8(b"\xed\xa0\x80"), "\u{FFFD}\u{FFFD}\u{FFFD}");
        assert_eq!(decode_utf8(b"\xe2\x82"), "\u{FFFD}");
        assert_eq!(decode_utf8(b"\xf0\x90\x80a"), "\u{FFFD}a");
        assert_eq!(decode_utf8(b"\xc0\xaf"), "\u{FFFD}\u{FFFD}");
    }

    #[test]
    fn v1_and_v2_headers() {
        let t = table();
        let d = req(0, 8, 42, Some(b"cli"), b"\xff\xff\x00\x01");
        let h = hdr(request_header(&t, &d, false, true));
        assert_eq!(
            h,
            RequestHeader {
                api_key: 0,
                api_version: 8,
                correlation_id: 42,
                client_id: Some("cli".into()),
                header_len: 13,
                header_version: 1,
            }
        );
        assert_eq!(parse_request_header(&t, &d, false), Some(h.clone()));
        assert_eq!(produce_acks(&d, &h), Some(1)); // v3-8: an int16 transactional_id length
        let d = req(0, 9, 1, None, b"\x00\x01\x00\xff\xff");
        let h = hdr(request_header(&t, &d, false, true));
        assert_eq!((h.header_len, h.header_version, h.client_id), (11, 2, None));
        // tagged fields present
        let d = req(0, 9, 1, Some(b""), b"\x01\x05\x01\xaa\x01\x00\x00");
        assert_eq!(hdr(request_header(&t, &d, false, false)).header_len, 14);
    }

    #[test]
    fn short_and_v0_headers() {
        let t = table();
        assert_eq!(
            request_header(&t, &[0; 7], true, true),
            HeaderCheck::Rejected
        );
        let cs = [0, 7, 0, 0, 0, 0, 0, 9];
        let h = hdr(request_header(&t, &cs, false, true));
        assert_eq!(
            (h.header_len, h.header_version, h.correlation_id),
            (8, 0, 9)
        );
        // 8 bytes of a v1 header: no room for the client_id length
        assert_eq!(
            request_header(&t, &[0, 0, 0, 1, 0, 0, 0, 9], true, false),
            HeaderCheck::Rejected
        );
        // ControlledShutdown v0 with more bytes: the header stops at 8
        let mut d = cs.to_vec();
        d.extend_from_slice(&[0xff, 0xff, 1]);
        assert_eq!(hdr(request_header(&t, &d, false, false)).header_len, 8);
        // an unknown key in a non-empty table parses but is implausible
        let d = req(50, 0, 1, Some(b"x"), b"");
        assert!(parse_request_header(&t, &d, false).is_some());
        assert_eq!(plausible_request(&t, &d, false), HeaderCheck::Rejected);
        // and plausible when the table is empty
        let e = ApiTable::default();
        assert!(matches!(
            plausible_request(&e, &d, false),
            HeaderCheck::Header(_)
        ));
    }

    #[test]
    fn cut_client_ids_and_sections() {
        let t = table();
        let mut d = req(0, 8, 1, Some(b"0123456789"), b"");
        d.truncate(14);
        assert_eq!(request_header(&t, &d, false, true), HeaderCheck::Rejected);
        assert_eq!(request_header(&t, &d, true, true), HeaderCheck::Cut);
        assert_eq!(request_header(&t, &d, false, false), HeaderCheck::Rejected);
        let h = hdr(request_header(&t, &d, true, false));
        assert_eq!((h.client_id.as_deref(), h.header_len), (Some("0123"), 14));
        // a cut client_id that announces too much, or is not printable
        let mut long = d.clone();
        long[8..10].copy_from_slice(&2049i16.to_be_bytes());
        assert_eq!(request_header(&t, &long, true, true), HeaderCheck::Rejected);
        let mut ctl = d.clone();
        ctl[11] = 1;
        assert_eq!(request_header(&t, &ctl, true, true), HeaderCheck::Rejected);
        // a whole client_id that is not printable fails the check only
        let d = req(0, 8, 1, Some(b"a\nb"), b"");
        assert_eq!(request_header(&t, &d, false, true), HeaderCheck::Rejected);
        assert!(parse_request_header(&t, &d, false).is_some());
        // a bad client_id length
        let mut d = req(0, 8, 1, None, b"");
        d[8..10].copy_from_slice(&(-2i16).to_be_bytes());
        assert_eq!(request_header(&t, &d, true, false), HeaderCheck::Rejected);
        // a cut tagged-field section (v2)
        let d = req(18, 3, 1, Some(b"c"), b"\x02\x00");
        assert_eq!(request_header(&t, &d, false, true), HeaderCheck::Rejected);
        assert_eq!(request_header(&t, &d, true, true), HeaderCheck::Cut);
        assert_eq!(hdr(request_header(&t, &d, true, false)).header_len, d.len());
        let d = req(18, 3, 1, None, b"\x02\x00");
        assert_eq!(request_header(&t, &d, true, true), HeaderCheck::Rejected);
        // no byte at all after the client_id of a v2 header
        let d = req(18, 3, 1, Some(b"c"), b"");
        assert_eq!(request_header(&t, &d, true, true), HeaderCheck::Cut);
    }

    #[test]
    fn sane_requests() {
        let t = table();
        // a version far beyond the schema: implausible, but sane
        let d = req(0, 200, 1, Some(b"c"), b"\x00");
        assert_eq!(plausible_request(&t, &d, false), HeaderCheck::Rejected);
        let h = sane_request(&t, &d, d.len()).unwrap();
        assert_eq!((h.header_version, h.header_len), (2, 12));
        // the client_id announced past the frame
        assert_eq!(sane_request(&t, &d, 10), None);
        // negative key or version, control characters
        assert_eq!(sane_request(&t, &req(-1, 0, 1, None, b""), 10), None);
        assert_eq!(sane_request(&t, &req(0, -3, 1, None, b""), 10), None);
        assert_eq!(
            sane_request(&t, &req(0, 3, 1, Some(b"\x01"), b""), 11),
            None
        );
        assert!(sane_request(&t, &req(0, 3, 1, Some(b""), b""), 10).is_some());
        // fewer than 10 bytes: no client_id length to check against the size
        assert!(sane_request(&t, &[0, 7, 0, 0, 0, 0, 0, 1], 0).is_some());
    }

    /// Every function on pseudo-random bytes and all their prefixes: no panic, and a header
    /// parsed whole never reaches past the bytes.
    #[test]
    fn any_bytes() {
        let tables = [table(), ApiTable::default()];
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..3000 {
            let len = (next() % 40) as usize;
            let mut d: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if len >= 4 && next() % 2 == 0 {
                d[0] = 0; // a small api_key and version, to get past the first checks
                d[1] = (next() % 20) as u8;
                d[2] = 0;
                d[3] = (next() % 14) as u8;
            }
            for t in &tables {
                for end in 0..=d.len() {
                    let p = &d[..end];
                    for (partial, check) in
                        [(false, false), (false, true), (true, false), (true, true)]
                    {
                        if let HeaderCheck::Header(h) = request_header(t, p, partial, check) {
                            assert!(h.header_len <= p.len());
                            let _ = produce_acks(p, &h);
                            let _ = sasl_handshake_mechanism(p, &h);
                        }
                    }
                    let _ = sane_request(t, p, end);
                    let _ = sane_request(t, p, 0);
                    let _ = skip_tagged_fields(p, end / 2);
                    let _ = response_error_code(p, end / 2);
                }
            }
        }
    }

    #[test]
    fn body_helpers() {
        let t = table();
        assert_eq!(response_correlation_id(&[0, 0, 1]), None);
        assert_eq!(response_correlation_id(&[0, 0, 1, 2, 9]), Some(258));
        assert_eq!(response_error_code(&[0, 0, 0, 1, 0, 33], 4), Some(33));
        assert_eq!(response_error_code(&[0, 0, 0, 1, 0], 4), None);
        assert_eq!(response_error_code(&[], usize::MAX), None);

        // Produce v3-8: int16 transactional_id (null, then 3 bytes), acks after it
        let h = |d: &[u8]| parse_request_header(&t, d, false).unwrap();
        let d = req(0, 3, 1, None, b"\xff\xff\xff\xff");
        assert_eq!(produce_acks(&d, &h(&d)), Some(-1));
        let d = req(0, 3, 1, None, b"\x00\x03abc\x00\x00");
        assert_eq!(produce_acks(&d, &h(&d)), Some(0));
        let d = req(0, 3, 1, None, b"\x00\x03abc\x00");
        assert_eq!(produce_acks(&d, &h(&d)), None);
        // v9+: compact nullable string (0: null, n + 1: n bytes)
        let d = req(0, 9, 1, None, b"\x00\x00\x00\x01");
        assert_eq!(produce_acks(&d, &h(&d)), Some(1));
        let d = req(0, 9, 1, None, b"\x00\x03ab\xff\xff");
        assert_eq!(produce_acks(&d, &h(&d)), Some(-1));
        // a huge varint: Python raises OverflowError, the core says None
        let mut d = req(0, 9, 1, None, b"\x00");
        d.extend_from_slice(&[0xff; 9]);
        d.extend_from_slice(&[0x01, 0, 1]);
        assert_eq!(produce_acks(&d, &h(&d)), None);
        // v0-2: acks first
        let d = req(0, 2, 1, None, b"\x00\x01");
        assert_eq!(produce_acks(&d, &h(&d)), Some(1));

        // SaslHandshake v1 (header v1) mechanism
        let sasl = ApiTable::new(vec![(17, 1, 9, vec![1; 10])]).unwrap();
        let d = req(17, 1, 5, Some(b"c"), b"\x00\x05PLAIN");
        let hh = parse_request_header(&sasl, &d, false).unwrap();
        assert_eq!(sasl_handshake_mechanism(&d, &hh).as_deref(), Some("PLAIN"));
        assert_eq!(sasl_handshake_mechanism(&d[..d.len() - 1], &hh), None);
        let d = req(17, 1, 5, Some(b"c"), b"\xff\xff");
        assert_eq!(sasl_handshake_mechanism(&d, &hh), None);
        let d = req(17, 2, 5, Some(b"c"), b"\x00\x05PLAIN");
        let hh = parse_request_header(&sasl, &d, false).unwrap();
        assert_eq!(sasl_handshake_mechanism(&d, &hh), None);
        let d = req(17, 0, 5, None, b"\x00\x03S\xffM");
        let hh = parse_request_header(&sasl, &d, false).unwrap();
        assert_eq!(
            sasl_handshake_mechanism(&d, &hh).as_deref(),
            Some("S\u{FFFD}M")
        );
    }
}
