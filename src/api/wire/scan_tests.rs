//! The scan against the decoder: whatever the scan is sure of, the decoder takes, and the
//! facts it found are those of the decoded messages.

use proptest::prelude::*;

use super::super::{decode, decode_messages};
use super::facts;
use crate::canonical::{Conversation, Role};

/// A JSON string's text as written, escapes and all (some not text at all).
fn string() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z0-9 .,]{0,12}".prop_map(|t| format!("\"{t}\"")),
        Just(r#""caf\u00e9 \"q\" \\ \n\t\/ \ud83d\ude00 é ✓""#.to_string()),
        Just(r#""half \ud83d alone""#.to_string()),
        Just(r#""\ude00 low first""#.to_string()),
        Just(r#""pair? \ud83d\u0041""#.to_string()),
        Just(r#""nul \u0000 end""#.to_string()),
    ]
}

/// A member's value: mostly of the right type, sometimes not.
fn content() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        12 => string().prop_map(Some),
        1 => Just(Some("null".into())),
        1 => Just(None),
        1 => string().prop_map(|t| Some(format!(r#"[{{"type":"text","text":{t}}}]"#))),
        1 => Just(Some("7".into())),
    ]
}

fn tool_calls() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        3 => Just(None),
        1 => Just(Some("null".into())),
        1 => Just(Some("[]".into())),
        2 => string().prop_map(|args| Some(format!(
            r#"[{{"id":"c1","type":"function","function":{{"name":"read","arguments":{args}}}}}]"#
        ))),
        1 => Just(Some(r#"[{"id":"c1","function":{"name":"read"}}]"#.into())),
        1 => Just(Some(r#"[{"id":"c1","function":{"name":"read","arguments":null}}]"#.into())),
        1 => Just(Some(r#"[{"id":3,"function":{"name":"read"}}]"#.into())),
    ]
}

fn message() -> impl Strategy<Value = String> {
    let role = prop_oneof![
        12 => prop_oneof![Just("system"), Just("user"), Just("assistant"), Just("tool")]
            .prop_map(|r| Some(format!("\"{r}\""))),
        1 => Just(Some("\"wizard\"".into())),
        1 => Just(Some("1".into())),
        1 => Just(None),
    ];
    let call_id = prop_oneof![2 => Just(None), 1 => Just(Some("null".into())), 6 => string().prop_map(Some), 1 => Just(Some("5".into()))];
    let rarely = || proptest::bool::weighted(0.1);
    (role, content(), tool_calls(), call_id, rarely(), any::<bool>()).prop_map(
        |(role, content, calls, call_id, twice, extra)| {
            let mut members = Vec::new();
            for (key, value) in [
                ("role", role.clone()),
                ("content", content),
                ("tool_calls", calls),
                ("tool_call_id", call_id),
            ] {
                if let Some(value) = value {
                    members.push(format!("\"{key}\":{value}"));
                }
            }
            if twice {
                if let Some(role) = role {
                    members.push(format!("\"role\":{role}"));
                }
            }
            if extra {
                members.push(r#""name":"helper","x":{"y":[1,null]}"#.into());
            }
            format!("{{{}}}", members.join(","))
        },
    )
}

proptest! {
    #[test]
    fn what_the_scan_is_sure_of_decodes_to_the_same_facts(
        messages in proptest::collection::vec(message(), 0..5)
    ) {
        let json = format!("[{}]", messages.join(","));
        let body = format!(r#"{{"model":"m","messages":{json}}}"#);
        let Ok(request) = decode(body.as_bytes()) else { return Ok(()) };
        if !request.messages.is_written() {
            return Ok(());
        }
        let decoded = decode_messages(json.as_bytes());
        prop_assert!(decoded.is_ok(), "the scan took what the decoder refuses: {json}: {decoded:?}");
        let decoded = Conversation::from(decoded.unwrap());
        let written = request.messages;
        prop_assert_eq!(written.len(), decoded.len());
        prop_assert_eq!(written.text_bytes(), decoded.text_bytes());
        for role in [Role::System, Role::User] {
            prop_assert_eq!(written.first_text(role), decoded.first_text(role));
        }
        let leading = |c: &Conversation| {
            let mut texts = Vec::new();
            c.leading_system(|t| texts.push(t.to_string()));
            texts
        };
        prop_assert_eq!(leading(&written), leading(&decoded));
        prop_assert!(written.is_written(), "no fact decoded the messages");
        prop_assert_eq!(&written, &decoded);
    }
}

#[test]
fn an_agents_conversation_is_scanned_and_a_stranger_one_decoded() {
    let agent = r#"[{"role":"system","content":"be brief"},{"role":"user","content":"go"},
        {"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"ls","arguments":"{}"}}]},
        {"role":"tool","tool_call_id":"c","content":"a.rs\nb.rs"}]"#;
    let facts = facts(agent).expect("sure of an agent's turn");
    assert_eq!((facts.count, facts.text_bytes), (4, "be brief".len() + 2 + "a.rs\nb.rs".len()));
    for unsure in [
        r#"[{"role":"user","content":[{"type":"text","text":"parts"}]}]"#,
        r#"[{"role":"user","content":"a","role":"user"}]"#,
        r#"[{"role":"tool","content":"no call id"}]"#,
        r#"[{"role":"user","content":"\ud800"}]"#,
    ] {
        assert_eq!(super::facts(unsure), None, "{unsure}");
    }
}

#[test]
fn one_pass_finds_every_member_or_leaves_the_body_to_the_careful_reading() {
    let body = br#" { "model" : "m", "messages":[{"role":"user","content":"hi"}] ,"x":{"a":[1]}}
"#;
    let walked = super::walk(body).expect("one object");
    let text = |r: &std::ops::Range<usize>| std::str::from_utf8(&body[r.clone()]).unwrap();
    let spans: Vec<(&str, &str)> = walked.spans.iter().map(|(k, v)| (text(k), text(v))).collect();
    assert_eq!(
        spans,
        [
            (r#""model""#, r#""m""#),
            (r#""messages""#, r#"[{"role":"user","content":"hi"}]"#),
            (r#""x""#, r#"{"a":[1]}"#)
        ]
    );
    assert_eq!(walked.members.len(), 2, "the conversation is scanned, not kept");
    for other in [
        &br#"{"model":"m","messages":[]} {}"#[..],
        br#"{"model":"m","messages":[],"messages":[]}"#,
        br#"{"model":"m","mess\u0061ges":[]}"#,
        br#"{"model":"m"}"#,
        br#"{"model":"m","messages":[],}"#,
        br#"{"model":"m","messages":[]"#,
        b"{}",
        b"[]",
    ] {
        assert!(super::walk(other).is_none(), "{}", String::from_utf8_lossy(other));
    }
}
