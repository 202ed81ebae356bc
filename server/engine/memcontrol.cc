// SPDX-License-Identifier: Apache-2.0
#include "engine/memcontrol.h"

namespace vmspace {

namespace {
thread_local MemCgroup* tls_active_memcg = nullptr;
constexpr auto kRlx = std::memory_order_relaxed;
}  // namespace

bool MemCgroup::TryCharge(uint64_t bytes) {
  uint64_t cur = usage_.load(kRlx);
  do {
    if (limit_ != 0 && (cur > limit_ || bytes > limit_ - cur)) {
      failcnt_.fetch_add(1, kRlx);
      return false;
    }
  } while (!usage_.compare_exchange_weak(cur, cur + bytes, kRlx));
  return true;
}

void MemCgroup::Uncharge(uint64_t bytes) { usage_.fetch_sub(bytes, kRlx); }

MemCgroup* ActiveMemcg() { return tls_active_memcg; }

ActiveMemcgScope::ActiveMemcgScope(MemCgroup* cg) : prev_(tls_active_memcg) { tls_active_memcg = cg; }

ActiveMemcgScope::~ActiveMemcgScope() { tls_active_memcg = prev_; }

}  // namespace vmspace
