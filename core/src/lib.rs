//! kafkawire-sniff's native core: the packet path from capture bytes to paired Kafka
//! exchanges, handed to the Python front in batches.
//!
//! Stages, one module each: [`capture`] (pcap / pcapng / gzip records), [`net`] (link
//! layer, IPv4/IPv6, TCP), [`tcp`] (per-direction reassembly), [`frame`] (Kafka frames
//! of a direction's stream) and [`pair`] (each connection's client side and protocol,
//! requests paired with responses); [`evidence`] judges whether a connection on no `--port`
//! port is Kafka; [`session`] wires net to pairing once, for the binding and the fuzz targets.
//! [`kafka`] and [`legacy`] are the header checks that framing and pairing run on every
//! frame (0.8+ and pre-0.8 Kafka); [`wire`] reads the wire's integers and varints.
//! [`figures`] is the lean walk of a message against the schema (what `stats`, the tables
//! and the summary lines read; `figures/keep.rs` lists what it keeps). [`records`] is the lean
//! summary of a Produce / Fetch partition's records that `stats` reads; [`quantiles`] is
//! `live --stats`' latency percentiles (exact, then a DDSketch). [`table`] builds the exchange
//! tables' rows as Arrow record batches (`table/lag.rs` follows each connection's Fetch
//! sessions for the consumer-lag rows); [`cut`] picks the packets `read -w` writes, by the
//! places reassembly gives them. [`batches`] groups a capture
//! range's packets by connection into the Spark job's shuffle records, and [`split`] finds
//! the first record of a capture's byte range. [`live`] (Linux) reads the packets
//! queued on the packet socket `live` captures with, in batches. The folder [`py`] is the thin PyO3
//! binding (`analyzer._core`), apart from the stages: `py/mod.rs` (the capture reader and
//! the stream of records), `py/figures.rs` (the walk's trees as Python fields), `py/json.rs`
//! (a field tree as the JSON text `read -f ndjson` writes), `py/quantiles.rs`, `py/table.rs`
//! (the tables' record batches through the Arrow PyCapsule interface), and, with the
//! cargo feature `probe` only, `py/probe.rs` (single checks callable from the Python
//! tests).

pub mod batches;
pub mod capture;
pub mod cut;
pub mod evidence;
pub mod figures;
pub mod frame;
pub mod kafka;
pub mod legacy;
#[cfg(target_os = "linux")]
pub mod live;
pub mod net;
pub mod pair;
pub mod quantiles;
pub mod records;
pub mod session;
#[cfg(unix)]
pub mod split;
#[cfg(feature = "tables")]
pub mod table;
pub mod tcp;
pub mod wire;

#[cfg(feature = "python")]
mod py;
