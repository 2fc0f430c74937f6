//! The async driver around `EngineCore`: the simulated GPU's step loop.
//!
//! It owns the core, takes submissions from a channel, runs one step at a time, sleeps for
//! the step's modelled duration, then hands each produced token (deterministic text) to its
//! request's channel and tells the node's engine page (`pages/`) what happened, with the
//! timings each engine's series need. A request whose reader has gone away is aborted,
//! freeing its KV blocks, as vLLM does on client disconnect. All modelling lives in
//! `engine.rs` and every metric name in `pages/`; this file only moves tokens and time.

use super::engine::{EngineConfig, EngineCore, SeqSpec};
use super::generate::{GenEvent, Usage};
use super::pages::{Admission, Finished, Load, Page, Step, Token};
use super::text::TextGen;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// One request handed to the engine.
pub struct Submission {
    pub spec: SeqSpec,
    pub text: TextGen,
    pub tx: mpsc::UnboundedSender<GenEvent>,
    pub arrival: Instant,
}

/// The request side's handle on the running engine.
pub struct EngineHandle {
    tx: mpsc::UnboundedSender<Submission>,
    next_id: AtomicU64,
    probe: EngineCore,
}

impl EngineHandle {
    /// Start the engine loop on the current tokio runtime.
    pub fn spawn(cfg: EngineConfig, page: Arc<dyn Page>) -> (EngineHandle, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(run(EngineCore::new(cfg.clone()), page, rx));
        (EngineHandle { tx, next_id: AtomicU64::new(1), probe: EngineCore::new(cfg) }, task)
    }

    pub fn config(&self) -> &EngineConfig {
        self.probe.config()
    }

    /// Whether a request of this size could ever be scheduled.
    pub fn fits(&self, prompt_tokens: u32, output_tokens: u32) -> bool {
        self.probe.fits_ever(prompt_tokens, output_tokens)
    }

    /// Queue a request; its events arrive on the returned receiver.
    pub fn submit(
        &self,
        prompt_tokens: u32,
        block_hashes: Vec<u64>,
        output_tokens: u32,
        limited: bool,
        text: TextGen,
    ) -> mpsc::UnboundedReceiver<GenEvent> {
        let (tx, rx) = mpsc::unbounded_channel();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let spec = SeqSpec { id, prompt_tokens, block_hashes, output_tokens, limited };
        let _ = self.tx.send(Submission { spec, text, tx, arrival: Instant::now() });
        rx
    }
}

struct Live {
    sub: Submission,
    cached: u32,
    generated: u32,
    queue_secs: f64,
    admitted: Option<Instant>,
    first_token: Option<Instant>,
    last_token: Option<Instant>,
}

fn secs(from: Instant, to: Instant) -> f64 {
    to.duration_since(from).as_secs_f64()
}

fn publish(core: &EngineCore, page: &dyn Page) {
    page.load(&Load {
        running: core.num_running(),
        waiting: core.num_waiting(),
        used_blocks: core.used_blocks(),
        kv_usage: core.kv_usage(),
    });
}

fn add(core: &mut EngineCore, s: Submission, live: &mut HashMap<u64, Live>, page: &dyn Page) {
    page.arrived(s.spec.prompt_tokens, s.spec.output_tokens);
    core.submit(s.spec.clone());
    let l = Live {
        sub: s,
        cached: 0,
        generated: 0,
        queue_secs: 0.0,
        admitted: None,
        first_token: None,
        last_token: None,
    };
    live.insert(l.sub.spec.id, l);
}

async fn run(mut core: EngineCore, page: Arc<dyn Page>, mut rx: mpsc::UnboundedReceiver<Submission>) {
    let page = page.as_ref();
    let mut live: HashMap<u64, Live> = HashMap::new();
    loop {
        if core.is_idle() {
            publish(&core, page);
            match rx.recv().await {
                Some(s) => add(&mut core, s, &mut live, page),
                None => return,
            }
        }
        while let Ok(s) = rx.try_recv() {
            add(&mut core, s, &mut live, page);
        }
        let out = core.step();
        let started = Instant::now();
        let mut prefill_tokens = 0u64;
        for a in &out.admitted {
            prefill_tokens += a.prompt_tokens.saturating_sub(a.cached_tokens) as u64;
            let Some(l) = live.get_mut(&a.id) else { continue };
            if !a.readmitted {
                l.cached = a.cached_tokens;
                l.admitted = Some(started);
                l.queue_secs = secs(l.sub.arrival, started);
                page.admitted(&Admission {
                    prompt_tokens: a.prompt_tokens,
                    cached_tokens: a.cached_tokens,
                    queue_secs: l.queue_secs,
                });
            }
        }
        page.preempted(out.preempted.len());
        if !out.tokens.is_empty() {
            page.stepped(&Step {
                secs: out.duration.as_secs_f64(),
                scheduled: out.tokens.len(),
                prefilling: out.admitted.len(),
                prefill_tokens,
            });
        }
        publish(&core, page);
        if out.duration.is_zero() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        } else {
            tokio::time::sleep(out.duration).await;
        }
        let now = Instant::now();
        let mut gone = Vec::new();
        for id in &out.tokens {
            let Some(l) = live.get_mut(id) else { continue };
            let text = l.sub.text.next_token();
            let fin = out.finished.iter().find(|(f, _)| f == id).map(|(_, r)| *r);
            let first = *l.first_token.get_or_insert(now);
            page.token(&match l.last_token {
                None => Token::First {
                    ttft: secs(l.sub.arrival, now),
                    prefill_secs: l.admitted.map_or(0.0, |a| secs(a, now)),
                    prompt_tokens: l.sub.spec.prompt_tokens,
                    cached_tokens: l.cached,
                },
                Some(t) => Token::Next { gap: secs(t, now) },
            });
            l.last_token = Some(now);
            l.generated += 1;
            let ev = match fin {
                None => GenEvent::Token(text),
                Some(reason) => {
                    let usage = Usage {
                        prompt_tokens: l.sub.spec.prompt_tokens,
                        cached_tokens: l.cached,
                        cache_write_tokens: 0,
                        completion_tokens: l.generated,
                    };
                    page.finished(&Finished {
                        reason,
                        prompt_tokens: l.sub.spec.prompt_tokens,
                        cached_tokens: l.cached,
                        generated: l.generated,
                        e2e: secs(l.sub.arrival, now),
                        queue_secs: l.queue_secs,
                        ttft: secs(l.sub.arrival, first),
                        decode_secs: secs(first, now),
                    });
                    GenEvent::Final(text, usage, reason)
                }
            };
            if l.sub.tx.send(ev).is_err() && fin.is_none() {
                gone.push(*id);
            }
        }
        for (id, _) in &out.finished {
            live.remove(id);
        }
        for id in gone {
            if live.remove(&id).is_some() {
                core.abort(id);
                page.aborted();
            }
        }
        publish(&core, page);
    }
}
