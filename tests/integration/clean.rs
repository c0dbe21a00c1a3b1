//! `zcp clean` and the start-up count of `zcp serve`: only zcp's own part files and journals
//! are listed and removed, never through a symlink, never one a transfer holds; `--dry-run`
//! removes nothing; `--older-than` keeps recent ones; usage mistakes exit 2, a file that could
//! not be removed exits 1 and is named.

use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::util::*;

const K1: &str = "0123456789abcdef";
const K2: &str = "1111111111111111";
const K3: &str = "2222222222222222";

/// Writes `bytes` bytes at `p` (parents made) last modified `age` ago.
fn leftover(p: &Path, bytes: usize, age: Duration) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, vec![0x5a; bytes]).unwrap();
    std::fs::File::options()
        .write(true)
        .open(p)
        .unwrap()
        .set_modified(SystemTime::now() - age)
        .unwrap();
}

fn clean(root: &Path, extra: &[&str]) -> std::process::Output {
    let mut c = zcp();
    c.arg("clean").arg(root).args(extra);
    run(c, 60)
}

const DAY: Duration = Duration::from_secs(86_400);

/// A root with zcp's leftovers of different ages, look-alikes, a FIFO and symlinks (one to
/// a directory outside full of part files, one named like a part file pointing at a file
/// outside); returns (root, outside).
fn messy_tree(env: &Env) -> (std::path::PathBuf, std::path::PathBuf) {
    let root = env.mkdir("root");
    let outside = env.mkdir("outside");
    // Stale: a part file and its journal (10 days), a lone journal deep down (8 days).
    leftover(&root.join(format!("run/.zcp-{K1}.part")), 300_000, 10 * DAY);
    leftover(&root.join(format!("run/.zcp-{K1}.journal")), 120, 10 * DAY);
    leftover(&root.join(format!("a/b/c/.zcp-{K3}.journal")), 80, 8 * DAY);
    // Recent: a part file written an hour ago.
    leftover(
        &root.join(format!("obs/.zcp-{K2}.part")),
        5000,
        Duration::from_secs(3600),
    );
    // Not zcp's, however old and however alike.
    let old = 30 * DAY;
    for n in [
        "run/.zcp-0123456789ABCDEF.part",
        "run/.zcp-0123456789abcdef.part.bak",
        "run/.zcp-0123456789abcde.journal",
        "run/.zcp-bench-4242.part",
        "run/data.part",
        "run/zcp-0123456789abcdef.part",
        "run/big.bin",
    ] {
        leftover(&root.join(n), 10, old);
    }
    mkfifo(&root.join(format!("run/.zcp-{K3}.part")));
    std::fs::create_dir_all(root.join(format!("dir/.zcp-{K2}.journal"))).unwrap();
    leftover(&root.join(format!("dir/.zcp-{K2}.journal/inside")), 10, old);
    // Symlinks are never followed.
    leftover(&outside.join(format!(".zcp-{K1}.part")), 10, old);
    leftover(&outside.join(format!(".zcp-{K1}.journal")), 10, old);
    leftover(&outside.join("victim"), 10, old);
    symlink(&outside, root.join("link")).unwrap();
    symlink(outside.join("victim"), root.join(format!(".zcp-{K2}.part"))).unwrap();
    (root, outside)
}

/// What is left of the messy tree that `zcp clean` must never touch.
fn untouchables(root: &Path, outside: &Path) -> Vec<String> {
    let mut v: Vec<String> = tree(root)
        .into_iter()
        .filter(|p| {
            !p.ends_with(&format!(".zcp-{K1}.part"))
                && !p.ends_with(&format!(".zcp-{K1}.journal"))
                && !p.ends_with(&format!("c/.zcp-{K3}.journal"))
                && !p.ends_with(&format!("obs/.zcp-{K2}.part"))
        })
        .collect();
    v.extend(tree(outside).into_iter().map(|p| format!("outside/{p}")));
    v
}

#[test]
fn clean_removes_only_zcps_own_stale_files_and_never_follows_a_symlink() {
    let env = Env::new();
    let (root, outside) = messy_tree(&env);
    let before = tree(&root);
    let keep = untouchables(&root, &outside);

    // --dry-run lists everything it would remove, with sizes and ages, and removes nothing.
    let o = clean(&root, &["--dry-run"]);
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
    let out = text(&o.stdout);
    for name in [
        format!("run/.zcp-{K1}.part"),
        format!("run/.zcp-{K1}.journal"),
        format!("a/b/c/.zcp-{K3}.journal"),
        format!("obs/.zcp-{K2}.part"),
    ] {
        let line = out
            .lines()
            .find(|l| l.ends_with(&name))
            .unwrap_or_else(|| panic!("{name} not listed: {out}"));
        assert!(line.starts_with("would remove"), "{line}");
    }
    assert!(out.contains("293 KiB"), "the part file's size: {out}");
    assert!(out.contains("10d 0h"), "its age: {out}");
    assert!(
        out.contains("would remove 4 files") && out.contains("nothing removed"),
        "{out}"
    );
    assert_eq!(out.lines().count(), 5, "four files and the totals: {out}");
    assert_eq!(tree(&root), before, "a dry run removes nothing");

    // --older-than keeps the recent part file.
    let o = clean(&root, &["--older-than", "7d"]);
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
    let out = text(&o.stdout);
    assert!(
        out.contains("removed 3 files") && out.contains("1 file newer than 7d, kept"),
        "{out}"
    );
    let mut want = keep.clone();
    want.push(format!("obs/.zcp-{K2}.part"));
    want.sort();
    let mut now = untouchables(&root, &outside);
    now.extend(
        tree(&root)
            .into_iter()
            .filter(|p| p.ends_with(&format!("obs/.zcp-{K2}.part"))),
    );
    now.sort();
    assert_eq!(now, want);
    assert!(!root.join(format!("run/.zcp-{K1}.part")).exists());
    assert!(!root.join(format!("a/b/c/.zcp-{K3}.journal")).exists());

    // Without it, everything stale goes; nothing else ever does.
    let o = clean(&root, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
    assert!(text(&o.stdout).contains("removed 1 file"), "{}", both(&o));
    assert_eq!(untouchables(&root, &outside), keep);
    assert_eq!(
        std::fs::read(outside.join("victim")).unwrap(),
        vec![0x5a; 10]
    );
    let o = clean(&root, &[]);
    assert!(text(&o.stdout).contains("no partial files"), "{}", both(&o));
}

#[test]
fn clean_leaves_a_part_file_a_transfer_holds_and_removes_it_once_let_go() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    // A session holds `t.bin`'s part file (announced, one chunk durable, not finished).
    let mut raw = Raw::connect(srv.port, env.psk());
    let mut data = raw.data(srv.port, 0).unwrap();
    let body = vec![3u8; 131_072];
    assert!(
        matches!(
            raw.put(0, b"t.bin", 131_072),
            zcp_wire::Message::FileReady { .. }
        ),
        "setup"
    );
    push_first_chunk(&mut raw, &mut data, &body);
    let listed = own_files_of(&root);
    assert_eq!(listed.len(), 2, "a part file and its journal: {listed:?}");
    for extra in [&["--dry-run"][..], &[]] {
        let o = clean(&root, extra);
        assert_eq!(o.status.code(), Some(0), "{}", both(&o));
        let out = text(&o.stdout);
        assert_eq!(
            out.lines().filter(|l| l.starts_with("in use")).count(),
            2,
            "{out}"
        );
        assert!(
            out.contains("2 files in use by a running transfer, left alone"),
            "{out}"
        );
        assert_eq!(own_files_of(&root), listed);
    }
    // The session ends: the part file is kept for a resume, no longer held.
    drop(data);
    drop(raw);
    assert!(srv.wait_log("failed", 10), "{}", srv.log());
    let end = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let o = clean(&root, &[]);
        if text(&o.stdout).contains("removed 2 files") {
            break;
        }
        assert!(std::time::Instant::now() < end, "{}", both(&o));
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(own_files_of(&root), Vec::<String>::new());
}

/// Sends chunk 0 of `body` (64 KiB chunks) of file 0 with its MAC, and waits for its
/// acknowledgement: durable, journaled.
fn push_first_chunk(raw: &mut Raw, data: &mut std::net::TcpStream, body: &[u8]) {
    use std::io::Write;
    let c = &body[..65536];
    let mut h = raw.est.keys.chunk_hasher(0, 0, 65536);
    h.update(c);
    let mac = *h.finalize().as_bytes();
    data.write_all(&zcp_wire::ChunkHeader::data(0, 0, 65536).encode())
        .unwrap();
    data.write_all(c).unwrap();
    raw.send(&zcp_wire::Message::ChunkMac {
        file_id: 0,
        index: 0,
        mac,
    });
    loop {
        match raw.recv_any().unwrap() {
            zcp_wire::Message::ChunkAck { ok: true, .. } => return,
            zcp_wire::Message::Progress { .. } => {}
            other => panic!("expected ChunkAck, got {other:?}"),
        }
    }
}

fn own_files_of(dir: &Path) -> Vec<String> {
    tree(dir)
        .into_iter()
        .filter(|p| p.rsplit('/').next().unwrap_or("").starts_with(".zcp-"))
        .collect()
}

#[test]
fn clean_json_document_counts_what_it_would_remove() {
    let env = Env::new();
    let root = env.mkdir("root");
    leftover(&root.join(format!("x/.zcp-{K1}.part")), 4096, 2 * DAY);
    leftover(&root.join(format!("x/.zcp-{K1}.journal")), 100, 2 * DAY);
    leftover(&root.join(format!(".zcp-{K2}.part")), 10, Duration::ZERO);
    let o = clean(&root, &["-J", "--dry-run", "--older-than", "1d"]);
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON document");
    assert_eq!(v["dry_run"], true);
    assert_eq!(v["older_than_seconds"], 86_400);
    assert_eq!(v["summary"]["found"], 3);
    assert_eq!(v["summary"]["removed"], 2);
    assert_eq!(v["summary"]["bytes"], 4196);
    assert_eq!(v["summary"]["newer"], 1);
    assert_eq!(v["exit_code"], 0);
    let files = v["files"].as_array().unwrap();
    let part = files
        .iter()
        .find(|f| {
            f["path"]
                .as_str()
                .unwrap()
                .ends_with(&format!("x/.zcp-{K1}.part"))
        })
        .expect("listed");
    assert_eq!(part["status"], "would-remove");
    assert_eq!(part["kind"], "part");
    assert_eq!(part["size"], 4096);
    assert!(part["age_seconds"].as_u64().unwrap() >= 2 * 86_400 - 5);
    assert_eq!(own_files_of(&root).len(), 3, "a dry run removes nothing");
}

#[test]
fn clean_usage_mistakes_exit_2_and_touch_nothing() {
    let env = Env::new();
    let root = env.mkdir("root");
    leftover(&root.join(format!(".zcp-{K1}.part")), 10, 2 * DAY);
    let file = root.join("file");
    std::fs::write(&file, b"x").unwrap();
    for (args, says) in [
        (
            vec![env.path("missing").display().to_string()],
            "does not exist",
        ),
        (vec![file.display().to_string()], "is not a directory"),
        (
            vec![
                root.display().to_string(),
                "--older-than".into(),
                "7".into(),
            ],
            "examples: 90s, 30m, 12h, 7d",
        ),
        (
            vec![
                root.display().to_string(),
                "--older-than".into(),
                "7y7".into(),
            ],
            "is not a duration",
        ),
        (vec![], "<ROOT>"),
    ] {
        let mut c = zcp();
        c.arg("clean").args(&args);
        let o = run(c, 10);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", both(&o));
        assert!(text(&o.stderr).contains(says), "{args:?}: {}", both(&o));
    }
    assert_eq!(own_files_of(&root).len(), 1);
}

/// Makes `dir` refuse unlinking: immutable as root (on a filesystem that has the flag),
/// read-only otherwise. Undone on drop.
struct Frozen(std::path::PathBuf, bool);

impl Frozen {
    fn new(dir: &Path) -> Option<Frozen> {
        if is_root() {
            let ok = std::process::Command::new("chattr")
                .arg("+i")
                .arg(dir)
                .status()
                .is_ok_and(|s| s.success());
            return ok.then(|| Frozen(dir.to_path_buf(), true));
        }
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o555)).unwrap();
        Some(Frozen(dir.to_path_buf(), false))
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        if self.1 {
            let _ = std::process::Command::new("chattr")
                .arg("-i")
                .arg(&self.0)
                .status();
        } else {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&self.0, std::fs::Permissions::from_mode(0o755));
        }
    }
}

#[test]
fn clean_exits_1_and_names_what_it_could_not_remove() {
    let env = Env::new();
    let root = env.mkdir("root");
    leftover(&root.join(format!("stuck/.zcp-{K1}.part")), 10, 2 * DAY);
    leftover(&root.join(format!("stuck/.zcp-{K1}.journal")), 10, 2 * DAY);
    leftover(&root.join(format!("free/.zcp-{K2}.part")), 10, 2 * DAY);
    let Some(frozen) = Frozen::new(&root.join("stuck")) else {
        eprintln!("skipped: chattr +i is not available on this filesystem");
        return;
    };
    let o = clean(&root, &[]);
    let names = own_files_of(&root);
    drop(frozen);
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    let err = text(&o.stderr);
    assert!(
        err.contains(&format!(
            "could not remove {}/stuck/.zcp-{K1}",
            root.display()
        )),
        "{err}"
    );
    assert!(
        text(&o.stdout).contains("removed 1 file")
            && text(&o.stdout).contains("could not be removed"),
        "{}",
        both(&o)
    );
    assert_eq!(
        names,
        vec![
            format!("stuck/.zcp-{K1}.journal"),
            format!("stuck/.zcp-{K1}.part")
        ]
    );
}

#[test]
fn serve_logs_the_partial_files_it_finds_at_start() {
    let env = Env::new();
    let root = env.mkdir("root");
    leftover(&root.join(format!("a/.zcp-{K1}.part")), 1 << 20, DAY);
    leftover(&root.join(format!("a/.zcp-{K1}.journal")), 4096, DAY);
    leftover(&root.join("a/.zcp-0123456789ABCDEF.part"), 1 << 20, DAY);
    let srv = ServerProc::start(&root, &env.key, &[]);
    assert!(srv.wait_log("partial files", 10), "{}", srv.log());
    let log = srv.log();
    let line = log
        .lines()
        .find(|l| l.contains("partial files"))
        .expect("the line");
    assert!(
        line.contains("2 partial files of interrupted transfers (1.00 MiB on disk)")
            || line.contains("2 partial files of interrupted transfers (1.01 MiB on disk)"),
        "{line}"
    );
    assert!(
        line.contains(&format!("`zcp clean {}`", root.display())),
        "{line}"
    );
    // A root with none says nothing about them.
    let empty = env.mkdir("empty");
    let quiet = ServerProc::start(&empty, &env.key, &[]);
    std::thread::sleep(Duration::from_millis(300));
    assert!(!quiet.log().contains("partial"), "{}", quiet.log());
}
