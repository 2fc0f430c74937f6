//! Prompt caches across a spill, end to end: a long agent conversation (system prompt, tools,
//! a tool loop) through the router to the Anthropic simulator, checked against the
//! simulator's request log: where the router put `cache_control`, that a client's own marks
//! go through as written with none added, that a task with placement off gets none, and that
//! the ledger prices the first request's cache write and the second's cache read.

use std::time::Duration;

use rust_decimal::Decimal;
use serde_json::{json, Value};
use spillway::ledger::{LedgerRecord, Store};
use spillway::sim::SimKind;

use crate::common::{self, router, sim};

const CLAUDE: &str = "claude-sonnet-4-5";

fn config(anthropic: &str, ledger: &str) -> String {
    format!(
        r#"
backends:
  - {{name: claude, kind: anthropic, base_url: "{anthropic}", model: {CLAUDE},
      price: {{input_per_mtok: "3", cached_input_per_mtok: "0.3", cache_write_per_mtok: "3.75",
               output_per_mtok: "15"}}}}
tasks:
  - {{name: agent, backends: [claude], slo: {{ttft_ms: 5000}}}}
  - {{name: agent-uncached, backends: [claude], slo: {{ttft_ms: 5000}}, prompt_cache: false}}
ledger: {{url: "{ledger}"}}
"#
    )
}

/// An agent's turn: a long system prompt, two tools, a tool call answered, a new question.
fn conversation(task: &str) -> Value {
    let system = format!("You are a careful coding agent. {}", "Follow the house style. ".repeat(300));
    json!({
        "model": task, "max_tokens": 16,
        "tools": [
            {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object",
                "properties": {"path": {"type": "string"}}}}},
            {"type": "function", "function": {"name": "run_tests", "parameters": {"type": "object"}}},
        ],
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": "The build fails in src/lib.rs; fix it."},
            {"role": "assistant", "content": "Reading the file.", "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "read_file", "arguments": "{\"path\": \"src/lib.rs\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "pub fn add(a: i32, b: i32) -> i32 { a - b }"},
            {"role": "assistant", "content": "The sign is wrong in add; I changed it to a + b."},
            {"role": "user", "content": "Good. Now run the tests and tell me what failed."},
        ],
    })
}

/// Every place a body carries `cache_control`, as JSON pointers, in prompt order (tools,
/// system, messages).
fn marks(body: &Value) -> Vec<String> {
    fn walk(value: &Value, at: String, out: &mut Vec<String>) {
        match value {
            Value::Object(o) => {
                if o.contains_key("cache_control") {
                    out.push(at.clone());
                }
                o.iter().for_each(|(k, v)| walk(v, format!("{at}/{k}"), out));
            }
            Value::Array(a) => a.iter().enumerate().for_each(|(i, v)| walk(v, format!("{at}/{i}"), out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    for key in ["tools", "system", "messages"] {
        if let Some(part) = body.get(key) {
            walk(part, format!("/{key}"), &mut out);
        }
    }
    out
}

/// The ledger rows of `task`, once there are `n`, oldest first.
async fn rows(ledger: &str, task: &str, n: usize) -> Vec<LedgerRecord> {
    let store = Store::open(ledger).await.unwrap();
    common::wait_until(Duration::from_secs(10), format!("{n} ledger rows of {task}"), || async {
        let rows: Vec<LedgerRecord> =
            store.query(i64::MIN, i64::MAX).await.unwrap().into_iter().filter(|r| r.task == task).collect();
        if rows.len() >= n {
            Ok(rows)
        } else {
            Err(format!("{} rows", rows.len()))
        }
    })
    .await
}

/// What a row should cost at the test's prices, written out apart from the router's code.
fn list_price(r: &LedgerRecord) -> Decimal {
    let uncached = r.input_tokens - r.cached_input_tokens - r.cache_write_tokens;
    let cents = Decimal::from(uncached) * Decimal::from(3)
        + Decimal::from(r.cached_input_tokens) * Decimal::new(3, 1)
        + Decimal::from(r.cache_write_tokens) * Decimal::new(375, 2)
        + Decimal::from(r.output_tokens) * Decimal::from(15);
    cents / Decimal::from(1_000_000)
}

#[tokio::test]
async fn breakpoints_are_placed_as_configured_and_the_ledger_prices_the_write_then_the_read() {
    let anthropic = sim(SimKind::Anthropic, CLAUDE, |_| {}).await;
    let ledger = common::temp_ledger_url();
    let router = router(&config(&anthropic.base_url(), &ledger), &[]).await;

    let (status, _, first) = common::post_json(&router.url, &conversation("agent")).await;
    assert_eq!(status, 200, "{first}");
    let sent = anthropic.requests().pop().expect("the simulator saw the request");
    // The last tool, the system prompt, and the last block of the last two user turns (the
    // tool result is one): four marks, Anthropic's most.
    assert_eq!(
        marks(&sent),
        ["/tools/1", "/system/0", "/messages/2/content/0", "/messages/4/content/0"],
        "{}",
        sent["messages"]
    );
    assert_eq!(sent["messages"][2]["content"][0]["type"], "tool_result");
    assert_eq!(sent["tools"][1]["cache_control"], json!({"type": "ephemeral"}));
    assert_eq!(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);

    let written = rows(&ledger, "agent", 1).await.remove(0);
    assert_eq!(written.cached_input_tokens, 0, "{written:?}");
    // The last mark ends the prompt: the whole conversation is written.
    assert!(written.cache_write_tokens > 1024, "{written:?}");
    assert!(written.input_tokens - written.cache_write_tokens < 4, "{written:?}");
    assert_eq!(written.cost_usd, Some(list_price(&written)), "{written:?}");

    // The same conversation again reads back what the first wrote.
    let (_, _, second) = common::post_json(&router.url, &conversation("agent")).await;
    assert_eq!(marks(&anthropic.requests().pop().unwrap()), marks(&sent), "the same marks");
    let read = rows(&ledger, "agent", 2).await.into_iter().find(|r| r.id != written.id).unwrap();
    assert_eq!(read.input_tokens, written.input_tokens, "{read:?}");
    assert_eq!(
        (read.cached_input_tokens, read.cache_write_tokens),
        (written.cache_write_tokens, 0),
        "{read:?}"
    );
    assert_eq!(second["usage"]["prompt_tokens_details"]["cached_tokens"], read.cached_input_tokens);
    assert_eq!(read.cost_usd, Some(list_price(&read)), "{read:?}");
    let (first_cost, second_cost) = (written.cost_usd.unwrap(), read.cost_usd.unwrap());
    assert!(
        second_cost * Decimal::from(5) < first_cost,
        "a read costs a fraction: {first_cost} {second_cost}"
    );
    let metrics = common::metrics_text(&router).await;
    let tokens = |kind| {
        common::series_sum(&metrics, "spillway_tokens_total", &[("task", "agent"), ("kind", kind)])
            .unwrap_or(0.0)
    };
    assert_eq!(tokens("cache_write"), written.cache_write_tokens as f64, "{metrics}");
    assert_eq!(tokens("cached_input"), read.cached_input_tokens as f64, "{metrics}");

    // A task with placement off sends none, and so caches nothing.
    let (status, _, _) = common::post_json(&router.url, &conversation("agent-uncached")).await;
    assert_eq!(status, 200);
    let unmarked = anthropic.requests().pop().unwrap();
    assert!(marks(&unmarked).is_empty(), "{unmarked}");
    let uncached = rows(&ledger, "agent-uncached", 1).await.remove(0);
    assert_eq!((uncached.cached_input_tokens, uncached.cache_write_tokens), (0, 0), "{uncached:?}");
}

#[tokio::test]
async fn a_clients_own_breakpoints_go_through_as_written_and_its_answer_says_what_was_cached() {
    let anthropic = sim(SimKind::Anthropic, CLAUDE, |_| {}).await;
    let ledger = common::temp_ledger_url();
    let router = router(&config(&anthropic.base_url(), &ledger), &[]).await;
    let manual = "Repository conventions, in full. ".repeat(400);
    let body = json!({
        "model": "agent", "max_tokens": 16,
        "system": [{"type": "text", "text": manual, "cache_control": {"type": "ephemeral", "ttl": "1h"}},
                   {"type": "text", "text": "Today's task: review the diff."}],
        "tools": [{"name": "read_file", "input_schema": {"type": "object"}}],
        "messages": [{"role": "user", "content": "first question"},
                     {"role": "assistant", "content": "an answer"},
                     {"role": "user", "content": "and now?"}],
    });
    let post = || {
        reqwest::Client::new()
            .post(format!("{}/v1/messages", router.url))
            .header("anthropic-version", "2023-06-01")
            .json(&body)
            .send()
    };
    let first: Value = post().await.unwrap().json().await.unwrap();
    let sent = anthropic.requests().pop().unwrap();
    assert_eq!(marks(&sent), ["/system/0"], "the client's one mark, none added: {sent}");
    assert_eq!(sent["system"], body["system"], "as the client wrote it");
    assert_eq!(sent["messages"], body["messages"]);
    // Anthropic's own usage figures come back to a Messages client.
    let written = first["usage"]["cache_creation_input_tokens"].as_u64().unwrap();
    assert!(written > 1024, "{first}");
    assert_eq!(first["usage"]["cache_read_input_tokens"], 0, "{first}");
    let again: Value = post().await.unwrap().json().await.unwrap();
    assert_eq!(again["usage"]["cache_read_input_tokens"], written, "{again}");
    assert_eq!(again["usage"]["cache_creation_input_tokens"], 0, "{again}");

    let rows = rows(&ledger, "agent", 2).await;
    let mut cache: Vec<(i64, i64)> =
        rows.iter().map(|r| (r.cached_input_tokens, r.cache_write_tokens)).collect();
    cache.sort();
    assert_eq!(cache, [(0, written as i64), (written as i64, 0)], "{rows:?}");
}

#[tokio::test]
async fn a_quota_counts_cache_reads_only_where_the_backend_says_its_provider_does() {
    let (reads_free, reads_count) =
        (sim(SimKind::Anthropic, CLAUDE, |_| {}).await, sim(SimKind::Anthropic, CLAUDE, |_| {}).await);
    let yaml = format!(
        r#"
backends:
  - {{name: free, kind: anthropic, base_url: "{}", model: {CLAUDE}, quota: {{tpm: 6000}}}}
  - {{name: counted, kind: anthropic, base_url: "{}", model: {CLAUDE},
      quota: {{tpm: 6000, count_cached_tokens: true}}}}
tasks:
  - {{name: free, backends: [free], slo: {{ttft_ms: 5000}}}}
  - {{name: counted, backends: [counted], slo: {{ttft_ms: 5000}}}}
"#,
        reads_free.base_url(),
        reads_count.base_url()
    );
    // One quota minute for the whole test: 30 s into it, never moved.
    let minute = 29_000_000 * 60_000 + 30_000;
    let options = spillway::app::Options {
        quota_clock: Some(std::sync::Arc::new(move || minute)),
        ..Default::default()
    };
    let router = common::router_with(&yaml, &[], options).await;
    let served = |task: &'static str| {
        let url = router.url.clone();
        async move {
            let mut served = 0;
            for _ in 0..5 {
                let (status, _, _) = common::post_json(&url, &conversation(task)).await;
                served += usize::from(status == 200);
            }
            served
        }
    };
    // About 1,900 prompt tokens a request (the router's estimate before sending is somewhat
    // more), written once and then read back. Leaving reads out, each later request counts
    // only its few fresh tokens and its output once answered: all five fit in 6,000.
    // Counting them, two whole prompts are counted and the third's estimate does not fit.
    assert_eq!(served("free").await, 5);
    assert_eq!(served("counted").await, 2);
}
