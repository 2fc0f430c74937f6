//! `spillway sim --engine E`: one simulated node presenting itself as each serving engine,
//! read back through the router's own engine readers (`spillway::fleet::engines`). Each test
//! overloads a two-slot node with streamed requests, waits (on the page itself) until it runs
//! two and queues the rest, lets it drain, and checks what that engine's page has and lacks,
//! where it is served, and the engine's identity endpoint. Timings are small; no fixed sleeps.

use clap::Parser;
use serde_json::{json, Value};
use spillway::fleet::engines::{self, llamacpp::slots_from_props, Engine};
use spillway::fleet::metrics::{HistogramSample, NodeSample};
use spillway::sim::{self, SimArgs, SimHandle, SimKind};
use std::time::Duration;

const SLOTS: usize = 2;
const REQUESTS: usize = 6;
const OUTPUT: u32 = 10;
const MODEL: &str = "org/model-8b";

fn node(engine: Engine) -> SimArgs {
    let mut a = SimArgs::for_kind(SimKind::Vllm, MODEL);
    a.engine = engine;
    a.max_num_seqs = SLOTS;
    a.output_tokens = OUTPUT;
    a.itl_base_ms = 10.0;
    a.itl_per_seq_ms = 0.2;
    a.prefill_us_per_token = 10.0;
    a
}

async fn start(args: SimArgs) -> SimHandle {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    sim::spawn(args, listener).await.unwrap()
}

async fn get(c: &reqwest::Client, url: String) -> (u16, String) {
    let r = c.get(url).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// The node's Prometheus page, from where its engine serves it.
async fn page(c: &reqwest::Client, s: &SimHandle) -> String {
    let (status, text) = get(c, s.metrics_url()).await;
    assert_eq!(status, 200, "{}", s.metrics_url());
    text
}

fn read(engine: Engine, page: &str) -> NodeSample {
    engines::read(engine, page).unwrap_or_else(|e| panic!("{engine} page unreadable ({e:?}):\n{page}"))
}

fn count(h: &Option<HistogramSample>) -> Option<f64> {
    h.as_ref().and_then(|h| h.count)
}

/// Stream one chat completion to its end.
async fn stream_one(c: reqwest::Client, url: String, i: usize) {
    let prompt = format!("request {i} {}", "x".repeat(200));
    let body = json!({"model": MODEL, "messages": [{"role": "user", "content": prompt}], "stream": true});
    let resp = c.post(url).json(&body).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.unwrap();
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
}

/// Overload a node of `engine` with more streams than slots, then let it drain: the node, and
/// its page as read while it queued and once idle with every request counted.
async fn overload_and_drain(engine: Engine) -> (SimHandle, NodeSample, NodeSample) {
    let s = start(node(engine)).await;
    let c = reqwest::Client::new();
    let url = format!("{}/v1/chat/completions", s.base_url());
    let streams: Vec<_> =
        (0..REQUESTS).map(|i| tokio::spawn(stream_one(c.clone(), url.clone(), i))).collect();
    let within = Duration::from_secs(5);
    let loaded =
        crate::common::wait_until(within, format!("{engine}: {SLOTS} running, rest waiting"), || async {
            let p = page(&c, &s).await;
            assert_eq!(engines::detect(&p), Some(engine), "{p}");
            let n = read(engine, &p);
            let queued = n.waiting.is_some_and(|w| w >= 2.0);
            if n.running == Some(SLOTS as f64) && queued {
                Ok(n)
            } else {
                Err(format!("{n:?}"))
            }
        })
        .await;
    for t in streams {
        t.await.unwrap();
    }
    let all = (REQUESTS as u32 * OUTPUT) as f64;
    let drained = crate::common::wait_until(within, format!("{engine}: drained and counted"), || async {
        let n = read(engine, &page(&c, &s).await);
        if (n.running, n.waiting, n.generation_tokens) == (Some(0.0), Some(0.0), Some(all)) {
            Ok(n)
        } else {
            Err(format!("{n:?}"))
        }
    })
    .await;
    assert!(drained.prompt_tokens.is_some_and(|p| p > 0.0), "{drained:?}");
    (s, loaded, drained)
}

/// Status of `GET {base}{path}` for each path.
async fn statuses(s: &SimHandle, paths: &[&str]) -> Vec<u16> {
    let c = reqwest::Client::new();
    let mut out = Vec::new();
    for p in paths {
        out.push(get(&c, format!("{}{p}", s.base_url())).await.0);
    }
    out
}

const N: Option<f64> = Some(REQUESTS as f64);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn as_vllm_the_page_follows_the_load() {
    let (s, loaded, done) = overload_and_drain(Engine::Vllm).await;
    assert!(loaded.kv_cache_usage.is_some_and(|k| k > 0.0), "{loaded:?}");
    assert_eq!(loaded.model_names, vec![MODEL.to_string()]);
    assert_eq!((count(&done.ttft), count(&done.e2e), count(&done.queue_time)), (N, N, N));
    assert_eq!(count(&done.itl), Some((REQUESTS as u32 * (OUTPUT - 1)) as f64));
    assert_eq!(done.request_success, N);
    assert_eq!(statuses(&s, &["/version", "/props", "/info"]).await, [200, 404, 404]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn as_sglang_the_page_follows_the_load() {
    let (s, loaded, done) = overload_and_drain(Engine::Sglang).await;
    assert!(loaded.kv_cache_usage.is_some_and(|k| k > 0.0), "{loaded:?}");
    assert!(loaded.kv_used_tokens.is_some_and(|t| t > 0.0), "{loaded:?}");
    assert_eq!(loaded.kv_capacity_tokens, Some(4096.0 * 16.0));
    assert_eq!((count(&done.ttft), count(&done.e2e), count(&done.queue_time)), (N, N, N));
    assert_eq!(count(&done.itl), Some((REQUESTS as u32 * (OUTPUT - 1)) as f64));
    assert_eq!(done.prefix_cache_queries, done.prompt_tokens);
    assert!(done.prefix_cache_hits.is_some());
    assert_eq!(done.request_success, N, "sglang:num_requests_total counts finished requests");
    // SGLang has no cache-config family and no prefill histogram.
    assert_eq!((done.cache, done.prefill_time), (None, None));
    assert_eq!(statuses(&s, &["/version", "/props", "/info"]).await, [404, 404, 404]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn as_llamacpp_the_page_follows_the_load_and_props_give_the_slots() {
    let (s, _, done) = overload_and_drain(Engine::Llamacpp).await;
    assert!(done.prompt_seconds.is_some_and(|t| t > 0.0), "{done:?}");
    assert!(done.generation_seconds.is_some_and(|t| t > 0.0), "{done:?}");
    assert!(done.decode_calls.is_some_and(|n| n >= OUTPUT as f64), "{done:?}");
    // llama.cpp has no latency histograms and (in current builds) no KV gauge.
    assert_eq!((done.ttft, done.itl, done.e2e, done.queue_time), (None, None, None, None));
    assert_eq!((done.kv_cache_usage, done.kv_used_tokens, done.request_success), (None, None, None));
    let (status, props) = get(&reqwest::Client::new(), format!("{}/props", s.base_url())).await;
    assert_eq!(status, 200);
    assert_eq!(slots_from_props(&props), Some(SLOTS as u32));
    assert_eq!(statuses(&s, &["/version", "/info"]).await, [404, 404]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn as_trtllm_the_page_is_at_prometheus_metrics_and_metrics_is_json() {
    let (s, loaded, done) = overload_and_drain(Engine::Trtllm).await;
    assert!(s.metrics_url().ends_with("/prometheus/metrics"));
    assert!(loaded.kv_cache_usage.is_some_and(|k| k > 0.0), "{loaded:?}");
    assert_eq!(loaded.max_running, Some(SLOTS as f64));
    assert_eq!(loaded.cache.as_ref().and_then(|c| c.block_size), Some(16));
    for h in [&done.ttft, &done.itl, &done.e2e, &done.queue_time, &done.prefill_time] {
        assert_eq!(count(h), N, "{done:?}");
    }
    assert_eq!(done.request_success, N);
    let (status, stats) = get(&reqwest::Client::new(), format!("{}/metrics", s.base_url())).await;
    assert_eq!(status, 200);
    assert_eq!(engines::detect(&stats), None, "trtllm-serve's /metrics is not Prometheus text");
    let stats: Value = serde_json::from_str(&stats).unwrap();
    let last = stats.as_array().and_then(|a| a.last()).expect("an iteration");
    assert_eq!(last["maxNumActiveRequests"], SLOTS);
    assert_eq!(last["kvCacheStats"]["tokensPerBlock"], 16);
    assert_eq!(statuses(&s, &["/version", "/props", "/info"]).await, [200, 404, 404]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn as_tgi_the_page_follows_the_load_and_info_names_the_model() {
    let (s, loaded, done) = overload_and_drain(Engine::Tgi).await;
    assert!(loaded.kv_used_tokens.is_some_and(|t| t > 0.0), "{loaded:?}");
    assert_eq!((count(&done.itl), count(&done.e2e), count(&done.queue_time)), (N, N, N));
    assert_eq!(done.request_success, N);
    // TGI has no TTFT histogram and no KV ratio on this page.
    assert_eq!((done.ttft, done.kv_cache_usage, done.kv_capacity_tokens), (None, None, None));
    let (status, info) = get(&reqwest::Client::new(), format!("{}/info", s.base_url())).await;
    assert_eq!(status, 200);
    let info: Value = serde_json::from_str(&info).unwrap();
    assert_eq!(info["model_id"], MODEL);
    assert_eq!(info["max_batch_size"], SLOTS);
    assert_eq!(info["max_batch_total_tokens"], 4096 * 16);
    assert_eq!(statuses(&s, &["/version", "/props"]).await, [404, 404]);
}

#[tokio::test]
async fn hosted_kinds_refuse_an_engine() {
    for kind in [SimKind::OpenAi, SimKind::Anthropic, SimKind::Gemini] {
        let mut a = SimArgs::for_kind(kind, kind.default_model());
        a.engine = Engine::Sglang;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let Err(err) = sim::spawn(a, listener).await else { panic!("{kind:?} accepted --engine sglang") };
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
        assert!(err.to_string().contains("--engine sglang needs --kind vllm"), "{err}");
    }
}

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: SimArgs,
}

#[test]
fn the_engine_flag_takes_engine_names_only() {
    for e in Engine::ALL {
        assert_eq!(Cli::try_parse_from(["sim", "--engine", e.name()]).unwrap().args.engine, e);
    }
    assert_eq!(Cli::try_parse_from(["sim"]).unwrap().args.engine, Engine::Vllm);
    let Err(err) = Cli::try_parse_from(["sim", "--engine", "ollama"]) else { panic!("ollama accepted") };
    let err = err.to_string();
    assert!(err.contains("vllm") && err.contains("trtllm") && err.contains("tgi"), "{err}");
}
