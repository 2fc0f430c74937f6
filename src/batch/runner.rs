//! The batch runner: a control loop beside the request path. Each tick it moves every job a
//! step (`job::step`), and starts the lines the fleet has room for (`admission::room`), each
//! sent through its dialect's door and the pipeline in process (the [`LineCaller`] the
//! composition root hands in, `api::batch_lines`: the job owner's key, its limits and
//! budgets, policy, batch priority, kept on the fleet). A line's answer is written with its final state by this replica's claim; a line
//! refused for want of room goes back to the queue. A job ends completed (every line ended),
//! expired (its window passed: what had not run is reported expired) or cancelled.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use futures::future::BoxFuture;
use serde_json::Value;

use super::admission;
use super::deadline::{self, Progress, Route, RATE_WINDOW_S};
use super::job::{self, Counts, LineState, Status, Step};
use super::lease::Lease;
use super::spill;
use super::store::{self, Claimed, JobRow, LineEnd};
use crate::config::Config;
use crate::dispatch::Dispatcher;
use crate::ledger::Store;
use crate::metrics::BatchMetrics;
use crate::snapshot::Snapshot;

/// One line to run through its dialect's door.
#[derive(Debug, Clone)]
pub struct LineCall {
    /// The job owner's key (its name: a static key's variable, an issued key's id).
    pub owner: Option<String>,
    pub endpoint: String,
    pub body: String,
    /// Plan it over the task's fleet pools only.
    pub fleet_only: bool,
    pub request_id: String,
}

/// A line's answer: its status, body, and the backend its answer committed to.
#[derive(Debug, Clone)]
pub struct LineAnswer {
    pub status: u16,
    pub body: String,
    pub backend: Option<String>,
}

/// Runs a line through its dialect's door and the pipeline.
pub trait LineCaller: Send + Sync {
    fn call(&self, line: LineCall) -> BoxFuture<'static, LineAnswer>;
}

/// What the runner needs.
pub struct Runner {
    pub store: Store,
    pub snapshot: Arc<ArcSwap<Snapshot>>,
    pub caller: Arc<dyn LineCaller>,
    /// The hosted backends' batch APIs (their keys and client), for a job at risk.
    pub dispatcher: Arc<Dispatcher>,
    /// This process's claims on lines, renewed while it lives.
    pub lease: Lease,
    metrics: BatchMetrics,
    /// When the providers' batches were last read (unix ms).
    read_back_at: AtomicI64,
    /// Batch lines this replica has in flight, by pool (`None`: a task with no pool).
    in_flight: Arc<Mutex<HashMap<Option<String>, u64>>>,
    /// The providers' batches this replica has asked to stop (a job cancelled or expired).
    cancelled_spills: Mutex<HashSet<String>>,
}

/// How often the providers' batches are read back.
const READ_BACK_EVERY_MS: i64 = 2_000;

impl Runner {
    pub fn new(
        store: Store,
        snapshot: Arc<ArcSwap<Snapshot>>,
        caller: Arc<dyn LineCaller>,
        dispatcher: Arc<Dispatcher>,
        metrics: BatchMetrics,
        lease: Lease,
    ) -> Runner {
        Runner {
            store,
            snapshot,
            caller,
            dispatcher,
            lease,
            metrics,
            read_back_at: AtomicI64::new(0),
            in_flight: Arc::default(),
            cancelled_spills: Mutex::default(),
        }
    }

    /// Run until the task is dropped (the control loops' token): first take back what this
    /// replica's dead predecessor held, then tick, and renew this process's claims beside the
    /// ticks, so a slow tick never lets them lapse.
    pub async fn run(self) {
        let runner = Arc::new(self);
        match runner.lease.take_back(&runner.store).await {
            Ok(0) => {}
            Ok(lines) => {
                tracing::info!(lines, me = %runner.lease.me(), "batch runner: took back the lines this replica ran before it restarted")
            }
            Err(e) => {
                tracing::warn!(error = %e, "batch runner: the store failed taking back lines; they run again when their claims lapse")
            }
        }
        let ticks = async {
            loop {
                let poll = Duration::from_millis(runner.snapshot.load().config.batch.poll_ms);
                if let Err(e) = runner.tick().await {
                    tracing::warn!(error = %e, "batch runner: the store failed; trying again next tick");
                }
                tokio::time::sleep(poll).await;
            }
        };
        let heartbeats = async {
            loop {
                tokio::time::sleep(runner.lease.every()).await;
                if let Err(e) = runner.lease.renew(&runner.store, now_ms()).await {
                    tracing::warn!(error = %e, "batch runner: the store failed renewing this replica's claims; trying again next heartbeat");
                }
            }
        };
        tokio::join!(ticks, heartbeats);
    }

    /// Move every active job one step.
    pub async fn tick(self: &Arc<Self>) -> Result<(), sqlx::Error> {
        let now = now_ms();
        let snap = self.snapshot.load_full();
        // The providers are asked about their batches every few seconds, not every tick.
        if now - self.read_back_at.load(Ordering::Relaxed) >= READ_BACK_EVERY_MS {
            self.read_back_at.store(now, Ordering::Relaxed);
            spill::read_back(&self.store, &snap, &self.dispatcher, now).await?;
        }
        let (mut queued, mut running) = (0, 0);
        for job in store::active_jobs(&self.store).await? {
            let counts = store::counts(&self.store, &job.id).await?;
            queued += counts.queued;
            running += counts.running;
            match job::step(job.status, &counts, now, job.expires_ms()) {
                Step::Start => {
                    store::set_status(&self.store, &job.id, &[Status::Validating], Status::InProgress, now)
                        .await?;
                }
                Step::Run => {
                    let route = self.route(&snap, &job, &counts, now).await?;
                    if route == Route::HostedBatch {
                        spill::submit(&self.store, &snap, &self.dispatcher, &self.lease, &job, now).await?;
                    }
                    self.start_lines(&job, route == Route::HostedRealtime).await?;
                }
                Step::Expire => self.end(&job, &counts, LineState::Expired, Status::Expired, now).await?,
                Step::Cancel => self.end(&job, &counts, LineState::Canceled, Status::Cancelled, now).await?,
                Step::Complete => {
                    store::set_status(&self.store, &job.id, &[Status::InProgress], Status::Finalizing, now)
                        .await?;
                    self.finish(&job, Status::Finalizing, Status::Completed, now).await?;
                }
                Step::Wait => {}
            }
        }
        self.metrics.set_lines(queued, running);
        Ok(())
    }

    /// End a job's queued lines as `state`, and the job as `to` once none of its lines runs.
    async fn end(
        &self,
        job: &JobRow,
        counts: &Counts,
        state: LineState,
        to: Status,
        now: i64,
    ) -> Result<(), sqlx::Error> {
        store::end_queued(&self.store, &job.id, state, spill::ended_why(state), now).await?;
        // Lines at a provider's batch API stop there too; they end as it reads back.
        let snap = self.snapshot.load_full();
        spill::cancel(&self.store, &snap, &self.dispatcher, job, &self.cancelled_spills).await?;
        if counts.running == 0 {
            self.finish(job, job.status, to, now).await?;
        }
        Ok(())
    }

    /// The job from `from` to `to`, its output and error files named first: a client that sees
    /// it ended finds them.
    async fn finish(&self, job: &JobRow, from: Status, to: Status, now: i64) -> Result<(), sqlx::Error> {
        let counts = store::counts(&self.store, &job.id).await?;
        let name = |kind: &str| format!("file-{kind}-{}", job.id);
        let output = (counts.succeeded > 0).then(|| name("output"));
        let errors = (counts.failed() > 0).then(|| name("errors"));
        for (id, kind) in [(&output, "output"), (&errors, "errors")] {
            if let Some(id) = id {
                let file = store::FileRow {
                    id: id.clone(),
                    purpose: "batch_output".into(),
                    filename: format!("{}_{kind}.jsonl", job.id),
                    bytes: 0,
                    owner: job.owner.clone(),
                    created_ms: now,
                    expires_ms: None,
                    batch_id: Some(job.id.clone()),
                };
                store::insert_file(&self.store, &file, None).await?;
            }
        }
        store::set_files(&self.store, &job.id, output.as_deref(), errors.as_deref()).await?;
        if store::set_status(&self.store, &job.id, &[from], to, now).await? {
            let failed = counts.failed();
            tracing::info!(batch = %job.id, status = to.as_str(), succeeded = counts.succeeded, failed, "batch ended");
        }
        Ok(())
    }

    /// Where the job's queued lines go now (`deadline::plan`), kept with the job when it changes.
    async fn route(
        &self,
        snap: &Snapshot,
        job: &JobRow,
        counts: &Counts,
        now: i64,
    ) -> Result<Route, sqlx::Error> {
        let cfg = &snap.config.batch;
        let Some(first) = store::queued(&self.store, &job.id, 1).await?.pop() else {
            return Ok(Route::Fleet);
        };
        let task = spill::task_of(&snap.config, &first);
        let started = job.entered(Status::InProgress).unwrap_or(now);
        let window_s = ((now - started) as f64 / 1000.0).clamp(1.0, RATE_WINDOW_S);
        let since = now - (window_s * 1000.0) as i64;
        let observed_rate = store::finished_since(&self.store, &job.id, since).await? as f64 / window_s;
        let in_flight = self.in_flight.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let room = self.room(snap);
        let pools = snap.backends.iter().filter(|b| b.is_local());
        let concurrency: u64 = pools
            .map(|b| {
                let name = Some(b.name.clone());
                in_flight.get(&name).copied().unwrap_or(0) + room.get(&name).copied().unwrap_or(0)
            })
            .sum();
        let line_s = admission::line_seconds(snap);
        let progress = Progress {
            remaining: counts.open(),
            observed_rate,
            concurrency: concurrency as f64,
            line_s,
            left_s: (job.expires_ms() - now) as f64 / 1000.0,
        };
        let (batch, realtime) = match task.filter(|_| cfg.spill) {
            Some(t) => {
                (spill::batch_backend(snap, t, &job.endpoint).is_some(), spill::hosted_allowed(snap, t))
            }
            None => (false, false),
        };
        let plan = deadline::plan(&progress, batch, realtime, cfg.hosted_batch_lead_secs as f64);
        let was = job.plan.as_deref().and_then(|p| serde_json::from_str::<Value>(p).ok());
        if was.as_ref().and_then(|p| p["route"].as_str()) != Some(plan.route.as_str()) {
            tracing::info!(batch = %job.id, route = plan.route.as_str(), reason = %plan.reason, "batch plan");
            let text = serde_json::to_string(&plan).unwrap_or_default();
            store::set_plan(&self.store, &job.id, &text).await?;
        }
        Ok(plan.route)
    }

    /// Claim and start as many of the job's lines as there is room for: on the fleet, or
    /// (`realtime`, the last resort) wherever the pipeline plans them.
    async fn start_lines(self: &Arc<Self>, job: &JobRow, realtime: bool) -> Result<(), sqlx::Error> {
        let snap = self.snapshot.load_full();
        let mut room = self.room(&snap);
        let wanted: u64 = room.values().sum();
        if wanted == 0 {
            return Ok(());
        }
        let now = now_ms();
        let (me, until) = (self.lease.me(), self.lease.until(now));
        let claimed = store::claim(&self.store, &job.id, me, wanted as usize, now, until).await?;
        for line in claimed {
            let pool = if realtime { None } else { pool_of(&snap.config, &line) };
            match room.get_mut(&pool) {
                Some(left) if *left > 0 => {
                    *left -= 1;
                    self.spawn_line(job, line, pool);
                }
                _ => store::release(&self.store, &job.id, line.idx, me).await?,
            }
        }
        Ok(())
    }

    /// The lines each pool may start now, and those a task with no pool may.
    fn room(&self, snap: &Snapshot) -> HashMap<Option<String>, u64> {
        let cfg = &snap.config.batch;
        let in_flight = self.in_flight.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut room: HashMap<Option<String>, u64> = snap
            .backends
            .iter()
            .filter(|b| b.is_local())
            .map(|b| {
                let running = in_flight.get(&Some(b.name.clone())).copied().unwrap_or(0);
                (
                    Some(b.name.clone()),
                    admission::room(
                        &admission::pool_rooms(b, tokio::time::Instant::now(), &|n| n.handle.load.view()),
                        cfg.occupancy_bar,
                        cfg.max_per_node,
                        running,
                    ),
                )
            })
            .collect();
        let hosted = in_flight.get(&None).copied().unwrap_or(0);
        room.insert(None, admission::HOSTED_IN_FLIGHT.saturating_sub(hosted));
        room
    }

    fn spawn_line(self: &Arc<Self>, job: &JobRow, line: Claimed, pool: Option<String>) {
        let runner = Arc::clone(self);
        let call = LineCall {
            owner: job.owner.clone(),
            endpoint: job.endpoint.clone(),
            body: line.request.clone(),
            fleet_only: pool.is_some(),
            request_id: format!("{}-{}", job.id, line.idx),
        };
        let batch_id = job.id.clone();
        self.count(&pool, true);
        tokio::spawn(async move {
            let answer = runner.caller.call(call).await;
            // Counted until its result is written: the store and the count agree on what runs.
            if let Err(e) = runner.settle(&batch_id, &line, answer).await {
                tracing::warn!(batch = %batch_id, line = line.idx, error = %e, "batch runner: a line's result was not written; it runs again when its claim lapses");
            }
            runner.count(&pool, false);
        });
    }

    /// Write a line's answer, or hand it back when the router had no room for it.
    async fn settle(&self, batch_id: &str, line: &Claimed, answer: LineAnswer) -> Result<(), sqlx::Error> {
        if no_room(answer.status) {
            return store::release(&self.store, batch_id, line.idx, self.lease.me()).await;
        }
        let state = if answer.status == 200 { LineState::Succeeded } else { LineState::Errored };
        let task = serde_json::from_str::<Value>(&line.request)
            .ok()
            .and_then(|b| b["model"].as_str().map(str::to_string));
        self.metrics.ended(
            task.as_deref().unwrap_or(""),
            answer.backend.as_deref().unwrap_or(""),
            state.as_str(),
        );
        let end = LineEnd {
            state,
            status_code: Some(i64::from(answer.status)),
            result: &answer.body,
            backend: answer.backend.as_deref(),
        };
        if !store::finish(&self.store, batch_id, line.idx, self.lease.me(), end, now_ms()).await? {
            tracing::warn!(batch = %batch_id, line = line.idx, "batch runner: a line's claim had lapsed and another replica took it; its result here is dropped");
        }
        Ok(())
    }

    fn count(&self, pool: &Option<String>, up: bool) {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        let n = in_flight.entry(pool.clone()).or_default();
        *n = if up { *n + 1 } else { n.saturating_sub(1) };
        self.metrics.set_in_flight(pool.as_deref().unwrap_or("hosted"), *n);
    }
}

/// Whether the router turned a line away for want of room (it waits in the queue).
fn no_room(status: u16) -> bool {
    matches!(status, 429 | 503 | 529)
}

/// The fleet pool a line's task runs on first (`None`: the task has none, or names no task).
fn pool_of(config: &Config, line: &Claimed) -> Option<String> {
    let model = serde_json::from_str::<Value>(&line.request).ok()?.get("model")?.as_str()?.to_string();
    let task = config.task(&model)?;
    task.backends.iter().find(|b| config.backend(b).is_some_and(|b| b.kind().is_local())).cloned()
}

fn now_ms() -> i64 {
    crate::ledger::unix_millis(std::time::SystemTime::now())
}
