// SPDX-License-Identifier: Apache-2.0
#include "lib/fork_bench.h"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "engine/stats.h"
#include "lib/harness.h"

namespace vmspace::bench {

namespace {
constexpr uint64_t P = kPageSize;
constexpr uint64_t kBase = 0x200000000000ull;

/// The VMAs' length (pages, at least one) and the pages written in each, spread evenly.
struct Layout {
  uint64_t len = 0;
  std::vector<uint64_t> touched;  // addresses
  uint64_t vma(uint64_t i) const { return kBase + i * (len + P); }  // a page apart: no merge
  uint64_t hot() const { return kBase - (1ull << 32); }  // the parent threads' pages, below the VMAs
};

Layout MakeLayout(const ForkConfig& c) {
  Layout l;
  l.len = std::max<uint64_t>(1, c.size / c.vmas / P) * P;
  const uint64_t pages = l.len / P;
  for (uint64_t i = 0; i < c.vmas; ++i)
    for (uint64_t j = 0; j < pages; ++j)
      if (static_cast<uint64_t>((j + 1) * c.touch) > static_cast<uint64_t>(j * c.touch))
        l.touched.push_back(l.vma(i) + j * P);
  return l;
}

void AddLock(const StatsSnapshot& d, LockClass cls, uint64_t* acq, uint64_t* cont, double* wait) {
  for (LockMode m : {LockMode::kRead, LockMode::kWrite}) {
    const LockStatCell& cell = d.lock(cls, m);
    *acq += cell.acquisitions;
    *cont += cell.contentions;
    *wait += static_cast<double>(cell.wait_ns_total) / 1e9;
  }
}
}  // namespace

ForkResult RunForkEngine(const std::string& profile, const ForkConfig& cfg) {
  ForkResult r;
  r.setting = profile.empty() ? "linux-6.15" : profile;
  SpaceOptions o;
  std::string err;
  if (!LockingProfile::Parse(r.setting, &o.profile, &err)) {
    r.error = "profile: " + err;
    return r;
  }
  const Layout l = MakeLayout(cfg);
  r.child_pages = l.touched.size();
  FrameAllocator frames;
  auto parent = std::make_unique<AddressSpace>(frames, o);
  for (uint64_t i = 0; i < cfg.vmas; ++i) {
    SysResult m = parent->Mmap(l.vma(i), l.len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE);
    if (!m.ok()) {
      r.error = harness::ErrnoText("mmap", m.error);
      return r;
    }
  }
  for (uint64_t a : l.touched)
    if (parent->Fault(a, AccessType::kWrite).failed()) {
      r.error = "parent write failed";
      return r;
    }
  // The parent threads' pages: two threads per page, each its own half.
  const uint64_t hot_pages = (static_cast<uint64_t>(cfg.parent_threads) + 1) / 2;
  if (hot_pages) {
    SysResult m = parent->Mmap(l.hot(), hot_pages * P, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED);
    if (!m.ok() || parent->Access(l.hot(), hot_pages * P, P, AccessType::kWrite).stop.failed()) {
      r.error = "mmap of the parent threads' pages failed";
      return r;
    }
  }
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> writes{0}, hits{0};
  std::vector<std::thread> writers;
  for (int t = 0; t < cfg.parent_threads; ++t)
    writers.emplace_back([&, t] {
      StatsSlotScope slot(o.profile.stats_slot());
      // Each write is one access of the thread's whole half page (a 2 KiB store under
      // one "TLB entry"), so a fork's write-protect and the partner's COW copy can fall
      // inside it, as a store through a stale TLB entry does on the kernel.
      constexpr uint64_t kHalf = P / 2;
      const uint64_t addr = l.hot() + (t / 2) * P + (t % 2) * kHalf;
      std::vector<uint64_t> out(kHalf / sizeof(uint64_t)), back(out.size());
      uint64_t n = 0, h = 0;
      for (uint64_t v = 1; !stop.load(std::memory_order_relaxed); ++v) {
        std::fill(out.begin(), out.end(), v);
        if (parent->WriteMemory(addr, out.data(), kHalf).bytes != kHalf ||
            parent->ReadMemory(addr, back.data(), kHalf).bytes != kHalf)
          break;
        ++n;
        if (back != out) ++h;  // some of this thread's own write is gone
      }
      writes += n;
      hits += h;
    });
  StatsSlotScope slot(o.profile.stats_slot());
  const StatsSnapshot before = ReadStats(o.profile.stats_slot());
  const uint64_t t0 = harness::MonoNs();
  while (harness::MonoNs() - t0 < static_cast<uint64_t>(cfg.seconds * 1e9)) {
    int e = 0;
    std::unique_ptr<AddressSpace> child = parent->DupMmap(&e);
    if (!child) {
      r.error = harness::ErrnoText("fork", e);
      break;
    }
    for (uint64_t a : l.touched)
      if (child->Fault(a, AccessType::kWrite).failed()) {
        r.error = "child write failed";
        break;
      }
    if (cfg.parent_threads > 0) {
      std::string v = child->Validate();
      if (!v.empty() && r.validate_failures++ == 0) r.validate_error = v;
    }
    child.reset();
    if (!r.error.empty()) break;
    r.forks++;
  }
  r.seconds = static_cast<double>(harness::MonoNs() - t0) / 1e9;
  stop = true;
  for (auto& t : writers) t.join();
  const StatsSnapshot d = ReadStats(o.profile.stats_slot()).Minus(before);
  AddLock(d, LockClass::kMmapLock, &r.mmap_lock_acquisitions, &r.mmap_lock_contentions, &r.mmap_lock_wait_s);
  AddLock(d, LockClass::kAnonVma, &r.anon_vma_acquisitions, &r.anon_vma_contentions, &r.anon_vma_wait_s);
  r.parent_writes = writes.load();
  r.race_hits = hits.load();
  if (const std::string v = parent->Validate(); !v.empty() && r.error.empty()) r.error = "parent: " + v;
  return r;
}

ForkResult RunForkNative(const ForkConfig& cfg) {
  ForkResult r;
  r.setting = "native";
  const Layout l = MakeLayout(cfg);
  r.child_pages = l.touched.size();
  int fds[2];
  if (pipe(fds) != 0) {
    r.error = std::string("pipe: ") + strerror(errno);
    return r;
  }
  const pid_t helper = fork();
  if (helper < 0) {
    r.error = std::string("fork: ") + strerror(errno);
    return r;
  }
  if (helper == 0) {
    // The helper: the layout, then fork + write + exit for the time given.
    close(fds[0]);
    uint64_t out[2] = {0, 0};  // forks, nanoseconds (0 forks and ns 0: failed)
    bool ok = true;
    for (uint64_t i = 0; ok && i < cfg.vmas; ++i)
      ok = mmap(reinterpret_cast<void*>(l.vma(i)), l.len, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0) != MAP_FAILED;
    for (uint64_t a : l.touched)
      if (ok) *reinterpret_cast<volatile char*>(a) = 1;
    const uint64_t t0 = harness::MonoNs();
    while (ok && harness::MonoNs() - t0 < static_cast<uint64_t>(cfg.seconds * 1e9)) {
      const pid_t c = fork();
      if (c == 0) {
        for (uint64_t a : l.touched) *reinterpret_cast<volatile char*>(a) = 2;
        _exit(0);
      }
      int st = 0;
      ok = c > 0 && waitpid(c, &st, 0) == c && WIFEXITED(st) && WEXITSTATUS(st) == 0;
      if (ok) out[0]++;
    }
    out[1] = ok ? harness::MonoNs() - t0 : 0;
    ssize_t w = write(fds[1], out, sizeof out);
    _exit(w == sizeof out ? 0 : 1);
  }
  close(fds[1]);
  uint64_t in[2] = {0, 0};
  const ssize_t n = read(fds[0], in, sizeof in);
  close(fds[0]);
  int st = 0;
  waitpid(helper, &st, 0);
  if (n != sizeof in || in[1] == 0) {
    r.error = "the native helper failed (mmap at the layout's addresses, or fork)";
    return r;
  }
  r.forks = in[0];
  r.seconds = static_cast<double>(in[1]) / 1e9;
  return r;
}

}  // namespace vmspace::bench
