//! The spool's directory on disk: replay after a crash, acknowledgement freeing segments, a
//! torn tail, the size bound, the lock; and the stage in front of a real SQLite writer.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::segments::Segments;
use super::*;
use crate::ledger::{LedgerRecord, Outcome, Store, WriterConfig};

pub(super) fn row(i: usize) -> LedgerRow {
    LedgerRow::Request(LedgerRecord {
        id: format!("{i:032x}"),
        at_ms: 1_700_000_000_000 + i as i64,
        task: "t".into(),
        client_key: None,
        team: None,
        priority: None,
        affinity_hash: None,
        backend: "pool".into(),
        model: "llama".into(),
        node: "pool/llama@http://a".into(),
        attempts: 1,
        outcome: Outcome::Completed,
        error_class: None,
        input_tokens: 10,
        cached_input_tokens: 0,
        cache_write_tokens: 0,
        output_tokens: 5,
        ttft_ms: Some(30),
        duration_ms: 80,
        cost_usd: None,
    })
}

fn temp_dir() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("spillway-spool-{:016x}", rand::random::<u64>()))
}

fn files(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "spool"))
        .count()
}

/// Every whole row in the segment files of `dir`, in the order written.
fn rows_on_disk(dir: &std::path::Path) -> Vec<LedgerRow> {
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "spool"))
        .collect();
    paths.sort();
    paths.iter().flat_map(|p| super::frame::scan(&std::fs::read(p).unwrap()).rows).collect()
}

#[test]
fn unacknowledged_rows_come_back_at_the_next_open_and_acknowledged_ones_do_not() {
    let dir = temp_dir();
    let t0 = Instant::now();
    {
        let (mut s, replay, torn) = Segments::open(&dir, 1 << 20).unwrap();
        assert_eq!((replay.len(), torn), (0, 0));
        assert_eq!(s.append(&[row(1), row(2)], t0).unwrap(), vec![true, true]);
        // A second later the next append starts a new segment; the first is sealed.
        assert_eq!(s.append(&[row(3)], t0 + Duration::from_secs(1)).unwrap(), vec![true]);
        s.ack(&[row(1), row(2)]);
        assert_eq!(files(&dir), 1, "the sealed segment with every row committed is deleted");
        let stats = s.stats(t0 + Duration::from_millis(1500));
        assert_eq!((stats.oldest_secs, stats.replayed), (0.5, 0));
        assert!(stats.bytes > 0);
    } // dropped without closing: a crash
    let (s, replay, torn) = Segments::open(&dir, 1 << 20).unwrap();
    assert_eq!((replay, torn), (vec![row(3)], 0));
    assert_eq!(s.stats(Instant::now()).replayed, 1);
    let mut s = s;
    s.ack(&[row(3)]);
    drop(s);
    let (_, replay, _) = Segments::open(&dir, 1 << 20).unwrap();
    assert!(replay.is_empty(), "a replayed segment is deleted once committed");
}

#[test]
fn a_torn_last_record_is_skipped_and_the_rest_replayed() {
    let dir = temp_dir();
    {
        let (mut s, _, _) = Segments::open(&dir, 1 << 20).unwrap();
        s.append(&[row(1), row(2)], Instant::now()).unwrap();
    }
    let seg = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "spool"))
        .unwrap();
    let bytes = std::fs::read(&seg).unwrap();
    std::fs::write(&seg, &bytes[..bytes.len() - 3]).unwrap();
    let (_, replay, torn) = Segments::open(&dir, 1 << 20).unwrap();
    assert_eq!((replay, torn), (vec![row(1)], 1));
}

#[test]
fn a_full_spool_refuses_rows_and_counts_them_once_per_episode() {
    let dir = temp_dir();
    let mut one = Vec::new();
    let size = super::frame::encode(&row(1), &mut one) as u64;
    let (mut s, _, _) = Segments::open(&dir, 3 * size).unwrap();
    let t0 = Instant::now();
    assert_eq!(s.append(&[row(1), row(2), row(3), row(4)], t0).unwrap(), vec![true, true, true, false]);
    assert_eq!(s.append(&[row(5)], t0).unwrap(), vec![false]);
    let stats = s.stats(t0);
    assert_eq!((stats.bytes, stats.full_events, stats.at_risk), (3 * size, 1, 2));
    // The store catches up: the segment rotates away and rows are spooled again.
    s.ack(&[row(1), row(2), row(3)]);
    assert_eq!(s.append(&[row(6)], t0 + Duration::from_secs(1)).unwrap(), vec![true]);
    assert_eq!(s.stats(t0).bytes, size, "the committed segment is gone");
    assert_eq!(
        s.append(&[row(7), row(8), row(9)], t0 + Duration::from_secs(1)).unwrap(),
        vec![true, true, false]
    );
    assert_eq!(s.stats(t0).full_events, 2, "a second episode");
}

#[test]
fn two_routers_never_share_a_spool_directory() {
    let dir = temp_dir();
    let _first = Segments::open(&dir, 1 << 20).unwrap();
    let err = Segments::open(&dir, 1 << 20).err().expect("the second open is refused");
    assert!(err.to_string().contains("in use by another router"), "{err}");
}

#[tokio::test]
async fn rows_reach_the_store_through_the_spool_and_replay_is_idempotent() {
    let dir = temp_dir();
    let url = format!("sqlite://{}", dir.with_extension("db").display());
    let store = Store::open(&url).await.unwrap();
    let config =
        SpoolConfig { dir: dir.clone(), max_bytes: 1 << 20, fsync_interval: Duration::from_millis(20) };
    let writer = WriterConfig { flush_interval: Duration::from_millis(10), ..WriterConfig::default() };
    // A spool left by a killed router holds rows 0..3, one of which the store already has.
    {
        let (mut s, _, _) = Segments::open(&dir, 1 << 20).unwrap();
        s.append(&[row(0), row(1), row(2)], Instant::now()).unwrap();
    }
    store.insert_rows(&[row(1)]).await.unwrap();
    let (spool, replay) = Spool::open(&config).unwrap();
    assert_eq!(replay.len(), 3);
    let (sender, handle) = crate::ledger::spawn_spooled(store.clone(), writer, spool, replay);
    for i in 3..10 {
        sender.send(row(i)).unwrap();
    }
    assert_eq!(sender.spool_stats().unwrap().replayed, 3);
    drop(sender);
    handle.shutdown().await.unwrap();
    let ids: Vec<String> = store.query(0, i64::MAX).await.unwrap().into_iter().map(|r| r.id).collect();
    let want: Vec<String> = (0..10).map(|i| format!("{i:032x}")).collect();
    assert_eq!(ids, want, "every row once");
    let (_, replay) = Spool::open(&config).unwrap();
    assert_eq!(replay.len(), 0, "nothing left to replay once committed");
}

#[tokio::test]
async fn a_full_spool_never_holds_a_row_back() {
    let dir = temp_dir();
    let store = Store::open(&format!("sqlite://{}", dir.with_extension("db").display())).await.unwrap();
    let mut one = Vec::new();
    let size = super::frame::encode(&row(1), &mut one) as u64;
    let config = SpoolConfig { dir, max_bytes: 3 * size, fsync_interval: Duration::from_millis(5) };
    let (spool, replay) = Spool::open(&config).unwrap();
    let probe = spool.clone();
    let writer = WriterConfig { flush_interval: Duration::from_millis(10), ..WriterConfig::default() };
    let (sender, handle) = crate::ledger::spawn_spooled(store.clone(), writer, spool, replay);
    for i in 0..50 {
        sender.send(row(i)).unwrap();
    }
    drop(sender);
    handle.shutdown().await.unwrap();
    assert_eq!(store.query(0, i64::MAX).await.unwrap().len(), 50, "every row reached the store");
    // Three rows fill the spool; the others went on in memory, counted.
    let stats = probe.stats();
    assert!(stats.full_events >= 1 && stats.at_risk >= 1, "{stats:?}");
    assert!(stats.at_risk <= 47, "{stats:?}");
}

#[tokio::test]
async fn a_slow_fsync_never_holds_the_next_rows_back_from_the_file() {
    let dir = temp_dir();
    let store = Store::open(&format!("sqlite://{}", dir.with_extension("db").display())).await.unwrap();
    let config =
        SpoolConfig { dir: dir.clone(), max_bytes: 1 << 20, fsync_interval: Duration::from_millis(1) };
    let (spool, replay) = Spool::open(&config).unwrap();
    // Every fsync waits until the gate opens: a disk that takes its time.
    let gate = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
    let shut = gate.clone();
    let (started, mut syncs) = tokio::sync::mpsc::unbounded_channel();
    let spool = spool.with_sync(move |file| {
        let _ = started.send(());
        let (open, turned) = &*shut;
        let _open = turned.wait_while(open.lock().unwrap(), |open| !*open).unwrap();
        file.sync_data()
    });
    let writer = WriterConfig { flush_interval: Duration::from_millis(5), ..WriterConfig::default() };
    let (sender, handle) = crate::ledger::spawn_spooled(store.clone(), writer, spool, replay);
    for i in 0..3 {
        sender.send(row(i)).unwrap();
    }
    let first = tokio::time::timeout(Duration::from_secs(5), syncs.recv()).await;
    assert!(matches!(first, Ok(Some(()))), "the first fsync started");
    let deadline = Instant::now() + Duration::from_secs(5);
    for i in 3..6 {
        sender.send(row(i)).unwrap();
    }
    // While the first fsync waits, every row still reaches the file: a kill now loses none.
    let want: Vec<LedgerRow> = (0..6).map(row).collect();
    let mut on_disk = rows_on_disk(&dir);
    while on_disk != want && Instant::now() < deadline {
        tokio::task::yield_now().await;
        on_disk = rows_on_disk(&dir);
    }
    let in_store = store.query(0, i64::MAX).await.unwrap().len();
    // Open the gate before asserting, so that a failure ends the test instead of hanging it.
    *gate.0.lock().unwrap() = true;
    gate.1.notify_all();
    assert_eq!(on_disk.len(), 6, "rows on disk while the first fsync waits");
    assert_eq!(in_store, 0, "no row goes to the store before its fsync");
    drop(sender);
    handle.shutdown().await.unwrap();
    assert_eq!(store.query(0, i64::MAX).await.unwrap().len(), 6, "every row reached the store");
}
