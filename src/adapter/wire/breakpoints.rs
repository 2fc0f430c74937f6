//! Where prompt-cache breakpoints go, decided once for every wire that takes them (Claude's
//! `cache_control` marks, Converse's `cachePoint` blocks): in this order of priority and at most
//! [`MAX_BREAKPOINTS`] in all, the last tool definition, the end of the system prompt and the
//! last block of each of the last N user turns, as the task's [`CachePlacement`] asks.
//!
//! Pure: it reads what a body has room to mark and answers with positions; each wire applies
//! the plan to its own typed body, and decides for itself when it places none at all (a client
//! that marked its request itself, a model that caches nothing).

use crate::canonical::{CachePlacement, MAX_BREAKPOINTS};

/// Where the marks go.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Breakpoints {
    /// After the last tool definition (which caches every tool).
    pub tools: bool,
    /// At the end of the system prompt.
    pub system: bool,
    /// After the last block of these turns (their positions in the conversation), newest first.
    pub turns: Vec<usize>,
}

impl Breakpoints {
    /// How many marks the plan places.
    pub(crate) fn count(&self) -> u8 {
        u8::from(self.tools) + u8::from(self.system) + self.turns.len() as u8
    }
}

/// The breakpoints `placement` asks for in a body that has a tool to mark (`tools`), a system
/// prompt to mark (`system`) and these user turns that can take a mark (`user_turns`, their
/// positions, newest first). The tools and the system prompt come first; the newest turns
/// take what is left of [`MAX_BREAKPOINTS`].
pub(crate) fn plan(
    placement: &CachePlacement,
    tools: bool,
    system: bool,
    user_turns: impl Iterator<Item = usize>,
) -> Breakpoints {
    let (tools, system) = (placement.tools && tools, placement.system && system);
    let left = MAX_BREAKPOINTS - u8::from(tools) - u8::from(system);
    let turns = user_turns.take(usize::from(placement.last_turns.min(left))).collect();
    Breakpoints { tools, system, turns }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: CachePlacement = CachePlacement { system: true, tools: true, last_turns: 2 };

    #[test]
    fn tools_and_system_first_then_the_newest_turns() {
        let marks = plan(&ALL, true, true, [9, 5, 1].into_iter());
        assert_eq!(marks, Breakpoints { tools: true, system: true, turns: vec![9, 5] });
        assert_eq!(marks.count(), 4);
    }

    #[test]
    fn never_more_than_four_and_the_oldest_turns_give_way() {
        let many = CachePlacement { last_turns: 4, ..ALL };
        let marks = plan(&many, true, true, [7, 5, 3, 1].into_iter());
        assert_eq!((marks.count(), marks.turns), (4, vec![7, 5]));
        let turns_only = CachePlacement { system: false, tools: false, last_turns: 4 };
        let marks = plan(&turns_only, true, true, [7, 5, 3, 1, 0].into_iter());
        assert_eq!((marks.tools, marks.system, marks.turns), (false, false, vec![7, 5, 3, 1]));
    }

    #[test]
    fn what_is_not_there_takes_no_mark_and_leaves_room() {
        let many = CachePlacement { last_turns: 4, ..ALL };
        let marks = plan(&many, false, true, [4, 2, 0].into_iter());
        assert_eq!(marks, Breakpoints { tools: false, system: true, turns: vec![4, 2, 0] });
        assert_eq!(plan(&ALL, false, false, std::iter::empty()), Breakpoints::default());
        let off = CachePlacement { system: false, tools: false, last_turns: 0 };
        assert_eq!(plan(&off, true, true, [1].into_iter()).count(), 0);
    }
}
