// SPDX-License-Identifier: Apache-2.0
// MmStruct: the state of one address space (Linux's struct mm_struct; gVisor's
// pkg/sentry/mm/mm.go MemoryManager): its fields, each with what guards it, the
// constants, construction and destruction. The lock order is in LOCKING.md.
// AddressSpace (engine/address_space.h) is its public face.
//
// The operations on a space are free functions taking `MmStruct& mm`, each declared in
// the header of the engine file that defines it, named after the kernel file it mirrors:
//   mm_types.h        Vma, AnonVma, VmaLock, VmaForm, MmCounter, TlbUsers
//                     (include/linux/mm_types.h; Vma's lifetime in vma_init.cc)
//   mmap_lock.h       mmap_write_lock / mmap_write_unlock, the end of a write section
//   vma_lock.h        per-VMA locks: vma_start_write, vma_start_read, lock_vma_under_rcu
//   vma.h             find_vma & co., link/unlink, split, merge, unmap (vma.cc), and
//                     vm_area_alloc / vm_area_dup / vm_area_free (vma_init.cc)
//   vma_init.h        VmaCache, the space's VMA cache (vma_init.cc)
//   mmu_gather.h      MmuGather, the space's gathers and deferred frees (mmu_gather.cc)
//   rmap.h            anon_vma_prepare, page_mkclean_one (rmap.cc)
//   mmap.h            get_unmapped_area, expand_downwards, calc_vm_prot_bits (mmap.cc)
//   mprotect.h        change_protection (mprotect.cc)
//   mremap.h          copy_vma, move_page_tables (mremap.cc)
//   memory.h          VmFault, the fault path, zap (memory.cc); the fault-around is in
//                     filemap.h (filemap.cc)
//   proc.h            the maps/smaps data of a VMA (proc.cc)
//   page_table.h      PageTable, PTE bits, PteBitsFor, PteAllows (page_table.cc)
//   percpu_counter.h  PercpuCounter, mm->rss_stat's counter (percpu_counter.cc)
// The system calls are AddressSpace members, in mmap.cc (also brk), mprotect.cc, mremap.cc, madvise.cc,
// msync.cc, memory.cc (accesses), proc.cc and validate.cc (validate_mm).
//
// Conventions: a function named ...Locked requires mmap_lock (shared = read or write;
// exclusive = write), which the compiler checks (clang -Wthread-safety). Functions on
// the fault path run under either mmap_lock (read) or a VMA read lock, which the
// analysis cannot express; they say so, and assert mmap_lock where they need it.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "engine/address_space.h"
#include "engine/cancel.h"
#include "engine/frame_allocator.h"
#include "engine/memcontrol.h"
#include "engine/per_thread.h"
#include "engine/stats.h"
#include "page_table.h"
#include "sync/mutex.h"
#include "sync/rcu.h"
#include "sync/rwsem.h"
#include "mm_types.h"
#include "percpu_counter.h"
#include "vma_init.h"
#include "vma_index.h"

namespace vmspace {

struct MmuGather;  // mmu_gather.h

struct MmStruct final : FrameAllocator::DeferredFrees {
  MmStruct(FrameAllocator& f, const SpaceOptions& o);
  /// exit_mmap(): unmaps everything and frees it at once (no caller may be running).
  ~MmStruct();
  MmStruct(const MmStruct&) = delete;
  MmStruct& operator=(const MmStruct&) = delete;

  /// Deferred frees are handed to call_rcu in batches of at least this many objects
  /// (~85 seed-004 rounds' retired index nodes: a call_rcu per mmap/munmap would take
  /// the worker's queue lock every time; 4096-node batches kept ~1 MiB of nodes out of
  /// the caches and cost the rwsem-form profiles 10-20% a round), or once this
  /// many frames (256 KiB) wait, so the frame limit is not held up for long and the
  /// frames come back to the unmapping thread's shard (FreeBatch) while they are still
  /// in its caches (1 MiB batches: 8% more CPU per seed-004 round with faults).
  static constexpr size_t kDeferBatch = 256;
  static constexpr size_t kDeferFrames = 64;
  /// Gathers at most on the polled list; the oldest beyond goes to call_rcu.
  static constexpr int kMaxPolledGathers = 8;
  /// A write section that hands no gather on polls the list's grace period from what
  /// earlier scans found (one load); every kPollScanEvery-th one scans the threads
  /// (one load of each: a cache miss for each thread that is busy in the engine).
  static constexpr unsigned kPollScanEvery = 256;
  /// A VMA writer waiting for readers spins this long before it sleeps (refcnt form).
  static constexpr uint64_t kVmaWriterSpinNs = 2000;

  // ---- immutable after construction
  FrameAllocator& frames;
  const SpaceOptions opts;
  const int stats_slot;  // statistics slot of the profile
  const VmaForm vma_form;  // from the profile (VmaForm)
  uint64_t commit_limit_pages = 0;
  /// The cgroup of the tenant whose call created the space (the active one then:
  /// mm->owner's memcg, get_mem_cgroup_from_mm), or null. Only tells whose the space
  /// is (StatFile counts a tenant's own VMAs by it); file pages are charged to the
  /// active cgroup of the call that adds them.
  const std::shared_ptr<MemCgroup> memcg;

  // ---- mmap_lock and what it guards
  RwSem mmap_lock{LockClass::kMmapLock, LockRank::kMmapLock};
  /// The VMA tree. Changed under mmap_lock write; queried under mmap_lock; "maple" is
  /// also readable under RCU (VmaLookupRcu).
  const std::unique_ptr<VmaIndex> idx ABSL_PT_GUARDED_BY(mmap_lock);
  /// What this write section retires (see MmuGather).
  MmuGather* gather ABSL_GUARDED_BY(mmap_lock) = nullptr;
  /// The index nodes a write section retired, on their way to the gather
  /// (EndWriteSectionLocked).
  std::vector<void*> retired_nodes ABSL_GUARDED_BY(mmap_lock);
  /// Gathers handed on (FlushGatherLocked), each waiting for the grace period of its
  /// RcuStartPoll cookie, oldest first, linked through head.next. The space's own later
  /// write sections free them (FreePolledGathersLocked), on the thread that writes the
  /// space, as the kernel runs call_rcu callbacks on the CPU that queued them (the
  /// per-CPU rcu_segcblist, kernel/rcu/tree.c rcu_do_batch): the index nodes go back
  /// to the index's own node cache (VmaIndex::ReuseRetired) and the frames to that
  /// thread's allocator shard while they are warm, no other thread touches them,
  /// and a grace period ends at the first poll after every thread left the engine
  /// once, so about two gathers wait instead of a call_rcu worker's tick of them. An
  /// idle space's list goes to call_rcu (FlushDeferredFrees); so does the oldest
  /// beyond kMaxPolledGathers (a reader that stays online holds grace periods up).
  MmuGather* polled_head ABSL_GUARDED_BY(mmap_lock) = nullptr;
  MmuGather* polled_tail ABSL_GUARDED_BY(mmap_lock) = nullptr;
  int polled_count ABSL_GUARDED_BY(mmap_lock) = 0;
  unsigned polled_skips ABSL_GUARDED_BY(mmap_lock) = 0;  // write sections since the last scan
  /// The threads that may hold pointers to this space's RCU-freed index nodes: the
  /// RcuThreadId of the only thread that has entered the space (every public entry
  /// point calls NoteRcuReader before it reads anything), 0 before the first, or
  /// kRcuShared once a second one has (for good). The engine's mm_cpumask for RCU:
  /// index nodes retired while their writer is the only reader need no grace period,
  /// only that thread's own next quiescent state (sole_nodes), so independent spaces on
  /// their own threads start, scan and advance no shared grace-period state, and each
  /// reuses its nodes while they are hot. Only index nodes: page tables and frames are
  /// also reached by other threads (rmap walks, the TLB-hit path's frames), and VMAs
  /// through i_mmap.
  std::atomic<uint64_t> rcu_sole{0};
  static constexpr uint64_t kRcuShared = ~0ull;
  /// Marks the calling thread as a reader of this space (see rcu_sole); call it right
  /// after the entry point's RcuEntry. Every mark is a read-modify-write of rcu_sole
  /// before the thread's first read of the space, and a writer checks rcu_sole with a
  /// read-modify-write after its unlinks (SoleRcuReaderLocked): the two RMWs are ordered
  /// in rcu_sole's modification order, so either the writer sees the mark, or the mark
  /// reads the writer's RMW and the unlinks happen before the new reader's reads (no
  /// fence: the C++ model and ThreadSanitizer both see the pairing).
  void NoteRcuReader() {
    const uint64_t me = RcuThreadId();
    const uint64_t sole = rcu_sole.load(std::memory_order_relaxed);
    if (sole != me && sole != kRcuShared) NoteRcuReaderSlow(me);
  }
  void NoteRcuReaderSlow(uint64_t me);
  /// Index nodes retired by write sections of sole_owner while it was the space's only
  /// reader (SoleRcuReaderLocked), when its RcuQsCount() was sole_qs: once that count
  /// has moved (the single-CPU grace period, as Tiny RCU, kernel/rcu/tiny.c, Linux
  /// 6.18) they go back into the index's node cache. Still charged (kIndexNodes).
  std::vector<void*> sole_nodes ABSL_GUARDED_BY(mmap_lock);
  /// kRwsem form: VMAs detached under the same rule (ReleaseRetiredVmasLocked), for the
  /// VMA cache's free list instead of an RCU batch.
  std::vector<Vma*> sole_vmas ABSL_GUARDED_BY(mmap_lock);
  uint64_t sole_owner ABSL_GUARDED_BY(mmap_lock) = 0;
  uint64_t sole_qs ABSL_GUARDED_BY(mmap_lock) = 0;
  /// The File whose i_mmap_rwsem this write section holds across a multi-VMA change
  /// (vma.cc IMmapSection), or null.
  struct File* i_mmap_held ABSL_GUARDED_BY(mmap_lock) = nullptr;
  /// VMAs detached in this write section, released at its end by the profile's rule
  /// (ReleaseRetiredVmasLocked).
  std::vector<Vma*> retired_vmas ABSL_GUARDED_BY(mmap_lock);
  /// The space's VMA cache (VmaCache). kRefcnt: SLAB_TYPESAFE_BY_RCU, a free VMA
  /// (detached, vm_refcnt 0) is reused by the next allocation without a grace period.
  /// Linux's cache is global with per-CPU slabs (so lock_vma_under_rcu also checks
  /// vma->vm_mm); one per space keeps independent spaces from sharing it, and a reused
  /// VMA is always this space's. Freed with the space.
  VmaCache vma_cache ABSL_GUARDED_BY(mmap_lock){vma_form, &frames.budget()};
  /// munmap's detached tree (mt_detach and vms->mas_detach in vms_gather_munmap_vmas,
  /// Linux 6.1+): the VMAs one munmap removes are stored in it at their ranges, the
  /// teardown iterates them from it, and it is emptied at the munmap's end (__mt_destroy).
  /// Not in RCU mode (nothing reads it locklessly); its nodes are charged as index nodes.
  /// Maple profiles only (null for index=rbtree: 6.0 linked the VMAs in a list). One
  /// munmap uses it at a time: under mmap_lock write, then read after
  /// mmap_write_downgrade, when no other writer can start.
  const std::unique_ptr<MapleTree> mt_detach ABSL_PT_GUARDED_BY(mmap_lock);
  /// mm->map_count and mm->total_vm (pages): written under mmap_lock write, read
  /// without locks (Counters, a scrape).
  std::atomic<uint64_t> map_count{0};
  std::atomic<uint64_t> total_vm{0};
  /// mm->start_brk and mm->brk (bytes): the heap's start (from SpaceOptions) and the
  /// current break (not page aligned: what brk(2) was last given). The [heap] VMA is
  /// the one overlapping [start_brk, brk] (brk.cc, proc.cc).
  uint64_t start_brk ABSL_GUARDED_BY(mmap_lock) = 0;
  uint64_t brk ABSL_GUARDED_BY(mmap_lock) = 0;
  /// mm->start_stack (bytes): where execve left the stack's strings (exec.cc; 0 in a
  /// space no Exec made). The VMA containing it is [stack] in Maps
  /// (vma_is_initial_stack).
  uint64_t start_stack ABSL_GUARDED_BY(mmap_lock) = 0;
  /// The special mappings execve installed (_install_special_mapping, mm/mmap.c: the
  /// vDSO's [vvar], [vvar_vclock], [vdso]): a VMA with VM_DONTEXPAND that starts at
  /// `start` is named `name` in Maps (the vm_special_mapping's name).
  struct SpecialMapping {
    uint64_t start;
    const char* name;  // a string literal
  };
  std::vector<SpecialMapping> special_mappings ABSL_GUARDED_BY(mmap_lock);
  /// mm->locked_vm (pages of VM_LOCKED VMAs) and the pages of VM_SEALED VMAs: written
  /// under mmap_lock write, read without locks (Counters).
  std::atomic<uint64_t> locked_vm{0};
  std::atomic<uint64_t> sealed_vm{0};
  /// VMAs with VM_SEALED (counted where VMAs enter and leave the tree, and where mseal
  /// seals one in place); same locking as sealed_vm.
  std::atomic<uint64_t> sealed_vmas{0};
  /// mm->def_flags: VM_LOCKED / VM_LOCKONFAULT after mlockall(MCL_FUTURE), added to
  /// every new mapping's flags (mlock.cc).
  uint64_t def_flags ABSL_GUARDED_BY(mmap_lock) = 0;
  /// RLIMIT_MEMLOCK (bytes, ~0 = unlimited) and CAP_IPC_LOCK of the space's process
  /// (from SpaceOptions; setrlimit/capset change them: read without locks).
  std::atomic<uint64_t> rlimit_memlock{0};
  std::atomic<bool> cap_ipc_lock{false};

  // ---- per-VMA locks (vma_lock.cc)
  /// mm_lock_seq (the 6.4-6.13 form): advanced when mmap_lock is write-unlocked, which
  /// releases every VMA write lock taken in that section (vma_end_write_all).
  std::atomic<uint64_t> mm_lock_seq{0};
  /// mm->vma_writer_wait (an rcuwait in Linux): a futex word a VMA writer sleeps on
  /// while readers drain; the reader that leaves the writer alone bumps it and wakes.
  std::atomic<uint32_t> vma_writer_wait{0};

  // ---- fault-side state
  /// Serializes setting Vma::anon_vma from null during faults (mmap_lock read held),
  /// as __anon_vma_prepare does under mm->page_table_lock.
  Mutex anon_vma_lock{LockRank::kAnonVmaLock};
  /// The id of the next anon_vma of this space (VmaInfo::anon_vma_id: unique in the
  /// space). Per space, not a process-wide counter: spaces faulting on different
  /// threads write no shared line.
  uint64_t next_anon_vma_id ABSL_GUARDED_BY(anon_vma_lock) = 1;
  /// The page tables: upper levels installed under their page_table_lock, PTEs under
  /// the split PTE locks (page_table.h).
  PageTable pt{&frames};
  /// mm->rss_stat, changed wherever a PTE starts or stops mapping a counted page.
  PercpuCounter rss[NR_MM_COUNTERS];
  /// The threads accessing this space's frames through its PTEs (TlbUsers).
  TlbUsers tlb_users;

  /// Bytes of the budget a change that may add VMAs must find free before it starts
  /// (kmem charges of two VMAs from a split plus a maple store's worst-case nodes):
  /// VMAs and index nodes are charged without failing in the middle of a change, so
  /// each entry point that checks max_map_count also checks MemoryBudget::HasRoom(this)
  /// and answers ENOMEM; the budget is exceeded by at most this per change running.
  static constexpr uint64_t kVmaChangeBytes = 8192;
  /// Adds n pages to the RSS counter c (add_mm_counter).
  void AddRss(MmCounter c, int64_t n) { rss[c].Add(n); }

  // ---- deferred frees (mmu_gather.cc; the flush of an idle space in mm.cc)
  /// Hands the gather kept across write sections, the polled gathers and vma_cache's
  /// waiting VMA batches to call_rcu now, if there are any, and gives the index's
  /// cached free nodes beyond a few back to the pool (FrameAllocator::Reclaim, the
  /// daemon's periodic flush). Takes mmap_lock for write;
  /// caller holds no engine lock.
  void FlushDeferredFrees(bool all) ABSL_LOCKS_EXCLUDED(mmap_lock) override;
  /// Set when a write section left frames or page tables (memory charged to the frame
  /// limit) in `gather` without queueing it; VMAs and index nodes alone wait for the
  /// next batch (or a Reclaim: deferred_any).
  std::atomic<bool> deferred_pending{false};
  /// Set when a write section left anything in `gather`, or VMA batches waiting in
  /// vma_cache (Reclaim flushes them: VMAs and index nodes are charged to the memory
  /// budget too).
  std::atomic<bool> deferred_any{false};
};

/// The entry of every AddressSpace call into a space (as a system call enters the
/// kernel on behalf of a process): the thread goes online for RCU (RcuEntry), marks
/// itself one of the space's readers (MmStruct::NoteRcuReader, before it reads anything
/// of the space), and counts its statistics in the slot of the space's profile
/// (StatsSlotScope). All three end, in reverse order, with the scope. No lock.
class SpaceEntry {
 public:
  explicit SpaceEntry(MmStruct& m) : slot_((m.NoteRcuReader(), m.stats_slot)) {}
  SpaceEntry(const SpaceEntry&) = delete;
  SpaceEntry& operator=(const SpaceEntry&) = delete;

 private:
  RcuEntry rcu_;  // first: online before the mark and for the whole call
  StatsSlotScope slot_;
};

}  // namespace vmspace
