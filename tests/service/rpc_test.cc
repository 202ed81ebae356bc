// SPDX-License-Identifier: Apache-2.0
// Every RPC of vmspace.v1.VmSpace against the real daemon: success paths, errno ->
// status mapping (errno name first in the message, a google.rpc.Status with a packed
// SyscallError in the details), NOT_FOUND for unknown spaces, daemon limits, faults as OK
// answers, Batch ordering.
#include "daemon.h"  // first (see there)

#include <sys/mman.h>

#include <cstring>
#include <random>


namespace vmspace::service_test {
namespace {

using grpc::StatusCode;

constexpr int kRW = PROT_READ | PROT_WRITE;
constexpr int kPrivAnon = MAP_PRIVATE | MAP_ANONYMOUS;
constexpr uint64_t kPage = 4096;

class RpcTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    daemon_ = new Daemon;
    ASSERT_TRUE(daemon_->Start({"--max-batch=64", "--max-spaces=64"}))
        << daemon_->stderr_text();
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(daemon_->Stop(), 0);
    delete daemon_;
    daemon_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(daemon_, nullptr);
    stub_ = daemon_->NewStub();
  }

  uint64_t NewSpace(const v1::SpaceSettings& settings = {}, const std::string& label = "") {
    v1::CreateSpaceRequest req;
    *req.mutable_settings() = settings;
    req.set_label(label);
    v1::CreateSpaceResponse resp;
    grpc::Status s = stub_->CreateSpace(Ctx().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_NE(resp.space_id(), 0u);
    return resp.space_id();
  }
  grpc::Status Mmap(uint64_t id, uint64_t addr, uint64_t len, int prot, int flags,
                    uint64_t* out = nullptr, uint64_t offset = 0) {
    v1::MmapRequest req;
    req.set_space_id(id);
    req.set_addr(addr);
    req.set_len(len);
    req.set_prot(prot);
    req.set_flags(flags);
    req.set_offset(offset);
    v1::MmapResponse resp;
    grpc::Status s = stub_->Mmap(Ctx().get(), req, &resp);
    if (out) *out = resp.addr();
    return s;
  }
  grpc::Status Munmap(uint64_t id, uint64_t addr, uint64_t len) {
    v1::MunmapRequest req;
    req.set_space_id(id);
    req.set_addr(addr);
    req.set_len(len);
    v1::MunmapResponse resp;
    return stub_->Munmap(Ctx().get(), req, &resp);
  }
  grpc::Status Mprotect(uint64_t id, uint64_t addr, uint64_t len, int prot) {
    v1::MprotectRequest req;
    req.set_space_id(id);
    req.set_addr(addr);
    req.set_len(len);
    req.set_prot(prot);
    v1::MprotectResponse resp;
    return stub_->Mprotect(Ctx().get(), req, &resp);
  }
  grpc::Status Fault(uint64_t id, uint64_t addr, v1::AccessType access, v1::FaultInfo* out) {
    v1::FaultRequest req;
    req.set_space_id(id);
    req.set_addr(addr);
    req.set_access(access);
    v1::FaultResponse resp;
    grpc::Status s = stub_->Fault(Ctx().get(), req, &resp);
    *out = resp.fault();
    return s;
  }
  grpc::Status Write(uint64_t id, uint64_t addr, const std::string& data,
                     v1::WriteMemoryResponse* resp) {
    v1::WriteMemoryRequest req;
    req.set_space_id(id);
    req.set_addr(addr);
    req.set_data(data);
    return stub_->WriteMemory(Ctx().get(), req, resp);
  }
  grpc::Status Read(uint64_t id, uint64_t addr, uint64_t len, v1::ReadMemoryResponse* resp) {
    v1::ReadMemoryRequest req;
    req.set_space_id(id);
    req.set_addr(addr);
    req.set_len(len);
    return stub_->ReadMemory(Ctx().get(), req, resp);
  }
  v1::GetMapsResponse Maps(uint64_t id, uint64_t start = 0, uint64_t end = 0) {
    v1::GetMapsRequest req;
    req.set_space_id(id);
    req.set_start(start);
    req.set_end(end);
    v1::GetMapsResponse resp;
    grpc::Status s = stub_->GetMaps(Ctx().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  }
  void Destroy(uint64_t id) {
    v1::DestroySpaceRequest req;
    req.set_space_id(id);
    v1::DestroySpaceResponse resp;
    EXPECT_TRUE(stub_->DestroySpace(Ctx().get(), req, &resp).ok());
  }

  static Daemon* daemon_;
  std::unique_ptr<v1::VmSpace::Stub> stub_;
};
Daemon* RpcTest::daemon_ = nullptr;

TEST_F(RpcTest, Ping) {
  v1::PingResponse resp;
  EXPECT_TRUE(stub_->Ping(Ctx().get(), v1::PingRequest(), &resp).ok());
}

TEST_F(RpcTest, CreateListDestroy) {
  const uint64_t a = NewSpace({}, "alpha");
  const uint64_t b = NewSpace({}, "beta");
  EXPECT_NE(a, b);
  uint64_t addr = 0;
  ASSERT_TRUE(Mmap(b, 0, 3 * kPage, kRW, kPrivAnon, &addr).ok());

  v1::ListSpacesResponse list;
  ASSERT_TRUE(stub_->ListSpaces(Ctx().get(), v1::ListSpacesRequest(), &list).ok());
  const v1::SpaceInfo* ia = nullptr;
  const v1::SpaceInfo* ib = nullptr;
  uint64_t prev = 0;
  for (const auto& s : list.spaces()) {
    EXPECT_GT(s.space_id(), prev) << "ListSpaces is ordered by id";
    prev = s.space_id();
    if (s.space_id() == a) ia = &s;
    if (s.space_id() == b) ib = &s;
  }
  ASSERT_NE(ia, nullptr);
  ASSERT_NE(ib, nullptr);
  EXPECT_EQ(ia->label(), "alpha");
  EXPECT_EQ(ia->map_count(), 0u);
  EXPECT_EQ(ia->locking_profile(), "linux-6.15") << "the daemon's default profile";
  EXPECT_EQ(ib->label(), "beta");
  EXPECT_EQ(ib->map_count(), 1u);
  EXPECT_EQ(ib->total_vm_bytes(), 3 * kPage);
  EXPECT_EQ(ib->rss_bytes(), 0u);

  Destroy(a);
  v1::DestroySpaceRequest dreq;
  dreq.set_space_id(a);
  v1::DestroySpaceResponse dresp;
  grpc::Status s = stub_->DestroySpace(Ctx().get(), dreq, &dresp);
  EXPECT_EQ(s.error_code(), StatusCode::NOT_FOUND) << s.error_message();
  list.Clear();
  ASSERT_TRUE(stub_->ListSpaces(Ctx().get(), v1::ListSpacesRequest(), &list).ok());
  for (const auto& sp : list.spaces()) EXPECT_NE(sp.space_id(), a);
  Destroy(b);
}

TEST_F(RpcTest, CreateSpaceRejectsBadArguments) {
  v1::CreateSpaceResponse resp;
  v1::CreateSpaceRequest req;
  req.set_label(std::string(65, 'x'));
  EXPECT_TRUE(HasErrno(stub_->CreateSpace(Ctx().get(), req, &resp), StatusCode::INVALID_ARGUMENT,
                       "EINVAL", EINVAL));
  req.Clear();
  req.mutable_settings()->set_mmap_base(0x7ffff7fff001);  // unaligned
  EXPECT_TRUE(HasErrno(stub_->CreateSpace(Ctx().get(), req, &resp), StatusCode::INVALID_ARGUMENT,
                       "EINVAL", EINVAL));
  req.Clear();
  req.mutable_settings()->set_locking_profile("no-such-profile");
  EXPECT_TRUE(HasErrno(stub_->CreateSpace(Ctx().get(), req, &resp), StatusCode::INVALID_ARGUMENT,
                       "EINVAL", EINVAL));
  // A long bad value is quoted in part: the status still fits gRPC's metadata limit.
  for (const std::string& bad : {std::string(5000, 'p'), "linux-6.15," + std::string(9000, 's') + "=on"}) {
    req.mutable_settings()->set_locking_profile(bad);
    const grpc::Status st = stub_->CreateSpace(Ctx().get(), req, &resp);
    EXPECT_TRUE(HasErrno(st, StatusCode::INVALID_ARGUMENT, "EINVAL", EINVAL)) << st.error_message().size();
    EXPECT_LT(st.error_message().size(), 400u);
  }
}

TEST_F(RpcTest, LockingProfilesChooseTheFaultPath) {
  // Second fault in a VMA (its anon_vma exists by then): per-VMA lock on linux-6.6,
  // mmap_lock on linux-6.0.
  for (const auto& [profile, path] :
       {std::pair{std::string("linux-6.6"), v1::LOCK_PATH_VMA_LOCK},
        std::pair{std::string("linux-6.0"), v1::LOCK_PATH_MMAP_LOCK}}) {
    SCOPED_TRACE(profile);
    v1::SpaceSettings settings;
    settings.set_locking_profile(profile);
    const uint64_t id = NewSpace(settings, profile);
    uint64_t a = 0;
    ASSERT_TRUE(Mmap(id, 0, 4 * kPage, kRW, kPrivAnon, &a).ok());
    v1::FaultInfo f;
    ASSERT_TRUE(Fault(id, a, v1::ACCESS_WRITE, &f).ok());
    ASSERT_TRUE(Fault(id, a + kPage, v1::ACCESS_WRITE, &f).ok());
    EXPECT_EQ(f.outcome(), v1::FAULT_OUTCOME_MINOR);
    EXPECT_EQ(f.lock_path(), path);
    v1::ListSpacesResponse list;
    ASSERT_TRUE(stub_->ListSpaces(Ctx().get(), {}, &list).ok());
    for (const auto& sp : list.spaces()) {
      if (sp.space_id() == id) {
        EXPECT_EQ(sp.locking_profile(), profile);
      }
    }
    Destroy(id);
  }
}

TEST_F(RpcTest, MaxSpacesIsResourceExhausted) {
  Daemon d;
  ASSERT_TRUE(d.Start({"--max-spaces=2"})) << d.stderr_text();
  auto stub = d.NewStub();
  v1::CreateSpaceResponse r1, r2, r3;
  ASSERT_TRUE(stub->CreateSpace(Ctx().get(), {}, &r1).ok());
  ASSERT_TRUE(stub->CreateSpace(Ctx().get(), {}, &r2).ok());
  grpc::Status s = stub->CreateSpace(Ctx().get(), {}, &r3);
  EXPECT_TRUE(HasErrno(s, StatusCode::RESOURCE_EXHAUSTED, "ENOMEM", ENOMEM));
  v1::DestroySpaceRequest dreq;
  dreq.set_space_id(r1.space_id());
  v1::DestroySpaceResponse dresp;
  ASSERT_TRUE(stub->DestroySpace(Ctx().get(), dreq, &dresp).ok());
  EXPECT_TRUE(stub->CreateSpace(Ctx().get(), {}, &r3).ok());
  EXPECT_EQ(d.Stop(), 0);
}

TEST_F(RpcTest, UnknownSpaceIsNotFound) {
  const uint64_t bogus = 0xdead0000beefull;
  auto nf = [](const grpc::Status& s) {
    return s.error_code() == StatusCode::NOT_FOUND &&
           s.error_message().find(std::to_string(0xdead0000beefull)) != std::string::npos;
  };
  EXPECT_TRUE(nf(Mmap(bogus, 0, kPage, kRW, kPrivAnon)));
  EXPECT_TRUE(nf(Munmap(bogus, 0, kPage)));
  EXPECT_TRUE(nf(Mprotect(bogus, 0, kPage, PROT_READ)));
  v1::FaultInfo fi;
  EXPECT_TRUE(nf(Fault(bogus, 0x10000, v1::ACCESS_READ, &fi)));
  v1::AccessRequest areq;
  areq.set_space_id(bogus);
  v1::AccessResponse aresp;
  EXPECT_TRUE(nf(stub_->Access(Ctx().get(), areq, &aresp)));
  v1::ReadMemoryResponse rresp;
  EXPECT_TRUE(nf(Read(bogus, 0x10000, 1, &rresp)));
  v1::WriteMemoryResponse wresp;
  EXPECT_TRUE(nf(Write(bogus, 0x10000, "x", &wresp)));
  v1::GetMapsRequest greq;
  greq.set_space_id(bogus);
  v1::GetMapsResponse gresp;
  EXPECT_TRUE(nf(stub_->GetMaps(Ctx().get(), greq, &gresp)));
}

TEST_F(RpcTest, MmapPlacesTopDownAndErrnosMapToCodes) {
  const uint64_t id = NewSpace();
  uint64_t a1 = 0, a2 = 0;
  ASSERT_TRUE(Mmap(id, 0, kPage, kRW, kPrivAnon, &a1).ok());
  ASSERT_TRUE(Mmap(id, 0, kPage, PROT_READ, kPrivAnon, &a2).ok());
  EXPECT_EQ(a1, 0x7ffff7fff000ull - kPage) << "top-down from mmap_base";
  EXPECT_EQ(a2, a1 - kPage);

  // len 0
  EXPECT_TRUE(HasErrno(Mmap(id, 0, 0, kRW, kPrivAnon), StatusCode::INVALID_ARGUMENT, "EINVAL",
                       EINVAL));
  // MAP_FIXED at an unaligned address
  EXPECT_TRUE(HasErrno(Mmap(id, 0x10000123, kPage, kRW, kPrivAnon | MAP_FIXED),
                       StatusCode::INVALID_ARGUMENT, "EINVAL", EINVAL));
  // unaligned offset
  EXPECT_TRUE(HasErrno(Mmap(id, 0, kPage, kRW, kPrivAnon, nullptr, 100),
                       StatusCode::INVALID_ARGUMENT, "EINVAL", EINVAL));
  // length that overflows when rounded up to pages
  EXPECT_TRUE(HasErrno(Mmap(id, 0, ~0ull - 100, kRW, kPrivAnon), StatusCode::RESOURCE_EXHAUSTED,
                       "ENOMEM", ENOMEM));
  // anonymous MAP_SHARED_VALIDATE
  EXPECT_TRUE(HasErrno(Mmap(id, 0, kPage, kRW, MAP_SHARED_VALIDATE | MAP_ANONYMOUS),
                       StatusCode::INVALID_ARGUMENT, "EINVAL", EINVAL));
  // no MAP_ANONYMOUS: file mappings are EBADF (no fd)
  EXPECT_TRUE(
      HasErrno(Mmap(id, 0, kPage, kRW, MAP_PRIVATE), StatusCode::INVALID_ARGUMENT, "EBADF", EBADF));
  // MAP_FIXED_NOREPLACE over an existing mapping
  grpc::Status s = Mmap(id, a1, kPage, kRW, kPrivAnon | MAP_FIXED_NOREPLACE);
  EXPECT_TRUE(HasErrno(s, StatusCode::ALREADY_EXISTS, "EEXIST", EEXIST));
  // MAP_FIXED below mmap_min_addr without CAP_SYS_RAWIO
  EXPECT_TRUE(HasErrno(Mmap(id, 0, kPage, kRW, kPrivAnon | MAP_FIXED),
                       StatusCode::PERMISSION_DENIED, "EPERM", EPERM));
  // MAP_FIXED_NOREPLACE in a free spot succeeds at exactly that address.
  uint64_t fixed = 0;
  ASSERT_TRUE(Mmap(id, 0x20000000, 2 * kPage, kRW, kPrivAnon | MAP_FIXED_NOREPLACE, &fixed).ok());
  EXPECT_EQ(fixed, 0x20000000u);
  Destroy(id);
}

TEST_F(RpcTest, MaxMapCountIsEnomem) {
  v1::SpaceSettings settings;
  settings.set_max_map_count(3);
  const uint64_t id = NewSpace(settings);
  // Separate (non-adjacent) fixed mappings never merge. Linux refuses a new mapping
  // when map_count > max_map_count, so max + 1 mappings succeed.
  int ok = 0;
  grpc::Status last;
  for (int i = 0; i < 10; i++) {
    last = Mmap(id, 0x10000000 + static_cast<uint64_t>(i) * 16 * kPage, kPage, kRW,
                kPrivAnon | MAP_FIXED);
    if (!last.ok()) break;
    ok++;
  }
  EXPECT_EQ(ok, 4);
  EXPECT_TRUE(HasErrno(last, StatusCode::RESOURCE_EXHAUSTED, "ENOMEM", ENOMEM));
  EXPECT_EQ(Maps(id).map_count(), 4u);
  Destroy(id);
}

TEST_F(RpcTest, MunmapAndMprotectErrors) {
  const uint64_t id = NewSpace();
  uint64_t a = 0;
  ASSERT_TRUE(Mmap(id, 0, 4 * kPage, kRW, kPrivAnon, &a).ok());
  EXPECT_TRUE(HasErrno(Munmap(id, a, 0), StatusCode::INVALID_ARGUMENT, "EINVAL", EINVAL));
  EXPECT_TRUE(HasErrno(Munmap(id, a + 1, kPage), StatusCode::INVALID_ARGUMENT, "EINVAL", EINVAL));
  EXPECT_TRUE(Munmap(id, 0x30000000, kPage).ok()) << "a range without mappings succeeds";

  EXPECT_TRUE(HasErrno(Mprotect(id, a, kPage, 0x10), StatusCode::INVALID_ARGUMENT, "EINVAL",
                       EINVAL))
      << "unknown prot bit";
  EXPECT_TRUE(HasErrno(Mprotect(id, a + 8, kPage, PROT_READ), StatusCode::INVALID_ARGUMENT,
                       "EINVAL", EINVAL));
  EXPECT_TRUE(Mprotect(id, a, 0, PROT_READ).ok()) << "len 0 succeeds";
  EXPECT_TRUE(HasErrno(Mprotect(id, 0x30000000, kPage, PROT_READ),
                       StatusCode::RESOURCE_EXHAUSTED, "ENOMEM", ENOMEM))
      << "unmapped range";

  // mprotect of the middle page splits the VMA in three; munmap of it leaves two.
  ASSERT_TRUE(Mprotect(id, a + kPage, kPage, PROT_READ).ok());
  v1::GetMapsResponse m = Maps(id);
  ASSERT_EQ(m.vmas_size(), 3);
  EXPECT_EQ(m.vmas(1).perms(), "r--p");
  EXPECT_EQ(m.vmas(0).perms(), "rw-p");
  ASSERT_TRUE(Munmap(id, a + kPage, kPage).ok());
  EXPECT_EQ(Maps(id).map_count(), 2u);
  Destroy(id);
}

// The details are the standard gRPC error model, readable without vmspace's client: a
// google.rpc.Status whose details[0] is an Any with the SyscallError's type URL.
TEST_F(RpcTest, ErrorDetailsAreGoogleRpcStatus) {
  const uint64_t id = NewSpace();
  const grpc::Status s = Munmap(id, 0x10000000, 0);  // len 0: EINVAL
  ASSERT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message().rfind("EINVAL: munmap", 0), 0u) << s.error_message();
  google::rpc::Status st;
  ASSERT_TRUE(st.ParseFromString(s.error_details()));
  EXPECT_EQ(st.code(), 3);  // google.rpc.Code INVALID_ARGUMENT
  EXPECT_EQ(st.message(), s.error_message());
  ASSERT_EQ(st.details_size(), 1);
  EXPECT_EQ(st.details(0).type_url(), "type.googleapis.com/vmspace.v1.SyscallError");
  v1::SyscallError se;
  ASSERT_TRUE(st.details(0).UnpackTo(&se));
  EXPECT_EQ(se.errno_(), EINVAL);
  EXPECT_EQ(se.errno_name(), "EINVAL");
  // A failure with no errno (unknown space) carries no details.
  const grpc::Status nf = Munmap(0xdead0000beefull, 0x10000000, kPage);
  EXPECT_EQ(nf.error_code(), StatusCode::NOT_FOUND);
  EXPECT_TRUE(nf.error_details().empty());
  Destroy(id);
}

TEST_F(RpcTest, FaultOutcomesAreOkAnswers) {
  const uint64_t id = NewSpace();
  uint64_t a = 0, ro = 0;
  ASSERT_TRUE(Mmap(id, 0, 2 * kPage, kRW, kPrivAnon, &a).ok());
  ASSERT_TRUE(Mmap(id, 0x40000000, kPage, PROT_READ, kPrivAnon | MAP_FIXED, &ro).ok());
  v1::FaultInfo f;

  // No VMA: SIGSEGV with SEGV_MAPERR, as an OK answer.
  ASSERT_TRUE(Fault(id, 0x50000123, v1::ACCESS_READ, &f).ok());
  EXPECT_EQ(f.outcome(), v1::FAULT_OUTCOME_SIGSEGV);
  EXPECT_EQ(f.si_code(), v1::SEGV_MAPERR);
  EXPECT_EQ(f.si_addr(), 0x50000123u);

  // Write to a read-only VMA: SEGV_ACCERR.
  ASSERT_TRUE(Fault(id, ro + 5, v1::ACCESS_WRITE, &f).ok());
  EXPECT_EQ(f.outcome(), v1::FAULT_OUTCOME_SIGSEGV);
  EXPECT_EQ(f.si_code(), v1::SEGV_ACCERR);
  EXPECT_EQ(f.si_addr(), ro + 5);

  // First touch is a minor fault, the second finds the PTE.
  ASSERT_TRUE(Fault(id, a, v1::ACCESS_WRITE, &f).ok());
  EXPECT_EQ(f.outcome(), v1::FAULT_OUTCOME_MINOR);
  EXPECT_NE(f.lock_path(), v1::LOCK_PATH_NONE);
  ASSERT_TRUE(Fault(id, a + 1, v1::ACCESS_WRITE, &f).ok());
  EXPECT_EQ(f.outcome(), v1::FAULT_OUTCOME_NONE);

  v1::FaultRequest req;
  req.set_space_id(id);
  req.set_addr(a);
  req.set_access(static_cast<v1::AccessType>(7));
  v1::FaultResponse resp;
  EXPECT_TRUE(HasErrno(stub_->Fault(Ctx().get(), req, &resp), StatusCode::INVALID_ARGUMENT,
                       "EINVAL", EINVAL));
  Destroy(id);
}

TEST_F(RpcTest, WriteThenReadBack) {
  const uint64_t id = NewSpace();
  uint64_t a = 0;
  ASSERT_TRUE(Mmap(id, 0, 64 * kPage, kRW, kPrivAnon, &a).ok());
  std::string data(100000, '\0');
  std::mt19937 rng(42);
  for (char& c : data) c = static_cast<char>(rng());
  v1::WriteMemoryResponse w;
  ASSERT_TRUE(Write(id, a + 123, data, &w).ok());
  EXPECT_EQ(w.bytes_written(), data.size());
  EXPECT_EQ(w.faults(), (123 + data.size() + kPage - 1) / kPage);
  EXPECT_FALSE(w.has_stop());
  v1::ReadMemoryResponse r;
  ASSERT_TRUE(Read(id, a + 123, data.size(), &r).ok());
  EXPECT_EQ(r.data(), data);
  EXPECT_EQ(r.faults(), 0u);

  // Untouched pages read as zeros.
  ASSERT_TRUE(Read(id, a + 40 * kPage, 10, &r).ok());
  EXPECT_EQ(r.data(), std::string(10, '\0'));

  // A read running off the end of the mapping stops with SIGSEGV and returns the prefix.
  const uint64_t end = a + 64 * kPage;
  ASSERT_TRUE(Read(id, end - 10, 100, &r).ok());
  EXPECT_EQ(r.data().size(), 10u);
  EXPECT_EQ(r.stop().outcome(), v1::FAULT_OUTCOME_SIGSEGV);
  EXPECT_EQ(r.stop().si_code(), v1::SEGV_MAPERR);
  EXPECT_EQ(r.stop().si_addr(), end);

  // A write to a read-only mapping writes nothing: SEGV_ACCERR.
  uint64_t ro = 0;
  ASSERT_TRUE(Mmap(id, 0, kPage, PROT_READ, kPrivAnon, &ro).ok());
  ASSERT_TRUE(Write(id, ro, "hello", &w).ok());
  EXPECT_EQ(w.bytes_written(), 0u);
  EXPECT_EQ(w.stop().outcome(), v1::FAULT_OUTCOME_SIGSEGV);
  EXPECT_EQ(w.stop().si_code(), v1::SEGV_ACCERR);
  Destroy(id);
}

TEST_F(RpcTest, MadviseDontneedZapsPages) {
  const uint64_t id = NewSpace();
  uint64_t a = 0;
  ASSERT_TRUE(Mmap(id, 0, 4 * kPage, kRW, kPrivAnon, &a).ok());
  v1::WriteMemoryResponse w;
  ASSERT_TRUE(Write(id, a, std::string(4 * kPage, 'z'), &w).ok());
  v1::MadviseRequest req;
  req.set_space_id(id);
  req.set_addr(a + kPage);
  req.set_len(2 * kPage);
  req.set_advice(MADV_DONTNEED);
  v1::MadviseResponse resp;
  ASSERT_TRUE(stub_->Madvise(Ctx().get(), req, &resp).ok());
  v1::ReadMemoryResponse r;
  ASSERT_TRUE(Read(id, a, 4 * kPage, &r).ok());
  EXPECT_EQ(r.data(), std::string(kPage, 'z') + std::string(2 * kPage, '\0') +
                          std::string(kPage, 'z'));
  EXPECT_EQ(r.faults(), 2u) << "the zapped pages fault again";

  req.set_advice(12345);
  EXPECT_TRUE(HasErrno(stub_->Madvise(Ctx().get(), req, &resp), StatusCode::INVALID_ARGUMENT,
                       "EINVAL", EINVAL));
  req.set_advice(MADV_DONTNEED);
  req.set_addr(a + 1);
  EXPECT_TRUE(HasErrno(stub_->Madvise(Ctx().get(), req, &resp), StatusCode::INVALID_ARGUMENT,
                       "EINVAL", EINVAL));
  req.set_space_id(id + 1000000);
  EXPECT_EQ(stub_->Madvise(Ctx().get(), req, &resp).error_code(), StatusCode::NOT_FOUND);
  Destroy(id);
}

TEST_F(RpcTest, GetLockStatsReportsLocksAndEvents) {
  v1::SpaceSettings settings;
  settings.set_locking_profile("linux-6.1");
  const uint64_t id = NewSpace(settings);
  uint64_t a = 0;
  ASSERT_TRUE(Mmap(id, 0, 8 * kPage, kRW, kPrivAnon, &a).ok());
  v1::FaultInfo f;
  for (uint64_t i = 0; i < 8; i++) ASSERT_TRUE(Fault(id, a + i * kPage, v1::ACCESS_WRITE, &f).ok());

  v1::GetLockStatsRequest req;
  req.set_locking_profile("linux-6.1");
  v1::GetLockStatsResponse resp;
  ASSERT_TRUE(stub_->GetLockStats(Ctx().get(), req, &resp).ok());
  uint64_t mmap_read = 0, mmap_write = 0;
  for (const auto& l : resp.locks()) {
    if (l.lock() == "mmap_lock" && l.mode() == "read") mmap_read = l.acquisitions();
    if (l.lock() == "mmap_lock" && l.mode() == "write") mmap_write = l.acquisitions();
  }
  EXPECT_GE(mmap_read, 8u) << "linux-6.1 handles every fault under mmap_lock";
  EXPECT_GE(mmap_write, 1u);
  EXPECT_GE(resp.events().at("pgfault"), 8u);
  EXPECT_TRUE(resp.lock_stats_enabled());
  EXPECT_NE(resp.text().find("mmap_lock"), std::string::npos) << resp.text();

  // Histograms: the engine's bucket bounds (stats.h kDurationBuckets) and, per lock, one
  // count per bucket plus +Inf; a bucket count exists exactly when a time was recorded.
  ASSERT_EQ(resp.bucket_upper_seconds_size(), 16);
  EXPECT_DOUBLE_EQ(resp.bucket_upper_seconds(0), 1e-7);
  EXPECT_DOUBLE_EQ(resp.bucket_upper_seconds(8), 1e-4);
  EXPECT_DOUBLE_EQ(resp.bucket_upper_seconds(11), 2.5e-3);
  EXPECT_DOUBLE_EQ(resp.bucket_upper_seconds(15), 1.0);
  for (const auto& l : resp.locks()) {
    SCOPED_TRACE(l.lock() + " " + l.mode());
    ASSERT_EQ(l.wait_buckets_size(), 17);
    ASSERT_EQ(l.hold_buckets_size(), 17);
    uint64_t waits = 0, holds = 0;
    for (uint64_t n : l.wait_buckets()) waits += n;
    for (uint64_t n : l.hold_buckets()) holds += n;
    EXPECT_LE(waits, l.contentions());
    EXPECT_EQ(waits > 0, l.wait_seconds_total() > 0);
    EXPECT_EQ(holds > 0, l.hold_seconds_total() > 0);
    if (l.lock() == "vma_lock" && l.mode() == "read") {
      EXPECT_EQ(waits, 0u) << "a VMA read lock never waits";
    }
  }

  v1::GetLockStatsResponse all;
  ASSERT_TRUE(stub_->GetLockStats(Ctx().get(), {}, &all).ok());
  EXPECT_GE(all.events().at("pgfault"), resp.events().at("pgfault"));

  req.set_locking_profile("linux-9.9");
  EXPECT_TRUE(HasErrno(stub_->GetLockStats(Ctx().get(), req, &resp),
                       StatusCode::INVALID_ARGUMENT, "EINVAL", EINVAL));
  Destroy(id);
}

TEST_F(RpcTest, IoLimitIsEinval) {
  const uint64_t id = NewSpace();
  uint64_t a = 0;
  ASSERT_TRUE(Mmap(id, 0, 512 * kPage, kRW, kPrivAnon, &a).ok());
  v1::ReadMemoryResponse r;
  EXPECT_TRUE(HasErrno(Read(id, a, (1 << 20) + 1, &r), StatusCode::INVALID_ARGUMENT, "EINVAL",
                       EINVAL));
  v1::WriteMemoryResponse w;
  EXPECT_TRUE(HasErrno(Write(id, a, std::string((1 << 20) + 1, 'x'), &w),
                       StatusCode::INVALID_ARGUMENT, "EINVAL", EINVAL));
  // Exactly the limit is fine.
  ASSERT_TRUE(Write(id, a, std::string(1 << 20, 'y'), &w).ok());
  EXPECT_EQ(w.bytes_written(), 1u << 20);
  ASSERT_TRUE(Read(id, a, 1 << 20, &r).ok());
  EXPECT_EQ(r.data(), std::string(1 << 20, 'y'));
  Destroy(id);
}

TEST_F(RpcTest, AccessWritesPatternAcrossChunks) {
  const uint64_t id = NewSpace();
  uint64_t a = 0;
  const uint64_t len = 5120 * kPage;  // 20 MiB with stride 1: the daemon walks it in chunks
  ASSERT_TRUE(Mmap(id, 0, len + kPage, kRW, kPrivAnon, &a).ok());
  v1::AccessRequest req;
  req.set_space_id(id);
  req.set_addr(a);
  req.set_len(len);
  req.set_stride(1);
  req.set_access(v1::ACCESS_WRITE);
  v1::AccessResponse resp;
  ASSERT_TRUE(stub_->Access(Ctx().get(), req, &resp).ok());
  EXPECT_EQ(resp.accesses(), len);
  EXPECT_EQ(resp.faults(), len / kPage);
  EXPECT_FALSE(resp.has_stop());
  for (uint64_t off : {uint64_t{0}, uint64_t{300000}, uint64_t{(16 << 20) - 300}, len - 1000}) {
    v1::ReadMemoryResponse r;
    ASSERT_TRUE(Read(id, a + off, 1000, &r).ok());
    ASSERT_EQ(r.data().size(), 1000u);
    for (uint64_t i = 0; i < 1000; i++)
      ASSERT_EQ(static_cast<uint8_t>(r.data()[i]), static_cast<uint8_t>(off + i)) << off + i;
  }

  // Read access with a page stride: zero-page faults; the walk stops at the end of the
  // mapping with SIGSEGV.
  req.set_addr(a + len);
  req.set_len(4 * kPage);
  req.set_stride(kPage);
  req.set_access(v1::ACCESS_READ);
  ASSERT_TRUE(stub_->Access(Ctx().get(), req, &resp).ok());
  EXPECT_EQ(resp.accesses(), 1u);
  EXPECT_EQ(resp.faults(), 1u);
  EXPECT_EQ(resp.stop().outcome(), v1::FAULT_OUTCOME_SIGSEGV);
  EXPECT_EQ(resp.stop().si_addr(), a + len + kPage);
  Destroy(id);
}

TEST_F(RpcTest, GetMapsListsVmasAndText) {
  const uint64_t id = NewSpace();
  uint64_t a = 0, b = 0;
  ASSERT_TRUE(Mmap(id, 0x10000000, 2 * kPage, kRW, kPrivAnon | MAP_FIXED, &a).ok());
  ASSERT_TRUE(Mmap(id, 0x20000000, kPage, PROT_READ, MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED, &b)
                  .ok());
  v1::FaultInfo f;
  ASSERT_TRUE(Fault(id, a, v1::ACCESS_WRITE, &f).ok());
  v1::GetMapsResponse m = Maps(id);
  ASSERT_EQ(m.vmas_size(), 2);
  EXPECT_EQ(m.map_count(), 2u);
  EXPECT_EQ(m.vmas(0).start(), 0x10000000u);
  EXPECT_EQ(m.vmas(0).end(), 0x10002000u);
  EXPECT_EQ(m.vmas(0).perms(), "rw-p");
  EXPECT_EQ(m.vmas(0).dev(), "00:00");
  EXPECT_EQ(m.vmas(0).rss_bytes(), kPage);
  EXPECT_EQ(m.vmas(0).name(), "");
  EXPECT_EQ(m.vmas(0).smaps_vmflags().rfind("rd wr", 0), 0u) << m.vmas(0).smaps_vmflags();
  EXPECT_EQ(m.vmas(1).perms(), "r--s");
  EXPECT_EQ(m.vmas(1).name(), "/dev/zero (deleted)");
  // maps_text: one line per VMA, starting with the range.
  const std::string& t = m.maps_text();
  EXPECT_EQ(std::count(t.begin(), t.end(), '\n'), 2);
  EXPECT_EQ(t.rfind("10000000-10002000 rw-p 00000000 00:00 0", 0), 0u) << t;
  EXPECT_NE(t.find("20000000-20001000 r--s 00000000 "), std::string::npos) << t;
  EXPECT_NE(t.find("/dev/zero (deleted)\n"), std::string::npos) << t;

  // A range filter returns the overlapping VMAs only; map_count is still the whole space.
  v1::GetMapsResponse part = Maps(id, 0x1fff0000, 0x30000000);
  ASSERT_EQ(part.vmas_size(), 1);
  EXPECT_EQ(part.vmas(0).start(), 0x20000000u);
  EXPECT_EQ(part.map_count(), 2u);

  v1::GetMapsRequest req;
  req.set_space_id(id);
  req.set_start(0x3000);
  req.set_end(0x2000);
  v1::GetMapsResponse resp;
  EXPECT_TRUE(HasErrno(stub_->GetMaps(Ctx().get(), req, &resp), StatusCode::INVALID_ARGUMENT,
                       "EINVAL", EINVAL));
  Destroy(id);
}

TEST_F(RpcTest, FrameLimitIsResourceExhausted) {
  Daemon d;
  ASSERT_TRUE(d.Start({"--max-frame-bytes=4194304"})) << d.stderr_text();
  auto stub = d.NewStub();
  v1::CreateSpaceResponse cs;
  ASSERT_TRUE(stub->CreateSpace(Ctx().get(), {}, &cs).ok());
  v1::MmapRequest mreq;
  mreq.set_space_id(cs.space_id());
  mreq.set_len(64ull << 20);
  mreq.set_prot(kRW);
  mreq.set_flags(kPrivAnon);
  v1::MmapResponse mresp;
  ASSERT_TRUE(stub->Mmap(Ctx().get(), mreq, &mresp).ok());
  v1::AccessRequest areq;
  areq.set_space_id(cs.space_id());
  areq.set_addr(mresp.addr());
  areq.set_len(64ull << 20);
  areq.set_stride(kPage);
  areq.set_access(v1::ACCESS_WRITE);
  v1::AccessResponse aresp;
  grpc::Status s = stub->Access(Ctx().get(), areq, &aresp);
  EXPECT_TRUE(HasErrno(s, StatusCode::RESOURCE_EXHAUSTED, "ENOMEM", ENOMEM));
  EXPECT_NE(s.error_message().find("frame memory limit"), std::string::npos) << s.error_message();
  // The space still works for reads of what fit, and destroying it frees the frames.
  v1::DestroySpaceRequest dreq;
  dreq.set_space_id(cs.space_id());
  v1::DestroySpaceResponse dresp;
  EXPECT_TRUE(stub->DestroySpace(Ctx().get(), dreq, &dresp).ok());
  EXPECT_EQ(d.Stop(), 0);
}

TEST_F(RpcTest, BatchAnswersInOrderWithPerOpResults) {
  const uint64_t id = NewSpace();
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto stream = stub_->Batch(&ctx);

  // Message 1 (tag 7): mmap ok, mmap len 0 (EINVAL), fault on nothing (SIGSEGV, OK),
  // op on an unknown space (NOT_FOUND), empty op (EINVAL), write.
  v1::BatchRequest m1;
  m1.set_tag(7);
  auto* mm = m1.add_ops()->mutable_mmap();
  mm->set_space_id(id);
  mm->set_addr(0x10000000);
  mm->set_len(2 * kPage);
  mm->set_prot(kRW);
  mm->set_flags(kPrivAnon | MAP_FIXED);
  auto* bad = m1.add_ops()->mutable_mmap();
  bad->set_space_id(id);
  bad->set_prot(kRW);
  bad->set_flags(kPrivAnon);
  auto* fl = m1.add_ops()->mutable_fault();
  fl->set_space_id(id);
  fl->set_addr(0x90000000);
  auto* nf = m1.add_ops()->mutable_read();
  nf->set_space_id(id + 1000000);
  nf->set_len(1);
  m1.add_ops();
  auto* wr = m1.add_ops()->mutable_write();
  wr->set_space_id(id);
  wr->set_addr(0x10000ffe);
  wr->set_data("abcd");

  // Message 2 (tag 8): read back, access, munmap, mprotect on the hole (ENOMEM).
  v1::BatchRequest m2;
  m2.set_tag(8);
  auto* rd = m2.add_ops()->mutable_read();
  rd->set_space_id(id);
  rd->set_addr(0x10000ffe);
  rd->set_len(4);
  auto* ac = m2.add_ops()->mutable_access();
  ac->set_space_id(id);
  ac->set_addr(0x10000000);
  ac->set_len(2 * kPage);
  ac->set_stride(kPage);
  auto* un = m2.add_ops()->mutable_munmap();
  un->set_space_id(id);
  un->set_addr(0x10000000);
  un->set_len(kPage);
  auto* mp = m2.add_ops()->mutable_mprotect();
  mp->set_space_id(id);
  mp->set_addr(0x10000000);
  mp->set_len(2 * kPage);
  mp->set_prot(PROT_READ);

  auto* md = m2.add_ops()->mutable_madvise();
  md->set_space_id(id);
  md->set_addr(0x10001000);
  md->set_len(kPage);
  md->set_advice(MADV_DONTNEED);

  // Message 3 (tag 9): empty batch.
  v1::BatchRequest m3;
  m3.set_tag(9);

  // Pipelined: all three are written before any response is read.
  ASSERT_TRUE(stream->Write(m1));
  ASSERT_TRUE(stream->Write(m2));
  ASSERT_TRUE(stream->Write(m3));

  v1::BatchResponse r;
  ASSERT_TRUE(stream->Read(&r));
  EXPECT_EQ(r.tag(), 7u);
  ASSERT_EQ(r.results_size(), 6);
  EXPECT_EQ(r.results(0).code(), 0);
  EXPECT_EQ(r.results(0).mmap().addr(), 0x10000000u);
  EXPECT_EQ(r.results(1).code(), static_cast<int>(StatusCode::INVALID_ARGUMENT));
  EXPECT_EQ(r.results(1).errno_(), EINVAL);
  EXPECT_EQ(r.results(1).errno_name(), "EINVAL");
  EXPECT_EQ(r.results(1).message().rfind("EINVAL: ", 0), 0u) << r.results(1).message();
  EXPECT_EQ(r.results(2).code(), 0);
  EXPECT_EQ(r.results(2).fault().fault().outcome(), v1::FAULT_OUTCOME_SIGSEGV);
  EXPECT_EQ(r.results(2).fault().fault().si_code(), v1::SEGV_MAPERR);
  EXPECT_EQ(r.results(3).code(), static_cast<int>(StatusCode::NOT_FOUND));
  EXPECT_EQ(r.results(3).errno_(), 0);
  EXPECT_EQ(r.results(4).code(), static_cast<int>(StatusCode::INVALID_ARGUMENT));
  EXPECT_EQ(r.results(5).code(), 0);
  EXPECT_EQ(r.results(5).write().bytes_written(), 4u);
  EXPECT_EQ(r.results(5).write().faults(), 2u);

  ASSERT_TRUE(stream->Read(&r));
  EXPECT_EQ(r.tag(), 8u);
  ASSERT_EQ(r.results_size(), 5);
  EXPECT_EQ(r.results(0).read().data(), "abcd");
  EXPECT_EQ(r.results(1).access().accesses(), 2u);
  EXPECT_EQ(r.results(1).access().faults(), 0u);
  EXPECT_EQ(r.results(2).code(), 0);
  EXPECT_TRUE(r.results(2).has_munmap());
  EXPECT_EQ(r.results(3).code(), static_cast<int>(StatusCode::RESOURCE_EXHAUSTED));
  EXPECT_EQ(r.results(3).errno_name(), "ENOMEM");
  EXPECT_EQ(r.results(4).code(), 0) << r.results(4).message();
  EXPECT_TRUE(r.results(4).has_madvise());

  ASSERT_TRUE(stream->Read(&r));
  EXPECT_EQ(r.tag(), 9u);
  EXPECT_EQ(r.results_size(), 0);

  // Many messages: tags come back in order.
  for (uint64_t t = 100; t < 150; t++) {
    v1::BatchRequest m;
    m.set_tag(t);
    for (int i = 0; i < 10; i++) {
      auto* f = m.add_ops()->mutable_fault();
      f->set_space_id(id);
      f->set_addr(0x10001000 + static_cast<uint64_t>(i));
    }
    ASSERT_TRUE(stream->Write(m));
  }
  for (uint64_t t = 100; t < 150; t++) {
    ASSERT_TRUE(stream->Read(&r));
    ASSERT_EQ(r.tag(), t);
    ASSERT_EQ(r.results_size(), 10);
  }

  stream->WritesDone();
  EXPECT_FALSE(stream->Read(&r));
  grpc::Status s = stream->Finish();
  EXPECT_TRUE(s.ok()) << s.error_message();
  Destroy(id);
}

TEST_F(RpcTest, BatchOverMaxBatchEndsStream) {
  const uint64_t id = NewSpace();
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto stream = stub_->Batch(&ctx);
  v1::BatchRequest ok_msg;
  ok_msg.set_tag(1);
  for (int i = 0; i < 64; i++) ok_msg.add_ops()->mutable_fault()->set_space_id(id);
  v1::BatchRequest big = ok_msg;
  big.set_tag(2);
  big.add_ops()->mutable_fault()->set_space_id(id);  // 65 > --max-batch=64
  ASSERT_TRUE(stream->Write(ok_msg));
  v1::BatchResponse r;
  ASSERT_TRUE(stream->Read(&r));
  EXPECT_EQ(r.tag(), 1u);
  EXPECT_EQ(r.results_size(), 64);
  stream->Write(big);
  EXPECT_FALSE(stream->Read(&r));
  grpc::Status s = stream->Finish();
  EXPECT_TRUE(HasErrno(s, StatusCode::INVALID_ARGUMENT, "EINVAL", EINVAL));
  Destroy(id);
}

// ---- Op.addr_of: ops naming an earlier mmap's result in the same stream ----

v1::OpRef RefIndex(uint64_t index) {
  v1::OpRef r;
  r.set_index(index);
  return r;
}
v1::OpRef RefBack(uint64_t back) {
  v1::OpRef r;
  r.set_back(back);
  return r;
}
v1::Op* AddMmap(v1::BatchRequest& m, uint64_t id, uint64_t len) {
  v1::Op* op = m.add_ops();
  auto* mm = op->mutable_mmap();
  mm->set_space_id(id);
  mm->set_len(len);
  mm->set_prot(kRW);
  mm->set_flags(kPrivAnon);
  return op;
}
v1::Op* AddMunmap(v1::BatchRequest& m, uint64_t id, uint64_t offset, uint64_t len, const v1::OpRef& ref) {
  v1::Op* op = m.add_ops();
  op->mutable_munmap()->set_space_id(id);
  op->mutable_munmap()->set_addr(offset);
  op->mutable_munmap()->set_len(len);
  *op->mutable_addr_of() = ref;
  return op;
}
v1::Op* AddFault(v1::BatchRequest& m, uint64_t id, uint64_t offset, const v1::OpRef& ref) {
  v1::Op* op = m.add_ops();
  op->mutable_fault()->set_space_id(id);
  op->mutable_fault()->set_addr(offset);
  op->mutable_fault()->set_access(v1::ACCESS_WRITE);
  *op->mutable_addr_of() = ref;
  return op;
}
/// The result is EINVAL from the reference check, its message containing `why`.
::testing::AssertionResult RefRefused(const v1::OpResult& r, const std::string& why) {
  if (r.code() != static_cast<int>(StatusCode::INVALID_ARGUMENT) || r.errno_() != EINVAL ||
      r.errno_name() != "EINVAL" || r.message().rfind("EINVAL: ", 0) != 0 ||
      r.message().find(why) == std::string::npos)
    return ::testing::AssertionFailure() << "code " << r.code() << " " << r.errno_name() << ": " << r.message();
  return ::testing::AssertionSuccess();
}

TEST_F(RpcTest, BatchOpsNameEarlierMmapResults) {
  const uint64_t id = NewSpace();
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto stream = stub_->Batch(&ctx);

  // Message 1: op 0 maps 2 pages; ops 1-4 use its address without knowing it.
  v1::BatchRequest m1;
  m1.set_tag(1);
  AddMmap(m1, id, 2 * kPage);
  v1::Op* wr = m1.add_ops();  // op 1: write across the page boundary
  wr->mutable_write()->set_space_id(id);
  wr->mutable_write()->set_addr(kPage - 2);
  wr->mutable_write()->set_data("abcd");
  *wr->mutable_addr_of() = RefBack(1);
  v1::Op* rd = m1.add_ops();  // op 2: read it back
  rd->mutable_read()->set_space_id(id);
  rd->mutable_read()->set_addr(kPage - 2);
  rd->mutable_read()->set_len(4);
  *rd->mutable_addr_of() = RefIndex(0);
  AddMunmap(m1, id, 0, kPage, RefIndex(0));  // op 3: the first page
  AddFault(m1, id, 0, RefBack(4));           // op 4: op 0's first page is gone: SIGSEGV

  // Message 2, written before message 1 is answered: references to message 1's ops.
  v1::BatchRequest m2;
  m2.set_tag(2);
  AddMunmap(m2, id, 0, kPage, RefIndex(5));    // op 5: names itself
  AddMunmap(m2, id, 0, kPage, RefIndex(100));  // op 6: a future op
  AddMmap(m2, id, 0);                          // op 7: fails (len 0)
  AddMunmap(m2, id, 0, kPage, RefBack(1));     // op 8: names the failed op 7
  AddMunmap(m2, id, 0, kPage, RefIndex(3));    // op 9: a munmap returns no address
  AddMunmap(m2, id, 0, kPage, RefBack(0));     // op 10: back 0 is this op
  AddMunmap(m2, id, 0, kPage, v1::OpRef());    // op 11: neither field set
  AddMunmap(m2, id, 0, kPage, RefBack(13));    // op 12: before the stream's start
  AddFault(m2, id, kPage, RefBack(13));        // op 13: op 0's second page, written by op 1
  AddMunmap(m2, id, kPage, kPage, RefIndex(0));  // op 14: unmaps it
  AddFault(m2, id, kPage, RefIndex(0));        // op 15: now SIGSEGV

  ASSERT_TRUE(stream->Write(m1));
  ASSERT_TRUE(stream->Write(m2));

  v1::BatchResponse r;
  ASSERT_TRUE(stream->Read(&r));
  ASSERT_EQ(r.tag(), 1u);
  ASSERT_EQ(r.results_size(), 5);
  ASSERT_EQ(r.results(0).code(), 0) << r.results(0).message();
  const uint64_t a = r.results(0).mmap().addr();
  EXPECT_EQ(a, 0x7ffff7ffd000u);  // top-down below mmap_base, as the kernel without ASLR
  EXPECT_EQ(r.results(1).code(), 0) << r.results(1).message();
  EXPECT_EQ(r.results(1).write().bytes_written(), 4u);
  EXPECT_EQ(r.results(1).write().faults(), 2u);
  EXPECT_EQ(r.results(2).code(), 0) << r.results(2).message();
  EXPECT_EQ(r.results(2).read().data(), "abcd");
  EXPECT_EQ(r.results(3).code(), 0) << r.results(3).message();
  EXPECT_EQ(r.results(4).fault().fault().outcome(), v1::FAULT_OUTCOME_SIGSEGV);
  EXPECT_EQ(r.results(4).fault().fault().si_code(), v1::SEGV_MAPERR);
  EXPECT_EQ(r.results(4).fault().fault().si_addr(), a);

  ASSERT_TRUE(stream->Read(&r));
  ASSERT_EQ(r.tag(), 2u);
  ASSERT_EQ(r.results_size(), 11);
  EXPECT_TRUE(RefRefused(r.results(0), "addr_of of op 5 of the stream: index 5 names this op or a later one"));
  EXPECT_TRUE(RefRefused(r.results(1), "addr_of of op 6 of the stream: index 100 names this op or a later one"));
  EXPECT_EQ(r.results(2).errno_name(), "EINVAL");  // the mmap itself
  EXPECT_TRUE(RefRefused(r.results(3), "op 7 failed or returned no address"));
  EXPECT_TRUE(RefRefused(r.results(4), "op 3 failed or returned no address"));
  EXPECT_TRUE(RefRefused(r.results(5), "back 0 is not in [1, 10]"));
  EXPECT_TRUE(RefRefused(r.results(6), "neither back nor index is set"));
  EXPECT_TRUE(RefRefused(r.results(7), "back 13 is not in [1, 12]"));
  EXPECT_EQ(r.results(8).code(), 0) << r.results(8).message();
  EXPECT_EQ(r.results(8).fault().fault().outcome(), v1::FAULT_OUTCOME_NONE);  // present: no fault
  EXPECT_EQ(r.results(9).code(), 0) << r.results(9).message();
  EXPECT_EQ(r.results(10).fault().fault().outcome(), v1::FAULT_OUTCOME_SIGSEGV);
  EXPECT_EQ(r.results(10).fault().fault().si_addr(), a + kPage);

  // The refused munmaps ran nothing: the space is empty (ops 3 and 14 unmapped both pages).
  v1::GetMapsRequest mreq;
  mreq.set_space_id(id);
  v1::GetMapsResponse maps;
  ASSERT_TRUE(stub_->GetMaps(Ctx().get(), mreq, &maps).ok());
  EXPECT_EQ(maps.map_count(), 0u);

  stream->WritesDone();
  EXPECT_FALSE(stream->Read(&r));
  EXPECT_TRUE(stream->Finish().ok());
  Destroy(id);
}

TEST_F(RpcTest, BatchAddrOfCannotNameAnotherStreamsOps) {
  const uint64_t id = NewSpace();
  grpc::ClientContext ca, cb;
  ca.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  cb.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto a = stub_->Batch(&ca);
  auto b = stub_->Batch(&cb);
  v1::BatchRequest ma;
  AddMmap(ma, id, kPage);  // stream a's op 0
  ASSERT_TRUE(a->Write(ma));
  v1::BatchResponse r;
  ASSERT_TRUE(a->Read(&r));
  ASSERT_EQ(r.results(0).code(), 0);
  // Stream b's op 0 names op 0 (b's own numbering: nothing before it), its op 1 names
  // "the previous op", b's op 0, which returned no address.
  v1::BatchRequest mb;
  AddMunmap(mb, id, 0, kPage, RefIndex(0));
  AddMunmap(mb, id, 0, kPage, RefBack(1));
  ASSERT_TRUE(b->Write(mb));
  ASSERT_TRUE(b->Read(&r));
  ASSERT_EQ(r.results_size(), 2);
  EXPECT_TRUE(RefRefused(r.results(0), "addr_of of op 0 of the stream: index 0 names this op or a later one"));
  EXPECT_TRUE(RefRefused(r.results(1), "op 0 failed or returned no address"));
  // Stream a's op 1 can: the mapping is still there until then.
  v1::BatchRequest ma2;
  AddMunmap(ma2, id, 0, kPage, RefBack(1));
  ASSERT_TRUE(a->Write(ma2));
  ASSERT_TRUE(a->Read(&r));
  EXPECT_EQ(r.results(0).code(), 0) << r.results(0).message();
  for (auto* s : {a.get(), b.get()}) {
    s->WritesDone();
    EXPECT_FALSE(s->Read(&r));
    EXPECT_TRUE(s->Finish().ok());
  }
  Destroy(id);
}

TEST_F(RpcTest, BatchAddrOfWindowIsTheLastBatchRefWindowOps) {
  const uint64_t id = NewSpace();
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto stream = stub_->Batch(&ctx);
  constexpr uint64_t kWindow = v1::BATCH_REF_WINDOW;
  // Ops 0 and 1 map a page each; ops 2 .. kWindow are no-op madvises (len 0).
  std::vector<v1::Op> ops;
  v1::BatchRequest first;
  AddMmap(first, id, kPage);
  AddMmap(first, id, kPage);
  ops.assign(first.ops().begin(), first.ops().end());
  while (ops.size() <= kWindow) {
    v1::Op op;
    op.mutable_madvise()->set_space_id(id);
    op.mutable_madvise()->set_advice(MADV_DONTNEED);
    ops.push_back(op);
  }
  // Op kWindow + 1 names op 1 (kWindow back: the oldest it may), op kWindow + 2 names
  // op 1 again (one too far), op kWindow + 3 names op 0.
  v1::BatchRequest last;
  AddMunmap(last, id, 0, kPage, RefIndex(1));
  AddMunmap(last, id, 0, kPage, RefIndex(1));
  AddMunmap(last, id, 0, kPage, RefBack(kWindow + 3));
  ops.insert(ops.end(), last.ops().begin(), last.ops().end());
  std::vector<v1::OpResult> results;
  for (size_t i = 0; i < ops.size(); i += 64) {  // --max-batch=64
    v1::BatchRequest m;
    for (size_t j = i; j < std::min(ops.size(), i + 64); j++) *m.add_ops() = ops[j];
    ASSERT_TRUE(stream->Write(m));
    v1::BatchResponse r;
    ASSERT_TRUE(stream->Read(&r));
    results.insert(results.end(), r.results().begin(), r.results().end());
  }
  ASSERT_EQ(results.size(), kWindow + 4);
  for (size_t i = 0; i <= kWindow; i++) ASSERT_EQ(results[i].code(), 0) << i << ": " << results[i].message();
  const uint64_t addr1 = results[1].mmap().addr();
  EXPECT_EQ(results[0].mmap().addr(), addr1 + kPage);
  EXPECT_EQ(results[kWindow + 1].code(), 0) << results[kWindow + 1].message();
  EXPECT_TRUE(RefRefused(results[kWindow + 2], "op 1 is older than the last 16384 ops (BATCH_REF_WINDOW)"));
  EXPECT_TRUE(RefRefused(results[kWindow + 3], "op 0 is older than the last 16384 ops"));
  // Only op 1's page went (by op kWindow + 1); op 0's is still mapped.
  v1::GetMapsRequest mreq;
  mreq.set_space_id(id);
  v1::GetMapsResponse maps;
  ASSERT_TRUE(stub_->GetMaps(Ctx().get(), mreq, &maps).ok());
  ASSERT_EQ(maps.vmas_size(), 1);
  EXPECT_EQ(maps.vmas(0).start(), addr1 + kPage);
  stream->WritesDone();
  v1::BatchResponse r;
  EXPECT_FALSE(stream->Read(&r));
  EXPECT_TRUE(stream->Finish().ok());
  Destroy(id);
}

// ---- BatchRequest.packed: the same ops in the compact form ----

/// Appends the words of one packed op to `m` (its space: `id`).
void AddPacked(v1::BatchRequest& m, uint64_t id, std::initializer_list<uint64_t> words) {
  m.mutable_packed()->set_space_id(id);
  for (uint64_t w : words) m.mutable_packed()->add_words(w);
}

TEST_F(RpcTest, BatchPackedOpsRunAsOpsWithCompactResults) {
  const uint64_t id = NewSpace();
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto stream = stub_->Batch(&ctx);
  // Message 1 (Op messages): op 0 maps 2 pages.
  v1::BatchRequest m1;
  m1.set_tag(1);
  AddMmap(m1, id, 2 * kPage);
  // Message 2 (packed), written before message 1 is answered; its ops are 1..8.
  v1::BatchRequest m2;
  m2.set_tag(2);
  const uint64_t idx = v1::PACKED_ADDR_OF_INDEX, back = v1::PACKED_ADDR_OF_BACK;
  AddPacked(m2, id, {v1::PACKED_ACCESS | idx, 0, 2 * kPage, kPage, v1::ACCESS_WRITE, 0});  // 1: writes op 0's pages
  AddPacked(m2, id, {v1::PACKED_MUNMAP | back, 0, kPage, 2});                             // 2: op 0's first page
  AddPacked(m2, id, {v1::PACKED_FAULT | idx, 0, v1::ACCESS_READ, 0});                     // 3: now SIGSEGV
  AddPacked(m2, id, {v1::PACKED_MMAP, 0, 0, kRW, kPrivAnon, 0, 0});                        // 4: len 0: EINVAL
  AddPacked(m2, id, {v1::PACKED_MUNMAP | back, 0, kPage, 1});                             // 5: names the failed op 4
  AddPacked(m2, id, {v1::PACKED_ACCESS | idx, 0, 2 * kPage, kPage, v1::ACCESS_READ, 0});  // 6: stops at the hole
  AddPacked(m2, id, {v1::PACKED_MMAP, 0, kPage, kRW, kPrivAnon, 0, 0});                    // 7: maps the hole
  AddPacked(m2, id, {v1::PACKED_MADVISE | back, 0, kPage, MADV_DONTNEED, 1});             // 8: on op 7's page
  // Message 3 (packed): an unknown space, and op 9 naming op 7.
  v1::BatchRequest m3;
  m3.set_tag(3);
  AddPacked(m3, id + 1000000, {v1::PACKED_MUNMAP | idx, 0, kPage, 7});
  ASSERT_TRUE(stream->Write(m1));
  ASSERT_TRUE(stream->Write(m2));
  ASSERT_TRUE(stream->Write(m3));

  v1::BatchResponse r;
  ASSERT_TRUE(stream->Read(&r));
  ASSERT_EQ(r.results_size(), 1);
  const uint64_t a = r.results(0).mmap().addr();
  EXPECT_EQ(a, 0x7ffff7ffd000u);
  EXPECT_FALSE(r.has_packed());

  ASSERT_TRUE(stream->Read(&r));
  ASSERT_EQ(r.tag(), 2u);
  EXPECT_EQ(r.results_size(), 0);
  const v1::PackedResults& p = r.packed();
  ASSERT_EQ(p.values_size(), 8);
  for (int i : {0, 1, 2, 3, 4, 5, 7}) EXPECT_EQ(p.values(i), 0u) << i;
  EXPECT_EQ(p.values(6), a);  // top-down: the highest hole, op 0's first page
  // Full results: the fault, the failed mmap, the refused munmap, the stopped access.
  ASSERT_EQ(p.full_index_size(), 4);
  ASSERT_EQ(p.full_size(), 4);
  EXPECT_EQ(p.full_index(0), 2u);
  EXPECT_EQ(p.full(0).code(), 0);
  EXPECT_EQ(p.full(0).fault().fault().outcome(), v1::FAULT_OUTCOME_SIGSEGV);
  EXPECT_EQ(p.full(0).fault().fault().si_addr(), a);
  EXPECT_EQ(p.full_index(1), 3u);
  EXPECT_EQ(p.full(1).code(), static_cast<int>(StatusCode::INVALID_ARGUMENT));
  EXPECT_EQ(p.full(1).errno_name(), "EINVAL");
  EXPECT_EQ(p.full_index(2), 4u);
  EXPECT_TRUE(RefRefused(p.full(2), "op 4 failed or returned no address"));
  EXPECT_EQ(p.full_index(3), 5u);
  EXPECT_EQ(p.full(3).code(), 0);
  EXPECT_EQ(p.full(3).access().stop().outcome(), v1::FAULT_OUTCOME_SIGSEGV);
  EXPECT_EQ(p.full(3).access().stop().si_addr(), a);
  // Access sums: op 1 wrote 2 pages (2 faults), op 5 read none before it stopped.
  EXPECT_EQ(p.accesses(), 2u + p.full(3).access().accesses());
  EXPECT_EQ(p.access_faults(), 2u + p.full(3).access().faults());
  EXPECT_EQ(p.full(3).access().accesses(), 0u);
  EXPECT_EQ(p.access_major_faults(), 0u);

  ASSERT_TRUE(stream->Read(&r));
  ASSERT_EQ(r.tag(), 3u);
  ASSERT_EQ(r.packed().values_size(), 1);
  ASSERT_EQ(r.packed().full_size(), 1);
  EXPECT_EQ(r.packed().full(0).code(), static_cast<int>(StatusCode::NOT_FOUND));

  // The space holds op 7's page and op 0's second page (message 3 ran nothing).
  v1::GetMapsRequest mreq;
  mreq.set_space_id(id);
  v1::GetMapsResponse maps;
  ASSERT_TRUE(stub_->GetMaps(Ctx().get(), mreq, &maps).ok());
  ASSERT_EQ(maps.vmas_size(), 1);  // adjacent, same flags: one VMA
  EXPECT_EQ(maps.vmas(0).start(), a);
  EXPECT_EQ(maps.vmas(0).end(), a + 2 * kPage);
  EXPECT_EQ(maps.vmas(0).rss_bytes(), kPage);  // op 0's second page; op 7's was never touched
  stream->WritesDone();
  EXPECT_FALSE(stream->Read(&r));
  EXPECT_TRUE(stream->Finish().ok());
  Destroy(id);
}

TEST_F(RpcTest, BatchPackedWordsThatDoNotDecodeEndTheStream) {
  const uint64_t id = NewSpace();
  const uint64_t unmap[] = {v1::PACKED_MUNMAP, 0x10000000, kPage};
  struct Case {
    const char* what;
    std::vector<uint64_t> words;
    bool with_op;  // also an Op message
  };
  const Case cases[] = {
      {"unknown kind", {99, 0, kPage}, false},
      {"kind 0", {0}, false},
      {"unknown flag", {v1::PACKED_MUNMAP | 1024, 0, kPage}, false},
      {"both addr_of flags", {v1::PACKED_MUNMAP | v1::PACKED_ADDR_OF_BACK | v1::PACKED_ADDR_OF_INDEX, 0, kPage, 1, 1}, false},
      {"cut short", {v1::PACKED_MMAP, 0, kPage, kRW}, false},
      {"addr_of word missing", {v1::PACKED_MUNMAP | v1::PACKED_ADDR_OF_BACK, 0, kPage}, false},
      {"ops and packed", {unmap, unmap + 3}, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    auto stream = stub_->Batch(&ctx);
    // First a good packed message: mmap a page at 0x10000000, answered.
    v1::BatchRequest good;
    AddPacked(good, id, {v1::PACKED_MMAP, 0x10000000, kPage, kRW, kPrivAnon | MAP_FIXED, 0, 0});
    ASSERT_TRUE(stream->Write(good));
    v1::BatchResponse r;
    ASSERT_TRUE(stream->Read(&r));
    ASSERT_EQ(r.packed().values_size(), 1);
    EXPECT_EQ(r.packed().values(0), 0x10000000u);
    // Then the bad one: the words decode into nothing, it would unmap the page if it ran.
    v1::BatchRequest bad;
    bad.mutable_packed()->set_space_id(id);
    for (uint64_t w : c.words) bad.mutable_packed()->add_words(w);
    if (c.with_op) AddMunmap(bad, id, 0x10000000, kPage, RefIndex(0));
    stream->Write(bad);
    EXPECT_FALSE(stream->Read(&r));
    const grpc::Status s = stream->Finish();
    EXPECT_TRUE(HasErrno(s, StatusCode::INVALID_ARGUMENT, "EINVAL", EINVAL)) << s.error_message();
    v1::GetMapsRequest mreq;
    mreq.set_space_id(id);
    v1::GetMapsResponse maps;
    ASSERT_TRUE(stub_->GetMaps(Ctx().get(), mreq, &maps).ok());
    EXPECT_EQ(maps.map_count(), 1u) << "an op of the bad message ran";
  }
  // More than --max-batch=64 packed ops end the stream as 65 Op messages do.
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto stream = stub_->Batch(&ctx);
  v1::BatchRequest big;
  for (int i = 0; i < 65; i++) AddPacked(big, id, {v1::PACKED_MADVISE, 0, 0, MADV_DONTNEED});
  stream->Write(big);
  v1::BatchResponse r;
  EXPECT_FALSE(stream->Read(&r));
  const grpc::Status s = stream->Finish();
  EXPECT_TRUE(HasErrno(s, StatusCode::INVALID_ARGUMENT, "EINVAL", EINVAL));
  EXPECT_NE(s.error_message().find("65 ops in one message exceed --max-batch=64"), std::string::npos)
      << s.error_message();
  Destroy(id);
}

TEST_F(RpcTest, DestroyedSpaceIsNotFoundAfterwards) {
  const uint64_t id = NewSpace();
  uint64_t a = 0;
  ASSERT_TRUE(Mmap(id, 0, kPage, kRW, kPrivAnon, &a).ok());
  Destroy(id);
  EXPECT_EQ(Mmap(id, 0, kPage, kRW, kPrivAnon).error_code(), StatusCode::NOT_FOUND);
  const uint64_t id2 = NewSpace();
  EXPECT_NE(id2, id) << "ids are not reused";
  EXPECT_EQ(Mmap(id, 0, kPage, kRW, kPrivAnon).error_code(), StatusCode::NOT_FOUND);
  Destroy(id2);
}

// brk(2) over gRPC: the break is the answer (never an error), the heap shows in maps,
// and the settings start_brk / rlimit_data are validated and used.
TEST_F(RpcTest, BrkMovesTheBreakAndAnswersTheOldOneWhenRefused) {
  auto brk = [&](uint64_t id, uint64_t b) {
    v1::BrkRequest req;
    req.set_space_id(id);
    req.set_brk(b);
    v1::BrkResponse resp;
    const grpc::Status s = stub_->Brk(Ctx().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.brk();
  };
  const uint64_t id = NewSpace();
  EXPECT_EQ(brk(id, 0), 0x4ac000u);
  EXPECT_EQ(brk(id, 0x4ac000 + 0x2800), 0x4ae800u);
  v1::GetMapsResponse m = Maps(id);
  ASSERT_EQ(m.vmas_size(), 1);
  EXPECT_EQ(m.vmas(0).name(), "[heap]");
  EXPECT_EQ(m.vmas(0).end(), 0x4af000u);
  EXPECT_EQ(brk(id, ~0ull), 0x4ae800u) << "beyond TASK_SIZE: refused";
  EXPECT_EQ(brk(id, 0x4ac000), 0x4ac000u);
  EXPECT_EQ(Maps(id).map_count(), 0u);
  Destroy(id);

  v1::SpaceSettings set;
  set.set_start_brk(0x10000000);
  set.set_rlimit_data(0x3000);
  const uint64_t limited = NewSpace(set);
  EXPECT_EQ(brk(limited, 0x10003000), 0x10003000u);
  EXPECT_EQ(brk(limited, 0x10003001), 0x10003000u) << "RLIMIT_DATA";
  Destroy(limited);
  for (uint64_t bad : {uint64_t{0x10000001}, uint64_t{0x1000}, uint64_t{0x7ffffffff000}, uint64_t{~0ull & ~0xfffull}}) {
    v1::CreateSpaceRequest req;
    req.mutable_settings()->set_start_brk(bad);
    v1::CreateSpaceResponse resp;
    EXPECT_TRUE(HasErrno(stub_->CreateSpace(Ctx().get(), req, &resp), StatusCode::INVALID_ARGUMENT, "EINVAL", EINVAL))
        << "start_brk " << bad;
  }
}

TEST_F(RpcTest, MremapMovesPagesAndMapsErrnos) {
  auto mremap = [&](uint64_t id, uint64_t old_addr, uint64_t old_len, uint64_t new_len, uint64_t flags,
                    uint64_t new_addr, uint64_t* out = nullptr) {
    v1::MremapRequest req;
    req.set_space_id(id);
    req.set_old_addr(old_addr);
    req.set_old_len(old_len);
    req.set_new_len(new_len);
    req.set_flags(flags);
    req.set_new_addr(new_addr);
    v1::MremapResponse resp;
    const grpc::Status s = stub_->Mremap(Ctx().get(), req, &resp);
    if (out) *out = resp.addr();
    return s;
  };
  const uint64_t id = NewSpace();
  uint64_t a = 0;
  ASSERT_TRUE(Mmap(id, 0, 2 * kPage, kRW, kPrivAnon, &a).ok());
  v1::WriteMemoryResponse w;
  ASSERT_TRUE(Write(id, a + kPage, "moved", &w).ok());
  uint64_t b = 0;
  ASSERT_TRUE(mremap(id, a, 2 * kPage, 2 * kPage, MREMAP_MAYMOVE | MREMAP_FIXED, a - 16 * kPage, &b).ok());
  EXPECT_EQ(b, a - 16 * kPage);
  v1::FaultInfo f;
  ASSERT_TRUE(Fault(id, a, v1::ACCESS_READ, &f).ok());
  EXPECT_EQ(f.outcome(), v1::FAULT_OUTCOME_SIGSEGV) << "the old range is unmapped";
  // Errnos and their codes, at the limits of the arguments.
  EXPECT_TRUE(HasErrno(mremap(id, b, kPage, kPage, 8, 0), StatusCode::INVALID_ARGUMENT, "EINVAL", EINVAL))
      << "unknown flag";
  EXPECT_TRUE(HasErrno(mremap(id, b, kPage, kPage, 1ull << 40, 0), StatusCode::INVALID_ARGUMENT, "EINVAL", EINVAL))
      << "a flag bit above 32";
  EXPECT_TRUE(HasErrno(mremap(id, b + 1, kPage, kPage, 0, 0), StatusCode::INVALID_ARGUMENT, "EINVAL", EINVAL));
  EXPECT_TRUE(HasErrno(mremap(id, b, kPage, 0, 0, 0), StatusCode::INVALID_ARGUMENT, "EINVAL", EINVAL));
  EXPECT_TRUE(HasErrno(mremap(id, b, kPage, ~0ull, MREMAP_MAYMOVE, 0), StatusCode::INVALID_ARGUMENT, "EINVAL",
                       EINVAL))
      << "new_len wraps to 0 when rounded up";
  EXPECT_TRUE(HasErrno(mremap(id, b, kPage, 0x800000000000, MREMAP_MAYMOVE, 0), StatusCode::INVALID_ARGUMENT,
                       "EINVAL", EINVAL))
      << "new_len beyond TASK_SIZE";
  EXPECT_TRUE(HasErrno(mremap(id, b, kPage, kPage, MREMAP_MAYMOVE | MREMAP_FIXED, ~0ull & ~0xfffull),
                       StatusCode::INVALID_ARGUMENT, "EINVAL", EINVAL))
      << "new_addr + new_len wraps";
  EXPECT_TRUE(HasErrno(mremap(id, b, kPage, kPage, MREMAP_MAYMOVE | MREMAP_FIXED, b + 0x800),
                       StatusCode::INVALID_ARGUMENT, "EINVAL", EINVAL))
      << "unaligned new_addr";
  uint64_t same = 0;
  ASSERT_TRUE(mremap(id, b, 3 * kPage, 3 * kPage, 0, 0, &same).ok()) << "no resize: nothing checked";
  EXPECT_EQ(same, b);
  EXPECT_TRUE(HasErrno(mremap(id, b, 3 * kPage, 4 * kPage, 0, 0), StatusCode::INVALID_ARGUMENT, "EFAULT", EFAULT))
      << "the range is longer than its VMA";
  EXPECT_TRUE(HasErrno(mremap(id, 0x30000000, kPage, kPage, 0, 0), StatusCode::INVALID_ARGUMENT, "EFAULT", EFAULT))
      << "no VMA";
  uint64_t c = 0;
  ASSERT_TRUE(Mmap(id, b + 2 * kPage, kPage, PROT_READ, kPrivAnon | MAP_FIXED, &c).ok());
  EXPECT_TRUE(HasErrno(mremap(id, b, 2 * kPage, 4 * kPage, 0, 0), StatusCode::RESOURCE_EXHAUSTED, "ENOMEM", ENOMEM))
      << "growth blocked without MREMAP_MAYMOVE";
  ASSERT_TRUE(mremap(id, b, 2 * kPage, 4 * kPage, MREMAP_MAYMOVE, 0, &c).ok());
  EXPECT_NE(c, b);
  v1::ReadMemoryRequest rr;
  rr.set_space_id(id);
  rr.set_addr(c + kPage);
  rr.set_len(5);
  v1::ReadMemoryResponse rd;
  ASSERT_TRUE(stub_->ReadMemory(Ctx().get(), rr, &rd).ok());
  EXPECT_EQ(rd.data(), "moved");
  Destroy(id);
}

// Batch: brk and mremap ops, packed too; a later op names the mremap's address.
TEST_F(RpcTest, BatchBrkAndMremapOpsAndAddrOf) {
  const uint64_t id = NewSpace();
  v1::BatchRequest req;
  auto* m = req.add_ops()->mutable_mmap();
  m->set_space_id(id);
  m->set_len(2 * kPage);
  m->set_prot(kRW);
  m->set_flags(kPrivAnon);
  v1::Op* mr = req.add_ops();
  mr->mutable_mremap()->set_space_id(id);
  mr->mutable_mremap()->set_old_len(2 * kPage);
  mr->mutable_mremap()->set_new_len(kPage);
  mr->mutable_addr_of()->set_back(1);  // old_addr = what the mmap returned
  v1::Op* un = req.add_ops();
  un->mutable_munmap()->set_space_id(id);
  un->mutable_munmap()->set_len(kPage);
  un->mutable_addr_of()->set_back(1);  // what the mremap returned
  v1::Op* br = req.add_ops();
  br->mutable_brk()->set_space_id(id);
  br->mutable_brk()->set_brk(0x4ad000);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto stream = stub_->Batch(&ctx);
  ASSERT_TRUE(stream->Write(req));
  v1::BatchResponse resp;
  ASSERT_TRUE(stream->Read(&resp));
  ASSERT_EQ(resp.results_size(), 4);
  for (int i = 0; i < 4; i++) EXPECT_EQ(resp.results(i).code(), 0) << i << ": " << resp.results(i).message();
  EXPECT_EQ(resp.results(1).mremap().addr(), resp.results(0).mmap().addr());
  EXPECT_EQ(resp.results(3).brk().brk(), 0x4ad000u);
  // Packed: brk back to start_brk, and a mremap with an unknown flag (EINVAL).
  v1::BatchRequest p;
  p.mutable_packed()->set_space_id(id);
  for (uint64_t w : {uint64_t{v1::PACKED_BRK}, uint64_t{0x4ac000}, uint64_t{v1::PACKED_MREMAP},
                     uint64_t{0x10000000}, kPage, kPage, uint64_t{8}, uint64_t{0}})
    p.mutable_packed()->add_words(w);
  ASSERT_TRUE(stream->Write(p));
  ASSERT_TRUE(stream->Read(&resp));
  ASSERT_EQ(resp.packed().values_size(), 2);
  EXPECT_EQ(resp.packed().values(0), 0x4ac000u);
  ASSERT_EQ(resp.packed().full_index_size(), 1);
  EXPECT_EQ(resp.packed().full(0).errno_name(), "EINVAL");
  ASSERT_TRUE(stream->WritesDone());
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(Maps(id).map_count(), 0u);
  Destroy(id);
}

// mlock2, munlock, mlockall, munlockall, mseal: the engine's answers with their errno
// names in the details; unknown flags EINVAL; RLIMIT_MEMLOCK and CAP_IPC_LOCK from
// SpaceSettings; the same ops in a Batch, as Op messages and packed.
TEST_F(RpcTest, MlockAndMsealCalls) {
  v1::SpaceSettings settings;
  settings.set_rlimit_memlock(4 * kPage);
  settings.set_cap_ipc_lock(false);
  const uint64_t id = NewSpace(settings);
  uint64_t a = 0;
  ASSERT_TRUE(Mmap(id, 0, 8 * kPage, kRW, kPrivAnon, &a).ok());
  auto mlock = [&](uint64_t addr, uint64_t len, int flags) {
    v1::MlockRequest req;
    req.set_space_id(id);
    req.set_addr(addr);
    req.set_len(len);
    req.set_flags(flags);
    v1::MlockResponse resp;
    return stub_->Mlock(Ctx().get(), req, &resp);
  };
  auto mseal = [&](uint64_t addr, uint64_t len, uint64_t flags) {
    v1::MsealRequest req;
    req.set_space_id(id);
    req.set_addr(addr);
    req.set_len(len);
    req.set_flags(flags);
    v1::MsealResponse resp;
    return stub_->Mseal(Ctx().get(), req, &resp);
  };
  ASSERT_TRUE(mlock(a, 2 * kPage, 0).ok());
  EXPECT_TRUE(HasErrno(mlock(a, kPage, 2), StatusCode::INVALID_ARGUMENT, "EINVAL", EINVAL));
  EXPECT_TRUE(HasErrno(mlock(a, 8 * kPage, 0), StatusCode::RESOURCE_EXHAUSTED, "ENOMEM", ENOMEM));
  EXPECT_NE(Maps(id).maps_text().find("rw-p"), std::string::npos);
  EXPECT_EQ(Maps(id).map_count(), 2u);  // the locked part split off
  {
    v1::MlockallRequest req;
    req.set_space_id(id);
    req.set_flags(4);  // MCL_ONFAULT alone
    v1::MlockallResponse resp;
    EXPECT_TRUE(HasErrno(stub_->Mlockall(Ctx().get(), req, &resp), StatusCode::INVALID_ARGUMENT, "EINVAL", EINVAL));
    req.set_flags(1);  // MCL_CURRENT: total_vm beyond the limit
    EXPECT_TRUE(HasErrno(stub_->Mlockall(Ctx().get(), req, &resp), StatusCode::RESOURCE_EXHAUSTED, "ENOMEM", ENOMEM));
  }
  {
    v1::MunlockRequest req;
    req.set_space_id(id);
    req.set_addr(a);
    req.set_len(8 * kPage);
    v1::MunlockResponse resp;
    ASSERT_TRUE(stub_->Munlock(Ctx().get(), req, &resp).ok());
    EXPECT_EQ(Maps(id).map_count(), 1u);
    v1::MunlockallRequest ureq;
    ureq.set_space_id(id);
    v1::MunlockallResponse uresp;
    EXPECT_TRUE(stub_->Munlockall(Ctx().get(), ureq, &uresp).ok());
  }
  EXPECT_TRUE(HasErrno(mseal(a, kPage, 1), StatusCode::INVALID_ARGUMENT, "EINVAL", EINVAL));
  EXPECT_TRUE(HasErrno(mseal(a + 7 * kPage, 2 * kPage, 0), StatusCode::RESOURCE_EXHAUSTED, "ENOMEM", ENOMEM));
  ASSERT_TRUE(mseal(a + 4 * kPage, 4 * kPage, 0).ok());
  EXPECT_TRUE(HasErrno(Munmap(id, a, 8 * kPage), StatusCode::PERMISSION_DENIED, "EPERM", EPERM));
  EXPECT_TRUE(HasErrno(Mprotect(id, a + 4 * kPage, kPage, PROT_READ), StatusCode::PERMISSION_DENIED, "EPERM", EPERM));
  // A Batch: mlock as an Op, munlock and mseal packed.
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto stream = stub_->Batch(&ctx);
  v1::BatchRequest req;
  v1::MlockRequest* op = req.add_ops()->mutable_mlock();
  op->set_space_id(id);
  op->set_addr(a);
  op->set_len(kPage);
  v1::MlockRequest* bad = req.add_ops()->mutable_mlock();
  *bad = *op;
  bad->set_flags(8);
  ASSERT_TRUE(stream->Write(req));
  v1::BatchResponse resp;
  ASSERT_TRUE(stream->Read(&resp));
  ASSERT_EQ(resp.results_size(), 2);
  EXPECT_EQ(resp.results(0).code(), 0);
  EXPECT_TRUE(resp.results(0).has_mlock());
  EXPECT_EQ(resp.results(1).errno_name(), "EINVAL");
  v1::BatchRequest packed;
  packed.mutable_packed()->set_space_id(id);
  for (uint64_t w : {uint64_t{v1::PACKED_MUNLOCK}, a, kPage, uint64_t{v1::PACKED_MSEAL}, a, kPage, uint64_t{0},
                     uint64_t{v1::PACKED_MSEAL}, a, kPage, uint64_t{1}})
    packed.mutable_packed()->add_words(w);
  ASSERT_TRUE(stream->Write(packed));
  ASSERT_TRUE(stream->Read(&resp));
  ASSERT_EQ(resp.packed().values_size(), 3);
  ASSERT_EQ(resp.packed().full_index_size(), 1);
  EXPECT_EQ(resp.packed().full_index(0), 2u);
  EXPECT_EQ(resp.packed().full(0).errno_name(), "EINVAL");
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_TRUE(HasErrno(Munmap(id, a, kPage), StatusCode::PERMISSION_DENIED, "EPERM", EPERM));
  Destroy(id);
}

// mincore(2) over the unary RPC: the vector has one byte per page, 1 for the touched
// pages only; an unaligned addr is EINVAL, a hole ENOMEM, more pages than
// --max-io-bytes (default 1 MiB: 2^20 pages) EINVAL naming the limit.
// The new calls at their limits, each with the kernel's errno (mm/madvise.c, mlock.c,
// mseal.c, msync.c, Linux 6.18): an unaligned start is EINVAL (mlock and munlock
// round it down instead); a length whose page rounding wraps is EINVAL (msync:
// ENOMEM), one that rounds to 0 succeeds doing nothing for mlock, munlock and msync
// (their checks see len 0) but is EINVAL for madvise and mseal ("rounded up from a
// small negative"); unknown msync flags and advices are EINVAL. The VMA is untouched.
TEST_F(RpcTest, NewCallsAtTheirLimits) {
  v1::SpaceSettings settings;
  settings.set_cap_ipc_lock(true);
  const uint64_t id = NewSpace(settings);
  uint64_t a = 0;
  ASSERT_TRUE(Mmap(id, 0, 4 * kPage, kRW, kPrivAnon, &a).ok());
  // A request of [addr, addr + len) in this space.
  auto range = [&](auto req, uint64_t addr, uint64_t len) {
    req.set_space_id(id);
    req.set_addr(addr);
    req.set_len(len);
    return req;
  };
  auto madvise = [&](uint64_t addr, uint64_t len, int advice) {
    auto req = range(v1::MadviseRequest{}, addr, len);
    req.set_advice(advice);
    v1::MadviseResponse resp;
    return stub_->Madvise(Ctx().get(), req, &resp);
  };
  auto mlock = [&](uint64_t addr, uint64_t len) {
    v1::MlockResponse resp;
    return stub_->Mlock(Ctx().get(), range(v1::MlockRequest{}, addr, len), &resp);
  };
  auto munlock = [&](uint64_t addr, uint64_t len) {
    v1::MunlockResponse resp;
    return stub_->Munlock(Ctx().get(), range(v1::MunlockRequest{}, addr, len), &resp);
  };
  auto mseal = [&](uint64_t addr, uint64_t len) {
    v1::MsealResponse resp;
    return stub_->Mseal(Ctx().get(), range(v1::MsealRequest{}, addr, len), &resp);
  };
  auto msync = [&](uint64_t addr, uint64_t len, int flags) {
    auto req = range(v1::MsyncRequest{}, addr, len);
    req.set_flags(flags);
    v1::MsyncResponse resp;
    return stub_->Msync(Ctx().get(), req, &resp);
  };
  const uint64_t wraps = ~0ull - 2 * kPage;  // a + PAGE_ALIGN(len) passes 2^64
  const uint64_t to_zero = ~0ull - 5;       // PAGE_ALIGN() makes it 0
  EXPECT_TRUE(HasErrno(madvise(a + 1, kPage, MADV_DONTNEED), StatusCode::INVALID_ARGUMENT, "EINVAL", EINVAL));
  EXPECT_TRUE(HasErrno(madvise(a, wraps, MADV_DONTNEED), StatusCode::INVALID_ARGUMENT, "EINVAL", EINVAL));
  EXPECT_TRUE(HasErrno(madvise(a, to_zero, MADV_DONTNEED), StatusCode::INVALID_ARGUMENT, "EINVAL", EINVAL));
  EXPECT_TRUE(HasErrno(madvise(a, kPage, -1), StatusCode::INVALID_ARGUMENT, "EINVAL", EINVAL));
  EXPECT_TRUE(HasErrno(madvise(a, kPage, 1 << 30), StatusCode::INVALID_ARGUMENT, "EINVAL", EINVAL));
  EXPECT_TRUE(HasErrno(mlock(a, wraps), StatusCode::INVALID_ARGUMENT, "EINVAL", EINVAL));
  EXPECT_TRUE(mlock(a, to_zero).ok());
  EXPECT_TRUE(HasErrno(munlock(a, wraps), StatusCode::INVALID_ARGUMENT, "EINVAL", EINVAL));
  EXPECT_TRUE(munlock(a, to_zero).ok());
  EXPECT_TRUE(HasErrno(mseal(a + 1, kPage), StatusCode::INVALID_ARGUMENT, "EINVAL", EINVAL));
  EXPECT_TRUE(HasErrno(mseal(a, wraps), StatusCode::INVALID_ARGUMENT, "EINVAL", EINVAL));
  EXPECT_TRUE(HasErrno(mseal(a, to_zero), StatusCode::INVALID_ARGUMENT, "EINVAL", EINVAL));
  EXPECT_TRUE(HasErrno(msync(a + 1, kPage, MS_SYNC), StatusCode::INVALID_ARGUMENT, "EINVAL", EINVAL));
  EXPECT_TRUE(HasErrno(msync(a, wraps, MS_SYNC), StatusCode::RESOURCE_EXHAUSTED, "ENOMEM", ENOMEM));
  EXPECT_TRUE(msync(a, to_zero, MS_SYNC).ok());
  EXPECT_TRUE(HasErrno(msync(a, kPage, 8), StatusCode::INVALID_ARGUMENT, "EINVAL", EINVAL));
  EXPECT_TRUE(HasErrno(msync(a, kPage, -1), StatusCode::INVALID_ARGUMENT, "EINVAL", EINVAL));
  EXPECT_TRUE(HasErrno(msync(a, kPage, MS_SYNC | MS_ASYNC), StatusCode::INVALID_ARGUMENT, "EINVAL", EINVAL));
  v1::GetMapsRequest mr;
  mr.set_space_id(id);
  v1::GetMapsResponse maps;
  ASSERT_TRUE(stub_->GetMaps(Ctx().get(), mr, &maps).ok());
  ASSERT_EQ(maps.vmas_size(), 1);
  EXPECT_EQ(maps.vmas(0).end() - maps.vmas(0).start(), 4 * kPage);
}

TEST_F(RpcTest, MincoreReportsTouchedPages) {
  const uint64_t id = NewSpace();
  uint64_t a = 0;
  ASSERT_TRUE(Mmap(id, 0, 6 * kPage, kRW, kPrivAnon, &a).ok());
  v1::FaultInfo f;
  for (uint64_t page : {1, 2, 4}) ASSERT_TRUE(Fault(id, a + page * kPage, v1::ACCESS_WRITE, &f).ok());
  v1::MincoreRequest req;
  req.set_space_id(id);
  req.set_addr(a);
  req.set_len(6 * kPage - 100);  // rounded up to 6 pages
  v1::MincoreResponse resp;
  ASSERT_TRUE(stub_->Mincore(Ctx().get(), req, &resp).ok());
  EXPECT_EQ(resp.vec(), std::string("\0\1\1\0\1\0", 6));

  req.set_len(0);
  ASSERT_TRUE(stub_->Mincore(Ctx().get(), req, &resp).ok());
  EXPECT_EQ(resp.vec(), "");

  req.set_addr(a + 1);
  req.set_len(kPage);
  EXPECT_TRUE(HasErrno(stub_->Mincore(Ctx().get(), req, &resp), StatusCode::INVALID_ARGUMENT,
                       "EINVAL", EINVAL));
  // [a, a + 7 pages): the last page is past the VMA (a hole).
  req.set_addr(a);
  req.set_len(7 * kPage);
  ASSERT_TRUE(Munmap(id, a + 6 * kPage, kPage).ok());
  EXPECT_TRUE(HasErrno(stub_->Mincore(Ctx().get(), req, &resp), StatusCode::RESOURCE_EXHAUSTED,
                       "ENOMEM", ENOMEM));
  EXPECT_EQ(resp.vec(), "") << "no vector with an error";

  req.set_len(((1ull << 20) + 1) * kPage);
  const grpc::Status cap = stub_->Mincore(Ctx().get(), req, &resp);
  EXPECT_TRUE(HasErrno(cap, StatusCode::INVALID_ARGUMENT, "EINVAL", EINVAL));
  EXPECT_NE(cap.error_message().find("--max-io-bytes=1048576"), std::string::npos)
      << cap.error_message();
  req.set_space_id(id + 1000000);
  req.set_len(kPage);
  EXPECT_EQ(stub_->Mincore(Ctx().get(), req, &resp).error_code(), StatusCode::NOT_FOUND);
  Destroy(id);
}

// MADV_FREE keeps the pages until reclaim (still resident, answered OK); after
// MADV_GUARD_INSTALL an access of the range is SIGSEGV and mincore reports the guard
// pages of an anonymous VMA as not resident; an unknown advice is EINVAL.
TEST_F(RpcTest, MadviseFreeAndGuardInstall) {
  constexpr int kMadvFree = 8, kMadvGuardInstall = 102;
  const uint64_t id = NewSpace();
  uint64_t a = 0;
  ASSERT_TRUE(Mmap(id, 0, 4 * kPage, kRW, kPrivAnon, &a).ok());
  v1::WriteMemoryResponse w;
  ASSERT_TRUE(Write(id, a, std::string(4 * kPage, 'g'), &w).ok());
  v1::MadviseRequest req;
  req.set_space_id(id);
  req.set_addr(a);
  req.set_len(kPage);
  req.set_advice(kMadvFree);
  v1::MadviseResponse resp;
  ASSERT_TRUE(stub_->Madvise(Ctx().get(), req, &resp).ok());

  req.set_addr(a + 2 * kPage);
  req.set_len(kPage);
  req.set_advice(kMadvGuardInstall);
  grpc::Status s = stub_->Madvise(Ctx().get(), req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  v1::FaultInfo f;
  ASSERT_TRUE(Fault(id, a + 2 * kPage + 8, v1::ACCESS_READ, &f).ok());
  EXPECT_EQ(f.outcome(), v1::FAULT_OUTCOME_SIGSEGV);
  EXPECT_EQ(f.si_addr(), a + 2 * kPage + 8);
  ASSERT_TRUE(Fault(id, a + 3 * kPage, v1::ACCESS_READ, &f).ok());
  EXPECT_EQ(f.outcome(), v1::FAULT_OUTCOME_NONE) << "the page after the guard is untouched";

  v1::MincoreRequest mr;
  mr.set_space_id(id);
  mr.set_addr(a);
  mr.set_len(4 * kPage);
  v1::MincoreResponse mresp;
  ASSERT_TRUE(stub_->Mincore(Ctx().get(), mr, &mresp).ok());
  EXPECT_EQ(mresp.vec(), std::string("\1\1\0\1", 4));

  req.set_advice(999);
  EXPECT_TRUE(HasErrno(stub_->Madvise(Ctx().get(), req, &resp), StatusCode::INVALID_ARGUMENT,
                       "EINVAL", EINVAL));
  Destroy(id);
}

// A mincore op in a Batch answers its vector like the unary call (seeing the ops
// before it), and its errors as the op's own result.
TEST_F(RpcTest, BatchMincoreOp) {
  const uint64_t id = NewSpace();
  uint64_t a = 0;
  ASSERT_TRUE(Mmap(id, 0, 3 * kPage, kRW, kPrivAnon, &a).ok());
  v1::FaultInfo f;
  ASSERT_TRUE(Fault(id, a + 2 * kPage, v1::ACCESS_WRITE, &f).ok());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto stream = stub_->Batch(&ctx);
  v1::BatchRequest m;
  m.set_tag(5);
  auto* ok = m.add_ops()->mutable_mincore();
  ok->set_space_id(id);
  ok->set_addr(a);
  ok->set_len(3 * kPage);
  auto* wr = m.add_ops()->mutable_write();
  wr->set_space_id(id);
  wr->set_addr(a);
  wr->set_data("x");
  auto* again = m.add_ops()->mutable_mincore();
  *again = *ok;
  auto* bad = m.add_ops()->mutable_mincore();
  *bad = *ok;
  bad->set_addr(a + 1);
  ASSERT_TRUE(stream->Write(m));
  v1::BatchResponse r;
  ASSERT_TRUE(stream->Read(&r));
  EXPECT_EQ(r.tag(), 5u);
  ASSERT_EQ(r.results_size(), 4);
  EXPECT_EQ(r.results(0).code(), 0) << r.results(0).message();
  EXPECT_EQ(r.results(0).mincore().vec(), std::string("\0\0\1", 3));
  EXPECT_EQ(r.results(2).mincore().vec(), std::string("\1\0\1", 3)) << "after the write op";
  EXPECT_EQ(r.results(3).code(), static_cast<int>(StatusCode::INVALID_ARGUMENT));
  EXPECT_EQ(r.results(3).errno_name(), "EINVAL");
  EXPECT_FALSE(r.results(3).has_mincore());

  stream->WritesDone();
  EXPECT_FALSE(stream->Read(&r));
  const grpc::Status s = stream->Finish();
  EXPECT_TRUE(s.ok()) << s.error_message();
  Destroy(id);
}

TEST_F(RpcTest, CloneSpaceSharesPrivatePagesCopyOnWriteAndSharedPagesForReal) {
  const uint64_t parent = NewSpace({}, "forker");
  uint64_t priv = 0, shared = 0;
  ASSERT_TRUE(Mmap(parent, 0, 2 * kPage, kRW, kPrivAnon, &priv).ok());
  ASSERT_TRUE(Mmap(parent, 0, kPage, kRW, MAP_SHARED | MAP_ANONYMOUS, &shared).ok());
  v1::WriteMemoryResponse w;
  ASSERT_TRUE(Write(parent, priv, "before", &w).ok());
  ASSERT_TRUE(Write(parent, shared, "shared0", &w).ok());
  auto clone = [&](uint64_t id, const std::string& profile, v1::CloneSpaceResponse* resp) {
    v1::CloneSpaceRequest req;
    req.set_space_id(id);
    req.set_locking_profile(profile);
    v1::CloneSpaceResponse local;
    return stub_->CloneSpace(Ctx().get(), req, resp ? resp : &local);
  };
  v1::CloneSpaceResponse forked;
  grpc::Status st = clone(parent, "", &forked);
  ASSERT_TRUE(st.ok()) << st.error_message();
  const uint64_t child = forked.space_id();
  ASSERT_NE(child, 0u);
  ASSERT_NE(child, parent);
  EXPECT_EQ(Maps(child).maps_text(), Maps(parent).maps_text());
  EXPECT_EQ(Maps(child).map_count(), 2u);  // the private and the shared mapping
  v1::ListSpacesResponse list;
  ASSERT_TRUE(stub_->ListSpaces(Ctx().get(), v1::ListSpacesRequest(), &list).ok());
  std::string child_label, child_profile, parent_profile;
  for (const v1::SpaceInfo& i : list.spaces()) {
    if (i.space_id() == child) child_label = i.label(), child_profile = i.locking_profile();
    if (i.space_id() == parent) parent_profile = i.locking_profile();
  }
  EXPECT_EQ(child_label, "forker");
  EXPECT_EQ(child_profile, parent_profile);
  // Each side writes its own private value; both see every shared write.
  ASSERT_TRUE(Write(parent, priv, "parent", &w).ok());
  ASSERT_TRUE(Write(child, priv, "child!", &w).ok());
  ASSERT_TRUE(Write(child, shared, "shared1", &w).ok());
  v1::ReadMemoryResponse r;
  ASSERT_TRUE(Read(parent, priv, 6, &r).ok());
  EXPECT_EQ(r.data(), "parent");
  ASSERT_TRUE(Read(child, priv, 6, &r).ok());
  EXPECT_EQ(r.data(), "child!");
  ASSERT_TRUE(Read(parent, shared, 7, &r).ok());
  EXPECT_EQ(r.data(), "shared1");
  ASSERT_TRUE(Write(parent, shared, "shared2", &w).ok());
  ASSERT_TRUE(Read(child, shared, 7, &r).ok());
  EXPECT_EQ(r.data(), "shared2");
  // A page the parent first writes after the fork stays empty in the child.
  ASSERT_TRUE(Write(parent, priv + kPage, "second", &w).ok());
  ASSERT_TRUE(Read(child, priv + kPage, 6, &r).ok());
  EXPECT_EQ(r.data(), std::string(6, '\0'));
  // The child outlives its parent with its data.
  Destroy(parent);
  ASSERT_TRUE(Read(child, priv, 6, &r).ok());
  EXPECT_EQ(r.data(), "child!");
  ASSERT_TRUE(Read(child, shared, 7, &r).ok());
  EXPECT_EQ(r.data(), "shared2");
  // Errors: a destroyed or unknown parent, a bad profile, a long label.
  EXPECT_EQ(clone(parent, "", nullptr).error_code(), StatusCode::NOT_FOUND);
  EXPECT_EQ(clone(0x7777777, "", nullptr).error_code(), StatusCode::NOT_FOUND);
  EXPECT_TRUE(HasErrno(clone(child, "no-such-profile", nullptr), StatusCode::INVALID_ARGUMENT, "EINVAL", EINVAL));
  {
    v1::CloneSpaceRequest req;
    req.set_space_id(child);
    req.set_label(std::string(65, 'x'));
    v1::CloneSpaceResponse resp;
    EXPECT_TRUE(HasErrno(stub_->CloneSpace(Ctx().get(), req, &resp), StatusCode::INVALID_ARGUMENT, "EINVAL", EINVAL));
  }
  // A profile override and a label of its own.
  {
    v1::CloneSpaceRequest req;
    req.set_space_id(child);
    req.set_locking_profile("linux-6.0");
    req.set_label("grandchild");
    v1::CloneSpaceResponse resp;
    st = stub_->CloneSpace(Ctx().get(), req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    ASSERT_TRUE(stub_->ListSpaces(Ctx().get(), v1::ListSpacesRequest(), &list).ok());
    bool seen = false;
    for (const v1::SpaceInfo& i : list.spaces())
      if (i.space_id() == resp.space_id()) {
        seen = true;
        EXPECT_EQ(i.label(), "grandchild");
        EXPECT_EQ(i.locking_profile(), "linux-6.0");
      }
    EXPECT_TRUE(seen);
    ASSERT_TRUE(Read(resp.space_id(), priv, 6, &r).ok());
    EXPECT_EQ(r.data(), "child!");
    Destroy(resp.space_id());
  }
  Destroy(child);
}

}  // namespace
}  // namespace vmspace::service_test
