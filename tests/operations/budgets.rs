//! Key limits and budgets, and the cost in the answer, against hosted simulators: 402 and 429
//! envelopes in the OpenAI and Anthropic dialects with `Retry-After` from the window, the
//! `x-spillway-cost-usd` header and the `usage.spillway_cost_usd` field (non-streamed and in a
//! stream's final usage chunk), two routers sharing the real Redis (127.0.0.1:6379, a key
//! prefix of its own per run) holding one budget under 200 concurrent requests, and a Redis
//! that is down: budgets fail closed, rate limits open.

use crate::common;

use std::sync::Arc;

use common::*;
use rust_decimal::Decimal;
use serde_json::{json, Value};
use spillway::guard::budget::{BudgetBoard, BudgetOptions, Scope, ScopeKind};
use spillway::sim::SimKind;

const REDIS: &str = "redis://127.0.0.1:6379";
/// Thirty seconds into some minute of 2025: `Retry-After` is then exactly 30.
const T0: u64 = 29_000_000 * 60_000 + 30_000;
/// $1,000 per million output tokens, input free: a 12-token answer costs exactly $0.012.
const PRICE: &str = "price: {input_per_mtok: 0, output_per_mtok: 1000}";
const LLAMA: &str = "meta-llama/Llama-3.1-8B-Instruct";

fn fixed_clock(prefix: Option<String>) -> spillway::app::Options {
    spillway::app::Options { quota_clock: Some(Arc::new(|| T0)), budget_prefix: prefix, ..Default::default() }
}

fn prefix(test: &str) -> String {
    format!("spillway-test:{}:budgets-{test}:{:08x}", std::process::id(), rand::random::<u32>())
}

async fn post(url: &str, path: &str, key: &str, body: &Value) -> (u16, reqwest::header::HeaderMap, Value) {
    let response =
        reqwest::Client::new().post(format!("{url}{path}")).bearer_auth(key).json(body).send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.json().await.unwrap_or(Value::Null))
}

fn header<'a>(headers: &'a reqwest::header::HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn messages_body() -> Value {
    json!({"model": "t", "max_tokens": 12, "messages": [{"role": "user", "content": "hello there"}]})
}

fn yaml(openai: &str, extra: &str) -> String {
    format!(
        r#"
client_keys_env: [RPM_KEY, BUDGET_KEY, FREE_KEY]
backends:
  - {{name: hosted, kind: openai, base_url: "{openai}/v1", model: gpt-5.6, {PRICE}}}
tasks:
  - {{name: t, backends: [hosted], slo: {{ttft_ms: 5000}}}}
{extra}
"#
    )
}

const KEYS: &[(&str, &str)] =
    &[("RPM_KEY", "sk-rpm-key-1"), ("BUDGET_KEY", "sk-budget-key-2"), ("FREE_KEY", "sk-free-key-3")];

#[tokio::test]
async fn over_a_budget_is_402_and_over_a_rate_limit_429_in_both_dialects() {
    let openai = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let budgets = "budgets: {keys: {RPM_KEY: {rpm: 2}, BUDGET_KEY: {usd_per_day: '0.011'}}}";
    let router = router_with(&yaml(&openai.base_url(), budgets), KEYS, fixed_clock(None)).await;
    let chat = |key: &'static str| {
        let url = router.url.clone();
        async move { post(&url, "/v1/chat/completions", key, &body("t", false)).await }
    };

    // rpm 2: the third request of the minute is refused, told to wait the 30 s left of it.
    assert_eq!(chat("sk-rpm-key-1").await.0, 200);
    assert_eq!(chat("sk-rpm-key-1").await.0, 200);
    let (status, headers, error) = chat("sk-rpm-key-1").await;
    assert_eq!((status, header(&headers, "retry-after")), (429, Some("30")), "{error}");
    assert_eq!(error["error"]["code"], "rate_limited:key:rpm");
    assert_eq!(error["error"]["type"], "rate_limit_error");
    assert_eq!(error["error"]["message"], "key `RPM_KEY` is over its rpm limit");
    let (status, headers, error) = post(&router.url, "/v1/messages", "sk-rpm-key-1", &messages_body()).await;
    assert_eq!((status, header(&headers, "retry-after")), (429, Some("30")), "{error}");
    assert_eq!(error["type"], "error");
    assert_eq!(error["error"]["type"], "rate_limit_error");
    assert_eq!(error["error"]["code"], "rate_limited:key:rpm");

    // $0.011 a day: a request whose worst case is 12 tokens at $1,000 per million ($0.012)
    // never starts, in either dialect; 402 carries no Retry-After (it is not retried).
    let (status, headers, error) = chat("sk-budget-key-2").await;
    assert_eq!((status, header(&headers, "retry-after")), (402, None), "{error}");
    assert_eq!(error["error"]["code"], "budget_exceeded:key:usd_per_day");
    assert_eq!(error["error"]["type"], "billing_error");
    let (status, _, error) = post(&router.url, "/v1/messages", "sk-budget-key-2", &messages_body()).await;
    assert_eq!(status, 402, "{error}");
    assert_eq!(error["error"]["type"], "billing_error");
    assert_eq!(error["error"]["code"], "budget_exceeded:key:usd_per_day");
    // One token less fits.
    let mut small = body("t", false);
    small["max_tokens"] = json!(11);
    assert_eq!(post(&router.url, "/v1/chat/completions", "sk-budget-key-2", &small).await.0, 200);
    // A key without limits is not limited.
    for _ in 0..4 {
        assert_eq!(chat("sk-free-key-3").await.0, 200);
    }
}

#[tokio::test]
async fn an_issued_key_has_its_own_limits_and_its_teams_budget() {
    let openai = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let extra = "admin_token_env: BUDGET_ADMIN\nbudgets: {teams: {payments: {usd_per_day: '0.023'}}}";
    let env = [KEYS, &[("BUDGET_ADMIN", "budget-admin-token")]].concat();
    let router = router_with(&yaml(&openai.base_url(), extra), &env, fixed_clock(None)).await;
    let create = |limits: Value| {
        let url = router.url.clone();
        async move {
            let body = json!({"name": "ci", "team": "payments", "limits": limits});
            let response = reqwest::Client::new()
                .post(format!("{url}/admin/keys"))
                .bearer_auth("budget-admin-token")
                .json(&body)
                .send()
                .await
                .unwrap();
            (response.status().as_u16(), response.json::<Value>().await.unwrap())
        }
    };
    // A limit out of range is refused with its path; one in range is stored and listed.
    let (status, refused) = create(json!({"rpm": 0})).await;
    assert_eq!(
        (status, &refused["error"]["message"]),
        (400, &json!("limits.rpm: must be at least 1")),
        "{refused}"
    );
    let (status, created) = create(json!({"rpm": 1})).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["key"]["limits"], json!({"rpm": 1}));
    let (_, other) = create(json!({})).await;
    let (first, second) = (created["secret"].as_str().unwrap(), other["secret"].as_str().unwrap());
    let chat = |key: String, max_tokens: u32| {
        let url = router.url.clone();
        let mut b = body("t", false);
        b["max_tokens"] = json!(max_tokens);
        async move { post(&url, "/v1/chat/completions", &key, &b).await }
    };
    // The team's $0.023 holds both keys together: $0.012 spent by the first leaves $0.011.
    assert_eq!(chat(first.into(), 12).await.0, 200);
    // The first key's own rpm 1 is spent for this minute.
    let (status, headers, error) = chat(first.into(), 1).await;
    assert_eq!((status, header(&headers, "retry-after")), (429, Some("30")), "{error}");
    assert_eq!(error["error"]["code"], "rate_limited:key:rpm");
    let (status, _, error) = chat(second.into(), 12).await;
    assert_eq!(status, 402, "{error}");
    assert_eq!(error["error"]["code"], "budget_exceeded:team:usd_per_day");
    assert_eq!(error["error"]["message"], "team `payments` is over its usd_per_day limit");
    assert_eq!(chat(second.into(), 11).await.0, 200, "$0.011 fits exactly");
}

#[tokio::test]
async fn every_answer_carries_its_cost_in_the_header_and_the_usage() {
    let openai = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let anthropic = sim(SimKind::Anthropic, "claude-sonnet-4-5", |_| {}).await;
    let extra = format!(
        "  - {{name: claude, kind: anthropic, base_url: \"{}\", model: claude-sonnet-4-5, \
         price: {{input_per_mtok: 3, output_per_mtok: 15}}}}\n",
        anthropic.base_url()
    );
    let text = yaml(&openai.base_url(), "").replace("tasks:\n", &format!("{extra}tasks:\n"))
        + "  - {name: c, backends: [claude], slo: {ttft_ms: 5000}}\n";
    let router = router(&text, KEYS).await;

    let (status, headers, answer) =
        post(&router.url, "/v1/chat/completions", "sk-free-key-3", &body("t", false)).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["usage"]["completion_tokens"], 12);
    assert_eq!(header(&headers, "x-spillway-cost-usd"), Some("0.012"));
    assert_eq!(answer["usage"]["spillway_cost_usd"], "0.012");

    // Streamed: the figure comes in the final usage chunk; the headers went out before it was known.
    let mut streamed = body("t", true);
    streamed["stream_options"] = json!({"include_usage": true});
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", router.url))
        .bearer_auth("sk-free-key-3")
        .json(&streamed)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(header(resp.headers(), "x-spillway-cost-usd"), None);
    let text = resp.text().await.unwrap();
    let usage: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter(|c| c["usage"].is_object())
        .collect();
    assert_eq!(usage.len(), 1, "{text}");
    assert_eq!(usage[0]["usage"]["spillway_cost_usd"], "0.012", "{text}");
    assert_eq!(usage[0]["usage"]["completion_tokens"], 12, "{text}");

    // Anthropic's dialect on an Anthropic backend: input and output at their list prices.
    let c = json!({"model": "c", "max_tokens": 12, "messages": [{"role": "user", "content": "hello there"}]});
    let (status, headers, answer) = post(&router.url, "/v1/messages", "sk-free-key-3", &c).await;
    assert_eq!(status, 200, "{answer}");
    let (input, output) = (
        answer["usage"]["input_tokens"].as_u64().unwrap(),
        answer["usage"]["output_tokens"].as_u64().unwrap(),
    );
    let expected = (Decimal::from(input * 3 + output * 15) / Decimal::from(1_000_000)).normalize();
    assert!(input > 0 && output > 0, "{answer}");
    assert_eq!(header(&headers, "x-spillway-cost-usd"), Some(expected.to_string().as_str()));
}

#[tokio::test]
async fn broken_and_abandoned_streams_settle_their_reservations() {
    let openai = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let broken = sim(SimKind::OpenAi, "gpt-5.6", |a| a.drop_after = Some(3)).await;
    let slow = sim(SimKind::OpenAi, "gpt-5.6", |a| a.token_delay_ms = 200).await;
    let extra = format!(
        "  - {{name: broken, kind: openai, base_url: \"{}/v1\", model: gpt-5.6, {PRICE}}}\n\
         \x20 - {{name: slow, kind: openai, base_url: \"{}/v1\", model: gpt-5.6, {PRICE}}}\n",
        broken.base_url(),
        slow.base_url()
    );
    let text = yaml(&openai.base_url(), "")
        .replace("tasks:\n", &format!("{extra}tasks:\n"))
        + "  - {name: broken, backends: [broken], slo: {ttft_ms: 5000}}\n  - {name: slow, backends: [slow], slo: {ttft_ms: 5000}}\n"
        + "budgets: {keys: {BUDGET_KEY: {concurrent: 1, usd_per_day: '0.04'}}}\n";
    let router = router(&text, KEYS).await;
    let stream = |task: &str| {
        reqwest::Client::new()
            .post(format!("{}/v1/chat/completions", router.url))
            .bearer_auth("sk-budget-key-2")
            .json(&body(task, true))
            .send()
    };
    // A stream the upstream cuts: its one slot is free again when the client has read its end.
    let cut = stream("broken").await.unwrap();
    assert_eq!(cut.status(), 200);
    let text = cut.text().await.unwrap();
    assert!(text.contains("\"error\"") && !text.contains("[DONE]"), "{text}");
    // It reported no usage, so it was settled at its worst case, $0.012: $0.028 of $0.04 is left.
    let chat = |max_tokens: u32| {
        let (url, mut b) = (router.url.clone(), body("t", false));
        b["max_tokens"] = json!(max_tokens);
        async move { post(&url, "/v1/chat/completions", "sk-budget-key-2", &b).await }
    };
    let (status, _, answer) = chat(12).await;
    assert_eq!(status, 200, "{answer}");
    // $0.024 spent: a 17-token worst case ($0.017) does not fit.
    let (status, _, error) = chat(17).await;
    assert_eq!((status, &error["error"]["code"]), (402, &json!("budget_exceeded:key:usd_per_day")));
    // A client that walks away mid-stream: while its request runs the key's one slot is taken,
    // and once the router has seen it go, the slot is free again.
    let mut small = body("slow", true);
    small["max_tokens"] = json!(6);
    let gone = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", router.url))
        .bearer_auth("sk-budget-key-2")
        .json(&small)
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 200);
    let mut gone = gone;
    assert!(gone.chunk().await.unwrap().is_some());
    let (status, _, error) = chat(1).await;
    assert_eq!((status, &error["error"]["code"]), (429, &json!("rate_limited:key:concurrent")));
    drop(gone);
    wait_until(std::time::Duration::from_secs(5), "the abandoned stream's slot to be free", || async {
        match chat(1).await {
            (200, _, _) => Ok(()),
            (status, _, e) => Err(format!("{status} {e}")),
        }
    })
    .await;
    // Abandoned without a usage report, it was settled at its $0.006 worst case: with the
    // 1-token answer, $0.031 is spent; $0.009 more fits exactly, and nothing after it.
    let (status, _, error) = chat(10).await;
    assert_eq!((status, &error["error"]["code"]), (402, &json!("budget_exceeded:key:usd_per_day")));
    assert_eq!(chat(9).await.0, 200);
    assert_eq!(chat(1).await.0, 402);
}

#[tokio::test]
async fn a_pool_answer_costs_its_gpu_slot_and_counts_only_when_configured() {
    let node = sim(SimKind::Vllm, LLAMA, |_| {}).await;
    let openai = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let pool = format!(
        "  - {{name: pool, kind: vllm, endpoints: [\"{}\"], model: {LLAMA}, max_running: 16, gpu_hourly_usd: '3.6'}}\n",
        node.base_url()
    );
    // A budget of nothing: no hosted request fits, and pool answers do not count.
    let budgets = "budgets: {count_self_hosted: false, keys: {BUDGET_KEY: {usd_per_day: '0'}}}";
    let text = yaml(&openai.base_url(), "").replace("tasks:\n", &format!("{pool}tasks:\n"))
        + "  - {name: local, backends: [pool], slo: {ttft_ms: 5000}}\n"
        + budgets;
    let router = router(&text, KEYS).await;
    let (status, headers, answer) =
        post(&router.url, "/v1/chat/completions", "sk-budget-key-2", &body("local", false)).await;
    assert_eq!(status, 200, "{answer}");
    // One of 16 slots of a $3.60/h node for the answer's time: $0.0000625 a second.
    let cost: Decimal = header(&headers, "x-spillway-cost-usd").unwrap().parse().unwrap();
    assert_eq!(answer["usage"]["spillway_cost_usd"], cost.to_string());
    assert!(cost > Decimal::ZERO && cost < Decimal::new(625, 6), "{cost} is not a slot for under 10 s");
    let (status, _, error) =
        post(&router.url, "/v1/chat/completions", "sk-budget-key-2", &body("t", false)).await;
    assert_eq!((status, &error["error"]["code"]), (402, &json!("budget_exceeded:key:usd_per_day")));
}

#[tokio::test]
async fn two_routers_sharing_redis_hold_one_budget_under_200_concurrent_requests() {
    let openai = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let run = prefix("concurrent");
    // $0.30 a day; every request's worst case (and actual cost) is $0.012: at most 25 fit.
    let extra = format!(
        "state: {{redis_url: \"{REDIS}\"}}\nbudgets: {{redis_timeout_ms: 2000, keys: {{BUDGET_KEY: {{usd_per_day: '0.3'}}}}}}"
    );
    let text = yaml(&openai.base_url(), &extra);
    let options = || spillway::app::Options { budget_prefix: Some(run.clone()), ..Default::default() };
    let one = router_with(&text, KEYS, options()).await;
    let two = router_with(&text, KEYS, options()).await;
    let requests = (0..200).map(|i| {
        let url = if i % 2 == 0 { one.url.clone() } else { two.url.clone() };
        async move { post(&url, "/v1/chat/completions", "sk-budget-key-2", &body("t", false)).await }
    });
    let answers = futures::future::join_all(requests).await;
    let mut served_cost = Decimal::ZERO;
    let (mut ok, mut refused) = (0, 0);
    for (status, headers, answer) in &answers {
        match status {
            200 => {
                ok += 1;
                served_cost += header(headers, "x-spillway-cost-usd").unwrap().parse::<Decimal>().unwrap();
            }
            402 => {
                refused += 1;
                assert_eq!(answer["error"]["code"], "budget_exceeded:key:usd_per_day");
            }
            other => panic!("{other}: {answer}"),
        }
    }
    assert_eq!(ok + refused, 200);
    // Settled spend as Redis holds it, read through a board of the same prefix.
    let board = BudgetBoard::new(
        &Default::default(),
        BudgetOptions { redis_url: Some(REDIS.into()), key_prefix: run.clone(), ..Default::default() },
    );
    assert!(board.wait_shared(std::time::Duration::from_secs(3)).await, "Redis at {REDIS} must be running");
    let scope = Scope { kind: ScopeKind::Key, name: "BUDGET_KEY".into() };
    let (day, month) = board.spent(&scope).await;
    let (limit, worst) = (Decimal::new(3, 1), Decimal::new(12, 3));
    assert_eq!(day, served_cost, "every answer's cost was settled, nothing else");
    assert_eq!(month, day);
    assert!(day <= limit && day > limit - worst, "settled {day} must be within {worst} under {limit}");
    assert_eq!(Decimal::from(ok) * worst, day);
    assert!(refused >= 175, "{refused} refused");
    cleanup(&run).await;
}

#[tokio::test]
async fn with_redis_down_budgets_fail_closed_and_rate_limits_open() {
    let openai = sim(SimKind::OpenAi, "gpt-5.6", |_| {}).await;
    let extra = "state: {redis_url: \"redis://127.0.0.1:1\"}\n\
                 budgets: {keys: {RPM_KEY: {rpm: 1}, BUDGET_KEY: {usd_per_day: '10'}}}";
    let router = router_with(&yaml(&openai.base_url(), extra), KEYS, fixed_clock(Some(prefix("down")))).await;
    let (status, _, error) =
        post(&router.url, "/v1/chat/completions", "sk-budget-key-2", &body("t", false)).await;
    assert_eq!(status, 503, "{error}");
    assert_eq!(error["error"]["code"], "budget_state_unavailable");
    assert!(error["error"]["message"]
        .as_str()
        .unwrap()
        .contains("budgets.when_redis_down.budgets is closed"));
    let (status, _, error) = post(&router.url, "/v1/messages", "sk-budget-key-2", &messages_body()).await;
    assert_eq!((status, &error["error"]["type"]), (529, &json!("overloaded_error")), "{error}");
    // Rate limits stay open: counted on this replica alone.
    assert_eq!(post(&router.url, "/v1/chat/completions", "sk-rpm-key-1", &body("t", false)).await.0, 200);
    let (status, headers, _) =
        post(&router.url, "/v1/chat/completions", "sk-rpm-key-1", &body("t", false)).await;
    assert_eq!((status, header(&headers, "retry-after")), (429, Some("30")));
    assert_eq!(post(&router.url, "/v1/chat/completions", "sk-free-key-3", &body("t", false)).await.0, 200);
    let text = metrics_text(&router.url).await;
    assert_eq!(series_sum(&text, "spillway_budget_shared_state_up", &[("store", "redis")]), Some(0.0));
}

async fn cleanup(prefix: &str) {
    let client = redis::Client::open(REDIS).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<String> =
        redis::cmd("KEYS").arg(format!("{prefix}:*")).query_async(&mut conn).await.unwrap();
    if !keys.is_empty() {
        let _: i64 = redis::cmd("DEL").arg(&keys).query_async(&mut conn).await.unwrap();
    }
}

#[tokio::test]
async fn a_crashed_replicas_reservations_lapse_in_redis() {
    use spillway::canonical::Principal;
    use spillway::guard::budget::{Ask, Limit, Refused};
    use std::sync::atomic::{AtomicU64, Ordering};
    let run = prefix("lapse");
    let now = Arc::new(AtomicU64::new(T0));
    let clock = {
        let now = Arc::clone(&now);
        Arc::new(move || now.load(Ordering::SeqCst))
    };
    let config: spillway::config::BudgetsConfig = serde_yaml_ng::from_str(
        "{reservation_ttl_secs: 10, keys: {TEAM_A: {concurrent: 1, usd_per_day: '1'}}}",
    )
    .unwrap();
    let options = || BudgetOptions {
        redis_url: Some(REDIS.into()),
        key_prefix: run.clone(),
        clock: clock.clone(),
        timeout: std::time::Duration::from_secs(2),
    };
    let (crashed, survivor) = (BudgetBoard::new(&config, options()), BudgetBoard::new(&config, options()));
    assert!(crashed.wait_shared(std::time::Duration::from_secs(3)).await, "Redis at {REDIS} must be running");
    assert!(survivor.wait_shared(std::time::Duration::from_secs(3)).await);
    let key = Principal::Static { env: "TEAM_A".into() };
    let ask = Ask { tokens: 10, worst_case: Decimal::new(4, 1) };
    // A replica reserves $0.40 and dies without settling.
    let held = crashed.admit(&key, &Default::default(), &ask).await.unwrap().unwrap();
    std::mem::forget(held);
    let refused = survivor.admit(&key, &Default::default(), &ask).await.err();
    assert_eq!(
        refused,
        Some(Refused::Over { scope: ScopeKind::Key, limit: Limit::Concurrent, retry_after_secs: 1 })
    );
    // Ten seconds on, its reservation has lapsed: the slot and the dollars are free again.
    now.fetch_add(10_001, Ordering::SeqCst);
    let again = survivor.admit(&key, &Default::default(), &ask).await.unwrap().unwrap();
    again.settle(Decimal::new(25, 2), Some(8)).await;
    let scope = Scope { kind: ScopeKind::Key, name: "TEAM_A".into() };
    assert_eq!(survivor.spent(&scope).await, (Decimal::new(25, 2), Decimal::new(25, 2)));
    cleanup(&run).await;
}
