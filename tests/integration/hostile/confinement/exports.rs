//! A client that holds a key valid for one export (write `incoming`, read `archive`) and
//! tries to reach beyond it: export names with traversal, absolute or empty, entry paths
//! that climb out of the export, pulls that name another export's files. Nothing may be
//! written outside `incoming`, and nothing read from where it may not read. (Confinement to
//! an export.)

use zcp_wire::{Message, Open, PutFile};

use crate::hostile::peer::*;
use crate::serve_config::Site;
use crate::util::*;

/// The handshake with `key`, then an `Open` naming `export`; the raw session if the server
/// answered `Opened`, its refusal otherwise.
fn open(port: u16, key: &std::path::Path, export: &str, pull: bool) -> Result<Raw, String> {
    let psk = zcp_wire::Psk::parse(&std::fs::read_to_string(key).unwrap()).unwrap();
    let mut raw = Raw::authenticate(port, psk);
    assert!(raw.est.exports, "the server says it has exports");
    raw.send(&Message::Open(Box::new(Open {
        recursive: true,
        recv_engine: "rw".into(),
        send_engine: "rw".into(),
        export: export.into(),
        ..base_open(pull)
    })));
    match raw.recv_any() {
        Ok(Message::Opened { .. }) => Ok(raw),
        Ok(Message::Error { message, .. }) => Err(message),
        other => Err(format!("{other:?}")),
    }
}

/// Everything beneath the site's directory but the exports' own trees, with the archive's.
fn outside(site: &Site) -> Vec<String> {
    tree(site.env.dir.path())
        .into_iter()
        .filter(|p| !p.starts_with("srv/incoming/"))
        .collect()
}

#[test]
fn export_names_that_climb_or_point_elsewhere_are_refused() {
    let site = Site::new();
    std::fs::write(site.archive.join("old.txt"), b"archived\n").unwrap();
    let mut srv = site.serve();
    let before = outside(&site);
    for export in [
        "../archive",
        "incoming/../archive",
        "incoming/",
        "/srv/archive",
        &site.archive.display().to_string(),
        ".",
        "..",
        "",
        "archive", // granted, but read-only: no push
        "srv",
    ] {
        let r = open(srv.port, &site.observatory, export, false);
        let Err(why) = r else {
            panic!("export {export:?} was opened for a push")
        };
        assert!(
            why.contains("no export") || why.contains("may not write") || why.contains("name one"),
            "{export:?}: {why}"
        );
    }
    assert!(srv.alive());
    assert_eq!(outside(&site), before);
    assert_eq!(
        std::fs::read(site.archive.join("old.txt")).unwrap(),
        b"archived\n"
    );
}

#[test]
fn entry_paths_cannot_leave_the_export() {
    let site = Site::new();
    let mut srv = site.serve();
    let before = outside(&site);
    let mut raw = open(srv.port, &site.observatory, "incoming", false).expect("granted");
    for (i, dest) in [
        &b"../archive/x"[..],
        b"../../escaped",
        b"/tmp/abs",
        b"a/../../archive/y",
        b"..",
    ]
    .into_iter()
    .enumerate()
    {
        raw.send(&Message::PutFile(PutFile {
            mtime_sec: 0,
            ..put_file(i as u32, dest, 10, 64 * 1024)
        }));
        match raw.recv() {
            Ok(Message::FileFailed { code, .. }) => {
                assert_eq!(code, zcp_wire::ErrorCode::BadPath, "{dest:?}")
            }
            // Refused as the whole session is also nothing written.
            Ok(Message::Error { .. }) | Err(_) => break,
            Ok(other) => panic!("{dest:?}: {other:?}"),
        }
    }
    for path in [&b"../archive"[..], b"../../made"] {
        raw.send(&Message::MakeDir {
            path: path.to_vec(),
            top: false,
        });
    }
    drop(raw);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(srv.alive());
    assert_eq!(outside(&site), before, "nothing outside incoming changed");
    assert!(
        tree(&site.incoming).is_empty(),
        "{:?}",
        tree(&site.incoming)
    );
}

#[test]
fn a_pull_cannot_name_another_exports_files() {
    let site = Site::new();
    std::fs::write(site.incoming.join("secret.txt"), b"not yours\n").unwrap();
    let mut srv = site.serve();
    // lab may read archive; it asks for incoming's file through it.
    let mut raw = open(srv.port, &site.lab, "archive", true).expect("granted");
    raw.send(&Message::Get {
        path: b"../incoming/secret.txt".to_vec(),
        dest: b"secret.txt".to_vec(),
    });
    raw.send(&Message::GetEnd);
    match raw.recv_any() {
        Ok(Message::Error { code, message }) => {
            assert_eq!(code, zcp_wire::ErrorCode::BadPath, "{message}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    // And the incoming export itself does not exist for lab.
    let r = open(srv.port, &site.lab, "incoming", true);
    assert!(r.is_err_and(|m| m.contains("no export 'incoming'")));
    assert!(srv.alive());
}
