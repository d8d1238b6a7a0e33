//! `analyzer._core.tree_json`: a field tree (`dissectors.field.Field` objects) as compact
//! JSON text in UTF-8 bytes, the text `read -f ndjson` writes for each request and response.
//!
//! It writes exactly what `orjson.dumps(field.to_json())` writes (`analyzer.sinks.fastjson`):
//! each field an object of `name`, `type`, `value`, `offset`, `length`, `children`, `notes`
//! in that order; a value as `json_value` makes it (bytes as lowercase hex, tuples as lists,
//! dicts with their values converted); strings with orjson's escapes (`\"`, `\\`, the short
//! escapes `\b \f \n \r \t`, other control characters as `\u00xx`, everything else as its
//! UTF-8). What it does not write the same way, it refuses with `ValueError` and the caller
//! takes the `to_json` path: floats (orjson's own number format), integers beyond 64 bits,
//! strings that are not valid UTF-8 (lone surrogates), dicts with keys that are not strings,
//! values of other types, and trees nested deeper than [`MAX_DEPTH`]. No Python code runs
//! per field: the time `read -f ndjson` spent in a per-field hook goes. (Its tests are
//! tests/test_tree_json.py, against orjson itself: the crate's own tests run without the
//! Python binding.)

use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyDict, PyInt, PyList, PyMemoryView, PyString, PyTuple,
};

/// Nesting (fields within fields, lists within values) beyond which a tree is refused.
const MAX_DEPTH: usize = 1000;

/// Why a tree goes the `to_json` way instead (the `ValueError`'s message).
struct Refused(&'static str);

type Written = Result<(), Refused>;

/// `field` (a `Field`, or None) as compact JSON text in UTF-8 bytes (the bytes go to the
/// output as they are: a `str` would cost a decode here and an encode on writing);
/// `ValueError` for what it refuses.
#[pyfunction]
pub fn tree_json<'py>(field: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
    let mut out = String::with_capacity(1024);
    let written = if field.is_none() {
        out.push_str("null");
        Ok(())
    } else {
        write_field(&mut out, field, 0)
    };
    written
        .map(|()| PyBytes::new(field.py(), out.as_bytes()))
        .map_err(|Refused(why)| PyValueError::new_err(why))
}

fn attr<'py>(
    f: &Bound<'py, PyAny>,
    name: &Bound<'py, PyString>,
) -> Result<Bound<'py, PyAny>, Refused> {
    f.getattr(name).map_err(|_| Refused("not a field"))
}

fn write_field(out: &mut String, f: &Bound<'_, PyAny>, depth: usize) -> Written {
    if depth > MAX_DEPTH {
        return Err(Refused("nested too deep"));
    }
    let py = f.py();
    out.push_str("{\"name\":");
    write_plain(out, &attr(f, intern!(py, "name"))?)?;
    out.push_str(",\"type\":");
    write_plain(out, &attr(f, intern!(py, "type"))?)?;
    out.push_str(",\"value\":");
    write_value(out, &attr(f, intern!(py, "value"))?, depth + 1)?;
    out.push_str(",\"offset\":");
    write_plain(out, &attr(f, intern!(py, "offset"))?)?;
    out.push_str(",\"length\":");
    write_plain(out, &attr(f, intern!(py, "length"))?)?;
    out.push_str(",\"children\":[");
    each(&attr(f, intern!(py, "children"))?, out, |out, child| {
        write_field(out, child, depth + 1)
    })?;
    out.push_str("],\"notes\":[");
    each(&attr(f, intern!(py, "notes"))?, out, write_plain)?;
    out.push_str("]}");
    Ok(())
}

/// `write` of each element of a field's `children` or `notes` (None or empty: none, as
/// `to_json`'s `if ch`; a list or tuple: its elements), commas between.
fn each<'py>(
    v: &Bound<'py, PyAny>,
    out: &mut String,
    mut write: impl FnMut(&mut String, &Bound<'py, PyAny>) -> Written,
) -> Written {
    let mut one = |i: usize, x: Bound<'py, PyAny>, out: &mut String| {
        if i > 0 {
            out.push(',');
        }
        write(out, &x)
    };
    if v.is_none() {
        Ok(())
    } else if let Ok(list) = v.downcast::<PyList>() {
        list.iter()
            .enumerate()
            .try_for_each(|(i, x)| one(i, x, out))
    } else if let Ok(tuple) = v.downcast::<PyTuple>() {
        tuple
            .iter()
            .enumerate()
            .try_for_each(|(i, x)| one(i, x, out))
    } else {
        Err(Refused("a sequence of another type"))
    }
}

/// A value as `json_value` makes it, then as orjson writes it.
fn write_value(out: &mut String, v: &Bound<'_, PyAny>, depth: usize) -> Written {
    if depth > MAX_DEPTH {
        return Err(Refused("nested too deep"));
    }
    if let Ok(b) = v.downcast::<PyBytes>() {
        write_hex(out, b.as_bytes());
        return Ok(());
    }
    if let Ok(b) = v.downcast::<PyByteArray>() {
        write_hex(out, &b.to_vec());
        return Ok(());
    }
    if v.downcast::<PyMemoryView>().is_ok() {
        let b: Vec<u8> = v
            .call_method0(intern!(v.py(), "tobytes"))
            .and_then(|b| b.extract())
            .map_err(|_| Refused("a memoryview without bytes"))?;
        write_hex(out, &b);
        return Ok(());
    }
    if v.downcast::<PyList>().is_ok() || v.downcast::<PyTuple>().is_ok() {
        out.push('[');
        each(v, out, |out, x| write_value(out, x, depth + 1))?;
        out.push(']');
        return Ok(());
    }
    if let Ok(d) = v.downcast::<PyDict>() {
        out.push('{');
        for (i, (k, x)) in d.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let k = k
                .downcast::<PyString>()
                .map_err(|_| Refused("a dict key that is not a string"))?;
            write_str(out, k)?;
            out.push(':');
            write_value(out, &x, depth + 1)?;
        }
        out.push('}');
        return Ok(());
    }
    write_plain(out, v)
}

/// None, a bool, an int of 64 bits (signed or not) or a string, as orjson writes them.
fn write_plain(out: &mut String, v: &Bound<'_, PyAny>) -> Written {
    if v.is_none() {
        out.push_str("null");
    } else if let Ok(b) = v.downcast::<PyBool>() {
        out.push_str(if b.is_true() { "true" } else { "false" });
    } else if let Ok(s) = v.downcast::<PyString>() {
        write_str(out, s)?;
    } else if v.downcast::<PyInt>().is_ok() {
        let mut digits = itoa::Buffer::new();
        if let Ok(n) = v.extract::<i64>() {
            out.push_str(digits.format(n));
        } else if let Ok(n) = v.extract::<u64>() {
            out.push_str(digits.format(n));
        } else {
            return Err(Refused("an integer beyond 64 bits"));
        }
    } else {
        return Err(Refused("a value of another type"));
    }
    Ok(())
}

fn write_hex(out: &mut String, b: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.reserve(b.len() * 2 + 2);
    out.push('"');
    for &x in b {
        out.push(HEX[usize::from(x >> 4)] as char);
        out.push(HEX[usize::from(x & 15)] as char);
    }
    out.push('"');
}

fn write_str(out: &mut String, s: &Bound<'_, PyString>) -> Written {
    let text = s
        .to_str()
        .map_err(|_| Refused("a string that is not valid UTF-8"))?;
    escape_into(out, text);
    Ok(())
}

/// What each byte becomes in a JSON string: 0 itself, b'u' `\u00xx`, else `\` and that byte.
const ESCAPES: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut b = 0;
    while b < 0x20 {
        t[b] = b'u';
        b += 1;
    }
    t[0x08] = b'b';
    t[0x0c] = b'f';
    t[b'\n' as usize] = b'n';
    t[b'\r' as usize] = b'r';
    t[b'\t' as usize] = b't';
    t[b'"' as usize] = b'"';
    t[b'\\' as usize] = b'\\';
    t
};

/// `text` as a JSON string with orjson's escapes.
fn escape_into(out: &mut String, text: &str) {
    out.reserve(text.len() + 2);
    out.push('"');
    let mut plain_from = 0;
    for (i, b) in text.bytes().enumerate() {
        let escape = ESCAPES[usize::from(b)];
        if escape == 0 {
            continue;
        }
        out.push_str(&text[plain_from..i]);
        if escape == b'u' {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.push_str("\\u00");
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 15)]));
        } else {
            out.push('\\');
            out.push(char::from(escape));
        }
        plain_from = i + 1;
    }
    out.push_str(&text[plain_from..]);
    out.push('"');
}
