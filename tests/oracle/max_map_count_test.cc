// SPDX-License-Identifier: Apache-2.0
// vm.max_map_count boundary behaviour (reference section 1.4): the kernel child is
// filled up to exactly vm.max_map_count (65530 by default) VMAs, the engine gets the same
// mappings, and each row of the table is replayed and compared (return value,
// map_count, and the maps of the few VMAs the rows act on).
#include "oracle_session.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace vmspace::oracle {
namespace {

TEST(OracleMaxMapCount, Table14) {
  // 1 GiB region: special VMAs in the first MiB, filler pages above.
  OracleSession s(0x40000000);
  ASSERT_EQ(s.setup_error(), "");
  int failures = 0;
  std::string transcript;
  auto run = [&](const std::string& op) {
    StepResult r = s.Run(op);
    transcript += (r.match ? "   " : "!! ") + op + "\n      kernel: " + r.kernel +
                  (r.match ? "" : "\n      engine: " + r.engine) + "\n";
    if (!r.match) {
      failures++;
      ADD_FAILURE() << op << "\n--- kernel:\n" << r.kernel << "\n--- engine:\n" << r.engine;
    }
    return r;
  };
  auto step = [&](const std::string& what, const std::string& op) {
    transcript += "# " + what + "\n";
    run(op);
    run("count");
  };
  const uint64_t kMax = s.max_map_count();  // vm.max_map_count (the engine uses it too)
  // Special VMAs (read-only private anonymous: not accounted, never faulted).
  run("mmap base+0x0 0x3000 r private,anonymous,fixed");      // A: MAP_FIXED middle
  run("mmap base+0x10000 0x3000 r private,anonymous,fixed");  // B: mprotect head
  run("mmap base+0x20000 0x3000 r private,anonymous,fixed");  // C: munmap middle/head/tail
  run("mmap base+0x30000 0x1000 r private,anonymous,fixed");  // D: mergeable pair with hole
  run("mmap base+0x32000 0x1000 r private,anonymous,fixed");
  run("mmap base+0x40000 0x3000 r private,anonymous,fixed");  // E: mprotect middle at max-1
  run("mmap base+0x50000 0x3000 r private,anonymous,fixed");  // F: mprotect middle at max
  run("mmap base+0x70000 0x4000 r private,anonymous,fixed");  // H: head/tail at max+1
  StepResult c = run("count");
  ASSERT_TRUE(c.match) << "map counts differ before filling";
  ASSERT_LT(c.kernel_value, kMax);
  uint64_t need = kMax - c.kernel_value;
  // Filler: one-page VMAs separated by one-page holes.
  StepResult f = run("mmapn base+0x100000 " + std::to_string(need) +
                     " 0x2000 0x1000 r private,anonymous,fixed");
  ASSERT_TRUE(f.kernel_ok) << f.kernel;
  c = run("count");
  ASSERT_EQ(c.kernel_value, kMax) << "kernel child is not at max_map_count";

  step("==max: MAP_FIXED over the middle page of a 3-page VMA -> ENOMEM",
       "mmap base+0x1000 0x1000 rw private,anonymous,fixed");
  step("==max: mprotect the head page of a 3-page VMA -> ENOMEM",
       "mprotect base+0x10000 0x1000 none");
  step("==max: munmap the middle page of a 3-page VMA -> ENOMEM", "munmap base+0x21000 0x1000");
  step("==max: munmap the head page -> OK", "munmap base+0x20000 0x1000");
  step("==max: munmap the tail page -> OK", "munmap base+0x22000 0x1000");
  step("==max: mmap a new isolated page -> OK (max+1)",
       "mmap base+0x60000 0x1000 r private,anonymous,fixed");
  step("max+1: mmap another isolated page -> ENOMEM",
       "mmap base+0x62000 0x1000 r private,anonymous,fixed");
  step("max+1: non-fixed mmap -> ENOMEM", "mmap NULL 0x1000 r private,anonymous");
  step("max+1: mmap filling the hole between two mergeable VMAs -> ENOMEM",
       "mmap base+0x31000 0x1000 r private,anonymous,fixed");
  step("max+1: munmap the head page -> OK", "munmap base+0x70000 0x1000");
  step("max+1: munmap the tail page -> OK", "munmap base+0x73000 0x1000");
  step("max+1: munmap a whole VMA -> OK (max)", "munmap base+0x60000 0x1000");
  step("==max: mmap filling the hole between two mergeable VMAs -> OK (max-1)",
       "mmap base+0x31000 0x1000 r private,anonymous,fixed");
  step("max-1: mprotect the middle page (needs +2) -> ENOMEM after the first split",
       "mprotect base+0x41000 0x1000 none");
  step("==max: mprotect the middle page of another VMA -> ENOMEM",
       "mprotect base+0x51000 0x1000 none");
  transcript += "# the special VMAs\n";
  run("maps base+0x0 base+0x100000");
  std::string v = s.Validate();
  EXPECT_EQ(v, "") << "engine Validate()";
  const char* verbose = getenv("VMSPACE_ORACLE_VERBOSE");
  if (failures || (verbose && *verbose == '1')) std::cerr << "transcript (!! = disagreement):\n" << transcript;
}

}  // namespace
}  // namespace vmspace::oracle
