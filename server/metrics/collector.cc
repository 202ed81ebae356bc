// SPDX-License-Identifier: Apache-2.0
#include "metrics/collector.h"

#include <limits>
#include <utility>

#include <prometheus/client_metric.h>
#include <prometheus/metric_type.h>

#include "engine/address_space.h"
#include "engine/frame_allocator.h"
#include "engine/stats.h"
#include "engine/types.h"
#include "engine/writeback.h"
#include "metrics/memory_caches.h"
#include "metrics/process_metrics.h"
#include "metrics/rpc_stats.h"

namespace vmspace::metrics {

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

MetricFamily Family(std::string name, std::string help, MetricType type) {
  MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  return f;
}

void AddValue(MetricFamily& f, std::vector<ClientMetric::Label> labels, double v) {
  ClientMetric m;
  m.label = std::move(labels);
  if (f.type == MetricType::Counter)
    m.counter.value = v;
  else
    m.gauge.value = v;
  f.metric.push_back(std::move(m));
}

// A histogram sample from per-bucket (non-cumulative) counts whose last slot is +Inf.
template <size_t N, size_t B>
void AddHistogram(MetricFamily& f, std::vector<ClientMetric::Label> labels,
                  const std::array<double, B>& bounds, const std::array<uint64_t, N>& counts,
                  double sum_seconds) {
  static_assert(N == B + 1, "one count per bound plus +Inf");
  ClientMetric m;
  m.label = std::move(labels);
  uint64_t cum = 0;
  for (size_t i = 0; i < N; i++) {
    cum += counts[i];
    ClientMetric::Bucket b;
    b.cumulative_count = cum;
    b.upper_bound = i < B ? bounds[i] : std::numeric_limits<double>::infinity();
    m.histogram.bucket.push_back(b);
  }
  m.histogram.sample_count = cum;
  m.histogram.sample_sum = sum_seconds;
  f.metric.push_back(std::move(m));
}

struct FaultEventLabel {
  Event event;
  const char* outcome;
};
// vmspace_faults_total{type, outcome}: the type is the engine's event name. File faults
// are "handled": minor or major (the major ones are also vmspace_pgmajfault_total).
constexpr FaultEventLabel kFaultEvents[] = {
    {Event::kFaultAnonZero, "minor"},    {Event::kFaultAnonWrite, "minor"},
    {Event::kFaultWpZero, "minor"},      {Event::kFaultWpReuse, "minor"},
    {Event::kFaultShmem, "minor"},       {Event::kFaultFile, "handled"},
    {Event::kFaultFileCow, "handled"},   {Event::kFaultSegvMaperr, "sigsegv"},
    {Event::kFaultSegvAccerr, "sigsegv"}, {Event::kFaultSigbus, "sigbus"},
    {Event::kFaultOom, "oom"},
};

std::string ErrnoLabel(int tracked) {
  if (tracked == 0) return "OK";
  if (tracked < 0) return "other";
  return ErrnoName(tracked);
}

void CollectEngine(const StatsSnapshot& s, std::vector<MetricFamily>& out) {
  // Locks.
  auto acq = Family("vmspace_lock_acquisitions_total",
                    "Lock acquisitions by lock class and mode.", MetricType::Counter);
  auto con = Family("vmspace_lock_contentions_total",
                    "Lock acquisitions that had to wait, by lock class and mode.",
                    MetricType::Counter);
  auto wait = Family("vmspace_lock_wait_seconds",
                     "Time spent waiting for contended locks (recorded only with "
                     "--lock-stats=on).",
                     MetricType::Histogram);
  auto hold = Family("vmspace_lock_hold_seconds",
                     "Time locks were held (recorded only with --lock-stats=on).",
                     MetricType::Histogram);
  // Per locking profile (one statistics slot each), so profiles can be compared side
  // by side on one daemon: a profile's series appear once it has taken a lock (a space
  // of it exists and did something), and only the lock classes it can take (no per-VMA
  // lock in linux-6.0 and 6.1). "none" is work outside any space.
  struct ProfileSlot {
    std::string name;
    StatsSnapshot stats;
    bool vma_lock;  // the profile has per-VMA locks
    bool space;     // a space's profile (fault and VMA-lock series); not "none"
  };
  std::vector<ProfileSlot> slots;
  for (int slot = 0; slot < kStatSlots; slot++) {
    StatsSnapshot ps = ReadStats(slot);
    bool active = ps.event(Event::kPgfault) > 0;
    for (size_t c = 0; c < static_cast<size_t>(LockClass::kCount) && !active; c++)
      for (size_t m = 0; m < static_cast<size_t>(LockMode::kCount); m++)
        active = active || ps.lock(static_cast<LockClass>(c), static_cast<LockMode>(m)).acquisitions > 0;
    if (!active) continue;
    if (slot < LockingProfile::kNamedCount) {
      LockingProfile p;
      std::string err;
      LockingProfile::Parse(LockingProfile::kNames[slot], &p, &err);
      slots.push_back({LockingProfile::kNames[slot], std::move(ps), p.vma_lock != VmaLockMode::kOff, true});
    } else {
      slots.push_back({slot == kStatSlotNone ? "none" : "custom", std::move(ps), slot != kStatSlotNone,
                       slot != kStatSlotNone});
    }
  }
  for (const auto& [profile, ps, has_vma_lock, space] : slots) {
    for (size_t c = 0; c < static_cast<size_t>(LockClass::kCount); c++) {
      for (size_t m = 0; m < static_cast<size_t>(LockMode::kCount); m++) {
        const auto cls = static_cast<LockClass>(c);
        const auto mode = static_cast<LockMode>(m);
        if (mode == LockMode::kRead && !LockClassShared(cls)) continue;  // never taken for read
        if (cls == LockClass::kVmaLock && !has_vma_lock) continue;       // the profile has none
        // Outside a space only the file and writeback locks are taken.
        if (!space && (cls == LockClass::kMmapLock || cls == LockClass::kVmaLock || cls == LockClass::kPtl ||
                       cls == LockClass::kPageTableLock))
          continue;
        const LockStatCell& cell = ps.lock(cls, mode);
        std::vector<ClientMetric::Label> labels = {
            {"lock", LockClassName(cls)}, {"mode", LockModeName(mode)}, {"profile", profile}};
        AddValue(acq, labels, static_cast<double>(cell.acquisitions));
        AddValue(con, labels, static_cast<double>(cell.contentions));
        AddHistogram(wait, labels, kDurationBuckets, cell.wait_hist,
                     static_cast<double>(cell.wait_ns_total) * 1e-9);
        AddHistogram(hold, labels, kDurationBuckets, cell.hold_hist,
                     static_cast<double>(cell.hold_ns_total) * 1e-9);
      }
    }
  }
  out.push_back(std::move(acq));
  out.push_back(std::move(con));
  out.push_back(std::move(wait));
  out.push_back(std::move(hold));

  // Faults.
  auto faults = Family("vmspace_faults_total",
                       "Simulated accesses by handler path (type) and outcome "
                       "(minor, handled = minor or major, sigsegv, sigbus, oom).",
                       MetricType::Counter);
  for (const auto& [profile, ps, has_vma_lock, space] : slots)
    if (space)
      for (const auto& fe : kFaultEvents)
        AddValue(faults, {{"type", EventName(fe.event)}, {"outcome", fe.outcome}, {"profile", profile}},
                 static_cast<double>(ps.event(fe.event)));
  out.push_back(std::move(faults));
  auto single = [&](const char* name, const char* help, Event e) {
    auto f = Family(name, help, MetricType::Counter);
    AddValue(f, {}, static_cast<double>(s.event(e)));
    out.push_back(std::move(f));
  };
  single("vmspace_pgfault_total", "Page faults handled, as /proc/vmstat pgfault.",
         Event::kPgfault);
  single("vmspace_pgmajfault_total",
         "Page faults that read the page from a file's backing store, as /proc/vmstat pgmajfault.",
         Event::kPgmajfault);
  auto around = Family("vmspace_fault_around_pages_total",
                       "PTEs installed by fault-around (filemap_map_pages), the faulting page included.",
                       MetricType::Counter);
  auto retries = Family("vmspace_fault_retries_total",
                        "Per-VMA-lock faults redone under mmap_lock (VM_FAULT_RETRY), by reason: file "
                        "(a file VMA the profile does not fault under the VMA lock), anon_vma (a COW "
                        "fault that must allocate the anon_vma); dirty: a shared write fault that dirtied "
                        "a page dropped its lock to throttle and returned VM_FAULT_RETRY "
                        "(shared_fault_completion=retry), handled again under mmap_lock.",
                        MetricType::Counter);
  for (const auto& [profile, ps, has_vma_lock, space] : slots) {
    if (!space) continue;
    AddValue(around, {{"profile", profile}}, static_cast<double>(ps.event(Event::kFaultAroundPages)));
    if (has_vma_lock) {
      AddValue(retries, {{"reason", "file"}, {"profile", profile}},
               static_cast<double>(ps.event(Event::kVmaLockRetryFile)));
      AddValue(retries, {{"reason", "anon_vma"}, {"profile", profile}},
               static_cast<double>(ps.event(Event::kVmaLockRetryAnonVma)));
    }
    AddValue(retries, {{"reason", "dirty"}, {"profile", profile}},
             static_cast<double>(ps.event(Event::kFaultRetryDirty)));
  }
  out.push_back(std::move(around));
  out.push_back(std::move(retries));
  auto vmalock = Family("vmspace_vma_lock_total",
                        "Per-VMA-lock fault attempts by result (as /proc/vmstat "
                        "vma_lock_success/abort/miss).",
                        MetricType::Counter);
  const std::pair<Event, const char*> kVmaLock[] = {{Event::kVmaLockSuccess, "success"},
                                                    {Event::kVmaLockAbort, "abort"},
                                                    {Event::kVmaLockMiss, "miss"}};
  for (const auto& [profile, ps, has_vma_lock, space] : slots)
    if (has_vma_lock)
      for (const auto& [e, result] : kVmaLock)
        AddValue(vmalock, {{"result", result}, {"profile", profile}}, static_cast<double>(ps.event(e)));
  out.push_back(std::move(vmalock));
  single("vmspace_frames_allocated_total", "Page frames allocated.",
         Event::kFramesAllocated);
  single("vmspace_frames_freed_total", "Page frames freed.", Event::kFramesFreed);
  single("vmspace_pagetables_allocated_total", "Page-table pages allocated.",
         Event::kPgtablesAllocated);
  single("vmspace_pagetables_freed_total", "Page-table pages freed.", Event::kPgtablesFreed);
  single("vmspace_host_file_syncs_total",
         "fdatasync(2) calls on host files under --data-dir after their dirty pages were written "
         "back (FsyncFile, Msync MS_SYNC, clean shutdown): what makes the data survive a host crash.",
         Event::kHostFileSyncs);
  single("vmspace_rcu_polled_gathers_total",
         "Gathers of retired index nodes, page tables and frames that a space freed itself after a "
         "polled RCU grace period (the rest go through the call_rcu worker).",
         Event::kRcuPolledGathers);
  single("vmspace_rcu_sole_reuses_total",
         "Batches of retired index nodes (and, in the rwsem VMA-lock form, detached VMAs) that a "
         "space took back into its own caches without a grace period: only one thread had ever "
         "entered the space, and it had passed a quiescent state since.",
         Event::kRcuSoleReuses);

  // Operations.
  auto ops = Family("vmspace_ops_total",
                    "Engine syscalls by operation and result errno (OK on success, "
                    "\"other\" for untracked errnos).",
                    MetricType::Counter);
  // OK for every op; every errno (from 0, so that rate() sees the first failure) once
  // the op has run.
  for (size_t t = 0; t < static_cast<size_t>(OpType::kCount); t++) {
    bool ran = false;
    for (uint64_t n : s.ops[t]) ran = ran || n != 0;
    for (size_t i = 0; i < kTrackedErrnos.size(); i++)
      if (i == 0 || ran)
        AddValue(ops, {{"op", OpTypeName(static_cast<OpType>(t))},
                     {"errno", ErrnoLabel(kTrackedErrnos[i])}},
               static_cast<double>(s.ops[t][i]));
  }
  out.push_back(std::move(ops));
}

void CollectRpc(const RpcSnapshot& s, std::vector<MetricFamily>& out) {
  auto started = Family("grpc_server_started_total", "RPCs started on the server.",
                        MetricType::Counter);
  auto handled = Family("grpc_server_handled_total",
                        "RPCs completed on the server, by status code.", MetricType::Counter);
  auto received = Family("grpc_server_msg_received_total",
                         "Request messages received on the server.", MetricType::Counter);
  auto sent = Family("grpc_server_msg_sent_total", "Response messages sent by the server.",
                     MetricType::Counter);
  auto latency = Family("grpc_server_handling_seconds",
                        "Time from the start of the handler to its final status "
                        "(whole stream for Batch).",
                        MetricType::Histogram);
  for (size_t i = 0; i < kRpcMethodCount; i++) {
    const auto m = static_cast<RpcMethod>(i);
    const auto& c = s.method(m);
    std::vector<ClientMetric::Label> labels = {{"grpc_type", RpcMethodType(m)},
                                               {"grpc_service", kRpcServiceName},
                                               {"grpc_method", RpcMethodName(m)}};
    AddValue(started, labels, static_cast<double>(c.started));
    AddValue(received, labels, static_cast<double>(c.msg_received));
    AddValue(sent, labels, static_cast<double>(c.msg_sent));
    if (c.started != 0)  // the latency histogram of a method once it has been called
      AddHistogram(latency, labels, kRpcLatencyBuckets, c.latency_hist,
                   static_cast<double>(c.latency_ns_total) * 1e-9);
    for (int code = 0; code < kGrpcCodeCount; code++) {
      // OK always; every other code (from 0, so that rate() sees the first error) once
      // the method has been called.
      if (code != 0 && c.started == 0) continue;
      auto l = labels;
      l.push_back({"grpc_code", GrpcCodeName(code)});
      AddValue(handled, std::move(l), static_cast<double>(c.handled[code]));
    }
  }
  out.push_back(std::move(started));
  out.push_back(std::move(handled));
  out.push_back(std::move(received));
  out.push_back(std::move(sent));
  out.push_back(std::move(latency));
}

}  // namespace

Collector::Collector(const FrameAllocator* frames, std::function<SpaceGauges()> gather_spaces, BuildInfo build)
    : frames_(frames), gather_spaces_(std::move(gather_spaces)), build_(std::move(build)) {}

std::vector<MetricFamily> Collector::Collect() const {
  std::vector<MetricFamily> out;
  out.reserve(32);

  auto info = Family("vmspace_build_info", "Build information; the value is always 1.",
                     MetricType::Gauge);
  AddValue(info, {{"commit", build_.commit}, {"version", build_.version}}, 1);
  out.push_back(std::move(info));
  auto shard = Family("vmspace_shard", "This daemon's shard (--shard): the high bits of its space and file ids.",
                      MetricType::Gauge);
  AddValue(shard, {}, build_.shard);
  out.push_back(std::move(shard));
  CollectProcess(out);

  SpaceGauges g;
  if (gather_spaces_) g = gather_spaces_();
  auto metric = [&](const char* name, const char* help, MetricType type, uint64_t v) {
    auto f = Family(name, help, type);
    AddValue(f, {}, static_cast<double>(v));
    out.push_back(std::move(f));
  };
  auto gauge = [&](const char* name, const char* help, uint64_t v) { metric(name, help, MetricType::Gauge, v); };
  gauge("vmspace_spaces", "Live address spaces.", g.spaces);
  gauge("vmspace_vmas", "VMAs in all spaces (sum of map_count).", g.vmas);
  gauge("vmspace_resident_bytes", "Bytes of present PTEs in all spaces (rss).",
        g.resident_bytes);
  gauge("vmspace_pagetable_bytes", "Page-table bytes in all spaces.", g.pagetable_bytes);
  gauge("vmspace_locked_bytes", "Bytes of VM_LOCKED VMAs in all spaces (sum of locked_vm: mlock, MAP_LOCKED).",
        g.locked_bytes);
  gauge("vmspace_sealed_bytes", "Bytes of sealed VMAs in all spaces (mseal: never unmapped until the space ends).",
        g.sealed_bytes);
  gauge("vmspace_sealed_vmas", "Sealed VMAs in all spaces (mseal).", g.sealed_vmas);
  gauge("vmspace_page_cache_bytes", "Bytes of file pages in the page caches of the daemon's files.",
        g.page_cache_bytes);
  gauge("vmspace_page_cache_dirty_bytes",
        "Bytes of page-cache pages not yet written back to their host files.", g.page_cache_dirty_bytes);
  const WritebackStats wb = ReadWritebackStats();
  const DirtyLimits dl = GetDirtyLimits();
  gauge("vmspace_page_cache_writeback_bytes",
        "Bytes of host-file pages being written back now (cleaned for I/O, write not finished; NR_WRITEBACK).",
        wb.writeback_pages * kPageSize);
  gauge("vmspace_dirty_limit_bytes", "Dirty host-file bytes above which writers wait (--dirty-bytes).",
        dl.dirty_bytes);
  gauge("vmspace_dirty_background_bytes",
        "Dirty host-file bytes above which the writeback thread runs (--dirty-background-bytes).",
        dl.dirty_background_bytes);
  gauge("vmspace_dirty_throttled_writers", "Writers waiting in balance_dirty_pages now.", wb.throttled_now);
  metric("vmspace_writeback_passes_total", "Passes of the writeback thread since start.", MetricType::Counter,
         wb.passes);
  const RcuStats rcu = ReadRcuStats();
  metric("vmspace_rcu_grace_periods_total",
         "RCU grace periods the engine's call_rcu worker waited for (at most one per 500 microseconds).",
         MetricType::Counter, rcu.grace_periods);
  metric("vmspace_rcu_callbacks_total", "RCU callbacks (deferred frees) the call_rcu worker ran.",
         MetricType::Counter, rcu.callbacks_invoked);
  gauge("vmspace_rcu_callbacks_pending", "RCU callbacks queued and not yet run.", rcu.callbacks_pending);
  metric("vmspace_rcu_worker_wakeups_total",
         "call_rcu calls that woke the idle call_rcu worker (it polls its queue while callbacks keep coming).",
         MetricType::Counter, rcu.worker_wakeups);
  gauge("vmspace_frame_bytes", "Page-frame memory in use, bytes.",
        frames_ ? frames_->in_use_bytes() : 0);
  gauge("vmspace_frame_limit_bytes",
        "Daemon-wide page-frame memory limit, bytes (--max-frame-bytes; 0 = unlimited).",
        frames_ ? frames_->limit_bytes() : 0);
  gauge("vmspace_frame_host_bytes",
        "Host memory the frame allocator may hold resident (its chunks less the frames given back), bytes.",
        frames_ ? frames_->host_bytes() : 0);
  gauge("vmspace_frame_cache_bytes", "Free frames kept resident for reuse, bytes.",
        frames_ ? frames_->cache_bytes() : 0);
  gauge("vmspace_frame_cache_limit_bytes",
        "Watermark of the free-frame cache, bytes (--frame-cache-bytes); beyond it frames go back to the host.",
        frames_ ? frames_->cache_limit_bytes() : 0);
  {
    auto f = Family("vmspace_frames_returned_bytes_total",
                    "Bytes of free frames given back to the host (madvise MADV_DONTNEED).", MetricType::Counter);
    AddValue(f, {}, static_cast<double>(frames_ ? frames_->returned_bytes() : 0));
    out.push_back(std::move(f));
  }
  auto mem = Family("vmspace_memory_bytes",
                    "Memory charged to the daemon's budget (--max-memory-bytes), bytes, by kind.",
                    MetricType::Gauge);
  for (int k = 0; k < kMemKinds; k++) {
    const int64_t v = frames_ ? frames_->budget().usage(static_cast<MemKind>(k)) : 0;
    AddValue(mem, {{"kind", MemKindName(static_cast<MemKind>(k))}}, static_cast<double>(v));
  }
  out.push_back(std::move(mem));
  gauge("vmspace_memory_limit_bytes", "The daemon's memory budget, bytes (--max-memory-bytes; 0 = unlimited).",
        frames_ ? frames_->budget().limit_bytes() : 0);
  auto fail = Family("vmspace_memory_failures_total",
                     "Charges the memory budget refused (memcg failcnt).", MetricType::Counter);
  AddValue(fail, {}, frames_ ? static_cast<double>(frames_->budget().failcnt()) : 0);
  out.push_back(std::move(fail));
  CollectCaches(frames_, out);

  CollectEngine(ReadStats(), out);
  CollectRpc(ReadRpcStats(), out);
  return out;
}

}  // namespace vmspace::metrics
