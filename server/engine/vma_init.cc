// SPDX-License-Identifier: Apache-2.0
// The VMAs of a space: vm_area_alloc, vm_area_dup, vm_area_free and the per-space VMA
// cache (mm/vma_init.c, Linux 6.15+: vm_area_cachep, vm_area_init_from).
#include "mmu_gather.h"
#include "rmap.h"
#include "vma.h"
#include "vma_init.h"

#include <utility>

#include "mm.h"

namespace vmspace {

void Vma::InitFrom(const Vma& o) {
  vm_start = o.vm_start;
  vm_end = o.vm_end;
  vm_flags = o.vm_flags;
  vm_pgoff = o.vm_pgoff;
  // An empty VMA has no anon_vma or chain to drop. anon_vma_clone: this VMA joins
  // every anon_vma o is chained to (vm_area_dup copies the anon_vma pointer first).
  anon_vma.store(o.anon(), std::memory_order_release);
  AnonVmaClone(this, &o);
  if (o.vm_file) vm_file = o.vm_file;
  vm_mm = o.vm_mm;
}

void Vma::ReleaseContents() {
  if (anon_vma_chain || anon_vma.load(std::memory_order_relaxed)) UnlinkAnonVmas(this);
  if (vm_file) vm_file.reset();  // vm_mm stays: a cached VMA is reused by this space only
}

Vma::~Vma() {
  if (anon_vma_chain) UnlinkAnonVmas(this);
  delete vm_lock;
}

namespace {
// Bytes a VMA's memory is charged as: the object and its separate vma_lock.
uint64_t VmaBytes(const Vma* v) { return sizeof(Vma) + (v->vm_lock ? sizeof(VmaLock) : 0); }
}  // namespace

void VmaCache::DeleteChain(Vma* first) {
  while (first) {
    Vma* next = first->free_next;
    delete first;
    first = next;
  }
}

VmaCache::~VmaCache() {
  // No reader of this space can be running; callbacks may still be.
  DeleteChain(free_);
  if (pending_) {
    if (budget_) budget_->Uncharge(MemKind::kVmas, pending_->bytes);
    DeleteChain(pending_->first);
    delete pending_;
  }
  delete spare_;
  for (RcuBatch* b = fifo_head_; b;) {
    RcuBatch* next = b->next;
    if (b->state.load(std::memory_order_relaxed) == RcuBatch::kPolled) {  // no callback: ours
      if (budget_) budget_->Uncharge(MemKind::kVmas, b->bytes);
      DeleteChain(b->first);
      delete b;
    } else if (b->state.exchange(RcuBatch::kOrphan, std::memory_order_acq_rel) == RcuBatch::kDone) {
      DeleteChain(b->first);
      delete b;
    }
    b = next;
  }
}

size_t VmaCache::in_flight() const { return nr_in_flight_ + (pending_ ? pending_->n : 0); }

VmaCache::RcuBatch* VmaCache::PopDone() {
  RcuBatch* b = fifo_head_;
  fifo_head_ = b->next;
  if (!fifo_head_) fifo_tail_ = nullptr;
  if (unready_ == b) unready_ = b->next;
  if (unasked_ == b) unasked_ = b->next;  // (a batch handed to call_rcu before its tick)
  nr_in_flight_ -= b->n;
  return b;
}

void VmaCache::AskGracePeriods() {
  if (!unasked_) return;
  const uint64_t tick = RcuTick();
  uint64_t cookie = 0;  // one grace period serves every batch queued before it starts
  for (; unasked_ && unasked_->tick < tick; unasked_ = unasked_->next) {
    if (!cookie) cookie = RcuStartPoll();
    unasked_->cookie = cookie;
  }
}

bool VmaCache::Ready(RcuBatch* b, bool* scan) {
  const uint8_t state = b->state.load(std::memory_order_acquire);
  if (state != RcuBatch::kPolled) return state == RcuBatch::kDone;  // kPending: its callback has not run
  if (b->cookie == 0 || !RcuPollState(b->cookie, *scan)) return false;  // not asked yet: before the tick
  *scan = false;  // the scan's result stands for the younger batches
  if (b->budget) b->budget->Uncharge(MemKind::kVmas, b->bytes);
  b->state.store(RcuBatch::kDone, std::memory_order_relaxed);
  return true;
}

void VmaCache::TakeBackFreed() {
  AskGracePeriods();
  bool scan = true;
  while (nr_free_ < kMaxFree && fifo_head_ && Ready(fifo_head_, &scan)) {
    RcuBatch* b = PopDone();
    b->last->free_next = free_;
    free_ = b->first;
    nr_free_ += b->n;
    if (spare_) delete b;
    else spare_ = b;
  }
}

Vma* VmaCache::Alloc() {
  if (!free_) TakeBackFreed();
  Vma* v = free_;
  if (v) {
    free_ = v->free_next;
    nr_free_--;
    v->vm_pgoff = 0;
    // The next allocation's VMA: it waited a grace period and is cold by now.
    if (free_) __builtin_prefetch(free_, 1);
    return Charged(v);
  }
  v = new Vma;
  if (form_ == VmaForm::kRwsem) v->vm_lock = new VmaLock;  // vma_lock_alloc()
  return Charged(v);
}

Vma* VmaCache::Charged(Vma* v) {
  if (budget_) budget_->Charge(MemKind::kVmas, VmaBytes(v));
  return v;
}

void VmaCache::Free(Vma* v) {
  if (form_ == VmaForm::kRefcnt && nr_free_ >= kMaxFree) {
    FreeRcu(v);  // typesafe by RCU: the memory goes back to the heap after a grace period
    return;
  }
  if (budget_) budget_->Uncharge(MemKind::kVmas, VmaBytes(v));
  if (nr_free_ >= kMaxFree) {
    delete v;
    return;
  }
  v->ReleaseContents();
  v->free_next = free_;
  free_ = v;
  nr_free_++;
}

void VmaCache::FreeRcu(Vma* v) {
  // Freed VMAs wait in the FIFO until an allocation wants them; beyond kMaxInFlight the
  // oldest freed ones go back to the heap (no reader is left).
  bool scan = true;
  while (nr_in_flight_ >= kMaxInFlight && fifo_head_ && Ready(fifo_head_, &scan)) {
    RcuBatch* b = PopDone();
    DeleteChain(b->first);
    delete b;
  }
  v->ReleaseContents();
  RcuBatch* b = pending_;
  if (!b) {
    b = spare_ ? std::exchange(spare_, nullptr) : new RcuBatch;
    b->state.store(RcuBatch::kPolled, std::memory_order_relaxed);
    b->cookie = 0;
    b->n = 0;
    b->first = b->last = nullptr;
    b->budget = budget_;
    b->bytes = 0;
    b->next = nullptr;
    pending_ = b;
  }
  v->free_next = nullptr;
  if (b->last) b->last->free_next = v;
  else b->first = v;
  b->last = v;
  b->n++;
  b->bytes += VmaBytes(v);
  if (b->n >= kRcuBatch) FlushRcu();
}

void VmaCache::FlushRcu() {
  if (RcuBatch* b = std::exchange(pending_, nullptr)) {
    b->tick = RcuTick();
    if (fifo_tail_) fifo_tail_->next = b;
    else fifo_head_ = b;
    fifo_tail_ = b;
    nr_in_flight_ += b->n;
    if (!unready_) unready_ = b;
    if (!unasked_) unasked_ = b;
  }
  AskGracePeriods();
  bool scan = true;
  while (unready_ && Ready(unready_, &scan)) unready_ = unready_->next;
}

void VmaCache::HandToCallRcu() {
  for (RcuBatch* b = unready_; b; b = b->next) {
    if (b->state.load(std::memory_order_relaxed) != RcuBatch::kPolled) continue;  // handed already
    b->state.store(RcuBatch::kPending, std::memory_order_relaxed);
    CallRcu(&b->head, &RcuBatchDone);
  }
}

// vm_area_free_rcu_cb() for a batch: kmem_cache_free() is the mark the cache takes the
// VMAs back by; their charge ends with the grace period. Touches only the batch, so the
// VMAs stay in the cache of the CPU that freed them (and reuses them).
void VmaCache::RcuBatchDone(struct rcu_head* h) {
  RcuCallbackBegin(h);
  RcuBatch* b = reinterpret_cast<RcuBatch*>(reinterpret_cast<char*>(h) - offsetof(RcuBatch, head));
  if (b->budget) b->budget->Uncharge(MemKind::kVmas, b->bytes);
  if (b->state.exchange(RcuBatch::kDone, std::memory_order_acq_rel) == RcuBatch::kOrphan) {
    DeleteChain(b->first);
    delete b;
  }
  RcuCallbackEnd();
}

Vma* VmaAllocLocked(MmStruct& mm) { return mm.vma_cache.Alloc(); }

void VmaFree(MmStruct& mm, Vma* v) {
  mm.frames.budget().Uncharge(MemKind::kVmas, VmaBytes(v));
  delete v;
}

Vma* VmaDupLocked(MmStruct& mm, const Vma& o) {
  Vma* v = VmaAllocLocked(mm);
  v->InitFrom(o);
  return v;
}

void ReleaseRetiredVmasLocked(MmStruct& mm) {
  if (mm.retired_vmas.empty()) return;
  // kRwsem (vm_area_free through call_rcu): a VMA that only this thread could have
  // found waits only for its next quiescent state (sole_vmas, as sole_nodes).
  const bool sole = mm.vma_form == VmaForm::kRwsem && SoleRcuReaderLocked(mm);
  for (Vma* v : mm.retired_vmas) {
    if (mm.vma_form != VmaForm::kRwsem) mm.vma_cache.Free(v);
    else if (sole) mm.sole_vmas.push_back(v);
    else mm.vma_cache.FreeRcu(v);
  }
  mm.retired_vmas.clear();
  if (sole) {
    mm.sole_owner = RcuThreadId();
    mm.sole_qs = RcuQsCount();
  }
}

}  // namespace vmspace
