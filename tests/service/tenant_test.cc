// SPDX-License-Identifier: Apache-2.0
// Tenants: bearer tokens from --token-file, ownership of spaces and
// files, per-tenant quotas, SIGHUP reload, the listen policy, ids across restarts, and
// the same over TLS and mutual TLS with certificates made here with openssl.
#include "lib/client.h"  // first: vmspace.pb.h before <signal.h> (see daemon.h)

#include "daemon.h"

#include <sys/mman.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <set>

#include "../../client/tests/subprocess.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace vmspace::service_test {
namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kAddr = 0x10000000;

/// A scratch directory removed at the end (with its files).
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/vmspace-tenant-test.XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  const std::string& path() const { return path_; }
  std::string Write(const std::string& name, const std::string& text) const {
    const std::string p = path_ + "/" + name;
    std::ofstream(p) << text;
    return p;
  }

 private:
  std::string path_;
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// One client: a channel (insecure or TLS) and the token its calls carry ("" = none).
struct Conn {
  std::unique_ptr<v1::VmSpace::Stub> stub;
  std::shared_ptr<grpc::Channel> channel;
  std::string token;

  std::unique_ptr<grpc::ClientContext> ctx() const {
    auto c = Ctx();
    if (!token.empty()) c->AddMetadata("authorization", "Bearer " + token);
    return c;
  }
  grpc::Status Ping() const {
    v1::PingResponse r;
    return stub->Ping(ctx().get(), v1::PingRequest{}, &r);
  }
  /// CreateSpace: the id, or 0 with *st set.
  uint64_t Create(grpc::Status* st = nullptr) const {
    v1::CreateSpaceResponse r;
    const grpc::Status s = stub->CreateSpace(ctx().get(), v1::CreateSpaceRequest{}, &r);
    if (st) *st = s;
    return s.ok() ? r.space_id() : 0;
  }
  std::vector<uint64_t> List() const {
    v1::ListSpacesResponse r;
    EXPECT_TRUE(stub->ListSpaces(ctx().get(), v1::ListSpacesRequest{}, &r).ok());
    std::vector<uint64_t> ids;
    for (const auto& s : r.spaces()) ids.push_back(s.space_id());
    return ids;
  }
  std::vector<uint64_t> ListFiles() const {
    v1::ListFilesResponse r;
    EXPECT_TRUE(stub->ListFiles(ctx().get(), v1::ListFilesRequest{}, &r).ok());
    std::vector<uint64_t> ids;
    for (const auto& f : r.files()) ids.push_back(f.file_id());
    return ids;
  }
  grpc::Status Mmap(uint64_t space, uint64_t len, uint64_t file_id = 0) const {
    v1::MmapRequest q;
    q.set_space_id(space);
    q.set_addr(kAddr);
    q.set_len(len);
    q.set_prot(PROT_READ | PROT_WRITE);
    q.set_flags(MAP_FIXED | (file_id ? MAP_SHARED : MAP_PRIVATE | MAP_ANONYMOUS));
    q.set_file_id(file_id);
    v1::MmapResponse r;
    return stub->Mmap(ctx().get(), q, &r);
  }
  grpc::Status Write(uint64_t space, const std::string& data, uint64_t addr = kAddr) const {
    v1::WriteMemoryRequest q;
    q.set_space_id(space);
    q.set_addr(addr);
    q.set_data(data);
    v1::WriteMemoryResponse r;
    return stub->WriteMemory(ctx().get(), q, &r);
  }
  std::string Read(uint64_t space, uint64_t len) const {
    v1::ReadMemoryRequest q;
    q.set_space_id(space);
    q.set_addr(kAddr);
    q.set_len(len);
    v1::ReadMemoryResponse r;
    EXPECT_TRUE(stub->ReadMemory(ctx().get(), q, &r).ok());
    return r.data();
  }
  uint64_t Shmem(uint64_t size) const {
    v1::CreateShmemFileRequest q;
    q.set_name("t");
    q.set_size(size);
    v1::CreateShmemFileResponse r;
    EXPECT_TRUE(stub->CreateShmemFile(ctx().get(), q, &r).ok());
    return r.file_id();
  }
  /// Sends one BatchRequest, returns its response and the stream's status.
  grpc::Status Batch(const v1::BatchRequest& req, v1::BatchResponse* resp) const {
    auto c = ctx();
    auto stream = stub->Batch(c.get());
    bool got = false;
    if (stream->Write(req)) got = stream->Read(resp);
    stream->WritesDone();
    while (got && stream->Read(resp)) {
    }
    const grpc::Status s = stream->Finish();
    return got && s.ok() ? grpc::Status::OK : s;
  }
};

std::shared_ptr<grpc::Channel> Channel(const std::string& addr,
                                       std::shared_ptr<grpc::ChannelCredentials> creds) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(addr, creds, args);
}

/// A client of `addr`; `wait`: connect first (bounded), as Daemon::NewStub does.
Conn Connect(const std::string& addr, std::string token,
             std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials(),
             bool wait = true) {
  Conn c;
  c.channel = Channel(addr, std::move(creds));
  if (wait) c.channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10));
  c.stub = v1::VmSpace::NewStub(c.channel);
  c.token = std::move(token);
  return c;
}

// Appends {"Method", status of c.Method(request)} to `out`, the request's `id_field`
// set to `id` and then `setup` run on it (as q).
#define VMSPACE_CALL(Method, id_field, setup)                           \
  out.emplace_back(#Method, [&] {                                       \
    v1::Method##Request q;                                              \
    q.set_##id_field(id);                                               \
    setup;                                                              \
    v1::Method##Response r;                                             \
    return c.stub->Method(c.ctx().get(), q, &r);                        \
  }())

/// Every space RPC but CreateSpace on space `id` (DestroySpace last), each named.
std::vector<std::pair<std::string, grpc::Status>> EverySpaceRpc(const Conn& c, uint64_t id,
                                                                uint64_t file_id) {
  std::vector<std::pair<std::string, grpc::Status>> out;
  VMSPACE_CALL(Mmap, space_id, (q.set_addr(kAddr), q.set_len(kPage), q.set_prot(PROT_READ),
                      q.set_flags(MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED)));
  VMSPACE_CALL(Mmap, space_id, (q.set_len(kPage), q.set_prot(PROT_READ), q.set_flags(MAP_SHARED),
                      q.set_file_id(file_id)));
  VMSPACE_CALL(Munmap, space_id, (q.set_addr(kAddr + 64 * kPage), q.set_len(kPage)));
  VMSPACE_CALL(Mprotect, space_id, (q.set_addr(kAddr), q.set_len(kPage), q.set_prot(PROT_READ)));
  VMSPACE_CALL(Fault, space_id, (q.set_addr(kAddr), q.set_access(v1::ACCESS_WRITE)));
  VMSPACE_CALL(Access, space_id, (q.set_addr(kAddr), q.set_len(kPage), q.set_access(v1::ACCESS_WRITE)));
  VMSPACE_CALL(ReadMemory, space_id, (q.set_addr(kAddr), q.set_len(16)));
  VMSPACE_CALL(WriteMemory, space_id, (q.set_addr(kAddr), q.set_data("stolen")));
  VMSPACE_CALL(GetMaps, space_id, (void)0);
  VMSPACE_CALL(Madvise, space_id, (q.set_addr(kAddr), q.set_len(kPage), q.set_advice(MADV_DONTNEED)));
  VMSPACE_CALL(Msync, space_id, (q.set_addr(kAddr), q.set_len(kPage), q.set_flags(MS_SYNC)));
  VMSPACE_CALL(DestroySpace, space_id, (void)0);
  return out;
}

/// One Batch message with one op of every kind on space `id`.
v1::BatchRequest EveryOp(uint64_t id) {
  v1::BatchRequest b;
  b.set_tag(7);
  auto* mm = b.add_ops()->mutable_mmap();
  mm->set_space_id(id), mm->set_len(kPage), mm->set_prot(PROT_READ), mm->set_flags(MAP_PRIVATE | MAP_ANONYMOUS);
  auto* mu = b.add_ops()->mutable_munmap();
  mu->set_space_id(id), mu->set_addr(kAddr + 64 * kPage), mu->set_len(kPage);
  auto* mp = b.add_ops()->mutable_mprotect();
  mp->set_space_id(id), mp->set_addr(kAddr), mp->set_len(kPage), mp->set_prot(PROT_READ);
  auto* f = b.add_ops()->mutable_fault();
  f->set_space_id(id), f->set_addr(kAddr), f->set_access(v1::ACCESS_WRITE);
  auto* a = b.add_ops()->mutable_access();
  a->set_space_id(id), a->set_addr(kAddr), a->set_len(kPage), a->set_access(v1::ACCESS_WRITE);
  auto* r = b.add_ops()->mutable_read();
  r->set_space_id(id), r->set_addr(kAddr), r->set_len(16);
  auto* w = b.add_ops()->mutable_write();
  w->set_space_id(id), w->set_addr(kAddr), w->set_data("stolen");
  auto* md = b.add_ops()->mutable_madvise();
  md->set_space_id(id), md->set_addr(kAddr), md->set_len(kPage), md->set_advice(MADV_DONTNEED);
  auto* ms = b.add_ops()->mutable_msync();
  ms->set_space_id(id), ms->set_addr(kAddr), ms->set_len(kPage), ms->set_flags(MS_SYNC);
  return b;
}

/// Every file RPC on file `id` (CloseFile last), each named.
std::vector<std::pair<std::string, grpc::Status>> EveryFileRpc(const Conn& c, uint64_t id) {
  std::vector<std::pair<std::string, grpc::Status>> out;
  VMSPACE_CALL(TruncateFile, file_id, q.set_size(0));
  VMSPACE_CALL(StatFile, file_id, (void)0);
  VMSPACE_CALL(ReadFile, file_id, q.set_len(16));
  VMSPACE_CALL(WriteFile, file_id, q.set_data("stolen"));
  VMSPACE_CALL(FsyncFile, file_id, (void)0);
  VMSPACE_CALL(CloseFile, file_id, (void)0);
#undef VMSPACE_CALL
  return out;
}

const char* kTokens =
    "# tenant test tokens\n"
    "tok-alice alice\n"
    "tok-bob   bob   # a comment after the fields\n"
    "\n"
    "tok-root  root admin\n";

class TenantTest : public ::testing::Test {
 protected:
  void StartDaemon(std::vector<std::string> extra = {}) {
    tokens_ = dir_.Write("tokens", kTokens);
    extra.push_back("--token-file=" + tokens_);
    ASSERT_TRUE(d_.Start(extra)) << d_.stderr_text();
    alice_ = Connect(d_.grpc_addr(), "tok-alice");
    bob_ = Connect(d_.grpc_addr(), "tok-bob");
    root_ = Connect(d_.grpc_addr(), "tok-root");
  }
  void TearDown() override {
    if (d_.running()) {
      EXPECT_EQ(d_.Stop(), 0);
    }
  }
  TempDir dir_;
  std::string tokens_;
  Daemon d_;
  Conn alice_, bob_, root_;
};

TEST_F(TenantTest, AnotherTenantsSpacesAndFilesDoNotExistForIt) {
  StartDaemon();
  const uint64_t a = alice_.Create();
  ASSERT_NE(a, 0u);
  ASSERT_TRUE(alice_.Mmap(a, 128 * kPage).ok());
  ASSERT_TRUE(alice_.Write(a, "alice's data").ok());
  const uint64_t fa = alice_.Shmem(kPage);
  ASSERT_NE(fa, 0u);
  const uint64_t b = bob_.Create();
  ASSERT_NE(b, 0u);
  const uint64_t fb = bob_.Shmem(kPage);
  const uint64_t unknown = a + 1000000;

  // Bob on alice's space: every RPC NOT_FOUND, word for word as for an unknown id.
  const auto on_alice = EverySpaceRpc(bob_, a, fb);
  const auto on_unknown = EverySpaceRpc(bob_, unknown, fb);
  ASSERT_EQ(on_alice.size(), on_unknown.size());
  for (size_t i = 0; i < on_alice.size(); i++) {
    const auto& [name, s] = on_alice[i];
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << name << ": " << s.error_message();
    EXPECT_EQ(s.error_message(), "space " + std::to_string(a) + " not found") << name;
    EXPECT_EQ(on_unknown[i].second.error_code(), grpc::StatusCode::NOT_FOUND) << name;
    EXPECT_EQ(on_unknown[i].second.error_message(), "space " + std::to_string(unknown) + " not found");
  }
  // The same in a Batch: each op's result is NOT_FOUND; the stream itself is fine.
  v1::BatchResponse resp;
  ASSERT_TRUE(bob_.Batch(EveryOp(a), &resp).ok());
  ASSERT_EQ(resp.results_size(), EveryOp(a).ops_size());
  for (const v1::OpResult& r : resp.results()) {
    EXPECT_EQ(r.code(), static_cast<int>(grpc::StatusCode::NOT_FOUND)) << r.ShortDebugString();
    EXPECT_EQ(r.message(), "space " + std::to_string(a) + " not found");
  }
  // Alice's file: bob's file RPCs get EBADF, word for word as for an unknown file id,
  // and so does mapping it into bob's own space.
  const uint64_t unknown_file = fa + 1000000;
  const auto f_alice = EveryFileRpc(bob_, fa);
  const auto f_unknown = EveryFileRpc(bob_, unknown_file);
  for (size_t i = 0; i < f_alice.size(); i++) {
    const auto& [name, s] = f_alice[i];
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << name << ": " << s.error_message();
    EXPECT_EQ(s.error_message().rfind("EBADF: ", 0), 0u) << name << ": " << s.error_message();
    EXPECT_EQ(s.error_message(), f_unknown[i].second.error_message()) << name;
  }
  const grpc::Status map_other = bob_.Mmap(b, kPage, fa);
  EXPECT_TRUE(HasErrno(map_other, grpc::StatusCode::INVALID_ARGUMENT, "EBADF", EBADF));
  EXPECT_EQ(map_other.error_message(), bob_.Mmap(b, kPage, unknown_file).error_message());
  EXPECT_TRUE(bob_.Mmap(b, kPage, fb).ok());

  // Nothing of alice's was touched: her data, her maps, her file.
  EXPECT_EQ(alice_.Read(a, 12), "alice's data");
  EXPECT_EQ(alice_.List(), std::vector<uint64_t>{a});
  EXPECT_EQ(alice_.ListFiles(), std::vector<uint64_t>{fa});
  EXPECT_EQ(bob_.List(), std::vector<uint64_t>{b});
  EXPECT_EQ(bob_.ListFiles(), std::vector<uint64_t>{fb});
  for (const auto& [name, s] : EveryFileRpc(alice_, fa)) EXPECT_TRUE(s.ok()) << name << ": " << s.error_message();
  EXPECT_EQ(alice_.ListFiles(), std::vector<uint64_t>{});  // closed by its owner

  // The admin lists every space and every file and may destroy any space; it does not
  // operate on other tenants' spaces otherwise.
  const std::vector<uint64_t> all = root_.List();
  EXPECT_EQ(all.size(), 2u);
  EXPECT_EQ(std::set<uint64_t>(all.begin(), all.end()), (std::set<uint64_t>{a, b}));
  EXPECT_EQ(root_.ListFiles(), std::vector<uint64_t>{fb});
  EXPECT_EQ(root_.Write(a, "x").error_code(), grpc::StatusCode::NOT_FOUND);
  v1::DestroySpaceRequest dq;
  dq.set_space_id(a);
  v1::DestroySpaceResponse dr;
  EXPECT_TRUE(root_.stub->DestroySpace(root_.ctx().get(), dq, &dr).ok());
  EXPECT_EQ(alice_.List(), std::vector<uint64_t>{});
  EXPECT_EQ(root_.List(), std::vector<uint64_t>{b});
}

TEST_F(TenantTest, MissingOrWrongTokenIsUnauthenticated) {
  StartDaemon();
  const Conn none = Connect(d_.grpc_addr(), "");
  const Conn wrong = Connect(d_.grpc_addr(), "tok-alicE");
  for (const Conn* c : {&none, &wrong}) {
    const grpc::Status ping = c->Ping();
    EXPECT_EQ(ping.error_code(), grpc::StatusCode::UNAUTHENTICATED) << ping.error_message();
    grpc::Status st;
    EXPECT_EQ(c->Create(&st), 0u);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    v1::BatchResponse resp;
    EXPECT_EQ(c->Batch(EveryOp(1), &resp).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    v1::GetServerInfoResponse info;
    EXPECT_EQ(c->stub->GetServerInfo(c->ctx().get(), {}, &info).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_EQ(none.Ping().error_message(),
            "missing \"authorization: Bearer <token>\" metadata (vmspace --token or $VMSPACE_TOKEN)");
  EXPECT_EQ(wrong.Ping().error_message(),
            "unknown bearer token (not in --token-file, or removed from it)");
  auto basic = none.ctx();
  basic->AddMetadata("authorization", "Basic dG9rLWFsaWNl");
  v1::PingResponse pr;
  EXPECT_EQ(none.stub->Ping(basic.get(), {}, &pr).error_message(),
            "the authorization metadata is not \"Bearer <token>\"");
  // Health stays open.
  auto health = grpc::health::v1::Health::NewStub(none.channel);
  grpc::health::v1::HealthCheckRequest hq;
  hq.set_service("vmspace.v1.VmSpace");
  grpc::health::v1::HealthCheckResponse hr;
  ASSERT_TRUE(health->Check(Ctx().get(), hq, &hr).ok());
  EXPECT_EQ(hr.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_TRUE(alice_.Ping().ok());
}

// A Batch stream refused UNAUTHENTICATED was never counted as open: it leaves the count
// of open streams (--max-streams) as it found it, with or without streams open.
TEST_F(TenantTest, UnauthenticatedBatchStreamsLeaveTheStreamLimitAlone) {
  StartDaemon({"--max-streams=2"});
  const Conn none = Connect(d_.grpc_addr(), "");
  const Conn wrong = Connect(d_.grpc_addr(), "tok-alicE");
  auto refuse_unauthenticated = [&](int n) {
    for (int i = 0; i < n; i++) {
      OpenStreams s;
      grpc::Status st;
      const Conn& c = i % 2 ? wrong : none;
      EXPECT_FALSE(s.Open(*c.stub, &st, c.token));
      EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED) << st.error_message();
    }
  };
  // With 2 open: refusing as many unauthenticated streams does not make room for more.
  OpenStreams open;
  grpc::Status refused;
  ASSERT_TRUE(open.Open(*alice_.stub, &refused, alice_.token));
  ASSERT_TRUE(open.Open(*bob_.stub, &refused, bob_.token));
  refuse_unauthenticated(2);
  EXPECT_FALSE(open.Open(*root_.stub, &refused, root_.token));
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(refused.error_message(), "EAGAIN: Batch: --max-streams=2 Batch streams are open; try again later");
  open.CloseAll();
  // With none open: the next streams of any tenant are still admitted, exactly 2.
  refuse_unauthenticated(3);
  EXPECT_TRUE(open.Open(*alice_.stub, &refused, alice_.token)) << refused.error_message();
  EXPECT_TRUE(open.Open(*bob_.stub, &refused, bob_.token)) << refused.error_message();
  refused = grpc::Status::OK;
  EXPECT_FALSE(open.Open(*root_.stub, &refused, root_.token));
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
  open.CloseAll();
  v1::BatchResponse resp;
  EXPECT_TRUE(bob_.Batch(EveryOp(bob_.Create()), &resp).ok());
}

// --tenant-max-streams: one tenant's streams cannot take every --max-streams place.
TEST_F(TenantTest, EachTenantHasItsShareOfStreams) {
  StartDaemon({"--max-streams=4", "--tenant-max-streams=2"});
  OpenStreams open;
  grpc::Status refused;
  ASSERT_TRUE(open.Open(*alice_.stub, &refused, alice_.token)) << refused.error_message();
  ASSERT_TRUE(open.Open(*alice_.stub, &refused, alice_.token)) << refused.error_message();
  EXPECT_FALSE(open.Open(*alice_.stub, &refused, alice_.token));
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(refused.error_message(),
            "EAGAIN: call: --tenant-max-streams=2 of tenant 'alice' are in flight; try again later");
  // Bob's share is untouched by alice's refused stream.
  EXPECT_TRUE(open.Open(*bob_.stub, &refused, bob_.token)) << refused.error_message();
  EXPECT_TRUE(open.Open(*bob_.stub, &refused, bob_.token)) << refused.error_message();
  open.CloseAll();
  EXPECT_TRUE(open.Open(*alice_.stub, &refused, alice_.token)) << refused.error_message();
  open.CloseAll();
}

// Ids tell one tenant nothing of another's creates: neither their order nor their
// gaps follow the daemon's count, and a file id never equals a space id.
TEST_F(TenantTest, IdsAreUnguessableAndSpaceAndFileIdsNeverCoincide) {
  StartDaemon();
  std::vector<uint64_t> ids;
  std::set<uint64_t> all;
  for (int i = 0; i < 16; ++i) {
    const uint64_t a = alice_.Create();
    ASSERT_NE(a, 0u);
    ASSERT_NE(bob_.Create(), 0u);  // bob's create between two of alice's
    ids.push_back(a);
    all.insert(a);
    const uint64_t f = alice_.Shmem(kPage);
    ASSERT_NE(f, 0u);
    all.insert(f);
  }
  EXPECT_EQ(all.size(), 32u) << "a file id equals a space id";
  // With sequential ids alice's ids step by 2 (bob's create in between); a keyed
  // permutation spreads them over the 40 bits.
  int close = 0, ascending = 0;
  for (size_t i = 1; i < ids.size(); ++i) {
    const uint64_t d = ids[i] > ids[i - 1] ? ids[i] - ids[i - 1] : ids[i - 1] - ids[i];
    close += d < (uint64_t{1} << 20);
    ascending += ids[i] > ids[i - 1];
  }
  EXPECT_EQ(close, 0) << "consecutive ids of one tenant lie close together";
  EXPECT_LT(ascending, 15) << "ids ascend with every create";
  for (uint64_t id : all) EXPECT_EQ(id >> 40, 0u) << id;  // shard 0, below 2^53
  // ListFiles pages by file ids, not by the daemon's count of opens.
  v1::ListFilesRequest lq;
  lq.set_page_size(4);
  v1::ListFilesResponse lr;
  ASSERT_TRUE(alice_.stub->ListFiles(alice_.ctx().get(), lq, &lr).ok());
  ASSERT_NE(lr.next_page_token(), 0u);
  EXPECT_EQ(lr.next_page_token(), lr.files(3).file_id());
  size_t listed = static_cast<size_t>(lr.files_size());
  while (lr.next_page_token() != 0) {
    lq.set_page_token(lr.next_page_token());
    lr.Clear();
    ASSERT_TRUE(alice_.stub->ListFiles(alice_.ctx().get(), lq, &lr).ok());
    listed += static_cast<size_t>(lr.files_size());
  }
  EXPECT_EQ(listed, 16u);
  lq.set_page_token(ids[0]);  // a space id is no page token
  EXPECT_EQ(alice_.stub->ListFiles(alice_.ctx().get(), lq, &lr).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

// GetServerInfo shows a tenant its own spaces and no daemon-wide memory figures;
// GetLockStats (every tenant's lock work summed) is the admin's.
TEST_F(TenantTest, ServerFiguresAreScopedToTheCallersTenant) {
  StartDaemon();
  for (int i = 0; i < 3; ++i) ASSERT_NE(bob_.Create(), 0u);
  ASSERT_NE(alice_.Create(), 0u);
  v1::GetServerInfoResponse a, r;
  ASSERT_TRUE(alice_.stub->GetServerInfo(alice_.ctx().get(), {}, &a).ok());
  EXPECT_EQ(a.spaces(), 1u);
  EXPECT_EQ(a.memory_size(), 0);
  ASSERT_TRUE(root_.stub->GetServerInfo(root_.ctx().get(), {}, &r).ok());
  EXPECT_EQ(r.spaces(), 4u);
  EXPECT_GT(r.memory_size(), 0);
  EXPECT_EQ(a.memory_limit_bytes(), r.memory_limit_bytes());
  v1::GetLockStatsResponse ls;
  EXPECT_EQ(alice_.stub->GetLockStats(alice_.ctx().get(), {}, &ls).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(root_.stub->GetLockStats(root_.ctx().get(), {}, &ls).ok());
}

TEST_F(TenantTest, QuotasPerTenant) {
  StartDaemon({"--tenant-max-spaces=2", "--tenant-max-memory-bytes=262144"});
  const uint64_t a1 = alice_.Create(), a2 = alice_.Create();
  ASSERT_NE(a1, 0u);
  ASSERT_NE(a2, 0u);
  grpc::Status st;
  EXPECT_EQ(alice_.Create(&st), 0u);
  EXPECT_TRUE(HasErrno(st, grpc::StatusCode::RESOURCE_EXHAUSTED, "ENOMEM", ENOMEM));
  EXPECT_EQ(st.error_message(), "ENOMEM: CreateSpace: tenant 'alice' owns --tenant-max-spaces=2 spaces");
  const uint64_t b1 = bob_.Create();
  EXPECT_NE(b1, 0u);  // bob's count is his own
  // Memory (quota 256 KiB): 48 pages resident in a1 plus the page tables of a1 (pgd,
  // pud, pmd, pte) and a2 (pgd) are 212 KiB, below; 16 pages more (276 KiB) are allowed
  // since the call started below; then every call that may fault pages in is refused,
  // in a1 and a2 and in a Batch; bob is not affected.
  ASSERT_TRUE(alice_.Mmap(a1, 128 * kPage).ok());
  ASSERT_TRUE(alice_.Write(a1, std::string(48 * kPage, 'a')).ok());
  st = alice_.Write(a1, std::string(16 * kPage, 'a'), kAddr + 48 * kPage);
  ASSERT_TRUE(st.ok()) << st.error_message();
  st = alice_.Write(a1, "more", kAddr + 64 * kPage);
  EXPECT_TRUE(HasErrno(st, grpc::StatusCode::RESOURCE_EXHAUSTED, "ENOMEM", ENOMEM));
  EXPECT_EQ(st.error_message(), "ENOMEM: tenant quota: tenant 'alice' uses " +
                                    std::to_string(64 * kPage + 5 * kPage) +
                                    " bytes, --tenant-max-memory-bytes=262144");
  EXPECT_EQ(alice_.Mmap(a2, kPage).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  v1::BatchRequest one;
  auto* w = one.add_ops()->mutable_write();
  w->set_space_id(a1), w->set_addr(kAddr), w->set_data("x");
  v1::BatchResponse resp;
  EXPECT_EQ(alice_.Batch(one, &resp).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  ASSERT_TRUE(bob_.Mmap(b1, 16 * kPage).ok());
  EXPECT_TRUE(bob_.Write(b1, std::string(16 * kPage, 'b')).ok());
  // Freeing memory (munmap, here in a Batch) is allowed over the quota and lets alice
  // work again; destroying a space lets her create.
  v1::BatchRequest unmap;
  auto* mu = unmap.add_ops()->mutable_munmap();
  mu->set_space_id(a1), mu->set_addr(kAddr), mu->set_len(128 * kPage);
  ASSERT_TRUE(alice_.Batch(unmap, &resp).ok());
  EXPECT_EQ(resp.results(0).code(), 0) << resp.results(0).message();
  EXPECT_TRUE(alice_.Mmap(a2, kPage).ok());
  v1::DestroySpaceRequest dq;
  dq.set_space_id(a2);
  v1::DestroySpaceResponse dr;
  ASSERT_TRUE(alice_.stub->DestroySpace(alice_.ctx().get(), dq, &dr).ok());
  EXPECT_NE(alice_.Create(), 0u);
}

// CloneSpace (fork) on a space of the caller: the child is the caller's; another
// tenant's space does not exist for it.
grpc::Status CloneSpace(const Conn& c, uint64_t space, uint64_t* child) {
  v1::CloneSpaceRequest q;
  q.set_space_id(space);
  v1::CloneSpaceResponse r;
  const grpc::Status s = c.stub->CloneSpace(c.ctx().get(), q, &r);
  *child = r.space_id();
  return s;
}

TEST_F(TenantTest, CloneSpaceForksOnlyOwnSpacesIntoTheCallersTenant) {
  StartDaemon();
  const uint64_t a = alice_.Create();
  ASSERT_NE(a, 0u);
  ASSERT_TRUE(alice_.Mmap(a, kPage).ok());
  ASSERT_TRUE(alice_.Write(a, "alice's").ok());
  uint64_t child = 0;
  grpc::Status st = CloneSpace(bob_, a, &child);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(st.error_message(), "space " + std::to_string(a) + " not found");
  st = CloneSpace(alice_, a, &child);
  ASSERT_TRUE(st.ok()) << st.error_message();
  const std::vector<uint64_t> listed = alice_.List();  // in id order, which ids do not follow
  EXPECT_EQ(std::set<uint64_t>(listed.begin(), listed.end()), (std::set<uint64_t>{a, child}));
  EXPECT_EQ(listed.size(), 2u);
  EXPECT_TRUE(bob_.List().empty());
  EXPECT_EQ(alice_.Read(child, 7), "alice's");
  EXPECT_EQ(CloneSpace(bob_, child, &child).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(TenantTest, CloneSpaceAtTenantMaxSpacesIsEagain) {
  StartDaemon({"--tenant-max-spaces=1"});
  const uint64_t a = alice_.Create();
  ASSERT_NE(a, 0u);
  uint64_t child = 0;
  const grpc::Status st = CloneSpace(alice_, a, &child);
  EXPECT_TRUE(HasErrno(st, grpc::StatusCode::RESOURCE_EXHAUSTED, "EAGAIN", EAGAIN));
  EXPECT_EQ(st.error_message(), "EAGAIN: CloneSpace: tenant 'alice' owns --tenant-max-spaces=1 spaces");
  EXPECT_EQ(alice_.List(), std::vector<uint64_t>{a});
  // The refused fork kept no slot: with `a` destroyed alice creates again.
  v1::DestroySpaceRequest dq;
  dq.set_space_id(a);
  v1::DestroySpaceResponse dr;
  ASSERT_TRUE(alice_.stub->DestroySpace(alice_.ctx().get(), dq, &dr).ok());
  EXPECT_NE(alice_.Create(), 0u);
}

TEST_F(TenantTest, OpenFilesPerTenantAreEmfileAndTheDaemonsAreEnfile) {
  StartDaemon({"--tenant-max-open-files=2", "--max-open-files=3"});
  auto memfd = [](Conn& t, grpc::Status* st) -> uint64_t {
    v1::CreateShmemFileRequest q;
    q.set_size(4096);
    v1::CreateShmemFileResponse r;
    *st = t.stub->CreateShmemFile(t.ctx().get(), q, &r);
    return st->ok() ? r.file_id() : 0;
  };
  grpc::Status st;
  const uint64_t a1 = memfd(alice_, &st), a2 = memfd(alice_, &st);
  ASSERT_NE(a1, 0u);
  ASSERT_NE(a2, 0u);
  EXPECT_EQ(memfd(alice_, &st), 0u);
  EXPECT_TRUE(HasErrno(st, grpc::StatusCode::RESOURCE_EXHAUSTED, "EMFILE", EMFILE));
  EXPECT_EQ(st.error_message(), "EMFILE: memfd_create: the tenant has --tenant-max-open-files files open");
  // bob has his own two, but the daemon holds only three.
  ASSERT_NE(memfd(bob_, &st), 0u);
  EXPECT_EQ(memfd(bob_, &st), 0u);
  EXPECT_TRUE(HasErrno(st, grpc::StatusCode::RESOURCE_EXHAUSTED, "ENFILE", ENFILE));
  // A refused open gave its tenant slot back; closing gives a file slot back.
  v1::CloseFileRequest cq;
  cq.set_file_id(a1);
  v1::CloseFileResponse cr;
  ASSERT_TRUE(alice_.stub->CloseFile(alice_.ctx().get(), cq, &cr).ok());
  EXPECT_NE(memfd(bob_, &st), 0u) << st.error_message();
  EXPECT_EQ(memfd(alice_, &st), 0u);  // the daemon is full again
  EXPECT_TRUE(HasErrno(st, grpc::StatusCode::RESOURCE_EXHAUSTED, "ENFILE", ENFILE));
  // Each tenant lists its own, a page at a time: a page of one handle looks at one
  // handle of the table, so some of alice's pages are empty but carry a token.
  v1::ListFilesRequest lq;
  lq.set_page_size(1);
  std::vector<uint64_t> mine;
  int pages = 0;
  for (;;) {
    v1::ListFilesResponse lr;
    ASSERT_TRUE(alice_.stub->ListFiles(alice_.ctx().get(), lq, &lr).ok());
    for (const auto& f : lr.files()) mine.push_back(f.file_id());
    pages++;
    if (lr.next_page_token() == 0) break;
    lq.set_page_token(lr.next_page_token());
  }
  EXPECT_EQ(mine, std::vector<uint64_t>{a2});
  EXPECT_EQ(pages, 3);  // three handles open: the last page says there are no more
}

TEST_F(TenantTest, SighupReloadsTheTokenFile) {
  StartDaemon();
  const Conn carol = Connect(d_.grpc_addr(), "tok-carol");
  EXPECT_EQ(carol.Ping().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  const uint64_t b = bob_.Create();
  ASSERT_NE(b, 0u);
  auto reload = [&](const std::string& text, const std::string& log_line) {
    dir_.Write("tokens", text);
    const size_t before = d_.stderr_text().size();
    ASSERT_EQ(kill(d_.pid(), SIGHUP), 0);
    for (int i = 0; i < 500 && d_.stderr_text().find(log_line, before) == std::string::npos; i++)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_NE(d_.stderr_text().find(log_line, before), std::string::npos) << d_.stderr_text();
  };
  // carol added, bob removed.
  reload("tok-alice alice\ntok-carol carol\n", "SIGHUP: 2 tokens reloaded from " + tokens_);
  EXPECT_TRUE(carol.Ping().ok());
  EXPECT_EQ(bob_.Ping().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(alice_.Ping().ok());
  // A malformed file keeps the tokens in force.
  reload("tok-alice alice\ntok-dave\n",
         "SIGHUP: " + tokens_ + ": line 2: want \"TOKEN TENANT [admin]\"; keeping the previous tokens");
  EXPECT_TRUE(carol.Ping().ok());
  // Bob back (another token, same tenant): his space is still his.
  reload("tok-bob2 bob\n", "SIGHUP: 1 tokens reloaded");
  const Conn bob2 = Connect(d_.grpc_addr(), "tok-bob2");
  EXPECT_EQ(bob2.List(), std::vector<uint64_t>{b});
  EXPECT_EQ(carol.Ping().error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

// A long walk in one tenant's space (Access over 32 GiB, one byte at a time: seconds of
// work) does not hold back another tenant's fsync or msync(MS_SYNC): the writeback's
// grace period (WriteRange's TLB-flush wait) needs the walker to pass a quiescent state,
// which the walk does between pages (as cond_resched). The verdict is an order: each
// sync returns while the walk is still running (it is cancelled afterwards), whatever
// the machine's speed; before, each sync returned only after the walk had ended.
TEST_F(TenantTest, AnotherTenantsLongWalkDoesNotHoldBackFsyncOrMsync) {
  StartDaemon({"--data-dir=" + dir_.path(), "--max-access-touches=100000000000"});
  constexpr uint64_t kWalk = 32ull << 30;
  const uint64_t a = alice_.Create();
  ASSERT_NE(a, 0u);
  {
    v1::MmapRequest q;
    q.set_space_id(a), q.set_addr(kAddr), q.set_len(kWalk), q.set_prot(PROT_READ);
    q.set_flags(MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE);
    v1::MmapResponse r;
    ASSERT_TRUE(alice_.stub->Mmap(alice_.ctx().get(), q, &r).ok());
  }
  // Bob: a host file with a dirty page, mapped shared in his space.
  const uint64_t b = bob_.Create();
  ASSERT_NE(b, 0u);
  v1::OpenFileRequest oq;
  oq.set_path("bob.dat"), oq.set_create(true), oq.set_access(v1::FILE_ACCESS_RDWR);
  v1::OpenFileResponse orr;
  ASSERT_TRUE(bob_.stub->OpenFile(bob_.ctx().get(), oq, &orr).ok());
  const uint64_t fb = orr.file_id();
  v1::TruncateFileRequest tq;
  tq.set_file_id(fb), tq.set_size(kPage);
  v1::TruncateFileResponse tr;
  ASSERT_TRUE(bob_.stub->TruncateFile(bob_.ctx().get(), tq, &tr).ok());
  ASSERT_TRUE(bob_.Mmap(b, kPage, fb).ok());

  // Alice's walk, on its own thread; the test waits until its page tables grow (it is
  // inside the engine call).
  grpc::ClientContext walk_ctx;
  walk_ctx.AddMetadata("authorization", "Bearer " + alice_.token);
  walk_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(110));
  std::atomic<bool> walk_done{false};
  grpc::Status walk_status;
  std::thread walker([&] {
    v1::AccessRequest q;
    q.set_space_id(a), q.set_addr(kAddr), q.set_len(kWalk), q.set_stride(1);
    q.set_access(v1::ACCESS_READ);
    v1::AccessResponse r;
    walk_status = alice_.stub->Access(&walk_ctx, q, &r);
    walk_done = true;
  });
  auto pgtables = [&] {
    v1::ListSpacesResponse r;
    EXPECT_TRUE(alice_.stub->ListSpaces(alice_.ctx().get(), {}, &r).ok());
    return r.spaces_size() == 1 ? r.spaces(0).pgtable_bytes() : 0;
  };
  const uint64_t empty = pgtables();
  for (int i = 0; i < 20000 && pgtables() <= empty + 4 * kPage && !walk_done; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_FALSE(walk_done) << walk_status.error_message();

  auto long_ctx = [&] {
    auto c = Ctx(110000);
    c->AddMetadata("authorization", "Bearer " + bob_.token);
    return c;
  };
  ASSERT_TRUE(bob_.Write(b, "dirty").ok());
  v1::FsyncFileRequest fq;
  fq.set_file_id(fb);
  v1::FsyncFileResponse fr;
  const auto fsync_start = std::chrono::steady_clock::now();
  const grpc::Status fsync = bob_.stub->FsyncFile(long_ctx().get(), fq, &fr);
  const bool walking_after_fsync = !walk_done;
  const double fsync_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - fsync_start).count();
  ASSERT_TRUE(bob_.Write(b, "again").ok());
  v1::MsyncRequest mq;
  mq.set_space_id(b), mq.set_addr(kAddr), mq.set_len(kPage), mq.set_flags(MS_SYNC);
  v1::MsyncResponse mr;
  const auto msync_start = std::chrono::steady_clock::now();
  const grpc::Status msync = bob_.stub->Msync(long_ctx().get(), mq, &mr);
  const bool walking_after_msync = !walk_done;
  const double msync_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - msync_start).count();
  // Informational (the verdict is the order above): the figures beside a long walk.
  std::printf("beside the walk: FsyncFile %.1f ms, Msync(MS_SYNC) %.1f ms\n", fsync_ms, msync_ms);
  walk_ctx.TryCancel();
  walker.join();
  EXPECT_TRUE(fsync.ok()) << fsync.error_message();
  EXPECT_TRUE(msync.ok()) << msync.error_message();
  EXPECT_TRUE(walking_after_fsync) << "FsyncFile waited for another tenant's walk to end";
  EXPECT_TRUE(walking_after_msync) << "Msync(MS_SYNC) waited for another tenant's walk to end";
  // The walk was cut short by the cancel, not finished.
  EXPECT_EQ(walk_status.error_code(), grpc::StatusCode::CANCELLED) << walk_status.error_message();
  EXPECT_EQ(ReadAll(dir_.path() + "/bob.dat").substr(0, 5), "again");
}

/// The caller's tenant's charged file pages (GetServerInfo.tenant_page_cache_bytes),
/// polled until it reads `want` (pages are uncharged when freed, after a grace period)
/// or 10 s pass; returns the last figure.
uint64_t WaitPageCacheCharge(const Conn& c, uint64_t want) {
  uint64_t got = ~0ull;
  for (int i = 0; i < 1000; i++) {
    v1::GetServerInfoResponse r;
    EXPECT_TRUE(c.stub->GetServerInfo(c.ctx().get(), {}, &r).ok());
    got = r.tenant_page_cache_bytes();
    if (got == want) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return got;
}

// Shmem and page-cache pages are charged to the tenant whose call brought them in,
// against its --tenant-max-memory-bytes: its own WriteFile (or fault on a shared
// mapping) past the quota is ENOMEM, and another tenant's memory is untouched. Before,
// alice filled the daemon's --max-memory-bytes with a shmem file and bob's first
// Access failed ENOMEM. The charge goes back to exactly 0 when the pages go.
TEST_F(TenantTest, FilePagesAreChargedToTheTenantThatBroughtThemIn) {
  constexpr uint64_t kMiB = 1 << 20;
  StartDaemon({"--max-memory-bytes=" + std::to_string(64 * kMiB),
               "--tenant-max-memory-bytes=" + std::to_string(32 * kMiB)});
  const uint64_t f = alice_.Shmem(127 * kMiB);
  ASSERT_NE(f, 0u);
  uint64_t written = 0;
  grpc::Status st;
  for (uint64_t off = 0; off < 127 * kMiB; off += kMiB) {
    v1::WriteFileRequest q;
    q.set_file_id(f), q.set_offset(off), q.set_data(std::string(kMiB, 'a'));
    v1::WriteFileResponse r;
    st = alice_.stub->WriteFile(alice_.ctx().get(), q, &r);
    if (!st.ok()) break;
    written += r.bytes_written();
    if (r.bytes_written() != kMiB) break;
  }
  EXPECT_TRUE(HasErrno(st, grpc::StatusCode::RESOURCE_EXHAUSTED, "ENOMEM", ENOMEM)) << st.error_message();
  EXPECT_EQ(written, 32 * kMiB);
  EXPECT_EQ(WaitPageCacheCharge(alice_, 32 * kMiB), 32 * kMiB);
  EXPECT_EQ(WaitPageCacheCharge(bob_, 0), 0u);

  // Bob's 16 MiB are his to use.
  const uint64_t b = bob_.Create();
  ASSERT_NE(b, 0u);
  ASSERT_TRUE(bob_.Mmap(b, 16 * kMiB).ok());
  v1::AccessRequest aq;
  aq.set_space_id(b), aq.set_addr(kAddr), aq.set_len(16 * kMiB), aq.set_stride(kPage);
  aq.set_access(v1::ACCESS_WRITE);
  v1::AccessResponse ar;
  st = bob_.stub->Access(bob_.ctx().get(), aq, &ar);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_FALSE(ar.has_stop()) << ar.ShortDebugString();
  EXPECT_EQ(ar.accesses(), 16 * kMiB / kPage);

  // Truncating gives the charge back; faults on alice's shared mapping charge her.
  v1::TruncateFileRequest tq;
  tq.set_file_id(f), tq.set_size(0);
  v1::TruncateFileResponse tr;
  ASSERT_TRUE(alice_.stub->TruncateFile(alice_.ctx().get(), tq, &tr).ok());
  EXPECT_EQ(WaitPageCacheCharge(alice_, 0), 0u);
  tq.set_size(127 * kMiB);
  ASSERT_TRUE(alice_.stub->TruncateFile(alice_.ctx().get(), tq, &tr).ok());
  const uint64_t a = alice_.Create();
  ASSERT_NE(a, 0u);
  ASSERT_TRUE(alice_.Mmap(a, 40 * kMiB, f).ok());
  aq.set_space_id(a), aq.set_len(4 * kMiB);
  st = alice_.stub->Access(alice_.ctx().get(), aq, &ar);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_FALSE(ar.has_stop()) << ar.ShortDebugString();
  EXPECT_EQ(WaitPageCacheCharge(alice_, 4 * kMiB), 4 * kMiB);
  // Past the quota a fault fails (the memcg OOM of the faulting tenant).
  aq.set_len(40 * kMiB);
  st = alice_.stub->Access(alice_.ctx().get(), aq, &ar);
  EXPECT_TRUE(!st.ok() || ar.has_stop()) << ar.ShortDebugString();
  EXPECT_LE(WaitPageCacheCharge(alice_, 32 * kMiB), 32 * kMiB);

  // Everything closed and destroyed: exactly 0.
  v1::DestroySpaceRequest dq;
  dq.set_space_id(a);
  v1::DestroySpaceResponse dr;
  ASSERT_TRUE(alice_.stub->DestroySpace(alice_.ctx().get(), dq, &dr).ok());
  v1::CloseFileRequest cq;
  cq.set_file_id(f);
  v1::CloseFileResponse cr;
  ASSERT_TRUE(alice_.stub->CloseFile(alice_.ctx().get(), cq, &cr).ok());
  EXPECT_EQ(WaitPageCacheCharge(alice_, 0), 0u);
  EXPECT_EQ(WaitPageCacheCharge(bob_, 0), 0u);
}

// StatFile's open_handles and mapped_vmas, and ListFiles', count the caller's
// tenant's handles and the VMAs of its spaces; an admin sees the daemon's.
TEST_F(TenantTest, FileFiguresAreScopedToTheCallersTenant) {
  StartDaemon({"--data-dir=" + dir_.path()});
  auto open = [&](const Conn& c) {
    v1::OpenFileRequest q;
    q.set_path("shared.dat"), q.set_create(true), q.set_access(v1::FILE_ACCESS_RDWR);
    v1::OpenFileResponse r;
    EXPECT_TRUE(c.stub->OpenFile(c.ctx().get(), q, &r).ok());
    return r.file_id();
  };
  auto map = [&](const Conn& c, uint64_t space, uint64_t file, uint64_t addr) {
    v1::MmapRequest q;
    q.set_space_id(space), q.set_addr(addr), q.set_len(kPage), q.set_prot(PROT_READ);
    q.set_flags(MAP_FIXED | MAP_SHARED), q.set_file_id(file);
    v1::MmapResponse r;
    const grpc::Status s = c.stub->Mmap(c.ctx().get(), q, &r);
    EXPECT_TRUE(s.ok()) << s.error_message();
  };
  auto stat = [&](const Conn& c, uint64_t file) {
    v1::StatFileRequest q;
    q.set_file_id(file);
    v1::StatFileResponse r;
    const grpc::Status s = c.stub->StatFile(c.ctx().get(), q, &r);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return std::make_pair(r.file().open_handles(), r.file().mapped_vmas());
  };
  // Alice: two handles, one VMA; bob: one handle, three VMAs in two spaces.
  const uint64_t fa1 = open(alice_), fa2 = open(alice_), fb = open(bob_);
  const uint64_t a = alice_.Create(), b1 = bob_.Create(), b2 = bob_.Create();
  map(alice_, a, fa1, kAddr);
  map(bob_, b1, fb, kAddr);
  map(bob_, b1, fb, kAddr + 16 * kPage);
  map(bob_, b2, fb, kAddr);
  using P = std::pair<uint64_t, uint64_t>;
  EXPECT_EQ(stat(alice_, fa1), P(2, 1));
  EXPECT_EQ(stat(alice_, fa2), P(2, 1));
  EXPECT_EQ(stat(bob_, fb), P(1, 3));
  v1::ListFilesResponse lr;
  ASSERT_TRUE(alice_.stub->ListFiles(alice_.ctx().get(), {}, &lr).ok());
  ASSERT_EQ(lr.files_size(), 2);
  for (const v1::FileInfo& fi : lr.files()) {
    EXPECT_EQ(fi.open_handles(), 2u);
    EXPECT_EQ(fi.mapped_vmas(), 1u);
  }
  ASSERT_TRUE(root_.stub->ListFiles(root_.ctx().get(), {}, &lr).ok());
  ASSERT_EQ(lr.files_size(), 3);
  for (const v1::FileInfo& fi : lr.files()) {
    EXPECT_EQ(fi.open_handles(), 3u);
    EXPECT_EQ(fi.mapped_vmas(), 4u);
  }
}

TEST(TenantFlagTest, BadTokenFilesAndListenPolicy) {
  TempDir dir;
  for (const char* bad : {"tok\n", "tok alice admin extra\n", "tok alice root\n", "tok al/ice\n",
                          "tok a\ntok b\n"}) {
    Daemon d;
    EXPECT_FALSE(d.Start({"--token-file=" + dir.Write("bad", bad)})) << bad;
    EXPECT_EQ(d.WaitExit(10000), 1) << bad;
    EXPECT_NE(d.stderr_at_exit().find("--token-file " + dir.path() + "/bad: line "), std::string::npos)
        << d.stderr_text();
  }
  {
    Daemon d;
    EXPECT_FALSE(d.Start({"--token-file=" + dir.path() + "/absent"}));
    EXPECT_EQ(d.WaitExit(10000), 1);
  }
  // Not loopback and not authenticated: refused, unless asked for.
  {
    Daemon d;
    EXPECT_FALSE(d.Start({"--listen=0.0.0.0:0"}));
    EXPECT_EQ(d.WaitExit(10000), 1);
    EXPECT_NE(d.stderr_at_exit().find("--listen 0.0.0.0:0 is not loopback and calls are not authenticated"),
              std::string::npos)
        << d.stderr_text();
  }
  for (const std::string& ok : {std::string("--insecure-listen-anywhere"),
                                "--token-file=" + dir.Write("t", "tok alice\n")}) {
    Daemon d;
    ASSERT_TRUE(d.Start({"--listen=0.0.0.0:0", ok})) << ok << d.stderr_text();
    EXPECT_EQ(d.Stop(), 0);
  }
}

TEST(TenantIdTest, IdsAreNotReusedAcrossRestarts) {
  Daemon d1;
  ASSERT_TRUE(d1.Start({}));
  const Conn c1 = Connect(d1.grpc_addr(), "");
  const uint64_t first = c1.Create(), second = c1.Create();
  ASSERT_NE(first, 0u);
  EXPECT_NE(second, first);
  const uint64_t file1 = c1.Shmem(kPage);
  EXPECT_EQ(d1.Stop(), 0);
  // A restart: the old ids (space and file) name nothing; the new ids differ.
  Daemon d2;
  ASSERT_TRUE(d2.Start({}));
  const Conn c2 = Connect(d2.grpc_addr(), "");
  const uint64_t again = c2.Create();
  EXPECT_NE(again, first);
  EXPECT_NE(again, second);
  EXPECT_EQ(again >> 40, 0u);  // shard 0's
  EXPECT_EQ(c2.Write(first, "x").error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(c2.Shmem(kPage), file1);
  v1::StatFileRequest sq;
  sq.set_file_id(file1);
  v1::StatFileResponse sr;
  EXPECT_EQ(c2.stub->StatFile(c2.ctx().get(), sq, &sr).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(d2.Stop(), 0);
}

// ---- TLS ----

/// A CA, a server certificate for 127.0.0.1 (subjectAltName) and client certificates
/// CN=alice, CN=bob, made with openssl in a scratch directory.
class Pki {
 public:
  Pki() {
    const std::string d = dir_.path();
    auto run = [&](const std::string& cmd) {
      const int rc = std::system(("cd '" + d + "' && " + cmd + " >/dev/null 2>&1").c_str());
      ok_ = ok_ && rc == 0;
    };
    run("openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=vmspace-test-ca "
        "-keyout ca.key -out ca.pem");
    auto sign = [&](const std::string& name, const std::string& cn, const std::string& ext) {
      run("openssl req -newkey rsa:2048 -nodes -subj /CN=" + cn + " -keyout " + name + ".key -out " +
          name + ".csr");
      dir_.Write(name + ".ext", ext);
      run("openssl x509 -req -in " + name + ".csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
          "-extfile " + name + ".ext -out " + name + ".pem");
    };
    sign("server", "vmspaced", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n");
    sign("alice", "alice", "extendedKeyUsage=clientAuth\n");
    sign("bob", "bob", "extendedKeyUsage=clientAuth\n");
  }
  bool ok() const { return ok_; }
  std::string path(const std::string& f) const { return dir_.path() + "/" + f; }
  std::shared_ptr<grpc::ChannelCredentials> Creds(const std::string& client = "") const {
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = ReadAll(path("ca.pem"));
    if (!client.empty()) {
      o.pem_cert_chain = ReadAll(path(client + ".pem"));
      o.pem_private_key = ReadAll(path(client + ".key"));
    }
    return grpc::SslCredentials(o);
  }
  const TempDir& dir() const { return dir_; }

 private:
  TempDir dir_;
  bool ok_ = true;
};

TEST(TenantTlsTest, TokensOverTls) {
  Pki pki;
  ASSERT_TRUE(pki.ok()) << "openssl failed";
  Daemon d;
  ASSERT_TRUE(d.Start({"--tls-cert=" + pki.path("server.pem"), "--tls-key=" + pki.path("server.key"),
                       "--token-file=" + pki.dir().Write("tokens", kTokens)}))
      << d.stderr_text();
  const Conn alice = Connect(d.grpc_addr(), "tok-alice", pki.Creds());
  const Conn bob = Connect(d.grpc_addr(), "tok-bob", pki.Creds());
  const Conn none = Connect(d.grpc_addr(), "", pki.Creds());
  ASSERT_TRUE(alice.Ping().ok()) << alice.Ping().error_message();
  const uint64_t a = alice.Create();
  ASSERT_NE(a, 0u);
  ASSERT_TRUE(alice.Mmap(a, kPage).ok());
  ASSERT_TRUE(alice.Write(a, "over tls").ok());
  EXPECT_EQ(alice.Read(a, 8), "over tls");
  for (const auto& [name, s] : EverySpaceRpc(bob, a, 0))
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << name;
  EXPECT_EQ(none.Ping().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  // Plaintext to a TLS port: no connection.
  const Conn plain = Connect(d.grpc_addr(), "tok-alice", grpc::InsecureChannelCredentials(), false);
  EXPECT_EQ(plain.Ping().error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(d.Stop(), 0);
}

TEST(TenantTlsTest, MutualTlsCommonNameIsTheTenant) {
  Pki pki;
  ASSERT_TRUE(pki.ok()) << "openssl failed";
  Daemon d;
  ASSERT_TRUE(d.Start({"--tls-cert=" + pki.path("server.pem"), "--tls-key=" + pki.path("server.key"),
                       "--tls-client-ca=" + pki.path("ca.pem"), "--listen=0.0.0.0:0"}))
      << d.stderr_text();  // mTLS is authentication: a non-loopback listen is allowed
  const std::string addr = "127.0.0.1:" + std::to_string(d.grpc_port());
  const Conn alice = Connect(addr, "", pki.Creds("alice"));
  const Conn bob = Connect(addr, "", pki.Creds("bob"));
  ASSERT_TRUE(alice.Ping().ok()) << alice.Ping().error_message();
  const uint64_t a = alice.Create();
  ASSERT_NE(a, 0u);
  ASSERT_TRUE(alice.Mmap(a, kPage).ok());
  const uint64_t fa = alice.Shmem(kPage);
  const uint64_t b = bob.Create();
  EXPECT_EQ(alice.List(), std::vector<uint64_t>{a});
  EXPECT_EQ(bob.List(), std::vector<uint64_t>{b});
  for (const auto& [name, s] : EverySpaceRpc(bob, a, 0))
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << name;
  v1::BatchResponse resp;
  ASSERT_TRUE(bob.Batch(EveryOp(a), &resp).ok());
  for (const v1::OpResult& r : resp.results())
    EXPECT_EQ(r.code(), static_cast<int>(grpc::StatusCode::NOT_FOUND));
  for (const auto& [name, s] : EveryFileRpc(bob, fa))
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << name;
  EXPECT_EQ(alice.ListFiles(), std::vector<uint64_t>{fa});
  // No client certificate: the handshake fails.
  const Conn anonymous = Connect(addr, "", pki.Creds(), false);
  EXPECT_EQ(anonymous.Ping().error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(d.Stop(), 0);
}

// The client library and the CLI: --token / $VMSPACE_TOKEN, --tls-ca, --tls-cert, --tls-key.
TEST(TenantClientTest, LibraryAndCliTakeTokensAndTls) {
  Pki pki;
  ASSERT_TRUE(pki.ok()) << "openssl failed";
  Daemon d;
  ASSERT_TRUE(d.Start({"--tls-cert=" + pki.path("server.pem"), "--tls-key=" + pki.path("server.key"),
                       "--tls-client-ca=" + pki.path("ca.pem"),
                       "--token-file=" + pki.dir().Write("tokens", kTokens)}))
      << d.stderr_text();
  auto options = [&](const std::string& token, const std::string& cert) {
    client::ClientOptions o;
    o.target = d.grpc_addr();
    o.token = token;
    o.tls_ca_pem = ReadAll(pki.path("ca.pem"));
    if (!cert.empty()) {
      o.tls_cert_pem = ReadAll(pki.path(cert + ".pem"));
      o.tls_key_pem = ReadAll(pki.path(cert + ".key"));
    }
    return o;
  };
  // A token over mTLS decides the tenant (bob's certificate, alice's token).
  client::Client alice(options("tok-alice", "bob"));
  auto a = alice.CreateSpace({}, "alice's");
  ASSERT_TRUE(a.ok()) << a.error().ToString();
  client::Client bob(options("", "bob"));
  auto b = bob.CreateSpace({}, "bob's");
  ASSERT_TRUE(b.ok()) << b.error().ToString();
  auto listed = bob.ListSpaces();
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed.value().size(), 1u);
  EXPECT_EQ(listed.value()[0].space_id(), b.value());
  auto stolen = bob.DestroySpace(a.value());
  ASSERT_FALSE(stolen.ok());
  EXPECT_EQ(stolen.error().code, grpc::StatusCode::NOT_FOUND);
  // The CLI: the token from $VMSPACE_TOKEN (root: admin, lists both), TLS from files.
  const std::vector<std::string> tls = {"--target", d.grpc_addr(), "--tls-ca", pki.path("ca.pem"),
                                        "--tls-cert", pki.path("alice.pem"), "--tls-key",
                                        pki.path("alice.key")};
  setenv("VMSPACE_TOKEN", "tok-root", 1);
  std::vector<std::string> args = tls;
  args.insert(args.end(), {"--json", "list"});
  testing::ProcResult r = testing::RunProgram(VMSPACE_CLI_PATH, args);
  unsetenv("VMSPACE_TOKEN");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(std::to_string(a.value())), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(std::to_string(b.value())), std::string::npos) << r.out;
  // --token over it; a wrong one is UNAUTHENTICATED (exit status non-zero, said so).
  args = tls;
  args.insert(args.end(), {"--token", "nope", "ping"});
  r = testing::RunProgram(VMSPACE_CLI_PATH, args);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("UNAUTHENTICATED: unknown bearer token"), std::string::npos) << r.err;
  // Without the CA the daemon's certificate is not trusted: no connection.
  r = testing::RunProgram(VMSPACE_CLI_PATH, {"--target", d.grpc_addr(), "--token", "tok-alice", "ping"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("UNAVAILABLE"), std::string::npos) << r.err;
  EXPECT_EQ(d.Stop(), 0);
}

}  // namespace
}  // namespace vmspace::service_test
