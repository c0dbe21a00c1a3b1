//! Records what `zcp --version` says about the build: the git commit (with `-dirty` when the
//! work tree had uncommitted changes), the compiler and the target. Without git, or outside a
//! git checkout of this package (a crates.io tarball), the commit is `unknown`. Only paths
//! that exist are watched: cargo reruns a script whose watched path is missing on every build.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let commit = match Git::at(&dir) {
        Some(git) => {
            // Rebuilt when the commit moves (HEAD, its branch, packed refs) and when a
            // compiled file changes, which is when the dirty flag can change for the binary.
            for path in git.watched() {
                println!("cargo::rerun-if-changed={}", path.display());
            }
            git.describe().unwrap_or_else(|| "unknown".into())
        }
        None => "unknown".into(),
    };
    for path in ["build.rs", "Cargo.toml", "Cargo.lock", "src", "crates"] {
        let path = dir.join(path);
        if path.exists() {
            println!("cargo::rerun-if-changed={}", path.display());
        }
    }
    let rustc = std::env::var_os("RUSTC")
        .and_then(|rustc| Command::new(rustc).arg("--version").output().ok())
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|| "rustc (version unknown)".into());
    println!("cargo::rustc-env=ZCP_COMMIT={commit}");
    println!("cargo::rustc-env=ZCP_RUSTC={rustc}");
    println!(
        "cargo::rustc-env=ZCP_TARGET={}",
        std::env::var("TARGET").unwrap_or_default()
    );
    println!(
        "cargo::rustc-env=ZCP_PROFILE={}",
        std::env::var("PROFILE").unwrap_or_default()
    );
}

/// The git checkout whose top level is this package's directory.
struct Git {
    dir: PathBuf,
}

impl Git {
    fn at(dir: &Path) -> Option<Git> {
        let git = Git {
            dir: dir.to_path_buf(),
        };
        // Only this package's own checkout: not a repository it happens to sit inside.
        let top = PathBuf::from(git.run(&["rev-parse", "--show-toplevel"])?);
        let same = top.canonicalize().ok()? == dir.canonicalize().ok()?;
        same.then_some(git)
    }

    /// `git` in the package directory; its trimmed output when it succeeds.
    fn run(&self, args: &[&str]) -> Option<String> {
        let out = Command::new("git")
            .args(args)
            .current_dir(&self.dir)
            // `git status` must not rewrite the index (and so trigger another rebuild).
            .env("GIT_OPTIONAL_LOCKS", "0")
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8(out.stdout).ok())
            .flatten()
            .map(|s| s.trim().to_string())
    }

    /// The abbreviated commit, `-dirty` when anything differs from it.
    fn describe(&self) -> Option<String> {
        let hash = self.run(&["rev-parse", "--short=12", "HEAD"])?;
        let dirty = !self.run(&["status", "--porcelain"])?.is_empty();
        Some(if dirty { format!("{hash}-dirty") } else { hash })
    }

    /// The files whose change moves HEAD: HEAD itself, the branch it names, packed refs
    /// (a worktree keeps HEAD apart from the shared refs; git knows where each is).
    fn watched(&self) -> Vec<PathBuf> {
        let mut names = vec!["HEAD".to_string(), "packed-refs".to_string()];
        if let Some(branch) = self.run(&["symbolic-ref", "-q", "HEAD"]) {
            names.push(branch);
        }
        names
            .iter()
            .filter_map(|n| self.run(&["rev-parse", "--git-path", n]))
            .map(|p| self.dir.join(p))
            .filter(|p| p.exists())
            .collect()
    }
}
