#!/usr/bin/env python3
"""Holds TCP connections open against a zcp server without ever finishing a handshake.

    hold.py PORT COUNT SOURCES [--reconnect-rate N] [--stats FILE] [--seconds S]

COUNT connections to 127.0.0.1:PORT, spread round-robin over SOURCES (comma-separated
127.0.0.x addresses, bound as the source). Even-numbered ones stay silent; odd-numbered
ones send a frame header that announces a Hello and then one byte a second, never
finishing it. A connection the server closes is counted and, with --reconnect-rate N > 0,
replaced (at most N reconnections a second: an attacker who reconnects). Every second the
counts go to --stats FILE as one JSON line: opened, closed_by_server, held. Runs until
SIGTERM/SIGINT or --seconds. Loopback only: refuses any other destination.
"""
import argparse
import json
import resource
import selectors
import signal
import socket
import sys
import time

HEADER = b"\x00\x00\x00\x2c\x01"  # 44-byte payload, kind Hello: never completed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("count", type=int)
    ap.add_argument("sources")
    ap.add_argument("--reconnect-rate", type=float, default=0.0)
    ap.add_argument("--stats")
    ap.add_argument("--seconds", type=float, default=3600.0)
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    sources = a.sources.split(",")
    for s in sources:
        if not s.startswith("127."):
            sys.exit("hold.py: loopback sources only")
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    sel = selectors.DefaultSelector()
    conns = {}  # fd -> [socket, index, bytes sent]
    counts = {"opened": 0, "closed_by_server": 0, "connect_failed": 0}
    serial = [0]

    def open_one():
        i = serial[0]
        serial[0] += 1
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind((sources[i % len(sources)], 0))
            s.settimeout(5)
            s.connect(("127.0.0.1", a.port))
            s.setblocking(False)
        except OSError:
            s.close()
            counts["connect_failed"] += 1
            return False
        conns[s.fileno()] = [s, i, 0]
        sel.register(s, selectors.EVENT_READ)
        counts["opened"] += 1
        return True

    for _ in range(a.count):
        if stop:
            break
        open_one()
    start = time.monotonic()
    last_tick = 0.0
    owed = 0.0
    last = time.monotonic()
    out = open(a.stats, "a") if a.stats else None
    while not stop and time.monotonic() - start < a.seconds:
        for key, _ in sel.select(timeout=0.1):
            s = key.fileobj
            try:
                data = s.recv(4096)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                data = b""
            if data:
                continue  # the server's Error frame; its close follows
            sel.unregister(s)
            del conns[s.fileno()]
            s.close()
            counts["closed_by_server"] += 1
        now = time.monotonic()
        if a.reconnect_rate > 0:
            owed = min(owed + (now - last) * a.reconnect_rate, a.count)
            while owed >= 1 and len(conns) < a.count and not stop:
                owed -= 1
                open_one()
        last = now
        if now - last_tick >= 1.0:
            last_tick = now
            for c in list(conns.values()):
                s, i, sent = c
                if i % 2 == 1:
                    chunk = HEADER[sent:sent + 1] if sent < len(HEADER) else b"\x00"
                    try:
                        s.send(chunk)
                        c[2] += 1
                    except OSError:
                        pass
            if out:
                out.write(json.dumps(dict(counts, held=len(conns), t=round(now - start, 1))) + "\n")
                out.flush()
    if out:
        out.write(json.dumps(dict(counts, held=len(conns), t=round(time.monotonic() - start, 1), final=True)) + "\n")
        out.close()


if __name__ == "__main__":
    main()
