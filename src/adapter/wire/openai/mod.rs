//! OpenAI's wire, as spoken by vLLM, OpenAI and any OpenAI-compatible endpoint: Chat
//! Completions (`chat`), and the operations only it serves: legacy completions, embeddings,
//! and Responses requests pinned to OpenAI for its stored state.

pub mod chat;
pub mod completions;
pub mod embeddings;
pub mod error;
mod relay;
pub mod request;
pub mod responses;
pub mod stream;
