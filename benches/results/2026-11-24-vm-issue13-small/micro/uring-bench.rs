// The io_uring micro-benchmark of issue 13 (not part of zcp). Build it on its own:
//   mkdir -p uring-bench/src && cp uring-bench.rs uring-bench/src/main.rs
//   cat > uring-bench/Cargo.toml <<EOF
//   [package]
//   name = "uring-bench"
//   version = "0.1.0"
//   edition = "2021"
//   [dependencies]
//   io-uring = "0.7"
//   libc = "0.2"
//   EOF
//   (cd uring-bench && cargo build --release)
//   uring-bench/target/release/uring-bench /var/tmp/ub REPS BATCH   # e.g. 8 64, on the disk to measure
//! Micro-benchmark: the receiver's per-file kernel work for small files, plain syscalls vs
//! io_uring (linked openat -> write -> close into fixed slots, one submit per batch; renames
//! one submit per batch). Same files, same sizes; CPU includes io-wq workers (RUSAGE_SELF).
use io_uring::{opcode, squeue, types, IoUring};
use std::ffi::CString;
use std::time::Instant;

fn cpu() -> f64 {
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut r) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(r.ru_utime) + t(r.ru_stime)
}

fn sizes(n: usize) -> Vec<usize> {
    let mut x: u64 = 7;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            4096 + (x % 61441) as usize
        })
        .collect()
}

fn mkdirs(root: &str, dirs: usize) -> Vec<i32> {
    std::fs::create_dir_all(root).unwrap();
    (0..dirs)
        .map(|d| {
            let p = format!("{root}/d{d:03}");
            std::fs::create_dir(&p).unwrap();
            let c = CString::new(p).unwrap();
            unsafe { libc::open(c.as_ptr(), libc::O_DIRECTORY | libc::O_RDONLY | libc::O_CLOEXEC) }
        })
        .collect()
}

fn names(n: usize) -> (Vec<CString>, Vec<CString>) {
    let part = (0..n).map(|i| CString::new(format!(".zcp-{i:016x}.part")).unwrap()).collect();
    let fin = (0..n).map(|i| CString::new(format!("f{i:06}")).unwrap()).collect();
    (part, fin)
}

fn plain(root: &str, n: usize, per_dir: usize, data: &[u8], sz: &[usize]) -> (f64, f64, f64) {
    let dirs = mkdirs(root, n / per_dir);
    let (part, fin) = names(n);
    let (t0, c0) = (Instant::now(), cpu());
    for i in 0..n {
        let d = dirs[i / per_dir];
        let fd = unsafe {
            libc::openat(d, part[i].as_ptr(), libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_CLOEXEC, 0o600)
        };
        assert!(fd >= 0);
        let w = unsafe { libc::pwrite(fd, data.as_ptr().cast(), sz[i], 0) };
        assert_eq!(w as usize, sz[i]);
        unsafe { libc::close(fd) };
    }
    let t_write = t0.elapsed().as_secs_f64();
    for i in 0..n {
        let d = dirs[i / per_dir];
        let r = unsafe { libc::renameat(d, part[i].as_ptr(), d, fin[i].as_ptr()) };
        assert_eq!(r, 0);
    }
    (t_write, t0.elapsed().as_secs_f64(), cpu() - c0)
}

fn uring(root: &str, n: usize, per_dir: usize, data: &[u8], sz: &[usize], batch: usize) -> (f64, f64, f64) {
    let dirs = mkdirs(root, n / per_dir);
    let (part, fin) = names(n);
    let mut ring = IoUring::new((batch * 4).next_power_of_two() as u32).unwrap();
    ring.submitter().register_files_sparse(batch as u32).unwrap();
    let (t0, c0) = (Instant::now(), cpu());
    let mut i = 0;
    while i < n {
        let k = batch.min(n - i);
        {
            let mut sq = ring.submission();
            for j in 0..k {
                let f = i + j;
                let d = dirs[f / per_dir];
                let slot = types::DestinationSlot::try_from_slot_target(j as u32).unwrap();
                let open = opcode::OpenAt::new(types::Fd(d), part[f].as_ptr())
                    .flags(libc::O_CREAT | libc::O_EXCL | libc::O_RDWR)
                    .mode(0o600)
                    .file_index(Some(slot))
                    .build()
                    .flags(squeue::Flags::IO_LINK)
                    .user_data(f as u64);
                let write = opcode::Write::new(types::Fixed(j as u32), data.as_ptr(), sz[f] as u32)
                    .offset(0)
                    .build()
                    .flags(squeue::Flags::IO_LINK)
                    .user_data(f as u64);
                let close = opcode::Close::new(types::Fixed(j as u32)).build().user_data(f as u64);
                unsafe {
                    sq.push(&open).unwrap();
                    sq.push(&write).unwrap();
                    sq.push(&close).unwrap();
                }
            }
        }
        ring.submit_and_wait(3 * k).unwrap();
        for c in ring.completion() {
            assert!(c.result() >= 0, "op of file {} failed: {}", c.user_data(), c.result());
        }
        i += k;
    }
    let t_write = t0.elapsed().as_secs_f64();
    let mut i = 0;
    while i < n {
        let k = batch.min(n - i);
        {
            let mut sq = ring.submission();
            for j in 0..k {
                let f = i + j;
                let d = dirs[f / per_dir];
                let e = opcode::RenameAt::new(types::Fd(d), part[f].as_ptr(), types::Fd(d), fin[f].as_ptr())
                    .build()
                    .user_data(f as u64);
                unsafe { sq.push(&e).unwrap() };
            }
        }
        ring.submit_and_wait(k).unwrap();
        for c in ring.completion() {
            assert!(c.result() >= 0, "rename {} failed: {}", c.user_data(), c.result());
        }
        i += k;
    }
    (t_write, t0.elapsed().as_secs_f64(), cpu() - c0)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let base = &args[1];
    let reps: usize = args[2].parse().unwrap();
    let batch: usize = args.get(3).map_or(64, |b| b.parse().unwrap());
    let (n, per_dir) = (10_000, 100);
    let sz = sizes(n);
    let data = vec![0x5au8; 65536];
    for rep in 0..reps {
        for mode in if rep % 2 == 0 { ["plain", "uring"] } else { ["uring", "plain"] } {
            let root = format!("{base}/{mode}-{rep}");
            let (tw, t, c) = if mode == "plain" {
                plain(&root, n, per_dir, &data, &sz)
            } else {
                uring(&root, n, per_dir, &data, &sz, batch)
            };
            println!("{mode} rep {rep}: create+write+close {:.0} ms, +renames {:.0} ms, cpu {:.0} ms ({:.1} us/file)", tw * 1e3, t * 1e3, c * 1e3, c * 1e6 / n as f64);
        }
    }
}
