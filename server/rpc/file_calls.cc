// SPDX-License-Identifier: Apache-2.0
// The file calls of VmSpaceService: OpenFile, CreateShmemFile, CloseFile,
// TruncateFile, StatFile, ListFiles, ReadFile, WriteFile, FsyncFile.
#include <absl/strings/str_split.h>

#include <cerrno>
#include <memory>
#include <string>

#include "rpc/buffers.h"
#include "rpc/handle.h"
#include "rpc/proto_convert.h"

namespace vmspace::rpc {

using metrics::RpcMethod;
using metrics::RpcScope;

namespace {

// ---- files (the registry's FileTable; ids as clients see them, see TableFileId) ----

// The error of open(2) of `path`, with the reason spelt out where the errno alone
// would puzzle (no --data-dir, a path that leaves it).
OpStatus OpenError(int err, const std::string& path, const std::string& data_dir) {
  if (err == EACCES && data_dir.empty())
    return ErrnoErrorDetail(err, "open",
                            "vmspaced runs without --data-dir: host files are off "
                            "(CreateShmemFile still works)");
  if (err == EACCES)
    return ErrnoErrorDetail(err, "open", "'" + path + "' leads out of --data-dir or is not accessible");
  if (err == EINVAL) {
    bool dotdot = false;
    for (absl::string_view part : absl::StrSplit(path, '/')) dotdot = dotdot || part == "..";
    if (path.empty() || path[0] == '/' || dotdot)
      return ErrnoErrorDetail(err, "open",
                              "'" + path + "': want a relative path under --data-dir without '..'");
  }
  return ErrnoError(err, "open");
}

// EMFILE: the caller's tenant holds --tenant-max-open-files files (RLIMIT_NOFILE).
OpStatus TenantFilesFull(const char* call) {
  return ErrnoErrorDetail(EMFILE, call, "the tenant has --tenant-max-open-files files open");
}

/// FileAccessMode -> O_RDONLY / O_WRONLY / O_RDWR; false if unspecified or unknown.
bool ToOpenAccess(v1::FileAccessMode m, int* out) {
  switch (m) {
    case v1::FILE_ACCESS_RDONLY: *out = O_RDONLY; return true;
    case v1::FILE_ACCESS_WRONLY: *out = O_WRONLY; return true;
    case v1::FILE_ACCESS_RDWR: *out = O_RDWR; return true;
    default: return false;
  }
}

// Whose handles and VMAs StatFile and ListFiles count: the caller's tenant's (its
// cgroup, active for the call), or everyone's for an admin or without tenants.
const MemCgroup* StatScope(const Caller& c) { return c.admin ? nullptr : ActiveMemcg(); }

OpStatus IoTooLarge(const char* what, uint64_t n, uint64_t max_io) {
  return ErrnoErrorDetail(EINVAL, what,
                          std::to_string(n) + " bytes exceed --max-io-bytes=" + std::to_string(max_io));
}

}  // namespace

grpc::Status VmSpaceService::OpenFile(grpc::ServerContext* ctx, const v1::OpenFileRequest* req,
                                      v1::OpenFileResponse* resp) {
  return Handle(RpcMethod::kOpenFile, ctx, [&](const Caller& c) -> OpStatus {
    OpenFlags f;
    f.write = req->write();
    if (req->access() != v1::FILE_ACCESS_MODE_UNSPECIFIED) {
      int access;
      if (!ToOpenAccess(req->access(), &access))
        return ErrnoErrorDetail(EINVAL, "open", "unknown access mode");
      f.access = access;
    }
    f.create = req->create();
    f.exclusive = req->exclusive();
    f.truncate = req->truncate();
    if (!registry_.ReserveFile(c.tenant, opts_.tenant_max_open_files)) return TenantFilesFull("open");
    const SysResult r = registry_.files().Open(req->path(), f);
    if (!r.ok()) {
      registry_.UnreserveFile(c.tenant);
      return OpenError(r.error, req->path(), registry_.data_dir());
    }
    registry_.SetFileOwner(r.value, c.tenant);
    resp->set_file_id(registry_.PublicFileId(r.value));
    return {};
  });
}

grpc::Status VmSpaceService::CreateShmemFile(grpc::ServerContext* ctx,
                                             const v1::CreateShmemFileRequest* req,
                                             v1::CreateShmemFileResponse* resp) {
  return Handle(RpcMethod::kCreateShmemFile, ctx, [&](const Caller& c) -> OpStatus {
    if (!registry_.ReserveFile(c.tenant, opts_.tenant_max_open_files))
      return TenantFilesFull("memfd_create");
    const SysResult r =
        registry_.files().CreateShmem(req->name(), req->size(), req->allow_sealing() ? MFD_ALLOW_SEALING : 0);
    if (!r.ok()) {
      registry_.UnreserveFile(c.tenant);
      return ErrnoError(r.error, "memfd_create");
    }
    registry_.SetFileOwner(r.value, c.tenant);
    resp->set_file_id(registry_.PublicFileId(r.value));
    return {};
  });
}

grpc::Status VmSpaceService::CloseFile(grpc::ServerContext* ctx, const v1::CloseFileRequest* req,
                                       v1::CloseFileResponse*) {
  return Handle(RpcMethod::kCloseFile, ctx, [&](const Caller& c) -> OpStatus {
    const uint64_t id = registry_.TableFileId(req->file_id(), c.tenant);
    const int err = registry_.files().Close(id);
    if (err != 0) return ErrnoError(err, "close");
    registry_.ForgetFile(id);
    return {};
  });
}

grpc::Status VmSpaceService::TruncateFile(grpc::ServerContext* ctx,
                                          const v1::TruncateFileRequest* req,
                                          v1::TruncateFileResponse*) {
  return Handle(RpcMethod::kTruncateFile, ctx, [&](const Caller& c) -> OpStatus {
    const int err =
        registry_.files().Truncate(registry_.TableFileId(req->file_id(), c.tenant), req->size());
    return err == 0 ? OpStatus{} : ErrnoError(err, "ftruncate");
  });
}

grpc::Status VmSpaceService::StatFile(grpc::ServerContext* ctx, const v1::StatFileRequest* req,
                                      v1::StatFileResponse* resp) {
  return Handle(RpcMethod::kStatFile, ctx, [&](const Caller& c) -> OpStatus {
    const uint64_t id = registry_.TableFileId(req->file_id(), c.tenant);
    FileStat st;
    const SysResult r = registry_.files().Stat(id, &st, StatScope(c));
    if (!r.ok()) return ErrnoError(r.error, "fstat");
    const std::shared_ptr<vmspace::OpenFile> f = registry_.files().Get(id);
    FillFileInfo(st, req->file_id(), f && f->writable, resp->mutable_file());
    return {};
  });
}

grpc::Status VmSpaceService::ListFiles(grpc::ServerContext* ctx, const v1::ListFilesRequest* req,
                                       v1::ListFilesResponse* resp) {
  return Handle(RpcMethod::kListFiles, ctx, [&](const Caller& c) -> OpStatus {
    const size_t page = req->page_size() == 0 ? kListFilesPageDefault
                                              : std::min<size_t>(req->page_size(), kListFilesPageMax);
    uint64_t next = 0;
    // Tokens are file ids (PublicFileId), not the table's count of opens.
    const uint64_t from = req->page_token() == 0 ? 0 : registry_.TableIdOf(req->page_token());
    if (req->page_token() != 0 && from == 0)
      return ErrnoErrorDetail(EINVAL, "ListFiles", "page_token is not a next_page_token of this daemon");
    for (const FileStat& st : registry_.files().List(from, page, &next, StatScope(c))) {
      const uint64_t public_id = registry_.PublicFileId(st.file_id);
      if (registry_.TableFileId(public_id, c.tenant, c.admin) == 0) continue;  // not the caller's
      const std::shared_ptr<vmspace::OpenFile> f = registry_.files().Get(st.file_id);
      FillFileInfo(st, public_id, f && f->writable, resp->add_files());
    }
    if (resp->ByteSizeLong() > opts_.max_message_bytes) {
      resp->Clear();
      return ErrnoErrorDetail(ENOMEM, "ListFiles", "response exceeds --max-message-bytes");
    }
    resp->set_next_page_token(next == 0 ? 0 : registry_.PublicFileId(next));
    return {};
  });
}

grpc::Status VmSpaceService::ReadFile(grpc::ServerContext* ctx, const v1::ReadFileRequest* req,
                                      v1::ReadFileResponse* resp) {
  Buffers buf(registry_.frames());  // the data, while the call runs
  return Handle(RpcMethod::kReadFile, ctx, [&](const Caller& c) -> OpStatus {
    if (req->len() > opts_.max_io_bytes) return IoTooLarge("pread", req->len(), opts_.max_io_bytes);
    if (OpStatus e = buf.Resize("ReadFile", req->len()); !e.ok()) return e;
    std::string* data = resp->mutable_data();
    data->resize(req->len());
    const SysResult r = registry_.files().Read(registry_.TableFileId(req->file_id(), c.tenant),
                                               req->offset(), data->data(), req->len());
    if (!r.ok()) {
      resp->clear_data();
      return ErrnoError(r.error, "pread");
    }
    data->resize(r.value);
    return {};
  });
}

grpc::Status VmSpaceService::WriteFile(grpc::ServerContext* ctx, const v1::WriteFileRequest* req,
                                       v1::WriteFileResponse* resp) {
  Buffers buf(registry_.frames());  // the request's data
  return Handle(RpcMethod::kWriteFile, ctx, [&](const Caller& c) -> OpStatus {
    if (req->data().size() > opts_.max_io_bytes)
      return IoTooLarge("pwrite", req->data().size(), opts_.max_io_bytes);
    if (OpStatus e = buf.Resize("WriteFile", req->data().size()); !e.ok()) return e;
    const SysResult r = registry_.files().Write(registry_.TableFileId(req->file_id(), c.tenant),
                                                req->offset(), req->data().data(),
                                                req->data().size());
    if (!r.ok()) return ErrnoError(r.error, "pwrite");
    resp->set_bytes_written(r.value);
    return {};
  });
}

grpc::Status VmSpaceService::FsyncFile(grpc::ServerContext* ctx, const v1::FsyncFileRequest* req,
                                       v1::FsyncFileResponse*) {
  return Handle(RpcMethod::kFsyncFile, ctx, [&](const Caller& c) -> OpStatus {
    const int err = registry_.files().Fsync(registry_.TableFileId(req->file_id(), c.tenant));
    return err == 0 ? OpStatus{} : ErrnoError(err, "fsync");
  });
}

grpc::Status VmSpaceService::AddFileSeals(grpc::ServerContext* ctx, const v1::AddFileSealsRequest* req,
                                          v1::AddFileSealsResponse*) {
  return Handle(RpcMethod::kAddFileSeals, ctx, [&](const Caller& c) -> OpStatus {
    const int err = registry_.files().AddSeals(registry_.TableFileId(req->file_id(), c.tenant), req->seals());
    if (err == EINVAL && (req->seals() & ~0x3fu))
      return ErrnoErrorDetail(err, "fcntl", "unknown seal bits (F_SEAL_SEAL 1 ... F_SEAL_EXEC 32)");
    return err == 0 ? OpStatus{} : ErrnoError(err, "fcntl");
  });
}

grpc::Status VmSpaceService::GetFileSeals(grpc::ServerContext* ctx, const v1::GetFileSealsRequest* req,
                                          v1::GetFileSealsResponse* resp) {
  return Handle(RpcMethod::kGetFileSeals, ctx, [&](const Caller& c) -> OpStatus {
    const SysResult r = registry_.files().GetSeals(registry_.TableFileId(req->file_id(), c.tenant));
    if (!r.ok()) return ErrnoError(r.error, "fcntl");
    resp->set_seals(static_cast<uint32_t>(r.value));
    return {};
  });
}

grpc::Status VmSpaceService::ReopenFile(grpc::ServerContext* ctx, const v1::ReopenFileRequest* req,
                                        v1::ReopenFileResponse* resp) {
  return Handle(RpcMethod::kReopenFile, ctx, [&](const Caller& c) -> OpStatus {
    int access;
    if (!ToOpenAccess(req->access(), &access))
      return ErrnoErrorDetail(EINVAL, "open", "access must be FILE_ACCESS_RDONLY, _WRONLY or _RDWR");
    const SysResult r = registry_.files().Reopen(registry_.TableFileId(req->file_id(), c.tenant), access);
    if (!r.ok()) return ErrnoError(r.error, "open");
    registry_.SetFileOwner(r.value, c.tenant);
    resp->set_file_id(registry_.PublicFileId(r.value));
    return {};
  });
}

}  // namespace vmspace::rpc
