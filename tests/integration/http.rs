//! `zcp serve`'s HTTPS/WebDAV face (`[http]`): curl over TLS for reads, ranges and listings;
//! bearer tokens from `zcp token` checked for their identity, path, activities, expiry and
//! signature; and hostile requests over plain HTTP (paths out of the export, symlinks, part
//! files, header floods, connections that hold their slot) that must leave nothing served
//! that should not be and the server up.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::serve_config::Site;
use crate::util::*;

/// A site whose config has an `[http]` face, and its server.
struct Face {
    site: Site,
    srv: ServerProc,
    addr: SocketAddr,
    /// The test CA's certificate (TLS faces); `pki/cadir` holds it hashed, for davix.
    cert: Option<PathBuf>,
}

impl Face {
    /// Starts a server with `[http]`, over TLS when `tls` (needs openssl to make the
    /// certificate: `None` when it is missing, after saying so).
    fn start(tls: bool) -> Option<Face> {
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
    fn token(&self, identity: &str, extra: &[&str]) -> String {
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
    fn curl(&self, token: &str, path: &str, args: &[&str]) -> (u16, Vec<u8>) {
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
    fn raw(&self, request: &str) -> (u16, String, Vec<u8>) {
        raw(self.addr, request.as_bytes())
    }

    /// `METHOD path` with `token` (and `Connection: close`).
    fn req(&self, method: &str, path: &str, token: &str, extra: &str) -> (u16, String, Vec<u8>) {
        self.raw(&format!(
            "{method} {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n{extra}Connection: close\r\n\r\n"
        ))
    }
}

/// A test CA and a server certificate for 127.0.0.1 signed by it, made with openssl in
/// `dir` (which gets `ca.pem` and `cadir/`, hashed as OpenSSL's CA paths want): the server's
/// certificate and key.
fn make_pki(dir: &std::path::Path) -> (PathBuf, PathBuf) {
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
fn raw(addr: SocketAddr, request: &[u8]) -> (u16, String, Vec<u8>) {
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

#[test]
fn curl_reads_files_ranges_and_listings_over_tls() {
    if !on_path("curl") {
        return skip("curl is not installed (apt-get install curl)");
    }
    let Some(face) = Face::start(true) else {
        return;
    };
    let archive = &face.site.archive;
    make_file(&archive.join("run1.dat"), 3_000_000, 1 << 20, 9);
    std::fs::create_dir(archive.join("sub dir")).unwrap();
    std::fs::write(archive.join("sub dir/a&b.txt"), b"hello\n").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", archive.join("passwd")).unwrap();
    std::fs::write(archive.join(".zcp-0123.part"), b"half a file").unwrap();
    let t = face.token("lab", &[]);

    let (code, body) = face.curl(&t, "/archive/run1.dat", &[]);
    assert_eq!(code, 200);
    assert_eq!(body, std::fs::read(archive.join("run1.dat")).unwrap());
    let (code, body) = face.curl(&t, "/archive/run1.dat", &["-r", "1048570-1048589"]);
    assert_eq!(code, 206);
    assert_eq!(
        body,
        std::fs::read(archive.join("run1.dat")).unwrap()[1_048_570..1_048_590]
    );
    let (code, body) = face.curl(&t, "/archive/run1.dat", &["-r", "3000000-"]);
    assert_eq!(code, 416, "{}", text(&body));
    let (code, _) = face.curl(&t, "/archive/sub%20dir/a%26b.txt", &["-I"]);
    assert_eq!(code, 200);

    let (code, body) = face.curl(&t, "/archive/", &["-X", "PROPFIND", "-H", "Depth: 1"]);
    assert_eq!(code, 207);
    let xml = text(&body);
    for needle in [
        "<D:href>/archive/</D:href>",
        "<D:href>/archive/run1.dat</D:href>",
        "<D:getcontentlength>3000000</D:getcontentlength>",
        "<D:href>/archive/sub%20dir/</D:href><D:propstat><D:prop><D:resourcetype><D:collection/>",
    ] {
        assert!(xml.contains(needle), "{needle} in {xml}");
    }
    assert!(!xml.contains("passwd") && !xml.contains(".zcp-"), "{xml}");
    // Neither a symlink nor a part file is served.
    assert_eq!(face.curl(&t, "/archive/passwd", &[]).0, 404);
    assert_eq!(face.curl(&t, "/archive/.zcp-0123.part", &[]).0, 404);
    // The top lists the identity's exports only.
    let (code, body) = face.curl(&t, "/", &["-X", "PROPFIND", "-H", "Depth: 1"]);
    assert_eq!(code, 207);
    assert!(text(&body).contains("<D:href>/archive/</D:href>"));
    assert!(!text(&body).contains("incoming"), "{}", text(&body));
    let log = face.srv.log();
    assert!(
        log.contains("https 127.0.0.1:")
            && log.contains(" lab GET /archive/run1.dat -> 200 (3000000 bytes"),
        "{log}"
    );
}

#[test]
fn davix_lists_reads_and_writes_with_a_token_and_fails_without() {
    if !on_path("davix-get") || !on_path("davix-ls") {
        return skip("davix is not installed (apt-get install davix)");
    }
    let Some(face) = Face::start(true) else {
        return;
    };
    make_file(&face.site.archive.join("run2.dat"), 2_500_000, 1 << 20, 4);
    std::fs::create_dir(face.site.archive.join("sub")).unwrap();
    let t = face.token("lab", &["--path", "/archive"]);
    let cadir = face.site.env.path("pki/cadir");
    let davix = |tool: &str, token: &str, args: &[&std::ffi::OsStr]| {
        let mut c = Command::new(tool);
        c.arg("--capath")
            .arg(&cadir)
            .args(["--retry", "0", "-H"])
            .arg(format!("Authorization: Bearer {token}"))
            .args(args);
        run(c, 60)
    };
    let url = |p: &str| std::ffi::OsString::from(format!("https://{}{p}", face.addr));
    let o = davix("davix-ls", &t, &["-l".as_ref(), &url("/archive/")]);
    assert!(o.status.success(), "{}", both(&o));
    let listing = text(&o.stdout);
    assert!(
        listing.contains("2500000") && listing.contains("run2.dat"),
        "{listing}"
    );
    assert!(
        listing
            .lines()
            .any(|l| l.starts_with('d') && l.ends_with("sub")),
        "{listing}"
    );
    let got = face.site.env.path("got.dat");
    let o = davix(
        "davix-get",
        &t,
        &[&url("/archive/run2.dat"), got.as_os_str()],
    );
    assert!(o.status.success(), "{}", both(&o));
    assert!(same_file(&got, &face.site.archive.join("run2.dat")));
    // Up again under another name, into a directory davix makes.
    assert!(on_path("davix-put") && on_path("davix-mkdir"));
    let o = davix("davix-mkdir", &t, &[&url("/archive/up")]);
    assert!(o.status.success(), "{}", both(&o));
    let o = davix(
        "davix-put",
        &t,
        &[got.as_os_str(), &url("/archive/up/run2.copy")],
    );
    assert!(o.status.success(), "{}", both(&o));
    assert!(same_file(&got, &face.site.archive.join("up/run2.copy")));
    // Out of the token's path, and with no valid token: davix fails and gets no bytes.
    let denied = face.site.env.path("denied.dat");
    std::fs::write(face.site.incoming.join("x"), b"x").unwrap();
    let o = davix("davix-get", &t, &[&url("/incoming/x"), denied.as_os_str()]);
    assert!(!o.status.success(), "{}", both(&o));
    let o = davix(
        "davix-get",
        "zcp1.00.00",
        &[&url("/archive/run2.dat"), denied.as_os_str()],
    );
    assert!(!o.status.success(), "{}", both(&o));
    assert!(std::fs::metadata(&denied).map_or(0, |m| m.len()) == 0);
}

#[test]
fn tokens_are_held_to_their_identity_path_activities_and_time() {
    let Some(face) = Face::start(false) else {
        return;
    };
    make_file(&face.site.archive.join("f"), 10_000, 4096, 1);
    std::fs::create_dir(face.site.archive.join("d")).unwrap();
    std::fs::write(face.site.archive.join("d/g"), b"g").unwrap();
    let get = |token: &str, path: &str| face.req("GET", path, token, "").0;

    let lab = face.token("lab", &[]);
    assert_eq!(get(&lab, "/archive/f"), 200);
    assert_eq!(get("", "/archive/f"), 401);
    let (code, head, _) = face.raw("GET /archive/f HTTP/1.1\r\nConnection: close\r\n\r\n");
    assert_eq!(code, 401);
    assert!(head.contains("WWW-Authenticate: Bearer"), "{head}");
    // Tampered: each half of the token changed.
    let (body, sig) = lab.rsplit_once('.').unwrap();
    let flip = |s: &str| {
        let mut b = s.as_bytes().to_vec();
        let i = b.len() / 2;
        b[i] = if b[i] == b'0' { b'1' } else { b'0' };
        String::from_utf8(b).unwrap()
    };
    assert_eq!(get(&format!("{}.{sig}", flip(body)), "/archive/f"), 401);
    assert_eq!(get(&format!("{body}.{}", flip(sig)), "/archive/f"), 401);
    // Out of its path, activities or export permission: 403.
    let only_d = face.token("lab", &["--path", "/archive/d"]);
    assert_eq!(get(&only_d, "/archive/d/g"), 200);
    assert_eq!(get(&only_d, "/archive/f"), 403);
    assert_eq!(get(&only_d, "/archive/d%2f..%2ff"), 400);
    let list = face.token("lab", &["--activity", "LIST"]);
    assert_eq!(get(&list, "/archive/f"), 403);
    assert_eq!(
        face.req("PROPFIND", "/archive/", &list, "Depth: 1\r\n").0,
        207
    );
    // observatory may only write to incoming and read archive.
    let obs = face.token("observatory", &[]);
    std::fs::write(face.site.incoming.join("secret"), b"s").unwrap();
    assert_eq!(get(&obs, "/incoming/secret"), 403);
    assert_eq!(get(&obs, "/archive/f"), 200);
    // A token for an identity this config does not have, made with a key of the right
    // shape, is refused as well.
    let other = Site::new();
    let mut c = zcp();
    c.args(["token", "--config"])
        .arg(&other.config)
        .args(["--identity", "lab"]);
    let foreign = text(&run(c, 10).stdout).trim().to_string();
    assert_eq!(get(&foreign, "/archive/f"), 401);

    // A narrower token from a POST, which cannot be widened by asking.
    let ask = r#"{"caveats": ["activity:DOWNLOAD,LIST"], "validity": "PT5M"}"#;
    let (code, _, body) = face.raw(&format!(
        "POST /archive/d HTTP/1.1\r\nAuthorization: Bearer {only_d}\r\nContent-Type: application/macaroon-request\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{ask}",
        ask.len()
    ));
    assert_eq!(code, 200, "{}", text(&body));
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let narrow = v["macaroon"].as_str().unwrap().to_string();
    assert_eq!(get(&narrow, "/archive/d/g"), 200);
    assert_eq!(get(&narrow, "/archive/f"), 403);

    // Expired; and a rotated key (reloaded) revokes every token made with the old one.
    let brief = face.token("lab", &["--ttl", "1s"]);
    std::thread::sleep(Duration::from_millis(2100));
    assert_eq!(get(&brief, "/archive/f"), 401);
    let mut k = zcp();
    k.args(["keygen", "--force", "-o"]).arg(&face.site.lab);
    assert!(run(k, 10).status.success());
    signal(face.srv.pid(), libc::SIGHUP);
    assert!(
        face.srv.wait_log("configuration reloaded", 10),
        "{}",
        face.srv.log()
    );
    assert_eq!(get(&lab, "/archive/f"), 401);
    assert_eq!(get(&face.token("lab", &[]), "/archive/f"), 200);
}

#[test]
fn hostile_requests_reach_nothing_outside_and_leave_the_server_up() {
    let Some(face) = Face::start(false) else {
        return;
    };
    let outside = face.site.env.path("outside.txt");
    std::fs::write(&outside, b"OUTSIDE").unwrap();
    std::os::unix::fs::symlink(&outside, face.site.archive.join("out")).unwrap();
    std::fs::create_dir(face.site.archive.join("d")).unwrap();
    std::os::unix::fs::symlink(
        face.site.env.path("srv/incoming"),
        face.site.archive.join("d/in"),
    )
    .unwrap();
    let t = face.token("lab", &[]);
    for path in [
        "/archive/../outside.txt",
        "/archive/%2e%2e/outside.txt",
        "/archive/%2E%2E/%2e%2e/outside.txt",
        "/archive/..%2foutside.txt",
        "/archive/out",
        "/archive/d/in/",
        "/archive/%00",
        "/incoming/x",
        "/nosuch/x",
        "outside.txt",
    ] {
        let (code, _, body) = face.req("GET", path, &t, "");
        assert!(
            [400, 403, 404].contains(&code),
            "{path}: {code} {}",
            text(&body)
        );
        assert!(!text(&body).contains("OUTSIDE"), "{path}");
    }
    // Floods: too many headers, too long a head, a body too big for what it asks.
    let many: String = (0..100).map(|i| format!("X-{i}: y\r\n")).collect();
    assert_eq!(face.raw(&format!("GET / HTTP/1.1\r\n{many}\r\n")).0, 431);
    let long = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(20_000));
    assert_eq!(face.raw(&long).0, 431);
    let (code, _, _) = face.req("PROPFIND", "/archive/", &t, "Content-Length: 10000000\r\n");
    assert_eq!(code, 413);
    assert_eq!(face.raw("GARBAGE\r\n\r\n").0, 400);
    assert_eq!(face.req("LOCK", "/archive/d", &t, "").0, 405);
    assert_eq!(face.req("DELETE", "/archive/d", &t, "").0, 403);
    assert!(face.site.archive.join("d").is_dir());
    // Text from the network reaches the log escaped.
    // (Control characters are refused in paths; a right-to-left override is not.)
    assert_eq!(face.req("GET", "/archive/%1b%5b31mred", &t, "").0, 400);
    face.req("GET", "/archive/%E2%80%AEred", &t, "");
    assert!(face.srv.wait_log("red -> 404", 5), "{}", face.srv.log());
    let log = face.srv.log();
    assert!(
        !log.contains('\u{1b}') && !log.contains('\u{202e}'),
        "{log}"
    );

    // Connections that send a head a byte at a time and never finish: more than the table
    // holds per source. Newcomers evict them, so a real request is still answered at once.
    let started = Instant::now();
    let mut slow = Vec::new();
    for _ in 0..40 {
        let mut s = TcpStream::connect(face.addr).unwrap();
        s.write_all(b"GET /archive/ HTTP/1.1\r\nX-Slow: ").unwrap();
        slow.push(s);
    }
    let (code, _, _) = face.req("PROPFIND", "/archive/", &t, "Depth: 0\r\n");
    assert_eq!(code, 207);
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    // Most of the trickling ones were shut down to make room.
    let mut closed = 0;
    for s in &mut slow {
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        if matches!(s.read(&mut [0u8; 64]), Ok(0)) {
            closed += 1;
        }
    }
    assert!(closed >= 20, "{closed} of 40 closed");
    drop(slow);
    let mut face = face;
    assert!(face.srv.alive());
    // What is on disk is as the test left it.
    assert_eq!(std::fs::read(&outside).unwrap(), b"OUTSIDE");
    assert_eq!(tree(&face.site.archive), ["d", "d/in", "out"]);
}

#[test]
fn plain_http_sends_files_with_sendfile_and_keeps_connections_alive() {
    let Some(face) = Face::start(false) else {
        return;
    };
    make_file(&face.site.archive.join("big"), 5_000_000, 1 << 20, 3);
    let t = face.token("lab", &["--path", "/archive"]);
    // Two requests on one connection: the first kept alive, the second closes.
    let two = format!(
        "HEAD /archive/big HTTP/1.1\r\nAuthorization: Bearer {t}\r\n\r\nGET /archive/big HTTP/1.1\r\nAuthorization: Bearer {t}\r\nRange: bytes=4999990-\r\nConnection: close\r\n\r\n"
    );
    let mut s = TcpStream::connect(face.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(two.as_bytes()).unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    let all_text = String::from_utf8_lossy(&all);
    assert_eq!(all_text.matches("HTTP/1.1 200 OK").count(), 1, "{all_text}");
    assert!(all_text.contains("Content-Length: 5000000"), "{all_text}");
    assert!(
        all_text.contains("HTTP/1.1 206 Partial Content"),
        "{all_text}"
    );
    assert!(
        all_text.contains("Content-Range: bytes 4999990-4999999/5000000"),
        "{all_text}"
    );
    let want = &std::fs::read(face.site.archive.join("big")).unwrap()[4_999_990..];
    assert!(all.ends_with(want));
    let (code, head, body) = face.req("GET", "/archive/big", &t, "");
    assert_eq!(code, 200, "{head}");
    assert_eq!(body.len(), 5_000_000);
    assert_eq!(body, std::fs::read(face.site.archive.join("big")).unwrap());
}

#[test]
fn token_and_config_errors_name_what_to_fix() {
    let site = Site::new();
    let mut c = zcp();
    c.args(["token", "--config"])
        .arg(&site.config)
        .args(["--identity", "nobody"]);
    let o = run(c, 10);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        both(&o).contains("--identity") && both(&o).contains("observatory"),
        "{}",
        both(&o)
    );
    for (flags, needle) in [
        (&["--path", "/incoming/../x"][..], "--path"),
        (
            &["--path", "/nosuch"][..],
            "no access to an export 'nosuch'",
        ),
        (&["--activity", "FLY"][..], "'FLY' is not one of"),
        (&["--ttl", "0s"][..], "--ttl"),
    ] {
        let mut c = zcp();
        c.args(["token", "--config"])
            .arg(&site.config)
            .args(["--identity", "lab"])
            .args(flags);
        let o = run(c, 10);
        assert_eq!(o.status.code(), Some(2), "{flags:?}: {}", both(&o));
        assert!(both(&o).contains(needle), "{needle} in {}", both(&o));
    }
    for (http, needle) in [
        ("listen = \"nowhere\"", "http.listen"),
        (
            "listen = \"127.0.0.1:0\"\ncert = \"/x.pem\"",
            "give both cert and key",
        ),
        (
            "listen = \"127.0.0.1:0\"\ncert = \"c.pem\"\nkey = \"k.pem\"",
            "not an absolute path",
        ),
        (
            "listen = \"127.0.0.1:0\"\ncert = \"/nonexistent/c.pem\"\nkey = \"/nonexistent/k.pem\"",
            "/nonexistent/c.pem",
        ),
        ("listen = \"127.0.0.1:0\"\ntpc = true", "tpc"),
    ] {
        site.write(&format!("{}\n[http]\n{http}\n", site.text(true)));
        let mut c = zcp();
        c.args(["serve", "--check-config", "--config"])
            .arg(&site.config);
        let o = run(c, 10);
        assert_eq!(o.status.code(), Some(2), "{http}: {}", both(&o));
        assert!(both(&o).contains(needle), "{needle} in {}", both(&o));
    }
}

/// `PUT path` with `body` and `extra` headers over plain HTTP.
fn put(face: &Face, path: &str, token: &str, body: &[u8], extra: &str) -> (u16, String) {
    let mut req = format!(
        "PUT {path} HTTP/1.1\r\nAuthorization: Bearer {token}\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body);
    let (code, head, b) = raw(face.addr, &req);
    (code, format!("{head}{}", text(&b)))
}

#[test]
fn put_stores_only_whole_files_whose_digests_match() {
    let Some(face) = Face::start(false) else {
        return;
    };
    let archive = &face.site.archive;
    let t = face.token("lab", &[]);
    let body: Vec<u8> = (0..2_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let adler = {
        let (mut a, mut b) = (1u32, 0u32);
        for &x in &body {
            a = (a + u32::from(x)) % 65521;
            b = (b + a) % 65521;
        }
        format!("{:08x}", (b << 16) | a)
    };
    // A new file: 201, with the digest it was stored under.
    let (code, head) = put(
        &face,
        "/archive/new.dat",
        &t,
        &body,
        &format!("Digest: adler32={adler}\r\n"),
    );
    assert_eq!(code, 201, "{head}");
    assert!(head.contains(&format!("Digest: adler32={adler}")), "{head}");
    assert_eq!(std::fs::read(archive.join("new.dat")).unwrap(), body);
    // A digest that does not match: 412, and nothing changes under the name.
    for (hdr, name) in [
        ("Digest: adler32=00000001\r\n", "new.dat"),
        (
            "Repr-Digest: sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:\r\n",
            "other.dat",
        ),
    ] {
        let (code, head) = put(&face, &format!("/archive/{name}"), &t, b"different", hdr);
        assert_eq!(code, 412, "{head}");
    }
    assert_eq!(std::fs::read(archive.join("new.dat")).unwrap(), body);
    assert!(!archive.join("other.dat").exists());
    // Replacing: 204.
    let (code, head) = put(&face, "/archive/new.dat", &t, b"v2", "");
    assert_eq!(code, 204, "{head}");
    assert_eq!(std::fs::read(archive.join("new.dat")).unwrap(), b"v2");
    let (code, _) = put(&face, "/archive/new.dat", &t, b"v3", "If-None-Match: *\r\n");
    assert_eq!(code, 412);
    // A body cut short: the connection ends, nothing takes the name, no part file stays.
    let mut s = TcpStream::connect(face.addr).unwrap();
    s.write_all(
        format!("PUT /archive/cut.dat HTTP/1.1\r\nAuthorization: Bearer {t}\r\nContent-Length: 1000000\r\n\r\n")
            .as_bytes(),
    )
    .unwrap();
    s.write_all(&[7u8; 300_000]).unwrap();
    drop(s);
    assert!(
        face.srv.wait_log("PUT /archive/cut.dat -> 400", 10),
        "{}",
        face.srv.log()
    );
    assert!(!archive.join("cut.dat").exists());
    assert!(no_partials(archive, 5));
    // MKCOL then a PUT inside; a PUT whose parent is missing is 409.
    assert_eq!(face.req("MKCOL", "/archive/d", &t, "").0, 201);
    assert_eq!(face.req("MKCOL", "/archive/d", &t, "").0, 405);
    assert_eq!(face.req("MKCOL", "/archive/x/y", &t, "").0, 409);
    assert_eq!(put(&face, "/archive/d/f", &t, b"f", "").0, 201);
    assert_eq!(put(&face, "/archive/nodir/f", &t, b"f", "").0, 409);
    assert!(!archive.join("nodir").exists());
    // More than the filesystem holds: 507 before a byte is read.
    let (code, head, _) = face.raw(&format!(
        "PUT /archive/huge HTTP/1.1\r\nAuthorization: Bearer {t}\r\nContent-Length: 1000000000000000\r\n\r\n"
    ));
    assert_eq!(code, 507, "{head}");
    assert!(!archive.join("huge").exists());
    let log = face.srv.log();
    assert!(
        log.contains("lab PUT /archive/new.dat -> 201 (2000000 bytes"),
        "{log}"
    );
}

#[test]
fn writes_are_held_to_permissions_tokens_and_the_export() {
    let Some(face) = Face::start(false) else {
        return;
    };
    let (archive, incoming) = (&face.site.archive, &face.site.incoming);
    let outside = face.site.env.path("outside");
    std::fs::create_dir(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, archive.join("escape")).unwrap();
    std::os::unix::fs::symlink(outside.join("f"), archive.join("dangling")).unwrap();
    let lab = face.token("lab", &[]);
    for path in [
        "/archive/escape/f",
        "/archive/dangling",
        "/archive/%2e%2e/outside/f",
        "/archive/.zcp-1.part",
        "/archive",
    ] {
        let (code, head) = put(&face, path, &lab, b"x", "");
        assert!([400, 403, 405, 409].contains(&code), "{path}: {head}");
    }
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
    assert!(!archive.join(".zcp-1.part").exists());
    // observatory reads archive only and writes incoming only; lab may not delete.
    let obs = face.token("observatory", &[]);
    assert_eq!(put(&face, "/archive/o", &obs, b"o", "").0, 403);
    assert_eq!(put(&face, "/incoming/o", &obs, b"o", "").0, 201);
    assert_eq!(std::fs::read(incoming.join("o")).unwrap(), b"o");
    assert_eq!(face.req("GET", "/incoming/o", &obs, "").0, 403);
    std::fs::write(archive.join("keep"), b"k").unwrap();
    assert_eq!(face.req("DELETE", "/archive/keep", &lab, "").0, 403);
    assert!(archive.join("keep").exists());
    // A token without UPLOAD, or for another path, cannot write.
    let read_only = face.token("lab", &["--activity", "DOWNLOAD,LIST"]);
    assert_eq!(put(&face, "/archive/r", &read_only, b"r", "").0, 403);
    let elsewhere = face.token("lab", &["--path", "/archive/sub"]);
    assert_eq!(put(&face, "/archive/r", &elsewhere, b"r", "").0, 403);
    assert!(!archive.join("r").exists());
    // With read-write-delete, DELETE removes a tree, never what a symlink points at.
    let text_cfg = face.site.text(true).replace(
        "archive = \"read-write\"",
        "archive = \"read-write-delete\"",
    );
    let http = std::fs::read_to_string(&face.site.config).unwrap();
    let http = &http[http.find("\n[http]").unwrap()..];
    face.site.write(&format!("{text_cfg}{http}"));
    signal(face.srv.pid(), libc::SIGHUP);
    assert!(
        face.srv.wait_log("configuration reloaded", 10),
        "{}",
        face.srv.log()
    );
    std::fs::write(outside.join("precious"), b"p").unwrap();
    std::fs::create_dir_all(archive.join("tree/a")).unwrap();
    std::fs::write(archive.join("tree/a/f"), b"f").unwrap();
    std::os::unix::fs::symlink(&outside, archive.join("tree/link")).unwrap();
    assert_eq!(face.req("DELETE", "/archive/tree", &lab, "").0, 204);
    assert!(!archive.join("tree").exists());
    assert_eq!(face.req("DELETE", "/archive/escape", &lab, "").0, 204);
    assert!(!archive.join("escape").exists());
    assert_eq!(std::fs::read(outside.join("precious")).unwrap(), b"p");
    assert_eq!(face.req("DELETE", "/archive/tree", &lab, "").0, 404);
    let no_delete = face.token("lab", &["--activity", "UPLOAD"]);
    assert_eq!(face.req("DELETE", "/archive/keep", &no_delete, "").0, 403);
    assert!(archive.join("keep").exists());
}

#[test]
fn no_body_is_read_before_the_token_and_small_faults_are_answered_right() {
    let Some(face) = Face::start(false) else {
        return;
    };
    let t = face.token("lab", &[]);
    // Without a token, a request announcing a body is answered at once and closed: nobody
    // without a key can hold a thread by sending a body slowly.
    for method in ["POST", "PUT", "PROPFIND", "LOCK"] {
        let started = Instant::now();
        let mut s = TcpStream::connect(face.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(8))).unwrap();
        write!(
            s,
            "{method} /archive/a HTTP/1.1\r\nContent-Length: 65536\r\n\r\n"
        )
        .unwrap();
        let mut all = Vec::new();
        let _ = s.read_to_end(&mut all);
        let answer = String::from_utf8_lossy(&all);
        assert!(
            answer.starts_with("HTTP/1.1 401") || answer.starts_with("HTTP/1.1 405"),
            "{method}: {answer}"
        );
        assert!(answer.contains("Connection: close"), "{answer}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{method}: {:?}",
            started.elapsed()
        );
    }
    // A failed token says the same whether its identity exists or not.
    let forge = |id: &str| {
        let body: String = format!("id {id}\nnonce {}", "00".repeat(16))
            .bytes()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("zcp1.{body}.{}", "00".repeat(32))
    };
    let (c1, _, b1) = face.req("GET", "/archive/a", &forge("lab"), "");
    let (c2, _, b2) = face.req("GET", "/archive/a", &forge("nobody"), "");
    assert_eq!((c1, c2), (401, 401));
    assert_eq!(b1, b2);
    // A caveat's path is matched on bytes: one spelling U+FFFD does not reach other names.
    std::fs::create_dir(face.site.archive.join("d")).unwrap();
    std::fs::create_dir(
        face.site
            .archive
            .join(std::ffi::OsStr::from_bytes(b"d/\xfe")),
    )
    .unwrap();
    std::fs::write(
        face.site
            .archive
            .join(std::ffi::OsStr::from_bytes(b"d/\xfe/h")),
        b"hidden",
    )
    .unwrap();
    let odd = face.token("lab", &["--path", "/archive/d/\u{fffd}"]);
    assert_eq!(face.req("GET", "/archive/d/%FE/h", &odd, "").0, 403);
    assert_eq!(face.req("GET", "/archive/d/%FE/h", &t, "").0, 200);
    // Macaroon requests: a parameter on the type is fine, another type is 415, and an
    // activity the caller's token lacks is refused rather than minted useless.
    let ask = r#"{"caveats": ["activity:DOWNLOAD"]}"#;
    let post = |token: &str, ct: &str| {
        face.raw(&format!(
            "POST /archive/d HTTP/1.1\r\nAuthorization: Bearer {token}\r\nContent-Type: {ct}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{ask}",
            ask.len()
        ))
        .0
    };
    assert_eq!(post(&t, "application/macaroon-request; charset=utf-8"), 200);
    assert_eq!(post(&t, "application/json"), 415);
    assert_eq!(
        post(
            &face.token("lab", &["--activity", "LIST"]),
            "application/macaroon-request"
        ),
        403
    );
    assert_eq!(face.req("GET", "/archive/x%0Abefore%201", &t, "").0, 400);
    // OPTIONS *, a signed Content-Length, HTTP/1.0 keep-alive.
    let (code, head, _) = face.raw("OPTIONS * HTTP/1.1\r\nConnection: close\r\n\r\n");
    assert_eq!(code, 200, "{head}");
    assert!(head.contains("DAV: 1"), "{head}");
    assert_eq!(
        face.req("PROPFIND", "/archive/", &t, "Content-Length: +3\r\n")
            .0,
        400
    );
    let mut s = TcpStream::connect(face.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "HEAD /archive/d/%FE/h HTTP/1.0\r\nAuthorization: Bearer {t}\r\nConnection: keep-alive\r\n\r\n").unwrap();
    let mut got = [0u8; 2048];
    let n = s.read(&mut got).unwrap();
    let answer = String::from_utf8_lossy(&got[..n]);
    assert!(answer.contains("Connection: keep-alive"), "{answer}");
}

#[test]
fn listings_stream_and_encryption_is_required_where_the_config_says() {
    let Some(face) = Face::start(false) else {
        return;
    };
    let dir = face.site.archive.join("many");
    std::fs::create_dir(&dir).unwrap();
    for i in 0..3000 {
        std::fs::write(dir.join(format!("file-{i:05}-{}", "n".repeat(100))), b"").unwrap();
    }
    let t = face.token("lab", &[]);
    let (code, head, body) = face.req("PROPFIND", "/archive/many/", &t, "Depth: 1\r\n");
    assert_eq!(code, 207, "{head}");
    assert!(head.contains("Transfer-Encoding: chunked"), "{head}");
    // Dechunked, every entry is there once, and the document ends.
    let mut xml = Vec::new();
    let mut rest = &body[..];
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n").unwrap();
        let n = usize::from_str_radix(std::str::from_utf8(&rest[..line_end]).unwrap(), 16).unwrap();
        if n == 0 {
            break;
        }
        xml.extend_from_slice(&rest[line_end + 2..line_end + 2 + n]);
        rest = &rest[line_end + 4 + n..];
    }
    let xml = String::from_utf8(xml).unwrap();
    assert_eq!(xml.matches("<D:response>").count(), 3001);
    assert!(xml.ends_with("</D:multistatus>\n"));
    // An identity that must be encrypted is refused on plain HTTP.
    let cfg = std::fs::read_to_string(&face.site.config).unwrap();
    let cfg = cfg.replace(
        "[identity.lab]\n",
        "[identity.lab]\nrequire_encryption = true\n",
    );
    face.site.write(&cfg);
    signal(face.srv.pid(), libc::SIGHUP);
    assert!(
        face.srv.wait_log("configuration reloaded", 10),
        "{}",
        face.srv.log()
    );
    let (code, _, body) = face.req("GET", "/archive/many/", &t, "");
    assert_eq!(code, 403, "{}", text(&body));
    assert!(
        text(&body).contains("require_encryption"),
        "{}",
        text(&body)
    );
}

#[test]
fn gfal2_lists_sums_copies_and_removes_with_a_bearer_token() {
    if !["gfal-ls", "gfal-sum", "gfal-copy", "gfal-mkdir", "gfal-rm"]
        .iter()
        .all(|t| std::path::Path::new("/usr/bin").join(t).is_file())
    {
        return skip(
            "gfal2 is not installed (apt-get install gfal2-util-scripts gfal2-plugin-http python3-gfal2)",
        );
    }
    let Some(face) = Face::start(true) else {
        return;
    };
    make_file(&face.site.archive.join("run3.dat"), 1_500_000, 1 << 20, 5);
    let t = face.token("lab", &["--path", "/archive"]);
    let url = |p: &str| format!("https://{}{p}", face.addr);
    // The scripts need Debian's own python3 (with the gfal2 module) first on PATH.
    let path = format!("/usr/bin:{}", std::env::var("PATH").unwrap_or_default());
    let gfal = |args: &[&str]| {
        let mut c = Command::new(format!("/usr/bin/{}", args[0]));
        c.args(&args[1..])
            .env("PATH", &path)
            .env("BEARER_TOKEN", &t)
            .env("X509_CERT_DIR", face.site.env.path("pki/cadir"))
            .env("HOME", face.site.env.path(""));
        run(c, 60)
    };
    let o = gfal(&["gfal-ls", "-l", &url("/archive/")]);
    assert!(o.status.success(), "{}", both(&o));
    assert!(text(&o.stdout).contains("run3.dat"), "{}", both(&o));
    // ADLER32 as WLCG compares it: 8 hex digits.
    let data = std::fs::read(face.site.archive.join("run3.dat")).unwrap();
    let (mut a, mut b) = (1u32, 0u32);
    for &x in &data {
        a = (a + u32::from(x)) % 65521;
        b = (b + a) % 65521;
    }
    let o = gfal(&["gfal-sum", &url("/archive/run3.dat"), "ADLER32"]);
    assert!(o.status.success(), "{}", both(&o));
    assert!(
        text(&o.stdout)
            .trim()
            .ends_with(&format!("{:08x}", (b << 16) | a)),
        "{}",
        both(&o)
    );
    // Down, then up again into a directory gfal makes, checksums compared on both ends.
    let local = face.site.env.path("gfal.dat");
    let file_url = format!("file://{}", local.display());
    let o = gfal(&["gfal-copy", "-f", &url("/archive/run3.dat"), &file_url]);
    assert!(o.status.success(), "{}", both(&o));
    assert_eq!(std::fs::read(&local).unwrap(), data);
    let o = gfal(&["gfal-mkdir", &url("/archive/g")]);
    assert!(o.status.success(), "{}", both(&o));
    let o = gfal(&[
        "gfal-copy",
        "-K",
        "ADLER32",
        "--checksum-mode",
        "both",
        &file_url,
        &url("/archive/g/up.dat"),
    ]);
    assert!(o.status.success(), "{}", both(&o));
    assert_eq!(
        std::fs::read(face.site.archive.join("g/up.dat")).unwrap(),
        data
    );
    let o = gfal(&["gfal-rm", &url("/archive/g/up.dat")]);
    // lab may not delete: refused, and the file stays.
    assert!(!o.status.success(), "{}", both(&o));
    assert!(face.site.archive.join("g/up.dat").exists());
}

#[test]
fn puts_are_framed_strictly_and_write_only_identities_learn_nothing() {
    let Some(face) = Face::start(false) else {
        return;
    };
    let (archive, incoming) = (&face.site.archive, &face.site.incoming);
    let lab = face.token("lab", &[]);
    std::fs::write(archive.join("ten"), b"0123456789").unwrap();
    // A partial PUT (curl -C) would replace the file with its tail: refused.
    let (code, _) = put(
        &face,
        "/archive/ten",
        &lab,
        b"456789",
        "Content-Range: bytes 4-9/10\r\n",
    );
    assert_eq!(code, 400);
    assert_eq!(std::fs::read(archive.join("ten")).unwrap(), b"0123456789");
    // Two lengths, and a digest given on two lines whose second contradicts the body.
    let (code, _, _) = face.raw(&format!(
        "PUT /archive/two HTTP/1.1\r\nAuthorization: Bearer {lab}\r\nContent-Length: 5\r\nContent-Length: 60\r\n\r\nhello"
    ));
    assert_eq!(code, 400);
    assert!(!archive.join("two").exists());
    let (code, _) = put(
        &face,
        "/archive/two",
        &lab,
        b"hello",
        "Digest: sha-512=abc\r\nDigest: adler32=00000000\r\n",
    );
    assert_eq!(code, 412);
    assert!(!archive.join("two").exists());
    // The top of a server with named exports is not a file: refused, and no thread panics.
    for m in ["PUT", "MKCOL", "DELETE"] {
        let (code, _, _) = face.req(m, "/", &lab, "Content-Length: 0\r\n");
        assert_eq!(code, 405, "{m}");
    }
    assert!(!face.srv.log().contains("panicked"), "{}", face.srv.log());
    // Checksums need DOWNLOAD (or READ_METADATA by name): an UPLOAD token gets none.
    let up_only = face.token("lab", &["--activity", "UPLOAD"]);
    let (code, head, _) = face.req("HEAD", "/archive/ten", &up_only, "Want-Digest: adler32\r\n");
    assert_eq!(code, 200);
    assert!(!head.contains("Digest:"), "{head}");
    // DELETE leaves a transfer's part file (and so its directory) in place.
    std::fs::create_dir(archive.join("job")).unwrap();
    std::fs::write(archive.join("job/.zcp-0123456789abcdef.part"), b"half").unwrap();
    std::fs::write(archive.join("job/done"), b"d").unwrap();
    let cfg = std::fs::read_to_string(&face.site.config).unwrap();
    face.site.write(&cfg.replace(
        "archive = \"read-write\"",
        "archive = \"read-write-delete\"",
    ));
    signal(face.srv.pid(), libc::SIGHUP);
    assert!(
        face.srv.wait_log("configuration reloaded", 10),
        "{}",
        face.srv.log()
    );
    assert_eq!(face.req("DELETE", "/archive/job", &lab, "").0, 409);
    assert!(archive.join("job/.zcp-0123456789abcdef.part").exists());
    assert!(!archive.join("job/done").exists());
    // A part file name planted as a hard link to a file elsewhere is never written through.
    let outside = face.site.env.path("elsewhere");
    std::fs::write(&outside, b"precious").unwrap();
    let key = {
        let h = blake3::hash(b"linked");
        h.to_hex()[..16].to_string()
    };
    std::fs::hard_link(&outside, archive.join(format!(".zcp-{key}.part"))).unwrap();
    let (code, head) = put(&face, "/archive/linked", &lab, b"PWNED", "");
    assert_eq!(code, 423, "{head}");
    assert_eq!(std::fs::read(&outside).unwrap(), b"precious");
    // observatory writes incoming only: whether a name or a parent was there, it cannot tell.
    let obs = face.token("observatory", &[]);
    std::fs::write(incoming.join("old"), b"old").unwrap();
    assert_eq!(put(&face, "/incoming/old", &obs, b"new", "").0, 201);
    assert_eq!(put(&face, "/incoming/fresh", &obs, b"new", "").0, 201);
    assert_eq!(put(&face, "/incoming/a/b/c", &obs, b"deep", "").0, 201);
    assert_eq!(std::fs::read(incoming.join("a/b/c")).unwrap(), b"deep");
    assert_eq!(
        put(&face, "/incoming/x", &obs, b"x", "If-None-Match: *\r\n").0,
        403
    );
    assert_eq!(face.req("MKCOL", "/incoming/a", &obs, "").0, 201);
    assert_eq!(face.req("MKCOL", "/incoming/d/e", &obs, "").0, 201);
    // An HTTP/1.0 client gets a listing without chunks, ended by the connection.
    let (code, head, body) = face.raw(&format!(
        "PROPFIND /archive/ HTTP/1.0\r\nAuthorization: Bearer {lab}\r\nDepth: 1\r\n\r\n"
    ));
    assert_eq!(code, 207, "{head}");
    assert!(!head.contains("chunked"), "{head}");
    assert!(
        text(&body).ends_with("</D:multistatus>\n"),
        "{}",
        text(&body)
    );
}
