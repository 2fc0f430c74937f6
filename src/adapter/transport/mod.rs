//! How adapters reach upstreams: the HTTP clients (the lean HTTP/1.1 pool for the fleet's
//! plain-`http://` engines, reqwest over TLS for hosted APIs, spread over lanes), posting a
//! call and framing its answer, and the decoders of streamed answers (SSE, AWS event stream).
//! What a wire says is its adapter's business; how bytes get there and back is this folder's.

pub(crate) mod eventstream;
pub mod h1;
pub(in crate::adapter) mod http;
pub mod lanes;
pub(crate) mod sse;
pub mod tls;

use std::sync::Arc;

/// How adapters reach upstreams: the lean HTTP/1.1 client ([`h1`]) for plain-`http://` ones
/// (the fleet's engines), reqwest for TLS (hosted APIs). Cloning shares the pools.
#[derive(Clone)]
pub struct Transport {
    hosted: reqwest::Client,
    /// The hosted clients of the request path, spread so that no request waits unseen.
    lanes: lanes::Lanes,
    plain: Arc<h1::Pool>,
    /// Sent with every request: the calling span's W3C trace context (`traceparent`,
    /// `tracestate`), when tracing is on.
    trace: Vec<(::http::HeaderName, String)>,
}

impl Transport {
    /// One client for every hosted request (tests, side binaries): its own pools only.
    pub fn new(hosted: reqwest::Client, plain: h1::PoolConfig) -> Transport {
        let one = hosted.clone();
        let limits = lanes::LaneLimits { streams_per_connection: usize::MAX, max_connections: 1 };
        Transport::with_lanes(hosted, plain, lanes::Lanes::new(limits, move || one.clone()))
    }

    /// `hosted` for calls beside the request path, `lanes` for the request path's.
    pub fn with_lanes(hosted: reqwest::Client, plain: h1::PoolConfig, lanes: lanes::Lanes) -> Transport {
        Transport { hosted, lanes, plain: h1::Pool::new(plain), trace: Vec::new() }
    }

    /// The request path's hosted lanes (for the waiting metric).
    pub fn lanes(&self) -> &lanes::Lanes {
        &self.lanes
    }

    /// The hosted client (TLS, its pools and settings), for calls beside the request path.
    pub fn hosted(&self) -> &reqwest::Client {
        &self.hosted
    }

    /// The same pools, sending `trace` (a call's trace context headers) with every request.
    pub fn traced(&self, trace: Vec<(::http::HeaderName, String)>) -> Transport {
        Transport { trace, ..self.clone() }
    }
}

/// reqwest for TLS, and a plain-http pool with default settings.
impl From<reqwest::Client> for Transport {
    fn from(hosted: reqwest::Client) -> Transport {
        Transport::new(hosted, h1::PoolConfig::default())
    }
}
