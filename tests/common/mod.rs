//! Shared test harness: simulators and a router on loopback ports, and small client helpers.
#![allow(dead_code)]

pub mod balancer;
pub mod llama;
pub mod scenario;

use std::fmt::Display;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::StreamExt;
use spillway::sim::{self, SimArgs, SimHandle, SimKind};

/// Start a simulator of `kind`, adjusted by `tune`.
pub async fn sim(kind: SimKind, model: &str, tune: impl FnOnce(&mut SimArgs)) -> SimHandle {
    let mut args = SimArgs::for_kind(kind, model);
    tune(&mut args);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    sim::spawn(args, listener).await.unwrap()
}

/// Start a simulator on a given address (to bring a node back on the same port).
pub async fn sim_at(
    addr: SocketAddr,
    kind: SimKind,
    model: &str,
    tune: impl FnOnce(&mut SimArgs),
) -> SimHandle {
    let mut args = SimArgs::for_kind(kind, model);
    tune(&mut args);
    // The old listener's port is free once its task has let go of it.
    let listener = wait_until(Duration::from_secs(1), format!("{addr} to be free to bind"), || {
        tokio::net::TcpListener::bind(addr)
    })
    .await;
    sim::spawn(args, listener).await.unwrap()
}

/// A running router and its base URL.
pub struct Router {
    pub url: String,
    pub handle: spillway::api::RouterHandle,
}

impl Drop for Router {
    fn drop(&mut self) {
        self.handle.task.abort();
    }
}

/// Telemetry settings for tests: scrape often, go stale fast, back off little.
/// Tests that measure latency (the fleet scenarios) and tests that fill both cores (real
/// engines under load) run one at a time: one's load is not the other's latency.
pub static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub const FAST_TELEMETRY: &str = "telemetry: {interval_ms: 100, stale_after_ms: 1500, backoff_max_ms: 300}\n";

/// A fresh SQLite ledger in the temporary directory.
pub fn temp_ledger_url() -> String {
    let path = std::env::temp_dir().join(format!("spillway-test-{:016x}.db", rand::random::<u64>()));
    format!("sqlite://{}", path.display())
}

/// Start a router from YAML (`listen` is ignored: it binds a free port), with fast telemetry
/// unless the YAML sets its own, and wait until every local node has been scraped.
pub async fn router(yaml: &str, env: &[(&str, &str)]) -> Router {
    router_with(yaml, env, spillway::app::Options::default()).await
}

/// [`router`], built with `options` (a quota clock the test moves).
pub async fn router_with(yaml: &str, env: &[(&str, &str)], options: spillway::app::Options) -> Router {
    let router = router_unscraped(yaml, env, options).await;
    router.wait_fresh().await;
    router
}

/// [`router_with`], without waiting for any scrape (a node whose telemetry cannot be read).
pub async fn router_unscraped(yaml: &str, env: &[(&str, &str)], options: spillway::app::Options) -> Router {
    router_until(yaml, env, options, std::future::pending()).await
}

/// [`router_unscraped`] that stops gracefully (flushing the ledger and GPU minutes) when
/// `shutdown` completes; await `handle.task` to see it end.
pub async fn router_until(
    yaml: &str,
    env: &[(&str, &str)],
    options: spillway::app::Options,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Router {
    let mut yaml =
        if yaml.contains("telemetry:") { yaml.to_string() } else { format!("{yaml}\n{FAST_TELEMETRY}") };
    if !yaml.contains("ledger:") {
        yaml.push_str(&format!("\nledger: {{url: \"{}\"}}\n", temp_ledger_url()));
    }
    let config = spillway::config::parse(&yaml).unwrap_or_else(|p| panic!("test config invalid: {p:#?}"));
    let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let secrets = spillway::config::secrets::read_secrets(&config, |name| {
        env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    })
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let handle = spillway::app::start_with(config, secrets, listener, shutdown, options).await.unwrap();
    Router { url: format!("http://{}", handle.addr), handle }
}

/// A fresh PostgreSQL schema (named `{prefix}_<random>`) on the machine's server
/// (`SPILLWAY_TEST_PG`, default `postgres://postgres@127.0.0.1:5432/test`) as a store URL, or
/// `None` when it is not reachable (an error under `SPILLWAY_REQUIRE_PG`).
pub async fn pg_store_url(prefix: &str) -> Option<String> {
    use sqlx::Connection;
    let admin = std::env::var("SPILLWAY_TEST_PG")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let Ok(mut conn) = sqlx::PgConnection::connect(&admin).await else {
        assert!(std::env::var_os("SPILLWAY_REQUIRE_PG").is_none(), "PostgreSQL is not reachable at {admin}");
        eprintln!("WARNING: PostgreSQL not reachable; {prefix} ran without it");
        return None;
    };
    let schema = format!("{prefix}_{:016x}", rand::random::<u64>());
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}"))).execute(&mut conn).await.unwrap();
    Some(format!("{admin}?options=-c%20search_path%3D{schema}"))
}

impl Router {
    /// Wait (up to 5 s) until every local node has fresh telemetry.
    pub async fn wait_fresh(&self) {
        wait_fresh(&self.url, Duration::from_secs(5)).await;
    }
}

/// A router is named by its base URL: a [`Router`], or the URL of one started otherwise.
impl AsRef<str> for Router {
    fn as_ref(&self) -> &str {
        &self.url
    }
}

// ---- Waiting on facts ----
//
// A test that needs a background loop to have done something (the snapshot loop to publish,
// the ledger writer to flush, a scrape, a canary round, a breaker to open) waits for what that
// loop makes visible, never for a fixed time. The polling lives here, in `poll_until`.

/// What one poll of [`wait_until`] answers: the fact holds (`true`, `Some(value)`,
/// `Ok(value)`) or not yet (`false`, `None`, `Err(what is seen instead)`).
pub trait Fact {
    type Value;
    fn holds(self) -> Result<Self::Value, String>;
}

impl Fact for bool {
    type Value = ();
    fn holds(self) -> Result<(), String> {
        if self {
            Ok(())
        } else {
            Err("false".into())
        }
    }
}

impl<T> Fact for Option<T> {
    type Value = T;
    fn holds(self) -> Result<T, String> {
        self.ok_or_else(|| "nothing yet".into())
    }
}

impl<T, E: Display> Fact for Result<T, E> {
    type Value = T;
    fn holds(self) -> Result<T, String> {
        self.map_err(|e| e.to_string())
    }
}

/// Poll `check` until its fact holds, for at most `within`: the fact's value, or what the
/// last poll saw. Polls start 5 ms apart and back off to 25 ms (a fact is seen soon after it
/// holds: some tests race the router's own next step). The suite's one polling loop.
pub async fn poll_until<F, Fut>(within: Duration, mut check: impl FnMut() -> Fut) -> Result<F::Value, String>
where
    F: Fact,
    Fut: Future<Output = F>,
{
    let deadline = tokio::time::Instant::now() + within;
    let mut pause = Duration::from_millis(5);
    loop {
        match check().await.holds() {
            Ok(value) => return Ok(value),
            Err(seen) if tokio::time::Instant::now() >= deadline => return Err(seen),
            Err(_) => {}
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(25));
    }
}

/// [`poll_until`], failing the test with `what` and the last thing seen when time runs out.
pub async fn wait_until<F, Fut>(within: Duration, what: impl Display, check: impl FnMut() -> Fut) -> F::Value
where
    F: Fact,
    Fut: Future<Output = F>,
{
    match poll_until(within, check).await {
        Ok(value) => value,
        Err(seen) => panic!("timed out after {within:?} waiting for {what}; last seen: {seen}"),
    }
}

/// [`wait_until`] from a test that is not async (one that drives a child process): polled on
/// a runtime of its own. A check with nothing to await polls `std::future::ready(fact)`.
pub fn block_until<F, Fut>(within: Duration, what: impl Display, check: impl FnMut() -> Fut) -> F::Value
where
    F: Fact,
    Fut: Future<Output = F>,
{
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(wait_until(within, what, check))
}

/// `GET {base}{path}` as JSON.
pub async fn get_json(base: impl AsRef<str>, path: &str) -> serde_json::Value {
    let url = format!("{}{path}", base.as_ref());
    reqwest::get(&url).await.unwrap_or_else(|e| panic!("GET {url}: {e}")).json().await.unwrap()
}

/// `GET {base}{path}` as JSON with the admin bearer `token`.
pub async fn admin_json(base: impl AsRef<str>, path: &str, token: &str) -> serde_json::Value {
    let url = format!("{}{path}", base.as_ref());
    let response = reqwest::Client::new().get(&url).bearer_auth(token).send().await;
    response.unwrap_or_else(|e| panic!("GET {url}: {e}")).json().await.unwrap()
}

/// `POST {path}` with the admin token `token` as operator `who` (the audit's name), expecting 200.
pub async fn admin_post(
    base: impl AsRef<str>,
    path: &str,
    token: &str,
    who: &str,
    body: serde_json::Value,
) -> serde_json::Value {
    let resp = reqwest::Client::new()
        .post(format!("{}{path}", base.as_ref()))
        .bearer_auth(token)
        .header("x-spillway-operator", who)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{path}");
    resp.json().await.unwrap()
}

/// Wait until every local node of the router at `base` has fresh telemetry (`/readyz`).
pub async fn wait_fresh(base: impl AsRef<str>, within: Duration) {
    let base = base.as_ref();
    wait_until(within, "every local node to have fresh telemetry", || async move {
        let ready = get_json(base, "/readyz").await;
        if ready["fresh_local_nodes"] == ready["local_nodes"] {
            Ok(())
        } else {
            Err(ready)
        }
    })
    .await
}

/// The version of the snapshot the router at `base` serves from (`/readyz`).
pub async fn snapshot_version(base: impl AsRef<str>) -> u64 {
    get_json(base, "/readyz").await["snapshot_version"].as_u64().expect("/readyz has snapshot_version")
}

/// Wait until the snapshot loop has published a snapshot built wholly after this call, so
/// that whatever changed before it (a hold, a forced breaker, a reload, a gate result) is in
/// the snapshot planning reads. The version seen now may have been built before the change
/// and the next may have been under way during it: the one after that was not.
pub async fn next_snapshot(base: impl AsRef<str>) {
    let base = base.as_ref();
    let seen = snapshot_version(base).await;
    wait_until(Duration::from_secs(5), format!("a snapshot after version {seen} + 1"), || async move {
        let now = snapshot_version(base).await;
        if now >= seen + 2 {
            Ok(())
        } else {
            Err(format!("version {now}"))
        }
    })
    .await
}

/// Requests a simulated vLLM node at `base_url` has finished (`vllm:request_success_total`
/// on its own `/metrics`).
pub async fn node_completed(base_url: &str) -> f64 {
    let text = reqwest::get(format!("{base_url}/metrics")).await.unwrap().text().await.unwrap();
    text.lines()
        .filter(|l| l.starts_with("vllm:request_success_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The router's `/metrics` exposition.
pub async fn metrics_text(base: impl AsRef<str>) -> String {
    reqwest::get(format!("{}/metrics", base.as_ref())).await.unwrap().text().await.unwrap()
}

/// The sum of the samples of `family` whose labels include every pair of `labels`; `None` when
/// no series matches.
pub fn series_sum(text: &str, family: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut sum = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else { continue };
        let (name, rest) = series.split_once('{').unwrap_or((series, "}"));
        if name != family {
            continue;
        }
        let have: Vec<(&str, &str)> = rest
            .trim_end_matches('}')
            .split(',')
            .filter_map(|pair| pair.split_once('='))
            .map(|(k, v)| (k, v.trim_matches('"')))
            .collect();
        if labels.iter().all(|want| have.contains(want)) {
            *sum.get_or_insert(0.0) += value.parse::<f64>().unwrap_or(f64::NAN);
        }
    }
    sum
}

/// Prometheus's own linter, `promtool check metrics`, accepts the exposition `text`.
pub fn promtool_check(text: &str) {
    use std::io::Write;
    let mut promtool = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus; .ci/run installs it)");
    promtool.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = promtool.wait_with_output().unwrap();
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool check metrics:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One sample of a Prometheus counter or gauge from the router's `/metrics` (0 when absent);
/// `series` is the name with its labels, as the exposition writes them.
pub async fn metric(base: impl AsRef<str>, series: &str) -> f64 {
    let text = metrics_text(base).await;
    text.lines().find_map(|l| l.strip_prefix(series).and_then(|rest| rest.trim().parse().ok())).unwrap_or(0.0)
}

/// Wait (up to `within`) until the series reaches `at_least`; its last value.
pub async fn wait_metric(base: impl AsRef<str>, series: &str, at_least: f64, within: Duration) -> f64 {
    let base = base.as_ref();
    let last = std::sync::Mutex::new(0.0);
    // The caller asserts on the value, so running out of time is not a failure here.
    let _ = poll_until(within, || {
        let last = &last;
        async move {
            let value = metric(base, series).await;
            *last.lock().unwrap() = value;
            value >= at_least
        }
    })
    .await;
    last.into_inner().unwrap()
}

/// Wait until the router's ledger writer has nothing left to write
/// (`spillway_ledger_buffered_rows` is 0).
pub async fn wait_ledger_written(base: impl AsRef<str>) {
    let base = base.as_ref();
    wait_until(Duration::from_secs(10), "the ledger writer to write every row", || async move {
        let buffered = metric(base, "spillway_ledger_buffered_rows").await;
        if buffered == 0.0 {
            Ok(())
        } else {
            Err(format!("{buffered} rows buffered"))
        }
    })
    .await
}

pub fn body(model: &str, stream: bool) -> serde_json::Value {
    serde_json::json!({
        "model": model,
        "stream": stream,
        "max_tokens": 12,
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}],
    })
}

/// A streamed response read to its end: the data lines in order.
pub struct Streamed {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub data: Vec<String>,
}

impl Streamed {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The text of every content delta, joined.
    pub fn text(&self) -> String {
        self.chunks()
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["content"].as_str().map(str::to_string))
            .collect()
    }

    pub fn chunks(&self) -> Vec<serde_json::Value> {
        self.data.iter().filter(|d| *d != "[DONE]").filter_map(|d| serde_json::from_str(d).ok()).collect()
    }

    pub fn done(&self) -> bool {
        self.data.last().is_some_and(|d| d == "[DONE]")
    }
}

pub async fn post_stream(url: &str, body: &serde_json::Value) -> Streamed {
    let resp =
        reqwest::Client::new().post(format!("{url}/v1/chat/completions")).json(body).send().await.unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let mut data = Vec::new();
    if status == 200 {
        let mut events = resp.bytes_stream().eventsource();
        while let Some(Ok(event)) = events.next().await {
            data.push(event.data);
        }
    } else {
        data.push(resp.text().await.unwrap());
    }
    Streamed { status, headers, data }
}

pub async fn post_json(
    url: &str,
    body: &serde_json::Value,
) -> (u16, reqwest::header::HeaderMap, serde_json::Value) {
    let resp =
        reqwest::Client::new().post(format!("{url}/v1/chat/completions")).json(body).send().await.unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let json = resp.json().await.unwrap_or(serde_json::Value::Null);
    (status, headers, json)
}

/// One pipe of a child process, read to its end by a thread: the text so far, and the address
/// the child says it listens on (its `... listening on http://ADDR` line), so children bind
/// port 0 and no test hands them a port found by bind-and-drop.
pub struct Output {
    /// The text so far, and a signal for each line added.
    text: std::sync::Arc<(std::sync::Mutex<String>, std::sync::Condvar)>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Output {
    pub fn collect(pipe: impl std::io::Read + Send + 'static) -> Output {
        use std::io::BufRead;
        let text = std::sync::Arc::new((std::sync::Mutex::new(String::new()), std::sync::Condvar::new()));
        let sink = std::sync::Arc::clone(&text);
        let reader = std::thread::spawn(move || {
            for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
                let mut text = sink.0.lock().unwrap();
                text.push_str(&line);
                text.push('\n');
                sink.1.notify_all();
            }
        });
        Output { text, reader: Some(reader) }
    }

    /// The URL of the first `listening on http://…` line, once there is one.
    pub fn url(&self) -> Option<String> {
        listening_url(&self.text.0.lock().unwrap())
    }

    /// Block (up to 20 s) until the child has said where it listens.
    pub fn wait_url(&self) -> String {
        let (text, added) = &*self.text;
        let (text, _) = added
            .wait_timeout_while(text.lock().unwrap(), std::time::Duration::from_secs(20), |t| {
                listening_url(t).is_none()
            })
            .unwrap();
        listening_url(&text).unwrap_or_else(|| panic!("the child never said where it listens:\n{text}"))
    }

    /// The text so far.
    pub fn so_far(&self) -> String {
        self.text.0.lock().unwrap().clone()
    }

    /// Everything the pipe carried, once the child has closed it.
    pub fn into_text(mut self) -> String {
        if let Some(reader) = self.reader.take() {
            reader.join().unwrap();
        }
        self.text.0.lock().unwrap().clone()
    }
}

/// The URL in the first `listening on http://…` line of `text`.
fn listening_url(text: &str) -> Option<String> {
    let at = text.find("listening on http://")? + "listening on ".len();
    Some(text[at..].chars().take_while(|c| !c.is_whitespace() && *c != '"').collect())
}

/// A child process that is killed when the test ends, also when it fails.
pub struct Child(pub std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `spillway serve --config PATH` as a child process with `env` (the config listens on port
/// 0): the child, its URL and its stderr (JSON logs), once it answers `/readyz` with every
/// local node scraped.
pub async fn serve_process(
    path: &std::path::Path,
    env: &[(&str, &str)],
) -> (std::process::Child, String, Output) {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_spillway"));
    command
        .args(["serve", "--config"])
        .arg(path)
        .env_remove("SPILLWAY_LOG_FORMAT")
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null());
    for (k, v) in env {
        command.env(k, v);
    }
    let mut child = command.spawn().unwrap();
    let stderr = Output::collect(child.stderr.take().unwrap());
    let client = reqwest::Client::new();
    let ready = poll_until(Duration::from_secs(10), || {
        let (client, url) = (client.clone(), stderr.url());
        async move {
            let url = url.ok_or("no listen line yet")?;
            let resp = client.get(format!("{url}/readyz")).send().await.map_err(|e| e.to_string())?;
            let ready: serde_json::Value = resp.json().await.unwrap_or_default();
            if ready["fresh_local_nodes"] == ready["local_nodes"] {
                Ok(url)
            } else {
                Err(ready.to_string())
            }
        }
    })
    .await;
    match ready {
        Ok(url) => (child, url, stderr),
        Err(seen) => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("spillway serve did not become ready ({seen}):\n{}", stderr.into_text());
        }
    }
}

/// A TCP proxy in front of the machine's Redis (127.0.0.1:6379) that a test can cut (Redis goes
/// away for whoever connects through it) and start again on the same port.
pub struct RedisProxy {
    pub port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl RedisProxy {
    /// Listen on `port` (0: any free one).
    pub async fn start(port: u16) -> RedisProxy {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            loop {
                let Ok((mut client, _)) = listener.accept().await else { return };
                conns.spawn(async move {
                    if let Ok(mut upstream) = tokio::net::TcpStream::connect("127.0.0.1:6379").await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                    }
                });
            }
        });
        RedisProxy { port, task }
    }

    /// Close the listener and every proxied connection (the JoinSet aborts them on drop).
    pub async fn cut(self) -> u16 {
        self.task.abort();
        let _ = self.task.await;
        self.port
    }
}
