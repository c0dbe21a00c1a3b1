//! `zcp serve`'s HTTPS/WebDAV face (`[http]`), against real clients and hostile requests:
//! clients.rs (curl, davix and gfal2 over TLS), tokens.rs (identity, path, activities, time,
//! signature, and the CLI's and config's errors), write.rs (PUT, MKCOL, DELETE), hostile.rs
//! (paths out of the export, symlinks, part files, floods, trickling connections, framing).
//! The helpers here start a server with a face and speak to it.

mod clients;
mod hostile;
mod tokens;
mod write;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::serve_config::Site;
use crate::util::*;

/// A site whose config has an `[http]` face, and its server.
pub struct Face {
    pub site: Site,
    pub srv: ServerProc,
    pub addr: SocketAddr,
    /// The test CA's certificate (TLS faces); `pki/cadir` holds it hashed, for davix.
    pub cert: Option<PathBuf>,
}

impl Face {
    /// Starts a server with `[http]`, over TLS when `tls` (needs openssl to make the
    /// certificate: `None` when it is missing, after saying so).
    pub fn start(tls: bool) -> Option<Face> {
        let site = Site::new();
        let mut http = "\n[http]\nlisten = \"127.0.0.1:0\"\n".to_string();
        let cert = if tls {
            if !on_path("openssl") {
                skip("openssl is not installed (apt-get install openssl)");
                return None;
            }
            let (cert, key) = make_pki(&site.env.path("pki"));
            http.push_str(&format!(
                "cert = \"{}\"\nkey = \"{}\"\n",
                cert.display(),
                key.display()
            ));
            Some(site.env.path("pki/ca.pem"))
        } else {
            None
        };
        site.write(&format!("{}{http}", site.text(true)));
        let srv = site.serve();
        let scheme = if tls { "https" } else { "http" };
        let needle = format!("zcp: {scheme} at {scheme}://");
        assert!(srv.wait_log(&needle, 10), "{}", srv.log());
        let log = srv.log();
        let addr = log
            .split(&needle)
            .nth(1)
            .unwrap()
            .split('/')
            .next()
            .unwrap();
        let addr = addr.parse().unwrap();
        Some(Face {
            site,
            srv,
            addr,
            cert,
        })
    }

    /// `zcp token` for `identity` with `extra` flags; the token.
    pub fn token(&self, identity: &str, extra: &[&str]) -> String {
        let mut c = zcp();
        c.args(["token", "--config"])
            .arg(&self.site.config)
            .args(["--identity", identity])
            .args(extra);
        let o = run(c, 10);
        assert!(o.status.success(), "zcp token: {}", both(&o));
        text(&o.stdout).trim().to_string()
    }

    /// curl over TLS: `args` then the URL of `path`; the status and the body.
    pub fn curl(&self, token: &str, path: &str, args: &[&str]) -> (u16, Vec<u8>) {
        let out = self.site.env.path("curl.out");
        let mut c = Command::new("curl");
        c.args(["-sS", "--path-as-is", "--max-time", "20", "-o"])
            .arg(&out)
            .args(["-w", "%{http_code}"])
            .arg("--cacert")
            .arg(self.cert.as_ref().expect("a TLS face"))
            .arg("-H")
            .arg(format!("Authorization: Bearer {token}"))
            .args(args)
            .arg(format!("https://{}{path}", self.addr));
        let o = run(c, 30);
        let code = text(&o.stdout).trim().parse().unwrap_or(0);
        (code, std::fs::read(&out).unwrap_or_default())
    }

    /// One request over plain HTTP: the status, the head and the body.
    pub fn raw(&self, request: &str) -> (u16, String, Vec<u8>) {
        raw(self.addr, request.as_bytes())
    }

    /// `METHOD path` with `token` (and `Connection: close`).
    pub fn req(
        &self,
        method: &str,
        path: &str,
        token: &str,
        extra: &str,
    ) -> (u16, String, Vec<u8>) {
        self.raw(&format!(
            "{method} {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n{extra}Connection: close\r\n\r\n"
        ))
    }
}

/// A test CA and a server certificate for 127.0.0.1 signed by it, made with openssl in
/// `dir` (which gets `ca.pem` and `cadir/`, hashed as OpenSSL's CA paths want): the server's
/// certificate and key.
pub fn make_pki(dir: &std::path::Path) -> (PathBuf, PathBuf) {
    std::fs::create_dir_all(dir.join("cadir")).unwrap();
    let openssl = |args: &[&str]| {
        let mut c = Command::new("openssl");
        c.current_dir(dir).args(args);
        let o = run(c, 30);
        assert!(o.status.success(), "openssl {args:?}: {}", both(&o));
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    openssl(
        &[
            &["req", "-x509"][..],
            &ec,
            &[
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-days",
                "2",
                "-subj",
                "/CN=zcp-test-ca",
            ],
        ]
        .concat(),
    );
    openssl(
        &[
            &["req"][..],
            &ec,
            &[
                "-keyout",
                "srv.key",
                "-out",
                "srv.csr",
                "-subj",
                "/CN=localhost",
            ],
        ]
        .concat(),
    );
    std::fs::write(
        dir.join("ext"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "srv.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-out",
        "srv.pem",
        "-extfile",
        "ext",
    ]);
    std::fs::copy(dir.join("ca.pem"), dir.join("cadir/ca.pem")).unwrap();
    openssl(&["rehash", "cadir"]);
    (dir.join("srv.pem"), dir.join("srv.key"))
}

/// Writes `request`, reads the answer to the end: status, head, body.
pub fn raw(addr: SocketAddr, request: &[u8]) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(request).unwrap();
    let mut all = Vec::new();
    let _ = s.read_to_end(&mut all);
    let end = all
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(all.len(), |i| i + 4);
    let head = String::from_utf8_lossy(&all[..end]).into_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, head, all[end..].to_vec())
}

/// `PUT path` with `body` and `extra` headers over plain HTTP.
pub fn put(face: &Face, path: &str, token: &str, body: &[u8], extra: &str) -> (u16, String) {
    let mut req = format!(
        "PUT {path} HTTP/1.1\r\nAuthorization: Bearer {token}\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body);
    let (code, head, b) = raw(face.addr, &req);
    (code, format!("{head}{}", text(&b)))
}

/// Adler-32 of `data` as WLCG writes it (8 hex digits), computed here by its definition so the
/// server's own sums are checked against something independent of them.
pub fn adler32_hex(data: &[u8]) -> String {
    let (mut a, mut b) = (1u32, 0u32);
    for &x in data {
        a = (a + u32::from(x)) % 65521;
        b = (b + a) % 65521;
    }
    format!("{:08x}", (b << 16) | a)
}
