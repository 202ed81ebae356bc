// LockingProfile: a named set of design switches that models one kernel era's locking
// (which VMA index, which faults take the per-VMA lock). See README "Locking profiles".
#pragma once

#include <string>

#include "engine/types.h"

namespace vmspace {

/// A locking profile: the set of design switches that model one kernel era. Named
/// profiles (see README "Locking profiles" for the commits each models):
///   linux-6.0  index=rbtree vma_lock=off   every fault takes mmap_lock (read)
///   linux-6.1  index=maple  vma_lock=off   maple tree (RCU-safe), still mmap_lock faults
///   linux-6.4  index=maple  vma_lock=anon  per-VMA locks for anonymous faults
///   linux-6.6  index=maple  vma_lock=all   per-VMA locks for all faults (the default)
/// A per-VMA lock needs the RCU-readable index: vma_lock != off requires index=maple.
struct LockingProfile {
  std::string name = "linux-6.6";  // a named profile, or "custom" after overrides
  VmaIndexKind index = VmaIndexKind::kMaple;
  VmaLockMode vma_lock = VmaLockMode::kAll;

  /// Parses "linux-6.4", "linux-6.4,vma_lock=off", "index=rbtree,vma_lock=off" (a base
  /// name, then switch=value overrides; without a base name linux-6.6 is the base).
  /// Returns false with *err set on unknown names/values or an invalid combination.
  static bool Parse(const std::string& spec, LockingProfile* out, std::string* err);
  /// "linux-6.6 (index=maple vma_lock=all)".
  std::string Describe() const;
  /// Small integer for per-profile statistics: 0..3 for the named profiles, 4 custom.
  int stats_slot() const;
  static const char* const kNames[4];
};

}  // namespace vmspace
