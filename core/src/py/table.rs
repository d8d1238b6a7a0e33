//! `analyzer._core.ArrowBatch`: a record batch of the exchange tables (`table/`) handed to
//! Python through the Arrow PyCapsule interface (`__arrow_c_array__`, `__arrow_c_schema__`):
//! pyarrow, DuckDB or polars take its columns as they are, no Python object per value; and
//! `analyzer._core.FetchSessions`: the Fetch sessions (`table/lag.rs`) for the rows the front
//! makes.

use std::ffi::CString;

use arrow_array::ffi::{to_ffi, FFI_ArrowSchema};
use arrow_array::{Array, RecordBatch, StructArray};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

#[pyclass(module = "analyzer._core", frozen)]
pub struct ArrowBatch(pub(crate) RecordBatch);

fn arrow_error(e: arrow_schema::ArrowError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

fn schema_capsule<'py>(py: Python<'py>, s: FFI_ArrowSchema) -> PyResult<Bound<'py, PyCapsule>> {
    PyCapsule::new(py, s, Some(CString::new("arrow_schema").expect("no NUL")))
}

#[pymethods]
impl ArrowBatch {
    /// Rows in the batch.
    #[getter]
    fn num_rows(&self) -> usize {
        self.0.num_rows()
    }

    /// The batch's schema as an `arrow_schema` capsule.
    fn __arrow_c_schema__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>> {
        let s = FFI_ArrowSchema::try_from(self.0.schema().as_ref()).map_err(arrow_error)?;
        schema_capsule(py, s)
    }

    /// The batch as a struct array: `(arrow_schema, arrow_array)` capsules. A requested
    /// schema is not honoured (the caller casts).
    #[pyo3(signature = (requested_schema = None))]
    fn __arrow_c_array__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<(Bound<'py, PyCapsule>, Bound<'py, PyCapsule>)> {
        let _ = requested_schema;
        let array = StructArray::from(self.0.clone());
        let (a, s) = to_ffi(&array.to_data()).map_err(arrow_error)?;
        let s = schema_capsule(py, s)?;
        let a = PyCapsule::new(py, a, Some(CString::new("arrow_array").expect("no NUL")))?;
        Ok((s, a))
    }
}

/// A Fetch's `fetch_session` struct as the front's rows hold it: (isolation_level,
/// session_id, session_epoch, error_code, response_session_id, asked, forgotten).
type SessionRow = (
    Option<i32>,
    Option<i32>,
    Option<i32>,
    Option<i32>,
    Option<i32>,
    Vec<(Option<String>, Option<i32>, Option<i64>)>,
    Vec<(Option<String>, Option<i32>)>,
);

/// A partition of a Fetch answer: (topic, partition, records, error, high_watermark,
/// last_stable_offset).
type AnswerRow = (
    Option<String>,
    Option<i32>,
    i64,
    Option<String>,
    Option<i64>,
    Option<i64>,
);

/// A `lag` figure: (topic, partition, position, high_watermark, last_stable_offset, lag,
/// stable_lag).
type SampleRow = (String, i32, i64, i64, Option<i64>, i64, Option<i64>);

/// `analyzer._core.FetchSessions`: the connections' Fetch sessions (`table/lag.rs`) for the
/// exchanges the front decodes, whose `lag` rows it makes (the core's table builder follows
/// its own exchanges' alike).
#[pyclass(module = "analyzer._core")]
#[derive(Default)]
pub struct FetchSessions(crate::table::lag::Sessions);

#[pymethods]
impl FetchSessions {
    #[new]
    fn new() -> Self {
        Self::default()
    }

    /// An answered Fetch of connection `conn`, in its order: the figures it gives.
    fn fetch(&mut self, conn: u64, session: SessionRow, answers: Vec<AnswerRow>) -> Vec<SampleRow> {
        let (
            isolation_level,
            session_id,
            session_epoch,
            error_code,
            response_session_id,
            asked,
            forgotten,
        ) = session;
        let f = crate::table::Fetch {
            isolation_level,
            session_id,
            session_epoch,
            error_code,
            response_session_id,
            asked,
            forgotten,
        };
        let parts: Vec<crate::table::Part> = answers
            .into_iter()
            .map(
                |(topic, partition, records, error, hw, lso)| crate::table::Part {
                    topic,
                    partition,
                    records,
                    bytes: 0,
                    codec: None,
                    crc_ok: true,
                    error,
                    fetch_offset: None,
                    high_watermark: hw,
                    last_stable_offset: lso,
                },
            )
            .collect();
        self.0
            .fetch(conn, &f, &parts)
            .into_iter()
            .map(|s| {
                (
                    s.topic,
                    s.partition,
                    s.position,
                    s.high_watermark,
                    s.last_stable_offset,
                    s.lag,
                    s.stable_lag,
                )
            })
            .collect()
    }

    /// A connection ended: its session goes.
    fn closed(&mut self, conn: u64) {
        self.0.closed(conn);
    }
}
