//! Typed ids of what the config names: a backend is its position in `backends`, a task its
//! position in `tasks`. Names are resolved to ids once (the snapshot keeps a backend's id by
//! name), and from then on plans, spills and eligibility carry ids that cannot be mistaken
//! for another list's index or for a node's. An id is a position in one config, so state that
//! outlives a reload (quota windows, PID availability, prices, gate results) stays keyed by
//! name, the identity across configs.

use std::ops::Index;

use super::{BackendConfig, TaskConfig};

/// A backend: its position in the config's `backends` (and in a snapshot's `backends`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct BackendId(u32);

/// A task: its position in the config's `tasks`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct TaskId(u32);

impl BackendId {
    pub fn new(index: usize) -> BackendId {
        BackendId(u32::try_from(index).expect("fewer than 2^32 backends"))
    }

    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl TaskId {
    pub fn new(index: usize) -> TaskId {
        TaskId(u32::try_from(index).expect("fewer than 2^32 tasks"))
    }

    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl Index<BackendId> for Vec<BackendConfig> {
    type Output = BackendConfig;
    fn index(&self, id: BackendId) -> &BackendConfig {
        &self[id.index()]
    }
}

impl Index<TaskId> for Vec<TaskConfig> {
    type Output = TaskConfig;
    fn index(&self, id: TaskId) -> &TaskConfig {
        &self[id.index()]
    }
}
