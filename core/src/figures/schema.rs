//! The schema as the Python side hands it over: `dissectors.schema`'s `FieldDef` and
//! `ApiDef`, read by the binding (`py/figures.rs`) once at start-up, names and wire types
//! as the Python schema spells them; and the fixed-size wire types those name.

use super::tree::Value;

/// A version range, both ends included.
pub type Range = (i32, i32);

/// Is `version` in `r` (None: in no range)?
pub(super) fn in_range(version: i32, r: Option<Range>) -> bool {
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
pub(super) const CONSUMER_MAX_VERSION: i16 = 3;

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
    /// Are this version's messages flexible (compact lengths, tagged fields)?
    pub(super) fn flexible(&self, version: i16) -> bool {
        matches!(self.flexible_from, Some(f) if version >= f)
    }
}

/// Fixed-size wire types: (size, kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fixed {
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

/// The fixed-size wire type `ty` names (None: a variable-size or composite type).
pub(super) fn fixed_of(ty: &str) -> Option<Fixed> {
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
    pub(super) fn size(self) -> usize {
        match self {
            Fixed::I8 | Fixed::Bool => 1,
            Fixed::I16 | Fixed::U16 => 2,
            Fixed::I32 | Fixed::U32 => 4,
            Fixed::I64 | Fixed::F64 => 8,
            Fixed::Uuid => 16,
        }
    }

    /// The value of its bytes `b` (at least its size).
    pub(super) fn read(self, b: &[u8]) -> Value {
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
