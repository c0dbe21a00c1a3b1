//! `zcp --version`: the release, the protocol it speaks, the commit and toolchain it was built
//! from (recorded by build.rs), and what this host's kernel lets the engines do, probed on
//! a scratch file in the temporary directory
//! (`$TMPDIR`, else `/tmp`). No network, a few milliseconds.

use std::io::Write;
use std::os::fd::AsFd;
use std::path::Path;

use zcp_engine::{RecvEngine, SendEngine};

/// Every line of `zcp --version`; the first is `zcp VERSION`, as clap prints it.
pub(crate) fn version_text() -> String {
    let tmp = std::env::temp_dir();
    let mut lines = vec![
        format!("zcp {}", env!("CARGO_PKG_VERSION")),
        format!("protocol: {}", zcp_wire::PROTOCOL_VERSION),
        format!("commit: {}", env!("ZCP_COMMIT")),
        format!(
            "built: {} for {} ({} profile)",
            env!("ZCP_RUSTC"),
            env!("ZCP_TARGET"),
            env!("ZCP_PROFILE")
        ),
        format!("kernel: {}", kernel()),
    ];
    lines.push(format!(
        "sender engines: {}",
        sender_engines(&tmp).unwrap_or_else(|e| not_probed(&tmp, &e))
    ));
    lines.push(format!(
        "receiver engines: {}",
        receiver_engines(&tmp).unwrap_or_else(|e| not_probed(&tmp, &e))
    ));
    lines.push(format!(
        "https face: TLS in user space (rustls); {}",
        match zcp_engine::sys::ktls_available() {
            Ok(()) => "kernel TLS available, not used".to_string(),
            Err(why) => why,
        }
    ));
    let mut text = lines.join("\n");
    text.push('\n');
    text
}

/// Prints [`version_text`] to standard output; a closed pipe is not an error worth a panic.
pub(crate) fn print_version() {
    let _ = std::io::stdout()
        .lock()
        .write_all(version_text().as_bytes());
}

fn not_probed(dir: &Path, why: &str) -> String {
    format!("not probed ({}: {why})", dir.display())
}

/// The kernel release (`uname -r`), or `unknown`.
fn kernel() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| format!("Linux {}", s.trim()))
        .unwrap_or_else(|_| "unknown".into())
}

/// Each sender engine tried on a small scratch file in `dir`: the ones that work, then the
/// ones that do not and why.
fn sender_engines(dir: &Path) -> Result<String, String> {
    let mut file = tempfile::Builder::new()
        .prefix(".zcp-version-")
        .tempfile_in(dir)
        .map_err(|e| e.to_string())?;
    file.write_all(&[0u8; 4096]).map_err(|e| e.to_string())?;
    let fd = file.as_file().as_fd();
    let results = SendEngine::ALL.map(|e| match e.probe(fd, 4096) {
        (used, None) if used == e => (e.name(), Ok(())),
        (_, why) => (e.name(), Err(why.unwrap_or_default())),
    });
    Ok(engine_list(&results))
}

/// O_DIRECT and splice tried in `dir` as the receiver tries them in its root, the engine
/// `auto` would choose there, where that was and on which filesystem.
fn receiver_engines(dir: &Path) -> Result<String, String> {
    let p = zcp_engine::probe::probe_dir(dir).map_err(|e| e.to_string())?;
    let root = zcp_engine::fs::Root::open(&p.path).map_err(|e| e.to_string())?;
    // On a filesystem in memory, auto times the engines at the first transfer (over
    // loopback, ~0.1 s): too slow for --version, so it says so instead.
    let auto = if p.fs.in_memory {
        "the fastest of splice, rw and direct, timed at the first transfer".to_string()
    } else {
        let c = zcp_engine::recv::choose(RecvEngine::Auto, root.fd(), &p.fs);
        c.engine.name().to_string()
    };
    let results = RecvEngine::ALL
        .into_iter()
        .filter(|e| *e != RecvEngine::Auto)
        .map(|e| match e {
            RecvEngine::Direct => (e.name(), p.direct.clone()),
            RecvEngine::Splice => (e.name(), p.splice.clone()),
            _ => (e.name(), Ok(())),
        })
        .collect::<Vec<_>>();
    Ok(format!(
        "{}; auto chooses {} (probed in {}, {})",
        engine_list(&results),
        auto,
        p.path.display(),
        p.fs.name
    ))
}

/// `a, b, c; not d (why)`.
fn engine_list(results: &[(&str, Result<(), String>)]) -> String {
    let works: Vec<&str> = results
        .iter()
        .filter(|(_, r)| r.is_ok())
        .map(|(n, _)| *n)
        .collect();
    let mut text = if works.is_empty() {
        "none".to_string()
    } else {
        works.join(", ")
    };
    for (name, r) in results {
        if let Err(why) = r {
            text.push_str(&format!("; not {name} ({why})"));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_lists_say_what_works_and_why_not() {
        let ok = |n| (n, Ok(()));
        assert_eq!(engine_list(&[ok("a"), ok("b")]), "a, b");
        assert_eq!(
            engine_list(&[ok("a"), ("d", Err("EINVAL".into())), ok("c")]),
            "a, c; not d (EINVAL)"
        );
        assert_eq!(engine_list(&[("d", Err("x".into()))]), "none; not d (x)");
    }

    #[test]
    fn the_probes_leave_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let send = sender_engines(dir.path()).unwrap();
        assert!(send.contains("rw"), "{send}");
        let recv = receiver_engines(dir.path()).unwrap();
        assert!(recv.contains("auto chooses"), "{recv}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let missing = dir.path().join("missing");
        assert!(sender_engines(&missing).is_err());
        assert!(receiver_engines(&missing).is_err());
    }
}
