//! What one replica hears from the others when node readings are shared through Redis: each
//! peer reading fed to the telemetry board once, at its true age, and the nodes whose assigned
//! scrapers have gone quiet, which this replica then scrapes itself, so a node is never left
//! unscraped because the replicas rendezvous chose cannot (or no longer) scrape it.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use tokio::time::Instant;

use super::scrape_share::unix_ms;
use crate::canonical::NodeKey;
use crate::fleet::load::NodeLoad;
use crate::fleet::reading::Reading;
use crate::fleet::rendezvous::ReplicaId;
use crate::fleet::telemetry::TelemetryBoard;

/// What this replica has heard from its peers about the nodes rendezvous gives to others.
#[derive(Default)]
pub(super) struct PeerReadings {
    /// The scrape time of the last reading taken from a peer, by node, so a reading is fed to
    /// the board once.
    taken: HashMap<NodeKey, u64>,
    /// Since when (unix ms) a peer's reading of the node has been expected.
    expected: HashMap<NodeKey, u64>,
}

impl PeerReadings {
    pub(super) fn retain(&mut self, keep: impl Fn(&NodeKey) -> bool) {
        self.taken.retain(|k, _| keep(k));
        self.expected.retain(|k, _| keep(k));
    }

    /// Of the nodes rendezvous gives to other replicas (`theirs`), those no other replica's
    /// reading has come for within `within_ms` (nor since they were first expected): their
    /// scrapers are gone, or are replicas that do not know the node (another deployment on the
    /// same Redis, or one mid-rollout with another node set). This replica scrapes them too,
    /// until a peer's fresh reading shows up again.
    pub(super) fn orphans<'k>(
        &mut self,
        theirs: impl IntoIterator<Item = &'k NodeKey>,
        now_ms: u64,
        within_ms: u64,
    ) -> HashSet<NodeKey> {
        let mut out = HashSet::new();
        for key in theirs {
            let since = *self.expected.entry(key.clone()).or_insert(now_ms);
            let heard = self.taken.get(key).copied().unwrap_or(0).max(since);
            if now_ms.saturating_sub(heard) > within_ms {
                out.insert(key.clone());
            }
        }
        out
    }

    /// Feed the board the readings of `nodes` (as read, `values`) newer than those taken before,
    /// each at its true age; returns how many were taken.
    pub(super) fn take(
        &mut self,
        nodes: &[NodeKey],
        values: Vec<Option<String>>,
        me: &ReplicaId,
        board: &TelemetryBoard,
        load: &NodeLoad,
        gauge_lag: Duration,
    ) -> u64 {
        let now_ms = unix_ms();
        let now = Instant::now();
        let mut taken = 0;
        for (key, text) in nodes.iter().zip(values) {
            let Some(text) = text else { continue };
            let Some(at_ms) = Reading::time_of(&text) else { continue };
            if self.taken.get(key).is_some_and(|last| *last >= at_ms) {
                continue;
            }
            let reading = match Reading::decode(&text) {
                Ok(r) if r.by != *me => r,
                Ok(_) => continue,
                Err(e) => {
                    tracing::debug!(node = %key, error = %e, "unreadable shared reading");
                    continue;
                }
            };
            self.taken.insert(key.clone(), at_ms);
            let age = Duration::from_millis(now_ms.saturating_sub(at_ms));
            let at = now.checked_sub(age).unwrap_or(now);
            // A reading older than what the board has (this replica scraped the node until
            // just now) adds nothing.
            if board.last_ok(key).is_some_and(|last| last >= at) {
                continue;
            }
            board.on_scrape_with_info(key, reading.engine, reading.sample, reading.info, at);
            load.mark_scraped(key, now, at, gauge_lag);
            taken += 1;
        }
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::Engine;

    const LAG: Duration = Duration::from_secs(5);

    #[tokio::test(start_paused = true)]
    async fn peer_readings_land_once_at_their_true_age_and_never_our_own() {
        let (board, load) = (TelemetryBoard::new(), NodeLoad::new());
        let (me, peer) = (ReplicaId::new("me"), ReplicaId::new("peer"));
        let node = NodeKey::from("fleet/m@http://10.0.0.1:8000");
        let page = include_str!("../../tests/fixtures/vllm/v1-engine-excerpt.prom");
        let reading = |by: &ReplicaId, age_ms: u64| Reading {
            engine: Engine::Vllm,
            sample: crate::fleet::engines::read_means(Engine::Vllm, page).unwrap(),
            info: Default::default(),
            scraped_at_ms: unix_ms() - age_ms,
            by: by.clone(),
        };
        let mut peers = PeerReadings::default();
        let nodes = [node.clone()];
        let own = reading(&me, 0).encode();
        assert_eq!(
            peers.take(&nodes, vec![Some(own)], &me, &board, &load, LAG),
            0,
            "our own reading is not a peer's"
        );
        assert_eq!(peers.take(&nodes, vec![None], &me, &board, &load, LAG), 0);
        let old = reading(&peer, 700).encode();
        assert_eq!(peers.take(&nodes, vec![Some(old.clone())], &me, &board, &load, LAG), 1);
        let age = board.get(node.as_str()).unwrap().age(Instant::now()).unwrap();
        assert!((Duration::from_millis(690)..=Duration::from_millis(710)).contains(&age), "{age:?}");
        assert_eq!(peers.take(&nodes, vec![Some(old)], &me, &board, &load, LAG), 0, "the same reading once");
        assert_eq!(peers.take(&nodes, vec![Some("garbage".into())], &me, &board, &load, LAG), 0);
        let newer = reading(&peer, 100).encode();
        assert_eq!(peers.take(&nodes, vec![Some(newer)], &me, &board, &load, LAG), 1);
        assert_eq!(board.get(node.as_str()).unwrap().scrapes, 2);
    }

    #[test]
    fn a_node_no_peer_reports_on_is_scraped_here_until_a_peer_does() {
        let mut peers = PeerReadings::default();
        let node = NodeKey::from("fleet/m@http://10.0.0.1:8000");
        let theirs = [node.clone()];
        // First expected at 10 s: not an orphan until 3 s have gone by without a reading.
        assert!(peers.orphans(&theirs, 10_000, 3_000).is_empty());
        assert!(peers.orphans(&theirs, 13_000, 3_000).is_empty());
        assert_eq!(peers.orphans(&theirs, 13_001, 3_000), HashSet::from([node.clone()]));
        // A peer's reading scraped at 14 s: heard from again, until 17 s.
        peers.taken.insert(node.clone(), 14_000);
        assert!(peers.orphans(&theirs, 16_500, 3_000).is_empty());
        assert_eq!(peers.orphans(&theirs, 17_500, 3_000).len(), 1);
        // Given back to this replica, then to a peer again: expected afresh from then.
        peers.retain(|_| false);
        assert!(peers.orphans(&theirs, 30_000, 3_000).is_empty());
        assert_eq!(peers.orphans(&theirs, 33_001, 3_000).len(), 1);
    }
}
