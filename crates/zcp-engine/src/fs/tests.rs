//! Root confinement, part files and journals on a real filesystem.

use super::*;
use std::os::unix::fs::symlink;

fn root() -> (tempfile::TempDir, Root) {
    let d = tempfile::tempdir().unwrap();
    let r = Root::open(d.path()).unwrap();
    (d, r)
}

#[test]
fn open_dir_creates_and_refuses_symlinks() {
    let (d, r) = root();
    r.open_dir(&[b"a".to_vec(), b"b".to_vec()], true).unwrap();
    assert!(d.path().join("a/b").is_dir());
    let outside = tempfile::tempdir().unwrap();
    symlink(outside.path(), d.path().join("link")).unwrap();
    let e = r
        .open_dir(&[b"link".to_vec(), b"x".to_vec()], true)
        .unwrap_err();
    assert!(e.to_string().contains("symlink"), "{e}");
    assert!(!outside.path().join("x").exists());
    std::fs::write(d.path().join("file"), b"x").unwrap();
    let e = r.open_dir(&[b"file".to_vec()], true).unwrap_err();
    assert!(e.to_string().contains("not a directory"), "{e}");
    let e = r.open_dir(&[b"missing".to_vec()], false).unwrap_err();
    assert!(e.to_string().contains("does not exist"), "{e}");
}

#[test]
fn a_following_root_takes_a_symlinked_directory_on_the_way_and_nothing_else_changes() {
    let (d, r) = root();
    let real = tempfile::tempdir().unwrap();
    symlink(real.path(), d.path().join("scratch")).unwrap();
    let way = [b"scratch".to_vec(), b"run42".to_vec()];
    assert!(r.open_dir(&way, true).is_err(), "a root refuses it");
    let r = r.following();
    r.open_dir(&way, true).unwrap();
    assert!(real.path().join("run42").is_dir(), "made through the link");
    // A symlink to a file is no directory to go through, and files are not followed.
    std::fs::write(real.path().join("f"), b"x").unwrap();
    symlink(real.path().join("f"), d.path().join("flink")).unwrap();
    let e = r.open_dir(&[b"flink".to_vec()], false).unwrap_err();
    assert!(e.to_string().contains("not a directory"), "{e}");
    assert_eq!(entry_kind(r.fd(), b"scratch").unwrap(), EntryKind::Symlink);
}

#[test]
fn a_second_open_waits_for_the_lock_and_never_takes_an_unlinked_file() {
    let (d, r) = root();
    for keep in [false, true] {
        let (mut p, _) = PartFile::open(Arc::new(r.open_dir(&[], false).unwrap()), "w").unwrap();
        p.set_keep(keep);
        let dir = Arc::new(r.open_dir(&[], false).unwrap());
        let waiter = std::thread::spawn(move || PartFile::open(dir, "w"));
        std::thread::sleep(std::time::Duration::from_millis(200));
        drop(p);
        let (q, existed) = waiter.join().unwrap().unwrap();
        // A removed file is created afresh; a kept one is taken over.
        assert_eq!(existed, keep);
        let named = std::fs::metadata(d.path().join(q.name())).unwrap();
        let held = rustix::fs::fstat(&*q.shared_fd()).unwrap();
        assert_eq!(std::os::unix::fs::MetadataExt::ino(&named), held.st_ino);
        drop(q);
    }
}

#[test]
fn part_file_is_locked_kept_or_removed_and_renamed() {
    let (d, r) = root();
    let (p, existed) = PartFile::open(Arc::new(r.open_dir(&[], false).unwrap()), "abc").unwrap();
    assert!(!existed);
    let name = p.name();
    assert_eq!(name, ".zcp-abc.part");
    // A second writer for the same target is refused while the first holds it.
    let e = PartFile::open(Arc::new(r.open_dir(&[], false).unwrap()), "abc").unwrap_err();
    assert!(matches!(e, EngineError::Busy(_)), "{e}");
    drop(p);
    assert!(!d.path().join(&name).exists(), "removed when not kept");

    let (mut p, _) = PartFile::open(Arc::new(r.open_dir(&[], false).unwrap()), "abc").unwrap();
    p.start_journal(b"header").unwrap();
    p.append_journal(b"+record").unwrap();
    assert_eq!(p.read_journal().unwrap().unwrap(), b"header+record");
    p.set_keep(true);
    drop(p);
    assert!(d.path().join(".zcp-abc.part").exists(), "kept for resume");
    let (mut p, existed) =
        PartFile::open(Arc::new(r.open_dir(&[], false).unwrap()), "abc").unwrap();
    assert!(existed);
    p.continue_journal(6).unwrap();
    p.append_journal(b"!").unwrap();
    assert_eq!(p.read_journal().unwrap().unwrap(), b"header!");

    p.preallocate(10_000).unwrap();
    rustix::io::pwrite(p.fd(), b"hello", 0).unwrap();
    // Not fresh: cut to size even though no engine padded it.
    p.set_final_metadata(5, 0o640, (1_000_000_000, 5), false)
        .unwrap();
    p.sync().unwrap();
    p.rename_to(b"final").unwrap();
    let path = d.path().join("final");
    assert_eq!(std::fs::read(&path).unwrap(), b"hello");
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let m = std::fs::metadata(&path).unwrap();
    assert_eq!(m.permissions().mode() & 0o777, 0o640);
    assert_eq!((m.mtime(), m.mtime_nsec()), (1_000_000_000, 5));
    assert_eq!(
        std::fs::read_dir(d.path()).unwrap().count(),
        1,
        "no partial or journal left"
    );

    // A fresh file is cut only when an engine padded it.
    for (padded, len) in [(false, 8192), (true, 3)] {
        let key = format!("fresh{padded}");
        let (p, existed) = PartFile::open(Arc::new(r.open_dir(&[], false).unwrap()), &key).unwrap();
        assert!(!existed);
        rustix::io::pwrite(p.fd(), &[7u8; 8192], 0).unwrap();
        p.set_final_metadata(3, 0o600, (0, 0), padded).unwrap();
        assert_eq!(rustix::fs::fstat(p.fd()).unwrap().st_size, len);
    }

    // A sparse file gets its size and no storage: what is not written stays a hole.
    let (p, _) = PartFile::open(Arc::new(r.open_dir(&[], false).unwrap()), "sparse").unwrap();
    p.set_size(1 << 30).unwrap();
    let st = rustix::fs::fstat(p.fd()).unwrap();
    assert_eq!(st.st_size, 1 << 30);
    assert!(st.st_blocks * 512 < 1 << 20, "{} blocks", st.st_blocks);
    let meta = crate::fs::stat_fd(p.fd()).unwrap();
    assert!(meta.sparse() && meta.allocated < 1 << 20);
}

#[test]
fn zcp_names_its_own_files_with_reserved_names() {
    for n in [
        &b".zcp-abc.part"[..],
        b".zcp-0123.journal",
        b".zcp-ff.link",
        b".ZCP-abc.PART",
        b".Zcp-0123.Journal",
    ] {
        assert!(is_reserved_name(n), "{n:?}");
    }
    for n in [
        &b"zcp-abc.part"[..],
        b".zcp-abc",
        b"a.part",
        b".zcp-abc.parts",
        b".zcp-.par",
        b".zcp",
    ] {
        assert!(!is_reserved_name(n), "{n:?}");
    }
}

#[test]
fn symlinks_are_made_and_replaced_atomically_never_over_directories() {
    let (d, r) = root();
    assert!(make_symlink(r.fd(), b"l", b"/somewhere").unwrap());
    assert!(make_symlink(r.fd(), b"l", b"elsewhere").unwrap());
    assert!(
        !make_symlink(r.fd(), b"l", b"elsewhere").unwrap(),
        "no change"
    );
    assert_eq!(
        std::fs::read_link(d.path().join("l")).unwrap(),
        std::path::Path::new("elsewhere")
    );
    std::fs::create_dir(d.path().join("dir")).unwrap();
    assert!(make_symlink(r.fd(), b"dir", b"x").is_err());
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 2);
}

#[test]
fn open_dir_says_what_it_made_and_modes_can_be_held_to_narrowing() {
    let (d, r) = root();
    std::fs::create_dir(d.path().join("a")).unwrap();
    let comps = [b"a".to_vec(), b"b".to_vec(), b"c".to_vec()];
    let (_, existed) = r.open_dir_made(&comps, true).unwrap();
    assert_eq!(existed, 1, "a was there, b and c were made");
    let (fd, existed) = r.open_dir_made(&comps, true).unwrap();
    assert_eq!(existed, 3);
    let mode = |p: &str| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(d.path().join(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    };
    set_mode_within(&fd, 0o4700, true, (5, 0)).unwrap();
    assert_eq!(mode("a/b/c"), 0o700);
    set_mode_within(&fd, 0o777, true, (5, 0)).unwrap();
    assert_eq!(mode("a/b/c"), 0o700, "never widened");
    set_mode_within(&fd, 0o1777, false, (5, 0)).unwrap();
    assert_eq!(mode("a/b/c"), 0o777, "no sticky bit from the network");
    // An existing directory's own special bits stay: narrowing touches permissions only.
    std::fs::set_permissions(
        d.path().join("a"),
        std::os::unix::fs::PermissionsExt::from_mode(0o3775),
    )
    .unwrap();
    let (a, _) = r.open_dir_made(&comps[..1], false).unwrap();
    set_mode_within(&a, 0o755, true, (5, 0)).unwrap();
    assert_eq!(
        mode("a"),
        0o3755,
        "sticky and setgid kept, group write dropped"
    );
}

#[test]
fn walking_by_descriptor() {
    let (d, r) = root();
    std::fs::write(d.path().join("f"), b"12345").unwrap();
    symlink("f", d.path().join("l")).unwrap();
    let mut names: Vec<_> = read_dir(r.fd()).unwrap().map(|n| n.unwrap()).collect();
    names.sort();
    assert_eq!(names, vec![b"f".to_vec(), b"l".to_vec()]);
    let m = stat_at(r.fd(), b"f").unwrap();
    assert_eq!((m.kind, m.size), (EntryKind::File, 5));
    assert_eq!(stat_at(r.fd(), b"l").unwrap().kind, EntryKind::Symlink);
    assert_eq!(read_link_at(r.fd(), b"l").unwrap(), b"f");
    assert!(
        open_at(r.fd(), b"l").is_err(),
        "a symlink is never opened through"
    );
    // The listing says which names are regular files (what the walk opens before it stats).
    std::fs::create_dir(d.path().join("sub")).unwrap();
    let mut entries = read_dir(r.fd()).unwrap();
    let mut typed = Vec::new();
    while let Some(e) = entries.next_entry() {
        typed.push(e.unwrap());
    }
    typed.sort();
    assert_eq!(
        typed,
        vec![
            (b"f".to_vec(), true),
            (b"l".to_vec(), false),
            (b"sub".to_vec(), false)
        ]
    );
}

#[test]
fn entry_kinds_do_not_follow_links() {
    let (d, r) = root();
    std::fs::create_dir(d.path().join("dir")).unwrap();
    symlink("/etc/passwd", d.path().join("l")).unwrap();
    assert_eq!(entry_kind(r.fd(), b"dir").unwrap(), EntryKind::Dir);
    assert_eq!(entry_kind(r.fd(), b"l").unwrap(), EntryKind::Symlink);
    assert_eq!(entry_kind(r.fd(), b"none").unwrap(), EntryKind::Missing);
}

#[test]
fn fs_info_reads_something() {
    let (_d, r) = root();
    let i = fs_info(r.fd()).unwrap();
    assert!(!i.name.is_empty());
    assert!(i.free_bytes > 0);
}

#[test]
fn preallocation_reserves_disk_but_only_checks_space_in_memory() {
    use std::os::unix::fs::MetadataExt;
    let shm = std::path::Path::new("/dev/shm");
    let mut places = vec![(tempfile::tempdir().unwrap(), false)];
    if shm.is_dir() {
        places.push((tempfile::tempdir_in(shm).unwrap(), true));
    } else {
        println!("note: no /dev/shm; only the disk case is tested");
    }
    for (d, in_memory) in places {
        let r = Root::open(d.path()).unwrap();
        assert_eq!(fs_info(r.fd()).unwrap().in_memory, in_memory);
        let (p, _) = PartFile::open(Arc::new(r.open_dir(&[], false).unwrap()), "pre").unwrap();
        p.preallocate(1 << 20).unwrap();
        let m = rustix::fs::fstat(p.fd()).unwrap();
        assert_eq!(m.st_size, 1 << 20);
        // On disk the blocks are claimed now; in memory none is, until written.
        assert_eq!(m.st_blocks > 0, !in_memory, "in memory: {in_memory}");
        // More than the filesystem has fails now either way, naming the sizes.
        let free = fs_info(r.fd()).unwrap().free_bytes;
        let e = p.preallocate(free + (1 << 40)).unwrap_err();
        assert!(e.is_no_space(), "{e}");
        assert!(e.to_string().contains("are free"), "{e}");
        drop(p);
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
        let _ = std::fs::metadata(d.path()).unwrap().dev();
    }
}

/// `rename_to_new` takes a free name only: a file that appeared there is left as it is (and
/// the part file let go of); `keep_as_backup` moves a regular file to NAME~ and refuses a
/// NAME~ that is a directory.
#[test]
fn a_new_name_is_never_taken_from_a_file_that_appeared() {
    let (d, r) = root();
    let dir = || Arc::new(r.open_dir(&[], false).unwrap());
    let (p, _) = PartFile::open(dir(), "n").unwrap();
    std::fs::write(d.path().join("n"), b"theirs").unwrap();
    assert!(!p.rename_to_new(b"n").unwrap());
    assert_eq!(std::fs::read(d.path().join("n")).unwrap(), b"theirs");
    assert!(!d.path().join(".zcp-n.part").exists());
    let (p, _) = PartFile::open(dir(), "m").unwrap();
    assert!(p.rename_to_new(b"m").unwrap());
    assert!(d.path().join("m").is_file());
    assert!(keep_as_backup(&*dir(), b"n").unwrap());
    assert_eq!(std::fs::read(d.path().join("n~")).unwrap(), b"theirs");
    assert!(!keep_as_backup(&*dir(), b"n").unwrap(), "nothing left at n");
    std::fs::create_dir(d.path().join("m~")).unwrap();
    assert!(keep_as_backup(&*dir(), b"m").is_err());
    assert!(d.path().join("m").is_file());
}

#[test]
fn each_on_threads_runs_every_item_once_and_returns_an_error_after_all_ran() {
    use std::sync::atomic::{AtomicU32, Ordering};
    for (n, threads) in [(0usize, 8usize), (1, 8), (7, 3), (300, 8), (5, 0)] {
        let seen: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
        let items: Vec<usize> = (0..n).collect();
        each_on_threads(&items, threads, |&i| {
            seen[i].fetch_add(1, Ordering::Relaxed);
            Ok(())
        })
        .unwrap();
        assert!(
            seen.iter().all(|c| c.load(Ordering::Relaxed) == 1),
            "{n} on {threads}"
        );
    }
    let ran = AtomicU32::new(0);
    let items: Vec<usize> = (0..50).collect();
    let e = each_on_threads(&items, 4, |&i| {
        ran.fetch_add(1, Ordering::Relaxed);
        if i % 10 == 3 {
            Err(EngineError::Path(format!("item {i}")))
        } else {
            Ok(())
        }
    })
    .unwrap_err();
    assert!(e.to_string().contains("item "), "{e}");
    assert_eq!(ran.load(Ordering::Relaxed), 50, "the others still ran");
}

#[test]
fn fsync_each_syncs_part_files() {
    let (d, r) = root();
    let parts: Vec<PartFile> = (0..20)
        .map(|i| {
            let dir = Arc::new(r.open_dir(&[], false).unwrap());
            PartFile::open(dir, &format!("f{i}")).unwrap().0
        })
        .collect();
    for p in &parts {
        rustix::io::pwrite(&*p.shared_fd(), b"data", 0).unwrap();
    }
    let fds: Vec<Arc<OwnedFd>> = parts.iter().map(|p| p.shared_fd()).collect();
    let borrowed: Vec<BorrowedFd<'_>> = fds.iter().map(|f| f.as_fd()).collect();
    fsync_each(&borrowed, 8).unwrap();
    fsync_each(&[], 8).unwrap();
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 20);
}

#[test]
fn create_dir_all_durable_makes_every_missing_directory() {
    let d = tempfile::tempdir().unwrap();
    let deep = d.path().join("x/y/z");
    create_dir_all_durable(&deep).unwrap();
    assert!(deep.is_dir());
    create_dir_all_durable(&deep).unwrap();
    std::fs::write(d.path().join("f"), b"").unwrap();
    let e = create_dir_all_durable(&d.path().join("f/g")).unwrap_err();
    assert!(e.to_string().contains("mkdir"), "{e}");
}

#[test]
fn sync_made_in_syncs_each_directory_something_was_made_in_once() {
    let (d, r) = root();
    let id = |p: &std::path::Path| {
        let m = std::fs::metadata(p).unwrap();
        (
            std::os::unix::fs::MetadataExt::dev(&m),
            std::os::unix::fs::MetadataExt::ino(&m),
        )
    };
    std::fs::create_dir(d.path().join("a")).unwrap();
    let comps: Vec<Vec<u8>> = ["a", "b", "c"]
        .iter()
        .map(|c| c.as_bytes().to_vec())
        .collect();
    let (_, existed) = r.open_dir_made(&comps, true).unwrap();
    assert_eq!(existed, 1);
    let mut seen = std::collections::HashSet::new();
    r.sync_made_in(&comps, existed, &mut seen).unwrap();
    let want: std::collections::HashSet<_> =
        [id(&d.path().join("a")), id(&d.path().join("a/b"))].into();
    assert_eq!(seen, want, "a (b made in it) and a/b (c made in it), not c");
    r.sync_made_in(&comps, 3, &mut seen).unwrap();
    assert_eq!(seen.len(), 2, "nothing made: nothing synced");
    // Gone since: the walk ends without an error.
    std::fs::remove_dir_all(d.path().join("a/b")).unwrap();
    let mut fresh = std::collections::HashSet::new();
    r.sync_made_in(&comps, 1, &mut fresh).unwrap();
    assert_eq!(fresh.len(), 1, "only a is left to sync");
}
