//! A client against `zcp serve --metrics`: file names made of markup, script and terminal
//! escapes must reach the metrics, the JSON and the page as inert text (the listener's own
//! defences are in `preauth::monitor`).

use serde_json::Value;

use crate::monitor::{get, label_values, monitor_addr, promtool_passes};
use crate::util::*;

pub const EVIL: &str =
    "<img src=x onerror=document.title='pwned'>\x1b[31m\n<script>document.title='pwned'</script>";

#[test]
fn markup_and_escapes_in_file_names_stay_text() {
    let env = Env::new();
    let root = env.mkdir("in");
    let srv = ServerProc::start(&root, &env.key, &["--metrics", "127.0.0.1:0"]);
    push_evil(&env, &srv, &root);
    // That the page shows the name as text, runs none of it and makes no element of it, is
    // checked in Chromium by monitor::the_status_page_shows_a_running_push_in_chromium (one
    // browser for both).
}

/// Pushes a file named [`EVIL`] into `root` (the server's) and checks what is on disk, that
/// the metrics stay valid with bounded labels, and that the JSON holds the name escaped.
pub fn push_evil(env: &Env, srv: &ServerProc, root: &std::path::Path) {
    let m = monitor_addr(srv);
    let dir = env.mkdir("src");
    let src = dir.join(EVIL.replace('/', "_"));
    std::fs::write(&src, b"payload\n").unwrap();
    let o = run(send_cmd(srv.port, &env.key, &dir, "up/", &["-q", "-r"]), 30);
    // Linux allows the name: it is stored as sent, beneath the root, and nothing else is.
    assert!(o.status.success(), "{}", both(&o));
    let name = src.file_name().unwrap();
    let stored = std::path::Path::new("up/src").join(name);
    assert_eq!(
        tree_paths(root),
        vec!["up".into(), "up/src".into(), stored.clone()]
    );
    assert_eq!(std::fs::read(root.join(&stored)).unwrap(), b"payload\n");
    assert!(no_partials(root, 5));

    let text = get(m, "/metrics");
    promtool_passes(&text);
    let allowed = |v: &str| {
        !v.is_empty()
            && v.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    };
    for v in label_values(&text) {
        assert!(allowed(&v), "label value {v:?} in\n{text}");
    }
    let body = get(m, "/api/sessions");
    assert!(
        !body.contains('\x1b') && !body.contains("\\u001b"),
        "{body}"
    );
    let doc: Value = serde_json::from_str(&body).unwrap();
    let names: Vec<&str> = doc["recent"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "file")
        .filter_map(|r| r["name"].as_str())
        .collect();
    let name = names
        .iter()
        .find(|n| n.contains("<img"))
        .unwrap_or_else(|| panic!("the file in {body}"));
    // Terminal escapes and the newline arrive spelled out, never raw.
    assert!(!name.contains('\n') && !name.contains('\x1b'), "{name:?}");
    assert!(
        name.contains("\\u{1b}[31m") && name.contains("\\n"),
        "{name:?}"
    );
}
