// SPDX-License-Identifier: Apache-2.0
#include "lib/shmem_dirty.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <memory>

#include "engine/stats.h"
#include "lib/harness.h"

namespace vmspace::bench {

namespace {

/// Mean, min and standard deviation of the run times.
void Summarise(const std::vector<double>& s, ShmemDirtyResult* r) {
  r->runs = static_cast<int>(s.size());
  if (s.empty()) return;
  double sum = 0;
  for (double x : s) sum += x;
  r->seconds_mean = sum / s.size();
  r->seconds_min = *std::min_element(s.begin(), s.end());
  double var = 0;
  for (double x : s) var += (x - r->seconds_mean) * (x - r->seconds_mean);
  r->seconds_stddev = s.size() > 1 ? std::sqrt(var / (s.size() - 1)) : 0;
}

}  // namespace

std::vector<ShmemDirtyResult> RunShmemDirtyEngine(uint64_t bytes, const std::string& profile,
                                                  const std::vector<SharedFaultCompletion>& modes, int runs) {
  std::vector<ShmemDirtyResult> out(modes.size());
  std::vector<SpaceOptions> opts(modes.size());
  std::vector<std::vector<double>> secs(modes.size());
  for (size_t k = 0; k < modes.size(); ++k) {
    ShmemDirtyResult& r = out[k];
    r.setting = SharedFaultCompletionName(modes[k]);
    r.pages = bytes / kPageSize;
    std::string err;
    if (!LockingProfile::Parse(profile.empty() ? "linux-6.15" : profile, &opts[k].profile, &err)) r.error = "profile: " + err;
    r.profile = opts[k].profile.name;
    opts[k].shared_fault_completion = modes[k];
  }
  FrameAllocator frames;
  {  // fault the host pages behind the frames in once (harness Backend::Prepare)
    std::vector<void*> fs;
    for (uint64_t i = 0; i < bytes / kPageSize; ++i)
      if (void* f = frames.Alloc()) fs.push_back(f);
    for (void* f : fs) frames.Free(f);
  }
  // Run 0 warms up (not counted); then the modes take turns, so that drifts of a
  // shared machine spread over all of them.
  for (int i = 0; i <= runs; ++i) {
    for (size_t k = 0; k < modes.size(); ++k) {
      ShmemDirtyResult& r = out[k];
      if (!r.ok()) continue;
      const SpaceOptions& o = opts[k];
      auto as = std::make_unique<AddressSpace>(frames, o);
      SysResult m = as->Mmap(0, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS);
      if (!m.ok()) {
        r.error = harness::ErrnoText("mmap", m.error);
        continue;
      }
      const StatsSnapshot before = ReadStats(o.profile.stats_slot());
      const uint64_t t0 = harness::MonoNs();
      AccessResult a = as->Access(m.value, bytes, kPageSize, AccessType::kWrite);
      const uint64_t t1 = harness::MonoNs();
      const StatsSnapshot d = ReadStats(o.profile.stats_slot()).Minus(before);
      if (!a.ok()) {
        r.error = std::string("write loop ended in ") + FaultOutcomeName(a.stop.outcome);
        continue;
      }
      if (i > 0) secs[k].push_back(static_cast<double>(t1 - t0) / 1e9);
      r.pgfault = d.event(Event::kPgfault);
      r.min_flt = a.faults;
      r.retries = d.event(Event::kFaultRetryDirty);
      r.completed = d.event(Event::kFaultCompleted);
      r.mmap_lock_acquisitions = d.lock(LockClass::kMmapLock, LockMode::kRead).acquisitions +
                                 d.lock(LockClass::kMmapLock, LockMode::kWrite).acquisitions;
      r.mmap_lock_contentions = d.lock(LockClass::kMmapLock, LockMode::kRead).contentions +
                                d.lock(LockClass::kMmapLock, LockMode::kWrite).contentions;
      r.vma_lock_acquisitions = d.lock(LockClass::kVmaLock, LockMode::kRead).acquisitions;
      r.i_pages_lock_acquisitions = d.lock(LockClass::kIPagesLock, LockMode::kWrite).acquisitions;
      as.reset();
      RcuBarrier();  // the shmem pages are back in the allocator before the next run
    }
  }
  for (size_t k = 0; k < modes.size(); ++k) Summarise(secs[k], &out[k]);
  return out;
}

ShmemDirtyResult RunShmemDirtyNative(uint64_t bytes, int runs) {
  ShmemDirtyResult r;
  r.setting = "native";
  r.pages = bytes / kPageSize;
  std::vector<double> secs;
  for (int i = 0; i <= runs; ++i) {  // run 0 warms up (not counted)
    const int fd = memfd_create("vmspace-shmem-dirty", 0);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      r.error = std::string("memfd: ") + strerror(errno);
      if (fd >= 0) close(fd);
      break;
    }
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
      r.error = std::string("mmap: ") + strerror(errno);
      break;
    }
    struct rusage u0, u1;
    getrusage(RUSAGE_THREAD, &u0);
    const uint64_t t0 = harness::MonoNs();
    auto* c = static_cast<volatile char*>(p);
    for (uint64_t off = 0; off < bytes; off += kPageSize) c[off] = 1;
    const uint64_t t1 = harness::MonoNs();
    getrusage(RUSAGE_THREAD, &u1);
    munmap(p, bytes);
    if (i == 0) continue;
    secs.push_back(static_cast<double>(t1 - t0) / 1e9);
    r.min_flt = static_cast<uint64_t>(u1.ru_minflt - u0.ru_minflt);
  }
  Summarise(secs, &r);
  return r;
}

}  // namespace vmspace::bench
