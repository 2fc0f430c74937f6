//! What a canonical request asks for: a chat answer (the default), a legacy text completion, or
//! embeddings. The operation rides on [`super::ChatRequest`], so that planning, the dispatch
//! walk, guards, the ledger and the metrics treat every operation the same way; only the
//! capability filter (which backends can do it) and the adapters (its wire) look inside.
//!
//! Nothing here decodes a client's wire or knows a provider: the front doors build these
//! values already checked, and the OpenAI adapters write them back out.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// What the request asks the backend to do.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Operation {
    /// A chat answer to `messages` (OpenAI chat, Anthropic Messages, Responses).
    #[default]
    Chat,
    /// A legacy text completion of a prompt (OpenAI's `/v1/completions`).
    Completion(Completion),
    /// One embedding vector per input (OpenAI's `/v1/embeddings`).
    Embedding(Embedding),
}

impl Operation {
    /// In words, for the client's error when no backend can do it.
    pub(crate) fn describe(&self) -> &'static str {
        match self {
            Operation::Chat => "chat",
            Operation::Completion(_) => "legacy completions",
            Operation::Embedding(_) => "embeddings",
        }
    }

    /// The text and token inputs of a completion's prompt or an embedding's input (none for
    /// chat, whose input is its messages).
    pub fn input(&self) -> Option<&Input> {
        match self {
            Operation::Chat => None,
            Operation::Completion(c) => Some(&c.prompt),
            Operation::Embedding(e) => Some(&e.input),
        }
    }
}

/// A prompt or an embeddings input, in the shape the client wrote it (OpenAI takes the same
/// four shapes for both), so that it reaches an OpenAI-wire upstream unchanged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Input {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<u32>),
    TokenLists(Vec<Vec<u32>>),
}

impl Input {
    /// How many separate inputs it holds: one answer (vector, or choice per `n`) each.
    pub fn len(&self) -> usize {
        match self {
            Input::Text(_) | Input::Tokens(_) => 1,
            Input::Texts(texts) => texts.len(),
            Input::TokenLists(lists) => lists.len(),
        }
    }

    /// Whether it holds no input at all (the decoders refuse that).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Its texts (none when it is given as tokens).
    pub fn texts(&self) -> Vec<&str> {
        match self {
            Input::Text(text) => vec![text],
            Input::Texts(texts) => texts.iter().map(String::as_str).collect(),
            Input::Tokens(_) | Input::TokenLists(_) => Vec::new(),
        }
    }

    /// The tokens given as ids (none when it is given as text).
    pub(crate) fn token_ids(&self) -> usize {
        match self {
            Input::Text(_) | Input::Texts(_) => 0,
            Input::Tokens(ids) => ids.len(),
            Input::TokenLists(lists) => lists.iter().map(Vec::len).sum(),
        }
    }
}

/// A legacy completion. The sampling settings both operations share (`max_tokens`,
/// `temperature`, `top_p`, `stop`, `seed`) are the request's own fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Completion {
    pub prompt: Input,
    /// The client's own `stream`. The upstream is asked the same, whatever `stream_upstream`
    /// says: a non-streamed completion is relayed whole, as the upstream wrote it.
    pub stream: bool,
    /// Answer with the prompt before the completion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub echo: Option<bool>,
    /// Log probabilities of this many most likely tokens at each position.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<u32>,
    /// Text after the completion (insertion), where the model supports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suffix: Option<String>,
    /// Completions per prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<u32>,
    /// The client's other members (`presence_penalty`, `logit_bias`, `user`, an engine's own
    /// sampling settings such as vLLM's `top_k`), passed on as written.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub passthrough: Map<String, Value>,
}

/// An embeddings request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Embedding {
    pub input: Input,
    /// How the client wants the vectors written (the upstream is asked the same).
    pub encoding_format: EncodingFormat,
    /// Shorter vectors, where the model supports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dimensions: Option<u32>,
    /// The end user, passed on for the provider's abuse monitoring.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

/// How vectors are written in an embeddings answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EncodingFormat {
    /// JSON arrays of numbers.
    #[default]
    Float,
    /// Base64 of the little-endian `f32` bytes.
    Base64,
}

impl EncodingFormat {
    pub const ALL: [EncodingFormat; 2] = [EncodingFormat::Float, EncodingFormat::Base64];

    pub fn as_str(self) -> &'static str {
        match self {
            EncodingFormat::Float => "float",
            EncodingFormat::Base64 => "base64",
        }
    }
}

/// A vector as base64 of its little-endian `f32` bytes (OpenAI's `encoding_format: base64`).
pub fn vector_to_base64(vector: &[f32]) -> String {
    use base64::Engine;
    let bytes: Vec<u8> = vector.iter().flat_map(|x| x.to_le_bytes()).collect();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The vector in a base64 text of little-endian `f32` bytes; `None` when it is not one.
pub fn vector_from_base64(text: &str) -> Option<Vec<f32>> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD.decode(text).ok()?;
    if bytes.len() % 4 != 0 {
        return None;
    }
    Some(bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_count_their_parts_and_serialise_as_written() {
        let cases = [
            (Input::Text("hi".into()), 1, 0, r#""hi""#),
            (Input::Texts(vec!["a".into(), "b".into()]), 2, 0, r#"["a","b"]"#),
            (Input::Tokens(vec![1, 2, 3]), 1, 3, "[1,2,3]"),
            (Input::TokenLists(vec![vec![1], vec![2, 3]]), 2, 3, "[[1],[2,3]]"),
        ];
        for (input, len, ids, json) in cases {
            assert_eq!((input.len(), input.token_ids()), (len, ids), "{input:?}");
            assert_eq!(serde_json::to_string(&input).unwrap(), json);
        }
        assert_eq!(Input::Texts(vec!["a".into(), "b".into()]).texts(), ["a", "b"]);
        assert!(Input::Tokens(vec![7]).texts().is_empty());
    }

    #[test]
    fn base64_vectors_are_little_endian_f32() {
        let vector = [1.0f32, -0.5, 0.125];
        let text = vector_to_base64(&vector);
        // 1.0 is 0x3f800000: bytes 00 00 80 3f.
        assert!(text.starts_with("AACAPw"), "{text}");
        assert_eq!(vector_from_base64(&text).unwrap(), vector);
        assert_eq!(vector_from_base64("AAAA"), None, "three bytes are no f32");
        assert_eq!(vector_from_base64("not base64!"), None);
    }
}
