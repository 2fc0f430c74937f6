//! The batch runner's way in: each line goes through the router's own front door, in process,
//! as the job's owner (the key that created it, if it may still be used), at batch priority,
//! kept on the fleet when its task has a pool. The same routes, checks, limits, budgets,
//! policy, pipeline, ledger and metrics as a request from the network; nothing is copied.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, Request};
use futures::future::BoxFuture;
use futures::FutureExt;
use http_body_util::BodyExt;
use serde_json::json;
use tower_service::Service;

use crate::api::front::BatchLine;
use crate::batch::runner::{LineAnswer, LineCall, LineCaller};
use crate::keys::KeyBoard;

/// The front door, for the batch runner.
pub struct FrontDoor {
    pub router: axum::Router,
    pub keys: Arc<KeyBoard>,
}

impl LineCaller for FrontDoor {
    fn call(&self, line: LineCall) -> BoxFuture<'static, LineAnswer> {
        let now_ms = crate::ledger::unix_millis(std::time::SystemTime::now());
        let principal = line.owner.as_deref().map(|owner| self.keys.named(owner, now_ms));
        let mut router = self.router.clone();
        async move {
            // A job's key that may no longer be used runs none of its lines.
            let principal = match principal {
                Some(None) => return refused("the key that created this batch is revoked or expired"),
                Some(Some(p)) => Some(p),
                None => None,
            };
            let request = Request::post(&line.endpoint)
                .header(header::CONTENT_TYPE, "application/json")
                .header("anthropic-version", "2023-06-01")
                .header("x-spillway-priority", "batch")
                .header("x-request-id", &line.request_id)
                .extension(BatchLine { principal, fleet_only: line.fleet_only })
                .body(Body::from(line.body));
            let Ok(request) = request else { return refused("the line could not be sent") };
            let Ok(response) = router.call(request).await;
            let status = response.status().as_u16();
            let backend = response
                .headers()
                .get("x-spillway-backend")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let body = match response.into_body().collect().await {
                Ok(body) => String::from_utf8_lossy(&body.to_bytes()).into_owned(),
                Err(e) => return refused(&format!("the answer could not be read: {e}")),
            };
            LineAnswer { status, body, backend }
        }
        .boxed()
    }
}

/// A line refused before it reached the pipeline, as an OpenAI error body.
fn refused(why: &str) -> LineAnswer {
    let body = json!({"error": {"message": why, "type": "invalid_request_error", "param": null, "code": "batch_line_refused"}});
    LineAnswer { status: 401, body: body.to_string(), backend: None }
}
