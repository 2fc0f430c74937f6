//! What a request carried that only one provider can take (tools that run inside it, content
//! it signed or encrypted): it goes to that provider as written, is left out for any other
//! backend, and the answer says what was left out. A task with `unsupported_tools: refuse`
//! refuses such tools when one of its backends' providers cannot take them. The doors that
//! carry such content (Messages for Anthropic's own, Responses for OpenAI's own) say what the
//! request holds; the pipeline enforces it against the backends' providers.

use super::error::{ApiError, ErrorCode};
use super::headers::AnswerHeaders;
pub use crate::adapter::provider::Owned;
use crate::config::{TaskConfig, UnsupportedTools};
use crate::snapshot::Snapshot;

/// Names the tools left out for the serving backend.
pub const TOOLS_HEADER: &str = "x-spillway-dropped-tools";
/// Names the content of the request left out for the serving backend (`thinking`,
/// `reasoning`).
pub const CONTENT_HEADER: &str = "x-spillway-dropped-content";

/// What a request holds that only the provider that owns it can take.
#[derive(Debug, Clone)]
pub struct OwnersOnly {
    pub owned: Owned,
    /// The tools, each with the path a refusal names and its type.
    pub tools: Vec<(String, String)>,
    /// The content, as the header names it, when the request holds some.
    pub content: Option<&'static str>,
}

impl OwnersOnly {
    /// For a task with `unsupported_tools: refuse`, the refusal of the first tool, when a
    /// backend of the task cannot take it.
    pub(super) fn refusal(&self, snap: &Snapshot, task: &TaskConfig) -> Option<ApiError> {
        let (at, kind) = self.tools.first()?;
        let takes = |name: &String| {
            snap.backend_id(name).is_some_and(|id| snap.backends[id].provider.takes(self.owned))
        };
        if task.unsupported_tools != UnsupportedTools::Refuse || task.backends.iter().all(takes) {
            return None;
        }
        let why = format!(
            "tool type `{kind}` runs inside {}, and task `{}` has backends that cannot run it (`unsupported_tools: refuse`)",
            self.owned.owner(),
            task.name
        );
        Some(ApiError::new(ErrorCode::InvalidValue, why).param(format!("{at}.type")))
    }

    /// The headers naming what `backend`, which served the answer, did not get.
    pub(super) fn add_headers(&self, snap: &Snapshot, backend: &str, headers: &mut AnswerHeaders) {
        let took = snap.backend_id(backend).is_some_and(|id| snap.backends[id].provider.takes(self.owned));
        if took {
            return;
        }
        if let Some(content) = self.content {
            headers.push((CONTENT_HEADER, content.to_string()));
        }
        let tools: Vec<&str> = self.tools.iter().map(|(_, kind)| kind.as_str()).collect();
        if !tools.is_empty() {
            headers.push((TOOLS_HEADER, tools.join(", ")));
        }
    }
}
