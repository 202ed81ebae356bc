// SPDX-License-Identifier: Apache-2.0
#include "sync/lockdep.h"

#include <cstdio>
#include <cstdlib>

namespace vmspace {

void LockdepAssertFail(const char* what) {
  fprintf(stderr, "vmspace lockdep: assertion failed: %s (see server/engine/LOCKING.md)\n", what);
  abort();
}

#if defined(VMSPACE_LOCKDEP)
namespace {
struct Held {
  LockRank rank;
  const void* lock;
};
constexpr int kMaxHeld = 16;
thread_local Held tls_held[kMaxHeld];
thread_local int tls_depth = 0;
}  // namespace

namespace {
// An acquisition of `rank`: every rank held must be lower (or, nested, not higher).
void Acquire(LockRank rank, const void* lock, bool nested) {
  for (int i = 0; i < tls_depth; i++) {
    const int held = static_cast<int>(tls_held[i].rank);
    if (nested ? held > static_cast<int>(rank) : held >= static_cast<int>(rank)) {
      fprintf(stderr,
              "vmspace lockdep: lock order violation: acquiring rank %d%s while holding rank %d "
              "(see server/engine/LOCKING.md)\n",
              static_cast<int>(rank), nested ? " (nested)" : "", held);
      abort();
    }
  }
  if (tls_depth == kMaxHeld) {
    fprintf(stderr, "vmspace lockdep: more than %d locks held\n", kMaxHeld);
    abort();
  }
  tls_held[tls_depth++] = {rank, lock};
}
}  // namespace

void LockdepAcquire(LockRank rank, const void* lock) { Acquire(rank, lock, false); }

void LockdepAcquireNested(LockRank rank, const void* lock) { Acquire(rank, lock, true); }

void LockdepRelease(LockRank rank, const void* lock) {
  for (int i = tls_depth - 1; i >= 0; i--) {
    if (tls_held[i].rank == rank && (lock == nullptr || tls_held[i].lock == lock)) {
      for (int k = i; k + 1 < tls_depth; k++) tls_held[k] = tls_held[k + 1];
      tls_depth--;
      return;
    }
  }
  fprintf(stderr, "vmspace lockdep: releasing rank %d that is not held\n", static_cast<int>(rank));
  abort();
}

bool LockdepHeld(const void* lock) {
  for (int i = 0; i < tls_depth; i++)
    if (tls_held[i].lock == lock) return true;
  return false;
}

int LockdepDepth() { return tls_depth; }
#endif

}  // namespace vmspace
