#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Client connections against vmspaced: an idle connection is closed after
--max-connection-idle-ms, and no more than --max-connections are held open.

  connections.py VMSPACED [--idle-ms N] [--max N]

idle: a connection that made one call and then none is closed by the daemon within the
idle time plus 4 s: vmspace_connections falls to 0, so does the daemon's count of
established connections to its port (/proc), and the client's channel leaves READY (IDLE).
cap: of max + 4 connections each making one call, max are served and 4 are refused
(UNAVAILABLE, vmspace_connections_refused_total 4, vmspace_connections max); once two
are closed, a new connection is served. Exits 1 if a check fails.
"""
import argparse
import os
import socket
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
from message_attacks import pb, pbg, start  # noqa: E402
import grpc  # noqa: E402


def start_with_metrics(vmspaced, extra):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        mport = s.getsockname()[1]
    p, port = start(vmspaced, [f"--metrics-listen=127.0.0.1:{mport}"] + extra)
    return p, port, mport


def scrape(mport):
    text = urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=10).read().decode()
    out = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
           for line in text.splitlines() if line and not line.startswith("#")}
    for name in ("vmspace_connections", "vmspace_connections_limit", "vmspace_connections_refused_total"):
        out.setdefault(name, -1)  # missing: every check on it fails
    return out


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def established(pid, port):
    """Established TCP connections whose local port is the daemon's gRPC port: the
    daemon's side of its client connections (/proc/PID/net/tcp, tcp6)."""
    n = 0
    for name in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{name}") as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "01":
                    n += 1
    return n


def own_channel(port):
    # A channel with its own connection (not one shared through gRPC's subchannel pool).
    return grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)])


def ping(ch):
    try:
        pbg.VmSpaceStub(ch).Ping(pb.PingRequest(), timeout=5)
        return "OK"
    except grpc.RpcError as e:
        return e.code().name


def wait_for(cond, seconds):
    end = time.time() + seconds
    while time.time() < end:
        if cond():
            return True
        time.sleep(0.1)
    return cond()


def check_idle(vmspaced, idle_ms, fails):
    p, port, mport = start_with_metrics(vmspaced, [f"--max-connection-idle-ms={idle_ms}"])
    ch = own_channel(port)
    try:
        time.sleep(0.3)
        states = []
        ch.subscribe(lambda s: states.append(s.name))
        if ping(ch) != "OK":
            fails.append("idle: the first call failed")
        open1, conns1 = scrape(mport)["vmspace_connections"], established(p.pid, port)
        t0 = time.time()
        closed = wait_for(lambda: scrape(mport)["vmspace_connections"] == 0, idle_ms / 1000 + 4)
        dt = time.time() - t0
        wait_for(lambda: states[-1] != "READY", 2)
        conns2 = established(p.pid, port)
        print(f"idle: --max-connection-idle-ms={idle_ms}: after one call vmspace_connections {open1:.0f}, "
              f"{conns1} established; {'closed' if closed else 'NOT closed'} after {dt:.1f} s: "
              f"{conns2} established; client channel states {states}")
        if open1 != 1 or conns1 != 1:
            fails.append("idle: the call's connection is not counted")
        if not closed or conns2 != 0:
            fails.append(f"idle: the connection was not closed within {idle_ms / 1000 + 4:.1f} s")
        if states[-1] == "READY":
            fails.append("idle: the client's channel is still READY")
        # The client reconnects on its next call.
        if ping(ch) != "OK":
            fails.append("idle: the call after the close failed")
    finally:
        ch.close()
        p.terminate()
        p.wait(30)


def check_cap(vmspaced, most, fails):
    p, port, mport = start_with_metrics(vmspaced, [f"--max-connections={most}"])
    try:
        time.sleep(0.3)
        fds0 = fds(p.pid)
        chans = [own_channel(port) for _ in range(most + 4)]
        res = [ping(ch) for ch in chans]
        m = scrape(mport)
        fds1 = fds(p.pid)
        conns = established(p.pid, port)
        print(f"cap: --max-connections={most}: {most + 4} connections: answers "
              f"{ {k: res.count(k) for k in set(res)} }; vmspace_connections {m['vmspace_connections']:.0f}, "
              f"{conns} established, refused {m['vmspace_connections_refused_total']:.0f}; "
              f"fds {fds0} -> {fds1}")
        if res.count("OK") != most or res.count("UNAVAILABLE") != 4:
            fails.append(f"cap: expected {most} OK and 4 UNAVAILABLE, got {res}")
        if m["vmspace_connections"] != most or m["vmspace_connections_limit"] != most or conns != most:
            fails.append("cap: vmspace_connections is not the cap")
        if m["vmspace_connections_refused_total"] < 4:
            fails.append("cap: refused connections not counted")
        if fds1 > fds0 + most + 2:  # + the scrape's connection to the metrics port
            fails.append(f"cap: the daemon holds {fds1 - fds0} more descriptors, above the cap {most}")
        served = [ch for ch, r in zip(chans, res) if r == "OK"]
        for ch in served[:2]:
            ch.close()
        if not wait_for(lambda: scrape(mport)["vmspace_connections"] == most - 2, 5):
            fails.append("cap: closed connections still counted")
        late = own_channel(port)
        r = ping(late)
        print(f"cap: two closed, then a new connection: {r}")
        if r != "OK":
            fails.append("cap: a connection after two were closed was refused")
        for ch in chans + [late]:
            ch.close()
    finally:
        p.terminate()
        p.wait(30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("vmspaced")
    ap.add_argument("--idle-ms", type=int, default=1000)
    ap.add_argument("--max", type=int, default=4)
    a = ap.parse_args()
    fails = []
    check_idle(a.vmspaced, a.idle_ms, fails)
    check_cap(a.vmspaced, a.max, fails)
    for f in fails:
        print("FAIL:", f)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
