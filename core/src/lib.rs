//! kafkawire-sniff's native core: the packet path from capture bytes to per-direction
//! TCP stream events, handed to the Python front in batches.
//!
//! Stages, one module each: [`capture`] (pcap / pcapng / gzip records), [`net`] (link
//! layer, IPv4/IPv6, TCP), [`tcp`] (per-direction reassembly) and [`frame`] (Kafka
//! frames of a direction's stream). [`py`] is the thin PyO3 binding (`analyzer._core`).

pub mod capture;
pub mod frame;
pub mod net;
pub mod tcp;

#[cfg(feature = "python")]
mod py;
