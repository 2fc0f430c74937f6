//! Why a `/metrics` page could not be read into a sample (see [`crate::fleet::engines`]): the
//! text could not be read at some line, or it is not the page it should be.

use crate::canonical::Engine;

/// A failure to read a Prometheus exposition page.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// The lines could not be read; `line` is the 1-based line of the page read last.
    #[error("cannot read exposition at line {line}: {source}")]
    Read { line: usize, source: std::io::Error },
    /// The page holds no `vllm:` series: not a vLLM node's page.
    #[error("no vllm: series in the page")]
    NotVllm,
    /// The page holds no series of this engine (see `fleet::engines::Engine::prefixes`).
    #[error("no {0} series in the page")]
    NotEngine(Engine),
    /// The page has no `spillway_nvml_up`: not the NVML agent's page.
    #[error("no spillway_nvml_up in the page")]
    NotAgent,
}

#[cfg(test)]
mod tests {
    use std::error::Error;

    use super::*;

    #[test]
    fn messages_say_where_and_what() {
        let read = ParseError::Read { line: 7, source: std::io::Error::other("cut short") };
        assert_eq!(read.to_string(), "cannot read exposition at line 7: cut short");
        assert_eq!(read.source().map(|s| s.to_string()).as_deref(), Some("cut short"));
        assert_eq!(ParseError::NotVllm.to_string(), "no vllm: series in the page");
        assert_eq!(ParseError::NotAgent.to_string(), "no spillway_nvml_up in the page");
        assert!(ParseError::NotVllm.source().is_none());
        assert_eq!(ParseError::NotEngine(Engine::Sglang).to_string(), "no sglang series in the page");
    }
}
