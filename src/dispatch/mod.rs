//! Dispatch: the only place that retries and fails over.
//!
//! It walks a plan in order. For each target it takes a node slot and a breaker permit, calls
//! the adapter, and waits for the first token under the task's deadline. A failure before the
//! first token that may fail over moves on to the next target (never back to one that failed),
//! within the retry budget and with jittered backoff between targets of the same class. The
//! first token commits the request to that backend: what follows is streamed to the client as
//! is, and an upstream failure after it is the client's error, never another model's text.

mod count;
mod first_output;
mod guards;
mod lease;
pub mod synthetic;
mod unserved;
pub mod variant;
pub mod walk;

pub use count::TokenCount;
pub use lease::CostCell;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use first_output::first_output;
use guards::LiveGuards;
use lease::{track, Lease, Pricing};
use tokio::sync::{mpsc, Semaphore};
use tokio::time::Instant;
use walk::{Admitted, AfterFailure, Walk};

use crate::adapter::credentials::CloudCredentials;
use crate::adapter::redact::Redactor;
use crate::adapter::transport::h1::PoolConfig;
use crate::adapter::transport::lanes::{LaneLimits, Lanes};
use crate::adapter::{Call, Transport, Upstream};
use crate::canonical::EventStream;
use crate::canonical::{ChatRequest, ErrorClass, UpstreamError};
use crate::config::{BackendId, DispatchConfig, Priority, TaskConfig, TlsConfig};
use crate::fleet::headroom::{self, SpillReason};
use crate::fleet::load::InFlight;
use crate::fleet::prefix_cache::PrefixKeys;
use crate::fleet::progress::Touch;
use crate::guard::quota::QuotaBoard;
use crate::guard::retry_budget::RetryBudget;
use crate::outcome::{AttemptRecord, Record, RequestMeta, RequestOutcome};
use crate::route::{Plan, Reason};
use crate::snapshot::Snapshot;
use crate::trace;

/// A request committed to one backend: its first events are in, the rest are streaming.
pub struct Committed {
    pub backend: String,
    pub model: String,
    /// Upstream calls made, this one included.
    pub attempts: u32,
    pub ttft: Duration,
    /// What planning predicted for this node's first token, when it was chosen for headroom.
    pub predicted_ttft_ms: Option<u32>,
    /// Why the fleet did not serve it, when a hosted backend did.
    pub spill: Option<SpillReason>,
    /// Why the serving target was in the plan (a local node served blind: `Reason::Unmeasured`).
    pub reason: Reason,
    /// Every event of the answer from the start; ends with an `Err` if the upstream broke.
    /// Already inside the lease, the first of the wrappers a live answer passes through on its
    /// way out (`serve` adds the others, and lists all three in order).
    pub events: EventStream,
    /// What the answer cost, once the lease has priced its usage.
    pub cost: Arc<CostCell>,
}

/// Why no backend answered.
#[derive(Debug)]
pub enum DispatchError {
    /// The upstream refused the request for a reason another backend would not fix.
    Rejected { backend: String, error: UpstreamError, attempts: u32 },
    /// Every target failed, was skipped, or the retry budget ran out.
    Exhausted { attempts: Vec<AttemptRecord> },
    /// Nothing could take the request without breaking its SLO or a quota, and its priority
    /// does not allow waiting: shed (the client should retry later).
    Shed { why: String },
}

/// Long-lived dispatch state shared by every request.
pub struct Dispatcher {
    transport: Transport,
    cfg: DispatchConfig,
    budget: Mutex<RetryBudget>,
    /// API keys by backend name, read from the environment at start and on a reload.
    secrets: arc_swap::ArcSwap<HashMap<String, String>>,
    /// Scrubs every upstream error text of the secrets in `Keys`; rebuilt on a reload.
    redactor: arc_swap::ArcSwap<Redactor>,
    /// The admin token the router started with: it stays in effect until a restart, so it stays
    /// redacted whatever a reload reads.
    admin_token: Option<String>,
    records: mpsc::UnboundedSender<Record>,
    quota: Arc<QuotaBoard>,
    /// Synthetic calls in flight ([`synthetic`]), at most `max_synthetic_in_flight`.
    synthetic: Arc<Semaphore>,
    /// The clouds' credentials (AWS, Google), fetched on first use and kept until shortly
    /// before they expire.
    clouds: CloudCredentials,
}

/// The secret values dispatch knows: the API keys it sends upstream, and the other secrets
/// (client keys, the admin token) that no upstream error text may carry to a client, a log, the
/// ledger or `/admin`. No `Debug`: it is never printed.
#[derive(Clone, Default)]
pub struct Keys {
    /// API keys by backend name.
    pub api_keys: HashMap<String, String>,
    /// The values of the client keys (what clients send as bearer tokens).
    pub client_keys: Vec<String>,
    pub admin_token: Option<String>,
}

impl Keys {
    fn redactor(&self, also: Option<&String>) -> Redactor {
        let admin = self.admin_token.iter().chain(also);
        Redactor::new(self.api_keys.values().chain(&self.client_keys).chain(admin))
    }
}

/// Longest a connection to a local node is kept idle: under the engines' own keep-alive.
const ENGINE_KEEP_ALIVE: Duration = Duration::from_secs(4);

impl Dispatcher {
    /// `tls`: the roots the hosted client trusts beside the built-in ones.
    pub fn new(
        cfg: DispatchConfig,
        tls: &TlsConfig,
        keys: Keys,
        records: mpsc::UnboundedSender<Record>,
        quota: Arc<QuotaBoard>,
    ) -> Self {
        let connect_timeout = Duration::from_millis(cfg.connect_timeout_ms);
        let idle_timeout = Duration::from_millis(cfg.pool_idle_timeout_ms);
        let (max_idle, tls) = (cfg.pool_max_idle_per_host, tls.clone());
        let make = move || {
            let builder = reqwest::Client::builder()
                .connect_timeout(connect_timeout)
                .pool_idle_timeout(idle_timeout)
                .pool_max_idle_per_host(max_idle)
                .tcp_nodelay(true);
            crate::adapter::transport::tls::trusting(builder, &tls)
                .build()
                .expect("the HTTP client builds with static settings")
        };
        let hosted = make();
        let clouds = CloudCredentials::new(hosted.clone());
        let limits = LaneLimits {
            streams_per_connection: cfg.hosted_streams_per_connection,
            max_connections: cfg.hosted_max_connections,
        };
        // Engines close a connection idle for 5 s (uvicorn's and cpp-httplib's keep-alive): one
        // kept longer is reused as the server closes it, and since a request reaches a node at
        // most once, that request would fail over. Local nodes' connections are kept less long.
        let idle_timeout = idle_timeout.min(ENGINE_KEEP_ALIVE);
        let plain = PoolConfig { connect_timeout, max_idle_per_host: max_idle, idle_timeout };
        let transport = Transport::with_lanes(hosted, plain, Lanes::new(limits, make));
        let budget = RetryBudget::new(cfg.retry_budget_ratio, cfg.retry_budget_min_per_sec, Instant::now());
        Dispatcher {
            synthetic: synthetic::bound(cfg.max_synthetic_in_flight),
            transport,
            cfg,
            budget: Mutex::new(budget),
            redactor: arc_swap::ArcSwap::from_pointee(keys.redactor(None)),
            admin_token: keys.admin_token,
            secrets: arc_swap::ArcSwap::from_pointee(keys.api_keys),
            records,
            quota,
            clouds,
        }
    }

    /// Where and as whom a call to `backend`'s node at `base_url` goes, as its provider takes it.
    fn upstream(&self, snap: &Snapshot, backend: BackendId, base_url: &str) -> Upstream {
        let view = &snap.backends[backend];
        let to = Upstream {
            base_url: base_url.to_string(),
            api_key: self.secrets.load().get(&view.name).cloned(),
            serves_messages: view.serves_messages,
            ..Upstream::default()
        };
        view.provider.upstream(&snap.config.backends[backend], to, &self.clouds)
    }

    /// Use the keys of a reloaded config from now on (and keep redacting the admin token the
    /// router started with).
    pub fn set_secrets(&self, keys: Keys) {
        self.redactor.store(Arc::new(keys.redactor(self.admin_token.as_ref())));
        self.secrets.store(Arc::new(keys.api_keys));
    }

    /// A record of the pipeline's for the bookkeeping channel (a queue decision).
    pub fn record(&self, record: Record) {
        self.emit(record);
    }

    fn emit(&self, record: Record) {
        // Unbounded: bookkeeping never blocks a request and never loses a record; the reader
        // does no I/O, so the queue stays short. It fails only once the reader is gone.
        let _ = self.records.send(record);
    }

    /// The call to one target: its node's address, the backend's key and model, whether to
    /// stream, cache breakpoints where the task caches prompts, and the task's prompt variant.
    fn call_for<'s>(
        &self,
        snap: &'s Snapshot,
        task: &'s TaskConfig,
        backend: BackendId,
        node: usize,
        request: &ChatRequest,
    ) -> Call<'s> {
        let view = &snap.backends[backend];
        Call {
            format: view.wire,
            upstream: self.upstream(snap, backend, &view.nodes[node].base_url),
            model: &view.model,
            stream: request.stream || view.stream_upstream,
            cache_placement: snap.config.backends[backend].cache_placement().filter(|_| task.prompt_cache),
            variant: None,
            redactor: self.redactor.load_full(),
        }
        .with_variant(variant::for_backend(task, &view.name, view.kind))
    }

    /// The request path's hosted lanes (for `spillway_upstream_waiting`).
    pub fn lanes(&self) -> &crate::adapter::transport::lanes::Lanes {
        self.transport.lanes()
    }

    /// What a call beside the request path to `backend`'s first node needs (a provider's batch
    /// API): the hosted client, the upstream as its provider takes it, and the router's
    /// secrets, which nothing it reads back may carry.
    pub fn beside(
        &self,
        snap: &Snapshot,
        backend: BackendId,
    ) -> Option<(reqwest::Client, Upstream, Arc<Redactor>)> {
        let node = snap.backends[backend].nodes.first()?;
        let upstream = self.upstream(snap, backend, &node.base_url);
        Some((self.transport.hosted().clone(), upstream, self.redactor.load_full()))
    }

    /// Walk `plan` until a backend produces its first token. `claim`: the slot the request
    /// claimed on a local node while it waited for it (`serve::wait`), used when that node is
    /// called.
    #[allow(clippy::too_many_arguments)]
    pub async fn dispatch(
        &self,
        snap: &Snapshot,
        plan: &Plan,
        task: &TaskConfig,
        request: &ChatRequest,
        priority: Priority,
        meta: &RequestMeta,
        mut claim: Option<InFlight>,
    ) -> Result<Committed, DispatchError> {
        let started = Instant::now();
        self.budget.lock().unwrap_or_else(|e| e.into_inner()).deposit(started);
        let deadline =
            Duration::from_secs_f64(task.slo.ttft_ms as f64 / 1000.0 * self.cfg.ttft_deadline_factor);

        if let Some(first) = plan.targets.first() {
            let first = snap.backends[first.backend].name.clone();
            self.emit(Record::Planned { task: task.name.clone(), first });
        }
        if plan.targets.is_empty() && !plan.spills.is_empty() {
            let spilled: Vec<String> = plan
                .spills
                .iter()
                .map(|s| format!("{}: {}", snap.backends[s.backend].nodes[s.node].origin, s.reason.as_str()))
                .collect();
            self.emit(Record::Request(RequestOutcome::shed(&task.name, started).with_meta(meta)));
            self.note_unserved(snap, plan, &[], None, request, meta);
            return Err(DispatchError::Shed {
                why: format!(
                    "no capacity for a {} request to task `{}`: {}",
                    priority.as_str(),
                    task.name,
                    spilled.join("; ")
                ),
            });
        }
        let targets = plan.targets.iter().map(|t| (t.clone(), snap.backends[t.backend].is_local()));
        let prompt_tokens = request.estimated_prompt_tokens();
        let keys = PrefixKeys::of(request, meta.affinity.map(|a| a.hash));
        let mut walk = Walk::new(targets, &self.cfg);
        let mut guards = LiveGuards {
            dispatcher: self,
            snap,
            request,
            priority,
            task: &task.name,
            request_id: &meta.request_id,
            attempts: Vec::new(),
        };
        while let Ok(call) = walk.next(&mut guards).await {
            let backoff = call.backoff.draw(&mut rand::thread_rng());
            if !backoff.is_zero() {
                tokio::time::sleep(backoff).await;
            }
            let Admitted { target, node: hold, charge, failover_from, .. } = call;
            let backend = &snap.backends[target.backend];
            let node = &backend.nodes[target.node];
            if let Some((from, class)) = failover_from {
                self.emit(Record::Failover {
                    task: task.name.clone(),
                    from: snap.backends[from].name.clone(),
                    to: backend.name.clone(),
                    reason: class.as_str(),
                });
            }
            // A slot the request claimed while it waited for this node is its in-flight count.
            let in_flight = match claim.take() {
                Some(claimed) if claimed.on(&node.handle.load) => claimed,
                _ => node.handle.load.start(priority),
            };
            let mut prefill = prompt_tokens;
            if backend.is_local() {
                // What the node likely holds of it: its prefill is the rest, and the node learns
                // from the answer (`fleet::prefix_cache`).
                let generation = node.signals.restarts;
                let held = node.handle.load.cached(&keys, prompt_tokens, generation);
                let predicted_cached = held.map_or(0, |h| h.tokens);
                prefill -= predicted_cached;
                in_flight.progress().touch(Touch { keys, prompt_tokens, predicted_cached, generation });
            }
            in_flight.progress().describe(prefill, request.max_tokens.unwrap_or(0));
            let spill = if backend.is_local() { None } else { plan.spill_reason() };
            let traced_target = trace::Target {
                backend: &backend.name,
                kind: backend.kind,
                node: node.key.as_str(),
                model: &backend.model,
                attempt: walk.calls(),
                spill: spill.map(SpillReason::as_str),
            };
            let attempt =
                meta.trace.as_ref().map(|t| t.attempt(&traced_target, &task.name, &request.operation));
            let traced_transport;
            let transport = match &attempt {
                Some(span) => {
                    traced_transport = self.transport.traced(span.headers());
                    &traced_transport
                }
                None => &self.transport,
            };

            let call = self.call_for(snap, task, target.backend, target.node, request);
            let call_started = Instant::now();
            let idle = Duration::from_millis(self.cfg.stream_idle_timeout_ms);
            let first = first_output(transport, &call, request, deadline, idle).await;
            let calls = walk.calls();
            match first {
                Ok((buffered, rest, first_token)) => {
                    let ttft = first_token.duration_since(call_started);
                    // The outcome's TTFT is the client's: from arrival, failed attempts included.
                    let client_ttft = started.elapsed();
                    let mut outcome = RequestOutcome::started(
                        &task.name,
                        &backend.name,
                        &node.key,
                        calls,
                        client_ttft,
                        started,
                    )
                    .with_meta(meta);
                    outcome.spill = spill;
                    outcome.kind = Some(backend.kind);
                    outcome.unmeasured = matches!(target.reason, Reason::Unmeasured { .. });
                    outcome.model = backend.model.clone();
                    let answer = meta.trace.as_ref().zip(attempt).map(|(span, attempt)| {
                        attempt.served(&backend.model);
                        span.served(&trace::Target { attempt: calls, ..traced_target });
                        trace::Answer::new(span.clone(), attempt)
                    });
                    let cost = Arc::new(CostCell::default());
                    let pricing = Pricing {
                        config: Arc::clone(&snap.config),
                        backend: target.backend,
                        cell: Arc::clone(&cost),
                    };
                    let lease =
                        Lease::new(hold, in_flight, charge, pricing, outcome, answer, self.records.clone());
                    let slo = Duration::from_millis(task.slo.ttft_ms);
                    let served = AttemptRecord::served(&task.name, &backend.name, &node.key, ttft, slo);
                    self.emit(Record::Attempt(served.for_request(&meta.request_id)));
                    let served = Some(backend.name.as_str());
                    self.note_unserved(snap, plan, &guards.attempts, served, request, meta);
                    return Ok(Committed {
                        backend: backend.name.clone(),
                        model: backend.model.clone(),
                        attempts: calls,
                        ttft,
                        spill,
                        reason: target.reason,
                        predicted_ttft_ms: match target.reason {
                            Reason::Headroom { predicted_ttft_ms, .. } => Some(predicted_ttft_ms),
                            _ => None,
                        },
                        events: track(buffered, rest, lease, idle),
                        cost,
                    });
                }
                Err(mut error) => {
                    let waited = call_started.elapsed();
                    let late =
                        error.class == ErrorClass::Timeout && error.status.is_none() && waited >= deadline;
                    if late
                        && backend.is_local()
                        && headroom::fresh(&node.signals, &backend.limits, Instant::now())
                    {
                        // Up but too slow for this SLO: fail over without marking it down, and
                        // predict its prefill no faster than this request saw it.
                        error.class = ErrorClass::Late;
                        node.handle.load.late(waited);
                    }
                    if let Some(span) = &attempt {
                        span.failed(error.class, error.status);
                    }
                    let after = walk.failed(&mut guards, hold, error.class, error.retry_after);
                    let record = AttemptRecord::failed(
                        &task.name,
                        &backend.name,
                        &node.key,
                        &error,
                        call_started.elapsed(),
                    )
                    .for_request(&meta.request_id);
                    self.emit(Record::Attempt(record.clone()));
                    guards.attempts.push(record);
                    if after == AfterFailure::Reject {
                        let outcome =
                            RequestOutcome::failed(&task.name, &backend.name, calls, error.class, started);
                        self.emit(Record::Request(outcome.with_meta(meta)));
                        self.note_unserved(snap, plan, &guards.attempts, None, request, meta);
                        return Err(DispatchError::Rejected {
                            backend: backend.name.clone(),
                            error,
                            attempts: calls,
                        });
                    }
                }
            }
        }
        let attempts = guards.attempts;
        let class = attempts.iter().rev().find_map(|a| a.error_class).unwrap_or(ErrorClass::Overloaded);
        let outcome = RequestOutcome::failed(&task.name, "", walk.calls(), class, started);
        self.emit(Record::Request(outcome.with_meta(meta)));
        self.note_unserved(snap, plan, &attempts, None, request, meta);
        Err(DispatchError::Exhausted { attempts })
    }

    /// The local pools that did not serve a client's request (`served` answered it, or nothing
    /// did) although it was theirs: `plan` spilled past them, or one of their nodes was skipped
    /// or failed among `tried`. For their spilled tokens per second.
    fn note_unserved(
        &self,
        snap: &Snapshot,
        plan: &Plan,
        tried: &[AttemptRecord],
        served: Option<&str>,
        request: &ChatRequest,
        meta: &RequestMeta,
    ) {
        if meta.synthetic {
            return;
        }
        let spilled = plan.spills.iter().map(|s| snap.backends[s.backend].name.as_str());
        let is_local = |name: &str| snap.backends.iter().any(|b| b.name == name && b.is_local());
        let failed = tried.iter().map(|a| a.backend.as_str()).filter(|name| is_local(name));
        let prompt = request.estimated_prompt_tokens();
        if let Some(record) = unserved::unserved(spilled.chain(failed), served, prompt, Instant::now()) {
            self.emit(Record::Spilled(record));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_redactor_follows_a_reload_and_keeps_the_admin_token() {
        let config = crate::config::parse(
            "backends: [{name: a, kind: openai, model: m}]\ntasks: [{name: t, backends: [a], slo: {ttft_ms: 500}}]\n",
        )
        .unwrap();
        let (records, _rx) = mpsc::unbounded_channel();
        let keys = Keys {
            api_keys: HashMap::from([("a".to_string(), "prov-Q7mX2kP9aLwE".to_string())]),
            client_keys: vec!["cli-Zr4TbN8vHs3J".into()],
            admin_token: Some("adm-Yc6UeF1oGq5D".into()),
        };
        let dispatcher = Dispatcher::new(
            config.dispatch.clone(),
            &config.tls,
            keys,
            records,
            QuotaBoard::new(&config, None),
        );
        let text = "prov-Q7mX2kP9aLwE cli-Zr4TbN8vHs3J adm-Yc6UeF1oGq5D prov-Jh2WnR7sKt0B cli-Lp9VdA4xMi8C";
        assert_eq!(
            dispatcher.redactor.load().scrub(text),
            "[redacted] [redacted] [redacted] prov-Jh2WnR7sKt0B cli-Lp9VdA4xMi8C"
        );
        dispatcher.set_secrets(Keys {
            api_keys: HashMap::from([("a".to_string(), "prov-Jh2WnR7sKt0B".to_string())]),
            client_keys: vec!["cli-Lp9VdA4xMi8C".into()],
            admin_token: None,
        });
        assert_eq!(dispatcher.secrets.load().get("a").map(String::as_str), Some("prov-Jh2WnR7sKt0B"));
        assert_eq!(
            dispatcher.redactor.load().scrub(text),
            "prov-Q7mX2kP9aLwE cli-Zr4TbN8vHs3J [redacted] [redacted] [redacted]",
            "the new keys are redacted, and the admin token (in effect until a restart) still is"
        );
    }
}
