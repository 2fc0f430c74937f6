//! The roots the router's HTTPS clients trust: the built-in ones, then `tls.ca_file`'s bundle
//! (read when the config loaded) and `SSL_CERT_FILE`'s, as OpenSSL-based tools honour it. A
//! bundle that cannot be used is logged by name and the client goes on with the rest.

use crate::config::tls::certificates;
use crate::config::TlsConfig;

/// `builder` trusting the extra roots.
pub fn trusting(mut builder: reqwest::ClientBuilder, tls: &TlsConfig) -> reqwest::ClientBuilder {
    let mut bundles: Vec<(String, Vec<u8>)> = Vec::new();
    if let (Some(pem), Some(file)) = (&tls.ca_pem, &tls.ca_file) {
        bundles.push((format!("tls.ca_file ({})", file.display()), pem.clone()));
    }
    if let Some(path) = std::env::var_os("SSL_CERT_FILE").filter(|p| !p.is_empty()) {
        let from = format!("SSL_CERT_FILE ({})", path.to_string_lossy());
        match std::fs::read(&path) {
            Ok(pem) => bundles.push((from, pem)),
            Err(e) => {
                tracing::warn!(bundle = %from, error = %e, "a CA bundle was not read; the built-in roots are trusted without it")
            }
        }
    }
    for (from, pem) in bundles {
        let ders = match certificates(&pem) {
            Ok(ders) => ders,
            Err(why) => {
                tracing::warn!(bundle = %from, %why, "a CA bundle was not used");
                continue;
            }
        };
        for der in ders {
            match reqwest::Certificate::from_der(&der) {
                Ok(cert) => builder = builder.add_root_certificate(cert),
                Err(e) => tracing::warn!(bundle = %from, error = %e, "a CA certificate was not used"),
            }
        }
    }
    builder
}
