#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""RSS after a load is gone: vmspaced's RSS must come back to its starting RSS plus the
caches its metrics report (vmspace_cache_bytes{cache="frames"|"index_nodes"|"thread_stats"})
plus a slack, and the cache gauges must follow the load.

  rss_after_load.py VMSPACED [--spaces N] [--slack-mib N] [--wait-s S]

The load: N spaces at once (over 8 connections), each with 300 small mappings (VMAs and
index nodes), 8 MiB of anonymous memory written (faults), a 2 MiB shared-memory file
mapped shared and written, 1 MiB read back; then 600 concurrent 1 MiB ReadFile calls.
Then every space is destroyed and every file closed, and the daemon has --wait-s to
settle. Prints the figures; exits 1 if a check fails.
"""
import argparse
import os
import socket
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
from message_attacks import MiB, channel, pb, pbg, start, status  # noqa: E402

PROT_RW = 3
MAP_PRIVATE_ANON = 0x02 | 0x20
MAP_SHARED = 0x01


def start_with_metrics(vmspaced):
    """A daemon (message_attacks.start) serving metrics on a free loopback port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        mport = s.getsockname()[1]
    p, port = start(vmspaced, [f"--metrics-listen=127.0.0.1:{mport}"])
    return p, port, mport


def scrape(mport):
    text = urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def caches(m):
    return {c: m.get(f'vmspace_cache_bytes{{cache="{c}"}}') for c in ("frames", "index_nodes", "thread_stats", "malloc_free")}


def load_space(stub, i):
    sid = stub.CreateSpace(pb.CreateSpaceRequest()).space_id
    for j in range(300):
        stub.Mmap(pb.MmapRequest(space_id=sid, len=64 << 10, prot=1 if j % 2 else PROT_RW,
                                 flags=MAP_PRIVATE_ANON))
    a = stub.Mmap(pb.MmapRequest(space_id=sid, len=8 * MiB, prot=PROT_RW, flags=MAP_PRIVATE_ANON)).addr
    stub.Access(pb.AccessRequest(space_id=sid, addr=a, len=8 * MiB, stride=4096, access=pb.ACCESS_WRITE))
    fid = stub.CreateShmemFile(pb.CreateShmemFileRequest(name=f"load{i}", size=2 * MiB)).file_id
    fa = stub.Mmap(pb.MmapRequest(space_id=sid, len=2 * MiB, prot=PROT_RW, flags=MAP_SHARED, file_id=fid)).addr
    stub.Access(pb.AccessRequest(space_id=sid, addr=fa, len=2 * MiB, stride=4096, access=pb.ACCESS_WRITE))
    stub.ReadMemory(pb.ReadMemoryRequest(space_id=sid, addr=a, len=MiB))
    return sid, fid


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("vmspaced")
    ap.add_argument("--spaces", type=int, default=48)
    ap.add_argument("--slack-mib", type=float, default=16)
    ap.add_argument("--wait-s", type=float, default=10)
    a = ap.parse_args()
    p, port, mport = start_with_metrics(a.vmspaced)
    fails = []
    try:
        time.sleep(0.5)
        base_rss = status(p.pid, "VmRSS")
        m0 = scrape(mport)
        c0 = caches(m0)
        if None in c0.values() or "vmspace_heap_allocated_bytes" not in m0:
            print("vmspace_cache_bytes / vmspace_heap_allocated_bytes missing from /metrics")
            return 1
        chans = [channel(port) for _ in range(8)]
        stubs = [pbg.VmSpaceStub(c) for c in chans]
        made = []
        lock = threading.Lock()

        def work(i):
            r = load_space(stubs[i % 8], i)
            with lock:
                made.append(r)

        ts = [threading.Thread(target=work, args=(i,)) for i in range(a.spaces)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if len(made) != a.spaces:
            fails.append(f"only {len(made)} of {a.spaces} spaces loaded")
        fid = stubs[0].CreateShmemFile(pb.CreateShmemFileRequest(name="burst", size=MiB)).file_id
        stubs[0].WriteFile(pb.WriteFileRequest(file_id=fid, offset=0, data=b"f" * MiB))
        fs = [stubs[i % 8].ReadFile.future(pb.ReadFileRequest(file_id=fid, offset=0, len=MiB), timeout=120)
              for i in range(600)]
        for f in fs:
            f.result()
        stubs[0].CloseFile(pb.CloseFileRequest(file_id=fid))
        loaded_rss = status(p.pid, "VmRSS")
        m1 = scrape(mport)
        for sid, f in made:
            stubs[0].DestroySpace(pb.DestroySpaceRequest(space_id=sid))
            stubs[0].CloseFile(pb.CloseFileRequest(file_id=f))
        for c in chans:
            c.close()
        # Settle: the frame cache is trimmed every --deferred-flush-ms, the heap when the
        # last space has gone.
        deadline = time.time() + a.wait_s
        while True:
            time.sleep(1)
            rss = status(p.pid, "VmRSS")
            m2 = scrape(mport)
            c2 = caches(m2)
            bound = base_rss + c2["frames"] + c2["index_nodes"] + c2["thread_stats"] + a.slack_mib * MiB
            if rss <= bound or time.time() > deadline:
                break
        c1 = caches(m1)
        print(f"baseline RSS {base_rss / MiB:.1f} MiB; loaded RSS {loaded_rss / MiB:.1f} MiB "
              f"({m1['vmspace_spaces']:.0f} spaces, resident {m1['vmspace_resident_bytes'] / MiB:.1f} MiB); "
              f"after destroying all: RSS {rss / MiB:.1f} MiB")
        for tag, c, m in (("start", c0, m0), ("loaded", c1, m1), ("idle", c2, m2)):
            print(f"  {tag:6s} caches " + ", ".join(f"{k} {v / MiB:.2f} MiB" for k, v in c.items()) +
                  f"; heap allocated {m['vmspace_heap_allocated_bytes'] / MiB:.2f} MiB")
        print(f"  bound: baseline + frames + index_nodes + thread_stats + {a.slack_mib:.0f} MiB slack = "
              f"{bound / MiB:.1f} MiB")
        if rss > bound:
            fails.append(f"RSS {rss / MiB:.1f} MiB above the bound {bound / MiB:.1f} MiB after {a.wait_s:.0f} s")
        # The gauges follow the load: index nodes were taken from the pools under it,
        # the heap grew, and the frames freed by the destroys sit in the frame cache.
        if not c1["index_nodes"] + (m1["vmspace_heap_allocated_bytes"] - m0["vmspace_heap_allocated_bytes"]) > MiB:
            fails.append("the heap and index-node gauges did not move under the load")
        if not c2["index_nodes"] > c0["index_nodes"]:
            fails.append("no free index nodes kept after the spaces were destroyed")
        if not c1["thread_stats"] > c0["thread_stats"]:
            fails.append("the per-thread statistics did not grow with the threads of the load")
        limit = m2["vmspace_frame_cache_limit_bytes"]
        if not 0 < c2["frames"] <= limit:
            fails.append(f"frame cache {c2['frames'] / MiB:.1f} MiB not in (0, --frame-cache-bytes]")
        if m2["vmspace_spaces"] != 0 or m2["vmspace_resident_bytes"] != 0:
            fails.append("spaces or resident bytes left after destroying all")
    finally:
        p.terminate()
        p.wait(30)
    for f in fails:
        print("FAIL:", f)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
