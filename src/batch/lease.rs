//! A replica's claims on batch lines are leases that show their holder is alive: the holder
//! renews all of them every `batch.heartbeat_secs` in one statement, and a claim not renewed
//! for three heartbeats has lapsed, so a dead replica's lines are taken over within seconds
//! while a slow line on a live one is never run twice. A claim names its holder as
//! `<replica>#<incarnation>`: the replica is the host and the port it listens on (no two live
//! processes share it), the incarnation changes on every start, so a process that starts again
//! knows the claims of its own earlier incarnation are a dead process's and takes them back at
//! once.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use super::store;
use crate::ledger::Store;

/// Heartbeats a claim outlives: two may be missed (a slow store) before it lapses.
pub const HEARTBEATS_PER_LEASE: u32 = 3;

/// This process's claims and how long each lasts unrenewed.
pub struct Lease {
    /// The replica: stable across restarts of the same process slot.
    replica: String,
    /// The claim's holder: the replica and this start's incarnation.
    me: String,
    every: Duration,
    /// Claims held for a while beside `me`: a provider batch's lines while it is submitted.
    also: Mutex<HashSet<String>>,
}

impl Lease {
    /// The lease of `replica` (see [`replica`]), renewed `every`.
    pub fn new(replica: String, every: Duration) -> Lease {
        let me = format!("{replica}#{:016x}", rand::random::<u64>());
        Lease { replica, me, every, also: Mutex::default() }
    }

    /// The holder's name in its claims.
    pub fn me(&self) -> &str {
        &self.me
    }

    /// How often the claims are renewed.
    pub fn every(&self) -> Duration {
        self.every
    }

    /// Until when a claim made or renewed at `now_ms` lasts.
    pub fn until(&self, now_ms: i64) -> i64 {
        now_ms + (self.every * HEARTBEATS_PER_LEASE).as_millis() as i64
    }

    /// Renew `claim` beside `me` while the guard lives.
    pub fn hold(&self, claim: &str) -> Held<'_> {
        self.also.lock().unwrap_or_else(|e| e.into_inner()).insert(claim.to_string());
        Held { lease: self, claim: claim.to_string() }
    }

    /// Renew every running line this process holds: one statement for its own, one for each
    /// other claim it holds for a while. How many lines were renewed.
    pub async fn renew(&self, store: &Store, now_ms: i64) -> Result<u64, sqlx::Error> {
        let also: Vec<String> = self.also.lock().unwrap_or_else(|e| e.into_inner()).iter().cloned().collect();
        let mut renewed = 0;
        for claim in std::iter::once(&self.me).chain(&also) {
            renewed += store::renew(store, claim, self.until(now_ms)).await?;
        }
        Ok(renewed)
    }

    /// Put back in the queue the running lines of this replica's earlier incarnations: their
    /// process is gone, for this one holds its replica's name. How many lines.
    pub async fn take_back(&self, store: &Store) -> Result<u64, sqlx::Error> {
        let mut taken = 0;
        for holder in store::holders(store).await?.iter().filter(|h| self.earlier(h)) {
            taken += store::release_all(store, holder).await?;
        }
        Ok(taken)
    }

    /// Whether `holder` is an earlier incarnation of this replica.
    fn earlier(&self, holder: &str) -> bool {
        holder != self.me && holder.rsplit_once('#').is_some_and(|(replica, _)| replica == self.replica)
    }
}

/// A claim renewed beside the process's own until dropped.
pub struct Held<'a> {
    lease: &'a Lease,
    claim: String,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.lease.also.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.claim);
    }
}

/// The replica's name: the host (the pod's name in Kubernetes) and the port it listens on.
pub fn replica(host: &str, port: u16) -> String {
    format!("{host}:{port}")
}

/// This machine's host name (`localhost` when it cannot be read).
pub fn host_name() -> String {
    let read = std::fs::read_to_string("/proc/sys/kernel/hostname").ok();
    read.or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_lasts_three_heartbeats() {
        let lease = Lease::new(replica("pod-a", 8080), Duration::from_secs(5));
        assert_eq!(lease.until(1_000), 16_000);
        assert!(lease.me().starts_with("pod-a:8080#"));
    }

    #[test]
    fn only_this_replicas_earlier_incarnations_are_taken_back() {
        let lease = Lease::new(replica("pod-a", 8080), Duration::from_secs(5));
        assert!(lease.earlier("pod-a:8080#00000000000000ff"));
        assert!(!lease.earlier(lease.me()), "not itself");
        assert!(!lease.earlier("pod-a:8081#00000000000000ff"), "another port is another replica");
        assert!(!lease.earlier("pod-b:8080#00000000000000ff"));
        assert!(!lease.earlier("pod-a:80#00000000000000ff"));
        assert!(!lease.earlier("spill-00000000000000ff"), "a provider batch's claim");
        assert!(!lease.earlier("replica-00000000000000ff"), "an older version's claim");
    }
}
