//! A body's walk plan, compiled once per (API, version, direction) from the schema and the
//! keep rules (`keep.rs`): its fields present at that version in wire order, runs of
//! fixed-size fields read with one bound check, what each op keeps, and the least size of
//! each field, struct and array element (an array count is checked against it before its
//! elements are read). The walk (`walk.rs`) runs plans; they hold symbols of the
//! [`Figures`] symbol table, not strings.

use super::keep::{errors_only, is_error, kept, wanted, Scope, VERSIONS_TABLE};
use super::schema::{fixed_of, in_range, FieldDef, Fixed, Nested};
use super::tree::Syms;
use super::{Figures, API_VERSIONS};

/// A fixed-size field of a run.
#[derive(Debug)]
pub(super) struct FixedField {
    pub(super) name: u32,
    pub(super) ty: u32,
    pub(super) kind: Fixed,
    pub(super) keep: bool,
    pub(super) error: bool,
    pub(super) meaning: bool,
}

/// How one field (or a run of fixed-size fields) is read.
#[derive(Debug)]
pub(super) enum Op {
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
pub(super) struct StructOp {
    pub(super) name: u32,
    pub(super) plan: Plan,
    pub(super) nullable: bool,
    pub(super) keep: bool,
}

#[derive(Debug)]
pub(super) struct ArrayOp {
    pub(super) name: u32,
    pub(super) elem: Elem,
    pub(super) elem_min: usize,
    pub(super) keep: bool,
    /// an ApiVersions answer's api_keys read into [`Extra::Versions`](super::Extra::Versions)
    pub(super) table: bool,
}

/// An array's element: a struct or a primitive.
#[derive(Debug)]
pub(super) enum Elem {
    Struct(Plan),
    Prim(PrimElem),
}

/// The ops of a struct (or a body), in wire order, and its tagged fields' ops.
#[derive(Debug, Default)]
pub(super) struct Plan {
    pub(super) ops: Vec<Op>,
    /// (tag, op): the last of a repeated tag wins, as in a dict
    pub(super) tags: Vec<(i64, Op)>,
    pub(super) flexible: bool,
    min_size: usize,
    pub(super) type_name: u32,
    /// keeps fixed-size error codes and companions alone: as an array element it is kept
    /// only when one of its error codes is not zero
    pub(super) errors_only: bool,
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

/// Compiles the plans of one (API, version, direction).
pub(super) struct Compiler<'a> {
    pub(super) syms: &'a mut Syms,
    pub(super) version: i32,
    pub(super) flexible: bool,
    /// an ApiVersions answer with [`Figures::check`]: its api_keys become a table
    pub(super) table: bool,
}

/// The element op of an array of primitives: `keep` makes each element a node `[i]`.
#[derive(Debug)]
pub(super) struct PrimElem {
    pub(super) op: Op,
    pub(super) keep: bool,
}

impl Compiler<'_> {
    /// The plan of a struct of `fields`, its type named `type_name`, in `scope`.
    pub(super) fn plan(&mut self, fields: &[FieldDef], type_name: &str, scope: Scope) -> Plan {
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
        plan.errors_only = errors_only(&present, scope);
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
                let table = self.table && el == "struct" && fd.name == VERSIONS_TABLE;
                let (elem, elem_min, keep) = if el == "struct" {
                    let tname = fd.struct_name.clone().unwrap_or_else(|| fd.name.clone());
                    let inner = if table { Scope::Table } else { scope.inner(fd) };
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

impl Figures {
    /// The plan of a body of `key` v`version` (`request`: a request's), compiled on first
    /// use (None: an API the schema does not know).
    pub(super) fn plan(&mut self, key: i16, version: i16, request: bool) -> Option<&Plan> {
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
}
