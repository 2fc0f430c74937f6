//! One call to one target, as dispatch resolved it: where it goes, which model it asks for,
//! whether the answer streams, where prompt-cache breakpoints go, the task's prompt variant
//! for that backend and the router's secrets its upstream's words are cut of. It travels beside
//! the client's request, which no call rewrites: every adapter reads these from the call and
//! the rest from the request.

use std::sync::{Arc, LazyLock};

use super::redact::Redactor;
use super::{Upstream, WireFormat};
use crate::canonical::{CachePlacement, ChatRequest, Message, Role};

#[derive(Debug, Clone)]
pub struct Call<'a> {
    pub format: WireFormat,
    pub upstream: Upstream,
    /// The backend's model: what the upstream is asked for.
    pub model: &'a str,
    /// Ask the upstream for a streamed answer (the client asked for one, or the backend is
    /// always read streamed).
    pub stream: bool,
    /// Where an adapter that needs them (Anthropic) places prompt-cache breakpoints; `None`:
    /// none placed.
    pub cache_placement: Option<CachePlacement>,
    /// The task's system prompt for this backend, put before the request's own.
    pub variant: Option<Message>,
    /// The router's secrets (keys of every backend, client keys, the admin token): no text of
    /// this call's upstream leaves the adapter with one, nor with the call's own credentials.
    pub redactor: Arc<Redactor>,
}

/// The redactor of a call made outside dispatch: key shapes and the call's own credentials.
static NO_ROUTER_SECRETS: LazyLock<Arc<Redactor>> = LazyLock::new(Arc::default);

impl<'a> Call<'a> {
    /// A call made as the request is written: its own model and stream flag, no variant and
    /// no cache breakpoints (a call made outside a dispatch walk, and the adapters' tests).
    pub fn as_written(format: WireFormat, upstream: Upstream, req: &'a ChatRequest) -> Call<'a> {
        Call {
            format,
            upstream,
            model: &req.model,
            stream: req.stream,
            cache_placement: None,
            variant: None,
            redactor: Arc::clone(&NO_ROUTER_SECRETS),
        }
    }

    /// Put `text` before the request's system prompt on this call.
    pub fn with_variant(self, text: Option<&str>) -> Call<'a> {
        Call { variant: text.map(|t| Message::new(Role::System, t)), ..self }
    }

    /// The conversation this call sends: the variant first, then the request's messages.
    pub fn messages<'s>(&'s self, req: &'s ChatRequest) -> impl Iterator<Item = &'s Message> {
        self.variant.iter().chain(&req.messages)
    }

    /// The system prompt this call sends ahead of the conversation: the variant and the
    /// request's system messages before its first turn, joined by blank lines. A system
    /// message later in the conversation keeps its place ([`Call::turns`]).
    pub fn system_prompt(&self, req: &ChatRequest) -> Option<String> {
        let parts: Vec<&str> = self.messages(req).take_while(is_system).map(|m| m.content.as_str()).collect();
        (!parts.is_empty()).then(|| parts.join("\n\n"))
    }

    /// The conversation after the leading system prompt, in order: for a backend that takes
    /// system text only ahead of the conversation, a later system message is among these (see
    /// [`system_turn`]).
    pub fn turns<'s>(&'s self, req: &'s ChatRequest) -> impl Iterator<Item = &'s Message> {
        self.messages(req).skip_while(is_system)
    }
}

fn is_system(m: &&Message) -> bool {
    m.role == Role::System
}

/// A system message that came after the conversation started, as the text of a user turn at
/// the same place, for a backend that takes system text only ahead of the conversation
/// (Anthropic and Gemini translated, a node's Messages route): the conversation keeps its
/// order and the model still reads the text as the system's.
pub fn system_turn(text: &str) -> String {
    format!("<system>\n{text}\n</system>")
}

#[cfg(test)]
mod tests {

    use serde_json::json;

    use super::*;
    use crate::canonical::{Dialect, NativeRequest};

    #[test]
    fn the_variant_leads_the_conversation_and_the_system_prompt_and_the_request_is_untouched() {
        let req = ChatRequest {
            model: "task".into(),
            messages: vec![Message::new(Role::System, "be brief"), Message::new(Role::User, "hi")].into(),
            ..Default::default()
        };
        let before = req.clone();
        let plain = Call::as_written(WireFormat::OpenAi, Upstream::default(), &req);
        assert_eq!((plain.model, plain.system_prompt(&req)), ("task", Some("be brief".to_string())));
        let call = Call { model: "m", ..plain }.with_variant(Some("Use JSON."));
        let contents: Vec<&str> = call.messages(&req).map(|m| m.content.as_str()).collect();
        assert_eq!(contents, ["Use JSON.", "be brief", "hi"]);
        assert_eq!(call.system_prompt(&req).as_deref(), Some("Use JSON.\n\nbe brief"));
        let mut later = req.clone();
        later.messages_mut().push(Message::new(Role::System, "Tools changed."));
        assert_eq!(call.system_prompt(&later).as_deref(), Some("Use JSON.\n\nbe brief"), "leading only");
        let turns: Vec<&str> = call.turns(&later).map(|m| m.content.as_str()).collect();
        assert_eq!(turns, ["hi", "Tools changed."]);
        let body = json!({"model": "task", "system": "be brief", "stream": false});
        let client = NativeRequest::of_tree(Dialect::AnthropicMessages, &body);
        // A Messages client's own body, sent with this call's model and variant.
        let sent = crate::adapter::wire::anthropic::tests::written(&req, &call, &client, Some("anthropic"));
        assert_eq!((&sent["model"], &sent["system"]), (&json!("m"), &json!("Use JSON.\n\nbe brief")));
        assert_eq!(
            client.body.get("system").unwrap().json(),
            r#""be brief""#,
            "the client's body is not rewritten"
        );
        assert_eq!(req, before);
    }
}
