//! The config file's `[http]` section: the HTTPS/WebDAV face's address and its TLS
//! certificate and key.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;

use super::Err;

/// `[http]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct HttpToml {
    listen: Spanned<String>,
    cert: Option<Spanned<PathBuf>>,
    key: Option<Spanned<PathBuf>>,
}

/// `[http]`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpSettings {
    /// Where the face listens.
    pub listen: SocketAddr,
    /// The PEM certificate chain and private key (absolute paths); `None`: plain HTTP.
    pub tls: Option<(PathBuf, PathBuf)>,
}

/// Checks `[http]`.
pub(super) fn http_keys(h: &Spanned<HttpToml>, err: Err<'_>) -> Result<HttpSettings, String> {
    let at = h.span().start;
    let h = h.get_ref();
    let listen = h.listen.get_ref().parse::<SocketAddr>().map_err(|_| {
        err(
            h.listen.span().start,
            "http.listen",
            format!(
                "'{}' is not an address and port (e.g. \"[::]:8443\")",
                h.listen.get_ref().escape_debug()
            ),
        )
    })?;
    let absolute = |p: &Spanned<PathBuf>, key: &str| -> Result<PathBuf, String> {
        if p.get_ref().is_absolute() {
            Ok(p.get_ref().clone())
        } else {
            Err(err(
                p.span().start,
                key,
                format!("'{}' is not an absolute path", p.get_ref().display()),
            ))
        }
    };
    let tls = match (&h.cert, &h.key) {
        (Some(c), Some(k)) => Some((absolute(c, "http.cert")?, absolute(k, "http.key")?)),
        (None, None) => None,
        _ => {
            return Err(err(
                at,
                "http",
                "give both cert and key (PEM files) for HTTPS, or neither for plain HTTP".into(),
            ));
        }
    };
    Ok(HttpSettings { listen, tls })
}
