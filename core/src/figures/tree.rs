//! The lean tree of a message, in the full decoder's shape (`dissectors.field.Field`:
//! name, type, value, offset and length in the message, children, notes, `extra`): its
//! nodes in one vector, children as indexes into it; names and types as numbers of the
//! symbol table [`Syms`], which the binding (`py/figures.rs`) turns into Python strings
//! once. The walk (`walk.rs`) makes trees; the binding, `table/` and the rows (`rows.rs`)
//! read them.

use std::collections::HashMap;

use crate::records::BatchHead;

/// A name or type of a node: a symbol of the table, an array index `[i]` or a tag `tag_<n>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Name {
    Sym(u32),
    Index(usize),
    Tag(u64),
}

/// A node's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Int(i64),
    Bool(bool),
    Float(f64),
    Str(String),
    Uuid([u8; 16]),
}

/// A node's side channel (`Field.extra`).
#[derive(Debug, Clone, PartialEq)]
pub enum Extra {
    None,
    /// `{"error_code": v}`: an error code annotated as the full decoder does
    ErrorCode(i64),
    /// a records field's lean summary (`null`: null records)
    Records {
        records: i64,
        bytes: usize,
        codec: &'static str,
        crc_ok: bool,
        truncated: bool,
        null: bool,
        /// its v2 batches' heads (extra["batches"], handed to the front with
        /// [`Figures::check`](super::Figures::check))
        batches: Option<Vec<BatchHead>>,
    },
    /// `{"malformed_at": offset}`: a body whose walk stopped at bad bytes
    MalformedAt(usize),
    /// `{"versions": {api_key: (min_version, max_version)}}`: an ApiVersions answer's
    /// api_keys in one value, its elements not kept ([`Figures::check`](super::Figures::check))
    Versions(Vec<(i64, i64, i64)>),
}

/// One kept item (`dissectors.field.Field`).
#[derive(Debug, Clone)]
pub struct Node {
    pub name: Name,
    pub ty: Name,
    pub value: Value,
    pub offset: usize,
    pub length: usize,
    pub children: Option<Vec<usize>>,
    pub notes: Vec<String>,
    pub extra: Extra,
    /// an error code (what the root's `errors` collect)
    pub error: bool,
}

impl Node {
    /// Its value when an integer.
    pub(super) fn int(&self) -> Option<i64> {
        match self.value {
            Value::Int(v) => Some(v),
            _ => None,
        }
    }
}

/// What a walk adds to the run's counters (`DecodeContext`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    pub malformed: u32,
    pub crc_valid: u32,
    pub crc_invalid: u32,
    pub trailing: u32,
    /// each limit hit, in order ("max_array_len", "max_decompressed")
    pub limits: Vec<&'static str>,
}

/// The lean tree of one message: `nodes[root]` is its root. `errors_root`: the root
/// carries `errors` (the non-zero error codes in wire order); otherwise it is a plain root
/// (a request or response whose header could not be read).
#[derive(Debug, Clone)]
pub struct Tree {
    pub nodes: Vec<Node>,
    pub root: usize,
    pub errors_root: bool,
    pub errors: Vec<i64>,
    pub counts: Counts,
    /// a consumer-protocol payload in it has bad bytes (or hits a limit): the message is the
    /// full decoder's to read, which marks them where they are
    /// ([`Figures::set_consumer`](super::Figures::set_consumer))
    pub full: bool,
}

impl Tree {
    /// The children of node `id` (none for a leaf).
    pub fn kids(&self, id: usize) -> &[usize] {
        self.nodes[id].children.as_deref().unwrap_or(&[])
    }
}

/// A UUID as text, as Python's `str(uuid.UUID(bytes=u))` writes it.
pub fn uuid_text(u: &[u8; 16]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(36);
    for (i, b) in u.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        s.push(HEX[usize::from(b >> 4)] as char);
        s.push(HEX[usize::from(b & 15)] as char);
    }
    s
}

/// Every name and type a tree can carry, numbered: the Python side makes each string once.
#[derive(Debug, Default)]
pub struct Syms {
    names: Vec<String>,
    index: HashMap<String, u32>,
}

impl Syms {
    pub fn get(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = u32::try_from(self.names.len()).unwrap_or(u32::MAX);
        self.names.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }

    pub fn name(&self, i: u32) -> &str {
        self.names.get(i as usize).map_or("", String::as_str)
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// A node without children.
pub(super) fn leaf(name: Name, ty: Name, value: Value, offset: usize, length: usize) -> Node {
    Node {
        name,
        ty,
        value,
        offset,
        length,
        children: None,
        notes: Vec::new(),
        extra: Extra::None,
        error: false,
    }
}

/// A node with children (none yet).
pub(super) fn branch(name: Name, ty: Name, value: Value, offset: usize, length: usize) -> Node {
    let mut n = leaf(name, ty, value, offset, length);
    n.children = Some(Vec::new());
    n
}

/// The start of the note of a node where bad bytes stopped the walk (`malformed: <reason>`).
pub(super) const MALFORMED: &str = "malformed: ";
