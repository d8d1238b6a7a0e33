//! What the figures read, in one place: the roles of the fields the walk keeps, and the
//! rules that decide it. Every name here is a field name of the Python schema
//! (`dissectors/schema_data.py`); the compiler (`plan.rs`) asks these rules about each field
//! of a body once, when it compiles the body's plan, and the walk keeps what the plan says.
//!
//! To make the walk keep one more field, add its name to the list of its role here:
//! [`ANCHORS`] (kept wherever it is), [`COMPANIONS`] (kept beside what is kept), or
//! [`TOPIC_ARRAYS`] and the names below it (a request's topics, with `topics` on). Error
//! codes ([`is_error`]) and records fields need no name: they are kept wherever they are.
//! An ApiVersions answer's table ([`VERSIONS_TABLE`], with `check`) is read into one value
//! of [`TABLE_FIELDS`] by the walk.

use super::schema::{fixed_of, FieldDef};

/// Fields kept wherever they are (with the structs and arrays that lead to them), each
/// with the readers of the lean trees that read it.
pub const ANCHORS: [&str; 20] = [
    // `stats`' throttle figures; `check`'s `throttled` rule
    "throttle_time_ms",
    // a Fetch's: `stats`' wait kind (a Fetch the broker held on purpose); `check`'s slow
    // requests (the wait a Fetch grants the broker)
    "max_wait_ms",
    // a Fetch's: `stats`' wait kind
    "min_bytes",
    // a Produce's: the producer stories (`analyzer/sinks/insights.py`)
    "acks",
    // a SyncGroup request's: `stats`' wait kind (a follower's SyncGroup, held)
    "assignments",
    // a SaslHandshake request's: `check`'s SASL rules; a `read` summary line
    "mechanism",
    // the consumer lag (a client id's group), the group stories (below), a `read` summary
    // line
    "group_id",
    // a Fetch request's: the consumer lag (a read_committed consumer's stable lag)
    "isolation_level",
    // a Fetch's session: the consumer lag (incremental fetch sessions), `check`'s fetch
    // session rule
    "session_id",
    "session_epoch",
    // a Fetch partition's, read into its row (`rows.rs`): the consumer lag, the committed
    // lag (high watermarks), the `partitions` table (`table/`)
    "fetch_offset",
    "high_watermark",
    "last_stable_offset",
    // a Fetch request's: the consumer lag's fetch sessions (kept whole:
    // `FORGOTTEN_TOPICS`)
    "forgotten_topics_data",
    // the producer stories; a `read` summary line
    "transactional_id",
    // the group stories (`analyzer/sinks/insights.py`'s `group_event`: `stats`' consumer
    // groups, `check`'s rebalance-storm rule and `--timeline`)
    "member_id",
    "generation_id",
    "generation_id_or_member_epoch",
    "protocol_name",
    "leader",
];

/// Fields kept in a struct kept for another reason (an anchor, an error code, records in
/// it): topic names and ids, partition indexes, which name the topic-partition a kept
/// figure belongs to. Read by the rows (`rows.rs`: the partition digests, the consumer lag,
/// the `partitions` table), by `table/` (a Produce answer's errors by partition, the
/// topic names of a Metadata answer's ids) and by `check`'s rules on a Produce answer's
/// partition errors.
pub const COMPANIONS: [&str; 6] = [
    "name",
    "topic",
    "index",
    "partition",
    "partition_index",
    "topic_id",
];

/// A Fetch request's topics to drop from its session: kept (an anchor) with their names or
/// ids and partitions, in every mode (what the consumer lag drops from a fetch session).
const FORGOTTEN_TOPICS: &str = "forgotten_topics_data";

/// With topics on ([`Figures::new`](super::Figures::new)): a request's top-level arrays of
/// topics, kept with their names or ids and the indexes of their partitions (what `stats`
/// groups by when asked to group by topic or partition, and what a `read` summary line
/// names), besides what the figures keep.
pub const TOPIC_ARRAYS: [&str; 2] = ["topics", "topic_data"];
/// A topic's name (a string) in an element of a [`TOPIC_ARRAYS`] array; its id, `topic_id`
/// (a uuid), is kept too.
pub(super) const TOPIC_NAMES: [&str; 3] = ["name", "topic", "topic_name"];
/// A topic's partitions in an element of a [`TOPIC_ARRAYS`] array, kept whole.
pub(super) const PARTITION_ARRAYS: [&str; 3] =
    ["partitions", "partition_indexes", "partition_data"];
/// A partition's index (fixed-size) in an element of a [`PARTITION_ARRAYS`] array.
pub(super) const PARTITION_INDEXES: [&str; 3] = ["partition_index", "partition", "index"];

/// With [`Figures::check`](super::Figures::check): an ApiVersions answer's array of the
/// versions each API is served in, read into one table (`extra["versions"]`,
/// [`Extra::Versions`](super::Extra::Versions): `check`'s rules on the versions a broker
/// serves), its elements not kept.
pub(super) const VERSIONS_TABLE: &str = "api_keys";

/// The fields of a [`VERSIONS_TABLE`] element its table holds, in order.
pub(super) const TABLE_FIELDS: [&str; 3] = ["api_key", "min_version", "max_version"];

/// Where a struct sits, for the topics' keeping: a request body's top level, an element of
/// its topics array, an element of that topic's partitions array, or anywhere else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scope {
    Plain,
    RequestTop,
    Topic,
    Partition,
    /// an element of an ApiVersions answer's api_keys, read into a table
    Table,
}

impl Scope {
    /// Is `fd` kept in this scope for the topics' sake (array fields: kept whole)?
    pub(super) fn keeps(self, fd: &FieldDef) -> bool {
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

    /// The scope of the elements of an array of structs `fd` in this scope (but for a
    /// [`VERSIONS_TABLE`] read into a table, whose elements are in [`Scope::Table`]).
    pub(super) fn inner(self, fd: &FieldDef) -> Scope {
        match self {
            // (what the consumer lag drops from a fetch session: its topics and their
            // partitions, wherever the figures keep the array)
            _ if fd.name == FORGOTTEN_TOPICS => Scope::Topic,
            Scope::RequestTop if self.keeps(fd) => Scope::Topic,
            Scope::Topic if self.keeps(fd) => Scope::Partition,
            _ => Scope::Plain,
        }
    }
}

/// Is `fd` an error code (its meaning is "error_code", or an int16 named `error_code` or
/// `..._error_code`)? Kept wherever it is when not zero: the root's `errors`, the names of
/// the exchange's error codes that `stats`, `check` and the tables count.
pub(super) fn is_error(fd: &FieldDef) -> bool {
    fd.error_meaning
        || (fd.ty == "int16" && (fd.name == "error_code" || fd.name.ends_with("_error_code")))
}

fn is_anchor(name: &str) -> bool {
    ANCHORS.contains(&name)
}

fn is_companion(name: &str) -> bool {
    COMPANIONS.contains(&name)
}

/// Is `fd` kept for the figures, in a struct that keeps its `companions` or not?
pub(super) fn kept(fd: &FieldDef, companions: bool) -> bool {
    is_anchor(&fd.name) || is_error(fd) || (companions && is_companion(&fd.name))
}

/// Does this field, or anything below it, have to be kept?
pub(super) fn wanted(fd: &FieldDef) -> bool {
    is_anchor(&fd.name) || fd.ty == "records" || is_error(fd) || fd.fields.iter().any(wanted)
}

/// Does a struct of the `present` fields (field, tagged), in `scope`, keep fixed-size error
/// codes and companions alone (the partitions of a Metadata or Produce answer)? As an array
/// element it is then kept only when one of its error codes is not zero.
pub(super) fn errors_only(present: &[(&FieldDef, bool)], scope: Scope) -> bool {
    let wanted: Vec<_> = present.iter().filter(|(fd, _)| wanted(fd)).collect();
    !wanted.is_empty()
        && wanted.iter().all(|(fd, tagged)| {
            !tagged && fixed_of(&fd.ty).is_some() && is_error(fd) && !is_anchor(&fd.name)
        })
        && !present
            .iter()
            .any(|(fd, tagged)| *tagged && is_companion(&fd.name))
        // (a topic or partition element kept for the topics is kept whatever its codes)
        && !matches!(scope, Scope::Topic | Scope::Partition)
}
