//! Batch claims as leases, in the store itself (SQLite and PostgreSQL): a restarted process
//! takes back only its own replica's earlier claims; a renewal never shortens a claim (a
//! provider batch's lines stay held past any heartbeat); a claim held beside the process's own
//! is renewed while its guard lives and lapses after.

use std::time::Duration;

use spillway::batch::job::{Dialect, Status};
use spillway::batch::lease::{replica, Lease};
use spillway::batch::lines::Line;
use spillway::batch::store::{self, JobRow};
use spillway::ledger::Store;

use crate::common;

/// A job of `n` queued lines.
async fn job(store: &Store, n: usize) -> String {
    let id = format!("batch_{:016x}", rand::random::<u64>());
    let row = JobRow {
        id: id.clone(),
        dialect: Dialect::OpenAi,
        endpoint: "/v1/chat/completions".into(),
        input_file_id: None,
        output_file_id: None,
        error_file_id: None,
        status: Status::InProgress,
        owner: None,
        metadata: None,
        errors: None,
        window_ms: 86_400_000,
        created_ms: 0,
        at_ms: [None; 7],
        total: n as i64,
        plan: None,
    };
    let lines: Vec<Line> =
        (0..n).map(|i| Line { custom_id: format!("r{i}"), request: "{}".into() }).collect();
    store::create_job(store, &row, &lines).await.unwrap();
    id
}

/// How many lines `who` can claim at `now_ms` (queued, or held by a claim lapsed by then),
/// handed back at once.
async fn claimable(store: &Store, id: &str, now_ms: i64) -> usize {
    let taken = store::claim(store, id, "probe", 100, now_ms, now_ms + 1).await.unwrap();
    for line in &taken {
        store::release(store, id, line.idx, "probe").await.unwrap();
    }
    taken.len()
}

async fn leases(url: &str, name: &str) {
    let store = Store::open(url).await.unwrap();
    let id = job(&store, 6).await;
    let beat = Duration::from_secs(5);
    let t0 = 1_000_000;

    // Two lines held by this replica's dead incarnation, two by another replica.
    let dead = Lease::new(replica("pod-a", 8080), beat);
    let other = Lease::new(replica("pod-b", 8080), beat);
    assert_eq!(store::claim(&store, &id, dead.me(), 2, t0, dead.until(t0)).await.unwrap().len(), 2);
    assert_eq!(store::claim(&store, &id, other.me(), 2, t0, other.until(t0)).await.unwrap().len(), 2);
    let restarted = Lease::new(replica("pod-a", 8080), beat);
    assert_eq!(restarted.take_back(&store).await.unwrap(), 2, "{name}: its predecessor's two, at once");
    assert_eq!(claimable(&store, &id, t0).await, 4, "{name}: the other replica's two stay held");
    assert_eq!(other.renew(&store, t0 + 10_000).await.unwrap(), 2, "{name}: one statement renews both");
    assert_eq!(claimable(&store, &id, t0 + 20_000).await, 4, "{name}: renewed at +10 s, held until +25 s");
    assert_eq!(claimable(&store, &id, t0 + 26_000).await, 6, "{name}: three heartbeats missed: lapsed");

    // A provider batch's lines: held under the lease while submitted, then past the window.
    let id = job(&store, 2).await;
    let held = other.hold("spill-1");
    let lines = store::queued(&store, &id, 2).await.unwrap();
    assert_eq!(store::claim_these(&store, &id, lines, "spill-1", other.until(t0)).await.unwrap().len(), 2);
    other.renew(&store, t0 + 10_000).await.unwrap();
    assert_eq!(claimable(&store, &id, t0 + 20_000).await, 0, "{name}: renewed with the process's own");
    store::renew(&store, "spill-1", t0 + 86_400_000).await.unwrap();
    other.renew(&store, t0 + 11_000).await.unwrap();
    assert_eq!(claimable(&store, &id, t0 + 60_000).await, 0, "{name}: a heartbeat never shortens a claim");
    drop(held);
    let id = job(&store, 1).await;
    let _held = other.hold("spill-2");
    let lines = store::queued(&store, &id, 1).await.unwrap();
    store::claim_these(&store, &id, lines, "spill-2", other.until(t0)).await.unwrap();
    drop(_held);
    other.renew(&store, t0 + 10_000).await.unwrap();
    assert_eq!(claimable(&store, &id, t0 + 16_000).await, 1, "{name}: no longer held, it lapsed");
    store.close().await;
}

#[tokio::test]
async fn batch_claims_are_leases_on_sqlite() {
    leases(&common::temp_ledger_url(), "sqlite").await;
}

#[tokio::test]
async fn batch_claims_are_leases_on_postgres() {
    let Some(url) = common::pg_store_url("batch_leases").await else { return };
    leases(&url, "postgres").await;
}
