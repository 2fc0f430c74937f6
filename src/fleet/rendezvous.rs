//! Which router replicas scrape which node, when several share their readings: rendezvous
//! (highest-random-weight) hashing. Every replica computes the same answer from the same live
//! replica set, without talking to the others; a node is scraped by the `k` replicas with the
//! highest hash of (replica, node), so a replica joining takes over only the nodes where it
//! ranks in the top `k` (each loses exactly one old scraper), and one leaving hands each of its
//! nodes to exactly one other.
//!
//! Pure: ids in, ids out; no I/O, no clock. The hash (xxh3, seed 0) is part of the contract:
//! replicas of different builds must agree, so it is pinned by exact outputs in the tests.

use std::fmt;

/// One router replica taking part in shared scraping: unique among the live replicas (the
/// pod's name and a random suffix chosen at start).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReplicaId(String);

impl ReplicaId {
    pub fn new(id: impl Into<String>) -> ReplicaId {
        ReplicaId(id.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ReplicaId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The weight of `replica` for `node`: xxh3 of the replica id, a 0 byte, the node key.
pub fn weight(replica: &ReplicaId, node: &str) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(replica.0.as_bytes());
    h.update(&[0]);
    h.update(node.as_bytes());
    h.digest()
}

/// The replicas that scrape `node`: the `k` of `replicas` with the highest weight (ties, which
/// xxh3 makes vanishingly rare, broken by id), highest first. Duplicates count once; fewer than
/// `k` replicas: all of them.
pub fn scrapers<'a>(node: &str, replicas: &'a [ReplicaId], k: usize) -> Vec<&'a ReplicaId> {
    let mut ranked: Vec<(u64, &ReplicaId)> = replicas.iter().map(|r| (weight(r, node), r)).collect();
    ranked.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    ranked.dedup_by(|a, b| a.1 == b.1);
    ranked.into_iter().take(k).map(|(_, r)| r).collect()
}

/// Does `me` scrape `node`? A replica always counts itself live (its own heartbeat may not be
/// read back yet).
pub fn assigned(me: &ReplicaId, node: &str, replicas: &[ReplicaId], k: usize) -> bool {
    if replicas.contains(me) {
        scrapers(node, replicas, k).contains(&me)
    } else {
        let mut with_me = replicas.to_vec();
        with_me.push(me.clone());
        scrapers(node, &with_me, k).contains(&me)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn ids(names: &[&str]) -> Vec<ReplicaId> {
        names.iter().map(|n| ReplicaId::new(*n)).collect()
    }

    fn names(v: Vec<&ReplicaId>) -> Vec<&str> {
        v.into_iter().map(ReplicaId::as_str).collect()
    }

    fn node(i: usize) -> String {
        format!("fleet/m@http://10.0.{}.{}:8000", i / 250, i % 250)
    }

    #[test]
    fn weights_and_choices_are_pinned() {
        let r = ids(&["router-a", "router-b", "router-c"]);
        assert_eq!(weight(&r[0], "fleet/m@http://10.0.0.1:8000"), 206_586_539_897_875_637);
        let chosen: Vec<Vec<&str>> =
            (1..=6).map(|i| names(scrapers(&format!("fleet/m@http://10.0.0.{i}:8000"), &r, 2))).collect();
        let pinned: [[&str; 2]; 6] = [
            ["router-b", "router-c"],
            ["router-b", "router-c"],
            ["router-b", "router-a"],
            ["router-a", "router-c"],
            ["router-c", "router-b"],
            ["router-a", "router-b"],
        ];
        assert_eq!(chosen, pinned.map(|p| p.to_vec()).to_vec());
        // Order of the replica list does not matter.
        let reversed: Vec<ReplicaId> = r.iter().rev().cloned().collect();
        for i in 0..50 {
            assert_eq!(scrapers(&node(i), &r, 2), scrapers(&node(i), &reversed, 2));
        }
    }

    #[test]
    fn each_node_gets_k_scrapers_spread_evenly() {
        let r = ids(&["a", "b", "c"]);
        let mut per_replica = [0usize; 3];
        for i in 0..3000 {
            let s = scrapers(&node(i), &r, 2);
            assert_eq!(s.len(), 2);
            assert_ne!(s[0], s[1]);
            for x in s {
                per_replica[r.iter().position(|y| y == x).unwrap()] += 1;
            }
        }
        // 2000 each in expectation; a fair hash stays within a few percent.
        assert!(per_replica.iter().all(|&n| (1850..=2150).contains(&n)), "{per_replica:?}");
        assert_eq!(names(scrapers("n", &ids(&["only"]), 2)), vec!["only"]);
        assert!(scrapers("n", &[], 2).is_empty());
        assert_eq!(scrapers("n", &ids(&["a", "a", "b"]), 2).len(), 2, "a duplicate counts once");
    }

    #[test]
    fn a_replica_joining_or_leaving_moves_the_least() {
        let before = ids(&["a", "b", "c", "d", "e"]);
        let after = ids(&["a", "b", "c", "d", "e", "f"]);
        let mut moved = 0;
        for i in 0..3000 {
            let (old, new): (BTreeSet<_>, BTreeSet<_>) = (
                scrapers(&node(i), &before, 2).into_iter().collect(),
                scrapers(&node(i), &after, 2).into_iter().collect(),
            );
            if old != new {
                moved += 1;
                // Only the newcomer enters, and it displaces exactly one.
                let entered: Vec<_> = new.difference(&old).collect();
                assert_eq!(entered.len(), 1);
                assert_eq!(entered[0].as_str(), "f");
                assert_eq!(old.difference(&new).count(), 1);
            }
            // Leaving is joining backwards: "f" gone, its nodes each get one replacement.
        }
        // The newcomer ranks top-2 of 6 for a third of the nodes: the minimum that must move.
        assert!((900..=1100).contains(&moved), "{moved} of 3000 nodes changed scrapers");
    }

    #[test]
    fn assigned_counts_me_even_before_my_heartbeat_is_seen() {
        let others = ids(&["a", "b"]);
        let me = ReplicaId::new("c");
        let all = ids(&["a", "b", "c"]);
        for i in 0..100 {
            assert_eq!(assigned(&me, &node(i), &others, 2), assigned(&me, &node(i), &all, 2));
            assert_eq!(assigned(&me, &node(i), &all, 2), scrapers(&node(i), &all, 2).contains(&&me));
        }
        assert!((0..100).all(|i| assigned(&me, &node(i), &others, 3)), "k = replicas: all scrape all");
    }
}
