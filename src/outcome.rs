//! What happened to each attempt and each request, as records sent off the request path.
//!
//! Dispatch emits one [`Record::Attempt`] per upstream call (or skipped target) and one
//! [`Record::Request`] per request; the ledger and metrics read them from a channel. Building a
//! record never blocks and never does I/O.

use std::time::{Duration, SystemTime};

use rust_decimal::Decimal;
use tokio::time::Instant;

use crate::canonical::{Affinity, BackendName, ErrorClass, NodeKey, UpstreamError};
use crate::canonical::{Event, Usage};
use crate::fleet::headroom::SpillReason;

/// What one answer cost, and on what basis. Priced once, by dispatch's lease when the answer's
/// usage arrives; the budget, the `x-spillway-cost-usd` header, the ledger and the cost metric
/// all read that one figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerCost {
    /// A hosted backend's list price of the usage: what the provider bills.
    ListPrice(Decimal),
    /// A pool's estimate: one sequence slot of its node for as long as the answer took, at the
    /// node's GPU price (`ledger::slot_cost`).
    GpuSlot(Decimal),
}

impl AnswerCost {
    /// Dollars, on either basis.
    pub fn usd(self) -> Decimal {
        match self {
            AnswerCost::ListPrice(d) | AnswerCost::GpuSlot(d) => d,
        }
    }

    /// What a provider bills: the list price. A pool's GPU hours are paid whether used or not;
    /// the reports allocate them, so the ledger and the cost metric count list prices only.
    pub fn billed(self) -> Option<Decimal> {
        match self {
            AnswerCost::ListPrice(d) => Some(d),
            AnswerCost::GpuSlot(_) => None,
        }
    }
}

/// Why a target of the plan was passed over without a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// The router already has `max_inflight_per_node` requests on it: spill.
    NodeFull,
    /// The backend's per-minute quota (for this priority) is used up.
    OverQuota,
    BreakerOpen,
    RetryBudget,
    MaxAttempts,
}

impl Skip {
    pub fn as_str(self) -> &'static str {
        match self {
            Skip::NodeFull => "node_full",
            Skip::OverQuota => "over_quota",
            Skip::BreakerOpen => "breaker_open",
            Skip::RetryBudget => "retry_budget_exhausted",
            Skip::MaxAttempts => "max_attempts",
        }
    }
}

/// One target of one request: called (served or failed) or skipped.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptRecord {
    /// The request's id (see [`RequestMeta::request_id`]).
    pub request_id: String,
    pub task: String,
    pub backend: String,
    pub node: NodeKey,
    pub skipped: Option<Skip>,
    pub error_class: Option<ErrorClass>,
    pub status: Option<u16>,
    pub message: Option<String>,
    pub elapsed: Duration,
    /// How long the upstream asked to be left alone (`Retry-After`), or, for a node skipped
    /// under such a hold, how long the hold still lasts.
    pub retry_after: Option<Duration>,
    /// Served, but its first token came later than the task's TTFT SLO (counted against the
    /// backend's availability: `route::availability`).
    pub slow: bool,
}

impl AttemptRecord {
    fn base(task: &str, backend: &str, node: &NodeKey) -> Self {
        AttemptRecord {
            request_id: String::new(),
            task: task.into(),
            backend: backend.into(),
            node: node.clone(),
            skipped: None,
            error_class: None,
            status: None,
            message: None,
            elapsed: Duration::ZERO,
            retry_after: None,
            slow: false,
        }
    }

    pub fn skipped(task: &str, backend: &str, node: &NodeKey, why: Skip) -> Self {
        AttemptRecord { skipped: Some(why), ..Self::base(task, backend, node) }
    }

    pub fn failed(task: &str, backend: &str, node: &NodeKey, e: &UpstreamError, elapsed: Duration) -> Self {
        AttemptRecord {
            error_class: Some(e.class),
            status: e.status,
            message: Some(e.message.clone()),
            elapsed,
            retry_after: e.retry_after,
            ..Self::base(task, backend, node)
        }
    }

    /// Served after `ttft`; `slo`: the task's TTFT target.
    pub fn served(task: &str, backend: &str, node: &NodeKey, ttft: Duration, slo: Duration) -> Self {
        AttemptRecord { elapsed: ttft, slow: ttft > slo, ..Self::base(task, backend, node) }
    }

    /// The same record, for the request with this id.
    pub(crate) fn for_request(self, request_id: &str) -> Self {
        AttemptRecord { request_id: request_id.to_string(), ..self }
    }

    /// One line for logs and client error messages.
    pub(crate) fn describe(&self) -> String {
        match (self.skipped, self.error_class) {
            (Some(skip), _) => format!("{}: skipped ({})", self.backend, skip.as_str()),
            (None, Some(class)) => format!(
                "{}: {}{} after {} ms{}",
                self.backend,
                class.as_str(),
                self.status.map(|s| format!(" {s}")).unwrap_or_default(),
                self.elapsed.as_millis(),
                self.message.as_deref().and_then(certificate_failure).unwrap_or_default()
            ),
            (None, None) => format!("{}: served", self.backend),
        }
    }
}

/// A TLS certificate failure in a transport error's text, named for the operator: rustls's
/// own words (`invalid peer certificate: UnknownIssuer`) and where to add a CA.
fn certificate_failure(message: &str) -> Option<String> {
    let at = message.find("invalid peer certificate").or_else(|| message.find("certificate"))?;
    let reason: String = message[at..].chars().take_while(|c| *c != ';' && *c != ')').take(120).collect();
    Some(format!(" (TLS: {}; trust its CA with tls.ca_file or SSL_CERT_FILE)", reason.trim()))
}

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    InFlight,
    Completed,
    /// Failed before the first token (no backend served) or broke after it.
    Failed(ErrorClass),
    /// The client went away before the end.
    Cancelled,
    /// Refused for lack of capacity (429), by priority.
    Shed,
}

/// What the API knows about a request and dispatch does not: when and from whom it came.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestMeta {
    /// Wall-clock arrival time.
    pub arrived_at: SystemTime,
    /// The name of the client key the request authenticated with (never the key).
    pub client_key: Option<String>,
    /// Who sent it: a static key's variable, or an issued key's id and team (what budgets and
    /// per-key reports count by). `None`: auth is off, or a synthetic call.
    pub principal: Option<crate::canonical::Principal>,
    /// Where the affinity key came from and its hash (`api::affinity`); never the key.
    pub affinity: Option<Affinity>,
    pub priority: crate::config::Priority,
    /// The id in the `x-request-id` response header and in every log line of the request.
    pub request_id: String,
    /// A synthetic call (canary, gate item, judge, shadow), not a client's request: kept out
    /// of the request metrics and SLO windows; `client_key` names its [`Purpose`].
    pub synthetic: bool,
    /// The request's server span, when tracing is on: each upstream call's span is its child.
    pub trace: Option<crate::trace::RequestSpan>,
}

impl RequestMeta {
    /// What a synthetic call was for (`None`: a client's request).
    pub fn purpose(&self) -> Option<Purpose> {
        self.synthetic.then(|| self.client_key.as_deref().and_then(Purpose::parse)).flatten()
    }

    /// Whether this request's record goes to the request ledger: every client request and the
    /// synthetic calls whose cost has no other home (see [`Purpose::ledgered`]).
    pub fn ledgered(&self) -> bool {
        !self.synthetic || self.purpose().is_none_or(Purpose::ledgered)
    }
}

/// What a call made beside live traffic is for. Its name is the client key it runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Purpose {
    /// A probe of a fallback backend (`control::canary`).
    Canary,
    /// A golden item of a gate run.
    Gate,
    /// A judge backend scoring an answer.
    Judge,
    /// A copy of a live request to another backend.
    Shadow,
}

impl Purpose {
    pub const ALL: [Purpose; 4] = [Purpose::Canary, Purpose::Gate, Purpose::Judge, Purpose::Shadow];

    pub fn as_str(self) -> &'static str {
        match self {
            Purpose::Canary => "canary",
            Purpose::Gate => "gate",
            Purpose::Judge => "judge",
            Purpose::Shadow => "shadow",
        }
    }

    pub fn parse(name: &str) -> Option<Purpose> {
        Purpose::ALL.into_iter().find(|p| p.as_str() == name)
    }

    /// Whether its calls are rows of the request ledger. Each call's cost is counted once:
    /// a gate item's cost is in its run's result (`gate_results`) and a shadow's in its own
    /// row (`shadow_results`), so they stay out; a canary's and a judge's cost has no other
    /// home, so they are ledgered (under their purpose's client key).
    pub fn ledgered(self) -> bool {
        matches!(self, Purpose::Canary | Purpose::Judge)
    }

    /// Whether a call waits for room (in the synthetic bound, in the backend's quota) rather
    /// than give up at once: gate items and judges wait, canaries and shadows do not.
    pub fn waits(self) -> bool {
        matches!(self, Purpose::Gate | Purpose::Judge)
    }
}

impl Default for RequestMeta {
    fn default() -> Self {
        RequestMeta {
            request_id: String::new(),
            synthetic: false,
            arrived_at: SystemTime::now(),
            client_key: None,
            principal: None,
            affinity: None,
            priority: crate::config::Priority::default(),
            trace: None,
        }
    }
}

/// One request, from arrival to its last event.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestOutcome {
    pub task: String,
    /// Empty when no backend served.
    pub backend: String,
    /// The serving backend's kind (`None` when none served).
    pub kind: Option<crate::config::BackendKind>,
    /// The model the serving backend ran; empty when none served.
    pub model: String,
    pub node: NodeKey,
    pub attempts: u32,
    pub ttft: Option<Duration>,
    pub duration: Duration,
    pub usage: Usage,
    pub ending: Ending,
    /// Why the fleet did not serve it, when local nodes were in its plan and a hosted backend
    /// served instead.
    pub spill: Option<SpillReason>,
    /// A local node served it without telemetry: its pool had no fresh scrape and nothing
    /// else could take it (`route::Reason::Unmeasured`).
    pub unmeasured: bool,
    /// What the answer cost, once its usage arrived (`None` before, or when unpriced).
    pub cost: Option<AnswerCost>,
    pub meta: RequestMeta,
    started: Instant,
}

impl RequestOutcome {
    pub fn started(
        task: &str,
        backend: &str,
        node: &NodeKey,
        attempts: u32,
        ttft: Duration,
        started: Instant,
    ) -> Self {
        RequestOutcome {
            task: task.into(),
            backend: backend.into(),
            kind: None,
            model: String::new(),
            node: node.clone(),
            attempts,
            ttft: Some(ttft),
            duration: Duration::ZERO,
            usage: Usage::default(),
            ending: Ending::InFlight,
            spill: None,
            unmeasured: false,
            cost: None,
            meta: RequestMeta::default(),
            started,
        }
    }

    /// The same outcome, for the request `meta` describes.
    pub(crate) fn with_meta(self, meta: &RequestMeta) -> Self {
        RequestOutcome { meta: meta.clone(), ..self }
    }

    pub fn failed(task: &str, backend: &str, attempts: u32, class: ErrorClass, started: Instant) -> Self {
        RequestOutcome {
            ttft: None,
            ending: Ending::Failed(class),
            duration: started.elapsed(),
            ..Self::started(task, backend, &NodeKey::default(), attempts, Duration::ZERO, started)
        }
    }

    pub fn shed(task: &str, started: Instant) -> Self {
        RequestOutcome {
            ttft: None,
            ending: Ending::Shed,
            ..Self::started(task, "", &NodeKey::default(), 0, Duration::ZERO, started)
        }
    }

    /// How long since dispatch started, at `now`.
    pub fn running_for(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.started)
    }

    pub fn observe(&mut self, event: &Event) {
        if let Event::Usage(usage) = event {
            self.usage = *usage;
        }
    }

    pub fn finish(&mut self, error: Option<ErrorClass>, now: Instant) {
        self.duration = now.saturating_duration_since(self.started);
        self.ending = error.map_or(Ending::Completed, Ending::Failed);
    }

    pub(crate) fn cancel(&mut self, now: Instant) {
        self.duration = now.saturating_duration_since(self.started);
        self.ending = Ending::Cancelled;
    }
}

/// What dispatch sends to the bookkeeping channel.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// A plan was made: the first backend of its chain.
    Planned {
        task: String,
        first: String,
    },
    Attempt(AttemptRecord),
    /// Dispatch moved on to `to` after `from` failed with `reason` (an error class).
    Failover {
        task: String,
        from: String,
        to: String,
        reason: &'static str,
    },
    Request(RequestOutcome),
    /// What the queue in front of a local pool decided for a request (`serve::wait`).
    Queue(QueueRecord),
    /// Local pools that did not serve a request although it was theirs to serve.
    Spilled(SpillRecord),
}

/// A client request that local pools did not serve although it was theirs to serve: its plan
/// spilled past their nodes, or dispatch skipped a node of theirs (no slot, an open breaker) or
/// saw it fail; then another backend served it, or nothing did (shed, or every target failed).
/// Demand the fleet did not serve, for `spillway_pool_spilled_tokens_per_second`.
#[derive(Debug, Clone, PartialEq)]
pub struct SpillRecord {
    /// Each pool once.
    pub pools: Vec<BackendName>,
    /// The request's prompt as planning estimated it (`estimated_prompt_tokens`).
    pub prompt_tokens: u32,
    /// When dispatch knew: the request committed elsewhere, or was refused.
    pub at: Instant,
}

/// A request that met a full local pool whose slot would free in time: it `waited` for it,
/// or `spilled` (`why`: `slo`, `max_wait`, `draining`, `queue_full`, `queue_share`).
#[derive(Debug, Clone, PartialEq)]
pub struct QueueRecord {
    pub task: String,
    pub pool: String,
    pub outcome: &'static str,
    pub why: &'static str,
    pub waited: Duration,
    /// The first token as predicted when it joined the queue, and as it came (from arrival).
    pub predicted_ttft_ms: u32,
    pub ttft_ms: Option<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_failure_is_named_in_the_attempts_line() {
        let e = UpstreamError::new(
            ErrorClass::Connect,
            None,
            "error sending request: client error (Connect): invalid peer certificate: UnknownIssuer",
        );
        let node = NodeKey::from("hosted/m@https://x/v1");
        let line = AttemptRecord::failed("t", "hosted", &node, &e, Duration::from_millis(7)).describe();
        assert_eq!(
            line,
            "hosted: connect after 7 ms (TLS: invalid peer certificate: UnknownIssuer; trust its CA with tls.ca_file or SSL_CERT_FILE)"
        );
        let refused = UpstreamError::new(ErrorClass::Connect, None, "Connection refused");
        let line = AttemptRecord::failed("t", "hosted", &node, &refused, Duration::from_millis(7)).describe();
        assert_eq!(line, "hosted: connect after 7 ms");
    }
}
