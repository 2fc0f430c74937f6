//! Shadow traffic: a sampled share of a task's live requests is also sent, after the client's
//! request committed and off its path, to the task's other backends that its policy allows
//! (within their quota at batch priority, never waiting for it). Each shadow answer is stored
//! in its own table, cost included, apart from the request ledger; grading happens later
//! (`grade_pending`), against the primary's answer with the task's shadow grader, so drift in
//! a fallback shows before an outage forces traffic onto it.
//!
//! A shadow is real load on the node it goes to: it is counted in the node's in-flight
//! requests (which headroom reads), goes through the node's breaker and feeds it, lands on the
//! least busy node of a pool that admits it, and at most [`MAX_IN_FLIGHT`] run at once (beyond
//! that a shadow is dropped, counted as `busy`).

use std::sync::Arc;

use futures::StreamExt;
use tokio::sync::{oneshot, Semaphore};

use super::call::{Caller, GradedText};
use super::error::GateError;
use super::grade::Verdict;
use super::run::{grade, Judge};
use super::store::{self, ShadowResult};
use crate::adapter::EventStream;
use crate::canonical::ChatRequest;
use crate::canonical::NodeKey;
use crate::config::golden::GoldenItem;
use crate::config::golden::Grader;
use crate::config::{Config, Priority, TaskConfig};
use crate::fleet::headroom::{admit, PoolLimits};
use crate::fleet::load::{LoadView, NodeLoad};
use crate::guard::breaker::BreakerBoard;
use crate::ledger::{new_record_id, unix_millis, Store};
use crate::metrics::Metrics;
use crate::snapshot::{BreakerView, NodeView, Snapshot};
use tokio::time::Instant;

/// The most shadow calls in flight at once, over every task.
pub const MAX_IN_FLIGHT: usize = 64;

/// Sends shadows and stores them.
pub struct Shadows {
    pub caller: Caller,
    pub store: Store,
    pub metrics: Arc<Metrics>,
    /// The in-flight counts dispatch keeps, credited for each shadow call.
    pub load: Arc<NodeLoad>,
    pub breakers: Arc<BreakerBoard>,
    /// Shadow calls running now (at most [`MAX_IN_FLIGHT`]).
    pub running: Arc<Semaphore>,
}

/// One shadow call's destination.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub backend: String,
    /// The node's key (breaker, in-flight count).
    pub node: NodeKey,
    pub base_url: String,
}

/// Whether this request is shadowed (`roll` uniform in 0..1).
pub fn sampled(task: &TaskConfig, roll: f64) -> bool {
    task.shadow.as_ref().is_some_and(|s| roll < s.rate)
}

/// Each shadow target: the shadow's backends (else the task's others), minus the primary, any
/// the task's policy refuses and any that lacks what the request needs (tools, images,
/// context), at the least busy node that is neither held, quarantined nor behind an open
/// breaker (`seed` picks among equally busy ones, so a pool's shadows spread over it); a pool
/// node also needs headroom for a batch request, so shadows never take the fleet's room from
/// live traffic.
pub fn targets(
    snap: &Snapshot,
    task: &TaskConfig,
    request: &ChatRequest,
    primary: &str,
    load: &dyn Fn(&NodeView) -> LoadView,
    now: Instant,
    seed: u64,
) -> Vec<Target> {
    let Some(shadow) = &task.shadow else { return Vec::new() };
    let names = shadow.backends.as_ref().unwrap_or(&task.backends);
    let slo_s = task.slo.ttft_ms as f64 / 1000.0 * (1.0 - task.slo.margin);
    names
        .iter()
        .filter(|name| *name != primary)
        .filter_map(|name| {
            let index = snap.backend_id(name)?;
            if crate::policy::refuses(&snap.config, task, &snap.config.backends[index]).is_some()
                || crate::route::capability::filter(vec![index], request, snap).is_err()
            {
                return None;
            }
            let view = &snap.backends[index];
            let limits =
                PoolLimits { reserve: Priority::Batch.local_reserve(view.limits.reserve), ..view.limits };
            let prompt = request.estimated_prompt_tokens();
            let open: Vec<_> = view
                .nodes
                .iter()
                .filter(|n| {
                    n.held.is_none()
                        && n.quarantine.is_none()
                        && n.breaker != BreakerView::Open
                        && (!view.is_local()
                            || admit(&n.signals, load(n), &limits, prompt, slo_s, now).is_ok())
                })
                .map(|n| (load(n).in_flight, n))
                .collect();
            let least = open.iter().map(|(busy, _)| *busy).min()?;
            let idlest: Vec<_> = open.iter().filter(|(busy, _)| *busy == least).map(|(_, n)| n).collect();
            let node = idlest[(seed % idlest.len() as u64) as usize];
            Some(Target { backend: name.clone(), node: node.key.clone(), base_url: node.base_url.clone() })
        })
        .collect()
}

/// The client's stream, unchanged, and the whole answer once it ended well (text, then tool
/// calls as `name(arguments)` lines, the form graders see).
pub fn tap(events: EventStream) -> (EventStream, oneshot::Receiver<String>) {
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
    pub targets: Vec<Target>,
    /// The backend that served the client.
    pub primary: String,
    pub request_id: String,
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
            let calls = targets.iter().map(|target| {
                let backend = snap.config.backend(&target.backend).cloned();
                let (this, task, request) = (&this, &task, &request);
                async move {
                    let backend = backend?;
                    let Ok(_running) = Arc::clone(&this.running).try_acquire_owned() else {
                        this.metrics.observe_shadow(&task.name, &backend.name, "busy");
                        return None;
                    };
                    let Some(permit) = this.breakers.try_acquire(&target.node, Instant::now()) else {
                        this.metrics.observe_shadow(&task.name, &backend.name, "breaker_open");
                        return None;
                    };
                    let _in_flight = this.load.start(&target.node);
                    let answer = this.caller.ask(Some(task), &backend, &target.base_url, request).await;
                    match &answer {
                        Err(e) if e.counts_against_backend => permit.failure(Instant::now()),
                        Err(_) => drop(permit),
                        Ok(_) => permit.success(Instant::now()),
                    }
                    Some((backend.clone(), answer))
                }
            });
            let answers: Vec<_> = futures::future::join_all(calls).await.into_iter().flatten().collect();
            let primary_answer = primary_answer.await.ok();
            for (backend, answer) in answers {
                let result = match &answer {
                    Ok(_) => "ok",
                    Err(e) if e.class == "over_quota" => "over_quota",
                    Err(_) => "error",
                };
                this.metrics.observe_shadow(&task.name, &backend.name, result);
                if result == "over_quota" {
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
                    error_class: answer.as_ref().err().map(|e| e.class.clone()),
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
pub fn grader_of(task: &TaskConfig) -> Grader {
    task.shadow.as_ref().and_then(|s| s.grader.clone()).unwrap_or(Grader::Similar { min: 0.5 })
}

/// Grade every stored shadow answer not graded yet; returns how many were graded. Answers
/// whose primary broke off have no reference and stay ungraded.
pub async fn grade_pending(
    store: &Store,
    config: &Arc<Config>,
    caller: &Caller,
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
        let (verdict, why) = match grade(caller, judge, &grader, &item, &row.answer).await {
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
pub async fn grade_loop(
    store: Store,
    config: Arc<arc_swap::ArcSwap<Config>>,
    caller: Caller,
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
        if let Err(e) = grade_pending(&store, &config, &caller, Some(&metrics)).await {
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
            messages: vec![crate::canonical::Message::new(crate::canonical::Role::User, "hi")],
            ..Default::default()
        };
        let names = |t: Vec<Target>| t.into_iter().map(|t| t.backend).collect::<Vec<_>>();
        // The pool has no telemetry yet (no headroom known): no shadow there; us-api is refused.
        assert_eq!(names(targets(&snap, &task, &plain, "eu-api", &idle, now, 0)), ["eu-other"]);
        snap.backends[0].nodes[0].signals = crate::fleet::headroom::NodeSignals {
            scraped_at: Some(now),
            running: Some(0.0),
            waiting: Some(0.0),
            ..Default::default()
        };
        assert_eq!(names(targets(&snap, &task, &plain, "eu-api", &idle, now, 0)), ["pool", "eu-other"]);
        let busy = |_: &NodeView| LoadView { in_flight: 10, ..LoadView::default() };
        assert_eq!(
            names(targets(&snap, &task, &plain, "eu-api", &busy, now, 0)),
            ["eu-other"],
            "a full pool gets none"
        );
        let mut tools = plain.clone();
        tools.tools.push(crate::canonical::Tool {
            name: "f".into(),
            description: None,
            parameters: serde_json::json!({"type": "object"}),
        });
        let chosen = names(targets(&snap, &task, &tools, "eu-other", &idle, now, 0));
        assert!(!chosen.contains(&"eu-api".to_string()), "no tools there: {chosen:?}");
        assert!(!chosen.contains(&"eu-other".to_string()), "never the primary");
    }

    #[test]
    fn a_pools_shadows_go_to_its_least_busy_admitting_node() {
        let yaml = "backends:
  - {name: api, kind: openai, model: gpt}
  - {name: pool, kind: vllm, model: m, endpoints: ['http://10.0.0.1:8000', 'http://10.0.0.2:8000'], max_running: 10}
tasks:
  - {name: t, backends: [api, pool], slo: {ttft_ms: 2000}, shadow: {rate: 1}}
";
        let config = Arc::new(crate::config::parse(yaml).unwrap());
        let mut snap = Snapshot::from_config(Arc::clone(&config));
        let now = Instant::now();
        for node in &mut snap.backends[1].nodes {
            node.signals = crate::fleet::headroom::NodeSignals {
                scraped_at: Some(now),
                running: Some(0.0),
                waiting: Some(0.0),
                ..Default::default()
            };
        }
        let (first, second) = (snap.backends[1].nodes[0].key.clone(), snap.backends[1].nodes[1].key.clone());
        let plain = ChatRequest {
            messages: vec![crate::canonical::Message::new(crate::canonical::Role::User, "hi")],
            ..Default::default()
        };
        let first_busier =
            |n: &NodeView| LoadView { in_flight: u64::from(n.key == first), ..LoadView::default() };
        for seed in 0..4 {
            let chosen = targets(&snap, &config.tasks[0], &plain, "api", &first_busier, now, seed);
            assert_eq!(chosen.len(), 1);
            assert_eq!(
                (chosen[0].node.as_str(), chosen[0].base_url.as_str()),
                (second.as_str(), "http://10.0.0.2:8000/v1")
            );
        }
        // Equally busy: the seed spreads them.
        let idle = |_: &NodeView| LoadView::default();
        let nodes: std::collections::BTreeSet<NodeKey> = (0..4)
            .map(|seed| targets(&snap, &config.tasks[0], &plain, "api", &idle, now, seed)[0].node.clone())
            .collect();
        assert_eq!(nodes, [first, second].into_iter().collect());
    }

    #[test]
    fn sampling_follows_the_rate() {
        let mut task: TaskConfig =
            serde_yaml_ng::from_str("{name: t, backends: [a], slo: {ttft_ms: 1}}").unwrap();
        assert!(!sampled(&task, 0.0));
        task.shadow = Some(crate::config::ShadowConfig { rate: 0.25, backends: None, grader: None });
        assert!(sampled(&task, 0.1) && !sampled(&task, 0.25) && !sampled(&task, 0.9));
    }
}
