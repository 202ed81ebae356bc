// SPDX-License-Identifier: Apache-2.0
#include "engine/memory_budget.h"

namespace vmspace {

namespace {
std::atomic<unsigned> g_next_cell{0};
thread_local int tls_cell = -1;
constexpr auto kRlx = std::memory_order_relaxed;
}  // namespace

const char* MemKindName(MemKind k) {
  switch (k) {
    case MemKind::kFrames: return "frames";
    case MemKind::kPageTables: return "page_tables";
    case MemKind::kVmas: return "vmas";
    case MemKind::kIndexNodes: return "index_nodes";
    case MemKind::kPageCache: return "page_cache";
    case MemKind::kBuffers: return "buffers";
  }
  return "?";
}

MemoryBudget::MemoryBudget(uint64_t limit_bytes) : limit_(limit_bytes) {}

MemoryBudget::Cell& MemoryBudget::MyCell() {
  if (tls_cell < 0) tls_cell = static_cast<int>(g_next_cell.fetch_add(1, kRlx) % kCells);
  return cells_[tls_cell];
}

bool MemoryBudget::TakeGlobal(uint64_t bytes) {
  uint64_t cur = reserved_.load(kRlx);
  do {
    if (cur > limit_ || bytes > limit_ - cur) return false;
  } while (!reserved_.compare_exchange_weak(cur, cur + bytes, kRlx));
  return true;
}

void MemoryBudget::DrainStocks() {  // drain_all_stock()
  for (Cell& c : cells_)
    if (uint64_t s = c.stock.exchange(0, kRlx)) reserved_.fetch_sub(s, kRlx);
}

bool MemoryBudget::Reserve(Cell& c, uint64_t bytes) {
  uint64_t s = c.stock.load(kRlx);
  while (s >= bytes)
    if (c.stock.compare_exchange_weak(s, s - bytes, kRlx)) return true;
  if (TakeGlobal(bytes + kBatchBytes)) {  // refill the stock (consume_stock / refill_stock)
    c.stock.fetch_add(kBatchBytes, kRlx);
    return true;
  }
  if (TakeGlobal(bytes)) return true;
  DrainStocks();
  return TakeGlobal(bytes);
}

void MemoryBudget::Unreserve(Cell& c, uint64_t bytes) {
  if (reserved_.load(kRlx) > limit_) {  // over the limit after a Charge: no stock
    reserved_.fetch_sub(bytes, kRlx);
    return;
  }
  if (c.stock.fetch_add(bytes, kRlx) + bytes > 2 * kBatchBytes) {
    if (uint64_t s = c.stock.exchange(0, kRlx)) reserved_.fetch_sub(s, kRlx);
  }
}

bool MemoryBudget::TryCharge(MemKind k, uint64_t bytes) {
  Cell& c = MyCell();
  if (limit_ != 0 && !Reserve(c, bytes)) {
    failcnt_.fetch_add(1, kRlx);
    return false;
  }
  c.bytes[static_cast<int>(k)].fetch_add(static_cast<int64_t>(bytes), kRlx);
  return true;
}

void MemoryBudget::Charge(MemKind k, uint64_t bytes) {
  Cell& c = MyCell();
  if (limit_ != 0 && !Reserve(c, bytes)) reserved_.fetch_add(bytes, kRlx);  // over the limit
  c.bytes[static_cast<int>(k)].fetch_add(static_cast<int64_t>(bytes), kRlx);
}

void MemoryBudget::Uncharge(MemKind k, uint64_t bytes) {
  Cell& c = MyCell();
  c.bytes[static_cast<int>(k)].fetch_sub(static_cast<int64_t>(bytes), kRlx);
  if (limit_ != 0) Unreserve(c, bytes);
}

bool MemoryBudget::HasRoom(uint64_t bytes) {
  if (limit_ == 0) return true;
  auto fits = [&] {
    const uint64_t cur = reserved_.load(kRlx);
    uint64_t stock = MyCell().stock.load(kRlx);  // this thread's stock is ours to use
    return cur <= limit_ && bytes <= limit_ - cur + stock;
  };
  if (fits()) return true;
  DrainStocks();
  if (fits()) return true;
  failcnt_.fetch_add(1, kRlx);
  return false;
}

int64_t MemoryBudget::usage(MemKind k) const {
  int64_t n = 0;
  for (const Cell& c : cells_) n += c.bytes[static_cast<int>(k)].load(kRlx);
  return n;
}

uint64_t MemoryBudget::usage() const {
  int64_t n = 0;
  for (int k = 0; k < kMemKinds; k++) n += usage(static_cast<MemKind>(k));
  return n > 0 ? static_cast<uint64_t>(n) : 0;
}

bool ScopedCharge::Resize(uint64_t bytes, bool force) {
  if (b_ == nullptr) return true;
  if (bytes > bytes_ && force) {
    b_->Charge(k_, bytes - bytes_);
  } else if (bytes > bytes_) {
    if (!b_->TryCharge(k_, bytes - bytes_)) return false;
  } else if (bytes < bytes_) {
    b_->Uncharge(k_, bytes_ - bytes);
  }
  bytes_ = bytes;
  return true;
}

}  // namespace vmspace
