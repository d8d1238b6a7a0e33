//! The lean figures walk: a Kafka message body read against the schema, keeping only the
//! fields the per-exchange figures read (`stats`, `live`, the Spark tables, the insights).
//!
//! The schema is the Python one (`dissectors/schema_data.py`), handed over at start-up as
//! [`ApiDef`] values (`schema.rs`): there is no second table. A body of an (API, version,
//! direction) is walked (`walk.rs`) by a plan compiled from it on first use (`plan.rs`).
//! What is kept, decided in `keep.rs` alone:
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
//! trees into rows (`rows.rs`: [`Figures::fetch_request_rows`], [`Figures::fetch_rows`],
//! [`Figures::produce_request_rows`]), which the binding hands over as the body's
//! `extra["fetch"]` or `extra["produce"]` instead of the topics array's nodes (but for
//! `check`, for a request's topics with `topics`, and where bad bytes are marked in it).
//!
//! With `topics` ([`Figures::new`]) a request's top-level topics arrays ([`TOPIC_ARRAYS`])
//! are kept too, with their names and the indexes of their partitions: what `stats` reads
//! when it groups by topic or partition.
//!
//! Everything else is stepped over by length. What is kept has the full decoder's shape
//! (`dissectors/decoder.py`: names, types, values, offsets; [`Tree`], `tree.rs`), so the
//! readers of its trees read these unchanged; the root holds the body alone (a header is
//! there only when it is malformed). Bad bytes stop the walk with a `malformed:` node where
//! they are, as in the full decoder. Every length from the wire is checked before it is
//! used.
//!
//! The files, in the order of the flow: `schema.rs` (the schema as handed over), `keep.rs`
//! (which fields are kept, each list with its readers), `plan.rs` (a body's plan compiled
//! from both), `walk.rs` (a message walked by its plan), `tree.rs` (the tree it makes and
//! the symbol table), `rows.rs` (the Fetch and Produce partitions read off a tree); this
//! file, [`Figures`]: the entry points.

mod keep;
mod plan;
mod rows;
mod schema;
#[cfg(test)]
mod tests;
mod tree;
mod walk;

use rustc_hash::{FxHashMap, FxHashSet};

pub use keep::{ANCHORS, COMPANIONS, TOPIC_ARRAYS};
pub use rows::{FetchAsk, FetchRow, ProduceRow};
pub use schema::{ApiDef, FieldDef, Nested, Range};
pub use tree::{uuid_text, Counts, Extra, Name, Node, Syms, Tree, Value};

use keep::Scope;
use plan::{Compiler, Plan};
use schema::CONSUMER_MAX_VERSION;
use tree::{branch, leaf, MALFORMED};
use walk::{Known, Walk};

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
    /// keep what `check`'s rules read besides the figures: an ApiVersions answer's
    /// api_keys as one table (extra["versions"], [`Extra::Versions`]); and hand each records
    /// field's v2 batches (producer id, epoch, base_sequence...: extra["batches"], which the
    /// walk keeps for the tables' rows) to the front
    pub check: bool,
    /// the consumer protocol's Subscription and Assignment plans, versions 0 to
    /// [`CONSUMER_MAX_VERSION`] ([`Figures::set_consumer`]): without them its payloads are
    /// not judged (their APIs are then left to the full decoder)
    consumer: Option<Vec<Plan>>,
}

/// ApiVersions' UNSUPPORTED_VERSION.
const UNSUPPORTED_VERSION: i16 = 35;
/// The API keys the walk reads apart: ApiVersions (its answer's header, its v0 fallback,
/// its table with `check`), JoinGroup and SyncGroup (their consumer-protocol payloads).
const API_VERSIONS: i16 = 18;
const JOIN_GROUP: i16 = 11;
const SYNC_GROUP: i16 = 14;

impl Figures {
    /// The walks of the schema's `apis` under the limits `max_array_len` (an array count
    /// above it is bad bytes, counted as a limit hit) and `max_decompressed` (what a records
    /// field is decompressed to, at most); `topics`: keep a request's topics too
    /// ([`TOPIC_ARRAYS`]).
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

    /// Does the subtree at `id` hold a node marked malformed?
    pub fn marked(t: &Tree, id: usize) -> bool {
        let n = &t.nodes[id];
        n.notes.iter().any(|s| s.starts_with(MALFORMED))
            || n.children
                .as_deref()
                .unwrap_or(&[])
                .iter()
                .any(|&c| Self::marked(t, c))
    }

    /// A node's name as a symbol's text ("" for an index or a tag).
    pub fn name_of<'t>(&'t self, t: &Tree, id: usize) -> &'t str {
        match t.nodes[id].name {
            Name::Sym(i) => self.syms.name(i),
            _ => "",
        }
    }

    /// The first child of node `id` called `name`.
    pub fn child(&self, t: &Tree, id: usize, name: &str) -> Option<usize> {
        t.kids(id)
            .iter()
            .copied()
            .find(|&c| self.name_of(t, c) == name)
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
        w.into_tree(k.request, root_type)
    }

    /// The lean tree of a response to a request of `api_key` v`api_version` (None: an
    /// API the schema does not know).
    pub fn response(&mut self, buf: &[u8], api_key: i16, api_version: i16) -> Option<Tree> {
        let api = self.apis.get(&api_key)?;
        let n = buf.len();
        let k = self.k;
        let version = Self::clamp(api, api_version);
        let probe = api_key == API_VERSIONS && version > 0;
        let hv = if api_key == API_VERSIONS {
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
        Some(w.into_tree(k.response, root_type))
    }
}
