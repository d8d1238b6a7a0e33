//! A message walked by its plan (`plan.rs`) into a lean tree (`tree.rs`): what the plan
//! keeps made nodes, the rest stepped over by length; records fields read into their lean
//! summary (`records.rs`). Every length and count from the wire is checked against the
//! bytes left before it is used. Bad bytes stop the walk with a `malformed: <reason>` node
//! where they are, as the full decoder marks them: the containers being read are stretched
//! over what they hold, the body carries `malformed_at`, and the root's `errors` are the
//! codes read before the stop. A limit hit (`max_array_len`, `max_decompressed`) is
//! counted.

use super::keep::TABLE_FIELDS;
use super::plan::{ArrayOp, Elem, FixedField, Op, Plan, StructOp};
use super::schema::{Nested, CONSUMER_MAX_VERSION};
use super::tree::{branch, leaf, Counts, Extra, Name, Node, Syms, Tree, Value, MALFORMED};
use super::{Figures, JOIN_GROUP, SYNC_GROUP};
use crate::records::lean_summary;

/// Bad bytes: where the walk stops (`out`: the node whose children get the malformed node).
pub(super) struct Bad {
    reason: String,
    name: Name,
    ty: Name,
    offset: usize,
    out: usize,
}

pub(super) type Step = Result<usize, Bad>;

/// The symbols the walk itself names nodes with.
#[derive(Debug, Clone, Copy)]
pub(super) struct Known {
    array: u32,
    string: u32,
    records: u32,
    bytes: u32,
    tagged_fields: u32,
    tag: u32,
    body: u32,
    pub(super) header: u32,
    pub(super) request: u32,
    pub(super) response: u32,
    pub(super) request_type: u32,
    pub(super) request_header: u32,
    protocol_type: u32,
}

impl Known {
    pub(super) fn new(syms: &mut Syms) -> Known {
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

/// One walk over a message's bytes: the nodes it made, the error codes it kept, what it
/// counted.
pub(super) struct Walk<'a> {
    buf: &'a [u8],
    syms: &'a Syms,
    k: Known,
    flexible: bool,
    pub(super) nodes: Vec<Node>,
    errs: Vec<i64>,
    pub(super) counts: Counts,
    max_array_len: i64,
    max_decompressed: i64,
    /// the consumer-protocol payloads read (their kind and bytes), and whether the body's
    /// protocol_type is "consumer" (then the full decoder reads and judges them)
    payloads: Vec<(Nested, usize, usize)>,
    consumer_type: bool,
    /// a consumer payload has bad bytes: see [`Tree::full`]
    full: bool,
}

impl Walk<'_> {
    /// Add `node` as the last child of `out`: its id.
    pub(super) fn add(&mut self, out: usize, node: Node) -> usize {
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
    pub(super) fn mark(&mut self, e: Bad, end: usize) {
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
    pub(super) fn tagged(
        &mut self,
        tags: &[(i64, Op)],
        pos: usize,
        end: usize,
        out: usize,
    ) -> Step {
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
            batches: Some(s.batches),
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

    /// The tree of a body's walk (see [`Figures::body`]), its root named `name` and typed `ty`.
    pub(super) fn into_tree(self, name: u32, ty: u32) -> Tree {
        let mut nodes = self.nodes;
        nodes[0].name = Name::Sym(name);
        nodes[0].ty = Name::Sym(ty);
        Tree {
            nodes,
            root: 0,
            errors_root: true,
            errors: self.errs,
            counts: self.counts,
            full: self.full,
        }
    }
}

impl Figures {
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

    /// A walk over `buf` under this schema's limits, `root` its node 0.
    pub(super) fn walk<'s>(&'s self, buf: &'s [u8], flexible: bool, root: Node) -> Walk<'s> {
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
            payloads: Vec::new(),
            consumer_type: false,
            full: false,
        }
    }

    /// The walk of a body `buf[start..end]`: node 0 is a root to fill, node 1 the body.
    pub(super) fn body<'s>(
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
}
