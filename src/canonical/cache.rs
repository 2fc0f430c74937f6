//! Where prompt-cache breakpoints go for a provider that caches only where it is told to
//! (Anthropic's `cache_control`). Dispatch sets one on a request for such a backend (from the
//! backend's `prompt_cache`, unless the task turns placement off); the adapter places the
//! marks. It holds no placing logic: that is the adapter's, next to the wire format.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The most breakpoints Anthropic takes in one request.
pub const MAX_BREAKPOINTS: u8 = 4;

/// Which parts of a request get a breakpoint. A client's own marks always win: where a
/// request has any, none is added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CachePlacement {
    /// Mark the end of the system prompt.
    #[serde(default = "yes")]
    pub system: bool,
    /// Mark the last tool definition (which caches every tool).
    #[serde(default = "yes")]
    pub tools: bool,
    /// Mark the last content block of each of the last this many user turns (0 to 4): the
    /// newest caches the whole conversation, the one before it is what the next request
    /// reads back even after a long run of tool calls.
    #[serde(default = "two")]
    #[schemars(range(max = 4))]
    pub last_turns: u8,
}

impl Default for CachePlacement {
    fn default() -> Self {
        CachePlacement { system: true, tools: true, last_turns: 2 }
    }
}

impl CachePlacement {
    /// Places nothing at all.
    pub(crate) fn is_off(&self) -> bool {
        !self.system && !self.tools && self.last_turns == 0
    }
}

fn yes() -> bool {
    true
}

fn two() -> u8 {
    2
}
