// AddressSpace implementation. Linux sources mirrored are named per function
// (Linux 6.18 unless stated). Lock rules: LOCKING.md.
#include "engine/address_space.h"

#include <sys/sysinfo.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <vector>

#include "engine/lock.h"
#include "engine/page_table.h"
#include "engine/rcu.h"
#include "engine/stats.h"
#include "engine/vma.h"
#include "engine/vma_index.h"

namespace vmspace {

namespace {

constexpr uint64_t kUserPgtablesCeiling = 1ull << 48;
constexpr int kMapType = 0x0f;
constexpr int kSiKernel = 0x80;  // SI_KERNEL: #GP on a non-canonical address

std::atomic<uint64_t> g_next_inode{1};
std::atomic<uint64_t> g_next_anon_vma{1};

inline uint64_t PageAlign(uint64_t x) { return (x + kPageSize - 1) & kPageMask; }

// calc_vm_prot_bits(): PROT_READ/WRITE/EXEC have the VM_ values.
inline uint64_t CalcVmProtBits(int prot) { return static_cast<uint64_t>(prot) & VM_ACCESS_FLAGS; }

// PTE permission bits for a frame mapped in `vma` (vm_page_prot plus the write rule
// of do_anonymous_page / change_protection's MM_CP_TRY_CHANGE_WRITABLE): writable if the
// VMA is writable and the frame is not the zero page (private anon frames are
// exclusive: there is no fork).
inline uint64_t PteBitsFor(const Vma& vma, bool zero_page) {
  uint64_t b = 0;
  if (vma.vm_flags & VM_ACCESS_FLAGS) b |= kPteRead;
  if (vma.vm_flags & VM_EXEC) b |= kPteExec;
  if ((vma.vm_flags & VM_WRITE) && !zero_page) b |= kPteWrite;
  return b;
}

inline bool PteAllows(uint64_t pte, AccessType a) {
  if (!(pte & kPtePresent)) return false;
  switch (a) {
    case AccessType::kRead: return pte & kPteRead;
    case AccessType::kWrite: return pte & kPteWrite;
    case AccessType::kExec: return pte & kPteExec;
  }
  return false;
}

// Frames and page tables unmapped under mmap_lock, freed after an RCU grace period:
// lockless accessors (the TLB-like fast path) may still be using them (Linux's
// mmu_gather with MMU_GATHER_RCU_TABLE_FREE).
struct Gather {
  struct rcu_head head;
  FrameAllocator* frames = nullptr;
  std::vector<void*> pages;
  PageTable::TableGather tables;
  std::vector<Vma*> vmas;  // detached VMAs (lockless lookups may still see them)
  std::vector<void*> nodes;  // retired VMA-index nodes
  bool empty() const { return pages.empty() && tables.empty() && vmas.empty() && nodes.empty(); }
  size_t size() const { return pages.size() + tables.dirs.size() + tables.ptes.size() + vmas.size() + nodes.size(); }
  static void Free(struct rcu_head* h) {
    RcuCallbackBegin(h);
    Gather* g = reinterpret_cast<Gather*>(reinterpret_cast<char*>(h) - offsetof(Gather, head));
    for (void* p : g->pages) g->frames->Free(p);
    PageTable::DeleteTables(g->tables);
    for (Vma* v : g->vmas) delete v;
    VmaIndex::DeleteRetired(g->nodes);
    delete g;
#if defined(__SANITIZE_THREAD__)
    __tsan_release(&rcu_internal::gp_token);  // rcu_barrier() waits for this callback
#endif
  }
};

}  // namespace

ShmemObject::~ShmemObject() {
  for (auto& [pgoff, f] : pages) frames.Free(f);
}

void* ShmemObject::GetPage(uint64_t pgoff) {
  RankedGuard<std::mutex> l(mu, LockRank::kShmem);
  auto it = pages.find(pgoff);
  if (it != pages.end()) return it->second;
  void* f = frames.Alloc();
  if (f) pages.emplace(pgoff, f);
  return f;
}

struct AddressSpace::Impl {
  Impl(FrameAllocator& f, const SpaceOptions& o)
      : frames(f), opts(o), idx(VmaIndex::Create(o.profile.index)), slot(o.profile.stats_slot()) {
    uint64_t limit = o.overcommit_limit_bytes;
    if (limit == 0) {
      struct sysinfo si;
      if (sysinfo(&si) == 0)
        limit = (static_cast<uint64_t>(si.totalram) + si.totalswap) * si.mem_unit;
      else
        limit = ~0ull;
    }
    commit_limit_pages = limit >> kPageShift;
  }
  ~Impl() {
    // No other thread may use the space now: zap everything synchronously. Deferred
    // frees already queued reference only the FrameAllocator (which waits for them).
    std::vector<Vma*> all;
    idx->ForEach([&](Vma* v) { all.push_back(v); });
    for (Vma* v : all) {
      ZapLocked(v, v->vm_start, v->vm_end, nullptr);
      idx->Erase(v, v->vm_start, v->vm_end);
      delete v;
    }
    if (gather) Flush();
  }

  /// Deferred frees are handed to call_rcu in batches of at least this many objects
  /// (a call_rcu per mmap/munmap costs more than the operation: it wakes the callback
  /// thread, and every grace period is a membarrier IPI to our threads), or once this
  /// many frames (1 MiB) wait, so the frame limit is not held up for long.
  static constexpr size_t kDeferBatch = 4096;
  static constexpr size_t kDeferFrames = 256;

  FrameAllocator& frames;
  const SpaceOptions opts;
  uint64_t commit_limit_pages;

  RwSem mmap_lock{LockClass::kMmapLock};
  // --- guarded by mmap_lock (write to modify, read to read) ---
  std::unique_ptr<VmaIndex> idx;  // the VMA tree; "maple" is also readable under RCU
  uint64_t map_count = 0;         // number of VMAs
  uint64_t total_vm = 0;          // pages
  Gather* gather = nullptr;       // frames/tables/VMAs to free after this write section
  // mm_lock_seq (6.4-6.13 form): incremented when mmap_lock is write-unlocked, which
  // releases every VMA write lock taken in that section (vma_end_write_all).
  std::atomic<uint64_t> mm_lock_seq{0};
  // Serializes setting Vma::anon_vma from null during faults (mmap_lock read held),
  // as __anon_vma_prepare does under mm->page_table_lock.
  std::mutex anon_vma_lock;
  PageTable pt;
  const int slot;  // statistics slot of the profile
  static inline thread_local uint32_t vma_hold_sample_ = 0;  // hold-time sampling (lock.h)

  // ------------------------------------------------------------------ mmap_lock
  void WriteLock() { mmap_lock.LockWrite(); }
  /// mmap_write_unlock(): publish retired tree nodes and queued frees for after a grace
  /// period, then vma_end_write_all() (advance mm_lock_seq), then release.
  void WriteUnlock() {
    idx->Commit();
    idx->TakeRetired(G().nodes);
    if (gather->size() >= kDeferBatch || gather->pages.size() >= kDeferFrames) Flush();
    mm_lock_seq.fetch_add(1, std::memory_order_seq_cst);
    mmap_lock.UnlockWrite();
  }
  Gather& G() {
    if (!gather) gather = new Gather;
    return *gather;
  }
  void Flush() {
    Gather* g = gather;
    gather = nullptr;
    if (g->empty()) {
      delete g;
      return;
    }
    g->frames = &frames;
    CallRcu(&g->head, &Gather::Free);
  }

  // ------------------------------------------------------------------ per-VMA locks

  /// vma_start_write(): caller holds mmap_lock for write. Marks v write-locked until
  /// WriteUnlock, after waiting out its current readers.
  void VmaStartWrite(Vma* v) {
    uint64_t seq = mm_lock_seq.load(std::memory_order_relaxed);
    if (v->vm_lock_seq.load(std::memory_order_relaxed) == seq) return;
    uint32_t c = v->vm_refcnt.load(std::memory_order_seq_cst);
    if (c == 0) {  // detached: nobody can take a read lock
      v->vm_lock_seq.store(seq, std::memory_order_seq_cst);
      return;
    }
    v->vm_refcnt.fetch_add(Vma::kVmaLockOffset, std::memory_order_seq_cst);
    bool contended = false;
    uint64_t t0 = 0;
    while (v->vm_refcnt.load(std::memory_order_seq_cst) != Vma::kVmaLockOffset + 1) {
      if (!contended) {
        contended = true;
        t0 = LockStatsEnabled() ? NowTicks() : 0;
      }
      __builtin_ia32_pause();
    }
    v->vm_lock_seq.store(seq, std::memory_order_seq_cst);
    v->vm_refcnt.fetch_sub(Vma::kVmaLockOffset, std::memory_order_seq_cst);
    RecordLock(LockClass::kVmaLock, LockMode::kWrite, contended,
               contended && t0 ? NowTicks() - t0 : 0, 0);
  }
  /// A new VMA: write-locked (so lockless readers skip it until WriteUnlock) and attached.
  void VmaInitLocked(Vma* v) {
    v->vm_lock_seq.store(mm_lock_seq.load(std::memory_order_relaxed), std::memory_order_seq_cst);
    v->vm_refcnt.store(1, std::memory_order_seq_cst);  // vma_mark_attached
  }
  /// vma_mark_detached(): v is write-locked; waits out transient readers (who will
  /// fail their re-check) and sets the count to 0.
  void VmaMarkDetached(Vma* v) {
    uint32_t one = 1;
    while (!v->vm_refcnt.compare_exchange_weak(one, 0, std::memory_order_seq_cst)) {
      one = 1;
      __builtin_ia32_pause();
    }
  }
  enum class ReadLock { kOk, kLocked, kDetached };
  /// vma_start_read(): never waits. kLocked: write-locked (or a writer is waiting);
  /// kDetached: removed from the tree since the lookup.
  ReadLock VmaStartRead(Vma* v) {
    if (v->vm_lock_seq.load(std::memory_order_seq_cst) == mm_lock_seq.load(std::memory_order_seq_cst))
      return ReadLock::kLocked;
    uint32_t c = v->vm_refcnt.load(std::memory_order_seq_cst);
    do {
      if (c == 0) return ReadLock::kDetached;
      if (c >= Vma::kVmaLockOffset) return ReadLock::kLocked;
    } while (!v->vm_refcnt.compare_exchange_weak(c, c + 1, std::memory_order_seq_cst));
    if (v->vm_lock_seq.load(std::memory_order_seq_cst) == mm_lock_seq.load(std::memory_order_seq_cst)) {
      VmaEndRead(v);
      return ReadLock::kLocked;
    }
    return ReadLock::kOk;
  }
  void VmaEndRead(Vma* v) { v->vm_refcnt.fetch_sub(1, std::memory_order_seq_cst); }

  // ------------------------------------------------------------------ tree helpers
  // Caller holds mmap_lock (read or write) for all of these.

  Vma* FindVma(uint64_t addr) { return idx->FindVma(addr); }
  /// find_vma_intersection(): first VMA overlapping [start, end).
  Vma* FindIntersection(uint64_t start, uint64_t end) {
    Vma* v = FindVma(start);
    return v && v->vm_start < end ? v : nullptr;
  }
  Vma* Next(const Vma* v) { return idx->NextFrom(v->vm_end); }
  /// The last VMA that starts below addr (vma_prev at addr), or null.
  Vma* PrevOf(uint64_t addr) { return idx->PrevOf(addr); }
  /// The first VMA that starts at or above addr, or null.
  Vma* NextFrom(uint64_t addr) { return idx->NextFrom(addr); }

  // Mutators: caller holds mmap_lock for write and has write-locked the VMA.
  void Insert(Vma* v) {
    VmaInitLocked(v);
    idx->Insert(v);
    map_count++;
  }
  /// Removes v from the tree and queues it for freeing after a grace period.
  void Remove(Vma* v) {
    VmaStartWrite(v);
    idx->Erase(v, v->vm_start, v->vm_end);
    VmaMarkDetached(v);
    map_count--;
    G().vmas.push_back(v);
  }
  void SetRange(Vma* v, uint64_t start, uint64_t end) {
    VmaStartWrite(v);
    uint64_t os = v->vm_start, oe = v->vm_end;
    if (start != os) v->vm_pgoff = v->vm_pgoff + (start >> kPageShift) - (os >> kPageShift);
    v->vm_start = start;
    v->vm_end = end;
    idx->Update(v, os, oe);
  }
  void SetStart(Vma* v, uint64_t start) { SetRange(v, start, v->vm_end); }
  void SetEnd(Vma* v, uint64_t end) { SetRange(v, v->vm_start, end); }

  /// __split_vma(): splits v at addr. With new_below the new VMA is the lower part
  /// [vm_start, addr) and v keeps [addr, vm_end); else the new VMA is the upper part.
  /// Returns the new VMA. No map_count check (callers check, as split_vma does).
  Vma* Split(Vma* v, uint64_t addr, bool new_below) {
    VmaStartWrite(v);
    Vma* n = new Vma(*v);
    if (new_below) {
      n->vm_end = addr;
      SetStart(v, addr);
    } else {
      n->vm_start = addr;
      n->vm_pgoff = v->vm_pgoff + ((addr - v->vm_start) >> kPageShift);
      SetEnd(v, addr);
    }
    Insert(n);
    return n;
  }

  // ------------------------------------------------------------------ page tables

  /// Clears the PTEs of [start, end) inside `v`; private anon frames go to `g`
  /// (or are freed at once when g is null: teardown). Caller holds mmap_lock (write
  /// for munmap; read for MADV_DONTNEED).
  void ZapLocked(Vma* v, uint64_t start, uint64_t end, Gather* g) {
    bool owns_frames = v->is_anonymous();
    void* zero = FrameAllocator::ZeroPage();
    pt.ForEachPresent(start, end, [&](uint64_t, uint64_t pte, PageTable::PteTable& t, int i) {
      {
        SpinGuard l(t.ptl);
        t.pte[i].store(0, std::memory_order_release);
      }
      void* f = PteFrame(pte);
      if (owns_frames && f != zero) {
        if (g) g->pages.push_back(f);
        else frames.Free(f);
      }
    });
  }

  // ------------------------------------------------------------------ munmap core

  /// vms_gather_munmap_vmas() + vms_complete_munmap_vmas(): removes [start, end).
  /// Returns 0 or ENOMEM (middle split at map_count >= max). `nr_accounted` gets the
  /// VM_ACCOUNT pages removed. With free_tables, page tables no longer covered by any
  /// VMA are freed (munmap); MAP_FIXED replacement keeps them for the new VMA.
  /// Frames, tables and VMAs are freed after an RCU grace period (see WriteUnlock).
  int UnmapRangeLocked(uint64_t start, uint64_t end, bool free_tables, uint64_t* nr_accounted) {
    Vma* v = FindIntersection(start, end);
    if (!v) return 0;
    if (start > v->vm_start) {
      if (end < v->vm_end && map_count >= opts.max_map_count) return ENOMEM;
      Split(v, start, true);  // v is now [start, ...)
    }
    // Collect, splitting the last one if it extends past end.
    std::vector<Vma*> doomed;
    for (Vma* w = v; w && w->vm_start < end; w = Next(w)) {
      if (w->vm_end > end) Split(w, end, false);
      VmaStartWrite(w);
      doomed.push_back(w);
    }
    const uint64_t first = doomed.front()->vm_start, last = doomed.back()->vm_end;
    Vma* prev = PrevOf(first);
    Vma* next = NextFrom(last);
    Gather& g = G();
    for (Vma* w : doomed) {
      if (nr_accounted && (w->vm_flags & VM_ACCOUNT)) *nr_accounted += w->pages();
      total_vm -= w->pages();
      Remove(w);  // detach first: no new lockless reader can find it
      ZapLocked(w, w->vm_start, w->vm_end, &g);
    }
    if (free_tables) {
      uint64_t floor = prev ? prev->vm_end : 0;
      uint64_t ceiling = next ? next->vm_start : kUserPgtablesCeiling;
      pt.FreePgtables(first, last, floor, ceiling, g.tables);
    }
    return 0;
  }

  // ------------------------------------------------------------------ placement

  /// unmapped_area_topdown() (mm/vma.c): the highest gap in [low, high) that holds
  /// `length`, restarting below a VM_GROWSDOWN VMA's guard gap. Returns the address or
  /// ~0 (ENOMEM).
  uint64_t UnmappedAreaTopdown(uint64_t length, uint64_t low, uint64_t high) {
    if (low < opts.mmap_min_addr) low = opts.mmap_min_addr;
    for (;;) {
      if (high <= low || high - low < length) return ~0ull;
      uint64_t gap_end = idx->HighestGapEnd(length, low, high);
      if (gap_end == ~0ull) return ~0ull;
      Vma* above = NextFrom(gap_end);
      if (above && (above->vm_flags & VM_GROWSDOWN) && above->start_gap() < gap_end) {
        high = above->start_gap();
        continue;
      }
      return gap_end - length;
    }
  }

  /// unmapped_area() (mm/vma.c): the lowest gap in [low, high) holding `length`. Only
  /// the fallback and MAP_32BIT use it; it walks VMAs from the bottom.
  uint64_t UnmappedAreaBottomup(uint64_t length, uint64_t low, uint64_t high) {
    if (low < opts.mmap_min_addr) low = opts.mmap_min_addr;
    for (;;) {
      if (high <= low || high - low < length) return ~0ull;
      Vma* lower = PrevOf(low);
      if (lower && lower->vm_end <= low) lower = nullptr;
      uint64_t gs = lower ? lower->vm_end : low;
      bool found = false;
      Vma* upper = NextFrom(gs);
      while (true) {
        uint64_t s0 = gs < low ? low : gs;
        uint64_t ge = upper ? upper->vm_start : ~0ull;
        if (ge > high) ge = high;
        if (ge > s0 && ge - s0 >= length) {
          gs = s0;
          found = true;
          break;
        }
        if (!upper || upper->vm_start >= high) break;
        gs = upper->vm_end;
        upper = NextFrom(gs);
      }
      if (!found) return ~0ull;
      if (upper && (upper->vm_flags & VM_GROWSDOWN) && upper->start_gap() < gs + length) {
        low = upper->vm_end;
        continue;
      }
      return gs;
    }
  }

  /// arch_get_unmapped_area_topdown() / arch_get_unmapped_area() (arch/x86/kernel/
  /// sys_x86_64.c): hint check, then top-down search below mmap_base, falling back to
  /// bottom-up from TASK_SIZE/3. MAP_32BIT searches [1 GiB, 2 GiB) bottom-up.
  uint64_t ArchGetUnmappedArea(uint64_t addr, uint64_t len, int flags) {
    if (len > kTaskSize) return ~0ull;
    if (flags & MAP_FIXED) return addr;
    if (!(flags & MAP_32BIT)) {
      if (addr) {
        addr &= kPageMask;
        if (kTaskSize - len >= addr) {  // mmap_address_hint_valid
          Vma* v = FindVma(addr);
          if (!v || addr + len <= v->start_gap()) return addr;
        }
      }
      uint64_t r = UnmappedAreaTopdown(len, kPageSize, opts.mmap_base);
      if (r != ~0ull) return r;
    }
    // bottomup: arch_get_unmapped_area()
    uint64_t begin = (flags & MAP_32BIT) ? 0x40000000ull : PageAlign(kTaskSize / 3);
    uint64_t end = (flags & MAP_32BIT) ? 0x80000000ull : kTaskSize;
    if (len > end) return ~0ull;
    if (addr) {
      addr = PageAlign(addr);
      Vma* v = FindVma(addr);
      if (end - len >= addr && (!v || addr + len <= v->start_gap())) return addr;
    }
    return UnmappedAreaBottomup(len, begin, end);
  }

  /// __get_unmapped_area() (mm/mmap.c) for anonymous memory, including the THP
  /// alignment of private anonymous requests (thp_get_unmapped_area_vmflags,
  /// __thp_get_unmapped_area with off = 0). Returns the address or an errno via *err.
  uint64_t GetUnmappedArea(uint64_t addr, uint64_t len, int flags, int* err) {
    *err = 0;
    if (len > kTaskSize) {
      *err = ENOMEM;
      return 0;
    }
    uint64_t r = ~0ull;
    bool shared = flags & MAP_SHARED;  // shmem_get_unmapped_area (no THP for shmem here)
    if (!shared && opts.thp_align_anon && !addr && (len % kPmdSize) == 0 &&
        !(flags & MAP_FIXED)) {
      uint64_t len_pad = len + kPmdSize;
      uint64_t ret = ArchGetUnmappedArea(addr, len_pad, flags);
      if (ret != ~0ull) {
        uint64_t off_sub = (0 - ret) & (kPmdSize - 1);
        r = off_sub == 0 ? ret + kPmdSize : ret + off_sub;
      }
    }
    if (r == ~0ull) r = ArchGetUnmappedArea(addr, len, flags);
    if (r == ~0ull) {
      *err = ENOMEM;
      return 0;
    }
    if (r > kTaskSize - len) {
      *err = ENOMEM;
      return 0;
    }
    if (r & (kPageSize - 1)) {
      *err = EINVAL;
      return 0;
    }
    // security_mmap_addr -> cap_mmap_addr
    if (r < opts.dac_mmap_min_addr && !opts.cap_sys_rawio) {
      *err = EPERM;
      return 0;
    }
    return r;
  }

  // ------------------------------------------------------------------ merging

  static bool AnonCompatible(AnonVma* a, AnonVma* b) { return !a || !b || a == b; }

  /// is_mergeable_vma(): same flags (no VM_SOFTDIRTY here), same backing object.
  static bool Mergeable(const Vma* v, uint64_t flags, const ShmemObject* file) {
    return v->vm_flags == flags && v->shmem.get() == file;
  }

  /// anon_vma_compatible() (mm/rmap.c): a and b adjacent and mergeable but for access
  /// flags.
  static bool AnonVmaCompatible(const Vma* a, const Vma* b) {
    return a->vm_end == b->vm_start && a->shmem == b->shmem &&
           !((a->vm_flags ^ b->vm_flags) & ~VM_ACCESS_FLAGS) &&
           b->vm_pgoff == a->vm_pgoff + ((b->vm_start - a->vm_start) >> kPageShift);
  }

  /// find_mergeable_anon_vma() (mm/rmap.c): reuse an adjacent VMA's anon_vma if the
  /// two could later merge. Caller holds mmap_lock (read).
  AnonVma* FindMergeableAnonVma(Vma* v) {
    Vma* next = NextFrom(v->vm_end);
    if (next && next->vm_start == v->vm_end && AnonVmaCompatible(v, next) && next->anon())
      return next->anon();
    Vma* prev = PrevOf(v->vm_start);
    if (prev && AnonVmaCompatible(prev, v) && prev->anon()) return prev->anon();
    return nullptr;
  }

  /// Makes sure v has an anon_vma (anon_vma_prepare). Caller holds mmap_lock read.
  void AnonVmaPrepare(Vma* v) {
    if (v->anon()) return;
    RankedGuard<std::mutex> l(anon_vma_lock, LockRank::kAnonVmaLock);
    if (v->anon()) return;
    AnonVma* a = FindMergeableAnonVma(v);
    if (a) {
      v->anon_vma.store(GetAnonVma(a), std::memory_order_release);
    } else {
      a = new AnonVma{g_next_anon_vma.fetch_add(1, std::memory_order_relaxed)};
      v->anon_vma.store(a, std::memory_order_release);  // takes the initial reference
    }
  }

  /// vma_merge_new_range() (mm/vma.c): merges the new range [start, end) with flags,
  /// pgoff and no anon_vma into prev and/or next if they are compatible. Returns the
  /// VMA that now covers the range, or null if no merge was possible.
  Vma* MergeNewRange(uint64_t start, uint64_t end, uint64_t flags, uint64_t pgoff) {
    if (flags & VM_SPECIAL) return nullptr;
    Vma* prev = PrevOf(start);
    if (prev && prev->vm_end != start) prev = nullptr;
    Vma* next = NextFrom(end);
    if (next && next->vm_start != end) next = nullptr;
    uint64_t pages = (end - start) >> kPageShift;
    bool left = prev && Mergeable(prev, flags, nullptr) && prev->vm_pgoff + prev->pages() == pgoff;
    bool right = next && Mergeable(next, flags, nullptr) && next->vm_pgoff == pgoff + pages;
    if (left && right && !AnonCompatible(prev->anon(), next->anon())) right = false;
    if (left && right) {
      uint64_t next_end = next->vm_end;
      VmaStartWrite(prev);
      AnonVma* a = prev->anon() ? prev->anon() : next->anon();
      if (a != prev->anon()) prev->set_anon(a);
      Remove(next);
      SetEnd(prev, next_end);
      return prev;
    }
    if (left) {
      SetEnd(prev, end);
      return prev;
    }
    if (right) {
      SetStart(next, start);  // adjusts pgoff down by the new pages
      return next;
    }
    return nullptr;
  }

  /// vma_modify_flags() -> vma_merge_existing_range() / split_vma() (mm/vma.c): gives
  /// [start, end) (inside `middle`) the flags `newflags`, merging with prev/next or
  /// splitting. Returns the VMA covering [start, end) or null with *err = ENOMEM
  /// (split at max_map_count; an earlier split of this call stays, as in Linux).
  Vma* ModifyFlags(Vma* middle, uint64_t start, uint64_t end, uint64_t newflags, int* err) {
    *err = 0;
    bool left_side = start == middle->vm_start;
    bool right_side = end == middle->vm_end;
    const ShmemObject* file = middle->shmem.get();
    uint64_t pgoff = middle->vm_pgoff + ((start - middle->vm_start) >> kPageShift);
    uint64_t pages = (end - start) >> kPageShift;
    AnonVma* anon = middle->anon();
    if (!(newflags & VM_SPECIAL) && (left_side || right_side)) {
      Vma* prev = left_side ? PrevOf(start) : nullptr;
      if (prev && prev->vm_end != start) prev = nullptr;
      Vma* next = right_side ? NextFrom(end) : nullptr;
      if (next && next->vm_start != end) next = nullptr;
      bool merge_left = prev && Mergeable(prev, newflags, file) &&
                        AnonCompatible(prev->anon(), anon) &&
                        prev->vm_pgoff + prev->pages() == pgoff;
      bool merge_right = next && Mergeable(next, newflags, file) &&
                         AnonCompatible(next->anon(), anon) && next->vm_pgoff == pgoff + pages;
      if (merge_left && merge_right && !AnonCompatible(prev->anon(), next->anon()))
        merge_right = false;
      bool delete_middle = left_side && right_side;
      if (merge_left && merge_right) {
        // prev extends over middle and next; both removed.
        VmaStartWrite(prev);
        AnonVma* a = prev->anon() ? prev->anon() : (next->anon() ? next->anon() : anon);
        if (a != prev->anon()) prev->set_anon(a);
        uint64_t next_end = next->vm_end;
        Remove(middle);
        Remove(next);
        SetEnd(prev, next_end);
        return prev;
      }
      if (merge_left) {
        VmaStartWrite(prev);
        if (!prev->anon() && anon) prev->set_anon(anon);
        if (delete_middle) Remove(middle);
        else SetStart(middle, end);
        SetEnd(prev, end);
        return prev;
      }
      if (merge_right) {
        VmaStartWrite(next);
        if (!next->anon() && anon) next->set_anon(anon);
        if (delete_middle) Remove(middle);
        else SetEnd(middle, start);
        SetStart(next, start);
        return next;
      }
    }
    // No merge: split_vma() at the range boundaries.
    if (middle->vm_start < start) {
      if (map_count >= opts.max_map_count) {
        *err = ENOMEM;
        return nullptr;
      }
      Split(middle, start, true);
    }
    if (middle->vm_end > end) {
      if (map_count >= opts.max_map_count) {
        *err = ENOMEM;
        return nullptr;
      }
      Split(middle, end, false);
    }
    return middle;
  }

  /// change_protection(): rewrites the permission bits of present PTEs in
  /// [start, end) of `v` for its (new) flags. Caller holds mmap_lock write.
  void ChangeProtection(Vma* v, uint64_t start, uint64_t end) {
    void* zero = FrameAllocator::ZeroPage();
    pt.ForEachPresent(start, end, [&](uint64_t, uint64_t pte, PageTable::PteTable& t, int i) {
      void* f = PteFrame(pte);
      SpinGuard l(t.ptl);
      t.pte[i].store(MakePte(f, PteBitsFor(*v, f == zero)), std::memory_order_release);
    });
  }

  // ------------------------------------------------------------------ faults

  /// expand_downwards() (mm/mmap.c): grows a VM_GROWSDOWN VMA down to addr. Caller
  /// holds mmap_lock for write. Returns false if refused.
  bool ExpandStack(Vma* v, uint64_t addr) {
    addr &= kPageMask;
    AnonVmaPrepare(v);  // expand_downwards: "We must make sure the anon_vma is allocated"
    if (addr < opts.mmap_min_addr) return false;
    Vma* prev = PrevOf(v->vm_start);
    if (prev && prev->vm_end > addr) return false;
    if (prev && !(prev->vm_flags & VM_GROWSDOWN) && (prev->vm_flags & VM_ACCESS_FLAGS) &&
        addr - prev->vm_end < kStackGuardGap)
      return false;
    constexpr uint64_t kRlimitStack = 8ull << 20;  // acct_stack_growth with RLIMIT_STACK 8 MiB
    if (v->vm_end - addr > kRlimitStack) return false;
    if (map_count > opts.max_map_count) return false;
    total_vm += (v->vm_start - addr) >> kPageShift;
    SetStart(v, addr);
    return true;
  }

  /// handle_mm_fault() for one page of `v` (caller holds mmap_lock, read or write,
  /// and has checked access_error). Installs what the access needs. Returns the
  /// outcome (kMinor, kNone for a spurious fault, kOom).
  FaultOutcome HandleMmFault(Vma* v, uint64_t addr, AccessType acc) {
    CountEvent(Event::kPgfault);
    PageTable::PteTable* t = pt.Lookup(addr, true);
    if (!t) {
      CountEvent(Event::kFaultOom);
      return FaultOutcome::kOom;
    }
    const int i = PageTable::PteIndex(addr);
    void* zero = FrameAllocator::ZeroPage();
    const bool write = acc == AccessType::kWrite;
    uint64_t cur = t->pte[i].load(std::memory_order_acquire);

    if (v->shmem) {  // shmem_fault / do_shared_fault / wp_page_shared
      if ((cur & kPtePresent)) {
        if (PteAllows(cur, acc)) return FaultOutcome::kNone;
        SpinGuard l(t->ptl);
        uint64_t now = t->pte[i].load(std::memory_order_relaxed);
        if (now & kPtePresent)
          t->pte[i].store(MakePte(PteFrame(now), PteBitsFor(*v, false)), std::memory_order_release);
        CountEvent(Event::kFaultShmem);
        return FaultOutcome::kMinor;
      }
      uint64_t pgoff = v->vm_pgoff + ((addr - v->vm_start) >> kPageShift);
      if (pgoff >= v->shmem->size_pages) {
        CountEvent(Event::kFaultSigbus);
        return FaultOutcome::kSigbus;
      }
      void* f = v->shmem->GetPage(pgoff);
      if (!f) {
        CountEvent(Event::kFaultOom);
        return FaultOutcome::kOom;
      }
      SpinGuard l(t->ptl);
      if (!(t->pte[i].load(std::memory_order_relaxed) & kPtePresent))
        t->pte[i].store(MakePte(f, PteBitsFor(*v, false)), std::memory_order_release);
      CountEvent(Event::kFaultShmem);
      return FaultOutcome::kMinor;
    }

    // Private anonymous.
    if (!(cur & kPtePresent)) {
      if (!write && opts.zero_page) {  // do_anonymous_page: map the zero page
        SpinGuard l(t->ptl);
        if (!(t->pte[i].load(std::memory_order_relaxed) & kPtePresent))
          t->pte[i].store(MakePte(zero, PteBitsFor(*v, true)), std::memory_order_release);
        CountEvent(Event::kFaultAnonZero);
        return FaultOutcome::kMinor;
      }
      AnonVmaPrepare(v);
      void* f = frames.Alloc();
      if (!f) {
        CountEvent(Event::kFaultOom);
        return FaultOutcome::kOom;
      }
      bool used = false;
      {
        SpinGuard l(t->ptl);
        if (!(t->pte[i].load(std::memory_order_relaxed) & kPtePresent)) {
          t->pte[i].store(MakePte(f, PteBitsFor(*v, false)), std::memory_order_release);
          used = true;
        }
      }
      if (!used) frames.Free(f);
      CountEvent(Event::kFaultAnonWrite);
      return FaultOutcome::kMinor;
    }
    if (PteAllows(cur, acc)) return FaultOutcome::kNone;  // spurious
    if (write) {  // do_wp_page
      if (PteFrame(cur) == zero) {
        AnonVmaPrepare(v);
        void* f = frames.Alloc();
        if (!f) {
          CountEvent(Event::kFaultOom);
          return FaultOutcome::kOom;
        }
        bool used = false;
        {
          SpinGuard l(t->ptl);
          if (t->pte[i].load(std::memory_order_relaxed) == cur) {
            t->pte[i].store(MakePte(f, PteBitsFor(*v, false)), std::memory_order_release);
            used = true;
          }
        }
        if (!used) frames.Free(f);  // zero page COW: the new frame is already zero
        CountEvent(Event::kFaultWpZero);
        return FaultOutcome::kMinor;
      }
      SpinGuard l(t->ptl);
      uint64_t now = t->pte[i].load(std::memory_order_relaxed);
      if (now & kPtePresent)
        t->pte[i].store(MakePte(PteFrame(now), PteBitsFor(*v, false)), std::memory_order_release);
      CountEvent(Event::kFaultWpReuse);
      return FaultOutcome::kMinor;
    }
    return FaultOutcome::kNone;
  }

  /// access_error() + handle_mm_fault() + the access, for a VMA that covers addr and
  /// is pinned by the caller's lock (mmap_lock or its VMA read lock).
  template <typename Touch>
  FaultResult FaultInVma(Vma* v, uint64_t addr, AccessType acc, Touch& touch, LockPath path) {
    FaultResult r;
    r.path = path;
    auto segv = [&](int code) {
      CountEvent(code == kSegvMaperr ? Event::kFaultSegvMaperr : Event::kFaultSegvAccerr);
      r.outcome = FaultOutcome::kSigsegv;
      r.sig_code = code;
      r.sig_addr = addr;
      return r;
    };
    // access_error() (arch/x86/mm/fault.c)
    PageTable::PteTable* t = pt.Lookup(addr, false);
    uint64_t cur = t ? t->pte[PageTable::PteIndex(addr)].load(std::memory_order_acquire) : 0;
    bool present = cur & kPtePresent;
    bool bad;
    if (acc == AccessType::kWrite) bad = !(v->vm_flags & VM_WRITE);
    else if (present && !PteAllows(cur, acc) &&
             !(acc == AccessType::kExec ? (v->vm_flags & VM_EXEC) : (v->vm_flags & VM_ACCESS_FLAGS)))
      bad = true;  // read/exec of a present page the VMA does not allow: X86_PF_PROT
    else bad = !(v->vm_flags & VM_ACCESS_FLAGS);
    if (bad) return segv(kSegvAccerr);
    // An instruction fetch from a non-executable VMA first faults the page in (as a
    // read), then takes the NX protection fault.
    bool nx = acc == AccessType::kExec && !(v->vm_flags & VM_EXEC);
    FaultOutcome o = HandleMmFault(v, addr, nx ? AccessType::kRead : acc);
    if (o == FaultOutcome::kSigbus) {
      r.outcome = o;
      r.sig_code = kBusAdrerr;
      r.sig_addr = addr;
      return r;
    }
    if (o == FaultOutcome::kOom) {
      r.outcome = o;
      return r;
    }
    r.faults = (o == FaultOutcome::kMinor || o == FaultOutcome::kMajor) ? 1 : 0;
    if (nx) return segv(kSegvAccerr);
    r.outcome = o;
    t = pt.Lookup(addr, false);
    uint64_t pte = t ? t->pte[PageTable::PteIndex(addr)].load(std::memory_order_acquire) : 0;
    if (PteAllows(pte, acc)) touch(static_cast<uint8_t*>(PteFrame(pte)));
    return r;
  }

  /// lock_vma_under_rcu() (mm/mmap_lock.c, with the 6.4-6.9 eligibility rules): finds
  /// the VMA under RCU and read-locks it, or returns null (VMA_LOCK_ABORT) so the caller
  /// falls back to mmap_lock. A VMA detached under us is looked up again
  /// (VMA_LOCK_MISS).
  Vma* LockVmaUnderRcu(uint64_t addr) {
    for (;;) {
      RcuReadGuard g;
      Vma* v = idx->LookupRcu(addr);
      if (!v) {
        CountEvent(Event::kVmaLockAbort);
        return nullptr;
      }
      ReadLock st = VmaStartRead(v);
      if (st == ReadLock::kDetached) {
        CountEvent(Event::kVmaLockMiss);
        continue;
      }
      if (st == ReadLock::kLocked) {
        RecordLock(LockClass::kVmaLock, LockMode::kRead, true, 0, 0);  // failed trylock
        CountEvent(Event::kVmaLockAbort);
        return nullptr;
      }
      // Re-check under the lock: the range may have changed before we locked it.
      bool eligible = v->vm_start <= addr && addr < v->vm_end;
      // 6.4-6.9: anonymous VMAs need an anon_vma already (find_mergeable_anon_vma reads
      // unlocked neighbours); other VMAs only when the profile handles all faults.
      if (eligible) eligible = v->is_anonymous() ? v->anon() != nullptr : opts.profile.vma_lock == VmaLockMode::kAll;
      if (!eligible) {
        VmaEndRead(v);
        CountEvent(Event::kVmaLockAbort);
        return nullptr;
      }
      return v;
    }
  }

  /// The slow path of an access (arch/x86/mm/fault.c do_user_addr_fault): first the
  /// per-VMA lock if the profile uses it, else (or on abort) mmap_lock for read; then
  /// the fault and the access itself while the lock still pins the mapping.
  template <typename Touch>
  FaultResult SlowAccess(uint64_t addr, AccessType acc, Touch&& touch) {
    if (opts.profile.vma_lock != VmaLockMode::kOff) {
      if (Vma* v = LockVmaUnderRcu(addr)) {
        LockdepAcquire(LockRank::kVmaLock);
        RecordLock(LockClass::kVmaLock, LockMode::kRead, false, 0, 0);
        const bool sample = LockStatsEnabled() && (++vma_hold_sample_ & (kHoldSampleEvery - 1)) == 0;
        const uint64_t t0 = sample ? NowTicks() : 0;
        FaultResult r = FaultInVma(v, addr, acc, touch, LockPath::kVmaLock);
        VmaEndRead(v);
        LockdepRelease(LockRank::kVmaLock);
        if (sample) RecordHold(LockClass::kVmaLock, LockMode::kRead, NowTicks() - t0, kHoldSampleEvery);
        CountEvent(Event::kVmaLockSuccess);
        return r;
      }
    }
    bool write_locked = false;
    mmap_lock.LockRead();
    Vma* v = FindVma(addr);
    if (v && v->vm_start > addr && (v->vm_flags & VM_GROWSDOWN)) {
      // lock_mm_and_find_vma(): take the write lock to expand the stack.
      mmap_lock.UnlockRead();
      WriteLock();
      write_locked = true;
      v = FindVma(addr);
      if (v && v->vm_start > addr && (!(v->vm_flags & VM_GROWSDOWN) || !ExpandStack(v, addr)))
        v = nullptr;
    }
    FaultResult r;
    if (!v || v->vm_start > addr) {
      CountEvent(Event::kFaultSegvMaperr);
      r.path = LockPath::kMmapLock;
      r.outcome = FaultOutcome::kSigsegv;
      r.sig_code = kSegvMaperr;
      r.sig_addr = addr;
    } else {
      r = FaultInVma(v, addr, acc, touch, LockPath::kMmapLock);
    }
    if (write_locked) WriteUnlock();
    else mmap_lock.UnlockRead();
    return r;
  }

  /// One access of the page containing addr: the TLB-like fast path (PTE already
  /// allows it: no lock, only RCU to keep the frame and tables alive), else the fault
  /// path. `touch(frame)` performs the access on the 4 KiB frame.
  template <typename Touch>
  FaultResult AccessPage(uint64_t addr, AccessType acc, Touch&& touch) {
    if (addr >= kTaskSize) {
      FaultResult r;
      r.outcome = FaultOutcome::kSigsegv;
      bool canonical = addr < (1ull << 47) || addr >= 0xffff800000000000ull;
      r.sig_code = canonical ? kSegvMaperr : kSiKernel;
      r.sig_addr = canonical ? addr : 0;
      CountEvent(Event::kFaultSegvMaperr);
      return r;
    }
    {
      RcuReadGuard g;
      if (PageTable::PteTable* t = pt.Lookup(addr, false)) {
        uint64_t pte = t->pte[PageTable::PteIndex(addr)].load(std::memory_order_acquire);
        if (PteAllows(pte, acc)) {
          touch(static_cast<uint8_t*>(PteFrame(pte)));
          return FaultResult{};
        }
      }
    }
    return SlowAccess(addr, acc, touch);
  }

  // ------------------------------------------------------------------ reporting
  uint64_t RssLocked(uint64_t start, uint64_t end) {
    uint64_t n = 0;
    void* zero = FrameAllocator::ZeroPage();
    pt.ForEachPresent(start, end, [&](uint64_t, uint64_t pte, PageTable::PteTable&, int) {
      if (PteFrame(pte) != zero) n++;
    });
    return n;
  }

  VmaInfo InfoLocked(const Vma* v) {
    VmaInfo i;
    i.start = v->vm_start;
    i.end = v->vm_end;
    i.flags = v->vm_flags;
    i.pgoff = v->vm_pgoff;
    i.anonymous = v->is_anonymous();
    i.shmem = static_cast<bool>(v->shmem);
    if (v->shmem) {
      i.offset = v->vm_pgoff << kPageShift;
      i.dev_major = 0;
      i.dev_minor = 1;
      i.inode = v->shmem->inode;
      i.name = "/dev/zero (deleted)";
    }
    i.rss_pages = RssLocked(v->vm_start, v->vm_end);
    AnonVma* a = v->anon();
    i.anon_vma_id = a ? a->id : 0;
    return i;
  }
};

// ====================================================================== public API

AddressSpace::AddressSpace(FrameAllocator& frames, const SpaceOptions& opts)
    : impl_(std::make_unique<Impl>(frames, opts)), opts_(opts) {
  RcuThread();
}

AddressSpace::~AddressSpace() { RcuThread(); }

SysResult AddressSpace::Mmap(uint64_t addr, uint64_t len, int prot, int flags, uint64_t offset) {
  RcuThread();
  Impl& m = *impl_;
  StatsSlotScope slot_scope(m.slot);
  auto fail = [](int e) {
    CountOp(OpType::kMmap, e);
    return SysResult::Err(e);
  };
  // arch/x86/kernel/sys_x86_64.c: SYSCALL_DEFINE6(mmap)
  if (offset & (kPageSize - 1)) return fail(EINVAL);
  // ksys_mmap_pgoff: only anonymous memory for now (no descriptors in the API yet).
  if (!(flags & MAP_ANONYMOUS)) return fail(EBADF);
  if (flags & MAP_HUGETLB) {
    int log = (flags >> 26) & 0x3f;  // MAP_HUGE_SHIFT, MAP_HUGE_MASK
    if (log != 0 && log != 21 && log != 30) return fail(EINVAL);  // hstate_sizelog
  }
  // do_mmap (mm/mmap.c)
  if (len == 0) return fail(EINVAL);
  if (flags & MAP_FIXED_NOREPLACE) flags |= MAP_FIXED;
  if (!(flags & MAP_FIXED)) {  // round_hint_to_min
    addr &= kPageMask;
    if (addr && addr < m.opts.mmap_min_addr) addr = PageAlign(m.opts.mmap_min_addr);
  }
  uint64_t plen = PageAlign(len);
  if (plen == 0) return fail(ENOMEM);
  uint64_t pages = plen >> kPageShift;

  m.WriteLock();
  auto fail_locked = [&](int e) {
    m.WriteUnlock();
    return fail(e);
  };
  if (m.map_count > m.opts.max_map_count) return fail_locked(ENOMEM);
  int err = 0;
  addr = m.GetUnmappedArea(addr, plen, flags, &err);
  if (err) return fail_locked(err);
  if ((flags & MAP_FIXED_NOREPLACE) && m.FindIntersection(addr, addr + plen))
    return fail_locked(EEXIST);

  uint64_t vm_flags = CalcVmProtBits(prot) | VM_MAYREAD | VM_MAYWRITE | VM_MAYEXEC;
  if (flags & MAP_GROWSDOWN) vm_flags |= VM_GROWSDOWN;
  if (flags & MAP_LOCKED) vm_flags |= VM_LOCKED;
  if (flags & MAP_STACK) vm_flags |= VM_NOHUGEPAGE;  // since Linux 6.7
  if (flags & MAP_SYNC) vm_flags |= VM_SYNC;          // calc_vm_flag_bits, any mapping
  uint64_t pgoff;
  switch (flags & kMapType) {
    case MAP_SHARED:
      if (vm_flags & VM_GROWSDOWN) return fail_locked(EINVAL);
      pgoff = 0;
      vm_flags |= VM_SHARED | VM_MAYSHARE;
      break;
    case MAP_DROPPABLE:  // Linux 6.11+
      if (flags & (MAP_LOCKED | MAP_HUGETLB)) return fail_locked(EINVAL);
      if (vm_flags & VM_GROWSDOWN) return fail_locked(EINVAL);
      vm_flags |= VM_DROPPABLE | VM_NORESERVE | VM_WIPEONFORK | VM_DONTDUMP;
      pgoff = addr >> kPageShift;
      break;
    case MAP_PRIVATE:
      pgoff = addr >> kPageShift;
      break;
    default:
      return fail_locked(EINVAL);
  }
  if (flags & MAP_NORESERVE) vm_flags |= VM_NORESERVE;  // overcommit_memory != 2
  if (flags & MAP_HUGETLB) return fail_locked(ENOMEM);  // no huge pages reserved

  // __mmap_region (mm/vma.c). Accounting is checked before unmapping what MAP_FIXED
  // replaces (Linux checks after gathering; only a failing MAP_FIXED differs).
  bool accountable = (vm_flags & (VM_NORESERVE | VM_SHARED | VM_WRITE)) == VM_WRITE;
  if (accountable) {
    uint64_t replaced = 0;
    for (Vma* v = m.FindIntersection(addr, addr + plen); v && v->vm_start < addr + plen; v = m.Next(v))
      if (v->vm_flags & VM_ACCOUNT) {
        uint64_t s = std::max(v->vm_start, addr), e = std::min(v->vm_end, addr + plen);
        replaced += (e - s) >> kPageShift;
      }
    if (pages - replaced > m.commit_limit_pages) return fail_locked(ENOMEM);
    vm_flags |= VM_ACCOUNT;
  }
  if ((vm_flags & VM_SHARED) && !(vm_flags & VM_NORESERVE) && pages > m.commit_limit_pages)
    return fail_locked(ENOMEM);  // shmem_acct_size in shmem_zero_setup
  if (flags & MAP_FIXED) {
    int e = m.UnmapRangeLocked(addr, addr + plen, /*free_tables=*/false, nullptr);
    if (e) return fail_locked(e);
  }
  Vma* v = nullptr;
  if (!(vm_flags & VM_SHARED)) v = m.MergeNewRange(addr, addr + plen, vm_flags, pgoff);
  if (!v) {
    v = new Vma;
    v->vm_start = addr;
    v->vm_end = addr + plen;
    v->vm_flags = vm_flags;
    v->vm_pgoff = pgoff;
    if (vm_flags & VM_SHARED)
      v->shmem = std::make_shared<ShmemObject>(m.frames, g_next_inode.fetch_add(1), pages);
    m.Insert(v);
  }
  m.total_vm += pages;
  bool populate = ((flags & (MAP_POPULATE | MAP_NONBLOCK)) == MAP_POPULATE) || (vm_flags & VM_LOCKED);
  bool populate_write = (vm_flags & (VM_WRITE | VM_SHARED)) == VM_WRITE;
  bool accessible = vm_flags & VM_ACCESS_FLAGS;
  m.WriteUnlock();
  CountOp(OpType::kMmap, 0);
  if (populate && accessible) {  // __mm_populate after dropping mmap_lock; errors ignored
    AccessType a = populate_write ? AccessType::kWrite : AccessType::kRead;
    for (uint64_t p = addr; p < addr + plen; p += kPageSize)
      m.AccessPage(p, a, [](uint8_t*) {});
  }
  return SysResult::Ok(addr);
}

SysResult AddressSpace::Munmap(uint64_t addr, uint64_t len) {
  RcuThread();
  Impl& m = *impl_;
  StatsSlotScope slot_scope(m.slot);
  // do_vmi_munmap (mm/vma.c)
  if ((addr & (kPageSize - 1)) || addr > kTaskSize || len > kTaskSize - addr) {
    CountOp(OpType::kMunmap, EINVAL);
    return SysResult::Err(EINVAL);
  }
  uint64_t end = addr + PageAlign(len);
  if (end == addr) {
    CountOp(OpType::kMunmap, EINVAL);
    return SysResult::Err(EINVAL);
  }
  m.WriteLock();
  int e = m.UnmapRangeLocked(addr, end, /*free_tables=*/true, nullptr);
  m.WriteUnlock();
  CountOp(OpType::kMunmap, e);
  return e ? SysResult::Err(e) : SysResult::Ok();
}

SysResult AddressSpace::Mprotect(uint64_t start, uint64_t len, int prot) {
  RcuThread();
  Impl& m = *impl_;
  StatsSlotScope slot_scope(m.slot);
  auto done = [](int e) {
    CountOp(OpType::kMprotect, e);
    return e ? SysResult::Err(e) : SysResult::Ok();
  };
  // do_mprotect_pkey (mm/mprotect.c)
  const int grows = prot & (PROT_GROWSDOWN | PROT_GROWSUP);
  prot &= ~(PROT_GROWSDOWN | PROT_GROWSUP);
  if (grows == (PROT_GROWSDOWN | PROT_GROWSUP)) return done(EINVAL);
  if (start & (kPageSize - 1)) return done(EINVAL);
  if (!len) return done(0);
  len = PageAlign(len);
  uint64_t end = start + len;
  if (len == 0 || end <= start) return done(ENOMEM);
  if (prot & ~(PROT_READ | PROT_WRITE | PROT_EXEC | PROT_SEM)) return done(EINVAL);

  m.WriteLock();
  int error = ENOMEM;
  Vma* vma = m.FindIntersection(start, end);
  if (!vma) {
    m.WriteUnlock();
    return done(ENOMEM);
  }
  if (grows & PROT_GROWSDOWN) {
    if (vma->vm_start >= end) {
      m.WriteUnlock();
      return done(ENOMEM);
    }
    start = vma->vm_start;
    if (!(vma->vm_flags & VM_GROWSDOWN)) {
      m.WriteUnlock();
      return done(EINVAL);
    }
  } else {
    if (vma->vm_start > start) {
      m.WriteUnlock();
      return done(ENOMEM);
    }
    if (grows & PROT_GROWSUP) {  // no VM_GROWSUP on x86
      m.WriteUnlock();
      return done(EINVAL);
    }
  }
  uint64_t nstart = start;
  uint64_t tmp = vma->vm_start;
  error = 0;
  while (vma && vma->vm_start < end) {
    if (vma->vm_start != tmp) {
      error = ENOMEM;
      break;
    }
    uint64_t newflags = CalcVmProtBits(prot) | (vma->vm_flags & ~VM_ACCESS_FLAGS);
    if ((newflags & ~(newflags >> 4)) & VM_ACCESS_FLAGS) {  // VM_MAY% shifted onto VM_%
      error = EACCES;
      break;
    }
    tmp = std::min(vma->vm_end, end);
    // mprotect_fixup
    uint64_t oldflags = vma->vm_flags;
    uint64_t nrpages = (tmp - nstart) >> kPageShift;
    Vma* cur = vma;
    if (newflags != oldflags) {
      if (newflags & VM_WRITE) {
        if (!(oldflags & (VM_ACCOUNT | VM_WRITE | VM_SHARED | VM_NORESERVE))) {
          if (nrpages > m.commit_limit_pages) {
            error = ENOMEM;
            break;
          }
          newflags |= VM_ACCOUNT;
        }
      } else if ((oldflags & VM_ACCOUNT) && vma->is_anonymous() && !vma->anon()) {
        newflags &= ~VM_ACCOUNT;
      }
      int e = 0;
      Vma* r = m.ModifyFlags(vma, nstart, tmp, newflags, &e);
      if (!r) {
        error = e;
        break;
      }
      m.VmaStartWrite(r);
      r->vm_flags = newflags;
      m.ChangeProtection(r, nstart, tmp);
      cur = r;
    }
    tmp = cur->vm_end;  // vma_iter_end(): the end of the VMA just handled
    nstart = tmp;
    vma = m.Next(cur);
  }
  if (!error && tmp < end) error = ENOMEM;
  m.WriteUnlock();
  return done(error);
}

SysResult AddressSpace::Madvise(uint64_t start, uint64_t len_in, int advice) {
  RcuThread();
  Impl& m = *impl_;
  StatsSlotScope slot_scope(m.slot);
  // do_madvise (mm/madvise.c)
  auto done = [](int e) {
    CountOp(OpType::kMadvise, e);
    return e ? SysResult::Err(e) : SysResult::Ok();
  };
  if (start & (kPageSize - 1)) return done(EINVAL);
  if (advice != MADV_DONTNEED) return done(EINVAL);
  uint64_t len = PageAlign(len_in);
  if (len_in && !len) return done(EINVAL);
  uint64_t end = start + len;
  if (end < start) return done(EINVAL);
  if (end == start) return done(0);
  m.mmap_lock.LockRead();
  int err = 0;
  auto* g = new Gather;
  uint64_t pos = start;
  for (Vma* v = m.FindVma(start); v && v->vm_start < end; v = m.Next(v)) {
    if (v->vm_start > pos) err = ENOMEM;  // a hole: remember, go on
    if (v->vm_flags & (VM_LOCKED | VM_PFNMAP)) {
      err = EINVAL;
      break;
    }
    uint64_t s = std::max(v->vm_start, start), e = std::min(v->vm_end, end);
    m.ZapLocked(v, s, e, g);
    pos = v->vm_end;
  }
  if (!err && pos < end) err = ENOMEM;
  m.mmap_lock.UnlockRead();
  if (g->empty()) {
    delete g;
  } else {
    g->frames = &m.frames;
    CallRcu(&g->head, &Gather::Free);
  }
  return done(err);
}

FaultResult AddressSpace::Fault(uint64_t addr, AccessType access) {
  RcuThread();
  StatsSlotScope slot_scope(impl_->slot);
  return impl_->AccessPage(addr, access, [](uint8_t*) {});
}

AccessResult AddressSpace::Access(uint64_t addr, uint64_t len, uint64_t stride, AccessType access) {
  RcuThread();
  StatsSlotScope slot_scope(impl_->slot);
  AccessResult res;
  if (stride == 0) stride = 1;
  uint64_t i = 0;
  while (i < len) {
    uint64_t a = addr + i;
    if (a < addr) break;  // wrapped
    uint64_t page = a & kPageMask;
    // Offsets i, i+stride, ... that fall in this page.
    uint64_t page_end_i = (page + kPageSize) - addr;  // first offset past this page
    if (page + kPageSize < page) page_end_i = ~0ull;
    uint64_t stop = std::min(page_end_i, len);
    uint64_t first = i;
    uint64_t n = (stop - first + stride - 1) / stride;
    FaultResult r = impl_->AccessPage(a, access, [&](uint8_t* frame) {
      if (access == AccessType::kWrite) {
        for (uint64_t k = first; k < stop; k += stride)
          __atomic_store_n(frame + ((addr + k) & (kPageSize - 1)), static_cast<uint8_t>(k),
                           __ATOMIC_RELAXED);
      } else {
        uint8_t sink = 0;
        for (uint64_t k = first; k < stop; k += stride)
          sink ^= __atomic_load_n(frame + ((addr + k) & (kPageSize - 1)), __ATOMIC_RELAXED);
        asm volatile("" : : "r"(sink));
      }
    });
    res.faults += r.faults;
    if (r.outcome == FaultOutcome::kMajor) res.major_faults++;
    if (r.failed()) {
      res.stop = r;
      break;
    }
    res.accesses += n;
    i = first + n * stride;
  }
  return res;
}

CopyResult AddressSpace::ReadMemory(uint64_t addr, void* dst, uint64_t len) {
  RcuThread();
  StatsSlotScope slot_scope(impl_->slot);
  CopyResult res;
  auto* out = static_cast<uint8_t*>(dst);
  while (res.bytes < len) {
    uint64_t a = addr + res.bytes;
    uint64_t off = a & (kPageSize - 1);
    uint64_t n = std::min(kPageSize - off, len - res.bytes);
    FaultResult r = impl_->AccessPage(a, AccessType::kRead, [&](uint8_t* frame) {
      memcpy(out + res.bytes, frame + off, n);
    });
    res.faults += r.faults;
    if (r.failed()) {
      res.stop = r;
      break;
    }
    res.bytes += n;
  }
  return res;
}

CopyResult AddressSpace::WriteMemory(uint64_t addr, const void* src, uint64_t len) {
  RcuThread();
  StatsSlotScope slot_scope(impl_->slot);
  CopyResult res;
  auto* in = static_cast<const uint8_t*>(src);
  while (res.bytes < len) {
    uint64_t a = addr + res.bytes;
    uint64_t off = a & (kPageSize - 1);
    uint64_t n = std::min(kPageSize - off, len - res.bytes);
    FaultResult r = impl_->AccessPage(a, AccessType::kWrite, [&](uint8_t* frame) {
      memcpy(frame + off, in + res.bytes, n);
    });
    res.faults += r.faults;
    if (r.failed()) {
      res.stop = r;
      break;
    }
    res.bytes += n;
  }
  return res;
}

std::vector<VmaInfo> AddressSpace::Maps(uint64_t start, uint64_t end) {
  RcuThread();
  Impl& m = *impl_;
  StatsSlotScope slot_scope(m.slot);
  std::vector<VmaInfo> out;
  m.mmap_lock.LockRead();
  for (Vma* v = m.FindVma(start); v && v->vm_start < end; v = m.Next(v)) out.push_back(m.InfoLocked(v));
  m.mmap_lock.UnlockRead();
  return out;
}

std::string AddressSpace::RenderMaps(uint64_t start, uint64_t end) {
  std::string s;
  for (const VmaInfo& v : Maps(start, end)) {
    s += FormatMapsLine(v);
    s += '\n';
  }
  return s;
}

SpaceCounters AddressSpace::Counters() {
  RcuThread();
  Impl& m = *impl_;
  StatsSlotScope slot_scope(m.slot);
  SpaceCounters c;
  m.mmap_lock.LockRead();
  c.map_count = m.map_count;
  c.total_vm_pages = m.total_vm;
  m.idx->ForEach([&](Vma* v) { c.rss_pages += m.RssLocked(v->vm_start, v->vm_end); });
  c.pgtable_bytes = m.pt.table_pages() * kPageSize;
  m.mmap_lock.UnlockRead();
  return c;
}

std::string AddressSpace::Validate() {
  RcuThread();
  Impl& m = *impl_;
  StatsSlotScope slot_scope(m.slot);
  char buf[256];
  std::string err;
  m.WriteLock();
  uint64_t prev_end = 0, count = 0, total = 0;
  m.idx->ForEach([&](Vma* v) {
    if (!err.empty()) return;
    if (!PageAligned(v->vm_start) || !PageAligned(v->vm_end) || v->vm_start >= v->vm_end ||
        v->vm_end > kTaskSize) {
      snprintf(buf, sizeof buf, "bad vma [%#llx, %#llx)", (unsigned long long)v->vm_start,
               (unsigned long long)v->vm_end);
      err = buf;
      return;
    }
    if (v->vm_start < prev_end) {
      snprintf(buf, sizeof buf, "overlap at %#llx", (unsigned long long)v->vm_start);
      err = buf;
      return;
    }
    if (m.FindVma(v->vm_start) != v) {
      snprintf(buf, sizeof buf, "index lookup of %#llx misses its VMA", (unsigned long long)v->vm_start);
      err = buf;
      return;
    }
    // Attached (non-zero), no writer waiting; readers under the VMA lock may hold it
    // (they do not exclude mmap_lock writers of other VMAs).
    uint32_t rc = v->vm_refcnt.load();
    if (rc == 0 || rc >= Vma::kVmaLockOffset) {
      snprintf(buf, sizeof buf, "vm_refcnt %u on an attached VMA at %#llx",
               v->vm_refcnt.load(), (unsigned long long)v->vm_start);
      err = buf;
      return;
    }
    prev_end = v->vm_end;
    count++;
    total += v->pages();
  });
  if (err.empty() && count != m.map_count) err = "map_count " + std::to_string(m.map_count) + " != " + std::to_string(count);
  if (err.empty() && total != m.total_vm) err = "total_vm " + std::to_string(m.total_vm) + " != " + std::to_string(total);
  if (err.empty()) {
    // every present PTE lies inside a VMA
    m.pt.ForEachPresent(0, kTaskSize, [&](uint64_t a, uint64_t, PageTable::PteTable&, int) {
      if (!err.empty()) return;
      Vma* v = m.FindVma(a);
      if (!v || v->vm_start > a) {
        snprintf(buf, sizeof buf, "present PTE at %#llx outside any VMA", (unsigned long long)a);
        err = buf;
      }
    });
  }
  m.WriteUnlock();
  return err;
}

std::string AddressSpace::FormatMapsLine(const VmaInfo& v) {
  // fs/proc/task_mmu.c show_vma_header_prefix + show_map_vma
  char buf[512];
  int n = snprintf(buf, sizeof buf, "%08llx-%08llx %c%c%c%c %08llx %02x:%02x %llu ",
                   (unsigned long long)v.start, (unsigned long long)v.end,
                   (v.flags & VM_READ) ? 'r' : '-', (v.flags & VM_WRITE) ? 'w' : '-',
                   (v.flags & VM_EXEC) ? 'x' : '-', (v.flags & VM_MAYSHARE) ? 's' : 'p',
                   (unsigned long long)(v.anonymous ? 0 : v.offset), v.dev_major, v.dev_minor,
                   (unsigned long long)v.inode);
  std::string s(buf, n);
  if (!v.name.empty()) {
    // seq_pad(m, ' '): pad to 25 + 6 * sizeof(void*) - 1 = 72 columns, then one space
    if (s.size() < 72) s.append(72 - s.size(), ' ');
    s += ' ';
    s += v.name;
  }
  return s;
}

std::string AddressSpace::VmFlagsString(uint64_t flags) {
  // fs/proc/task_mmu.c show_smap_vma_flags: one mnemonic per set bit, in bit order.
  static const char* const kNames[64] = {
      "rd", "wr", "ex", "sh", "mr", "mw", "me", "ms",  // 0-7
      "gd", "um", "pf", "",   "uw", "lo", "io", "sr",  // 8-15
      "rr", "dc", "de", "lf", "ac", "nr", "ht", "sf",  // 16-23
      "ar", "wf", "dd", "sd", "mm", "hg", "nh", "mg",  // 24-31
  };
  std::string s;
  for (int b = 0; b < 64; b++) {
    if (!(flags & (1ull << b))) continue;
    const char* name = b == 36 ? "dp" : kNames[b];  // VM_DROPPABLE
    if (!name || !name[0]) continue;
    if (!s.empty()) s += ' ';
    s += name;
  }
  return s;
}

}  // namespace vmspace
