//! The Python binding, `analyzer._core`: a capture reader and the stream of records the
//! stages make of it, crossed in batches (a chunk of packets in, a list of records out).
//!
//! Records are plain tuples, first element the kind:
//!
//! ```text
//! (3, conn, a_ip, a_port, b_ip, b_port, first_ts)                 a new connection
//! (4, conn, syn_seen, closed, closed_by, lost_from, last_ts)      its state changed
//! (5, conn, now, kind, status, header, legacy_type, correlation_id,
//!     request, response, note, mechanism, client_dir, protocol, last_ts, lean)
//!                                                                 an exchange
//! (6, conn, protocol, client_dir, responses_only, any_data, handed, detection, last_ts)
//!                                                                 it ended, after its last exchanges
//! (8, topic_id, name, now)                                        a tabled answer named a topic id
//! (0, conn, dir, offset, data, ts, index, now, now_ts)           stream bytes          } of a connection
//! (1, conn, dir, offset, length, ts, index, reason, now, now_ts)  bytes never captured  } handed to the
//! (2, conn, dir | None, reason, ts, index, now)                   a direction / it ended} front
//! ```
//!
//! An exchange's `kind` is "kafka" (`header` is the request header as
//! `(api_key, api_version, correlation_id, client_id, header_len, header_version)`),
//! "orphan", "not_request", "legacy" (`legacy_type`: the pre-0.8 request type) or
//! "sasl_token" (`mechanism`); `status` one of the front's exchange statuses; `request`
//! and `response` frames as `(dir, data, size, first_index, last_index, first_ts,
//! last_ts, offset, truncated)`; `note` its first note; `client_dir`, `protocol` and
//! `last_ts` the connection's as the exchange completed; `lean`, with a `Stream` made with
//! `figures=` (`py/figures.rs`), the lean trees of a 0.8+ exchange the schema covers:
//! `(request tree, its counts, response tree, its counts)` (None for a frame the capture
//! cut short, which the front decodes in full), else None.
//!
//! A `Stream` told to `keep_tables` builds the exchange tables' rows (`table/`) of the
//! exchanges its walk reads to their end, taken as Arrow record batches (`take_tables`,
//! `py/table.rs`), and hands only the other exchanges as records (and those of the API keys
//! it was asked to hand too, as kind 7: an exchange record the tables have); an ended connection's
//! `last_ts` is then its last time as the latest exchange taken told it (None when a record
//! handed on since told it).
//!
//! A connection whose first bytes in a direction are a TLS record is handed to the front:
//! its stream events come as kinds 0-2, and the front gives the plaintext back
//! (`Stream.plain`), or ignores it (`Stream.ignore`), and ends it (`Stream.end`). A
//! `Stream` made without `apis` hands every connection over: the reassembler's events
//! alone, for tests and tools of that stage.
//!
//! `conn` is the connection's id; `ts` and `index` those of the packet that carried the
//! bytes; `now` and `now_ts` those of the packet being handled when the record was made
//! (it is the connection's latest packet: the bytes of an earlier one may be delivered
//! only now). At the end of the capture `now` is 1 << 62 (and `now_ts` means nothing:
//! the connection's `Update` before its end tells its last time). A connection's times
//! after its end are not reported.

pub(crate) mod figures;
pub(crate) mod json;
#[cfg(feature = "probe")]
mod probe;
pub(crate) mod quantiles;
pub(crate) mod table;

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};
use pyo3::IntoPyObjectExt;

use crate::batches::{self, Batcher, ConnKey};
use crate::capture::CaptureReader;
use crate::frame::Frame;
use crate::kafka::ApiTable;
use crate::net;
use crate::pair::{Forced, Kind, Out, PairConfig, Status};
use crate::py::figures::{Figures, Side, Table};
use crate::session::{Session, SessionConfig};
use crate::table::TableBuilder;
use crate::tcp::Config;

create_exception!(
    _core,
    CaptureError,
    PyException,
    "The capture cannot be read (a one-line message naming the file)."
);

/// One capture file (pcap, pcapng, either gzip-compressed). Iterate it for packets
/// (tuples laid out as `analyzer.model.Packet`: index, ts, linktype, data, orig_len), or hand it to
/// `Stream.feed_capture`, which reads it without making a Python object per packet.
#[pyclass(module = "analyzer._core", unsendable)]
pub struct Capture {
    reader: CaptureReader,
}

fn capture_error(e: crate::capture::CaptureError) -> PyErr {
    CaptureError::new_err(e.0)
}

/// A packet as the Python front reads it: `(index, ts, linktype, data, orig_len)`, the
/// layout of `analyzer.model.Packet`.
fn packet_record<'py>(
    py: Python<'py>,
    p: &crate::capture::Packet<'_>,
) -> PyResult<Bound<'py, PyAny>> {
    (
        p.index,
        p.ts,
        p.linktype,
        PyBytes::new(py, p.data),
        p.orig_len,
    )
        .into_bound_py_any(py)
}

#[pymethods]
impl Capture {
    #[new]
    #[pyo3(signature = (path, strict = false))]
    fn new(path: &str, strict: bool) -> PyResult<Self> {
        Ok(Capture {
            reader: CaptureReader::open(path, strict).map_err(capture_error)?,
        })
    }

    #[getter]
    fn path(&self) -> &str {
        &self.reader.path
    }
    #[getter]
    fn format(&self) -> &str {
        self.reader.format
    }
    #[getter]
    fn compressed(&self) -> bool {
        self.reader.compressed
    }
    #[getter]
    fn linktypes(&self) -> Vec<i32> {
        self.reader.linktypes.clone()
    }
    #[getter]
    fn snaplen(&self) -> u32 {
        self.reader.snaplen
    }
    /// times finer than microseconds (a nanosecond pcap; a pcapng interface read so far)
    #[getter]
    fn fine_times(&self) -> bool {
        self.reader.fine_times()
    }
    #[getter]
    fn size(&self) -> u64 {
        self.reader.size
    }
    /// packets read so far
    #[getter]
    fn packets(&self) -> u64 {
        self.reader.packets
    }
    /// why reading stopped early ("capture ends inside packet 12"), or None
    #[getter]
    fn truncated(&self) -> Option<String> {
        self.reader.truncated.clone()
    }
    #[getter]
    fn finished(&self) -> bool {
        self.reader.finished
    }
    /// oddities kept and counted: "caplen > orig_len", "timestamp went backwards", ...
    #[getter]
    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in self.reader.counters() {
            d.set_item(k, v)?;
        }
        Ok(d)
    }
    /// bytes of the file consumed so far (compressed bytes for gzip), for a progress bar
    fn bytes_read(&self) -> u64 {
        self.reader.bytes_read()
    }

    /// Up to `n` packets (tuples, as iterating gives them); an empty list at the end.
    fn read<'py>(&mut self, py: Python<'py>, n: usize) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for _ in 0..n {
            match self.reader.next_packet().map_err(capture_error)? {
                None => break,
                Some(p) => out.append(packet_record(py, &p)?)?,
            }
        }
        Ok(out)
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        match self.reader.next_packet().map_err(capture_error)? {
            None => Ok(None),
            Some(p) => packet_record(py, &p).map(Some),
        }
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&mut self, _args: &Bound<'_, pyo3::types::PyTuple>) {
        self.close();
    }

    /// Release the file (reading ends).
    fn close(&mut self) {
        self.reader.close();
    }
}

/// Open a capture: `Capture(path, strict)`.
#[pyfunction]
#[pyo3(signature = (path, strict = false))]
fn open_capture(path: &str, strict: bool) -> PyResult<Capture> {
    Capture::new(path, strict)
}

/// `now` of the events made at the end of the capture (`analyzer._core.END_OF_CAPTURE`).
use crate::pair::END_OF_CAPTURE;

/// A frame as the front's `Frame` fields after `conn`:
/// `(dir, data, size, first_index, last_index, first_ts, last_ts, offset, truncated)`.
fn frame_tuple<'py>(py: Python<'py>, f: &Frame) -> PyResult<Bound<'py, PyAny>> {
    Ok((
        f.dir,
        PyBytes::new(py, &f.data),
        f.size,
        f.first_index,
        f.last_index,
        f.first_ts,
        f.last_ts,
        f.offset,
        f.truncated,
    )
        .into_pyobject(py)?
        .into_any())
}

fn opt_frame<'py>(py: Python<'py>, f: &Option<Frame>) -> PyResult<Bound<'py, PyAny>> {
    match f {
        Some(f) => frame_tuple(py, f),
        None => Ok(py.None().into_bound(py)),
    }
}

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Kafka => "kafka",
        Kind::Orphan => "orphan",
        Kind::NotRequest => "not_request",
        Kind::Legacy => "legacy",
        Kind::SaslToken => "sasl_token",
    }
}

/// The stage's output as the tuples the module docstring lists.
fn records<'py>(
    py: Python<'py>,
    out: Vec<Out>,
    figures: Option<&Py<Figures>>,
    mut table: Option<&mut TableBuilder>,
    hand: &Hand,
) -> PyResult<Bound<'py, PyList>> {
    let mut v: Vec<Bound<'py, PyAny>> = Vec::with_capacity(out.len());
    for o in out {
        // (a stream that keeps tables takes the rows of the exchanges its walk reads; the
        // connection's last time such an exchange told goes with its end)
        let mut last_ts = None;
        // (an exchange tabled and handed too: kind 7, not 5)
        let mut tabled = false;
        if let Some(tb) = table.as_deref_mut() {
            match &o {
                Out::Open(c) => tb.open(c),
                Out::Update(c) => tb.told(c.id),
                Out::Exchange(r) => {
                    if let Some(fig) = figures {
                        let took = tb.exchange(&mut fig.borrow_mut(py).inner, r);
                        // (the topic ids its answer named, told as it read them)
                        if let Some(told) = tb.learnt.as_mut() {
                            for (id, name) in told.drain(..) {
                                v.push((8u8, id, name, r.now).into_pyobject(py)?.into_any());
                            }
                        }
                        if let Some(failed) = took {
                            let key = r.header.as_ref().map(|h| h.api_key);
                            if !key.is_some_and(|k| hand.takes(k, failed)) {
                                continue;
                            }
                            tabled = true;
                        }
                    }
                    tb.told(r.conn);
                }
                Out::Closed(c) => last_ts = tb.closed(c.conn),
                _ => {}
            }
        }
        let t = match o {
            Out::Data {
                conn,
                dir,
                offset,
                data,
                ts,
                index,
                now,
                now_ts,
            } => (
                0u8,
                conn,
                dir,
                offset,
                PyBytes::new(py, &data),
                ts,
                index,
                now,
                now_ts,
            )
                .into_pyobject(py)?
                .into_any(),
            Out::Gap {
                conn,
                dir,
                offset,
                length,
                ts,
                index,
                reason,
                now,
                now_ts,
            } => (
                1u8, conn, dir, offset, length, ts, index, reason, now, now_ts,
            )
                .into_pyobject(py)?
                .into_any(),
            Out::End {
                conn,
                dir,
                reason,
                ts,
                index,
                now,
            } => (2u8, conn, dir, reason, ts, index, now)
                .into_pyobject(py)?
                .into_any(),
            Out::Open(c) => (
                3u8,
                c.id,
                c.a.0.to_string(),
                c.a.1,
                c.b.0.to_string(),
                c.b.1,
                c.first_ts,
            )
                .into_pyobject(py)?
                .into_any(),
            Out::Update(c) => (
                4u8,
                c.id,
                c.syn_seen,
                c.closed,
                c.closed_by,
                c.lost_from,
                c.last_ts,
            )
                .into_pyobject(py)?
                .into_any(),
            Out::Exchange(r) => {
                let header = match &r.header {
                    Some(h) => (
                        h.api_key,
                        h.api_version,
                        h.correlation_id,
                        h.client_id.as_deref(),
                        h.header_len,
                        h.header_version,
                    )
                        .into_pyobject(py)?
                        .into_any(),
                    None => py.None().into_bound(py),
                };
                // (sixteen items: one tuple made from them, not two joined)
                let items: [Bound<'py, PyAny>; 16] = [
                    (if tabled { 7u8 } else { 5u8 })
                        .into_pyobject(py)?
                        .into_any(),
                    r.conn.into_pyobject(py)?.into_any(),
                    r.now.into_pyobject(py)?.into_any(),
                    PyString::intern(py, kind_name(r.kind)).into_any(),
                    PyString::intern(py, r.status.name()).into_any(),
                    header,
                    r.legacy_type.into_pyobject(py)?.into_any(),
                    r.correlation_id.into_pyobject(py)?.into_any(),
                    opt_frame(py, &r.request)?,
                    opt_frame(py, &r.response)?,
                    r.note.as_deref().into_pyobject(py)?.into_any(),
                    r.mechanism.as_deref().into_pyobject(py)?.into_any(),
                    r.client_dir.into_pyobject(py)?.into_any(),
                    r.protocol.name().into_pyobject(py)?.into_any(),
                    r.last_ts.into_pyobject(py)?.into_any(),
                    lean(py, figures, &r)?,
                ];
                pyo3::types::PyTuple::new(py, items)?.into_any()
            }
            Out::Closed(c) => (
                6u8,
                c.conn,
                c.protocol.name(),
                c.client_dir,
                c.responses_only,
                c.any_data,
                c.handed,
                c.detection,
                last_ts,
            )
                .into_pyobject(py)?
                .into_any(),
        };
        v.push(t);
    }
    PyList::new(py, v)
}

/// The lean trees of a 0.8+ exchange when the stream walks them (`figures`): `(request
/// tree, its counts, response tree or None, its counts or None)`, or None (no walk, an API
/// or version the schema does not know). A frame the capture cut short is left to the
/// front's full decoder (None in its place).
fn lean<'py>(
    py: Python<'py>,
    figures: Option<&Py<Figures>>,
    r: &crate::pair::ExchangeRec,
) -> PyResult<Bound<'py, PyAny>> {
    let none = || py.None().into_bound(py);
    let (Some(fig), Some(h), Some(req)) = (figures, &r.header, &r.request) else {
        return Ok(none());
    };
    let mut fig = fig.borrow_mut(py);
    if !fig.inner.covers(h.api_key, h.api_version) {
        return Ok(none());
    }
    let (mut rq, mut rs) = ((none(), none()), (none(), none()));
    // (a tree whose consumer-protocol payloads have bad bytes is the full decoder's too)
    if !req.truncated {
        let t = fig.inner.request(&req.data, h.header_len);
        if !t.full {
            rq = fig.result(py, &t, Table::of(h.api_key, Side::Request))?;
        }
    }
    if let Some(resp) = r.response.as_ref().filter(|f| !f.truncated) {
        if let Some(t) = fig
            .inner
            .response(&resp.data, h.api_key, h.api_version)
            .filter(|t| !t.full)
        {
            rs = fig.result(py, &t, Table::of(h.api_key, Side::Response))?;
        }
    }
    Ok((rq.0, rq.1, rs.0, rs.1).into_pyobject(py)?.into_any())
}

/// The tabled exchanges a stream hands as records too: those of the API keys `always`,
/// and those of `failed` when unanswered or answered with an error code.
#[derive(Debug, Default)]
struct Hand {
    always: Vec<i16>,
    failed: Vec<i16>,
}

impl Hand {
    fn takes(&self, key: i16, failed: bool) -> bool {
        self.always.contains(&key) || (failed && self.failed.contains(&key))
    }
}

/// The net, tcp and Kafka stages over a capture or packets handed in (a
/// [`Session`]): records in batches, with the counts that account for every packet,
/// frame and skipped byte.
#[pyclass(module = "analyzer._core")]
pub struct Stream {
    s: Session,
    figures: Option<Py<Figures>>,
    table: Option<TableBuilder>,
    /// the tabled exchanges handed as records too (`keep_tables`' `hand` and `hand_failed`)
    hand: Hand,
}

impl Stream {
    fn drain<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        records(
            py,
            self.s.take(),
            self.figures.as_ref(),
            self.table.as_mut(),
            &self.hand,
        )
    }
}

#[pymethods]
impl Stream {
    #[new]
    #[pyo3(signature = (ports = vec![9092], autodetect = true, ids_from_index = false, share = None,
                        max_buffer = 4 * 1024 * 1024, overlap_window = 32 * 1024, max_closed = 10_000,
                        max_total_buffer = 256 * 1024 * 1024, apis = None, protocol = "auto",
                        max_frame_size = crate::frame::DEFAULT_MAX_FRAME_SIZE, figures = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        ports: Vec<u16>,
        autodetect: bool,
        ids_from_index: bool,
        share: Option<(u32, u32)>,
        max_buffer: u64,
        overlap_window: u64,
        max_closed: usize,
        max_total_buffer: u64,
        apis: Option<PyRef<'_, HeaderTable>>,
        protocol: &str,
        max_frame_size: u32,
        figures: Option<Py<Figures>>,
    ) -> PyResult<Self> {
        let forced = match protocol {
            "auto" => Forced::Auto,
            "legacy" => Forced::Legacy,
            "modern" => Forced::Modern,
            other => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "protocol {other:?}: auto, legacy or modern"
                )))
            }
        };
        let hand_all = apis.is_none();
        let s = Session::new(SessionConfig {
            pair: PairConfig {
                ports: ports.clone(),
                forced,
                max_frame_size,
                schema: apis.as_ref().and_then(|t| t.1.clone()),
                table: apis.map(|t| t.0.clone()).unwrap_or_default(),
            },
            ports,
            autodetect,
            share,
            tcp: Config {
                max_buffer,
                overlap_window,
                max_closed,
                max_total_buffer,
                ids_from_index,
            },
            hand_all,
        })
        .map_err(pyo3::exceptions::PyValueError::new_err)?;
        Ok(Stream {
            s,
            figures,
            table: None,
            hand: Hand::default(),
        })
    }

    /// Read up to `max_packets` packets of `cap` through the stages: their events, or None
    /// once the capture is read to its end (or stopped at damage: `cap.truncated`).
    fn feed_capture<'py>(
        &mut self,
        py: Python<'py>,
        cap: &mut Capture,
        max_packets: usize,
    ) -> PyResult<Option<Bound<'py, PyList>>> {
        let mut read = 0;
        while read < max_packets {
            let Some(p) = cap.reader.next_packet().map_err(capture_error)? else {
                break;
            };
            read += 1;
            self.s.packet(p.index, p.ts, p.linktype, p.data, p.orig_len);
        }
        if read == 0 {
            return Ok(None);
        }
        self.drain(py).map(Some)
    }

    /// `read -w`'s second pass (`crate::cut`): the numbers of the packets of `cap` that carry
    /// the selected `frames` ((connection, direction, start, end) stream ranges) or the
    /// handshakes and ends of their connections, `tls` the decrypted TLS connections with
    /// the last packet of their selected frames; on a stream made as the first pass's was,
    /// reading the capture from its start. Its records are dropped.
    fn cut(
        &mut self,
        cap: &mut Capture,
        frames: Vec<(u64, u8, i64, i64)>,
        tls: Vec<(u64, u64)>,
    ) -> PyResult<Vec<u64>> {
        let mut cut = crate::cut::Cut::new(&frames, &tls);
        let mut kept = Vec::new();
        if cut.is_empty() {
            while cap.reader.next_packet().map_err(capture_error)?.is_some() {}
            return Ok(kept);
        }
        let mut n = 0u32;
        while let Some(p) = cap.reader.next_packet().map_err(capture_error)? {
            self.s.packet(p.index, p.ts, p.linktype, p.data, p.orig_len);
            if let Some(place) = self.s.ra.last_place.take() {
                if cut.keep(&place, p.index) {
                    kept.push(p.index);
                }
            }
            n += 1;
            if n.is_multiple_of(4096) {
                drop(self.s.take());
            }
        }
        drop(self.s.take());
        Ok(kept)
    }

    /// Packets handed in (live capture, Spark): tuples `(index, ts, linktype, data, orig_len)`.
    fn feed<'py>(
        &mut self,
        py: Python<'py>,
        packets: Vec<(u64, f64, i32, Vec<u8>, u32)>,
    ) -> PyResult<Bound<'py, PyList>> {
        for (index, ts, lt, data, orig) in &packets {
            self.s.packet(*index, *ts, *lt, data, *orig);
        }
        self.drain(py)
    }

    /// A batch of the Spark job's shuffle (`ConnBatcher.read`'s columns), as `feed` takes
    /// its packets.
    #[allow(clippy::too_many_arguments)] // (the batch's six columns, as Python hands them)
    fn feed_batch<'py>(
        &mut self,
        py: Python<'py>,
        index: &[u8],
        ts: &[u8],
        linktype: &[u8],
        orig_len: &[u8],
        ends: &[u8],
        blob: &[u8],
    ) -> PyResult<Bound<'py, PyList>> {
        let packets = batches::packets(index, ts, linktype, orig_len, ends, blob)
            .map_err(pyo3::exceptions::PyValueError::new_err)?;
        for (index, ts, lt, data, orig) in packets {
            self.s.packet(index, ts, lt, data, orig);
        }
        self.drain(py)
    }

    /// The packets queued on a live capture's socket through the stages, without a Python
    /// object per packet: `reader.read`'s packets numbered from `first_index`, the
    /// interface's `linktype`. Returns how many were read and their events.
    #[cfg(target_os = "linux")]
    #[pyo3(signature = (reader, linktype, first_index, max_packets = 256, max_bytes = 4 * 1024 * 1024))]
    fn feed_reader<'py>(
        &mut self,
        py: Python<'py>,
        reader: &mut PacketReader,
        linktype: i32,
        first_index: u64,
        max_packets: usize,
        max_bytes: usize,
    ) -> PyResult<(usize, Bound<'py, PyList>)> {
        reader.check_open()?;
        let mut index = first_index;
        let n = reader
            .inner
            .read(max_packets, max_bytes, |p| {
                self.s.packet(index, p.ts, linktype, p.data, p.orig_len);
                index += 1;
            })
            .map_err(errno_error)?;
        Ok((n, self.drain(py)?))
    }

    /// End of capture: flush every open connection (at `ts`, else each one's last packet).
    #[pyo3(signature = (ts = None))]
    fn finish<'py>(&mut self, py: Python<'py>, ts: Option<f64>) -> PyResult<Bound<'py, PyList>> {
        // (the reassembler ends every connection still open: pairing closes each at its end)
        self.s.finish(ts);
        self.drain(py)
    }

    /// Plaintext of a handed connection (TLS the front decrypts), at plaintext stream
    /// offset `offset` of direction `dir`; `client_dir` as the front knows it.
    #[pyo3(signature = (conn, dir, offset, data, ts, index, now, client_dir = None))]
    #[allow(clippy::too_many_arguments)]
    fn plain<'py>(
        &mut self,
        py: Python<'py>,
        conn: u64,
        dir: u8,
        offset: i64,
        data: &[u8],
        ts: f64,
        index: u64,
        now: u64,
        client_dir: Option<u8>,
    ) -> PyResult<Bound<'py, PyList>> {
        self.s
            .plain(conn, dir, offset, data, ts, index, now, client_dir);
        self.drain(py)
    }

    /// A handed connection the front does not analyse (TLS not decrypted).
    #[pyo3(signature = (conn, client_dir = None))]
    fn ignore(&mut self, conn: u64, client_dir: Option<u8>) {
        self.s.ignore(conn, client_dir);
    }

    /// A handed connection's direction (or, `dir` None, the whole connection) ended.
    fn end<'py>(
        &mut self,
        py: Python<'py>,
        conn: u64,
        dir: Option<u8>,
        reason: &str,
        now: u64,
    ) -> PyResult<Bound<'py, PyList>> {
        self.s.end(conn, dir, reason_str(reason), now);
        self.drain(py)
    }

    /// Requests waiting longer than `timeout` seconds at time `now` become unanswered.
    fn expire<'py>(
        &mut self,
        py: Python<'py>,
        now: f64,
        timeout: f64,
    ) -> PyResult<Bound<'py, PyList>> {
        self.s.expire(now, timeout);
        self.drain(py)
    }

    /// From now on, build the exchange tables (`table/`) of the exchanges the walk reads
    /// to their end, in the capture named `capture`, and hand only the others as records
    /// (a stream made with `figures=`); the tabled exchanges of the API keys `hand` are
    /// handed too, as records of kind 7 (the front reads them, the tables have them), and
    /// those of `hand_failed` when unanswered or answered with an error code; with
    /// `tell_topic_ids`, each topic id a tabled answer names comes as a record of kind 8.
    #[pyo3(signature = (capture, hand = vec![], tell_topic_ids = false, hand_failed = vec![]))]
    fn keep_tables(
        &mut self,
        py: Python<'_>,
        capture: &str,
        hand: Vec<i16>,
        tell_topic_ids: bool,
        hand_failed: Vec<i16>,
    ) -> PyResult<()> {
        let Some(fig) = &self.figures else {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "a stream keeps tables when made with figures=",
            ));
        };
        let names = fig.borrow(py).error_table().clone();
        let mut tb = TableBuilder::new(capture, names);
        if tell_topic_ids {
            tb.learnt = Some(Vec::new());
        }
        self.table = Some(tb);
        self.hand = Hand {
            always: hand,
            failed: hand_failed,
        };
        Ok(())
    }

    /// Rows of `exchanges` built and not taken yet (0 without `keep_tables`).
    #[getter]
    fn table_rows(&self) -> usize {
        self.table.as_ref().map_or(0, |t| t.tables.len())
    }

    /// The rows built since the last call, as a record batch of each table the core
    /// builds, in `analyzer.tables.CORE_TABLES`' order (exchanges, partitions, batches, lag).
    fn take_tables(&mut self) -> PyResult<Vec<table::ArrowBatch>> {
        let Some(t) = self.table.as_mut() else {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "keep_tables was not called",
            ));
        };
        Ok(t.tables.take().into_iter().map(table::ArrowBatch).collect())
    }

    /// The topic ids the tables' rows could not name (no answer read before named them):
    /// (id as text, first packet, last packet) each.
    fn topic_misses(&self) -> Vec<(String, u64, u64)> {
        self.table.as_ref().map_or_else(Vec::new, |t| t.misses())
    }

    /// What the tables took so far, for the run's summary: `statuses` (status -> exchanges),
    /// and the walks' counts `malformed`, `crc_valid`, `crc_invalid`, `trailing`, `limits`
    /// (limit -> times hit).
    #[getter]
    fn tables_taken<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        let t = self
            .table
            .as_ref()
            .map(|t| t.taken.clone())
            .unwrap_or_default();
        let statuses = PyDict::new(py);
        for s in Status::ALL {
            let n = t.statuses[s as usize];
            if n > 0 {
                statuses.set_item(s.name(), n)?;
            }
        }
        d.set_item("statuses", statuses)?;
        d.set_item("malformed", t.malformed)?;
        d.set_item("crc_valid", t.crc_valid)?;
        d.set_item("crc_invalid", t.crc_invalid)?;
        d.set_item("trailing", t.trailing)?;
        d.set_item(
            "limits",
            t.limits
                .into_iter()
                .collect::<std::collections::BTreeMap<_, _>>(),
        )?;
        Ok(d)
    }

    /// The Kafka stages' counts: connections, request_frames, response_frames,
    /// truncated_frames, gaps, gap_bytes, over_max_frames, and the dicts bytes_skipped
    /// and notes.
    #[getter]
    fn kafka_counts<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = &self.s.pair.counts;
        let d = PyDict::new(py);
        d.set_item("connections", c.connections)?;
        d.set_item("request_frames", c.request_frames)?;
        d.set_item("response_frames", c.response_frames)?;
        d.set_item("truncated_frames", c.truncated_frames)?;
        d.set_item("gaps", c.gaps)?;
        d.set_item("gap_bytes", c.gap_bytes)?;
        d.set_item("over_max_frames", c.over_max_frames)?;
        d.set_item("bytes_skipped", c.bytes_skipped.clone())?;
        d.set_item("notes", c.notes.clone())?;
        Ok(d)
    }

    /// packets fed and counted (a share's own packets only)
    #[getter]
    fn packets(&self) -> u64 {
        self.s.tally.packets
    }
    #[getter]
    fn first_ts(&self) -> Option<f64> {
        self.s.tally.first_ts
    }
    #[getter]
    fn last_ts(&self) -> Option<f64> {
        self.s.tally.last_ts
    }
    /// packets that gave no TCP segment, by reason
    #[getter]
    fn skips(&self) -> std::collections::BTreeMap<String, u64> {
        self.s.tally.skips.clone()
    }
    /// reassembly's counters: "out of order", "retransmission", "lost segments", ...
    #[getter]
    fn counters(&self) -> std::collections::BTreeMap<String, u64> {
        self.s
            .ra
            .stats
            .counters
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect()
    }
    #[getter]
    fn notes(&self) -> Vec<String> {
        self.s.ra.stats.notes.clone()
    }
    #[getter]
    fn conn_count(&self) -> u64 {
        self.s.ra.stats.conn_count
    }
    /// with ids_from_index: every connection's first packet number, in order
    #[getter]
    fn first_indexes(&self) -> Vec<u64> {
        self.s.ra.stats.first_indexes.clone()
    }
    #[getter]
    fn open_conns(&self) -> usize {
        self.s.ra.open_count()
    }
}

/// The packets queued on a packet socket the caller opened (`analyzer.live` opens it
/// with scapy: interface, kernel BPF filter, buffer, `SO_TIMESTAMPNS` and `PACKET_AUXDATA`
/// on), read in batches of `recvmmsg` without blocking (`crate::live`). The reader
/// borrows the descriptor: close the reader before the socket.
#[cfg(target_os = "linux")]
#[pyclass(module = "analyzer._core", unsendable)]
pub struct PacketReader {
    inner: crate::live::Reader,
}

#[cfg(target_os = "linux")]
fn errno_error(e: nix::errno::Errno) -> PyErr {
    pyo3::exceptions::PyOSError::new_err((e as i32, crate::live::strerror(e)))
}

#[cfg(target_os = "linux")]
impl PacketReader {
    fn check_open(&self) -> PyResult<()> {
        if self.inner.closed() {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "read of a closed PacketReader",
            ));
        }
        Ok(())
    }
}

#[cfg(target_os = "linux")]
#[pymethods]
impl PacketReader {
    #[new]
    #[pyo3(signature = (fd, snaplen, skip_outgoing = false, vlan_tags = true))]
    fn new(fd: i32, snaplen: usize, skip_outgoing: bool, vlan_tags: bool) -> PyResult<Self> {
        use crate::live::OpenError;
        match crate::live::Reader::new(fd, snaplen, skip_outgoing, vlan_tags) {
            Ok(inner) => Ok(PacketReader { inner }),
            Err(OpenError::Sys(e)) => Err(pyo3::exceptions::PyOSError::new_err((
                e as i32,
                format!(
                    "cannot read packets from fd {fd}: {}",
                    crate::live::strerror(e)
                ),
            ))),
            Err(e) => Err(pyo3::exceptions::PyValueError::new_err(format!(
                "cannot read packets from fd {fd}: {e}"
            ))),
        }
    }

    /// The packets queued now, as `(ts, data, orig_len)`: until none is left, or
    /// `max_packets` of them, or `max_bytes` bytes (passed by at most one system call's
    /// worth). `[]` when none is queued; OSError when the socket fails.
    #[pyo3(signature = (max_packets = 256, max_bytes = 4 * 1024 * 1024))]
    fn read<'py>(
        &mut self,
        py: Python<'py>,
        max_packets: usize,
        max_bytes: usize,
    ) -> PyResult<Bound<'py, PyList>> {
        self.check_open()?;
        let mut out: Vec<Bound<'py, PyAny>> = Vec::new();
        let mut failed = None;
        self.inner
            .read(max_packets, max_bytes, |p| {
                match (p.ts, PyBytes::new(py, p.data), p.orig_len).into_pyobject(py) {
                    Ok(t) => out.push(t.into_any()),
                    Err(e) => failed = Some(e),
                }
            })
            .map_err(errno_error)?;
        if let Some(e) = failed {
            return Err(e);
        }
        PyList::new(py, out)
    }

    /// Forget the descriptor (the caller closes the socket); reads then raise ValueError.
    fn close(&mut self) {
        self.inner.close();
    }

    #[getter]
    fn closed(&self) -> bool {
        self.inner.closed()
    }
    #[getter]
    fn fd(&self) -> i32 {
        self.inner.fd()
    }
    #[getter]
    fn snaplen(&self) -> usize {
        self.inner.snaplen()
    }
    /// packets one system call reads at most
    #[getter]
    fn batch(&self) -> usize {
        self.inner.slots()
    }
    /// packets, bytes, truncated (longer than the snap length), outgoing (copies skipped),
    /// clock_times (packets without a kernel timestamp), vlan_tags (put back), calls
    #[getter]
    fn counts<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = &self.inner.counts;
        let d = PyDict::new(py);
        d.set_item("packets", c.packets)?;
        d.set_item("bytes", c.bytes)?;
        d.set_item("truncated", c.truncated)?;
        d.set_item("outgoing", c.outgoing)?;
        d.set_item("clock_times", c.clock_times)?;
        d.set_item("vlan_tags", c.vlan_tags)?;
        d.set_item("calls", c.calls)?;
        Ok(d)
    }
}

/// The reasons a connection ends for, as the static strings the stages keep.
fn reason_str(reason: &str) -> &'static str {
    match reason {
        "fin" => "fin",
        "rst" => "rst",
        "end of capture" => "end of capture",
        "reused" => "reused",
        _ => "ended",
    }
}

/// What framing and pairing read of the schema: each API's newest version and header
/// versions (`kafka::ApiTable`), built once from `(api_key, max_version, header_versions)`
/// entries (`dissectors.header.api_table`) and handed to every `Stream` a process makes;
/// with `apis` (`dissectors.schema.APIS`' values) the APIs whose bodies judge the
/// evidence of a connection on no `--port` port (`crate::evidence`).
#[pyclass(module = "analyzer._core", frozen)]
pub struct HeaderTable(
    pub(crate) ApiTable,
    pub(crate) Option<std::sync::Arc<std::sync::Mutex<crate::figures::Figures>>>,
);

#[pymethods]
impl HeaderTable {
    #[new]
    #[pyo3(signature = (entries, apis = None))]
    fn new(
        entries: Vec<(i16, i16, i16, Vec<u8>)>,
        apis: Option<Vec<Bound<'_, PyAny>>>,
    ) -> PyResult<Self> {
        let table =
            ApiTable::new(entries).map_err(|e| pyo3::exceptions::PyValueError::new_err(e.0))?;
        let schema = match apis {
            Some(apis) => {
                let apis = apis
                    .iter()
                    .map(crate::py::figures::api_def)
                    .collect::<PyResult<Vec<_>>>()?;
                Some(std::sync::Arc::new(std::sync::Mutex::new(
                    crate::evidence::walker(apis),
                )))
            }
            None => None,
        };
        Ok(HeaderTable(table, schema))
    }
}

/// A capture range's TCP packets grouped by connection into columnar batches, the Spark
/// job's shuffle records (`crate::batches`), read from a `Capture` without a Python
/// object per packet.
#[pyclass(module = "analyzer._core", unsendable)]
pub struct ConnBatcher {
    inner: Batcher,
    first_index: u64,
    done: bool,
}

#[pymethods]
impl ConnBatcher {
    /// `first_index` is added to the capture's packet numbers; a batch is sealed once its
    /// packets hold `batch_bytes`; `keys`: only those connections' packets.
    #[new]
    #[pyo3(signature = (first_index, batch_bytes, keys = None))]
    fn new(first_index: u64, batch_bytes: usize, keys: Option<Vec<ConnKey>>) -> Self {
        ConnBatcher {
            inner: Batcher::new(batch_bytes, keys.as_deref()),
            first_index,
            done: false,
        }
    }

    /// Up to `max_packets` of `cap` read: the batches sealed meanwhile (at the end of the
    /// capture, every batch still open), each `((ip, port, ip, port, first packet number),
    /// (index, ts, linktype, orig_len, ends, blob))`; None once the capture was read.
    fn read<'py>(
        &mut self,
        py: Python<'py>,
        cap: &mut Capture,
        max_packets: usize,
    ) -> PyResult<Option<Bound<'py, PyList>>> {
        if self.done {
            return Ok(None);
        }
        let mut read = 0;
        while read < max_packets {
            let Some(p) = cap.reader.next_packet().map_err(capture_error)? else {
                self.done = true;
                self.inner.finish();
                break;
            };
            read += 1;
            let index = self.first_index + p.index;
            self.inner
                .packet(index, p.ts, p.linktype, p.data, p.orig_len);
        }
        let out = PyList::empty(py);
        for ((a, ap, b, bp), first, c) in self.inner.sealed.drain(..) {
            let cols = (
                PyBytes::new(py, &c.index),
                PyBytes::new(py, &c.ts),
                PyBytes::new(py, &c.linktype),
                PyBytes::new(py, &c.orig_len),
                PyBytes::new(py, &c.ends),
                PyBytes::new(py, &c.blob),
            );
            out.append(((a, ap, b, bp, first), cols))?;
        }
        Ok(Some(out))
    }

    /// packets read
    #[getter]
    fn packets(&self) -> u64 {
        self.inner.tally.packets
    }
    #[getter]
    fn first_ts(&self) -> Option<f64> {
        self.inner.tally.first_ts
    }
    #[getter]
    fn last_ts(&self) -> Option<f64> {
        self.inner.tally.last_ts
    }
    /// packets that gave no TCP segment, by reason (as `Stream.skips`)
    #[getter]
    fn skips(&self) -> std::collections::BTreeMap<String, u64> {
        self.inner.tally.skips.clone()
    }
}

/// One packet through the net stage: `(src_ip, src_port, dst_ip, dst_port, seq, ack,
/// flags, payload, missing)`, or the reason it is no TCP segment ("not IP", ...).
#[pyfunction]
fn parse_packet(py: Python<'_>, linktype: i32, data: &[u8], orig_len: u32) -> PyResult<PyObject> {
    Ok(match net::parse(linktype, data, orig_len) {
        Ok(s) => {
            let payload = PyBytes::new(py, s.payload);
            (
                s.src.0.to_string(),
                s.src.1,
                s.dst.0.to_string(),
                s.dst.1,
                s.seq,
                s.ack,
                s.flags,
                payload,
                s.missing,
            )
                .into_pyobject(py)?
                .into_any()
                .unbind()
        }
        Err(skip) => skip.reason().into_pyobject(py)?.into_any().unbind(),
    })
}

/// A record batch as the `batches` table's rows read it: (the index of its span,
/// producer_id, producer_epoch, base_sequence, records, bytes, bytes before compression or
/// None, codec, base_timestamp, max_timestamp, transactional, control).
type BatchTuple = (
    usize,
    i64,
    i16,
    i32,
    i32,
    usize,
    Option<usize>,
    &'static str,
    i64,
    i64,
    bool,
    bool,
);

/// The v2 batches of a Produce request's records, `spans` the `(offset, length)` in `data`
/// of each partition's: the heads of the records summary the walk makes of each
/// (`records::lean_summary`, decompressing at most `max_decompressed` bytes a field), as
/// the core's `batches` rows read them.
#[pyfunction]
fn batch_summaries(
    py: Python<'_>,
    data: &[u8],
    spans: Vec<(usize, usize)>,
    max_decompressed: i64,
) -> Vec<BatchTuple> {
    py.allow_threads(|| {
        let mut out = Vec::new();
        for (i, (at, n)) in spans.into_iter().enumerate() {
            let end = at.saturating_add(n);
            for b in crate::records::lean_summary(data, at, end, i64::MAX, max_decompressed).batches
            {
                out.push((
                    i,
                    b.producer_id,
                    b.producer_epoch,
                    b.base_sequence,
                    b.record_count,
                    b.bytes,
                    b.bytes_before,
                    b.codec,
                    b.base_timestamp,
                    b.max_timestamp,
                    b.transactional,
                    b.control,
                ));
            }
        }
        out
    })
}

/// Whether `data` starts with a TLS record header (`crate::pair::looks_like_tls`: what
/// makes the core hand a connection to the front).
#[pyfunction]
fn looks_like_tls(data: &[u8]) -> bool {
    crate::pair::looks_like_tls(data)
}

/// `(boundary, hop_end, packets, context, damaged)` of a range of a capture file
/// (`crate::split::scan_range`); None for a file that is neither pcap nor pcapng.
#[cfg(unix)]
#[pyfunction]
#[pyo3(signature = (path, start, end, known = None))]
#[allow(clippy::type_complexity)]
fn scan_range(
    py: Python<'_>,
    path: &str,
    start: u64,
    end: u64,
    known: Option<u64>,
) -> PyResult<Option<(Option<u64>, u64, u64, Vec<(u64, Py<PyBytes>)>, bool)>> {
    let got = py
        .allow_threads(|| crate::split::scan_range(path, start, end, known))
        .map_err(|e| pyo3::exceptions::PyOSError::new_err(format!("{path}: {e}")))?;
    Ok(got.map(|r| {
        let context = r
            .context
            .iter()
            .map(|(off, b)| (*off, PyBytes::new(py, b).unbind()))
            .collect();
        (r.boundary, r.hop_end, r.packets, context, r.damaged)
    }))
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("CaptureError", m.py().get_type::<CaptureError>())?;
    m.add_class::<Capture>()?;
    m.add_class::<Stream>()?;
    m.add_class::<HeaderTable>()?;
    m.add_class::<ConnBatcher>()?;
    m.add_class::<Figures>()?;
    m.add_class::<table::ArrowBatch>()?;
    m.add_class::<table::FetchSessions>()?;
    m.add_class::<crate::py::quantiles::Quantiles>()?;
    m.add_function(wrap_pyfunction!(crate::py::quantiles::sum_ns, m)?)?;
    m.add("EXACT_LIMIT", crate::quantiles::EXACT_LIMIT)?;
    m.add("RELATIVE_ACCURACY", crate::quantiles::RELATIVE_ACCURACY)?;
    #[cfg(target_os = "linux")]
    m.add_class::<PacketReader>()?;
    m.add_function(wrap_pyfunction!(open_capture, m)?)?;
    m.add_function(wrap_pyfunction!(batch_summaries, m)?)?;
    m.add_function(wrap_pyfunction!(parse_packet, m)?)?;
    m.add_function(wrap_pyfunction!(crate::py::json::tree_json, m)?)?;
    #[cfg(unix)]
    m.add_function(wrap_pyfunction!(scan_range, m)?)?;
    m.add_function(wrap_pyfunction!(looks_like_tls, m)?)?;
    #[cfg(feature = "probe")]
    crate::py::probe::register(m)?;
    m.add("END_OF_CAPTURE", END_OF_CAPTURE)?;
    m.add("UNIDENTIFIED", crate::evidence::UNIDENTIFIED)?;
    m.add(
        "SUPPORTED_LINKTYPES",
        crate::capture::SUPPORTED_LINKTYPES.to_vec(),
    )?;
    Ok(())
}
