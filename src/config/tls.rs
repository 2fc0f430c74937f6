//! The `tls:` section: certificate authorities the router trusts for its upstreams beside the
//! built-in roots (a private endpoint, an egress proxy that terminates TLS, a test server). The
//! bundle is read when the config loads, so a missing or broken file is a config problem naming
//! `tls.ca_file`, not a failed call later.

use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::Deserialize;

use super::Problem;

/// TLS toward upstreams (hosted APIs, `https://` pool nodes and their metrics).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// A PEM bundle of CA certificates trusted beside the built-in roots, relative to the config
    /// file's folder. `SSL_CERT_FILE`, when set, adds its bundle too.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// The bundle's PEM text, read when the config loads.
    #[serde(skip)]
    #[schemars(skip)]
    pub ca_pem: Option<Vec<u8>>,
}

/// The certificates a PEM text holds, as DER; none when it holds no certificate.
pub fn certificates(pem: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let mut out = Vec::new();
    for block in pem::parse_many(pem).map_err(|e| format!("not a PEM bundle: {e}"))? {
        if block.tag() == "CERTIFICATE" {
            out.push(block.into_contents());
        }
    }
    if out.is_empty() {
        return Err("holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into());
    }
    Ok(out)
}

/// Read `tls.ca_file` (relative to `base`, the config file's folder).
pub fn prepare(config: &mut super::Config, base: Option<&Path>) -> Vec<Problem> {
    let Some(file) = &config.tls.ca_file else { return Vec::new() };
    let path = match base {
        Some(base) if file.is_relative() => base.join(file),
        _ => file.clone(),
    };
    let read = std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()));
    match read.and_then(|pem| certificates(&pem).map(|_| pem)) {
        Ok(pem) => {
            config.tls.ca_file = Some(path);
            config.tls.ca_pem = Some(pem);
            Vec::new()
        }
        Err(why) => vec![Problem::new("tls.ca_file", why)],
    }
}
