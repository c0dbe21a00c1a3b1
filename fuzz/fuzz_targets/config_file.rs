//! Any text as `zcp serve --config`'s file, against a fixed fixture (two directories and two
//! key files under $TMPDIR/zcp-fuzz-config, which the seeds name): never panics; an accepted
//! file has at least one export, every export an absolute, real (no link, no `..`) directory
//! that no other export holds or is held by, every identity its own key and only grants on
//! exports of this file; a refusal names the file, and neither it nor `--check-config`'s
//! summary holds a character `escape_text` would escape (no terminal escape from a config
//! file).
#![no_main]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use zcp_report::serve_config::{parse, summary};

const FILE: &str = "/etc/zcp/zcp.toml";

/// The fixture the seeds' paths name, made once per process.
fn fixture() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join("zcp-fuzz-config");
        for d in ["in", "arch", "arch/sub"] {
            let _ = std::fs::create_dir_all(dir.join(d));
        }
        for (k, b, mode) in [
            ("a.key", 1u8, 0o600),
            ("b.key", 2, 0o600),
            ("open.key", 3, 0o644),
        ] {
            let p = dir.join(k);
            let psk =
                zcp_wire::Psk::from_bytes(std::array::from_fn(|i| b.wrapping_mul(31) ^ i as u8));
            std::fs::write(&p, psk.to_file_text()).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        dir
    })
}

fuzz_target!(|data: &[u8]| {
    fixture();
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match parse(text, Path::new(FILE)) {
        Err(m) => {
            assert!(m.starts_with(&format!("config file {FILE}")), "{m}");
            assert_eq!(
                zcp_wire::escape_text(&m),
                m,
                "an error that is not safe to print"
            );
        }
        Ok(c) => {
            let exports = &c.access.exports;
            assert!(!exports.is_empty());
            for (i, e) in exports.iter().enumerate() {
                assert!(zcp_session::check_name(&e.name).is_ok(), "{e:?}");
                assert!(e.path.is_absolute() && e.path.is_dir(), "{e:?}");
                assert_eq!(std::fs::canonicalize(&e.path).unwrap(), e.path);
                for o in &exports[i + 1..] {
                    assert!(!o.path.starts_with(&e.path) && !e.path.starts_with(&o.path));
                }
            }
            assert_eq!(c.key_files.len(), c.access.identities.len());
            for (i, id) in c.access.identities.iter().enumerate() {
                assert!(zcp_session::check_name(&id.name).is_ok(), "{}", id.name);
                assert!(c.access.identities[i + 1..].iter().all(|o| o.psk != id.psk));
                assert!(
                    id.access
                        .keys()
                        .all(|x| exports.iter().any(|e| e.name == *x))
                );
            }
            assert!(c.max_streams != Some(0) && c.max_sessions != Some(0));
            assert!(c.transfer_log.as_ref().is_none_or(|p| p.is_absolute()));
            let s = summary(&c.access, &c.key_files);
            assert!(s.lines().all(|l| zcp_wire::escape_text(l) == l), "{s:?}");
        }
    }
});
