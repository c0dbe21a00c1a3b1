//! What proving a byte costs on this CPU, one thread, per GiB (issue 27's first lever).
//!
//!     cargo run --release -p zcp-bench --example proof_cost -- FILE [CHUNK] [ROUNDS]
//!
//! FILE should be page-cached (read it first) and on a disk or tmpfs; CHUNK is the unit
//! proven at a time (default 4 MiB, a power of two); ROUNDS (default 3) repeats every row,
//! interleaved, and the table shows the best and the median. Rows:
//!
//! * `map only`: FILE through zcp's guarded mappings (`zcp_engine::map::visit_mapped`, what the
//!   sender and the splice read-back use), one byte read per page: the cost of the mapping.
//! * `blake3 chunk MAC, pread into 256 KiB`: the same MAC over FILE read with `pread` into one
//!   reused 256 KiB buffer instead of through mappings (a copy instead of page faults).
//! * `blake3 chunk MAC, mapped`: zcp's proof today (`SessionKeys::chunk_hasher`: keyed
//!   BLAKE3 over the chunk's place and its plain chaining value) over FILE through the mappings.
//! * `GMAC, mapped`: AES-256-GCM from aws-lc-rs with the chunk as associated data and an
//!   empty plaintext (a Carter–Wegman MAC, one nonce per chunk) over FILE through the mappings.
//! * the same two over one CHUNK-sized buffer in memory, hashed again and again (hot in
//!   cache: the best case of proving where data already passes through user memory).
//! * `AES-256-GCM seal in memory`: encryption with its tag, in place, what an encrypted
//!   session pays per byte (`--encrypt`).
//!
//! CPU time is the thread's own (`getrusage(RUSAGE_THREAD)`), so other processes do not count;
//! the chaining values are kept and printed (shortened) so nothing is optimised away.

use std::time::Instant;

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
use zcp_engine::map::visit_mapped;
use zcp_engine::sys::thread_usage;
use zcp_wire::{Psk, SessionKeys};

type Row = fn(&Setup) -> [u8; 4];

struct Setup {
    file: std::fs::File,
    size: u64,
    chunk: usize,
    keys: SessionKeys,
    gcm: LessSafeKey,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        eprintln!("usage: proof_cost FILE [CHUNK_BYTES] [ROUNDS]");
        std::process::exit(2);
    };
    let fail = |what: String| -> ! {
        eprintln!("proof_cost: {what}");
        std::process::exit(2)
    };
    let number = |i: usize, default: usize| {
        args.get(i)
            .map_or(Ok(default), |s| s.parse::<usize>())
            .unwrap_or_else(|_| fail(format!("argument {} must be a whole number", i + 1)))
    };
    let (chunk, rounds) = (number(1, 4 << 20), number(2, 3).max(1));
    if !chunk.is_power_of_two() || chunk < 4096 {
        fail(format!(
            "CHUNK_BYTES must be a power of two of at least 4096, not {chunk}"
        ));
    }
    let file = std::fs::File::open(path).unwrap_or_else(|e| fail(format!("{path}: {e}")));
    let size = file
        .metadata()
        .unwrap_or_else(|e| fail(format!("{path}: {e}")))
        .len();
    if size < chunk as u64 {
        fail(format!(
            "{path} holds {size} bytes, less than one chunk of {chunk}"
        ));
    }
    let psk = Psk::from_bytes(zcp_engine::sys::random().expect("random key"));
    let gcm_key: [u8; 32] = zcp_engine::sys::random().expect("random key");
    let setup = Setup {
        file,
        size,
        chunk,
        keys: SessionKeys::derive(&psk, &[1; 32], &[2; 32]),
        gcm: LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &gcm_key).expect("key")),
    };
    let rows: [(&str, Row); 7] = [
        ("map only (one byte a page)", map_only),
        ("blake3 chunk MAC, mapped", blake3_mapped),
        ("blake3 chunk MAC, pread into 256 KiB", blake3_pread),
        ("GMAC (AES-256-GCM, data as AAD), mapped", gmac_mapped),
        ("blake3 chunk MAC, in cache", blake3_hot),
        ("GMAC, in cache", gmac_hot),
        ("AES-256-GCM seal, in cache", seal_hot),
    ];
    let mut secs: Vec<Vec<(f64, f64)>> = vec![Vec::new(); rows.len()];
    let mut seen = Vec::new();
    for _ in 0..rounds {
        for (i, (_, row)) in rows.iter().enumerate() {
            let (t0, u0) = (Instant::now(), thread_usage());
            seen.push(row(&setup));
            let u = thread_usage().since(&u0);
            let gib = setup.size as f64 / f64::from(1u32 << 30);
            let cpu = (u.user + u.sys).as_secs_f64() / gib;
            secs[i].push((cpu, setup.size as f64 / t0.elapsed().as_secs_f64() / 1e9));
        }
    }
    println!(
        "{} bytes of {path}, chunks of {chunk} bytes, {rounds} rounds; CPU seconds per GiB \
         (this thread), best / median; GB/s of the best",
        setup.size
    );
    for ((name, _), runs) in rows.iter().zip(&mut secs) {
        runs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (best, median) = (runs[0], runs[runs.len() / 2]);
        println!(
            "  {name:<42} {:.3} / {:.3} s/GiB  {:.2} GB/s",
            best.0, median.0, best.1
        );
    }
    let check: u32 = seen
        .iter()
        .map(|b| u32::from_le_bytes(*b))
        .fold(0, u32::wrapping_add);
    println!("  (checksum of every result, so none is optimised away: {check:08x})");
}

/// Visits FILE chunk by chunk through zcp's guarded mappings.
fn each_mapped(s: &Setup, mut f: impl FnMut(u64, &[u8])) {
    let mut off = 0;
    while off < s.size {
        let len = (s.chunk as u64).min(s.size - off);
        visit_mapped(&s.file, off, len, |b| f(off, b)).expect("read FILE through a mapping");
        off += len;
    }
}

fn map_only(s: &Setup) -> [u8; 4] {
    let mut acc = 0u8;
    each_mapped(s, |_, b| {
        for page in b.chunks(4096) {
            acc = acc.wrapping_add(page[0]);
        }
    });
    [acc, 0, 0, 0]
}

fn first4(b: &[u8]) -> [u8; 4] {
    b[..4].try_into().expect("at least 4 bytes")
}

/// zcp's chunk MAC of `data` at `off` (its first 4 bytes).
fn blake3_mac(s: &Setup, off: u64, data: &[u8]) -> [u8; 4] {
    let mut h = s.keys.chunk_hasher(0, off, data.len() as u64);
    h.update(data);
    first4(h.finalize().as_bytes())
}

/// The buffer `blake3_pread` reads into, reused: small enough to stay in a core's L2 cache.
const PREAD_BUFFER: usize = 256 << 10;

fn blake3_pread(s: &Setup) -> [u8; 4] {
    use std::os::unix::fs::FileExt;
    let mut acc = [0u8; 4];
    let mut buf = vec![0u8; PREAD_BUFFER];
    let mut off = 0;
    while off < s.size {
        let len = (s.chunk as u64).min(s.size - off);
        let mut h = s.keys.chunk_hasher(0, off, len);
        let mut at = off;
        while at < off + len {
            let n = ((off + len - at) as usize).min(buf.len());
            s.file.read_exact_at(&mut buf[..n], at).expect("pread");
            h.update(&buf[..n]);
            at += n as u64;
        }
        acc = xor4(acc, first4(h.finalize().as_bytes()));
        off += len;
    }
    acc
}

fn blake3_mapped(s: &Setup) -> [u8; 4] {
    let mut acc = [0u8; 4];
    each_mapped(s, |off, b| acc = xor4(acc, blake3_mac(s, off, b)));
    acc
}

fn gmac(key: &LessSafeKey, n: u64, data: &[u8]) -> [u8; 4] {
    let mut nonce = [0u8; 12];
    nonce[4..].copy_from_slice(&n.to_be_bytes());
    let tag = key
        .seal_in_place_separate_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(data),
            &mut [],
        )
        .expect("GMAC");
    first4(tag.as_ref())
}

fn gmac_mapped(s: &Setup) -> [u8; 4] {
    let mut acc = [0u8; 4];
    each_mapped(s, |off, b| acc = xor4(acc, gmac(&s.gcm, off, b)));
    acc
}

/// Runs `f` over one chunk-sized buffer until FILE's size has passed.
fn each_hot(s: &Setup, mut f: impl FnMut(u64, &mut [u8])) {
    let mut buf = vec![0x5a_u8; s.chunk];
    let mut off = 0;
    while off < s.size {
        f(off, &mut buf);
        off += s.chunk as u64;
    }
}

fn blake3_hot(s: &Setup) -> [u8; 4] {
    let mut acc = [0u8; 4];
    each_hot(s, |off, b| acc = xor4(acc, blake3_mac(s, off, b)));
    acc
}

fn gmac_hot(s: &Setup) -> [u8; 4] {
    let mut acc = [0u8; 4];
    each_hot(s, |off, b| acc = xor4(acc, gmac(&s.gcm, off, b)));
    acc
}

fn seal_hot(s: &Setup) -> [u8; 4] {
    let mut acc = [0u8; 4];
    each_hot(s, |off, b| {
        let mut nonce = [0u8; 12];
        nonce[4..].copy_from_slice(&off.to_be_bytes());
        let tag = s
            .gcm
            .seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::empty(), b)
            .expect("seal");
        acc = xor4(acc, first4(tag.as_ref()));
    });
    acc
}

fn xor4(a: [u8; 4], b: [u8; 4]) -> [u8; 4] {
    [a[0] ^ b[0], a[1] ^ b[1], a[2] ^ b[2], a[3] ^ b[3]]
}
