//! Capabilities: which of the backends that policy allows can serve this request at all.
//!
//! A request that declares tools needs a backend with `tools`; one with images needs
//! `vision`; one with a `json_schema` response format needs `json_schema`; and its prompt,
//! counted with each backend's own tokenizer, plus its `max_tokens` must fit that backend's
//! `max_context`. A legacy completion needs a backend that speaks OpenAI's wire (vLLM, OpenAI,
//! OpenAI-compatible), and embeddings one that declares an `embedding_space`. Applied right
//! after the policy filter, before any ordering, so a fallback never lands on a backend that
//! would refuse the request or, worse, ignore its tools. Pure: reads the request and the
//! snapshot's config, no I/O, no clock.

use std::collections::HashMap;

use crate::canonical::{ChatRequest, Operation, ResponseFormat};
use crate::config::{BackendConfig, BackendId, BackendKind};
use crate::snapshot::Snapshot;
use crate::tokens;

/// A capability a request may need.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Capability {
    Tools,
    Vision,
    JsonSchema,
}

impl Capability {
    /// The key under `capabilities:` in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            Capability::Tools => "tools",
            Capability::Vision => "vision",
            Capability::JsonSchema => "json_schema",
        }
    }

    /// The request field that asks for it, for the client's error.
    pub fn param(self) -> &'static str {
        match self {
            Capability::Tools => "tools",
            Capability::Vision => "messages",
            Capability::JsonSchema => "response_format",
        }
    }
}

/// The capabilities `req` needs.
pub fn needs(req: &ChatRequest) -> Vec<Capability> {
    let mut needs = Vec::new();
    if !req.tools.is_empty() {
        needs.push(Capability::Tools);
    }
    if req.has_images() {
        needs.push(Capability::Vision);
    }
    if matches!(req.response_format, ResponseFormat::JsonSchema { .. }) {
        needs.push(Capability::JsonSchema);
    }
    needs
}

/// An operation some backends cannot do at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unserved {
    /// Legacy completions, on a backend of this kind (one that does not speak OpenAI's wire).
    Completions(BackendKind),
    /// Embeddings, on a backend that declares no `embedding_space`.
    Embeddings,
}

impl Unserved {
    /// Whether `backend` cannot do `operation` (and why); `None` when it can.
    pub fn check(operation: &Operation, backend: &BackendConfig) -> Option<Unserved> {
        match operation {
            Operation::Chat => None,
            Operation::Completion(_) => {
                (!backend.kind().speaks_openai()).then_some(Unserved::Completions(backend.kind()))
            }
            Operation::Embedding(_) => backend.embedding_space.is_none().then_some(Unserved::Embeddings),
        }
    }

    /// The operation, in words.
    fn what(self) -> &'static str {
        match self {
            Unserved::Completions(_) => "legacy completions",
            Unserved::Embeddings => "embeddings",
        }
    }

    /// Which backends do serve it.
    fn who_does(self) -> &'static str {
        match self {
            Unserved::Completions(_) => "only vllm, openai and openai_compatible backends do",
            Unserved::Embeddings => "only backends that declare an embedding_space do",
        }
    }

    /// Why this backend does not, after its name.
    fn why(self) -> String {
        match self {
            Unserved::Completions(kind) => format!("is kind {}", kind.as_str()),
            Unserved::Embeddings => "declares no embedding_space".to_string(),
        }
    }
}

/// Why one backend cannot serve the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// It cannot do the request's operation at all.
    Unserved(Unserved),
    Missing(Capability),
    /// Prompt (in this backend's tokens) + `max_tokens` is more than its context window.
    TooLong {
        needed: u32,
        max_context: u32,
    },
}

/// No eligible backend can serve the request; each refusal names its backend.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.message())]
pub struct Unfit {
    pub refusals: Vec<(String, Refusal)>,
}

impl Unfit {
    /// Every backend was refused for its context window alone.
    pub(crate) fn is_context_length(&self) -> bool {
        self.refusals.iter().all(|(_, r)| matches!(r, Refusal::TooLong { .. }))
    }

    /// The capabilities some backend lacked, in a stable order.
    pub fn missing(&self) -> Vec<Capability> {
        let mut missing: Vec<Capability> = self
            .refusals
            .iter()
            .filter_map(|(_, r)| match r {
                Refusal::Missing(c) => Some(*c),
                Refusal::TooLong { .. } | Refusal::Unserved(_) => None,
            })
            .collect();
        missing.sort();
        missing.dedup();
        missing
    }

    /// The operation no backend could do, when that is why every one was refused.
    pub(crate) fn unserved(&self) -> Option<Unserved> {
        let first = match self.refusals.first() {
            Some((_, Refusal::Unserved(u))) => *u,
            _ => return None,
        };
        let same = std::mem::discriminant(&first);
        let all = self
            .refusals
            .iter()
            .all(|(_, r)| matches!(r, Refusal::Unserved(u) if std::mem::discriminant(u) == same));
        all.then_some(first)
    }

    /// For the client: the limit that was hit, with numbers and backend names.
    pub fn message(&self) -> String {
        if self.is_context_length() {
            let largest = self
                .refusals
                .iter()
                .filter_map(|(name, r)| match r {
                    Refusal::TooLong { needed, max_context } => Some((*max_context, *needed, name)),
                    Refusal::Missing(_) | Refusal::Unserved(_) => None,
                })
                .max_by_key(|(max_context, _, _)| *max_context);
            if let Some((max_context, needed, name)) = largest {
                return format!(
                    "the request needs {} tokens (prompt plus max_tokens, counted with {name}'s tokenizer); \
                     the largest context among eligible backends is {} ({name})",
                    thousands(needed),
                    thousands(max_context)
                );
            }
        }
        if let Some(unserved) = self.unserved() {
            let each: Vec<String> = self
                .refusals
                .iter()
                .filter_map(|(name, r)| match r {
                    Refusal::Unserved(u) => Some(format!("{name} {}", u.why())),
                    Refusal::Missing(_) | Refusal::TooLong { .. } => None,
                })
                .collect();
            return format!(
                "no eligible backend serves {}; {} ({})",
                unserved.what(),
                unserved.who_does(),
                each.join(", ")
            );
        }
        let each: Vec<String> = self
            .refusals
            .iter()
            .map(|(name, r)| match r {
                Refusal::Unserved(u) => format!("{name}: serves no {}", u.what()),
                Refusal::Missing(c) => format!("{name}: no `{}` capability", c.as_str()),
                Refusal::TooLong { needed, max_context } => format!(
                    "{name}: needs {} tokens, context is {}",
                    thousands(*needed),
                    thousands(*max_context)
                ),
            })
            .collect();
        format!("no eligible backend can serve this request: {}", each.join("; "))
    }
}

/// `eligible` (indices into `snap.backends`, in preference order) without the backends that
/// cannot serve `req`. `Err` when none is left.
pub fn filter(eligible: Vec<BackendId>, req: &ChatRequest, snap: &Snapshot) -> Result<Vec<BackendId>, Unfit> {
    let needs = needs(req);
    let output = req.max_tokens.unwrap_or(0);
    // Counted once per distinct counter: estimates share nothing, but two backends with the
    // same counter agree.
    let mut counted: HashMap<String, u32> = HashMap::new();
    // Written out only if a backend declares a context limit: an agent's turn is 100 KB.
    let bound = std::cell::LazyCell::new(|| upper_bound(req));
    let mut kept = Vec::with_capacity(eligible.len());
    let mut refusals = Vec::new();
    for index in eligible {
        let backend = &snap.config.backends[index];
        if let Some(unserved) = Unserved::check(&req.operation, backend) {
            refusals.push((backend.name.clone(), Refusal::Unserved(unserved)));
            continue;
        }
        let caps = backend.capabilities();
        let missing = needs.iter().copied().find(|need| match need {
            Capability::Tools => !caps.tools,
            Capability::Vision => !caps.vision,
            Capability::JsonSchema => !caps.json_schema,
        });
        if let Some(missing) = missing {
            refusals.push((backend.name.clone(), Refusal::Missing(missing)));
            continue;
        }
        if let Some(max_context) =
            caps.max_context.filter(|m| bound.saturating_add(u64::from(output)) > u64::from(*m))
        {
            let counter = crate::adapter::provider::counter(backend);
            let key = match &counter {
                tokens::TokenCounter::File(file) => file.path().display().to_string(),
                other => other.name().to_string(),
            };
            let prompt = *counted.entry(key).or_insert_with(|| counter.count_request(req));
            let needed = prompt.saturating_add(output);
            if needed > max_context {
                refusals.push((backend.name.clone(), Refusal::TooLong { needed, max_context }));
                continue;
            }
        }
        kept.push(index);
    }
    if kept.is_empty() {
        Err(Unfit { refusals })
    } else {
        Ok(kept)
    }
}

/// A count no backend's counter can exceed, so that a request well inside every limit (nearly
/// all of them) is never tokenised here: every token covers at least one byte of the text it
/// counts, all of which is in the request's JSON; estimated counters scale by at most 1.25;
/// framing and images add fixed amounts.
fn upper_bound(req: &ChatRequest) -> u64 {
    /// Counts bytes written, keeps none.
    struct Count(u64);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let bytes = serde_json::to_writer(&mut count, req).map_or(u64::MAX / 2, |()| count.0);
    let images = req.messages.images() as u64;
    let framing = 16 + 4 * req.messages.len() as u64;
    (bytes + framing).saturating_mul(5) / 4 + images * u64::from(tokens::TOKENS_PER_IMAGE)
}

/// `9120` → `9,120`.
fn thousands(n: u32) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::{Image, Message, Role, Tool};
    use std::sync::Arc;

    const CONFIG: &str = r#"
backends:
  - {name: local, kind: vllm, endpoints: ["http://10.0.0.5:8000"], model: llama,
     capabilities: {max_context: 2000}}
  - {name: openai, kind: openai, model: gpt-4o, capabilities: {max_context: 3000}}
  - {name: claude, kind: anthropic, model: claude, capabilities: {tools: false}}
tasks:
  - {name: t, backends: [local, openai, claude], slo: {ttft_ms: 1000}}
"#;

    fn snap() -> Snapshot {
        Snapshot::from_config(Arc::new(crate::config::parse(CONFIG).unwrap()))
    }

    fn names(snap: &Snapshot, kept: &[BackendId]) -> Vec<String> {
        kept.iter().map(|&i| snap.backends[i].name.clone()).collect()
    }

    fn ids(indices: &[usize]) -> Vec<BackendId> {
        indices.iter().map(|&i| BackendId::new(i)).collect()
    }

    fn request(text: &str) -> ChatRequest {
        ChatRequest { messages: vec![Message::new(Role::User, text)].into(), ..Default::default() }
    }

    #[test]
    fn the_byte_bound_is_never_below_any_counters_count() {
        let texts =
            ["hello", "日本語のテキストと絵文字 🚀🚀🚀", "a b c d e f g h i j k", &"x".repeat(5000), ""];
        for text in texts {
            let req = request(text);
            let bound = upper_bound(&req);
            for counter in [
                tokens::TokenCounter::O200kBase,
                tokens::TokenCounter::Cl100kBase,
                tokens::TokenCounter::ClaudeEstimate,
                tokens::TokenCounter::GeminiEstimate,
                tokens::TokenCounter::LlamaEstimate,
            ] {
                assert!(u64::from(counter.count_request(&req)) <= bound, "{counter:?} on {text:?}");
            }
        }
    }

    #[test]
    fn a_plain_request_keeps_every_backend() {
        let snap = snap();
        let kept = filter(ids(&[0, 1, 2]), &request("hello"), &snap).unwrap();
        assert_eq!(names(&snap, &kept), ["local", "openai", "claude"]);
    }

    #[test]
    fn each_need_drops_the_backends_without_it() {
        let snap = snap();
        let mut req = request("weather?");
        req.tools.push(Tool {
            name: "get_weather".into(),
            description: None,
            parameters: Default::default(),
        });
        // vLLM pools have no tools by default; claude says tools: false.
        assert_eq!(names(&snap, &filter(ids(&[0, 1, 2]), &req, &snap).unwrap()), ["openai"]);

        let mut req = request("what is in it?");
        req.messages_mut()[0].images.push(Image { url: "https://example.com/a.png".into(), detail: None });
        assert_eq!(names(&snap, &filter(ids(&[0, 1, 2]), &req, &snap).unwrap()), ["openai", "claude"]);

        let mut req = request("json please");
        req.response_format = ResponseFormat::JsonSchema {
            name: "x".into(),
            schema: serde_json::json!({"type": "object"}),
            strict: true,
        };
        assert_eq!(
            names(&snap, &filter(ids(&[0, 1, 2]), &req, &snap).unwrap()),
            ["local", "openai", "claude"]
        );

        req.tools.push(Tool { name: "f".into(), description: None, parameters: Default::default() });
        let err = filter(ids(&[0, 2]), &req, &snap).unwrap_err();
        assert!(!err.is_context_length());
        assert_eq!(err.missing(), [Capability::Tools]);
        assert_eq!(
            err.to_string(),
            "no eligible backend can serve this request: local: no `tools` capability; claude: no `tools` capability"
        );
    }

    #[test]
    fn the_prompt_is_counted_with_each_backends_tokenizer_and_must_fit_with_max_tokens() {
        let snap = snap();
        let mut req = request(&"word ".repeat(1500));
        let o200k = tokens::TokenCounter::O200kBase.count_request(&req);
        let llama = tokens::TokenCounter::LlamaEstimate.count_request(&req);
        assert!(llama > o200k, "{llama} vs {o200k}");
        // Fits openai's 3000 but not the local pool's 2000.
        assert!(o200k < 2000 && llama < 2000, "{o200k} {llama}");
        req.max_tokens = Some(2000 - llama + 1);
        let kept = filter(ids(&[0, 1]), &req, &snap).unwrap();
        assert_eq!(names(&snap, &kept), ["openai"]);
        req.max_tokens = Some(2000 - llama);
        assert_eq!(filter(ids(&[0, 1]), &req, &snap).unwrap().len(), 2);

        req.max_tokens = Some(3000);
        let err = filter(ids(&[0, 1]), &req, &snap).unwrap_err();
        assert!(err.is_context_length());
        assert_eq!(
            err.refusals,
            [
                ("local".to_string(), Refusal::TooLong { needed: llama + 3000, max_context: 2000 }),
                ("openai".to_string(), Refusal::TooLong { needed: o200k + 3000, max_context: 3000 }),
            ]
        );
        let message = err.to_string();
        assert!(message.contains(&format!("needs {} tokens", thousands(o200k + 3000))), "{message}");
        assert!(
            message.contains("the largest context among eligible backends is 3,000 (openai)"),
            "{message}"
        );
    }

    #[test]
    fn only_openai_wire_backends_complete_and_only_backends_with_a_space_embed() {
        use crate::canonical::{Completion, Embedding, EncodingFormat, Input, Operation};
        let snap = Snapshot::from_config(Arc::new(
            crate::config::parse(
                r#"
backends:
  - {name: local, kind: vllm, endpoints: ["http://10.0.0.5:8000"], model: e5, embedding_space: e5}
  - {name: openai, kind: openai, model: text-embedding-3-small}
  - {name: claude, kind: anthropic, model: claude}
  - {name: gemini, kind: gemini, model: gemini}
tasks:
  - {name: t, backends: [local, openai, claude, gemini], slo: {ttft_ms: 1000}}
"#,
            )
            .unwrap(),
        ));
        let completion = ChatRequest {
            operation: Operation::Completion(Completion {
                prompt: Input::Text("Once".into()),
                stream: false,
                echo: None,
                logprobs: None,
                suffix: None,
                n: None,
                passthrough: Default::default(),
            }),
            ..Default::default()
        };
        let all = ids(&[0, 1, 2, 3]);
        assert_eq!(names(&snap, &filter(all.clone(), &completion, &snap).unwrap()), ["local", "openai"]);
        let err = filter(ids(&[2, 3]), &completion, &snap).unwrap_err();
        assert!(!err.is_context_length() && err.missing().is_empty());
        assert_eq!(
            err.to_string(),
            "no eligible backend serves legacy completions; only vllm, openai and openai_compatible backends do \
             (claude is kind anthropic, gemini is kind gemini)"
        );

        let embedding = ChatRequest {
            operation: Operation::Embedding(Embedding {
                input: Input::Texts(vec!["a".into()]),
                encoding_format: EncodingFormat::Float,
                dimensions: None,
                user: None,
            }),
            ..Default::default()
        };
        assert_eq!(names(&snap, &filter(all, &embedding, &snap).unwrap()), ["local"]);
        let err = filter(ids(&[1, 2]), &embedding, &snap).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no eligible backend serves embeddings; only backends that declare an embedding_space do \
             (openai declares no embedding_space, claude declares no embedding_space)"
        );
        // Chat is every backend's.
        assert_eq!(filter(ids(&[0, 1, 2, 3]), &request("hi"), &snap).unwrap().len(), 4);
    }

    #[test]
    fn thousands_are_grouped() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(9120), "9,120");
        assert_eq!(thousands(1_048_576), "1,048,576");
    }
}
