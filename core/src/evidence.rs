//! Is a connection Kafka? The evidence for a connection on a port that is no `--port`.
//!
//! Auto-detection finds Kafka on any port, so it must not find it where it is not: many
//! protocols frame their messages with a length prefix, and one frame of SMB, Modbus,
//! MongoDB or DNS over TCP can pass a header check by chance. So a connection whose
//! ports are not the `--port` ones is judged on its exchanges, with the connection in
//! view, and its records are held until the evidence decides:
//!
//! - an exchange is [`Proof::Good`] when its request header names a known API at a
//!   version the schema knows, the response came after the request with the same
//!   correlation id, and both bodies parse against the schema with no field running past
//!   their ends (bytes left after the last field are allowed: real clients and brokers
//!   send them); when the capture cut the frames (a snaplen), the headers alone, but only
//!   beside another good exchange ([`Proof::Headers`]); a request
//!   alone when its records' CRCs check out (a Produce with acks=0, or cut off by the
//!   capture's end); pre-0.8: a request whose sizes add up exactly and whose messages
//!   parse ([`legacy::legacy_request_score`] from [`LEGACY_GOOD_SCORE`]), answered or of
//!   a type that gets no answer;
//! - [`Proof::Weak`] when it shows nothing either way: an orphan response, a request
//!   that parses but got no response (yet), a raw SASL token, a frame the capture cut
//!   that was not answered;
//! - [`Proof::Bad`] otherwise: a client frame that is no request, a body that does not
//!   parse, an answer that is no response to it.
//!
//! A connection is Kafka once [`CONFIRM`] exchanges are good and they outnumber the bad
//! ones; at its end, also with a single good exchange and no bad one (a connection of
//! one exchange). Otherwise it is unidentified TCP: its records are dropped and its bytes
//! counted apart. Its records are held at most [`MAX_HELD`] exchanges or
//! [`MAX_HELD_BYTES`] bytes of frames, and all undecided connections' together at most
//! [`MAX_HELD_TOTAL`]; past that, undecided means unidentified.

use crate::figures::{ApiDef, Figures};
use crate::kafka::ApiTable;
use crate::legacy;
use crate::pair::{ExchangeRec, Kind, Status};

/// Good exchanges that make a connection Kafka (while they outnumber the bad ones).
pub const CONFIRM: u32 = 2;
/// A pre-0.8 request is evidence from this score (its sizes add up to the frame's end).
pub const LEGACY_GOOD_SCORE: i32 = 80;
/// The most exchange records held for one undecided connection.
pub const MAX_HELD: usize = 256;
/// The most frame bytes held for one undecided connection.
pub const MAX_HELD_BYTES: usize = 4 * 1024 * 1024;
/// The most frame bytes held for all undecided connections together.
pub const MAX_HELD_TOTAL: usize = 64 * 1024 * 1024;
/// The walk that judges bodies: the schema's APIs under the decoder's default limits
/// (one per process: [`crate::pair::PairConfig::schema`]).
pub fn walker(apis: Vec<ApiDef>) -> Figures {
    Figures::new(apis, 1_000_000, 64 << 20, false)
}

/// Why the bytes of a connection judged not Kafka are skipped.
pub const UNIDENTIFIED: &str = "unidentified TCP (not Kafka)";

/// What one exchange says about its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proof {
    Good,
    /// answered, with headers that are Kafka's, in frames the capture cut: good only
    /// beside another good exchange (a frame whose size runs past the end of a short
    /// connection of another protocol is cut too)
    Headers,
    Weak,
    Bad,
}

/// The evidence gathered on one undecided connection.
#[derive(Debug, Default)]
pub struct Evidence {
    pub good: u32,
    pub headers: u32,
    pub bad: u32,
}

impl Evidence {
    pub fn add(&mut self, p: Proof) {
        match p {
            Proof::Good => self.good += 1,
            Proof::Headers => self.headers += 1,
            Proof::Weak => {}
            Proof::Bad => self.bad += 1,
        }
    }

    /// Kafka while the connection goes on?
    pub fn confirmed(&self) -> bool {
        let good = self.good + self.headers;
        good >= CONFIRM && good > self.bad
    }

    /// Kafka, now that the connection ended?
    pub fn confirmed_at_end(&self) -> bool {
        self.confirmed() || (self.good >= 1 && self.bad == 0)
    }

    /// The evidence as the front shows it: `auto: 3 exchanges parsed and answered` (and
    /// what else was seen).
    pub fn describe(&self) -> String {
        let good = self.good + self.headers;
        let mut s = format!(
            "auto: {} exchange{} parsed and answered",
            good,
            if good == 1 { "" } else { "s" }
        );
        if self.headers > 0 {
            s.push_str(&format!(" ({} cut by the capture)", self.headers));
        }
        if self.bad > 0 {
            s.push_str(&format!(", {} not parsed", self.bad));
        }
        s
    }
}

/// Does a body parse against the schema, no field running past its end? (Bytes after
/// the last field are allowed: brokers and clients send them, such as the librdkafka mock's
/// ApiVersions v3 and Metadata v13 answers and librdkafka's ApiVersions v0 requests.)
fn parses(t: &crate::figures::Tree) -> bool {
    t.counts.malformed == 0
}

/// A request header of an API the schema knows, at a version it knows.
fn known(table: &ApiTable, h: &crate::kafka::RequestHeader) -> bool {
    table
        .max_version(h.api_key)
        .is_some_and(|max| (0..=max).contains(&h.api_version))
}

/// What exchange `rec` says about its connection; `walker`, the schema's bodies, when
/// the front handed the schema over.
pub fn judge(rec: &ExchangeRec, table: &ApiTable, walker: Option<&mut Figures>) -> Proof {
    let cut = |f: &Option<crate::frame::Frame>| f.as_ref().is_some_and(|f| f.truncated);
    if cut(&rec.request) || cut(&rec.response) {
        // (a snaplen cuts every frame: then the headers are what there is to judge)
        let answered = rec.kind == Kind::Kafka && rec.status == Status::Ok;
        return if answered && rec.header.as_ref().is_some_and(|h| known(table, h)) {
            Proof::Headers
        } else {
            Proof::Weak
        };
    }
    match rec.kind {
        Kind::Orphan | Kind::SaslToken => Proof::Weak,
        Kind::NotRequest => Proof::Bad,
        Kind::Legacy => {
            let Some(req) = rec.request.as_ref() else {
                return Proof::Weak; // an orphan response
            };
            if legacy::legacy_request_score(&req.data, true) < LEGACY_GOOD_SCORE {
                return Proof::Bad;
            }
            match rec.status {
                Status::Ok | Status::NoResponseExpected => Proof::Good,
                _ => Proof::Weak,
            }
        }
        Kind::Kafka => {
            let (Some(h), Some(req)) = (rec.header.as_ref(), rec.request.as_ref()) else {
                return Proof::Bad;
            };
            if !known(table, h) {
                // a version newer than the schema's (Kafka framing, nothing to parse it by),
                // or one that no Kafka has but answered by correlation id (a bit flipped)
                return if rec.status == Status::Ok || table.api_plausible(h.api_key, h.api_version)
                {
                    Proof::Weak
                } else {
                    Proof::Bad
                };
            }
            let Some(w) = walker else {
                return match rec.status {
                    Status::Ok => Proof::Good,
                    _ => Proof::Weak,
                };
            };
            if !w.knows(h.api_key) {
                return Proof::Weak;
            }
            let t = w.request(&req.data, h.header_len);
            if !parses(&t) {
                return Proof::Bad;
            }
            let Some(resp) = rec.response.as_ref() else {
                // unanswered, or no response expected (acks=0): records whose CRCs check out
                // are evidence on their own
                return if t.counts.crc_valid > 0 && t.counts.crc_invalid == 0 {
                    Proof::Good
                } else {
                    Proof::Weak
                };
            };
            match w.response(&resp.data, h.api_key, h.api_version) {
                Some(t) if parses(&t) && rec.status == Status::Ok => Proof::Good,
                _ => Proof::Bad,
            }
        }
    }
}
