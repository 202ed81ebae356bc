// SPDX-License-Identifier: Apache-2.0
// LockingProfile: a named set of design switches that models one kernel era's locking
// and VMA lifetime (which VMA index, which faults take the per-VMA lock, which form that
// lock and the VMA's freeing have). The profiles are described in docs/profiles.md
// "The six eras"; their lock forms in LOCKING.md "Profiles: the per-VMA lock and VMA
// lifetime by era".
#pragma once

#include <string>

#include "engine/types.h"

namespace vmspace {

/// The form of the per-VMA lock and of VMA freeing (only meaningful with vma_lock != off;
/// without per-VMA locks nothing reads a VMA without mmap_lock and VMAs are freed at
/// once, as vm_area_free() did before 6.4).
///  * kRwsem (Linux 6.4 - 6.14): a `vma_lock` rw_semaphore allocated separately from the
///    VMA (its own cache, vm_area_alloc/vm_area_dup allocate one per VMA: commit "mm:
///    separate vma->lock from vm_area_struct"), a `detached` flag, readers take it with
///    down_read_trylock, writers with down_write (waiting for readers on the rwsem);
///    every VMA freed by its own call_rcu (vm_area_free -> vm_area_free_rcu_cb).
///  * kRefcnt (Linux 6.15 -): `vm_refcnt` in the VMA ("mm: move per-vma lock into
///    vm_area_struct", "mm: replace vm_lock and detached flag with a reference count");
///    VMAs come from a SLAB_TYPESAFE_BY_RCU cache ("mm: make vma cache
///    SLAB_TYPESAFE_BY_RCU"): a freed VMA is reused at once, without a grace period, and
///    lock_vma_under_rcu re-checks the VMA it locked.
enum class VmaLockForm : uint8_t { kRwsem, kRefcnt };
/// "rwsem", "refcnt".
const char* VmaLockFormName(VmaLockForm f);

/// A locking profile: the set of design switches that model one kernel era. Named
/// profiles (docs/profiles.md "The six eras" has the commits each follows):
///   linux-6.0   index=rbtree                vma_lock=off   every fault takes mmap_lock
///   linux-6.1   index=maple maple_rcu=off   vma_lock=off   maple tree, not in RCU mode,
///                                                          maple_prealloc=worst
///   linux-6.4   index=maple                 vma_lock=anon  vma_lock_form=rwsem
///                                                          maple_prealloc=worst
///   linux-6.6   index=maple                 vma_lock=all   vma_lock_form=rwsem
///   linux-6.7   index=maple                 vma_lock=all   vma_lock_form=rwsem
///   linux-6.15  index=maple                 vma_lock=all   vma_lock_form=refcnt (default)
/// (maple_rcu=on, maple_prealloc=store and vma_lock_form=refcnt are the defaults where not
/// shown.) A per-VMA
/// lock needs the RCU-readable index: vma_lock != off requires index=maple maple_rcu=on.
struct LockingProfile {
  std::string name = "linux-6.15";  // a named profile, or "custom" after overrides
  VmaIndexKind index = VmaIndexKind::kMaple;
  /// The maple tree in RCU mode (MT_FLAGS_USE_RCU: nodes replaced, freed after a grace
  /// period, readable under RCU), as the mm tree is since 6.3 / 6.1.25 (commit
  /// 3dd4432549415 "mm: enable maple tree RCU mode by default"). Off: nodes rewritten
  /// in place and freed at once (Linux 6.1.0 - 6.1.24, 6.2). Only for index=maple.
  bool maple_rcu = true;
  /// How many nodes the maple tree preallocates before a store (mas_preallocate). true
  /// ("maple_prealloc=worst"): the worst case of any store, 1 + height * 3 nodes, before
  /// every store, as Linux 6.1 - 6.4; the unused ones are freed after it (mas_destroy).
  /// false ("store", the default): the worst case of the store's own type (0 for exact
  /// fit, slot store and append, 1 for a node store, more for split, rebalance and
  /// spanning stores), as Linux 6.5+ (commit "maple_tree: refine mas_preallocate() node
  /// calculations", the fix for "a performance regression introduced in platforms that
  /// have longer allocation timing"; mas_prealloc_calc() since 6.12). Only for index=maple.
  bool maple_prealloc_worst = false;
  VmaLockMode vma_lock = VmaLockMode::kAll;
  VmaLockForm vma_lock_form = VmaLockForm::kRefcnt;
  /// fork write-locks each parent VMA before copying it (vma_start_write in dup_mmap:
  /// commit fb49c455323f "fork: lock VMAs of the parent process when forking", Suren
  /// Baghdasaryan, July 2023, in 6.5 and 6.4.3), so no fault under the VMA lock runs on
  /// a VMA while its page tables are copied. false ("fork_vma_lock=off"): Linux 6.4.0 -
  /// 6.4.2, where a parent thread's write fault under the VMA lock can copy a page fork
  /// has just write-protected while another thread still writes it through its stale
  /// TLB entry (the memory corruption that fix closed). Only with vma_lock != off
  /// (without per-VMA locks mmap_lock excludes every fault); shown in Switches() only
  /// when off.
  bool fork_vma_lock = true;

  /// Parses "linux-6.4", "linux-6.4,vma_lock=off", "index=rbtree,vma_lock=off" (a base
  /// name, then switch=value overrides; without a base name linux-6.15 is the base).
  /// Switches: index=rbtree|maple, maple_rcu=on|off, maple_prealloc=worst|store,
  /// vma_lock=off|anon|around|all,
  /// vma_lock_form=rwsem|refcnt, fork_vma_lock=on|off. Returns false with *err set on unknown names/values or
  /// an invalid combination.
  static bool Parse(const std::string& spec, LockingProfile* out, std::string* err);
  /// The name, the switches, and in words which structures the profile models and the
  /// kernel commits it follows: "linux-6.15 (index=maple vma_lock=all
  /// vma_lock_form=refcnt): ...".
  std::string Describe() const;
  /// The switches only: "index=maple vma_lock=all vma_lock_form=refcnt".
  std::string Switches() const;
  /// Small integer for per-profile statistics: 0..kNamedCount-1 for the named profiles
  /// (the order of kNames), kNamedCount for "custom".
  int stats_slot() const;
  static constexpr int kNamedCount = 6;
  static const char* const kNames[kNamedCount];
};

}  // namespace vmspace
