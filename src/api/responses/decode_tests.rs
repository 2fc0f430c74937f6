use super::*;
use crate::canonical::{Dialect, Image, ResponseFormat, ToolCall};
use serde_json::json;

fn read(body: impl AsRef<[u8]>) -> Result<ResponsesRequest, ApiError> {
    decode(&bytes::Bytes::copy_from_slice(body.as_ref()))
}

fn canonical(body: Value) -> Result<ChatRequest, ApiError> {
    let request = read(body.to_string())?;
    request.to_canonical(Some(100), &request.toolset()?, false)
}

/// The refusal of `body`: always a 400, with its `param` and `code`.
fn refusal(body: Value) -> (String, Option<&'static str>) {
    let error = canonical(body.clone()).expect_err(&format!("accepted: {body}"));
    assert_eq!(error.status, 400, "{error:?}");
    (error.param.clone().unwrap_or_default(), error.code.as_str())
}

fn with_input(input: Value) -> Value {
    json!({"model": "t", "input": input})
}

#[test]
fn a_string_input_is_one_user_message_after_the_instructions() {
    let request = canonical(json!({"model": "t", "input": "hello", "instructions": "be brief",
                                   "max_output_tokens": 500, "temperature": 0.5, "stream": true}))
    .unwrap();
    assert_eq!(
        request.messages,
        vec![Message::new(Role::System, "be brief"), Message::new(Role::User, "hello")]
    );
    assert_eq!(request.max_tokens, Some(100), "capped by the task");
    assert_eq!(request.temperature, Some(0.5));
    assert!(request.stream);
    assert!(request.relay, "OpenAI's own events are relayed as they come");
    let uncapped = read(br#"{"model": "t", "input": "hi", "max_output_tokens": 20}"#).unwrap();
    let tools = uncapped.toolset().unwrap();
    assert_eq!(uncapped.to_canonical(Some(100), &tools, false).unwrap().max_tokens, Some(20));
    assert_eq!(uncapped.to_canonical(None, &tools, false).unwrap().max_tokens, Some(20));
}

#[test]
fn every_item_type_becomes_its_message() {
    let request = canonical(with_input(json!([
        {"type": "message", "role": "developer", "content": "rules"},
        {"role": "user", "content": [
            {"type": "input_text", "text": "look at "},
            {"type": "input_text", "text": "this"},
            {"type": "input_image", "image_url": "https://x.test/cat.png", "detail": "low"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "checking"}]},
        {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": "{\"q\":1}"},
        {"type": "function_call", "call_id": "call_2", "name": "lookup", "arguments": "{\"q\":2}"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call_output", "call_id": "call_1", "output": "one"},
        {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "two"}]},
        {"type": "function_call", "call_id": "call_3", "name": "lookup", "arguments": "{}"},
        {"role": "system", "content": "late system"},
    ])))
    .unwrap();
    let call =
        |id: &str, args: &str| ToolCall { id: id.into(), name: "lookup".into(), arguments: args.into() };
    let tool =
        |id: &str, text: &str| Message { tool_call_id: Some(id.into()), ..Message::new(Role::Tool, text) };
    let image = Image { url: "https://x.test/cat.png".into(), detail: Some("low".into()) };
    assert_eq!(
        request.messages,
        vec![
            Message::new(Role::System, "rules"),
            Message { images: vec![image], ..Message::new(Role::User, "look at this") },
            Message {
                tool_calls: vec![call("call_1", "{\"q\":1}"), call("call_2", "{\"q\":2}")],
                ..Message::new(Role::Assistant, "checking")
            },
            tool("call_1", "one"),
            tool("call_2", "two"),
            Message { tool_calls: vec![call("call_3", "{}")], ..Message::new(Role::Assistant, "") },
            Message::new(Role::System, "late system"),
        ]
    );
}

#[test]
fn tools_choice_and_format_map_to_the_canonical_request() {
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
    let request = canonical(json!({
        "model": "t", "input": "hi",
        "tools": [{"type": "function", "name": "lookup", "description": "find", "strict": true,
                   "parameters": {"type": "object", "properties": {}}}],
        "tool_choice": {"type": "function", "name": "lookup"},
        "text": {"format": {"type": "json_schema", "name": "city", "schema": schema, "strict": true}},
        "parallel_tool_calls": false, "metadata": {"k": "v"}, "user": "u1", "store": false,
        "prompt_cache_key": "pck-1",
    }))
    .unwrap();
    assert_eq!(request.tools.len(), 1);
    assert_eq!(
        (request.tools[0].name.as_str(), request.tools[0].description.as_deref()),
        ("lookup", Some("find"))
    );
    assert_eq!(request.tool_choice, Some(ToolChoice::Function("lookup".into())));
    assert_eq!(request.user.as_deref(), Some("u1"), "`user` is forwarded");
    assert_eq!(request.prompt_cache_key.as_deref(), Some("pck-1"));
    assert_eq!(
        request.response_format,
        ResponseFormat::JsonSchema { name: "city".into(), schema, strict: true }
    );
    for (choice, expected) in
        [("auto", ToolChoice::Auto), ("none", ToolChoice::None), ("required", ToolChoice::Required)]
    {
        let request = canonical(json!({"model": "t", "input": "hi", "tool_choice": choice,
                                       "tools": [{"type": "function", "name": "f"}]}))
        .unwrap();
        assert_eq!(request.tool_choice, Some(expected));
    }
    let json_mode =
        canonical(json!({"model": "t", "input": "hi", "text": {"format": {"type": "json_object"}}})).unwrap();
    assert_eq!(json_mode.response_format, ResponseFormat::JsonObject);
    let no_tools = canonical(json!({"model": "t", "input": "hi", "tool_choice": "auto"})).unwrap();
    assert_eq!(no_tools.tool_choice, None, "`auto` without tools says nothing");
}

#[test]
fn the_echo_repeats_the_settings() {
    let request = read(br#"{"model": "t", "input": "hi", "instructions": "be brief", "temperature": 0.2,
        "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}], "metadata": {"k": "v"}}"#)
    .unwrap();
    let echo = Value::Object(crate::api::responses::object::echo(&request));
    assert_eq!(echo["instructions"], "be brief");
    assert_eq!(echo["temperature"], 0.2);
    assert_eq!(echo["tools"][0]["name"], "f");
    assert_eq!(echo["tool_choice"], "auto");
    assert_eq!(echo["parallel_tool_calls"], true);
    assert_eq!(echo["text"]["format"], json!({"type": "text"}));
    assert_eq!(echo["metadata"], json!({"k": "v"}));
    assert_eq!(echo["store"], false);
}

#[test]
fn state_is_refused_naming_its_field() {
    let stateful = [
        (json!({"store": true}), "store"),
        (json!({"previous_response_id": "resp_1"}), "previous_response_id"),
        (json!({"conversation": "conv_1"}), "conversation"),
        (json!({"background": true}), "background"),
    ];
    for (extra, param) in stateful {
        let mut body = with_input(json!("hi"));
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        let error = canonical(body).unwrap_err();
        assert_eq!(error.param.as_deref(), Some(param));
        assert!(error.message.contains("stateless"), "{}", error.message);
    }
}

#[test]
fn each_bad_input_names_its_param() {
    let cases = [
        (json!({"model": "t"}), "input", Some("missing_field")),
        (with_input(json!(3)), "input", Some("invalid_type")),
        (with_input(json!([])), "input", Some("invalid_value")),
        (
            with_input(
                json!([{"type": "message", "role": "user", "content": "a"}, {"type": "web_search_call"}]),
            ),
            "input[1].type",
            Some("invalid_value"),
        ),
        (
            with_input(json!([{"type": "item_reference", "id": "msg_1"}])),
            "input[0].type",
            Some("invalid_value"),
        ),
        (with_input(json!([{"content": "no role, no type"}])), "input[0].type", Some("missing_field")),
        (with_input(json!(["just a string"])), "input[0]", Some("invalid_type")),
        (
            with_input(json!([{"type": "function_call_output", "call_id": "call_9", "output": "x"}])),
            "input[0].call_id",
            Some("invalid_value"),
        ),
        (
            with_input(json!([{"type": "function_call", "call_id": "c", "name": "f"}])),
            "input[0].arguments",
            Some("missing_field"),
        ),
        (with_input(json!([{"role": "robot", "content": "x"}])), "input[0].role", Some("invalid_value")),
        (with_input(json!([{"role": "user"}])), "input[0].content", Some("missing_field")),
        (with_input(json!([{"role": "user", "content": 5}])), "input[0].content", Some("invalid_type")),
        (
            with_input(json!([{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}])),
            "input[0].content[0].type",
            Some("invalid_value"),
        ),
        (
            with_input(json!([{"role": "user", "content": [{"type": "input_text"}]}])),
            "input[0].content[0].text",
            Some("missing_field"),
        ),
        (
            with_input(
                json!([{"role": "assistant", "content": [{"type": "input_image", "image_url": "https://x.test/a.png"}]}]),
            ),
            "input[0].content[0]",
            Some("invalid_value"),
        ),
        (
            with_input(
                json!([{"role": "user", "content": [{"type": "input_image", "image_url": "ftp://x"}]}]),
            ),
            "input[0].content[0].image_url",
            Some("invalid_value"),
        ),
        (
            with_input(json!([{"role": "user", "content": [{"type": "input_image", "file_id": "file_1"}]}])),
            "input[0].content[0].file_id",
            Some("invalid_value"),
        ),
        (
            json!({"model": "t", "input": "hi", "tools": [{"type": "functoin", "name": "f"}]}),
            "tools[0].type",
            Some("invalid_value"),
        ),
        (
            json!({"model": "t", "input": "hi", "tools": [{"type": "function"}]}),
            "tools[0].name",
            Some("missing_field"),
        ),
        (
            json!({"model": "t", "input": "hi", "tools": [{"name": "f"}]}),
            "tools[0].type",
            Some("missing_field"),
        ),
        (
            json!({"model": "t", "input": "hi", "tools": [{"type": "function", "name": "f", "parameters": 3}]}),
            "tools[0].parameters",
            Some("invalid_value"),
        ),
        (
            json!({"model": "t", "input": "hi", "tools": [{"type": "function", "name": "f"}, {"type": "function", "name": "f"}]}),
            "tools[1].name",
            Some("invalid_value"),
        ),
        (
            json!({"model": "t", "input": "hi", "tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": "function", "name": "g"}}),
            "tool_choice.name",
            Some("invalid_value"),
        ),
        (
            json!({"model": "t", "input": "hi", "tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": "file_search"}}),
            "tool_choice.type",
            Some("invalid_value"),
        ),
        (
            json!({"model": "t", "input": "hi", "tool_choice": "required"}),
            "tool_choice",
            Some("invalid_value"),
        ),
        (
            json!({"model": "t", "input": "hi", "text": {"format": {"type": "json_schema", "name": "x"}}}),
            "text.format.schema",
            Some("invalid_value"),
        ),
        (
            json!({"model": "t", "input": "hi", "text": {"format": {"type": "json_schema", "schema": {}}}}),
            "text.format.name",
            Some("invalid_value"),
        ),
        (
            json!({"model": "t", "input": "hi", "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": 5}}}}),
            "text.format.schema",
            Some("invalid_value"),
        ),
        (
            json!({"model": "t", "input": "hi", "text": {"format": {"type": "xml"}}}),
            "text.format.type",
            Some("invalid_value"),
        ),
        (json!({"model": "t", "input": "hi", "temperature": 3}), "temperature", Some("invalid_value")),
        (json!({"model": "t", "input": "hi", "top_p": 2}), "top_p", Some("invalid_value")),
        (
            json!({"model": "t", "input": "hi", "max_output_tokens": 0}),
            "max_output_tokens",
            Some("invalid_value"),
        ),
        (
            json!({"model": "t", "input": "hi", "max_output_tokens": "ten"}),
            "max_output_tokens",
            Some("invalid_type"),
        ),
        (json!({"model": 7, "input": "hi"}), "model", Some("invalid_type")),
        (json!({"input": "hi"}), "model", Some("missing_field")),
    ];
    for (body, param, code) in cases {
        assert_eq!(refusal(body.clone()), (param.to_string(), code), "{body}");
    }
    let error =
        canonical(json!({"model": "t", "input": "hi", "text": {"format": {"type": "xml"}}})).unwrap_err();
    assert!(error.message.contains("text.format"), "Responses' names in the message: {}", error.message);
}

#[test]
fn the_cores_refusals_are_said_in_responses_terms() {
    let core = |param: &str| ApiError::new(ErrorCode::UnsupportedCapability, "no backend").param(param);
    assert_eq!(in_responses_terms(core("messages")).param.as_deref(), Some("input"));
    assert_eq!(in_responses_terms(core("response_format")).param.as_deref(), Some("text.format"));
    assert_eq!(in_responses_terms(core("tools")).param.as_deref(), Some("tools"));
    assert_eq!(in_responses_terms(core("messages")).code, ErrorCode::UnsupportedCapability);
}

#[test]
fn pinned_to_openai_the_state_passes_and_the_body_is_kept() {
    let body = json!({"model": "t", "previous_response_id": "resp_1", "store": true, "include": ["x"],
        "input": [{"type": "item_reference", "id": "msg_1"},
                  {"type": "function_call_output", "call_id": "call_stored", "output": "42"}]});
    let request = read(body.to_string().as_bytes()).unwrap();
    let refusal = request.needs_openai_state().expect("it leans on stored state");
    assert_eq!(refusal.param.as_deref(), Some("store"));
    assert!(refusal.message.contains("first backend is OpenAI"), "{}", refusal.message);
    let pinned = request.to_canonical(Some(100), &request.toolset().unwrap(), true).unwrap();
    assert!(pinned.relay);
    let native = pinned.native.expect("the client's body");
    assert_eq!(native.dialect, Dialect::OpenAiResponses);
    assert_eq!(native.body.tree(), body);
    assert_eq!(
        pinned.messages,
        vec![Message { tool_call_id: Some("call_stored".into()), ..Message::new(Role::Tool, "42") }]
    );

    // Each field alone is what pins; `background` is refused even pinned.
    let reference = with_input(json!([{"type": "item_reference", "id": "msg_1"}]));
    let only_reference = read(reference.to_string().as_bytes()).unwrap();
    assert_eq!(only_reference.needs_openai_state().unwrap().param.as_deref(), Some("input[0].type"));
    assert!(read(with_input(json!("hi")).to_string().as_bytes()).unwrap().needs_openai_state().is_none());
    let background = json!({"model": "t", "input": "hi", "store": true, "background": true});
    let error = read(background.to_string().as_bytes())
        .unwrap()
        .to_canonical(None, &Default::default(), true)
        .unwrap_err();
    assert_eq!(error.param.as_deref(), Some("background"));
}

#[test]
fn codexs_tools_and_history_become_flat_function_tools_and_calls() {
    // What Codex 0.171.0 sends: its tools in an `additional_tools` item, grouped by namespace,
    // a `custom` grammar tool among them, and earlier calls in both shapes.
    let body = json!({"model": "gpt-6.2-sol", "input": [
        {"type": "additional_tools", "role": "developer", "tools": [
            {"type": "namespace", "name": "functions", "tools": [
                {"type": "custom", "name": "exec", "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}},
                {"type": "function", "name": "wait", "parameters": {"type": "object"}}]},
            {"type": "namespace", "name": "clock", "tools": [
                {"type": "function", "name": "sleep", "parameters": {"type": "object"}}]},
            {"type": "web_search"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
        {"type": "custom_tool_call", "call_id": "c1", "name": "exec", "namespace": "functions", "input": "print(1)"},
        {"type": "custom_tool_call_output", "call_id": "c1", "output": "1"},
        {"type": "function_call", "call_id": "c2", "name": "sleep", "namespace": "clock", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c2", "output": "slept"},
    ]});
    let request = read(body.to_string().as_bytes()).unwrap();
    let toolset = request.toolset().unwrap();
    assert_eq!(toolset.dropped, [("input[0].tools[2]".to_string(), "web_search".to_string())]);
    let c = request.to_canonical(None, &toolset, false).unwrap();
    let names: Vec<&str> = c.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["exec", "wait", "sleep"]);
    let calls: Vec<&ToolCall> = c.messages.iter().flat_map(|m| &m.tool_calls).collect();
    assert_eq!((calls[0].name.as_str(), calls[0].arguments.as_str()), ("exec", r#"{"input":"print(1)"}"#));
    assert_eq!(calls[1].name, "sleep");
    let answers: Vec<(&str, &str)> = c
        .messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| (m.tool_call_id.as_deref().unwrap(), m.content.as_str()))
        .collect();
    assert_eq!(answers, [("c1", "1"), ("c2", "slept")]);
}

/// Codex's recorded turn (tests/fixtures/agents/) as a fleet node gets it, OpenAI's chat body
/// written from the canonical request, means what the turn meant: the chat door reads the
/// same request back.
#[test]
fn codexs_recorded_turn_translated_for_a_node_means_what_it_meant() {
    use crate::adapter::wire::openai::request::ChatBody;
    use crate::adapter::{Call, Upstream, WireFormat};
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/agents/codex-0.171.0.json");
    let captured: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let request = read(captured["body"].to_string().as_bytes()).unwrap();
    let mut req = request.to_canonical(Some(4096), &request.toolset().unwrap(), false).unwrap();
    req.model = "served".into();
    assert!(req.messages.len() > 1 && !req.tools.is_empty(), "a whole turn: instructions, input, tools");
    let call = Call::as_written(WireFormat::OpenAi, Upstream::default(), &req);
    let body = serde_json::to_vec(&ChatBody::of(&req, &call, true)).unwrap();
    let mut read = crate::api::wire::decode_bytes(&bytes::Bytes::from(body)).unwrap();
    let again = read.to_canonical(None).unwrap();
    let unkept = |r: &ChatRequest| ChatRequest { native: None, written: None, relay: false, ..r.clone() };
    assert_eq!(unkept(&ChatRequest { model: "served".into(), ..again }), unkept(&req));
}
