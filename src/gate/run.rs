//! A gate run: a task's golden set through one backend (or one node of a pool), with bounded
//! concurrency, graded item by item (a `judge` grader asks the task's judge backend, which
//! must pass the task's policy filter), summed up and judged against the task's thresholds.
//! Items and judges are synthetic calls ([`Calls`]): real load on the nodes they reach.

use std::sync::Arc;

use futures::StreamExt;

use super::call::Calls;
use super::error::GateError;
use super::grade::{parse_judge_score, Verdict};
use super::store::GateResult;
use super::summary::{summarise, ItemOutcome};
use crate::canonical::{ChatRequest, Message, Role};
use crate::config::golden::GoldenItem;
use crate::config::golden::Grader;
use crate::config::{Config, TaskConfig};
use crate::dispatch::synthetic::{Answered, Destination, Purpose};
use crate::ledger::{new_record_id, unix_millis};
use crate::snapshot::Snapshot;

/// What one run tests.
#[derive(Debug, Clone)]
pub struct Subject {
    pub task: String,
    pub backend: String,
    pub fingerprint: String,
    /// Send every item to this node (its key, recorded with the result), else to the backend
    /// as planned.
    pub node: Option<String>,
    /// `cli`, `admin` or `pin_change`.
    pub trigger: String,
}

/// Whether a backend has a configured node.
fn has_node(config: &Arc<Config>, backend: &str) -> bool {
    let snap = Snapshot::from_config(Arc::clone(config));
    snap.backend_id(backend).is_some_and(|b| !snap.backends[b].nodes.is_empty())
}

/// Run `items` for `subject`; `progress(done, total)` after each item.
pub async fn run(
    calls: &Calls,
    config: &Arc<Config>,
    subject: Subject,
    items: &[GoldenItem],
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<GateResult, GateError> {
    let task = config.task(&subject.task).ok_or_else(|| GateError::NoTask(subject.task.clone()))?;
    let gate = task.gate.as_ref().ok_or_else(|| GateError::NoGate(task.name.clone()))?;
    let backend =
        config.backend(&subject.backend).ok_or_else(|| GateError::NoBackend(subject.backend.clone()))?;
    if !task.backends.contains(&backend.name) {
        return Err(GateError::NotTaskBackend { backend: backend.name.clone(), task: task.name.clone() });
    }
    let snap = calls.snapshot.load_full();
    let to = match &subject.node {
        Some(node) => {
            calls.to_node(&snap, &backend.name, node).ok_or_else(|| GateError::NodeGone(node.clone()))?
        }
        None => {
            calls.to_backend(&snap, &backend.name).ok_or_else(|| GateError::NoNode(backend.name.clone()))?
        }
    };
    let judge = Judge::new(config, task)?;
    let started_ms = unix_millis(std::time::SystemTime::now());
    let total = items.len();
    let done = std::sync::atomic::AtomicUsize::new(0);
    // Items go by index: a closure over `&GoldenItem` would not be `Send` in a spawned task.
    let outcomes: Vec<ItemOutcome> = futures::stream::iter(0..items.len())
        .map(|i| {
            let (item, judge, done) = (&items[i], &judge, &done);
            async move {
                let outcome = run_item(calls, task, to, item, judge).await;
                progress(done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1, total);
                outcome
            }
        })
        .buffered(gate.concurrency.max(1) as usize)
        .collect()
        .await;
    let summary = summarise(&outcomes, gate);
    Ok(GateResult {
        id: new_record_id(),
        task: task.name.clone(),
        backend: backend.name.clone(),
        fingerprint: subject.fingerprint,
        node: subject.node,
        trigger: subject.trigger,
        started_ms,
        finished_ms: unix_millis(std::time::SystemTime::now()),
        summary,
    })
}

/// The request a golden item sends: its messages, the task's output cap, temperature 0.
pub(crate) fn item_request(task: &TaskConfig, item: &GoldenItem) -> ChatRequest {
    ChatRequest {
        messages: item.messages.clone().into(),
        max_tokens: task.max_output_tokens.or(Some(512)),
        temperature: Some(0.0),
        ..ChatRequest::default()
    }
}

async fn run_item(
    calls: &Calls,
    task: &TaskConfig,
    to: Destination,
    item: &GoldenItem,
    judge: &Judge,
) -> ItemOutcome {
    let answered = match calls.ask(Purpose::Gate, task, item_request(task, item), to).await {
        Ok(a) => a,
        Err(e) => {
            return ItemOutcome {
                passed: false,
                latency_ms: 0,
                cost: None,
                error: Some(e.to_string()),
                why: None,
            }
        }
    };
    let verdict = grade(calls, judge, &item.grader, item, &answered.text).await;
    outcome(&answered, verdict)
}

fn outcome(answered: &Answered, verdict: Result<Verdict, GateError>) -> ItemOutcome {
    let latency_ms = answered.latency.as_millis() as u64;
    match verdict {
        Ok(Verdict::Pass) => {
            ItemOutcome { passed: true, latency_ms, cost: answered.cost, error: None, why: None }
        }
        Ok(Verdict::Fail(why)) => {
            ItemOutcome { passed: false, latency_ms, cost: answered.cost, error: None, why: Some(why) }
        }
        Ok(Verdict::NeedsJudge) | Err(_) => ItemOutcome {
            passed: false,
            latency_ms,
            cost: answered.cost,
            error: Some(verdict.err().map_or_else(|| "judge: no score".to_string(), |e| e.to_string())),
            why: None,
        },
    }
}

/// Grade an answer; a `judge` grader asks the judge backend.
pub(crate) async fn grade(
    calls: &Calls,
    judge: &Judge,
    grader: &Grader,
    item: &GoldenItem,
    answer: &str,
) -> Result<Verdict, GateError> {
    match grader.grade(answer, item.reference.as_deref()) {
        Verdict::NeedsJudge => {
            let Grader::Judge { rubric, min_score } = grader else {
                unreachable!("only judge needs a judge")
            };
            let score = judge.score(calls, rubric, item, answer).await?;
            Ok(if score >= *min_score {
                Verdict::Pass
            } else {
                Verdict::Fail(format!("judge scored {score} (needs {min_score})"))
            })
        }
        verdict => Ok(verdict),
    }
}

/// The task's judge backend, checked against the task's policy filter.
pub(crate) struct Judge {
    /// The task whose answers it grades (its policy applies to the judge's calls).
    task: TaskConfig,
    /// The judge backend's name; `None` when the task names none.
    backend: Option<String>,
}

impl Judge {
    /// The task's judge; an error when it names one the task's policy refuses.
    pub fn new(config: &Arc<Config>, task: &TaskConfig) -> Result<Judge, GateError> {
        let Some(name) = task.gate.as_ref().and_then(|g| g.judge.clone()) else {
            return Ok(Judge { task: task.clone(), backend: None });
        };
        let backend = config.backend(&name).ok_or_else(|| GateError::NoBackend(name.clone()))?;
        if let Some(why) = crate::policy::refuses(config, task, backend) {
            return Err(GateError::JudgeRefused { judge: name, task: task.name.clone(), why });
        }
        if !has_node(config, &name) {
            return Err(GateError::JudgeNoNode(name));
        }
        Ok(Judge { task: task.clone(), backend: Some(name) })
    }

    /// Ask the judge for a 0–10 score of `answer` under `rubric`.
    pub(crate) async fn score(
        &self,
        calls: &Calls,
        rubric: &str,
        item: &GoldenItem,
        answer: &str,
    ) -> Result<f64, GateError> {
        let backend = self.backend.as_ref().ok_or_else(|| GateError::NoJudge(self.task.name.clone()))?;
        let question =
            item.messages.iter().rev().find(|m| m.role == Role::User).map_or("", |m| m.content.as_str());
        let mut prompt = format!("Rubric:\n{rubric}\n\nQuestion:\n{question}\n\n");
        if let Some(reference) = &item.reference {
            prompt.push_str(&format!("Reference answer:\n{reference}\n\n"));
        }
        prompt.push_str(&format!("Answer to grade:\n{answer}\n\nReply with the score only."));
        let request = ChatRequest {
            messages: vec![
                Message::new(
                    Role::System,
                    "You grade answers against a rubric. Reply with one number from 0 (fails the rubric) to 10 (meets it fully).",
                ),
                Message::new(Role::User, prompt),
            ].into(),
            max_tokens: Some(8),
            temperature: Some(0.0),
            ..ChatRequest::default()
        };
        let snap = calls.snapshot.load_full();
        let to = calls.to_backend(&snap, backend).ok_or_else(|| GateError::JudgeNoNode(backend.clone()))?;
        let reply = calls
            .ask(Purpose::Judge, &self.task, request, to)
            .await
            .map_err(|source| GateError::JudgeCall { source })?;
        parse_judge_score(&reply.text).ok_or(GateError::JudgeScore(reply.text))
    }
}
