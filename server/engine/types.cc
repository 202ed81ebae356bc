#include "engine/types.h"

#include <cerrno>
#include <cstdio>

namespace vmspace {

const char* ErrnoName(int err) {
  switch (err) {
    case 0: return "OK";
    case EINVAL: return "EINVAL";
    case ENOMEM: return "ENOMEM";
    case EEXIST: return "EEXIST";
    case EPERM: return "EPERM";
    case EACCES: return "EACCES";
    case EBADF: return "EBADF";
    case EOVERFLOW: return "EOVERFLOW";
    case ENODEV: return "ENODEV";
    case EOPNOTSUPP: return "EOPNOTSUPP";
    case EAGAIN: return "EAGAIN";
    case EFAULT: return "EFAULT";
    case ETXTBSY: return "ETXTBSY";
    default: {
      static thread_local char buf[24];
      snprintf(buf, sizeof buf, "errno%d", err);
      return buf;
    }
  }
}

const char* FaultOutcomeName(FaultOutcome o) {
  switch (o) {
    case FaultOutcome::kNone: return "none";
    case FaultOutcome::kMinor: return "minor";
    case FaultOutcome::kMajor: return "major";
    case FaultOutcome::kSigsegv: return "sigsegv";
    case FaultOutcome::kSigbus: return "sigbus";
    case FaultOutcome::kOom: return "oom";
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

const char* AccessTypeName(AccessType a) {
  switch (a) {
    case AccessType::kRead: return "read";
    case AccessType::kWrite: return "write";
    case AccessType::kExec: return "exec";
  }
  return "?";
}

}  // namespace vmspace
