#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Soak and hostile-client suite: a real vmspaced, N client threads checked against a shadow
model, hostile calls mixed in, a kill -9 and restart midway, and a leak check at the end.

  soak.py VMSPACED [--seconds S] [--clients N] [--seed K] [--kill-at F] [--keep]

Each client thread belongs to one of three tenants (tokens in a --token-file, with an
admin) and keeps a shadow model of everything it owns: per space its VMAs (range,
protection, private or shared, mlocked) and the bytes of every private anonymous page;
per shared object (MAP_SHARED|MAP_ANONYMOUS, shmem files, host files under --data-dir)
its size and page bytes, and for host files the bytes acknowledged durable by FsyncFile
or Msync(MS_SYNC). Every answer is checked against the model: ReadMemory and ReadFile
bytes, WriteMemory and Access counts and the fault that stopped them, Fault outcomes,
Mmap/Mremap/Brk addresses (a new mapping must not overlap a modelled one), error codes
and errnos, StatFile sizes, and the GetMaps layout (ranges with their perms and the
mlock flag, adjacent equal pieces joined). Ops: CreateSpace, CloneSpace (fork),
DestroySpace, ExecSpace (a static ELF: the layout Linux 6.18 gave it), Mmap (anonymous,
shared anonymous, shmem and host files; placed by the daemon, MAP_FIXED over a mapping,
MAP_FIXED_NOREPLACE in a hole), Munmap, Mprotect, Mremap, Madvise, Mlock, Munlock, Brk,
Msync, ReadMemory, WriteMemory, Access, Fault, GetMaps, OpenFile, CreateShmemFile,
WriteFile, ReadFile, TruncateFile, FsyncFile, StatFile, CloseFile, ListSpaces, and Batch
streams mixing the space ops (with an addr_of chain mmap -> write -> read -> munmap).
Tenants: each client probes other tenants' space and file ids (NOT_FOUND for a space,
EBADF / INVALID_ARGUMENT for a file, as docs/operations.md "Ownership" says).

A hostile thread (its own tenant) runs a catalogue of bad calls in a loop, each with the
status docs/api.md and docs/operations.md give it, and a Ping after each: no token, an
unknown token, an unauthenticated Batch stream, bytes that do not parse, a message past
the transport limit, ReadMemory/WriteMemory past --max-io-bytes, a Batch message past
--max-batch, an addr_of naming a later op, huge lengths (Mmap 2^63, Munmap 2^64-1,
Access beyond --max-access-touches, Access with stride 2^64-1), unknown and other
tenants' ids, 5,000-character labels, paths, names and profiles, a 1 TiB walk past its
deadline, and the tenant quotas (spaces, open files, memory).

At --kill-at (a fraction of the run) the daemon is killed with SIGKILL while the clients
run, and restarted on the same --data-dir. Every client then checks its host files:
each page not written, truncated or extended since its last acknowledged FsyncFile /
Msync(MS_SYNC) must read back as acknowledged (docs/operations.md "What survives
what"); the spaces and shmem files are gone, and their old ids must name nothing.

A well-behaved client's call that gRPC cancels RESOURCE_EXHAUSTED ("Received
RST_STREAM with error code 11", ENHANCE_YOUR_CALM) because the hostile thread's
oversized messages filled --max-transport-bytes (docs/operations.md "Messages and the
budget": beyond it gRPC cancels calls) is counted and listed apart; the client then
destroys and closes all it owns (its model may be ahead of the daemon) and starts anew.

At the end every space is destroyed and every file closed; then vmspace_frame_bytes,
vmspace_page_cache_bytes, vmspace_pagetable_bytes and every vmspace_memory_bytes kind
must be 0, frames and page tables allocated == freed, and the daemon's RSS within
baseline + --frame-cache-bytes + 64 MiB. Exit 0 only with 0 wrong answers, 0
unexpected statuses, every hostile call answered as documented and the daemon alive.

A long run on the 2-core build machine (Release build, 5 other builds running):

  /usr/bin/python3 tests/soak/soak.py build/server/vmspaced --seconds 300 --clients 16 --seed 11

  587,305 ops in 303.5 s (1,935/s: 20,782 Batch streams, 29,303 Mmap, 9,403 CloneSpace,
  1,477 ExecSpace, 2,768 FsyncFile, ...); 0 wrong answers, 0 unexpected statuses; 97
  rounds of the hostile catalogue (36 cases), every call answered as documented; kill -9
  at 150.4 s, restarted in 0.19 s, 364 host files checked, 1,905 acknowledged pages, none
  lost; RSS baseline 17.9 MiB, peak 245.3 MiB (the memory-quota attack's 192 MiB), end
  48.8 MiB (bound 97.9 MiB); at the end frame, page-cache, page-table and memory gauges
  0, frames allocated = freed = 724,120, page tables allocated = freed = 107,468.
"""
import argparse
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "client", "python"))
import grpc  # noqa: E402
from vmspace_client._pb import pb, pb_grpc  # noqa: E402
from vmspace_client.errors import VmspaceError  # noqa: E402

PAGE = 4096
MiB = 1 << 20
PROT_NONE, PROT_READ, PROT_WRITE, PROT_EXEC = 0, 1, 2, 4
MAP_SHARED, MAP_PRIVATE, MAP_FIXED, MAP_ANONYMOUS = 0x01, 0x02, 0x10, 0x20
MAP_NORESERVE, MAP_FIXED_NOREPLACE = 0x4000, 0x100000
MS_ASYNC, MS_SYNC = 1, 4
MREMAP_MAYMOVE = 1
MADV = {"normal": 0, "random": 1, "sequential": 2, "willneed": 3, "dontneed": 4, "remove": 9,
        "cold": 20, "pageout": 21, "populate_read": 22, "populate_write": 23}
OUT_SEGV, OUT_BUS = 3, 4  # FaultOutcome
C = grpc.StatusCode
ZERO = bytes(PAGE)

# Daemon limits of the run (small, so the hostile calls reach them).
LIMITS = dict(max_io_bytes=256 << 10, max_batch=256, max_message_bytes=2 * MiB, max_access_touches=1 << 30,
              tenant_max_spaces=48, tenant_max_open_files=64, tenant_max_memory_bytes=192 * MiB,
              max_memory_bytes=768 * MiB, frame_cache_bytes=16 * MiB, max_spaces=512)
CLIENT_MAPPED_CAP = 6 * MiB  # a client's mapped bytes, all its spaces (so no tenant reaches its quota)
TENANTS = ["alpha", "beta", "gamma"]
# ExecSpace's program: the ELF headers of a static `true` (tests/engine/exec), padded to its
# size, and the layout Linux 6.18 gave it (its /proc/PID/maps at the execve stop).
EXEC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "engine", "exec")
EXEC_PROGRAM, EXEC_SIZE, EXEC_ARGV = "static_true", 762296, ["/tmp/fx/static_true"]


def exec_layout():
    """[(start, end, perms)] of static_true.maps, [vsyscall] (outside the mm) left out."""
    out = []
    with open(os.path.join(EXEC_DIR, "static_true.maps")) as f:
        for line in f:
            if line.startswith("#") or not line.strip() or "[vsyscall]" in line:
                continue
            rng, perms = line.split()[:2]
            start, end = (int(x, 16) for x in rng.split("-"))
            out.append((start, end, perms))
    return out
HOSTILE_TENANT = "mallory"
EXEC_LAYOUT = exec_layout()
with open(os.path.join(EXEC_DIR, EXEC_PROGRAM + ".elfhead"), "rb") as _f:
    ELF_HEAD = _f.read()


# ---------------------------------------------------------------------------------------
# The daemon

class Daemon:
    """vmspaced on ephemeral ports with a token file and a data dir; restartable."""

    def __init__(self, binary, root):
        self.binary = binary
        self.root = root
        self.data_dir = os.path.join(root, "data")
        os.makedirs(self.data_dir, exist_ok=True)
        with open(os.path.join(EXEC_DIR, EXEC_PROGRAM + ".elfhead"), "rb") as f:
            head = f.read()
        with open(os.path.join(self.data_dir, EXEC_PROGRAM), "wb") as f:
            f.write(head)
            f.truncate(EXEC_SIZE)
        self.tokens = {t: os.urandom(16).hex() for t in TENANTS + [HOSTILE_TENANT, "admin"]}
        self.token_file = os.path.join(root, "tokens")
        with open(self.token_file, "w") as f:
            for t, tok in self.tokens.items():
                f.write(f"{tok} {t}{' admin' if t == 'admin' else ''}\n")
        self.proc = None
        self.port = self.metrics_port = 0
        self.log = open(os.path.join(root, "vmspaced.log"), "a")

    def start(self):
        flags = [f"--{k.replace('_', '-')}={v}" for k, v in LIMITS.items()]
        self.proc = subprocess.Popen([self.binary, "--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0",
                                      f"--data-dir={self.data_dir}", f"--token-file={self.token_file}",
                                      "--log-level=warn"] + flags, stderr=subprocess.PIPE, text=True)
        for line in self.proc.stderr:
            self.log.write(line)
            m = re.search(r"listening grpc=[^ ]*:(\d+) metrics=[^ ]*:(\d+)", line)
            if m:
                self.port, self.metrics_port = int(m.group(1)), int(m.group(2))
                threading.Thread(target=self._drain, args=(self.proc,), daemon=True).start()
                return
        raise RuntimeError("vmspaced did not start: see " + self.log.name)

    def _drain(self, proc):
        for line in proc.stderr:
            self.log.write(line)
        self.log.flush()

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                return self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                return self.proc.wait(30)
        return self.proc.returncode if self.proc else 0

    def alive(self):
        return self.proc.poll() is None

    def status_bytes(self, key):
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith(key + ":"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    def metrics(self):
        """{name or name{labels}: value} of /metrics."""
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10).read().decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                k, _, v = line.rpartition(" ")
                try:
                    out[k] = float(v)
                except ValueError:
                    pass
        return out


def channel(port):
    opts = [("grpc.max_send_message_length", 64 * MiB), ("grpc.max_receive_message_length", 64 * MiB)]
    return grpc.insecure_channel(f"127.0.0.1:{port}", options=opts)


class Epoch:
    """The daemon's current incarnation: clients compare it to tell a kill from a failure."""

    def __init__(self):
        self.n = 0
        self.port = 0
        self.down = False
        self.cond = threading.Condition()

    def wait_up(self, since):
        with self.cond:
            self.cond.wait_for(lambda: not self.down and self.n != since, timeout=120)
            return self.n, self.port


# ---------------------------------------------------------------------------------------
# Shadow model

class Backing:
    """A shared object: shared anonymous memory, a shmem file or a host file. Pages by index
    (absent = zeros); size in bytes (a page multiple). Host files also keep what the last
    acknowledged sync made durable and which pages changed since."""

    def __init__(self, kind, size, path=None):
        self.kind = kind  # "anon" | "shmem" | "host"
        self.size = size
        self.pages = {}
        self.path = path
        self.durable = {}
        self.durable_size = 0
        self.dirty = set()
        self.size_dirty = False

    def page(self, i):
        return self.pages.get(i, ZERO)

    def set_page(self, i, data):
        self.pages[i] = bytes(data)
        self.dirty.add(i)

    def resize(self, size):
        old = self.size
        for i in [i for i in self.pages if i * PAGE >= size]:
            del self.pages[i]
        self.size = size
        if old != size:
            self.size_dirty = True
            self.dirty.update(range(min(old, size) // PAGE, max(old, size) // PAGE + 1))

    def synced(self, pages=None, whole=False):
        """An acknowledged writeback of `pages` (indexes), or of the whole file."""
        idx = list(self.pages) + list(self.dirty) if whole else pages
        for i in idx:
            if i * PAGE < self.size:
                self.durable[i] = self.page(i)
                self.dirty.discard(i)
        if whole:
            self.durable = {i: d for i, d in self.durable.items() if i * PAGE < self.size}
            self.durable_size = self.size
            self.size_dirty = False
            self.dirty.clear()


class Vma:
    __slots__ = ("start", "end", "prot", "backing", "pgoff", "locked", "brk")

    def __init__(self, start, end, prot, backing=None, pgoff=0, locked=False, brk=False):
        self.start, self.end, self.prot = start, end, prot
        self.backing, self.pgoff, self.locked, self.brk = backing, pgoff, locked, brk

    def copy(self, start, end):
        pg = self.pgoff + (start - self.start) // PAGE if self.backing else 0
        return Vma(start, end, self.prot, self.backing, pg, self.locked, self.brk)

    def perms(self):
        return ("r" if self.prot & PROT_READ else "-") + ("w" if self.prot & PROT_WRITE else "-") + \
               ("x" if self.prot & PROT_EXEC else "-") + ("s" if self.backing else "p")


class Space:
    def __init__(self, sid):
        self.id = sid
        self.vmas = []  # sorted, disjoint
        self.priv = {}  # private anonymous pages by address
        self.brk0 = self.brk = 0

    def find(self, addr):
        for v in self.vmas:
            if v.start <= addr < v.end:
                return v
        return None

    def overlaps(self, start, end, ignore=()):
        return any(v.start < end and start < v.end for v in self.vmas if v not in ignore)

    def carve(self, start, end):
        """Splits VMAs at start and end; returns those inside [start, end)."""
        out, new = [], []
        for v in self.vmas:
            if v.end <= start or v.start >= end:
                new.append(v)
                continue
            if v.start < start:
                new.append(v.copy(v.start, start))
            mid = v.copy(max(v.start, start), min(v.end, end))
            new.append(mid)
            out.append(mid)
            if v.end > end:
                new.append(v.copy(end, v.end))
        self.vmas = sorted(new, key=lambda v: v.start)
        return out

    def unmap(self, start, end):
        inside = self.carve(start, end)
        self.vmas = [v for v in self.vmas if v not in inside]
        for a in [a for a in self.priv if start <= a < end]:
            del self.priv[a]

    def insert(self, v):
        self.unmap(v.start, v.end)
        self.vmas.append(v)
        self.vmas.sort(key=lambda x: x.start)

    def page_access(self, addr, write=False, execute=False):
        """(None, vma) if an access of `addr` succeeds, else (FaultOutcome, None)."""
        v = self.find(addr)
        if v is None:
            return OUT_SEGV, None
        # x86 access_error(): a write needs VM_WRITE, a read or an instruction fetch of a
        # page not present only an accessible VMA; the fetch then faults the page in as
        # a read (SIGBUS beyond EOF) before its NX protection fault (SIGSEGV).
        if not v.prot & (PROT_WRITE if write else PROT_READ | PROT_WRITE | PROT_EXEC):
            return OUT_SEGV, None
        if v.backing and (v.pgoff + (addr - v.start) // PAGE) * PAGE >= v.backing.size:
            return OUT_BUS, None
        if execute and not v.prot & PROT_EXEC:
            return OUT_SEGV, None
        return None, v

    def get_page(self, v, p):
        if v.backing:
            return v.backing.page(v.pgoff + (p - v.start) // PAGE)
        return self.priv.get(p, ZERO)

    def put_page(self, v, p, data):
        if v.backing:
            v.backing.set_page(v.pgoff + (p - v.start) // PAGE, data)
        else:
            self.priv[p] = bytes(data)

    def read(self, addr, n):
        """(bytes, stop outcome or 0) of ReadMemory."""
        out = bytearray()
        while len(out) < n:
            a = addr + len(out)
            p = a & ~(PAGE - 1)
            k = min(PAGE - (a - p), n - len(out))
            stop, v = self.page_access(a)
            if stop:
                return bytes(out), stop
            out += self.get_page(v, p)[a - p:a - p + k]
        return bytes(out), 0

    def write(self, addr, data):
        """Applies WriteMemory; (bytes written, stop outcome or 0)."""
        done = 0
        while done < len(data):
            a = addr + done
            p = a & ~(PAGE - 1)
            k = min(PAGE - (a - p), len(data) - done)
            stop, v = self.page_access(a, write=True)
            if stop:
                return done, stop
            pg = bytearray(self.get_page(v, p))
            pg[a - p:a - p + k] = data[done:done + k]
            self.put_page(v, p, pg)
            done += k
        return done, 0

    def access(self, addr, n, stride, write):
        """Applies Access; (accesses, stop outcome or 0). A write stores (uint8)i at addr+i."""
        i, count = 0, 0
        while i < n:
            a = addr + i
            p = a & ~(PAGE - 1)
            stop, v = self.page_access(a, write=write)
            if stop:
                return count, stop
            pg = bytearray(self.get_page(v, p)) if write else None
            while i < n and addr + i < p + PAGE:
                if write:
                    pg[addr + i - p] = i & 0xFF
                count += 1
                i += stride
            if write:
                self.put_page(v, p, pg)
        return count, 0

    def layout(self):
        """[(start, end, perms, locked)] with adjacent equal pieces joined."""
        out = []
        for v in self.vmas:
            key = (v.perms(), v.locked)
            if out and out[-1][1] == v.start and out[-1][2:] == key:
                out[-1] = (out[-1][0], v.end) + key
            else:
                out.append((v.start, v.end) + key)
        return out

    def mapped_bytes(self):
        return sum(v.end - v.start for v in self.vmas)


def kernel_layout(vmas):
    out = []
    for v in vmas:
        key = (v.perms, " lo" in " " + v.smaps_vmflags)
        if out and out[-1][1] == v.start and out[-1][2:] == key:
            out[-1] = (out[-1][0], v.end) + key
        else:
            out.append((v.start, v.end) + key)
    return out


# ---------------------------------------------------------------------------------------
# Shared results

class Results:
    def __init__(self):
        self.lock = threading.Lock()
        self.ops = 0
        self.by_op = {}
        self.wrong = []
        self.unexpected = []
        self.hostile = {}  # case -> {status: count}
        self.hostile_bad = []
        self.durability = {"files": 0, "pages_checked": 0, "bad": 0}
        self.cross_tenant = {}
        self.restart_lost = 0  # ops in flight at the kill
        self.transport_refused = []
        self.orphans_swept = 0  # spaces of refused calls destroyed by sweep_orphans

    def op(self, name):
        with self.lock:
            self.ops += 1
            self.by_op[name] = self.by_op.get(name, 0) + 1

    def add_wrong(self, what):
        with self.lock:
            self.wrong.append(what)
        print("WRONG ANSWER:", what, flush=True)

    def add_unexpected(self, what):
        with self.lock:
            self.unexpected.append(what)
        print("UNEXPECTED STATUS:", what, flush=True)


class Restarted(Exception):
    """The daemon went away under a call (the kill): the client resynchronises."""


def err_of(e):
    """(code name, errno name) of a grpc.RpcError."""
    v = VmspaceError.from_rpc_error(e)
    return v.code.name, v.errno_name, v.message


class Conn:
    """A tenant's stub over the current daemon."""

    def __init__(self, epoch, token):
        self.epoch = epoch
        self.md = (("authorization", "Bearer " + token),)
        self.n, self.port = epoch.n, epoch.port
        self.ch = channel(self.port)
        self.stub = pb_grpc.VmSpaceStub(self.ch)

    def reconnect(self):
        self.ch.close()
        self.n, self.port = self.epoch.wait_up(self.n)
        self.ch = channel(self.port)
        self.stub = pb_grpc.VmSpaceStub(self.ch)

    def call(self, method, req, timeout=30):
        """(response, None) or (None, (code name, errno name)); Restarted if the daemon died."""
        try:
            return getattr(self.stub, method)(req, timeout=timeout, metadata=self.md), None
        except grpc.RpcError as e:
            if self.epoch.down or self.epoch.n != self.n or e.code() == C.UNAVAILABLE:
                raise Restarted() from None
            return None, err_of(e)

    def batch(self, msgs, timeout=60):
        try:
            return list(self.stub.Batch(iter(msgs), timeout=timeout, metadata=self.md)), None
        except grpc.RpcError as e:
            if self.epoch.down or self.epoch.n != self.n or e.code() == C.UNAVAILABLE:
                raise Restarted() from None
            return None, err_of(e)


# ---------------------------------------------------------------------------------------
# A client: random ops on what it owns, each answer checked against the model

class Plan:
    """One op: its Batch kind, its request and a check of (response, error)."""

    def __init__(self, kind, method, req, check):
        self.kind, self.method, self.req, self.check = kind, method, req, check


class Client(threading.Thread):
    def __init__(self, cid, tenant, token, epoch, results, registry, deadline, seed):
        super().__init__(daemon=True)
        self.cid, self.tenant, self.token = cid, tenant, token
        self.epoch, self.res, self.registry = epoch, results, registry
        self.deadline = deadline
        self.rng = random.Random(seed)
        self.spaces = {}
        self.fds = {}  # file id -> Backing
        self.host = {}  # path -> Backing
        self.nfile = 0
        self.dead_files = []
        self.refused = False
        self.error = None
        self.resyncs = 0

    # -- checking helpers
    def wrong(self, what):
        self.res.add_wrong(f"client {self.cid} ({self.tenant}): {what}")

    def unexpected(self, what):
        self.res.add_unexpected(f"client {self.cid} ({self.tenant}): {what}")

    def status_is(self, what, err, want):
        """err (code, errno) against want (None = OK, or (code, errno or None)); True if equal.
        A call the transport refused (RST_STREAM ENHANCE_YOUR_CALM, as RESOURCE_EXHAUSTED)
        is counted apart, whatever answer was wanted (a cross-tenant probe's NOT_FOUND
        too: the refusal tells nothing of the daemon's answer): see the module docstring."""
        if err is not None and err[0] == "RESOURCE_EXHAUSTED" and "RST_STREAM" in err[2]:
            with self.res.lock:
                self.res.transport_refused.append(f"client {self.cid}: {what}")
            self.refused = True
            self.ever_refused = True
            return False
        if want is None and err is None:
            return True
        if want is not None and err is not None and err[0] == want[0] and (want[1] is None or want[1] == err[1]):
            return True
        self.unexpected(f"{what}: got {err or 'OK'}, want {want or 'OK'}")
        return False

    def publish(self):
        with self.registry["lock"]:
            self.registry[self.cid] = (self.tenant, list(self.spaces), list(self.fds))

    # -- running
    def run(self):
        self.conn = Conn(self.epoch, self.token)
        try:
            while time.time() < self.deadline:
                try:
                    self.refused = False
                    self.step()
                    if self.refused:
                        self.forget_all()
                except Restarted:
                    self.recover()
            self.finish()
        except Restarted:
            try:
                self.recover()
                self.finish()
            except Exception:
                self.error = traceback.format_exc()
        except Exception:
            self.error = traceback.format_exc()
            print(f"client {self.cid} crashed:\n{self.error}", flush=True)

    def step(self):
        r = self.rng.random()
        if not self.spaces or (r < 0.03 and len(self.spaces) < 3):
            return self.op_create_space()
        if r < 0.05:
            return self.op_clone() if len(self.spaces) < 5 else self.op_destroy()
        if r < 0.07:
            return self.op_destroy()
        if r < 0.15:
            return self.file_op()
        if r < 0.22:
            return self.op_batch()
        if r < 0.24:
            return self.op_maps_check()
        if r < 0.25:
            return self.op_cross_tenant()
        if r < 0.26:
            return self.op_list_spaces()
        if r < 0.27:
            return self.op_bad_call()
        if r < 0.275:
            return self.op_exec()
        sp = self.rng.choice(list(self.spaces.values()))
        r = self.rng.random()
        if r < 0.10:
            return self.op_mmap_hint(sp)
        if r < 0.15:
            return self.op_mremap(sp)
        if r < 0.20:
            return self.op_brk_unary(sp)
        plan = self.plan_space_op(sp)
        if plan:
            self.run_unary(plan)

    def run_unary(self, plan):
        self.res.op(plan.method)
        resp, err = self.conn.call(plan.method, plan.req)
        plan.check(resp, err)

    # -- spaces
    def op_create_space(self):
        self.res.op("CreateSpace")
        resp, err = self.conn.call("CreateSpace", pb.CreateSpaceRequest(label=f"soak-{self.cid}"))
        if not self.status_is("CreateSpace", err, None):
            return
        sp = Space(resp.space_id)
        r, err = self.conn.call("Brk", pb.BrkRequest(space_id=sp.id, brk=0))
        if self.status_is("Brk 0", err, None):
            sp.brk0 = sp.brk = r.brk
        self.spaces[sp.id] = sp
        self.publish()

    def op_clone(self):
        parent = self.rng.choice(list(self.spaces.values()))
        self.res.op("CloneSpace")
        resp, err = self.conn.call("CloneSpace", pb.CloneSpaceRequest(space_id=parent.id))
        if not self.status_is("CloneSpace", err, None):
            return
        child = Space(resp.space_id)
        child.brk0, child.brk = parent.brk0, parent.brk
        for v in parent.vmas:
            c = v.copy(v.start, v.end)
            c.locked = False  # VM_LOCKED is not inherited
            child.vmas.append(c)
        child.priv = dict(parent.priv)
        self.spaces[child.id] = child
        self.publish()

    def op_destroy(self):
        sp = self.rng.choice(list(self.spaces.values()))
        self.res.op("DestroySpace")
        _, err = self.conn.call("DestroySpace", pb.DestroySpaceRequest(space_id=sp.id))
        if not self.status_is("DestroySpace", err, None) and self.refused:
            return  # forget_all destroys it
        del self.spaces[sp.id]
        self.publish()
        if self.rng.random() < 0.3:  # the old id names nothing
            self.res.op("ReadMemory(destroyed)")
            _, err = self.conn.call("ReadMemory", pb.ReadMemoryRequest(space_id=sp.id, addr=0x10000, len=1))
            self.status_is("ReadMemory of a destroyed space", err, ("NOT_FOUND", None))

    def op_maps_check(self):
        sp = self.rng.choice(list(self.spaces.values()))
        self.res.op("GetMaps")
        resp, err = self.conn.call("GetMaps", pb.GetMapsRequest(space_id=sp.id))
        if not self.status_is("GetMaps", err, None):
            return
        got, want = kernel_layout(resp.vmas), sp.layout()
        if got != want:
            self.wrong(f"GetMaps of space {sp.id:#x}: daemon {fmt_layout(got)} model {fmt_layout(want)}")
            self.drop_space(sp)

    def drop_space(self, sp):
        """After a wrong answer the model of `sp` is unreliable: destroy it."""
        self.conn.call("DestroySpace", pb.DestroySpaceRequest(space_id=sp.id))
        self.spaces.pop(sp.id, None)
        self.publish()

    def op_list_spaces(self):
        self.res.op("ListSpaces")
        resp, err = self.conn.call("ListSpaces", pb.ListSpacesRequest())
        if not self.status_is("ListSpaces", err, None):
            return
        ids = {s.space_id for s in resp.spaces}
        missing = [s for s in self.spaces if s not in ids]
        if missing:
            self.wrong(f"ListSpaces lacks own spaces {[hex(s) for s in missing]}")
        with self.registry["lock"]:
            others = {s for k, v in self.registry.items() if k != "lock" and v[0] != self.tenant for s in v[1]}
        leak = ids & others
        if leak:
            self.wrong(f"ListSpaces of tenant {self.tenant} shows other tenants' spaces {[hex(s) for s in leak]}")

    def op_cross_tenant(self):
        with self.registry["lock"]:
            others = [v for k, v in self.registry.items() if k != "lock" and v[0] != self.tenant]
        spaces = [s for v in others for s in v[1]]
        files = [f for v in others for f in v[2]]
        c = self.res.cross_tenant
        if spaces:
            s = self.rng.choice(spaces)
            for method, req in (("ReadMemory", pb.ReadMemoryRequest(space_id=s, addr=0x10000, len=16)),
                                ("Munmap", pb.MunmapRequest(space_id=s, addr=0, len=1 << 46)),
                                ("DestroySpace", pb.DestroySpaceRequest(space_id=s)),
                                ("CloneSpace", pb.CloneSpaceRequest(space_id=s)),
                                ("GetMaps", pb.GetMapsRequest(space_id=s))):
                self.res.op(method + "(other tenant)")
                _, err = self.conn.call(method, req)
                key = f"{method} of another tenant's space: {err[0] if err else 'OK'}"
                with self.res.lock:
                    c[key] = c.get(key, 0) + 1
                self.status_is(f"{method} of another tenant's space", err, ("NOT_FOUND", None))
        if files:
            f = self.rng.choice(files)
            for method, req in (("ReadFile", pb.ReadFileRequest(file_id=f, offset=0, len=16)),
                                ("WriteFile", pb.WriteFileRequest(file_id=f, offset=0, data=b"x")),
                                ("CloseFile", pb.CloseFileRequest(file_id=f)),
                                ("TruncateFile", pb.TruncateFileRequest(file_id=f, size=0))):
                self.res.op(method + "(other tenant)")
                _, err = self.conn.call(method, req)
                key = f"{method} of another tenant's file: {err[0] + '/' + err[1] if err else 'OK'}"
                with self.res.lock:
                    c[key] = c.get(key, 0) + 1
                self.status_is(f"{method} of another tenant's file", err, ("INVALID_ARGUMENT", "EBADF"))
            if self.spaces:  # mapping another tenant's file
                sp = self.rng.choice(list(self.spaces.values()))
                self.res.op("Mmap(other tenant's file)")
                _, err = self.conn.call("Mmap", pb.MmapRequest(space_id=sp.id, len=PAGE, prot=PROT_READ,
                                                               flags=MAP_SHARED, file_id=f))
                self.status_is("Mmap of another tenant's file", err, ("INVALID_ARGUMENT", "EBADF"))

    def op_exec(self):
        """ExecSpace of a fresh space: the layout Linux gave the program, its ELF header
        at 0x400000; the space is then destroyed (private file mappings are not modelled)."""
        self.res.op("CreateSpace")
        r, err = self.conn.call("CreateSpace", pb.CreateSpaceRequest(label=f"exec-{self.cid}"))
        if not self.status_is("CreateSpace for exec", err, None):
            return
        sid = r.space_id
        try:
            self.res.op("ExecSpace")
            _, err = self.conn.call("ExecSpace", pb.ExecSpaceRequest(space_id=sid, path=EXEC_PROGRAM,
                                                                     argv=EXEC_ARGV))
            if not self.status_is("ExecSpace", err, None):
                return
            self.res.op("GetMaps")
            m, err = self.conn.call("GetMaps", pb.GetMapsRequest(space_id=sid))
            if self.status_is("GetMaps after exec", err, None):
                got = [(v.start, v.end, v.perms) for v in m.vmas]
                if got != EXEC_LAYOUT:
                    self.wrong(f"ExecSpace layout {got}, Linux's {EXEC_LAYOUT}")
            self.res.op("ReadMemory")
            rd, err = self.conn.call("ReadMemory", pb.ReadMemoryRequest(space_id=sid, addr=0x400000, len=64))
            if self.status_is("ReadMemory after exec", err, None) and rd.data != ELF_HEAD[:64]:
                self.wrong("ReadMemory of the exec'd ELF header at 0x400000 differs from the file")
        finally:
            self.res.op("DestroySpace")
            _, err = self.conn.call("DestroySpace", pb.DestroySpaceRequest(space_id=sid))
            self.status_is("DestroySpace after exec", err, None)

    def op_bad_call(self):
        """Calls of a client's own making that fail in documented ways."""
        sp = self.rng.choice(list(self.spaces.values()))
        k = self.rng.randrange(5)
        if k == 0:
            self.res.op("Munmap(unaligned)")
            _, err = self.conn.call("Munmap", pb.MunmapRequest(space_id=sp.id, addr=0x10001, len=PAGE))
            self.status_is("Munmap unaligned", err, ("INVALID_ARGUMENT", "EINVAL"))
        elif k == 1:
            self.res.op("Mmap(len 0)")
            _, err = self.conn.call("Mmap", pb.MmapRequest(space_id=sp.id, len=0, prot=3, flags=0x22))
            self.status_is("Mmap len 0", err, ("INVALID_ARGUMENT", "EINVAL"))
        elif k == 2 and self.dead_files:
            self.res.op("ReadFile(closed)")
            _, err = self.conn.call("ReadFile", pb.ReadFileRequest(file_id=self.rng.choice(self.dead_files),
                                                                   offset=0, len=1))
            self.status_is("ReadFile of a closed file", err, ("INVALID_ARGUMENT", "EBADF"))
        elif k == 3:
            hole = self.find_hole(sp, PAGE)
            if hole:
                self.res.op("Mprotect(hole)")
                _, err = self.conn.call("Mprotect", pb.MprotectRequest(space_id=sp.id, addr=hole, len=PAGE,
                                                                       prot=PROT_READ))
                self.status_is("Mprotect of a hole", err, ("RESOURCE_EXHAUSTED", "ENOMEM"))
        else:
            self.res.op("Madvise(bad advice)")
            _, err = self.conn.call("Madvise", pb.MadviseRequest(space_id=sp.id, addr=0x10000, len=PAGE,
                                                                 advice=100))
            self.status_is("Madvise MADV_HWPOISON", err, ("INVALID_ARGUMENT", "EINVAL"))

    # -- picking ranges
    def pick_range(self, sp, whole_vma=False, no_brk=True, max_pages=8):
        """A page range inside one modelled VMA: (vma, start, end), or None."""
        vs = [v for v in sp.vmas if not (no_brk and v.brk)]
        if not vs:
            return None
        v = self.rng.choice(vs)
        if whole_vma:
            return v, v.start, v.end
        n = (v.end - v.start) // PAGE
        a = self.rng.randrange(n)
        b = min(n, a + 1 + self.rng.randrange(max_pages))
        return v, v.start + a * PAGE, v.start + b * PAGE

    def pick_addr(self, sp):
        """An address to read or write: inside a VMA, or just past one (a hole or a neighbour)."""
        if not sp.vmas:
            return 0x7f0000000000
        v = self.rng.choice(sp.vmas)
        if self.rng.random() < 0.15:
            return v.end - self.rng.randrange(1, 64)
        return v.start + self.rng.randrange(v.end - v.start)

    def find_hole(self, sp, length):
        """A free range of `length` near the modelled VMAs (or in a fresh area)."""
        base = min((v.start for v in sp.vmas if not v.brk), default=0x7e0000000000)
        for _ in range(20):
            a = base - self.rng.randrange(1, 4096) * PAGE
            if a > 0x10000000 and not sp.overlaps(a, a + length) and not (sp.brk0 <= a < sp.brk0 + (64 << 20)):
                return a
        return None

    def mapped_total(self):
        return sum(s.mapped_bytes() for s in self.spaces.values())

    def random_data(self, n):
        return self.rng.randbytes(n)

    # -- space ops as Plans (usable both unary and in Batch)
    def plan_space_op(self, sp, in_batch=False):
        kinds = ["read", "read", "write", "write", "access", "fault", "mprotect", "madvise", "munmap",
                 "mlock", "munlock", "msync", "mmap_fixed", "mmap_noreplace", "brk"]
        k = self.rng.choice(kinds)
        return getattr(self, "plan_" + k)(sp, in_batch)

    def plan_read(self, sp, in_batch):
        a = self.pick_addr(sp)
        n = self.rng.randrange(1, 3 * PAGE)
        data, stop = sp.read(a, n)

        def check(resp, err):
            if not self.status_is("ReadMemory", err, None):
                return
            if resp.data != data or (stop and resp.stop.outcome != stop):
                self.wrong(f"ReadMemory {sp.id:#x} {a:#x}+{n}: got {len(resp.data)} bytes "
                           f"stop {resp.stop.outcome}, want {len(data)} stop {stop}; "
                           f"first difference at {first_diff(resp.data, data)}")
                self.drop_space(sp)
        return Plan("read", "ReadMemory", pb.ReadMemoryRequest(space_id=sp.id, addr=a, len=n), check)

    def plan_write(self, sp, in_batch):
        a = self.pick_addr(sp)
        data = self.random_data(self.rng.randrange(1, 3 * PAGE))
        n, stop = sp.write(a, data)

        def check(resp, err):
            if not self.status_is("WriteMemory", err, None):
                return
            if resp.bytes_written != n or (stop and resp.stop.outcome != stop):
                self.wrong(f"WriteMemory {sp.id:#x} {a:#x}+{len(data)}: wrote {resp.bytes_written} "
                           f"stop {resp.stop.outcome}, want {n} stop {stop}")
                self.drop_space(sp)
        return Plan("write", "WriteMemory", pb.WriteMemoryRequest(space_id=sp.id, addr=a, data=data), check)

    def plan_access(self, sp, in_batch):
        a = self.pick_addr(sp)
        n = self.rng.randrange(1, 3 * PAGE)
        stride = self.rng.choice([1, 7, 64, 1000, 4096, 5000])
        write = self.rng.random() < 0.5
        count, stop = sp.access(a, n, stride, write)

        def check(resp, err):
            if not self.status_is("Access", err, None):
                return
            if resp.accesses != count or resp.stop.outcome != stop:
                self.wrong(f"Access {'write' if write else 'read'} {sp.id:#x} {a:#x}+{n} stride {stride}: "
                           f"{resp.accesses} accesses stop {resp.stop.outcome}, want {count} stop {stop}")
                self.drop_space(sp)
        acc = pb.ACCESS_WRITE if write else pb.ACCESS_READ
        return Plan("access", "Access", pb.AccessRequest(space_id=sp.id, addr=a, len=n, stride=stride, access=acc),
                    check)

    def plan_fault(self, sp, in_batch):
        a = self.pick_addr(sp)
        kind = self.rng.choice(["read", "write", "exec"])
        stop, _ = sp.page_access(a, write=kind == "write", execute=kind == "exec")
        acc = {"read": pb.ACCESS_READ, "write": pb.ACCESS_WRITE, "exec": pb.ACCESS_EXEC}[kind]

        def check(resp, err):
            if not self.status_is("Fault", err, None):
                return
            out = resp.fault.outcome
            if (stop and out != stop) or (not stop and out in (OUT_SEGV, OUT_BUS)):
                self.wrong(f"Fault {kind} {sp.id:#x} {a:#x}: outcome {out}, want {stop or 'none/minor/major'}")
                self.drop_space(sp)
        return Plan("fault", "Fault", pb.FaultRequest(space_id=sp.id, addr=a, access=acc), check)

    def plan_mprotect(self, sp, in_batch):
        r = self.pick_range(sp)
        if not r:
            return None
        _, s, e = r
        prot = self.rng.choice([PROT_NONE, PROT_READ, PROT_READ | PROT_WRITE, PROT_READ | PROT_WRITE,
                                PROT_READ | PROT_EXEC])
        for v in sp.carve(s, e):
            v.prot = prot
        return Plan("mprotect", "Mprotect", pb.MprotectRequest(space_id=sp.id, addr=s, len=e - s, prot=prot),
                    lambda resp, err: self.status_is(f"Mprotect {s:#x}+{e - s:#x}", err, None))

    def plan_madvise(self, sp, in_batch):
        r = self.pick_range(sp, no_brk=False)
        if not r:
            return None
        v, s, e = r
        name = self.rng.choice(["dontneed", "dontneed", "willneed", "cold", "pageout", "normal", "random",
                                "sequential", "populate_read", "populate_write", "remove"])
        want = None
        sp.carve(s, e)  # the flag-setting advices split the VMA
        if name in ("cold", "pageout") and v.locked:
            want = ("INVALID_ARGUMENT", "EINVAL")  # can_madv_lru_vma()
        elif name == "dontneed":
            if v.locked:
                want = ("INVALID_ARGUMENT", "EINVAL")
            elif not v.backing:
                for a in [a for a in sp.priv if s <= a < e]:
                    del sp.priv[a]
        elif name in ("populate_read", "populate_write"):
            need = PROT_READ if name == "populate_read" else PROT_WRITE
            if not v.prot & need or any(sp.page_access(a, write=need == PROT_WRITE)[0] for a in range(s, e, PAGE)):
                return None
        elif name == "remove":
            if not v.backing or v.backing.kind == "host" or not v.prot & PROT_WRITE or v.locked:
                return None
            for a in range(s, e, PAGE):
                i = v.pgoff + (a - v.start) // PAGE
                if i * PAGE < v.backing.size:
                    v.backing.pages.pop(i, None)
        return Plan("madvise", "Madvise", pb.MadviseRequest(space_id=sp.id, addr=s, len=e - s, advice=MADV[name]),
                    lambda resp, err: self.status_is(f"Madvise {name} {s:#x}+{e - s:#x}", err, want))

    def plan_munmap(self, sp, in_batch):
        r = self.pick_range(sp)
        if not r:
            return None
        _, s, e = r
        if self.rng.random() < 0.2:  # over a hole too
            e2 = e + self.rng.randrange(1, 8) * PAGE
            if not any(v.brk and v.start < e2 and s < v.end for v in sp.vmas) and \
                    not (s < sp.brk0 + (64 << 20) and sp.brk0 < e2):
                e = e2
        sp.unmap(s, e)
        return Plan("munmap", "Munmap", pb.MunmapRequest(space_id=sp.id, addr=s, len=e - s),
                    lambda resp, err: self.status_is(f"Munmap {s:#x}+{e - s:#x}", err, None))

    def plan_mlock(self, sp, in_batch):
        r = self.pick_range(sp, no_brk=False, max_pages=4)
        if not r:
            return None
        _, s, e = r
        # mlock(2) sets VM_LOCKED, then populates: a page it cannot fault in (PROT_NONE,
        # beyond EOF) makes it ENOMEM (__mlock_posix_error_return), the flag staying set.
        want = None
        for v in sp.carve(s, e):
            v.locked = True
            if not v.prot or any(sp.page_access(a, write=bool(v.prot & PROT_WRITE) and not v.backing)[0]
                                 for a in range(v.start, v.end, PAGE)):
                want = ("RESOURCE_EXHAUSTED", "ENOMEM")
        return Plan("mlock", "Mlock", pb.MlockRequest(space_id=sp.id, addr=s, len=e - s),
                    lambda resp, err: self.status_is(f"Mlock {s:#x}+{e - s:#x}", err, want))

    def plan_munlock(self, sp, in_batch):
        r = self.pick_range(sp, no_brk=False)
        if not r:
            return None
        _, s, e = r
        for v in sp.carve(s, e):
            v.locked = False
        return Plan("munlock", "Munlock", pb.MunlockRequest(space_id=sp.id, addr=s, len=e - s),
                    lambda resp, err: self.status_is(f"Munlock {s:#x}+{e - s:#x}", err, None))

    def plan_msync(self, sp, in_batch):
        r = self.pick_range(sp, no_brk=False)
        if not r:
            return None
        v, s, e = r
        flags = MS_ASYNC if in_batch or self.rng.random() < 0.3 else MS_SYNC
        b = v.backing

        def check(resp, err):
            if self.status_is(f"Msync {s:#x}+{e - s:#x}", err, None) and flags == MS_SYNC and b and b.kind == "host":
                b.synced([v.pgoff + (a - v.start) // PAGE for a in range(s, e, PAGE)])
        return Plan("msync", "Msync", pb.MsyncRequest(space_id=sp.id, addr=s, len=e - s, flags=flags), check)

    def new_mapping(self, sp, length):
        """(prot, flags, backing, pgoff, file_id) of a new mapping: private or shared anonymous,
        or a shared mapping of an open file."""
        prot = self.rng.choice([PROT_READ | PROT_WRITE] * 3 + [PROT_READ, PROT_NONE])
        r = self.rng.random()
        if r < 0.55:
            return prot, MAP_PRIVATE | MAP_ANONYMOUS, None, 0, 0
        if r < 0.7 or not self.fds:
            return prot, MAP_SHARED | MAP_ANONYMOUS, Backing("anon", length), 0, 0
        fid = self.rng.choice(list(self.fds))
        b = self.fds[fid]
        pgoff = self.rng.randrange(max(1, b.size // PAGE + 1))
        return prot, MAP_SHARED, b, pgoff, fid

    def plan_mmap_fixed(self, sp, in_batch):
        r = self.pick_range(sp)
        if not r or self.mapped_total() > CLIENT_MAPPED_CAP:
            return None
        _, s, e = r
        return self._plan_mmap_at(sp, s, e, MAP_FIXED)

    def plan_mmap_noreplace(self, sp, in_batch):
        length = self.rng.randrange(1, 17) * PAGE
        a = self.find_hole(sp, length)
        if a is None or self.mapped_total() + length > CLIENT_MAPPED_CAP:
            return None
        return self._plan_mmap_at(sp, a, a + length, MAP_FIXED_NOREPLACE)

    def _plan_mmap_at(self, sp, s, e, fixed):
        prot, flags, b, pgoff, fid = self.new_mapping(sp, e - s)
        sp.insert(Vma(s, e, prot, b, pgoff))

        def check(resp, err):
            if self.status_is(f"Mmap fixed {s:#x}+{e - s:#x} flags {flags | fixed:#x}", err, None) and resp.addr != s:
                self.wrong(f"Mmap fixed at {s:#x} answered {resp.addr:#x}")
                self.drop_space(sp)
        return Plan("mmap", "Mmap", pb.MmapRequest(space_id=sp.id, addr=s, len=e - s, prot=prot, flags=flags | fixed,
                                                   offset=pgoff * PAGE, file_id=fid), check)

    def plan_brk(self, sp, in_batch):
        if not sp.brk0:
            return None
        new = sp.brk0 + self.rng.randrange(0, 64) * PAGE
        old = sp.brk
        if new > old and sp.overlaps(old, new):
            return None
        if new < old:
            sp.unmap(new, old)
        elif new > old:
            sp.insert(Vma(old, new, PROT_READ | PROT_WRITE, brk=True))
        sp.brk = new

        def check(resp, err):
            if self.status_is("Brk", err, None) and resp.brk != new:
                self.wrong(f"Brk {sp.id:#x} to {new:#x} (from {old:#x}) answered {resp.brk:#x}")
                self.drop_space(sp)
        return Plan("brk", "Brk", pb.BrkRequest(space_id=sp.id, brk=new), check)

    def op_brk_unary(self, sp):
        plan = self.plan_brk(sp, False)
        if plan:
            self.run_unary(plan)

    # -- unary-only space ops (the answer decides the model)
    def op_mmap_hint(self, sp):
        length = self.rng.randrange(1, 33) * PAGE
        if self.mapped_total() + length > CLIENT_MAPPED_CAP:
            return
        prot, flags, b, pgoff, fid = self.new_mapping(sp, length)
        self.res.op("Mmap")
        resp, err = self.conn.call("Mmap", pb.MmapRequest(space_id=sp.id, len=length, prot=prot, flags=flags,
                                                          offset=pgoff * PAGE, file_id=fid))
        if not self.status_is("Mmap", err, None):
            return
        a = resp.addr
        if a % PAGE or sp.overlaps(a, a + length):
            self.wrong(f"Mmap {sp.id:#x} of {length:#x} answered {a:#x}, over a modelled mapping")
            return self.drop_space(sp)
        sp.insert(Vma(a, a + length, prot, b, pgoff))

    def op_mremap(self, sp):
        r = self.pick_range(sp, whole_vma=self.rng.random() < 0.5)
        if not r:
            return
        v, s, e = r
        new_len = self.rng.randrange(1, 33) * PAGE
        if self.mapped_total() + new_len > CLIENT_MAPPED_CAP:
            return
        self.res.op("Mremap")
        resp, err = self.conn.call("Mremap", pb.MremapRequest(space_id=sp.id, old_addr=s, old_len=e - s,
                                                              new_len=new_len, flags=MREMAP_MAYMOVE))
        if not self.status_is(f"Mremap {s:#x}+{e - s:#x} to {new_len:#x} ({v.perms()}, "
                              f"locked {v.locked})", err, None):
            return
        a = resp.addr
        [piece] = sp.carve(s, e)
        moved = {p - s: d for p, d in sp.priv.items() if s <= p < e and p - s < new_len}
        sp.unmap(s, e)
        if a % PAGE or sp.overlaps(a, a + new_len):
            self.wrong(f"Mremap {sp.id:#x} {s:#x}+{e - s:#x} -> {new_len:#x} answered {a:#x}, "
                       "over a modelled mapping")
            return self.drop_space(sp)
        nv = Vma(a, a + new_len, piece.prot, piece.backing, piece.pgoff, piece.locked)
        sp.insert(nv)
        for off, d in moved.items():
            sp.priv[a + off] = d

    # -- Batch streams
    def op_batch(self):
        sp = self.rng.choice(list(self.spaces.values()))
        msgs, plans = [], []
        for m in range(self.rng.randrange(1, 4)):
            ops = []
            for _ in range(self.rng.randrange(1, 12)):
                p = self.plan_space_op(sp, in_batch=True)
                if p:
                    ops.append(pb.Op(**{p.kind: p.req}))
                    plans.append(p)
            if m == 0 and self.rng.random() < 0.5:
                chain = self.addr_of_chain(sp, len(plans))
                for p, o in chain:
                    ops.append(o)
                    plans.append(p)
            msgs.append(pb.BatchRequest(ops=ops, tag=m + 1))
        self.res.op("Batch")
        answers, err = self.conn.batch(msgs)
        if not self.status_is("Batch stream", err, None):
            return
        results = [r for a in answers for r in a.results]
        if len(answers) != len(msgs) or len(results) != len(plans) or \
                [a.tag for a in answers] != [m.tag for m in msgs]:
            self.wrong(f"Batch: {len(answers)} answers of {len(results)} results for {len(msgs)} messages of "
                       f"{len(plans)} ops")
            return self.drop_space(sp)
        for p, r in zip(plans, results):
            self.res.op("Batch." + p.kind)
            if r.code:
                code = next((c.name for c in C if c.value[0] == r.code), str(r.code))
                p.check(None, (code, r.errno_name, r.message))
            else:
                p.check(getattr(r, p.kind), None)
            if sp.id not in self.spaces:
                break

    def addr_of_chain(self, sp, first_index):
        """mmap (placed by the daemon) -> write -> read back -> munmap, by addr_of: no model change."""
        length = self.rng.randrange(1, 5) * PAGE
        data = self.random_data(self.rng.randrange(1, length))
        got = {}

        def check_mmap(resp, err):
            if self.status_is("Batch mmap", err, None):
                got["addr"] = resp.addr
                if sp.overlaps(resp.addr, resp.addr + length):
                    self.wrong(f"Batch mmap {sp.id:#x} answered {resp.addr:#x}, over a modelled mapping")

        def check_write(resp, err):
            if self.status_is("Batch write addr_of", err, None) and resp.bytes_written != len(data):
                self.wrong(f"Batch write addr_of wrote {resp.bytes_written} of {len(data)}")

        def check_read(resp, err):
            if self.status_is("Batch read addr_of", err, None) and resp.data != data:
                self.wrong(f"Batch read addr_of {sp.id:#x}: bytes differ at {first_diff(resp.data, data)}")

        mm = pb.MmapRequest(space_id=sp.id, len=length, prot=PROT_READ | PROT_WRITE, flags=MAP_PRIVATE | MAP_ANONYMOUS)
        w = pb.Op(write=pb.WriteMemoryRequest(space_id=sp.id, addr=0, data=data))
        w.addr_of.back = 1
        rd = pb.Op(read=pb.ReadMemoryRequest(space_id=sp.id, addr=0, len=len(data)))
        rd.addr_of.index = first_index
        un = pb.Op(munmap=pb.MunmapRequest(space_id=sp.id, addr=0, len=length))
        un.addr_of.index = first_index
        return [(Plan("mmap", "Mmap", mm, check_mmap), pb.Op(mmap=mm)),
                (Plan("write", "WriteMemory", w.write, check_write), w),
                (Plan("read", "ReadMemory", rd.read, check_read), rd),
                (Plan("munmap", "Munmap", un.munmap, lambda r, e: self.status_is("Batch munmap addr_of", e, None)),
                 un)]

    # -- files
    def file_op(self):
        r = self.rng.random()
        if not self.fds or (r < 0.12 and len(self.fds) < 5):
            return self.op_open()
        fid = self.rng.choice(list(self.fds))
        b = self.fds[fid]
        if r < 0.40:
            return self.op_write_file(fid, b)
        if r < 0.65:
            return self.op_read_file(fid, b)
        if r < 0.72:
            return self.op_truncate(fid, b)
        if r < 0.84:
            return self.op_fsync(fid, b)
        if r < 0.92:
            self.res.op("StatFile")
            resp, err = self.conn.call("StatFile", pb.StatFileRequest(file_id=fid))
            if self.status_is("StatFile", err, None) and resp.file.size != b.size:
                self.wrong(f"StatFile {b.kind} {fid:#x}: size {resp.file.size}, want {b.size}")
            return
        self.res.op("CloseFile")
        _, err = self.conn.call("CloseFile", pb.CloseFileRequest(file_id=fid))
        if not self.status_is("CloseFile", err, None) and self.refused:
            return  # forget_all closes it
        del self.fds[fid]
        self.dead_files.append(fid)
        self.publish()

    def op_open(self):
        if self.rng.random() < 0.4:
            size = self.rng.randrange(0, 17) * PAGE
            self.res.op("CreateShmemFile")
            resp, err = self.conn.call("CreateShmemFile", pb.CreateShmemFileRequest(name=f"soak{self.cid}", size=size))
            if self.status_is("CreateShmemFile", err, None):
                self.fds[resp.file_id] = Backing("shmem", size)
        else:
            if self.host and self.rng.random() < 0.5:
                path = self.rng.choice(list(self.host))
            else:
                self.nfile += 1
                path = f"c{self.cid}-{self.nfile}.dat"
            self.res.op("OpenFile")
            resp, err = self.conn.call("OpenFile", pb.OpenFileRequest(path=path, write=True, create=True))
            if self.status_is(f"OpenFile {path}", err, None):
                if path not in self.host:
                    self.host[path] = Backing("host", 0, path)
                self.fds[resp.file_id] = self.host[path]
        self.publish()

    def op_write_file(self, fid, b):
        off = self.rng.randrange(0, b.size + 2 * PAGE)
        n = self.rng.randrange(1, 3 * PAGE)
        if off + n > b.size:  # extending: end on a page boundary (the model keeps page-multiple sizes)
            n = -(-(off + n) // PAGE) * PAGE - off
        if off + n > 64 * PAGE:
            return
        data = self.random_data(n)
        if off + n > b.size:
            b.resize(off + n)
        for i in range(off // PAGE, (off + n - 1) // PAGE + 1):
            pg = bytearray(b.page(i))
            lo, hi = max(off, i * PAGE), min(off + n, (i + 1) * PAGE)
            pg[lo - i * PAGE:hi - i * PAGE] = data[lo - off:hi - off]
            b.set_page(i, pg)
        self.res.op("WriteFile")
        resp, err = self.conn.call("WriteFile", pb.WriteFileRequest(file_id=fid, offset=off, data=data))
        if self.status_is("WriteFile", err, None) and resp.bytes_written != n:
            self.wrong(f"WriteFile {b.kind} {fid:#x} {off}+{n}: wrote {resp.bytes_written}")

    def op_read_file(self, fid, b):
        off = self.rng.randrange(0, b.size + PAGE)
        n = self.rng.randrange(1, 4 * PAGE)
        want = file_bytes(b, off, n)
        self.res.op("ReadFile")
        resp, err = self.conn.call("ReadFile", pb.ReadFileRequest(file_id=fid, offset=off, len=n))
        if self.status_is("ReadFile", err, None) and resp.data != want:
            self.wrong(f"ReadFile {b.kind} {b.path or ''} {fid:#x} {off}+{n}: {len(resp.data)} bytes, want "
                       f"{len(want)}; first difference at {first_diff(resp.data, want)}")

    def op_truncate(self, fid, b):
        size = self.rng.randrange(0, 33) * PAGE
        b.resize(size)
        self.res.op("TruncateFile")
        _, err = self.conn.call("TruncateFile", pb.TruncateFileRequest(file_id=fid, size=size))
        self.status_is("TruncateFile", err, None)

    def op_fsync(self, fid, b):
        self.res.op("FsyncFile")
        _, err = self.conn.call("FsyncFile", pb.FsyncFileRequest(file_id=fid))
        if self.status_is("FsyncFile", err, None) and b.kind == "host":
            b.synced(whole=True)

    # -- the kill: resynchronise
    def recover(self):
        self.resyncs += 1
        with self.res.lock:
            self.res.restart_lost += 1
        self.conn.reconnect()
        old_spaces, old_files = list(self.spaces), list(self.fds)
        # Spaces and shmem are gone; host files keep what was acknowledged.
        self.spaces, self.fds = {}, {}
        self.publish()
        if old_spaces:
            self.res.op("ReadMemory(before restart)")
            _, err = self.conn.call("ReadMemory", pb.ReadMemoryRequest(space_id=old_spaces[0], addr=0x10000, len=1))
            self.status_is("ReadMemory of a space from before the restart", err, ("NOT_FOUND", None))
        if old_files:
            self.res.op("ReadFile(before restart)")
            _, err = self.conn.call("ReadFile", pb.ReadFileRequest(file_id=old_files[0], offset=0, len=1))
            self.status_is("ReadFile of a file id from before the restart", err, ("INVALID_ARGUMENT", "EBADF"))
        for path, b in list(self.host.items()):
            self.check_durable(path, b)

    def check_durable(self, path, b):
        resp, err = self.conn.call("OpenFile", pb.OpenFileRequest(path=path, write=True, create=True))
        if not self.status_is(f"OpenFile {path} after the restart", err, None):
            del self.host[path]  # unchecked: not used again
            return
        fid = resp.file_id
        st, err = self.conn.call("StatFile", pb.StatFileRequest(file_id=fid))
        size = st.file.size if st else 0
        data = bytearray()
        while len(data) < size:
            r, err = self.conn.call("ReadFile", pb.ReadFileRequest(file_id=fid, offset=len(data),
                                                                   len=min(64 * PAGE, size - len(data))))
            if err or not r.data:
                break
            data += r.data
        bad = []
        if not b.size_dirty and size != b.durable_size:
            bad.append(f"size {size}, acknowledged {b.durable_size}")
        checked = 0
        for i in range(b.durable_size // PAGE):
            if i in b.dirty:
                continue
            checked += 1
            got = bytes(data[i * PAGE:(i + 1) * PAGE])
            want = b.durable.get(i, ZERO)
            if got != want:
                bad.append(f"page {i}: first difference at {first_diff(got, want)}")
        with self.res.lock:
            self.res.durability["files"] += 1
            self.res.durability["pages_checked"] += checked
            self.res.durability["bad"] += bool(bad)
        if bad:
            self.wrong(f"after kill -9 and restart, {path} lost acknowledged data: {'; '.join(bad[:4])}")
        # What the file holds now is the model from here on.
        b.pages = {i: bytes(data[i * PAGE:(i + 1) * PAGE]) for i in range(-(-len(data) // PAGE))
                   if data[i * PAGE:(i + 1) * PAGE] != ZERO[:len(data[i * PAGE:(i + 1) * PAGE])]}
        b.pages = {i: d + bytes(PAGE - len(d)) for i, d in b.pages.items()}
        b.size = size
        if size % PAGE:  # a restart can leave a partial page only if the model was wrong
            b.resize(-(-size // PAGE) * PAGE)
        b.synced(whole=True)
        _, err = self.conn.call("CloseFile", pb.CloseFileRequest(file_id=fid))
        self.status_is(f"CloseFile {path} after the restart check", err, None)

    def forget_all(self):
        """A refused call may have left the model ahead of the daemon (the effects of a
        Batch are modelled when it is planned): destroy and close everything, forget the
        host files (new paths from here on)."""
        self.finish(refused=True)
        self.host = {}

    def finish(self, refused=False):
        """Destroys every space and closes every file. After a refused call (`refused`)
        the space or file that call named may be gone already: NOT_FOUND / EBADF then."""
        for sid in list(self.spaces):
            self.res.op("DestroySpace")
            _, err = self.conn.call("DestroySpace", pb.DestroySpaceRequest(space_id=sid))
            if not (refused and err and err[0] == "NOT_FOUND"):
                self.status_is("DestroySpace at the end", err, None)
        for fid in list(self.fds):
            self.res.op("CloseFile")
            _, err = self.conn.call("CloseFile", pb.CloseFileRequest(file_id=fid))
            if not (refused and err and err[1] == "EBADF"):
                self.status_is("CloseFile at the end", err, None)
        self.spaces, self.fds = {}, {}
        self.sweep_orphans()
        self.publish()

    def sweep_orphans(self):
        """Spaces of this client's labels that it does not know: a CreateSpace or
        CloneSpace the daemon carried out whose answer the transport refused, or a
        DestroySpace it refused. They are destroyed; without a refused call before, one
        is a wrong answer (the daemon made a space nobody was told of)."""
        self.res.op("ListSpaces")
        resp, err = self.conn.call("ListSpaces", pb.ListSpacesRequest())
        if err is not None:
            if not (err[0] == "RESOURCE_EXHAUSTED" and "RST_STREAM" in err[2]):
                self.status_is("ListSpaces for orphans", err, None)
            return
        mine = {f"soak-{self.cid}", f"exec-{self.cid}"}
        for info in resp.spaces:
            if info.label not in mine or info.space_id in self.spaces:
                continue
            if not getattr(self, "ever_refused", False):
                self.wrong(f"space {info.space_id:#x} ({info.label}) exists but no call made it")
            with self.res.lock:
                self.res.orphans_swept += 1
            self.res.op("DestroySpace")
            _, err = self.conn.call("DestroySpace", pb.DestroySpaceRequest(space_id=info.space_id))
            if err is not None and err[0] != "NOT_FOUND":
                self.status_is("DestroySpace of an orphan", err, None)


def file_bytes(b, off, n):
    end = min(off + n, b.size)
    out = bytearray()
    a = off
    while a < end:
        i = a // PAGE
        k = min(end, (i + 1) * PAGE)
        out += b.page(i)[a - i * PAGE:k - i * PAGE]
        a = k
    return bytes(out)


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b)) if len(a) != len(b) else None


def fmt_layout(lay):
    return "[" + ", ".join(f"{s:#x}-{e:#x} {p}{' lo' if lo else ''}" for s, e, p, lo in lay) + "]"


# ---------------------------------------------------------------------------------------
# The hostile catalogue

class Hostile(threading.Thread):
    """Bad calls in a loop, each with its documented status, and a Ping after each."""

    def __init__(self, daemon, epoch, results, registry, deadline, seed):
        super().__init__(daemon=True)
        self.d, self.epoch, self.res, self.registry = daemon, epoch, results, registry
        self.deadline = deadline
        self.rng = random.Random(seed)
        self.error = None
        self.rounds = 0

    def run(self):
        self.conn = Conn(self.epoch, self.d.tokens[HOSTILE_TENANT])
        try:
            while time.time() < self.deadline:
                try:
                    self.round()
                    self.rounds += 1
                except Restarted:
                    self.conn.reconnect()
        except Exception:
            self.error = traceback.format_exc()
            print(f"hostile thread crashed:\n{self.error}", flush=True)

    def record(self, case, got, want, phrase=None, message=""):
        """got: (code, errno) or None (OK); want likewise, errno None = any."""
        key = f"{got[0]}{'/' + got[1] if got and got[1] else ''}" if got else "OK"
        ok = (got is None and want is None) or (got is not None and want is not None and got[0] == want[0] and
                                                 (want[1] is None or got[1] == want[1]))
        if ok and phrase and phrase not in message:
            ok = False
            key += f" (message lacks {phrase!r}: {message[:120]!r})"
        with self.res.lock:
            self.res.hostile.setdefault(case, {}).setdefault(key, 0)
            self.res.hostile[case][key] += 1
            self.res.ops += 1
        if not ok:
            with self.res.lock:
                self.res.hostile_bad.append(f"{case}: got {key}, want {want}")
            print(f"HOSTILE CASE ANSWERED WRONG: {case}: got {key}, want {want}", flush=True)
        # The daemon keeps serving.
        _, err = self.conn.call("Ping", pb.PingRequest(), timeout=20)
        if err:
            self.res.add_unexpected(f"no Ping answer after hostile case {case}: {err}")

    def raw(self, method, req_bytes, md=True, timeout=20):
        """A unary call of raw bytes: (code, errno), message; or None."""
        fn = self.conn.ch.unary_unary(f"/vmspace.v1.VmSpace/{method}", request_serializer=None,
                                      response_deserializer=None)
        try:
            fn(req_bytes, timeout=timeout, metadata=self.conn.md if md else None)
            return None, ""
        except grpc.RpcError as e:
            if self.epoch.down or self.epoch.n != self.conn.n or e.code() == C.UNAVAILABLE:
                raise Restarted() from None
            return err_of(e), e.details() or ""

    def call(self, method, req, md=None, timeout=20):
        """(response, (code, errno) or None, message)."""
        try:
            return getattr(self.conn.stub, method)(req, timeout=timeout,
                                                   metadata=self.conn.md if md is None else md), None, ""
        except grpc.RpcError as e:
            if self.epoch.down or self.epoch.n != self.conn.n or e.code() == C.UNAVAILABLE:
                raise Restarted() from None
            return None, err_of(e), e.details() or ""

    def stream(self, msgs, md=None, timeout=20):
        """(answers, (code, errno) or None, message)."""
        out = []
        try:
            for a in self.conn.stub.Batch(iter(msgs), timeout=timeout, metadata=self.conn.md if md is None else md):
                out.append(a)
            return out, None, ""
        except grpc.RpcError as e:
            if self.epoch.down or self.epoch.n != self.conn.n or e.code() == C.UNAVAILABLE:
                raise Restarted() from None
            return out, err_of(e), e.details() or ""

    def space(self):
        r, err, _ = self.call("CreateSpace", pb.CreateSpaceRequest(label="hostile"))
        if err:
            self.res.add_unexpected(f"hostile CreateSpace: {err}")
            raise Restarted()
        return r.space_id

    def round(self):
        L = LIMITS
        sid = self.space()
        page, err, _ = self.call("Mmap", pb.MmapRequest(space_id=sid, len=PAGE, prot=3, flags=0x22))
        page = page.addr
        cases = []

        def case(name, fn, want, phrase=None):
            cases.append((name, fn, want, phrase))

        def unary(method, req, md=None, timeout=20):
            def f():
                _, err, msg = self.call(method, req, md=md, timeout=timeout)
                return err, msg
            return f

        def raw(method, data, md=True):
            return lambda: self.raw(method, data, md=md)

        nobody = (("authorization", "Bearer " + "0" * 32),)
        case("Ping without a token", unary("Ping", pb.PingRequest(), md=()), ("UNAUTHENTICATED", None))
        case("CreateSpace with an unknown token", unary("CreateSpace", pb.CreateSpaceRequest(), md=nobody),
             ("UNAUTHENTICATED", None))
        case("Batch stream without a token", lambda: self.stream(
            [pb.BatchRequest(ops=[pb.Op(fault=pb.FaultRequest(space_id=sid, addr=page))])], md=())[1:],
            ("UNAUTHENTICATED", None))
        case("CreateSpace whose bytes do not parse", raw("CreateSpace", b"\xff\xff\xff\xff"),
             ("INVALID_ARGUMENT", None), "could not be parsed")
        case("Mmap of a truncated message", raw("Mmap", b"\x08\x80"), ("INVALID_ARGUMENT", None),
             "could not be parsed")
        case("WriteMemory of 3 MiB (past --max-message-bytes)",
             unary("WriteMemory", pb.WriteMemoryRequest(space_id=sid, addr=page, data=bytes(3 * MiB))),
             ("RESOURCE_EXHAUSTED", None))
        case("WriteMemory past --max-io-bytes",
             unary("WriteMemory", pb.WriteMemoryRequest(space_id=sid, addr=page, data=bytes(L["max_io_bytes"] + 1))),
             ("INVALID_ARGUMENT", "EINVAL"), "--max-io-bytes")
        case("ReadMemory of 2^63 bytes", unary("ReadMemory", pb.ReadMemoryRequest(space_id=sid, addr=page,
                                                                                  len=1 << 63)),
             ("INVALID_ARGUMENT", "EINVAL"), "--max-io-bytes")
        case("ReadFile of 2^63 bytes", lambda: self.readfile_huge(), ("INVALID_ARGUMENT", "EINVAL"))
        case("Mmap of 2^63 bytes", unary("Mmap", pb.MmapRequest(space_id=sid, len=1 << 63, prot=3, flags=0x22)),
             ("RESOURCE_EXHAUSTED", "ENOMEM"))
        case("Munmap of 2^64-1 bytes", unary("Munmap", pb.MunmapRequest(space_id=sid, addr=page, len=(1 << 64) - 1)),
             ("INVALID_ARGUMENT", "EINVAL"))
        case("Mremap to 2^62 bytes", unary("Mremap", pb.MremapRequest(space_id=sid, old_addr=page, old_len=PAGE,
                                                                    new_len=1 << 62, flags=MREMAP_MAYMOVE)),
             ("INVALID_ARGUMENT", "EINVAL"))
        case("Access past --max-access-touches",
             unary("Access", pb.AccessRequest(space_id=sid, addr=page, len=1 << 40, stride=1, access=pb.ACCESS_READ)),
             ("INVALID_ARGUMENT", "EINVAL"), "--max-access-touches")
        case("Access len 2 stride 2^64-1", lambda: self.access_wrap(sid, page), None)
        case("Batch message of --max-batch + 1 ops", lambda: self.stream(
            [pb.BatchRequest(ops=[pb.Op(fault=pb.FaultRequest(space_id=sid, addr=page))] * (L["max_batch"] + 1))])[1:],
            ("INVALID_ARGUMENT", "EINVAL"))
        case("Batch op whose addr_of names a later op", lambda: self.addr_of_forward(sid), ("INVALID_ARGUMENT", "EINVAL"))
        case("Batch stream of bytes that do not parse", lambda: self.raw_stream(), ("INVALID_ARGUMENT", None),
             "could not be parsed")
        case("ReadMemory of space id 0", unary("ReadMemory", pb.ReadMemoryRequest(space_id=0, addr=page, len=1)),
             ("NOT_FOUND", None))
        case("DestroySpace of a random id",
             unary("DestroySpace", pb.DestroySpaceRequest(space_id=self.rng.randrange(1, 1 << 53))), ("NOT_FOUND", None))
        case("CloseFile of a random id", unary("CloseFile", pb.CloseFileRequest(file_id=self.rng.randrange(1, 1 << 53))),
             ("INVALID_ARGUMENT", "EBADF"))
        case("Mmap of file id 2^64-1", unary("Mmap", pb.MmapRequest(space_id=sid, len=PAGE, prot=1, flags=MAP_SHARED,
                                                                   file_id=(1 << 64) - 1)),
             ("INVALID_ARGUMENT", "EBADF"))
        with self.registry["lock"]:
            theirs = [(v[1], v[2]) for k, v in self.registry.items() if k != "lock"]
        spaces = [s for v in theirs for s in v[0]]
        files = [f for v in theirs for f in v[1]]
        if spaces:
            s = self.rng.choice(spaces)
            case("WriteMemory into another tenant's space",
                 unary("WriteMemory", pb.WriteMemoryRequest(space_id=s, addr=0x10000, data=b"evil")), ("NOT_FOUND", None))
            case("DestroySpace of another tenant's space", unary("DestroySpace", pb.DestroySpaceRequest(space_id=s)),
                 ("NOT_FOUND", None))
            case("Batch ops on another tenant's space", lambda: self.batch_other(s), ("NOT_FOUND", None))
        if files:
            f = self.rng.choice(files)
            case("WriteFile into another tenant's file",
                 unary("WriteFile", pb.WriteFileRequest(file_id=f, offset=0, data=b"evil")), ("INVALID_ARGUMENT", "EBADF"))
            case("ReopenFile of another tenant's file",
                 unary("ReopenFile", pb.ReopenFileRequest(file_id=f, access=pb.FILE_ACCESS_RDWR)),
                 ("INVALID_ARGUMENT", "EBADF"))
        s5k = "x" * 5000
        case("CreateSpace with a 5,000-character label", unary("CreateSpace", pb.CreateSpaceRequest(label=s5k)),
             ("INVALID_ARGUMENT", "EINVAL"))
        case("CreateSpace with a 5,000-character locking profile",
             unary("CreateSpace", pb.CreateSpaceRequest(settings=pb.SpaceSettings(locking_profile=s5k))),
             ("INVALID_ARGUMENT", "EINVAL"), "locking_profile")
        case("OpenFile of a 5,000-character path", unary("OpenFile", pb.OpenFileRequest(path=s5k, create=True,
                                                                                       write=True)),
             ("INVALID_ARGUMENT", "ENAMETOOLONG"))
        case("OpenFile of ../escape", unary("OpenFile", pb.OpenFileRequest(path="../../etc/passwd")),
             ("INVALID_ARGUMENT", "EINVAL"))
        case("CreateShmemFile with a 5,000-character name",
             unary("CreateShmemFile", pb.CreateShmemFileRequest(name=s5k, size=PAGE)), ("INVALID_ARGUMENT", "EINVAL"))
        case("GetLockStats without the admin role",
             unary("GetLockStats", pb.GetLockStatsRequest(locking_profile=s5k)), ("PERMISSION_DENIED", "EPERM"))
        case("1 TiB read walk past its 300 ms deadline", lambda: self.long_walk(sid), ("DEADLINE_EXCEEDED", None))
        if self.rounds % 4 == 0:
            case("spaces past --tenant-max-spaces", lambda: self.too_many_spaces(), ("RESOURCE_EXHAUSTED", "ENOMEM"))
            case("open files past --tenant-max-open-files", lambda: self.too_many_files(),
                 ("RESOURCE_EXHAUSTED", "EMFILE"))
            case("memory past --tenant-max-memory-bytes", lambda: self.too_much_memory(),
                 ("RESOURCE_EXHAUSTED", "ENOMEM"))
        self.rng.shuffle(cases)
        for name, fn, want, phrase in cases:
            got, msg = fn()
            self.record(name, got, want, phrase, msg)
        self.call("DestroySpace", pb.DestroySpaceRequest(space_id=sid))

    def readfile_huge(self):
        r, err, msg = self.call("CreateShmemFile", pb.CreateShmemFileRequest(name="h", size=PAGE))
        if err:
            return err, msg
        _, err, msg = self.call("ReadFile", pb.ReadFileRequest(file_id=r.file_id, offset=0, len=1 << 63))
        self.call("CloseFile", pb.CloseFileRequest(file_id=r.file_id))
        return err, msg

    def access_wrap(self, sid, page):
        r, err, msg = self.call("Access", pb.AccessRequest(space_id=sid, addr=page, len=2, stride=(1 << 64) - 1,
                                                           access=pb.ACCESS_WRITE))
        if not err and r.accesses != 1:
            return ("WRONG", f"{r.accesses} accesses"), msg
        return err, msg

    def addr_of_forward(self, sid):
        o = pb.Op(read=pb.ReadMemoryRequest(space_id=sid, addr=0, len=1))
        o.addr_of.index = 5
        answers, err, msg = self.stream([pb.BatchRequest(ops=[o])])
        if err or len(answers) != 1 or len(answers[0].results) != 1:
            return err or ("WRONG", "no answer"), msg
        r = answers[0].results[0]
        return (next((c.name for c in C if c.value[0] == r.code), str(r.code)), r.errno_name) if r.code else None, \
            r.message

    def batch_other(self, s):
        answers, err, msg = self.stream([pb.BatchRequest(ops=[pb.Op(munmap=pb.MunmapRequest(space_id=s, addr=0,
                                                                                           len=1 << 46))])])
        if err or len(answers) != 1 or len(answers[0].results) != 1:
            return err or ("WRONG", "no answer"), msg
        r = answers[0].results[0]
        return (next((c.name for c in C if c.value[0] == r.code), str(r.code)), r.errno_name) if r.code else None, \
            r.message

    def raw_stream(self):
        fn = self.conn.ch.stream_stream("/vmspace.v1.VmSpace/Batch", request_serializer=None,
                                        response_deserializer=None)
        try:
            list(fn(iter([b"\xff\xff\xff\xff"]), timeout=20, metadata=self.conn.md))
            return None, ""
        except grpc.RpcError as e:
            if self.epoch.down or self.epoch.n != self.conn.n or e.code() == C.UNAVAILABLE:
                raise Restarted() from None
            return err_of(e), e.details() or ""

    def long_walk(self, sid):
        r, err, msg = self.call("Mmap", pb.MmapRequest(space_id=sid, len=1 << 40, prot=PROT_READ,
                                                       flags=MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE))
        if err:
            return err, msg
        _, err, msg = self.call("Access", pb.AccessRequest(space_id=sid, addr=r.addr, len=1 << 40, stride=PAGE,
                                                           access=pb.ACCESS_READ), timeout=0.3)
        self.call("Munmap", pb.MunmapRequest(space_id=sid, addr=r.addr, len=1 << 40))
        return err, msg

    def too_many_spaces(self):
        made, got = [], (None, "")
        for _ in range(LIMITS["tenant_max_spaces"] + 1):
            r, err, msg = self.call("CreateSpace", pb.CreateSpaceRequest(label="q"))
            if err:
                got = (err, msg)
                break
            made.append(r.space_id)
        for s in made:
            self.call("DestroySpace", pb.DestroySpaceRequest(space_id=s))
        return got

    def too_many_files(self):
        made, got = [], (None, "")
        for _ in range(LIMITS["tenant_max_open_files"] + 1):
            r, err, msg = self.call("CreateShmemFile", pb.CreateShmemFileRequest(name="q", size=0))
            if err:
                got = (err, msg)
                break
            made.append(r.file_id)
        for f in made:
            self.call("CloseFile", pb.CloseFileRequest(file_id=f))
        return got

    def too_much_memory(self):
        sid = self.space()
        q = LIMITS["tenant_max_memory_bytes"]
        r, err, msg = self.call("Mmap", pb.MmapRequest(space_id=sid, len=2 * q, prot=3,
                                                       flags=MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE))
        got = (err, msg)
        if not err:
            got = (None, "")
            for i in range(0, 2 * q, 16 * MiB):
                _, err, msg = self.call("Access", pb.AccessRequest(space_id=sid, addr=r.addr + i, len=16 * MiB,
                                                                   stride=PAGE, access=pb.ACCESS_WRITE), timeout=60)
                if err:
                    got = (err, msg)
                    break
        self.call("DestroySpace", pb.DestroySpaceRequest(space_id=sid))
        return got


# ---------------------------------------------------------------------------------------
# Main

def gauge(m, name):
    return sum(v for k, v in m.items() if k == name or k.startswith(name + "{"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("vmspaced")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kill-at", type=float, default=0.5, help="fraction of the run at which to kill -9 (0: never)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    a = ap.parse_args()

    root = tempfile.mkdtemp(prefix="vmspace-soak-")
    d = Daemon(a.vmspaced, root)
    d.start()
    epoch = Epoch()
    epoch.n, epoch.port = 1, d.port
    time.sleep(0.3)
    rss_base = d.status_bytes("VmRSS")
    res = Results()
    registry = {"lock": threading.Lock()}
    t0 = time.time()
    deadline = t0 + a.seconds
    clients = [Client(i, TENANTS[i % len(TENANTS)], d.tokens[TENANTS[i % len(TENANTS)]], epoch, res, registry,
                      deadline, a.seed * 1000 + i) for i in range(a.clients)]
    hostile = Hostile(d, epoch, res, registry, deadline, a.seed)
    for c in clients:
        c.start()
    hostile.start()

    peak = rss_base
    killed_at, rss_before_kill, kill_peak = None, 0, 0
    restart_s = 0
    while any(c.is_alive() for c in clients) or hostile.is_alive():
        time.sleep(0.5)
        peak = max(peak, d.status_bytes("VmRSS"))
        if a.kill_at and killed_at is None and time.time() - t0 >= a.kill_at * a.seconds:
            rss_before_kill, kill_peak = d.status_bytes("VmRSS"), d.status_bytes("VmHWM")
            with epoch.cond:
                epoch.down = True
            killed_at = time.time() - t0
            d.kill9()
            t1 = time.time()
            d.start()
            restart_s = time.time() - t1
            with epoch.cond:
                epoch.n += 1
                epoch.port = d.port
                epoch.down = False
                epoch.cond.notify_all()
            print(f"kill -9 at {killed_at:.1f} s (RSS {rss_before_kill / MiB:.1f} MiB, peak {kill_peak / MiB:.1f} MiB); "
                  f"restarted in {restart_s:.2f} s", flush=True)
    elapsed = time.time() - t0
    peak = max(peak, d.status_bytes("VmHWM"), kill_peak)

    # The end: every space destroyed and file closed by the clients.
    failures = []
    md = (("authorization", "Bearer " + d.tokens["admin"]),)
    stub = pb_grpc.VmSpaceStub(channel(d.port))
    try:
        stub.Ping(pb.PingRequest(), timeout=10, metadata=md)
        left = stub.ListSpaces(pb.ListSpacesRequest(), timeout=10, metadata=md).spaces
        if left:
            failures.append(f"{len(left)} spaces left at the end: {[hex(s.space_id) for s in left][:8]}")
    except grpc.RpcError as e:
        failures.append(f"the daemon does not answer at the end: {e.code().name} {e.details()}")
    m = {}
    for _ in range(50):  # freed frames and page tables go back after an RCU grace period
        m = d.metrics()
        if all(gauge(m, g) == 0 for g in ("vmspace_frame_bytes", "vmspace_pagetable_bytes", "vmspace_page_cache_bytes")):
            break
        time.sleep(0.2)
    rss_end = d.status_bytes("VmRSS")
    counters = {k: gauge(m, k) for k in (
        "vmspace_frame_bytes", "vmspace_page_cache_bytes", "vmspace_pagetable_bytes", "vmspace_memory_bytes",
        "vmspace_frames_allocated_total", "vmspace_frames_freed_total", "vmspace_pagetables_allocated_total",
        "vmspace_pagetables_freed_total", "vmspace_frame_cache_bytes", "vmspace_spaces", "vmspace_vmas",
        "vmspace_locked_bytes", "vmspace_host_file_syncs_total", "vmspace_memory_failures_total")}
    for g in ("vmspace_frame_bytes", "vmspace_page_cache_bytes", "vmspace_pagetable_bytes", "vmspace_memory_bytes",
              "vmspace_spaces", "vmspace_vmas", "vmspace_locked_bytes"):
        if counters[g] != 0:
            kinds = {k: v for k, v in m.items() if k.startswith(g) and v}
            failures.append(f"{g} is {counters[g]:.0f} at the end, not 0: {kinds}")
    for what in ("frames", "pagetables"):
        al, fr = counters[f"vmspace_{what}_allocated_total"], counters[f"vmspace_{what}_freed_total"]
        if al != fr:
            failures.append(f"vmspace_{what}_allocated_total {al:.0f} != vmspace_{what}_freed_total {fr:.0f}")
    rss_bound = rss_base + LIMITS["frame_cache_bytes"] + 64 * MiB
    if rss_end > rss_bound:
        failures.append(f"RSS {rss_end / MiB:.1f} MiB at the end, above baseline + frame cache + 64 MiB "
                        f"({rss_bound / MiB:.1f} MiB)")
    for c in clients + [hostile]:
        if c.error:
            failures.append(f"a thread crashed: {c.error.strip().splitlines()[-1]}")
    alive = d.alive()
    rc = d.stop()
    if rc not in (0, None):
        failures.append(f"vmspaced exited {rc} at SIGTERM")

    print(f"\n== soak: {a.clients} clients, {elapsed:.1f} s, seed {a.seed}")
    print(f"ops {res.ops} ({res.ops / elapsed:.0f}/s); wrong answers {len(res.wrong)}; unexpected statuses "
          f"{len(res.unexpected)}; hostile rounds {hostile.rounds}, hostile calls answered wrongly "
          f"{len(res.hostile_bad)}")
    top = sorted(res.by_op.items(), key=lambda kv: -kv[1])
    print("ops by kind: " + ", ".join(f"{k} {v}" for k, v in top))
    print("hostile calls and their statuses:")
    for case, st in sorted(res.hostile.items()):
        print(f"  {case}: " + ", ".join(f"{k} x{v}" for k, v in st.items()))
    print(f"calls refused by the transport (RST_STREAM ENHANCE_YOUR_CALM): {len(res.transport_refused)} "
          f"{res.transport_refused[:5]}")
    print(f"spaces left by refused calls and destroyed at the end: {res.orphans_swept}")
    print("cross-tenant calls: " + ", ".join(f"{k} x{v}" for k, v in sorted(res.cross_tenant.items())))
    if killed_at is not None:
        du = res.durability
        print(f"kill -9 at {killed_at:.1f} s, restart {restart_s:.2f} s; {res.restart_lost} client threads "
              f"resynchronised; durability: {du['files']} host files, {du['pages_checked']} acknowledged pages "
              f"checked, {du['bad']} files with lost data")
    print(f"RSS: baseline {rss_base / MiB:.1f} MiB, peak {peak / MiB:.1f} MiB, end {rss_end / MiB:.1f} MiB "
          f"(bound {rss_bound / MiB:.1f} MiB)")
    print("counters at the end: " + ", ".join(f"{k[len('vmspace_'):]} {v:.0f}" for k, v in counters.items()))
    print(f"daemon {'alive' if alive else 'DEAD'} at the end")
    for w in res.wrong[:10]:
        print("  wrong:", w)
    for u in res.unexpected[:10]:
        print("  unexpected:", u)
    for h in res.hostile_bad[:10]:
        print("  hostile:", h)
    for f in failures:
        print("  FAIL:", f)
    bad = res.wrong or res.unexpected or res.hostile_bad or failures or not alive
    print("verdict:", "FAIL" if bad else "PASS", flush=True)
    if a.keep or bad:
        print("kept", root)
    else:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
