// SPDX-License-Identifier: Apache-2.0
// The page cache: folio locks, the i_pages tree, reading pages in, dirtying and
// writeback (mm/filemap.c filemap_get_folio / filemap_read_folio /
// filemap_write_and_wait_range, mm/page-writeback.c folio_mark_dirty, mm/shmem.c
// shmem_zero_setup; Linux 6.18).
#include "filemap.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <algorithm>

#include "engine/stats.h"
#include "mm.h"
#include "memory.h"
#include "rmap.h"

namespace vmspace {

namespace {

std::atomic<uint64_t> g_next_shmem_ino{1};

/// call_rcu callback of a removed folio: frees its frame and itself.
void FreeFolioCallback(struct rcu_head* h) {
  RcuCallbackBegin(h);
  Folio* f = reinterpret_cast<Folio*>(reinterpret_cast<char*>(h) - offsetof(Folio, rcu));
  UnchargeFolio(f);
  f->frames->Free(f->frame, MemKind::kPageCache);
  delete f;
  RcuCallbackEnd();
}

}  // namespace

void FreeFolioDeferred(Folio* f) { CallRcu(&f->rcu, &FreeFolioCallback); }

void UnchargeFolio(Folio* f) {
  if (f->memcg) f->memcg->Uncharge(kPageSize);
  f->memcg.reset();
}

// ====================================================================== Folio

void Folio::Lock() {
  LockdepAcquire(LockRank::kFolioLock, this);
  for (;;) {
    uint32_t expect = 0;
    if (locked.compare_exchange_weak(expect, 1, std::memory_order_acquire)) return;
    RcuSleep sleep;
    locked.wait(1, std::memory_order_relaxed);  // folio_wait_bit_common
  }
}

bool Folio::TryLock() {
  uint32_t expect = 0;
  if (!locked.compare_exchange_strong(expect, 1, std::memory_order_acquire)) return false;
  LockdepAcquire(LockRank::kFolioLock, this);
  return true;
}

void Folio::Unlock() {
  locked.store(0, std::memory_order_release);
  locked.notify_all();
  LockdepRelease(LockRank::kFolioLock, this);
}

// ====================================================================== PageCacheTree

PageCacheTree::~PageCacheTree() {
  for (auto& s : root_.slot)
    if (void* c = s.load(std::memory_order_relaxed)) FreeNode(static_cast<Node*>(c), 1);
}

void PageCacheTree::FreeNode(Node* n, int level) {
  if (level < kLevels - 1)
    for (auto& s : n->slot)
      if (void* c = s.load(std::memory_order_relaxed)) FreeNode(static_cast<Node*>(c), level + 1);
  delete n;
}

Folio* PageCacheTree::Load(uint64_t index) const {
  const Node* n = &root_;
  for (int level = 0; level < kLevels - 1; level++) {
    const int shift = (kLevels - 1 - level) * kBits;
    n = static_cast<const Node*>(n->slot[(index >> shift) & (kSlots - 1)].load(std::memory_order_acquire));
    if (!n) return nullptr;
  }
  return static_cast<Folio*>(n->slot[index & (kSlots - 1)].load(std::memory_order_acquire));
}

void PageCacheTree::Store(uint64_t index, Folio* f) {
  Node* n = &root_;
  for (int level = 0; level < kLevels - 1; level++) {
    const int shift = (kLevels - 1 - level) * kBits;
    auto& slot = n->slot[(index >> shift) & (kSlots - 1)];
    Node* c = static_cast<Node*>(slot.load(std::memory_order_relaxed));
    if (!c) {
      if (!f) return;  // erasing what is not there
      c = new Node;
      nodes_.fetch_add(1, std::memory_order_relaxed);
      slot.store(c, std::memory_order_release);  // publish the zeroed node
    }
    n = c;
  }
  n->slot[index & (kSlots - 1)].store(f, std::memory_order_release);
}

Folio* PageCacheTree::FindIn(const Node* n, int level, uint64_t base, uint64_t* index, uint64_t end) const {
  const int shift = (kLevels - 1 - level) * kBits;
  const uint64_t span = 1ull << shift;
  for (uint64_t i = (*index > base ? (*index - base) >> shift : 0); i < kSlots; i++) {
    const uint64_t cbase = base + i * span;
    if (cbase >= end) return nullptr;
    void* c = n->slot[i].load(std::memory_order_acquire);
    if (!c) continue;
    if (level == kLevels - 1) {
      if (cbase < *index) continue;
      *index = cbase;
      return static_cast<Folio*>(c);
    }
    if (Folio* f = FindIn(static_cast<const Node*>(c), level + 1, cbase, index, end)) return f;
  }
  return nullptr;
}

Folio* PageCacheTree::Find(uint64_t* index, uint64_t end) const {
  if (*index >= end) return nullptr;
  return FindIn(&root_, 0, 0, index, end);
}

// ====================================================================== File

File::File(FrameAllocator& f, uint64_t i, uint32_t maj, uint32_t min, std::string p, std::string name,
           int host_fd, bool writable, uint64_t size, uint64_t ra)
    : frames(f), ino(i), dev_major(maj), dev_minor(min), path(std::move(p)), maps_name(std::move(name)),
      fd(host_fd), host_writable(writable), ra_pages(ra), i_size(size) {}

File::~File() {
  // iput() of the last reference: nothing maps the file and no lookup can find it.
  uint64_t index = 0;
  std::vector<Folio*> all;
  while (Folio* f = pages.Find(&index, ~0ull)) {
    all.push_back(f);
    index++;
  }
  int failed = 0;
  const uint64_t size = i_size.load(std::memory_order_relaxed);
  for (Folio* f : all) {
    if (fd >= 0 && f->dirty.load(std::memory_order_relaxed) && f->index * kPageSize < size) {
      const uint64_t off = f->index * kPageSize;
      const uint64_t n = std::min<uint64_t>(kPageSize, size - off);
      if (pwrite(fd, f->frame, n, static_cast<off_t>(off)) != static_cast<ssize_t>(n)) failed++;
    }
    // After a grace period: the last VMA let go of the file right after its zap, and an
    // access that read one of its PTEs before may still be copying to or from the frame.
    FreeFolioDeferred(f);
  }
  if (!shmem()) AccountCleaned(nrdirty.load(std::memory_order_relaxed));
  AccountWriteback(-static_cast<int64_t>(nrwriteback.load(std::memory_order_relaxed)));  // 0: writers hold a reference
  if (failed)
    fprintf(stderr, "vmspace: %d dirty pages of %s could not be written back at its last close: %s\n",
            failed, maps_name.c_str(), strerror(errno));
  if (fd >= 0) close(fd);
}

Folio* File::AddLockedFolio(uint64_t index, int* err) {
  *err = 0;
  if (auto hook = g_add_folio_test_hook.load(std::memory_order_relaxed)) hook(this, index);
  // mem_cgroup_charge() first: a tenant at its limit gets ENOMEM (memcg OOM) before
  // the daemon's budget is touched.
  MemCgroup* cg = ActiveMemcg();
  if (cg && !cg->TryCharge(kPageSize)) {
    *err = ENOMEM;
    return nullptr;
  }
  void* frame = frames.Alloc(MemKind::kPageCache);
  if (!frame) {
    if (cg) cg->Uncharge(kPageSize);
    *err = ENOMEM;
    return nullptr;
  }
  auto* f = new Folio(frames, frame, index);
  if (cg) f->memcg = cg->shared_from_this();
  f->Lock();
  {
    MutexLock l(i_pages_lock);  // filemap_add_folio
    if (!pages.Load(index)) {
      pages.Store(index, f);
      nrpages.fetch_add(1, std::memory_order_relaxed);
      return f;
    }
  }
  f->Unlock();
  UnchargeFolio(f);
  frames.Free(frame, MemKind::kPageCache);
  delete f;
  return nullptr;
}

Folio* File::GetLockedFolio(uint64_t index, bool* major, int* err) {
  *major = false;
  *err = 0;
  for (;;) {
    Folio* f;
    {
      // Lock inside the RCU section: the folio cannot be freed while we wait (no
      // reference count is needed), and no folio-lock holder waits for a grace period
      // or allocates a frame (LOCKING.md), so waiting here cannot hold one up.
      RcuReadGuard g;
      f = pages.Load(index);
      if (f) {
        f->Lock();
        // Checked before the section ends: a folio truncate removed while we waited is
        // freed after the grace period this section holds up. One not removed stays
        // while we hold its lock (truncate removes under it).
        if (f->removed.load(std::memory_order_acquire)) {
          f->Unlock();
          continue;
        }
      }
    }
    if (f) {
      if (f->uptodate.load(std::memory_order_acquire)) return f;
      // A reader of the backing store failed and left it not uptodate: retry the read.
      return ReadFolioLocked(f, major, err) ? f : nullptr;
    }
    // filemap_create_folio(): added and read in under invalidate_lock, so a truncate or
    // hole punch either finds the page (and removes it) or runs before we add it.
    ReadGuard il(invalidate_lock);
    f = AddLockedFolio(index, err);  // outside RCU: the allocator may wait for frees
    if (!f) {
      if (*err) return nullptr;
      continue;  // somebody else added it first
    }
    return ReadFolioLocked(f, major, err) ? f : nullptr;
  }
}

bool File::ReadFolioLocked(Folio* f, bool* major, int* err) {
  if (fd >= 0) {
    const ssize_t n = pread(fd, f->frame, kPageSize, static_cast<off_t>(f->index * kPageSize));
    if (n < 0) {
      f->Unlock();
      *err = EIO;
      return false;
    }
    *major = true;  // I/O was started: pgmajfault (counted by the fault path)
  }
  f->uptodate.store(true, std::memory_order_release);
  return true;
}

bool File::ReadAround(uint64_t index, uint64_t vm_flags, uint64_t vma_first, uint64_t vma_end) {
  if (shmem()) return false;
  constexpr uint64_t kPmdPages = kPmdSize / kPageSize;
  uint64_t start = index > ra_pages / 2 ? index - ra_pages / 2 : 0;  // mmap read-around
  uint64_t end = start + std::max<uint64_t>(ra_pages, 1);
  if (vm_flags & VM_HUGEPAGE) {  // the THP readahead, even with readahead off
    start = index & ~(kPmdPages - 1);
    end = start + ((vm_flags & VM_RAND_READ) ? kPmdPages : 2 * kPmdPages);
  } else if ((vm_flags & (VM_RAND_READ | VM_EXEC)) == VM_RAND_READ || !ra_pages) {
    start = index;  // no readahead: the filemap_fault read of the page itself
    end = index + 1;
  } else if (vm_flags & VM_SEQ_READ) {  // page_cache_sync_ra(ra_pages)
    start = index;
    end = index + ra_pages;
  } else if (vm_flags & VM_EXEC) {  // exec text: forward, within the VMA
    start = std::max(index, vma_first);
    end = std::min(start + ra_pages, vma_end);
  }
  bool read_target = false;
  ReadGuard il(invalidate_lock);  // page_cache_ra_unbounded: filemap_invalidate_lock_shared
  end = std::min(end, size_pages());
  for (uint64_t i = start; i < end; i++) {  // page_cache_ra_unbounded: skip what is cached
    {
      RcuReadGuard g;
      if (pages.Load(i)) continue;
    }
    int err = 0;
    Folio* f = AddLockedFolio(i, &err);
    if (!f) {
      if (err) break;
      continue;
    }
    // A failed read leaves the folio not uptodate: the fault's own lookup retries it.
    if (pread(fd, f->frame, kPageSize, static_cast<off_t>(i * kPageSize)) >= 0) {
      f->uptodate.store(true, std::memory_order_release);
      read_target |= i == index;
    }
    f->Unlock();
  }
  return read_target;
}

bool File::MarkDirty(Folio* f) {
  if (f->dirty.exchange(true, std::memory_order_acq_rel)) return false;
  if (!shmem()) {  // shmem has no backing store to write to: the flag only
    nrdirty.fetch_add(1, std::memory_order_relaxed);
    AccountDirtied(*this);
  }
  return true;
}

bool File::ClearDirty(Folio* f) {
  if (!f->dirty.exchange(false, std::memory_order_acq_rel)) return false;
  if (!shmem()) {
    nrdirty.fetch_sub(1, std::memory_order_relaxed);
    AccountCleaned(1);
  }
  return true;
}

void File::StartWriteback(Folio* f) {
  MutexLock l(i_pages_lock);
  if (f->writeback.exchange(true, std::memory_order_relaxed)) return;
  nrwriteback.fetch_add(1, std::memory_order_relaxed);
  AccountWriteback(1);
}

void File::EndWriteback(Folio* f) {
  MutexLock l(i_pages_lock);
  EndWritebackLocked(f);
}

void File::EndWritebackLocked(Folio* f) {
  if (!f->writeback.exchange(false, std::memory_order_relaxed)) return;
  nrwriteback.fetch_sub(1, std::memory_order_relaxed);
  AccountWriteback(-1);
  writeback_done.notify_all();
}

std::vector<uint64_t> File::IndexesWhere(uint64_t first, uint64_t last,
                                         const std::function<bool(const Folio&)>& pred) const {
  std::vector<uint64_t> out;
  RcuReadGuard g;
  uint64_t index = first;
  while (Folio* f = pages.Find(&index, last == ~0ull ? ~0ull : last + 1)) {
    if (pred(*f)) out.push_back(index);
    if (index == ~0ull) break;
    index++;
  }
  return out;
}

void File::WaitOnWriteback(uint64_t first, uint64_t last) {
  if (nrwriteback.load(std::memory_order_acquire) == 0) return;
  const std::vector<uint64_t> busy =
      IndexesWhere(first, last, [](const Folio& f) { return f.writeback.load(std::memory_order_relaxed); });
  for (uint64_t index : busy) {
    MutexLock l(i_pages_lock);
    // PG_writeback changes only under i_pages_lock, and a page leaves the cache under
    // it too: checked under the lock, a clear cannot be missed. The RCU section is
    // only around the look-up (the writer waits for grace periods before its I/O).
    auto under = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(i_pages_lock) {
      RcuReadGuard g;
      const Folio* f = pages.Load(index);
      return f && f->writeback.load(std::memory_order_relaxed);
    };
    while (under()) {
      RcuSleep sleep;
      writeback_done.wait(i_pages_lock);
    }
  }
}

int File::WriteAndWait(uint64_t first, uint64_t last) {
  const int ret = WriteRange(first, last);
  WaitOnWriteback(first, last);
  return ret;
}

int File::WriteRange(uint64_t first, uint64_t last) {
  if (shmem() || !host_writable) return 0;
  // 1. Take the dirty bit off each dirty page (folio_clear_dirty_for_io) and mark it
  //    under writeback (folio_start_writeback), under its lock.
  const std::vector<uint64_t> todo =
      IndexesWhere(first, last, [](const Folio& f) { return f.dirty.load(std::memory_order_acquire); });
  if (todo.empty()) return 0;
  std::vector<uint64_t> cleaned;
  for (uint64_t index : todo) {
    RcuReadGuard g;
    Folio* f = pages.Load(index);
    if (!f) continue;
    f->Lock();
    if (!f->removed.load(std::memory_order_relaxed) && ClearDirty(f)) {
      StartWriteback(f);
      cleaned.push_back(index);
    }
    f->Unlock();
  }
  if (cleaned.empty()) return 0;
  // 2. page_mkclean(): write-protect them in every shared mapping, so the next store
  //    faults and dirties the page again.
  {
    ReadGuard l(i_mmap_rwsem);
    for (const auto& [pgoff, v] : i_mmap) {
      // Private VMAs never map the cache writable: nothing to clean there, but vm_flags
      // are not ours to read (mprotect changes them without i_mmap_rwsem).
      const uint64_t vend = pgoff + v->pages();
      for (uint64_t index : cleaned) {
        if (index < pgoff || index >= vend) continue;
        PageMkcleanOne(*v->vm_mm, v, v->vm_start + ((index - pgoff) << kPageShift));
      }
    }
  }
  // 3. The TLB flush: stores through the old writable PTEs (lockless accessors in RCU
  //    sections) are done after a grace period.
  SynchronizeRcu();
  // 4. Write each page out under its lock (truncate removes it under the same lock and
  //    shrinks the host file only after: a write never re-extends a truncated file),
  //    then end its writeback (a page truncated meanwhile had it ended by the removal).
  int ret = 0;
  std::vector<uint8_t> buf(kPageSize);
  for (uint64_t index : cleaned) {
    RcuReadGuard g;
    Folio* f = pages.Load(index);
    if (!f) continue;
    f->Lock();
    const uint64_t off = index * kPageSize;
    const uint64_t size = i_size.load(std::memory_order_acquire);
    if (!f->removed.load(std::memory_order_relaxed) && off < size) {
      // A bounce copy: a store racing with it (through a PTE made writable again by a
      // new fault, which re-dirtied the page) is written next time.
      CopyFrameRacy(buf.data(), f->frame);
      const uint64_t n = std::min<uint64_t>(kPageSize, size - off);
      if (pwrite(fd, buf.data(), n, static_cast<off_t>(off)) != static_cast<ssize_t>(n)) {
        MarkDirty(f);  // keep it: the data is only here (mapping_set_error)
        wb_err.fetch_add(1, std::memory_order_acq_rel);
        ret = EIO;
      }
    }
    if (!f->removed.load(std::memory_order_relaxed)) EndWriteback(f);
    f->Unlock();
  }
  return ret;
}

// ====================================================================== fault-around

uint64_t DoFaultAround(MmStruct& mm, VmFault& vmf, PageTable::PteTable* t) {
  // do_fault_around() (mm/memory.c, 6.4+ form): the window of fault_around_bytes,
  // naturally aligned in PTE indexes, clamped to the VMA and to this PTE table.
  Vma* v = vmf.vma;
  File* file = v->file();
  const uint64_t nr = mm.opts.fault_around_bytes >> kPageShift;
  const uint64_t pte_off = static_cast<uint64_t>(PageTable::PteIndex(vmf.address));
  const uint64_t vma_off = (vmf.address - v->vm_start) >> kPageShift;
  const uint64_t from = std::max(pte_off & ~(nr - 1), pte_off - std::min(pte_off, vma_off));
  const uint64_t to = std::min({from + nr, static_cast<uint64_t>(PageTable::kEntries), pte_off + v->pages() - vma_off});
  const uint64_t pgoff = v->vm_pgoff + vma_off;
  const uint64_t first = pgoff - (pte_off - from);
  const bool map_writable = (v->vm_flags & VM_SHARED) && (v->vm_flags & VM_WRITE) && file->shmem();
  const uint64_t bits = PteBitsFor(*v, !map_writable) | kPteFile;
  // filemap_map_pages(): under RCU, only pages cached, uptodate, not locked (trylock),
  // below i_size, into empty PTEs; never I/O.
  uint64_t mapped = 0;
  RcuReadGuard g;
  for (uint64_t k = 0; k < to - from; k++) {
    const uint64_t index = first + k;
    Folio* f = file->pages.Load(index);
    if (!f || !f->uptodate.load(std::memory_order_acquire) || !f->TryLock()) continue;
    if (!f->removed.load(std::memory_order_acquire) && index < file->size_pages()) {
      const int i = static_cast<int>(from + k);
      SpinGuard l(t->ptl);
      if (t->Get(i) == 0) {  // pte_none: not a guard marker either
        t->Set(i, MakePte(f->frame, bits));
        mapped++;
      }
    }
    f->Unlock();
  }
  if (mapped) {
    mm.AddRss(file->shmem() ? MM_SHMEMPAGES : MM_FILEPAGES, static_cast<int64_t>(mapped));
    CountEvent(Event::kFaultAroundPages, mapped);
  }
  return mapped;
}

std::shared_ptr<OpenFile> NewShmemFile(FrameAllocator& frames, const std::string& maps_name, uint64_t size) {
  auto h = std::make_shared<OpenFile>();
  // shmem inodes live on the internal shm mount: device 00:01.
  h->file = std::make_shared<File>(frames, g_next_shmem_ino.fetch_add(1, std::memory_order_relaxed), 0, 1, "",
                                   maps_name, -1, false, size);
  h->readable = true;
  h->writable = true;
  h->file->seals.store(F_SEAL_SEAL, std::memory_order_relaxed);  // shmem_get_inode: no sealing unless asked
  return h;
}

}  // namespace vmspace
