//! Decoding and checking client requests: every refusal names its field.

use serde_json::json;

use super::*;
use crate::canonical::{Image, ResponseFormat, ToolChoice};

#[test]
fn type_errors_name_the_field() {
    // The conversation is read past the door's decode, when the request is made canonical.
    let err = refused(br#"{"model":"t","messages":[{"role":"wizard","content":"x"}]}"#);
    assert_eq!(err.param.as_deref(), Some("messages[0].role"), "{err:?}");
    assert_eq!(err.code.as_str(), Some("invalid_value"));
    let err = refused(br#"{"model":"t","messages":"hello"}"#);
    assert_eq!((err.param.as_deref(), err.code.as_str()), (Some("messages"), Some("invalid_type")));
    let err = decode(br#"{"model":"t","messages":[],"max_tokens":"many"}"#).unwrap_err();
    assert_eq!(err.param.as_deref(), Some("max_tokens"));
    let err = decode(br#"{"messages":[]}"#).unwrap_err();
    assert!(err.message.contains("model"), "{err:?}");
    let err = decode(b"{not json").unwrap_err();
    assert_eq!(err.code.as_str(), Some("invalid_json"));
}

/// A request with `extra` spliced in after `messages`.
fn with(extra: &str) -> String {
    format!(r#"{{"model":"t","messages":[{{"role":"user","content":"x"}}]{extra}}}"#)
}

#[track_caller]
fn refused(body: &[u8]) -> ApiError {
    let err = match decode(body) {
        Ok(mut req) => req.to_canonical(None).expect_err("accepted"),
        Err(err) => err,
    };
    assert_eq!(err.status, 400, "{err:?}");
    err
}

#[test]
fn bytes_after_the_object_are_not_json() {
    let body = with("");
    assert!(decode(format!(" {body}\n\t ").as_bytes()).is_ok());
    for tail in ["x", "{}", "]", "\"more\"", ",", "\0"] {
        let err = refused(format!("{body}{tail}").as_bytes());
        assert_eq!(err.code.as_str(), Some("invalid_json"), "{tail:?}: {err:?}");
        assert!(err.message.contains("trailing"), "{err:?}");
    }
    for not_object in ["[]", "\"t\"", "3", "null", r#"["t", [{"role": "user", "content": "x"}]]"#] {
        let err = refused(not_object.as_bytes());
        assert_eq!(err.code.as_str(), Some("invalid_type"), "{not_object}: {err:?}");
    }
    assert_eq!(refused(b"").code.as_str(), Some("invalid_json"));
    assert_eq!(refused(b"nonsense").code.as_str(), Some("invalid_json"));
}

#[test]
fn user_system_and_tool_messages_need_content() {
    let messages = |m: &str| format!(r#"{{"model":"t","messages":[{{"role":"user","content":"x"}},{m}]}}"#);
    for m in [
        r#"{"role":"user","content":null}"#,
        r#"{"role":"user"}"#,
        r#"{"role":"system","content":null}"#,
        r#"{"role":"tool","tool_call_id":"c","content":null}"#,
        r#"{"role":"assistant","content":null}"#,
        r#"{"role":"assistant","content":null,"tool_calls":[]}"#,
    ] {
        let err = refused(messages(m).as_bytes());
        assert_eq!(err.param.as_deref(), Some("messages[1].content"), "{m}: {err:?}");
    }
    let call = r#"{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}"#;
    let c = canonical(&messages(call)).unwrap();
    assert_eq!(c.messages[1].content, "");
    assert_eq!(c.messages[1].tool_calls[0].name, "f");
    assert_eq!(canonical(&messages(r#"{"role":"user","content":""}"#)).unwrap().messages[1].content, "");
}

#[test]
fn every_wrong_type_or_value_names_its_field() {
    let msg = |m: &str| format!(r#"{{"model":"t","messages":[{m}]}}"#);
    for (body, param, code) in [
        (msg(r#"{"role":1,"content":"x"}"#), "messages[0].role", "invalid_type"),
        (msg(r#"{"role":["user"],"content":"x"}"#), "messages[0].role", "invalid_type"),
        (msg(r#"{"role":"wizard","content":"x"}"#), "messages[0].role", "invalid_value"),
        (msg(r#"{"content":"x"}"#), "messages[0].role", "missing_field"),
        (msg(r#"{"role":"user","content":5}"#), "messages[0].content", "invalid_type"),
        (msg(r#"{"role":"user","content":{"text":"x"}}"#), "messages[0].content", "invalid_type"),
        (msg(r#"{"role":"user","content":[{"type":1}]}"#), "messages[0].content[0].type", "invalid_type"),
        (msg(r#"{"role":"user","content":["x"]}"#), "messages[0].content[0]", "invalid_type"),
        (
            msg(r#"{"role":"user","content":[{"type":"image_url","image_url":7}]}"#),
            "messages[0].content[0].image_url",
            "invalid_type",
        ),
        (
            msg(r#"{"role":"user","content":[{"type":"image_url","image_url":{"detail":"low"}}]}"#),
            "messages[0].content[0].image_url.url",
            "missing_field",
        ),
        (
            msg(r#"{"role":"tool","content":"x","tool_call_id":3}"#),
            "messages[0].tool_call_id",
            "invalid_type",
        ),
        (msg(r#"{"role":"assistant","tool_calls":{}}"#), "messages[0].tool_calls", "invalid_type"),
        (msg(r#""hello""#), "messages[0]", "invalid_type"),
        // An array of a message's fields in order is no message (serde's derive would take it).
        (msg(r#"["user","hi"]"#), "messages[0]", "invalid_type"),
        (
            msg(r#"{"role":"assistant","tool_calls":[["call_1",{"name":"f"}]]}"#),
            "messages[0].tool_calls[0]",
            "invalid_type",
        ),
        (r#"{"model":"t","messages":{}}"#.into(), "messages", "invalid_type"),
        (r#"{"model":5,"messages":[]}"#.into(), "model", "invalid_type"),
        (r#"{"messages":[]}"#.into(), "model", "missing_field"),
        (with(r#","stream":"yes""#), "stream", "invalid_type"),
        (with(r#","stream_options":{"include_usage":1}"#), "stream_options.include_usage", "invalid_type"),
        (with(r#","max_tokens":"many""#), "max_tokens", "invalid_type"),
        (with(r#","max_tokens":1.5"#), "max_tokens", "invalid_type"),
        (with(r#","max_tokens":-1"#), "max_tokens", "invalid_value"),
        (with(r#","max_tokens":4294967296"#), "max_tokens", "invalid_value"),
        (with(r#","max_completion_tokens":true"#), "max_completion_tokens", "invalid_type"),
        (with(r#","temperature":"hot""#), "temperature", "invalid_type"),
        (with(r#","stop":5"#), "stop", "invalid_type"),
        (with(r#","stop":["a",5]"#), "stop[1]", "invalid_type"),
        (with(r#","tools":"x""#), "tools", "invalid_type"),
        (with(r#","tools":[{"function":{"name":7}}]"#), "tools[0].function.name", "invalid_type"),
        (with(r#","tools":[{"type":"function"}]"#), "tools[0].function", "missing_field"),
        (with(r#","seed":"s""#), "seed", "invalid_type"),
        (with(r#","n":[1]"#), "n", "invalid_type"),
    ] {
        let err = refused(body.as_bytes());
        assert_eq!((err.param.as_deref(), err.code.as_str()), (Some(param), Some(code)), "{body}: {err:?}");
        assert!(err.message.contains(param), "the message names `{param}`: {err:?}");
    }
}

#[test]
fn tool_schemas_and_tool_choice_are_checked_before_any_backend_sees_them() {
    let tools = r#","tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}},{"type":"function","function":{"name":"g"}}]"#;
    for (extra, param) in [
        (
            r#","tools":[{"function":{"name":"f","parameters":"garbage"}}]"#.to_string(),
            "tools[0].function.parameters",
        ),
        (r#","tools":[{"function":{"name":"f","parameters":[1]}}]"#.into(), "tools[0].function.parameters"),
        (
            r#","tools":[{"function":{"name":"f","parameters":{"type":"string"}}}]"#.into(),
            "tools[0].function.parameters",
        ),
        (
            r#","tools":[{"function":{"name":"f","parameters":{"type":"wizard"}}}]"#.into(),
            "tools[0].function.parameters",
        ),
        (r#","tools":[{"type":"custom","function":{"name":"f"}}]"#.into(), "tools[0].type"),
        (r#","tools":[{"function":{"name":""}}]"#.into(), "tools[0].function.name"),
        (
            r#","tools":[{"function":{"name":"f"}},{"function":{"name":"f"}}]"#.into(),
            "tools[1].function.name",
        ),
        (format!(r#"{tools},"tool_choice":42"#), "tool_choice"),
        (format!(r#"{tools},"tool_choice":["auto"]"#), "tool_choice"),
        (format!(r#"{tools},"tool_choice":"sometimes""#), "tool_choice"),
        (format!(r#"{tools},"tool_choice":{{}}"#), "tool_choice.type"),
        (format!(r#"{tools},"tool_choice":{{"function":{{"name":"f"}}}}"#), "tool_choice.type"),
        (
            format!(r#"{tools},"tool_choice":{{"type":"allowed_tools","function":{{"name":"f"}}}}"#),
            "tool_choice.type",
        ),
        (format!(r#"{tools},"tool_choice":{{"type":"function","name":"f"}}"#), "tool_choice.function.name"),
        (
            format!(r#"{tools},"tool_choice":{{"type":"function","function":{{"name":1}}}}"#),
            "tool_choice.function.name",
        ),
        (
            format!(r#"{tools},"tool_choice":{{"type":"function","function":{{"name":"ghost"}}}}"#),
            "tool_choice.function.name",
        ),
        (r#","tool_choice":"auto""#.into(), "tool_choice"),
        (r#","tools":[],"tool_choice":"required""#.into(), "tool_choice"),
    ] {
        let err = refused(with(&extra).as_bytes());
        assert_eq!(err.param.as_deref(), Some(param), "{extra}: {err:?}");
    }
    let choice = |c: &str| canonical(&with(&format!(r#"{tools},"tool_choice":{c}"#))).unwrap().tool_choice;
    assert_eq!(choice("null"), None);
    assert_eq!(choice(r#""none""#), Some(ToolChoice::None));
    assert_eq!(choice(r#""auto""#), Some(ToolChoice::Auto));
    assert_eq!(choice(r#""required""#), Some(ToolChoice::Required));
    assert_eq!(
        choice(r#"{"type":"function","function":{"name":"g"}}"#),
        Some(ToolChoice::Function("g".into()))
    );
    let c = canonical(&with(tools)).unwrap();
    assert_eq!(c.tools[0].parameters, json!({"type": "object"}));
    assert_eq!(c.tools[1].parameters, Value::Null);
    assert_eq!(c.tool_choice, None);
}

#[test]
fn hostile_bodies_get_a_400_not_a_panic() {
    let deep = |open: &str, n: usize| open.repeat(n);
    let nested = |key: &str, value: String| with(&format!(r#","{key}":{value}"#)).into_bytes();
    let parameters = |schema: String| {
        with(&format!(r#","tools":[{{"function":{{"name":"f","parameters":{schema}}}}}]"#)).into_bytes()
    };
    for (body, code, param) in [
        (deep("[", 100_000).into_bytes(), "invalid_json", None),
        (deep("{\"a\":", 100_000).into_bytes(), "invalid_json", None),
        (format!(r#"{{"model":{}"#, deep("[", 100_000)).into_bytes(), "invalid_type", Some("model")),
        // Untyped fields are read as JSON values: serde_json stops at 128 levels.
        (nested("tool_choice", deep("[", 100_000)), "invalid_json", None),
        (nested("response_format", deep("{\"a\":", 100_000)), "invalid_json", None),
        (parameters(deep("[", 100_000)), "invalid_json", None),
        (
            nested("tool_choice", format!("{}1{}", deep("[", 100), deep("]", 100))),
            "invalid_value",
            Some("tool_choice"),
        ),
        (
            parameters(format!("{}1{}", deep("[", 100), deep("]", 100))),
            "invalid_value",
            Some("tools[0].function.parameters"),
        ),
    ] {
        let err = refused(&body);
        assert_eq!((err.code.as_str(), err.param.as_deref()), (Some(code), param), "{err:?}");
    }
    for (number, code) in [
        ("1e400", "invalid_value"),
        ("-1e400", "invalid_value"),
        ("99999999999999999999", "invalid_type"),
        ("1e10", "invalid_type"),
    ] {
        let err = refused(with(&format!(r#","max_tokens":{number}"#)).as_bytes());
        assert_eq!(
            (err.param.as_deref(), err.code.as_str()),
            (Some("max_tokens"), Some(code)),
            "{number}: {err:?}"
        );
    }
    let err = refused(with(r#","temperature":1e400"#).as_bytes());
    assert_eq!(err.param.as_deref(), Some("temperature"), "{err:?}");
    // Invalid UTF-8 inside a string, in a key, and as the whole body.
    for body in [
        b"{\"model\":\"t\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}".to_vec(),
        b"{\"model\":\"t\",\"messages\":[{\"role\":\"user\",\"con\xc3tent\":\"x\"}]}".to_vec(),
        b"{\"model\":\"\xed\xa0\x80\",\"messages\":[]}".to_vec(),
        vec![0xff; 64],
        b"{\"model\":\"\\ud800\",\"messages\":[]}".to_vec(),
    ] {
        let err = refused(&body);
        assert_eq!(err.code.as_str(), Some("invalid_json"), "{:?}: {err:?}", String::from_utf8_lossy(&body));
    }
}

#[test]
fn output_is_capped_by_the_task_and_parts_are_joined() {
    let body = br#"{"model":"t","max_tokens":900,"stop":"END","messages":[
            {"role":"system","content":"be brief"},
            {"role":"user","content":[{"type":"text","text":"hel"},{"type":"text","text":"lo"}]}]}"#;
    let c = decode(body).unwrap().to_canonical(Some(400)).unwrap();
    assert_eq!(c.max_tokens, Some(400));
    assert_eq!(c.messages[0].content, "be brief");
    assert_eq!(c.messages[1].content, "hello");
    assert_eq!(c.stop, ["END"]);
    assert_eq!(decode(body).unwrap().to_canonical(None).unwrap().max_tokens, Some(900));
    let mut bad =
        decode(br#"{"model":"t","temperature":3,"messages":[{"role":"user","content":"x"}]}"#).unwrap();
    assert_eq!(bad.to_canonical(None).unwrap_err().param.as_deref(), Some("temperature"));
}

#[test]
fn identities_are_decoded_and_a_wrong_type_names_its_field() {
    let c = canonical(&with(r#","user":"u-7","prompt_cache_key":"pck-1""#)).unwrap();
    assert_eq!((c.user.as_deref(), c.prompt_cache_key.as_deref()), (Some("u-7"), Some("pck-1")));
    let c = canonical(&with("")).unwrap();
    assert_eq!((c.user, c.prompt_cache_key), (None, None));
    let err = refused(with(r#","prompt_cache_key":7"#).as_bytes());
    assert_eq!(err.param.as_deref(), Some("prompt_cache_key"), "{err:?}");
}

fn canonical(body: &str) -> Result<ChatRequest, ApiError> {
    decode(body.as_bytes())?.to_canonical(None)
}

#[test]
fn response_formats_decode_and_bad_shapes_name_their_field() {
    let with_rf = |rf: &str| {
        format!(r#"{{"model":"t","messages":[{{"role":"user","content":"x"}}],"response_format":{rf}}}"#)
    };
    assert_eq!(canonical(&with_rf(r#"{"type":"text"}"#)).unwrap().response_format, ResponseFormat::Text);
    assert_eq!(
        canonical(&with_rf(r#"{"type":"json_object"}"#)).unwrap().response_format,
        ResponseFormat::JsonObject
    );
    let schema = json!({"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]});
    let rf = json!({"type":"json_schema","json_schema":{"name":"count","schema":schema,"strict":true}});
    assert_eq!(
        canonical(&with_rf(&rf.to_string())).unwrap().response_format,
        ResponseFormat::JsonSchema { name: "count".into(), schema, strict: true }
    );
    assert_eq!(canonical(&with_rf("null")).unwrap().response_format, ResponseFormat::Text);
    for (rf, param) in [
        (r#""json""#, "response_format.type"),
        (r#"{"type":"yaml"}"#, "response_format.type"),
        (r#"{"type":"json_schema"}"#, "response_format.json_schema"),
        (r#"{"type":"json_schema","json_schema":{"schema":{}}}"#, "response_format.json_schema.name"),
        (r#"{"type":"json_schema","json_schema":{"name":"a"}}"#, "response_format.json_schema.schema"),
        (
            r#"{"type":"json_schema","json_schema":{"name":"a","schema":[1]}}"#,
            "response_format.json_schema.schema",
        ),
        (
            r#"{"type":"json_schema","json_schema":{"name":"a","schema":{"type":"wizard"}}}"#,
            "response_format.json_schema.schema",
        ),
        (
            r#"{"type":"json_schema","json_schema":{"name":"a","schema":{},"strict":"yes"}}"#,
            "response_format.json_schema.strict",
        ),
    ] {
        let err = canonical(&with_rf(rf)).unwrap_err();
        assert_eq!(err.param.as_deref(), Some(param), "{rf}: {err:?}");
        assert_eq!(err.status, 400);
    }
}

#[test]
fn image_parts_are_carried_in_order_after_the_text() {
    let c = canonical(
        r#"{"model":"t","messages":[{"role":"user","content":[
            {"type":"text","text":"what is "},
            {"type":"image_url","image_url":{"url":"https://example.com/cat.png","detail":"low"}},
            {"type":"text","text":"this?"},
            {"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}}]}]}"#,
    )
    .unwrap();
    let m = &c.messages[0];
    assert_eq!(m.content, "what is this?");
    assert_eq!(
        m.images,
        [
            Image { url: "https://example.com/cat.png".into(), detail: Some("low".into()) },
            Image { url: "data:image/png;base64,iVBORw0KGgo=".into(), detail: None },
        ]
    );
    assert_eq!(m.images[1].inline_data(), Some(("image/png", "iVBORw0KGgo=")));
    assert!(c.has_images());

    let bad = |content: &str, role: &str| {
        canonical(&format!(r#"{{"model":"t","messages":[{{"role":"{role}","content":{content}}}]}}"#))
            .unwrap_err()
    };
    let err = bad(r#"[{"type":"image_url","image_url":{"url":"ftp://x/a.png"}}]"#, "user");
    assert_eq!(err.param.as_deref(), Some("messages[0].content[0].image_url"));
    let err = bad(r#"[{"type":"image_url","image_url":{"url":"data:;base64,"}}]"#, "user");
    assert_eq!(err.param.as_deref(), Some("messages[0].content[0].image_url"));
    let err = bad(r#"[{"type":"image_url","image_url":{"url":"https://x/a.png"}}]"#, "system");
    assert_eq!(err.param.as_deref(), Some("messages[0].content[0]"));
    let err = bad(r#"[{"type":"image_url"}]"#, "user");
    assert_eq!(err.param.as_deref(), Some("messages[0].content[0]"));
    let err = bad(r#"[{"type":"input_audio"}]"#, "user");
    assert!(err.message.contains("input_audio"), "{err:?}");
}
