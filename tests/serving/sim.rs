//! Integration tests for `spillway sim`: real HTTP on 127.0.0.1:0 against each simulated kind,
//! checking wire formats (stream and not), the vLLM model's metrics under load, prefix-cache
//! TTFT, faults, quotas and determinism. Timings are kept small so the file runs in seconds.

use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{json, Value};
use spillway::sim::{self, SimArgs, SimHandle, SimKind};
use std::time::{Duration, Instant};

fn fast(kind: SimKind) -> SimArgs {
    let mut a = SimArgs::for_kind(kind, kind.default_model());
    a.ttft_ms = 5;
    a.tokens_per_sec = 2000.0;
    a.output_tokens = 8;
    a.itl_base_ms = 2.0;
    a.itl_per_seq_ms = 0.2;
    a.prefill_us_per_token = 10.0;
    a
}

async fn start(args: SimArgs) -> SimHandle {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    sim::spawn(args, listener).await.unwrap()
}

fn chat_body(model: &str, prompt: &str, stream: bool) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": prompt}], "stream": stream,
           "stream_options": {"include_usage": true}})
}

/// Read an SSE response: (event name, data) pairs, and whether the stream ended in an error.
async fn read_sse(resp: reqwest::Response) -> (Vec<(String, String)>, bool) {
    let mut s = resp.bytes_stream().eventsource();
    let mut out = Vec::new();
    while let Some(ev) = s.next().await {
        match ev {
            Ok(e) => out.push((e.event, e.data)),
            Err(_) => return (out, true),
        }
    }
    (out, false)
}

fn json_of(data: &str) -> Value {
    serde_json::from_str(data).unwrap()
}

#[tokio::test]
async fn openai_and_vllm_speak_chat_completions() {
    for kind in [SimKind::OpenAi, SimKind::Vllm] {
        let s = start(fast(kind)).await;
        let c = reqwest::Client::new();
        let url = format!("{}/v1/chat/completions", s.base_url());
        let r: Value = c
            .post(&url)
            .json(&chat_body(&s.model, "hello", false))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(r["object"], "chat.completion");
        assert_eq!(r["choices"][0]["message"]["role"], "assistant");
        assert_eq!(r["choices"][0]["finish_reason"], "stop");
        assert_eq!(r["usage"]["completion_tokens"], 8);
        assert_eq!(r["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
        let u = &r["usage"];
        assert_eq!(u["total_tokens"], u["prompt_tokens"].as_u64().unwrap() + 8);

        let mut body = chat_body(&s.model, "hello", false);
        body["max_completion_tokens"] = json!(3);
        let r: Value = c.post(&url).json(&body).send().await.unwrap().json().await.unwrap();
        assert_eq!(r["choices"][0]["finish_reason"], "length");
        assert_eq!(r["usage"]["completion_tokens"], 3);

        let resp = c.post(&url).json(&chat_body(&s.model, "hello", true)).send().await.unwrap();
        assert!(resp.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
        let (events, failed) = read_sse(resp).await;
        assert!(!failed);
        assert_eq!(events.last().unwrap().1, "[DONE]");
        let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|(_, d)| json_of(d)).collect();
        assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk"));
        assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
        let usage = chunks.last().unwrap();
        assert_eq!(usage["choices"], json!([]));
        assert_eq!(usage["usage"]["completion_tokens"], 8);
        let fin = &chunks[chunks.len() - 2]["choices"][0];
        assert_eq!(fin["finish_reason"], "stop");
        if kind == SimKind::Vllm {
            assert!(fin["delta"]["content"].is_string(), "vLLM puts finish_reason on the last content chunk");
        }
        let text: String =
            chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
        assert_eq!(text.split_whitespace().count(), 8);

        let models: Value =
            c.get(format!("{}/v1/models", s.base_url())).send().await.unwrap().json().await.unwrap();
        assert_eq!(models["data"][0]["id"], s.model.as_str());
    }
    let s = start(fast(SimKind::Vllm)).await;
    let c = reqwest::Client::new();
    let r = c
        .post(format!("{}/v1/chat/completions", s.base_url()))
        .json(&chat_body("other", "x", false))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(c.get(format!("{}/health", s.base_url())).send().await.unwrap().status(), 200);
}

#[tokio::test]
async fn api_key_is_enforced_in_each_format() {
    let mut a = fast(SimKind::OpenAi);
    a.api_key = Some("k".into());
    let s = start(a).await;
    let c = reqwest::Client::new();
    let url = format!("{}/v1/chat/completions", s.base_url());
    let r = c.post(&url).json(&chat_body(&s.model, "x", false)).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], "invalid_api_key");
    let r = c.post(&url).bearer_auth("k").json(&chat_body(&s.model, "x", false)).send().await.unwrap();
    assert_eq!(r.status(), 200);

    let mut a = fast(SimKind::Anthropic);
    a.api_key = Some("k".into());
    let s = start(a).await;
    let r = c
        .post(format!("{}/v1/messages", s.base_url()))
        .header("anthropic-version", "2023-06-01")
        .json(&json!({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["type"], "authentication_error");
}

#[tokio::test]
async fn anthropic_speaks_messages() {
    let s = start(fast(SimKind::Anthropic)).await;
    let c = reqwest::Client::new();
    let url = format!("{}/v1/messages", s.base_url());
    let post = |body: Value| {
        c.post(&url).header("x-api-key", "any").header("anthropic-version", "2023-06-01").json(&body).send()
    };
    let r = post(json!({"model": s.model, "messages": [{"role": "user", "content": "hi"}]})).await.unwrap();
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    assert_eq!(
        (e["type"].as_str(), e["error"]["type"].as_str()),
        (Some("error"), Some("invalid_request_error"))
    );

    let body = json!({"model": s.model, "max_tokens": 100, "system": [{"type": "text", "text": "be brief"}],
                      "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]});
    let m: Value = post(body.clone()).await.unwrap().json().await.unwrap();
    assert_eq!(m["type"], "message");
    assert_eq!(m["content"][0]["type"], "text");
    assert_eq!(m["stop_reason"], "end_turn");
    assert_eq!(m["usage"]["output_tokens"], 8);
    assert!(m["usage"]["input_tokens"].as_u64().unwrap() > 0);
    assert_eq!(m["usage"]["cache_read_input_tokens"], 0);

    let mut sb = body;
    sb["stream"] = json!(true);
    sb["max_tokens"] = json!(4);
    let (events, failed) = read_sse(post(sb).await.unwrap()).await;
    assert!(!failed);
    let names: Vec<&str> = events.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(&names[..3], ["message_start", "content_block_start", "ping"]);
    assert_eq!(names.iter().filter(|n| **n == "content_block_delta").count(), 4);
    assert_eq!(&names[names.len() - 3..], ["content_block_stop", "message_delta", "message_stop"]);
    let start = json_of(&events[0].1);
    assert!(start["message"]["usage"]["input_tokens"].as_u64().unwrap() > 0);
    let delta = json_of(&events[3].1);
    assert_eq!(delta["delta"]["type"], "text_delta");
    let md = json_of(&events[events.len() - 2].1);
    assert_eq!(md["delta"]["stop_reason"], "max_tokens");
    assert_eq!(md["usage"]["output_tokens"], 4);
}

#[tokio::test]
async fn gemini_speaks_generate_content() {
    let mut a = fast(SimKind::Gemini);
    a.api_key = Some("g".into());
    let s = start(a).await;
    let c = reqwest::Client::new();
    let base = format!("{}/v1beta/models/{}", s.base_url(), s.model);
    let body = json!({"systemInstruction": {"parts": [{"text": "be brief"}]},
                      "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
                      "generationConfig": {"maxOutputTokens": 5, "temperature": 0.2}});
    let r = c.post(format!("{base}:generateContent")).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["status"], "PERMISSION_DENIED");
    let r: Value = c
        .post(format!("{base}:generateContent?key=g"))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(r["candidates"][0]["content"]["role"], "model");
    assert_eq!(r["candidates"][0]["finishReason"], "MAX_TOKENS");
    assert_eq!(r["usageMetadata"]["candidatesTokenCount"], 5);
    assert_eq!(r["modelVersion"], s.model.as_str());

    let resp = c
        .post(format!("{base}:streamGenerateContent?alt=sse"))
        .header("x-goog-api-key", "g")
        .json(&body)
        .send()
        .await
        .unwrap();
    let (events, failed) = read_sse(resp).await;
    assert!(!failed);
    assert_eq!(events.len(), 5);
    let chunks: Vec<Value> = events.iter().map(|(_, d)| json_of(d)).collect();
    assert!(chunks[0]["usageMetadata"].is_null());
    assert!(chunks[0]["candidates"][0]["content"]["parts"][0]["text"].is_string());
    let last = chunks.last().unwrap();
    assert_eq!(last["candidates"][0]["finishReason"], "MAX_TOKENS");
    assert_eq!(
        last["usageMetadata"]["totalTokenCount"],
        last["usageMetadata"]["promptTokenCount"].as_u64().unwrap() + 5
    );

    let bad =
        c.post(format!("{base}:generateContent?key=g")).json(&json!({"contents": []})).send().await.unwrap();
    assert_eq!(bad.status(), 400);
    assert_eq!(bad.json::<Value>().await.unwrap()["error"]["status"], "INVALID_ARGUMENT");
}

const NEW_SERIES: &[&str] = &[
    "vllm:num_requests_running{",
    "vllm:num_requests_waiting{",
    "vllm:kv_cache_usage_perc{",
    "vllm:cache_config_info{",
    "vllm:time_to_first_token_seconds_bucket{",
    "vllm:inter_token_latency_seconds_bucket{",
    "vllm:e2e_request_latency_seconds_bucket{",
    "vllm:request_queue_time_seconds_bucket{",
    "vllm:prompt_tokens_total{",
    "vllm:generation_tokens_total{",
    "vllm:prefix_cache_queries_total{",
    "vllm:prefix_cache_hits_total{",
    "vllm:request_success_total{",
    "vllm:num_preemptions_total{",
];

async fn metrics(c: &reqwest::Client, s: &SimHandle) -> String {
    c.get(format!("{}/metrics", s.base_url())).send().await.unwrap().text().await.unwrap()
}

fn gauge(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name) && l.as_bytes().get(name.len()) == Some(&b'{'))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("{name} missing"))
}

#[tokio::test]
async fn metrics_use_both_vllm_name_generations() {
    let c = reqwest::Client::new();
    let s = start(fast(SimKind::Vllm)).await;
    c.post(format!("{}/v1/chat/completions", s.base_url()))
        .json(&chat_body(&s.model, "hi", false))
        .send()
        .await
        .unwrap();
    let m = metrics(&c, &s).await;
    for name in NEW_SERIES {
        assert!(m.contains(name), "{name} missing from\n{m}");
    }
    assert!(m.contains(r#"engine="0""#) && m.contains(r#"model_name="meta-llama/Llama-3.1-8B-Instruct""#));
    assert!(
        m.contains(r#"cache_dtype="auto""#)
            && m.contains(r#"num_gpu_blocks="4096""#)
            && m.contains(r#"block_size="16""#)
    );
    assert!(m.contains(r#"vllm:request_success_total{engine="0",finished_reason="stop""#));
    assert_eq!(gauge(&m, "vllm:generation_tokens_total"), 8.0);

    let mut a = fast(SimKind::Vllm);
    a.legacy_metrics = true;
    let s = start(a).await;
    let m = metrics(&c, &s).await;
    assert!(
        m.contains("vllm:gpu_cache_usage_perc{") && m.contains("vllm:time_per_output_token_seconds_bucket{")
    );
    assert!(!m.contains("vllm:kv_cache_usage_perc") && !m.contains("vllm:inter_token_latency_seconds"));
    assert!(!m.contains(r#"engine="0""#));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_and_kv_move_under_load_and_drain() {
    let mut a = fast(SimKind::Vllm);
    a.max_num_seqs = 2;
    a.itl_base_ms = 10.0;
    a.output_tokens = 10;
    let s = start(a).await;
    let c = reqwest::Client::new();
    let url = format!("{}/v1/chat/completions", s.base_url());
    let reqs: Vec<_> = (0..6)
        .map(|i| {
            let (c, url, body) = (
                c.clone(),
                url.clone(),
                chat_body(&s.model, &format!("request {i} {}", "x".repeat(200)), false),
            );
            tokio::spawn(async move { c.post(url).json(&body).send().await.unwrap().status() })
        })
        .collect();
    // Two run (max_num_seqs) and the rest queue, once the six have arrived.
    let m = crate::common::wait_until(Duration::from_secs(5), "two running and the rest waiting", || async {
        let m = metrics(&c, &s).await;
        let waiting = gauge(&m, "vllm:num_requests_waiting");
        if gauge(&m, "vllm:num_requests_running") == 2.0 && waiting >= 2.0 {
            Ok(m)
        } else {
            Err(m)
        }
    })
    .await;
    assert_eq!(gauge(&m, "vllm:num_requests_running"), 2.0);
    assert!(gauge(&m, "vllm:num_requests_waiting") >= 2.0, "{m}");
    assert!(gauge(&m, "vllm:kv_cache_usage_perc") > 0.0);
    for r in reqs {
        assert_eq!(r.await.unwrap(), 200);
    }
    // The engine lets go of the last sequences once their responses are out.
    let m = crate::common::wait_until(Duration::from_secs(5), "the engine to drain", || async {
        let m = metrics(&c, &s).await;
        let idle = ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"];
        if idle.iter().all(|g| gauge(&m, g) == 0.0) {
            Ok(m)
        } else {
            Err(m)
        }
    })
    .await;
    assert_eq!(gauge(&m, "vllm:num_requests_running"), 0.0);
    assert_eq!(gauge(&m, "vllm:num_requests_waiting"), 0.0);
    assert_eq!(gauge(&m, "vllm:kv_cache_usage_perc"), 0.0);
    assert!(gauge(&m, "vllm:request_queue_time_seconds_count") >= 6.0);
}

async fn ttft(c: &reqwest::Client, url: &str, body: &Value) -> Duration {
    let t0 = Instant::now();
    let resp = c.post(url).json(body).send().await.unwrap();
    let mut s = resp.bytes_stream().eventsource();
    while let Some(Ok(e)) = s.next().await {
        if json_of(&e.data)["choices"][0]["delta"]["content"].as_str().is_some_and(|t| !t.is_empty()) {
            return t0.elapsed();
        }
    }
    panic!("no token");
}

#[tokio::test]
async fn prefix_cache_hits_shorten_ttft() {
    let mut a = fast(SimKind::Vllm);
    a.prefill_us_per_token = 100.0;
    let s = start(a).await;
    let c = reqwest::Client::new();
    let url = format!("{}/v1/chat/completions", s.base_url());
    let body = chat_body(&s.model, &"lorem ipsum ".repeat(400), true); // ~1200 tokens ≈ 120 ms prefill
    let cold = ttft(&c, &url, &body).await;
    let warm = ttft(&c, &url, &body).await;
    assert!(warm * 3 < cold, "cold {cold:?} warm {warm:?}");
    let m = metrics(&c, &s).await;
    assert!(gauge(&m, "vllm:prefix_cache_hits_total") > 1000.0);
    let r: Value = c
        .post(&url)
        .json(&chat_body(&s.model, &"lorem ipsum ".repeat(400), false))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(r["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap() > 1000);
}

#[tokio::test]
async fn faults_by_header() {
    let c = reqwest::Client::new();
    let s = start(fast(SimKind::OpenAi)).await;
    let url = format!("{}/v1/chat/completions", s.base_url());
    let send = |fault: &str, stream: bool| {
        c.post(&url).header(sim::FAULT_HEADER, fault).json(&chat_body(&s.model, "hi", stream)).send()
    };

    let r = send("status=503", false).await.unwrap();
    assert_eq!(r.status(), 503);
    assert!(r.json::<Value>().await.unwrap()["error"]["message"].is_string());
    let r = send("status=429", false).await.unwrap();
    assert_eq!((r.status().as_u16(), r.headers()["retry-after"].to_str().unwrap()), (429, "1"));

    let hung = c
        .post(&url)
        .header(sim::FAULT_HEADER, "hang")
        .timeout(Duration::from_millis(300))
        .json(&chat_body(&s.model, "hi", false))
        .send()
        .await;
    assert!(hung.unwrap_err().is_timeout());

    let (events, failed) = read_sse(send("drop_after=2", true).await.unwrap()).await;
    assert!(failed, "stream must end abruptly");
    assert!(events.iter().all(|(_, d)| d != "[DONE]"));
    assert_eq!(
        events
            .iter()
            .filter(|(_, d)| json_of(d)["choices"][0]["delta"]["content"]
                .as_str()
                .is_some_and(|t| !t.is_empty()))
            .count(),
        2
    );

    let (events, _) = read_sse(send("error_event", true).await.unwrap()).await;
    assert!(events.iter().any(|(_, d)| d.starts_with('{') && json_of(d)["error"]["message"].is_string()));

    let t0 = Instant::now();
    let r = send("ttft_ms=150,token_delay_ms=5", false).await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(t0.elapsed() >= Duration::from_millis(190));

    let s = start(fast(SimKind::Anthropic)).await;
    let resp = c
        .post(format!("{}/v1/messages", s.base_url()))
        .header("anthropic-version", "2023-06-01")
        .header(sim::FAULT_HEADER, "error_event")
        .json(&json!({"max_tokens": 50, "stream": true, "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    let (events, _) = read_sse(resp).await;
    let (name, data) = events.last().unwrap();
    assert_eq!(name, "error");
    assert_eq!(json_of(data)["error"]["type"], "overloaded_error");
    assert_eq!(events.iter().filter(|(n, _)| n == "content_block_delta").count(), 1);
}

#[tokio::test]
async fn fault_rates_by_flag() {
    let mut a = fast(SimKind::Gemini);
    a.error_rate = 1.0;
    a.error_status = 429;
    let s = start(a).await;
    let r = reqwest::Client::new()
        .post(format!("{}/v1beta/models/{}:generateContent", s.base_url(), s.model))
        .json(&json!({"contents": [{"parts": [{"text": "hi"}]}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "1");
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["status"], "RESOURCE_EXHAUSTED");
}

#[tokio::test]
async fn quotas_answer_429_with_retry_after() {
    let c = reqwest::Client::new();
    let mut a = fast(SimKind::OpenAi);
    a.rpm = 2;
    let s = start(a).await;
    let url = format!("{}/v1/chat/completions", s.base_url());
    let r = c.post(&url).json(&chat_body(&s.model, "hi", false)).send().await.unwrap();
    assert_eq!(r.headers()["x-ratelimit-remaining-requests"], "1");
    c.post(&url).json(&chat_body(&s.model, "hi", false)).send().await.unwrap();
    let r = c.post(&url).json(&chat_body(&s.model, "hi", false)).send().await.unwrap();
    assert_eq!(r.status(), 429);
    let ra: u64 = r.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&ra));
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], "rate_limit_exceeded");

    let mut a = fast(SimKind::Anthropic);
    a.tpm = 50;
    let s = start(a).await;
    let r = c
        .post(format!("{}/v1/messages", s.base_url()))
        .header("anthropic-version", "2023-06-01")
        .json(&json!({"max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    assert!(r.headers().contains_key("retry-after"));
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["type"], "rate_limit_error");
}

#[tokio::test]
async fn same_seed_same_text() {
    let c = reqwest::Client::new();
    let mut texts = Vec::new();
    for seed in [7, 7, 8] {
        let mut a = fast(SimKind::Vllm);
        a.seed = seed;
        let s = start(a).await;
        let r: Value = c
            .post(format!("{}/v1/chat/completions", s.base_url()))
            .json(&chat_body(&s.model, "tell me", false))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        texts.push(r["choices"][0]["message"]["content"].as_str().unwrap().to_string());
    }
    assert_eq!(texts[0], texts[1]);
    assert_ne!(texts[0], texts[2]);
}
