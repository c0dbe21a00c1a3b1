//! Pre-shared key files: where they are looked for, how they are checked, how they are made.
//!
//! A key file must belong to a regular file that only its owner can read or write (mode 0600
//! or stricter), as ssh insists for private keys: a key others can read is not secret.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use zcp_wire::Psk;

use crate::error::SessionError;

/// Environment variable naming the key file when `--key-file` is not given.
pub const KEY_ENV: &str = "ZCP_KEY_FILE";

/// Where zcp looks for a key when neither `--key-file` nor `ZCP_KEY_FILE` is set.
pub fn default_key_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("zcp").join("key"))
}

/// Loads the key from `explicit`, else `$ZCP_KEY_FILE`, else [`default_key_path`].
pub fn load_key(explicit: Option<&Path>) -> Result<(Psk, PathBuf), SessionError> {
    let path = match explicit {
        Some(p) => p.to_path_buf(),
        None => match std::env::var_os(KEY_ENV) {
            Some(p) => PathBuf::from(p),
            None => match default_key_path() {
                Some(p) if p.exists() => p,
                _ => {
                    return Err(SessionError::Key(format!(
                        "no key: pass --key-file FILE or set {KEY_ENV} (create a key with `zcp keygen -o FILE` and copy it to both hosts{})",
                        default_key_path()
                            .map(|p| format!("; {} is used when present", p.display()))
                            .unwrap_or_default()
                    )));
                }
            },
        },
    };
    Ok((read_key(&path)?, path))
}

/// Reads and checks one key file.
pub fn read_key(path: &Path) -> Result<Psk, SessionError> {
    let shown = path.display();
    let meta =
        std::fs::metadata(path).map_err(|e| SessionError::Key(format!("key file {shown}: {e}")))?;
    if !meta.is_file() {
        return Err(SessionError::Key(format!(
            "key file {shown} is not a regular file"
        )));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(SessionError::Key(format!(
            "key file {shown} is accessible by other users (mode {mode:04o}); run `chmod 600 {shown}`"
        )));
    }
    if meta.len() > 4096 {
        return Err(SessionError::Key(format!(
            "key file {shown} is {} bytes; a zcp key file is under 200",
            meta.len()
        )));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| SessionError::Key(format!("key file {shown}: {e}")))?;
    Psk::parse(&text).map_err(|e| SessionError::Key(format!("key file {shown}: {e}")))
}

/// Writes a fresh random key to `path` with mode 0600. Refuses to replace an existing file
/// unless `force`.
/// Missing parent directories are created with mode 0700 (only those it creates).
pub fn write_new_key(path: &Path, force: bool) -> Result<(), SessionError> {
    let psk = new_key()?;
    let shown = path.display();
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(|e| SessionError::Key(format!("cannot create {}: {e}", parent.display())))?;
    }
    if force && path.exists() {
        std::fs::remove_file(path)
            .map_err(|e| SessionError::Key(format!("cannot replace {shown}: {e}")))?;
    }
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => SessionError::Key(format!(
                "{shown} already exists; pass --force to replace it"
            )),
            _ => SessionError::Key(format!("cannot create {shown}: {e}")),
        })?;
    // The umask may have cleared bits, never added them; set 0600 exactly anyway.
    f.set_permissions(std::fs::Permissions::from_mode(0o600))
        .and_then(|_| f.write_all(psk.to_file_text().as_bytes()))
        .and_then(|_| f.sync_all())
        .map_err(|e| SessionError::Key(format!("cannot write {shown}: {e}")))
}

/// A fresh random key.
pub fn new_key() -> Result<Psk, SessionError> {
    let bytes: [u8; zcp_wire::PSK_LEN] =
        zcp_engine::sys::random().map_err(|source| SessionError::Io {
            what: "getrandom".into(),
            source,
        })?;
    Ok(Psk::from_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_then_read_and_refuse_open_modes() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("key");
        write_new_key(&p, false).unwrap();
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let k = read_key(&p).unwrap();
        assert!(
            matches!(write_new_key(&p, false), Err(SessionError::Key(m)) if m.contains("--force"))
        );
        write_new_key(&p, true).unwrap();
        assert_ne!(read_key(&p).unwrap(), k, "a new key each time");

        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = read_key(&p).unwrap_err().to_string();
        assert!(e.contains("chmod 600"), "{e}");

        let e = read_key(&d.path().join("missing")).unwrap_err().to_string();
        assert!(e.contains("missing"), "{e}");
    }
}
