#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The corpus: real programs that Debian ships, recorded on this machine's kernel with
`vmspace record` and replayed with `vmspace replay --check` under every locking
profile. Each replay must give every call's result and each address space's final maps
as the kernel did (docs/replay.md, "The corpus").

Usage: corpus_test.py --vmspace PATH --vmspaced PATH --syscalls PATH PROGRAM...
       (PROGRAM: a name of CORPUS, or "all"). Exits 0 when every replay agrees, 77 when
ptrace is not allowed here (ctest skips), 1 otherwise. Prints one line per program:
its calls, tasks, threads, address spaces and the verdict per profile.
"""
import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

PROFILES = ["linux-6.0", "linux-6.1", "linux-6.4", "linux-6.6", "linux-6.7", "linux-6.15"]

SQL = """create table t(a integer primary key, b text, c real);
insert into t(b, c) values ('x', 1.5), ('y', 2.5), ('z', 3.5);
insert into t(b, c) select b || a, c * 2 from t;
create index t_b on t(b);
select count(*), group_concat(b), sum(c) from t;
"""

C_SOURCE = """#include <string.h>
struct s { int a[16]; };
int sum(const struct s* p) { int n = 0; for (int i = 0; i < 16; i++) n += p->a[i]; return n; }
int len(const char* x) { return (int)strlen(x); }
"""

# name -> (argv, what it exercises). Run in a fresh directory holding sort.txt (about
# 2.6 MB of lines), corpus.sql and small.c. "{syscalls}" is the C program of the corpus.
CORPUS = {
    "python3": (["/usr/bin/python3", "-c",
                 "import json, re, collections, decimal, hashlib; "
                 "print(len(json.dumps({str(i): [i] * 50 for i in range(2000)})))"],
                "an interpreter: brk and mmap growth, shared libraries"),
    "perl": (["/usr/bin/perl", "-e", 'my %h; $h{$_} = "x" x ($_ % 64) for 1..50000; print scalar(keys %h), "\\n"'],
             "an interpreter's heap"),
    "sqlite3": (["/usr/bin/sqlite3", "corpus.db", ".read corpus.sql"], "a database on a file"),
    "gcc": (["/usr/bin/gcc", "-O2", "-c", "small.c", "-o", "small.o"], "a compiler driver: cc1 and as, spawned (vfork)"),
    "git": (["/bin/sh", "-c", "git init -q repo && cd repo && echo hello > a && git add a && "
             "git -c user.name=corpus -c user.email=corpus@example.org commit -qm one && git log --oneline >/dev/null"],
            "a shell and git: forks, execs"),
    "node": (["/usr/bin/node", "-e", "let a = []; for (let i = 0; i < 200000; i++) a.push({i, s: 'x' + i}); "
              "console.log(a.length)"],
             "V8: a JIT that maps and mprotects heavily, several threads"),
    "xz": (["/usr/bin/xz", "-T2", "-1", "-k", "-f", "sort.txt"], "two compressor threads"),
    "zstd": (["/usr/bin/zstd", "-T2", "-1", "-q", "-f", "sort.txt", "-o", "sort.txt.zst"], "compressor threads"),
    "sort": (["/usr/bin/sort", "--parallel=2", "sort.txt", "-o", "sorted.txt"], "two sorting threads"),
    "sh-fork": (["/bin/sh", "-c", "/bin/true; /bin/true & wait"], "a shell's fork (CloneSpace) and exec in the child"),
    "syscalls": (["{syscalls}"], "every syscall vmspace serves, and a fork"),
}

# Programs the corpus needs and the Debian 12 package of each (deploy/install-deps.sh).
PACKAGES = {"/usr/bin/python3": "python3", "/usr/bin/perl": "perl", "/usr/bin/sqlite3": "sqlite3",
            "/usr/bin/gcc": "gcc", "/usr/bin/git": "git", "/usr/bin/node": "nodejs", "/usr/bin/xz": "xz-utils",
            "/usr/bin/zstd": "zstd", "/usr/bin/sort": "coreutils"}


def start_daemon(vmspaced, data_dir):
    p = subprocess.Popen([vmspaced, "--listen=127.0.0.1:0", "--metrics-listen=off", "--data-dir=" + data_dir,
                          "--log-level=warn"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 30
    log = ""
    while time.time() < deadline:
        line = p.stderr.readline()
        if not line:
            break
        log += line
        m = re.search(r"listening grpc=(\S+)", line)
        if m:
            return p, m.group(1)
    p.kill()
    raise SystemExit("vmspaced did not report its port:\n" + log)


def prepare(work):
    rnd = random.Random(32)
    with open(os.path.join(work, "sort.txt"), "w") as f:
        f.writelines(f"{rnd.randrange(10**9):09d} line {i}\n" for i in range(150000))
    with open(os.path.join(work, "corpus.sql"), "w") as f:
        f.write(SQL)
    with open(os.path.join(work, "small.c"), "w") as f:
        f.write(C_SOURCE)


def run_one(name, args, work, target):
    argv = [a.replace("{syscalls}", args.syscalls) for a in CORPUS[name][0]]
    missing = argv[0] if not os.path.exists(argv[0]) else None
    if missing:
        print(f"{name}: {missing} is missing (Debian package {PACKAGES.get(missing, '?')}; "
              "deploy/install-deps.sh installs it)")
        return False
    trace = os.path.join(work, name + ".trace")
    t0 = time.time()
    rec = subprocess.run([args.vmspace, "record", "--json", "--out", trace, "--"] + argv, cwd=work,
                         capture_output=True, text=True, errors="replace", timeout=300)
    if rec.returncode != 0 and "PTRACE_TRACEME" in rec.stderr:
        print(f"{name}: ptrace is not allowed here: {rec.stderr.strip()}")
        raise SystemExit(77)
    if rec.returncode != 0:
        print(f"{name}: vmspace record failed ({rec.returncode}):\n{rec.stderr}")
        return False
    summary = json.loads(rec.stdout[rec.stdout.rfind("\n{") + 1:])
    if summary.get("exit_status") != 0:
        print(f"{name}: the program exited {summary.get('exit_status')} under the recorder:\n{rec.stderr}")
        return False
    verdicts, ok, threads, spaces, issued = [], True, 0, 0, 0
    for p in args.profiles:
        rep = subprocess.run([args.vmspace, "replay", trace, "--check", "--files", "host", "--profile", p,
                              "--json", "--target", target], capture_output=True, text=True, timeout=300)
        try:
            j = json.loads(rep.stdout)
        except ValueError:
            print(f"{name} [{p}]: vmspace replay failed ({rep.returncode}):\n{rep.stdout}{rep.stderr}")
            ok = False
            verdicts.append(f"{p} ERROR")
            continue
        threads, spaces, issued = j["threads"], j["spaces"], j["issued"]
        bad = [d for d in j["differences"] if not d["cause"]]
        explained = len(j["differences"]) - len(bad)
        if bad or j["unsupported"]:
            ok = False
            verdicts.append(f"{p} DIFFERS ({len(bad)})")
            print(f"{name} [{p}]: {len(bad)} differences, the first: {bad[0]['what'] if bad else ''}\n"
                  f"{bad[0]['context'] if bad else ''}unsupported: {j['unsupported']}")
        else:
            verdicts.append(f"{p} identical" + (f" ({explained} explained)" if explained else ""))
    calls = sum(summary["by_syscall"].values())
    print(f"{name}: {calls} calls recorded ({issued} replayed), {summary['tasks']} tasks, {threads} threads, "
          f"{spaces} address spaces, {time.time() - t0:.1f} s; " + ", ".join(verdicts), flush=True)
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vmspace", required=True)
    ap.add_argument("--vmspaced", required=True)
    ap.add_argument("--syscalls", required=True, help="the corpus's C program (client/tests/corpus_syscalls.c)")
    ap.add_argument("--profiles", default=",".join(PROFILES))
    ap.add_argument("--keep", action="store_true", help="keep the work directory (traces) and print it")
    ap.add_argument("programs", nargs="+")
    args = ap.parse_args()
    args.profiles = [p for p in args.profiles.split(",") if p]
    names = list(CORPUS) if args.programs == ["all"] else args.programs
    for n in names:
        if n not in CORPUS:
            raise SystemExit(f"unknown corpus program {n!r}; known: {', '.join(CORPUS)}")
    work = tempfile.mkdtemp(prefix="vmspace-corpus-")
    data = os.path.join(work, "data")
    os.mkdir(data)
    prepare(work)
    daemon, target = start_daemon(args.vmspaced, data)
    try:
        ok = all([run_one(n, args, work, target) for n in names])
    finally:
        daemon.terminate()
        try:
            daemon.wait(timeout=10)
        except subprocess.TimeoutExpired:
            daemon.kill()
        if args.keep:
            print("traces kept in", work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
