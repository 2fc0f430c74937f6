//! A job at risk of missing its window sends its queued lines to a provider's batch API: for
//! each line, the first backend of its task that the task's policy allows, that is hosted, and
//! whose provider runs batches of the job's endpoint (OpenAI for the OpenAI endpoints,
//! Anthropic for Messages). The lines are claimed under the provider batch's own claim until
//! its results are read back (by any replica: the claim is in the store), and each is written
//! with the provider's answer, its `model` the task the client named, scrubbed of every secret
//! (a provider may echo a key), and ledgered at the batch price.

use std::collections::HashMap;

use serde_json::{json, Value};

use super::job::{LineState, Status};
use super::lease::Lease;
use super::provider_api::{BatchApi, LineResult, Polled};
use super::store::{self, Claimed, JobRow, LineEnd, Spill};
use crate::config::Priority;
use crate::config::{BackendId, Config, TaskConfig};
use crate::dispatch::Dispatcher;
use crate::ledger::{hosted_cost, LedgerRecord, Outcome, Store, Tokens};
use crate::snapshot::Snapshot;
use rust_decimal::Decimal;

/// Most lines sent in one provider batch.
const LINES_PER_SPILL: usize = 10_000;

/// The task a line names, if any.
pub fn task_of<'c>(config: &'c Config, line: &Claimed) -> Option<&'c TaskConfig> {
    let body: Value = serde_json::from_str(&line.request).ok()?;
    config.task(body.get("model")?.as_str()?)
}

/// The backend whose batch API takes `task`'s lines on `endpoint`, if its policy allows one.
pub fn batch_backend(snap: &Snapshot, task: &TaskConfig, endpoint: &str) -> Option<BackendId> {
    let eligible = crate::policy::eligible(task, snap).ok()?;
    eligible.into_iter().find(|&id| {
        !snap.backends[id].is_local()
            && snap.backends[id].provider.batch().is_some_and(|b| b.serves(endpoint))
    })
}

/// Whether `task` may run on a hosted backend at all.
pub fn hosted_allowed(snap: &Snapshot, task: &TaskConfig) -> bool {
    crate::policy::eligible(task, snap).is_ok_and(|e| e.iter().any(|&id| !snap.backends[id].is_local()))
}

/// Send the job's queued lines to the providers' batch APIs; lines with none stay queued.
pub async fn submit(
    store: &Store,
    snap: &Snapshot,
    dispatcher: &Dispatcher,
    lease: &Lease,
    job: &JobRow,
    now: i64,
) -> Result<(), sqlx::Error> {
    let mut groups: HashMap<BackendId, Vec<Claimed>> = HashMap::new();
    for line in store::queued(store, &job.id, LINES_PER_SPILL).await? {
        if let Some(backend) =
            task_of(&snap.config, &line).and_then(|t| batch_backend(snap, t, &job.endpoint))
        {
            groups.entry(backend).or_default().push(line);
        }
    }
    for (backend, lines) in groups {
        let view = &snap.backends[backend];
        let Some(api) = BatchApi::of(dispatcher, snap, backend) else { continue };
        let claim = format!("spill-{:016x}", rand::random::<u64>());
        // Held under this replica's lease while it submits them (if it dies, they go back),
        // then until the provider's batch is read back (a day past the window: it has its own).
        let _held = lease.hold(&claim);
        let lines = store::claim_these(store, &job.id, lines, &claim, lease.until(now)).await?;
        let bodies: Vec<(String, Value)> = lines
            .iter()
            .filter_map(|l| {
                let mut body: Value = serde_json::from_str(&l.request).ok()?;
                body["model"] = json!(view.model);
                Some((l.custom_id.clone(), body))
            })
            .collect();
        match api.submit(&job.endpoint, &bodies).await {
            Ok(id) => {
                let spill = Spill { id, batch_id: job.id.clone(), backend: view.name.clone(), claim };
                store::insert_spill(store, &spill, lines.len() as u64, now).await?;
                store::renew(store, &spill.claim, job.expires_ms() + 86_400_000).await?;
                tracing::info!(batch = %job.id, backend = %view.name, provider_batch = %spill.id, lines = lines.len(), "batch lines sent to a hosted batch API");
            }
            Err(why) => {
                tracing::warn!(batch = %job.id, backend = %view.name, %why, "a hosted batch API refused the lines; they stay queued");
                for line in &lines {
                    store::release(store, &job.id, line.idx, &claim).await?;
                }
            }
        }
    }
    Ok(())
}

/// Why a line of a job that ended before the line ran has no answer.
pub fn ended_why(state: LineState) -> &'static str {
    match state {
        LineState::Expired => "the batch's completion window passed before this request ran",
        _ => "the batch was cancelled before this request ran",
    }
}

/// Ask the providers to stop the open batches of `job`, which has been cancelled or has expired:
/// each ends with what it answered, read back as usual. `asked` holds those already asked.
pub async fn cancel(
    store: &Store,
    snap: &Snapshot,
    dispatcher: &Dispatcher,
    job: &JobRow,
    asked: &std::sync::Mutex<std::collections::HashSet<String>>,
) -> Result<(), sqlx::Error> {
    for spill in store::open_spills(store).await?.into_iter().filter(|s| s.batch_id == job.id) {
        if !asked.lock().unwrap_or_else(|e| e.into_inner()).insert(spill.id.clone()) {
            continue;
        }
        let Some(api) = snap.backend_id(&spill.backend).and_then(|b| BatchApi::of(dispatcher, snap, b))
        else {
            continue;
        };
        match api.cancel(&spill.id).await {
            Ok(()) => {
                tracing::info!(batch = %job.id, provider_batch = %spill.id, "a hosted batch cancelled with its job")
            }
            Err(why) => {
                tracing::warn!(batch = %job.id, provider_batch = %spill.id, %why, "cancelling a hosted batch failed; its results are read back when it ends")
            }
        }
    }
    Ok(())
}

/// Read back every provider batch that has ended, writing each of its lines.
pub async fn read_back(
    store: &Store,
    snap: &Snapshot,
    dispatcher: &Dispatcher,
    now: i64,
) -> Result<(), sqlx::Error> {
    for spill in store::open_spills(store).await? {
        let Some(backend) = snap.backend_id(&spill.backend) else { continue };
        let Some(api) = BatchApi::of(dispatcher, snap, backend) else { continue };
        let results = match api.poll(&spill.id).await {
            Ok(Polled::Running) => continue,
            Ok(Polled::Ended(results)) => results,
            Err(why) => {
                tracing::warn!(batch = %spill.batch_id, provider_batch = %spill.id, %why, "reading a hosted batch failed; trying again");
                continue;
            }
        };
        let by_id: HashMap<&str, &LineResult> = results.iter().map(|r| (r.custom_id.as_str(), r)).collect();
        let job = store::job(store, &spill.batch_id).await?;
        // What the provider never answered ended with the job: cancelled, or past its window.
        let unanswered = match job.as_ref().map(|j| (j.status, j.expires_ms())) {
            Some((Status::Cancelling, _)) => Some(LineState::Canceled),
            Some((_, expires)) if now >= expires => Some(LineState::Expired),
            _ => None,
        };
        let owner = job.and_then(|j| j.owner);
        let mut rows = Vec::new();
        for line in store::held(store, &spill.batch_id, &spill.claim).await? {
            let model = task_of(&snap.config, &line).map(|t| t.name.clone());
            let (state, status, body) = match by_id.get(line.custom_id.as_str()) {
                Some(r) if r.status == 200 => {
                    let view = &snap.backends[backend];
                    let task = model.clone().unwrap_or_default();
                    rows.push(ledger_row(
                        &task,
                        owner.clone(),
                        &view.name,
                        &view.model,
                        view.price.as_ref(),
                        &r.body,
                        now,
                    ));
                    let mut body = r.body.clone();
                    if let (Some(model), Some(fields)) = (model, body.as_object_mut()) {
                        fields.insert("model".into(), json!(model));
                    }
                    (LineState::Succeeded, Some(200), body)
                }
                Some(r) if r.status == 0 => match unanswered {
                    Some(state) => (state, None, json!(ended_why(state))),
                    None => (LineState::Expired, None, r.body.clone()),
                },
                Some(r) => (LineState::Errored, Some(i64::from(r.status)), r.body.clone()),
                None if unanswered.is_some() => {
                    let state = unanswered.unwrap_or(LineState::Expired);
                    (state, None, json!(ended_why(state)))
                }
                None => {
                    let why = "the provider's batch returned no result for this request";
                    (LineState::Errored, Some(500), json!({"error": {"message": why, "type": "api_error"}}))
                }
            };
            // The provider's words (cut of every secret as they were read) reach the client. A
            // line that never ran keeps only why, as the runner writes it.
            let result = match body {
                Value::String(why) => why,
                body => body.to_string(),
            };
            let end = LineEnd { state, status_code: status, result: &result, backend: Some(&spill.backend) };
            store::finish(store, &spill.batch_id, line.idx, &spill.claim, end, now).await?;
        }
        // The answers' cost at the provider's batch price, beside the rows of the lines that ran
        // through the pipeline (idempotent on each row's id).
        store.insert_batch(&rows).await.map_err(|e| sqlx::Error::Protocol(format!("ledger: {e}")))?;
        store::end_spill(store, &spill.id, now).await?;
        tracing::info!(batch = %spill.batch_id, provider_batch = %spill.id, results = results.len(), "a hosted batch's results read back");
    }
    Ok(())
}

/// What the providers' batch APIs charge against their standard prices (OpenAI's and
/// Anthropic's batches are half price).
const BATCH_PRICE: Decimal = Decimal::from_parts(5, 0, 0, false, 1);

/// What `tokens` cost at a provider's batch API whose standard price is `price`.
pub fn batch_cost(price: &crate::config::Price, tokens: &Tokens) -> Decimal {
    hosted_cost(price, tokens) * BATCH_PRICE
}

/// The ledger row of a line a provider's batch answered: its usage from the answer (OpenAI's or
/// Anthropic's shape), priced at the batch price, at batch priority.
fn ledger_row(
    task: &str,
    owner: Option<String>,
    backend: &str,
    model: &str,
    price: Option<&crate::config::Price>,
    body: &Value,
    now: i64,
) -> LedgerRecord {
    let usage = &body["usage"];
    let count =
        |keys: &[&str]| keys.iter().find_map(|k| usage.pointer(k).and_then(Value::as_i64)).unwrap_or(0);
    let input = count(&["/prompt_tokens", "/input_tokens"]);
    let cached = count(&["/prompt_tokens_details/cached_tokens", "/cache_read_input_tokens"]);
    let output = count(&["/completion_tokens", "/output_tokens"]);
    let tokens =
        Tokens { input: input as u64, cached_input: cached as u64, cache_write: 0, output: output as u64 };
    LedgerRecord {
        id: crate::ledger::new_record_id(),
        at_ms: now,
        task: task.to_string(),
        client_key: owner,
        team: None,
        priority: Some(Priority::Batch),
        affinity_hash: None,
        backend: backend.to_string(),
        model: model.to_string(),
        node: String::new(),
        attempts: 1,
        outcome: Outcome::Completed,
        error_class: None,
        input_tokens: input,
        cached_input_tokens: cached,
        cache_write_tokens: 0,
        output_tokens: output,
        ttft_ms: None,
        duration_ms: 0,
        cost_usd: price.map(|p| batch_cost(p, &tokens)),
    }
}
