//! Where traces go, read from the standard OpenTelemetry variables: tracing is off unless an
//! OTLP endpoint is set (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, used as written, or
//! `OTEL_EXPORTER_OTLP_ENDPOINT`, with `/v1/traces` appended), and off whatever is set when
//! `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`. Only OTLP over HTTP/protobuf is
//! spoken; asking for another protocol or exporter is an error naming the variable.
//!
//! Pure: the variables come through a lookup function, so tests pass their own. The export
//! headers (`OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_EXPORTER_OTLP_TRACES_HEADERS`, often a
//! collector's token) are read by the exporter itself and never held here, so no `Debug` of
//! the settings can print them.

/// How this router exports traces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The full URL spans are posted to (`…/v1/traces`); `None`: tracing is off.
    pub endpoint: Option<String>,
    /// `service.name` of every span (`OTEL_SERVICE_NAME`, else `spillway`).
    pub service_name: String,
}

const DEFAULT_SERVICE: &str = "spillway";

/// Off.
impl Default for Settings {
    fn default() -> Settings {
        Settings::off()
    }
}

impl Settings {
    /// No tracing: no exporter, no spans, no `traceparent` sent upstream.
    pub fn off() -> Settings {
        Settings { endpoint: None, service_name: DEFAULT_SERVICE.into() }
    }

    /// Export to `endpoint` (the full traces URL) as `spillway`.
    pub fn to(endpoint: impl Into<String>) -> Settings {
        Settings { endpoint: Some(endpoint.into()), service_name: DEFAULT_SERVICE.into() }
    }

    /// The settings the variables (as `get` reads them) describe.
    pub(crate) fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Settings, String> {
        let var = |name: &str| get(name).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        let service_name = var("OTEL_SERVICE_NAME").unwrap_or_else(|| DEFAULT_SERVICE.into());
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return Ok(Settings { endpoint: None, service_name });
        }
        match var("OTEL_TRACES_EXPORTER").map(|v| v.to_ascii_lowercase()).as_deref() {
            None | Some("otlp") => {}
            Some("none") => return Ok(Settings { endpoint: None, service_name }),
            Some(other) => {
                return Err(format!("OTEL_TRACES_EXPORTER `{other}`: only `otlp` (or `none`) is supported"))
            }
        }
        for name in ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"] {
            if let Some(protocol) = var(name) {
                if protocol != "http/protobuf" {
                    return Err(format!("{name} `{protocol}`: only `http/protobuf` is supported"));
                }
                break;
            }
        }
        let endpoint = match var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
            Some(url) => Some(("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", url)),
            None => var("OTEL_EXPORTER_OTLP_ENDPOINT").map(|base| {
                ("OTEL_EXPORTER_OTLP_ENDPOINT", format!("{}/v1/traces", base.trim_end_matches('/')))
            }),
        };
        let endpoint = endpoint
            .map(|(name, url)| match url.parse::<http::Uri>() {
                Ok(uri) if matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some() => {
                    Ok(url)
                }
                _ => Err(format!("{name}: `{}` is not an http:// or https:// URL", shown(&url))),
            })
            .transpose()?;
        Ok(Settings { endpoint, service_name })
    }

    pub fn is_on(&self) -> bool {
        self.endpoint.is_some()
    }

    /// The endpoint for a log line: scheme, host, port and path, never a user or a query.
    pub(crate) fn shown_endpoint(&self) -> Option<String> {
        self.endpoint.as_deref().map(shown)
    }
}

/// A URL without what may hold a secret (user info, query).
fn shown(url: &str) -> String {
    match url.parse::<http::Uri>() {
        Ok(uri) => {
            let host = uri.host().unwrap_or("");
            let port = uri.port_u16().map(|p| format!(":{p}")).unwrap_or_default();
            format!("{}://{host}{port}{}", uri.scheme_str().unwrap_or(""), uri.path())
        }
        Err(_) => "(unparsable)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(vars: &[(&str, &str)]) -> Result<Settings, String> {
        Settings::from_env(|name| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string()))
    }

    #[test]
    fn off_without_an_endpoint_and_when_disabled() {
        assert_eq!(from(&[]).unwrap(), Settings::off());
        assert_eq!(from(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "  ")]).unwrap(), Settings::off());
        let disabled = [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"), ("OTEL_SDK_DISABLED", "TRUE")];
        assert!(!from(&disabled).unwrap().is_on());
        let none = [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"), ("OTEL_TRACES_EXPORTER", "none")];
        assert!(!from(&none).unwrap().is_on());
    }

    #[test]
    fn the_base_endpoint_gets_the_traces_path_and_the_signal_one_is_used_as_written() {
        let base = from(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")]).unwrap();
        assert_eq!(base.endpoint.as_deref(), Some("http://collector:4318/v1/traces"));
        let both = from(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://traces.example/ingest"),
            ("OTEL_SERVICE_NAME", "router-eu"),
        ])
        .unwrap();
        assert_eq!(both.endpoint.as_deref(), Some("https://traces.example/ingest"));
        assert_eq!(both.service_name, "router-eu");
        assert_eq!(base.service_name, "spillway");
    }

    #[test]
    fn another_protocol_exporter_or_a_bad_url_is_refused_by_name() {
        let grpc = from(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ]);
        assert!(grpc.unwrap_err().starts_with("OTEL_EXPORTER_OTLP_PROTOCOL `grpc`"));
        // The signal's own protocol wins over the general one.
        let ok = from(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"),
        ]);
        assert!(ok.unwrap().is_on());
        let zipkin = from(&[("OTEL_TRACES_EXPORTER", "zipkin")]);
        assert!(zipkin.unwrap_err().starts_with("OTEL_TRACES_EXPORTER"));
        let bad = from(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "collector:4318")]).unwrap_err();
        assert!(bad.starts_with("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), "{bad}");
    }

    #[test]
    fn the_shown_endpoint_drops_user_and_query() {
        let s = Settings::to("https://user:pw@traces.example:443/v1/traces?token=abc");
        assert_eq!(s.shown_endpoint().as_deref(), Some("https://traces.example:443/v1/traces"));
    }
}
