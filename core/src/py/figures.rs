//! `analyzer._core.Figures`: the lean figures walk (`figures.rs`) for the Python front.
//! Its trees come out as objects of the two classes the caller hands in (`tree`:
//! `dissectors.field.Field` and its `ErrorsRoot`, the root carrying the names of the
//! non-zero error codes), so the sinks read them as they read the full decoder's; the
//! core imports none of our Python. A `Stream` made with `figures=` walks every exchange it pairs and
//! hands the trees with the exchange's record, in the same batch.

use std::collections::{HashMap, HashSet};

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};

use crate::figures::{
    self, uuid_text, ApiDef, Extra, FetchAsk, FetchRow, FieldDef, Name, Nested, ProduceRow, Tree,
    Value,
};
use crate::records::BatchHead;

fn range(v: &Bound<'_, PyAny>) -> PyResult<Option<(i32, i32)>> {
    if v.is_none() {
        return Ok(None);
    }
    Ok(Some(v.extract()?))
}

fn opt_string(v: Bound<'_, PyAny>) -> PyResult<Option<String>> {
    if v.is_none() {
        Ok(None)
    } else {
        Ok(Some(v.extract()?))
    }
}

/// A `dissectors.schema.FieldDef`.
fn field_def(fd: &Bound<'_, PyAny>) -> PyResult<FieldDef> {
    let py = fd.py();
    let fields: Vec<Bound<'_, PyAny>> = fd.getattr(intern!(py, "fields"))?.extract()?;
    let meaning = opt_string(fd.getattr(intern!(py, "meaning"))?)?;
    Ok(FieldDef {
        name: fd.getattr(intern!(py, "name"))?.extract()?,
        ty: fd.getattr(intern!(py, "type"))?.extract()?,
        versions: fd.getattr(intern!(py, "versions"))?.extract()?,
        nullable: range(&fd.getattr(intern!(py, "nullable"))?)?,
        tag: fd.getattr(intern!(py, "tag"))?.extract()?,
        tagged: range(&fd.getattr(intern!(py, "tagged"))?)?,
        struct_name: opt_string(fd.getattr(intern!(py, "struct"))?)?,
        element: opt_string(fd.getattr(intern!(py, "element"))?)?,
        fields: fields.iter().map(field_def).collect::<PyResult<_>>()?,
        error_meaning: meaning.as_deref() == Some("error_code"),
        nested: match meaning.as_deref() {
            Some("consumer_subscription") => Some(Nested::Subscription),
            Some("consumer_assignment") => Some(Nested::Assignment),
            _ => None,
        },
    })
}

/// A `dissectors.schema.ApiDef`.
pub(crate) fn api_def(a: &Bound<'_, PyAny>) -> PyResult<ApiDef> {
    let py = a.py();
    let defs = |name: &Bound<'_, PyString>| -> PyResult<Vec<FieldDef>> {
        let v: Vec<Bound<'_, PyAny>> = a.getattr(name)?.extract()?;
        v.iter().map(field_def).collect()
    };
    Ok(ApiDef {
        key: a.getattr(intern!(py, "key"))?.extract()?,
        name: a.getattr(intern!(py, "name"))?.extract()?,
        min_version: a.getattr(intern!(py, "min_version"))?.extract()?,
        max_version: a.getattr(intern!(py, "max_version"))?.extract()?,
        flexible_from: a.getattr(intern!(py, "flexible_from"))?.extract()?,
        request: defs(intern!(py, "request"))?,
        response: defs(intern!(py, "response"))?,
    })
}

/// The Python classes and strings the trees are made of.
struct Out {
    field: Py<PyAny>,
    root: Py<PyAny>,
    new: Py<PyAny>,
    /// the symbol table's strings, made once each
    strs: Vec<Py<PyString>>,
    index: Vec<Py<PyString>>,
    error_table: HashMap<i64, String>,
    errors: rustc_hash::FxHashMap<i64, Py<PyString>>,
}

const INDEX_CACHED: usize = 4096;
/// The consumer protocol's (Subscription, Assignment) fields, as `dissectors.schema.FieldDef`s.
type ConsumerFields<'py> = (Vec<Bound<'py, PyAny>>, Vec<Bound<'py, PyAny>>);
/// Which message of an exchange a tree is.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    Request,
    Response,
}

/// A message whose partitions become a table of rows in its body's extra (see
/// `Figures::result`): Fetch requests and answers ("fetch"), Produce requests ("produce").
#[derive(Clone, Copy)]
pub(crate) enum Table {
    FetchRequest,
    FetchResponse,
    ProduceRequest,
}

impl Table {
    pub(crate) fn of(api_key: i16, side: Side) -> Option<Table> {
        match (api_key, side) {
            (0, Side::Request) => Some(Table::ProduceRequest),
            (1, Side::Request) => Some(Table::FetchRequest),
            (1, Side::Response) => Some(Table::FetchResponse),
            _ => None,
        }
    }
}

/// The lean figures walk over the schema handed in (`dissectors.schema.APIS`).
#[pyclass(module = "analyzer._core")]
pub struct Figures {
    pub(crate) inner: figures::Figures,
    out: Out,
    /// while a tree with a table is made: its body's id, the array left out of it, the key
    /// of its body's extra and the rows
    table: Option<(usize, Option<usize>, &'static str, Py<PyList>)>,
}

/// Rows as a list of Python tuples, each made by `row`.
fn row_list<'py, T, R: IntoPyObject<'py>>(
    py: Python<'py>,
    rows: &[T],
    row: impl Fn(&T) -> R,
) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for r in rows {
        out.append(row(r))?;
    }
    Ok(out)
}

/// A Produce request's rows: (topic, topic_id, partition, records, bytes, codec, crc_ok,
/// records_offset, records_length).
fn produce_list<'py>(py: Python<'py>, rows: &[ProduceRow]) -> PyResult<Bound<'py, PyList>> {
    row_list(py, rows, |r| {
        (
            r.topic.clone(),
            r.topic_id.as_ref().map(uuid_text),
            r.partition,
            r.records,
            r.bytes,
            r.codec,
            r.crc_ok,
            r.at.map(|a| a.0),
            r.at.map_or(0, |a| a.1),
        )
    })
}

/// A Fetch request's rows: (topic, topic_id, partition, fetch_offset).
fn fetch_ask_list<'py>(py: Python<'py>, rows: &[FetchAsk]) -> PyResult<Bound<'py, PyList>> {
    row_list(py, rows, |r| {
        (
            r.topic.clone(),
            r.topic_id.as_ref().map(uuid_text),
            r.partition,
            r.fetch_offset,
        )
    })
}

/// A Fetch answer's rows: (topic, topic_id, partition, error_code, high_watermark,
/// last_stable_offset, records, bytes, codec, crc_ok).
fn fetch_list<'py>(py: Python<'py>, rows: &[FetchRow]) -> PyResult<Bound<'py, PyList>> {
    row_list(py, rows, |r| {
        (
            r.topic.clone(),
            r.topic_id.as_ref().map(uuid_text),
            r.partition,
            r.error_code,
            r.high_watermark,
            r.last_stable_offset,
            r.records,
            r.bytes,
            r.codec,
            r.crc_ok,
        )
    })
}

impl Figures {
    fn name<'py>(&mut self, py: Python<'py>, n: Name) -> Bound<'py, PyString> {
        match n {
            Name::Sym(i) => {
                let syms = self.inner.syms();
                while self.out.strs.len() < syms.len() {
                    let s = syms.name(self.out.strs.len() as u32);
                    self.out.strs.push(PyString::intern(py, s).unbind());
                }
                self.out.strs[i as usize].bind(py).clone()
            }
            Name::Index(i) if i < INDEX_CACHED => {
                while self.out.index.len() <= i {
                    let s = format!("[{}]", self.out.index.len());
                    self.out.index.push(PyString::intern(py, &s).unbind());
                }
                self.out.index[i].bind(py).clone()
            }
            Name::Index(i) => PyString::new(py, &format!("[{i}]")),
            Name::Tag(t) => PyString::new(py, &format!("tag_{t}")),
        }
    }

    fn error_name<'py>(&mut self, py: Python<'py>, code: i64) -> Bound<'py, PyString> {
        if let Some(s) = self.out.errors.get(&code) {
            return s.bind(py).clone();
        }
        let text = match self.out.error_table.get(&code) {
            Some(s) => s.clone(),
            None => format!("UNKNOWN_ERROR_CODE_{code}"),
        };
        let s = PyString::intern(py, &text);
        if self.out.errors.len() < 4096 {
            self.out.errors.insert(code, s.clone().unbind());
        }
        s
    }

    fn node<'py>(&mut self, py: Python<'py>, t: &Tree, id: usize) -> PyResult<Bound<'py, PyAny>> {
        let n = &t.nodes[id];
        let root = id == t.root && t.errors_root;
        let cls = if root {
            &self.out.root
        } else {
            &self.out.field
        };
        let f = self.out.new.bind(py).call1((cls.bind(py),))?;
        f.setattr(intern!(py, "name"), self.name(py, n.name))?;
        f.setattr(intern!(py, "type"), self.name(py, n.ty))?;
        let value: Bound<'py, PyAny> = match &n.value {
            Value::Null => py.None().into_bound(py),
            Value::Int(v) => v.into_pyobject(py)?.into_any(),
            Value::Bool(b) => pyo3::types::PyBool::new(py, *b).to_owned().into_any(),
            Value::Float(x) => x.into_pyobject(py)?.into_any(),
            Value::Str(s) => PyString::new(py, s).into_any(),
            Value::Uuid(u) => PyString::new(py, &uuid_text(u)).into_any(),
        };
        f.setattr(intern!(py, "value"), value)?;
        f.setattr(intern!(py, "offset"), n.offset)?;
        f.setattr(intern!(py, "length"), n.length)?;
        match &n.children {
            None => f.setattr(intern!(py, "children"), py.None())?,
            Some(ids) => {
                let list = PyList::empty(py);
                let skip = self.table.as_ref().and_then(|f| f.1);
                for &c in ids {
                    if Some(c) != skip {
                        list.append(self.node(py, t, c)?)?;
                    }
                }
                f.setattr(intern!(py, "children"), list)?;
            }
        }
        if n.notes.is_empty() {
            f.setattr(intern!(py, "notes"), py.None())?;
        } else {
            f.setattr(intern!(py, "notes"), PyList::new(py, &n.notes)?)?;
        }
        let extra: Bound<'py, PyAny> = match &n.extra {
            Extra::None => py.None().into_bound(py),
            Extra::ErrorCode(v) => {
                let d = PyDict::new(py);
                d.set_item(intern!(py, "error_code"), v)?;
                d.into_any()
            }
            Extra::MalformedAt(o) => {
                let d = PyDict::new(py);
                d.set_item(intern!(py, "malformed_at"), o)?;
                d.into_any()
            }
            Extra::Records {
                records,
                bytes,
                codec,
                crc_ok,
                truncated,
                null,
                batches,
            } => {
                let d = PyDict::new(py);
                d.set_item(intern!(py, "records"), records)?;
                d.set_item(intern!(py, "bytes"), bytes)?;
                d.set_item(intern!(py, "codec"), PyString::intern(py, codec))?;
                d.set_item(intern!(py, "crc_ok"), crc_ok)?;
                d.set_item(intern!(py, "truncated"), truncated)?;
                if *null {
                    d.set_item(intern!(py, "magics"), PyList::empty(py))?;
                    d.set_item(intern!(py, "batches"), PyList::empty(py))?;
                } else if let Some(batches) = batches.as_ref().filter(|_| self.inner.check) {
                    let list = PyList::empty(py);
                    for b in batches {
                        list.append(batch_dict(py, b)?)?;
                    }
                    d.set_item(intern!(py, "batches"), list)?;
                }
                d.into_any()
            }
            Extra::Versions(rows) => {
                let table = PyDict::new(py);
                for &(key, lo, hi) in rows {
                    table.set_item(key, (lo, hi))?;
                }
                let d = PyDict::new(py);
                d.set_item(intern!(py, "versions"), table)?;
                d.into_any()
            }
        };
        let extra = match &self.table {
            Some((body, _, key, rows)) if *body == id => {
                let d = if extra.is_none() {
                    PyDict::new(py)
                } else {
                    extra.downcast_into::<PyDict>()?
                };
                d.set_item(*key, rows.bind(py))?;
                d.into_any()
            }
            _ => extra,
        };
        f.setattr(intern!(py, "extra"), extra)?;
        if root {
            let names = PyList::empty(py);
            for &code in &t.errors {
                names.append(self.error_name(py, code))?;
            }
            f.setattr(intern!(py, "error_codes"), names)?;
        }
        Ok(f)
    }

    /// `(tree, (malformed, crc_valid, crc_invalid, trailing, limits))`.
    pub(crate) fn result<'py>(
        &mut self,
        py: Python<'py>,
        t: &Tree,
        table: Option<Table>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
        // a Fetch or Produce message's partitions go to its body's extra, in one list, and
        // not into nodes as well: but where bad bytes are marked (every mark counted is in
        // the tree), for check's rules (they read each records field, a Fetch request's
        // topics), and for a request's topics that a summary line names
        let inner = &self.inner;
        let leave_out = |t: &Tree, at: Option<usize>, keep: bool| {
            at.filter(|&a| !keep && !figures::Figures::marked(t, a))
        };
        let request_kept = inner.check || inner.topics;
        self.table = match table {
            Some(Table::FetchRequest) => match inner.fetch_request_rows(t) {
                Some((body, topics, rows)) => Some((
                    body,
                    leave_out(t, topics, request_kept),
                    "fetch",
                    fetch_ask_list(py, &rows)?.unbind(),
                )),
                None => None,
            },
            Some(Table::FetchResponse) => match inner.fetch_rows(t) {
                Some((body, responses, rows)) => Some((
                    body,
                    leave_out(t, responses, inner.check),
                    "fetch",
                    fetch_list(py, &rows)?.unbind(),
                )),
                None => None,
            },
            Some(Table::ProduceRequest) => match inner.produce_request_rows(t) {
                Some((body, topic_data, rows)) => Some((
                    body,
                    leave_out(t, topic_data, request_kept),
                    "produce",
                    produce_list(py, &rows)?.unbind(),
                )),
                None => None,
            },
            None => None,
        };
        let tree = self.node(py, t, t.root);
        self.table = None;
        let tree = tree?;
        let c = &t.counts;
        let counts = (
            c.malformed,
            c.crc_valid,
            c.crc_invalid,
            c.trailing,
            PyTuple::new(py, &c.limits)?,
        );
        Ok((tree, counts.into_pyobject(py)?.into_any()))
    }
}

impl Figures {
    /// The error names by code it was made with.
    pub(crate) fn error_table(&self) -> &HashMap<i64, String> {
        &self.out.error_table
    }
}

#[pymethods]
impl Figures {
    /// `tree`: the classes of the trees' nodes and root (`dissectors.field.Field`,
    /// `ErrorsRoot`); `apis`: the schema (`dissectors.schema.APIS`); `errors`: the error names by code
    /// (`dissectors.errors.ERRORS`); the limits are the `DecodeContext`'s; `topics`: keep a
    /// request's topics and partition indexes too (`stats` grouped by topic or partition);
    /// `full_apis`: API keys a `Stream` leaves to the full decoder (`covers` says no);
    /// `check`: keep what `check`'s rules read besides the figures (v2 batches' producer
    /// state in extra["batches"], an ApiVersions answer's table in extra["versions"]);
    /// `consumer`: the consumer protocol's (Subscription, Assignment) fields, to judge the
    /// payloads of JoinGroup and SyncGroup (`dissectors.consumer`).
    #[new]
    #[allow(clippy::too_many_arguments)] // (Python's keyword arguments)
    #[pyo3(signature = (tree, apis, errors, max_array_len = 1_000_000, max_decompressed = 64 * 1024 * 1024,
                        topics = false, full_apis = HashSet::new(), check = false, consumer = None))]
    fn new(
        py: Python<'_>,
        tree: (Bound<'_, PyAny>, Bound<'_, PyAny>),
        apis: &Bound<'_, PyDict>,
        errors: HashMap<i64, String>,
        max_array_len: i64,
        max_decompressed: i64,
        topics: bool,
        full_apis: HashSet<i16>,
        check: bool,
        consumer: Option<ConsumerFields<'_>>,
    ) -> PyResult<Self> {
        let defs = apis
            .values()
            .iter()
            .map(|a| api_def(&a))
            .collect::<PyResult<Vec<_>>>()?;
        let mut inner = figures::Figures::new(defs, max_array_len, max_decompressed, topics);
        inner.full_apis = full_apis.into_iter().collect();
        inner.check = check;
        if let Some((subscription, assignment)) = consumer {
            let defs =
                |v: &[Bound<'_, PyAny>]| v.iter().map(field_def).collect::<PyResult<Vec<_>>>();
            inner.set_consumer(&defs(&subscription)?, &defs(&assignment)?);
        }
        Ok(Figures {
            inner,
            out: Out {
                field: tree.0.unbind(),
                root: tree.1.unbind(),
                new: py
                    .import("builtins")?
                    .getattr("object")?
                    .getattr("__new__")?
                    .unbind(),
                strs: Vec::new(),
                index: Vec::new(),
                error_table: errors,
                errors: rustc_hash::FxHashMap::default(),
            },
            table: None,
        })
    }

    /// Does the schema have a layout for this API at this version (known, not newer)?
    fn covers(&self, api_key: i16, api_version: i16) -> bool {
        self.inner.covers(api_key, api_version)
    }

    /// The lean tree of a request whose header is `header_len` bytes, and its counts
    /// `(malformed, crc_valid, crc_invalid, trailing, limits hit)`; None when a
    /// consumer-protocol payload in it has bad bytes (the full decoder's to read).
    fn request<'py>(
        &mut self,
        py: Python<'py>,
        data: &[u8],
        header_len: usize,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let t = self.inner.request(data, header_len);
        if t.full {
            return Ok(None);
        }
        let key = (data.len() >= 2).then(|| i16::from_be_bytes([data[0], data[1]]));
        let table = key.and_then(|k| Table::of(k, Side::Request));
        let (tree, counts) = self.result(py, &t, table)?;
        Ok(Some(PyTuple::new(py, [tree, counts])?))
    }

    /// The lean tree of a response to `api_key` v`api_version` and its counts (None for
    /// an API the schema does not know, and as `request` says).
    fn response<'py>(
        &mut self,
        py: Python<'py>,
        data: &[u8],
        api_key: i16,
        api_version: i16,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        match self.inner.response(data, api_key, api_version) {
            Some(t) if t.full => Ok(None),
            Some(t) => {
                let (tree, counts) = self.result(py, &t, Table::of(api_key, Side::Response))?;
                Ok(Some(PyTuple::new(py, [tree, counts])?))
            }
            None => Ok(None),
        }
    }
}

/// A v2 batch's producer state as the full decoder's extra["batches"] has it
/// (`dissectors.records._record_batch_seen`).
fn batch_dict<'py>(py: Python<'py>, b: &BatchHead) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item(intern!(py, "producer_id"), b.producer_id)?;
    d.set_item(intern!(py, "producer_epoch"), b.producer_epoch)?;
    d.set_item(intern!(py, "base_sequence"), b.base_sequence)?;
    d.set_item(intern!(py, "record_count"), b.record_count)?;
    d.set_item(intern!(py, "base_offset"), b.base_offset)?;
    d.set_item(intern!(py, "is_transactional"), b.transactional)?;
    d.set_item(intern!(py, "is_control"), b.control)?;
    Ok(d)
}
