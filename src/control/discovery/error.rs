//! Why a Kubernetes client could not be built, with the `kube` (or URI) error kept as the
//! source. Watch failures are not here: the watcher retries them and they are only logged.

/// A failure to build the client discovery watches through.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// Neither a kubeconfig nor the in-cluster service account gave a working client.
    #[error("kubernetes client from environment: {source}")]
    FromEnv { source: kube::Error },
    #[error("kubernetes API URL {url:?}: {source}")]
    Url { url: String, source: http::uri::InvalidUri },
    #[error("kubernetes client for {url}: {source}")]
    Client { url: String, source: kube::Error },
}

#[cfg(test)]
mod tests {
    use std::error::Error;

    use super::*;

    #[test]
    fn messages_name_the_url_and_keep_the_source() {
        let bad = "not a url".parse::<http::Uri>().unwrap_err();
        let url = DiscoveryError::Url { url: "not a url".into(), source: bad };
        assert!(url.to_string().starts_with("kubernetes API URL \"not a url\": "), "{url}");
        assert!(url.source().is_some());

        let env = DiscoveryError::FromEnv { source: kube::Error::LinesCodecMaxLineLengthExceeded };
        assert!(env.to_string().starts_with("kubernetes client from environment: "), "{env}");
        assert!(env.source().is_some());
    }
}
