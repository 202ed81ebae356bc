#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Message attacks against vmspaced's memory budget: each attack runs against a fresh
daemon and prints the daemon's peak RSS (VmHWM) beside --max-memory-bytes.

  message_attacks.py VMSPACED [--max-memory-bytes N] [--only NAME] [--limit-mib N]

Attacks: write (48 concurrent 15 MiB WriteMemory), batch (64 Batch streams of 15 MiB
messages), read (200 concurrent 1 MiB ReadMemory), readfile (1,500 concurrent 1 MiB
ReadFile). With --limit-mib, exits 1 if a peak exceeds it.
"""
import argparse
import os
import re
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "client", "python"))
from vmspace_client._proto.vmspace.v1 import vmspace_pb2 as pb  # noqa: E402
from vmspace_client._proto.vmspace.v1 import vmspace_pb2_grpc as pbg  # noqa: E402
import grpc  # noqa: E402

MiB = 1 << 20
PROT_RW = 3
MAP_PRIVATE_ANON = 0x02 | 0x20


def start(vmspaced, extra):
    p = subprocess.Popen([vmspaced, "--listen=127.0.0.1:0", "--metrics-listen=off"] + extra,
                         stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        m = re.search(r"listening grpc=[^ ]*:(\d+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
            return p, int(m.group(1))
    raise RuntimeError("vmspaced did not start")


def status(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def channel(port):
    opts = [("grpc.max_send_message_length", 64 * MiB), ("grpc.max_receive_message_length", 64 * MiB)]
    return grpc.insecure_channel(f"127.0.0.1:{port}", options=opts)


def space_with(stub, length):
    sid = stub.CreateSpace(pb.CreateSpaceRequest()).space_id
    addr = stub.Mmap(pb.MmapRequest(space_id=sid, len=length, prot=PROT_RW,
                                    flags=MAP_PRIVATE_ANON)).addr
    return sid, addr


def codes(futures):
    out = {}
    for f in futures:
        try:
            f.result()
            k = "OK"
        except grpc.RpcError as e:
            k = e.code().name
        out[k] = out.get(k, 0) + 1
    return out


def attack_write(port):
    chans = [channel(port) for _ in range(8)]
    stubs = [pbg.VmSpaceStub(c) for c in chans]
    sid, addr = space_with(stubs[0], 16 * MiB)
    data = b"w" * (15 * MiB)
    fs = [stubs[i % 8].WriteMemory.future(pb.WriteMemoryRequest(space_id=sid, addr=addr, data=data),
                                          timeout=120) for i in range(48)]
    return codes(fs)


def attack_batch(port):
    chans = [channel(port) for _ in range(8)]
    stubs = [pbg.VmSpaceStub(c) for c in chans]
    sid, addr = space_with(stubs[0], 1 * MiB)
    one = b"b" * MiB
    msg = pb.BatchRequest(ops=[pb.Op(write=pb.WriteMemoryRequest(space_id=sid, addr=addr, data=one))
                               for _ in range(15)])
    results = {}
    lock = threading.Lock()

    def stream(i):
        try:
            n = 0
            for _ in stubs[i % 8].Batch(iter([msg] * 3), timeout=120):
                n += 1
            k = "OK"
        except grpc.RpcError as e:
            k = e.code().name
        with lock:
            results[k] = results.get(k, 0) + 1

    ts = [threading.Thread(target=stream, args=(i,)) for i in range(64)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return results


def attack_read(port):
    chans = [channel(port) for _ in range(8)]
    stubs = [pbg.VmSpaceStub(c) for c in chans]
    sid, addr = space_with(stubs[0], 1 * MiB)
    stubs[0].WriteMemory(pb.WriteMemoryRequest(space_id=sid, addr=addr, data=b"r" * MiB))
    fs = [stubs[i % 8].ReadMemory.future(pb.ReadMemoryRequest(space_id=sid, addr=addr, len=MiB),
                                         timeout=120) for i in range(200)]
    return codes(fs)


def attack_readfile(port):
    chans = [channel(port) for _ in range(16)]
    stubs = [pbg.VmSpaceStub(c) for c in chans]
    fid = stubs[0].CreateShmemFile(pb.CreateShmemFileRequest(name="attack", size=MiB)).file_id
    stubs[0].WriteFile(pb.WriteFileRequest(file_id=fid, offset=0, data=b"f" * MiB))
    fs = [stubs[i % 16].ReadFile.future(pb.ReadFileRequest(file_id=fid, offset=0, len=MiB), timeout=120)
          for i in range(1500)]
    return codes(fs)


ATTACKS = {"write": attack_write, "batch": attack_batch, "read": attack_read, "readfile": attack_readfile}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("vmspaced")
    ap.add_argument("--max-memory-bytes", type=int, default=64 * MiB)
    ap.add_argument("--only", default="")
    ap.add_argument("--limit-mib", type=float, default=0)
    ap.add_argument("--flag", action="append", default=[], dest="extra",
                    help="a vmspaced flag, e.g. --flag=--max-transport-bytes=33554432")
    a = ap.parse_args()
    bad = False
    for name, fn in ATTACKS.items():
        if a.only and name not in a.only.split(","):
            continue
        p, port = start(a.vmspaced, [f"--max-memory-bytes={a.max_memory_bytes}"] + a.extra)
        try:
            time.sleep(0.3)
            base = status(p.pid, "VmRSS")
            t0 = time.time()
            res = fn(port)
            dt = time.time() - t0
            peak = status(p.pid, "VmHWM")
            alive = p.poll() is None
        finally:
            p.terminate()
            p.wait(30)
        print(f"{name:9s} baseline {base / MiB:6.1f} MiB  peak {peak / MiB:6.1f} MiB  "
              f"({dt:5.1f} s, answers {res}, daemon {'alive' if alive else 'DIED'})", flush=True)
        if (a.limit_mib and peak > a.limit_mib * MiB) or not alive:
            bad = True
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
