//! Bearer tokens: identity, path, activities, expiry, signature, key rotation; and what
//! `zcp token` and `[http]` say of bad input.

use std::time::Duration;

use super::*;
use crate::serve_config::Site;
use crate::util::*;

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
