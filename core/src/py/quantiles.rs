//! `analyzer._core.Quantiles`: `stats`' latency quantiles (`quantiles.rs`) for the Python
//! front, with the plain state (`to_state` / `from_state`) the Spark job ships between tasks.

use pyo3::exceptions::{PyKeyError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::quantiles::{self, Sketch, Store, EXACT_LIMIT, RELATIVE_ACCURACY};

/// Exact values up to `limit`, then a DDSketch; exact count, min, max and sum in ns always.
#[pyclass(module = "analyzer._core", name = "Quantiles")]
pub struct Quantiles {
    inner: quantiles::Quantiles,
}

fn item<'py>(d: &Bound<'py, PyDict>, key: &str) -> PyResult<Bound<'py, PyAny>> {
    d.get_item(key)?
        .ok_or_else(|| PyKeyError::new_err(key.to_string()))
}

fn bins<'py>(py: Python<'py>, s: &Store) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for (&k, &n) in &s.bins {
        if n != 0.0 {
            let pair = PyList::empty(py);
            pair.append(k)?;
            pair.append(n)?;
            out.append(pair)?;
        }
    }
    Ok(out)
}

fn store(v: &Bound<'_, PyAny>) -> PyResult<Store> {
    let mut s = Store::default();
    for pair in v.try_iter()? {
        let pair = pair?;
        s.add(pair.get_item(0)?.extract()?, pair.get_item(1)?.extract()?);
    }
    Ok(s)
}

#[pymethods]
impl Quantiles {
    #[new]
    #[pyo3(signature = (limit = EXACT_LIMIT))]
    fn new(limit: usize) -> Self {
        Quantiles {
            inner: quantiles::Quantiles::new(limit),
        }
    }

    /// Add a value (ms).
    fn add(&mut self, v: f64) {
        self.inner.extend(&[v]);
    }

    /// Add values (ms), in order: what `add` of each in turn gives.
    fn extend(&mut self, values: Vec<f64>) {
        self.inner.extend(&values);
    }

    /// Fold `other` in (in place).
    fn merge(&mut self, other: PyRef<'_, Quantiles>) {
        self.inner.merge(&other.inner);
    }

    #[getter]
    fn count(&self) -> u64 {
        self.inner.count
    }

    /// The smallest value (inf when empty).
    #[getter]
    fn min(&self) -> f64 {
        self.inner.min
    }

    /// The largest value (-inf when empty).
    #[getter]
    fn max(&self) -> f64 {
        self.inner.max
    }

    /// The sum of the values as integer nanoseconds (each rounded, halves to even).
    #[getter]
    fn sum_ns(&self) -> i128 {
        self.inner.sum_ns
    }

    #[getter]
    fn limit(&self) -> usize {
        self.inner.limit
    }

    /// Every value is still kept (not yet the sketch).
    #[getter]
    fn exact(&self) -> bool {
        self.inner.exact()
    }

    /// The nearest-rank q-quantile (None when empty).
    fn quantile(&self, q: f64) -> Option<f64> {
        self.inner.quantiles(&[q]).map(|v| v[0])
    }

    /// The nearest-rank quantile of each of `qs`, in one pass (None when empty).
    fn quantiles(&self, qs: Vec<f64>) -> Option<Vec<f64>> {
        self.inner.quantiles(&qs)
    }

    /// Plain, JSON-safe state: count, sum_ns, limit, min, max, and the values or the sketch.
    fn to_state<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let q = &self.inner;
        let d = PyDict::new(py);
        d.set_item("count", q.count)?;
        d.set_item("sum_ns", q.sum_ns)?;
        d.set_item("limit", q.limit)?;
        let any = q.count > 0;
        d.set_item("min", any.then_some(q.min))?;
        d.set_item("max", any.then_some(q.max))?;
        match (&q.values, &q.sketch) {
            (Some(values), _) => d.set_item("values", PyList::new(py, values)?)?,
            (None, sketch) => {
                let empty = Sketch::default();
                let sk = sketch.as_ref().unwrap_or(&empty);
                let s = PyDict::new(py);
                s.set_item("relative_accuracy", RELATIVE_ACCURACY)?;
                s.set_item("zero", sk.zero)?;
                s.set_item("pos", bins(py, &sk.positive)?)?;
                s.set_item("neg", bins(py, &sk.negative)?)?;
                s.set_item("sum", sk.sum)?;
                d.set_item("sketch", s)?;
            }
        }
        Ok(d)
    }

    /// A Quantiles from `to_state`'s dict.
    #[staticmethod]
    fn from_state(st: &Bound<'_, PyDict>) -> PyResult<Self> {
        let limit = match st.get_item("limit")? {
            Some(v) => v.extract()?,
            None => EXACT_LIMIT,
        };
        let mut q = quantiles::Quantiles::new(limit);
        q.count = item(st, "count")?.extract()?;
        q.sum_ns = item(st, "sum_ns")?.extract()?;
        if q.count > 0 {
            q.min = item(st, "min")?.extract()?;
            q.max = item(st, "max")?.extract()?;
        }
        if let Some(values) = st.get_item("values")? {
            q.values = Some(values.extract()?);
        } else {
            let s = item(st, "sketch")?;
            let s = s.downcast::<PyDict>()?;
            let accuracy: f64 = item(s, "relative_accuracy")?.extract()?;
            if accuracy != RELATIVE_ACCURACY {
                return Err(PyValueError::new_err(
                    "sketch relative accuracy differs from this build's",
                ));
            }
            q.values = None;
            q.sketch = Some(Sketch::from_parts(
                store(&item(s, "pos")?)?,
                store(&item(s, "neg")?)?,
                item(s, "zero")?.extract()?,
                item(s, "sum")?.extract()?,
            ));
        }
        Ok(Quantiles { inner: q })
    }
}

/// The sum of values (ms) as integer nanoseconds, each rounded as `Quantiles` rounds them.
#[pyfunction]
pub fn sum_ns(values: Vec<f64>) -> i128 {
    values.iter().map(|&v| quantiles::to_ns(v)).sum()
}
