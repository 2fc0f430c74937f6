//! OpenAI embeddings, as spoken by vLLM, OpenAI and any OpenAI-compatible endpoint.
//!
//! `POST {base_url}/embeddings` with `model` rewritten to the backend's and the client's
//! `input`, `encoding_format`, `dimensions` and `user` as given. The answer's vectors, written
//! as JSON numbers or as base64 of little-endian `f32` (whichever the upstream chose), come back
//! as one [`Event::Embeddings`] in input order, then the usage and the finish. An answer with a
//! vector missing, doubled or unreadable is a broken answer, found before dispatch commits, so
//! the request can still fail over. Never streamed: `stream` and `stream_upstream` do not apply.

use futures::StreamExt;
use reqwest::header::CONTENT_TYPE;
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};

use super::error::{classify, ErrorObject};
use super::stream::UsageIn;
use crate::adapter::transport::http;
use crate::adapter::wire::{ObjectOr, Scalar};
use crate::adapter::{Call, EventStream, Transport};
use crate::canonical::{
    vector_from_base64, Embedding, ErrorClass, Event, FinishReason, Input, UpstreamError, Usage,
};

pub(in crate::adapter) async fn send(
    transport: &Transport,
    call: &Call<'_>,
    embedding: &Embedding,
) -> Result<EventStream, UpstreamError> {
    let url = call.upstream.url("embeddings");
    let mut headers = vec![(CONTENT_TYPE, "application/json".to_string())];
    headers.extend(call.upstream.openai_key());
    let body =
        serde_json::to_vec(&EmbeddingBody::of(call.model, embedding)).expect("a typed body serialises");
    call.upstream.authenticate(&url, &mut headers, &body).await?;
    let answer = http::post(transport, &url, &headers, body, classify).await?;
    let inputs = embedding.input.len();
    let events = http::json_answer_events(answer, parse_response).map(move |item| match item {
        Ok(Event::Embeddings(vectors)) if vectors.len() != inputs => {
            Err(broken(format!("the upstream answered {} embeddings for {inputs} inputs", vectors.len())))
        }
        other => other,
    });
    Ok(Box::pin(events))
}

/// The embeddings request body for the backend's `model`.
#[derive(Serialize)]
pub(crate) struct EmbeddingBody<'a> {
    model: &'a str,
    input: &'a Input,
    encoding_format: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    dimensions: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<&'a str>,
}

impl<'a> EmbeddingBody<'a> {
    pub(crate) fn of(model: &'a str, embedding: &'a Embedding) -> EmbeddingBody<'a> {
        EmbeddingBody {
            model,
            input: &embedding.input,
            encoding_format: embedding.encoding_format.as_str(),
            dimensions: embedding.dimensions,
            user: embedding.user.as_deref(),
        }
    }
}

fn broken(why: impl Into<String>) -> UpstreamError {
    UpstreamError::new(ErrorClass::StreamBroken, None, why)
}

/// The events of an embeddings answer: its vectors in `index` order, its usage, the finish.
pub(in crate::adapter) fn parse_response(body: &[u8]) -> Result<Vec<Event>, UpstreamError> {
    let no_data = || broken("the embeddings answer has no `data` list");
    let answer: AnswerIn = serde_json::from_slice(body).map_err(|_| no_data())?;
    if let Some(error) = answer.error.as_ref().and_then(ObjectOr::object) {
        return Err(error.in_band());
    }
    let Some(ListOr::List(data)) = answer.data else { return Err(no_data()) };
    let mut vectors: Vec<Option<Vec<f32>>> = vec![None; data.len()];
    for (position, item) in data.into_iter().enumerate() {
        let index = item.index.number().map_or(position, |i| i as usize);
        let answered = vectors.len();
        let slot = vectors
            .get_mut(index)
            .ok_or_else(|| broken(format!("embedding index {index} is outside the {answered} answered")))?;
        if slot.is_some() {
            return Err(broken(format!("embedding index {index} is answered twice")));
        }
        *slot = Some(item.embedding.vector().ok_or_else(|| {
            broken(format!("embedding {index} is neither a list of numbers nor base64 of f32s"))
        })?);
    }
    // Every slot is filled: `data.len()` distinct indices below `data.len()`.
    let vectors: Vec<Vec<f32>> = vectors.into_iter().flatten().collect();
    let input_tokens =
        answer.usage.as_ref().and_then(ObjectOr::object).map_or(0, |u| u.to_usage().input_tokens);
    Ok(vec![
        Event::Embeddings(vectors),
        Event::Usage(Usage { input_tokens, ..Usage::default() }),
        Event::Finish(FinishReason::Stop),
    ])
}

/// An embeddings answer: its vectors, its usage, or the error an upstream wrote in a 200.
#[derive(Deserialize)]
struct AnswerIn {
    #[serde(default)]
    error: Option<ObjectOr<ErrorObject>>,
    #[serde(default)]
    data: Option<ListOr>,
    #[serde(default)]
    usage: Option<ObjectOr<UsageIn>>,
}

/// `data`, when it is a list.
#[derive(Deserialize)]
#[serde(untagged)]
enum ListOr {
    List(Vec<ItemIn>),
    Other(IgnoredAny),
}

#[derive(Deserialize)]
struct ItemIn {
    /// Its input's place; by position when it has none.
    #[serde(default)]
    index: Scalar,
    #[serde(default)]
    embedding: VectorIn,
}

/// A vector as JSON numbers or as base64 of little-endian `f32`s.
#[derive(Default, Deserialize)]
#[serde(untagged)]
enum VectorIn {
    Numbers(Vec<f64>),
    Base64(String),
    #[default]
    #[serde(skip)]
    Absent,
    Other(IgnoredAny),
}

impl VectorIn {
    fn vector(&self) -> Option<Vec<f32>> {
        match self {
            VectorIn::Numbers(numbers) => Some(numbers.iter().map(|&x| x as f32).collect()),
            VectorIn::Base64(text) => vector_from_base64(text),
            VectorIn::Absent | VectorIn::Other(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::vector_to_base64;
    use serde_json::json;

    #[test]
    fn unreadable_answers_say_what_is_wrong() {
        let cases = [
            (json!({"object": "list"}), "no `data` list"),
            (json!({"data": [{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [2.0]}]}), "twice"),
            (json!({"data": [{"index": 5, "embedding": [1.0]}]}), "index 5 is outside"),
            (json!({"data": [{"index": 0, "embedding": {"x": 1}}]}), "neither a list of numbers nor base64"),
            (json!({"data": [{"index": 0, "embedding": "AAA"}]}), "neither a list of numbers nor base64"),
        ];
        for (body, expected) in cases {
            let error = parse_response(body.to_string().as_bytes()).unwrap_err();
            assert_eq!(error.class, ErrorClass::StreamBroken);
            assert!(error.message.contains(expected), "{body}: {}", error.message);
        }
        let error = parse_response(
            json!({"error": {"message": "bad input", "type": "invalid_request_error"}})
                .to_string()
                .as_bytes(),
        )
        .unwrap_err();
        assert_eq!(error.message, "bad input");
        let floats = parse_response(
            json!({"data": [{"embedding": vector_to_base64(&[0.75])}]}).to_string().as_bytes(),
        )
        .unwrap();
        assert_eq!(floats[0], Event::Embeddings(vec![vec![0.75]]), "no index: by position");
        assert_eq!(floats[1], Event::Usage(Usage::default()), "no usage: zero");
    }
}
