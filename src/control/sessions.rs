//! Where each session was served last, and how often it moved. A session (an affinity key from
//! a session header or `prompt_cache_key`: a coding agent's conversation) keeps its node while
//! the node has room; when it spills to a hosted provider, comes home to the fleet, or changes
//! provider, both prompt caches go cold and content one provider bound to itself cannot
//! follow. Each such move is counted (`spillway_session_moves_total`) and each session can be
//! looked up (`GET /admin/sessions`). Kept per replica and bounded; fed by the bookkeeping loop
//! off the request path. Pure: the caller holds the lock and says the time.

use std::collections::HashMap;

use serde::Serialize;

use crate::canonical::{Affinity, AffinitySource};
use crate::config::BackendKind;

/// Sessions remembered at most; the least recently seen tenth goes when a new one needs room.
pub const CAPACITY: usize = 10_000;

/// Where a session's request was served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    Fleet,
    Hosted(BackendKind),
}

impl Place {
    pub fn of(kind: BackendKind) -> Place {
        if kind.is_local() {
            Place::Fleet
        } else {
            Place::Hosted(kind)
        }
    }
}

/// A session's move from one request to the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Move {
    /// From the fleet to a hosted provider.
    ToHosted,
    /// From a hosted provider back to the fleet.
    Home,
    /// From one kind of hosted provider to another.
    BetweenProviders,
}

impl Move {
    pub const ALL: [Move; 3] = [Move::ToHosted, Move::Home, Move::BetweenProviders];

    pub fn as_str(self) -> &'static str {
        match self {
            Move::ToHosted => "to_hosted",
            Move::Home => "home",
            Move::BetweenProviders => "between_providers",
        }
    }

    /// The move from `from` to `to`, if it is one.
    fn between(from: Place, to: Place) -> Option<Move> {
        match (from, to) {
            (Place::Fleet, Place::Hosted(_)) => Some(Move::ToHosted),
            (Place::Hosted(_), Place::Fleet) => Some(Move::Home),
            (Place::Hosted(a), Place::Hosted(b)) if a != b => Some(Move::BetweenProviders),
            _ => None,
        }
    }
}

/// One session as `GET /admin/sessions` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Session {
    /// The affinity key's hash (16 hex digits, as the logs and the ledger's rows carry it).
    pub session: String,
    /// What the key was read from (`session_header`, `prompt_cache_key`).
    pub source: &'static str,
    pub task: String,
    /// `fleet` or `hosted`, where its last request was served.
    pub place: &'static str,
    /// The backend that served its last request.
    pub backend: String,
    pub requests: u64,
    pub to_hosted: u32,
    pub home: u32,
    pub between_providers: u32,
    /// Unix seconds.
    pub first_seen: u64,
    pub last_seen: u64,
    #[serde(skip)]
    at: Option<Place>,
}

/// The sessions seen lately.
#[derive(Debug, Default)]
pub struct SessionBook {
    sessions: HashMap<u64, Session>,
}

/// Whether requests keyed by `source` belong to one session.
fn is_session(source: AffinitySource) -> bool {
    matches!(source, AffinitySource::SessionHeader | AffinitySource::PromptCacheKey)
}

impl SessionBook {
    /// Note that `backend` (of `kind`) served a request of `task` keyed by `affinity` at
    /// `now`; the move it made, if any. Requests not keyed by a session are not kept.
    pub fn record(
        &mut self,
        affinity: Affinity,
        task: &str,
        backend: &str,
        kind: BackendKind,
        now: u64,
    ) -> Option<Move> {
        if !is_session(affinity.source) {
            return None;
        }
        if !self.sessions.contains_key(&affinity.hash) && self.sessions.len() >= CAPACITY {
            self.forget_oldest(CAPACITY / 10);
        }
        let session = self.sessions.entry(affinity.hash).or_insert_with(|| Session {
            session: affinity.hex(),
            source: affinity.source.as_str(),
            task: String::new(),
            place: "",
            backend: String::new(),
            requests: 0,
            to_hosted: 0,
            home: 0,
            between_providers: 0,
            first_seen: now,
            last_seen: now,
            at: None,
        });
        let place = Place::of(kind);
        let moved = session.at.and_then(|from| Move::between(from, place));
        match moved {
            Some(Move::ToHosted) => session.to_hosted += 1,
            Some(Move::Home) => session.home += 1,
            Some(Move::BetweenProviders) => session.between_providers += 1,
            None => {}
        }
        session.at = Some(place);
        session.place = if place == Place::Fleet { "fleet" } else { "hosted" };
        session.task = task.to_string();
        session.backend = backend.to_string();
        session.requests += 1;
        session.last_seen = now;
        moved
    }

    /// The `limit` sessions seen most recently, latest first.
    pub fn recent(&self, limit: usize) -> Vec<Session> {
        let mut all: Vec<&Session> = self.sessions.values().collect();
        all.sort_by(|a, b| b.last_seen.cmp(&a.last_seen).then_with(|| a.session.cmp(&b.session)));
        all.into_iter().take(limit).cloned().collect()
    }

    /// The session whose hash is `hex`.
    pub fn get(&self, hex: &str) -> Option<Session> {
        let hash = u64::from_str_radix(hex, 16).ok()?;
        self.sessions.get(&hash).cloned()
    }

    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    fn forget_oldest(&mut self, n: usize) {
        let mut seen: Vec<(u64, u64)> = self.sessions.iter().map(|(k, s)| (s.last_seen, *k)).collect();
        seen.sort_unstable();
        for (_, key) in seen.into_iter().take(n.max(1)) {
            self.sessions.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(hash: u64) -> Affinity {
        Affinity { source: AffinitySource::SessionHeader, hash }
    }

    #[test]
    fn a_session_that_spills_and_comes_home_counts_each_move() {
        let mut book = SessionBook::default();
        let s = session(0xabc);
        assert_eq!(book.record(s, "coder", "fleet", BackendKind::Local, 10), None, "its first request");
        assert_eq!(book.record(s, "coder", "fleet", BackendKind::Local, 11), None, "it stayed");
        assert_eq!(book.record(s, "coder", "claude", BackendKind::Anthropic, 12), Some(Move::ToHosted));
        assert_eq!(book.record(s, "coder", "claude", BackendKind::Anthropic, 13), None);
        assert_eq!(book.record(s, "coder", "gpt", BackendKind::Openai, 14), Some(Move::BetweenProviders));
        assert_eq!(book.record(s, "coder", "fleet", BackendKind::Local, 15), Some(Move::Home));
        let seen = book.get(&s.hex()).unwrap();
        assert_eq!((seen.requests, seen.to_hosted, seen.home, seen.between_providers), (6, 1, 1, 1));
        assert_eq!((seen.place, seen.backend.as_str()), ("fleet", "fleet"));
        assert_eq!((seen.first_seen, seen.last_seen), (10, 15));
        assert_eq!(seen.source, "session_header");
    }

    #[test]
    fn only_session_keys_are_kept_and_the_book_stays_bounded() {
        let mut book = SessionBook::default();
        let project = Affinity { source: AffinitySource::Project, hash: 1 };
        book.record(project, "t", "fleet", BackendKind::Local, 1);
        book.record(project, "t", "claude", BackendKind::Anthropic, 2);
        assert!(book.is_empty(), "a project is not a session");
        for hash in 0..CAPACITY as u64 {
            book.record(session(hash), "t", "fleet", BackendKind::Local, hash);
        }
        assert_eq!(book.len(), CAPACITY);
        book.record(session(u64::MAX), "t", "fleet", BackendKind::Local, u64::MAX);
        assert_eq!(book.len(), CAPACITY - CAPACITY / 10 + 1, "the oldest tenth went");
        assert!(book.get(&session(0).hex()).is_none(), "the least recently seen went first");
        assert!(book.get(&session(CAPACITY as u64 - 1).hex()).is_some());
        assert_eq!(book.recent(2)[0].session, session(u64::MAX).hex(), "latest first");
    }
}
