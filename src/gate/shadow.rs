//! Shadow traffic: a sampled share of a task's live requests is also sent, after the client's
//! request committed and off its path, to the task's other backends that its policy allows
//! (within their quota at batch priority, never waiting for it). Each shadow answer is stored
//! in its own table, cost included, apart from the request ledger; grading happens later
//! (`grade_pending`), against the primary's answer with the task's shadow grader, so drift in
//! a fallback shows before an outage forces traffic onto it.
//!
//! A shadow is a synthetic call ([`Purpose::Shadow`]) through the dispatcher's one entry
//! point: real load on the node it goes to (counted in its in-flight requests, which headroom
//! reads; through and feeding its breaker), planned over the shadow backend like any batch
//! request (a pool's least busy node with headroom, spread over equals), never waiting for
//! room: beyond `dispatch.max_synthetic_in_flight` calls in flight it is dropped, counted as
//! `busy`.

use std::sync::Arc;

use futures::StreamExt;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::call::Calls;
use super::error::GateError;
use super::grade::Verdict;
use super::run::{grade, Judge};
use super::store::{self, ShadowResult};
use crate::canonical::ChatRequest;
use crate::canonical::EventStream;
use crate::config::golden::GoldenItem;
use crate::config::golden::Grader;
use crate::config::{BackendId, Config, TaskConfig};
use crate::dispatch::synthetic::{plan_for, Destination, GradedText, Purpose, SyntheticCall, SyntheticError};
use crate::fleet::load::LoadView;
use crate::ledger::{new_record_id, unix_millis, Store};
use crate::metrics::Metrics;
use crate::route::Reason;
use crate::snapshot::{NodeView, Snapshot};

/// Sends shadows and stores them.
pub struct Shadows {
    pub calls: Calls,
    pub store: Store,
    pub metrics: Arc<Metrics>,
}

/// Whether this request is shadowed (`roll` uniform in 0..1).
pub fn sampled(task: &TaskConfig, roll: f64) -> bool {
    task.shadow.as_ref().is_some_and(|s| roll < s.rate)
}

/// Where one request's shadows go.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Targets {
    /// Each backend a synthetic call would find a node on now ([`plan_for`]: a pool's
    /// headroom for batch work, nodes neither held nor quarantined), other than by serving a
    /// pool blind (`route::blind`): a shadow is optional load, not for a node of unknown load.
    pub send: Vec<BackendId>,
    /// Shadow backends with no room now: no call, but counted (`no_capacity`), so a sampled
    /// shadow never goes missing without a trace.
    pub no_room: Vec<BackendId>,
}

/// The shadow's backends (else the task's others), minus the primary and any the task's
/// policy refuses or that lacks what the request needs (tools, images, context), split into
/// those to [`Targets::send`] to and those with [`Targets::no_room`].
pub fn targets(
    snap: &Snapshot,
    task: &TaskConfig,
    request: &ChatRequest,
    primary: &str,
    load: &dyn Fn(&NodeView) -> LoadView,
    now: Instant,
    seed: u64,
) -> Targets {
    let mut targets = Targets::default();
    let Some(shadow) = &task.shadow else { return targets };
    let names = shadow.backends.as_ref().unwrap_or(&task.backends);
    for b in names.iter().filter(|name| *name != primary).filter_map(|name| snap.backend_id(name)) {
        match plan_for(snap, task, request, b, load, now, seed) {
            // A pool served blind (no fresh telemetry) takes no optional load: no room.
            Ok(plan) if plan.targets.iter().any(|t| !matches!(t.reason, Reason::Unmeasured { .. })) => {
                targets.send.push(b)
            }
            Ok(_) => targets.no_room.push(b),
            Err(_) => {}
        }
    }
    targets
}

/// The client's stream, unchanged, and the whole answer once it ended well (text, then tool
/// calls as `name(arguments)` lines, the form graders see).
pub(crate) fn tap(events: EventStream) -> (EventStream, oneshot::Receiver<String>) {
    let (tx, rx) = oneshot::channel();
    let state = (events, GradedText::default(), Some(tx));
    let stream = futures::stream::unfold(state, |(mut events, mut text, tx)| async move {
        match events.next().await {
            Some(Ok(event)) => {
                text.add(&event);
                Some((Ok(event), (events, text, tx)))
            }
            // A broken answer is no reference: the sender goes, unsent.
            Some(Err(e)) => Some((Err(e), (events, text, None))),
            None => {
                if let Some(tx) = tx {
                    let _ = tx.send(text.finish());
                }
                None
            }
        }
    });
    (Box::pin(stream), rx)
}

/// One request's shadows.
pub struct Job {
    pub snap: Arc<Snapshot>,
    pub task: TaskConfig,
    pub request: ChatRequest,
    /// As [`targets`] chose them.
    pub targets: Vec<BackendId>,
    /// The backend that served the client.
    pub primary: String,
    pub request_id: String,
}

/// The metric label of a shadow's end, and whether it is stored (an answer or an upstream's
/// error; not a call the router itself declined to make).
fn result_of(answer: &Result<crate::dispatch::synthetic::Answered, SyntheticError>) -> (&'static str, bool) {
    match answer {
        Ok(_) => ("ok", true),
        Err(SyntheticError::Busy) => ("busy", false),
        Err(SyntheticError::OverQuota(_)) => ("over_quota", false),
        Err(SyntheticError::BreakerOpen(_)) => ("breaker_open", false),
        Err(SyntheticError::Held | SyntheticError::NoCapacity(_)) => ("no_capacity", false),
        Err(_) => ("error", true),
    }
}

impl Shadows {
    /// Send the job's copies in the background and store what comes back with the primary's
    /// answer (once the client's stream has ended).
    pub fn spawn(self: &Arc<Self>, job: Job, primary_answer: oneshot::Receiver<String>) {
        let Job { snap, task, request, targets, primary, request_id } = job;
        if targets.is_empty() {
            return;
        }
        let this = Arc::clone(self);
        tokio::spawn(async move {
            let at_ms = unix_millis(std::time::SystemTime::now());
            let calls = targets.iter().map(|&b| {
                let (this, task, snap) = (&this, &task, &snap);
                let call = SyntheticCall {
                    purpose: Purpose::Shadow,
                    task,
                    request: request.clone(),
                    to: Destination::Backend(b),
                };
                async move { (b, this.calls.dispatcher.synthetic(snap, call).await) }
            });
            let answers: Vec<_> = futures::future::join_all(calls).await;
            let primary_answer = primary_answer.await.ok();
            for (b, answer) in answers {
                let backend = &snap.config.backends[b];
                let (result, stored) = result_of(&answer);
                this.metrics.observe_shadow(&task.name, &backend.name, result);
                if !stored {
                    continue;
                }
                let row = ShadowResult {
                    id: new_record_id(),
                    at_ms,
                    task: task.name.clone(),
                    request_id: request_id.clone(),
                    primary_backend: primary.clone(),
                    backend: backend.name.clone(),
                    model: backend.model.clone(),
                    error_class: answer.as_ref().err().map(|e| e.class().to_string()),
                    input_tokens: answer.as_ref().map_or(0, |a| i64::from(a.usage.input_tokens)),
                    output_tokens: answer.as_ref().map_or(0, |a| i64::from(a.usage.output_tokens)),
                    duration_ms: answer.as_ref().map_or(0, |a| a.latency.as_millis() as i64),
                    cost: answer.as_ref().ok().and_then(|a| a.cost),
                    primary_answer: primary_answer.clone(),
                    answer: answer.map(|a| a.text).unwrap_or_default(),
                    verdict: None,
                    why: None,
                };
                if let Err(e) = store::insert_shadow(&this.store, &row).await {
                    tracing::error!("shadow result not stored: {e}");
                }
            }
        });
    }
}

/// The grader of a task's shadows: its configured one, else word overlap with the primary.
pub(crate) fn grader_of(task: &TaskConfig) -> Grader {
    task.shadow.as_ref().and_then(|s| s.grader.clone()).unwrap_or(Grader::Similar { min: 0.5 })
}

/// Grade every stored shadow answer not graded yet; returns how many were graded. Answers
/// whose primary broke off have no reference and stay ungraded.
pub(crate) async fn grade_pending(
    store: &Store,
    config: &Arc<Config>,
    calls: &Calls,
    metrics: Option<&Metrics>,
) -> Result<usize, GateError> {
    let pending = store::shadows(store, true).await?;
    let mut graded = 0;
    let mut judges = std::collections::HashMap::new();
    for row in pending {
        let Some(task) = config.task(&row.task) else { continue };
        let Some(primary) = &row.primary_answer else { continue };
        let grader = grader_of(task);
        let item =
            GoldenItem { messages: Vec::new(), reference: Some(primary.clone()), grader: grader.clone() };
        if !judges.contains_key(&task.name) {
            judges.insert(task.name.clone(), Judge::new(config, task)?);
        }
        let judge = &judges[&task.name];
        let (verdict, why) = match grade(calls, judge, &grader, &item, &row.answer).await {
            Ok(Verdict::Pass) => ("pass", None),
            Ok(Verdict::Fail(why)) => ("fail", Some(why)),
            Ok(Verdict::NeedsJudge) => continue,
            Err(e) => {
                tracing::warn!(task = %row.task, backend = %row.backend, "shadow not graded: {e}");
                continue;
            }
        };
        store::grade_shadow(store, &row.id, verdict, why.as_deref()).await?;
        if let Some(m) = metrics {
            m.observe_shadow_grade(&row.task, &row.backend, verdict == "pass");
        }
        graded += 1;
    }
    Ok(graded)
}

/// Grade pending shadows every `period` until aborted.
pub(crate) async fn grade_loop(
    store: Store,
    config: Arc<arc_swap::ArcSwap<Config>>,
    calls: Calls,
    metrics: Arc<Metrics>,
    period: std::time::Duration,
) {
    let mut tick = tokio::time::interval(period);
    loop {
        tick.tick().await;
        let config = config.load_full();
        if !config.tasks.iter().any(|t| t.shadow.is_some()) {
            continue;
        }
        if let Err(e) = grade_pending(&store, &config, &calls, Some(&metrics)).await {
            tracing::warn!("shadow grading: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::Event;

    #[tokio::test]
    async fn the_tap_passes_events_through_and_hands_over_the_whole_answer() {
        let events: Vec<Result<Event, crate::canonical::UpstreamError>> = vec![
            Ok(Event::TextDelta("Hello ".into())),
            Ok(Event::TextDelta("there".into())),
            Ok(Event::ToolCallDelta {
                index: 0,
                id: Some("c1".into()),
                name: Some("lookup".into()),
                arguments: "{\"id\":".into(),
            }),
            Ok(Event::ToolCallDelta { index: 0, id: None, name: None, arguments: "4}".into() }),
        ];
        let (stream, rx) = tap(Box::pin(futures::stream::iter(events.clone())));
        let seen: Vec<_> = stream.collect().await;
        assert_eq!(seen, events);
        assert_eq!(rx.await.unwrap(), "Hello there\nlookup({\"id\":4})");

        let broken: Vec<Result<Event, crate::canonical::UpstreamError>> = vec![
            Ok(Event::TextDelta("Hel".into())),
            Err(crate::canonical::UpstreamError::new(
                crate::canonical::ErrorClass::StreamBroken,
                None,
                "cut",
            )),
        ];
        let (stream, rx) = tap(Box::pin(futures::stream::iter(broken)));
        let _ = stream.collect::<Vec<_>>().await;
        assert!(rx.await.is_err(), "a broken answer is not a reference");
    }

    #[test]
    fn shadows_go_only_where_policy_capabilities_and_headroom_allow() {
        let yaml = "backends:
  - {name: pool, kind: vllm, model: m, endpoints: ['http://10.0.0.1:8000'], region: eu, max_running: 10}
  - {name: eu-api, kind: openai, model: gpt, region: eu, capabilities: {tools: false}}
  - {name: us-api, kind: anthropic, model: claude, region: us}
  - {name: eu-other, kind: gemini, model: gemini, region: eu}
tasks:
  - {name: t, backends: [eu-api, pool, us-api, eu-other], data_class: eu, slo: {ttft_ms: 2000}, shadow: {rate: 1}}
policy:
  data_classes:
    eu: {regions: [eu]}
";
        let config = Arc::new(crate::config::parse(yaml).unwrap());
        let task = config.tasks[0].clone();
        let mut snap = Snapshot::from_config(Arc::clone(&config));
        let now = Instant::now();
        let idle = |_: &NodeView| LoadView::default();
        let plain = ChatRequest {
            messages: vec![crate::canonical::Message::new(crate::canonical::Role::User, "hi")].into(),
            ..Default::default()
        };
        let names = |snap: &Snapshot, t: Targets| {
            t.send.into_iter().map(|b| snap.backends[b].name.clone()).collect::<Vec<_>>()
        };
        // The pool has no telemetry yet (no headroom known): no shadow there; us-api is refused.
        assert_eq!(names(&snap, targets(&snap, &task, &plain, "eu-api", &idle, now, 0)), ["eu-other"]);
        snap.backends[0].nodes[0].signals = crate::fleet::headroom::NodeSignals {
            scraped_at: Some(now),
            running: Some(0.0),
            waiting: Some(0.0),
            ..Default::default()
        };
        assert_eq!(
            names(&snap, targets(&snap, &task, &plain, "eu-api", &idle, now, 0)),
            ["pool", "eu-other"]
        );
        let busy = |_: &NodeView| LoadView { in_flight: 10, ..LoadView::default() };
        assert_eq!(
            names(&snap, targets(&snap, &task, &plain, "eu-api", &busy, now, 0)),
            ["eu-other"],
            "a full pool gets none"
        );
        let full = targets(&snap, &task, &plain, "eu-api", &busy, now, 0);
        assert_eq!(full.no_room, [BackendId::new(0)], "but its shadow is counted as having no room");
        let mut tools = plain.clone();
        tools.tools.push(crate::canonical::Tool {
            name: "f".into(),
            description: None,
            parameters: serde_json::json!({"type": "object"}).into(),
        });
        let chosen = names(&snap, targets(&snap, &task, &tools, "eu-other", &idle, now, 0));
        assert!(!chosen.contains(&"eu-api".to_string()), "no tools there: {chosen:?}");
        assert!(!chosen.contains(&"eu-other".to_string()), "never the primary");
    }

    // A pool's shadows going to its least busy admitting node, spread over equals by the
    // seed: `dispatch::synthetic`'s tests (the planning is theirs).

    #[test]
    fn sampling_follows_the_rate() {
        let mut task: TaskConfig =
            serde_yaml_ng::from_str("{name: t, backends: [a], slo: {ttft_ms: 1}}").unwrap();
        assert!(!sampled(&task, 0.0));
        task.shadow = Some(crate::config::ShadowConfig { rate: 0.25, backends: None, grader: None });
        assert!(sampled(&task, 0.1) && !sampled(&task, 0.25) && !sampled(&task, 0.9));
    }
}
