//! `POST /v1/embeddings`: OpenAI's embeddings dialect. It decodes the request (`input` as a
//! string, strings, token ids or lists of them; `encoding_format` float or base64;
//! `dimensions`; `user`) into a canonical request whose operation is an [`Embedding`], hands it
//! to the shared core (`serve::serve`: task, key, policy, capability, plan, dispatch), and
//! writes OpenAI's `list` of `embedding` objects with the task as its `model`.
//!
//! Only backends that declare an `embedding_space` are eligible (the capability filter), and a
//! task's backends share one space (config validation), so a failover never mixes vectors of
//! two models. Its decode and whole answer are a [`DialectDoor`], which batch lines go through
//! too. It must not route, retry or price anything itself.

use axum::response::Response;
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::{ApiError, ErrorCode};
use super::front::{self, Incoming};
use super::input::{self, EmptyText};
use super::whole::{self, DialectDoor, WholeBody};
use super::wire;
use crate::canonical::{vector_to_base64, ChatRequest, Embedding, EncodingFormat, Operation, Usage};
use crate::config::TaskConfig;
use crate::serve::{Headers, Served};

/// The most inputs one request may hold (OpenAI's limit).
pub(crate) const MAX_INPUTS: usize = 2048;

#[derive(Debug, Deserialize)]
pub(crate) struct EmbeddingsRequest {
    model: String,
    /// Checked by [`input::decode`], so that every wrong shape names its place.
    input: Value,
    #[serde(default)]
    encoding_format: Option<String>,
    #[serde(default)]
    dimensions: Option<u32>,
    #[serde(default)]
    user: Option<String>,
}

impl EmbeddingsRequest {
    /// How the client wants its vectors written: float unless it asks for base64.
    fn encoding_format(&self) -> Result<EncodingFormat, ApiError> {
        let Some(name) = self.encoding_format.as_deref() else { return Ok(EncodingFormat::Float) };
        EncodingFormat::ALL.into_iter().find(|f| f.as_str() == name).ok_or_else(|| {
            ApiError::new(
                ErrorCode::InvalidValue,
                format!("`encoding_format` must be float or base64, not `{name}`"),
            )
            .param("encoding_format")
        })
    }

    /// The canonical request (its `model` is filled in per backend by dispatch).
    fn to_canonical(&self) -> Result<ChatRequest, ApiError> {
        let input = input::decode(&self.input, "input", EmptyText::Refused)?;
        if input.len() > MAX_INPUTS {
            return Err(ApiError::new(
                ErrorCode::InvalidValue,
                format!("`input` holds {} inputs; at most {MAX_INPUTS} are allowed", input.len()),
            )
            .param("input"));
        }
        let encoding_format = self.encoding_format()?;
        if self.dimensions == Some(0) {
            return Err(
                ApiError::new(ErrorCode::InvalidValue, "`dimensions` must be at least 1").param("dimensions")
            );
        }
        Ok(ChatRequest {
            // No output: headroom and quotas count the input alone.
            max_tokens: Some(0),
            operation: Operation::Embedding(Embedding {
                input,
                encoding_format,
                dimensions: self.dimensions,
                user: self.user.clone(),
            }),
            ..ChatRequest::default()
        })
    }
}

/// OpenAI's embeddings.
pub(crate) struct Embeddings;

impl DialectDoor for Embeddings {
    type Request = EmbeddingsRequest;

    fn decode(body: &bytes::Bytes) -> Result<EmbeddingsRequest, ApiError> {
        wire::decode_json(body, "an embeddings request")
    }

    fn model(request: &EmbeddingsRequest) -> &str {
        &request.model
    }

    fn to_canonical(
        request: &mut EmbeddingsRequest,
        _: &dyn Headers,
        _: &TaskConfig,
    ) -> Result<ChatRequest, ApiError> {
        request.to_canonical()
    }

    /// OpenAI's `list` of `embedding` objects.
    async fn encode_whole(request: &EmbeddingsRequest, served: Served) -> WholeBody {
        let encoding_format = request.encoding_format()?;
        let Served { committed, task, .. } = served;
        let answer = whole::whole_answer(committed.events, &committed.backend).await?;
        let usage = answer.usage.unwrap_or_default();
        Ok(whole::to_body(&answer_json(&task, &answer.vectors, encoding_format, &usage)))
    }

    fn envelope(error: &ApiError) -> (u16, Value) {
        (error.status, error.body())
    }
}

pub async fn embeddings(incoming: Incoming) -> Result<Response, ApiError> {
    let Incoming { state, request_id, trace, headers, body } = incoming;
    let received = front::receive(&state, &headers, body).await?;
    let mut request = Embeddings::decode(&received.body)?;
    let arrival = received.arrival(request_id, trace, &headers);
    let served = whole::serve::<Embeddings>(&state.serving, arrival, &mut request).await?;
    whole::respond_whole::<Embeddings>(&request, served, received.admission).await
}

/// OpenAI's embeddings answer.
fn answer_json(task: &str, vectors: &[Vec<f32>], format: EncodingFormat, usage: &Usage) -> Value {
    let data: Vec<Value> = vectors
        .iter()
        .enumerate()
        .map(|(index, vector)| {
            let embedding = match format {
                EncodingFormat::Float => json!(vector),
                EncodingFormat::Base64 => json!(vector_to_base64(vector)),
            };
            json!({"object": "embedding", "index": index, "embedding": embedding})
        })
        .collect();
    json!({
        "object": "list",
        "data": data,
        "model": task,
        "usage": {"prompt_tokens": usage.input_tokens, "total_tokens": usage.input_tokens},
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::Input;

    fn decode(body: Value) -> Result<ChatRequest, ApiError> {
        let request: EmbeddingsRequest =
            wire::decode_json(body.to_string().as_bytes(), "an embeddings request")?;
        request.to_canonical()
    }

    #[test]
    fn a_request_decodes_to_an_embedding_operation() {
        let req = decode(json!({"model": "search", "input": ["a", "b"], "encoding_format": "base64",
                                "dimensions": 256, "user": "u-7"}))
        .unwrap();
        assert_eq!(req.max_tokens, Some(0));
        assert_eq!(
            req.operation,
            Operation::Embedding(Embedding {
                input: Input::Texts(vec!["a".into(), "b".into()]),
                encoding_format: EncodingFormat::Base64,
                dimensions: Some(256),
                user: Some("u-7".into()),
            })
        );
        let Operation::Embedding(plain) = decode(json!({"model": "search", "input": "a"})).unwrap().operation
        else {
            panic!("not an embedding")
        };
        assert_eq!(plain.encoding_format, EncodingFormat::Float, "float unless asked");
    }

    #[test]
    fn bad_requests_name_their_field() {
        let many: Vec<String> = (0..=MAX_INPUTS).map(|i| format!("t{i}")).collect();
        let cases = [
            (json!({"model": "search"}), "input"),
            (json!({"model": "search", "input": 5}), "input"),
            (json!({"model": "search", "input": [["x"]]}), "input[0][0]"),
            (json!({"model": "search", "input": many}), "input"),
            (json!({"model": "search", "input": "a", "encoding_format": "int8"}), "encoding_format"),
            (json!({"model": "search", "input": "a", "encoding_format": 1}), "encoding_format"),
            (json!({"model": "search", "input": "a", "dimensions": 0}), "dimensions"),
            (json!({"model": "search", "input": "a", "dimensions": -3}), "dimensions"),
            (json!({"input": "a"}), "model"),
        ];
        for (body, param) in cases {
            let error = decode(body.clone()).unwrap_err();
            assert_eq!(error.param.as_deref(), Some(param), "{body}: {error:?}");
            assert_eq!(error.status, 400, "{body}");
        }
    }

    #[test]
    fn the_answer_has_openais_shape_with_the_task_as_model() {
        let usage = Usage { input_tokens: 5, ..Usage::default() };
        let vectors = [vec![0.5, -1.0], vec![0.25, 0.0]];
        let floats = answer_json("search", &vectors, EncodingFormat::Float, &usage);
        assert_eq!(
            floats,
            json!({"object": "list", "model": "search", "usage": {"prompt_tokens": 5, "total_tokens": 5},
                   "data": [{"object": "embedding", "index": 0, "embedding": [0.5, -1.0]},
                            {"object": "embedding", "index": 1, "embedding": [0.25, 0.0]}]})
        );
        let base64 = answer_json("search", &vectors, EncodingFormat::Base64, &usage);
        assert_eq!(base64["data"][1]["embedding"], vector_to_base64(&[0.25, 0.0]));
    }
}
