//! The batch APIs clients already speak: OpenAI's Files and Batches (`files.rs`, `openai.rs`)
//! and Anthropic's Message Batches (`anthropic.rs`). They check what the providers check at
//! creation, keep files and jobs in the ledger store (`batch::store`), and show a job as its
//! provider does; the batch runner (`batch::runner`) runs the lines, each through its
//! dialect's door in process (`lines.rs`). A key sees only its own files and jobs.

mod anthropic;
mod files;
mod jobs;
mod lines;
mod openai;

pub use lines::InProcess;

use axum::extract::FromRef;
use axum::http::HeaderMap;
use axum::routing::{get, post};
use axum::Router;

use super::error::ApiError;
use super::front::Doors;
use super::AppState;
use crate::api::codes;
use crate::batch::store::Store;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/files", post(files::upload))
        .route("/v1/files/{id}", get(files::show).delete(files::delete))
        .route("/v1/files/{id}/content", get(files::content))
        .route("/v1/batches", post(openai::create).get(openai::list))
        .route("/v1/batches/{id}", get(openai::show))
        .route("/v1/batches/{id}/cancel", post(openai::cancel))
        .route("/v1/messages/batches", post(anthropic::create).get(anthropic::list))
        .route("/v1/messages/batches/{id}", get(anthropic::show))
        .route("/v1/messages/batches/{id}/cancel", post(anthropic::cancel))
        .route("/v1/messages/batches/{id}/results", get(anthropic::results))
}

/// What the batch routes read: the doors' checks and snapshot, and the ledger's store (`None`:
/// the ledger is off).
#[derive(Clone)]
pub(crate) struct Batches {
    doors: Doors,
    store: Option<Store>,
}

impl FromRef<AppState> for Batches {
    fn from_ref(state: &AppState) -> Batches {
        let store = state.ops.ledger.as_ref().map(|(store, _)| store.clone());
        Batches { doors: Doors::from_ref(state), store }
    }
}

/// Who is asking (the name their files and jobs are kept under), and the store they live in.
struct Caller<'s> {
    owner: Option<String>,
    store: &'s Store,
}

fn caller<'s>(state: &'s Batches, headers: &HeaderMap) -> Result<Caller<'s>, ApiError> {
    let principal = super::authenticate(&state.doors.door.client_keys, headers)?;
    let config = state.doors.serving.snapshot.load();
    let store = match (&state.store, config.config.batch.enabled) {
        (Some(store), true) => store,
        (None, _) => {
            return Err(ApiError::new(
                codes::LEDGER_OFF,
                "batches are kept in the ledger store, which is off",
            ))
        }
        (_, false) => {
            return Err(ApiError::new(codes::NOT_FOUND, "the batch APIs are off (batch.enabled: false)"))
        }
    };
    Ok(Caller { owner: principal.map(|p| p.name().to_string()), store })
}

impl Caller<'_> {
    /// Whether `owner`'s files and jobs are this caller's.
    fn owns(&self, owner: &Option<String>) -> bool {
        self.owner.is_none() || &self.owner == owner
    }
}

fn store_error(e: sqlx::Error) -> ApiError {
    tracing::warn!(error = %e, "batch store");
    ApiError::new(codes::LEDGER_UNAVAILABLE, "the batch store is unavailable; retry shortly")
}

fn not_found(what: &str, id: &str) -> ApiError {
    ApiError::new(codes::NOT_FOUND, format!("no {what} with id `{id}`"))
}

fn now_ms() -> i64 {
    crate::batch::store::unix_millis(std::time::SystemTime::now())
}

/// A new id: `prefix` and 24 random hex digits.
fn new_id(prefix: &str) -> String {
    format!("{prefix}{:024x}", rand::random::<u128>() >> 32)
}
