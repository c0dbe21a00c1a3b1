//! PUT, MKCOL and DELETE: whole files only, digests checked, permissions and tokens held.

use std::io::Write;
use std::net::TcpStream;

use super::*;
use crate::util::*;

#[test]
fn put_stores_only_whole_files_whose_digests_match() {
    let Some(face) = Face::start(false) else {
        return;
    };
    let archive = &face.site.archive;
    let t = face.token("lab", &[]);
    let body: Vec<u8> = (0..2_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let adler = adler32_hex(&body);
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
