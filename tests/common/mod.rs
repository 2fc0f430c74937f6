//! Shared test harness: simulators and a router on loopback ports, and small client helpers.
#![allow(dead_code)]

pub mod scenario;

use std::net::SocketAddr;

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
    let mut tries = 0;
    let listener = loop {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => break l,
            Err(e) if tries < 50 => {
                tries += 1;
                let _ = e;
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            Err(e) => panic!("cannot rebind {addr}: {e}"),
        }
    };
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
pub const FAST_TELEMETRY: &str = "telemetry: {interval_ms: 100, stale_after_ms: 1500, backoff_max_ms: 300}\n";

/// A fresh SQLite ledger in the temporary directory.
pub fn temp_ledger_url() -> String {
    let path = std::env::temp_dir().join(format!("spillway-test-{:016x}.db", rand::random::<u64>()));
    format!("sqlite://{}", path.display())
}

/// Start a router from YAML (`listen` is ignored: it binds a free port), with fast telemetry
/// unless the YAML sets its own, and wait until every local node has been scraped.
pub async fn router(yaml: &str, env: &[(&str, &str)]) -> Router {
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
    let handle = spillway::app::start(config, secrets, listener, std::future::pending()).await.unwrap();
    let router = Router { url: format!("http://{}", handle.addr), handle };
    router.wait_fresh().await;
    router
}

impl Router {
    /// Wait (up to 5 s) until every local node has fresh telemetry.
    pub async fn wait_fresh(&self) {
        let client = reqwest::Client::new();
        for _ in 0..100 {
            let ready: serde_json::Value =
                client.get(format!("{}/readyz", self.url)).send().await.unwrap().json().await.unwrap();
            if ready["fresh_local_nodes"] == ready["local_nodes"] {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!("local nodes never became fresh");
    }
}

/// One sample of a Prometheus counter or gauge from the router's `/metrics` (0 when absent);
/// `series` is the name with its labels, as the exposition writes them.
pub async fn metric(router: &Router, series: &str) -> f64 {
    let text = reqwest::get(format!("{}/metrics", router.url)).await.unwrap().text().await.unwrap();
    text.lines().find_map(|l| l.strip_prefix(series).and_then(|rest| rest.trim().parse().ok())).unwrap_or(0.0)
}

/// Wait (up to `within`) until the series reaches `at_least`; its last value.
pub async fn wait_metric(router: &Router, series: &str, at_least: f64, within: std::time::Duration) -> f64 {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let value = metric(router, series).await;
        if value >= at_least || tokio::time::Instant::now() > deadline {
            return value;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
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
    for _ in 0..400 {
        if let Some(url) = stderr.url() {
            if let Ok(resp) = client.get(format!("{url}/readyz")).send().await {
                let ready: serde_json::Value = resp.json().await.unwrap_or_default();
                if ready["fresh_local_nodes"] == ready["local_nodes"] {
                    return (child, url, stderr);
                }
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("spillway serve did not become ready:\n{}", stderr.into_text());
}

/// The `/metrics` text of the router at `url`.
pub async fn metrics_text(url: &str) -> String {
    reqwest::get(format!("{url}/metrics")).await.unwrap().text().await.unwrap()
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
