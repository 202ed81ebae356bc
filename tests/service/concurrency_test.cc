// SPDX-License-Identifier: Apache-2.0
// Many concurrent clients, each on its own connection: 16 on 16 separate spaces and 16
// on one shared space. Checks that data written is read back, that the VMA list stays
// consistent (sorted, no overlaps, map_count = number of VMAs, mapped bytes = the live
// regions) and that no two live mappings handed to different clients overlap.
#include "daemon.h"  // first (see there)

#include <sys/mman.h>

#include <atomic>
#include <mutex>
#include <random>
#include <set>


namespace vmspace::service_test {
namespace {

constexpr uint64_t kPage = 4096;
constexpr int kClients = 16;

struct Region {
  uint64_t addr = 0;
  uint64_t len = 0;
  uint32_t seed = 0;
};

std::string Pattern(uint32_t seed, uint64_t len) {
  std::string s(len, '\0');
  std::mt19937 rng(seed);
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// One client's work on space `id`: map, fill, verify, sometimes unmap. Returns its live
// regions; failures are reported with ADD_FAILURE (thread-safe).
std::vector<Region> ClientWork(v1::VmSpace::Stub& stub, uint64_t id, int client, int iters) {
  std::mt19937 rng(1000 + client);
  std::vector<Region> live;
  for (int it = 0; it < iters; it++) {
    Region r;
    r.len = (1 + rng() % 8) * kPage;
    r.seed = static_cast<uint32_t>(client * 100000 + it);
    v1::MmapRequest mreq;
    mreq.set_space_id(id);
    mreq.set_len(r.len);
    mreq.set_prot(PROT_READ | PROT_WRITE);
    mreq.set_flags(MAP_PRIVATE | MAP_ANONYMOUS);
    v1::MmapResponse mresp;
    grpc::Status s = stub.Mmap(Ctx().get(), mreq, &mresp);
    if (!s.ok()) {
      ADD_FAILURE() << "client " << client << " mmap: " << s.error_message();
      return live;
    }
    r.addr = mresp.addr();
    for (const Region& o : live) {
      if (r.addr < o.addr + o.len && o.addr < r.addr + r.len)
        ADD_FAILURE() << "client " << client << ": mmap returned a range it already holds";
    }

    const std::string data = Pattern(r.seed, r.len);
    v1::WriteMemoryRequest wreq;
    wreq.set_space_id(id);
    wreq.set_addr(r.addr);
    wreq.set_data(data);
    v1::WriteMemoryResponse wresp;
    s = stub.WriteMemory(Ctx().get(), wreq, &wresp);
    if (!s.ok() || wresp.bytes_written() != r.len) {
      ADD_FAILURE() << "client " << client << " write: " << s.error_message() << " wrote "
                    << wresp.bytes_written();
      return live;
    }
    v1::ReadMemoryRequest rreq;
    rreq.set_space_id(id);
    rreq.set_addr(r.addr);
    rreq.set_len(r.len);
    v1::ReadMemoryResponse rresp;
    s = stub.ReadMemory(Ctx().get(), rreq, &rresp);
    if (!s.ok() || rresp.data() != data) {
      ADD_FAILURE() << "client " << client << " read back differs: " << s.error_message();
      return live;
    }
    v1::FaultRequest freq;
    freq.set_space_id(id);
    freq.set_addr(r.addr + rng() % r.len);
    v1::FaultResponse fresp;
    s = stub.Fault(Ctx().get(), freq, &fresp);
    if (!s.ok() || fresp.fault().outcome() != v1::FAULT_OUTCOME_NONE)
      ADD_FAILURE() << "client " << client << " fault on a present page: outcome "
                    << fresp.fault().outcome();
    live.push_back(r);

    if (rng() % 3 == 0) {  // unmap one of ours
      const size_t k = rng() % live.size();
      v1::MunmapRequest ureq;
      ureq.set_space_id(id);
      ureq.set_addr(live[k].addr);
      ureq.set_len(live[k].len);
      v1::MunmapResponse uresp;
      s = stub.Munmap(Ctx().get(), ureq, &uresp);
      if (!s.ok()) ADD_FAILURE() << "client " << client << " munmap: " << s.error_message();
      live.erase(live.begin() + static_cast<long>(k));
    }
  }
  return live;
}

// Checks the space against the regions that should be live in it.
void CheckSpace(v1::VmSpace::Stub& stub, uint64_t id, std::vector<Region> regions) {
  std::sort(regions.begin(), regions.end(),
            [](const Region& a, const Region& b) { return a.addr < b.addr; });
  uint64_t want_bytes = 0;
  for (size_t i = 0; i < regions.size(); i++) {
    want_bytes += regions[i].len;
    if (i > 0) {
      EXPECT_LE(regions[i - 1].addr + regions[i - 1].len, regions[i].addr)
          << "two live mappings overlap";
    }
  }
  v1::GetMapsRequest req;
  req.set_space_id(id);
  v1::GetMapsResponse maps;
  ASSERT_TRUE(stub.GetMaps(Ctx().get(), req, &maps).ok());
  EXPECT_EQ(maps.map_count(), static_cast<uint64_t>(maps.vmas_size()));
  uint64_t vma_bytes = 0;
  for (int i = 0; i < maps.vmas_size(); i++) {
    const v1::Vma& v = maps.vmas(i);
    EXPECT_LT(v.start(), v.end());
    EXPECT_EQ(v.start() % kPage, 0u);
    EXPECT_EQ(v.end() % kPage, 0u);
    if (i > 0) {
      EXPECT_LE(maps.vmas(i - 1).end(), v.start()) << "VMAs overlap or are unsorted";
    }
    vma_bytes += v.end() - v.start();
  }
  EXPECT_EQ(vma_bytes, want_bytes);
  EXPECT_EQ(std::count(maps.maps_text().begin(), maps.maps_text().end(), '\n'),
            maps.vmas_size());

  v1::ListSpacesResponse list;
  ASSERT_TRUE(stub.ListSpaces(Ctx().get(), {}, &list).ok());
  bool found = false;
  for (const auto& sp : list.spaces()) {
    if (sp.space_id() != id) continue;
    found = true;
    EXPECT_EQ(sp.map_count(), maps.map_count());
    EXPECT_EQ(sp.total_vm_bytes(), want_bytes);
    EXPECT_EQ(sp.rss_bytes(), want_bytes) << "every live page was written";
  }
  EXPECT_TRUE(found);

  for (const Region& r : regions) {
    v1::ReadMemoryRequest rreq;
    rreq.set_space_id(id);
    rreq.set_addr(r.addr);
    rreq.set_len(r.len);
    v1::ReadMemoryResponse rresp;
    ASSERT_TRUE(stub.ReadMemory(Ctx().get(), rreq, &rresp).ok());
    EXPECT_TRUE(rresp.data() == Pattern(r.seed, r.len))
        << "data of region 0x" << std::hex << r.addr << " changed";
  }
}

class ConcurrencyTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(d_.Start({})) << d_.stderr_text(); }
  void TearDown() override { EXPECT_EQ(d_.Stop(), 0); }
  Daemon d_;
};

TEST_F(ConcurrencyTest, SixteenClientsOnSeparateSpaces) {
  std::vector<std::thread> threads;
  std::vector<uint64_t> ids(kClients);
  std::vector<std::vector<Region>> live(kClients);
  for (int c = 0; c < kClients; c++) {
    threads.emplace_back([&, c] {
      auto stub = d_.NewStub();
      v1::CreateSpaceRequest creq;
      creq.set_label("client-" + std::to_string(c));
      v1::CreateSpaceResponse cresp;
      grpc::Status s = stub->CreateSpace(Ctx().get(), creq, &cresp);
      if (!s.ok()) {
        ADD_FAILURE() << s.error_message();
        return;
      }
      ids[c] = cresp.space_id();
      live[c] = ClientWork(*stub, ids[c], c, 40);
    });
  }
  for (auto& t : threads) t.join();
  auto stub = d_.NewStub();
  std::set<uint64_t> distinct(ids.begin(), ids.end());
  EXPECT_EQ(distinct.size(), static_cast<size_t>(kClients));
  for (int c = 0; c < kClients; c++) {
    SCOPED_TRACE("client " + std::to_string(c));
    CheckSpace(*stub, ids[c], live[c]);
  }
}

TEST_F(ConcurrencyTest, SixteenClientsOnOneSharedSpace) {
  auto stub = d_.NewStub();
  v1::CreateSpaceResponse cresp;
  ASSERT_TRUE(stub->CreateSpace(Ctx().get(), {}, &cresp).ok());
  const uint64_t id = cresp.space_id();
  std::vector<std::thread> threads;
  std::vector<std::vector<Region>> live(kClients);
  for (int c = 0; c < kClients; c++) {
    threads.emplace_back([&, c] {
      auto my = d_.NewStub();
      live[c] = ClientWork(*my, id, c, 40);
    });
  }
  for (auto& t : threads) t.join();
  std::vector<Region> all;
  for (const auto& l : live) all.insert(all.end(), l.begin(), l.end());
  CheckSpace(*stub, id, all);
}

}  // namespace
}  // namespace vmspace::service_test
