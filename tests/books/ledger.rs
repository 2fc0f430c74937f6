//! The cost ledger against both stores: a temporary SQLite file and the real PostgreSQL
//! (`SPILLWAY_TEST_PG`, default `postgres://postgres@127.0.0.1:5432/test`, then user `root`),
//! each test run in a schema of its own. PostgreSQL is skipped, loudly, when it cannot be reached,
//! unless `SPILLWAY_REQUIRE_PG` is set.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{self, wait_until};

use rust_decimal::Decimal;
use spillway::ledger::usage::{NodeMinute, Occupancy};
use spillway::ledger::{self, LedgerRecord, LedgerRow, Outcome, Store, WriterConfig};
use spillway::sim::SimKind;
use sqlx::{AssertSqlSafe, Connection};
use tokio::net::{TcpListener, TcpStream};

const T0: i64 = 1_700_000_000_000;

fn record(i: usize) -> LedgerRecord {
    let failed = i % 4 == 3;
    LedgerRecord {
        id: format!("{:032x}", i),
        at_ms: T0 + i as i64,
        task: format!("task-{}", i % 3),
        client_key: i.is_multiple_of(2).then(|| "TEAM_A_KEY".to_string()),
        team: i.is_multiple_of(4).then(|| "search".to_string()),
        priority: None,
        affinity_hash: i.is_multiple_of(3).then(|| format!("{i:016x}")),
        backend: if failed { String::new() } else { "fleet".into() },
        model: if failed { String::new() } else { "llama-3.1-8b".into() },
        node: if i.is_multiple_of(5) { String::new() } else { format!("node-{}", i % 7) },
        attempts: (i % 3) as i64 + 1,
        outcome: if failed { Outcome::Failed } else { Outcome::Completed },
        error_class: failed.then(|| "overloaded".to_string()),
        input_tokens: 1_000 + i as i64,
        cached_input_tokens: 500,
        cache_write_tokens: (i % 5) as i64 * 100,
        output_tokens: 3_000_000_000 + i as i64, // above i32::MAX: the columns are 64-bit
        ttft_ms: (!failed).then_some(80 + (i % 50) as i64),
        duration_ms: 900 + i as i64,
        cost_usd: match i % 4 {
            0 => Some("0.000000000000000001".parse().unwrap()),
            1 => Some("123456789.123456789012".parse().unwrap()),
            2 => Some(Decimal::new(150, 2)), // "1.50": the scale survives
            _ => None,
        },
    }
}

fn records(range: std::ops::Range<usize>) -> Vec<LedgerRecord> {
    range.map(record).collect()
}

async fn all(store: &Store) -> Vec<LedgerRecord> {
    store.query(i64::MIN, i64::MAX).await.unwrap()
}

/// A TCP proxy in front of PostgreSQL that can be cut (closing live connections and refusing
/// new ones) and restored: an outage the store cannot tell from the real thing.
struct Proxy {
    addr: SocketAddr,
    up: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let up = Arc::new(AtomicBool::new(true));
        let conns = Arc::new(Mutex::new(Vec::new()));
        let (up2, conns2) = (Arc::clone(&up), Arc::clone(&conns));
        let accept = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if !up2.load(Ordering::SeqCst) {
                    continue; // dropped: connection closed at once
                }
                let task = tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                conns2.lock().unwrap().push(task.abort_handle());
            }
        });
        Proxy { addr, up, conns, accept }
    }

    fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        for c in self.conns.lock().unwrap().drain(..) {
            c.abort();
        }
    }

    fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

enum Db {
    Sqlite { path: PathBuf, lock: Option<sqlx::SqliteConnection> },
    Postgres { admin_url: String, schema: String, proxy: Proxy },
}

struct Target {
    url: String,
    db: Db,
}

impl Target {
    fn name(&self) -> &'static str {
        match self.db {
            Db::Sqlite { .. } => "sqlite",
            Db::Postgres { .. } => "postgres",
        }
    }

    /// Make every write fail (SQLite: another connection holds the write lock; PostgreSQL:
    /// the network path is cut).
    async fn break_store(&mut self) {
        match &mut self.db {
            Db::Sqlite { path, lock } => {
                let mut conn =
                    sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display())).await.unwrap();
                sqlx::raw_sql("BEGIN EXCLUSIVE").execute(&mut conn).await.unwrap();
                *lock = Some(conn);
            }
            Db::Postgres { proxy, .. } => proxy.cut(),
        }
    }

    async fn heal_store(&mut self) {
        match &mut self.db {
            Db::Sqlite { lock, .. } => {
                let mut conn = lock.take().unwrap();
                sqlx::raw_sql("ROLLBACK").execute(&mut conn).await.unwrap();
                conn.close().await.unwrap();
            }
            Db::Postgres { proxy, .. } => proxy.restore(),
        }
    }

    async fn cleanup(self) {
        match self.db {
            Db::Sqlite { path, .. } => {
                for suffix in ["", "-wal", "-shm"] {
                    let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
                }
            }
            Db::Postgres { admin_url, schema, proxy } => {
                proxy.accept.abort();
                let mut conn = sqlx::PgConnection::connect(&admin_url).await.unwrap();
                let drop = format!("DROP SCHEMA {schema} CASCADE");
                sqlx::raw_sql(AssertSqlSafe(drop)).execute(&mut conn).await.unwrap();
            }
        }
    }
}

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A fresh SQLite file and, when reachable, a fresh PostgreSQL schema.
async fn targets() -> Vec<Target> {
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    let tag = format!("{}_{n}", std::process::id());
    let path = std::env::temp_dir().join(format!("spillway_ledger_{tag}.db"));
    let mut out =
        vec![Target { url: format!("sqlite://{}", path.display()), db: Db::Sqlite { path, lock: None } }];
    let configured = std::env::var("SPILLWAY_TEST_PG").ok();
    let candidates = match &configured {
        Some(url) => vec![url.clone()],
        None => vec![
            "postgres://postgres@127.0.0.1:5432/test".to_string(),
            "postgres://root@127.0.0.1:5432/test".to_string(),
        ],
    };
    for admin_url in candidates {
        let Ok(mut conn) = sqlx::PgConnection::connect(&admin_url).await else { continue };
        let schema = format!("ledger_test_{tag}");
        let create = format!("CREATE SCHEMA {schema}");
        sqlx::raw_sql(AssertSqlSafe(create)).execute(&mut conn).await.unwrap();
        let url: url_parts::Parts = url_parts::split(&admin_url);
        let proxy = Proxy::start(url.host_port.parse().unwrap()).await;
        let store_url =
            format!("{}{}/{}?options=-c%20search_path%3D{schema}", url.scheme_user, proxy.addr, url.database);
        out.push(Target { url: store_url, db: Db::Postgres { admin_url, schema, proxy } });
        return out;
    }
    assert!(std::env::var_os("SPILLWAY_REQUIRE_PG").is_none(), "PostgreSQL is not reachable");
    eprintln!("WARNING: PostgreSQL not reachable; ledger tests ran against SQLite only");
    out
}

mod url_parts {
    /// `postgres://user@host:port/db` → (`postgres://user@`, `host:port`, `db`).
    pub struct Parts {
        pub scheme_user: String,
        pub host_port: String,
        pub database: String,
    }

    pub fn split(url: &str) -> Parts {
        let at = url.rfind('@').map_or(url.find("://").unwrap() + 3, |i| i + 1);
        let rest = &url[at..];
        let slash = rest.find('/').unwrap_or(rest.len());
        let database = rest[slash..].trim_start_matches('/');
        Parts {
            scheme_user: url[..at].to_string(),
            host_port: rest[..slash].to_string(),
            database: database.split('?').next().unwrap().to_string(),
        }
    }
}

fn quick() -> WriterConfig {
    WriterConfig {
        capacity: 1_024,
        max_batch: 500,
        flush_interval: Duration::from_millis(20),
        backoff_min: Duration::from_millis(50),
        backoff_max: Duration::from_millis(200),
        shutdown_grace: Duration::from_secs(30),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trip_keeps_exact_decimals_and_nulls() {
    for target in targets().await {
        let store = Store::open(&target.url).await.unwrap();
        let batch = records(0..1_000); // many statements in one transaction
        store.insert_batch(&batch).await.unwrap();
        assert_eq!(all(&store).await, batch, "{}", target.name());
        let window = store.query(T0 + 12, T0 + 16).await.unwrap();
        assert_eq!(window, records(12..16), "{}: [from, to)", target.name());
        assert_eq!(window[2].cost_usd.unwrap().to_string(), "1.50");
        assert_eq!(window[3].cost_usd, None);
        // Retrying a batch (after an ambiguous failure) stores nothing twice.
        store.insert_batch(&batch[..600]).await.unwrap();
        assert_eq!(all(&store).await.len(), 1_000, "{}", target.name());
        // Opening again finds the migrations applied.
        store.close().await;
        let again = Store::open(&target.url).await.unwrap();
        assert_eq!(all(&again).await.len(), 1_000);
        again.close().await;
        target.cleanup().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writer_batches_by_size_and_shutdown_flushes_the_rest() {
    for target in targets().await {
        let store = Store::open(&target.url).await.unwrap();
        let config = WriterConfig { max_batch: 10, flush_interval: Duration::from_secs(3_600), ..quick() };
        let (tx, handle) = ledger::spawn_with(store.clone(), config);
        for r in records(0..25) {
            tx.send(r).unwrap();
        }
        wait_until(Duration::from_secs(10), "two full batches", || async { all(&store).await.len() == 20 })
            .await;
        // A real sleep: time passes, and the partial batch must not be written in it.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(all(&store).await.len(), 20, "{}: the partial batch waits", target.name());
        assert_eq!(handle.buffered(), 5);
        handle.shutdown().await.unwrap();
        assert_eq!(all(&store).await, records(0..25), "{}", target.name());
        assert_eq!(tx.buffered(), 0);
        assert!(tx.send(record(99)).is_err(), "a stopped writer hands records back");
        store.close().await;
        target.cleanup().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_outage_loses_nothing() {
    for mut target in targets().await {
        let store = Store::open(&target.url).await.unwrap();
        let config = WriterConfig { capacity: 16, ..quick() };
        let (tx, handle) = ledger::spawn_with(store.clone(), config);
        target.break_store().await;
        for (i, r) in records(0..300).into_iter().enumerate() {
            tx.send(r).unwrap();
            assert_eq!(tx.buffered(), i as u64 + 1, "{}: counts up", target.name());
        }
        // Longer than SQLite's 2 s busy timeout and the pool's connect retries: writes fail.
        wait_until(Duration::from_secs(10), "a failed write", || async { handle.failed_writes() > 0 }).await;
        // A real sleep: the writer keeps retrying, and nothing may be committed meanwhile.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(handle.buffered(), 300, "{}: nothing committed while down", target.name());
        assert!(handle.overflowed() > 0, "the 16-slot channel overflowed");
        target.heal_store().await;
        wait_until(Duration::from_secs(30), "the backlog to drain", || async { handle.buffered() == 0 })
            .await;
        assert_eq!(all(&store).await, records(0..300), "{}: each record once", target.name());
        handle.shutdown().await.unwrap();
        store.close().await;
        target.cleanup().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_records_arrive_exactly_once() {
    for target in targets().await {
        let store = Store::open(&target.url).await.unwrap();
        let (tx, handle) = ledger::spawn_with(store.clone(), WriterConfig { capacity: 64, ..quick() });
        let senders: Vec<_> = (0..4)
            .map(|k| {
                let tx = tx.clone();
                tokio::spawn(async move {
                    for i in (k * 2_500)..((k + 1) * 2_500) {
                        tx.send(record(i)).unwrap();
                        if i.is_multiple_of(500) {
                            tokio::task::yield_now().await;
                        }
                    }
                })
            })
            .collect();
        for s in senders {
            s.await.unwrap();
        }
        let overflowed = handle.overflowed();
        handle.shutdown().await.unwrap();
        let stored = all(&store).await;
        let ids: BTreeSet<_> = stored.iter().map(|r| r.id.clone()).collect();
        assert_eq!((stored.len(), ids.len()), (10_000, 10_000), "{}", target.name());
        assert_eq!(stored, records(0..10_000), "{}", target.name());
        eprintln!("{}: {overflowed} records went through the overflow queue", target.name());
        store.close().await;
        target.cleanup().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_minutes_round_trip_and_replicas_merge_busy() {
    for target in targets().await {
        let store = Store::open(&target.url).await.unwrap();
        let occ = |running_seq_ms, capacity_seq_ms| Some(Occupancy { running_seq_ms, capacity_seq_ms });
        let minute = |node: &str, i: i64, busy: bool, price: Option<&str>, occupancy| NodeMinute {
            minute_ms: T0 + i * 60_000,
            backend: "pool".into(),
            node: node.into(),
            gpu_count: 8,
            gpu_hourly_usd: price.map(|p| p.parse().unwrap()),
            busy,
            occupancy,
        };
        // In the order queries return them: by minute, then node. Node b's row is as old
        // versions wrote it: no occupancy.
        let rows = vec![
            minute("a", 0, false, Some("2.125"), occ(100, 480_000)),
            minute("b", 0, false, None, None),
            minute("a", 1, true, Some("2.125"), occ(5_000_000_000, 6_000_000_000)),
        ];
        let as_rows = |m: &[NodeMinute]| m.iter().cloned().map(LedgerRow::from).collect::<Vec<_>>();
        store.insert_rows(&as_rows(&rows)).await.unwrap();
        assert_eq!(store.query_minutes(T0, T0 + 120_000).await.unwrap(), rows, "{}", target.name());
        // Another replica saw node a busy in minute 0 and idle in minute 1: busy wins both. Its
        // occupancy wins where it watched more of the minute, and fills in b's old row.
        let other = [
            minute("a", 0, true, Some("2.125"), occ(300, 960_000)),
            minute("a", 1, false, Some("2.125"), occ(0, 60_000)),
            minute("b", 0, false, None, occ(7, 70)),
        ];
        store.insert_rows(&as_rows(&other)).await.unwrap();
        store.insert_rows(&as_rows(&other)).await.unwrap(); // a retried batch changes nothing
        let merged = store.query_minutes(T0, T0 + 60_000).await.unwrap();
        assert_eq!(merged.len(), 2, "{}: one row per node-minute", target.name());
        let a = merged.iter().find(|m| m.node == "a").unwrap();
        assert!(a.busy, "{}", target.name());
        assert_eq!(a.occupancy, occ(300, 960_000), "{}: the fuller row wins", target.name());
        assert_eq!(merged.iter().find(|m| m.node == "b").unwrap().occupancy, occ(7, 70));
        let later = &store.query_minutes(T0 + 60_000, T0 + 120_000).await.unwrap()[0];
        assert!(later.busy);
        assert_eq!(later.occupancy, occ(5_000_000_000, 6_000_000_000), "{}: 64-bit columns", target.name());
        store.close().await;
        target.cleanup().await;
    }
}

/// The router with its ledger on a store that goes down: requests keep being served, a metric
/// counts the rows waiting, and once the store is back every row arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn requests_flow_while_the_store_is_down_and_every_row_arrives() {
    for mut target in targets().await {
        let node = common::sim(SimKind::Vllm, "llama", |_| {}).await;
        let yaml = format!(
            "backends: [{{name: pool, kind: vllm, endpoints: [\"{}\"], model: llama, gpu_hourly_usd: \"1.5\"}}]\n\
             tasks: [{{name: t, backends: [pool], slo: {{ttft_ms: 3000}}}}]\n\
             ledger: {{url: \"{}\"}}\n",
            node.base_url(),
            target.url
        );
        let router = common::router(&yaml, &[]).await;
        target.break_store().await;
        for _ in 0..20 {
            let (status, _, _) = common::post_json(&router.url, &common::body("t", false)).await;
            assert_eq!(status, 200, "{}: a request does not wait for the ledger", target.name());
        }
        let buffered = || async {
            let text = common::metrics_text(&router.url).await;
            common::series_sum(&text, "spillway_ledger_buffered_rows", &[]).expect("the gauge is exported")
                as u64
        };
        assert!(buffered().await >= 20, "{}: the rows wait in memory", target.name());
        target.heal_store().await;
        wait_until(Duration::from_secs(30), "the buffer to drain", || async { buffered().await == 0 }).await;
        let store = Store::open(&target.url).await.unwrap();
        let rows = all(&store).await;
        assert_eq!(rows.len(), 20, "{}: every request's row, once", target.name());
        assert!(rows.iter().all(|r| r.task == "t" && r.backend == "pool" && r.output_tokens > 0));
        store.close().await;
        drop(router);
        target.cleanup().await;
    }
}
