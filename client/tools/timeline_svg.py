#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Draws a `vmspace trace-locks` / `replay --timeline` file (Chrome trace event JSON) as
an SVG: one row per thread, the window [--from, --from + --ms] in milliseconds. Calls
are the thin top band of a row, faults the middle band, lock holds grey and lock waits
red in the bottom band; each wait's lock and mode is written beside it when it is wide
enough. For a picture in a document; Perfetto (https://ui.perfetto.dev) or
chrome://tracing open the same file interactively.

usage: timeline_svg.py TRACE.json OUT.svg [--from MS] [--ms MS] [--title TEXT]
"""
import argparse
import json
from html import escape

COLORS = {"op": "#4c78a8", "fault": "#59a14f", "lock_hold": "#bab0ac", "lock_wait": "#e15759"}
BANDS = {"op": (0, 6), "fault": (7, 6), "lock_hold": (14, 10), "lock_wait": (14, 10)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--from", dest="start", type=float, default=0.0, help="ms after the first event")
    ap.add_argument("--ms", type=float, default=20.0, help="width of the window in ms")
    ap.add_argument("--title", default="")
    a = ap.parse_args()
    events = [e for e in json.load(open(a.trace))["traceEvents"] if e.get("ph") == "X"]
    if not events:
        raise SystemExit("no events in " + a.trace)
    t0 = min(e["ts"] for e in events) + a.start * 1000
    t1 = t0 + a.ms * 1000
    tids = sorted({(e["pid"], e["tid"]) for e in events})
    width, left, row_h, top = 1000, 110, 32, 40
    scale = (width - left - 10) / (t1 - t0)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{top + row_h * len(tids) + 40}" '
           'font-family="sans-serif" font-size="11">',
           f'<rect width="100%" height="100%" fill="white"/>',
           f'<text x="{left}" y="16" font-size="13">{escape(a.title)}</text>']
    for i, key in enumerate(tids):
        y = top + i * row_h
        out.append(f'<text x="4" y="{y + 18}">thread {key[1]}</text>')
        out.append(f'<line x1="{left}" y1="{y + row_h - 4}" x2="{width - 10}" y2="{y + row_h - 4}" stroke="#eee"/>')
    order = {"lock_hold": 0, "op": 1, "fault": 2, "lock_wait": 3}
    for e in sorted(events, key=lambda e: order.get(e.get("cat"), 9)):
        cat = e.get("cat")
        if cat not in COLORS or e["ts"] + e.get("dur", 0) < t0 or e["ts"] > t1:
            continue
        y = top + tids.index((e["pid"], e["tid"])) * row_h
        x = left + max(0.0, e["ts"] - t0) * scale
        w = max(0.8, min(e["ts"] + e.get("dur", 0), t1) - max(e["ts"], t0)) * scale
        dy, h = BANDS[cat]
        out.append(f'<rect x="{x:.1f}" y="{y + dy}" width="{w:.1f}" height="{h}" fill="{COLORS[cat]}">'
                   f'<title>{escape(e.get("name", ""))} {e.get("dur", 0):.1f} us</title></rect>')
        if cat == "lock_wait" and w > 60:
            out.append(f'<text x="{x + 2:.1f}" y="{y + dy + 9}" fill="white" font-size="9">'
                       f'{escape(e.get("name", ""))}</text>')
    y = top + row_h * len(tids) + 10
    for j, (cat, label) in enumerate((("op", "call"), ("fault", "fault (1 in 16)"),
                                      ("lock_hold", "lock held (1 in 16)"), ("lock_wait", "lock wait"))):
        out.append(f'<rect x="{left + j * 160}" y="{y}" width="12" height="10" fill="{COLORS[cat]}"/>'
                   f'<text x="{left + j * 160 + 16}" y="{y + 9}">{label}</text>')
    out.append(f'<text x="{width - 10}" y="{y + 9}" text-anchor="end">{a.ms:g} ms</text>')
    out.append("</svg>")
    with open(a.out, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
