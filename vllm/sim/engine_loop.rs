//! The async driver around `EngineCore`: the simulated GPU's step loop.
//!
//! It owns the core, takes submissions from a channel, runs one step at a time, sleeps for
//! the step's modelled duration, then hands each produced token (deterministic text) to its
//! request's channel and records vLLM's metrics. A request whose reader has gone away is
//! aborted, freeing its KV blocks, as vLLM does on client disconnect. All modelling lives in
//! `engine.rs`; this file only moves tokens and time.

use super::engine::{EngineConfig, EngineCore, SeqSpec};
use super::generate::{GenEvent, Usage};
use super::metrics::SimMetrics;
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
    pub fn spawn(cfg: EngineConfig, metrics: Arc<SimMetrics>) -> (EngineHandle, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(run(EngineCore::new(cfg.clone()), metrics, rx));
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
    last_token: Option<Instant>,
}

fn publish(core: &EngineCore, m: &SimMetrics) {
    m.running.set(core.num_running() as i64);
    m.waiting.set(core.num_waiting() as i64);
    m.kv_usage.set(core.kv_usage());
}

fn add(core: &mut EngineCore, s: Submission, live: &mut HashMap<u64, Live>) {
    core.submit(s.spec.clone());
    live.insert(s.spec.id, Live { sub: s, cached: 0, generated: 0, last_token: None });
}

async fn run(mut core: EngineCore, m: Arc<SimMetrics>, mut rx: mpsc::UnboundedReceiver<Submission>) {
    let mut live: HashMap<u64, Live> = HashMap::new();
    loop {
        if core.is_idle() {
            publish(&core, &m);
            match rx.recv().await {
                Some(s) => add(&mut core, s, &mut live),
                None => return,
            }
        }
        while let Ok(s) = rx.try_recv() {
            add(&mut core, s, &mut live);
        }
        let out = core.step();
        let started = Instant::now();
        for a in &out.admitted {
            let Some(l) = live.get_mut(&a.id) else { continue };
            if !a.readmitted {
                l.cached = a.cached_tokens;
                m.queue_time.observe(started.duration_since(l.sub.arrival).as_secs_f64());
                m.prompt_tokens.inc_by(a.prompt_tokens as u64);
                m.prefix_queries.inc_by(a.prompt_tokens as u64);
                m.prefix_hits.inc_by(a.cached_tokens as u64);
            }
        }
        m.preemptions.inc_by(out.preempted.len() as u64);
        publish(&core, &m);
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
            m.generation_tokens.inc();
            match l.last_token {
                None => m.ttft.observe(now.duration_since(l.sub.arrival).as_secs_f64()),
                Some(t) => m.itl.observe(now.duration_since(t).as_secs_f64()),
            }
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
                    m.success.with_label_values(&[reason.as_str()]).inc();
                    m.e2e.observe(now.duration_since(l.sub.arrival).as_secs_f64());
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
                m.success.with_label_values(&["abort"]).inc();
            }
        }
        publish(&core, &m);
    }
}
