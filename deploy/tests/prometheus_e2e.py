#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""End-to-end: a real vmspaced scraped by a real Prometheus (Debian's `prometheus`), both on
loopback, with the repository's scrape config and rules (ctest deploy.prometheus_e2e).

    prometheus_e2e.py --vmspaced PATH --vmspace PATH [--screenshot FILE.png]

1. vmspaced on 127.0.0.1:0 (--max-frame-bytes 256 MiB); a warm-up fault under each
   profile the bench uses, so their fault series exist before the first scrape.
2. Prometheus with deploy/prometheus/prometheus.yml, changed only in the scrape target
   (the daemon's metrics port), its own address and the intervals (1 s).
3. The bench: `vmspace bench mixed --transport unary --compare linux-6.0,linux-6.6`
   (one faulter and one churner in one space, 2 s per profile), one space kept alive
   with 16 written pages under linux-6.1, one EINVAL munmap and one ENOMEM mmap.
4. Prometheus's HTTP API: fault and mmap_lock contention counters equal what the bench
   reported per profile; the RPC counters count the calls made; the gauges show the
   kept space; every recording rule has results, and the per-fault contention ratio and
   the frame-limit ratio have the values the bench implies; every panel query of the
   Grafana dashboard names only metrics the daemon's /metrics exports (or recording
   rules, or `up`), is valid PromQL, and those that must have data have it.

With --screenshot FILE.png (no checks), the bench runs 20 s per profile and headless
Chromium (Debian's `chromium`) takes a picture of Prometheus's graph page of mmap_lock
contentions/s while linux-6.6 runs (linux-6.0's contention before it):
docs/prometheus-contention.png.
Every wait is bounded; the test uses only 127.0.0.1.
"""
import argparse
import glob
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROM_DIR = os.path.join(ROOT, "deploy", "prometheus")
DASHBOARD = os.path.join(ROOT, "deploy", "grafana", "dashboards", "vmspace.json")
PAGE = 4096
FRAME_LIMIT = 256 << 20
failures = []


def expect(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)
    return cond


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proc:
    """A child process whose output goes to a log file; killed at exit."""

    def __init__(self, argv, log_path):
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.p = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def text(self):
        with open(self.log_path) as f:
            return f.read()

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(15)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()


def wait_for(what, fn, timeout=60.0, step=0.25):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(step)
    raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")


def cli(vmspace, target, *args, check=True):
    r = subprocess.run([vmspace, "--target", target, "--json", *args], capture_output=True, text=True, timeout=300)
    if check and r.returncode != 0:
        raise SystemExit(f"vmspace {' '.join(args)} failed ({r.returncode}): {r.stderr}")
    return r


class PromAPI:
    def __init__(self, base):
        self.base = base

    def get(self, path, **params):
        url = f"{self.base}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:  # 400 for a bad query: the body says why
            try:
                return json.load(e)
            except ValueError:  # not JSON: e.g. 503 "Service Unavailable" while Prometheus starts
                return None
        except OSError:
            return None

    def query(self, q, at=None):
        params = {"query": q}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return self.get("/api/v1/query", **params)

    def vector(self, q, at=None):
        """{frozenset(labels without __name__): value} of an instant query."""
        r = self.query(q, at)
        if not r or r.get("status") != "success":
            raise SystemExit(f"query {q!r} failed: {r}")
        return {frozenset((k, v) for k, v in s["metric"].items() if k != "__name__"): float(s["value"][1])
                for s in r["data"]["result"]}

    def scalar(self, q, at=None):
        v = self.vector(q, at)
        return next(iter(v.values())) if len(v) == 1 else None


def start_daemon(vmspaced, tmp):
    d = Proc([vmspaced, "--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0", "--shutdown-grace-ms=1000",
              f"--max-frame-bytes={FRAME_LIMIT}", "--log-level=warn"], os.path.join(tmp, "vmspaced.log"))
    m = wait_for("vmspaced's listening line",
                 lambda: re.search(r"listening grpc=(\S+) metrics=(\S+)", d.text()) or (d.p.poll() is not None and
                                                                                      SystemExit(d.text())), 30)
    if isinstance(m, SystemExit):
        raise m
    return d, m.group(1), m.group(2)


def start_prometheus(prometheus, tmp, metrics_addr):
    """Prometheus with the repository's config: only targets, intervals and paths change."""
    with open(os.path.join(PROM_DIR, "prometheus.yml")) as f:
        cfg = yaml.safe_load(f)
    cfg["global"]["scrape_interval"] = "1s"
    cfg["global"]["evaluation_interval"] = "1s"
    cfg["rule_files"] = [os.path.join(PROM_DIR, r) for r in cfg["rule_files"]]
    for attempt in range(3):
        port = free_port()
        for job in cfg["scrape_configs"]:
            job["static_configs"] = [{"targets": [metrics_addr if job["job_name"] == "vmspaced" else f"127.0.0.1:{port}"]}]
        path = os.path.join(tmp, "prometheus.yml")
        with open(path, "w") as f:
            yaml.safe_dump(cfg, f)
        data = os.path.join(tmp, f"tsdb{attempt}")
        p = Proc([prometheus, f"--config.file={path}", f"--storage.tsdb.path={data}",
                  f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn",
                  "--storage.tsdb.retention.time=1h"], os.path.join(tmp, f"prometheus{attempt}.log"))
        api = PromAPI(f"http://127.0.0.1:{port}")

        def ready():
            if p.p.poll() is not None:
                return "exited"
            r = api.query('up{job="vmspaced"}')
            ok = r and r.get("status") == "success" and any(s["value"][1] == "1" for s in r["data"]["result"])
            return "up" if ok else None

        try:
            state = wait_for("Prometheus to scrape vmspaced", ready, 60)
        except BaseException:
            p.stop()  # not yet in main's list of processes to stop
            raise
        if state == "up":
            return p, api
        print(f"prometheus exited (port {port} taken?):\n{p.text()}", flush=True)
        p.stop()
    raise SystemExit("prometheus did not start")


def find_prometheus():
    path = shutil.which("prometheus")
    if path is None and os.geteuid() == 0:  # as root, Debian's prometheus is installed when missing
        subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", "prometheus"], check=False,
                       timeout=600, env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
        path = shutil.which("prometheus")
    if path is None:
        raise SystemExit("prometheus not found: run deploy/install-deps.sh (Debian package prometheus)")
    return path


def record_rules():
    rules = []
    for path in sorted(glob.glob(os.path.join(PROM_DIR, "rules", "*.yml"))):
        with open(path) as f:
            for g in yaml.safe_load(f)["groups"]:
                rules += [r for r in g["rules"] if "record" in r]
    return rules


def dashboard_queries():
    with open(DASHBOARD) as f:
        dash = json.load(f)
    for p in dash["panels"]:
        for t in p.get("targets", []):
            yield p["title"], t["expr"]


# Panels with no data in this run, and why (the rest must return series).
EMPTY_OK = {"i_mmap_rwsem contentions/s": "the bench maps no files",
            "Fault retries under mmap_lock by reason": "only non-zero rates are drawn; anonymous faults under "
                                                       "linux-6.6 retry only when a VMA lacks its anon_vma"}


def exported_metrics(metrics_addr):
    """The series names the daemon's /metrics exports (a histogram's _bucket, _sum, _count)."""
    with urllib.request.urlopen(f"http://{metrics_addr}/metrics", timeout=10) as r:
        text = r.read().decode()
    names = set()
    for m in re.finditer(r"^# TYPE (\S+) (\S+)$", text, re.M):
        names.add(m.group(1))
        if m.group(2) in ("histogram", "summary"):
            names |= {m.group(1) + s for s in ("_bucket", "_sum", "_count")}
    return names


def query_metrics(expr):
    """The metric names a panel query selects (every selector of ours has braces)."""
    return set(re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{", expr))


def expand(expr):
    """A panel query with Grafana's variables as the dashboard's defaults would set them."""
    return (expr.replace("$__rate_interval", "1m").replace("$__interval", "1s")
            .replace("$job", "vmspaced").replace("$instance", ".*").replace("$profile", ".*"))


def screenshot(api, out, chromium, seconds):
    """Prometheus's graph page of mmap_lock contentions/s over the last `seconds`."""
    q = 'sum by (profile, mode) (rate(vmspace_lock_contentions_total{job="vmspaced",lock="mmap_lock"}[3s]))'
    url = (f"{api.base}/graph?" + urllib.parse.urlencode({
        "g0.expr": q, "g0.tab": "0", "g0.range_input": f"{seconds}s", "g0.stacked": "0",
        "g0.show_exemplars": "0"}))
    prof = tempfile.mkdtemp(prefix="vmspace-chromium-")
    try:
        r = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                            "--no-first-run", "--disable-background-networking", "--disable-component-update",
                            "--disable-sync", "--hide-scrollbars", f"--user-data-dir={prof}",
                            "--window-size=1400,900", "--virtual-time-budget=15000", f"--screenshot={out}", url],
                           capture_output=True, text=True, timeout=120)
    finally:
        shutil.rmtree(prof, ignore_errors=True)
    expect(r.returncode == 0 and os.path.exists(out), f"chromium screenshot failed: {r.stderr[-2000:]}")
    print("screenshot:", out, "of", url, flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vmspaced", required=True)
    ap.add_argument("--vmspace", required=True)
    ap.add_argument("--screenshot")
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    args = ap.parse_args()
    prometheus = find_prometheus()
    tmp = tempfile.mkdtemp(prefix="vmspace-prom-e2e-")
    procs = []
    try:
        daemon, target, metrics = start_daemon(args.vmspaced, tmp)
        procs.append(daemon)
        vm = lambda *a, check=True: cli(args.vmspace, target, *a, check=check)
        # Warm-up: one fault under each bench profile, so those fault series exist from the
        # first scrape on (rates then cover the whole bench).
        for prof in ("linux-6.0", "linux-6.6"):
            sid = json.loads(vm("create", "--locking-profile", prof).stdout)["space_id"]
            addr = json.loads(vm("mmap", str(sid), "--len", "4K").stdout)["addr"]
            vm("fault", str(sid), "--addr", str(addr), "--access", "write")
            vm("destroy", str(sid))
        prom, api = start_prometheus(prometheus, tmp, metrics)
        procs.append(prom)
        warm = {p: api.scalar(f'sum(vmspace_faults_total{{profile="{p}"}})') for p in ("linux-6.0", "linux-6.6")}
        wait_for("a scrape after the warm-up", lambda: all(
            api.scalar(f'sum(vmspace_faults_total{{profile="{p}"}})') == 1 for p in warm), 30)

        if args.screenshot:  # a picture of the graph page during a longer bench; no checks
            shot = threading.Thread(target=screenshot, args=(api, args.screenshot, args.chromium, 35))
            timer = threading.Timer(32, shot.start)
            timer.start()
            vm("bench", "mixed", "--transport", "unary", "--clients", "2", "--duration", "20s",
               "--compare", "linux-6.0,linux-6.6", "--quiet")
            timer.join()
            shot.join()
            return
        t_bench = time.time()
        bench = json.loads(vm("bench", "mixed", "--transport", "unary", "--clients", "2", "--duration", "2s",
                              "--compare", "linux-6.0,linux-6.6", "--quiet").stdout)
        results = {r["profile"]: r for r in bench["results"]}
        for p, r in results.items():
            expect(r["error"] is None and r["faults"] > 0, f"bench {p}: {r['error']} ({r['faults']} faults)")

        # A space kept alive (16 written pages under linux-6.1), one EINVAL, one ENOMEM.
        sid = json.loads(vm("create", "--locking-profile", "linux-6.1", "--label", "kept").stdout)["space_id"]
        addr = json.loads(vm("mmap", str(sid), "--len", str(16 * PAGE)).stdout)["addr"]
        acc = json.loads(vm("access", str(sid), "--addr", str(addr), "--len", str(16 * PAGE), "--stride", str(PAGE),
                            "--access", "write").stdout)
        expect(acc["faults"] == 16, f"access faulted {acc['faults']} times, want 16")
        bad = vm("munmap", str(sid), "--addr", str(addr + 1), "--len", "4096", check=False)
        expect(json.loads(bad.stdout)["error"]["errno_name"] == "EINVAL", f"unaligned munmap: {bad.stdout}")
        big = vm("mmap", str(sid), "--len", str(1 << 46), check=False)
        expect(json.loads(big.stdout)["error"]["errno_name"] == "ENOMEM", f"64 TiB mmap: {big.stdout}")
        t_end = time.time()
        t_query = t_end + 3.5  # after two more scrapes and rule evaluations
        expect(t_query - t_bench < 55, f"the bench took {t_end - t_bench:.0f} s: rates over 1m no longer cover it")
        time.sleep(max(0.0, t_query + 1.5 - time.time()))

        # ---- raw series: what the bench did ----
        for p, r in results.items():
            faults = api.scalar(f'sum(vmspace_faults_total{{job="vmspaced",profile="{p}"}})', t_query)
            expect(faults == r["faults"] + 1, f"{p}: Prometheus has {faults} faults, the bench reported "
                                              f"{r['faults']} (+1 warm-up)")
            cont = api.scalar(f'sum(vmspace_lock_contentions_total{{job="vmspaced",lock="mmap_lock",profile="{p}"}})',
                              t_query)
            expect(cont == r["mmap_lock_contentions"],
                   f"{p}: Prometheus has {cont} mmap_lock contentions, the bench reported {r['mmap_lock_contentions']}")
            vl = api.scalar(f'sum(vmspace_vma_lock_total{{job="vmspaced",result="success",profile="{p}"}})', t_query)
            # (The warm-up's first fault on a new VMA has no anon_vma yet: an abort.) A
            # profile without per-VMA locks exports no vma_lock series at all.
            if vl is None and r["vma_lock_success"] == 0:
                vl = 0
            expect(vl == r["vma_lock_success"],
                   f"{p}: vma_lock success {vl}, the bench reported {r['vma_lock_success']}")
        kept = api.scalar('sum(vmspace_faults_total{job="vmspaced",profile="linux-6.1"})', t_query)
        expect(kept == 16, f"linux-6.1 faults {kept}, want 16")
        handled = api.vector('sum by (grpc_method, grpc_code) (grpc_server_handled_total{job="vmspaced"})', t_query)
        h = lambda m, c: handled.get(frozenset({("grpc_method", m), ("grpc_code", c)}), 0)
        churn = sum(r["churn_ops"] for r in results.values())
        expect(h("Munmap", "InvalidArgument") == 1, f"Munmap InvalidArgument: {h('Munmap', 'InvalidArgument')}, want 1")
        expect(h("Mmap", "ResourceExhausted") == 1, f"Mmap ResourceExhausted: {h('Mmap', 'ResourceExhausted')}, want 1")
        expect(h("Mmap", "OK") >= churn + 3, f"Mmap OK {h('Mmap', 'OK')} < {churn} churn mmaps + 3")
        expect(h("CreateSpace", "OK") == 5 and h("DestroySpace", "OK") == 4,
               f"CreateSpace {h('CreateSpace', 'OK')} (want 5), DestroySpace {h('DestroySpace', 'OK')} (want 4)")
        expect(h("GetLockStats", "OK") == 4, f"GetLockStats {h('GetLockStats', 'OK')}, want 4 (before/after x 2)")
        for name, want in (("vmspace_spaces", 1), ("vmspace_vmas", 1), ("vmspace_resident_bytes", 16 * PAGE),
                           ("vmspace_frame_bytes", 16 * PAGE), ("vmspace_frame_limit_bytes", FRAME_LIMIT)):
            got = api.scalar(f'{name}{{job="vmspaced"}}', t_query)
            expect(got == want, f"{name} = {got}, want {want}")

        # ---- recording rules ----
        for rule in record_rules():
            got = api.vector(f'{rule["record"]}{{job="vmspaced"}}', t_query)
            expect(got, f"recording rule {rule['record']} has no result")
        for p, r in results.items():
            # The 1m window holds the whole run with samples before and after it: the rate
            # ratio is the ratio of the bench's own counts.
            got = api.scalar(f'vmspace:mmap_lock_contentions_per_fault:ratio_rate1m{{profile="{p}"}}', t_query)
            want = r["mmap_lock_contentions"] / r["faults"]
            expect(got is not None and math.isclose(got, want, rel_tol=1e-3, abs_tol=1e-9),
                   f"{p}: contentions per fault {got}, the bench's {want}")
        ratio = api.scalar('vmspace:frame_bytes:ratio{job="vmspaced"}', t_query)
        expect(ratio == 16 * PAGE / FRAME_LIMIT, f"frame ratio {ratio}, want {16 * PAGE / FRAME_LIMIT}")
        errs = api.scalar('vmspace:grpc_server_errors:ratio_rate5m{job="vmspaced"}', t_query)
        expect(errs is not None and 0 < errs < 0.01, f"server-side error ratio {errs} (one ENOMEM among many calls)")
        alerts = api.get("/api/v1/rules", type="alert")
        names = {r["name"] for g in alerts["data"]["groups"] for r in g["rules"]}
        expect(names == {"VmspaceDaemonDown", "VmspaceMmapLockWaitShareHigh", "VmspaceMmapLockWaitPerFaultHigh",
                         "VmspaceRpcErrorRatioHigh",
                         "VmspaceFrameMemoryNearLimit"}, f"alerting rules loaded: {sorted(names)}")
        expect(all(r["health"] == "ok" for g in alerts["data"]["groups"] for r in g["rules"]), "an alert rule errs")

        # ---- dashboard ----
        r = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "deploy", "grafana", "make_dashboard.py"),
                            "--check"], capture_output=True, text=True)
        expect(r.returncode == 0, f"dashboard JSON: {r.stderr.strip()}")
        known = exported_metrics(metrics) | {r["record"] for r in record_rules()} | {"up"}
        n = 0
        for title, expr in dashboard_queries():
            n += 1
            names = query_metrics(expr)
            expect(names and names <= known, f"panel {title!r} names metrics the daemon does not export: "
                                             f"{sorted(names - known) or 'none found'}: {expr}")
            res = api.query(expand(expr), t_query)
            if not expect(res and res.get("status") == "success", f"panel {title!r}: {expr}: {res}"):
                continue
            if title not in EMPTY_OK:
                expect(res["data"]["result"], f"panel {title!r} has no data: {expand(expr)}")
        print(f"dashboard: {n} panel queries checked", flush=True)
    finally:
        for p in reversed(procs):
            p.stop()
        if failures:
            for p in procs:
                print(f"---- {p.log_path}\n{p.text()[-3000:]}")
        shutil.rmtree(tmp, ignore_errors=True)
    print("prometheus_e2e:", "ok" if not failures else f"{len(failures)} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
