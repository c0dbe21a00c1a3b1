//! The data directory: filesystem, mount options, block device, I/O scheduler, read-ahead,
//! free space, and whether O_DIRECT and splice work there.

use std::path::Path;

use crate::host::HostView;
use crate::units;
use crate::{Check, Status};

const SEC: &str = "storage";
/// Read-ahead below this leaves striped disks idle on cold sequential reads.
const READ_AHEAD_KB: u64 = 4096;

/// One line of `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mount {
    dev: (u32, u32),
    point: String,
    options: String,
    fstype: String,
    source: String,
}

fn mounts(host: &HostView) -> Result<Vec<Mount>, String> {
    let t = host.read("/proc/self/mountinfo")?;
    let mut out = Vec::new();
    for line in t.lines() {
        let (left, right) = match line.split_once(" - ") {
            Some(x) => x,
            None => continue,
        };
        let l: Vec<&str> = left.split(' ').collect();
        let r: Vec<&str> = right.split(' ').collect();
        if l.len() < 6 || r.len() < 3 {
            continue;
        }
        let Some((maj, min)) = l[2].split_once(':') else {
            continue;
        };
        let (Ok(maj), Ok(min)) = (maj.parse(), min.parse()) else {
            continue;
        };
        out.push(Mount {
            dev: (maj, min),
            point: l[4].replace("\\040", " "),
            options: {
                let mut o: Vec<&str> = Vec::new();
                for x in l[5].split(',').chain(r[2].split(',')) {
                    if !o.contains(&x) {
                        o.push(x);
                    }
                }
                o.join(",")
            },
            fstype: r[0].to_string(),
            source: r[1].to_string(),
        });
    }
    Ok(out)
}

/// The mount holding `path` on device `dev`: the longest mount point above it on that device
/// (bind mounts share a device), else the longest above it at all.
fn mount_of<'a>(ms: &'a [Mount], path: &Path, dev: (u32, u32)) -> Option<&'a Mount> {
    let above = |m: &&Mount| path.starts_with(&m.point);
    ms.iter()
        .filter(above)
        .filter(|m| m.dev == dev)
        .max_by_key(|m| m.point.len())
        .or_else(|| ms.iter().filter(above).max_by_key(|m| m.point.len()))
}

/// The whole disk under a device: `sda` for `sda1`, itself for a disk.
fn disk_of(host: &HostView, dev: (u32, u32), source: Option<&str>) -> Result<String, String> {
    let name = host
        .read(&format!("/sys/dev/block/{}:{}/uevent", dev.0, dev.1))
        .ok()
        .and_then(|u| {
            u.lines()
                .find_map(|l| l.strip_prefix("DEVNAME=").map(str::to_string))
        })
        .or_else(|| {
            source
                .and_then(|s| s.strip_prefix("/dev/"))
                .filter(|n| host.exists(&format!("/sys/class/block/{n}")))
                .map(str::to_string)
        })
        .ok_or_else(|| {
            format!(
                "device {}:{} is not a block device (a memory, network or overlay filesystem)",
                dev.0, dev.1
            )
        })?;
    if host.exists(&format!("/sys/block/{name}")) {
        return Ok(name);
    }
    host.list("/sys/block")?
        .into_iter()
        .find(|d| host.exists(&format!("/sys/block/{d}/{name}")))
        .ok_or_else(|| format!("no disk in /sys/block holds {name}"))
}

/// Every storage check for `path`.
pub(crate) fn checks(host: &HostView, path: &Path) -> Vec<Check> {
    let d = match host.probes().dir(path) {
        Ok(d) => d,
        Err(e) => return vec![Check::unknown(SEC, "data directory", e)],
    };
    let mut out = vec![
        Check::new(
            SEC,
            "data directory",
            d.path.display().to_string(),
            Status::Info,
        )
        .want("-"),
    ];
    let ms = mounts(host);
    let mount = ms.as_ref().ok().and_then(|ms| mount_of(ms, &d.path, d.dev));
    let fs_cur = match mount {
        Some(m) => format!("{} on {}", m.fstype, m.point),
        None => d.fs.name.clone(),
    };
    out.push(if d.fs.in_memory {
        Check::new(SEC, "filesystem", fs_cur, Status::Info)
            .want("a disk filesystem (xfs, ext4)")
            .note("lives in memory: transfers here measure RAM, not storage")
    } else {
        Check::new(SEC, "filesystem", fs_cur, Status::Info).want("-")
    });
    out.push(mount_options(mount, &ms, &d.path));
    match disk_of(host, d.dev, mount.map(|m| m.source.as_str())) {
        Err(e) => out.push(Check::unknown(SEC, "block device", e)),
        Ok(disk) => out.extend(block_device(host, &disk)),
    }
    out.push(free_space(d.fs.free_bytes, d.total_bytes));
    out.push(match &d.direct {
        Ok(()) => Check::new(SEC, "O_DIRECT", "works", Status::Ok).want("works"),
        Err(e) => Check::new(SEC, "O_DIRECT", "fails", Status::Info)
            .want("works")
            .note(format!(
                "{e}; zcp's receiver falls back to splice or read/write here"
            )),
    });
    out.push(match &d.splice {
        Ok(()) => Check::new(SEC, "splice", "works", Status::Ok).want("works"),
        Err(e) => Check::new(SEC, "splice", "fails", Status::Info)
            .want("works")
            .note(format!("{e}; zcp's receiver falls back to read/write here")),
    });
    out
}

/// Mount options that make every write wait, or every read write.
fn mount_options(mount: Option<&Mount>, ms: &Result<Vec<Mount>, String>, path: &Path) -> Check {
    match (mount, ms) {
        (Some(m), _) => {
            let opts: Vec<&str> = m.options.split(',').collect();
            if opts.iter().any(|o| *o == "sync" || *o == "dirsync") {
                Check::new(SEC, "mount options", m.options.clone(), Status::Tune)
                    .want("no sync; noatime or relatime")
                    .note("sync makes every write wait for the disk; zcp already syncs each file once at the end")
                    .fix(format!("mount -o remount,async {}", m.point))
            } else if opts.contains(&"strictatime") {
                Check::new(SEC, "mount options", m.options.clone(), Status::Tune)
                    .want("noatime or relatime")
                    .note("strictatime writes an inode on every read")
                    .fix(format!("mount -o remount,relatime {}", m.point))
            } else {
                Check::new(SEC, "mount options", m.options.clone(), Status::Ok)
                    .want("no sync; noatime or relatime")
            }
        }
        (None, Err(e)) => Check::unknown(SEC, "mount options", e.clone()),
        (None, Ok(_)) => Check::unknown(
            SEC,
            "mount options",
            format!("no mount in /proc/self/mountinfo holds {}", path.display()),
        ),
    }
}

/// The disk under the directory: its kind, scheduler and read-ahead.
fn block_device(host: &HostView, disk: &str) -> Vec<Check> {
    let mut out = Vec::new();
    let q = format!("/sys/block/{disk}/queue");
    let rotational = host.read(&format!("{q}/rotational")).ok();
    let kind = match rotational.as_deref().map(str::trim) {
        Some("1") => "rotating disk",
        Some("0") => "solid state",
        _ => "kind unknown",
    };
    out.push(
        Check::new(
            SEC,
            "block device",
            format!("{disk} ({kind})"),
            Status::Info,
        )
        .want("-"),
    );
    let want = if kind == "rotating disk" {
        "mq-deadline"
    } else {
        "none"
    };
    out.push(match host.read(&format!("{q}/scheduler")) {
        Ok(s) => {
            let cur = s
                .split_whitespace()
                .find_map(|w| w.strip_prefix('[')?.strip_suffix(']'))
                .unwrap_or(s.trim())
                .to_string();
            let offered = s
                .split_whitespace()
                .any(|w| w.trim_matches(['[', ']']) == want);
            if cur == want || !offered {
                Check::new(SEC, "io scheduler", cur, Status::Ok).want(want)
            } else {
                Check::new(SEC, "io scheduler", cur, Status::Tune)
                    .want(want)
                    .note(format!(
                        "for a {kind}, {want} adds the least latency; offered: {}",
                        s.trim()
                    ))
                    .fix(format!("echo {want} > {q}/scheduler"))
            }
        }
        Err(e) => Check::unknown(SEC, "io scheduler", e).want(want),
    });
    out.push(
            match host.read(&format!("{q}/read_ahead_kb")).map(|r| r.trim().parse::<u64>()) {
                Ok(Ok(kb)) if kb >= READ_AHEAD_KB => {
                    Check::new(SEC, "read-ahead", format!("{kb} KiB"), Status::Ok)
                        .want(format!(">= {READ_AHEAD_KB} KiB"))
                }
                Ok(Ok(kb)) => Check::new(SEC, "read-ahead", format!("{kb} KiB"), Status::Tune)
                    .want(format!(">= {READ_AHEAD_KB} KiB"))
                    .note("large sequential reads of files not in the page cache keep more of a striped disk busy")
                    .fix(format!("echo {READ_AHEAD_KB} > {q}/read_ahead_kb")),
                Ok(Err(_)) => Check::unknown(SEC, "read-ahead", format!("{q}/read_ahead_kb is not a number")),
                Err(e) => Check::unknown(SEC, "read-ahead", e),
            },
        );
    out
}

/// Room left on the filesystem.
fn free_space(free: u64, total: u64) -> Check {
    let pct = if total > 0 {
        free as f64 * 100.0 / total as f64
    } else {
        0.0
    };
    let shown = format!(
        "{} of {} ({pct:.0}%)",
        units::bytes(free),
        units::bytes(total)
    );
    if total > 0 && pct < 10.0 {
        Check::new(SEC, "free space", shown, Status::Tune)
            .want(">= 10% free")
            .note("nearly full filesystems fragment large files and slow every write")
    } else {
        Check::new(SEC, "free space", shown, Status::Info).want("room for the largest transfer")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_innermost_mount_on_the_device() {
        let m = |dev, point: &str| Mount {
            dev,
            point: point.into(),
            options: "rw".into(),
            fstype: "ext4".into(),
            source: "/dev/x".into(),
        };
        let ms = vec![m((8, 1), "/"), m((8, 2), "/data"), m((8, 1), "/data/bind")];
        let p = Path::new("/data/bind/x");
        assert_eq!(mount_of(&ms, p, (8, 1)).unwrap().point, "/data/bind");
        assert_eq!(
            mount_of(&ms, Path::new("/data/y"), (8, 2)).unwrap().point,
            "/data"
        );
        assert_eq!(
            mount_of(&ms, Path::new("/datax"), (9, 9)).unwrap().point,
            "/"
        );
    }
}
