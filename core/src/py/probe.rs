//! Probes of the header checks ([`crate::kafka`], [`crate::legacy`]) for the Python
//! tests, in plain Python values: `tests/test_core_headers.py` checks them against the
//! decoder and other oracles, and other tests read the checks through them. Each once
//! mirrored a Python function of `dissectors.header` or `dissectors.legacy` (taking and
//! returning what it did), proved equal to it at 8d05a88; most of those functions have
//! been removed since. Nothing else calls them.
//!
//! A request header is the tuple of `dissectors.header.RequestHeader`'s fields
//! `(api_key, api_version, correlation_id, client_id, header_len, header_version)`, which
//! compares equal to that NamedTuple.

use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;

use crate::kafka::{self, HeaderCheck, RequestHeader};
use crate::legacy;
use crate::py::HeaderTable;
use crate::records;

type HeaderTuple = (i16, i16, i32, Option<String>, usize, u8);

fn to_tuple(h: RequestHeader) -> HeaderTuple {
    (
        h.api_key,
        h.api_version,
        h.correlation_id,
        h.client_id,
        h.header_len,
        h.header_version,
    )
}

fn from_tuple(t: HeaderTuple) -> RequestHeader {
    RequestHeader {
        api_key: t.0,
        api_version: t.1,
        correlation_id: t.2,
        client_id: t.3,
        header_len: t.4,
        header_version: t.5,
    }
}

/// `kafka::request_header(data, partial, check)`: the header tuple, True (with check:
/// judged on a cut client_id), False (with check) or None (without).
#[pyfunction]
fn probe_request_header(
    py: Python<'_>,
    table: PyRef<'_, HeaderTable>,
    data: &[u8],
    partial: bool,
    check: bool,
) -> PyResult<PyObject> {
    match kafka::request_header(&table.0, data, partial, check) {
        HeaderCheck::Header(h) => to_tuple(h).into_py_any(py),
        HeaderCheck::Cut => true.into_py_any(py),
        HeaderCheck::Rejected if check => false.into_py_any(py),
        HeaderCheck::Rejected => Ok(py.None()),
    }
}

/// `kafka::sane_request(data, size)`: the header tuple or None.
#[pyfunction]
fn probe_sane_request(
    table: PyRef<'_, HeaderTable>,
    data: &[u8],
    size: usize,
) -> Option<HeaderTuple> {
    kafka::sane_request(&table.0, data, size).map(to_tuple)
}

/// `kafka::produce_acks` (what the Python pipeline read before the core paired), `h` a
/// header tuple.
#[pyfunction]
fn probe_produce_acks(data: &[u8], h: HeaderTuple) -> Option<i16> {
    kafka::produce_acks(data, &from_tuple(h))
}

/// The `mechanism` of a SaslHandshake v0/v1 request with header `h`.
#[pyfunction]
fn probe_sasl_handshake_mechanism(data: &[u8], h: HeaderTuple) -> Option<String> {
    kafka::sasl_handshake_mechanism(data, &from_tuple(h))
}

/// The int16 after a response header of `header_len` bytes.
#[pyfunction]
fn probe_response_error_code(data: &[u8], header_len: usize) -> Option<i16> {
    kafka::response_error_code(data, header_len)
}

/// `kafka::response_correlation_id`, as `dissectors.header.response_correlation_id(data)`.
#[pyfunction]
fn probe_response_correlation_id(data: &[u8]) -> Option<i32> {
    kafka::response_correlation_id(data)
}

/// `kafka::read_uvarint(data, pos)`: (value, next position), or None when malformed (the
/// value saturates at 2**64 - 1).
#[pyfunction]
fn probe_read_uvarint(data: &[u8], pos: usize) -> Option<(u64, usize)> {
    kafka::read_uvarint(data, pos).ok()
}

/// `kafka::skip_tagged_fields(data, pos)`: the position after the section, or None when
/// malformed.
#[pyfunction]
fn probe_skip_tagged_fields(data: &[u8], pos: usize) -> Option<usize> {
    kafka::skip_tagged_fields(data, pos).ok()
}

/// `text.isprintable()`.
#[pyfunction]
fn probe_is_printable(text: &str) -> bool {
    kafka::is_printable(text)
}

/// `data.decode("utf-8", "replace")`.
#[pyfunction]
fn probe_decode_utf8(data: &[u8]) -> String {
    kafka::decode_utf8(data)
}

/// The Unicode version the core's printable check follows.
#[pyfunction]
fn probe_unicode_version() -> (u64, u64, u64) {
    unicode_general_category::UNICODE_VERSION
}

/// `legacy::legacy_request_score(data, complete)`: 0..100.
#[pyfunction]
fn probe_legacy_request_score(data: &[u8], complete: bool) -> i32 {
    legacy::legacy_request_score(data, complete)
}

/// `legacy::legacy_request_plausible(head)`.
#[pyfunction]
fn probe_legacy_request_plausible(head: &[u8]) -> bool {
    legacy::legacy_request_plausible(head)
}

/// `legacy::legacy_response_plausible(head, rtype)`, rtype None for any type.
#[pyfunction]
#[pyo3(signature = (head, rtype = None))]
fn probe_legacy_response_plausible(head: &[u8], rtype: Option<i32>) -> bool {
    legacy::legacy_response_plausible(head, rtype)
}

/// `legacy::legacy_expects_response(rtype)`, as `dissectors.legacy.legacy_expects_response`.
#[pyfunction]
fn probe_legacy_expects_response(rtype: i32) -> bool {
    legacy::legacy_expects_response(rtype)
}

/// The lean records summary's tuple: (records, codec, crc_ok, truncated, crc_valid,
/// crc_invalid, malformed, notes, limits).
type SummaryTuple = (
    i64,
    &'static str,
    bool,
    bool,
    u32,
    u32,
    u32,
    Vec<String>,
    Vec<&'static str>,
);

/// `records::lean_summary(data, start, end, max_array_len, max_decompressed)`, what
/// `dissectors.records.decode_records` gives with `decode_records=False`
/// (tests/test_core_records.py compares them).
#[pyfunction]
fn probe_records_summary(
    py: Python<'_>,
    data: &[u8],
    start: usize,
    end: usize,
    max_array_len: i64,
    max_decompressed: i64,
) -> SummaryTuple {
    let s = py
        .allow_threads(|| records::lean_summary(data, start, end, max_array_len, max_decompressed));
    (
        s.records,
        s.codec,
        s.crc_ok,
        s.truncated,
        s.crc_valid,
        s.crc_invalid,
        s.malformed,
        s.notes,
        s.limits,
    )
}

/// Add the probes to the module (called from `py/mod.rs`' module init).
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(probe_request_header, m)?)?;
    m.add_function(wrap_pyfunction!(probe_sane_request, m)?)?;
    m.add_function(wrap_pyfunction!(probe_produce_acks, m)?)?;
    m.add_function(wrap_pyfunction!(probe_sasl_handshake_mechanism, m)?)?;
    m.add_function(wrap_pyfunction!(probe_response_error_code, m)?)?;
    m.add_function(wrap_pyfunction!(probe_response_correlation_id, m)?)?;
    m.add_function(wrap_pyfunction!(probe_read_uvarint, m)?)?;
    m.add_function(wrap_pyfunction!(probe_skip_tagged_fields, m)?)?;
    m.add_function(wrap_pyfunction!(probe_is_printable, m)?)?;
    m.add_function(wrap_pyfunction!(probe_decode_utf8, m)?)?;
    m.add_function(wrap_pyfunction!(probe_unicode_version, m)?)?;
    m.add_function(wrap_pyfunction!(probe_legacy_request_score, m)?)?;
    m.add_function(wrap_pyfunction!(probe_legacy_request_plausible, m)?)?;
    m.add_function(wrap_pyfunction!(probe_legacy_response_plausible, m)?)?;
    m.add_function(wrap_pyfunction!(probe_legacy_expects_response, m)?)?;
    m.add_function(wrap_pyfunction!(probe_records_summary, m)?)?;
    Ok(())
}
