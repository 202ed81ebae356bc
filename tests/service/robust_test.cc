// SPDX-License-Identifier: Apache-2.0
// No request can hang or bloat the daemon: a catalogue of bad requests, each
// with its documented status and a Ping answered after it; a walk that outlives its
// deadline; SIGTERM during such a walk; freed memory reusable at once; idle spaces'
// batched frees uncharged.
#include "daemon.h"  // first (see there)

#include <sys/mman.h>

#include <functional>
#include <future>

#include <google/protobuf/stubs/logging.h>
#include <grpcpp/generic/generic_stub.h>

namespace vmspace::service_test {
namespace {

using grpc::StatusCode;

constexpr int kRw = PROT_READ | PROT_WRITE;
constexpr int kAnon = MAP_PRIVATE | MAP_ANONYMOUS;

uint64_t NewSpace(v1::VmSpace::Stub& stub) {
  v1::CreateSpaceRequest req;
  v1::CreateSpaceResponse resp;
  EXPECT_TRUE(stub.CreateSpace(Ctx().get(), req, &resp).ok());
  return resp.space_id();
}

uint64_t Map(v1::VmSpace::Stub& stub, uint64_t space, uint64_t len, int prot, int flags = kAnon) {
  v1::MmapRequest req;
  req.set_space_id(space);
  req.set_len(len);
  req.set_prot(prot);
  req.set_flags(flags);
  v1::MmapResponse resp;
  const grpc::Status s = stub.Mmap(Ctx().get(), req, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return resp.addr();
}

grpc::Status Access(v1::VmSpace::Stub& stub, uint64_t space, uint64_t addr, uint64_t len,
                    uint64_t stride, v1::AccessType type, v1::AccessResponse* resp,
                    int timeout_ms = 10000) {
  v1::AccessRequest req;
  req.set_space_id(space);
  req.set_addr(addr);
  req.set_len(len);
  req.set_stride(stride);
  req.set_access(type);
  return stub.Access(Ctx(timeout_ms).get(), req, resp);
}

// One message on a fresh Batch stream: its answer (if any) and the stream's status.
grpc::Status BatchOnce(v1::VmSpace::Stub& stub, const v1::BatchRequest& req, v1::BatchResponse* resp,
                       int timeout_ms = 10000) {
  auto ctx = Ctx(timeout_ms);
  auto stream = stub.Batch(ctx.get());
  if (stream->Write(req)) stream->Read(resp);
  stream->WritesDone();
  while (stream->Read(resp)) {
  }
  return stream->Finish();
}

// A unary call with raw request bytes (a generic stub: no serialization on our side).
grpc::Status RawCall(const std::string& addr, const std::string& method, const std::string& bytes) {
  auto channel = grpc::CreateChannel(addr, grpc::InsecureChannelCredentials());
  grpc::GenericStub generic(channel);
  grpc::Slice slice(bytes);
  grpc::ByteBuffer req(&slice, 1), resp;
  auto ctx = Ctx();
  std::promise<grpc::Status> done;
  generic.UnaryCall(ctx.get(), method, grpc::StubOptions(), &req, &resp,
                    [&](grpc::Status s) { done.set_value(std::move(s)); });
  return done.get_future().get();
}

// A Batch stream of raw messages (a generic stub: no serialization on our side), one
// operation outstanding at a time: each message is written, then its answer read; the
// first message left unanswered ends the loop. Returns the stream's final status; the
// answers are appended to *answers.
grpc::Status RawBatch(const std::string& addr, const std::vector<std::string>& msgs,
                      std::vector<v1::BatchResponse>* answers) {
  auto channel = grpc::CreateChannel(addr, grpc::InsecureChannelCredentials());
  grpc::GenericStub generic(channel);
  grpc::CompletionQueue cq;
  auto ctx = Ctx();
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call =
      generic.PrepareCall(ctx.get(), "/vmspace.v1.VmSpace/Batch", &cq);
  auto wait = [&cq] {
    void* tag;
    bool ok = false;
    return cq.Next(&tag, &ok) && ok;
  };
  call->StartCall(nullptr);
  bool open = wait();
  for (size_t i = 0; open && i < msgs.size(); i++) {
    grpc::Slice slice(msgs[i]);
    grpc::ByteBuffer out(&slice, 1), in;
    call->Write(out, nullptr);
    if (!(open = wait())) break;
    call->Read(&in, nullptr);
    if (!(open = wait())) break;
    v1::BatchResponse resp;
    std::vector<grpc::Slice> slices;
    EXPECT_TRUE(in.Dump(&slices).ok());
    std::string bytes;
    for (const grpc::Slice& sl : slices) bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
    EXPECT_TRUE(resp.ParseFromString(bytes));
    answers->push_back(std::move(resp));
  }
  if (open) {
    call->WritesDone(nullptr);
    wait();
  }
  grpc::Status st;
  call->Finish(&st, nullptr);
  wait();
  cq.Shutdown();
  void* tag;
  bool ok;
  while (cq.Next(&tag, &ok)) {
  }
  return st;
}

bool Pings(v1::VmSpace::Stub& stub) {
  v1::PingRequest req;
  v1::PingResponse resp;
  return stub.Ping(Ctx().get(), req, &resp).ok();
}

// Each case: one bad request, the status code the API documents for it, a phrase its
// message must hold, and then the daemon must still answer a Ping.
struct Case {
  std::string what;
  std::function<grpc::Status()> call;
  StatusCode code;
  std::string message_has;
};

// Runs each case in order: its status code and message, then a Ping.
// Runs each case, a Ping after it; returns how many got their documented status and message.
size_t RunCatalogue(v1::VmSpace::Stub& stub, const std::vector<Case>& cases) {
  size_t documented = 0;
  for (const Case& c : cases) {
    const grpc::Status s = c.call();
    documented += s.error_code() == c.code && s.error_message().find(c.message_has) != std::string::npos;
    EXPECT_EQ(s.error_code(), c.code) << c.what << ": " << s.error_message();
    EXPECT_NE(s.error_message().find(c.message_has), std::string::npos)
        << c.what << ": \"" << s.error_message() << "\" lacks \"" << c.message_has << "\"";
    const bool alive = Pings(stub);
    EXPECT_TRUE(alive) << "no Ping answer after: " << c.what;
    if (!alive) break;
  }
  return documented;
}

// Mmaps `n` one-page VMAs of alternating protection (no merges) in Batch messages of
// at most 1024 ops; the ops' first errno (0 if none; ENOMEM if a message was refused).
int MapAlternating(v1::VmSpace::Stub& stub, uint64_t space, int n) {
  for (int done = 0; done < n;) {
    v1::BatchRequest req;
    for (int i = 0; i < 1024 && done + i < n; i++) {
      v1::MmapRequest* m = req.add_ops()->mutable_mmap();
      m->set_space_id(space);
      m->set_len(4096);
      m->set_prot((done + i) % 2 ? PROT_READ : kRw);
      m->set_flags(kAnon);
    }
    v1::BatchResponse resp;
    const grpc::Status s = BatchOnce(stub, req, &resp);
    if (!s.ok()) {  // the message itself refused (its buffers beyond the budget)
      EXPECT_EQ(s.error_code(), StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
      return ENOMEM;
    }
    for (const v1::OpResult& r : resp.results())
      if (r.code() != 0) return r.errno_();
    done += req.ops_size();
  }
  return 0;
}

TEST(RobustTest, BadRequestCatalogue) {
  Daemon d;
  ASSERT_TRUE(d.Start({"--max-frame-bytes=1048576", "--max-message-bytes=65536", "--max-io-bytes=4096",
                       "--max-streams=2", "--max-map-count-limit=1000", "--max-access-touches=1000000"}))
      << d.stderr_text();
  auto stub = d.NewStub();
  const uint64_t space = NewSpace(*stub);
  const uint64_t page = Map(*stub, space, 4096, kRw);

  std::vector<Case> cases;
  cases.push_back({"Access len 2 stride 2^64-1 (the touch count wrapped: a hang)", [&] {
                     v1::AccessResponse r;
                     grpc::Status s = Access(*stub, space, page, 2, ~0ull, v1::ACCESS_WRITE, &r);
                     EXPECT_EQ(r.accesses(), 1u);
                     return s;
                   }, StatusCode::OK, ""});
  cases.push_back({"Batch Access len 4096 stride 2^64-4095", [&] {
                     v1::BatchRequest req;
                     v1::AccessRequest* a = req.add_ops()->mutable_access();
                     a->set_space_id(space);
                     a->set_addr(page);
                     a->set_len(4096);
                     a->set_stride(0ull - 4095);
                     a->set_access(v1::ACCESS_READ);
                     v1::BatchResponse resp;
                     grpc::Status s = BatchOnce(*stub, req, &resp);
                     EXPECT_EQ(resp.results_size(), 1);
                     if (resp.results_size() == 1) {
                       EXPECT_EQ(resp.results(0).access().accesses(), 1u);
                     }
                     return s;
                   }, StatusCode::OK, ""});
  cases.push_back({"Access of more touches than --max-access-touches", [&] {
                     v1::AccessResponse r;
                     return Access(*stub, space, page, 1ull << 40, 1, v1::ACCESS_READ, &r);
                   }, StatusCode::INVALID_ARGUMENT, "--max-access-touches=1000000"});
  cases.push_back({"CreateSpace with max_map_count 2^64-1", [&] {
                     v1::CreateSpaceRequest req;
                     req.mutable_settings()->set_max_map_count(~0ull);
                     v1::CreateSpaceResponse resp;
                     return stub->CreateSpace(Ctx().get(), req, &resp);
                   }, StatusCode::INVALID_ARGUMENT, "--max-map-count-limit=1000"});
  cases.push_back({"CreateSpace with max_map_count at the limit", [&] {
                     v1::CreateSpaceRequest req;
                     req.mutable_settings()->set_max_map_count(1000);
                     v1::CreateSpaceResponse resp;
                     return stub->CreateSpace(Ctx().get(), req, &resp);
                   }, StatusCode::OK, ""});
  cases.push_back({"CreateSpace with a locking_profile of only commas", [&] {
                     v1::CreateSpaceRequest req;
                     req.mutable_settings()->set_locking_profile(",,,");
                     v1::CreateSpaceResponse resp;
                     return stub->CreateSpace(Ctx().get(), req, &resp);
                   }, StatusCode::INVALID_ARGUMENT, "locking_profile"});
  cases.push_back({"GetLockStats with a locking_profile of only commas", [&] {
                     v1::GetLockStatsRequest req;
                     req.set_locking_profile(",");
                     v1::GetLockStatsResponse resp;
                     return stub->GetLockStats(Ctx().get(), req, &resp);
                   }, StatusCode::INVALID_ARGUMENT, "locking_profile"});
  cases.push_back({"CreateSpace whose bytes are not a protobuf message", [&] {
                     return RawCall(d.grpc_addr(), "/vmspace.v1.VmSpace/CreateSpace", "\xff\xff\xff\xff");
                   }, StatusCode::INVALID_ARGUMENT, "could not be parsed"});
  cases.push_back({"Mmap whose bytes are a truncated message", [&] {
                     return RawCall(d.grpc_addr(), "/vmspace.v1.VmSpace/Mmap", std::string("\x08\x80", 2));
                   }, StatusCode::INVALID_ARGUMENT, "could not be parsed"});
  for (int i = 0; i < 40; i++)
    cases.push_back({"CreateSpace with a label of invalid UTF-8 (x40)", [&] {
                       google::protobuf::LogSilencer quiet;  // our own serializer complains too
                       v1::CreateSpaceRequest req;
                       req.set_label("\xff\xfe bad");
                       v1::CreateSpaceResponse resp;
                       return stub->CreateSpace(Ctx().get(), req, &resp);
                     }, StatusCode::INVALID_ARGUMENT, "could not be parsed"});
  // Batch streams: a message that does not parse ends the stream INVALID_ARGUMENT (the
  // answers before it stand); an op of a kind the daemon does not know is an empty op.
  v1::BatchRequest good;
  good.set_tag(7);
  v1::FaultRequest* gf = good.add_ops()->mutable_fault();
  gf->set_space_id(space);
  gf->set_addr(page);
  const std::string good_bytes = good.SerializeAsString();
  cases.push_back({"Batch stream whose first message is not a protobuf message", [&] {
                     std::vector<v1::BatchResponse> answers;
                     grpc::Status s = RawBatch(d.grpc_addr(), {"\xff\xff\xff\xff", good_bytes}, &answers);
                     EXPECT_EQ(answers.size(), 0u);
                     return s;
                   }, StatusCode::INVALID_ARGUMENT, "the request message of /vmspace.v1.VmSpace/Batch could not be parsed"});
  cases.push_back({"Batch stream: a message answered, then a truncated one", [&] {
                     std::vector<v1::BatchResponse> answers;
                     grpc::Status s =
                         RawBatch(d.grpc_addr(), {good_bytes, std::string("\x0a\x05\x78", 3), good_bytes}, &answers);
                     EXPECT_EQ(answers.size(), 1u);
                     if (!answers.empty()) {
                       EXPECT_EQ(answers[0].tag(), 7u);
                       EXPECT_EQ(answers[0].results_size(), 1);
                     }
                     return s;
                   }, StatusCode::INVALID_ARGUMENT, "could not be parsed"});
  cases.push_back({"Batch stream: an op of an unknown kind (Op field 15), then a valid message", [&] {
                     std::vector<v1::BatchResponse> answers;
                     // ops { 15: 1 } tag: 9
                     grpc::Status s =
                         RawBatch(d.grpc_addr(), {std::string("\x0a\x02\x78\x01\x10\x09", 6), good_bytes}, &answers);
                     EXPECT_EQ(answers.size(), 2u);
                     if (answers.size() == 2) {
                       EXPECT_EQ(answers[0].tag(), 9u);
                       EXPECT_EQ(answers[0].results_size(), 1);
                       if (answers[0].results_size() == 1) {
                         EXPECT_EQ(answers[0].results(0).code(), static_cast<int>(StatusCode::INVALID_ARGUMENT));
                         EXPECT_EQ(answers[0].results(0).errno_name(), "EINVAL");
                         EXPECT_NE(answers[0].results(0).message().find("op 0 is empty"), std::string::npos)
                             << answers[0].results(0).message();
                       }
                       EXPECT_EQ(answers[1].tag(), 7u);
                     }
                     return s;
                   }, StatusCode::OK, ""});
  cases.push_back({"ReadMemory beyond --max-io-bytes", [&] {
                     v1::ReadMemoryRequest req;
                     req.set_space_id(space);
                     req.set_addr(page);
                     req.set_len(8192);
                     v1::ReadMemoryResponse resp;
                     return stub->ReadMemory(Ctx().get(), req, &resp);
                   }, StatusCode::INVALID_ARGUMENT, "--max-io-bytes"});
  cases.push_back({"1 MiB frame limit, 512 GiB MAP_NORESERVE read every 2 MiB (page tables)", [&] {
                     const uint64_t a = Map(*stub, space, 512ull << 30, PROT_READ, kAnon | MAP_NORESERVE);
                     v1::AccessResponse r;
                     grpc::Status s = Access(*stub, space, a, 512ull << 30, 2ull << 20, v1::ACCESS_READ, &r);
                     v1::MunmapRequest un;
                     un.set_space_id(space);
                     un.set_addr(a);
                     un.set_len(512ull << 30);
                     v1::MunmapResponse ur;
                     EXPECT_TRUE(stub->Munmap(Ctx().get(), un, &ur).ok());
                     return s;
                   }, StatusCode::RESOURCE_EXHAUSTED, "frame memory limit"});
  cases.push_back({"GetMaps of 800 VMAs (> --max-message-bytes / 96)", [&] {
                     const uint64_t sp = NewSpace(*stub);
                     v1::BatchRequest req;
                     for (int i = 0; i < 800; i++) {
                       v1::MmapRequest* m = req.add_ops()->mutable_mmap();
                       m->set_space_id(sp);
                       m->set_len(4096);
                       m->set_prot(i % 2 ? PROT_READ : kRw);  // alternating: no merges
                       m->set_flags(kAnon);
                     }
                     v1::BatchResponse resp;
                     EXPECT_TRUE(BatchOnce(*stub, req, &resp).ok());
                     v1::GetMapsRequest g;
                     g.set_space_id(sp);
                     v1::GetMapsResponse gr;
                     return stub->GetMaps(Ctx().get(), g, &gr);
                   }, StatusCode::RESOURCE_EXHAUSTED, "would exceed --max-message-bytes"});
  cases.push_back({"a third Batch stream beyond --max-streams=2", [&] {
                     OpenStreams open;
                     grpc::Status third;
                     for (int i = 0; i < 2; i++) EXPECT_TRUE(open.Open(*stub, &third));
                     EXPECT_FALSE(open.Open(*stub, &third));
                     open.CloseAll();
                     return third;
                   }, StatusCode::RESOURCE_EXHAUSTED, "--max-streams=2"});

  cases.push_back({"GetMaps of a range holding 800 VMAs (refused before it is built)", [&] {
                     const uint64_t sp = NewSpace(*stub);
                     EXPECT_EQ(MapAlternating(*stub, sp, 800), 0);
                     v1::GetMapsRequest g;
                     g.set_space_id(sp);
                     g.set_start(4096);  // a range, not the whole space
                     g.set_end(1ull << 47);
                     v1::GetMapsResponse gr;
                     return stub->GetMaps(Ctx().get(), g, &gr);
                   }, StatusCode::RESOURCE_EXHAUSTED, "more than 682 VMAs would exceed --max-message-bytes"});
  const size_t documented = RunCatalogue(*stub, cases);
  // The invalid-UTF-8 requests logged at most a line a second, not one each.
  const std::string err = d.stderr_text();
  size_t lines = 0;
  for (size_t p = 0; (p = err.find("invalid UTF-8", p)) != std::string::npos; p++) lines++;
  EXPECT_GE(lines, 1u) << err;
  EXPECT_LE(lines, 3u) << err;
  EXPECT_EQ(d.Stop(), 0);
  printf("catalogue: %zu of %zu requests answered with their documented status and message\n", documented,
         cases.size());
}

// Memory of every kind a client can make the daemon allocate (frames, page cache, page
// tables, VMAs and index nodes, call and stream buffers) stays within
// --max-memory-bytes (here with no frame sub-limit): each kind pushed past it gets
// ENOMEM / RESOURCE_EXHAUSTED, the daemon answers a Ping after each, and once the
// spaces are destroyed every kind of vmspace_memory_bytes is back to 0.
TEST(RobustTest, MemoryBudgetCatalogue) {
  constexpr uint64_t kBudget = 4 << 20;
  Daemon d;
  ASSERT_TRUE(d.Start({"--max-memory-bytes=" + std::to_string(kBudget), "--max-frame-bytes=0",
                       "--max-io-bytes=2097152", "--metrics-listen=127.0.0.1:0"}))
      << d.stderr_text();
  auto stub = d.NewStub();
  auto kind = [&](const std::string& k) {
    return Get(ParseMetrics(HttpGet(d.metrics_port(), "/metrics")), SeriesKey("vmspace_memory_bytes", {{"kind", k}}));
  };
  auto total = [&] {
    const Samples m = ParseMetrics(HttpGet(d.metrics_port(), "/metrics"));
    double t = 0;
    for (const char* k : {"frames", "page_tables", "vmas", "index_nodes", "page_cache", "buffers"})
      t += Get(m, SeriesKey("vmspace_memory_bytes", {{"kind", k}}));
    return t;
  };
  EXPECT_EQ(Get(ParseMetrics(HttpGet(d.metrics_port(), "/metrics")), "vmspace_memory_limit_bytes"), kBudget);
  auto unmap_all = [&](uint64_t sp) {
    v1::MunmapRequest un;
    un.set_space_id(sp);
    un.set_addr(0);
    un.set_len((1ull << 47) - 4096);  // TASK_SIZE
    v1::MunmapResponse ur;
    EXPECT_TRUE(stub->Munmap(Ctx().get(), un, &ur).ok());
  };
  const uint64_t space = NewSpace(*stub);
  std::vector<Case> cases;
  cases.push_back({"frames: write 16 MiB with a 4 MiB budget", [&] {
                     const uint64_t a = Map(*stub, space, 16 << 20, kRw);
                     v1::AccessResponse r;
                     grpc::Status s = Access(*stub, space, a, 16 << 20, 4096, v1::ACCESS_WRITE, &r);
                     EXPECT_GT(kind("frames"), 3 << 20);  // most of the budget was usable
                     EXPECT_LE(total(), kBudget);
                     unmap_all(space);
                     return s;
                   }, StatusCode::RESOURCE_EXHAUSTED, "memory budget"});
  cases.push_back({"page cache: write 16 MiB of a shared anonymous mapping (shmem pages)", [&] {
                     const uint64_t a = Map(*stub, space, 16 << 20, kRw, MAP_SHARED | MAP_ANONYMOUS);
                     v1::AccessResponse r;
                     grpc::Status s = Access(*stub, space, a, 16 << 20, 4096, v1::ACCESS_WRITE, &r);
                     EXPECT_GT(kind("page_cache"), 3 << 20);
                     EXPECT_EQ(kind("frames"), 0);  // shmem pages are page cache, not frames
                     EXPECT_LE(total(), kBudget);
                     unmap_all(space);
                     return s;
                   }, StatusCode::RESOURCE_EXHAUSTED, "memory budget"});
  cases.push_back({"page tables: 512 GiB MAP_NORESERVE read every 2 MiB", [&] {
                     const uint64_t a = Map(*stub, space, 512ull << 30, PROT_READ, kAnon | MAP_NORESERVE);
                     v1::AccessResponse r;
                     grpc::Status s = Access(*stub, space, a, 512ull << 30, 2ull << 20, v1::ACCESS_READ, &r);
                     EXPECT_GT(kind("page_tables"), 3 << 20);
                     EXPECT_LE(total(), kBudget);
                     unmap_all(space);
                     return s;
                   }, StatusCode::RESOURCE_EXHAUSTED, "memory budget"});
  cases.push_back({"VMAs and index nodes: one-page mmaps of alternating protection", [&] {
                     EXPECT_EQ(MapAlternating(*stub, space, 60000), ENOMEM);
                     EXPECT_GT(kind("vmas"), 1 << 20);
                     EXPECT_GT(kind("index_nodes"), 0);
                     EXPECT_LE(total(), kBudget + 8192);  // one change may pass it (kVmaChangeBytes)
                     // The unary call's answer (a few more may fit once reclaim waited
                     // for the retired index nodes).
                     grpc::Status s;
                     for (int i = 0; i < 1000 && s.ok(); i++) {
                       v1::MmapRequest req;
                       req.set_space_id(space);
                       req.set_len(4096);
                       req.set_prot(i % 2 ? PROT_READ : kRw);
                       req.set_flags(kAnon);
                       v1::MmapResponse resp;
                       s = stub->Mmap(Ctx().get(), req, &resp);
                     }
                     EXPECT_LE(total(), kBudget + 8192);
                     return s;
                   }, StatusCode::RESOURCE_EXHAUSTED, "ENOMEM: mmap"});
  cases.push_back({"buffers: ReadMemory of 2 MiB with the budget full of VMAs", [&] {
                     v1::ReadMemoryRequest req;
                     req.set_space_id(space);
                     req.set_addr(0);
                     req.set_len(2 << 20);
                     v1::ReadMemoryResponse resp;
                     return stub->ReadMemory(Ctx().get(), req, &resp);
                   }, StatusCode::RESOURCE_EXHAUSTED, "exceed the memory budget"});
  cases.push_back({"buffers: ReadFile of 2 MiB of a shmem file", [&] {
                     v1::CreateShmemFileRequest cr;
                     cr.set_name("budget");
                     cr.set_size(4 << 20);
                     v1::CreateShmemFileResponse cf;
                     EXPECT_TRUE(stub->CreateShmemFile(Ctx().get(), cr, &cf).ok());
                     v1::ReadFileRequest req;
                     req.set_file_id(cf.file_id());
                     req.set_len(2 << 20);
                     v1::ReadFileResponse resp;
                     grpc::Status s = stub->ReadFile(Ctx().get(), req, &resp);
                     v1::CloseFileRequest cl;
                     cl.set_file_id(cf.file_id());
                     v1::CloseFileResponse clr;
                     EXPECT_TRUE(stub->CloseFile(Ctx().get(), cl, &clr).ok());
                     return s;
                   }, StatusCode::RESOURCE_EXHAUSTED, "ReadFile: buffers of"});
  cases.push_back({"buffers: WriteMemory of 2 MiB", [&] {
                     v1::WriteMemoryRequest req;
                     req.set_space_id(space);
                     req.set_addr(0);
                     req.set_data(std::string(2 << 20, 'x'));
                     v1::WriteMemoryResponse resp;
                     return stub->WriteMemory(Ctx().get(), req, &resp);
                   }, StatusCode::RESOURCE_EXHAUSTED, "exceed the memory budget"});
  cases.push_back({"stream buffers: a Batch message of 2 MiB", [&] {
                     v1::BatchRequest req;
                     v1::WriteMemoryRequest* w = req.add_ops()->mutable_write();
                     w->set_space_id(space);
                     w->set_data(std::string(2 << 20, 'x'));
                     v1::BatchResponse resp;
                     return BatchOnce(*stub, req, &resp);
                   }, StatusCode::RESOURCE_EXHAUSTED, "Batch: buffers of"});
  cases.push_back({"buffers: GetMaps of every VMA (the list does not fit the budget)", [&] {
                     v1::GetMapsRequest g;
                     g.set_space_id(space);
                     v1::GetMapsResponse gr;
                     return stub->GetMaps(Ctx().get(), g, &gr);
                   }, StatusCode::RESOURCE_EXHAUSTED, "GetMaps: buffers of"});
  cases.push_back({"after munmap of every VMA the budget holds VMAs again", [&] {
                     unmap_all(space);
                     EXPECT_EQ(MapAlternating(*stub, space, 10000), 0);
                     unmap_all(space);
                     v1::PingRequest req;
                     v1::PingResponse resp;
                     return stub->Ping(Ctx().get(), req, &resp);
                   }, StatusCode::OK, ""});
  RunCatalogue(*stub, cases);
  v1::DestroySpaceRequest del;
  del.set_space_id(space);
  v1::DestroySpaceResponse dr;
  ASSERT_TRUE(stub->DestroySpace(Ctx().get(), del, &dr).ok());
  // Frees batched or waiting for a grace period are flushed every --deferred-flush-ms:
  // wait (bounded) for every kind to read 0.
  double left = -1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline && (left = total()) != 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(left, 0);
  for (const char* k : {"frames", "page_tables", "vmas", "index_nodes", "page_cache", "buffers"})
    EXPECT_EQ(kind(k), 0) << k;
  EXPECT_EQ(d.Stop(), 0);
}

TEST(RobustTest, CallsBeyondMaxThreadsAreResourceExhausted) {
  // Each open Batch stream holds a handler thread; with --max-threads=8 the daemon
  // refuses the streams it has no thread for instead of growing (1000 streams made
  // 1016 threads), and answers again once they are closed.
  Daemon d;
  ASSERT_TRUE(d.Start({"--max-threads=8"})) << d.stderr_text();
  auto stub = d.NewStub();
  OpenStreams open;
  int refused = 0;
  for (int i = 0; i < 16; i++) {
    grpc::Status st;
    if (open.Open(*stub, &st)) continue;
    EXPECT_EQ(st.error_code(), StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
    refused++;
  }
  EXPECT_GE(open.size(), 1u);
  EXPECT_GE(refused, 1) << "16 streams held at once with --max-threads=8";
  open.CloseAll();
  EXPECT_TRUE(Pings(*stub));
  EXPECT_EQ(d.Stop(), 0);
}

TEST(RobustTest, CallsBeyondMaxCallsPerPeerAreResourceExhausted) {
  // Two streams from this host hold the --max-calls-per-peer=2 places (on two
  // connections: the count is per host): a space call or a third stream is refused,
  // Ping is not counted, and the calls are admitted again once the streams close.
  Daemon d;
  ASSERT_TRUE(d.Start({"--max-calls-per-peer=2"})) << d.stderr_text();
  auto stub = d.NewStub();
  auto other = d.NewStub();
  const uint64_t space = NewSpace(*stub);
  const uint64_t page = Map(*stub, space, 4096, kRw);
  OpenStreams open;
  grpc::Status st;
  ASSERT_TRUE(open.Open(*stub, &st)) << st.error_message();
  ASSERT_TRUE(open.Open(*other, &st)) << st.error_message();
  EXPECT_FALSE(open.Open(*other, &st));
  EXPECT_EQ(st.error_code(), StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_NE(st.error_message().find("--max-calls-per-peer=2"), std::string::npos) << st.error_message();
  v1::AccessResponse r;
  st = Access(*other, space, page, 1, 1, v1::ACCESS_READ, &r);
  EXPECT_TRUE(HasErrno(st, StatusCode::RESOURCE_EXHAUSTED, "EAGAIN", EAGAIN));
  EXPECT_TRUE(Pings(*other));
  open.CloseAll();
  EXPECT_TRUE(Access(*other, space, page, 1, 1, v1::ACCESS_READ, &r).ok());
  EXPECT_EQ(d.Stop(), 0);
}

TEST(RobustTest, LongWalkEndsAtItsDeadlineAndSigtermStopsTheDaemon) {
  Daemon d;
  ASSERT_TRUE(d.Start({"--shutdown-grace-ms=1000"})) << d.stderr_text();
  auto stub = d.NewStub();
  const uint64_t space = NewSpace(*stub);
  // 1 TiB read-only: each read maps the zero page, so the walk is long (2^28 pages)
  // but needs no frames for its pages.
  const uint64_t len = 1ull << 40;
  const uint64_t a = Map(*stub, space, len, PROT_READ, kAnon | MAP_NORESERVE);
  v1::AccessResponse r;
  auto t0 = std::chrono::steady_clock::now();
  grpc::Status s = Access(*stub, space, a, len, 4096, v1::ACCESS_READ, &r, 1000);
  EXPECT_EQ(s.error_code(), StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  // A hang is the failure tested: the bound is generous.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(6));
  // The same as a Batch op: the stream ends DEADLINE_EXCEEDED.
  v1::BatchRequest req;
  v1::AccessRequest* op = req.add_ops()->mutable_access();
  op->set_space_id(space);
  op->set_addr(a);
  op->set_len(len);
  op->set_stride(4096);
  op->set_access(v1::ACCESS_READ);
  v1::BatchResponse resp;
  t0 = std::chrono::steady_clock::now();
  s = BatchOnce(*stub, req, &resp, 1000);
  EXPECT_EQ(s.error_code(), StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(6));
  ASSERT_TRUE(Pings(*stub));

  // SIGTERM while a walk with a long deadline runs: the daemon cancels it at the end of
  // the grace period and exits 0.
  std::thread walker([&] {
    v1::AccessResponse wr;
    const grpc::Status ws = Access(*stub, space, a, len, 4096, v1::ACCESS_READ, &wr, 120000);
    EXPECT_FALSE(ws.ok());
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(d.Stop(SIGTERM, 1000 + 5000), 0) << "still running 5 s after the grace period";
  const auto stop_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  walker.join();
  printf("SIGTERM with a walk in flight: exited after %lld ms (grace 1000 ms)\n",
         static_cast<long long>(stop_ms));
}

TEST(RobustTest, FreedFramesAreReusableAtOnce) {
  Daemon d;
  ASSERT_TRUE(d.Start({"--max-frame-bytes=67108864"})) << d.stderr_text();
  auto stub = d.NewStub();
  const uint64_t space = NewSpace(*stub);
  const uint64_t len = 48ull << 20;
  const uint64_t a = Map(*stub, space, len, kRw);
  for (int round = 0; round < 8; round++) {
    v1::AccessResponse r;
    const grpc::Status s = Access(*stub, space, a, len, 4096, v1::ACCESS_WRITE, &r);
    ASSERT_TRUE(s.ok()) << "round " << round << ": " << s.error_message();
    EXPECT_EQ(r.accesses(), len / 4096);
    v1::MadviseRequest m;
    m.set_space_id(space);
    m.set_addr(a);
    m.set_len(len);
    m.set_advice(MADV_DONTNEED);
    v1::MadviseResponse mr;
    ASSERT_TRUE(stub->Madvise(Ctx().get(), m, &mr).ok());
  }
  EXPECT_EQ(d.Stop(), 0);
}

TEST(RobustTest, IdleSpacesDoNotKeepFreedFramesCharged) {
  Daemon d;
  ASSERT_TRUE(d.Start({"--metrics-listen=127.0.0.1:0"})) << d.stderr_text();
  auto stub = d.NewStub();
  for (int i = 0; i < 8; i++) {
    const uint64_t space = NewSpace(*stub);
    // 63 frames: below one deferred batch (MmStruct::kDeferFrames, 64). With no other
    // thread in the space the frames are freed by the munmap itself; its page tables
    // (and any frame a concurrent access kept back) wait in the space's gather.
    const uint64_t len = 252 << 10;
    const uint64_t a = Map(*stub, space, len, kRw);
    v1::AccessResponse r;
    ASSERT_TRUE(Access(*stub, space, a, len, 4096, v1::ACCESS_WRITE, &r).ok());
    v1::MunmapRequest un;
    un.set_space_id(space);
    un.set_addr(a);
    un.set_len(len);
    v1::MunmapResponse ur;
    ASSERT_TRUE(stub->Munmap(Ctx().get(), un, &ur).ok());
  }
  // The daemon flushes batched frees every --deferred-flush-ms (200): wait (bounded)
  // for the gauge to drop to 0.
  double bytes = -1, tables = -1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    const Samples m = ParseMetrics(HttpGet(d.metrics_port(), "/metrics"));
    bytes = Get(m, "vmspace_frame_bytes");
    tables = Get(m, SeriesKey("vmspace_memory_bytes", {{"kind", "page_tables"}}));
    if (bytes == 0 && tables == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(bytes, 0) << "8 idle spaces keep their last freed frames charged";
  EXPECT_EQ(tables, 0) << "8 idle spaces keep their last freed page tables charged";
  EXPECT_EQ(d.Stop(), 0);
}

}  // namespace
}  // namespace vmspace::service_test
