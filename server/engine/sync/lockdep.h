// SPDX-License-Identifier: Apache-2.0
// Debug lock-order checker (a small lockdep) and the engine's lock ranks.
//
// The order itself is written in server/engine/LOCKING.md; the ranks below are its
// machine-readable form. A thread may only acquire a lock whose rank is higher than
// every rank it already holds. With -DVMSPACE_LOCKDEP=ON (the sanitizer stage of
// deploy/test.sh) every ranked acquisition is checked and an inversion aborts with
// "lock order violation"; otherwise all of this compiles to nothing.
#pragma once

#include <cstdint>

namespace vmspace {

/// Lock ranks, spaced so that the locks file mappings bring (invalidate_lock, folio
/// lock, i_mmap_rwsem) fit where the comment at the top of mm/rmap.c (Linux 6.18)
/// orders them. Lower ranks are taken first.
enum class LockRank : uint8_t {
  kFileTable = 2,       // the file table's lock (files_struct->file_lock): taken with no
                        // other engine lock held; nothing is taken under it
  kIRwsem = 4,          // inode->i_rwsem (truncate, extending writes): above mmap_lock
  kReclaim = 6,         // the frame allocator's list of deferred-free sources (Reclaim):
                        // held while each source flushes under its mmap_lock
  kMmapLock = 10,       // mm->mmap_lock
  kVmaLock = 20,        // a VMA read lock (lock_vma_under_rcu): stands in for mmap_lock
  kInvalidateLock = 30, // mapping->invalidate_lock (File::invalidate_lock)
  kFolioLock = 40,      // folio_lock (Folio::Lock)
  kIMmapRwsem = 50,     // mapping->i_mmap_rwsem
  kAnonVmaRwsem = 55,   // anon_vma->rwsem of a fork tree's root (anon_vma_lock_write)
  kAnonVmaLock = 60,    // mm->page_table_lock as __anon_vma_prepare uses it
  kPageTableLock = 70,  // mm->page_table_lock (installing upper-level tables)
  kPtl = 80,            // split PTE lock
  kPtlNested = 81,      // a second split PTE lock taken under the first
                        // (spin_lock_nested(SINGLE_DEPTH_NESTING): mremap's move_ptes
                        // holds the old and the new table's ptl; mmap_lock write keeps a
                        // second mover out, so the pair's order does not matter)
  kWbListLock = 85,     // the writeback domain's lock (wb->list_lock: taken by folio_mark_dirty's
                        // __mark_inode_dirty under the folio lock, as rmap.c nests it under ptl)
  kPageMeta = 88,       // the frame-metadata table's shard locks (rmap.cc PageMeta; leaf
                        // but for the call_rcu queue: taken under the PTE lock)
  kIPages = 90,         // mapping->i_pages lock (a File's page-cache tree)
  kFrameShard = 100,    // frame allocator shard (zone/pcp lock)
  kNodePool = 105,      // VMA-index free-node pool
  kFrameChunk = 110,    // frame allocator chunk list
  kFrameDebug = 120,    // debug-only frame state table (leaf)
  kRcuRegistry = 125,   // the RCU reader registry (sync/rcu.cc: registration, grace-period
                        // scans; SynchronizeRcu may hold any lock but kRcuQueue)
  kRcuQueue = 130,      // the call_rcu worker's queue (sync/rcu.cc; leaf: CallRcu may be
                        // called holding any lock)
};

#if defined(VMSPACE_LOCKDEP)
inline constexpr bool kLockdep = true;
/// Records that the calling thread takes `lock` (any object address) of `rank`;
/// aborts on an order violation (a rank not above every rank held).
void LockdepAcquire(LockRank rank, const void* lock = nullptr);
/// As LockdepAcquire, but a lock of the same rank as one held is allowed
/// (spin_lock_nested / mmap_write_lock_nested with SINGLE_DEPTH_NESTING: dup_mmap's
/// child mmap_lock under the parent's).
void LockdepAcquireNested(LockRank rank, const void* lock = nullptr);
/// Records the release; aborts if the thread does not hold it.
void LockdepRelease(LockRank rank, const void* lock = nullptr);
/// Whether the calling thread holds `lock` (acquired with its address).
bool LockdepHeld(const void* lock);
/// The number of locks the calling thread holds (for tests).
int LockdepDepth();
#else
inline constexpr bool kLockdep = false;
inline void LockdepAcquire(LockRank, const void* = nullptr) {}
inline void LockdepAcquireNested(LockRank, const void* = nullptr) {}
inline void LockdepRelease(LockRank, const void* = nullptr) {}
inline bool LockdepHeld(const void*) { return true; }
inline int LockdepDepth() { return 0; }
#endif

/// Aborts with `what` if `cond` is false, in lockdep builds only (the engine's
/// VM_BUG_ON / mmap_assert_locked). Free otherwise.
void LockdepAssertFail(const char* what);
#define VMSPACE_LOCK_ASSERT(cond, what)                                \
  do {                                                                 \
    if (::vmspace::kLockdep && !(cond)) ::vmspace::LockdepAssertFail(what); \
  } while (0)

}  // namespace vmspace
