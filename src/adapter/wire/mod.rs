//! One folder per wire format: the body an upstream of that format is sent, typed and borrowed
//! from the canonical request and the call; the events it answers with, read into typed
//! structs; and how its errors are classified. Providers (`super::provider`) choose a wire and
//! address and sign its calls; nothing here knows who runs the upstream.

pub mod anthropic;
pub mod converse;
pub mod gemini;
pub mod openai;
