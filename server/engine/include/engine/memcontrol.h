// SPDX-License-Identifier: Apache-2.0
// MemCgroup: one tenant's memory cgroup for the pages of files (page cache and shmem),
// as a memcg's page_counter charges a file folio to the cgroup of the task whose call
// brought it in (mm/memcontrol.c mem_cgroup_charge / __mem_cgroup_uncharge,
// mm/filemap.c __filemap_add_folio; Linux 6.18). A host file opened by two tenants is
// charged page by page to whichever tenant's call read each page in (or wrote it
// first), as Linux charges a shared page cache page to the cgroup that faulted it.
//
// The calling thread's cgroup is the active one (ActiveMemcgScope, as
// set_active_memcg()): the RPC layer opens a scope for each tenant's call, so a fault,
// a readahead or a WriteFile that adds a page charges that tenant, and a call without
// a scope (no tenants, the writeback thread) charges nobody. The charge stays with the
// folio and is given back when the folio is freed (truncate, hole punch, reclaim, the
// last close of the file), whichever thread frees it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

namespace vmspace {

class MemCgroup : public std::enable_shared_from_this<MemCgroup> {
 public:
  /// `name`: the tenant. `limit_bytes`: the most that may be charged at once; 0 = no
  /// limit (usage is still counted).
  MemCgroup(std::string name, uint64_t limit_bytes) : name_(std::move(name)), limit_(limit_bytes) {}
  MemCgroup(const MemCgroup&) = delete;
  MemCgroup& operator=(const MemCgroup&) = delete;

  /// try_charge_memcg(): charges `bytes`; false (nothing charged, failcnt counted) if
  /// that would take usage over the limit: the caller fails with ENOMEM, as a memcg at
  /// its limit that cannot reclaim (memcg OOM). Lock-free.
  bool TryCharge(uint64_t bytes);
  /// Gives back `bytes` charged by TryCharge. Lock-free.
  void Uncharge(uint64_t bytes);
  /// Bytes charged now (memory.current).
  uint64_t usage() const { return usage_.load(std::memory_order_relaxed); }
  /// Charges refused (memory.events max).
  uint64_t failcnt() const { return failcnt_.load(std::memory_order_relaxed); }
  uint64_t limit_bytes() const { return limit_; }
  const std::string& name() const { return name_; }

 private:
  const std::string name_;
  const uint64_t limit_;
  std::atomic<uint64_t> usage_{0};
  std::atomic<uint64_t> failcnt_{0};
};

/// The calling thread's active cgroup (ActiveMemcgScope), or null: nothing is charged.
MemCgroup* ActiveMemcg();

/// set_active_memcg() for a scope: `cg` (may be null) is the calling thread's active
/// cgroup until the scope closes, then the previous one again. Nests. The caller keeps
/// `cg` alive for the scope.
class ActiveMemcgScope {
 public:
  explicit ActiveMemcgScope(MemCgroup* cg);
  ~ActiveMemcgScope();
  ActiveMemcgScope(const ActiveMemcgScope&) = delete;
  ActiveMemcgScope& operator=(const ActiveMemcgScope&) = delete;

 private:
  MemCgroup* const prev_;
};

}  // namespace vmspace
