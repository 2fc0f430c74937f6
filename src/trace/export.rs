//! How spans leave: the OTLP/HTTP exporter posts through reqwest (the client the router
//! already links, with its rustls), on a one-thread runtime of its own. The SDK's batch
//! processor exports from its own thread, outside any runtime; a runtime apart means an
//! export never needs the router's (so a flush at shutdown, or a provider dropped on a
//! runtime thread, cannot wait on the thread it blocks).

use std::time::Duration;

use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};

/// The exporter's HTTP client.
pub struct Client {
    http: reqwest::Client,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Client {
    pub fn new(timeout: Duration) -> std::io::Result<Client> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("otlp-export")
            .enable_all()
            .build()?;
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(Duration::from_secs(2))
            .build()
            .map_err(std::io::Error::other)?;
        Ok(Client { http, runtime: Some(runtime) })
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("otlp export client")
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // Dropped wherever the exporter is (possibly on a runtime thread): never block there.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

#[async_trait::async_trait]
impl HttpClient for Client {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let runtime = self.runtime.as_ref().ok_or("the export runtime is gone")?;
        let request = reqwest::Request::try_from(request)?;
        let http = self.http.clone();
        let answer = runtime.spawn(async move {
            let response = http.execute(request).await?;
            let status = response.status();
            let headers = response.headers().clone();
            let body = response.bytes().await?;
            Ok::<_, reqwest::Error>((status, headers, body))
        });
        let (status, headers, body) = answer.await??;
        let mut response = Response::builder().status(status).body(body)?;
        *response.headers_mut() = headers;
        Ok(response)
    }
}
