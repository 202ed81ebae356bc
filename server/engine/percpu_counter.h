// SPDX-License-Identifier: Apache-2.0
// PercpuCounter: a counter in per-thread cells (include/linux/percpu_counter.h).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include "engine/per_thread.h"

namespace vmspace {

/// A counter split into cache-line cells picked by the calling thread (Linux's
/// percpu_counter, as mm->rss_stat is since 6.2): Add touches one cell, Sum adds them
/// (exact once updates stop). No lock.
class PercpuCounter {
 public:
  void Add(int64_t n) { cells_[Cell()].v.fetch_add(n, std::memory_order_relaxed); }
  int64_t Sum() const {
    int64_t s = 0;
    for (const auto& c : cells_) s += c.v.load(std::memory_order_relaxed);
    return s;
  }

 private:
  static constexpr int kCells = 16;
  struct alignas(kDestructiveInterferenceBytes) Padded {
    std::atomic<int64_t> v{0};
  };
  static int Cell();
  std::array<Padded, kCells> cells_;
};

}  // namespace vmspace
