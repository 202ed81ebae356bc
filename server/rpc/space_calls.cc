// SPDX-License-Identifier: Apache-2.0
// The space calls of VmSpaceService: CreateSpace, CloneSpace, ExecSpace, DestroySpace,
// ListSpaces, GetMaps.
#include <absl/strings/str_split.h>

#include <cerrno>
#include <string>
#include <vector>

#include "engine/exec.h"
#include "rpc/buffers.h"
#include "rpc/handle.h"
#include "rpc/log.h"
#include "rpc/proto_convert.h"

namespace vmspace::rpc {

using metrics::RpcMethod;
using metrics::RpcScope;

namespace {

constexpr size_t kMaxLabelBytes = 64;
// The fewest bytes one VMA adds to a GetMaps answer (its Vma message and maps line):
// an answer for more VMAs than max_message_bytes / this is refused before it is built.
constexpr uint64_t kMinGetMapsBytesPerVma = 96;

OpStatus DoGetMaps(Space& sp, const v1::GetMapsRequest& r, v1::GetMapsResponse* out,
                   uint64_t max_message, Buffers& buf) {
  const bool whole = r.start() == 0 && r.end() == 0;
  const uint64_t end = r.end() == 0 ? ~0ull : r.end();
  if (r.start() > end) return ErrnoErrorDetail(EINVAL, "GetMaps", "start > end");
  // Counted before anything is built: the whole space from map_count, a range in the
  // index (a walk that stops one past the most an answer may hold).
  const uint64_t most = max_message / kMinGetMapsBytesPerVma;
  const uint64_t n = whole ? sp.as.Counters().map_count : sp.as.CountVmas(r.start(), end, most + 1);
  if (n > most)
    return ErrnoErrorDetail(ENOMEM, "GetMaps",
                            "the answer for " + std::string(whole ? "" : "more than ") +
                                std::to_string(whole ? n : most) +
                                " VMAs would exceed --max-message-bytes; ask for a smaller range");
  // The list and the answer: at least this much per VMA while the call runs.
  const uint64_t want = n * (sizeof(VmaInfo) + 2 * kMinGetMapsBytesPerVma);
  if (OpStatus e = buf.Resize("GetMaps", want); !e.ok()) return e;
  const std::vector<VmaInfo> vmas = sp.as.Maps(r.start(), end);
  std::string* text = out->mutable_maps_text();
  for (const VmaInfo& v : vmas) {
    const std::string line = AddressSpace::FormatMapsLine(v);
    // perms ("rw-p") and dev ("00:00") are fields 2 and 4 of the engine's maps line.
    const std::vector<std::string> field = absl::StrSplit(line, absl::MaxSplits(' ', 4));
    v1::Vma* o = out->add_vmas();
    o->set_start(v.start);
    o->set_end(v.end);
    o->set_perms(field[1]);
    o->set_vm_flags(v.flags);
    o->set_smaps_vmflags(AddressSpace::VmFlagsString(v.flags));
    o->set_pgoff(v.pgoff);
    o->set_offset(v.offset);
    o->set_dev(field[3]);
    o->set_inode(v.inode);
    o->set_name(v.name);
    o->set_rss_bytes(v.rss_pages * kPageSize);
    *text += line;
    *text += '\n';
  }
  // The whole list is one snapshot, so its length is the exact map_count.
  out->set_map_count(whole ? vmas.size() : sp.as.Counters().map_count);
  const size_t bytes = out->ByteSizeLong();
  if (bytes > max_message) {
    out->Clear();
    return ErrnoErrorDetail(ENOMEM, "GetMaps",
                            "response of " + std::to_string(bytes) +
                                " bytes exceeds --max-message-bytes; ask for a smaller range");
  }
  return {};
}

}  // namespace

grpc::Status VmSpaceService::CreateSpace(grpc::ServerContext* ctx,
                                         const v1::CreateSpaceRequest* req,
                                         v1::CreateSpaceResponse* resp) {
  return Handle(RpcMethod::kCreateSpace, ctx, [&](const Caller& c) -> OpStatus {
    SpaceOptions opts;
    opts.fault_around_bytes = opts_.fault_around_bytes;
    if (req->label().size() > kMaxLabelBytes)
      return ErrnoErrorDetail(EINVAL, "CreateSpace", "label longer than 64 bytes");
    if (OpStatus s = ToSpaceOptions(req->settings(), opts_.default_profile,
                                    opts_.max_map_count_limit, &opts);
        !s.ok())
      return s;
    // Every valid switch combination is a named profile; Describe() covers "custom".
    const std::string profile =
        opts.profile.name == "custom" ? opts.profile.Describe() : opts.profile.name;
    bool tenant_full = false;
    const uint64_t id =
        registry_.Create(opts, c.tenant, req->label(), profile, opts_.tenant_max_spaces, &tenant_full);
    if (tenant_full)
      return ErrnoErrorDetail(ENOMEM, "CreateSpace",
                              "tenant '" + c.tenant + "' owns --tenant-max-spaces=" +
                                  std::to_string(opts_.tenant_max_spaces) + " spaces");
    if (id == 0)
      return ErrnoErrorDetail(ENOMEM, "CreateSpace",
                              "space limit reached (--max-spaces=" +
                                  std::to_string(registry_.max_spaces()) + ")");
    resp->set_space_id(id);
    Logf(LogLevel::kDebug, "tenant '%s' created space %llu \"%s\"", c.tenant.c_str(),
         static_cast<unsigned long long>(id), req->label().c_str());
    return {};
  });
}

grpc::Status VmSpaceService::CloneSpace(grpc::ServerContext* ctx,
                                        const v1::CloneSpaceRequest* req,
                                        v1::CloneSpaceResponse* resp) {
  return Handle(RpcMethod::kCloneSpace, ctx, [&](const Caller& c) -> OpStatus {
    if (req->label().size() > kMaxLabelBytes)
      return ErrnoErrorDetail(EINVAL, "CloneSpace", "label longer than 64 bytes");
    PeerSlot peer(&peer_calls_, ctx, opts_.max_calls_per_peer);
    if (!peer.admitted()) return peer.refusal();
    if (OpStatus q = CheckMemoryQuota(c); !q.ok()) return q;
    // A tenant forks only its own spaces; another tenant's answers as an unknown one.
    const std::shared_ptr<Space> parent = FindOwn(c, req->space_id());
    if (!parent) return SpaceNotFound(req->space_id());
    LockingProfile override_profile;
    const LockingProfile* profile = nullptr;  // the parent's
    std::string profile_name = parent->locking_profile;
    if (!req->locking_profile().empty()) {
      if (req->locking_profile() == "default") {
        override_profile = opts_.default_profile;
      } else if (std::string err;
                 !LockingProfile::Parse(req->locking_profile(), &override_profile, &err)) {
        return ErrnoErrorDetail(EINVAL, "CloneSpace", "locking_profile: " + err);
      }
      profile = &override_profile;
      profile_name = override_profile.name == "custom" ? override_profile.Describe()
                                                       : override_profile.name;
    }
    const std::string label = req->label().empty() ? parent->label : req->label();
    bool tenant_full = false;
    int err = 0;
    const uint64_t id = registry_.Fork(*parent, c.tenant, label, profile_name, profile,
                                       opts_.tenant_max_spaces, &tenant_full, &err);
    if (id == 0 && tenant_full)
      return ErrnoErrorDetail(EAGAIN, "CloneSpace",
                              "tenant '" + c.tenant + "' owns --tenant-max-spaces=" +
                                  std::to_string(opts_.tenant_max_spaces) + " spaces");
    if (id == 0 && err == EAGAIN)
      return ErrnoErrorDetail(EAGAIN, "CloneSpace",
                              "space limit reached (--max-spaces=" +
                                  std::to_string(registry_.max_spaces()) + ")");
    if (id == 0) return ErrnoErrorDetail(err, "CloneSpace", "the memory budget refuses the copy");
    resp->set_space_id(id);
    Logf(LogLevel::kDebug, "tenant '%s' forked space %llu into %llu", c.tenant.c_str(),
         static_cast<unsigned long long>(req->space_id()), static_cast<unsigned long long>(id));
    return {};
  });
}

grpc::Status VmSpaceService::ExecSpace(grpc::ServerContext* ctx, const v1::ExecSpaceRequest* req,
                                       v1::ExecSpaceResponse* resp) {
  return Handle(RpcMethod::kExecSpace, ctx, [&](const Caller& c) -> OpStatus {
    PeerSlot peer(&peer_calls_, ctx, opts_.max_calls_per_peer);
    if (!peer.admitted()) return peer.refusal();
    if (OpStatus q = CheckMemoryQuota(c); !q.ok()) return q;
    const std::shared_ptr<Space> sp = FindOwn(c, req->space_id());
    if (!sp) return SpaceNotFound(req->space_id());
    ExecImage img;
    if (int e = OpenExecImage(registry_.files(), req->path(), req->interpreter_path(), &img))
      return ErrnoErrorDetail(e, "ExecSpace", "program '" + req->path() + "'");
    img.argv.assign(req->argv().begin(), req->argv().end());
    if (img.argv.empty()) img.argv.push_back(req->path());
    img.envp.assign(req->envp().begin(), req->envp().end());
    int err = 0;
    std::unique_ptr<AddressSpace> mm = sp->as.Exec(img, &err);
    if (!mm) return ErrnoErrorDetail(err, "ExecSpace", "loading '" + req->path() + "'");
    const SpaceCounters counters = mm->Counters();
    const uint64_t start_brk = mm->Brk(0);
    if (!registry_.Exec(*sp, std::move(mm))) return SpaceNotFound(req->space_id());
    resp->set_start_brk(start_brk);
    resp->set_map_count(counters.map_count);
    resp->set_interpreter(img.program.interp);
    return {};
  });
}

grpc::Status VmSpaceService::DestroySpace(grpc::ServerContext* ctx,
                                          const v1::DestroySpaceRequest* req,
                                          v1::DestroySpaceResponse*) {
  return Handle(RpcMethod::kDestroySpace, ctx, [&](const Caller& c) -> OpStatus {
    // Only the owner or an admin; another tenant's space answers as an unknown one.
    const std::shared_ptr<Space> sp = c.admin ? registry_.Find(req->space_id())
                                              : FindOwn(c, req->space_id());
    if (!sp || !registry_.Destroy(req->space_id())) return SpaceNotFound(req->space_id());
    Logf(LogLevel::kDebug, "tenant '%s' destroyed space %llu", c.tenant.c_str(),
         static_cast<unsigned long long>(req->space_id()));
    return {};
  });
}

grpc::Status VmSpaceService::ListSpaces(grpc::ServerContext* ctx, const v1::ListSpacesRequest*,
                                        v1::ListSpacesResponse* resp) {
  return Handle(RpcMethod::kListSpaces, ctx, [&](const Caller& caller) -> OpStatus {
    for (const std::shared_ptr<Space>& sp : registry_.List()) {
      if (!caller.admin && sp->tenant != caller.tenant) continue;
      const SpaceCounters c = sp->as.Counters();
      v1::SpaceInfo* info = resp->add_spaces();
      info->set_space_id(sp->id);
      info->set_label(sp->label);
      info->set_map_count(c.map_count);
      info->set_total_vm_bytes(c.total_vm_pages * kPageSize);
      info->set_rss_bytes(c.rss_pages * kPageSize);
      info->set_pgtable_bytes(c.pgtable_bytes);
      info->set_locking_profile(sp->locking_profile);
    }
    if (resp->ByteSizeLong() > opts_.max_message_bytes) {
      resp->Clear();
      return ErrnoErrorDetail(ENOMEM, "ListSpaces", "response exceeds --max-message-bytes");
    }
    return {};
  });
}

grpc::Status VmSpaceService::GetMaps(grpc::ServerContext* ctx, const v1::GetMapsRequest* req,
                                     v1::GetMapsResponse* resp) {
  Buffers buf(registry_.frames());  // the list and the answer
  return OnSpace(RpcMethod::kGetMaps, ctx, req->space_id(), false, false, [&](Space& sp) {
    return DoGetMaps(sp, *req, resp, opts_.max_message_bytes, buf);
  });
}

}  // namespace vmspace::rpc
