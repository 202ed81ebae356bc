// SPDX-License-Identifier: Apache-2.0
// Locking profiles: named sets of design switches, one per modelled kernel era; the
// names and parsers of the per-space settings (SpaceOptions, engine/address_space.h).
#include <sstream>

#include "engine/address_space.h"
#include "engine/profile.h"
#include "engine/stats.h"

namespace vmspace {

const char* const LockingProfile::kNames[kNamedCount] = {"linux-6.0", "linux-6.1", "linux-6.4",
                                                         "linux-6.6", "linux-6.7", "linux-6.15"};
static_assert(kStatSlots == LockingProfile::kNamedCount + 2,
              "one statistics slot per named profile, plus custom and none");

const char* VmaLockModeName(VmaLockMode m) {
  switch (m) {
    case VmaLockMode::kOff: return "off";
    case VmaLockMode::kAnon: return "anon";
    case VmaLockMode::kAround: return "around";
    case VmaLockMode::kAll: return "all";
  }
  return "?";
}

const char* VmaLockFormName(VmaLockForm f) {
  switch (f) {
    case VmaLockForm::kRwsem: return "rwsem";
    case VmaLockForm::kRefcnt: return "refcnt";
  }
  return "?";
}

namespace {

constexpr const char* kNameList = "linux-6.0, linux-6.1, linux-6.4, linux-6.6, linux-6.7, linux-6.15";

bool Named(const std::string& name, LockingProfile* p) {
  LockingProfile q;  // the defaults: maple in RCU mode, refcnt form
  if (name == "linux-6.0") {
    q.index = VmaIndexKind::kRbtree;
    q.vma_lock = VmaLockMode::kOff;
  } else if (name == "linux-6.1") {
    q.maple_rcu = false;
    q.maple_prealloc_worst = true;
    q.vma_lock = VmaLockMode::kOff;
  } else if (name == "linux-6.4") {
    q.maple_prealloc_worst = true;
    q.vma_lock = VmaLockMode::kAnon;
    q.vma_lock_form = VmaLockForm::kRwsem;
  } else if (name == "linux-6.6") {
    q.vma_lock = VmaLockMode::kAround;
    q.vma_lock_form = VmaLockForm::kRwsem;
  } else if (name == "linux-6.7") {
    q.vma_lock_form = VmaLockForm::kRwsem;
  } else if (name != "linux-6.15") {
    return false;
  }
  q.name = name;
  *p = q;
  return true;
}

/// A client's string as an error message quotes it: at most 64 bytes of it.
std::string Quoted(const std::string& s) {
  return "'" + (s.size() <= 64 ? s : s.substr(0, 64) + "...") + "'";
}

bool SameSwitches(const LockingProfile& a, const LockingProfile& b) {
  return a.Switches() == b.Switches();
}

// What each named profile models, in words (Describe; docs/profiles.md "The six eras").
const char* Story(const std::string& name) {
  if (name == "linux-6.0")
    return "VMAs in an augmented search tree changed in place under mmap_lock (the rbtree with "
           "rb_subtree_gap); every fault takes mmap_lock for read; VMAs freed at once (vm_area_free "
           "-> kmem_cache_free)";
  if (name == "linux-6.1")
    return "the maple tree (commit d4af56c5c7c6 \"mm: start tracking VMAs with maple tree\"), not yet "
           "in RCU mode (before 3dd4432549415): nodes rewritten in place and freed at once, worst-case "
           "node preallocation before every store (mas_preallocate: 1 + height * 3 nodes, the unused "
           "freed after it); munmap gathers the VMAs it removes in a detached maple tree (mt_detach), "
           "as every later profile; every fault takes mmap_lock; VMAs freed at once";
  if (name == "linux-6.4")
    return "maple tree in RCU mode; per-VMA locks for anonymous VMAs that have an anon_vma "
           "(lock_vma_under_rcu, \"mm: introduce lock_vma_under_rcu to be used from arch-specific "
           "code\"); the lock a separately allocated vma_lock rw_semaphore (\"mm: separate vma->lock "
           "from vm_area_struct\") plus vm_lock_seq/mm_lock_seq and a detached flag; each VMA freed "
           "by its own call_rcu (vm_area_free_rcu_cb); still the worst-case node preallocation of 6.1";
  if (name == "linux-6.6")
    return "as linux-6.4, and VMAs of every type locked (\"mm: allow per-VMA locks on file-backed "
           "VMAs\"), but of file faults only the reads that fault-around serves from the page cache "
           "run under the VMA lock (the \"Avoid the mmap lock for fault-around\" series: \"mm: run "
           "the fault-around code under the VMA lock\"); read misses, COW and shared write faults "
           "answer VM_FAULT_RETRY and run under mmap_lock (6.5: swap and userfaultfd faults, not "
           "modelled); same vma_lock rw_semaphore and call_rcu per VMA; node preallocation by store "
           "type (6.5: \"maple_tree: refine mas_preallocate() node calculations\")";
  if (name == "linux-6.7")
    return "as linux-6.6, with read, shared and COW faults of file VMAs under the VMA lock (\"mm: "
           "handle read faults under the VMA lock\", \"mm: handle shared faults under the VMA lock\", "
           "\"mm: handle COW faults under the VMA lock\"); the seed-004 thread's 6.7.0-rc2";
  if (name == "linux-6.15")
    return "per-VMA lock as vm_refcnt inside the VMA (\"mm: move per-vma lock into vm_area_struct\", "
           "\"mm: replace vm_lock and detached flag with a reference count\"), VMAs from a "
           "SLAB_TYPESAFE_BY_RCU cache reused without a grace period, lock_vma_under_rcu re-checking "
           "the VMA it locked (\"mm: make vma cache SLAB_TYPESAFE_BY_RCU\"); all faults under the "
           "VMA lock";
  return nullptr;
}

}  // namespace

bool LockingProfile::Parse(const std::string& spec, LockingProfile* out, std::string* err) {
  LockingProfile p;  // linux-6.15
  std::stringstream ss(spec);
  std::string item;
  bool first = true, overridden = false;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    size_t eq = item.find('=');
    if (eq == std::string::npos) {
      if (!first || !Named(item, &p)) {
        *err = "unknown locking profile " + Quoted(item) + " (" + kNameList + ")";
        return false;
      }
    } else {
      std::string k = item.substr(0, eq), v = item.substr(eq + 1);
      if (k == "index" && v == "rbtree") p.index = VmaIndexKind::kRbtree;
      else if (k == "index" && v == "maple") p.index = VmaIndexKind::kMaple;
      else if (k == "maple_rcu" && (v == "on" || v == "off")) p.maple_rcu = v == "on";
      else if (k == "maple_prealloc" && (v == "worst" || v == "store")) p.maple_prealloc_worst = v == "worst";
      else if (k == "vma_lock" && v == "off") p.vma_lock = VmaLockMode::kOff;
      else if (k == "vma_lock" && v == "anon") p.vma_lock = VmaLockMode::kAnon;
      else if (k == "vma_lock" && v == "around") p.vma_lock = VmaLockMode::kAround;
      else if (k == "vma_lock" && v == "all") p.vma_lock = VmaLockMode::kAll;
      else if (k == "vma_lock_form" && v == "rwsem") p.vma_lock_form = VmaLockForm::kRwsem;
      else if (k == "vma_lock_form" && v == "refcnt") p.vma_lock_form = VmaLockForm::kRefcnt;
      else if (k == "fork_vma_lock" && (v == "on" || v == "off")) p.fork_vma_lock = v == "on";
      else {
        *err = "unknown switch " + Quoted(item) +
               " (index=rbtree|maple, maple_rcu=on|off, maple_prealloc=worst|store, vma_lock=off|anon|around|all, "
               "vma_lock_form=rwsem|refcnt, fork_vma_lock=on|off)";
        return false;
      }
      overridden = true;
    }
    first = false;
  }
  if (first && !spec.empty()) {  // nothing but separators ("" is the default)
    *err = "empty locking profile " + Quoted(spec) + " (" + kNameList + ")";
    return false;
  }
  if (p.vma_lock != VmaLockMode::kOff && (p.index != VmaIndexKind::kMaple || !p.maple_rcu)) {
    *err = "vma_lock=" + std::string(VmaLockModeName(p.vma_lock)) +
           " needs index=maple with maple_rcu=on (per-VMA locks look VMAs up under RCU)";
    return false;
  }
  if (overridden) {
    // Keep the name if the overrides happen to match it, else the first named profile
    // with these switches, else "custom".
    LockingProfile named;
    if (!Named(p.name, &named) || !SameSwitches(named, p)) {
      p.name = "custom";
      for (const char* n : kNames) {
        LockingProfile q;
        Named(n, &q);
        if (SameSwitches(q, p)) {
          p.name = n;
          break;
        }
      }
    }
  }
  *out = p;
  return true;
}

std::string LockingProfile::Switches() const {
  std::string s = std::string("index=") + VmaIndexKindName(index);
  if (index == VmaIndexKind::kMaple && !maple_rcu) s += " maple_rcu=off";
  if (index == VmaIndexKind::kMaple && maple_prealloc_worst) s += " maple_prealloc=worst";
  s += std::string(" vma_lock=") + VmaLockModeName(vma_lock);
  if (vma_lock != VmaLockMode::kOff) s += std::string(" vma_lock_form=") + VmaLockFormName(vma_lock_form);
  if (vma_lock != VmaLockMode::kOff && !fork_vma_lock) s += " fork_vma_lock=off";
  return s;
}

std::string LockingProfile::Describe() const {
  std::string d = name + " (" + Switches() + ")";
  if (const char* story = Story(name)) d += std::string(": ") + story;
  return d;
}

int LockingProfile::stats_slot() const {
  for (int i = 0; i < kNamedCount; i++)
    if (name == kNames[i]) return i;
  return kNamedCount;
}

const char* SharedFaultCompletionName(SharedFaultCompletion c) {
  return c == SharedFaultCompletion::kRetry ? "retry" : "completed";
}

const char* IMmapScopeName(IMmapScope s) { return s == IMmapScope::kWide ? "wide" : "narrow"; }

bool ParseIMmapScope(const std::string& s, IMmapScope* out) {
  if (s == "wide") *out = IMmapScope::kWide;
  else if (s == "narrow") *out = IMmapScope::kNarrow;
  else return false;
  return true;
}

bool ParseSharedFaultCompletion(const std::string& s, SharedFaultCompletion* out) {
  if (s == "retry") *out = SharedFaultCompletion::kRetry;
  else if (s == "completed") *out = SharedFaultCompletion::kCompleted;
  else return false;
  return true;
}

}  // namespace vmspace
