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
