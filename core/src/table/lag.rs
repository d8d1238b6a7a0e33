//! Consumer lag: each connection's Fetch sessions (KIP-227), followed in order, give the
//! `lag` table's rows, one per partition of a session at each Fetch answer.
//!
//! A connection's Fetches continue its session while a request has session_epoch > 0 and
//! names the session id the previous answer gave (none after an error); then the request
//! names only the partitions whose position changed, and its answer only those with news.
//! Any other request starts a session of what it names. A partition is in the session from
//! a request that asks for it until an incremental request forgets it (a request that asks
//! for and forgets a partition drops it); its position is the offset last asked plus the
//! records the answers returned since; its high watermark (and last stable offset) the last
//! an answer gave without a partition error. Every answer without a top-level error (an
//! error ends the session) gives a figure for each partition of the session whose high
//! watermark is known, those it left out too (their lag stands): the high watermark minus
//! the position the request asked from, before the answer's records move it on.
//!
//! One implementation, fed the rows of a Fetch (its `fetch_session` struct and its
//! `partitions`): by the table builder for the exchanges the core tables, by the front
//! (`analyzer._core.FetchSessions`) for those it decodes.

use rustc_hash::FxHashMap;

use super::{Fetch, Part};

/// Partitions followed per session; connections whose session is followed.
const MAX_SESSION_PARTITIONS: usize = 100_000;
const MAX_SESSIONS: usize = 65_536;

/// A partition of a session: its position, high watermark and last stable offset (the
/// last two unknown until an answer gives them), and whether the answer being read gave a
/// figure of it.
#[derive(Debug, Clone, Copy)]
struct State {
    position: i64,
    hw: Option<i64>,
    lso: Option<i64>,
    sampled: bool,
}

#[derive(Debug, Default)]
struct Session {
    id: i32,
    /// topic -> partition -> state
    parts: FxHashMap<String, FxHashMap<i32, State>>,
    /// the partitions in `parts`
    len: usize,
}

impl Session {
    fn get(&mut self, topic: &str, partition: i32) -> Option<&mut State> {
        self.parts.get_mut(topic)?.get_mut(&partition)
    }

    fn clear(&mut self) {
        self.parts.clear();
        self.len = 0;
    }
}

/// One figure: a partition's position, high watermark and last stable offset at an answer,
/// and the lag against each (records, never below 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    pub topic: String,
    pub partition: i32,
    pub position: i64,
    pub high_watermark: i64,
    pub last_stable_offset: Option<i64>,
    pub lag: i64,
    pub stable_lag: Option<i64>,
}

/// Every connection's session (see the module documentation).
#[derive(Debug, Default)]
pub struct Sessions {
    conns: FxHashMap<u64, Session>,
    /// the connections in the order their sessions began (the oldest goes first past
    /// `MAX_SESSIONS`); those that ended since are dropped from it once it holds twice that
    order: std::collections::VecDeque<u64>,
}

impl Sessions {
    /// A connection ended: its session goes.
    pub fn closed(&mut self, conn: u64) {
        self.conns.remove(&conn);
    }

    /// An answered Fetch of connection `conn`, in its order: `f` its session and asks,
    /// `answers` its answer's partitions (topics named as the asks name them). The figures
    /// it gives.
    pub fn fetch(&mut self, conn: u64, f: &Fetch, answers: &[Part]) -> Vec<Sample> {
        if !self.conns.contains_key(&conn) {
            if self.conns.len() >= MAX_SESSIONS {
                while let Some(old) = self.order.pop_front() {
                    if self.conns.remove(&old).is_some() {
                        break;
                    }
                }
            }
            if self.order.len() >= 2 * MAX_SESSIONS {
                let conns = &self.conns;
                self.order.retain(|c| conns.contains_key(c));
            }
            self.order.push_back(conn);
        }
        let s = self.conns.entry(conn).or_default();
        let id = f.session_id.unwrap_or(0);
        let epoch = f.session_epoch;
        let incremental = epoch.is_some_and(|e| e > 0) && id != 0 && id == s.id;
        if !incremental {
            s.clear();
        }
        for (topic, partition, offset) in &f.asked {
            let (Some(topic), Some(partition), Some(offset)) = (topic, partition, offset) else {
                continue;
            };
            if let Some(st) = s.get(topic, *partition) {
                st.position = *offset;
            } else if s.len < MAX_SESSION_PARTITIONS {
                let state = State {
                    position: *offset,
                    hw: None,
                    lso: None,
                    sampled: false,
                };
                s.parts
                    .entry(topic.clone())
                    .or_default()
                    .insert(*partition, state);
                s.len += 1;
            }
        }
        if incremental {
            for (topic, partition) in &f.forgotten {
                let (Some(topic), Some(partition)) = (topic, partition) else {
                    continue;
                };
                if let Some(ps) = s.parts.get_mut(topic.as_str()) {
                    if ps.remove(partition).is_some() {
                        s.len -= 1;
                        if ps.is_empty() {
                            s.parts.remove(topic.as_str());
                        }
                    }
                }
            }
        }
        if f.error_code.is_some_and(|e| e != 0) {
            s.id = 0;
            s.clear();
            return Vec::new();
        }
        s.id = if epoch.is_some_and(|e| e >= 0) {
            f.response_session_id.unwrap_or(0)
        } else {
            0
        };
        let mut out = Vec::new();
        for a in answers {
            let (Some(topic), Some(partition)) = (&a.topic, a.partition) else {
                continue;
            };
            let Some(st) = s.get(topic, partition) else {
                continue;
            };
            if a.error.is_some() {
                continue;
            }
            if let Some(hw) = a.high_watermark.filter(|&hw| hw >= 0) {
                st.hw = Some(hw);
                st.lso = a.last_stable_offset.filter(|&l| l >= 0);
            }
            if st.hw.is_some() {
                out.push(sample(topic, partition, st));
                st.sampled = true;
            }
            st.position += a.records;
        }
        for (topic, ps) in &mut s.parts {
            for (&partition, st) in ps.iter_mut() {
                if !std::mem::take(&mut st.sampled) && st.hw.is_some() {
                    out.push(sample(topic, partition, st));
                }
            }
        }
        out
    }
}

fn sample(topic: &str, partition: i32, st: &State) -> Sample {
    let hw = st.hw.unwrap_or(0);
    Sample {
        topic: topic.to_string(),
        partition,
        position: st.position,
        high_watermark: hw,
        last_stable_offset: st.lso,
        lag: (hw - st.position).max(0),
        stable_lag: st.lso.map(|l| (l - st.position).max(0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(p: i32, hw: i64, records: i64) -> Part {
        Part {
            topic: Some("t".into()),
            partition: Some(p),
            records,
            bytes: 0,
            codec: None,
            crc_ok: true,
            error: None,
            fetch_offset: None,
            high_watermark: Some(hw),
            last_stable_offset: None,
        }
    }

    fn fetch(id: i32, epoch: i32, asked: &[(i32, i64)], rsid: i32) -> Fetch {
        Fetch {
            isolation_level: Some(0),
            session_id: Some(id),
            session_epoch: Some(epoch),
            error_code: Some(0),
            response_session_id: Some(rsid),
            asked: asked
                .iter()
                .map(|&(p, o)| (Some("t".to_string()), Some(p), Some(o)))
                .collect(),
            forgotten: Vec::new(),
        }
    }

    fn lags(v: &[Sample]) -> Vec<(i32, i64, i64)> {
        let mut out: Vec<_> = v.iter().map(|s| (s.partition, s.position, s.lag)).collect();
        out.sort();
        out
    }

    #[test]
    fn an_incremental_session_keeps_what_the_answer_leaves_out() {
        let mut s = Sessions::default();
        // a full fetch opens session 7: both partitions answered
        let got = s.fetch(
            1,
            &fetch(0, 0, &[(0, 10), (1, 20)], 7),
            &[part(0, 15, 3), part(1, 20, 0)],
        );
        assert_eq!(lags(&got), [(0, 10, 5), (1, 20, 0)]);
        // incremental, nothing asked: partition 0 moved on by the 3 records, 1 has no news
        let got = s.fetch(1, &fetch(7, 1, &[], 7), &[part(0, 16, 1)]);
        assert_eq!(lags(&got), [(0, 13, 3), (1, 20, 0)]);
        // a session error ends it: no figure, and the next request starts anew
        let mut err = fetch(7, 2, &[], 0);
        err.error_code = Some(70);
        assert!(s.fetch(1, &err, &[]).is_empty());
        let got = s.fetch(1, &fetch(7, 3, &[(1, 21)], 7), &[part(1, 25, 0)]);
        assert_eq!(lags(&got), [(1, 21, 4)]);
    }

    #[test]
    fn ended_connections_leave_no_state_behind() {
        let mut s = Sessions::default();
        for conn in 0..3 * MAX_SESSIONS as u64 {
            s.fetch(conn, &fetch(0, 0, &[(0, 1)], 9), &[part(0, 5, 0)]);
            s.closed(conn);
        }
        assert!(s.conns.is_empty() && s.order.len() <= 2 * MAX_SESSIONS);
        // open ones past the bound: the oldest go
        for conn in 0..MAX_SESSIONS as u64 + 3 {
            s.fetch(conn, &fetch(0, 0, &[(0, 1)], 9), &[part(0, 5, 0)]);
        }
        assert_eq!(s.conns.len(), MAX_SESSIONS);
        assert!(!s.conns.contains_key(&0) && s.conns.contains_key(&3));
    }

    #[test]
    fn forgotten_partitions_leave_the_session() {
        let mut s = Sessions::default();
        s.fetch(
            2,
            &fetch(0, 0, &[(0, 1), (1, 1)], 9),
            &[part(0, 5, 0), part(1, 5, 0)],
        );
        let mut f = fetch(9, 1, &[], 9);
        f.forgotten = vec![(Some("t".into()), Some(1))];
        assert_eq!(lags(&s.fetch(2, &f, &[])), [(0, 1, 4)]);
        // a partition error keeps the old figure, without moving the position
        let mut p = part(0, 50, 7);
        p.error = Some("NOT_LEADER_OR_FOLLOWER".into());
        assert_eq!(lags(&s.fetch(2, &fetch(9, 2, &[], 9), &[p])), [(0, 1, 4)]);
    }
}
