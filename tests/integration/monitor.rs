//! `zcp serve --metrics`: Prometheus metrics after real sessions (checked by promtool), the
//! status page in a real browser (Chromium over WebDriver), and the listener's bounds.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::serve_config::Site;
use crate::util::*;

/// One HTTP/1.1 request (`Connection: close`); the status, the head and the body.
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> (u16, String, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    // Read the head, then the body by its length: a server may keep the connection open
    // despite `Connection: close` (chromedriver does).
    let mut raw = Vec::new();
    let mut buf = [0u8; 16384];
    let head_end = loop {
        if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break raw.len(),
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
    };
    let head = String::from_utf8_lossy(&raw[..head_end])
        .trim_end()
        .to_string();
    let length = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse::<usize>().ok())?
    });
    loop {
        if length.is_some_and(|n| raw.len() >= head_end + n) {
            break;
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
    }
    let rest = String::from_utf8_lossy(&raw[head_end..]).into_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(&rest)
    } else {
        rest
    };
    (status, head, body)
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((len, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(len.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// `GET path`, which must answer 200; its body.
pub fn get(addr: SocketAddr, path: &str) -> String {
    let (status, head, body) = http(addr, "GET", path, None);
    assert_eq!(status, 200, "GET {path}: {head}\n{body}");
    body
}

/// The monitor's address, from the server's start line.
pub fn monitor_addr(srv: &ServerProc) -> SocketAddr {
    assert!(srv.wait_log("status page at http://", 10), "{}", srv.log());
    let log = srv.log();
    let at = log.split("metrics at http://").nth(1).unwrap();
    at.split('/').next().unwrap().parse().unwrap()
}

/// The value of the sample `name` (with its labels, exactly as written).
pub fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .map(|v| v.parse().unwrap())
}

/// Runs `promtool check metrics` on `text`; `false` (with the reason printed) without it.
pub fn promtool_passes(text: &str) -> bool {
    let Ok(mut child) = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    else {
        skip("promtool is not installed (apt-get install prometheus)");
        return false;
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let o = wait_output(child, 30);
    assert!(o.status.success(), "promtool: {}\n{text}", both(&o));
    true
}

/// Every label value in an exposition.
pub fn label_values(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some(labels) = line.split_once('{').and_then(|(_, r)| r.split_once('}')) else {
            continue;
        };
        for pair in labels.0.split(',') {
            let v = pair.split_once('=').unwrap().1;
            out.push(v.trim_matches('"').to_string());
        }
    }
    out
}

#[test]
fn metrics_count_a_push_and_the_refused_connections() {
    let site = Site::new();
    let tl = site.env.path("transfers.jsonl");
    let srv = ServerProc::with_config(
        &site.config,
        &site.env.path("srv"),
        &[
            "--metrics",
            "127.0.0.1:0",
            "--transfer-log",
            tl.to_str().unwrap(),
        ],
    );
    let m = monitor_addr(&srv);
    let src = site.file("f.bin", 3 << 20);
    let o = run(
        send_cmd(srv.port, &site.observatory, &src, "incoming/", &["-q"]),
        30,
    );
    assert!(o.status.success(), "{}", both(&o));
    // A pull: counted as sent, by its export and identity.
    std::fs::write(site.archive.join("old.txt"), b"archived\n").unwrap();
    let got = site.env.path("old.txt");
    let pull = crate::serve_config::get_cmd(srv.port, &site.observatory, "archive/old.txt", &got);
    let o = run(pull, 30);
    assert!(o.status.success(), "{}", both(&o));
    // lab has no access to incoming (refused after authenticating); a stranger's key fails
    // authentication.
    let o = run(
        send_cmd(srv.port, &site.lab, &src, "incoming/x/", &["-q"]),
        30,
    );
    assert_ne!(o.status.code(), Some(0), "{}", both(&o));
    let stranger = site.env.path("stranger.key");
    crate::serve_config::keygen(&stranger);
    let o = run(
        send_cmd(srv.port, &stranger, &src, "incoming/", &["-q"]),
        30,
    );
    assert_ne!(o.status.code(), Some(0), "{}", both(&o));
    // A client that gives up after authenticating (no export named) was refused nothing:
    // logged at info, not counted.
    let o = run(send_cmd(srv.port, &site.lab, &src, ".", &["-q"]), 30);
    assert_eq!(o.status.code(), Some(2), "{}", both(&o));

    let (status, head, text) = http(m, "GET", "/metrics", None);
    assert_eq!(status, 200, "{head}");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    for (name, want) in [
        ("zcp_sessions_active", 0.0),
        ("zcp_sessions_total{outcome=\"ok\"}", 2.0),
        ("zcp_sessions_total{outcome=\"failed\"}", 0.0),
        (
            "zcp_received_bytes_total{export=\"incoming\",identity=\"observatory\"}",
            (3 << 20) as f64,
        ),
        ("zcp_files_committed_total{direction=\"push\"}", 1.0),
        ("zcp_files_committed_total{direction=\"pull\"}", 1.0),
        (
            "zcp_sent_bytes_total{export=\"archive\",identity=\"observatory\"}",
            9.0,
        ),
        ("zcp_refused_connections_total{cause=\"auth\"}", 1.0),
        ("zcp_refused_connections_total{cause=\"access\"}", 1.0),
        ("zcp_verify_failures_total", 0.0),
        ("zcp_resent_chunks_total", 0.0),
    ] {
        assert_eq!(
            sample(&text, name),
            Some(want),
            "{name} in\n{text}\n{}",
            srv.log()
        );
    }
    assert!(
        text.contains("zcp_engines_chosen_total{side=\"receiver\""),
        "{text}"
    );
    assert!(!text.contains("cause=\"protocol\""), "{text}");
    assert!(
        srv.wait_log("ended by the client before it began", 5),
        "{}",
        srv.log()
    );
    let gave_up = srv.log();
    let gave_up = gave_up
        .lines()
        .find(|l| l.contains("ended by the client"))
        .unwrap();
    assert!(
        gave_up.contains(" INFO ") && gave_up.contains("identity lab"),
        "{gave_up}"
    );
    assert!(text.contains("# HELP zcp_rate_bytes_per_second "), "{text}");
    promtool_passes(&text);
    // The status document holds the session and its file.
    let doc: Value = serde_json::from_str(&get(m, "/api/sessions")).unwrap();
    let recent = doc["recent"].as_array().unwrap();
    let push: Vec<&Value> = recent
        .iter()
        .filter(|r| r["export"] == "incoming")
        .collect();
    assert_eq!(push[0]["kind"], "session", "{doc}");
    assert_eq!(push[0]["identity"], "observatory");
    assert_eq!(push[0]["outcome"], "ok");
    assert_eq!(push[0]["bytes"], 3 << 20);
    assert_eq!(push[1]["name"], "f.bin", "{doc}");
    // The refusal after authenticating is accounted: who asked for what, in the log and in
    // the transfer log.
    let log = srv.log();
    let line = log
        .lines()
        .find(|l| l.contains("refused session"))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(
        line.contains("from 127.0.0.1:")
            && line.contains("(identity lab, push to export 'incoming'): ")
            && line.contains(
                "the client is told the same as for a missing export; this one exists, but \
                 identity 'lab' has no access to it"
            ),
        "{line}"
    );
    let lines = std::fs::read_to_string(&tl).unwrap();
    let refused: Vec<Value> = lines
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["type"] == "refused")
        .collect();
    assert_eq!(refused.len(), 1, "{lines}");
    let r = &refused[0];
    for (k, want) in [
        ("identity", "lab"),
        ("export", "incoming"),
        ("direction", "push"),
        ("code", "access"),
        ("outcome", "refused"),
    ] {
        assert_eq!(r[k], want, "{k}: {r}");
    }
    assert!(r["peer"].as_str().unwrap().starts_with("127.0.0.1:"), "{r}");
    assert!(r["reason"].as_str().unwrap().contains("lab"), "{r}");
}

#[test]
fn a_bad_metrics_address_stops_the_start_naming_metrics() {
    let env = Env::new();
    let root = env.mkdir("in");
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = taken.local_addr().unwrap().to_string();
    for (addr, says) in [
        (busy.as_str(), "metrics: cannot listen"),
        ("nowhere", "--metrics"),
    ] {
        let mut c = zcp();
        c.args(["serve", "--bind", "127.0.0.1", "-p", "0", "--metrics", addr])
            .arg("--root")
            .arg(&root)
            .arg("--key-file")
            .arg(&env.key);
        let o = run(c, 10);
        assert_eq!(o.status.code(), Some(2), "{}", both(&o));
        assert!(text(&o.stderr).contains(says), "{}", both(&o));
    }
    // --check-config shows it.
    let mut c = zcp();
    c.args([
        "serve",
        "--check-config",
        "--metrics",
        "127.0.0.1:9310",
        "--root",
    ])
    .arg(&root)
    .arg("--key-file")
    .arg(&env.key);
    let o = run(c, 10);
    assert!(o.status.success(), "{}", both(&o));
    assert!(
        text(&o.stdout).contains("metrics: http://127.0.0.1:9310/metrics"),
        "{}",
        both(&o)
    );
}

/// A chromedriver on a free port driving a headless Chromium; both end when dropped.
pub struct Browser {
    driver: Child,
    addr: SocketAddr,
    session: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// `None` (with the reason printed) where Chromium or chromedriver is missing.
    pub fn start() -> Option<Browser> {
        let (chromium, driver) = (
            Path::new("/usr/bin/chromium"),
            Path::new("/usr/bin/chromedriver"),
        );
        if !chromium.exists() || !driver.exists() {
            skip("chromium or chromedriver is missing (apt-get install chromium chromium-driver)");
            return None;
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(driver)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn chromedriver");
        let profile = tempfile::tempdir().unwrap();
        let mut b = Browser {
            driver: child,
            addr: ([127, 0, 0, 1], port).into(),
            session: String::new(),
            _profile: profile,
        };
        let end = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(b.addr).is_err() {
            assert!(Instant::now() < end, "chromedriver did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--no-first-run",
                         format!("--user-data-dir={}", b._profile.path().display())],
            },
            "goog:loggingPrefs": {"browser": "ALL"},
        }}});
        let v = b.call("POST", "/session", Some(&caps));
        b.session = v["sessionId"].as_str().expect("a session id").to_string();
        Some(b)
    }

    /// A WebDriver command; its `value`.
    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        let (status, _, text) = http(self.addr, method, path, body);
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        assert_eq!(status, 200, "{method} {path}: {text}");
        v["value"].clone()
    }

    pub fn open(&self, url: &str) {
        self.call(
            "POST",
            &format!("/session/{}/url", self.session),
            Some(&json!({"url": url})),
        );
    }

    /// Runs `script` (a function body) in the page; what it returns.
    pub fn eval(&self, script: &str) -> Value {
        let body = json!({"script": script, "args": []});
        self.call(
            "POST",
            &format!("/session/{}/execute/sync", self.session),
            Some(&body),
        )
    }

    /// Runs `script` until `done` accepts what it returns, up to `secs`.
    pub fn until(&self, script: &str, secs: u64, done: impl Fn(&Value) -> bool) -> Value {
        let end = Instant::now() + Duration::from_secs(secs);
        loop {
            let v = self.eval(script);
            if done(&v) || Instant::now() > end {
                return v;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The browser's console log entries at level SEVERE.
    pub fn severe(&self) -> Vec<Value> {
        let log = self.call(
            "POST",
            &format!("/session/{}/se/log", self.session),
            Some(&json!({"type": "browser"})),
        );
        log.as_array()
            .unwrap()
            .iter()
            .filter(|e| e["level"] == "SEVERE")
            .cloned()
            .collect()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = std::panic::catch_unwind(|| {
                http(
                    self.addr,
                    "DELETE",
                    &format!("/session/{}", self.session),
                    None,
                )
            });
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// What the page shows: active rows, their text, the chart's points, the recent rows' text.
pub const PAGE_STATE: &str = "return {
    rows: document.querySelectorAll('#active tbody tr').length,
    active: document.querySelector('#active tbody').textContent,
    points: Number(document.getElementById('chart').dataset.points),
    recent: document.querySelector('#recent tbody').textContent,
    title: document.title,
    imgs: document.querySelectorAll('img').length,
    bars: document.querySelectorAll('#active progress').length,
};";

/// A child killed when dropped (a rate-limited send the test need not wait out).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_status_page_shows_a_running_push_in_chromium() {
    let Some(browser) = Browser::start() else {
        return;
    };
    let env = Env::new();
    let root = env.mkdir("in");
    let srv = ServerProc::start(&root, &env.key, &["--metrics", "127.0.0.1:0"]);
    let m = monitor_addr(&srv);
    // First a hostile client's file name, all markup, script and terminal escapes.
    crate::hostile::escaping::monitor::push_evil(&env, &srv, &root);
    let src = env.path("slow.bin");
    make_dense(&src, 8 << 20, 3);
    // 16 Mbit/s: 8 MiB takes about four seconds.
    let mut c = send_cmd(
        srv.port,
        &env.key,
        &src,
        "slow.bin",
        &["-q", "--limit-rate", "16M"],
    );
    let _send = Killed(
        c.stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    browser.open(&format!("http://{m}/"));
    let first = browser.until(PAGE_STATE, 8, |v| {
        let a = v["active"].as_str().unwrap_or("");
        v["rows"] == 1 && a.contains("sending") && (a.contains("MiB") || a.contains("KiB"))
    });
    assert_eq!(first["rows"], 1, "{first}");
    let shown = first["active"].as_str().unwrap();
    assert!(
        shown.contains("127.0.0.1") && shown.contains("push"),
        "{shown}"
    );
    assert!(
        shown.contains("MiB") || shown.contains("KiB"),
        "progress in {shown}"
    );
    assert!(
        shown.contains("bit/s") && shown.contains("sendfile"),
        "{shown}"
    );
    // The chart grows by a point a second.
    let p1 = first["points"].as_u64().unwrap();
    let later = browser.until(PAGE_STATE, 4, |v| v["points"].as_u64().unwrap_or(0) > p1);
    assert!(
        later["points"].as_u64().unwrap() > p1,
        "{first} then {later}"
    );
    // The chart's scale follows the last two minutes: a spike ten minutes old (10 Gbit/s)
    // does not flatten 400 Mbit/s now; the scale rounds up to 1, 2 or 5 times a power of ten.
    let scale = |samples: &str| {
        browser
            .eval(&format!("return chartScale({samples}, 1);"))
            .as_f64()
            .unwrap()
    };
    let spike_then_steady = "Array.from({length: 600}, (_, i) => i < 100 ? 1e10 : 4e8)";
    assert_eq!(scale(spike_then_steady), 5e8);
    assert_eq!(scale("[1e10, 4e8]"), 2e10);
    assert_eq!(scale("[]"), 2.0);
    // The hostile name shows as text: no image element was made, no script ran.
    let recent = later["recent"].as_str().unwrap();
    assert!(
        recent.contains("<img src=x") && recent.contains("<script>"),
        "{later}"
    );
    assert_eq!(later["imgs"], 0, "{later}");
    assert_eq!(later["title"], "zcp serve", "{later}");
    let severe = browser.severe();
    assert!(severe.is_empty(), "console errors: {severe:?}");
    // The headers that keep the page to itself.
    let (_, head, _) = http(m, "GET", "/", None);
    for h in [
        "Content-Security-Policy: default-src 'none'; script-src 'self'",
        "X-Content-Type-Options: nosniff",
        "Cache-Control: no-store",
    ] {
        assert!(head.contains(h), "{h} in {head}");
    }
}

/// A client given the metrics port instead of the transfer port: the monitor answers its
/// `Hello` (not an HTTP request) with 400 at once, and the client says an HTTP server
/// answered and which port to give; nothing is stored, the server serves on.
#[test]
fn a_client_at_the_metrics_port_is_told_so() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &["--metrics", "127.0.0.1:0"]);
    let m = monitor_addr(&srv);
    let src = env.path("f");
    make_dense(&src, 100, 1);
    let o = run(send_cmd(m.port(), &env.key, &src, "f", &[]), 20);
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    let err = text(&o.stderr);
    assert!(
        err.contains("is not a zcp server (it sent 'HTTP/1.1 400"),
        "{err}"
    );
    assert!(err.contains("--metrics port?"), "{err}");
    assert!(!err.contains("resume"), "{err}");
    assert!(tree(&root).is_empty());
    let o = run(send_cmd(srv.port, &env.key, &src, "f", &["-q"]), 20);
    assert!(o.status.success(), "{}", both(&o));
}
