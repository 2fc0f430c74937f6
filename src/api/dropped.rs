//! What a request carried that only one provider can take (tools that run inside it, content
//! it signed or encrypted): it goes to that provider as written, is left out for any other
//! backend, and the answer says what was left out. A task with `unsupported_tools: refuse`
//! refuses such tools when it has a backend of another kind. One rule for both doors that
//! carry them (Messages for Anthropic's own, Responses for OpenAI's own).

use axum::http::{HeaderMap, HeaderValue};

use super::error::{ApiError, ErrorCode};
use super::front::Doors;
use crate::config::{BackendKind, TaskConfig, UnsupportedTools};

/// Names the tools left out for the serving backend.
pub const TOOLS_HEADER: &str = "x-spillway-dropped-tools";
/// Names the content of the request left out for the serving backend (`thinking`,
/// `reasoning`).
pub const CONTENT_HEADER: &str = "x-spillway-dropped-content";

/// What a request holds that only `owner` can take.
pub struct OwnersOnly<'r> {
    pub owner: BackendKind,
    /// The tools, each with the path a refusal names and its type.
    pub tools: &'r [(String, String)],
    /// The content, as the header names it, when the request holds some.
    pub content: Option<&'static str>,
}

impl OwnersOnly<'_> {
    /// For a task with `unsupported_tools: refuse`, the refusal of the first tool, when a
    /// backend of the task is not the owner's kind.
    pub fn refusal(&self, state: &Doors, task: &TaskConfig) -> Option<ApiError> {
        let (at, kind) = self.tools.first()?;
        let snap = state.serving.snapshot.load();
        let owners = |name: &String| snap.config.backend(name).map(|b| b.kind()) == Some(self.owner);
        if task.unsupported_tools != UnsupportedTools::Refuse || task.backends.iter().all(owners) {
            return None;
        }
        let why = format!(
            "tool type `{kind}` runs inside {}, and task `{}` has backends that cannot run it (`unsupported_tools: refuse`)",
            crate::adapter::provider::of(self.owner).name(),
            task.name
        );
        Some(ApiError::new(ErrorCode::InvalidValue, why).param(format!("{at}.type")))
    }

    /// The headers naming what `backend`, which served the answer, did not get.
    pub fn say(&self, state: &Doors, backend: &str, headers: &mut HeaderMap) {
        if self.tools.is_empty() && self.content.is_none() {
            return;
        }
        let kind = state.serving.snapshot.load().config.backend(backend).map(|b| b.kind());
        if kind == Some(self.owner) {
            return;
        }
        if let Some(content) = self.content {
            headers.insert(CONTENT_HEADER, HeaderValue::from_static(content));
        }
        let tools: Vec<&str> = self.tools.iter().map(|(_, kind)| kind.as_str()).collect();
        if let (false, Ok(value)) = (tools.is_empty(), HeaderValue::from_str(&tools.join(", "))) {
            headers.insert(TOOLS_HEADER, value);
        }
    }
}
