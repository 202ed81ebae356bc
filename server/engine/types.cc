// SPDX-License-Identifier: Apache-2.0
#include "engine/types.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace vmspace {

const char* ErrnoName(int err) {
  if (err == 0) return "OK";
  if (const char* n = strerrorname_np(err)) return n;
  static thread_local char buf[24];
  snprintf(buf, sizeof buf, "errno%d", err);
  return buf;
}

const char* FaultOutcomeName(FaultOutcome o) {
  switch (o) {
    case FaultOutcome::kNone: return "none";
    case FaultOutcome::kMinor: return "minor";
    case FaultOutcome::kMajor: return "major";
    case FaultOutcome::kSigsegv: return "sigsegv";
    case FaultOutcome::kSigbus: return "sigbus";
    case FaultOutcome::kOom: return "oom";
    case FaultOutcome::kInterrupted: return "interrupted";
  }
  return "?";
}

const char* LockPathName(LockPath p) {
  switch (p) {
    case LockPath::kNone: return "none";
    case LockPath::kVmaLock: return "vma_lock";
    case LockPath::kMmapLock: return "mmap_lock";
  }
  return "?";
}


}  // namespace vmspace
