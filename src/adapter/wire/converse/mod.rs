//! Amazon Bedrock's Converse API, for the models Bedrock serves that are not Claude (Llama,
//! Mistral, Nova, ...): `POST {base}/model/{model}/converse`, or `/converse-stream`, whose
//! events come in event-stream frames named by their `:event-type` ([`crate::adapter::transport::eventstream`]).
//!
//! The system prompt goes to `system`, limits to `inferenceConfig`, tools to `toolConfig`
//! (Bedrock requires one whenever the history holds tool use or results, so a request with
//! such a history and no tools declares the tools it used, with an open schema), tool results
//! into user turns, and turns of one role are merged. For the models that cache prompts (Nova,
//! Claude) the task's cache placement becomes `cachePoint` blocks, at most four, after the
//! tools, the system prompt and the last user turns. A stream sends no `contentBlockStart`
//! for text and reasoning (blocks are known by `contentBlockIndex`), and its `metadata` event,
//! with the usage, comes after `messageStop`.

use std::collections::HashMap;

use reqwest::header::{ACCEPT, CONTENT_TYPE};
use serde_json::{json, Map, Value};

use crate::adapter::transport::http::{self, StreamParser};
use crate::adapter::{system_turn, Call, EventStream, Transport};
use crate::canonical::{
    CachePlacement, ChatRequest, ErrorClass, Event, FinishReason, Image, Role, ToolChoice, UpstreamError,
    Usage, MAX_BREAKPOINTS,
};

pub(in crate::adapter) async fn send(
    transport: &Transport,
    call: &Call<'_>,
    req: &ChatRequest,
) -> Result<EventStream, UpstreamError> {
    let verb = if call.stream { "converse-stream" } else { "converse" };
    let base = call.upstream.base_url.trim_end_matches('/');
    let url = format!("{base}/model/{}/{verb}", crate::config::path_segment(call.model));
    let mut headers = vec![(CONTENT_TYPE, "application/json".to_string())];
    if call.stream {
        headers.push((ACCEPT, crate::adapter::transport::eventstream::CONTENT_TYPE.to_string()));
    }
    let body = request_body(req, call).to_string().into_bytes();
    call.upstream.authenticate(&url, &mut headers, &body).await?;
    let answer =
        http::post(transport, &url, &headers, body, crate::adapter::provider::bedrock::errors::classify)
            .await?;
    let answer = crate::adapter::transport::eventstream::unframed(answer);
    Ok(http::answer_events(answer, call.stream, ConverseStream::default(), parse_response))
}

/// The Converse request body for `call` of `req` (the model and verb are in the URL).
pub(crate) fn request_body(req: &ChatRequest, call: &Call) -> Value {
    let mut body = Map::new();
    body.insert("messages".into(), Value::Array(messages(req, call)));
    if let Some(system) = call.system_prompt(req) {
        body.insert("system".into(), json!([{"text": system}]));
    }
    let mut config = Map::new();
    if let Some(max_tokens) = req.max_tokens {
        config.insert("maxTokens".into(), json!(max_tokens));
    }
    if let Some(temperature) = req.temperature {
        config.insert("temperature".into(), json!(temperature));
    }
    if let Some(top_p) = req.top_p {
        config.insert("topP".into(), json!(top_p));
    }
    if !req.stop.is_empty() {
        config.insert("stopSequences".into(), json!(req.stop));
    }
    if !config.is_empty() {
        body.insert("inferenceConfig".into(), Value::Object(config));
    }
    if let Some(tools) = tool_config(req) {
        body.insert("toolConfig".into(), tools);
    }
    if let Some(placement) = call.cache_placement.as_ref().filter(|_| caches_prompts(call.model)) {
        place_cache_points(&mut body, placement);
    }
    Value::Object(body)
}

/// Whether Bedrock caches prompts for `model` (Amazon Nova, Claude); `cachePoint` blocks are
/// refused for the others.
fn caches_prompts(model: &str) -> bool {
    ["nova", "claude", "anthropic"].iter().any(|family| model.contains(family))
}

/// A `cachePoint` after the tools, the system prompt and the last user turns, as `placement`
/// says, at most [`MAX_BREAKPOINTS`] in all.
fn place_cache_points(body: &mut Map<String, Value>, placement: &CachePlacement) {
    let point = || json!({"cachePoint": {"type": "default"}});
    let mut budget = MAX_BREAKPOINTS;
    if placement.tools {
        if let Some(Value::Array(tools)) = body.get_mut("toolConfig").and_then(|c| c.get_mut("tools")) {
            tools.push(point());
            budget -= 1;
        }
    }
    if placement.system {
        if let Some(Value::Array(system)) = body.get_mut("system") {
            system.push(point());
            budget -= 1;
        }
    }
    let turns = usize::from(placement.last_turns.min(budget));
    if let Some(Value::Array(messages)) = body.get_mut("messages") {
        let users = messages.iter_mut().rev().filter(|m| m["role"] == "user").take(turns);
        for message in users {
            if let Some(Value::Array(content)) = message.get_mut("content") {
                content.push(point());
            }
        }
    }
}

/// `toolConfig`: the request's tools and choice; else, when the history holds tool calls, the
/// tools it called (Bedrock refuses such a history without a tool configuration).
fn tool_config(req: &ChatRequest) -> Option<Value> {
    let spec = |name: &str, description: Option<&str>, schema: &Value| {
        let schema = if schema.is_object() { schema.clone() } else { json!({"type": "object"}) };
        let mut spec = json!({"name": name, "inputSchema": {"json": schema}});
        if let Some(description) = description {
            spec["description"] = json!(description);
        }
        json!({"toolSpec": spec})
    };
    if !req.tools.is_empty() && req.tool_choice != Some(ToolChoice::None) {
        let tools: Vec<Value> =
            req.tools.iter().map(|t| spec(&t.name, t.description.as_deref(), &t.parameters)).collect();
        let mut config = json!({"tools": tools});
        match &req.tool_choice {
            Some(ToolChoice::Required) => config["toolChoice"] = json!({"any": {}}),
            Some(ToolChoice::Function(name)) => config["toolChoice"] = json!({"tool": {"name": name}}),
            _ => {}
        }
        return Some(config);
    }
    let mut used: Vec<&str> =
        req.messages.iter().flat_map(|m| &m.tool_calls).map(|c| c.name.as_str()).collect();
    used.dedup();
    (!used.is_empty())
        .then(|| json!({"tools": used.iter().map(|n| spec(n, None, &Value::Null)).collect::<Vec<_>>()}))
}

/// The conversation after the system prompt, turns of one role merged (tool results are a
/// user's turn; a later system message a user turn at its place).
fn messages(req: &ChatRequest, call: &Call) -> Vec<Value> {
    let mut out: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for m in call.turns(req) {
        let text = |t: &str| (!t.is_empty()).then(|| json!({"text": t}));
        let (role, blocks): (&'static str, Vec<Value>) = match m.role {
            Role::System => ("user", text(&system_turn(&m.content)).into_iter().collect()),
            Role::User => {
                let mut blocks: Vec<Value> = text(&m.content).into_iter().collect();
                blocks.extend(m.images.iter().filter_map(image_block));
                ("user", blocks)
            }
            Role::Assistant => {
                let mut blocks: Vec<Value> = text(&m.content).into_iter().collect();
                for c in &m.tool_calls {
                    let input = serde_json::from_str::<Value>(&c.arguments).ok().filter(Value::is_object);
                    let input = input.unwrap_or_else(|| json!({}));
                    blocks.push(json!({"toolUse": {"toolUseId": c.id, "name": c.name, "input": input}}));
                }
                ("assistant", blocks)
            }
            Role::Tool => {
                let id = m.tool_call_id.clone().unwrap_or_default();
                let content = match serde_json::from_str::<Value>(&m.content) {
                    Ok(json) if json.is_object() => json!({"json": json}),
                    _ => json!({"text": m.content}),
                };
                ("user", vec![json!({"toolResult": {"toolUseId": id, "content": [content]}})])
            }
        };
        if blocks.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some((last, last_blocks)) if *last == role => last_blocks.extend(blocks),
            _ => out.push((role, blocks)),
        }
    }
    out.into_iter().map(|(role, content)| json!({"role": role, "content": content})).collect()
}

/// An inline image as Converse takes it (format and base64 bytes); Converse reads no address.
fn image_block(image: &Image) -> Option<Value> {
    let (media_type, data) = image.inline_data()?;
    let format = media_type.strip_prefix("image/")?;
    Some(json!({"image": {"format": format, "source": {"bytes": data}}}))
}

fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
        "tool_use" => FinishReason::ToolCalls,
        "guardrail_intervened" | "content_filtered" => FinishReason::ContentFilter,
        _ => FinishReason::Stop,
    }
}

/// Converse's `inputTokens` leaves cache reads and writes out, as Anthropic's does.
fn usage(u: &Value) -> Usage {
    let read = http::as_u32(u.get("cacheReadInputTokens"));
    let written = http::as_u32(u.get("cacheWriteInputTokens"));
    Usage {
        input_tokens: http::as_u32(u.get("inputTokens")).saturating_add(read).saturating_add(written),
        cached_input_tokens: read,
        output_tokens: http::as_u32(u.get("outputTokens")),
        cache_write_tokens: written,
    }
}

/// Every event of a non-streamed Converse answer.
pub(in crate::adapter) fn parse_response(body: &Value) -> Result<Vec<Event>, UpstreamError> {
    let content = body.pointer("/output/message/content").and_then(Value::as_array).ok_or_else(|| {
        UpstreamError::new(ErrorClass::StreamBroken, None, "the Converse answer has no output message")
    })?;
    let mut events = Vec::new();
    let mut tools = 0;
    for block in content {
        if let Some(text) = block.get("text").and_then(Value::as_str).filter(|t| !t.is_empty()) {
            events.push(Event::TextDelta(text.to_string()));
        } else if let Some(text) =
            block.pointer("/reasoningContent/reasoningText/text").and_then(Value::as_str)
        {
            events.push(Event::ReasoningDelta(text.to_string()));
        } else if let Some(tool) = block.get("toolUse") {
            events.push(Event::ToolCallDelta {
                index: tools,
                id: tool.get("toolUseId").and_then(Value::as_str).map(str::to_string),
                name: tool.get("name").and_then(Value::as_str).map(str::to_string),
                arguments: tool.get("input").unwrap_or(&json!({})).to_string(),
            });
            tools += 1;
        }
    }
    if let Some(u) = body.get("usage").filter(|u| u.is_object()) {
        events.push(Event::Usage(usage(u)));
    }
    events.push(Event::Finish(finish_reason(
        body.get("stopReason").and_then(Value::as_str).unwrap_or("end_turn"),
    )));
    Ok(events)
}

/// Parser state of one ConverseStream answer.
#[derive(Debug, Default)]
pub(crate) struct ConverseStream {
    /// Content block index → canonical tool call index.
    tool_blocks: HashMap<u64, u32>,
    finish: Option<FinishReason>,
    done: bool,
}

impl StreamParser for ConverseStream {
    fn on_event(&mut self, event: &str, data: &str) -> Result<Vec<Event>, UpstreamError> {
        let payload: Value = serde_json::from_str(data).map_err(|e| http::malformed(data, &e))?;
        let index = payload.get("contentBlockIndex").and_then(Value::as_u64).unwrap_or(0);
        let mut events = Vec::new();
        match event {
            "contentBlockStart" => {
                if let Some(tool) = payload.pointer("/start/toolUse") {
                    let tool_index = self.tool_blocks.len() as u32;
                    self.tool_blocks.insert(index, tool_index);
                    events.push(Event::ToolCallDelta {
                        index: tool_index,
                        id: tool.get("toolUseId").and_then(Value::as_str).map(str::to_string),
                        name: tool.get("name").and_then(Value::as_str).map(str::to_string),
                        arguments: String::new(),
                    });
                }
            }
            "contentBlockDelta" => {
                let delta = &payload["delta"];
                if let Some(text) = delta.get("text").and_then(Value::as_str).filter(|t| !t.is_empty()) {
                    events.push(Event::TextDelta(text.to_string()));
                } else if let Some(text) = delta.pointer("/reasoningContent/text").and_then(Value::as_str) {
                    events.push(Event::ReasoningDelta(text.to_string()));
                } else if let Some(input) = delta.pointer("/toolUse/input").and_then(Value::as_str) {
                    if let (Some(&tool_index), false) = (self.tool_blocks.get(&index), input.is_empty()) {
                        let arguments = input.to_string();
                        events.push(Event::ToolCallDelta {
                            index: tool_index,
                            id: None,
                            name: None,
                            arguments,
                        });
                    }
                }
            }
            "messageStop" => {
                let reason = payload.get("stopReason").and_then(Value::as_str).unwrap_or("end_turn");
                self.finish = Some(finish_reason(reason));
            }
            // The usage, after messageStop: the answer is whole.
            "metadata" => {
                if let Some(u) = payload.get("usage").filter(|u| u.is_object()) {
                    events.push(Event::Usage(usage(u)));
                }
                if let Some(finish) = self.finish.take() {
                    events.push(Event::Finish(finish));
                    self.done = true;
                }
            }
            // messageStart, contentBlockStop, and event types added later.
            _ => {}
        }
        Ok(events)
    }

    fn is_closed(&self) -> bool {
        self.done
    }

    fn on_end(&mut self) -> Result<Vec<Event>, UpstreamError> {
        match self.finish.take() {
            // A stream may end after messageStop without its metadata.
            Some(finish) if !self.done => Ok(vec![Event::Finish(finish)]),
            _ if self.done => Ok(Vec::new()),
            _ => Err(http::truncated("messageStop")),
        }
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
