// SPDX-License-Identifier: Apache-2.0
#include "page_table.h"

#include <algorithm>

#include "engine/stats.h"

namespace vmspace {

namespace {
constexpr int kShift[4] = {39, 30, 21, 12};  // PGD, PUD, PMD, PTE index shifts
inline int Index(uint64_t addr, int level) { return static_cast<int>((addr >> kShift[level]) & 511); }
}  // namespace

PageTable::PageTable(FrameAllocator* charge) : charge_(charge) {}

PageTable::~PageTable() { DestroyLevel(&pgd_, 0); }

void PageTable::DestroyLevel(Dir* dir, int level) {
  for (auto& slot : dir->e) {
    void* p = slot.load(std::memory_order_relaxed);
    if (!p) continue;
    if (level < 2) {
      DestroyLevel(static_cast<Dir*>(p), level + 1);
      delete static_cast<Dir*>(p);
    } else {
      delete static_cast<PteTable*>(p);
    }
    if (charge_) charge_->UnchargeTable();
    CountEvent(Event::kPgtablesFreed);  // exit_mmap's free_pgtables counts them too
    slot.store(nullptr, std::memory_order_relaxed);
  }
}

PageTable::PteTable* PageTable::Lookup(uint64_t addr, bool alloc) {
  Dir* dir = &pgd_;
  for (int level = 0; level < 3; level++) {
    std::atomic<void*>& slot = dir->e[Index(addr, level)];
    void* next = slot.load(std::memory_order_acquire);
    if (!next) {
      if (!alloc) return nullptr;
      if (charge_ && !charge_->ChargeTable()) return nullptr;
      // Allocate outside the lock, install under page_table_lock if still empty
      // (mm/memory.c __pte_alloc / pmd_install).
      void* fresh = level < 2 ? static_cast<void*>(new Dir()) : static_cast<void*>(new PteTable());
      {
        SpinGuard g(page_table_lock_);
        next = slot.load(std::memory_order_relaxed);
        if (!next) {
          slot.store(fresh, std::memory_order_release);
          next = fresh;
          fresh = nullptr;
          table_pages_.fetch_add(1, std::memory_order_relaxed);
        }
      }
      if (fresh) {
        if (level < 2) delete static_cast<Dir*>(fresh);
        else delete static_cast<PteTable*>(fresh);
        if (charge_) charge_->UnchargeTable();
      } else {
        CountEvent(Event::kPgtablesAllocated);
      }
    }
    if (level == 2) return static_cast<PteTable*>(next);
    dir = static_cast<Dir*>(next);
  }
  return nullptr;
}

void PageTable::FreePgtables(uint64_t start, uint64_t end, uint64_t floor, uint64_t ceiling,
                             TableGather& gather) {
  if (start >= end) return;
  gather.charge = charge_;
  FreeLevel(&pgd_, 0, 0, start, end, floor, ceiling, gather);
}

// The analysis is off: the second lock is taken only when the two tables differ, which
// it cannot follow (the same spin_lock_nested pairing as move_ptes).
uint64_t PageTable::MovePtes(uint64_t old_addr, uint64_t new_addr, uint64_t len) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  uint64_t done = 0;
  while (done < len) {
    const uint64_t o = old_addr + done, n = new_addr + done;
    // get_extent(): to the end of whichever table ends first, or of the range.
    uint64_t extent = std::min(kPmdSpan - (o & (kPmdSpan - 1)), kPmdSpan - (n & (kPmdSpan - 1)));
    extent = std::min(extent, len - done);
    PteTable* src = Lookup(o, false);
    if (!src) {  // nothing mapped here
      done += extent;
      continue;
    }
    PteTable* dst = Lookup(n, true);
    if (!dst) return done;
    const int i0 = PteIndex(o), j0 = PteIndex(n), count = static_cast<int>(extent >> 12);
    SpinGuard l(src->ptl);
    if (dst != src) dst->ptl.LockNested(LockRank::kPtlNested);
    for (int k = 0; k < count; k++) {
      if (!src->Get(i0 + k)) continue;
      // get_and_clear_full_ptes() then set_ptes(): the entry is never in both tables.
      const uint64_t v = src->Clear(i0 + k);
      dst->pte[j0 + k].store(v, std::memory_order_release);  // set_pte_at under dst->ptl
    }
    if (dst != src) dst->ptl.Unlock();
    done += extent;
  }
  return done;
}

void PageTable::DeleteTables(TableGather& g) {
  for (void* d : g.dirs) delete static_cast<Dir*>(d);
  for (void* p : g.ptes) delete static_cast<PteTable*>(p);
  if (g.charge)
    for (size_t i = 0; i < g.dirs.size() + g.ptes.size(); i++) g.charge->UnchargeTable();
  g.dirs.clear();
  g.ptes.clear();
}

// Visits the entries of `dir` (at `level`, whose first entry maps `base`) overlapping
// [start, end); frees a child table when the child's whole span lies within
// [floor, ceiling), after freeing its own children.
void PageTable::FreeLevel(Dir* dir, int level, uint64_t base, uint64_t start, uint64_t end,
                          uint64_t floor, uint64_t ceiling, TableGather& gather) {
  const uint64_t span = 1ull << kShift[level];
  int first = Index(start, level);
  int last = Index(end - 1, level);
  for (int i = first; i <= last; i++) {
    // Acquire: a fault in a neighbouring VMA (under mmap_lock read, beside munmap's
    // downgraded hold) may have installed this table just now; its entries were
    // initialised before the release store that published it (Lookup).
    void* child = dir->e[i].load(std::memory_order_acquire);
    if (!child) continue;
    uint64_t cstart = base + static_cast<uint64_t>(i) * span;
    uint64_t cend = cstart + span;
    if (level < 2) {
      uint64_t s = start > cstart ? start : cstart;
      uint64_t e = end < cend ? end : cend;
      FreeLevel(static_cast<Dir*>(child), level + 1, cstart, s, e, floor, ceiling, gather);
    }
    if (cstart >= floor && cend <= ceiling) {
      dir->e[i].store(nullptr, std::memory_order_release);
      if (level < 2) gather.dirs.push_back(child);
      else gather.ptes.push_back(child);
      table_pages_.fetch_sub(1, std::memory_order_relaxed);
      CountEvent(Event::kPgtablesFreed);
    }
  }
}

}  // namespace vmspace
