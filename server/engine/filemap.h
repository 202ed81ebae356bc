// SPDX-License-Identifier: Apache-2.0
// File: an inode with its page cache and reverse map (Linux's struct inode + struct
// address_space, include/linux/fs.h), internal to the engine; engine/file.h is the
// public face (FileTable, OpenFile).
//
// The page cache (i_pages) is a radix tree of atomic slots, as the xarray: lookups run
// under RCU alone (filemap_get_entry, filemap_map_pages); stores and removals take the
// i_pages lock. Each page is a Folio (order 0) with its own lock (folio_lock), which a
// fault holds from the lookup until its PTE is installed and truncate holds while it
// removes the page: a fault either sees the page removed (and retries, finding i_size
// below it: SIGBUS) or installs its PTE before the removal, and truncate's second
// unmap pass then zaps it (mm/truncate.c truncate_pagecache). Removed folios and their
// frames are freed after an RCU grace period (lockless accessors may still touch them).
//
// i_mmap (under i_mmap_rwsem) holds every VMA that can map the file's pages, keyed by
// (vm_pgoff, VMA): an ordered set rather than Linux's interval tree (mm/interval_tree.c).
// A walk for pages [first, last] visits the entries with vm_pgoff <= last and filters
// by end; the VMAs per file are few here (one per mapping and split), so the
// interval tree's O(log n + k) would not pay for its code. A VMA is linked before it
// can install PTEs and unlinked only after its PTEs are zapped (LOCKING.md).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "engine/file.h"
#include "engine/frame_allocator.h"
#include "engine/memcontrol.h"
#include "page_table.h"
#include "sync/mutex.h"
#include "sync/rcu.h"
#include "sync/rwsem.h"

namespace vmspace {

struct MmStruct;  // mm.h
struct VmFault;   // memory.h

struct Vma;

/// MAX_LFS_FILESIZE for this model: 2^44 bytes (2^32 pages; the page-cache tree's reach).
inline constexpr uint64_t kMaxFileSize = 1ull << 44;

/// One page of a file (struct folio of order 0). Its frame belongs to the page cache;
/// PTEs mapping it carry kPteFile. Flags are atomics: `uptodate` and `removed` change
/// under the folio lock (removed also under the i_pages lock), `dirty` under the folio
/// lock or by a fault holding it. Freed after a grace period once removed.
struct Folio {
  Folio(FrameAllocator& fa, void* f, uint64_t i) : frames(&fa), frame(f), index(i) {}
  FrameAllocator* const frames;  // where `frame` came from
  void* const frame;       // 4 KiB of data
  const uint64_t index;  // page offset in the file
  std::atomic<bool> uptodate{false};  // PG_uptodate: frame holds the file's data
  std::atomic<bool> dirty{false};     // PG_dirty: newer than the backing store
  std::atomic<bool> removed{false};   // folio->mapping == NULL: truncated away
  std::atomic<bool> writeback{false};  // PG_writeback: cleaned for I/O, not yet written (i_pages lock)
  std::atomic<uint32_t> locked{0};    // PG_locked (1 = locked; waiters futex-wait on it)
  struct rcu_head rcu;
  /// folio->memcg_data: the cgroup charged for this page (the active one of the call
  /// that added it; null: none), uncharged when the folio is freed (UnchargeFolio).
  std::shared_ptr<MemCgroup> memcg;

  /// folio_lock(): sleeps until the lock is free (lockdep rank kFolioLock).
  void Lock();
  /// folio_trylock() (filemap_map_pages never waits).
  bool TryLock();
  /// folio_unlock().
  void Unlock();
};

/// Copies a 4 KiB frame that mapped accessors may be storing to at the same time (a
/// page-cache page: COW, writeback), with relaxed 8-byte atomic loads: each word is one
/// the page held at some moment, as a CPU's copy would be, and no data race for TSan.
/// `dst` must be private to the caller.
inline void CopyFrameRacy(void* dst, const void* src) {
  auto* d = static_cast<uint64_t*>(dst);
  const auto* s = static_cast<const uint64_t*>(src);
  for (uint64_t w = 0; w < kPageSize / 8; w++) d[w] = __atomic_load_n(s + w, __ATOMIC_RELAXED);
}

/// Frees a folio removed from its page cache (and its frame) after a grace period.
/// No PTE may map it any more: a reader that read one before it was cleared is in a
/// read section the grace period waits for.
void FreeFolioDeferred(Folio* f);

/// Test-only: called by File::SetSizeLocked when it shrinks the file, on the truncating
/// thread with i_rwsem and invalidate_lock (write) held and no RCU read section: stage 1 after the first unmap pass,
/// stage 2 after the page-cache pages are removed and before the second unmap pass.
/// Null in production.
inline std::atomic<void (*)(struct File*, int)> g_truncate_test_hook{nullptr};

/// Test-only: called by File::AddLockedFolio before it allocates the folio (arguments:
/// the file, the page index), on the adding thread, which holds invalidate_lock for
/// read. Null in production.
inline std::atomic<void (*)(struct File*, uint64_t)> g_add_folio_test_hook{nullptr};
/// mem_cgroup_uncharge() of a folio being freed: gives its page back to the cgroup
/// charged for it (Folio::memcg), if any.
void UnchargeFolio(Folio* f);

/// The page-cache index (i_pages): page offset -> Folio*, a fixed-height radix tree of
/// 64-slot nodes (6 levels: 36 bits of index, more than kMaxFileSize needs). Lookups are
/// lock-free (acquire loads; the caller is in an RCU section or holds the i_pages lock,
/// which keeps the folio alive); stores need the owner's i_pages lock. Interior nodes
/// stay until the tree is destroyed (a truncated file keeps its empty nodes: 512 bytes
/// per 64 pages of the largest size it had), so readers never see a node freed.
class PageCacheTree {
 public:
  PageCacheTree() = default;
  ~PageCacheTree();
  PageCacheTree(const PageCacheTree&) = delete;
  PageCacheTree& operator=(const PageCacheTree&) = delete;

  /// xa_load(): the folio at `index`, or null.
  Folio* Load(uint64_t index) const;
  /// xa_store(): sets the slot (null erases). Caller holds the i_pages lock.
  void Store(uint64_t index, Folio* f);
  /// xa_find(): the first folio at an index in [*index, end), setting *index to it; null
  /// if none.
  Folio* Find(uint64_t* index, uint64_t end) const;
  /// Bytes of interior nodes (for memory-per-page figures).
  uint64_t node_bytes() const { return nodes_.load(std::memory_order_relaxed) * sizeof(Node); }

  static constexpr int kBits = 6;
  static constexpr int kSlots = 1 << kBits;
  static constexpr int kLevels = 6;

 private:
  struct Node {
    std::atomic<void*> slot[kSlots];
    Node() {
      for (auto& s : slot) s.store(nullptr, std::memory_order_relaxed);
    }
  };
  static void FreeNode(Node* n, int level);
  Folio* FindIn(const Node* n, int level, uint64_t base, uint64_t* index, uint64_t end) const;
  Node root_;
  std::atomic<uint64_t> nodes_{0};
};

/// A file (inode + address_space). Created by FileTable (host files, memfd) or by a
/// shared anonymous mmap (shmem_zero_setup); lives while an OpenFile refers to it.
struct File : std::enable_shared_from_this<File> {
  /// `fd`: the host file (owned, closed by the destructor), or -1 for shmem.
  File(FrameAllocator& frames, uint64_t ino, uint32_t dev_major, uint32_t dev_minor, std::string path,
       std::string maps_name, int fd, bool host_writable, uint64_t size, uint64_t ra_pages = 0);
  /// Writes back what is still dirty (iput -> write_inode_now; a failure is logged:
  /// nobody is left to report it to), frees the page cache after a grace period (an
  /// access that read a PTE before the last VMA's zap may still be using a frame),
  /// closes the host file. No VMA maps the file any more.
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  FrameAllocator& frames;
  const uint64_t ino;                   // i_ino
  const uint32_t dev_major, dev_minor;  // s_dev
  const std::string path;               // FileTable-relative; "" for unnamed shmem
  const std::string maps_name;          // the maps path column
  const int fd;                         // host file, -1 = shmem (memory only)
  const bool host_writable;             // fd opened O_RDWR
  /// file->f_ra.ra_pages (the backing device's read_ahead_kb in pages): the mmap
  /// read-around window of a page-cache miss. 0 = read only the page.
  const uint64_t ra_pages;
  bool shmem() const { return fd < 0; }

  /// i_size in bytes. Written under i_rwsem; read anywhere (a fault re-reads it with
  /// the folio locked, as filemap_fault does).
  std::atomic<uint64_t> i_size;
  /// inode->i_rwsem: serialises size changes (truncate, extending writes).
  Mutex i_rwsem{LockRank::kIRwsem};
  /// mapping->invalidate_lock (include/linux/fs.h, Linux 6.18): held for read while a
  /// page is added to the page cache and read in (GetLockedFolio's miss, ReadAround:
  /// filemap_create_folio, page_cache_ra_unbounded, filemap_fault), for write by
  /// truncate's shrink and by hole punching from the size change (or the first unmap)
  /// through the host file's truncate or punch. So no page is brought in between their
  /// removal and the host file losing its data: one added before is removed, one added
  /// after reads what the host file holds then (zeros beyond the new size).
  RwSem invalidate_lock{LockClass::kInvalidateLock, LockRank::kInvalidateLock};

  /// The i_pages xarray lock (lock class i_pages_lock): stores into `pages`, the
  /// PG_writeback transitions and nrwriteback.
  Mutex i_pages_lock{LockRank::kIPages, LockClass::kIPagesLock};
  PageCacheTree pages;
  std::atomic<uint64_t> nrpages{0};  // folios in the cache
  /// Open handles (FileTable ids) of this File: changed under the FileTable's lock,
  /// read anywhere (StatFile's open_handles without scanning the table).
  std::atomic<uint64_t> open_handles{0};
  std::atomic<uint64_t> nrdirty{0};  // of them dirty (host files; shmem pages are not counted)
  std::atomic<uint64_t> nrwriteback{0};  // of them under writeback (PG_writeback; i_pages_lock)
  std::atomic<bool> on_dirty_list{false};  // on the writeback domain's b_dirty list

  /// mapping->i_mmap_rwsem and i_mmap.
  RwSem i_mmap_rwsem{LockClass::kIMmapRwsem, LockRank::kIMmapRwsem};
  std::set<std::pair<uint64_t, Vma*>> i_mmap ABSL_GUARDED_BY(i_mmap_rwsem);
  /// VMAs of this file already in a space's VMA tree but not yet in i_mmap: only
  /// while a narrow-scope mmap is between its two inserts (IMmapScope::kNarrow). An
  /// rmap walker holding i_mmap_rwsem that sees it nonzero would miss them (CheckRmap).
  std::atomic<uint64_t> unlinked_visible{0};

  /// mapping->i_mmap_writable (include/linux/fs.h): the VM_SHARED|VM_MAYWRITE VMAs in
  /// i_mmap (counted as they are linked and unlinked, vma.cc) plus mmaps about to link
  /// one; negative once F_SEAL_WRITE denied writable mappings for good.
  std::atomic<int64_t> i_mmap_writable{0};
  /// mapping_map_writable(): one writable shared mapping more; EPERM if denied.
  int MappingMapWritable() {
    int64_t c = i_mmap_writable.load(std::memory_order_relaxed);
    do {
      if (c < 0) return EPERM;
    } while (!i_mmap_writable.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel));
    return 0;
  }
  /// mapping_unmap_writable(): one fewer.
  void MappingUnmapWritable() { i_mmap_writable.fetch_sub(1, std::memory_order_acq_rel); }
  /// mapping_deny_writable(): no writable shared mapping from now on; EBUSY if one exists.
  int MappingDenyWritable() {
    int64_t c = i_mmap_writable.load(std::memory_order_relaxed);
    do {
      if (c > 0) return EBUSY;
    } while (!i_mmap_writable.compare_exchange_weak(c, c - 1, std::memory_order_acq_rel));
    return 0;
  }
  /// The memfd seals (shmem_inode_info->seals, F_SEAL_*): changed under i_rwsem, read
  /// without it by mmap. Only shmem files have seals (`sealable`): a memfd without
  /// MFD_ALLOW_SEALING and a shared anonymous mapping's file start with F_SEAL_SEAL.
  std::atomic<uint32_t> seals{0};
  bool sealable() const { return shmem(); }
  /// i_mode & 0111 of a memfd (0777 unless MFD_NOEXEC_SEAL): F_SEAL_EXEC then implies
  /// the write seals. Set at creation, before the File is shared.
  bool mode_exec = true;

  /// mapping->wb_err (errseq_t, simplified): the number of failed writebacks so far.
  /// Each OpenFile remembers how many it has reported (OpenFile::wb_err_seen).
  std::atomic<uint64_t> wb_err{0};

  /// filemap_get_folio(FGP_LOCK | FGP_CREAT) + filemap_read_folio: the folio at
  /// `index`, locked and uptodate, read from the backing store on a miss (*major =
  /// true; shmem pages are zero-filled, not major). Null with *err = ENOMEM (no frame)
  /// or EIO (the read failed). Does not check i_size (callers do, with it locked).
  /// On a miss takes invalidate_lock for read (filemap_create_folio) and i_pages_lock;
  /// may sleep on the folio lock. The caller must not hold invalidate_lock or a folio lock.
  Folio* GetLockedFolio(uint64_t index, bool* major, int* err);
  /// filemap_add_folio() of a new locked, not uptodate folio at `index`; null with
  /// *err = ENOMEM (no frame) or 0 (a folio is there already). Takes i_pages_lock.
  /// Caller holds invalidate_lock for read.
  Folio* AddLockedFolio(uint64_t index, int* err) ABSL_SHARED_LOCKS_REQUIRED(invalidate_lock);
  /// filemap_read_folio(): reads the locked, not uptodate folio `f` from the host file
  /// (shmem: nothing to read, it is zero) and marks it uptodate (*major = true if I/O
  /// was done); on a read error unlocks it, sets *err = EIO and returns false.
  bool ReadFolioLocked(Folio* f, bool* major, int* err);
  /// do_sync_mmap_readahead() (mm/filemap.c, Linux 6.18) for a miss at `index` in a
  /// VMA with `vm_flags` mapping file pages [vma_first, vma_end): reads the pages of
  /// its window below i_size that are not cached into the page cache (host files
  /// only). The window: the read-around [index - ra_pages/2, + ra_pages); for VM_EXEC
  /// [index, index + ra_pages) within the VMA's pages (exec_folio_order 0 on x86); for
  /// VM_SEQ_READ [index, index + ra_pages) (page_cache_sync_ra's first window); for
  /// VM_HUGEPAGE two PMD-sized blocks from index rounded down to one; for
  /// VM_RAND_READ (not VM_EXEC) only `index`. The per-file readahead state (mmap_miss,
  /// prev_pos, async readahead marks) is not modelled. Returns true if it read `index`
  /// itself (I/O was done for the fault: major). No folio lock may be held (it
  /// allocates frames); takes invalidate_lock for read (page_cache_ra_unbounded).
  bool ReadAround(uint64_t index, uint64_t vm_flags, uint64_t vma_first, uint64_t vma_end);
  /// folio_mark_dirty(): sets PG_dirty; true if the folio was clean (the caller then
  /// throttles: fault_dirty_shared_page, balance_dirty_pages_ratelimited). Host
  /// files count the page in nrdirty and the daemon-wide dirty figure and join the
  /// writeback list; shmem only sets the flag (noop_dirty_folio: no writeback
  /// capability). Folio locked or mapped writable by the caller's fault.
  bool MarkDirty(Folio* f);
  /// folio_clear_dirty_for_io() / the accounting of removing a dirty folio: clears
  /// PG_dirty; true if it was set. Folio locked.
  bool ClearDirty(Folio* f);
  /// folio_start_writeback() (__folio_start_writeback): sets PG_writeback and counts the
  /// page in nrwriteback and the daemon-wide NR_WRITEBACK, under i_pages_lock (Linux
  /// takes the xa_lock there to tag the page). Folio locked; nothing if already set.
  void StartWriteback(Folio* f);
  /// folio_end_writeback() (__folio_end_writeback): clears PG_writeback and the counts,
  /// under i_pages_lock. Nothing if not set.
  void EndWriteback(Folio* f);
  void EndWritebackLocked(Folio* f) ABSL_EXCLUSIVE_LOCKS_REQUIRED(i_pages_lock);
  /// Notified (under i_pages_lock) whenever a page's PG_writeback is cleared
  /// (folio_wake_bit(PG_writeback)).
  std::condition_variable_any writeback_done;
  /// filemap_write_and_wait_range() (mm/filemap.c): WriteRange, then
  /// WaitOnWriteback, so pages another writer (the writeback thread) had already taken
  /// for I/O are on the host file too when it returns. Returns WriteRange's result; a
  /// failure of the other writer's I/O shows in wb_err. No engine lock may be held.
  int WriteAndWait(uint64_t first, uint64_t last);
  /// __filemap_fdatawait_range() for pages [first, last]: waits until every page that
  /// is under writeback when it looks has ended it (or left the cache). Takes
  /// i_pages_lock; no engine lock may be held, not in an RCU read-side section.
  void WaitOnWriteback(uint64_t first, uint64_t last);
  /// Indexes of the cached pages in [first, last] (pages) for which pred holds, read
  /// in one RCU read-side section (a snapshot: callers re-check under the page's lock).
  std::vector<uint64_t> IndexesWhere(uint64_t first, uint64_t last,
                                     const std::function<bool(const Folio&)>& pred) const;
  /// __filemap_fdatawrite_range() for pages [first, last]: write-protects the dirty
  /// ones in every shared mapping (page_mkclean through i_mmap), waits a grace period
  /// (lockless writers that loaded the writable PTE before are done: the TLB flush),
  /// then writes them to the host file. A failed write leaves the page dirty and
  /// counts a writeback error. Returns 0 or EIO (this call's writes failed). Takes
  /// folio locks and i_mmap_rwsem (read); no engine lock may be held.
  int WriteRange(uint64_t first, uint64_t last);
  /// truncate_setsize() + truncate_pagecache() (mm/truncate.c): sets i_size; when it
  /// shrinks, unmaps [round_up(size), EOF) from every VMA in i_mmap (private COW pages
  /// too: even_cows), removes the page-cache pages there, zeroes the tail of a partial
  /// last page, unmaps again, and truncates the host file (when growing, the host file
  /// first: a size it refuses changes nothing). Caller holds i_rwsem; a shrink takes
  /// invalidate_lock for write from the size change on. Returns 0, EFBIG
  /// (the host filesystem's limit or RLIMIT_FSIZE) or EIO (host ftruncate failed).
  int SetSizeLocked(uint64_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(i_rwsem);
  /// Before i_size grows from `old_size` towards `pos` (a truncate up: pos = ~0; a write
  /// beyond EOF: the write's start), a host file's cached EOF page reads as zeros from
  /// old_size to min(pos, the page's end): bytes a shared mapping stored beyond EOF do
  /// not become file data. As ext4 on Linux 6.18 does (truncate up zeroes the whole
  /// tail, an extending write the gap before it; pagecache_isize_extended and the
  /// filesystem's post-EOF block zeroing), measured on this machine's kernel. Shmem
  /// keeps those bytes (shmem_setattr zeroes nothing). Caller holds i_rwsem.
  void ZeroPostEofLocked(uint64_t old_size, uint64_t pos) ABSL_EXCLUSIVE_LOCKS_REQUIRED(i_rwsem);
  /// unmap_mapping_range(..., even_cows = 1): zaps the PTEs of pages [first, last] in
  /// every VMA of i_mmap, private COW copies included (freed after a grace period).
  /// Takes i_mmap_rwsem for read and each PTE lock.
  void UnmapMappingRange(uint64_t first, uint64_t last);
  /// fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE) of pages [first, last]
  /// (shmem_fallocate; a host filesystem's punch hole through truncate_pagecache_range):
  /// unmaps the page-cache pages there from every VMA of i_mmap (private COW copies
  /// stay: even_cows = 0), removes them from the page cache (dirty data is dropped),
  /// and punches the host file. i_size does not change. Returns 0 or the host
  /// fallocate's errno (EOPNOTSUPP where the filesystem cannot punch). Takes i_rwsem,
  /// then invalidate_lock for write;
  /// no engine lock may be held (mm/madvise.c madvise_remove drops mmap_lock).
  int PunchHole(uint64_t first, uint64_t last);
  /// mapping_evict_folio() (mm/truncate.c) for the folio at `index`: removes it from
  /// the page cache if it is clean, not under writeback and mapped by no PTE of any
  /// VMA in i_mmap. Returns true if it did. Takes the folio lock, i_mmap_rwsem (read),
  /// the i_pages lock; no engine lock may be held.
  bool EvictCleanFolio(uint64_t index);
  /// Pages of i_size (the first index beyond EOF).
  uint64_t size_pages() const {
    return (i_size.load(std::memory_order_acquire) + kPageSize - 1) >> kPageShift;
  }
};

/// Dirty accounting of host-file pages (page-writeback.cc): one page more / `pages`
/// fewer in the daemon-wide figure; AccountDirtied also puts f on the writeback list.
void AccountDirtied(File& f);
void AccountCleaned(uint64_t pages);
/// NR_WRITEBACK: `pages` more (positive) or fewer (negative) under writeback.
void AccountWriteback(int64_t pages);
/// balance_dirty_pages_ratelimited(): after a write dirtied a page of f, starts
/// background writeback above --dirty-background-bytes and, above --dirty-bytes,
/// waits until writeback brings the dirty figure under it (or a pass cleans nothing).
/// Nothing for shmem. The caller holds no engine lock (asserted under lockdep) and is
/// not in an RCU read-side section (the writeback thread waits for grace periods).
void BalanceDirtyPagesRatelimited(File& f);

/// vfs_fsync_range() on handle h for pages [first, last] (fs/sync.c, msync.c): writes
/// them back, makes the host file durable (HostDataSync), then reports EIO once if a
/// writeback of the file failed since h last reported one
/// (file_check_and_advance_wb_err). 0 or EIO. No engine lock may be held.
int VfsFsyncRange(OpenFile& h, uint64_t first, uint64_t last);
/// fdatasync(2) of f's host file (the filesystem's ->fsync with datasync: the data and
/// the metadata needed to read it back, i_size included, reach the disk), so what was
/// written back survives a host crash, not only a daemon crash. Nothing for shmem.
/// 0 or EIO (counted in f.wb_err, as a failed writeback). Counts kHostFileSyncs.
int HostDataSync(File& f);

/// A new unnamed shmem file (shmem_zero_setup for MAP_SHARED|MAP_ANONYMOUS, shown as
/// "/dev/zero (deleted)"; memfd_create names it "/memfd:NAME (deleted)"), opened read-write.
std::shared_ptr<OpenFile> NewShmemFile(FrameAllocator& frames, const std::string& maps_name,
                                       uint64_t size);

/// do_fault_around() + filemap_map_pages(): maps the pages of the fault-around window
/// around vmf.address that are already cached and uptodate into empty PTEs of table
/// `t` (read-only unless shared shmem). Returns the number of PTEs installed. Under
/// RCU; folio trylock; the PTE lock once.
uint64_t DoFaultAround(MmStruct& mm, VmFault& vmf, PageTable::PteTable* t);

}  // namespace vmspace
