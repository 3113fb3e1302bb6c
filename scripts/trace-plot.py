#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Draw a collstack trace (collstack trace --out FILE.json) as a PNG.

    scripts/trace-plot.py TRACE.json OUT.png [--from MS] [--to MS]
                          [--title TEXT]

One row per thread (each node's lcores and trainer ranks), time in ms
across: operations and trainer operations as bars, stalls as thin bars,
frames sent (tx) and received (rx) as ticks above and below the row's
line, retransmissions as red crosses. Needs gnuplot (gnuplot-nox,
scripts/setup.sh); the JSON is read with Python's standard library.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("png")
    ap.add_argument("--from", dest="t0", type=float, default=None,
                    help="start, ms from the trace's first event")
    ap.add_argument("--to", dest="t1", type=float, default=None,
                    help="end, ms from the trace's first event")
    ap.add_argument("--title", default=None)
    a = ap.parse_args()
    with open(a.trace) as f:
        doc = json.load(f)
    ev = doc.get("traceEvents")
    if not isinstance(ev, list):
        sys.exit(f"{a.trace}: no traceEvents array")
    proc, thread = {}, {}
    for e in ev:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            proc[e["pid"]] = e["args"]["name"]
        elif e.get("ph") == "M" and e.get("name") == "thread_name":
            thread[(e["pid"], e["tid"])] = e["args"]["name"]
    data = [e for e in ev if e.get("ph") in ("X", "i")]
    if not data:
        sys.exit(f"{a.trace}: no events")
    t0 = a.t0 if a.t0 is not None else 0.0
    t1 = a.t1 if a.t1 is not None else max(
        (e["ts"] + e.get("dur", 0)) / 1e3 for e in data)
    rows = sorted({(e["pid"], e["tid"]) for e in data})
    y = {r: i for i, r in enumerate(rows)}
    files = {k: [] for k in ("op", "trainer", "stall", "tx", "rx", "retx")}
    for e in data:
        s = e["ts"] / 1e3
        d = e.get("dur", 0) / 1e3
        if s + d < t0 or s > t1:
            continue
        r = y[(e["pid"], e["tid"])]
        cat = e.get("cat")
        if e["ph"] == "X" and cat in ("op", "trainer", "stall"):
            h = 0.08 if cat == "stall" else 0.3
            off = -0.38 if cat == "stall" else 0
            files[cat].append(f"{s + d / 2} {r + off} {max(d / 2, 1e-4)} {h}")
        elif e["name"].startswith("tx"):
            files["tx"].append(f"{s} {r + 0.2}")
        elif e["name"].startswith("rx"):
            files["rx"].append(f"{s} {r - 0.2}")
        elif cat == "retx":
            files["retx"].append(f"{s} {r}")
    labels = ", ".join(
        f'"{proc.get(p, p)} {thread.get((p, t), t)}" {y[(p, t)]}'
        for p, t in rows)
    with tempfile.TemporaryDirectory() as tmp:
        for k, v in files.items():
            with open(os.path.join(tmp, k), "w") as f:
                f.write("\n".join(v) + "\n" if v else "nan nan nan nan\n")
        title = a.title or os.path.basename(a.trace)
        plot = []
        for k, style in (
            ("op", "boxxyerror fs solid 0.5 lc rgb '#3060c0' title 'operation (core)'"),
            ("trainer", "boxxyerror fs solid 0.5 lc rgb '#30a050' title 'trainer op (post..complete)'"),
            ("stall", "boxxyerror fs solid 0.8 lc rgb '#e08020' title 'stall'"),
            ("tx", "points pt 7 ps 0.15 lc rgb '#404040' title 'frame sent'"),
            ("rx", "points pt 7 ps 0.15 lc rgb '#a0a0a0' title 'frame received'"),
            ("retx", "points pt 2 ps 0.8 lc rgb '#d02020' title 'retransmission'"),
        ):
            n = 4 if "boxxy" in style else 2
            cols = "1:2:3:4" if n == 4 else "1:2"
            if files[k]:
                plot.append(f"'{tmp}/{k}' using {cols} with {style}")
        script = f"""
set terminal pngcairo size 1400,{160 + 70 * len(rows)} font 'sans,10'
set output '{a.png}'
set title '{title}' noenhanced
set xlabel 'time (ms, collector clock)'
set xrange [{t0}:{t1}]
set yrange [-0.6:{len(rows) - 0.4}]
set ytics ({labels}) noenhanced
set grid xtics
set key outside bottom center horizontal
plot {", ".join(plot)}
"""
        subprocess.run(["gnuplot"], input=script, text=True, check=True)
    print(f"wrote {a.png}: {len(rows)} rows, {t0:.3f}..{t1:.3f} ms")


if __name__ == "__main__":
    main()
