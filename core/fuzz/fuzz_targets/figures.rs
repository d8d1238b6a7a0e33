//! Any bytes as one request or response walked by the lean figures walk (`figures.rs`)
//! against the real schema: no panic, and the trees hold what their readers rely on
//! (`check`): children ids in range and the nodes the root reaches a tree; every reached
//! node within the message, and within its parent (records nodes and an ApiVersions
//! answer's table have no children; records carry their batches' heads, whole within them), but
//! for a response header's tagged-field section cut by bad bytes, which keeps its length as
//! in dissectors.kafka.response_header; error codes kept only when not zero, the root's
//! `errors` those of the tree in wire order; at most one malformed node outside records,
//! in the tree (one under a tagged-field section too: the section stays, as the full
//! decoder keeps it) and counted; the root holding the body
//! alone, running to the message's end, MalformedAt (where that node is) iff there is a
//! malformed node, no trailing bytes counted then; the array limit stops the walk; the same
//! input walked twice gives the same tree (plans are cached across inputs).
//!
//! The schema is `dissectors.schema.APIS` written as JSON by `tests/schema_json.py`; its
//! path comes in `KWS_FIGURES_SCHEMA` (`tests/fuzz_core.sh` sets it).
//!
//! Input: byte 0 is the mode: bit 0 a request (0) or a response (1); bits 1-2 the limits,
//! whether the request's topics are kept too and whether what `check` reads is (one
//! `Figures` per setting, reused across inputs as the pipeline reuses one);
//! requests: bit 3 takes the header length from bits 4-7 (times 3) instead of parsing
//! the header (a header that does not parse takes it from there too). Bytes 1-2 choose
//! the API: the index of a known key (high bit clear), or a raw key (high bit set, the
//! rest of the value). Bytes 3-4 the version: up to the API's max_version + 1 (high bit
//! clear), or raw (high bit set, the two bytes as an i16). The rest is the frame after its
//! size prefix; a request's first four bytes are overwritten with the key and version.
#![no_main]

use std::sync::{Mutex, OnceLock};

use kws_core::figures::{ApiDef, Extra, FieldDef, Figures, Name, Node, Syms, Tree, Value};
use kws_core::kafka::{parse_request_header, ApiTable};
use libfuzzer_sys::fuzz_target;

#[path = "schema.rs"]
mod schema;

const MALFORMED: &str = "malformed: ";

/// (max_array_len, max_decompressed, topics, check) of each setting.
const LIMITS: [(i64, i64, bool, bool); 4] = [
    (1_000_000, 64 << 20, false, false),
    (1_000_000, 64 << 20, true, true),
    (8, 4096, false, true),
    (0, 0, true, false),
];

struct Setup {
    apis: Vec<ApiDef>,
    /// the request header versions, as the pipeline's table has them
    table: ApiTable,
    figures: Mutex<Vec<Figures>>,
}

fn setup() -> &'static Setup {
    static SETUP: OnceLock<Setup> = OnceLock::new();
    SETUP.get_or_init(|| {
        let schema = schema::load().unwrap_or_else(|| {
            panic!(
                "{} is not set: run this target through tests/fuzz_core.sh, which writes \
                 the schema as JSON (tests/schema_json.py) and passes its path",
                schema::SCHEMA_VAR
            )
        });
        let (json, apis, table) = (schema.json, schema.apis, schema.table);
        let figures = LIMITS
            .iter()
            .map(|&(a, d, topics, check)| {
                let mut f = Figures::new(apis.clone(), a, d, topics);
                f.check = check;
                let consumer = |k: &str| -> Vec<FieldDef> {
                    json["consumer"][k]
                        .as_array()
                        .expect("the consumer protocol's fields")
                        .iter()
                        .map(schema::field)
                        .collect()
                };
                f.set_consumer(&consumer("subscription"), &consumer("assignment"));
                f
            })
            .collect();
        Setup {
            apis,
            table,
            figures: Mutex::new(figures),
        }
    })
}

/// The partition elements (in `parts` arrays) kept under a topics array `arr` (its rows' count).
fn partitions_kept(t: &Tree, arr: Option<usize>, syms: &Syms, parts: &str) -> usize {
    let Some(topics) = arr.and_then(|a| t.nodes[a].children.as_ref()) else {
        return 0;
    };
    topics
        .iter()
        .flat_map(|&tp| t.nodes[tp].children.iter().flatten())
        .filter(|&&c| matches!(t.nodes[c].name, Name::Sym(i) if syms.name(i) == parts))
        .map(|&c| t.nodes[c].children.as_ref().map_or(0, Vec::len))
        .sum()
}

fn is_records(n: &Node) -> bool {
    matches!(n.extra, Extra::Records { .. })
}

fn malformed(n: &Node) -> bool {
    n.notes.iter().any(|s| s.starts_with(MALFORMED))
}

/// The invariants of a tree of a message of `n` bytes (`body_start`: where a request's
/// body starts, None for a response) walked with or without [`Figures::check`].
fn check(t: &Tree, n: usize, body_start: Option<usize>, syms: &Syms, with_check: bool) {
    let nodes = &t.nodes;
    assert!(t.root < nodes.len(), "root out of range");
    // ids in range, and what the root reaches is a tree: each node reached once
    let mut seen = vec![false; nodes.len()];
    let mut order = Vec::new(); // preorder (wire order)
    let mut stack = vec![t.root];
    seen[t.root] = true;
    while let Some(id) = stack.pop() {
        order.push(id);
        let node = &nodes[id];
        let end = node
            .offset
            .checked_add(node.length)
            .expect("offset + length overflows");
        assert!(
            end <= n,
            "node {id} ({:?}) spans {}+{} past the message's {n} bytes",
            node.name,
            node.offset,
            node.length
        );
        let children = node.children.as_deref().unwrap_or(&[]);
        if let Extra::Records { batches, null, .. } = &node.extra {
            assert!(children.is_empty(), "a records node has children");
            assert_eq!(batches.is_some(), !null, "a records field keeps its batches");
            let heads = batches.as_deref().unwrap_or(&[]);
            assert!(
                heads.iter().map(|h| h.bytes).sum::<usize>() <= node.length,
                "the batches' bytes past their records field"
            );
            assert!(
                heads.iter().all(|h| h.bytes_before.is_none_or(|b| b >= 61)),
                "a batch smaller before compression than its header"
            );
        }
        if let Extra::Versions(rows) = &node.extra {
            assert!(with_check, "a versions table without check");
            assert!(children.is_empty(), "a versions table keeps its elements");
            let count = match node.value {
                Value::Int(v) => v,
                _ => -1,
            };
            assert!(rows.len() as i64 <= count, "more rows than elements");
        }
        for &c in children {
            assert!(
                c < nodes.len(),
                "node {id}: child {c} out of range ({} nodes)",
                nodes.len()
            );
            assert!(!seen[c], "node {c} reached twice");
            seen[c] = true;
            // a child lies within its parent (containers are stretched after bad bytes);
            // but not in a response header's tagged-field section cut by bad bytes: there the
            // header is stretched over the message and the section is left as it was (as
            // dissectors.kafka.response_header leaves it: it has no _fix_lengths)
            let ch = &nodes[c];
            let header_tags = !t.errors_root
                && matches!(node.name, Name::Sym(s) if syms.name(s) == "tagged_fields");
            assert!(
                header_tags || (ch.offset >= node.offset && ch.offset + ch.length <= end),
                "child {c} ({:?} {}+{}) outside its parent {id} ({:?} {}+{})",
                ch.name,
                ch.offset,
                ch.length,
                node.name,
                node.offset,
                node.length
            );
        }
        stack.extend(children.iter().rev());
    }

    // error codes: kept only when not zero; the root's are the tree's, in wire order
    let mut errors = Vec::new();
    for &id in &order {
        let node = &nodes[id];
        if node.error {
            match node.value {
                Value::Int(v) => {
                    assert_ne!(v, 0, "an error code of zero was kept");
                    errors.push(v);
                }
                ref v => panic!("an error code of value {v:?}"),
            }
        }
    }
    assert!(
        t.errors.iter().all(|&e| e != 0),
        "a zero error code in errors"
    );
    if t.errors_root {
        assert_eq!(
            t.errors, errors,
            "the root's errors are not the tree's error codes in wire order"
        );
    } else {
        assert!(t.errors.is_empty());
    }

    // malformed notes: the walk stops at the first bad bytes, so one at most outside
    // records, and it is in the tree (looked for in every node made)
    let records = nodes.iter().any(is_records);
    let bad: Vec<usize> = (0..nodes.len())
        .filter(|&i| !is_records(&nodes[i]) && malformed(&nodes[i]))
        .collect();
    assert!(
        bad.len() <= 1,
        "{} malformed nodes: the walk goes on after bad bytes",
        bad.len()
    );
    assert!(
        bad.iter().all(|&i| seen[i]),
        "a malformed node left out of the tree"
    );
    let c = &t.counts;
    assert!(
        c.malformed as usize >= bad.len(),
        "a malformed node not counted"
    );
    if !records {
        assert_eq!(
            c.malformed as usize,
            bad.len(),
            "counted malformed without a malformed node"
        );
    }
    if order.iter().any(|&i| malformed(&nodes[i])) {
        assert!(c.malformed > 0);
    }
    assert!(c.trailing <= 1);

    let root = &nodes[t.root];
    assert_eq!(
        (root.offset, root.length),
        (0, n),
        "the root spans the message"
    );
    if !t.errors_root {
        // an unknown API's request, a short request header, a response header in the way
        assert_eq!(c.trailing, 0);
        if c.malformed == 0 {
            assert_eq!(nodes.len(), 1, "a plain root with more than itself");
        }
        return;
    }
    // the root holds the body alone
    let kids = root.children.as_deref().expect("the root's children");
    assert_eq!(kids.len(), 1, "the root holds the body alone");
    let body = &nodes[kids[0]];
    assert!(
        matches!(body.name, Name::Sym(b) if syms.name(b) == "body"),
        "the root's child is not the body"
    );
    if let Some(start) = body_start {
        assert_eq!(body.offset, start, "the body starts after the header");
    }
    assert_eq!(
        body.offset + body.length,
        n,
        "the body runs to the message's end"
    );
    match body.extra {
        Extra::MalformedAt(at) => {
            assert_eq!(bad.len(), 1, "MalformedAt without a malformed node");
            assert_eq!(
                nodes[bad[0]].offset, at,
                "MalformedAt is not where the malformed node is"
            );
            assert_eq!(c.trailing, 0, "trailing bytes counted after bad bytes");
        }
        Extra::None => assert!(
            bad.is_empty(),
            "a malformed node in a body not marked MalformedAt"
        ),
        ref e => panic!("a body with extra {e:?}"),
    }
    if !records {
        // the array limit stops the walk where it is hit
        assert!(c.limits.len() <= 1);
        if c.limits.contains(&"max_array_len") {
            assert!(matches!(body.extra, Extra::MalformedAt(_)));
            assert!(nodes[bad[0]]
                .notes
                .iter()
                .any(|s| s.contains("max_array_len")));
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 5 {
        return;
    }
    let s = setup();
    let mode = data[0];
    let response = mode & 1 != 0;
    let sel = u16::from_be_bytes([data[1], data[2]]);
    let vsel = u16::from_be_bytes([data[3], data[4]]);
    let (key, max_version) = if sel & 0x8000 == 0 {
        let a = &s.apis[sel as usize % s.apis.len()];
        (a.key, Some(a.max_version))
    } else {
        let key = (sel & 0x7FFF) as i16;
        (
            key,
            s.apis.iter().find(|a| a.key == key).map(|a| a.max_version),
        )
    };
    let version = match max_version {
        Some(max) if vsel & 0x8000 == 0 => (vsel % (max as u16 + 2)) as i16,
        _ => vsel as i16,
    };
    let mut msg = data[5..].to_vec();
    let n = msg.len();
    let mut figs = s.figures.lock().unwrap_or_else(|e| e.into_inner());
    let fig = &mut figs[((mode >> 1) & 3) as usize];
    let _ = fig.covers(key, version);
    if response {
        let Some(t) = fig.response(&msg, key, version) else {
            assert!(max_version.is_none(), "no tree for a known API's response");
            return;
        };
        check(&t, n, None, fig.syms(), fig.check);
        // a Fetch answer's rows (extra["fetch"]): one per partition element kept, from the
        // body's responses array
        if let Some((body, responses, rows)) = fig.fetch_rows(&t) {
            assert!(body < t.nodes.len());
            assert_eq!(
                rows.len(),
                partitions_kept(&t, responses, fig.syms(), "partitions"),
                "a row per partition kept"
            );
            let _ = Figures::marked(&t, body);
        }
        let again = fig
            .response(&msg, key, version)
            .expect("a tree the second time");
        assert_eq!(
            format!("{t:?}"),
            format!("{again:?}"),
            "the same response walked twice differs"
        );
    } else {
        if n >= 4 {
            msg[..2].copy_from_slice(&key.to_be_bytes());
            msg[2..4].copy_from_slice(&version.to_be_bytes());
        }
        let hint = (usize::from(mode >> 4) * 3).min(n);
        // the pipeline's header length comes from the parsed header: never past the frame
        let header_len = match parse_request_header(&s.table, &msg, false) {
            Some(h) if mode & 8 == 0 => h.header_len,
            _ => hint,
        };
        assert!(header_len <= n);
        let t = fig.request(&msg, header_len);
        // a Fetch request's rows (extra["fetch"]): one per partition element kept
        if let Some((_body, topic_data, rows)) = fig.produce_request_rows(&t) {
            let kept = partitions_kept(&t, topic_data, fig.syms(), "partition_data");
            assert_eq!(rows.len(), kept, "a row per partition sent");
            assert!(rows.iter().all(|r| r.at.is_none_or(|(o, l)| o + l <= n)));
        }
        if let Some((_body, topics, rows)) = fig.fetch_request_rows(&t) {
            assert_eq!(
                rows.len(),
                partitions_kept(&t, topics, fig.syms(), "partitions"),
                "a row per partition asked"
            );
        }
        let known = n >= 8 && max_version.is_some();
        check(&t, n, known.then_some(header_len), fig.syms(), fig.check);
        assert_eq!(
            t.errors_root, known,
            "errors root for a known API's request alone"
        );
        let again = fig.request(&msg, header_len);
        assert_eq!(
            format!("{t:?}"),
            format!("{again:?}"),
            "the same request walked twice differs"
        );
    }
});
