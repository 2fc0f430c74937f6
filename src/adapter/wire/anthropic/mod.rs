//! Anthropic Messages API.
//!
//! `POST {base_url}/v1/messages` with `x-api-key` and `anthropic-version: 2023-06-01`. System
//! messages go to the top-level `system`; tool calls and results become `tool_use` and
//! `tool_result` content blocks; consecutive messages of one role are merged, as the API wants
//! roles to alternate. A stream is complete only once `message_stop` has arrived.
//!
//! Structured output follows Anthropic's documented, generally available form (Claude
//! Sonnet 4.5, Opus 4.5 and Haiku 4.5 and later; no beta header): a `json_schema` response
//! format becomes `output_config: {format: {type: "json_schema", schema}}`, and the answer
//! comes back as text holding the JSON. Anthropic has no schema-less JSON mode, so
//! `json_object` adds one line to the system prompt asking for a single JSON object; in both
//! cases dispatch checks the answer before anything reaches the client. Images become `image`
//! blocks after the message's text: a base64 `data:` URL as a `base64` source, any other
//! address as a `url` source.
//!
//! The body is typed and serialised once ([`body`]): translated from the canonical request
//! ([`request`]) or the client's own Messages body ([`native`]), with the fields its host takes
//! beside it ([`HostFields`]), marked for the prompt cache ([`cache`]), and for the count route
//! the same body less what says how to answer.

use reqwest::header::{HeaderName, ACCEPT, CONTENT_TYPE};

use crate::adapter::transport;
use crate::adapter::transport::http;
use crate::adapter::{Call, EventStream, Transport};
use crate::canonical::{ChatRequest, Dialect, NativeRequest, UpstreamError};

mod body;
pub mod cache;
mod count;
pub mod error;
pub mod host;
pub(crate) mod native;
pub mod provenance;
mod request;
pub mod stream;

use body::{ClaudeBody, Purpose};
pub(in crate::adapter) use count::count_tokens;
pub(in crate::adapter) use error::classify;
pub use host::{ClaudeHost, HostFields};
use stream::{parse_response, relayed, AnthropicStream};

/// The API version this adapter speaks.
pub const API_VERSION: &str = "2023-06-01";

/// `max_tokens` is required by Anthropic; used when the request has none.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// Appended to the system prompt for `response_format: json_object` (no native JSON mode).
pub const JSON_OBJECT_INSTRUCTION: &str =
    "Answer with a single JSON object and nothing else: no prose and no code fences.";

/// `POST` in the Messages format to `host`: Anthropic itself, a node that serves the Messages
/// API natively, or a cloud's Claude. A request that came in Messages form goes as the client
/// wrote it (see [`native`]); any other is translated from the canonical request.
pub(in crate::adapter) async fn send_to(
    transport: &Transport,
    call: &Call<'_>,
    req: &ChatRequest,
    host: &dyn ClaudeHost,
) -> Result<EventStream, UpstreamError> {
    let url = host.url(&call.upstream.base_url, call.model, call.stream);
    let (mut headers, betas) = headers(call, req, host);
    if call.stream {
        headers.push((ACCEPT, host.stream_type().to_string()));
    }
    let mut body = body(call, req, host, host.fields(call.model, call.stream, &betas), Purpose::Answer);
    // Claude caches where told to; a node caches every prefix on its own.
    if let (Some(placement), true) = (&call.cache_placement, host.signer().is_some()) {
        let placed = cache::place(&mut body, placement);
        tracing::debug!(?placed, "prompt-cache breakpoints");
    }
    let body = serde_json::to_vec(&body).expect("a typed body serialises");
    call.upstream.authenticate(&url, &mut headers, &body).await?;
    let answer =
        transport::eventstream::unframed(http::post(transport, &url, &headers, body, host.classify()).await?);
    let relaying = req.relaying(client(req).is_some());
    let signer = host.signer();
    let parse =
        move |b: &[u8]| if relaying.is_on() { relayed(b, signer, relaying) } else { parse_response(b) };
    Ok(http::answer_events(answer, call.stream, AnthropicStream::new(relaying, signer), parse))
}

/// The body `host` is sent for `req` (a bench's reading of the whole write).
#[doc(hidden)]
pub fn body_for(req: &ChatRequest, host: &'static dyn ClaudeHost) -> Vec<u8> {
    use crate::adapter::{Upstream, WireFormat};
    let call = Call::as_written(WireFormat::Claude(host), Upstream::default(), req);
    let fields = host.fields(call.model, call.stream, &[]);
    serde_json::to_vec(&body(&call, req, host, fields, Purpose::Answer)).expect("a typed body serialises")
}

/// The client's own Messages request, if it wrote one.
fn client(req: &ChatRequest) -> Option<&NativeRequest> {
    req.native.as_ref().filter(|n| n.dialect == Dialect::AnthropicMessages)
}

/// The headers of `call` of `req` as `host` takes them (the client's version and the betas the
/// host takes), and those betas.
fn headers<'r>(
    call: &Call<'_>,
    req: &'r ChatRequest,
    host: &dyn ClaudeHost,
) -> (Vec<(HeaderName, String)>, Vec<&'r str>) {
    let client = client(req);
    let version = client.and_then(|n| n.header("anthropic-version")).unwrap_or(API_VERSION);
    let flags = client
        .and_then(|n| n.header("anthropic-beta"))
        .map(|h| h.split(',').map(str::trim).filter(|f| !f.is_empty()).collect());
    let betas = host.betas(flags.unwrap_or_default());
    let mut headers = vec![(CONTENT_TYPE, "application/json".to_string())];
    headers.extend(host.headers(version, &betas, call.upstream.api_key.as_deref()));
    (headers, betas)
}

/// The body of `call` of `req` for `host`, with the host's `fields` beside it: the client's own
/// (see [`native`]), or the translation of the canonical request.
fn body<'a>(
    call: &'a Call<'_>,
    req: &'a ChatRequest,
    host: &dyn ClaudeHost,
    fields: HostFields<'a>,
    purpose: Purpose,
) -> ClaudeBody<'a> {
    match client(req) {
        Some(client) => native::body(req, call, client, host.signer(), fields, purpose),
        None => request::body(req, call, fields, purpose),
    }
}

#[cfg(test)]
pub(crate) mod tests;
