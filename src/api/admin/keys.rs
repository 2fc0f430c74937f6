//! `/admin/keys`: issue, list, revoke and rotate client keys through the API, behind the
//! admin token. A new key's text is in the answer to `POST /admin/keys` and to a rotation,
//! and nowhere else (not in the audit line, which names the key's id and team). A revocation
//! or rotation through this router takes effect here at once (it reads the store again before
//! answering); other replicas see it at their next refresh (`issued_keys.refresh_ms`).

use std::sync::Arc;
use std::time::SystemTime;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::authorize;
use crate::api::{codes, ApiError, ErrorCode, Ops};
use crate::canonical::KeyId;
use crate::keys::new::{NewKey, Refusal};
use crate::keys::{self, store, KeyError, Listing};
use crate::ledger::{unix_millis, Store};

/// The body of `POST /admin/keys`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Create {
    name: String,
    team: String,
    #[serde(default)]
    tasks: Vec<String>,
    /// `90d`, `12h`, `30m`, `45s`; absent: until revoked.
    #[serde(default)]
    expires_in: Option<String>,
    /// `{rpm, tpm, concurrent, usd_per_day, usd_per_month}`, each optional.
    #[serde(default)]
    limits: crate::config::KeyLimits,
}

fn now_ms() -> i64 {
    unix_millis(SystemTime::now())
}

fn store_of(state: &Ops) -> Result<&Store, ApiError> {
    state.ledger.as_ref().map(|(store, _)| store).ok_or_else(|| {
        ApiError::new(
            codes::LEDGER_OFF,
            "the ledger is off (ledger.enabled: false): issued keys live in its store",
        )
    })
}

/// A key error as the admin sees it; the store's own error goes to the log only.
fn key_error(e: KeyError) -> ApiError {
    match e {
        KeyError::Refused(r) => {
            let param = match &r {
                Refusal::BadText { field, .. } => *field,
                Refusal::UnknownTask(_) => "tasks",
                Refusal::BadDuration(_) => "expires_in",
                Refusal::BadLimit(_) => "limits",
            };
            ApiError::new(ErrorCode::InvalidValue, r.to_string()).param(param)
        }
        KeyError::NotFound(_) => ApiError::new(codes::NOT_FOUND, e.to_string()),
        KeyError::Revoked(_) | KeyError::Expired(_) => ApiError::new(codes::KEY_NOT_ACTIVE, e.to_string()),
        KeyError::Store(_) | KeyError::Corrupt { .. } => {
            tracing::error!(error = %e, "admin: the client keys could not be read or written");
            ApiError::new(codes::LEDGER_UNAVAILABLE, "the key store could not be used; see the router's log")
        }
    }
}

/// An id from the path; one that cannot be an id is no key.
fn id_of(text: &str) -> Result<KeyId, ApiError> {
    KeyId::parse(text).ok_or_else(|| key_error(KeyError::NotFound(text.to_string())))
}

/// Read the store again so this router answers by the change at once.
async fn refresh(state: &Ops, store: &Store) -> Result<(), ApiError> {
    keys::reload(&state.client_keys, store).await.map_err(key_error)
}

/// `GET /admin/keys`: every issued key, never a secret or a hash.
pub async fn list(State(state): State<Arc<Ops>>, headers: HeaderMap) -> Response {
    let listed = async {
        authorize(&state, &headers)?;
        let rows = store::list(store_of(&state)?).await.map_err(key_error)?;
        let now = now_ms();
        Ok::<_, ApiError>(json!({"keys": rows.iter().map(|r| Listing::of(r, now)).collect::<Vec<_>>()}))
    };
    reply(listed.await, StatusCode::OK)
}

/// `POST /admin/keys {"name", "team", "tasks"?, "expires_in"?}`: 201 with the key, shown once.
pub async fn create(State(state): State<Arc<Ops>>, headers: HeaderMap, body: Bytes) -> Response {
    let created = async {
        let who = authorize(&state, &headers)?;
        let req: Create = serde_json::from_slice(&body)
            .map_err(|e| ApiError::new(ErrorCode::InvalidBody, format!("request body: {e}")))?;
        let config = state.snapshot.load().config.clone();
        let new =
            NewKey::check(&config, &req.name, &req.team, &req.tasks, req.expires_in.as_deref(), req.limits)
                .map_err(|r| key_error(r.into()))?;
        let store = store_of(&state)?;
        let now = now_ms();
        let (row, text) = store::create(store, &new, now).await.map_err(key_error)?;
        refresh(&state, store).await?;
        tracing::warn!(who = %who.0, key_id = %row.key.id, team = %row.key.team, "admin: client key created");
        Ok::<_, ApiError>(shown_once(text, &Listing::of(&row, now)))
    };
    reply(created.await, StatusCode::CREATED)
}

/// `POST /admin/keys/{id}/revoke`: refused from now on (here at once, elsewhere within a
/// refresh period).
pub async fn revoke(State(state): State<Arc<Ops>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    let revoked = async {
        let who = authorize(&state, &headers)?;
        let id = id_of(&id)?;
        let store = store_of(&state)?;
        let now = now_ms();
        let row = store::revoke(store, &id, now).await.map_err(key_error)?;
        refresh(&state, store).await?;
        tracing::warn!(who = %who.0, key_id = %id, team = %row.key.team, "admin: client key revoked");
        Ok::<_, ApiError>(json!({"key": Listing::of(&row, now)}))
    };
    reply(revoked.await, StatusCode::OK)
}

/// `POST /admin/keys/{id}/rotate`: a new secret, shown once; the old one is refused.
pub async fn rotate(State(state): State<Arc<Ops>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    let rotated = async {
        let who = authorize(&state, &headers)?;
        let id = id_of(&id)?;
        let store = store_of(&state)?;
        let now = now_ms();
        let (row, text) = store::rotate(store, &id, now).await.map_err(key_error)?;
        refresh(&state, store).await?;
        tracing::warn!(who = %who.0, key_id = %id, team = %row.key.team, "admin: client key rotated");
        Ok::<_, ApiError>(shown_once(text, &Listing::of(&row, now)))
    };
    reply(rotated.await, StatusCode::OK)
}

fn shown_once(text: String, listing: &Listing) -> Value {
    json!({"secret": text, "key": listing, "note": "the secret is shown once: store it now"})
}

fn reply(result: Result<Value, ApiError>, status: StatusCode) -> Response {
    match result {
        Ok(body) => (status, Json(body)).into_response(),
        Err(e) => e.into_response(),
    }
}
