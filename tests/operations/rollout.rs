//! A rolling restart costs no request: two `spillway serve` replicas behind a loopback
//! balancer that, like a Kubernetes Service with a readiness probe, sends new connections only
//! to replicas whose `/readyz` answered 200 at its last check (every 100 ms) and never retries a
//! refused connection. One replica gets SIGTERM under steady traffic: it answers `/readyz` 503
//! at once, serves on through its shutdown delay, drains and exits 0, and no client request
//! fails. The other then shows that a second SIGTERM skips the delay.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common;

use common::*;
use spillway::sim::SimKind;
use tokio::net::{TcpListener, TcpStream};

const PROVIDER_KEY: &str = "sk-rollout-provider";
const DELAY_MS: u64 = 2_000;

/// A round-robin TCP balancer over the backends last seen ready.
struct Balancer {
    addr: SocketAddr,
    ready: Arc<Mutex<Vec<bool>>>,
    /// Connections handed to each backend.
    handed: Arc<Vec<AtomicUsize>>,
}

impl Balancer {
    async fn start(backends: Vec<SocketAddr>) -> Balancer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let ready = Arc::new(Mutex::new(vec![false; backends.len()]));
        let handed: Arc<Vec<AtomicUsize>> = Arc::new(backends.iter().map(|_| AtomicUsize::new(0)).collect());
        let probe = reqwest::Client::builder().timeout(Duration::from_millis(500)).build().unwrap();
        let (probed, seen) = (backends.clone(), Arc::clone(&ready));
        tokio::spawn(async move {
            loop {
                for (i, backend) in probed.iter().enumerate() {
                    let answer = probe.get(format!("http://{backend}/readyz")).send().await;
                    seen.lock().unwrap()[i] = answer.is_ok_and(|r| r.status() == 200);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        let (pool, counts) = (Arc::clone(&ready), Arc::clone(&handed));
        tokio::spawn(async move {
            let mut next = 0usize;
            loop {
                let Ok((mut client, _)) = listener.accept().await else { continue };
                let pick = {
                    let ready = pool.lock().unwrap();
                    (0..backends.len()).map(|k| (next + k) % backends.len()).find(|&i| ready[i])
                };
                // No ready backend: the connection is dropped, as a Service with no endpoints would.
                let Some(i) = pick else { continue };
                next = i + 1;
                counts[i].fetch_add(1, Ordering::Relaxed);
                let backend = backends[i];
                tokio::spawn(async move {
                    // A refused connection is not retried elsewhere: the client sees it fail.
                    if let Ok(mut upstream) = TcpStream::connect(backend).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                    }
                });
            }
        });
        Balancer { addr, ready, handed }
    }

    fn all_ready(&self) -> Result<(), String> {
        let ready = self.ready.lock().unwrap().clone();
        if ready.iter().all(|r| *r) {
            Ok(())
        } else {
            Err(format!("{ready:?}"))
        }
    }
}

/// What the clients saw.
#[derive(Default)]
struct Tally {
    ok: AtomicUsize,
    /// Answered chat requests (streamed or not): one ledger row each.
    chats: AtomicUsize,
    failed: Mutex<Vec<String>>,
}

/// What a client sends, again and again.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Ask {
    Chat,
    Stream,
    /// `GET /v1/models`: answered at once, so a client on new connections opens many.
    Models,
}

/// One client loop until `stop`, on a pooled client (keep-alive) or one that opens a new
/// connection for every request.
fn client(
    url: String,
    ask: Ask,
    keep_alive: bool,
    stop: Arc<AtomicBool>,
    tally: Arc<Tally>,
) -> tokio::task::JoinHandle<()> {
    let mut builder = reqwest::Client::builder().timeout(Duration::from_secs(10));
    if !keep_alive {
        builder = builder.pool_max_idle_per_host(0);
    }
    let http = builder.build().unwrap();
    tokio::spawn(async move {
        while !stop.load(Ordering::Relaxed) {
            let sent = match ask {
                Ask::Models => http.get(format!("{url}/v1/models")).send().await,
                Ask::Chat | Ask::Stream => {
                    let body = body("chat", ask == Ask::Stream);
                    http.post(format!("{url}/v1/chat/completions")).json(&body).send().await
                }
            };
            let outcome = match sent {
                Err(e) => Err(format!("send: {e:?}")),
                Ok(resp) if resp.status() != 200 => Err(format!("status {}", resp.status())),
                Ok(resp) => match (ask, resp.text().await) {
                    (_, Err(e)) => Err(format!("body: {e:?}")),
                    (Ask::Stream, Ok(text)) if !text.contains("data: [DONE]") => {
                        Err(format!("stream cut: {text}"))
                    }
                    (Ask::Chat, Ok(text)) if !text.contains("\"choices\"") => {
                        Err(format!("no answer: {text}"))
                    }
                    (Ask::Models, Ok(text)) if !text.contains("\"chat\"") => {
                        Err(format!("no models: {text}"))
                    }
                    _ => Ok(()),
                },
            };
            match outcome {
                Ok(()) => {
                    tally.ok.fetch_add(1, Ordering::Relaxed);
                    if ask != Ask::Models {
                        tally.chats.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Err(e) => tally.failed.lock().unwrap().push(format!("{ask:?} keep_alive={keep_alive}: {e}")),
            }
        }
    })
}

fn write_config(dir: &Path, name: &str, hosted: &str) -> (PathBuf, String) {
    let path = dir.join(format!("{name}.yaml"));
    let ledger = format!("sqlite://{}", dir.join(format!("{name}.db")).display());
    let yaml = format!(
        r#"listen: 127.0.0.1:0
backends:
  - {{name: hosted, kind: openai, base_url: "{hosted}/v1", model: gpt, api_key_env: ROLLOUT_PROVIDER_KEY}}
tasks:
  - {{name: chat, backends: [hosted], slo: {{ttft_ms: 3000}}}}
limits: {{shutdown_delay_ms: {DELAY_MS}, drain_timeout_ms: 5000}}
ledger: {{url: "{ledger}"}}
"#
    );
    std::fs::write(&path, yaml).unwrap();
    (path, ledger)
}

fn addr_of(url: &str) -> SocketAddr {
    url.strip_prefix("http://").unwrap().parse().unwrap()
}

fn sigterm(child: &std::process::Child) {
    // SAFETY: kill(2) on our own child's pid.
    let rc = unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert_eq!(rc, 0, "kill SIGTERM");
}

/// Wait until `/readyz` on `url` answers 503 saying it is draining.
async fn wait_draining(url: &str) {
    let http = reqwest::Client::new();
    wait_until(Duration::from_millis(DELAY_MS), format!("{url}/readyz to answer 503"), || {
        let http = http.clone();
        async move {
            let resp = http.get(format!("{url}/readyz")).send().await.map_err(|e| e.to_string())?;
            let status = resp.status();
            let body: serde_json::Value = resp.json().await.unwrap_or_default();
            if status == 503 && body["status"] == "draining" {
                Ok(())
            } else {
                Err(format!("{status} {body}"))
            }
        }
    })
    .await
}

/// Wait (up to 20 s) for `child` to exit: its status and when.
async fn wait_exit(child: &mut std::process::Child) -> (std::process::ExitStatus, Instant) {
    wait_until(Duration::from_secs(20), "the replica to exit", || {
        let status = child.try_wait().unwrap();
        async move { status.map(|s| (s, Instant::now())) }
    })
    .await
}

async fn wait_more_ok(tally: &Tally, more: usize, what: &str) {
    let from = tally.ok.load(Ordering::Relaxed);
    wait_until(Duration::from_secs(20), what, || async {
        let now = tally.ok.load(Ordering::Relaxed);
        (now >= from + more).then_some(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_terminated_under_traffic_costs_no_request() {
    let hosted = sim(SimKind::OpenAi, "gpt", |a| a.api_key = Some(PROVIDER_KEY.into())).await;
    let dir = std::env::temp_dir().join(format!("spillway-rollout-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    let env = [("ROLLOUT_PROVIDER_KEY", PROVIDER_KEY)];
    let (path_a, ledger_a) = write_config(&dir, "a", &hosted.base_url());
    let (path_b, ledger_b) = write_config(&dir, "b", &hosted.base_url());
    let (mut a, url_a, _stderr_a) = serve_process(&path_a, &env).await;
    let (mut b, url_b, stderr_b) = serve_process(&path_b, &env).await;
    let balancer = Balancer::start(vec![addr_of(&url_a), addr_of(&url_b)]).await;
    wait_until(Duration::from_secs(5), "the balancer to see both replicas ready", || async {
        balancer.all_ready()
    })
    .await;

    let url = format!("http://{}", balancer.addr);
    let (stop, tally) = (Arc::new(AtomicBool::new(false)), Arc::new(Tally::default()));
    let mix = [
        (Ask::Chat, true),
        (Ask::Chat, false),
        (Ask::Stream, true),
        (Ask::Stream, false),
        (Ask::Models, true),
        (Ask::Models, false),
        (Ask::Models, false),
    ];
    let clients: Vec<_> = mix
        .into_iter()
        .map(|(ask, keep_alive)| client(url.clone(), ask, keep_alive, Arc::clone(&stop), Arc::clone(&tally)))
        .collect();
    wait_more_ok(&tally, 100, "100 requests through the balancer").await;
    assert!(balancer.handed.iter().all(|n| n.load(Ordering::Relaxed) > 0), "both replicas get traffic");

    eprintln!("SIGTERM to replica a: /readyz 503 at once, serving on for {DELAY_MS} ms");
    let terminated = Instant::now();
    sigterm(&a);
    wait_draining(&url_a).await;
    assert!(a.try_wait().unwrap().is_none(), "replica a is still up during its delay");
    let direct = post_json(&url_a, &body("chat", false)).await;
    assert_eq!(direct.0, 200, "replica a still serves new requests during its delay: {:?}", direct.2);
    assert_eq!(direct.1.get("connection").and_then(|v| v.to_str().ok()), Some("close"), "keep-alive ends");
    let (status, exited) = wait_exit(&mut a).await;
    assert!(status.success(), "replica a exited with {status:?}");
    let took = exited - terminated;
    assert!(took >= Duration::from_millis(DELAY_MS), "replica a stopped before its delay: {took:?}");
    eprintln!("replica a exited 0 after {took:?}; traffic goes on through b");
    wait_more_ok(&tally, 100, "100 more requests after replica a exited").await;
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }
    let failed = tally.failed.lock().unwrap().clone();
    assert!(
        failed.is_empty(),
        "{} failed request(s) of {}: {failed:#?}",
        failed.len(),
        tally.ok.load(Ordering::Relaxed)
    );

    eprintln!("replica b: a second SIGTERM skips the rest of the delay");
    let terminated = Instant::now();
    sigterm(&b);
    wait_draining(&url_b).await;
    sigterm(&b);
    let (status, exited) = wait_exit(&mut b).await;
    assert!(status.success(), "replica b exited with {status:?}");
    assert!(exited - terminated < Duration::from_millis(DELAY_MS), "b served its whole delay");
    let logs = stderr_b.into_text();
    assert!(logs.contains("second signal: the rest of the shutdown delay is skipped"), "{logs}");

    eprintln!("both ledgers flushed on the way out: one row per answered request");
    let mut rows = 0;
    for url in [&ledger_a, &ledger_b] {
        let store = spillway::ledger::Store::open(url).await.unwrap();
        rows += store.query(0, i64::MAX).await.unwrap().len();
        store.close().await;
    }
    // The direct request to a counts too.
    assert_eq!(rows, tally.chats.load(Ordering::Relaxed) + 1);
    std::fs::remove_dir_all(&dir).ok();
}
