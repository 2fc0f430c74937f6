//! Agent sessions on the virtual clock: the closed-loop part of the workload. A session sends
//! its turns one after another; each turn resends the preamble and the whole history (every
//! earlier prompt and answer) plus what the turn adds, and goes `think` after the last one's
//! answer ended. So when a turn comes depends on the run: the engine says when each turn ended
//! (`answered`), and the next one is due then.
//!
//! What a turn holds does not depend on the run: each session draws its turns' sizes from its
//! own seeded generator, so every strategy sends the same sessions, only at other times. It
//! must not look at any strategy or model state beyond the answers' ends.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rand::rngs::StdRng;
use rand::SeedableRng;

use super::{draw, Arrival};
use crate::config::Priority;
use crate::simulate::clock::{from_secs, Micros};
use crate::simulate::scenario::{Scenario, SessionStream};

/// Which turn of which session an arrival is, and what it shares with other sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Turn {
    /// Index into `scenario.sessions`.
    pub stream: usize,
    pub session: u32,
    pub turn: u32,
    /// The preamble's key and tokens: the stream's shared one when it has one, else the
    /// session's own context (as the router reads a request's leading system messages).
    pub preamble: (u64, u32),
    /// Whether the preamble is the stream's, shared by all its sessions.
    pub shared: bool,
}

/// One session's state between turns.
#[derive(Debug, Clone)]
struct Session {
    rng: StdRng,
    turn: u32,
    /// Tokens of its history: the last turn's prompt and answer (0 before its first turn).
    history: u32,
}

impl Session {
    /// Session `k` of the stream seeded `seed`, before its first turn.
    fn new(seed: u64, k: u32) -> Session {
        let rng = StdRng::seed_from_u64(seed ^ u64::from(k).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        Session { rng, turn: 0, history: 0 }
    }
}

/// One `sessions:` stream.
struct Stream {
    spec: SessionStream,
    task: usize,
    priority: Priority,
    /// Its sessions started so far.
    sessions: Vec<Session>,
    project_base: usize,
    /// The hash of each session's name (`<task>/s<stream>.<session>`), its affinity key.
    affinity: Vec<u64>,
    shared_key: u64,
    seed: u64,
}

/// Every session stream's turns, each due when its session's last answer (and think time) is
/// over.
pub struct Sessions {
    streams: Vec<Stream>,
    /// (due, stream, session), earliest first.
    due: BinaryHeap<Reverse<(Micros, usize, u32)>>,
    /// No turn is sent after this.
    end: Micros,
}

impl Sessions {
    /// The scenario's session streams; their projects are numbered from `project_base`.
    pub fn new(s: &Scenario, mut project_base: usize) -> Sessions {
        let mut due = BinaryHeap::new();
        let streams = s
            .sessions
            .iter()
            .enumerate()
            .map(|(i, spec)| {
                let task = s.config.tasks.iter().position(|t| t.name == spec.task).expect("validated");
                let name = |k: u32| format!("{}/s{i}.{k}", spec.task);
                let affinity =
                    (0..spec.count).map(|k| xxhash_rust::xxh3::xxh3_64(name(k).as_bytes())).collect();
                let at = from_secs(spec.at.0);
                let seed = s.seed ^ 0x5e55_1045_u64.wrapping_mul(i as u64 + 1);
                let first = spec.concurrency.unwrap_or(spec.count).min(spec.count);
                (0..first).for_each(|k| due.push(Reverse((at, i, k))));
                let stream = Stream {
                    spec: spec.clone(),
                    task,
                    priority: spec.priority.unwrap_or(s.config.tasks[task].priority),
                    sessions: (0..first).map(|k| Session::new(seed, k)).collect(),
                    project_base,
                    affinity,
                    shared_key: xxhash_rust::xxh3::xxh3_64(format!("{}/s{i}/preamble", spec.task).as_bytes()),
                    seed,
                };
                project_base += spec.count as usize;
                stream
            })
            .collect();
        Sessions { streams, due, end: from_secs(s.duration.as_secs_f64()) }
    }

    /// Projects (sessions) across the streams.
    pub fn projects(s: &Scenario) -> usize {
        s.sessions.iter().map(|w| w.count as usize).sum()
    }

    /// Every session's affinity key (those started or not).
    pub(crate) fn affinity_keys(&self) -> impl Iterator<Item = u64> + '_ {
        self.streams.iter().flat_map(|s| s.affinity.iter().copied())
    }

    /// When the next turn is due.
    pub fn peek_at(&self) -> Option<Micros> {
        self.due.peek().map(|Reverse((at, _, _))| *at).filter(|&at| at < self.end)
    }

    /// The next due turn.
    pub fn next(&mut self) -> Option<Arrival> {
        self.peek_at()?;
        let Reverse((at, i, k)) = self.due.pop()?;
        let stream = &mut self.streams[i];
        let spec = &stream.spec;
        let session = &mut stream.sessions[k as usize];
        let opening = if session.turn == 0 { spec.shared_tokens + spec.own_tokens } else { 0 };
        let added = draw(&spec.turn_tokens, &mut session.rng);
        let output = draw(&spec.output_tokens, &mut session.rng);
        let affinity = stream.affinity[k as usize];
        let shared = spec.shared_tokens > 0;
        let preamble =
            if shared { (stream.shared_key, spec.shared_tokens) } else { (affinity, spec.own_tokens) };
        Some(Arrival {
            at_us: at,
            task: stream.task,
            prompt_tokens: session.history + opening + added,
            output_tokens: output,
            affinity,
            project_id: stream.project_base + k as usize,
            prefix_tokens: session.history,
            priority: stream.priority,
            client_error: false,
            session: Some(Turn { stream: i, session: k, turn: session.turn, preamble, shared }),
        })
    }

    /// A turn was answered (or failed) at `now`, `output` tokens long: the session's next turn
    /// is due after its think time, or, if that was its last, the stream's next session starts.
    pub fn answered(&mut self, a: &Arrival, output: u32, now: Micros) {
        let Some(turn) = a.session else { return };
        let stream = &mut self.streams[turn.stream];
        let session = &mut stream.sessions[turn.session as usize];
        session.history = a.prompt_tokens + output;
        session.turn += 1;
        if session.turn < stream.spec.turns {
            self.due.push(Reverse((now + from_secs(stream.spec.think.0), turn.stream, turn.session)));
            return;
        }
        let next = stream.sessions.len() as u32;
        if next < stream.spec.count {
            stream.sessions.push(Session::new(stream.seed, next));
            self.due.push(Reverse((now, turn.stream, next)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario() -> Scenario {
        let text = r#"
duration: 10m
seed: 3
strategies: [spillway]
router:
  backends:
    - {name: local, kind: vllm, endpoints: [http://10.0.0.1:8000], model: m}
  tasks:
    - {name: agent, backends: [local], slo: {ttft_ms: 1000}}
sessions:
  - {task: agent, count: 3, concurrency: 2, turns: 2, shared_tokens: 300, own_tokens: 40, turn_tokens: {mean: 20, sd: 3, min: 10, max: 30}, output_tokens: {mean: 50, sd: 10, min: 1, max: 100}, think: 2s, at: 1s}
"#;
        crate::simulate::parse("t", text).unwrap()
    }

    #[test]
    fn a_turn_comes_after_the_last_answer_and_its_think_time_resending_the_history() {
        let s = scenario();
        let mut sessions = Sessions::new(&s, 10);
        // Two sessions at once, at 1 s.
        let (a, b) = (sessions.next().unwrap(), sessions.next().unwrap());
        assert_eq!((a.at_us, b.at_us), (1_000_000, 1_000_000));
        assert_eq!(sessions.peek_at(), None, "nothing more until an answer");
        let turn = a.session.unwrap();
        assert_eq!((turn.turn, turn.preamble.1, turn.shared), (0, 300, true));
        assert_eq!(b.session.unwrap().preamble, turn.preamble, "the preamble is shared");
        assert!(a.prompt_tokens >= 300 + 40 + 10 && a.prefix_tokens == 0);
        assert_eq!((a.project_id, b.project_id), (10, 11));
        // The answer ends at 5 s: the next turn is due 2 s later, with the history in it.
        sessions.answered(&a, 30, 5_000_000);
        let next = sessions.next().unwrap();
        assert_eq!((next.at_us, next.session.unwrap().turn), (7_000_000, 1));
        assert_eq!(next.prefix_tokens, a.prompt_tokens + 30);
        assert!(next.prompt_tokens > next.prefix_tokens);
        // Its last turn answered, the third session starts at once.
        sessions.answered(&next, 30, 8_000_000);
        let third = sessions.next().unwrap();
        assert_eq!((third.at_us, third.project_id, third.session.unwrap().turn), (8_000_000, 12, 0));
    }

    #[test]
    fn a_session_sends_the_same_turns_however_fast_it_is_answered() {
        let s = scenario();
        let sizes = |answer_after: u64| {
            let mut sessions = Sessions::new(&s, 0);
            let mut seen = Vec::new();
            while let Some(a) = sessions.next() {
                seen.push((a.project_id, a.prompt_tokens, a.output_tokens));
                sessions.answered(&a, a.output_tokens, a.at_us + answer_after);
            }
            seen.sort();
            seen
        };
        let fast = sizes(100_000);
        assert_eq!(fast.len(), 6, "3 sessions × 2 turns");
        assert_eq!(fast, sizes(9_000_000));
    }
}
