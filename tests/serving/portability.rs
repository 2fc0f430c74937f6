//! Portability end to end: one OpenAI-style request with tools, images or a JSON schema, served
//! by the real router through the OpenAI, Anthropic and Gemini simulators, each answering in
//! its provider's own wire format (streamed tool-call arguments included).

use crate::common;

use std::collections::BTreeMap;

use common::*;
use serde_json::{json, Value};
use spillway::sim::{SimArgs, SimHandle, SimKind};

const ARGS: &str = r#"{"city": "Zürich", "days": 3}"#;
const AFTER_TOOL: &str = "It will be sunny in Zürich.";

/// The three hosted simulators, each calling tools with [`ARGS`] and otherwise answering
/// with `reply` (generated words when `None`).
struct Hosted {
    openai: SimHandle,
    anthropic: SimHandle,
    gemini: SimHandle,
}

impl Hosted {
    async fn start(reply: impl Fn(SimKind) -> Option<String>) -> Hosted {
        let tune = |kind: SimKind| {
            let reply = reply(kind);
            move |a: &mut SimArgs| {
                a.tool_call_args = Some(ARGS.to_string());
                a.reply = reply;
                a.ttft_ms = 10;
                a.tokens_per_sec = 2000.0;
            }
        };
        Hosted {
            openai: sim(SimKind::OpenAi, "gpt-4o", tune(SimKind::OpenAi)).await,
            anthropic: sim(SimKind::Anthropic, "claude-sonnet-4-5", tune(SimKind::Anthropic)).await,
            gemini: sim(SimKind::Gemini, "gemini-2.5-flash", tune(SimKind::Gemini)).await,
        }
    }

    /// Backends `openai`, `anthropic`, `gemini` (with extra keys each) and `tasks`.
    fn config(&self, extra: [&str; 3], tasks: &str) -> String {
        format!(
            r#"
backends:
  - {{name: openai, kind: openai, base_url: "{}/v1", model: gpt-4o{}}}
  - {{name: anthropic, kind: anthropic, base_url: "{}", model: claude-sonnet-4-5{}}}
  - {{name: gemini, kind: gemini, base_url: "{}/v1beta", model: gemini-2.5-flash{}}}
tasks:
{tasks}
dispatch: {{backoff_base_ms: 1, backoff_max_ms: 5}}
"#,
            self.openai.base_url(),
            extra[0],
            self.anthropic.base_url(),
            extra[1],
            self.gemini.base_url(),
            extra[2],
        )
    }
}

fn task(name: &str, backends: &str) -> String {
    format!("  - {{name: {name}, backends: [{backends}], slo: {{ttft_ms: 3000}}}}\n")
}

fn weather_tool() -> Value {
    json!([{"type": "function", "function": {
        "name": "get_weather",
        "description": "Weather forecast for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                       "required": ["city", "days"]},
    }}])
}

fn tool_request(task: &str, stream: bool) -> Value {
    json!({
        "model": task,
        "stream": stream,
        "messages": [{"role": "user", "content": "What is the weather in Zürich for 3 days?"}],
        "tools": weather_tool(),
    })
}

/// A tool call rebuilt from streamed chunks: id, name, arguments, number of argument pieces.
type StreamedCall = (String, String, String, usize);

/// The tool calls of a streamed answer, by index.
fn streamed_calls(s: &Streamed) -> BTreeMap<u64, StreamedCall> {
    let mut calls: BTreeMap<u64, StreamedCall> = BTreeMap::new();
    for chunk in s.chunks() {
        for call in chunk["choices"][0]["delta"]["tool_calls"].as_array().into_iter().flatten() {
            let entry = calls.entry(call["index"].as_u64().unwrap()).or_default();
            if let Some(id) = call["id"].as_str() {
                assert!(entry.0.is_empty(), "the id comes once: {call}");
                entry.0 = id.to_string();
            }
            if let Some(name) = call["function"]["name"].as_str() {
                entry.1.push_str(name);
            }
            let piece = call["function"]["arguments"].as_str().unwrap_or("");
            if !piece.is_empty() {
                entry.2.push_str(piece);
                entry.3 += 1;
            }
        }
    }
    calls
}

fn finish_reason(s: &Streamed) -> Option<String> {
    s.chunks().iter().find_map(|c| c["choices"][0]["finish_reason"].as_str().map(str::to_string))
}

#[tokio::test]
async fn a_tool_using_task_works_on_all_three_hosted_wire_formats() {
    let hosted = Hosted::start(|_| Some(AFTER_TOOL.to_string())).await;
    let tasks =
        [task("via-openai", "openai"), task("via-anthropic", "anthropic"), task("via-gemini", "gemini")];
    let router = router(&hosted.config(["", "", ""], &tasks.concat()), &[]).await;
    let want: Value = serde_json::from_str(ARGS).unwrap();
    for (task, backend) in
        [("via-openai", "openai"), ("via-anthropic", "anthropic"), ("via-gemini", "gemini")]
    {
        // Not streamed: one message with the whole call.
        let (status, headers, answer) = post_json(&router.url, &tool_request(task, false)).await;
        assert_eq!(status, 200, "{task}: {answer}");
        assert_eq!(headers["x-spillway-backend"], backend);
        let choice = &answer["choices"][0];
        assert_eq!(choice["finish_reason"], "tool_calls", "{task}: {answer}");
        assert_eq!(choice["message"]["content"], Value::Null, "{task}: {answer}");
        let calls = choice["message"]["tool_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 1, "{task}: {answer}");
        assert_eq!(calls[0]["type"], "function");
        assert_eq!(calls[0]["function"]["name"], "get_weather");
        let id = calls[0]["id"].as_str().unwrap().to_string();
        assert!(!id.is_empty(), "{task}: {answer}");
        let arguments = calls[0]["function"]["arguments"].as_str().unwrap();
        assert_eq!(serde_json::from_str::<Value>(arguments).unwrap(), want, "{task}: {arguments}");

        // Streamed: OpenAI chunks with the id and name first, then argument fragments.
        let s = post_stream(&router.url, &tool_request(task, true)).await;
        assert_eq!(s.status, 200, "{task}: {:?}", s.data);
        assert!(s.done(), "{task}: {:?}", s.data);
        assert_eq!(s.text(), "", "{task}: no text besides the call");
        let calls = streamed_calls(&s);
        assert_eq!(calls.len(), 1, "{task}: {:?}", s.data);
        let (id, name, arguments, pieces) = &calls[&0];
        assert!(!id.is_empty());
        assert_eq!(name, "get_weather");
        assert_eq!(serde_json::from_str::<Value>(arguments).unwrap(), want, "{task}: {arguments}");
        if backend != "gemini" {
            // OpenAI and Anthropic stream arguments in fragments; Gemini sends a call whole.
            assert!(*pieces > 1, "{task}: arguments came in {pieces} piece(s)");
        }
        assert_eq!(finish_reason(&s).as_deref(), Some("tool_calls"), "{task}");

        // The next turn carries the call and its result back; the model answers in text.
        let follow_up = json!({
            "model": task,
            "messages": [
                {"role": "user", "content": "What is the weather in Zürich for 3 days?"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": id, "type": "function", "function": {"name": "get_weather", "arguments": arguments}}]},
                {"role": "tool", "tool_call_id": id, "content": "{\"forecast\": \"sunny\"}"},
            ],
            "tools": weather_tool(),
        });
        let (status, _, answer) = post_json(&router.url, &follow_up).await;
        assert_eq!(status, 200, "{task}: {answer}");
        assert_eq!(answer["choices"][0]["message"]["content"], AFTER_TOOL, "{task}: {answer}");
        assert_eq!(answer["choices"][0]["finish_reason"], "stop", "{task}: {answer}");
    }
}

#[tokio::test]
async fn tool_choice_reaches_every_wire_format_and_bad_tool_shapes_are_refused_before_any() {
    let hosted = Hosted::start(|_| Some(AFTER_TOOL.to_string())).await;
    let tasks =
        [task("via-openai", "openai"), task("via-anthropic", "anthropic"), task("via-gemini", "gemini")];
    let router = router(&hosted.config(["", "", ""], &tasks.concat()), &[]).await;
    let mut tools = weather_tool();
    tools.as_array_mut().unwrap().push(json!({"type": "function", "function": {"name": "get_time"}}));
    let request = |task: &str, tools: &Value, choice: Value| {
        json!({"model": task, "messages": [{"role": "user", "content": "What time is it?"}],
               "tools": tools, "tool_choice": choice})
    };
    for task in ["via-openai", "via-anthropic", "via-gemini"] {
        // The second tool, by name: each provider is told to call exactly that one.
        let pick = json!({"type": "function", "function": {"name": "get_time"}});
        let (status, _, answer) = post_json(&router.url, &request(task, &tools, pick)).await;
        assert_eq!(status, 200, "{task}: {answer}");
        assert_eq!(
            answer["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "get_time",
            "{task}"
        );
        // `none`: no call at all.
        let (status, _, answer) = post_json(&router.url, &request(task, &tools, json!("none"))).await;
        assert_eq!(status, 200, "{task}: {answer}");
        assert_eq!(answer["choices"][0]["finish_reason"], "stop", "{task}: {answer}");
        assert!(answer["choices"][0]["message"].get("tool_calls").is_none(), "{task}: {answer}");

        // Shapes no provider could be given faithfully: the same 400 whichever backend serves.
        let mut garbage = tools.clone();
        garbage[0]["function"]["parameters"] = json!("garbage");
        for (body, param) in [
            (request(task, &garbage, json!("auto")), "tools[0].function.parameters"),
            (request(task, &tools, json!(42)), "tool_choice"),
            (request(task, &tools, json!("sometimes")), "tool_choice"),
            (request(task, &tools, json!({"type": "function"})), "tool_choice.function.name"),
            (
                request(task, &tools, json!({"type": "function", "function": {"name": "ghost"}})),
                "tool_choice.function.name",
            ),
        ] {
            let (status, _, answer) = post_json(&router.url, &body).await;
            assert_eq!(status, 400, "{task}: {body}: {answer}");
            assert_eq!(answer["error"]["param"], param, "{task}: {answer}");
            assert_eq!(answer["error"]["type"], "invalid_request_error", "{task}: {answer}");
        }
    }
}

fn schema_request(task: &str, stream: bool) -> Value {
    json!({
        "model": task,
        "stream": stream,
        "messages": [{"role": "user", "content": "Plan a trip: which city, how many days?"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "trip", "strict": true, "schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city", "days"], "additionalProperties": false}}},
    })
}

const GOOD: &str = r#"{"city": "Paris", "days": 3}"#;
const BAD: &str = r#"{"city": "Paris", "days": "three"}"#;

#[tokio::test]
async fn an_answer_that_breaks_the_schema_fails_over_before_anything_is_sent() {
    // Gemini and Anthropic answer with the wrong type; OpenAI answers correctly.
    let hosted =
        Hosted::start(|kind| Some(if kind == SimKind::OpenAi { GOOD } else { BAD }.to_string())).await;
    let tasks = [task("trip", "gemini, anthropic, openai"), task("bad-only", "gemini, anthropic")];
    let router = router(&hosted.config(["", "", ""], &tasks.concat()), &[]).await;

    let (status, headers, answer) = post_json(&router.url, &schema_request("trip", false)).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(headers["x-spillway-backend"], "openai");
    assert_eq!(headers["x-spillway-attempts"], "3");
    assert_eq!(answer["choices"][0]["message"]["content"], GOOD, "{answer}");

    let s = post_stream(&router.url, &schema_request("trip", true)).await;
    assert_eq!(s.status, 200, "{:?}", s.data);
    assert_eq!(s.header("x-spillway-backend"), Some("openai"));
    assert!(s.done());
    // Only the good answer reached the client, once: nothing of the rejected ones.
    assert_eq!(s.text(), GOOD);

    // When every backend breaks the schema, the client gets an error and no JSON.
    let (status, _, answer) = post_json(&router.url, &schema_request("bad-only", false)).await;
    assert_eq!(status, 503, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("gemini: invalid_output") && message.contains("anthropic: invalid_output"),
        "{message}"
    );

    // A JSON object without a schema: Anthropic's `BAD` is still valid JSON, so it serves.
    let mut object = schema_request("bad-only", false);
    object["response_format"] = json!({"type": "json_object"});
    object["model"] = json!("bad-only");
    let (status, headers, answer) = post_json(&router.url, &object).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(headers["x-spillway-attempts"], "1");
    assert_eq!(answer["choices"][0]["message"]["content"], BAD);

    // A schema that cannot compile is the client's mistake, refused before any call.
    let mut broken = schema_request("trip", false);
    broken["response_format"]["json_schema"]["schema"] = json!({"type": 12});
    let (status, _, answer) = post_json(&router.url, &broken).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["param"], "response_format.json_schema.schema", "{answer}");
}

#[tokio::test]
async fn a_prompt_that_fits_no_context_window_gets_400_naming_the_limit() {
    let hosted = Hosted::start(|_| None).await;
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tokenizer/tokenizer.json");
    let extra = [
        ", capabilities: {max_context: 500}",
        ", capabilities: {max_context: 300}",
        &format!(", tokenizer_file: \"{fixture}\", capabilities: {{max_context: 200}}"),
    ];
    let router = router(&hosted.config(extra, &task("long", "openai, anthropic, gemini")), &[]).await;
    let short =
        json!({"model": "long", "messages": [{"role": "user", "content": "hello world"}], "max_tokens": 20});
    let (status, headers, answer) = post_json(&router.url, &short).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(headers["x-spillway-backend"], "openai");

    let long = json!({
        "model": "long",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "The quick brown fox jumps over the lazy dog. ".repeat(60)}],
    });
    let (status, _, answer) = post_json(&router.url, &long).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["code"], "context_length_exceeded", "{answer}");
    assert_eq!(answer["error"]["type"], "invalid_request_error");
    let message = answer["error"]["message"].as_str().unwrap();
    // Counted with OpenAI's exact o200k_base, the largest window (500) is openai's.
    let request: spillway::canonical::ChatRequest = spillway::canonical::ChatRequest {
        messages: vec![spillway::canonical::Message::new(
            spillway::canonical::Role::User,
            "The quick brown fox jumps over the lazy dog. ".repeat(60),
        )]
        .into(),
        ..Default::default()
    };
    let needed = spillway::tokens::TokenCounter::O200kBase.count_request(&request) + 100;
    assert!(needed > 500, "{needed}");
    assert!(message.contains("the largest context among eligible backends is 500 (openai)"), "{message}");
    assert!(
        message.contains(&format!("{needed} tokens")) || message.contains(&thousands(needed)),
        "{message}"
    );

    // Gemini alone counts with the model's own tokenizer.json: exact, so the limit is exact too.
    let router2 = common::router(&hosted.config(extra, &task("gem", "gemini")), &[]).await;
    let counter = spillway::tokens::TokenCounter::File(std::sync::Arc::new(
        spillway::tokens::FileTokenizer::load(std::path::Path::new(fixture)).unwrap(),
    ));
    let text = "hello world ".repeat(8);
    let request = spillway::canonical::ChatRequest {
        messages: vec![spillway::canonical::Message::new(spillway::canonical::Role::User, text.clone())]
            .into(),
        ..Default::default()
    };
    let prompt = counter.count_request(&request);
    assert!(prompt < 200, "{prompt}");
    let fits = |max_tokens: u32| json!({"model": "gem", "max_tokens": max_tokens, "messages": [{"role": "user", "content": text}]});
    let (status, _, answer) = post_json(&router2.url, &fits(200 - prompt)).await;
    assert_eq!(status, 200, "{answer}");
    let (status, _, answer) = post_json(&router2.url, &fits(200 - prompt + 1)).await;
    assert_eq!(status, 400, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("needs 201 tokens") && message.contains("is 200 (gemini)"), "{message}");
}

fn thousands(n: u32) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[tokio::test]
async fn capabilities_filter_the_plan() {
    let hosted = Hosted::start(|_| Some("A cat on a mat.".to_string())).await;
    let extra = [", capabilities: {tools: false, vision: false}", "", ", capabilities: {tools: false}"];
    let tasks = [
        task("chain", "openai, anthropic"),
        task("no-tools", "openai, gemini"),
        task("look", "openai, gemini"),
    ];
    let router = router(&hosted.config(extra, &tasks.concat()), &[]).await;

    // Without tools openai serves; with tools it is skipped, not tried and failed.
    let plain = json!({"model": "chain", "messages": [{"role": "user", "content": "hi"}]});
    let (status, headers, _) = post_json(&router.url, &plain).await;
    assert_eq!(status, 200);
    assert_eq!(headers["x-spillway-backend"], "openai");
    let s = post_stream(&router.url, &tool_request("chain", true)).await;
    assert_eq!(s.status, 200, "{:?}", s.data);
    assert_eq!(s.header("x-spillway-backend"), Some("anthropic"));
    assert_eq!(s.header("x-spillway-attempts"), Some("1"));
    assert_eq!(streamed_calls(&s)[&0].1, "get_weather");

    // No backend of the task has tools: 400 naming the capability.
    let (status, _, answer) = post_json(&router.url, &tool_request("no-tools", false)).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["code"], "unsupported_capability", "{answer}");
    assert_eq!(answer["error"]["param"], "tools");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("openai: no `tools` capability") && message.contains("gemini: no `tools`"),
        "{message}"
    );

    // An image goes to the backend with vision.
    let image = json!({"model": "look", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is in this picture?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]}]});
    let (status, headers, answer) = post_json(&router.url, &image).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(headers["x-spillway-backend"], "gemini");
    assert_eq!(answer["choices"][0]["message"]["content"], "A cat on a mat.");
}

#[tokio::test]
async fn a_tool_call_that_has_started_is_never_retried_elsewhere() {
    // OpenAI starts the call, then the connection drops; Anthropic would answer fine.
    let openai = sim(SimKind::OpenAi, "gpt-4o", |a| {
        a.tool_call_args = Some(ARGS.to_string());
        a.drop_after = Some(2);
    })
    .await;
    let anthropic =
        sim(SimKind::Anthropic, "claude-sonnet-4-5", |a| a.tool_call_args = Some(ARGS.to_string())).await;
    let config = format!(
        r#"
backends:
  - {{name: openai, kind: openai, base_url: "{}/v1", model: gpt-4o}}
  - {{name: anthropic, kind: anthropic, base_url: "{}", model: claude-sonnet-4-5}}
tasks:
{}
"#,
        openai.base_url(),
        anthropic.base_url(),
        task("t", "openai, anthropic"),
    );
    let router = router(&config, &[]).await;
    let s = post_stream(&router.url, &tool_request("t", true)).await;
    assert_eq!(s.status, 200, "{:?}", s.data);
    assert_eq!(s.header("x-spillway-backend"), Some("openai"));
    assert_eq!(s.header("x-spillway-attempts"), Some("1"), "committed at the first tool-call delta");
    let calls = streamed_calls(&s);
    assert_eq!(calls.len(), 1, "one call, from one backend: {:?}", s.data);
    assert_eq!(calls[&0].1, "get_weather");
    assert!(!s.done(), "a broken answer does not end with [DONE]: {:?}", s.data);
    let last: Value = serde_json::from_str(s.data.last().unwrap()).unwrap();
    assert!(last["error"].is_object(), "it ends with an in-band error: {last}");
    assert!(finish_reason(&s).is_none(), "{:?}", s.data);
}
