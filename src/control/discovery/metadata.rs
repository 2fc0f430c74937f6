//! The pinned facts a vLLM pod announces in its annotations: weights digest, quantisation,
//! serving-engine version and the GPU's hourly price. Planning compares the first three with
//! the pool's `pin` and costing uses the price; a missing or blank annotation is unknown, and
//! a price that does not parse as a non-negative decimal is dropped with a warning, never a
//! panic.

use std::collections::BTreeMap;
use std::str::FromStr;

use rust_decimal::Decimal;

/// Weights digest, e.g. `sha256:…` (compared with `pin.weights`).
pub(crate) const WEIGHTS_DIGEST: &str = "spillway.dev/weights-digest";
/// Quantisation, e.g. `fp8` (compared with `pin.quantization`).
pub(crate) const QUANTIZATION: &str = "spillway.dev/quantization";
/// Serving engine version, e.g. `0.6.3` (compared with `pin.engine`).
pub(crate) const ENGINE_VERSION: &str = "spillway.dev/engine-version";
/// The node's GPU price per hour in US dollars, a decimal such as `2.49`.
pub(crate) const GPU_HOURLY_USD: &str = "spillway.dev/gpu-hourly-usd";

/// What a node announces about itself. `None`: not announced (or, for the price, invalid).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeMetadata {
    pub weights_digest: Option<String>,
    pub quantization: Option<String>,
    pub engine_version: Option<String>,
    pub gpu_hourly_usd: Option<Decimal>,
}

impl NodeMetadata {
    /// Read the `spillway.dev/*` annotations of the object named `who` (for the warning).
    pub fn from_annotations(annotations: Option<&BTreeMap<String, String>>, who: &str) -> NodeMetadata {
        let Some(a) = annotations else { return NodeMetadata::default() };
        let text = |key: &str| a.get(key).map(|v| v.trim()).filter(|v| !v.is_empty()).map(str::to_string);
        let gpu_hourly_usd = text(GPU_HOURLY_USD).and_then(|raw| match parse_price(&raw) {
            Some(p) => Some(p),
            None => {
                tracing::warn!(pod = who, value = %raw, "ignoring {GPU_HOURLY_USD}: not a non-negative decimal");
                None
            }
        });
        NodeMetadata {
            weights_digest: text(WEIGHTS_DIGEST),
            quantization: text(QUANTIZATION),
            engine_version: text(ENGINE_VERSION),
            gpu_hourly_usd,
        }
    }
}

/// A plain non-negative decimal: `2.49`, `3`, `.5`; no sign, exponent or currency symbol.
fn parse_price(raw: &str) -> Option<Decimal> {
    let plain =
        raw.bytes().all(|b| b.is_ascii_digit() || b == b'.') && raw.bytes().any(|b| b.is_ascii_digit());
    plain.then(|| Decimal::from_str(raw).ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn reads_all_four() {
        let a = annotations(&[
            (WEIGHTS_DIGEST, "sha256:abc"),
            (QUANTIZATION, "fp8"),
            (ENGINE_VERSION, "0.6.3"),
            (GPU_HOURLY_USD, "2.49"),
            ("other", "x"),
        ]);
        let m = NodeMetadata::from_annotations(Some(&a), "p");
        assert_eq!(
            m,
            NodeMetadata {
                weights_digest: Some("sha256:abc".into()),
                quantization: Some("fp8".into()),
                engine_version: Some("0.6.3".into()),
                gpu_hourly_usd: Some(Decimal::new(249, 2)),
            }
        );
    }

    #[test]
    fn missing_or_blank_is_none() {
        assert_eq!(NodeMetadata::from_annotations(None, "p"), NodeMetadata::default());
        let a = annotations(&[(WEIGHTS_DIGEST, "  "), (QUANTIZATION, " fp8 ")]);
        let m = NodeMetadata::from_annotations(Some(&a), "p");
        assert_eq!(m.weights_digest, None);
        assert_eq!(m.quantization.as_deref(), Some("fp8"));
    }

    #[test]
    fn bad_price_is_ignored_not_fatal() {
        for bad in
            ["cheap", "-1.5", "+2", "$2", "1e1", ".", "1.2.3", "2,49", "99999999999999999999999999999999"]
        {
            let a = annotations(&[(GPU_HOURLY_USD, bad), (ENGINE_VERSION, "0.6.3")]);
            let m = NodeMetadata::from_annotations(Some(&a), "p");
            assert_eq!(m.gpu_hourly_usd, None, "{bad}");
            assert_eq!(m.engine_version.as_deref(), Some("0.6.3"));
        }
        let a = annotations(&[(GPU_HOURLY_USD, "0")]);
        assert_eq!(NodeMetadata::from_annotations(Some(&a), "p").gpu_hourly_usd, Some(Decimal::ZERO));
    }
}
