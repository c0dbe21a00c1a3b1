#!/usr/bin/env python3
"""SO_MAX_PACING_RATE alone, no user-space pacing: sendfile over loopback at a cap split over
streams, measured at the receiver (bytes received over the time to the last byte). Shows where
the kernel holds a cap by itself and where it does not (it never paces a connection's first
ten segments, 64 KiB each on loopback). Usage: kernel-only.py [SCRATCH_DIR]"""
import os, socket, struct, sys, tempfile, threading, time

SO_MAX_PACING_RATE = 47


def run(src, rate_bps, size, streams):
    l = socket.socket()
    l.bind(("127.0.0.1", 0))
    l.listen(64)
    port = l.getsockname()[1]
    got, ends = [0] * streams, [0.0] * streams

    def rx(i):
        c, _ = l.accept()
        n = 0
        while True:
            b = c.recv(1 << 20)
            if not b:
                break
            n += len(b)
        got[i], ends[i] = n, time.time()

    receivers = [threading.Thread(target=rx, args=(i,)) for i in range(streams)]
    for t in receivers:
        t.start()
    f = os.open(src, os.O_RDONLY)
    per = size // streams

    def tx(i):
        s = socket.socket()
        s.connect(("127.0.0.1", port))
        if rate_bps:
            s.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE,
                         struct.pack("Q", rate_bps // 8 // streams))
        off, end = i * per, (i + 1) * per
        while off < end:
            off += os.sendfile(s.fileno(), f, off, min(8 << 20, end - off))
        s.close()

    t0 = time.time()
    senders = [threading.Thread(target=tx, args=(i,)) for i in range(streams)]
    for t in senders:
        t.start()
    for t in senders + receivers:
        t.join()
    os.close(f)
    l.close()
    secs = max(ends) - t0
    r = sum(got) * 8 / secs
    err = f"{(r / rate_bps - 1) * 100:+.1f}%" if rate_bps else "—"
    print(f"| {rate_bps / 1e6:.0f}M | {streams} | {size / 1e6:.1f} MB | {secs:.2f} s | "
          f"{r / 1e6:.1f} Mbit/s | {err} |", flush=True)


def main():
    scratch = sys.argv[1] if len(sys.argv) > 1 else "/dev/shm"
    with tempfile.NamedTemporaryFile(dir=scratch) as src:
        src.write(os.urandom(500 * 1000 * 1000))
        src.flush()
        print("| cap | streams | size | time | received at | error |")
        print("|---|---|---|---|---|---|")
        for rate, secs, streams in [(200e6, 2, 1), (2e9, 2, 1), (200e6, 2, 4), (2e9, 2, 4),
                                    (200e6, 2, 16), (200e6, 2, 64), (10e6, 2, 1), (10e6, 2, 8)]:
            run(src.name, int(rate), int(rate / 8 * secs), streams)


main()
