//! Each affinity source, the order they are tried in, and the prompt-prefix bound.

use super::*;
use crate::canonical::{AffinitySource as S, Completion, Input, Message, Operation};

/// A request's headers, as name and value pairs.
#[derive(Default)]
struct HeaderMap(Vec<(String, String)>);

impl HeaderMap {
    fn new() -> HeaderMap {
        HeaderMap::default()
    }
}

impl Headers for HeaderMap {
    fn header(&self, name: &str) -> Option<&[u8]> {
        self.0.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_bytes())
    }
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    HeaderMap(pairs.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect())
}

fn chat(system: &str, user: &str) -> ChatRequest {
    let mut messages = Vec::new();
    if !system.is_empty() {
        messages.push(Message::new(Role::System, system));
    }
    messages.push(Message::new(Role::User, user));
    ChatRequest { messages: messages.into(), ..ChatRequest::default() }
}

fn keyed(source: AffinitySource, key: &str) -> Option<Affinity> {
    Some(Affinity { source, hash: xxh3_64(key.as_bytes()) })
}

/// The prompt-prefix hash written out by hand: each part's length (u64, little-endian), then
/// its bytes.
fn prefix_hash(task: &str, system: &str, user: &str) -> u64 {
    let mut bytes = Vec::new();
    for part in [task, system, user] {
        bytes.extend_from_slice(&(part.len() as u64).to_le_bytes());
        bytes.extend_from_slice(part.as_bytes());
    }
    xxh3_64(&bytes)
}

fn derive_default(h: &HeaderMap, r: &ChatRequest, client_key: Option<&str>) -> Option<Affinity> {
    derive(h, r, client_key, "summarise", &AffinityConfig::default())
}

#[test]
fn each_source_is_the_hash_of_its_key() {
    let plain = chat("be brief", "hello");
    let h = headers(&[("x-spillway-project", "ticket-bot")]);
    assert_eq!(derive_default(&h, &plain, None), keyed(S::Project, "ticket-bot"));
    // Pinned: every replica, and the versions before and after this one, must agree on a
    // project's node (this is the hash `x-spillway-project` always had).
    assert_eq!(derive_default(&h, &plain, None).unwrap().hex(), "8dfe31aea2ef5710");

    let h = headers(&[("x-session-id", "sess-1")]);
    assert_eq!(derive_default(&h, &plain, None), keyed(S::SessionHeader, "sess-1"));
    let h = headers(&[("x-claude-code-session-id", "cc-2")]);
    assert_eq!(derive_default(&h, &plain, None), keyed(S::SessionHeader, "cc-2"));

    let cached = ChatRequest { prompt_cache_key: Some("pck-3".into()), ..plain.clone() };
    assert_eq!(derive_default(&HeaderMap::new(), &cached, None), keyed(S::PromptCacheKey, "pck-3"));

    // OpenAI `user` and Anthropic `metadata.user_id` both decode into the canonical `user`.
    let user = ChatRequest { user: Some("dev-7".into()), ..plain.clone() };
    assert_eq!(derive_default(&HeaderMap::new(), &user, None), keyed(S::User, "dev-7"));

    assert_eq!(
        derive_default(&HeaderMap::new(), &plain, Some("TEAM_A_KEY")),
        keyed(S::ClientKey, "TEAM_A_KEY")
    );

    let prefix = derive_default(&HeaderMap::new(), &plain, None);
    let hash = prefix_hash("summarise", "be brief", "hello");
    assert_eq!(prefix, Some(Affinity { source: S::PromptPrefix, hash }));
    assert_eq!(hash, 0x3338_97e5_4cc2_2c68, "pinned, as above");
}

#[test]
fn sources_are_tried_in_order() {
    let all = ChatRequest {
        prompt_cache_key: Some("pck".into()),
        user: Some("usr".into()),
        ..chat("be brief", "hello")
    };
    let every_header = [("x-spillway-project", "proj"), ("x-session-id", "sess")];
    let key = Some("KEY");
    assert_eq!(derive_default(&headers(&every_header), &all, key), keyed(S::Project, "proj"));
    assert_eq!(derive_default(&headers(&every_header[1..]), &all, key), keyed(S::SessionHeader, "sess"));
    assert_eq!(derive_default(&HeaderMap::new(), &all, key), keyed(S::PromptCacheKey, "pck"));
    let no_cache_key = ChatRequest { prompt_cache_key: None, ..all.clone() };
    assert_eq!(derive_default(&HeaderMap::new(), &no_cache_key, key), keyed(S::User, "usr"));
    let anonymous = ChatRequest { user: None, ..no_cache_key };
    assert_eq!(derive_default(&HeaderMap::new(), &anonymous, key), keyed(S::ClientKey, "KEY"));
    assert_eq!(derive_default(&HeaderMap::new(), &anonymous, None).unwrap().source, S::PromptPrefix);
}

#[test]
fn empty_values_count_as_absent() {
    let blank =
        ChatRequest { prompt_cache_key: Some(String::new()), user: Some(String::new()), ..chat("", "hello") };
    let h = headers(&[("x-spillway-project", ""), ("x-session-id", "")]);
    let found = derive_default(&h, &blank, Some(""));
    assert_eq!(
        found,
        Some(Affinity { source: S::PromptPrefix, hash: prefix_hash("summarise", "", "hello") })
    );
}

#[test]
fn session_headers_are_the_configured_ones_in_their_order() {
    let settings = AffinityConfig {
        session_headers: vec!["X-Trace-Session".into(), "x-session-id".into()],
        ..AffinityConfig::default()
    };
    let plain = chat("", "hello");
    let both = headers(&[("x-session-id", "second"), ("x-trace-session", "first")]);
    assert_eq!(derive(&both, &plain, None, "t", &settings), keyed(S::SessionHeader, "first"));
    // Not listed any more: the default header is not a session header here.
    let claude = headers(&[("x-claude-code-session-id", "cc")]);
    assert_eq!(derive(&claude, &plain, None, "t", &settings).unwrap().source, S::PromptPrefix);
    let none = AffinityConfig { session_headers: Vec::new(), ..AffinityConfig::default() };
    assert_eq!(derive(&both, &plain, None, "t", &none).unwrap().source, S::PromptPrefix);
}

#[test]
fn the_prefix_is_bounded_and_cut_on_a_character_boundary() {
    let settings = AffinityConfig { prefix_bytes: 8, ..AffinityConfig::default() };
    let at = |system: &str, user: &str| derive(&HeaderMap::new(), &chat(system, user), None, "t", &settings);
    let expected = prefix_hash("t", "system p", "user mes");
    assert_eq!(at("system prompt A", "user message 1").unwrap().hash, expected);
    // Past the bound, nothing counts; before it, everything does.
    assert_eq!(at("system prompt B", "user message 2"), at("system prompt A", "user message 1"));
    assert_ne!(at("System prompt A", "user message 1"), at("system prompt A", "user message 1"));
    assert_ne!(at("system prompt A", "User message 1"), at("system prompt A", "user message 1"));
    // `é` is two bytes (7 and 8): the cut falls before it, never inside it.
    assert_eq!(cut("abcdefgé!", 8), "abcdefg");
    assert_eq!(cut("abcdefgh!", 8), "abcdefgh");
    assert_eq!(cut("short", 8), "short");
    assert_eq!(cut("日本", 2), "");
    assert_eq!(at("abcdefgé!", "u").unwrap().hash, prefix_hash("t", "abcdefg", "u"));
}

#[test]
fn the_prefix_reads_the_first_system_and_user_message_and_the_task() {
    let settings = AffinityConfig::default();
    let derive_for = |task: &str, r: &ChatRequest| derive(&HeaderMap::new(), r, None, task, &settings);
    let mut turns = chat("be brief", "first question");
    let first_turn = derive_for("t", &turns);
    turns.messages_mut().push(Message::new(Role::Assistant, "an answer"));
    turns.messages_mut().push(Message::new(Role::User, "a follow-up"));
    turns.messages_mut().push(Message::new(Role::System, "a later system note"));
    assert_eq!(derive_for("t", &turns), first_turn, "a conversation keeps its key as it grows");
    assert_ne!(derive_for("other-task", &turns), first_turn);
    assert_eq!(derive_for("t", &turns).unwrap().hash, prefix_hash("t", "be brief", "first question"));
    // (task, system, user) parts never run together: "ab" + "c" differs from "a" + "bc".
    assert_ne!(derive_for("t", &chat("ab", "c")), derive_for("t", &chat("a", "bc")));
}

#[test]
fn a_completion_keys_on_its_prompt_and_nothing_to_key_on_is_no_key() {
    let settings = AffinityConfig::default();
    let completion = ChatRequest {
        operation: Operation::Completion(Completion {
            prompt: Input::Texts(vec!["Once upon".into(), "a time".into()]),
            stream: false,
            echo: None,
            logprobs: None,
            suffix: None,
            n: None,
            passthrough: Default::default(),
        }),
        ..ChatRequest::default()
    };
    let found = derive(&HeaderMap::new(), &completion, None, "t", &settings);
    assert_eq!(found, Some(Affinity { source: S::PromptPrefix, hash: prefix_hash("t", "", "Once upon") }));
    let tokens = ChatRequest {
        operation: Operation::Completion(Completion {
            prompt: Input::Tokens(vec![1, 2, 3]),
            ..completion_of(&completion)
        }),
        ..ChatRequest::default()
    };
    assert_eq!(derive(&HeaderMap::new(), &tokens, None, "t", &settings), None, "nothing to key on");
    let off = AffinityConfig { prefix_bytes: 0, ..AffinityConfig::default() };
    assert_eq!(derive(&HeaderMap::new(), &chat("be brief", "hello"), None, "t", &off), None);
    // An identity still counts with the prefix off.
    let h = headers(&[("x-session-id", "s")]);
    assert_eq!(derive(&h, &chat("be brief", "hello"), None, "t", &off), keyed(S::SessionHeader, "s"));
}

fn completion_of(r: &ChatRequest) -> Completion {
    match &r.operation {
        Operation::Completion(c) => c.clone(),
        _ => unreachable!("a completion"),
    }
}
