// SPDX-License-Identifier: Apache-2.0
// The anonymous reverse map (mm/rmap.c, Linux 6.18): anon_vma and anon_vma_chain
// (prepare, clone, fork, unlink, the walk), the metadata of frames fork shared
// (PageMeta, see rmap.h), and page_mkclean_one for file pages (the file rmap walk
// itself is in filemap.cc).
#include <atomic>
#include <unordered_map>
#include <vector>

#include "mm.h"
#include "rmap.h"
#include "vma.h"

namespace vmspace {

namespace {

/// anon_vma_compatible(): a and b adjacent and mergeable but for access flags (and the
/// sticky flags, VM_IGNORE_MERGE).
bool AnonVmaCompatible(const Vma* a, const Vma* b) {
  return a->vm_end == b->vm_start && a->vm_file == b->vm_file &&
         !((a->vm_flags ^ b->vm_flags) & ~(VM_ACCESS_FLAGS | kVmSticky)) &&
         b->vm_pgoff == a->vm_pgoff + ((b->vm_start - a->vm_start) >> kPageShift);
}

/// reusable_anon_vma(): old's anon_vma if old's chain is singular (no fork made it
/// part of a tree of several).
AnonVma* ReusableAnonVma(const Vma* old) {
  AnonVma* a = old->anon();
  const AnonVmaChain* c = old->anon_vma_chain;
  return a && c && !c->same_vma ? a : nullptr;
}

/// anon_vma_chain_link(): links avc into v's chain (at the head, as list_add) and a's
/// list. Caller holds a's root lock.
void AvcLink(Vma* v, AnonVmaChain* avc, AnonVma* a) {
  avc->vma = v;
  avc->anon_vma = a;
  avc->same_vma = v->anon_vma_chain;
  v->anon_vma_chain = avc;
  avc->prev = nullptr;
  avc->next = a->head;
  if (a->head) a->head->prev = avc;
  a->head = avc;
}

/// anon_vma_interval_tree_remove(): takes avc off its anon_vma's list (root lock held).
void AvcRemove(AnonVmaChain* avc) {
  AnonVma* a = avc->anon_vma;
  if (avc->prev) avc->prev->next = avc->next;
  else a->head = avc->next;
  if (avc->next) avc->next->prev = avc->prev;
}

}  // namespace

AnonVma* FindMergeableAnonVmaLocked(MmStruct& mm, Vma* v) {
  Vma* next = VmaNextFromLocked(mm, v->vm_end);
  if (next && next->vm_start == v->vm_end && AnonVmaCompatible(v, next))
    if (AnonVma* a = ReusableAnonVma(next)) return a;
  Vma* prev = VmaPrevLocked(mm, v->vm_start);
  if (prev && AnonVmaCompatible(prev, v))
    if (AnonVma* a = ReusableAnonVma(prev)) return a;
  return nullptr;
}

void PageMkcleanOne(MmStruct& mm, Vma* v, uint64_t addr) {
  PageTable::PteTable* t = mm.pt.Lookup(addr, false);
  if (!t) return;
  const int i = PageTable::PteIndex(addr);
  SpinGuard l(t->ptl);
  const uint64_t pte = t->Get(i);
  if ((pte & kPtePresent) && (pte & kPteFile) && (pte & kPteWrite)) t->Set(i, pte & ~kPteWrite);
  (void)v;
}

void AnonVmaPrepareLocked(MmStruct& mm, Vma* v) {
  if (v->anon()) return;
  // __anon_vma_prepare(): the AVC and a candidate anon_vma first, then under the
  // anon_vma's lock and page_table_lock (here anon_vma_lock) the install, if no other
  // fault installed one meanwhile.
  AnonVma* a = FindMergeableAnonVmaLocked(mm, v);
  AnonVma* allocated = nullptr;
  if (!a) {
    a = allocated = new AnonVma(0);
    allocated->num_children++;  // the root's self-parent reference
  }
  auto* avc = new AnonVmaChain;
  {
    MutexLock rl(a->root->lock);
    MutexLock l(mm.anon_vma_lock);
    if (!v->anon()) {
      if (allocated) allocated->id = mm.next_anon_vma_id++;
      AvcLink(v, avc, a);
      a->num_active_vmas++;
      v->anon_vma.store(a, std::memory_order_release);
      allocated = nullptr;
      avc = nullptr;
    }
  }
  delete avc;
  PutAnonVma(allocated);
}

void AnonVmaClone(Vma* dst, const Vma* src) {
  std::vector<AnonVmaChain*> chain;
  for (AnonVmaChain* c = src->anon_vma_chain; c; c = c->same_vma) chain.push_back(c);
  if (chain.empty()) return;
  AnonVma* root = chain.front()->anon_vma->root;
  MutexLock l(root->lock);
  // Oldest first (list_for_each_entry_reverse), each added at the head: dst's chain in
  // src's order.
  for (size_t i = chain.size(); i-- > 0;) {
    AnonVma* a = chain[i]->anon_vma;
    AvcLink(dst, new AnonVmaChain, a);
    if (!dst->anon() && src->anon() && a->num_children < 2 && a->num_active_vmas == 0)
      dst->anon_vma.store(a, std::memory_order_release);
  }
  if (AnonVma* a = dst->anon()) a->num_active_vmas++;
}

void AnonVmaFork(MmStruct& child, Vma* vma, const Vma* pvma) {
  AnonVma* pa = pvma->anon();
  if (!pa) return;
  vma->anon_vma.store(nullptr, std::memory_order_relaxed);
  AnonVmaClone(vma, pvma);
  if (vma->anon()) return;  // an existing anon_vma reused
  auto* a = new AnonVma(0);
  {
    MutexLock l(child.anon_vma_lock);
    a->id = child.next_anon_vma_id++;
  }
  a->root = pa->root;
  a->parent = pa;
  GetAnonVma(a->root);
  auto* avc = new AnonVmaChain;
  MutexLock l(a->root->lock);
  a->num_active_vmas++;
  vma->anon_vma.store(a, std::memory_order_release);
  AvcLink(vma, avc, a);
  a->parent->num_children++;
}

void DupAnonVma(Vma* dst, const Vma* src) {
  if (!src->anon() || dst->anon()) return;
  dst->anon_vma.store(src->anon(), std::memory_order_release);
  AnonVmaClone(dst, src);
}

void UnlinkAnonVmas(Vma* v) {
  AnonVmaChain* c = v->anon_vma_chain;
  if (!c) {
    v->anon_vma.store(nullptr, std::memory_order_relaxed);
    return;
  }
  std::vector<AnonVma*> emptied;
  AnonVma* root = c->anon_vma->root;
  {
    MutexLock l(root->lock);
    while (c) {
      AnonVmaChain* next = c->same_vma;
      AnonVma* a = c->anon_vma;
      AvcRemove(c);
      if (!a->head) {  // no VMA left that may map its pages
        a->parent->num_children--;
        emptied.push_back(a);
      }
      delete c;
      c = next;
    }
    if (AnonVma* a = v->anon()) a->num_active_vmas--;
    v->anon_vma_chain = nullptr;
    v->anon_vma.store(nullptr, std::memory_order_relaxed);
  }
  for (AnonVma* a : emptied) PutAnonVma(a);  // the list's reference
}

void Vma::set_anon(AnonVma* a) {
  UnlinkAnonVmas(this);
  if (!a) return;
  auto* avc = new AnonVmaChain;
  MutexLock l(a->root->lock);
  // A list that starts here takes its own reference: the caller keeps the one it has.
  if (!a->head) GetAnonVma(a);
  AvcLink(this, avc, a);
  a->num_active_vmas++;
  anon_vma.store(a, std::memory_order_release);
}

bool VmaChainedTo(const Vma* v, AnonVma* a) {
  MutexLock l(a->root->lock);
  for (const AnonVmaChain* c = v->anon_vma_chain; c; c = c->same_vma)
    if (c->anon_vma == a) return true;
  return false;
}

void RmapWalkAnon(AnonVma* a, uint64_t index, const std::function<void(Vma*, uint64_t)>& fn,
                  const MmStruct* only) {
  MutexLock l(a->root->lock);
  for (AnonVmaChain* c = a->head; c; c = c->next) {
    Vma* v = c->vma;
    if (only && v->vm_mm != only) continue;
    if (index < v->vm_pgoff || index - v->vm_pgoff >= v->pages()) continue;
    fn(v, v->vm_start + ((index - v->vm_pgoff) << kPageShift));
  }
}

// ====================================================================== frame metadata

namespace {

struct alignas(kDestructiveInterferenceBytes) MetaShard {
  Mutex mu{LockRank::kPageMeta};
  std::unordered_map<void*, PageMeta*> map ABSL_GUARDED_BY(mu);
};
constexpr int kMetaShards = 64;

MetaShard& ShardOf(void* frame) {
  static MetaShard* const shards = new MetaShard[kMetaShards];
  return shards[(reinterpret_cast<uintptr_t>(frame) >> kPageShift) % kMetaShards];
}

std::atomic<uint64_t> g_meta_count{0};

struct DeferredFrame {
  rcu_head head;
  FrameAllocator* frames;
  void* frame;
};

void DeferredFrameFree(rcu_head* h) {
  RcuCallbackBegin(h);
  auto* d = reinterpret_cast<DeferredFrame*>(reinterpret_cast<char*>(h) - offsetof(DeferredFrame, head));
  d->frames->Free(d->frame);
  delete d;
  RcuCallbackEnd();
}

}  // namespace

PageMeta* PageMetaOf(void* frame) {
  MetaShard& s = ShardOf(frame);
  MutexLock l(s.mu);
  auto it = s.map.find(frame);
  return it == s.map.end() ? nullptr : it->second;
}

void PageDupAnonRmap(void* frame, bool has_meta, AnonVma* a, uint64_t index) {
  if (has_meta) {
    // Under the shard's mutex, as PageMapcount: the record is found and raised in one
    // critical section, so no reader of it depends on the caller's PTL alone.
    MetaShard& s = ShardOf(frame);
    MutexLock l(s.mu);
    s.map.find(frame)->second->mapcount.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  auto* m = new PageMeta;
  m->mapcount.store(2, std::memory_order_relaxed);
  m->anon_vma = GetAnonVma(a);
  m->index = index;
  MetaShard& s = ShardOf(frame);
  MutexLock l(s.mu);
  s.map.emplace(frame, m);
  g_meta_count.fetch_add(1, std::memory_order_relaxed);
}

bool PageRemoveAnonRmap(void* frame) {
  MetaShard& s = ShardOf(frame);
  PageMeta* m;
  {
    MutexLock l(s.mu);
    auto it = s.map.find(frame);
    m = it->second;
    if (m->mapcount.fetch_sub(1, std::memory_order_acq_rel) != 1) return false;
    s.map.erase(it);
  }
  g_meta_count.fetch_sub(1, std::memory_order_relaxed);
  PutAnonVma(m->anon_vma);
  delete m;
  return true;
}

int32_t PageMapcount(void* frame) {
  // Read under the shard's mutex: PageRemoveAnonRmap erases and deletes the record of
  // a frame's last mapping, possibly from another space's zap while this fault runs.
  MetaShard& s = ShardOf(frame);
  MutexLock l(s.mu);
  auto it = s.map.find(frame);
  return it == s.map.end() ? 0 : it->second->mapcount.load(std::memory_order_acquire);
}

uint64_t PageMetaCount() { return g_meta_count.load(std::memory_order_relaxed); }

void FreeFrameAfterGracePeriod(FrameAllocator& frames, void* frame) {
  auto* d = new DeferredFrame{{}, &frames, frame};
  CallRcu(&d->head, &DeferredFrameFree);
}

}  // namespace vmspace
