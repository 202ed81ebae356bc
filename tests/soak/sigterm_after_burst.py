#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""SIGTERM after a burst of calls: vmspaced must exit within --shutdown-grace-ms plus a
margin, every time.

  sigterm_after_burst.py VMSPACED [--runs N] [--calls N] [--grace-ms N] [--margin-s S]

Each run starts a daemon, makes N concurrent 1 MiB ReadFile calls over 16 connections,
waits for their answers, sends SIGTERM with the connections still open and measures
the time to the exit. Exits 1 if a run exceeds grace + margin or exits non-zero.
"""
import argparse
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from message_attacks import MiB, channel, codes, pb, pbg, start  # noqa: E402


def run(vmspaced, calls, grace_ms):
    p, port = start(vmspaced, [f"--shutdown-grace-ms={grace_ms}"])
    chans = [channel(port) for _ in range(16)]
    try:
        stubs = [pbg.VmSpaceStub(c) for c in chans]
        fid = stubs[0].CreateShmemFile(pb.CreateShmemFileRequest(name="burst", size=MiB)).file_id
        stubs[0].WriteFile(pb.WriteFileRequest(file_id=fid, offset=0, data=b"f" * MiB))
        fs = [stubs[i % 16].ReadFile.future(pb.ReadFileRequest(file_id=fid, offset=0, len=MiB),
                                            timeout=120) for i in range(calls)]
        res = codes(fs)
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        try:
            rc = p.wait(60)
        except Exception:
            p.kill()
            rc = p.wait()
        return res, rc, time.monotonic() - t0
    finally:
        if p.poll() is None:
            p.kill()
        for c in chans:
            c.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("vmspaced")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--grace-ms", type=int, default=2000)
    ap.add_argument("--margin-s", type=float, default=3.0)
    a = ap.parse_args()
    limit = a.grace_ms / 1000 + a.margin_s
    bad = 0
    for i in range(a.runs):
        res, rc, dt = run(a.vmspaced, a.calls, a.grace_ms)
        ok = rc == 0 and dt <= limit and res == {"OK": a.calls}
        bad += not ok
        print(f"run {i}: {a.calls} ReadFile {res}; SIGTERM -> exit {rc} after {dt:5.2f} s "
              f"(limit {limit:.1f} s) {'ok' if ok else 'FAIL'}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
