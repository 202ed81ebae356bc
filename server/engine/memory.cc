// SPDX-License-Identifier: Apache-2.0
// The page-fault path, the zap of PTE ranges, and accesses of the space's memory
// (mm/memory.c handle_mm_fault, do_anonymous_page, do_wp_page, do_shared_fault,
// zap_pte_range; arch/x86/mm/fault.c do_user_addr_fault, access_error; Linux 6.18).
//
// An access is what a CPU does: look at the PTE (the TLB-hit path, under RCU only); if
// it does not allow the access, take the fault (under a VMA read lock or mmap_lock),
// then execute the access again. The access is only ever performed from the PTE, never
// assumed after a fault: a racing fault may have changed it in between (a concurrent
// read installing the zero page under this write, a zap), and the re-executed access
// then faults again, as on the hardware.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "engine/cancel.h"
#include "engine/per_thread.h"
#include "engine/stats.h"
#include "filemap.h"
#include "madvise.h"
#include "mm.h"
#include "memory.h"
#include "mmap.h"
#include "mmap_lock.h"
#include "rmap.h"
#include "vma.h"
#include "vma_lock.h"
#include "sync/lock_timing.h"

namespace vmspace {

namespace {

constexpr int kSiKernel = 0x80;  // SI_KERNEL: #GP on a non-canonical address

/// force_sig_fault(): `r` (its path, faults and vm_fault kept) ends in `sig`, kSigsegv
/// or kSigbus, with si_code `code` at si_addr `addr`, counted (fault_segv_maperr for
/// SEGV_MAPERR and SI_KERNEL, fault_segv_accerr, fault_sigbus). The one place an
/// access's signal is built.
FaultResult ForceSigFault(FaultResult r, FaultOutcome sig, int code, uint64_t addr) {
  if (sig == FaultOutcome::kSigbus) CountEvent(Event::kFaultSigbus);
  else CountEvent(code == kSegvAccerr ? Event::kFaultSegvAccerr : Event::kFaultSegvMaperr);
  r.outcome = sig;
  r.sig_code = code;
  r.sig_addr = addr;
  return r;
}

/// bad_area(): no VMA covers addr.
FaultResult MapErr(uint64_t addr, LockPath path) {
  FaultResult r;
  r.path = path;
  return ForceSigFault(r, FaultOutcome::kSigsegv, kSegvMaperr, addr);
}

/// The result of one handle_mm_fault that answered `ret` for addr under `path`
/// (mm_fault_error: VM_FAULT_SIGSEGV -> bad_area_nosemaphore, SEGV_MAPERR;
/// VM_FAULT_SIGBUS -> do_sigbus, BUS_ADRERR; VM_FAULT_OOM). A fetch from a
/// non-executable VMA (`nx`) was handled as a read and ends SEGV_ACCERR. vm_fault is
/// `ret`, the engine's bits included; VM_FAULT_RETRY: nothing was done.
FaultResult MmFaultResult(vm_fault_t ret, uint64_t addr, LockPath path, bool nx) {
  FaultResult r;
  r.path = path;
  r.vm_fault = ret;
  if (ret & VM_FAULT_RETRY) return r;
  if (ret & VM_FAULT_SIGSEGV) return ForceSigFault(r, FaultOutcome::kSigsegv, kSegvMaperr, addr);
  if (ret & VM_FAULT_SIGBUS) return ForceSigFault(r, FaultOutcome::kSigbus, kBusAdrerr, addr);
  if (ret & VM_FAULT_OOM) {
    r.outcome = FaultOutcome::kOom;
    return r;
  }
  const bool handled = !(ret & VM_FAULT_SPURIOUS);
  r.faults = handled ? 1 : 0;
  if (nx) return ForceSigFault(r, FaultOutcome::kSigsegv, kSegvAccerr, addr);
  r.outcome = !handled ? FaultOutcome::kNone : (ret & VM_FAULT_MAJOR) ? FaultOutcome::kMajor : FaultOutcome::kMinor;
  return r;
}

}  // namespace

// ====================================================================== zap

namespace {
/// The RSS counter of v's page-cache pages.
MmCounter FileCounter(const Vma* v) { return v->file()->shmem() ? MM_SHMEMPAGES : MM_FILEPAGES; }
}  // namespace

void ZapPteRange(MmStruct& mm, Vma* v, uint64_t start, uint64_t end, std::vector<void*>& pages) {
  void* zero = FrameAllocator::ZeroPage();
  mm.pt.ForEachTable(start, end, [&](PageTable::PteTable& t, int i0, int i1, uint64_t) {
    int64_t anon = 0, file = 0;
    {
      SpinGuard l(t.ptl);  // zap_pte_range: one PTE lock for the run
      for (int i = i0; i < i1; i++) {
        if (!(t.Get(i) & kPtePresent)) continue;
        const uint64_t old = t.Clear(i);  // the value we free is the one we cleared
        void* f = PteFrame(old);
        if (old & kPteFile) {
          file++;  // the page stays in its page cache
        } else if (f != zero) {
          // A frame fork shared: drop this mapping; the last one frees it, after a grace
          // period (another space's thread may still be accessing it).
          if (!(old & kPteSharedAnon)) pages.push_back(f);
          else if (PageRemoveAnonRmap(f)) FreeFrameAfterGracePeriod(mm.frames, f);
          anon++;
        }
      }
    }
    if (anon) mm.AddRss(MM_ANONPAGES, -anon);
    if (file) mm.AddRss(FileCounter(v), -file);
  });
}

void ZapGuardMarkers(MmStruct& mm, uint64_t start, uint64_t end) {
  mm.pt.ForEachTable(start, end, [&](PageTable::PteTable& t, int i0, int i1, uint64_t) {
    SpinGuard l(t.ptl);
    for (int i = i0; i < i1; i++)
      if (IsGuardMarker(t.Get(i))) t.Clear(i);
  });
}

bool FreeZappedPagesIfUnused(MmStruct& mm, std::vector<void*>& pages) {
  if (pages.empty() || !mm.tlb_users.Idle()) return false;
  mm.frames.FreeBatch(pages, ThreadShard());
  return true;
}

// ====================================================================== faults

namespace {
/// do_wp_page() of a private anonymous frame fork shared (kPteSharedAnon): reused
/// (wp_page_reuse) if this PTE is its only mapping left (wp_can_reuse_anon_folio: the
/// map count is 1), else copied into a new frame (wp_page_copy: __wp_page_copy_user,
/// then under the PTE lock, if the PTE is unchanged, ptep_clear_flush and the new PTE,
/// then folio_remove_rmap_pte of the old frame, freed if that was its last mapping).
vm_fault_t DoWpAnonShared(MmStruct& mm, Vma* v, PageTable::PteTable* t, int i, uint64_t orig) {
  void* old = PteFrame(orig);
  if (PageMapcount(old) == 1) {
    SpinGuard l(t->ptl);
    if (t->Get(i) == orig && PageMapcount(old) == 1)
      t->Set(i, MakePte(old, PteBitsFor(*v, false) | kPteSharedAnon));
    CountEvent(Event::kFaultWpReuse);
    return 0;
  }
  void* copy = mm.frames.Alloc();
  if (!copy) {
    CountEvent(Event::kFaultOom);
    return VM_FAULT_OOM;
  }
  CopyFrameRacy(copy, old);
  bool used = false;
  {
    SpinGuard l(t->ptl);
    if (t->Get(i) == orig) {
      t->Clear(i);  // ptep_clear_flush
      t->Set(i, MakePte(copy, PteBitsFor(*v, false)));
      used = true;
    }
  }
  if (!used) {
    mm.frames.Free(copy);
    return VM_FAULT_SPURIOUS;
  }
  if (PageRemoveAnonRmap(old)) FreeFrameAfterGracePeriod(mm.frames, old);
  CountEvent(Event::kFaultWpCopy);
  return 0;
}
}  // namespace

vm_fault_t HandleMmFault(MmStruct& mm, VmFault& vmf) {
  Vma* v = vmf.vma;
  // VM_FAULT_RETRY before anything is done (not counted as pgfault: mm_account_fault
  // skips incomplete faults). vma_lock=anon: the Linux 6.5 form, where
  // lock_vma_under_rcu takes file VMAs but do_fault answers RETRY ("mm: allow per-VMA
  // locks on file-backed VMAs"). vma_lock=around (6.6): do_cow_fault and
  // do_shared_fault (and wp_page_shared's page_mkwrite) answer RETRY under the VMA
  // lock, and do_read_fault does after a fault-around that did not map the page
  // (DoFileFault). vma_lock=all (6.7+): file faults run under the VMA lock, except a
  // copy-on-write that needs an anon_vma first (vmf_anon_prepare).
  const bool write = vmf.access == AccessType::kWrite;
  if (v->vm_file && vmf.vma_locked) {
    const VmaLockMode mode = mm.opts.profile.vma_lock;
    Event why = Event::kCount;
    if (mode == VmaLockMode::kAnon || (mode == VmaLockMode::kAround && write)) why = Event::kVmaLockRetryFile;
    else if (write && !(v->vm_flags & VM_SHARED) && !v->anon()) why = Event::kVmaLockRetryAnonVma;
    if (why != Event::kCount) {
      CountEvent(why);
      return VM_FAULT_RETRY;
    }
  }
  PageTable::PteTable* t = vmf.pte_table ? vmf.pte_table : mm.pt.Lookup(vmf.address, true);
  if (!t) {
    CountEvent(Event::kPgfault);
    CountEvent(Event::kFaultOom);
    return VM_FAULT_OOM;
  }
  const int i = PageTable::PteIndex(vmf.address);
  const uint64_t orig = t->Get(i);  // vmf->orig_pte; every change re-checks it (pte_same)
  if (IsGuardMarker(orig)) {  // handle_pte_marker(): a guard region (MADV_GUARD_INSTALL)
    CountEvent(Event::kPgfault);
    return VM_FAULT_SIGSEGV;
  }
  if (v->vm_file) {
    const vm_fault_t ret = DoFileFault(mm, vmf, t, i, orig);
    if (!(ret & VM_FAULT_RETRY)) CountEvent(Event::kPgfault);  // a late VM_FAULT_RETRY is not counted either
    return ret;
  }
  CountEvent(Event::kPgfault);
  void* zero = FrameAllocator::ZeroPage();

  // Private anonymous.
  auto anon_prepare = [&] {  // vmf_anon_prepare()
    if (v->anon()) return;
    // lock_vma_under_rcu only takes anonymous VMAs that already have an anon_vma, so
    // only the mmap_lock path gets here.
    VMSPACE_LOCK_ASSERT(!vmf.vma_locked, "anon_vma_prepare under the VMA lock");
    mm.mmap_lock.AssertHeld();
    AnonVmaPrepareLocked(mm, v);
  };
  // Installs a new frame in place of `expect` (none or the zero page) if the PTE still
  // holds it; frees the frame otherwise (somebody else handled this fault first).
  auto install_frame = [&](uint64_t expect) -> vm_fault_t {
    anon_prepare();
    void* f = mm.frames.Alloc();
    if (!f) {
      CountEvent(Event::kFaultOom);
      return VM_FAULT_OOM;
    }
    bool used = false;
    {
      SpinGuard l(t->ptl);
      if (t->Get(i) == expect) {
        t->Set(i, MakePte(f, PteBitsFor(*v, false)));
        used = true;
      }
    }
    if (used) mm.AddRss(MM_ANONPAGES, 1);
    else mm.frames.Free(f);
    return vm_fault_t{0};
  };

  if (!(orig & kPtePresent)) {  // do_anonymous_page
    if (!write && mm.opts.zero_page) {
      SpinGuard l(t->ptl);
      if (!(t->Get(i) & kPtePresent)) t->Set(i, MakePte(zero, PteBitsFor(*v, true)));
      CountEvent(Event::kFaultAnonZero);
      return 0;
    }
    const vm_fault_t ret = install_frame(orig);
    if (ret == 0) CountEvent(Event::kFaultAnonWrite);
    return ret;
  }
  if (PteAllows(orig, vmf.access)) return VM_FAULT_SPURIOUS;
  if (write) {  // do_wp_page
    if (PteFrame(orig) == zero) {
      const vm_fault_t ret = install_frame(orig);  // zero-page COW: the new frame is already zero
      if (ret == 0) CountEvent(Event::kFaultWpZero);
      return ret;
    }
    if (orig & kPteSharedAnon) return DoWpAnonShared(mm, v, t, i, orig);
    SpinGuard l(t->ptl);
    if (t->Get(i) == orig) t->Set(i, MakePte(PteFrame(orig), PteBitsFor(*v, false)));
    CountEvent(Event::kFaultWpReuse);
    return 0;
  }
  // A read or fetch the VMA allows but the PTE's bits do not: refresh them so the
  // re-executed access succeeds (does not happen while PTE bits follow vm_flags).
  // A frame fork shared keeps its write state (and its bit).
  const bool ro = PteFrame(orig) == zero || ((orig & kPteSharedAnon) && !(orig & kPteWrite));
  SpinGuard l(t->ptl);
  if (t->Get(i) == orig) t->Set(i, MakePte(PteFrame(orig), PteBitsFor(*v, ro) | (orig & kPteSharedAnon)));
  return VM_FAULT_SPURIOUS;
}

// do_fault() for file VMAs (mm/memory.c do_read_fault, do_cow_fault, do_shared_fault,
// finish_fault; do_wp_page -> wp_page_shared / wp_page_copy for file pages;
// mm/filemap.c filemap_fault). The folio lock is held from the lookup until the PTE is
// installed, so truncate either removed the page first (we retry and see i_size) or
// zaps our PTE in its second unmap pass.
vm_fault_t DoFileFault(MmStruct& mm, VmFault& vmf, PageTable::PteTable* t, int i, uint64_t orig) {
  Vma* v = vmf.vma;
  File* file = v->file();
  const bool write = vmf.access == AccessType::kWrite;
  const bool shared = v->vm_flags & VM_SHARED;
  const Event kind = file->shmem() ? Event::kFaultShmem : Event::kFaultFile;
  const uint64_t pgoff = v->vm_pgoff + ((vmf.address - v->vm_start) >> kPageShift);
  // Shared writable shmem maps its pages writable at once; regular files track dirty
  // pages (vma_wants_writenotify: read faults map read-only, the first store faults).
  const bool map_writable = shared && (v->vm_flags & VM_WRITE) && file->shmem();
  auto oom = [] {
    CountEvent(Event::kFaultOom);
    return VM_FAULT_OOM;
  };
  // The folio at pgoff, locked, as the fault saw it mapped at `frame` (null: the PTE
  // changed under us; re-execute the access).
  auto lock_mapped = [&](void* frame) -> Folio* {
    RcuReadGuard g;
    Folio* f = file->pages.Load(pgoff);
    if (!f || f->frame != frame) return nullptr;
    f->Lock();
    if (f->removed.load(std::memory_order_acquire)) {
      f->Unlock();
      return nullptr;
    }
    return f;
  };
  // A private copy (wp_page_copy / do_cow_fault) needs the anon_vma; the VMA-lock path
  // never gets here without one (HandleMmFault answered RETRY).
  auto cow_prepare = [&] {
    if (v->anon()) return;
    VMSPACE_LOCK_ASSERT(!vmf.vma_locked, "anon_vma_prepare under the VMA lock");
    mm.mmap_lock.AssertHeld();
    AnonVmaPrepareLocked(mm, v);
  };

  if (orig & kPtePresent) {
    if (PteAllows(orig, vmf.access)) return VM_FAULT_SPURIOUS;
    void* frame = PteFrame(orig);
    if (!write) {  // a read the bits did not allow: refresh them, keeping write state
      SpinGuard l(t->ptl);
      if (t->Get(i) == orig)
        t->Set(i, MakePte(frame, PteBitsFor(*v, !(orig & kPteWrite)) | (orig & (kPteFile | kPteSharedAnon))));
      return VM_FAULT_SPURIOUS;
    }
    if (orig & kPteSharedAnon) return DoWpAnonShared(mm, v, t, i, orig);  // a private copy fork shared
    if (!(orig & kPteFile)) {  // this VMA's own private copy: do_wp_page reuse
      SpinGuard l(t->ptl);
      if (t->Get(i) == orig) t->Set(i, MakePte(frame, PteBitsFor(*v, false)));
      CountEvent(Event::kFaultWpReuse);
      return 0;
    }
    if (shared) {  // wp_page_shared: the page becomes dirty, the PTE writable
      Folio* f = lock_mapped(frame);
      if (!f) return VM_FAULT_SPURIOUS;
      const bool dirtied = file->MarkDirty(f);
      {
        SpinGuard l(t->ptl);
        if (t->Get(i) == orig) t->Set(i, MakePte(frame, PteBitsFor(*v, false) | kPteFile));
      }
      f->Unlock();
      CountEvent(kind);
      return dirtied ? VM_FAULT_DIRTY_SHARED : 0;
    }
    // wp_page_copy of a page-cache page mapped read-only in a private VMA.
    cow_prepare();
    void* copy = mm.frames.Alloc();  // before the folio lock (LOCKING.md)
    if (!copy) return oom();
    Folio* f = lock_mapped(frame);
    bool used = false;
    if (f) {
      CopyFrameRacy(copy, f->frame);
      SpinGuard l(t->ptl);
      if (t->Get(i) == orig) {
        t->Set(i, MakePte(copy, PteBitsFor(*v, false)));
        used = true;
      }
    }
    if (f) f->Unlock();
    if (used) {
      mm.AddRss(MM_ANONPAGES, 1);
      mm.AddRss(FileCounter(v), -1);
      CountEvent(Event::kFaultFileCow);
      return 0;
    }
    mm.frames.Free(copy);
    return VM_FAULT_SPURIOUS;
  }

  // do_fault(): no PTE yet.
  const bool cow = write && !shared;
  // do_cow_fault: vmf_anon_prepare() comes before __do_fault(), so a write fault that
  // then finds the page beyond EOF (SIGBUS) has prepared the VMA's anon_vma anyway.
  if (cow) cow_prepare();
  if (pgoff >= file->size_pages()) return VM_FAULT_SIGBUS;  // filemap_fault: beyond EOF
  if (!write && mm.opts.fault_around_bytes > kPageSize) {  // do_read_fault -> do_fault_around
    DoFaultAround(mm, vmf, t);
    if (t->Get(i) & kPtePresent) {
      CountEvent(kind);
      return VM_FAULT_NOPAGE;  // the page was cached
    }
  }
  // vma_lock=around (Linux 6.6 do_read_fault): under the VMA lock, only fault-around;
  // ->fault (a miss, or fault-around off) needs mmap_lock: VM_FAULT_RETRY.
  if (vmf.vma_locked && mm.opts.profile.vma_lock == VmaLockMode::kAround) {
    CountEvent(Event::kVmaLockRetryFile);
    return VM_FAULT_RETRY;
  }
  // filemap_fault(): a miss on a host file reads the read-around window in
  // (do_sync_mmap_readahead), drops the lock and answers VM_FAULT_RETRY; the retry
  // (FAULT_FLAG_TRIED, counted as one major fault) finds the pages cached, and for a
  // read maps the neighbours by fault-around. Modelled in one pass under the same lock.
  bool major = false;
  bool cached;
  {
    RcuReadGuard g;
    cached = file->pages.Load(pgoff) != nullptr;
  }
  if (!cached && file->ReadAround(pgoff, v->vm_flags, v->vm_pgoff, v->vm_pgoff + v->pages())) {
    major = true;
    if (!write && mm.opts.fault_around_bytes > kPageSize) {
      DoFaultAround(mm, vmf, t);
      if (t->Get(i) & kPtePresent) {
        CountEvent(Event::kPgmajfault);
        CountEvent(kind);
        return VM_FAULT_MAJOR | VM_FAULT_NOPAGE;
      }
    }
  }
  void* copy = nullptr;
  if (cow) {  // do_cow_fault: the copy first (folio_prealloc)
    copy = mm.frames.Alloc();
    if (!copy) return oom();
  }
  bool read_in = false;
  int err = 0;
  Folio* f = file->GetLockedFolio(pgoff, &read_in, &err);
  if (!f) {
    if (copy) mm.frames.Free(copy);
    return err == ENOMEM ? oom() : VM_FAULT_SIGBUS;
  }
  major |= read_in;
  if (major) CountEvent(Event::kPgmajfault);
  if (pgoff >= file->size_pages()) {  // truncated while we read it in
    f->Unlock();
    if (copy) mm.frames.Free(copy);
    return VM_FAULT_SIGBUS;
  }
  if (auto hook = g_file_fault_test_hook.load(std::memory_order_relaxed)) hook(&mm, vmf.address);
  if (copy) CopyFrameRacy(copy, f->frame);
  const bool dirtied = write && shared && file->MarkDirty(f);
  bool installed = false;
  {
    SpinGuard l(t->ptl);  // finish_fault
    if (!(t->Get(i) & kPtePresent)) {
      if (copy) t->Set(i, MakePte(copy, PteBitsFor(*v, false)));
      else t->Set(i, MakePte(f->frame, PteBitsFor(*v, !(write || map_writable)) | kPteFile));
      installed = true;
    }
  }
  f->Unlock();
  if (installed) mm.AddRss(copy ? MM_ANONPAGES : FileCounter(v), 1);
  else if (copy) mm.frames.Free(copy);
  CountEvent(cow ? Event::kFaultFileCow : kind);
  return (major ? vm_fault_t{VM_FAULT_MAJOR} : 0) | (dirtied ? VM_FAULT_DIRTY_SHARED : 0);
}

FaultResult FaultInVma(MmStruct& mm, Vma* v, uint64_t addr, AccessType acc, bool vma_locked) {
  const LockPath path = vma_locked ? LockPath::kVmaLock : LockPath::kMmapLock;
  // access_error() (arch/x86/mm/fault.c)
  PageTable::PteTable* t = mm.pt.Lookup(addr, false);
  const uint64_t cur = t ? t->Get(PageTable::PteIndex(addr)) : 0;
  const bool present = cur & kPtePresent;
  bool bad;
  if (acc == AccessType::kWrite) {
    bad = !(v->vm_flags & VM_WRITE);
  } else if (present && !PteAllows(cur, acc) &&
             !(acc == AccessType::kExec ? (v->vm_flags & VM_EXEC) : (v->vm_flags & VM_ACCESS_FLAGS))) {
    bad = true;  // read/exec of a present page the VMA does not allow: X86_PF_PROT
  } else {
    bad = !(v->vm_flags & VM_ACCESS_FLAGS);
  }
  if (bad) {  // bad_area_access_error()
    FaultResult r;
    r.path = path;
    return ForceSigFault(r, FaultOutcome::kSigsegv, kSegvAccerr, addr);
  }
  // An instruction fetch from a non-executable VMA first faults the page in (as a
  // read), then takes the NX protection fault.
  const bool nx = acc == AccessType::kExec && !(v->vm_flags & VM_EXEC);
  VmFault vmf{v, addr, nx ? AccessType::kRead : acc, vma_locked};
  vmf.pte_table = t;
  const vm_fault_t ret = HandleMmFault(mm, vmf);
  VMSPACE_LOCK_ASSERT(vma_locked || !(ret & VM_FAULT_RETRY), "VM_FAULT_RETRY outside the VMA-lock path");
  return MmFaultResult(ret, addr, path, nx);
}

FaultResult DoUserAddrFault(MmStruct& mm, uint64_t addr, AccessType acc) {
  lock_trace_internal::FaultTrace trace(addr, acc);
  bool retried = false;
  if (mm.opts.profile.vma_lock != VmaLockMode::kOff) {
    VmaFaultReadLock lock(mm, addr);
    if (Vma* v = lock.vma()) {
      FaultResult r = FaultInVma(mm, v, addr, acc, /*vma_locked=*/true);
      // fault_dirty_shared_page(): the PTE is installed; pin the file (get_file), drop
      // the lock, then throttle.
      std::shared_ptr<OpenFile> fpin = (r.vm_fault & VM_FAULT_DIRTY_SHARED) ? v->vm_file : nullptr;
      lock.Unlock();
      if (fpin) return FinishDirtyFault(mm, r, std::move(fpin), addr, acc);  // VMA lock dropped
      if (!(r.vm_fault & VM_FAULT_RETRY)) {
        CountEvent(Event::kVmaLockSuccess);
        return r;
      }
      // VM_FAULT_RETRY (counted by reason where it was decided): redo under mmap_lock.
      retried = true;
    }
  }
  FaultResult r = FaultUnderMmapLock(mm, addr, acc, /*tried=*/false);
  r.vma_lock_retry = retried;
  return r;
}

FaultResult FinishDirtyFault(MmStruct& mm, FaultResult r, std::shared_ptr<OpenFile> fpin, uint64_t addr,
                             AccessType acc) {
  BalanceDirtyPagesRatelimited(*fpin->file);
  fpin.reset();  // fput
  if (mm.opts.shared_fault_completion == SharedFaultCompletion::kCompleted) {
    CountEvent(Event::kFaultCompleted);
    r.vm_fault |= VM_FAULT_COMPLETED;
    return r;
  }
  // Before Linux 5.19 the only way to say "lock dropped" was VM_FAULT_RETRY: the arch
  // handler sets FAULT_FLAG_TRIED and runs handle_mm_fault again under mmap_lock; the
  // PTE is already there, so that attempt is spurious, but it is another pgfault.
  CountEvent(Event::kFaultRetryDirty);
  FaultResult r2 = FaultUnderMmapLock(mm, addr, acc, /*tried=*/true);
  if (r2.failed()) return r2;
  r2.faults = std::max(r2.faults, r.faults);  // min_flt: a RETRY is accounted once
  if (r2.outcome == FaultOutcome::kNone) r2.outcome = r.outcome;
  r2.vm_fault |= VM_FAULT_RETRY;
  return r2;
}

FaultResult FaultUnderMmapLock(MmStruct& mm, uint64_t addr, AccessType acc, bool tried) {
  mm.mmap_lock.LockRead();
  Vma* v = FindVmaLocked(mm, addr);
  if (v && v->vm_start > addr && (v->vm_flags & VM_GROWSDOWN)) {
    // lock_mm_and_find_vma(): no upgrade; drop the read lock, take the write lock to
    // expand the stack, and look the VMA up again.
    mm.mmap_lock.UnlockRead();
    MmapWriteLock(mm);
    v = FindVmaLocked(mm, addr);
    FaultResult r;
    if (v && v->vm_start > addr &&
        (!(v->vm_flags & VM_GROWSDOWN) || ExpandDownwardsLocked(mm, v, addr) != 0))
      v = nullptr;
    if (!v || v->vm_start > addr) r = MapErr(addr, LockPath::kMmapLock);
    else r = FaultInVma(mm, v, addr, acc, /*vma_locked=*/false);
    MmapWriteUnlock(mm);
    return r;
  }
  FaultResult r = (!v || v->vm_start > addr) ? MapErr(addr, LockPath::kMmapLock)
                                             : FaultInVma(mm, v, addr, acc, /*vma_locked=*/false);
  // fault_dirty_shared_page() drops the lock to throttle only on the first attempt
  // (FAULT_FLAG_ALLOW_RETRY without FAULT_FLAG_TRIED).
  std::shared_ptr<OpenFile> fpin = (!tried && (r.vm_fault & VM_FAULT_DIRTY_SHARED)) ? v->vm_file : nullptr;
  mm.mmap_lock.UnlockRead();
  if (fpin) return FinishDirtyFault(mm, r, std::move(fpin), addr, acc);
  return r;
}

namespace {

/// One access of the page holding addr: `touch(frame)` performs it on the 4 KiB frame
/// the PTE maps, under RCU (which keeps the frame and the tables alive), once the PTE
/// allows it; each time it does not, one fault is taken and the access re-executed.
/// A fault that found no frame (kOom) is retried once after FrameAllocator::Reclaim,
/// here where no lock is held (pagefault_out_of_memory: frees already queued count as
/// free memory). A retry polls the caller's stop check (CancelScope), and after
/// kMaxFaultRetries the access ends kInterrupted. `touch` nullptr: no access of the
/// frame, only a PTE that allows one (Fault).
/// Returns the faults taken and, if the access could not be done, the failing fault.
template <typename Touch>
FaultResult AccessPage(MmStruct& m, uint64_t addr, AccessType acc, Touch&& touch) {
  if (addr >= kTaskSize) {
    const bool canonical = addr < (1ull << 47) || addr >= 0xffff800000000000ull;
    return ForceSigFault(FaultResult{}, FaultOutcome::kSigsegv, canonical ? kSegvMaperr : kSiKernel,
                         canonical ? addr : 0);
  }
  FaultResult res;
  bool reclaimed = false;
  for (int tries = 0;; tries++) {
    {
      RcuReadGuard g;  // keeps the page tables alive
      if (PageTable::PteTable* t = m.pt.Lookup(addr, false)) {
        const int i = PageTable::PteIndex(addr);
        if (PteAllows(t->Get(i), acc)) {
          if constexpr (std::is_null_pointer_v<std::remove_reference_t<Touch>>) {
            return res;  // nothing to access
          } else {
            // The TLB-hit path: announced before the PTE is read again, so a zap that
            // clears it either sees us here or is seen (FreeZappedPagesIfUnused).
            const int cell = m.tlb_users.Enter();
            const uint64_t pte = t->GetSync(i);
            bool hit = PteAllows(pte, acc);
            // A store to a page given MADV_FREE makes it dirty again (the CPU sets the
            // PTE's dirty bit atomically): it is kept by ShrinkLazyFree from now on.
            if (hit && acc == AccessType::kWrite && (pte & kPteLazyFree)) {
              uint64_t expect = pte;
              hit = t->pte[i].compare_exchange_strong(expect, pte & ~kPteLazyFree, std::memory_order_seq_cst);
            }
            if (hit) {
              if (auto hook = g_access_test_hook.load(std::memory_order_relaxed)) hook(&m, addr);
              touch(static_cast<uint8_t*>(PteFrame(pte)));
            }
            m.tlb_users.Exit(cell);
            if (hit) return res;
          }
        }
      }
    }
    if (tries == kMaxFaultRetries || (tries > 0 && CancelScope::StopRequested())) {
      res.outcome = FaultOutcome::kInterrupted;
      return res;
    }
    FaultResult r = DoUserAddrFault(m, addr, acc);
    r.vm_fault &= ~kVmFaultEngineBits;  // FaultResult::vm_fault reports Linux's bits
    if (r.outcome == FaultOutcome::kOom && !reclaimed) {
      reclaimed = true;
      ShrinkLazyFree(m);  // memory pressure: MADV_FREE pages not written since go first
      m.frames.Reclaim();
      continue;
    }
    r.faults += res.faults;
    if (r.failed()) return r;
    if (r.outcome == FaultOutcome::kNone) r.outcome = res.outcome;  // keep "minor" once faulted
    res = r;
    if (auto hook = g_fault_retry_test_hook.load(std::memory_order_relaxed)) hook(&m, addr);
  }
}

}  // namespace

FaultResult FaultInPage(MmStruct& mm, uint64_t addr, AccessType acc) {
  return AccessPage(mm, addr, acc, nullptr);
}

// ====================================================================== public API

FaultResult AddressSpace::Fault(uint64_t addr, AccessType access) {
  SpaceEntry entry(*mm_);
  return FaultInPage(*mm_, addr, access);
}

AccessResult AddressSpace::Access(uint64_t addr, uint64_t len, uint64_t stride, AccessType access) {
  SpaceEntry entry(*mm_);
  AccessResult res;
  if (stride == 0) stride = 1;
  uint64_t i = 0;
  while (i < len) {
    const uint64_t a = addr + i;
    if (a < addr) break;  // wrapped
    if (i != 0 && StopAtTable(a - stride, a)) {
      res.stop.outcome = FaultOutcome::kInterrupted;
      break;
    }
    RcuQuiescentState();  // between pages, no lock held: cond_resched()
    const uint64_t page = a & kPageMask;
    // Offsets i, i+stride, ... that fall in this page: n of them, below `stop`.
    uint64_t page_end_i = (page + kPageSize) - addr;  // first offset past this page
    if (page + kPageSize < page) page_end_i = ~0ull;
    const uint64_t stop = std::min(page_end_i, len);  // > i
    const uint64_t first = i;
    const uint64_t n = (stop - 1 - first) / stride + 1;  // no overflow, whatever the stride
    FaultResult r = AccessPage(*mm_, a, access, [&](uint8_t* frame) {
      uint64_t k = first;
      if (access == AccessType::kWrite) {
        for (uint64_t t = 0; t < n; t++, k += stride)
          __atomic_store_n(frame + ((addr + k) & (kPageSize - 1)), static_cast<uint8_t>(k),
                           __ATOMIC_RELAXED);
      } else {
        uint8_t sink = 0;
        for (uint64_t t = 0; t < n; t++, k += stride)
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
    // The next offset, first + n * stride; past 2^64 the walk is over.
    if (__builtin_mul_overflow(n, stride, &i) || __builtin_add_overflow(first, i, &i)) break;
  }
  return res;
}

namespace {
/// Copies len bytes between the space at addr and a buffer, page by page, as the
/// process would (process_vm_readv/writev semantics, faulting pages in).
template <typename Copy>
CopyResult CopyPages(MmStruct& m, uint64_t addr, uint64_t len, AccessType acc, Copy&& copy) {
  CopyResult res;
  while (res.bytes < len) {
    const uint64_t a = addr + res.bytes;
    const uint64_t off = a & (kPageSize - 1);
    const uint64_t n = std::min(kPageSize - off, len - res.bytes);
    if (res.bytes != 0 && StopAtTable(a - 1, a)) {
      res.stop.outcome = FaultOutcome::kInterrupted;
      break;
    }
    RcuQuiescentState();  // between pages, no lock held: cond_resched()
    FaultResult r = AccessPage(m, a, acc, [&](uint8_t* frame) { copy(frame + off, res.bytes, n); });
    res.faults += r.faults;
    if (r.failed()) {
      res.stop = r;
      break;
    }
    res.bytes += n;
  }
  return res;
}
}  // namespace

CopyResult AddressSpace::ReadMemory(uint64_t addr, void* dst, uint64_t len) {
  SpaceEntry entry(*mm_);
  auto* out = static_cast<uint8_t*>(dst);
  return CopyPages(*mm_, addr, len, AccessType::kRead,
                   [&](uint8_t* p, uint64_t at, uint64_t n) { memcpy(out + at, p, n); });
}

CopyResult AddressSpace::WriteMemory(uint64_t addr, const void* src, uint64_t len) {
  SpaceEntry entry(*mm_);
  auto* in = static_cast<const uint8_t*>(src);
  return CopyPages(*mm_, addr, len, AccessType::kWrite,
                   [&](uint8_t* p, uint64_t at, uint64_t n) { memcpy(p, in + at, n); });
}

}  // namespace vmspace
