//! Real clients over TLS: curl, davix and gfal2, each with a token from `zcp token`.

use std::process::Command;

use super::*;
use crate::util::*;

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
    let o = gfal(&["gfal-sum", &url("/archive/run3.dat"), "ADLER32"]);
    assert!(o.status.success(), "{}", both(&o));
    assert!(
        text(&o.stdout).trim().ends_with(&adler32_hex(&data)),
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
