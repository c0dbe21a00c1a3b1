//! `zcp serve`'s HTTPS/WebDAV face (the config's `[http]`): bound and started beside the
//! server, on the same exports and identities (a reload applies to its next request), with
//! each request in the server's log.

use std::sync::Arc;

use zcp_http::{HttpLimits, HttpReporter, HttpServer, Served};
use zcp_report::serve_config::HttpSettings;
use zcp_session::Server;
use zcp_wire::escape_text;

/// Loads the certificate and key, if any; the error names the config keys to fix.
pub(crate) fn check(s: &HttpSettings) -> anyhow::Result<Option<Arc<zcp_http::TlsConfig>>> {
    match &s.tls {
        Some((cert, key)) => zcp_http::tls_config(cert, key)
            .map(Some)
            .map_err(|e| anyhow::Error::new(super::Usage(format!("[http] cert/key: {e}")))),
        None => Ok(None),
    }
}

/// Loads the certificate and binds the address; each error names the config key to fix.
pub(crate) fn bind(s: &HttpSettings) -> anyhow::Result<HttpServer> {
    let tls = check(s)?;
    HttpServer::bind(s.listen, tls, HttpLimits::default()).map_err(|e| {
        anyhow::Error::new(super::Usage(format!(
            "[http] listen: {e} (give a free address and port)"
        )))
    })
}

/// The line `--check-config` prints.
pub(crate) fn describe(s: &HttpSettings) -> String {
    match &s.tls {
        Some((cert, key)) => format!(
            "http: https://{}/ (WebDAV; certificate {}, key {})",
            s.listen,
            cert.display(),
            key.display()
        ),
        None => format!(
            "http: http://{}/ (WebDAV, plain HTTP: tokens and data travel in clear)",
            s.listen
        ),
    }
}

/// Starts serving on its own threads.
pub(crate) fn start(face: HttpServer, server: &Server) -> anyhow::Result<()> {
    let (addr, tls) = (face.local_addr(), face.tls());
    let view = server.access();
    face.spawn(Arc::new(move || view.snapshot()), Arc::new(Log))?;
    if tls {
        // rustls seals each record in user space; kernel TLS would let file pages go out by
        // sendfile, but rustls does not hand its keys to the kernel yet: say what runs.
        let ktls = match zcp_engine::sys::ktls_available() {
            Ok(()) => "kernel TLS is available but not used".to_string(),
            Err(why) => why,
        };
        eprintln!(
            "zcp: https at https://{addr}/ (WebDAV; bearer tokens from `zcp token`; TLS in user \
             space: {ktls})"
        );
    } else {
        eprintln!(
            "zcp: http at http://{addr}/ (WebDAV, plain HTTP: tokens and data travel in clear)"
        );
    }
    Ok(())
}

/// Each request as one log line.
struct Log;

impl HttpReporter for Log {
    fn served(&self, s: &Served) {
        let why = s
            .why
            .as_deref()
            .map(|w| format!(": {}", escape_text(w)))
            .unwrap_or_default();
        let line = format!(
            "http{} {} {} {} {} -> {} ({} bytes in {:.3} s){why}",
            if s.tls { "s" } else { "" },
            s.peer,
            escape_text(s.identity.as_deref().unwrap_or("-")),
            escape_text(&s.method),
            escape_text(&s.path),
            s.status,
            s.bytes,
            s.elapsed.as_secs_f64()
        );
        if s.status >= 500 {
            tracing::warn!("{line}");
        } else {
            tracing::info!("{line}");
        }
    }
}
