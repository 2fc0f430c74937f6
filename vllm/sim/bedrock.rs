//! Amazon Bedrock's runtime: InvokeModel for Claude (`POST /model/{model}/invoke`, and
//! `/invoke-with-response-stream`, Anthropic's events inside event-stream `chunk` frames), and
//! Converse for the other models (`/converse`, `/converse-stream`: `converse_wire`). Each request is checked as Bedrock checks it: the SigV4 signature
//! ([`super::sigv4`]) or a Bedrock API key as a bearer token, then the model, then the body
//! (`anthropic_version: bedrock-2023-05-31`, no `model` or `stream` keys, only the betas
//! Bedrock knows, in `anthropic_beta`). Errors carry `x-amzn-errortype` and a `message`.

use std::sync::Arc;
use std::time::SystemTime;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

use super::anthropic_wire::{answer, Serving};
use super::server::{AppState, SimError};
use super::sigv4;
use super::sse::Framing;
use crate::adapter::wire::anthropic::host::CLOUD_BETAS;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new().route("/model/{model}/{verb}", post(invoke))
}

/// The exception AWS names an error of `status` with.
fn exception_of(status: u16) -> &'static str {
    match status {
        400 => "ValidationException",
        401 | 403 => "AccessDeniedException",
        404 => "ResourceNotFoundException",
        408 => "ModelTimeoutException",
        424 => "ModelErrorException",
        429 => "ThrottlingException",
        503 | 529 => "ServiceUnavailableException",
        _ => "InternalServerException",
    }
}

/// A refusal, with the exception name AWS gives it.
struct Refused {
    exception: &'static str,
    error: SimError,
}

impl From<sigv4::Refused> for Refused {
    fn from(r: sigv4::Refused) -> Refused {
        Refused { exception: r.exception, error: SimError::new(r.status, r.message) }
    }
}

/// Bedrock's error answer: the exception's name in `x-amzn-errortype`, `{"message"}` as body.
fn error_response(refused: Refused) -> Response {
    let Refused { exception, error } = refused;
    let status = StatusCode::from_u16(error.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = (status, Json(json!({"message": error.message}))).into_response();
    let kind = format!("{exception}:http://internal.amazon.com/coral/com.amazon.bedrock/");
    resp.headers_mut().insert("x-amzn-errortype", HeaderValue::from_str(&kind).expect("ascii"));
    error.put_retry_after(super::SimKind::Bedrock, resp.headers_mut());
    resp
}

impl From<SimError> for Refused {
    fn from(error: SimError) -> Refused {
        Refused { exception: exception_of(error.status), error }
    }
}

fn validation(message: impl Into<String>) -> Refused {
    SimError::new(400, message).into()
}

async fn invoke(
    State(st): State<Arc<AppState>>,
    Path((model, verb)): Path<(String, String)>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match admit_and_answer(&st, &model, &verb, &uri, &headers, &body).await {
        Ok(resp) => resp,
        Err(refused) => error_response(refused),
    }
}

async fn admit_and_answer(
    st: &Arc<AppState>,
    model: &str,
    verb: &str,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, Refused> {
    authenticate(st, uri, headers, body)?;
    if verb == "count-tokens" {
        if model != st.model {
            return Err(validation("The provided model identifier is invalid."));
        }
        return count_tokens(st, body);
    }
    let (stream, converse) = match verb {
        "invoke" => (false, false),
        "invoke-with-response-stream" => (true, false),
        "converse" => (false, true),
        "converse-stream" => (true, true),
        _ => return Err(SimError::new(404, format!("no operation {verb}")).into()),
    };
    if model != st.model {
        return Err(validation("The provided model identifier is invalid."));
    }
    let v = st.read_json(body).map_err(Refused::from)?;
    if converse {
        return super::converse_wire::answer(st, headers, &v, stream).await.map_err(Refused::from);
    }
    check_body(&v)?;
    if stream {
        if let Some(kind) = &st.stream_exception {
            let echo = st.echo.as_ref().and_then(|e| e.of(headers));
            return Ok(exception_stream(kind, echo.as_deref()));
        }
    }
    let serving =
        Serving { model: Some(model.to_string()), stream: Some(stream), framing: Some(Framing::EventStream) };
    answer(st, headers, &v, serving).await.map_err(Refused::from)
}

/// `POST /model/{model}/count-tokens` with an InvokeModel body: the sim's own count.
fn count_tokens(st: &AppState, body: &[u8]) -> Result<Response, Refused> {
    use base64::Engine;
    let v: Value =
        serde_json::from_slice(body).map_err(|e| validation(format!("Malformed input request: {e}")))?;
    let encoded = v.pointer("/input/invokeModel/body").and_then(Value::as_str);
    let encoded = encoded.ok_or_else(|| {
        validation("Malformed input request: #/input: required key [invokeModel] not found")
    })?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|e| validation(format!("The provided request body is not valid base64: {e}")))?;
    let mut invoke: Value =
        serde_json::from_slice(&decoded).map_err(|e| validation(format!("Malformed input request: {e}")))?;
    check_body(&invoke)?;
    if let Some(invoke) = invoke.as_object_mut() {
        invoke.remove("anthropic_version");
        invoke.remove("anthropic_beta");
        invoke.remove("max_tokens");
    }
    let n = super::anthropic_wire::count(st.kind, invoke).map_err(Refused::from)?;
    Ok(Json(json!({"inputTokens": n})).into_response())
}

/// A SigV4 signature from the sim's identity, or its `--api-key` as a Bedrock API key.
fn authenticate(st: &AppState, uri: &Uri, headers: &HeaderMap, body: &[u8]) -> Result<(), Refused> {
    let bearer =
        headers.get("authorization").and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
    match (bearer, &st.api_key, &st.aws) {
        (Some(token), Some(key), _) if token == key => Ok(()),
        // Echoing what it was given, as some gateways in front of Bedrock do.
        (Some(token), _, _) => Err(Refused {
            exception: "UnrecognizedClientException",
            error: SimError::new(
                403,
                format!("The security token included in the request is invalid: Bearer {token}"),
            ),
        }),
        (None, _, Some(who)) => {
            sigv4::verify(who, &Method::POST, uri, headers, body, SystemTime::now()).map_err(Refused::from)
        }
        (None, None, None) => Ok(()),
        (None, Some(_), None) => Err(Refused {
            exception: "MissingAuthenticationTokenException",
            error: SimError::new(403, "Missing Authentication Token"),
        }),
    }
}

/// What InvokeModel refuses in a Claude body.
fn check_body(v: &Value) -> Result<(), Refused> {
    match v.get("anthropic_version").and_then(Value::as_str) {
        Some("bedrock-2023-05-31") => {}
        Some(other) => return Err(validation(format!("invalid anthropic_version: {other}"))),
        None => return Err(validation("Malformed input request: #: required key [anthropic_version] not found, please reformat your input and try again.")),
    }
    for key in ["model", "stream"] {
        if v.get(key).is_some() {
            return Err(validation(format!("Malformed input request: #: extraneous key [{key}] is not permitted, please reformat your input and try again.")));
        }
    }
    for flag in v.get("anthropic_beta").and_then(Value::as_array).into_iter().flatten() {
        let flag = flag.as_str().unwrap_or_default();
        if !CLOUD_BETAS.contains(&flag) {
            return Err(validation(format!("invalid beta flag: {flag}")));
        }
    }
    Ok(())
}

/// A 200 stream whose first frame is the exception `kind` (its message ending with `echo`).
fn exception_stream(kind: &str, echo: Option<&str>) -> Response {
    let message = super::echo::with(format!("The model stream failed ({kind})."), echo);
    let payload = json!({ "message": message }).to_string();
    let frame = crate::adapter::transport::eventstream::frame(
        &[(":exception-type", kind), (":message-type", "exception")],
        payload.as_bytes(),
    );
    let mut resp = frame.into_response();
    resp.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static(crate::adapter::transport::eventstream::CONTENT_TYPE),
    );
    resp
}
