#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Writes deploy/grafana/dashboards/vmspace.json, the provisioned Grafana dashboard.

The panels are listed here once, as (title, unit, queries); the JSON is generated so
every panel has the same datasource, variables and layout. A test
(deploy/tests/prometheus_e2e.py) checks that the JSON is what this script writes and
sends every panel query to a real Prometheus. Run after editing:

    /usr/bin/python3 deploy/grafana/make_dashboard.py
"""
import json
import os
import sys

DS = {"type": "prometheus", "uid": "${datasource}"}
# Label selectors every vmspace query carries: the job, instance and locking-profile
# variables (job: the scrape job's name, vmspaced in deploy/prometheus/prometheus.yml and
# for the ServiceMonitor of deploy/k8s; choose another in the dashboard's Job menu).
SEL = 'job=~"$job", instance=~"$instance"'
PSEL = SEL + ', profile=~"$profile"'
RPC = SEL + ', grpc_service="vmspace.v1.VmSpace"'
R = "$__rate_interval"

# (row title, [(panel title, unit, [(expr, legend)], kind, description)])
ROWS = [
    ("Locks", [
        ("Lock contentions/s by lock class and mode", "ops",
         [(f"sum by (lock, mode) (rate(vmspace_lock_contentions_total{{{PSEL}}}[{R}]))", "{{lock}} {{mode}}")],
         "timeseries", "Acquisitions that had to wait (vma_lock read: failed trylocks), as /proc/lock_stat's contentions. New lock classes (i_mmap_rwsem with file mappings) appear here by themselves."),
        ("Lock wait seconds/s by lock class and mode", "s",
         [(f"sum by (lock, mode) (rate(vmspace_lock_wait_seconds_sum{{{PSEL}}}[{R}]))", "{{lock}} {{mode}}")],
         "timeseries", "Seconds waited per second (threads waiting on average). Needs vmspaced --lock-stats=on."),
        ("Lock wait p99 by lock class and mode", "s",
         [(f"histogram_quantile(0.99, sum by (lock, mode, le) (rate(vmspace_lock_wait_seconds_bucket{{{PSEL}}}[{R}])))", "{{lock}} {{mode}}")],
         "timeseries", "99th percentile of a contended wait."),
        ("mmap_lock contentions per fault", "short",
         [(f"vmspace:mmap_lock_contentions_per_fault:ratio_rate1m{{{PSEL}}}", "{{instance}} {{profile}}")],
         "timeseries", "Recording rule: mmap_lock contentions (read + write) per fault. Per-VMA locks (linux-6.4+) bring it down."),
        ("mmap_lock contentions per op", "short",
         [(f"vmspace:mmap_lock_contentions_per_op:ratio_rate1m{{{SEL}}}", "{{instance}}")],
         "timeseries", "Recording rule: mmap_lock contentions per engine syscall (mmap, munmap, mprotect, madvise)."),
        ("mmap_lock wait seconds per fault", "s",
         [(f"vmspace:mmap_lock_wait_seconds_per_fault:ratio_rate5m{{{PSEL}}}", "{{instance}} {{profile}}")],
         "timeseries", "Recording rule: seconds waited for mmap_lock per fault, by profile: what the per-VMA locks take off faults (the wait share stays put when waits and holds fall together). Alert VmspaceMmapLockWaitPerFaultHigh above 5 ns for 10 minutes."),
        ("mmap_lock wait share", "percentunit",
         [(f"vmspace:mmap_lock_wait_share:ratio_rate5m{{{PSEL}}}", "{{instance}} {{profile}}")],
         "timeseries", "Recording rule: wait / (wait + hold) time of mmap_lock. Alert VmspaceMmapLockWaitShareHigh above 50% for 10 minutes."),
        ("VMA lock: success / abort / miss per second", "ops",
         [(f"sum by (profile, result) (rate(vmspace_vma_lock_total{{{PSEL}}}[{R}])) > 0", "{{profile}} {{result}}")],
         "timeseries", "Per-VMA-lock fault attempts by result, as /proc/vmstat vma_lock_success/abort/miss (CONFIG_PER_VMA_LOCK_STATS); only non-zero rates are drawn."),
        ("Fault retries under mmap_lock by reason", "ops",
         [(f"sum by (profile, reason) (rate(vmspace_fault_retries_total{{{PSEL}}}[{R}])) > 0", "{{profile}} {{reason}}")],
         "timeseries", "Faults begun under the VMA lock and redone under mmap_lock (VM_FAULT_RETRY, Linux's vma_lock_retry): file (a file VMA the profile does not fault under the VMA lock), anon_vma (a COW fault that must allocate the anon_vma), dirty (a shared write fault that throttled on dirty pages, shared_fault_completion=retry). Only non-zero rates are drawn."),
        ("i_mmap_rwsem contentions/s", "ops",
         [(f"sum by (mode) (rate(vmspace_lock_contentions_total{{{PSEL}, lock=\"i_mmap_rwsem\"}}[{R}]))", "{{mode}}")],
         "timeseries", "The file rmap lock (mm/rmap.c): taken when file mappings are made, split and removed."),
    ]),
    ("Faults", [
        ("Faults/s by type and outcome", "ops",
         [(f"sum by (type, outcome) (rate(vmspace_faults_total{{{PSEL}}}[{R}]))", "{{type}} {{outcome}}")],
         "timeseries", "Every simulated access that faulted."),
        ("pgfault/s", "ops",
         [(f"sum by (instance) (rate(vmspace_pgfault_total{{{SEL}}}[{R}]))", "{{instance}}")],
         "timeseries", "As /proc/vmstat pgfault."),
        ("Engine syscalls/s by op and errno", "ops",
         [(f"sum by (op, errno) (rate(vmspace_ops_total{{{SEL}}}[{R}]))", "{{op}} {{errno}}")],
         "timeseries", "mmap, munmap, mprotect, madvise and their errno."),
    ]),
    ("RPC", [
        ("RPCs/s by method", "reqps",
         [(f"sum by (grpc_method) (rate(grpc_server_handled_total{{{RPC}}}[{R}]))", "{{grpc_method}}")],
         "timeseries", "Calls finished per second (Batch: streams, not messages)."),
        ("Batch messages/s", "ops",
         [(f"sum by (instance) (rate(grpc_server_msg_received_total{{{RPC}, grpc_method=\"Batch\"}}[{R}]))", "{{instance}} received")],
         "timeseries", "BatchRequest messages received on Batch streams."),
        ("Unary latency p50 / p99 by method", "s",
         [(f"histogram_quantile(0.5, sum by (grpc_method, le) (rate(grpc_server_handling_seconds_bucket{{{RPC}, grpc_type=\"unary\"}}[{R}])))", "p50 {{grpc_method}}"),
          (f"histogram_quantile(0.99, sum by (grpc_method, le) (rate(grpc_server_handling_seconds_bucket{{{RPC}, grpc_type=\"unary\"}}[{R}])))", "p99 {{grpc_method}}")],
         "timeseries", "Server handling time of unary calls."),
        ("RPC errors/s by method and code", "reqps",
         [(f"sum by (grpc_method, grpc_code) (rate(grpc_server_handled_total{{{RPC}, grpc_code!=\"OK\"}}[{R}])) > 0", "{{grpc_method}} {{grpc_code}}")],
         "timeseries", "Every non-OK answer; an errno is an answer too (EINVAL is InvalidArgument). Only the method and code pairs with errors in the range are drawn."),
        ("Server-side error ratio", "percentunit",
         [(f"vmspace:grpc_server_errors:ratio_rate5m{{{SEL}}}", "{{instance}}")],
         "timeseries", "Recording rule: Unknown, DeadlineExceeded, ResourceExhausted, Internal, Unavailable, DataLoss over all RPCs. Alert VmspaceRpcErrorRatioHigh above 5%."),
    ]),
    ("Spaces and memory", [
        ("Daemons up", "short", [(f"sum(up{{{SEL}}})", "up")], "stat",
         "Scraped daemons answering (one per shard)."),
        ("Spaces", "short", [(f"sum(vmspace_spaces{{{SEL}}})", "spaces")], "stat", "Live address spaces."),
        ("VMAs", "short", [(f"sum(vmspace_vmas{{{SEL}}})", "vmas")], "stat", "Sum of map_count."),
        ("Resident bytes", "bytes", [(f"sum(vmspace_resident_bytes{{{SEL}}})", "rss")], "stat", "Present PTEs times 4 KiB."),
        ("Frame limit use", "percentunit",
         [(f"sum(vmspace_frame_bytes{{{SEL}}}) / sum(vmspace_frame_limit_bytes{{{SEL}}} > 0)", "used")], "gauge",
         "Frame memory in use over --max-frame-bytes. Alert VmspaceFrameMemoryNearLimit above 90%."),
        ("Frame and page-table memory", "bytes",
         [(f"sum by (instance) (vmspace_frame_bytes{{{SEL}}})", "{{instance}} frames"),
          (f"sum by (instance) (vmspace_frame_limit_bytes{{{SEL}}})", "{{instance}} limit"),
          (f"sum by (instance) (vmspace_pagetable_bytes{{{SEL}}})", "{{instance}} page tables")],
         "timeseries", "Frame memory against the limit."),
        ("Spaces and VMAs per daemon", "short",
         [(f"sum by (instance) (vmspace_spaces{{{SEL}}})", "{{instance}} spaces"),
          (f"sum by (instance) (vmspace_vmas{{{SEL}}})", "{{instance}} vmas")],
         "timeseries", "How CreateSpace spread the spaces over the shards."),
    ]),
    ("Memory budget", [
        ("Memory budget use", "percentunit",
         [(f"sum(vmspace_memory_bytes{{{SEL}}}) / sum(vmspace_memory_limit_bytes{{{SEL}}} > 0)", "used")], "gauge",
         "Bytes charged to --max-memory-bytes over the budget (no value when unlimited)."),
        ("Budget refusals/s", "ops",
         [(f"sum(rate(vmspace_memory_failures_total{{{SEL}}}[{R}]))", "refused")], "stat",
         "Charges the budget refused (memcg failcnt): mmap/faults got ENOMEM, buffers RESOURCE_EXHAUSTED."),
        ("Memory budget by kind", "bytes",
         [(f"sum by (kind) (vmspace_memory_bytes{{{SEL}}})", "{{kind}}"),
          (f"sum(vmspace_memory_limit_bytes{{{SEL}}})", "limit")],
         "timeseries", "vmspace_memory_bytes{kind}: frames, page tables, VMAs, index nodes, page cache and call/stream buffers, against --max-memory-bytes."),
        ("Free-frame cache", "bytes",
         [(f"sum by (instance) (vmspace_frame_cache_bytes{{{SEL}}})", "{{instance}} cached"),
          (f"sum by (instance) (vmspace_frame_cache_limit_bytes{{{SEL}}})", "{{instance}} watermark"),
          (f"sum by (instance) (rate(vmspace_frames_returned_bytes_total{{{SEL}}}[{R}]))", "{{instance}} returned to the host/s")],
         "timeseries", "Free frames kept resident for reuse (--frame-cache-bytes) and what goes back to the host."),
    ]),
    ("Page cache and writeback", [
        ("Page cache", "bytes",
         [(f"sum by (instance) (vmspace_page_cache_bytes{{{SEL}}})", "{{instance}} cached"),
          (f"sum by (instance) (vmspace_page_cache_dirty_bytes{{{SEL}}})", "{{instance}} dirty"),
          (f"sum by (instance) (vmspace_page_cache_writeback_bytes{{{SEL}}})", "{{instance}} writeback")],
         "timeseries", "File pages in the page caches of the daemon's files; dirty: not yet written back to their host files (Dirty in /proc/meminfo); writeback: being written now (Writeback)."),
        ("Dirty bytes against the thresholds", "bytes",
         [(f"sum by (instance) (vmspace_page_cache_dirty_bytes{{{SEL}}})", "{{instance}} dirty"),
          (f"sum by (instance) (vmspace_dirty_background_bytes{{{SEL}}})", "{{instance}} background (--dirty-background-bytes)"),
          (f"sum by (instance) (vmspace_dirty_limit_bytes{{{SEL}}})", "{{instance}} limit (--dirty-bytes)")],
         "timeseries", "Above the background threshold the writeback thread runs; above the limit writers wait in balance_dirty_pages."),
        ("Writeback and syncs/s", "ops",
         [(f"sum by (instance) (rate(vmspace_writeback_passes_total{{{SEL}}}[{R}]))", "{{instance}} writeback passes"),
          (f"sum by (instance) (rate(vmspace_host_file_syncs_total{{{SEL}}}[{R}]))", "{{instance}} fdatasync")],
         "timeseries", "Passes of the writeback thread, and fdatasync(2) calls on host files (FsyncFile, Msync MS_SYNC, shutdown)."),
        ("Throttled writers", "short",
         [(f"sum by (instance) (vmspace_dirty_throttled_writers{{{SEL}}})", "{{instance}}")],
         "timeseries", "Writers waiting in balance_dirty_pages now."),
    ]),
    ("RCU", [
        ("RCU grace periods and callbacks/s", "ops",
         [(f"sum by (instance) (rate(vmspace_rcu_grace_periods_total{{{SEL}}}[{R}]))", "{{instance}} grace periods"),
          (f"sum by (instance) (rate(vmspace_rcu_callbacks_total{{{SEL}}}[{R}]))", "{{instance}} callbacks"),
          (f"sum by (instance) (rate(vmspace_rcu_worker_wakeups_total{{{SEL}}}[{R}]))", "{{instance}} worker wake-ups")],
         "timeseries", "The call_rcu worker: grace periods waited for (at most one per 500 us), deferred frees run, and wake-ups of the idle worker."),
        ("RCU callbacks pending", "short",
         [(f"sum by (instance) (vmspace_rcu_callbacks_pending{{{SEL}}})", "{{instance}}")],
         "timeseries", "Callbacks queued and not yet run: memory waiting for a grace period."),
        ("Frees without the call_rcu worker/s", "ops",
         [(f"sum by (instance) (rate(vmspace_rcu_polled_gathers_total{{{SEL}}}[{R}]))", "{{instance}} polled gathers"),
          (f"sum by (instance) (rate(vmspace_rcu_sole_reuses_total{{{SEL}}}[{R}]))", "{{instance}} sole-thread reuses")],
         "timeseries", "Retired index nodes, page tables and frames a space freed itself after a polled grace period, and batches it took back without one (only one thread had entered the space)."),
    ]),
]

def panel(pid, title, unit, queries, kind, desc, x, y, w, h):
    p = {
        "id": pid, "type": kind, "title": title, "description": desc, "datasource": DS,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [{"refId": chr(ord("A") + i), "datasource": DS, "expr": e, "legendFormat": l}
                    for i, (e, l) in enumerate(queries)],
    }
    if kind == "timeseries":
        p["options"] = {"legend": {"displayMode": "list", "placement": "bottom"},
                        "tooltip": {"mode": "multi"}}
    elif kind == "gauge":
        p["fieldConfig"]["defaults"].update({"min": 0, "max": 1, "thresholds": {"mode": "absolute", "steps": [
            {"color": "green", "value": None}, {"color": "orange", "value": 0.8}, {"color": "red", "value": 0.9}]}})
    return p


def dashboard():
    panels, pid, y = [], 1, 0
    for row, items in ROWS:
        panels.append({"id": pid, "type": "row", "title": row, "collapsed": False,
                       "gridPos": {"x": 0, "y": y, "w": 24, "h": 1}, "panels": []})
        pid, y = pid + 1, y + 1
        small = [i for i in items if i[3] in ("stat", "gauge")]
        big = [i for i in items if i[3] not in ("stat", "gauge")]
        for n, it in enumerate(small):  # a strip of small panels, 4 wide
            panels.append(panel(pid, *it, x=(n * 4) % 24, y=y, w=4, h=5))
            pid += 1
        if small:
            y += 5
        for n, it in enumerate(big):  # two per line
            panels.append(panel(pid, *it, x=12 * (n % 2), y=y + 8 * (n // 2), w=12, h=8))
            pid += 1
        y += 8 * ((len(big) + 1) // 2)
    var = lambda name, label, query: {
        "name": name, "label": label, "type": "query", "datasource": DS,
        "query": {"query": query, "refId": name}, "definition": query,
        "refresh": 2, "includeAll": True, "multi": True, "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]}, "sort": 1}
    job = dict(var("job", "Job", "label_values(vmspace_build_info, job)"), includeAll=False, multi=False,
               current={"selected": True, "text": "vmspaced", "value": "vmspaced"})
    del job["allValue"]
    return {
        "uid": "vmspace", "title": "vmspace", "tags": ["vmspace"],
        "description": "vmspaced: lock contention, faults, RPCs, spaces, the memory budget, the page cache and RCU (deploy/grafana/make_dashboard.py)",
        "schemaVersion": 38, "version": 1, "editable": True, "graphTooltip": 1,
        "refresh": "5s", "time": {"from": "now-15m", "to": "now"},
        "templating": {"list": [
            {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
             "current": {"selected": False, "text": "Prometheus", "value": "prometheus"}},
            job,
            var("instance", "Daemon", 'label_values(vmspace_build_info{job=~"$job"}, instance)'),
            var("profile", "Locking profile", 'label_values(vmspace_lock_acquisitions_total{job=~"$job"}, profile)'),
        ]},
        "panels": panels,
    }


def render():
    return json.dumps(dashboard(), indent=2) + "\n"


if __name__ == "__main__":
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dashboards", "vmspace.json")
    if sys.argv[1:] == ["--check"]:
        with open(out) as f:
            sys.exit(0 if f.read() == render() else "vmspace.json differs from make_dashboard.py's output")
    with open(out, "w") as f:
        f.write(render())
