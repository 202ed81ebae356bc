#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""timeline_svg.py draws one row per thread and a red bar per lock wait in the window,
and leaves out events outside it."""
import json
import os
import subprocess
import sys
import tempfile
import xml.dom.minidom

HERE = os.path.dirname(os.path.abspath(__file__))
events = [
    {"name": "mmap", "cat": "op", "ph": "X", "pid": 1, "tid": 7, "ts": 0, "dur": 500},
    {"name": "mmap_lock write wait", "cat": "lock_wait", "ph": "X", "pid": 1, "tid": 7, "ts": 100, "dur": 300},
    {"name": "mmap_lock read wait", "cat": "lock_wait", "ph": "X", "pid": 1, "tid": 9, "ts": 200, "dur": 50},
    {"name": "mmap_lock read wait", "cat": "lock_wait", "ph": "X", "pid": 1, "tid": 9, "ts": 5000, "dur": 50},
    {"name": "thread_name", "ph": "M", "pid": 1, "tid": 9, "args": {"name": "x"}},
]
with tempfile.TemporaryDirectory() as d:
    src, out = os.path.join(d, "t.json"), os.path.join(d, "t.svg")
    json.dump({"traceEvents": events}, open(src, "w"))
    subprocess.run([sys.executable, os.path.join(HERE, "timeline_svg.py"), src, out, "--ms", "1"], check=True)
    doc = xml.dom.minidom.parse(out)
    rects = doc.getElementsByTagName("rect")
    red = [r for r in rects if r.getAttribute("fill") == "#e15759" and r.getElementsByTagName("title")]
    texts = [t.firstChild.data for t in doc.getElementsByTagName("text") if t.firstChild]
    assert len(red) == 2, f"{len(red)} wait bars in the 1 ms window, want 2"
    assert "thread 7" in texts and "thread 9" in texts, texts
    print("ok")
