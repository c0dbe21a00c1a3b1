#!/usr/bin/env python3
"""Medians of the tree runs of benches/compare.sh -c tree, per session and pooled.

    python3 pool.py tree-A.jsonl tree-B.jsonl tree-C.jsonl tree-D.jsonl
"""
import json
import statistics as st
import sys

FILES = 10000
pool = {}
for path in sys.argv[1:]:
    runs = {}
    for line in open(path):
        r = json.loads(line)
        d = r["data"]
        if "end" in d:
            c = d["end"]["cpu"]
            cpu = (c["sender"]["total"], c["receiver"]["total"])
        else:
            cpu = (None, d.get("cpu"))
        for into in (runs, pool):
            into.setdefault(r["build"], []).append((FILES / r["wall"], cpu))
    print(path)
    for who, xs in runs.items():
        cpus = [(s or 0) + c for s, c in (x[1] for x in xs) if c is not None]
        cpu = f"{st.median(cpus):.2f}" if cpus else "-"
        print(f"  {who:<7} files/s {st.median(x[0] for x in xs):6.0f}   CPU s {cpu}   runs {len(xs)}")
print("pooled")
for who, xs in pool.items():
    fps = [x[0] for x in xs]
    cpus = [(s or 0) + c for s, c in (x[1] for x in xs) if c is not None]
    sides = [x[1] for x in xs if x[1][0] is not None]
    line = f"  {who:<7} files/s {st.median(fps):6.0f} ({min(fps):.0f}-{max(fps):.0f})   CPU s {st.median(cpus):.2f}"
    if sides:
        line += f" (sender {st.median(s for s, _ in sides):.2f}, receiver {st.median(c for _, c in sides):.2f})"
    print(line + f"   runs {len(xs)}")
