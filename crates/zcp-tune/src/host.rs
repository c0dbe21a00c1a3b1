//! The one view of a host that every check reads through: files beneath a root directory
//! (`/` for the running host, a fixture or a copied tree otherwise) and the few probes that
//! are not files (ethtool ioctls, the path to a peer, the data directory).
//!
//! For the running host the probes ask the kernel (through `zcp_engine::probe`); for a tree
//! they come from the tree's `probes.json` (see [`Recorded`]), so a test or a copy of another
//! host's `/proc` and `/sys` answers every question the live host does, and an answer that is
//! missing is "unknown" with the reason, like a missing file.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use zcp_engine::probe::{DirProbe, Offloads, PathProbe, Rings};

/// The probes that are not files.
pub trait Probes {
    /// The interface's ring sizes (`ethtool -g`).
    fn rings(&self, iface: &str) -> Result<Rings, String>;
    /// The interface's offloads (`ethtool -k`).
    fn offloads(&self, iface: &str) -> Result<Offloads, String>;
    /// The data directory (device, filesystem, space, O_DIRECT and splice).
    fn dir(&self, path: &Path) -> Result<DirProbe, String>;
    /// The path to a peer (connect time, path MTU, segment size).
    fn path(&self, peer: SocketAddr) -> Result<PathProbe, String>;
}

/// A host as the checks see it.
pub struct HostView {
    root: PathBuf,
    probes: Box<dyn Probes>,
}

impl std::fmt::Debug for HostView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostView")
            .field("root", &self.root)
            .finish()
    }
}

impl HostView {
    /// The running host: files under `/`, probes from the kernel.
    pub fn live() -> HostView {
        HostView {
            root: PathBuf::from("/"),
            probes: Box::new(Live),
        }
    }

    /// A host tree at `root` (a copy of `/proc` and `/sys`, and `probes.json`).
    pub fn tree(root: &Path) -> HostView {
        HostView {
            root: root.to_path_buf(),
            probes: Box::new(Recorded::load(root)),
        }
    }

    /// A host tree at `root` with the given probes.
    pub fn with_probes(root: &Path, probes: Box<dyn Probes>) -> HostView {
        HostView {
            root: root.to_path_buf(),
            probes,
        }
    }

    /// The directory the host's files are read beneath.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn at(&self, path: &str) -> PathBuf {
        self.root.join(path.trim_start_matches('/'))
    }

    /// The contents of `path` (absolute, as on the host), without the trailing newline; the
    /// error names the file and why.
    pub fn read(&self, path: &str) -> Result<String, String> {
        std::fs::read_to_string(self.at(path))
            .map(|s| s.trim_end_matches('\n').to_string())
            .map_err(|e| format!("cannot read {path}: {}", reason(&e)))
    }

    /// The names in directory `path`, sorted.
    pub fn list(&self, path: &str) -> Result<Vec<String>, String> {
        let mut names: Vec<String> = std::fs::read_dir(self.at(path))
            .map_err(|e| format!("cannot list {path}: {}", reason(&e)))?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        Ok(names)
    }

    /// The last component of the symbolic link `path`'s target (`.../virtio2` -> `virtio2`).
    pub fn link_name(&self, path: &str) -> Option<String> {
        let target = std::fs::read_link(self.at(path)).ok()?;
        Some(target.file_name()?.to_string_lossy().into_owned())
    }

    /// Whether `path` exists.
    pub fn exists(&self, path: &str) -> bool {
        self.at(path).exists()
    }

    /// The host's non-file probes.
    pub fn probes(&self) -> &dyn Probes {
        self.probes.as_ref()
    }
}

/// An I/O error as a short reason ("No such file or directory").
fn reason(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// The running host's probes.
struct Live;

impl Probes for Live {
    fn rings(&self, iface: &str) -> Result<Rings, String> {
        zcp_engine::probe::rings(iface).map_err(|e| format!("ethtool -g {iface}: {}", reason(&e)))
    }

    fn offloads(&self, iface: &str) -> Result<Offloads, String> {
        zcp_engine::probe::offloads(iface)
            .map_err(|e| format!("ethtool -k {iface}: {}", reason(&e)))
    }

    fn dir(&self, path: &Path) -> Result<DirProbe, String> {
        zcp_engine::probe::probe_dir(path)
            .map_err(|e| format!("cannot examine {}: {}", path.display(), reason(&e)))
    }

    fn path(&self, peer: SocketAddr) -> Result<PathProbe, String> {
        zcp_engine::probe::probe_path(peer, PEER_TRIES, PEER_TIMEOUT)
            .map_err(|e| format!("cannot connect to {peer}: {}", reason(&e)))
    }
}

/// TCP connections made to measure a peer's RTT.
pub const PEER_TRIES: u32 = 5;
/// How long each may take.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(3);

/// Probes recorded in a host tree's `probes.json`. Every key is optional; a probe that is
/// absent (or a string in place of its value: the error the host gave) is unknown with that
/// reason.
///
/// ```json
/// { "rings":    { "eth0": { "rx": 512, "rx_max": 8192, "tx": 512, "tx_max": 8192 } },
///   "offloads": { "eth0": { "gro": true, "gso": true, "tso": false } },
///   "dir":  { "path": "/data", "dev": [259, 1], "fs": "xfs", "in_memory": false,
///             "free_bytes": 1000, "total_bytes": 2000, "direct": null, "splice": null },
///   "path": { "connect_min_us": 100, "connect_median_us": 110, "connect_max_us": 120, "samples": 5,
///             "path_mtu": 9000, "mss": 8948, "local": "10.0.0.1:40000" } }
/// ```
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recorded {
    #[serde(default)]
    rings: std::collections::BTreeMap<String, Answer<RecRings>>,
    #[serde(default)]
    offloads: std::collections::BTreeMap<String, Answer<RecOffloads>>,
    dir: Option<Answer<RecDir>>,
    path: Option<Answer<RecPath>>,
    #[serde(skip)]
    missing: Option<String>,
}

/// A recorded answer: the value, or the error the host gave.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Answer<T> {
    Value(T),
    Error(String),
}

impl<T: Clone> Answer<T> {
    fn get(&self) -> Result<T, String> {
        match self {
            Answer::Value(v) => Ok(v.clone()),
            Answer::Error(e) => Err(e.clone()),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RecRings {
    rx: u32,
    rx_max: u32,
    tx: u32,
    tx_max: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RecOffloads {
    gro: bool,
    gso: bool,
    tso: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RecDir {
    path: PathBuf,
    dev: (u32, u32),
    fs: String,
    in_memory: bool,
    free_bytes: u64,
    total_bytes: u64,
    direct: Option<String>,
    splice: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RecPath {
    connect_min_us: u64,
    /// Absent in trees recorded before the median was probed: the minimum then.
    #[serde(default)]
    connect_median_us: Option<u64>,
    connect_max_us: u64,
    samples: u32,
    path_mtu: Option<u32>,
    mss: Option<u32>,
    local: SocketAddr,
}

impl Recorded {
    /// Reads `root/probes.json`; when it is missing or malformed every probe is unknown and
    /// says why.
    pub fn load(root: &Path) -> Recorded {
        let file = root.join("probes.json");
        let text = match std::fs::read_to_string(&file) {
            Ok(t) => t,
            Err(e) => {
                return Recorded {
                    missing: Some(format!(
                        "not recorded: cannot read {}: {}",
                        file.display(),
                        reason(&e)
                    )),
                    ..Recorded::default()
                };
            }
        };
        serde_json::from_str(&text).unwrap_or_else(|e| Recorded {
            missing: Some(format!(
                "not recorded: {} is malformed: {e}",
                file.display()
            )),
            ..Recorded::default()
        })
    }

    fn absent(&self, what: &str) -> String {
        self.missing
            .clone()
            .unwrap_or_else(|| format!("not recorded: probes.json has no {what}"))
    }
}

impl Probes for Recorded {
    fn rings(&self, iface: &str) -> Result<Rings, String> {
        let r = self
            .rings
            .get(iface)
            .ok_or_else(|| self.absent(&format!("rings for {iface}")))?
            .get()?;
        Ok(Rings {
            rx: r.rx,
            rx_max: r.rx_max,
            tx: r.tx,
            tx_max: r.tx_max,
        })
    }

    fn offloads(&self, iface: &str) -> Result<Offloads, String> {
        let o = self
            .offloads
            .get(iface)
            .ok_or_else(|| self.absent(&format!("offloads for {iface}")))?
            .get()?;
        Ok(Offloads {
            gro: o.gro,
            gso: o.gso,
            tso: o.tso,
        })
    }

    fn dir(&self, _path: &Path) -> Result<DirProbe, String> {
        let d = self.dir.as_ref().ok_or_else(|| self.absent("dir"))?.get()?;
        Ok(DirProbe {
            path: d.path,
            dev: d.dev,
            fs: zcp_engine::fs::FsInfo {
                name: d.fs,
                in_memory: d.in_memory,
                free_bytes: d.free_bytes,
                dio_align: None,
            },
            total_bytes: d.total_bytes,
            direct: d.direct.map_or(Ok(()), Err),
            splice: d.splice.map_or(Ok(()), Err),
        })
    }

    fn path(&self, _peer: SocketAddr) -> Result<PathProbe, String> {
        let p = self
            .path
            .as_ref()
            .ok_or_else(|| self.absent("path"))?
            .get()?;
        Ok(PathProbe {
            connect_min: Duration::from_micros(p.connect_min_us),
            connect_median: Duration::from_micros(p.connect_median_us.unwrap_or(p.connect_min_us)),
            connect_max: Duration::from_micros(p.connect_max_us),
            samples: p.samples,
            path_mtu: p.path_mtu,
            mss: p.mss,
            local: p.local,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_beneath_the_root_and_names_what_is_missing() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        std::fs::create_dir_all(dir.join("proc/sys/net/core")).unwrap();
        std::fs::write(dir.join("proc/sys/net/core/rmem_max"), "212992\n").unwrap();
        let host = HostView::tree(dir);
        assert_eq!(host.read("/proc/sys/net/core/rmem_max").unwrap(), "212992");
        let e = host.read("/proc/sys/net/core/wmem_max").unwrap_err();
        assert_eq!(
            e,
            "cannot read /proc/sys/net/core/wmem_max: No such file or directory"
        );
        assert!(host.list("/sys/class/net").is_err());
        let e = host.probes().rings("eth0").unwrap_err();
        assert!(e.starts_with("not recorded: cannot read"), "{e}");
    }

    #[test]
    fn recorded_probes_give_values_errors_and_absences() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        std::fs::write(
            dir.join("probes.json"),
            r#"{"rings": {"eth0": {"rx": 1, "rx_max": 2, "tx": 3, "tx_max": 4},
                "eth1": "ethtool -g eth1: Operation not supported"}}"#,
        )
        .unwrap();
        let host = HostView::tree(dir);
        let p = host.probes();
        assert_eq!(p.rings("eth0").unwrap().tx_max, 4);
        assert_eq!(
            p.rings("eth1").unwrap_err(),
            "ethtool -g eth1: Operation not supported"
        );
        assert_eq!(
            p.rings("eth2").unwrap_err(),
            "not recorded: probes.json has no rings for eth2"
        );
        std::fs::write(dir.join("probes.json"), "{\"rings\": 5}").unwrap();
        let e = HostView::tree(dir).probes().offloads("eth0").unwrap_err();
        assert!(e.contains("is malformed"), "{e}");
    }
}
