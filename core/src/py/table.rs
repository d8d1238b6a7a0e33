//! `analyzer._core.ArrowBatch`: a record batch of the exchange tables (`table.rs`) handed to
//! Python through the Arrow PyCapsule interface (`__arrow_c_array__`, `__arrow_c_schema__`):
//! pyarrow, DuckDB or polars take its columns as they are, no Python object per value.

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
