//! Small rules that the sections' checks share: what an environment variable name and an
//! upstream URL look like. Pure: reads strings only, never the environment or the network.

/// An environment variable name: letters, digits and `_`, not starting with a digit.
pub fn is_env_name(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// What is wrong with an upstream URL (it must be http or https), if anything.
pub fn bad_url(url: &str) -> Option<String> {
    match reqwest::Url::parse(url) {
        Ok(u) if u.scheme() == "http" || u.scheme() == "https" => None,
        Ok(u) => Some(format!("`{url}`: scheme must be http or https, not {}", u.scheme())),
        Err(e) => Some(format!("`{url}` is not a URL: {e}")),
    }
}

/// The problem of an env name at `path`, if it is not one.
pub fn env_name(path: &str, env: &str) -> Option<super::Problem> {
    (!is_env_name(env))
        .then(|| super::Problem::new(path, format!("`{env}` is not an environment variable name")))
}
