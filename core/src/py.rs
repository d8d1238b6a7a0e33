//! The Python binding, `analyzer._core`: a capture reader and a stream of TCP events,
//! crossed in batches (a chunk of packets in, a list of events out).
//!
//! Events are plain tuples, first element the kind:
//!
//! ```text
//! (0, conn, dir, offset, data, ts, index, now, now_ts)           stream bytes
//! (1, conn, dir, offset, length, ts, index, reason, now, now_ts)  bytes never captured
//! (2, conn, dir | None, reason, ts, index, now)                   a direction / the connection ended
//! (3, conn, a_ip, a_port, b_ip, b_port, first_ts)                 a new connection
//! (4, conn, syn_seen, closed, closed_by, lost_from, last_ts)      its state changed
//! ```
//!
//! `conn` is the connection's id; `ts` and `index` those of the packet that carried the
//! bytes; `now` and `now_ts` those of the packet being handled when the event was made
//! (it is the connection's latest packet: the bytes of an earlier one may be delivered
//! only now). At the end of the capture `now` is 1 << 62 (and `now_ts` means nothing:
//! the connection's `Update` before its end tells its last time). A connection's times
//! after its end are not reported.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use pyo3::BoundObject;

use crate::capture::CaptureReader;
use crate::net::{self, Skip};
use crate::tcp::{Config, Event, Reassembler, Sink};

create_exception!(
    _core,
    CaptureError,
    PyException,
    "The capture cannot be read (a one-line message naming the file)."
);

/// One capture file (pcap, pcapng, either gzip-compressed). Iterate it for packets
/// (`analyzer.model.Packet`: index, ts, linktype, data, orig_len), or hand it to
/// `Stream.feed_capture`, which reads it without making a Python object per packet.
#[pyclass(module = "analyzer._core", unsendable)]
pub struct Capture {
    reader: CaptureReader,
}

fn capture_error(e: crate::capture::CaptureError) -> PyErr {
    CaptureError::new_err(e.0)
}

/// `analyzer.model.Packet`, the record type the Python front reads packets as.
static PACKET: pyo3::sync::GILOnceCell<Py<PyAny>> = pyo3::sync::GILOnceCell::new();

fn packet_record<'py>(
    py: Python<'py>,
    p: &crate::capture::Packet<'_>,
) -> PyResult<Bound<'py, PyAny>> {
    let cls = PACKET.get_or_try_init(py, || {
        py.import("analyzer.model")?
            .getattr("Packet")
            .map(Bound::unbind)
    })?;
    cls.bind(py).call1((
        p.index,
        p.ts,
        p.linktype,
        PyBytes::new(py, p.data),
        p.orig_len,
    ))
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

    /// Up to `n` packets (`analyzer.model.Packet`); an empty list at the end.
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

/// Turns reassembly events into Python tuples.
struct PySink<'py> {
    py: Python<'py>,
    out: Vec<PyObject>,
    now: u64,
    now_ts: f64,
    err: Option<PyErr>,
}

/// `now` of the events made at the end of the capture (`analyzer._core.END_OF_CAPTURE`).
const END_OF_CAPTURE: u64 = 1 << 62;

impl<'py> PySink<'py> {
    fn new(py: Python<'py>) -> Self {
        PySink {
            py,
            out: Vec::new(),
            now: 0,
            now_ts: 0.0,
            err: None,
        }
    }

    fn push<T: IntoPyObject<'py>>(&mut self, v: T) {
        match v.into_pyobject(self.py) {
            Ok(o) => self.out.push(o.into_any().unbind()),
            Err(e) => {
                if self.err.is_none() {
                    self.err = Some(e.into());
                }
            }
        }
    }

    fn finish(self) -> PyResult<Bound<'py, PyList>> {
        if let Some(e) = self.err {
            return Err(e);
        }
        PyList::new(self.py, self.out)
    }
}

impl Sink for PySink<'_> {
    fn event(&mut self, ev: Event<'_>) {
        let (now, now_ts) = (self.now, self.now_ts);
        match ev {
            Event::Data {
                conn,
                dir,
                offset,
                data,
                ts,
                index,
            } => {
                let b = PyBytes::new(self.py, data);
                self.push((0u8, conn, dir, offset, b, ts, index, now, now_ts));
            }
            Event::Gap {
                conn,
                dir,
                offset,
                length,
                ts,
                index,
                reason,
            } => {
                self.push((
                    1u8, conn, dir, offset, length, ts, index, reason, now, now_ts,
                ));
            }
            Event::End {
                conn,
                dir,
                reason,
                ts,
                index,
            } => self.push((2u8, conn, dir, reason, ts, index, now)),
            Event::Open(c) => {
                self.push((
                    3u8,
                    c.id,
                    c.a.0.to_string(),
                    c.a.1,
                    c.b.0.to_string(),
                    c.b.1,
                    c.first_ts,
                ));
            }
            Event::Update(c) => {
                self.push((
                    4u8,
                    c.id,
                    c.syn_seen,
                    c.closed,
                    c.closed_by,
                    c.lost_from,
                    c.last_ts,
                ));
            }
        }
    }
}

/// The net and tcp stages over a capture or packets handed in: TCP stream events in
/// batches, with the counts that account for every packet.
#[pyclass(module = "analyzer._core")]
pub struct Stream {
    ra: Reassembler,
    ports: Vec<u16>,
    autodetect: bool,
    share: Option<(u32, u32)>,
    packets: u64,
    first_ts: Option<f64>,
    last_ts: Option<f64>,
    skips: std::collections::BTreeMap<String, u64>,
}

impl Stream {
    /// One packet through net and tcp (a packet of another share is not counted).
    fn packet(
        &mut self,
        sink: &mut PySink<'_>,
        index: u64,
        ts: f64,
        linktype: i32,
        data: &[u8],
        orig_len: u32,
    ) {
        let parsed = net::parse(linktype, data, orig_len);
        if let Some((k, n)) = self.share {
            let mine = match &parsed {
                Ok(seg) => net::share_of(&seg.src, &seg.dst, n) == k,
                Err(_) => k == 0,
            };
            if !mine {
                return;
            }
        }
        self.packets += 1;
        if self.first_ts.is_none() {
            self.first_ts = Some(ts);
        }
        if self.last_ts.is_none_or(|t| ts > t) {
            self.last_ts = Some(ts);
        }
        match parsed {
            Err(skip) => self.skip(skip.reason()),
            Ok(seg) => {
                if !self.autodetect
                    && !self.ports.contains(&seg.src.1)
                    && !self.ports.contains(&seg.dst.1)
                {
                    self.skip("not a Kafka port".into());
                    return;
                }
                sink.now = index;
                sink.now_ts = ts;
                self.ra.segment(&seg, ts, index, sink);
            }
        }
    }

    fn skip(&mut self, reason: String) {
        *self.skips.entry(reason).or_insert(0) += 1;
    }
}

#[pymethods]
impl Stream {
    #[new]
    #[pyo3(signature = (ports = vec![9092], autodetect = true, ids_from_index = false, share = None,
                        max_buffer = 4 * 1024 * 1024, overlap_window = 32 * 1024, max_closed = 10_000,
                        max_total_buffer = 256 * 1024 * 1024))]
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
    ) -> PyResult<Self> {
        if let Some((k, n)) = share {
            if n == 0 || k >= n {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "share {k} of {n}"
                )));
            }
        }
        let cfg = Config {
            max_buffer,
            overlap_window,
            max_closed,
            max_total_buffer,
            ids_from_index,
        };
        Ok(Stream {
            ra: Reassembler::new(cfg),
            ports,
            autodetect,
            share,
            packets: 0,
            first_ts: None,
            last_ts: None,
            skips: Default::default(),
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
        let mut sink = PySink::new(py);
        let mut read = 0;
        while read < max_packets {
            let Some(p) = cap.reader.next_packet().map_err(capture_error)? else {
                break;
            };
            read += 1;
            let (index, ts, lt, orig) = (p.index, p.ts, p.linktype, p.orig_len);
            self.packet(&mut sink, index, ts, lt, p.data, orig);
        }
        if read == 0 {
            return Ok(None);
        }
        sink.finish().map(Some)
    }

    /// Packets handed in (live capture, Spark): tuples `(index, ts, linktype, data, orig_len)`.
    fn feed<'py>(
        &mut self,
        py: Python<'py>,
        packets: Vec<(u64, f64, i32, Vec<u8>, u32)>,
    ) -> PyResult<Bound<'py, PyList>> {
        let mut sink = PySink::new(py);
        for (index, ts, lt, data, orig) in &packets {
            self.packet(&mut sink, *index, *ts, *lt, data, *orig);
        }
        sink.finish()
    }

    /// End of capture: flush every open connection (at `ts`, else each one's last packet).
    #[pyo3(signature = (ts = None))]
    fn finish<'py>(&mut self, py: Python<'py>, ts: Option<f64>) -> PyResult<Bound<'py, PyList>> {
        let mut sink = PySink::new(py);
        sink.now = END_OF_CAPTURE;
        self.ra.finish(ts, &mut sink);
        sink.finish()
    }

    /// packets fed and counted (a share's own packets only)
    #[getter]
    fn packets(&self) -> u64 {
        self.packets
    }
    #[getter]
    fn first_ts(&self) -> Option<f64> {
        self.first_ts
    }
    #[getter]
    fn last_ts(&self) -> Option<f64> {
        self.last_ts
    }
    /// packets that gave no TCP segment, by reason
    #[getter]
    fn skips(&self) -> std::collections::BTreeMap<String, u64> {
        self.skips.clone()
    }
    /// reassembly's counters: "out of order", "retransmission", "lost segments", ...
    #[getter]
    fn counters(&self) -> std::collections::BTreeMap<String, u64> {
        self.ra
            .stats
            .counters
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect()
    }
    #[getter]
    fn notes(&self) -> Vec<String> {
        self.ra.stats.notes.clone()
    }
    #[getter]
    fn conn_count(&self) -> u64 {
        self.ra.stats.conn_count
    }
    /// with ids_from_index: every connection's first packet number, in order
    #[getter]
    fn first_indexes(&self) -> Vec<u64> {
        self.ra.stats.first_indexes.clone()
    }
    #[getter]
    fn open_conns(&self) -> usize {
        self.ra.open_count()
    }
}

type ConnKey = (String, u16, String, u16);

/// A packet's connection as `(ip, port, ip, port)`, the smaller endpoint first, the same
/// for both directions (Spark groups packets by it); or the reason it is no TCP segment.
#[pyfunction]
fn conn_key(linktype: i32, data: &[u8], orig_len: u32) -> (Option<ConnKey>, Option<String>) {
    match net::parse(linktype, data, orig_len) {
        Ok(seg) => {
            let mut a = (seg.src.0.to_string(), seg.src.1);
            let mut b = (seg.dst.0.to_string(), seg.dst.1);
            if b < a {
                std::mem::swap(&mut a, &mut b);
            }
            (Some((a.0, a.1, b.0, b.1)), None)
        }
        Err(skip) => (None, Some(Skip::reason(&skip))),
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

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("CaptureError", m.py().get_type::<CaptureError>())?;
    m.add_class::<Capture>()?;
    m.add_class::<Stream>()?;
    m.add_function(wrap_pyfunction!(open_capture, m)?)?;
    m.add_function(wrap_pyfunction!(conn_key, m)?)?;
    m.add_function(wrap_pyfunction!(parse_packet, m)?)?;
    crate::py_probe::register(m)?;
    m.add("END_OF_CAPTURE", END_OF_CAPTURE)?;
    m.add(
        "SUPPORTED_LINKTYPES",
        crate::capture::SUPPORTED_LINKTYPES.to_vec(),
    )?;
    Ok(())
}
