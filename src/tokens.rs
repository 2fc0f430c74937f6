//! Token counting with each backend's own counter.
//!
//! Quotas, output caps and the capacity plan are all measured in the tokens of the backend
//! that serves a request, and tokenizers differ: the same prompt may be 3,000 tokens on one
//! backend and 3,300 on another. This module counts a canonical request the way its target
//! would, exactly where a public tokenizer exists (OpenAI's `o200k_base` and `cl100k_base`,
//! through `tiktoken-rs`) and as a documented, calibrated estimate elsewhere (Claude, Gemini,
//! Llama 3), scaled from the exact `o200k_base` count. A self-hosted model whose
//! `tokenizer.json` the config names (`tokenizer_file`) is counted exactly with that file,
//! through the `tokenizers` crate: [`FileTokenizer::load`] is the only I/O here, and config
//! loading calls it once. Which counter a backend uses is its provider's
//! (`adapter::provider::counter`). Counting is pure: no I/O, no clock. The BPE tables are
//! built once per process, lazily, on first use (call [`warm_up`] at start to pay that cost
//! before the first request does).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tiktoken_rs::CoreBPE;

use crate::canonical::{ChatRequest, Role};
use schemars::JsonSchema;
use serde::Deserialize;

/// A backend's token counter, as the config names it (`tokenizer`).
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Tokenizer {
    /// OpenAI's o200k_base (GPT-4o and later), exact.
    O200kBase,
    /// OpenAI's cl100k_base (GPT-4, GPT-3.5), exact.
    Cl100kBase,
    /// Claude models: calibrated estimate (no public tokenizer).
    ClaudeEstimate,
    /// Gemini models: calibrated estimate.
    GeminiEstimate,
    /// Llama 3 family (vLLM pools): calibrated estimate.
    LlamaEstimate,
}

/// Framing tokens per message (`<|start|>{role}<|message|>…<|end|>`), as OpenAI's cookbook
/// ("How to count tokens with tiktoken") documents for current chat models.
pub(crate) const TOKENS_PER_MESSAGE: u32 = 3;
/// Tokens that prime the assistant's reply, once per request (same source).
pub(crate) const REPLY_PRIMING: u32 = 3;
/// Extra tokens per tool call an earlier assistant turn made (tiktoken-rs's heuristic).
pub(crate) const TOKENS_PER_TOOL_CALL: u32 = 1;
/// An ESTIMATE per attached image: OpenAI's documented figure for a 1024×1024 image at high
/// detail (85 + 4 tiles × 170). Real counts depend on the image's size and the provider
/// (Anthropic documents about width × height / 750, Gemini 258 per 768×768 tile).
pub(crate) const TOKENS_PER_IMAGE: u32 = 765;

/// English prose used to measure a loaded tokenizer against `o200k_base` for the capacity
/// plan's reference ratio.
const RATIO_SAMPLE: &str = "The router sends each request to the team's own GPU fleet while it has \
headroom, and spills the overflow to hosted providers before the latency target breaks. \
Operators watch the time to first token, the queue and the cost of every task, and finance \
compares hosted prices with the price of GPU hours, idle time included.";

/// Calibrated ratios: tokens of an estimated tokenizer per `o200k_base` token, on English prose.
/// They are assumptions drawn from public statements, not measurements of this deployment;
/// code, non-English text and numbers can differ by much more. Keep them in this one table.
///
/// | counter | ratio | basis |
/// |---|---|---|
/// | Claude | 1.20 | Anthropic publishes no tokenizer; third-party comparisons of Claude 3.5 Sonnet and GPT-4o on fixed prompts report 20–30 % more tokens on Claude (more on code), others 5–15 % on plain English. 1.20 leans high, so quotas are protected rather than overrun. |
/// | Gemini | 1.00 | Google's docs: "a token is equivalent to about 4 characters; 100 tokens ≈ 60–80 English words", OpenAI's own rule of thumb for its tokenizers. |
/// | Llama 3 | 1.05 | Meta: Llama 3's 128 K vocabulary is tiktoken's 100 K (cl100k) plus 28 K non-English tokens, ≈ 4 characters per token on English; cl100k runs a few percent above o200k on English. |
/// | cl100k_base | 1.00 | exact counts come from the real table; this ratio is only used to convert *reference* loads in the capacity plan (within a few percent of o200k on English). |
pub(crate) const RATIOS: [(Tokenizer, f64); 5] = [
    (Tokenizer::O200kBase, 1.0),
    (Tokenizer::Cl100kBase, 1.0),
    (Tokenizer::ClaudeEstimate, 1.20),
    (Tokenizer::GeminiEstimate, 1.00),
    (Tokenizer::LlamaEstimate, 1.05),
];

/// A HuggingFace `tokenizer.json`, loaded once.
pub struct FileTokenizer {
    path: PathBuf,
    tokenizer: tokenizers::Tokenizer,
    /// Tokens of this tokenizer per `o200k_base` token on [`RATIO_SAMPLE`].
    ratio: f64,
}

impl FileTokenizer {
    /// Read and parse `path` (a local file; nothing is ever downloaded).
    pub fn load(path: &Path) -> Result<FileTokenizer, String> {
        let tokenizer = tokenizers::Tokenizer::from_file(path)
            .map_err(|e| format!("cannot load the tokenizer at {}: {e}", path.display()))?;
        let mut loaded = FileTokenizer { path: path.to_path_buf(), tokenizer, ratio: 1.0 };
        let reference = o200k().count_ordinary(RATIO_SAMPLE).max(1) as f64;
        loaded.ratio = f64::from(loaded.count(RATIO_SAMPLE)) / reference;
        Ok(loaded)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Tokens of `text`, without the special tokens a template would add.
    pub fn count(&self, text: &str) -> u32 {
        if text.is_empty() {
            return 0;
        }
        match self.tokenizer.encode(text, false) {
            Ok(encoding) => saturate(encoding.len()),
            // The tokenizer could not encode this text: fall back to the documented estimate.
            Err(_) => TokenCounter::LlamaEstimate.count_text(text),
        }
    }
}

impl std::fmt::Debug for FileTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileTokenizer").field("path", &self.path).field("ratio", &self.ratio).finish()
    }
}

/// Two loaded tokenizers are the same when they came from the same file.
impl PartialEq for FileTokenizer {
    fn eq(&self, other: &Self) -> bool {
        self.path == other.path
    }
}

impl Eq for FileTokenizer {}

/// How one backend's tokens are counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenCounter {
    /// OpenAI's `o200k_base` (GPT-4o and later): exact, from the real BPE table.
    O200kBase,
    /// OpenAI's `cl100k_base` (GPT-4, GPT-3.5): exact, from the real BPE table.
    Cl100kBase,
    /// Claude: an ESTIMATE, the `o200k_base` count × the Claude ratio in [`RATIOS`] (rounded
    /// up). Anthropic's own count is only available from its API.
    ClaudeEstimate,
    /// Gemini: an ESTIMATE, the `o200k_base` count × the Gemini ratio in [`RATIOS`] (rounded
    /// up). Google's exact count is only available from its `countTokens` API.
    GeminiEstimate,
    /// Llama 3 family (vLLM pools): an ESTIMATE, the `o200k_base` count × the Llama ratio in
    /// [`RATIOS`] (rounded up). The pool itself reports exact usage after the fact.
    LlamaEstimate,
    /// The model's own `tokenizer.json` (`tokenizer_file`): exact counts of the text; the
    /// chat template's framing is counted as [`TOKENS_PER_MESSAGE`] per message.
    File(Arc<FileTokenizer>),
}

/// Build the shared BPE tables now (they take a noticeable moment, once per process).
/// Optional: counting builds them on first use otherwise.
pub(crate) fn warm_up() {
    let _ = o200k();
    let _ = cl100k();
}

fn o200k() -> &'static CoreBPE {
    tiktoken_rs::o200k_base_singleton()
}

fn cl100k() -> &'static CoreBPE {
    tiktoken_rs::cl100k_base_singleton()
}

impl From<Tokenizer> for TokenCounter {
    fn from(tokenizer: Tokenizer) -> Self {
        match tokenizer {
            Tokenizer::O200kBase => TokenCounter::O200kBase,
            Tokenizer::Cl100kBase => TokenCounter::Cl100kBase,
            Tokenizer::ClaudeEstimate => TokenCounter::ClaudeEstimate,
            Tokenizer::GeminiEstimate => TokenCounter::GeminiEstimate,
            Tokenizer::LlamaEstimate => TokenCounter::LlamaEstimate,
        }
    }
}

impl TokenCounter {
    /// The config name of this counter (`None` for a `tokenizer_file`).
    pub fn tokenizer(&self) -> Option<Tokenizer> {
        Some(match self {
            TokenCounter::O200kBase => Tokenizer::O200kBase,
            TokenCounter::Cl100kBase => Tokenizer::Cl100kBase,
            TokenCounter::ClaudeEstimate => Tokenizer::ClaudeEstimate,
            TokenCounter::GeminiEstimate => Tokenizer::GeminiEstimate,
            TokenCounter::LlamaEstimate => Tokenizer::LlamaEstimate,
            TokenCounter::File(_) => return None,
        })
    }

    /// The name used in the config and in reports, e.g. `claude_estimate`.
    pub fn name(&self) -> &'static str {
        match self {
            TokenCounter::O200kBase => "o200k_base",
            TokenCounter::Cl100kBase => "cl100k_base",
            TokenCounter::ClaudeEstimate => "claude_estimate",
            TokenCounter::GeminiEstimate => "gemini_estimate",
            TokenCounter::LlamaEstimate => "llama_estimate",
            TokenCounter::File(_) => "tokenizer_file",
        }
    }

    /// Whether counts are exact (a real tokenizer) rather than an estimate.
    pub(crate) fn is_exact(&self) -> bool {
        matches!(self, TokenCounter::O200kBase | TokenCounter::Cl100kBase | TokenCounter::File(_))
    }

    /// This counter's tokens per `o200k_base` token on English prose (see [`RATIOS`]; a
    /// `tokenizer_file` is measured on a fixed English sample when it is loaded); the capacity
    /// plan converts reference (o200k) loads into each backend's tokens with it.
    pub fn reference_ratio(&self) -> f64 {
        if let TokenCounter::File(file) = self {
            return file.ratio;
        }
        let tokenizer = self.tokenizer();
        RATIOS.iter().find(|(t, _)| Some(*t) == tokenizer).map(|(_, r)| *r).unwrap_or(1.0)
    }

    /// Tokens in a piece of text. Special-token markers in the text (`<|endoftext|>`) count as
    /// ordinary text, as providers treat user content.
    pub(crate) fn count_text(&self, text: &str) -> u32 {
        match self {
            TokenCounter::Cl100kBase => saturate(cl100k().count_ordinary(text)),
            TokenCounter::File(file) => file.count(text),
            _ => self.scale(saturate(o200k().count_ordinary(text))),
        }
    }

    /// Tokens of a whole request as the provider bills its input: every message's role,
    /// content, tool calls and tool-call id, plus [`TOKENS_PER_MESSAGE`] per message and
    /// [`REPLY_PRIMING`] once (OpenAI's documented framing), plus the tool definitions as
    /// OpenAI-style JSON (providers render tools in their own formats; JSON is a close,
    /// slightly high approximation), plus a JSON response schema the same way, plus
    /// [`TOKENS_PER_IMAGE`] per image, plus a completion's prompt or an embeddings input (its
    /// token ids as given). Estimated counters scale the whole `o200k_base` figure.
    /// The output (`max_tokens`) is not included: add it where a quota counts the output cap.
    pub fn count_request(&self, req: &ChatRequest) -> u32 {
        let count = |text: &str| match self {
            TokenCounter::Cl100kBase => saturate(cl100k().count_ordinary(text)),
            TokenCounter::File(file) => file.count(text),
            _ => saturate(o200k().count_ordinary(text)),
        };
        let mut total = REPLY_PRIMING;
        for message in &req.messages {
            total = total
                .saturating_add(TOKENS_PER_MESSAGE)
                .saturating_add(count(role_name(message.role)))
                .saturating_add(count(&message.content));
            for call in &message.tool_calls {
                total = total
                    .saturating_add(count(&call.name))
                    .saturating_add(count(&call.arguments))
                    .saturating_add(TOKENS_PER_TOOL_CALL);
            }
            if let Some(id) = &message.tool_call_id {
                total = total.saturating_add(count(id));
            }
            let images = u32::try_from(message.images.len()).unwrap_or(u32::MAX);
            total = total.saturating_add(images.saturating_mul(TOKENS_PER_IMAGE));
        }
        if let crate::canonical::ResponseFormat::JsonSchema { schema, .. } = &req.response_format {
            total = total.saturating_add(count(&schema.to_string()));
        }
        if !req.tools.is_empty() {
            /// A tool as OpenAI's chat wire declares it, the text counted.
            #[derive(serde::Serialize)]
            struct Declared<'a> {
                #[serde(rename = "type")]
                kind: &'static str,
                function: &'a crate::canonical::Tool,
            }
            let tools: Vec<_> =
                req.tools.iter().map(|function| Declared { kind: "function", function }).collect();
            total = total.saturating_add(count(&serde_json::to_string(&tools).unwrap_or_default()));
        }
        // A completion's prompt or an embeddings input: its texts are counted, its token ids
        // are already this backend's tokens (not scaled).
        let mut given_ids = 0;
        if let Some(input) = req.operation.input() {
            for text in input.texts() {
                total = total.saturating_add(count(text));
            }
            given_ids = saturate(input.token_ids());
        }
        let total = match self {
            TokenCounter::O200kBase | TokenCounter::Cl100kBase | TokenCounter::File(_) => total,
            _ => self.scale(total),
        };
        total.saturating_add(given_ids)
    }

    fn scale(&self, o200k_tokens: u32) -> u32 {
        let ratio = self.reference_ratio();
        if ratio == 1.0 {
            return o200k_tokens;
        }
        // Round up: an estimate should err towards protecting the quota.
        let scaled = (o200k_tokens as f64 * ratio).ceil();
        if scaled >= u32::MAX as f64 {
            u32::MAX
        } else {
            scaled as u32
        }
    }
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

fn saturate(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::{Message, Tool, ToolCall};
    use serde_json::json;

    #[test]
    fn known_tiktoken_counts() {
        // Reference values from OpenAI's tiktoken (Python) for the same strings.
        assert_eq!(TokenCounter::O200kBase.count_text("hello world"), 2);
        assert_eq!(TokenCounter::Cl100kBase.count_text("hello world"), 2);
        assert_eq!(TokenCounter::O200kBase.count_text(""), 0);
        // "tiktoken is great!" is 6 tokens under cl100k_base (OpenAI's cookbook example).
        assert_eq!(TokenCounter::Cl100kBase.count_text("tiktoken is great!"), 6);
        // Special-token markers are counted as text, never as one special token.
        assert!(TokenCounter::O200kBase.count_text("<|endoftext|>") > 1);
    }

    #[test]
    fn estimates_scale_the_o200k_count_as_documented_and_say_they_are_estimates() {
        let text = "The quick brown fox jumps over the lazy dog. ".repeat(100);
        let reference = TokenCounter::O200kBase.count_text(&text);
        assert!(reference > 900, "{reference}");
        for counter in
            [TokenCounter::ClaudeEstimate, TokenCounter::GeminiEstimate, TokenCounter::LlamaEstimate]
        {
            let expected = (reference as f64 * counter.reference_ratio()).ceil() as u32;
            assert_eq!(counter.count_text(&text), expected, "{counter:?}");
            assert!(!counter.is_exact());
        }
        assert_eq!(TokenCounter::ClaudeEstimate.reference_ratio(), 1.2);
        assert_eq!(TokenCounter::GeminiEstimate.reference_ratio(), 1.0);
        assert_eq!(TokenCounter::LlamaEstimate.reference_ratio(), 1.05);
        assert!(TokenCounter::O200kBase.is_exact() && TokenCounter::Cl100kBase.is_exact());
        assert_eq!(TokenCounter::O200kBase.reference_ratio(), 1.0);
    }

    fn fixture() -> FileTokenizer {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tokenizer/tokenizer.json");
        FileTokenizer::load(&path).unwrap()
    }

    #[test]
    fn a_tokenizer_file_counts_exactly_as_the_reference_implementation() {
        // Reference counts from HuggingFace's Python `tokenizers` on the same file (make.py).
        let counter = TokenCounter::File(Arc::new(fixture()));
        assert_eq!(counter.count_text("hello world"), 9);
        assert_eq!(counter.count_text("The router sends each request to the team's own GPU fleet."), 33);
        assert_eq!(counter.count_text("Zürich ☃"), 10);
        assert_eq!(counter.count_text(""), 0);
        assert!(counter.is_exact());
        assert_eq!(counter.name(), "tokenizer_file");
        assert_eq!(counter.tokenizer(), None);
        // A small vocabulary needs more tokens than o200k_base for the same English.
        assert!(counter.reference_ratio() > 1.0, "{}", counter.reference_ratio());
        let req = ChatRequest {
            messages: vec![Message::new(Role::User, "hello world")].into(),
            ..Default::default()
        };
        assert_eq!(
            counter.count_request(&req),
            REPLY_PRIMING + TOKENS_PER_MESSAGE + counter.count_text("user") + 9
        );
    }

    #[test]
    fn a_missing_or_broken_tokenizer_file_is_an_error_naming_it() {
        let err = FileTokenizer::load(Path::new("/nonexistent/tokenizer.json")).unwrap_err();
        assert!(err.contains("/nonexistent/tokenizer.json"), "{err}");
        let broken = std::env::temp_dir().join(format!("spillway-broken-{}.json", std::process::id()));
        std::fs::write(&broken, "{\"not\": \"a tokenizer\"}").unwrap();
        assert!(FileTokenizer::load(&broken).is_err());
        let _ = std::fs::remove_file(broken);
    }

    #[test]
    fn images_and_a_response_schema_count_towards_the_prompt() {
        let c = TokenCounter::O200kBase;
        let mut req = ChatRequest {
            messages: vec![Message::new(Role::User, "what is this?")].into(),
            ..Default::default()
        };
        let plain = c.count_request(&req);
        req.messages_mut()[0]
            .images
            .push(crate::canonical::Image { url: "https://x/a.png".into(), detail: None });
        assert_eq!(c.count_request(&req), plain + TOKENS_PER_IMAGE);
        let schema = json!({"type": "object", "properties": {"answer": {"type": "string"}}});
        req.response_format = crate::canonical::ResponseFormat::JsonSchema {
            name: "a".into(),
            schema: schema.clone(),
            strict: true,
        };
        assert_eq!(c.count_request(&req), plain + TOKENS_PER_IMAGE + c.count_text(&schema.to_string()));
    }

    #[test]
    fn a_request_counts_messages_with_their_framing_and_tools() {
        let c = TokenCounter::O200kBase;
        let mut req = ChatRequest {
            messages: vec![
                Message::new(Role::System, "You are terse."),
                Message::new(Role::User, "hello world"),
            ]
            .into(),
            ..Default::default()
        };
        let expected = REPLY_PRIMING
            + 2 * TOKENS_PER_MESSAGE
            + c.count_text("system")
            + c.count_text("You are terse.")
            + c.count_text("user")
            + c.count_text("hello world");
        assert_eq!(c.count_request(&req), expected);

        let mut answer = Message::new(Role::Assistant, "");
        answer.tool_calls.push(ToolCall {
            id: "call_1".into(),
            name: "lookup".into(),
            arguments: r#"{"id": 42}"#.into(),
        });
        req.messages_mut().push(answer);
        let with_call = c.count_request(&req);
        assert_eq!(
            with_call,
            expected
                + TOKENS_PER_MESSAGE
                + c.count_text("assistant")
                + c.count_text("lookup")
                + c.count_text(r#"{"id": 42}"#)
                + TOKENS_PER_TOOL_CALL
        );

        req.tools.push(Tool {
            name: "lookup".into(),
            description: Some("Find a ticket by id".into()),
            parameters: json!({"type": "object", "properties": {"id": {"type": "integer"}}}).into(),
        });
        let with_tools = c.count_request(&req);
        assert!(with_tools > with_call + 10, "{with_tools} vs {with_call}");

        let claude = TokenCounter::ClaudeEstimate.count_request(&req);
        assert_eq!(claude, (with_tools as f64 * 1.2).ceil() as u32);
    }
}
