//! What a hostile test looks at on the victim's side, before and after the attack: a
//! destination holding things no peer may touch, modes and times, zcp's own files left
//! behind, a process's memory and descriptors, and what the client printed.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use crate::util::*;

/// A destination directory holding things a server must never touch.
pub fn victim_dest(env: &Env) -> std::path::PathBuf {
    let dest = env.mkdir("dest");
    std::fs::create_dir(dest.join("private")).unwrap();
    std::fs::set_permissions(dest.join("private"), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(dest.join("keep.txt"), b"secret key material").unwrap();
    std::fs::set_permissions(
        dest.join("keep.txt"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(0o750)).unwrap();
    dest
}

pub fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

pub fn mtime(p: &Path) -> std::time::SystemTime {
    std::fs::metadata(p).unwrap().modified().unwrap()
}

/// Sets `p`'s mtime to `secs` since the epoch.
pub fn set_mtime(p: &Path, secs: u64) {
    let f = std::fs::File::options().write(true).open(p).unwrap();
    f.set_modified(std::time::UNIX_EPOCH + Duration::from_secs(secs))
        .unwrap();
}

/// A private file (0600) at `private` holding `body`, hard-linked at `link`: the name a peer
/// may reach (`link`) shares its inode with one it may not.
pub fn hard_linked(private: &Path, body: &[u8], link: &Path) {
    std::fs::write(private, body).unwrap();
    std::fs::set_permissions(private, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::hard_link(private, link).unwrap();
}

/// Every chunk MAC a receiver offered (`Have`), in order; panics on a chunk not offered.
pub fn all_offered(macs: &[Option<[u8; 32]>]) -> Vec<[u8; 32]> {
    macs.iter()
        .map(|m| m.expect("every chunk offered"))
        .collect()
}

/// No raw terminal control byte (ESC, BEL, CR) in anything the client printed.
pub fn no_control_bytes(o: &Output) {
    for b in [0x1b_u8, 0x07, b'\r'] {
        assert!(
            !o.stdout.contains(&b) && !o.stderr.contains(&b),
            "raw byte {b:#x} printed: {:?}",
            both(o)
        );
    }
}

pub fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

pub fn rss_of(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("RssAnon:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// `VmHWM` (peak resident memory) of `pid`, in KiB.
pub fn peak_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// `zcp`'s own files (part files, journals) anywhere below `dir`.
pub fn own_files(dir: &Path) -> Vec<String> {
    tree(dir)
        .into_iter()
        .filter(|p| p.rsplit('/').next().unwrap_or("").starts_with(".zcp-"))
        .collect()
}

/// The part file in `dir` (there must be exactly one).
pub fn part_in(dir: &Path) -> String {
    let v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".zcp-") && n.ends_with(".part"))
        .collect();
    assert_eq!(v.len(), 1, "{v:?}");
    v[0].clone()
}
