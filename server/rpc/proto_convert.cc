// SPDX-License-Identifier: Apache-2.0
#include "rpc/proto_convert.h"

#include <absl/strings/str_format.h>

#include <algorithm>
#include <cerrno>
#include <string>

#include "rpc/errors.h"
#include "rpc/service.h"

namespace vmspace::rpc {

// ---- proto <-> engine conversions ----

bool ToAccessType(int v, AccessType* out) {
  switch (v) {
    case v1::ACCESS_READ: *out = AccessType::kRead; return true;
    case v1::ACCESS_WRITE: *out = AccessType::kWrite; return true;
    case v1::ACCESS_EXEC: *out = AccessType::kExec; return true;
    default: return false;
  }
}

v1::FaultOutcome ToProto(FaultOutcome o) {
  switch (o) {
    case FaultOutcome::kNone: return v1::FAULT_OUTCOME_NONE;
    case FaultOutcome::kMinor: return v1::FAULT_OUTCOME_MINOR;
    case FaultOutcome::kMajor: return v1::FAULT_OUTCOME_MAJOR;
    case FaultOutcome::kSigsegv: return v1::FAULT_OUTCOME_SIGSEGV;
    case FaultOutcome::kSigbus: return v1::FAULT_OUTCOME_SIGBUS;
    case FaultOutcome::kOom:  // never reported as a FaultInfo
    case FaultOutcome::kInterrupted: break;
  }
  return v1::FAULT_OUTCOME_NONE;
}

v1::SiCode ToProtoSiCode(const FaultResult& f) {
  if (f.outcome == FaultOutcome::kSigsegv) {
    if (f.sig_code == kSegvMaperr) return v1::SEGV_MAPERR;
    if (f.sig_code == kSegvAccerr) return v1::SEGV_ACCERR;
  } else if (f.outcome == FaultOutcome::kSigbus) {
    if (f.sig_code == kBusAdrerr) return v1::BUS_ADRERR;
  }
  return v1::SI_CODE_NONE;
}

v1::LockPath ToProto(LockPath p) {
  switch (p) {
    case LockPath::kNone: return v1::LOCK_PATH_NONE;
    case LockPath::kVmaLock: return v1::LOCK_PATH_VMA_LOCK;
    case LockPath::kMmapLock: return v1::LOCK_PATH_MMAP_LOCK;
  }
  return v1::LOCK_PATH_NONE;
}

void FillFault(const FaultResult& f, v1::FaultInfo* out) {
  out->set_outcome(ToProto(f.outcome));
  if (f.signal()) {
    out->set_si_code(ToProtoSiCode(f));
    out->set_si_addr(f.sig_addr);
  }
  out->set_lock_path(ToProto(f.path));
}

OpStatus ToSpaceOptions(const v1::SpaceSettings& s, const LockingProfile& default_profile,
                        uint64_t max_map_count_limit, SpaceOptions* o) {
  o->max_map_count = std::min(o->max_map_count, max_map_count_limit);
  if (s.has_max_map_count()) {
    if (s.max_map_count() > max_map_count_limit)
      return ErrnoErrorDetail(EINVAL, "CreateSpace",
                              "max_map_count " + std::to_string(s.max_map_count()) +
                                  " exceeds --max-map-count-limit=" + std::to_string(max_map_count_limit));
    o->max_map_count = s.max_map_count();
  }
  if (s.has_mmap_base()) o->mmap_base = s.mmap_base();
  if (s.has_mmap_min_addr()) o->mmap_min_addr = s.mmap_min_addr();
  if (s.has_dac_mmap_min_addr()) o->dac_mmap_min_addr = s.dac_mmap_min_addr();
  if (s.has_cap_sys_rawio()) o->cap_sys_rawio = s.cap_sys_rawio();
  if (s.has_rlimit_memlock()) o->rlimit_memlock = s.rlimit_memlock();
  if (s.has_cap_ipc_lock()) o->cap_ipc_lock = s.cap_ipc_lock();
  if (s.has_fault_around_bytes()) o->fault_around_bytes = s.fault_around_bytes();
  if (!ValidFaultAroundBytes(o->fault_around_bytes))
    return ErrnoErrorDetail(EINVAL, "CreateSpace",
                            "fault_around_bytes must be a power of two in [4096, 2097152]");
  if (!s.shared_fault_completion().empty() &&
      !ParseSharedFaultCompletion(s.shared_fault_completion(), &o->shared_fault_completion))
    return ErrnoErrorDetail(EINVAL, "CreateSpace", "shared_fault_completion must be retry or completed");
  if (!s.i_mmap_scope().empty() && !ParseIMmapScope(s.i_mmap_scope(), &o->i_mmap_scope))
    return ErrnoErrorDetail(EINVAL, "CreateSpace", "i_mmap_scope must be wide or narrow");
  if (!PageAligned(o->mmap_base) || o->mmap_base == 0 || o->mmap_base > kTaskSize)
    return ErrnoErrorDetail(EINVAL, "CreateSpace",
                            "mmap_base must be page aligned and in (0, 0x7ffffffff000]");
  if (o->mmap_min_addr >= o->mmap_base)
    return ErrnoErrorDetail(EINVAL, "CreateSpace", "mmap_min_addr must be below mmap_base");
  if (o->dac_mmap_min_addr > kTaskSize)
    return ErrnoErrorDetail(EINVAL, "CreateSpace", "dac_mmap_min_addr beyond TASK_SIZE");
  if (s.has_start_brk()) {
    o->start_brk = s.start_brk();
    if (!PageAligned(o->start_brk) || o->start_brk < o->mmap_min_addr || o->start_brk >= kTaskSize)
      return ErrnoErrorDetail(EINVAL, "CreateSpace",
                              "start_brk must be page aligned, at least mmap_min_addr and below 0x7ffffffff000");
  }
  if (s.has_rlimit_data()) o->rlimit_data = s.rlimit_data();
  if (s.locking_profile().empty() || s.locking_profile() == "default") {
    o->profile = default_profile;
  } else {
    std::string err;
    if (!LockingProfile::Parse(s.locking_profile(), &o->profile, &err))
      return ErrnoErrorDetail(EINVAL, "CreateSpace", "locking_profile: " + err);
  }
  return {};
}

void FillFileInfo(const FileStat& st, uint64_t public_id, bool writable, v1::FileInfo* out) {
  out->set_file_id(public_id);
  out->set_path(st.path);
  out->set_shmem(st.shmem);
  out->set_size(st.size_bytes);
  out->set_inode(st.inode);
  out->set_dev(absl::StrFormat("%02x:%02x", st.dev_major, st.dev_minor));
  out->set_cached_pages(st.cached_pages);
  out->set_dirty_pages(st.dirty_pages);
  out->set_mapped_vmas(st.mapped_vmas);
  out->set_open_handles(st.open_handles);
  out->set_writable(writable);
  out->set_st_nlink(st.nlink);
}

}  // namespace vmspace::rpc
