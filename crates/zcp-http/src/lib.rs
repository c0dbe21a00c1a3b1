//! `zcp serve`'s HTTPS/WebDAV face: the server's exports, to the identities the config names,
//! for clients that speak HTTP (curl, davix, gfal2, rclone) rather than zcp's own protocol.
//!
//! Served so far: `GET` (with one `Range`; a file's bytes by `sendfile` on plain HTTP, by
//! rustls records on TLS), `HEAD`, `OPTIONS`, `PROPFIND` (depth 0 and 1), `POST` of a
//! macaroon request (a narrower token), `PUT` (checked against the client's digests),
//! `MKCOL` and `DELETE`. Every request carries a bearer token ([`token`]); its
//! identity's export permissions and the token's caveats must both allow the request.
//!
//! Bounds, after the monitor's: connections waiting for a request head are kept in a
//! [`slots::Slots`] table (evicted least advanced first, per source fairly), a head must come
//! whole within [`HttpLimits::head_timeout`], each is at most [`request::MAX_HEAD`] bytes and
//! [`request::MAX_HEADERS`] headers, and threads are capped ([`HttpLimits::max_threads`]).
//! Every name from the network is resolved beneath its export's root descriptor without
//! following a symlink (`zcp_engine::fs::Root`), so no request reads outside an export.

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub mod dav;
pub mod digest;
pub mod request;
pub mod slots;
pub mod token;

mod conn;
mod files;
mod handle;
mod write;

use zcp_engine::sync::Locked;
use zcp_session::{AccessSnapshot, PendingLimits};

pub use files::iso_duration;
pub use handle::{Served, now_unix};
/// A TLS server configuration ([`tls_config`]).
pub use rustls::ServerConfig as TlsConfig;

/// Why the HTTP face could not start.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The certificate or key could not be used.
    #[error("http: {0}")]
    Tls(String),
    /// The address could not be bound.
    #[error("http: cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// Where the face's requests are reported (the server's log). Every text in a [`Served`]
/// came from the network: escape it before it reaches a terminal or a log.
pub trait HttpReporter: Send + Sync {
    /// One request answered.
    fn served(&self, s: &Served);
}

/// The face's bounds.
#[derive(Debug, Clone, Copy)]
pub struct HttpLimits {
    /// Connections waiting for a request head at once (a newcomer evicts one).
    pub max_pending: usize,
    /// Of them, from one source.
    pub max_pending_per_source: usize,
    /// The time a connection has for its whole head (also how long an idle keep-alive
    /// connection is kept).
    pub head_timeout: Duration,
    /// Threads at once (connections being served, and those waiting); past it, 503.
    pub max_threads: usize,
    /// Requests being served at once for one source (an IPv4 address or an IPv6 /64; those
    /// still waiting for a head are bounded by the pending table); past it, 503.
    pub max_requests_per_source: usize,
    /// `PUT`s being received at once for one identity; past it, 503.
    pub max_puts_per_identity: usize,
}

impl Default for HttpLimits {
    fn default() -> HttpLimits {
        HttpLimits {
            max_pending: 64,
            max_pending_per_source: 16,
            head_timeout: Duration::from_secs(10),
            max_threads: 256,
            max_requests_per_source: 32,
            max_puts_per_identity: 16,
        }
    }
}

/// Loads a PEM certificate chain and private key into a TLS 1.3/1.2 server configuration
/// (ALPN `http/1.1`). Each error names the file to fix.
pub fn tls_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, HttpError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect::<Result<_, _>>())
        .map_err(|e| {
            HttpError::Tls(format!(
                "cannot read the certificate {}: {e} (give a PEM file)",
                cert.display()
            ))
        })?;
    if certs.is_empty() {
        return Err(HttpError::Tls(format!(
            "{} holds no PEM certificate",
            cert.display()
        )));
    }
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        HttpError::Tls(format!(
            "cannot read the private key {}: {e} (give a PEM file)",
            key.display()
        ))
    })?;
    let mut cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| HttpError::Tls(e.to_string()))?
    .with_no_client_auth()
    .with_single_cert(certs, key_der)
    .map_err(|e| {
        HttpError::Tls(format!(
            "the key {} does not fit the certificate {}: {e}",
            key.display(),
            cert.display()
        ))
    })?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// What a request is checked against: the exports and identities in force, taken anew for
/// each request (so a reload applies to the next one).
pub type Access = Arc<dyn Fn() -> AccessSnapshot + Send + Sync>;

/// A bound HTTP face.
pub struct HttpServer {
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    limits: HttpLimits,
}

impl std::fmt::Debug for HttpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpServer")
            .field("listener", &self.listener)
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

impl HttpServer {
    /// Binds `addr`; `tls` from [`tls_config`], or `None` for plain HTTP.
    pub fn bind(
        addr: SocketAddr,
        tls: Option<Arc<rustls::ServerConfig>>,
        limits: HttpLimits,
    ) -> Result<HttpServer, HttpError> {
        let listener =
            TcpListener::bind(addr).map_err(|source| HttpError::Bind { addr, source })?;
        Ok(HttpServer {
            listener,
            tls,
            limits,
        })
    }

    /// The address bound (port 0 becomes the kernel's choice).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// Whether it speaks TLS.
    pub fn tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Serves from a thread of its own for as long as the process runs.
    pub fn spawn(self, access: Access, reporter: Arc<dyn HttpReporter>) -> std::io::Result<()> {
        std::thread::Builder::new()
            .name("zcp-http".into())
            .spawn(move || self.accept_loop(&access, &reporter))?;
        Ok(())
    }

    fn accept_loop(&self, access: &Access, reporter: &Arc<dyn HttpReporter>) {
        let threads = slots::Counts::<()>::default();
        let per_source = slots::Counts::default();
        let puts = slots::Counts::default();
        let slots = Arc::new(Mutex::new(slots::Slots::new(PendingLimits {
            max: self.limits.max_pending,
            per_source: self.limits.max_pending_per_source,
            timeout: self.limits.head_timeout,
        })));
        loop {
            let (stream, peer) = match self.listener.accept() {
                Ok(s) => s,
                // Out of descriptors, or a connection reset before it was accepted: wait a
                // little rather than spin.
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            };
            let Some(taken) = threads.take((), self.limits.max_threads) else {
                handle::busy(stream, self.tls.is_some());
                continue;
            };

            let Some(id) = slots.locked().admit(&stream, peer) else {
                continue;
            };
            let ctx = handle::Ctx {
                access: access.clone(),
                reporter: reporter.clone(),
                slots: slots.clone(),
                tls: self.tls.clone(),
                peer,
                head_timeout: self.limits.head_timeout,
                per_source: per_source.clone(),
                max_per_source: self.limits.max_requests_per_source,
                puts: puts.clone(),
                max_puts: self.limits.max_puts_per_identity,
            };
            // A thread that cannot start drops the connection with the closure; its table
            // entry goes when a later connection finds it past its time.
            let _ = std::thread::Builder::new()
                .name("zcp-http-conn".into())
                .spawn(move || {
                    let _taken = taken;
                    ctx.serve(stream, id);
                });
        }
    }
}
