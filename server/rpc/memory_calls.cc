// SPDX-License-Identifier: Apache-2.0
// The memory calls of VmSpaceService: Mmap, Munmap, Mprotect, Madvise, Msync, Brk, Mremap, Fault,
// Access, ReadMemory, WriteMemory, Mincore, and the operations behind them (memory_ops.h).
#include "rpc/memory_ops.h"

#include <sys/mman.h>

#include <cerrno>
#include <string>
#include <vector>

#include "engine/lock_trace.h"
#include "rpc/call_scope.h"
#include "rpc/handle.h"
#include "rpc/proto_convert.h"

namespace vmspace::rpc {

using metrics::RpcMethod;
using metrics::RpcScope;

// ---- operations on one space (shared by the unary handlers and Batch) ----
OpStatus DoMmap(Space& sp, const v1::MmapRequest& r, v1::MmapResponse* out,
               SpaceRegistry& reg) {
  OpTrace trace(sp.id, "mmap", r.addr(), r.len());
  // As the kernel ignores fd with MAP_ANONYMOUS, file_id is ignored then; an unknown
  // file id reaches the engine as a null file, which answers EBADF in the kernel's order.
  const bool file = (r.flags() & MAP_ANONYMOUS) == 0 && r.file_id() != 0;
  const SysResult res =
      file ? sp.as.Mmap(r.addr(), r.len(), r.prot(), r.flags(), r.offset(),
                        reg.files().Get(reg.TableFileId(r.file_id(), sp.tenant)))
           : sp.as.Mmap(r.addr(), r.len(), r.prot(), r.flags(), r.offset());
  if (!res.ok()) return ErrnoError(res.error, "mmap");
  out->set_addr(res.value);
  return {};
}

OpStatus DoMunmap(Space& sp, const v1::MunmapRequest& r, v1::MunmapResponse*) {
  OpTrace trace(sp.id, "munmap", r.addr(), r.len());
  const SysResult res = sp.as.Munmap(r.addr(), r.len());
  if (!res.ok()) return ErrnoError(res.error, "munmap");
  return {};
}

OpStatus DoMprotect(Space& sp, const v1::MprotectRequest& r, v1::MprotectResponse*) {
  OpTrace trace(sp.id, "mprotect", r.addr(), r.len());
  const SysResult res = sp.as.Mprotect(r.addr(), r.len(), r.prot());
  if (!res.ok()) return ErrnoError(res.error, "mprotect");
  return {};
}

OpStatus DoMadvise(Space& sp, const v1::MadviseRequest& r, v1::MadviseResponse*) {
  OpTrace trace(sp.id, "madvise", r.addr(), r.len());
  const SysResult res = sp.as.Madvise(r.addr(), r.len(), r.advice());
  if (!res.ok()) return ErrnoError(res.error, "madvise");
  return {};
}

OpStatus DoMsync(Space& sp, const v1::MsyncRequest& r, v1::MsyncResponse*) {
  OpTrace trace(sp.id, "msync", r.addr(), r.len());
  const SysResult res = sp.as.Msync(r.addr(), r.len(), r.flags());
  if (!res.ok()) return ErrnoError(res.error, "msync");
  return {};
}

OpStatus DoBrk(Space& sp, const v1::BrkRequest& r, v1::BrkResponse* out) {
  OpTrace trace(sp.id, "brk");
  out->set_brk(sp.as.Brk(r.brk()));
  return {};
}

OpStatus DoMremap(Space& sp, const v1::MremapRequest& r, v1::MremapResponse* out) {
  OpTrace trace(sp.id, "mremap", r.old_addr(), r.old_len());
  const SysResult res = sp.as.Mremap(r.old_addr(), r.old_len(), r.new_len(), r.flags(), r.new_addr());
  if (!res.ok()) return ErrnoError(res.error, "mremap");
  out->set_addr(res.value);
  return {};
}

OpStatus DoMlock(Space& sp, const v1::MlockRequest& r, v1::MlockResponse*) {
  OpTrace trace(sp.id, "mlock", r.addr(), r.len());
  if (r.flags() & ~MLOCK_ONFAULT) return ErrnoErrorDetail(EINVAL, "mlock2", "flags must be 0 or MLOCK_ONFAULT (1)");
  const SysResult res = sp.as.Mlock(r.addr(), r.len(), r.flags());
  if (!res.ok()) return ErrnoError(res.error, "mlock2");
  return {};
}

OpStatus DoMunlock(Space& sp, const v1::MunlockRequest& r, v1::MunlockResponse*) {
  OpTrace trace(sp.id, "munlock", r.addr(), r.len());
  const SysResult res = sp.as.Munlock(r.addr(), r.len());
  if (!res.ok()) return ErrnoError(res.error, "munlock");
  return {};
}

OpStatus DoMlockall(Space& sp, const v1::MlockallRequest& r, v1::MlockallResponse*) {
  OpTrace trace(sp.id, "mlockall");
  const SysResult res = sp.as.Mlockall(r.flags());
  if (!res.ok()) return ErrnoError(res.error, "mlockall");
  return {};
}

OpStatus DoMunlockall(Space& sp, const v1::MunlockallRequest&, v1::MunlockallResponse*) {
  OpTrace trace(sp.id, "munlockall");
  const SysResult res = sp.as.Munlockall();
  if (!res.ok()) return ErrnoError(res.error, "munlockall");
  return {};
}

OpStatus DoMseal(Space& sp, const v1::MsealRequest& r, v1::MsealResponse*) {
  OpTrace trace(sp.id, "mseal", r.addr(), r.len());
  if (r.flags() != 0) return ErrnoErrorDetail(EINVAL, "mseal", "flags must be 0");
  const SysResult res = sp.as.Mseal(r.addr(), r.len(), r.flags());
  if (!res.ok()) return ErrnoError(res.error, "mseal");
  return {};
}

OpStatus DoFault(Space& sp, const v1::FaultRequest& r, v1::FaultResponse* out) {
  OpTrace trace(sp.id, "fault", r.addr(), kPageSize);
  AccessType access;
  if (!ToAccessType(r.access(), &access))
    return ErrnoErrorDetail(EINVAL, "Fault", "unknown access type");
  const FaultResult f = sp.as.Fault(r.addr(), access);
  if (OpStatus e = StopError(f, "Fault"); !e.ok()) return e;
  FillFault(f, out->mutable_fault());
  return {};
}

OpStatus DoAccess(Space& sp, const v1::AccessRequest& r, v1::AccessResponse* out,
                  uint64_t max_touches) {
  OpTrace trace(sp.id, "access", r.addr(), r.len());
  AccessType access;
  if (!ToAccessType(r.access(), &access))
    return ErrnoErrorDetail(EINVAL, "Access", "unknown access type");
  const uint64_t stride = r.stride() == 0 ? 1 : r.stride();
  const uint64_t touches = r.len() == 0 ? 0 : (r.len() - 1) / stride + 1;
  if (touches > max_touches)
    return ErrnoErrorDetail(EINVAL, "Access",
                            std::to_string(touches) + " touches (len / stride) exceed --max-access-touches=" +
                                std::to_string(max_touches));
  // The engine polls the call's stop check (CallScope) once per page table.
  const AccessResult ar = sp.as.Access(r.addr(), r.len(), stride, access);
  if (OpStatus e = StopError(ar.stop, "Access"); !e.ok()) return e;
  out->set_faults(ar.faults);
  out->set_major_faults(ar.major_faults);
  out->set_accesses(ar.accesses);
  if (ar.stop.failed()) FillFault(ar.stop, out->mutable_stop());
  return {};
}

OpStatus DoRead(Space& sp, const v1::ReadMemoryRequest& r, v1::ReadMemoryResponse* out,
                uint64_t max_io, Buffers& buf) {
  OpTrace trace(sp.id, "read_memory", r.addr(), r.len());
  if (r.len() > max_io)
    return ErrnoErrorDetail(EINVAL, "ReadMemory",
                            "len " + std::to_string(r.len()) + " exceeds --max-io-bytes=" +
                                std::to_string(max_io));
  if (OpStatus e = buf.Resize("ReadMemory", buf.bytes() + r.len()); !e.ok()) return e;
  std::string* data = out->mutable_data();
  data->resize(r.len());
  const CopyResult cr = sp.as.ReadMemory(r.addr(), data->data(), r.len());
  if (OpStatus e = StopError(cr.stop, "ReadMemory"); !e.ok()) {
    out->clear_data();
    return e;
  }
  data->resize(cr.bytes);
  out->set_faults(cr.faults);
  if (cr.stop.failed()) FillFault(cr.stop, out->mutable_stop());
  return {};
}

OpStatus DoWrite(Space& sp, const v1::WriteMemoryRequest& r, v1::WriteMemoryResponse* out,
                 uint64_t max_io) {
  OpTrace trace(sp.id, "write_memory", r.addr(), r.data().size());
  if (r.data().size() > max_io)
    return ErrnoErrorDetail(EINVAL, "WriteMemory",
                            "data of " + std::to_string(r.data().size()) +
                                " bytes exceeds --max-io-bytes=" + std::to_string(max_io));
  const CopyResult cr = sp.as.WriteMemory(r.addr(), r.data().data(), r.data().size());
  if (OpStatus e = StopError(cr.stop, "WriteMemory"); !e.ok()) return e;
  out->set_bytes_written(cr.bytes);
  out->set_faults(cr.faults);
  if (cr.stop.failed()) FillFault(cr.stop, out->mutable_stop());
  return {};
}

OpStatus DoMincore(Space& sp, const v1::MincoreRequest& r, v1::MincoreResponse* out,
                   uint64_t max_io, Buffers& buf) {
  OpTrace trace(sp.id, "mincore", r.addr(), r.len());
  const uint64_t pages = MincorePages(r.len());
  if (pages > max_io)
    return ErrnoErrorDetail(EINVAL, "Mincore",
                            "len " + std::to_string(r.len()) + " is " + std::to_string(pages) +
                                " pages, more than --max-io-bytes=" + std::to_string(max_io) +
                                " (one vector byte a page)");
  // The engine's vector and its copy in the response.
  if (OpStatus e = buf.Resize("Mincore", buf.bytes() + 2 * pages); !e.ok()) return e;
  std::vector<uint8_t> vec;
  const SysResult res = sp.as.Mincore(r.addr(), r.len(), &vec);
  if (!res.ok()) return ErrnoError(res.error, "mincore");
  out->set_vec(reinterpret_cast<const char*>(vec.data()), vec.size());
  return {};
}

grpc::Status VmSpaceService::Mmap(grpc::ServerContext* ctx, const v1::MmapRequest* req,
                                  v1::MmapResponse* resp) {
  return OnSpace(RpcMethod::kMmap, ctx, req->space_id(), true, true,
                 [&](Space& sp) { return DoMmap(sp, *req, resp, registry_); });
}

grpc::Status VmSpaceService::Munmap(grpc::ServerContext* ctx, const v1::MunmapRequest* req,
                                    v1::MunmapResponse* resp) {
  return OnSpace(RpcMethod::kMunmap, ctx, req->space_id(), false, false,
                 [&](Space& sp) { return DoMunmap(sp, *req, resp); });
}

grpc::Status VmSpaceService::Mprotect(grpc::ServerContext* ctx, const v1::MprotectRequest* req,
                                      v1::MprotectResponse* resp) {
  return OnSpace(RpcMethod::kMprotect, ctx, req->space_id(), false, false,
                 [&](Space& sp) { return DoMprotect(sp, *req, resp); });
}

grpc::Status VmSpaceService::Fault(grpc::ServerContext* ctx, const v1::FaultRequest* req,
                                   v1::FaultResponse* resp) {
  return OnSpace(RpcMethod::kFault, ctx, req->space_id(), true, true,
                 [&](Space& sp) { return DoFault(sp, *req, resp); });
}

grpc::Status VmSpaceService::Access(grpc::ServerContext* ctx, const v1::AccessRequest* req,
                                    v1::AccessResponse* resp) {
  return OnSpace(RpcMethod::kAccess, ctx, req->space_id(), true, true, [&](Space& sp) {
    return DoAccess(sp, *req, resp, opts_.max_access_touches);
  });
}

grpc::Status VmSpaceService::ReadMemory(grpc::ServerContext* ctx, const v1::ReadMemoryRequest* req,
                                        v1::ReadMemoryResponse* resp) {
  Buffers buf(registry_.frames());  // the data, while the call runs
  return OnSpace(RpcMethod::kReadMemory, ctx, req->space_id(), true, true, [&](Space& sp) {
    return DoRead(sp, *req, resp, opts_.max_io_bytes, buf);
  });
}

grpc::Status VmSpaceService::WriteMemory(grpc::ServerContext* ctx,
                                         const v1::WriteMemoryRequest* req,
                                         v1::WriteMemoryResponse* resp) {
  Buffers buf(registry_.frames());  // the request's data
  return OnSpace(RpcMethod::kWriteMemory, ctx, req->space_id(), true, true, [&](Space& sp) {
    if (OpStatus e = buf.Resize("WriteMemory", req->data().size()); !e.ok()) return e;
    return DoWrite(sp, *req, resp, opts_.max_io_bytes);
  });
}

grpc::Status VmSpaceService::Madvise(grpc::ServerContext* ctx, const v1::MadviseRequest* req,
                                     v1::MadviseResponse* resp) {
  return OnSpace(RpcMethod::kMadvise, ctx, req->space_id(), false, true,
                 [&](Space& sp) { return DoMadvise(sp, *req, resp); });
}

// Brk and Mremap may grow a mapping that MAP_LOCKED populates: they allocate (the
// tenant quota is checked), as Mmap.
grpc::Status VmSpaceService::Brk(grpc::ServerContext* ctx, const v1::BrkRequest* req, v1::BrkResponse* resp) {
  return OnSpace(RpcMethod::kBrk, ctx, req->space_id(), false, true,
                 [&](Space& sp) { return DoBrk(sp, *req, resp); });
}

grpc::Status VmSpaceService::Mremap(grpc::ServerContext* ctx, const v1::MremapRequest* req,
                                    v1::MremapResponse* resp) {
  return OnSpace(RpcMethod::kMremap, ctx, req->space_id(), false, true,
                 [&](Space& sp) { return DoMremap(sp, *req, resp); });
}

grpc::Status VmSpaceService::Mincore(grpc::ServerContext* ctx, const v1::MincoreRequest* req,
                                     v1::MincoreResponse* resp) {
  Buffers buf(registry_.frames());  // the vector, while the call runs
  return OnSpace(RpcMethod::kMincore, ctx, req->space_id(), false, false, [&](Space& sp) {
    return DoMincore(sp, *req, resp, opts_.max_io_bytes, buf);
  });
}

grpc::Status VmSpaceService::Msync(grpc::ServerContext* ctx, const v1::MsyncRequest* req,
                                   v1::MsyncResponse* resp) {
  return OnSpace(RpcMethod::kMsync, ctx, req->space_id(), false, false,
                 [&](Space& sp) { return DoMsync(sp, *req, resp); });
}

// mlock populates (faults pages in): stoppable and allocating, as Fault; munlock and
// munlockall only change VMAs (splits: as munmap and mprotect); mseal as well.
grpc::Status VmSpaceService::Mlock(grpc::ServerContext* ctx, const v1::MlockRequest* req,
                                   v1::MlockResponse* resp) {
  return OnSpace(RpcMethod::kMlock, ctx, req->space_id(), true, true,
                 [&](Space& sp) { return DoMlock(sp, *req, resp); });
}

grpc::Status VmSpaceService::Munlock(grpc::ServerContext* ctx, const v1::MunlockRequest* req,
                                     v1::MunlockResponse* resp) {
  return OnSpace(RpcMethod::kMunlock, ctx, req->space_id(), false, false,
                 [&](Space& sp) { return DoMunlock(sp, *req, resp); });
}

grpc::Status VmSpaceService::Mlockall(grpc::ServerContext* ctx, const v1::MlockallRequest* req,
                                      v1::MlockallResponse* resp) {
  return OnSpace(RpcMethod::kMlockall, ctx, req->space_id(), true, true,
                 [&](Space& sp) { return DoMlockall(sp, *req, resp); });
}

grpc::Status VmSpaceService::Munlockall(grpc::ServerContext* ctx, const v1::MunlockallRequest* req,
                                        v1::MunlockallResponse* resp) {
  return OnSpace(RpcMethod::kMunlockall, ctx, req->space_id(), false, false,
                 [&](Space& sp) { return DoMunlockall(sp, *req, resp); });
}

grpc::Status VmSpaceService::Mseal(grpc::ServerContext* ctx, const v1::MsealRequest* req,
                                   v1::MsealResponse* resp) {
  return OnSpace(RpcMethod::kMseal, ctx, req->space_id(), false, false,
                 [&](Space& sp) { return DoMseal(sp, *req, resp); });
}

}  // namespace vmspace::rpc
