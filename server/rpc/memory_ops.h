// SPDX-License-Identifier: Apache-2.0
// The operations on one space behind both the unary memory calls and the ops of a
// Batch stream (defined in rpc/memory_calls.cc). Each runs on the handler's thread,
// under its CallScope where the call is stoppable, and answers the errno of the
// syscall it mirrors.
#pragma once

#include <cstdint>

#include "rpc/buffers.h"
#include "rpc/errors.h"
#include "rpc/space_registry.h"
#include "vmspace/v1/vmspace.pb.h"

namespace vmspace::rpc {

/// mmap(2); a file mapping's file_id is looked up in `reg`'s FileTable for sp's tenant.
OpStatus DoMmap(Space& sp, const v1::MmapRequest& r, v1::MmapResponse* out,
                SpaceRegistry& reg);
/// munmap(2).
OpStatus DoMunmap(Space& sp, const v1::MunmapRequest& r, v1::MunmapResponse*);
/// mprotect(2).
OpStatus DoMprotect(Space& sp, const v1::MprotectRequest& r, v1::MprotectResponse*);
/// madvise(2).
OpStatus DoMadvise(Space& sp, const v1::MadviseRequest& r, v1::MadviseResponse*);
/// msync(2).
OpStatus DoMsync(Space& sp, const v1::MsyncRequest& r, v1::MsyncResponse*);
/// brk(2): never an error (a refused change answers the old break).
OpStatus DoBrk(Space& sp, const v1::BrkRequest& r, v1::BrkResponse* out);
/// mremap(2).
OpStatus DoMremap(Space& sp, const v1::MremapRequest& r, v1::MremapResponse* out);
/// mlock2(2), munlock(2), mlockall(2), munlockall(2), mseal(2).
OpStatus DoMlock(Space& sp, const v1::MlockRequest& r, v1::MlockResponse*);
OpStatus DoMunlock(Space& sp, const v1::MunlockRequest& r, v1::MunlockResponse*);
OpStatus DoMlockall(Space& sp, const v1::MlockallRequest& r, v1::MlockallResponse*);
OpStatus DoMunlockall(Space& sp, const v1::MunlockallRequest& r, v1::MunlockallResponse*);
OpStatus DoMseal(Space& sp, const v1::MsealRequest& r, v1::MsealResponse*);
/// One fault at r.addr (a signal is an OK answer, in out->fault()).
OpStatus DoFault(Space& sp, const v1::FaultRequest& r, v1::FaultResponse* out);
/// Touches [addr, addr + len) every `stride` bytes; more than `max_touches` is EINVAL.
OpStatus DoAccess(Space& sp, const v1::AccessRequest& r, v1::AccessResponse* out,
                  uint64_t max_touches);
/// Copies out at most `max_io` bytes (more is EINVAL); `buf`: the call's (or the
/// stream's) buffer charge, grown by the data read.
OpStatus DoRead(Space& sp, const v1::ReadMemoryRequest& r, v1::ReadMemoryResponse* out,
                uint64_t max_io, Buffers& buf);
/// Copies in at most `max_io` bytes (more is EINVAL).
OpStatus DoWrite(Space& sp, const v1::WriteMemoryRequest& r, v1::WriteMemoryResponse* out,
                 uint64_t max_io);
/// The pages of a mincore(2) range of `len` bytes (len rounded up to pages): the
/// bytes of its vector.
inline uint64_t MincorePages(uint64_t len) {
  return (len >> kPageShift) + ((len & (kPageSize - 1)) != 0 ? 1 : 0);
}
/// mincore(2) (AddressSpace::Mincore, as mm/mincore.c, Linux 6.18): out->vec gets one
/// byte per page. More than `max_io` pages (vector bytes) is EINVAL; `buf`: the call's
/// (or the stream's) buffer charge, grown by the vector. Errors: EINVAL (addr
/// unaligned), ENOMEM (a hole, or beyond TASK_SIZE); out->vec is then empty.
OpStatus DoMincore(Space& sp, const v1::MincoreRequest& r, v1::MincoreResponse* out,
                   uint64_t max_io, Buffers& buf);

}  // namespace vmspace::rpc
