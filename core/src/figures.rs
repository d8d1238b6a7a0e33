//! The lean figures walk: a Kafka message body read against the schema, keeping only the
//! fields the per-exchange figures read (`stats`, `live`, the Spark tables, the insights).
//!
//! The schema is the Python one (`dissectors/schema_data.py`), handed over at start-up as
//! [`ApiDef`] values: there is no second table. A body of an (API, version, direction) is
//! walked by a [`Plan`] compiled from it on first use. What is kept:
//!
//! - error codes anywhere in the message that are not zero (their names, in wire order,
//!   are the root's `errors`);
//! - records fields, as the lean summary of `records.rs` (counts, codec, CRC verdicts);
//! - the figures named in [`ANCHORS`] (throttle, waits, acks, the group and consumer-lag
//!   fields...), and [`COMPANIONS`] (topic names and ids, partition indexes) in a struct
//!   kept for another reason; a Fetch request's forgotten topics whole (names or ids and
//!   partitions);
//! - the structs and arrays that lead to them; but an element of an array of structs that
//!   keep fixed-size error codes and companions alone (the partitions of a Metadata or
//!   Produce answer) is kept only when one of its codes is not zero.
//!
//! The partitions of Fetch requests and answers and of Produce requests are read off their
//! trees into rows ([`Figures::fetch_request_rows`], [`Figures::fetch_rows`],
//! [`Figures::produce_request_rows`]), which the binding hands over as the body's
//! `extra["fetch"]` or `extra["produce"]` instead of the topics array's nodes (but for
//! `check`, for a request's topics with `topics`, and where bad bytes are marked in it).
//!
//! With `topics` ([`Figures::new`]) a request's top-level topics arrays ([`TOPIC_ARRAYS`])
//! are kept too, with their names and the indexes of their partitions: what `stats` reads
//! when it groups by topic or partition.
//!
//! Everything else is stepped over by length. What is kept has the full decoder's shape
//! (`dissectors/decoder.py`: names, types, values, offsets), so the readers of its trees
//! read these unchanged; the root holds the body alone (a header is there only when it is
//! malformed). Bad bytes stop the walk with a `malformed:` node where they are, as in the
//! full decoder. Every length from the wire is checked before it is used.

use std::collections::HashMap;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::records::{lean_summary, BatchHead};

/// Fields kept wherever they are (with the structs that lead to them).
pub const ANCHORS: [&str; 20] = [
    "throttle_time_ms",
    "max_wait_ms",
    "min_bytes",
    "acks",
    "assignments",
    "mechanism",
    "group_id",
    "isolation_level",
    "session_id",
    "session_epoch",
    "fetch_offset",
    "high_watermark",
    "last_stable_offset",
    "forgotten_topics_data",
    "transactional_id",
    "member_id",
    "generation_id",
    "generation_id_or_member_epoch",
    "protocol_name",
    "leader",
];

/// Fields kept in a struct kept for another reason: topic names and ids, partition indexes.
pub const COMPANIONS: [&str; 6] = [
    "name",
    "topic",
    "index",
    "partition",
    "partition_index",
    "topic_id",
];

/// A Fetch request's topics to drop from its session: kept (an anchor) with their names or
/// ids and partitions, in every mode.
const FORGOTTEN_TOPICS: &str = "forgotten_topics_data";

/// With topics on ([`Figures::new`]): a request's top-level arrays of topics, kept with
/// their names or ids and the indexes of their partitions (what `stats` groups by when
/// asked to group by topic or partition, and what a `read` summary line names), besides
/// what the figures keep.
pub const TOPIC_ARRAYS: [&str; 2] = ["topics", "topic_data"];
const TOPIC_NAMES: [&str; 3] = ["name", "topic", "topic_name"];
const PARTITION_ARRAYS: [&str; 3] = ["partitions", "partition_indexes", "partition_data"];
const PARTITION_INDEXES: [&str; 3] = ["partition_index", "partition", "index"];

/// Where a struct sits, for the topics' keeping: a request body's top level, an element of
/// its topics array, an element of that topic's partitions array, or anywhere else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    Plain,
    RequestTop,
    Topic,
    Partition,
    /// an element of an ApiVersions answer's api_keys, read into a table
    Table,
}

/// The fields of an ApiVersions answer's api_keys element its table holds, in order.
const TABLE_FIELDS: [&str; 3] = ["api_key", "min_version", "max_version"];

impl Scope {
    /// Is `fd` kept in this scope for the topics' sake (array fields: kept whole)?
    fn keeps(self, fd: &FieldDef) -> bool {
        let n = fd.name.as_str();
        match self {
            Scope::Plain => false,
            Scope::RequestTop => fd.ty == "array" && TOPIC_ARRAYS.contains(&n),
            Scope::Topic => {
                (fd.ty == "string" && TOPIC_NAMES.contains(&n))
                    || (fd.ty == "uuid" && n == "topic_id")
                    || (fd.ty == "array" && PARTITION_ARRAYS.contains(&n))
            }
            Scope::Partition => fixed_of(&fd.ty).is_some() && PARTITION_INDEXES.contains(&n),
            Scope::Table => fixed_of(&fd.ty).is_some() && TABLE_FIELDS.contains(&n),
        }
    }

    /// The scope of the elements of an array `fd` kept in this scope.
    fn inner(self, fd: &FieldDef) -> Scope {
        match self {
            Scope::RequestTop if self.keeps(fd) => Scope::Topic,
            Scope::Topic if self.keeps(fd) => Scope::Partition,
            _ => Scope::Plain,
        }
    }
}

/// A version range, both ends included.
pub type Range = (i32, i32);

fn in_range(version: i32, r: Option<Range>) -> bool {
    matches!(r, Some((lo, hi)) if lo <= version && version <= hi)
}

/// One field of the schema (`dissectors.schema.FieldDef`).
#[derive(Debug, Clone)]
pub struct FieldDef {
    pub name: String,
    /// the wire type: a primitive, "struct" or "array"
    pub ty: String,
    pub versions: Range,
    pub nullable: Option<Range>,
    pub tag: Option<i64>,
    pub tagged: Option<Range>,
    pub struct_name: Option<String>,
    /// an array's element type: a primitive or "struct"
    pub element: Option<String>,
    pub fields: Vec<FieldDef>,
    /// its meaning is "error_code" (an error code of another type than int16, or named so)
    pub error_meaning: bool,
    /// a bytes field whose payload is a consumer-protocol message (its meaning is
    /// "consumer_subscription" or "consumer_assignment")
    pub nested: Option<Nested>,
}

/// The consumer-protocol message a JoinGroup / SyncGroup / DescribeGroups bytes field
/// carries (`dissectors/consumer.py`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nested {
    Subscription,
    Assignment,
}

/// The newest consumer-protocol version; a newer one is read as this one.
const CONSUMER_MAX_VERSION: i16 = 3;

/// One API of the schema (`dissectors.schema.ApiDef`).
#[derive(Debug, Clone)]
pub struct ApiDef {
    pub key: i16,
    pub name: String,
    pub min_version: i16,
    pub max_version: i16,
    pub flexible_from: Option<i16>,
    pub request: Vec<FieldDef>,
    pub response: Vec<FieldDef>,
}

impl ApiDef {
    fn flexible(&self, version: i16) -> bool {
        matches!(self.flexible_from, Some(f) if version >= f)
    }
}

/// Fixed-size wire types: (size, kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fixed {
    I8,
    I16,
    I32,
    I64,
    U16,
    U32,
    F64,
    Bool,
    Uuid,
}

fn fixed_of(ty: &str) -> Option<Fixed> {
    Some(match ty {
        "int8" => Fixed::I8,
        "int16" => Fixed::I16,
        "int32" => Fixed::I32,
        "int64" => Fixed::I64,
        "uint16" => Fixed::U16,
        "uint32" => Fixed::U32,
        "float64" => Fixed::F64,
        "bool" => Fixed::Bool,
        "uuid" => Fixed::Uuid,
        _ => return None,
    })
}

impl Fixed {
    fn size(self) -> usize {
        match self {
            Fixed::I8 | Fixed::Bool => 1,
            Fixed::I16 | Fixed::U16 => 2,
            Fixed::I32 | Fixed::U32 => 4,
            Fixed::I64 | Fixed::F64 => 8,
            Fixed::Uuid => 16,
        }
    }

    fn read(self, b: &[u8]) -> Value {
        match self {
            Fixed::I8 => Value::Int(i64::from(b[0] as i8)),
            Fixed::I16 => Value::Int(i64::from(i16::from_be_bytes([b[0], b[1]]))),
            Fixed::I32 => Value::Int(i64::from(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))),
            Fixed::I64 => Value::Int(i64::from_be_bytes(b[..8].try_into().unwrap_or([0; 8]))),
            Fixed::U16 => Value::Int(i64::from(u16::from_be_bytes([b[0], b[1]]))),
            Fixed::U32 => Value::Int(i64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))),
            Fixed::F64 => Value::Float(f64::from_be_bytes(b[..8].try_into().unwrap_or([0; 8]))),
            Fixed::Bool => Value::Bool(b[0] != 0),
            Fixed::Uuid => Value::Uuid(b[..16].try_into().unwrap_or([0; 16])),
        }
    }
}

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
        /// extra["batches"], with [`Figures::check`]
        batches: Option<Vec<BatchHead>>,
    },
    /// `{"malformed_at": offset}`: a body whose walk stopped at bad bytes
    MalformedAt(usize),
    /// `{"versions": {api_key: (min_version, max_version)}}`: an ApiVersions answer's
    /// api_keys in one value, its elements not kept ([`Figures::check`])
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
    fn int(&self) -> Option<i64> {
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
    /// full decoder's to read, which marks them where they are ([`Figures::set_consumer`])
    pub full: bool,
}

/// A records field's figures: records, bytes, codec, CRC verdict (its summary's, else its
/// value and length), as `dissectors.summary.records_figures` reads them.
fn records_figures(n: &Node) -> (i64, i64, Option<&'static str>, bool) {
    match &n.extra {
        Extra::Records {
            records,
            bytes,
            codec,
            crc_ok,
            ..
        } => (*records, *bytes as i64, Some(*codec), *crc_ok),
        _ => (n.int().unwrap_or(0), n.length as i64, None, true),
    }
}

/// One partition of a Produce request as its body's `extra["produce"]` holds it (see
/// [`Figures::produce_request_rows`]): its digest's figures, and where its records field is
/// (offset and length in the message, for the producer story's batches).
#[derive(Debug, Clone, PartialEq)]
pub struct ProduceRow {
    pub topic: Option<String>,
    pub topic_id: Option<[u8; 16]>,
    pub partition: Option<i64>,
    pub records: i64,
    pub bytes: i64,
    pub codec: Option<&'static str>,
    pub crc_ok: bool,
    pub at: Option<(usize, usize)>,
}

/// One partition of a Fetch request as its body's `extra["fetch"]` holds it (see
/// [`Figures::fetch_request_rows`]): what the consumer lag reads of it.
#[derive(Debug, Clone, PartialEq)]
pub struct FetchAsk {
    pub topic: Option<String>,
    pub topic_id: Option<[u8; 16]>,
    pub partition: Option<i64>,
    pub fetch_offset: Option<i64>,
}

/// One partition of a Fetch answer as `extra["fetch"]` holds it (see [`Figures::fetch_rows`]):
/// what the partition digests and the consumer lag read of it.
#[derive(Debug, Clone, PartialEq)]
pub struct FetchRow {
    pub topic: Option<String>,
    pub topic_id: Option<[u8; 16]>,
    pub partition: Option<i64>,
    /// 0 when the answer has none
    pub error_code: i64,
    pub high_watermark: Option<i64>,
    pub last_stable_offset: Option<i64>,
    /// the records field's figures: records, bytes, codec, CRC verdict (0, 0, None, true
    /// without one)
    pub records: i64,
    pub bytes: i64,
    pub codec: Option<&'static str>,
    pub crc_ok: bool,
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

// -- the symbol table ------------------------------------------------------------------

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

// -- plans -------------------------------------------------------------------------------

#[derive(Debug)]
struct FixedField {
    name: u32,
    ty: u32,
    kind: Fixed,
    keep: bool,
    error: bool,
    meaning: bool,
}

#[derive(Debug)]
enum Op {
    Fixed(Vec<FixedField>, usize),
    Varint { name: u32, ty: u32, max: usize },
    Str { name: u32, keep: bool },
    Bytes { name: u32, nested: Option<Nested> },
    Records { name: u32 },
    Struct(Box<StructOp>),
    Array(Box<ArrayOp>),
    Unsupported { name: u32, ty: u32, text: String },
}

#[derive(Debug)]
struct StructOp {
    name: u32,
    plan: Plan,
    nullable: bool,
    keep: bool,
}

#[derive(Debug)]
struct ArrayOp {
    name: u32,
    elem: Elem,
    elem_min: usize,
    keep: bool,
    /// an ApiVersions answer's api_keys read into [`Extra::Versions`]
    table: bool,
}

#[derive(Debug)]
enum Elem {
    Struct(Plan),
    Prim(PrimElem),
}

#[derive(Debug, Default)]
struct Plan {
    ops: Vec<Op>,
    /// (tag, op): the last of a repeated tag wins, as in a dict
    tags: Vec<(i64, Op)>,
    flexible: bool,
    min_size: usize,
    type_name: u32,
    /// keeps fixed-size error codes and companions alone: as an array element it is kept
    /// only when one of its error codes is not zero
    errors_only: bool,
}

fn is_error(fd: &FieldDef) -> bool {
    fd.error_meaning
        || (fd.ty == "int16" && (fd.name == "error_code" || fd.name.ends_with("_error_code")))
}

fn is_anchor(name: &str) -> bool {
    ANCHORS.contains(&name)
}

fn is_companion(name: &str) -> bool {
    COMPANIONS.contains(&name)
}

fn kept(fd: &FieldDef, companions: bool) -> bool {
    is_anchor(&fd.name) || is_error(fd) || (companions && is_companion(&fd.name))
}

/// Does this field, or anything below it, have to be kept?
fn wanted(fd: &FieldDef) -> bool {
    is_anchor(&fd.name) || fd.ty == "records" || is_error(fd) || fd.fields.iter().any(wanted)
}

fn min_size(fd: &FieldDef, flexible: bool) -> usize {
    if let Some(f) = fixed_of(&fd.ty) {
        return f.size();
    }
    match fd.ty.as_str() {
        "string" | "bytes" | "records" | "array" if flexible => 1,
        "struct" => 0,
        "string" => 2,
        "bytes" | "records" | "array" => 4,
        "varint" | "varlong" => 1,
        _ => 0,
    }
}

/// (field, tagged) for the fields of a struct present at this version, in wire order.
fn present(fields: &[FieldDef], version: i32, flexible: bool) -> Vec<(&FieldDef, bool)> {
    let mut out = Vec::new();
    for fd in fields {
        if flexible && fd.tag.is_some() && (fd.tagged.is_none() || in_range(version, fd.tagged)) {
            if fd.tagged.is_none() && !in_range(version, Some(fd.versions)) {
                continue;
            }
            out.push((fd, true));
            continue;
        }
        if !in_range(version, Some(fd.versions)) || (fd.tag.is_some() && !flexible) {
            continue;
        }
        out.push((fd, false));
    }
    out
}

fn errors_only(present: &[(&FieldDef, bool)]) -> bool {
    let wanted: Vec<_> = present.iter().filter(|(fd, _)| wanted(fd)).collect();
    !wanted.is_empty()
        && wanted.iter().all(|(fd, tagged)| {
            !tagged && fixed_of(&fd.ty).is_some() && is_error(fd) && !is_anchor(&fd.name)
        })
        && !present
            .iter()
            .any(|(fd, tagged)| *tagged && is_companion(&fd.name))
}

struct Compiler<'a> {
    syms: &'a mut Syms,
    version: i32,
    flexible: bool,
    /// an ApiVersions answer with [`Figures::check`]: its api_keys become a table
    table: bool,
}

/// The element op of an array of primitives: `keep` makes each element a node `[i]`.
#[derive(Debug)]
struct PrimElem {
    op: Op,
    keep: bool,
}

impl Compiler<'_> {
    fn plan(&mut self, fields: &[FieldDef], type_name: &str, scope: Scope) -> Plan {
        let mut plan = Plan {
            flexible: self.flexible,
            type_name: self.syms.get(type_name),
            ..Plan::default()
        };
        let present = present(fields, self.version, self.flexible);
        let companions = present.iter().any(|(fd, _)| wanted(fd));
        let field = |c: &mut Self, fd: &FieldDef| c.field(fd, companions, scope);
        let mut run: Vec<FixedField> = Vec::new();
        let mut run_size = 0;
        for &(fd, tagged) in &present {
            if tagged {
                let (op, _) = field(self, fd);
                plan.tags.push((fd.tag.unwrap_or(-1), op));
                continue;
            }
            if let Some(kind) = fixed_of(&fd.ty) {
                let keep = kept(fd, companions) || scope.keeps(fd);
                run.push(self.fixed_field(fd, kind, keep));
                run_size += kind.size();
                plan.min_size += kind.size();
                continue;
            }
            if !run.is_empty() {
                plan.ops.push(Op::Fixed(std::mem::take(&mut run), run_size));
                run_size = 0;
            }
            let (op, size) = field(self, fd);
            plan.ops.push(op);
            plan.min_size += size;
        }
        if !run.is_empty() {
            plan.ops.push(Op::Fixed(run, run_size));
        }
        if self.flexible {
            plan.min_size += 1;
        }
        // (a topic or partition element kept for the topics is kept whatever its codes)
        plan.errors_only =
            errors_only(&present) && !matches!(scope, Scope::Topic | Scope::Partition);
        plan
    }

    fn fixed_field(&mut self, fd: &FieldDef, kind: Fixed, keep: bool) -> FixedField {
        FixedField {
            name: self.syms.get(&fd.name),
            ty: self.syms.get(&fd.ty),
            kind,
            keep,
            error: is_error(fd),
            meaning: fd.error_meaning,
        }
    }

    /// The op of one field (regular or tagged) and its least size.
    fn field(&mut self, fd: &FieldDef, companions: bool, scope: Scope) -> (Op, usize) {
        let nullable = in_range(self.version, fd.nullable);
        let topics = scope.keeps(fd);
        let keep = kept(fd, companions) || topics;
        let name = self.syms.get(&fd.name);
        if let Some(kind) = fixed_of(&fd.ty) {
            let f = self.fixed_field(fd, kind, keep);
            return (Op::Fixed(vec![f], kind.size()), kind.size());
        }
        match fd.ty.as_str() {
            "varint" | "varlong" => {
                let max = if fd.ty == "varint" { 5 } else { 10 };
                let ty = self.syms.get(&fd.ty);
                (Op::Varint { name, ty, max }, 1)
            }
            "string" => (Op::Str { name, keep }, min_size(fd, self.flexible)),
            "bytes" => (
                Op::Bytes {
                    name,
                    nested: fd.nested,
                },
                min_size(fd, self.flexible),
            ),
            "records" => (Op::Records { name }, min_size(fd, self.flexible)),
            "struct" => {
                let tname = fd.struct_name.clone().unwrap_or_else(|| fd.name.clone());
                let plan = self.plan(&fd.fields, &tname, Scope::Plain);
                let size = if nullable { 1 } else { plan.min_size };
                let op = StructOp {
                    name,
                    plan,
                    nullable,
                    keep: wanted(fd),
                };
                (Op::Struct(Box::new(op)), size)
            }
            "array" => {
                let el = fd.element.as_deref().unwrap_or("struct");
                let table = self.table && el == "struct" && fd.name == "api_keys";
                let (elem, elem_min, keep) = if el == "struct" {
                    let tname = fd.struct_name.clone().unwrap_or_else(|| fd.name.clone());
                    let inner = if table {
                        Scope::Table
                    } else if fd.name == FORGOTTEN_TOPICS {
                        // (what the consumer lag drops from a fetch session: its topics and
                        // their partitions, wherever the figures keep the array)
                        Scope::Topic
                    } else {
                        scope.inner(fd)
                    };
                    let plan = self.plan(&fd.fields, &tname, inner);
                    let m = plan.min_size.max(1);
                    (Elem::Struct(plan), m, wanted(fd) || topics || table)
                } else {
                    let efd = FieldDef {
                        name: "[]".into(),
                        ty: el.into(),
                        versions: (0, 0x7FFF),
                        nullable: None,
                        tag: None,
                        tagged: None,
                        struct_name: None,
                        element: None,
                        fields: Vec::new(),
                        error_meaning: false,
                        nested: None,
                    };
                    // (kept for the topics: each element a node, as the full decoder has it)
                    let (mut op, m) = self.field(&efd, false, Scope::Plain);
                    if topics {
                        match &mut op {
                            Op::Fixed(run, _) => run.iter_mut().for_each(|f| f.keep = true),
                            Op::Str { keep, .. } => *keep = true,
                            _ => {}
                        }
                    }
                    let elem = PrimElem { op, keep: topics };
                    (Elem::Prim(elem), m.max(1), topics)
                };
                let op = ArrayOp {
                    name,
                    elem,
                    elem_min,
                    keep,
                    table,
                };
                (Op::Array(Box::new(op)), min_size(fd, self.flexible))
            }
            other => {
                let ty = self.syms.get(other);
                let text = format!("type {} is not supported by the decoder", py_repr(other));
                (Op::Unsupported { name, ty, text }, 0)
            }
        }
    }
}

/// Python's `repr` of a plain ASCII string (the schema's type names).
fn py_repr(s: &str) -> String {
    if s.contains('\'') && !s.contains('"') {
        format!("\"{s}\"")
    } else {
        format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
    }
}

// -- the walk --------------------------------------------------------------------------

/// Bad bytes: where the walk stops (`out`: the node whose children get the malformed node).
struct Bad {
    reason: String,
    name: Name,
    ty: Name,
    offset: usize,
    out: usize,
}

type Step = Result<usize, Bad>;

/// The symbols the walk itself names nodes with.
#[derive(Debug, Clone, Copy)]
struct Known {
    array: u32,
    string: u32,
    records: u32,
    bytes: u32,
    tagged_fields: u32,
    tag: u32,
    body: u32,
    header: u32,
    request: u32,
    response: u32,
    request_type: u32,
    request_header: u32,
    protocol_type: u32,
}

impl Known {
    fn new(syms: &mut Syms) -> Known {
        Known {
            array: syms.get("array"),
            string: syms.get("string"),
            records: syms.get("records"),
            bytes: syms.get("bytes"),
            tagged_fields: syms.get("tagged_fields"),
            tag: syms.get("tag"),
            body: syms.get("body"),
            header: syms.get("header"),
            request: syms.get("request"),
            response: syms.get("response"),
            request_type: syms.get("Request"),
            request_header: syms.get("RequestHeader"),
            protocol_type: syms.get("protocol_type"),
        }
    }
}

fn leaf(name: Name, ty: Name, value: Value, offset: usize, length: usize) -> Node {
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

fn branch(name: Name, ty: Name, value: Value, offset: usize, length: usize) -> Node {
    let mut n = leaf(name, ty, value, offset, length);
    n.children = Some(Vec::new());
    n
}

const MALFORMED: &str = "malformed: ";

struct Walk<'a> {
    buf: &'a [u8],
    syms: &'a Syms,
    k: Known,
    flexible: bool,
    nodes: Vec<Node>,
    errs: Vec<i64>,
    counts: Counts,
    max_array_len: i64,
    max_decompressed: i64,
    /// [`Figures::check`]: records fields carry their batches' producer state
    check: bool,
    /// the consumer-protocol payloads read (their kind and bytes), and whether the body's
    /// protocol_type is "consumer" (then the full decoder reads and judges them)
    payloads: Vec<(Nested, usize, usize)>,
    consumer_type: bool,
    /// a consumer payload has bad bytes: see [`Tree::full`]
    full: bool,
}

impl Walk<'_> {
    fn add(&mut self, out: usize, node: Node) -> usize {
        let id = self.nodes.len();
        self.nodes.push(node);
        self.attach(out, id);
        id
    }

    fn attach(&mut self, out: usize, id: usize) {
        self.nodes[out]
            .children
            .get_or_insert_with(Vec::new)
            .push(id);
    }

    /// The text of a type symbol (a length prefix's "string", "bytes", "records", "array").
    fn ty_name(&self, ty: Name) -> &str {
        match ty {
            Name::Sym(i) => self.syms.name(i),
            _ => "",
        }
    }

    fn bad(reason: String, name: Name, ty: Name, offset: usize, out: usize) -> Bad {
        Bad {
            reason,
            name,
            ty,
            offset,
            out,
        }
    }

    /// Mark bad bytes: a malformed node where the walk stopped.
    fn mark(&mut self, e: Bad, end: usize) {
        let mut node = leaf(
            e.name,
            e.ty,
            Value::Null,
            e.offset,
            end.saturating_sub(e.offset),
        );
        node.notes.push(format!("{MALFORMED}{}", e.reason));
        self.counts.malformed += 1;
        self.add(e.out, node);
    }

    /// An unsigned LEB128 varint at `pos` of at most `max` bytes: (value, next position).
    #[allow(clippy::too_many_arguments)]
    fn uvar(
        &self,
        pos: usize,
        end: usize,
        name: Name,
        ty: Name,
        out: usize,
        max: usize,
    ) -> Result<(u64, usize), Bad> {
        match crate::wire::uvarint(self.buf, pos, end, max) {
            // (ten bytes hold 70 bits: the value is its low 64, as a u64 shifted in)
            Ok((v, next)) => Ok((v as u64, next)),
            Err(crate::wire::Varint::Cut) => Err(Self::bad(
                "varint runs past the end of the message".into(),
                name,
                ty,
                pos,
                out,
            )),
            Err(crate::wire::Varint::TooLong) => Err(Self::bad(
                format!("varint longer than {max} bytes"),
                name,
                ty,
                pos,
                out,
            )),
        }
    }

    /// A length / count prefix: (the length, -1 for null; the position after it).
    fn prefix(
        &self,
        wide: bool,
        pos: usize,
        end: usize,
        name: Name,
        ty: Name,
        out: usize,
    ) -> Result<(i64, usize), Bad> {
        let buf = self.buf;
        if self.flexible {
            if pos < end && buf[pos] < 0x80 {
                return Ok((i64::from(buf[pos]) - 1, pos + 1));
            }
            let (n, p) = self.uvar(pos, end, name, ty, out, 5)?;
            return Ok((n as i64 - 1, p));
        }
        let size = if wide { 4 } else { 2 };
        if pos + size > end {
            return Err(Self::bad(
                format!(
                    "{} length needs {size} bytes, {} left",
                    self.ty_name(ty),
                    end.saturating_sub(pos)
                ),
                name,
                ty,
                pos,
                out,
            ));
        }
        let n = if wide {
            i64::from(i32::from_be_bytes([
                buf[pos],
                buf[pos + 1],
                buf[pos + 2],
                buf[pos + 3],
            ]))
        } else {
            i64::from(i16::from_be_bytes([buf[pos], buf[pos + 1]]))
        };
        if n < -1 {
            return Err(Self::bad(
                format!("{} length {n} is negative", self.ty_name(ty)),
                name,
                ty,
                pos,
                out,
            ));
        }
        Ok((n, pos + size))
    }

    fn run(&mut self, plan: &Plan, pos: usize, end: usize, out: usize) -> Step {
        let mut p = pos;
        for op in &plan.ops {
            p = self.op(op, p, end, out)?;
        }
        if plan.flexible {
            if p < end && self.buf[p] == 0 {
                return Ok(p + 1);
            }
            p = self.tagged(&plan.tags, p, end, out)?;
        }
        Ok(p)
    }

    /// A tagged-field section: the known tags' ops run over their bytes (what they keep
    /// goes under a `tagged_fields` node, in the tree only when it keeps something).
    fn tagged(&mut self, tags: &[(i64, Op)], pos: usize, end: usize, out: usize) -> Step {
        let start = pos;
        let tf = Name::Sym(self.k.tagged_fields);
        let (n, p) = if pos < end && self.buf[pos] < 0x80 {
            (u64::from(self.buf[pos]), pos + 1)
        } else {
            self.uvar(pos, end, tf, tf, out, 5)?
        };
        if n == 0 {
            return Ok(p);
        }
        if n > (end - p) as u64 {
            return Err(Self::bad(
                format!("tagged field count {n} exceeds the {} bytes left", end - p),
                tf,
                tf,
                start,
                out,
            ));
        }
        self.nodes
            .push(branch(tf, tf, Value::Int(n as i64), start, 0));
        let kept = self.nodes.len() - 1;
        match self.tag_values(tags, n, p, end, kept) {
            Ok(p) => {
                if self.nodes[kept]
                    .children
                    .as_ref()
                    .is_some_and(|c| !c.is_empty())
                {
                    self.nodes[kept].length = p - start;
                    self.attach(out, kept);
                }
                Ok(p)
            }
            Err(e) => {
                // (bad bytes within the section: it stays in the tree with what it read and
                // the mark, as the full decoder leaves it; the stretch after the stop spans it)
                self.attach(out, kept);
                Err(e)
            }
        }
    }

    /// The `n` tagged fields of a section from `pos`, what they keep under `kept`.
    fn tag_values(
        &mut self,
        tags: &[(i64, Op)],
        n: u64,
        pos: usize,
        end: usize,
        kept: usize,
    ) -> Step {
        let tag_sym = Name::Sym(self.k.tag);
        let bytes_sym = Name::Sym(self.k.bytes);
        let mut p = pos;
        for _ in 0..n {
            let tstart = p;
            let (tag, q) = self.uvar(p, end, tag_sym, tag_sym, kept, 5)?;
            let (size, q) = self.uvar(q, end, Name::Tag(tag), bytes_sym, kept, 5)?;
            p = q;
            if size > (end - p) as u64 {
                return Err(Self::bad(
                    format!(
                        "tagged field {tag} size {size} exceeds the {} bytes left",
                        end - p
                    ),
                    Name::Tag(tag),
                    bytes_sym,
                    tstart,
                    kept,
                ));
            }
            let size = size as usize;
            if let Some((_, op)) = tags
                .iter()
                .rev()
                .find(|(t, _)| u64::try_from(*t).is_ok_and(|t| t == tag))
            {
                self.op(op, p, p + size, kept)?;
            }
            p += size;
        }
        Ok(p)
    }

    fn op(&mut self, op: &Op, pos: usize, end: usize, out: usize) -> Step {
        match op {
            Op::Fixed(run, size) => self.fixed(run, *size, pos, end, out),
            Op::Varint { name, ty, max } => Ok(self
                .uvar(pos, end, Name::Sym(*name), Name::Sym(*ty), out, *max)?
                .1),
            Op::Str { name, keep } => self.string(Name::Sym(*name), *keep, pos, end, out),
            Op::Bytes { name, nested } => {
                let (name, ty) = (Name::Sym(*name), Name::Sym(self.k.bytes));
                let (p, q) = self.sized(true, pos, end, name, ty, out)?;
                if let (Some(kind), Some(q)) = (nested, q) {
                    self.payloads.push((*kind, p, q));
                }
                Ok(q.unwrap_or(p))
            }
            Op::Records { name } => self.records(Name::Sym(*name), pos, end, out),
            Op::Struct(s) => self.structure(s, pos, end, out),
            Op::Array(a) => self.array(a, pos, end, out),
            Op::Unsupported { name, ty, text } => Err(Self::bad(
                text.clone(),
                Name::Sym(*name),
                Name::Sym(*ty),
                pos,
                out,
            )),
        }
    }

    /// A run of fixed-size fields: one bound check; the kept ones made nodes (an error
    /// code only when it is not zero).
    fn fixed(
        &mut self,
        run: &[FixedField],
        size: usize,
        pos: usize,
        end: usize,
        out: usize,
    ) -> Step {
        // (one bound check for the run; when it fails, the fields before the one that does
        // not fit are kept, as the full decoder keeps them, and the walk stops there)
        let whole = pos + size <= end;
        let mut p = pos;
        for f in run {
            let ln = f.kind.size();
            if !whole && p + ln > end {
                return Err(Self::bad(
                    format!(
                        "{} needs {ln} bytes, {} left",
                        self.syms.name(f.ty),
                        end.saturating_sub(p)
                    ),
                    Name::Sym(f.name),
                    Name::Sym(f.ty),
                    p,
                    out,
                ));
            }
            if f.keep {
                let value = f.kind.read(&self.buf[p..p + ln]);
                let code = match value {
                    Value::Int(c) => c,
                    Value::Bool(b) => i64::from(b),
                    _ => 0,
                };
                if f.error {
                    if code == 0 {
                        p += ln;
                        continue; // an error code is kept when not zero
                    }
                    self.errs.push(code);
                }
                let mut node = leaf(Name::Sym(f.name), Name::Sym(f.ty), value, p, ln);
                node.error = f.error;
                if f.meaning {
                    node.extra = Extra::ErrorCode(code);
                }
                self.add(out, node);
            }
            p += ln;
        }
        Ok(p)
    }

    /// A length-prefixed item at `pos`: the position after its prefix and its end (None:
    /// null), its length checked against the bytes left.
    fn sized(
        &self,
        wide: bool,
        pos: usize,
        end: usize,
        name: Name,
        ty: Name,
        out: usize,
    ) -> Result<(usize, Option<usize>), Bad> {
        let (n, p) = self.prefix(wide, pos, end, name, ty, out)?;
        if n < 0 {
            return Ok((p, None));
        }
        if n > (end - p) as i64 {
            return Err(Self::bad(
                format!(
                    "{} length {n} exceeds the {} bytes left",
                    self.ty_name(ty),
                    end - p
                ),
                name,
                ty,
                pos,
                out,
            ));
        }
        Ok((p, Some(p + n as usize)))
    }

    fn string(&mut self, name: Name, keep: bool, pos: usize, end: usize, out: usize) -> Step {
        let ty = Name::Sym(self.k.string);
        let (p, q) = self.sized(false, pos, end, name, ty, out)?;
        let Some(q) = q else {
            if keep {
                self.add(out, leaf(name, ty, Value::Null, pos, p - pos));
            }
            return Ok(p);
        };
        if name == Name::Sym(self.k.protocol_type) {
            self.consumer_type = &self.buf[p..q] == b"consumer";
        }
        if keep {
            let text = String::from_utf8_lossy(&self.buf[p..q]).into_owned();
            self.add(out, leaf(name, ty, Value::Str(text), pos, q - pos));
        }
        Ok(q)
    }

    fn records(&mut self, name: Name, pos: usize, end: usize, out: usize) -> Step {
        let ty = Name::Sym(self.k.records);
        let (p, q) = self.sized(true, pos, end, name, ty, out)?;
        let Some(q) = q else {
            let mut node = leaf(name, ty, Value::Null, pos, p - pos);
            node.notes.push("null".into());
            node.extra = Extra::Records {
                records: 0,
                bytes: 0,
                codec: "none",
                crc_ok: true,
                truncated: false,
                null: true,
                batches: None,
            };
            self.add(out, node);
            return Ok(p);
        };
        let s = lean_summary(self.buf, p, q, self.max_array_len, self.max_decompressed);
        self.counts.crc_valid += s.crc_valid;
        self.counts.crc_invalid += s.crc_invalid;
        self.counts.malformed += s.malformed;
        self.counts.limits.extend(s.limits.iter().copied());
        let mut node = leaf(name, ty, Value::Int(s.records), p, q - p);
        node.notes = s.notes;
        node.extra = Extra::Records {
            records: s.records,
            bytes: q - p,
            codec: s.codec,
            crc_ok: s.crc_ok,
            truncated: s.truncated,
            null: false,
            batches: self.check.then_some(s.batches),
        };
        self.add(out, node);
        Ok(q)
    }

    fn structure(&mut self, s: &StructOp, pos: usize, end: usize, out: usize) -> Step {
        let (name, ty) = (Name::Sym(s.name), Name::Sym(s.plan.type_name));
        let mut p = pos;
        if s.nullable {
            if p >= end {
                return Err(Self::bad(
                    "struct presence byte missing".into(),
                    name,
                    ty,
                    pos,
                    out,
                ));
            }
            let marker = self.buf[p];
            p += 1;
            if marker == 0xFF {
                if s.keep {
                    self.add(out, leaf(name, ty, Value::Null, pos, 1));
                }
                return Ok(p);
            }
        }
        if !s.keep {
            return self.run(&s.plan, p, end, out);
        }
        let id = self.add(out, branch(name, ty, Value::Null, pos, 0));
        let q = self.run(&s.plan, p, end, id)?;
        self.nodes[id].length = q - pos;
        Ok(q)
    }

    fn array(&mut self, a: &ArrayOp, pos: usize, end: usize, out: usize) -> Step {
        let (name, ty) = (Name::Sym(a.name), Name::Sym(self.k.array));
        let (n, mut p) = self.prefix(true, pos, end, name, ty, out)?;
        if n > self.max_array_len {
            self.counts.limits.push("max_array_len");
            return Err(Self::bad(
                format!(
                    "array count {n} exceeds max_array_len {}",
                    self.max_array_len
                ),
                name,
                ty,
                pos,
                out,
            ));
        }
        if i128::from(n) * a.elem_min as i128 > (end - p) as i128 {
            return Err(Self::bad(
                format!("array count {n} exceeds the {} bytes left", end - p),
                name,
                ty,
                pos,
                out,
            ));
        }
        match &a.elem {
            Elem::Struct(plan) if a.keep => {
                if n < 0 {
                    self.add(out, leaf(name, ty, Value::Null, pos, p - pos));
                    return Ok(p);
                }
                let arr = self.add(out, branch(name, ty, Value::Int(n), pos, 0));
                let ety = Name::Sym(plan.type_name);
                for i in 0..n as usize {
                    let e = self.add(arr, branch(Name::Index(i), ety, Value::Null, p, 0));
                    let k = self.errs.len();
                    let q = self.run(plan, p, end, e)?;
                    if plan.errors_only && self.errs.len() == k {
                        // its error codes are all zero: nothing to keep (nor what it made)
                        if let Some(c) = self.nodes[arr].children.as_mut() {
                            c.pop();
                        }
                        self.nodes.truncate(e);
                    } else {
                        self.nodes[e].length = q - p;
                    }
                    p = q;
                }
                self.nodes[arr].length = p - pos;
                if a.table {
                    self.table(arr);
                }
                Ok(p)
            }
            Elem::Struct(plan) => {
                for _ in 0..n.max(0) {
                    p = self.run(plan, p, end, out)?;
                }
                Ok(p)
            }
            Elem::Prim(e) if e.keep => {
                if n < 0 {
                    self.add(out, leaf(name, ty, Value::Null, pos, p - pos));
                    return Ok(p);
                }
                let arr = self.add(out, branch(name, ty, Value::Int(n), pos, 0));
                for i in 0..n as usize {
                    let before = self.nodes.len();
                    p = self.op(&e.op, p, end, arr)?;
                    if self.nodes.len() > before {
                        self.nodes[before].name = Name::Index(i);
                    }
                }
                self.nodes[arr].length = p - pos;
                Ok(p)
            }
            Elem::Prim(e) => {
                for _ in 0..n.max(0) {
                    p = self.op(&e.op, p, end, out)?;
                }
                Ok(p)
            }
        }
    }

    /// An ApiVersions answer's api_keys `arr`, walked whole: its elements read into one
    /// [`Extra::Versions`] value and not kept (they are the last nodes made).
    fn table(&mut self, arr: usize) {
        let mut rows = Vec::new();
        for &e in self.nodes[arr].children.as_deref().unwrap_or_default() {
            let mut row = [None; 3];
            for &c in self.nodes[e].children.as_deref().unwrap_or_default() {
                let n = &self.nodes[c];
                if let (Name::Sym(name), Value::Int(v)) = (n.name, &n.value) {
                    if let Some(i) = TABLE_FIELDS.iter().position(|&f| f == self.syms.name(name)) {
                        row[i] = Some(*v);
                    }
                }
            }
            if let [Some(k), Some(lo), Some(hi)] = row {
                rows.push((k, lo, hi));
            }
        }
        self.nodes.truncate(arr + 1);
        self.nodes[arr].children = None;
        self.nodes[arr].extra = Extra::Versions(rows);
    }

    /// After bad bytes: stretch containers over the children they hold (records aside).
    fn fix_lengths(&mut self, id: usize) -> usize {
        let node = &self.nodes[id];
        let mut end = node.offset + node.length;
        if node.ty != Name::Sym(self.k.records) {
            if let Some(children) = node.children.clone() {
                if !children.is_empty() {
                    for c in children {
                        end = end.max(self.fix_lengths(c));
                    }
                    let node = &mut self.nodes[id];
                    node.length = end - node.offset;
                }
            }
        }
        end
    }

    /// The error codes of the tree under `id` in wire order (records not walked).
    fn collect_errors(&self, id: usize, out: &mut Vec<i64>) {
        let node = &self.nodes[id];
        if node.error {
            if let Value::Int(v) = node.value {
                if v != 0 {
                    out.push(v);
                }
            }
        }
        if node.ty != Name::Sym(self.k.records) {
            for &c in node.children.as_deref().unwrap_or(&[]) {
                self.collect_errors(c, out);
            }
        }
    }
}

// -- entry points ----------------------------------------------------------------------

/// The compiled schema and the walks of message bodies against it.
#[derive(Debug)]
pub struct Figures {
    apis: FxHashMap<i16, ApiDef>,
    /// api_key -> the symbols of its root types (request, response)
    roots: FxHashMap<i16, (u32, u32)>,
    syms: Syms,
    k: Known,
    /// (api_key, version, request) -> the body's plan, compiled on first use
    plans: FxHashMap<(i16, i16, bool), Plan>,
    pub max_array_len: i64,
    pub max_decompressed: i64,
    /// keep the request's topics and partition indexes too ([`TOPIC_ARRAYS`])
    pub topics: bool,
    /// API keys left to the full decoder ([`Figures::covers`] says no): those whose bytes
    /// fields carry payloads the walk does not read (SASL tokens), and what `check` reads
    /// in full
    pub full_apis: FxHashSet<i16>,
    /// keep what `check`'s rules read besides the figures: each records field's v2
    /// batches (producer id, epoch, base_sequence...: extra["batches"]) and an ApiVersions
    /// answer's api_keys as one table (extra["versions"], [`Extra::Versions`])
    pub check: bool,
    /// the consumer protocol's Subscription and Assignment plans, versions 0 to
    /// [`CONSUMER_MAX_VERSION`] ([`Figures::set_consumer`]): without them its payloads are
    /// not judged (their APIs are then left to the full decoder)
    consumer: Option<Vec<Plan>>,
}

/// ApiVersions' UNSUPPORTED_VERSION.
const UNSUPPORTED_VERSION: i16 = 35;
const API_VERSIONS: i16 = 18;
const JOIN_GROUP: i16 = 11;
const SYNC_GROUP: i16 = 14;

impl Figures {
    pub fn new(
        apis: Vec<ApiDef>,
        max_array_len: i64,
        max_decompressed: i64,
        topics: bool,
    ) -> Figures {
        let mut syms = Syms::default();
        let k = Known::new(&mut syms);
        let roots = apis
            .iter()
            .map(|a| {
                let q = syms.get(&format!("{}Request", a.name));
                let r = syms.get(&format!("{}Response", a.name));
                (a.key, (q, r))
            })
            .collect();
        Figures {
            roots,
            apis: apis.into_iter().map(|a| (a.key, a)).collect(),
            syms,
            k,
            plans: FxHashMap::default(),
            max_array_len,
            max_decompressed,
            topics,
            full_apis: FxHashSet::default(),
            check: false,
            consumer: None,
        }
    }

    pub fn syms(&self) -> &Syms {
        &self.syms
    }

    /// The consumer protocol's messages (`dissectors.consumer.SUBSCRIPTION`, `ASSIGNMENT`):
    /// with them a JoinGroup or SyncGroup whose protocol_type is "consumer" has its payloads
    /// judged as the full decoder judges them (one with bad bytes, or that hits a limit,
    /// makes the message the full decoder's: [`Tree::full`]).
    pub fn set_consumer(&mut self, subscription: &[FieldDef], assignment: &[FieldDef]) {
        let mut plans = Vec::new();
        for (fields, name) in [
            (subscription, "ConsumerProtocolSubscription"),
            (assignment, "ConsumerProtocolAssignment"),
        ] {
            for v in 0..=CONSUMER_MAX_VERSION {
                let mut c = Compiler {
                    syms: &mut self.syms,
                    version: i32::from(v),
                    flexible: false,
                    table: false,
                };
                plans.push(c.plan(fields, name, Scope::Plain));
            }
        }
        self.consumer = Some(plans);
    }

    /// Would the full decoder mark bad bytes, or hit a limit, in the consumer-protocol
    /// payload `buf[start..end]` (`dissectors.consumer._decode`: an int16 version, a
    /// negative one marked, a newer one read as the newest, trailing bytes only noted)?
    fn payload_bad(&self, kind: Nested, buf: &[u8], start: usize, end: usize) -> bool {
        let Some(plans) = &self.consumer else {
            return false;
        };
        if end - start < 2 {
            return true;
        }
        let version = i16::from_be_bytes([buf[start], buf[start + 1]]);
        if version < 0 {
            return true;
        }
        let used = usize::try_from(version.min(CONSUMER_MAX_VERSION)).unwrap_or(0);
        let kind = match kind {
            Nested::Subscription => 0,
            Nested::Assignment => 1,
        };
        let plan = &plans[kind * (CONSUMER_MAX_VERSION as usize + 1) + used];
        let root = branch(
            Name::Sym(self.k.body),
            Name::Sym(plan.type_name),
            Value::Null,
            start,
            0,
        );
        let mut w = self.walk(buf, false, root);
        match w.run(plan, start + 2, end, 0) {
            Ok(_) => w.counts.malformed > 0 || !w.counts.limits.is_empty(),
            Err(_) => true,
        }
    }

    /// Does the subtree at `id` hold a node marked malformed?
    pub fn marked(t: &Tree, id: usize) -> bool {
        let n = &t.nodes[id];
        n.notes.iter().any(|s| s.starts_with("malformed: "))
            || n.children
                .as_deref()
                .unwrap_or(&[])
                .iter()
                .any(|&c| Self::marked(t, c))
    }

    /// The partition elements of a body's topics array `array` (a Fetch request's `topics`,
    /// an answer's `responses`, a Produce request's `topic_data`), whose partitions array is
    /// `parts_name`, each with its topic's name (`name`, else `topic`) and id: the ids of
    /// the body and of the array, and (topic, topic_id, partition element) in wire order.
    /// None for a tree without a body.
    #[allow(clippy::type_complexity)]
    pub fn topic_partitions(
        &self,
        t: &Tree,
        array: &str,
        parts_name: &str,
    ) -> Option<(
        usize,
        Option<usize>,
        Vec<(Option<String>, Option<[u8; 16]>, usize)>,
    )> {
        let kids = |id: usize| t.nodes[id].children.as_deref().unwrap_or(&[]);
        let child = |id: usize, name: &str| {
            kids(id)
                .iter()
                .copied()
                .find(|&c| self.name_of(t, c) == name)
        };
        let body = child(t.root, "body")?;
        let topics = child(body, array);
        let mut out = Vec::new();
        for &topic in topics.map(kids).unwrap_or(&[]) {
            let (mut name, mut other, mut id, mut parts) = (None, None, None, None);
            for &c in kids(topic) {
                match (self.name_of(t, c), &t.nodes[c].value) {
                    ("name", Value::Str(s)) => name = Some(s.clone()),
                    ("topic", Value::Str(s)) => other = Some(s.clone()),
                    ("topic_id", Value::Uuid(u)) => id = Some(*u),
                    (n, _) if n == parts_name => parts = Some(c),
                    _ => {}
                }
            }
            let name = name.or(other);
            for &p in parts.map(kids).unwrap_or(&[]) {
                out.push((name.clone(), id, p));
            }
        }
        Some((body, topics, out))
    }

    /// A node's name as a symbol's text ("" for an index or a tag).
    pub fn name_of<'t>(&'t self, t: &Tree, id: usize) -> &'t str {
        match t.nodes[id].name {
            Name::Sym(i) => self.syms.name(i),
            _ => "",
        }
    }

    /// A Fetch request's partitions, in wire order, read off its tree as
    /// `dissectors.summary.fetch_request_rows` reads them off the full decoder's (its body's
    /// `extra["fetch"]`), with the ids of its body and of the `topics` array they come
    /// from. None for a tree without a body.
    pub fn fetch_request_rows(&self, t: &Tree) -> Option<(usize, Option<usize>, Vec<FetchAsk>)> {
        let (body, topics, parts) = self.topic_partitions(t, "topics", "partitions")?;
        let mut rows = Vec::new();
        for (topic, topic_id, p) in parts {
            let mut row = FetchAsk {
                topic,
                topic_id,
                partition: None,
                fetch_offset: None,
            };
            for &c in t.nodes[p].children.as_deref().unwrap_or(&[]) {
                match self.name_of(t, c) {
                    "partition" | "partition_index" => row.partition = t.nodes[c].int(),
                    "fetch_offset" => row.fetch_offset = t.nodes[c].int(),
                    _ => {}
                }
            }
            rows.push(row);
        }
        Some((body, topics, rows))
    }

    /// A Produce request's partitions, in wire order, read off its tree as
    /// `dissectors.summary.produce_request_rows` reads them off the full decoder's (its
    /// body's `extra["produce"]`), with the ids of its body and of the `topic_data` array
    /// they come from. None for a tree without a body.
    pub fn produce_request_rows(
        &self,
        t: &Tree,
    ) -> Option<(usize, Option<usize>, Vec<ProduceRow>)> {
        let (body, topic_data, parts) = self.topic_partitions(t, "topic_data", "partition_data")?;
        let mut rows = Vec::new();
        for (topic, topic_id, p) in parts {
            let mut row = ProduceRow {
                topic,
                topic_id,
                partition: None,
                records: 0,
                bytes: 0,
                codec: None,
                crc_ok: true,
                at: None,
            };
            for &c in t.nodes[p].children.as_deref().unwrap_or(&[]) {
                match self.name_of(t, c) {
                    "index" => row.partition = t.nodes[c].int(),
                    "records" => {
                        let n = &t.nodes[c];
                        (row.records, row.bytes, row.codec, row.crc_ok) = records_figures(n);
                        row.at = Some((n.offset, n.length));
                    }
                    _ => {}
                }
            }
            rows.push(row);
        }
        Some((body, topic_data, rows))
    }

    /// A Fetch answer's partitions, in wire order, read off its tree as
    /// `dissectors.summary.fetch_rows` reads them off the full decoder's (the rows its
    /// body's `extra["fetch"]` holds), with the ids of its body and of the `responses`
    /// array they come from. None for a tree without a body.
    pub fn fetch_rows(&self, t: &Tree) -> Option<(usize, Option<usize>, Vec<FetchRow>)> {
        let int = |id: usize| t.nodes[id].int();
        let (body, responses, parts) = self.topic_partitions(t, "responses", "partitions")?;
        let mut rows = Vec::new();
        for (topic, topic_id, p) in parts {
            let mut row = FetchRow {
                topic,
                topic_id,
                partition: None,
                error_code: 0,
                high_watermark: None,
                last_stable_offset: None,
                records: 0,
                bytes: 0,
                codec: None,
                crc_ok: true,
            };
            for &c in t.nodes[p].children.as_deref().unwrap_or(&[]) {
                match self.name_of(t, c) {
                    "partition_index" => row.partition = int(c),
                    "error_code" => row.error_code = int(c).unwrap_or(0),
                    "high_watermark" => row.high_watermark = int(c),
                    "last_stable_offset" => row.last_stable_offset = int(c),
                    "records" => {
                        (row.records, row.bytes, row.codec, row.crc_ok) =
                            records_figures(&t.nodes[c]);
                    }
                    _ => {}
                }
            }
            rows.push(row);
        }
        Some((body, responses, rows))
    }

    /// The name of an API the schema has.
    pub fn api_name(&self, api_key: i16) -> Option<&str> {
        self.apis.get(&api_key).map(|a| a.name.as_str())
    }

    /// Does the schema know this API key?
    pub fn knows(&self, api_key: i16) -> bool {
        self.apis.contains_key(&api_key)
    }

    /// Is this API at this version the walk's (a known API not left to the full decoder, a
    /// version not newer than the schema's newest)?
    pub fn covers(&self, api_key: i16, api_version: i16) -> bool {
        !self.full_apis.contains(&api_key)
            && self
                .apis
                .get(&api_key)
                .is_some_and(|a| api_version <= a.max_version)
    }

    fn clamp(api: &ApiDef, version: i16) -> i16 {
        if version > api.max_version {
            api.max_version
        } else if version < api.min_version {
            version.max(0)
        } else {
            version
        }
    }

    fn plan(&mut self, key: i16, version: i16, request: bool) -> Option<&Plan> {
        if !self.plans.contains_key(&(key, version, request)) {
            let api = self.apis.get(&key)?;
            let flexible = api.flexible(version);
            let type_name = format!(
                "{}{} v{version}",
                api.name,
                if request { "Request" } else { "Response" }
            );
            let fields = if request { &api.request } else { &api.response };
            let mut c = Compiler {
                syms: &mut self.syms,
                version: i32::from(version),
                flexible,
                table: self.check && key == API_VERSIONS && !request,
            };
            let scope = if request && self.topics {
                Scope::RequestTop
            } else {
                Scope::Plain
            };
            let plan = c.plan(fields, &type_name, scope);
            if self.plans.len() >= 4096 {
                self.plans.clear();
            }
            self.plans.insert((key, version, request), plan);
        }
        self.plans.get(&(key, version, request))
    }

    /// A walk over `buf` under this schema's limits, `root` its node 0.
    fn walk<'s>(&'s self, buf: &'s [u8], flexible: bool, root: Node) -> Walk<'s> {
        let mut nodes = Vec::with_capacity(16);
        nodes.push(root);
        Walk {
            buf,
            syms: &self.syms,
            k: self.k,
            flexible,
            nodes,
            errs: Vec::new(),
            counts: Counts::default(),
            max_array_len: self.max_array_len,
            max_decompressed: self.max_decompressed,
            check: self.check,
            payloads: Vec::new(),
            consumer_type: false,
            full: false,
        }
    }

    /// The walk of a body `buf[start..end]`: node 0 is a root to fill, node 1 the body.
    fn body<'s>(
        &'s mut self,
        key: i16,
        version: i16,
        request: bool,
        buf: &'s [u8],
        start: usize,
    ) -> Walk<'s> {
        let k = self.k;
        self.plan(key, version, request);
        let plan = &self.plans[&(key, version, request)];
        let end = buf.len();
        let start = start.min(end);
        let root = branch(
            Name::Sym(k.request),
            Name::Sym(k.request),
            Value::Null,
            0,
            end,
        );
        let mut w = self.walk(buf, plan.flexible, root);
        let body = w.add(
            0,
            branch(
                Name::Sym(k.body),
                Name::Sym(plan.type_name),
                Value::Null,
                start,
                0,
            ),
        );
        match w.run(plan, start, end, body) {
            Ok(mut p) => {
                if p < end {
                    w.counts.trailing += 1;
                    p = end;
                }
                w.nodes[body].length = p - start;
            }
            Err(e) => {
                let at = e.offset;
                w.mark(e, end);
                for c in w.nodes[body].children.clone().unwrap_or_default() {
                    w.fix_lengths(c);
                }
                w.nodes[body].length = end - start;
                w.nodes[body].extra = Extra::MalformedAt(at);
                let mut errs = Vec::new();
                w.collect_errors(body, &mut errs);
                w.errs = errs;
            }
        }
        // (JoinGroup, SyncGroup: the full decoder reads the payloads of a "consumer" group
        // and counts what it marks in them)
        if matches!(key, JOIN_GROUP | SYNC_GROUP) && w.consumer_type {
            w.full = w
                .payloads
                .iter()
                .any(|&(kind, p, q)| self.payload_bad(kind, buf, p, q));
        }
        w
    }

    fn tree(w: Walk<'_>, name: u32, ty: u32) -> Tree {
        let mut nodes = w.nodes;
        nodes[0].name = Name::Sym(name);
        nodes[0].ty = Name::Sym(ty);
        Tree {
            nodes,
            root: 0,
            errors_root: true,
            errors: w.errs,
            counts: w.counts,
            full: w.full,
        }
    }

    /// The lean tree of a request whose header (parsed by the caller) is `header_len` bytes.
    pub fn request(&mut self, buf: &[u8], header_len: usize) -> Tree {
        let n = buf.len();
        let k = self.k;
        if n < 8 {
            let mut root = branch(
                Name::Sym(k.request),
                Name::Sym(k.request_type),
                Value::Null,
                0,
                n,
            );
            root.children = Some(vec![1]);
            let mut header = leaf(
                Name::Sym(k.header),
                Name::Sym(k.request_header),
                Value::Null,
                0,
                header_len,
            );
            header.notes.push(format!(
                "{MALFORMED}request header needs 8 bytes, {n} present"
            ));
            return Tree {
                nodes: vec![root, header],
                root: 0,
                errors_root: false,
                errors: Vec::new(),
                counts: Counts {
                    malformed: 1,
                    ..Counts::default()
                },
                full: false,
            };
        }
        let key = i16::from_be_bytes([buf[0], buf[1]]);
        let version = i16::from_be_bytes([buf[2], buf[3]]);
        let Some(api) = self.apis.get(&key) else {
            let root = branch(
                Name::Sym(k.request),
                Name::Sym(k.request_type),
                Value::Null,
                0,
                n,
            );
            return Tree {
                nodes: vec![root],
                root: 0,
                errors_root: false,
                errors: Vec::new(),
                counts: Counts::default(),
                full: false,
            };
        };
        let version = Self::clamp(api, version);
        let root_type = self.roots[&key].0;
        let w = self.body(key, version, true, buf, header_len);
        Self::tree(w, k.request, root_type)
    }

    /// The lean tree of a response to a request of `api_key` v`api_version` (None: an
    /// API the schema does not know).
    pub fn response(&mut self, buf: &[u8], api_key: i16, api_version: i16) -> Option<Tree> {
        let api = self.apis.get(&api_key)?;
        let n = buf.len();
        let k = self.k;
        let version = Self::clamp(api, api_version);
        let probe = api_key == 18 && version > 0;
        let hv = if api_key == 18 {
            0
        } else {
            usize::from(api.flexible(api_version.min(api.max_version)))
        };
        let root_type = self.roots[&api_key].1;
        let mut pos = 4 + hv;
        if n < pos || (pos == 5 && buf[4] != 0) {
            // the header is short or has tagged fields: read as the full decoder does
            let header_type = format!("ResponseHeader v{hv}");
            let header_type = self.syms.get(&header_type);
            let root = branch(
                Name::Sym(k.response),
                Name::Sym(root_type),
                Value::Null,
                0,
                n,
            );
            let mut w = self.walk(buf, true, root);
            let header = w.add(
                0,
                branch(
                    Name::Sym(k.header),
                    Name::Sym(header_type),
                    Value::Null,
                    0,
                    0,
                ),
            );
            let stop = if n < 4 {
                w.nodes[header].length = n;
                w.nodes[header].notes.push(format!(
                    "{MALFORMED}response header needs 4 bytes, {n} present"
                ));
                w.counts.malformed += 1;
                true
            } else {
                match w.tagged(&[], 4, n, header) {
                    Ok(p) => {
                        pos = p;
                        false
                    }
                    Err(e) => {
                        w.nodes[header].length = n;
                        w.mark(e, n);
                        true
                    }
                }
            };
            if stop {
                return Some(Tree {
                    nodes: w.nodes,
                    root: 0,
                    errors_root: false,
                    errors: Vec::new(),
                    counts: w.counts,
                    full: false,
                });
            }
        }
        let mut version = version;
        if probe
            && n - pos >= 2
            && i16::from_be_bytes([buf[pos], buf[pos + 1]]) == UNSUPPORTED_VERSION
        {
            // an UNSUPPORTED_VERSION answer may be in the v0 layout
            let clean = |w: Walk<'_>| w.counts.malformed == 0 && w.counts.trailing == 0;
            if !clean(self.body(api_key, version, false, buf, pos))
                && clean(self.body(api_key, 0, false, buf, pos))
            {
                version = 0;
            }
        }
        let w = self.body(api_key, version, false, buf, pos);
        Some(Self::tree(w, k.response, root_type))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ANY: i32 = 0x7FFF;

    fn f(name: &str, ty: &str) -> FieldDef {
        FieldDef {
            name: name.into(),
            ty: ty.into(),
            versions: (0, ANY),
            nullable: None,
            tag: None,
            tagged: None,
            struct_name: None,
            element: None,
            fields: Vec::new(),
            error_meaning: name.ends_with("error_code"),
            nested: None,
        }
    }

    fn array(name: &str, sname: &str, fields: Vec<FieldDef>) -> FieldDef {
        FieldDef {
            struct_name: Some(sname.into()),
            element: Some("struct".into()),
            fields,
            ..f(name, "array")
        }
    }

    /// API 100 "Test", v0-v1, flexible from v1. Its response: a throttle time, an error
    /// code, topics of partitions (error codes and companions alone), a nullable struct,
    /// and from v1 two tagged fields (a group_id, kept; an int32, not kept). Its request:
    /// acks and an array of int32.
    fn schema() -> Vec<ApiDef> {
        let partition = vec![
            f("partition_index", "int32"),
            f("error_code", "int16"),
            f("other", "int64"),
        ];
        let topic = vec![
            f("name", "string"),
            array("partitions", "Partition", partition),
        ];
        let current = FieldDef {
            nullable: Some((0, ANY)),
            struct_name: Some("Current".into()),
            fields: vec![f("leader", "int32")],
            ..f("current", "struct")
        };
        let tagged = |name: &str, ty: &str, tag: i64| FieldDef {
            versions: (1, ANY),
            tag: Some(tag),
            tagged: Some((1, ANY)),
            ..f(name, ty)
        };
        let response = vec![
            f("throttle_time_ms", "int32"),
            f("error_code", "int16"),
            array("topics", "Topic", topic),
            current,
            tagged("group_id", "string", 0),
            tagged("unused", "int32", 1),
        ];
        let request = vec![
            f("acks", "int16"),
            FieldDef {
                element: Some("int32".into()),
                ..f("ids", "array")
            },
        ];
        let versions = vec![
            f("error_code", "int16"),
            array(
                "api_keys",
                "ApiVersion",
                vec![
                    f("api_key", "int16"),
                    f("min_version", "int16"),
                    f("max_version", "int16"),
                ],
            ),
            f("throttle_time_ms", "int32"),
        ];
        let fetch_partition = vec![
            f("partition_index", "int32"),
            f("error_code", "int16"),
            f("high_watermark", "int64"),
            FieldDef {
                nullable: Some((0, ANY)),
                ..f("records", "records")
            },
        ];
        let fetch = vec![
            f("throttle_time_ms", "int32"),
            array(
                "responses",
                "FetchableTopicResponse",
                vec![
                    f("topic", "string"),
                    array("partitions", "PartitionData", fetch_partition),
                ],
            ),
        ];
        vec![
            ApiDef {
                key: 1,
                name: "Fetch".into(),
                min_version: 0,
                max_version: 0,
                flexible_from: None,
                request: vec![
                    f("max_wait_ms", "int32"),
                    array(
                        "topics",
                        "FetchTopic",
                        vec![
                            f("topic", "string"),
                            array(
                                "partitions",
                                "FetchPartition",
                                vec![f("partition", "int32"), f("fetch_offset", "int64")],
                            ),
                        ],
                    ),
                ],
                response: fetch,
            },
            ApiDef {
                key: 100,
                name: "Test".into(),
                min_version: 0,
                max_version: 1,
                flexible_from: Some(1),
                request,
                response,
            },
            ApiDef {
                key: API_VERSIONS,
                name: "ApiVersions".into(),
                min_version: 0,
                max_version: 1,
                flexible_from: None,
                request: Vec::new(),
                response: versions,
            },
        ]
    }

    fn figures() -> Figures {
        Figures::new(schema(), 1_000_000, 64 << 20, false)
    }

    fn i16b(v: i16) -> Vec<u8> {
        v.to_be_bytes().to_vec()
    }
    fn i32b(v: i32) -> Vec<u8> {
        v.to_be_bytes().to_vec()
    }
    fn str16(s: &str) -> Vec<u8> {
        [i16b(s.len() as i16), s.as_bytes().to_vec()].concat()
    }
    fn partition(index: i32, error: i16) -> Vec<u8> {
        [i32b(index), i16b(error), 7i64.to_be_bytes().to_vec()].concat()
    }

    /// A v0 response: correlation id, throttle 9, `error`, one topic "t" of `parts`,
    /// `current` (None: null).
    fn v0(error: i16, parts: &[(i32, i16)], current: Option<i32>) -> Vec<u8> {
        let mut b = [
            i32b(1),
            i32b(9),
            i16b(error),
            i32b(1),
            str16("t"),
            i32b(parts.len() as i32),
        ]
        .concat();
        for &(i, e) in parts {
            b.extend(partition(i, e));
        }
        match current {
            None => b.push(0xFF),
            Some(l) => b.extend([vec![1], i32b(l)].concat()),
        }
        b
    }

    /// A Fetch v0 answer (the tests' layout) of topic "t": (partition, error, high watermark)
    /// each with null records.
    fn fetch_answer(parts: &[(i32, i16, i64)]) -> Vec<u8> {
        let mut b = [
            i32b(1),
            i32b(0),
            i32b(1),
            str16("t"),
            i32b(parts.len() as i32),
        ]
        .concat();
        for &(p, e, hw) in parts {
            b.extend([i32b(p), i16b(e), hw.to_be_bytes().to_vec(), i32b(-1)].concat());
        }
        b
    }

    #[test]
    fn a_fetch_requests_partitions_are_rows() {
        let mut fig = figures();
        // header: key 1, v0, correlation id, client id "c"; body: max wait, topic "t" asking
        // partition 3 from 40 and partition 5 from 50
        let mut msg = [
            i16b(1),
            i16b(0),
            i32b(7),
            str16("c"),
            i32b(500),
            i32b(1),
            str16("t"),
            i32b(2),
        ]
        .concat();
        for (p, off) in [(3, 40i64), (5, 50)] {
            msg.extend([i32b(p), off.to_be_bytes().to_vec()].concat());
        }
        let t = fig.request(&msg, 11);
        let (body, topics, rows) = fig.fetch_request_rows(&t).unwrap();
        assert_eq!(name(&fig, t.nodes[body].name), "body");
        assert_eq!(name(&fig, t.nodes[topics.unwrap()].name), "topics");
        let got: Vec<_> = rows
            .iter()
            .map(|r| (r.topic.as_deref(), r.topic_id, r.partition, r.fetch_offset))
            .collect();
        assert_eq!(
            got,
            vec![
                (Some("t"), None, Some(3), Some(40)),
                (Some("t"), None, Some(5), Some(50))
            ]
        );
        // cut in the second partition: the array count does not fit, nothing is read
        let t = fig.request(&msg[..msg.len() - 4], 11);
        assert!(fig.fetch_request_rows(&t).unwrap().2.is_empty() && t.counts.malformed == 1);
    }

    #[test]
    fn a_fetch_answers_partitions_are_rows() {
        let mut fig = figures();
        let msg = fetch_answer(&[(0, 0, 10), (1, 3, 20)]);
        let t = fig.response(&msg, 1, 0).unwrap();
        let (body, responses, rows) = fig.fetch_rows(&t).unwrap();
        assert_eq!(name(&fig, t.nodes[body].name), "body");
        let responses = responses.unwrap();
        assert_eq!(name(&fig, t.nodes[responses].name), "responses");
        assert!(!Figures::marked(&t, responses));
        let got: Vec<_> = rows
            .iter()
            .map(|r| {
                (
                    r.topic.as_deref(),
                    r.partition,
                    r.error_code,
                    r.high_watermark,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (Some("t"), Some(0), 0, Some(10)),
                (Some("t"), Some(1), 3, Some(20))
            ]
        );
        assert!(rows.iter().all(|r| r.records == 0
            && r.crc_ok
            && r.topic_id.is_none()
            && r.last_stable_offset.is_none()));
        // the second partition's records longer than the message: its row has what was
        // read, and the mark sits in the responses array
        let mut bad = msg.clone();
        let n = bad.len();
        bad[n - 4..].copy_from_slice(&i32b(0x7FFF_FFFF));
        let t = fig.response(&bad, 1, 0).unwrap();
        let (_body, responses, rows) = fig.fetch_rows(&t).unwrap();
        assert!(Figures::marked(&t, responses.unwrap()) && t.counts.malformed == 1);
        assert_eq!(rows.len(), 2);
        assert_eq!(
            (rows[1].partition, rows[1].high_watermark),
            (Some(1), Some(20))
        );
        // no partitions: no rows; a tree without a body: none
        let t = fig.response(&fetch_answer(&[]), 1, 0).unwrap();
        assert!(fig.fetch_rows(&t).unwrap().2.is_empty());
        let t = fig.response(&[0, 0], 1, 0).unwrap();
        assert!(fig.fetch_rows(&t).is_none());
    }

    fn name(fig: &Figures, n: Name) -> String {
        match n {
            Name::Sym(s) => fig.syms().name(s).to_string(),
            Name::Index(i) => format!("[{i}]"),
            Name::Tag(t) => format!("tag_{t}"),
        }
    }

    /// The node at `path` (names from the root's child down), if the tree has it.
    fn at<'t>(fig: &Figures, t: &'t Tree, path: &[&str]) -> Option<&'t Node> {
        let mut id = t.root;
        for step in path {
            let kids = t.nodes[id].children.as_deref()?;
            id = *kids
                .iter()
                .find(|&&c| name(fig, t.nodes[c].name) == *step)?;
        }
        Some(&t.nodes[id])
    }

    fn kids(fig: &Figures, t: &Tree, n: &Node) -> Vec<String> {
        n.children
            .iter()
            .flatten()
            .map(|&c| name(fig, t.nodes[c].name))
            .collect()
    }

    fn malformed(t: &Tree) -> Vec<&Node> {
        t.nodes
            .iter()
            .filter(|n| n.notes.iter().any(|s| s.starts_with(MALFORMED)))
            .collect()
    }

    #[test]
    fn an_error_code_is_kept_when_not_zero() {
        let mut fig = figures();
        let t = fig.response(&v0(0, &[], None), 100, 0).unwrap();
        assert!(t.errors_root && t.errors.is_empty());
        assert!(at(&fig, &t, &["body", "error_code"]).is_none());
        assert_eq!(
            at(&fig, &t, &["body", "throttle_time_ms"]).unwrap().value,
            Value::Int(9)
        );
        assert_eq!(t.counts, Counts::default());

        let t = fig.response(&v0(29, &[], None), 100, 0).unwrap();
        assert_eq!(t.errors, vec![29]);
        let e = at(&fig, &t, &["body", "error_code"]).unwrap();
        assert_eq!(
            (e.value.clone(), e.offset, e.length),
            (Value::Int(29), 8, 2)
        );
        assert!(e.error);
        assert_eq!(e.extra, Extra::ErrorCode(29));
    }

    #[test]
    fn an_errors_only_element_is_dropped() {
        let mut fig = figures();
        let t = fig
            .response(&v0(0, &[(0, 0), (1, 3), (2, 0)], None), 100, 0)
            .unwrap();
        let parts = at(&fig, &t, &["body", "topics", "[0]", "partitions"]).unwrap();
        assert_eq!(
            parts.value,
            Value::Int(3),
            "the array's value counts every element"
        );
        assert_eq!(kids(&fig, &t, parts), ["[1]"]);
        assert_eq!(parts.length, 4 + 3 * 14);
        let p1 = at(&fig, &t, &["body", "topics", "[0]", "partitions", "[1]"]).unwrap();
        assert_eq!(kids(&fig, &t, p1), ["partition_index", "error_code"]);
        assert_eq!((p1.offset, p1.length), (4 + 10 + 3 + 4 + 14, 14));
        assert_eq!(t.errors, vec![3]);
        // the topic (kept for its partitions) keeps its name
        assert_eq!(
            at(&fig, &t, &["body", "topics", "[0]", "name"])
                .unwrap()
                .value,
            Value::Str("t".into())
        );
        // the nodes of dropped elements are gone, not left behind
        assert!(t
            .nodes
            .iter()
            .all(|n| n.name != Name::Index(0) || name(&fig, n.ty) == "Topic"));
    }

    #[test]
    fn a_nullable_struct() {
        let mut fig = figures();
        let b = v0(0, &[], None);
        let t = fig.response(&b, 100, 0).unwrap();
        let c = at(&fig, &t, &["body", "current"]).unwrap();
        assert_eq!(
            (c.value.clone(), c.offset, c.length),
            (Value::Null, b.len() - 1, 1)
        );
        assert!(c.children.is_none());
        assert_eq!(name(&fig, c.ty), "Current");

        let b = v0(0, &[], Some(5));
        let t = fig.response(&b, 100, 0).unwrap();
        let c = at(&fig, &t, &["body", "current"]).unwrap();
        assert_eq!((c.offset, c.length), (b.len() - 5, 5));
        assert_eq!(
            at(&fig, &t, &["body", "current", "leader"]).unwrap().value,
            Value::Int(5)
        );
        assert_eq!(t.counts, Counts::default());
    }

    /// A v1 (flexible) response: correlation id, empty header tags, throttle, error code
    /// 0, no topics, a null `current`, then the top-level tagged section `tags`.
    fn v1(tags: &[u8]) -> Vec<u8> {
        [
            i32b(1),
            vec![0],
            i32b(9),
            i16b(0),
            vec![1, 0xFF],
            tags.to_vec(),
        ]
        .concat()
    }

    #[test]
    fn a_tagged_section_kept_or_not() {
        let mut fig = figures();
        // tag 1 (unused, not kept) alone: no tagged_fields node
        let t = fig.response(&v1(&[1, 1, 4, 0, 0, 0, 7]), 100, 1).unwrap();
        let body = at(&fig, &t, &["body"]).unwrap();
        assert_eq!(
            kids(&fig, &t, body),
            ["throttle_time_ms", "topics", "current"]
        );
        assert_eq!(t.counts, Counts::default());

        // tag 1 and tag 0 (group_id "g": compact string 2, 'g'): kept under tagged_fields
        let tags = [2, 1, 4, 0, 0, 0, 7, 0, 2, 2, b'g'];
        let b = v1(&tags);
        let t = fig.response(&b, 100, 1).unwrap();
        let tf = at(&fig, &t, &["body", "tagged_fields"]).unwrap();
        assert_eq!(
            (tf.value.clone(), tf.offset, tf.length),
            (Value::Int(2), b.len() - tags.len(), tags.len())
        );
        let g = at(&fig, &t, &["body", "tagged_fields", "group_id"]).unwrap();
        assert_eq!(
            (g.value.clone(), g.offset, g.length),
            (Value::Str("g".into()), b.len() - 2, 2)
        );
        assert_eq!(t.counts, Counts::default());
    }

    #[test]
    fn bad_bytes_stop_the_walk_and_stretch_containers() {
        let mut fig = figures();
        // two topics; the second one's name is cut: 2 bytes announced, 1 there
        let b = [
            i32b(1),
            i32b(9),
            i16b(0),
            i32b(2),
            str16("t"),
            i32b(1),
            partition(0, 4),
            i16b(2),
            b"u".to_vec(),
        ]
        .concat();
        assert_eq!(b.len(), 38);
        let t = fig.response(&b, 100, 0).unwrap();
        let body = at(&fig, &t, &["body"]).unwrap();
        assert_eq!(body.extra, Extra::MalformedAt(35));
        assert_eq!((body.offset, body.length), (4, 34));
        assert_eq!(t.counts.malformed, 1);
        let m = malformed(&t);
        assert_eq!(m.len(), 1);
        assert_eq!(
            m[0].notes,
            ["malformed: string length 2 exceeds the 1 bytes left"]
        );
        assert_eq!(
            (name(&fig, m[0].name), m[0].offset, m[0].length),
            ("name".into(), 35, 3)
        );
        // the containers being read are stretched over what they hold, the others not
        let topics = at(&fig, &t, &["body", "topics"]).unwrap();
        assert_eq!(
            (topics.offset, topics.length, topics.value.clone()),
            (10, 28, Value::Int(2))
        );
        let t0 = at(&fig, &t, &["body", "topics", "[0]"]).unwrap();
        assert_eq!((t0.offset, t0.length), (14, 21));
        let t1 = at(&fig, &t, &["body", "topics", "[1]"]).unwrap();
        assert_eq!((t1.offset, t1.length), (35, 3));
        assert_eq!(kids(&fig, &t, t1), ["name"]);
        // the codes read before the bad bytes are the root's
        assert_eq!(t.errors, vec![4]);

        // an array announcing more elements than the bytes left can hold: stopped at its
        // count, in the element that holds it
        let full = v0(0, &[(0, 4), (1, 5)], None);
        let b = &full[..4 + 10 + 3 + 4 + 14 + 6];
        let t = fig.response(b, 100, 0).unwrap();
        assert_eq!(
            at(&fig, &t, &["body"]).unwrap().extra,
            Extra::MalformedAt(17)
        );
        let m = at(&fig, &t, &["body", "topics", "[0]", "partitions"]).unwrap();
        assert_eq!(
            m.notes,
            ["malformed: array count 2 exceeds the 20 bytes left"]
        );
        assert_eq!(
            (m.offset, m.length, m.value.clone()),
            (17, b.len() - 17, Value::Null)
        );
        let t0 = at(&fig, &t, &["body", "topics", "[0]"]).unwrap();
        assert_eq!(t0.offset + t0.length, b.len());
        assert!(t.errors.is_empty());
    }

    #[test]
    fn trailing_bytes_are_counted() {
        let mut fig = figures();
        let mut b = v0(0, &[], None);
        b.extend([1, 2, 3]);
        let t = fig.response(&b, 100, 0).unwrap();
        assert_eq!(t.counts.trailing, 1);
        let body = at(&fig, &t, &["body"]).unwrap();
        assert_eq!(
            (body.offset, body.length, body.extra.clone()),
            (4, b.len() - 4, Extra::None)
        );
    }

    #[test]
    fn max_array_len_is_a_limit() {
        let mut fig = Figures::new(schema(), 2, 64 << 20, false);
        let t = fig
            .response(&v0(0, &[(0, 1), (1, 2)], None), 100, 0)
            .unwrap();
        assert_eq!(t.counts.limits, Vec::<&str>::new());
        let b = v0(0, &[(0, 1), (1, 2), (2, 3)], None);
        let t = fig.response(&b, 100, 0).unwrap();
        assert_eq!(t.counts.limits, ["max_array_len"]);
        assert_eq!(t.counts.malformed, 1);
        let m = malformed(&t);
        assert_eq!(
            m[0].notes,
            ["malformed: array count 3 exceeds max_array_len 2"]
        );
        let at_ = 4 + 10 + 3;
        assert_eq!(
            at(&fig, &t, &["body"]).unwrap().extra,
            Extra::MalformedAt(at_)
        );
        // the array is not made: the malformed node is in the topic, which spans to the end
        let topic = at(&fig, &t, &["body", "topics", "[0]"]).unwrap();
        assert_eq!(kids(&fig, &t, topic), ["name", "partitions"]);
        assert_eq!(topic.offset + topic.length, b.len());
    }

    #[test]
    fn requests() {
        let mut fig = figures();
        // header: key 100 v0, correlation id, client_id "c": 11 bytes; acks -1, ids [1, 2]
        let head = [i16b(100), i16b(0), i32b(7), str16("c")].concat();
        let b = [head.clone(), i16b(-1), i32b(2), i32b(1), i32b(2)].concat();
        let t = fig.request(&b, head.len());
        assert!(t.errors_root);
        let body = at(&fig, &t, &["body"]).unwrap();
        assert_eq!(
            (body.offset, body.length),
            (head.len(), b.len() - head.len())
        );
        assert_eq!(kids(&fig, &t, body), ["acks"]);
        assert_eq!(
            at(&fig, &t, &["body", "acks"]).unwrap().value,
            Value::Int(-1)
        );
        assert_eq!(t.counts, Counts::default());
        // an array of int32 announcing more than there is
        let b = [head.clone(), i16b(1), i32b(3), i32b(1)].concat();
        let t = fig.request(&b, head.len());
        assert_eq!(
            malformed(&t)[0].notes,
            ["malformed: array count 3 exceeds the 4 bytes left"]
        );
        // an API the schema does not know: a plain root
        let t = fig.request(&[0, 99, 0, 0, 0, 0, 0, 1], 8);
        assert!(!t.errors_root && t.nodes.len() == 1 && t.counts == Counts::default());
        // a header too short
        let t = fig.request(&[0, 100, 0], 3);
        assert!(!t.errors_root);
        assert_eq!(
            malformed(&t)[0].notes,
            ["malformed: request header needs 8 bytes, 3 present"]
        );
        assert_eq!(t.counts.malformed, 1);
    }

    /// Bad bytes inside a tagged field's value: the walk stops and counts them, and the
    /// section stays in the tree with the mark, stretched over it, as the full decoder keeps it.
    #[test]
    fn bad_bytes_in_a_tagged_field() {
        let mut fig = figures();
        // tag 0 of 2 bytes: a compact string announcing 5 bytes
        let tags = [1, 0, 2, 6, b'g'];
        let b = v1(&tags);
        let t = fig.response(&b, 100, 1).unwrap();
        let at_ = b.len() - 2;
        assert_eq!(
            at(&fig, &t, &["body"]).unwrap().extra,
            Extra::MalformedAt(at_)
        );
        assert_eq!(t.counts.malformed, 1);
        let tf = at(&fig, &t, &["body", "tagged_fields"]).unwrap();
        assert_eq!(
            (&tf.value, tf.offset, tf.length),
            (&Value::Int(1), b.len() - tags.len(), tags.len())
        );
        let m = malformed(&t);
        assert_eq!((m.len(), m[0].offset), (1, at_));
        assert!(at(&fig, &t, &["body", "tagged_fields", "group_id"]).is_some());
    }

    /// A response header whose tagged section runs past the end: the header spans the
    /// message, the section's node keeps its length (dissectors.kafka.response_header does
    /// not stretch it either), and there is no body.
    #[test]
    fn a_bad_response_header() {
        let mut fig = figures();
        let b = [i32b(3), vec![1, 0, 9, 0]].concat();
        let t = fig.response(&b, 100, 1).unwrap();
        assert!(!t.errors_root);
        let h = at(&fig, &t, &["header"]).unwrap();
        assert_eq!((h.offset, h.length), (0, b.len()));
        let tf = at(&fig, &t, &["header", "tagged_fields"]).unwrap();
        assert_eq!((tf.offset, tf.length), (4, 0));
        let m = at(&fig, &t, &["header", "tagged_fields", "tag_0"]).unwrap();
        assert_eq!(
            m.notes,
            ["malformed: tagged field 0 size 9 exceeds the 1 bytes left"]
        );
        assert_eq!((m.offset, m.length), (5, 3));
        assert_eq!(t.counts.malformed, 1);
    }

    /// An ApiVersions v1 answer (correlation id first) of `rows`, its array count `count`.
    fn versions(count: i32, rows: &[(i16, i16, i16)]) -> Vec<u8> {
        let mut b = [i32b(1), i16b(0), i32b(count)].concat();
        for &(k, lo, hi) in rows {
            b.extend([i16b(k), i16b(lo), i16b(hi)].concat());
        }
        b.extend(i32b(0));
        b
    }

    #[test]
    fn with_check_an_apiversions_answer_keeps_its_table_alone() {
        let rows = [(0, 3, 9), (3, 0, 12), (3, 1, 13)];
        let mut fig = figures();
        let t = fig.response(&versions(3, &rows), API_VERSIONS, 1).unwrap();
        assert!(at(&fig, &t, &["body", "api_keys"]).is_none());

        fig.check = true;
        fig.plans.clear();
        let t = fig.response(&versions(3, &rows), API_VERSIONS, 1).unwrap();
        let keys = at(&fig, &t, &["body", "api_keys"]).unwrap();
        let want = rows
            .iter()
            .map(|&(k, lo, hi)| (i64::from(k), i64::from(lo), i64::from(hi)));
        assert_eq!(keys.extra, Extra::Versions(want.collect()));
        assert_eq!(
            (keys.children.as_ref(), keys.value.clone()),
            (None, Value::Int(3))
        );
        assert_eq!((keys.offset, keys.length), (6, 4 + 3 * 6));
        // (the elements were not kept: the root, the body, the array, the throttle time)
        assert_eq!(t.nodes.len(), 4);

        // bad bytes in the elements: no table, the mark where the walk stopped
        let t = fig.response(&versions(4, &rows), API_VERSIONS, 1).unwrap();
        let keys = at(&fig, &t, &["body", "api_keys"]);
        assert!(keys.is_none_or(|k| !matches!(k.extra, Extra::Versions(_))));
        assert_eq!(malformed(&t).len(), 1);
    }
}
