// SPDX-License-Identifier: Apache-2.0
// Unit tests of the client library: value parsing, errno decoding, the seed-004
// generator, and the in-process stress runners.
// The generated vmspace.pb.h comes before gtest.h: gtest pulls in <signal.h>, whose
// `si_addr` macro breaks the FaultInfo::si_addr() accessor.
#include "lib/client.h"
#include "lib/parse.h"
#include "lib/seed004.h"

#include <grpcpp/support/error_details.h>

#include "google/rpc/status.pb.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdlib>

namespace vmspace::client {
namespace {

TEST(ParseU64, DecimalHexAndSuffixes) {
  EXPECT_EQ(ParseU64("0"), 0u);
  EXPECT_EQ(ParseU64("4096"), 4096u);
  EXPECT_EQ(ParseU64("0x1000"), 4096u);
  EXPECT_EQ(ParseU64("0X7fff_f7ff_f000"), 0x7ffff7fff000u);
  EXPECT_EQ(ParseU64("4K"), 4096u);
  EXPECT_EQ(ParseU64("2M"), 2u << 20);
  EXPECT_EQ(ParseU64("0b101"), 5u);
  EXPECT_EQ(ParseU64("18446744073709551615"), UINT64_MAX);
  EXPECT_EQ(ParseU64("0xffffffffffffffff"), UINT64_MAX);
  EXPECT_FALSE(ParseU64("18446744073709551616"));
  EXPECT_FALSE(ParseU64("0x10000000000000000"));
  EXPECT_FALSE(ParseU64(""));
  EXPECT_FALSE(ParseU64("-1"));
  EXPECT_FALSE(ParseU64("0x"));
  EXPECT_FALSE(ParseU64("12abc"));
  EXPECT_FALSE(ParseU64("0x1g"));
  EXPECT_FALSE(ParseU64("16777216T"));  // overflows after the shift
}

TEST(ParseProt, LettersNamesAndNumbers) {
  EXPECT_EQ(ParseProt("rw"), PROT_READ | PROT_WRITE);
  EXPECT_EQ(ParseProt("r-x"), PROT_READ | PROT_EXEC);
  EXPECT_EQ(ParseProt("rwx"), PROT_READ | PROT_WRITE | PROT_EXEC);
  EXPECT_EQ(ParseProt("rw-p"), PROT_READ | PROT_WRITE);
  EXPECT_EQ(ParseProt("---"), PROT_NONE);
  EXPECT_EQ(ParseProt("none"), PROT_NONE);
  EXPECT_EQ(ParseProt("NONE"), PROT_NONE);
  EXPECT_EQ(ParseProt("r"), PROT_READ);
  EXPECT_EQ(ParseProt("read,write"), PROT_READ | PROT_WRITE);
  EXPECT_EQ(ParseProt("PROT_READ|PROT_EXEC"), PROT_READ | PROT_EXEC);
  EXPECT_EQ(ParseProt("3"), 3);
  EXPECT_EQ(ParseProt("0x7"), 7);
  EXPECT_EQ(ParseProt("0x1000000"), 0x1000000);  // unknown bits pass through (EINVAL is the server's)
  EXPECT_FALSE(ParseProt(""));
  EXPECT_FALSE(ParseProt("rr"));
  EXPECT_FALSE(ParseProt("rwz"));
  EXPECT_FALSE(ParseProt("read,bogus"));
}

TEST(ParseMapFlags, NamesAndNumbers) {
  EXPECT_EQ(ParseMapFlags("private,anonymous"), MAP_PRIVATE | MAP_ANONYMOUS);
  EXPECT_EQ(ParseMapFlags("private,anon,fixed"), MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED);
  EXPECT_EQ(ParseMapFlags("MAP_SHARED|MAP_ANONYMOUS"), MAP_SHARED | MAP_ANONYMOUS);
  EXPECT_EQ(ParseMapFlags("private,anonymous,fixed_noreplace"), MAP_PRIVATE | MAP_ANONYMOUS | 0x100000);
  EXPECT_EQ(ParseMapFlags("private,anonymous,fixed-noreplace"), MAP_PRIVATE | MAP_ANONYMOUS | 0x100000);
  EXPECT_EQ(ParseMapFlags("shared_validate,anonymous"), 0x03 | MAP_ANONYMOUS);
  EXPECT_EQ(ParseMapFlags("0x22"), 0x22);
  EXPECT_EQ(ParseMapFlags("34"), 34);
  EXPECT_EQ(ParseMapFlags("private,0x20"), 0x22);
  EXPECT_EQ(ParseMapFlags("Private,NoReserve,anonymous"), MAP_PRIVATE | MAP_NORESERVE | MAP_ANONYMOUS);
  EXPECT_FALSE(ParseMapFlags(""));
  EXPECT_FALSE(ParseMapFlags("private,,anonymous"));
  EXPECT_FALSE(ParseMapFlags("private,bogus"));
}

TEST(Format, ProtFlagsHex) {
  EXPECT_EQ(FormatProt(3), "rw-");
  EXPECT_EQ(FormatProt(0), "---");
  EXPECT_EQ(FormatProt(5), "r-x");
  EXPECT_EQ(FormatMapFlags(MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED), "private|fixed|anonymous");
  EXPECT_EQ(FormatMapFlags(0x03 | MAP_ANONYMOUS), "shared_validate|anonymous");
  EXPECT_EQ(Hex(0), "0x0");
  EXPECT_EQ(Hex(0x7ffff7fff000), "0x7ffff7fff000");
  EXPECT_EQ(HexBytes(std::string("\x00\xff\x10", 3)), "00ff10");
  EXPECT_EQ(ParseHexBytes("00ff10"), std::string("\x00\xff\x10", 3));
  EXPECT_EQ(ParseHexBytes("0x41 42"), "AB");
  EXPECT_FALSE(ParseHexBytes("abc"));
  EXPECT_FALSE(ParseHexBytes("zz"));
  EXPECT_EQ(ParseAccessType("write"), 1);
  EXPECT_EQ(ParseAccessType("X"), 2);
  EXPECT_FALSE(ParseAccessType("rw"));
}

/// A status as vmspaced sends it: google.rpc.Status details with a packed SyscallError.
grpc::Status WithDetails(grpc::StatusCode code, const std::string& message, int err, const std::string& name) {
  google::rpc::Status st;
  st.set_code(static_cast<int>(code));
  st.set_message(message);
  v1::SyscallError se;
  se.set_errno_(err);
  se.set_errno_name(name);
  st.add_details()->PackFrom(se);
  grpc::Status out;
  EXPECT_TRUE(grpc::SetErrorDetails(st, &out).ok());
  return out;
}

TEST(DecodeStatus, UsesErrorDetails) {
  Error e = DecodeStatus(WithDetails(grpc::StatusCode::RESOURCE_EXHAUSTED, "ENOMEM: no room below mmap_base", 12,
                                     "ENOMEM"));
  EXPECT_EQ(e.code, grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(e.err, 12);
  EXPECT_EQ(e.errno_name, "ENOMEM");
  EXPECT_EQ(e.Name(), "ENOMEM");
  EXPECT_EQ(e.ToString(), "ENOMEM (12): no room below mmap_base");  // the name once
  // Details carrying only the number get the engine's name for it.
  e = DecodeStatus(WithDetails(grpc::StatusCode::ALREADY_EXISTS, "exists", 17, ""));
  EXPECT_EQ(e.errno_name, "EEXIST");
  EXPECT_EQ(e.err, 17);
}

TEST(DecodeStatus, NeverParsesTheMessage) {
  // Without details there is no errno, whatever the message says.
  Error e = DecodeStatus(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "EINVAL: len is 0"));
  EXPECT_EQ(e.err, 0);
  EXPECT_EQ(e.errno_name, "");
  EXPECT_EQ(e.Name(), "INVALID_ARGUMENT");
  // Raw SyscallError bytes (not a google.rpc.Status) carry no errno either.
  v1::SyscallError se;
  se.set_errno_(22);
  se.set_errno_name("EINVAL");
  e = DecodeStatus(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "EINVAL: x", se.SerializeAsString()));
  EXPECT_EQ(e.err, 0);
}

TEST(DecodeStatus, NoErrno) {
  Error e = DecodeStatus(grpc::Status(grpc::StatusCode::NOT_FOUND, "no space 7"));
  EXPECT_EQ(e.err, 0);
  EXPECT_EQ(e.errno_name, "");
  EXPECT_EQ(e.Name(), "NOT_FOUND");
  // An upper-case word that is not an errno is not taken for one.
  e = DecodeStatus(grpc::Status(grpc::StatusCode::INTERNAL, "EXPLODED: oops"));
  EXPECT_EQ(e.err, 0);
  EXPECT_EQ(e.Name(), "INTERNAL");
  // Garbage details are ignored.
  e = DecodeStatus(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "EBADF: file", "\xff\xff\xff"));
  EXPECT_EQ(e.errno_name, "");
  EXPECT_EQ(e.err, 0);
  EXPECT_EQ(e.Name(), "INVALID_ARGUMENT");
  EXPECT_EQ(StatusCodeName(grpc::StatusCode::UNAVAILABLE), "UNAVAILABLE");
}

TEST(DecodeOpResult, OkAndError) {
  v1::OpResult ok;
  ok.mutable_mmap()->set_addr(0x1000);
  EXPECT_FALSE(DecodeOpResult(ok));
  v1::OpResult bad;
  bad.set_code(3);
  bad.set_errno_(22);
  bad.set_message("EINVAL: len is 0");
  auto e = DecodeOpResult(bad);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code, grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(e->errno_name, "EINVAL");
}

}  // namespace
}  // namespace vmspace::client

namespace vmspace::stress {
namespace {

TEST(GlibcRandom, MatchesGlibcRandom) {
  for (uint32_t seed : {0u, 1u, 2u, 42u, 123456789u, 0xffffffffu}) {
    srandom(seed);
    GlibcRandom g(seed);
    for (int i = 0; i < 5000; ++i) ASSERT_EQ(g.Next(), static_cast<int32_t>(random())) << "seed " << seed << " i " << i;
  }
}

TEST(Seed004Sequence, SizesAndSlotsInRange) {
  Seed004Sequence s(1);
  for (int i = 0; i < 10000; ++i) {
    uint64_t n = s.NextSize();
    EXPECT_EQ(n % 1024, 0u);
    EXPECT_GE(n, 1024u);
    EXPECT_LE(n, 32u * 1024);
    int k = s.NextSlot();
    EXPECT_GE(k, 0);
    EXPECT_LT(k, 1024);
  }
}

TEST(Stress, EngineFiguresAreConsistent) {
  StressConfig cfg;
  cfg.rounds = 2000;
  cfg.page_fault = true;
  StressStats s = RunEngineStress(cfg);
  ASSERT_TRUE(s.ok()) << s.error;
  EXPECT_EQ(s.rounds, 2000u);
  EXPECT_EQ(s.mmaps, 2000u);
  EXPECT_EQ(s.munmaps, 2000u);
  EXPECT_EQ(s.accesses, 2000u);
  EXPECT_EQ(s.setup_mmaps, 1024u);
  EXPECT_EQ(s.teardown_munmaps, 1024u);
  EXPECT_GT(s.seconds, 0);
  // Every write touches a fresh private anonymous page: one fault per touched page.
  EXPECT_GE(s.faults, 2000u);
  EXPECT_LE(s.faults, 2000u * 8);
  EXPECT_GT(s.bytes_touched, s.faults);
  // Same seed, same placement.
  StressStats again = RunEngineStress(cfg);
  EXPECT_EQ(again.addr_hash, s.addr_hash);
  EXPECT_EQ(again.faults, s.faults);
}

TEST(Stress, NativeRunsSameSequence) {
  StressConfig cfg;
  cfg.rounds = 2000;
  cfg.page_fault = true;
  StressStats n = RunNativeStress(cfg);
  ASSERT_TRUE(n.ok()) << n.error;
  StressStats e = RunEngineStress(cfg);
  EXPECT_EQ(n.rounds, 2000u);
  EXPECT_EQ(n.mmaps, 2000u);
  EXPECT_EQ(n.munmaps, 2000u);
  EXPECT_EQ(n.accesses, 2000u);
  EXPECT_EQ(n.bytes_touched, e.bytes_touched);  // the same sizes were drawn
  EXPECT_GT(n.faults, 0u);
}

TEST(Stress, ClientsAndSharedSpace) {
  for (bool shared : {false, true}) {
    StressConfig cfg;
    cfg.rounds = 500;
    cfg.clients = 2;
    cfg.shared_space = shared;
    StressStats e = RunEngineStress(cfg);
    ASSERT_TRUE(e.ok()) << e.error;
    EXPECT_EQ(e.rounds, 1000u);
    EXPECT_EQ(e.setup_mmaps, 2048u);
    StressStats n = RunNativeStress(cfg);
    ASSERT_TRUE(n.ok()) << n.error;
    EXPECT_EQ(n.rounds, 1000u);
    EXPECT_EQ(n.mmaps, 1000u);
  }
}

TEST(SeedTable, RatiosFromTheSeedsFixedFigures) {
  // Our rates (rounds/s) for the three profiles: 10 s, 20 s and 25 s per 10 M rounds.
  const std::map<std::string, double> ours = {{"linux-6.0", 1e6}, {"linux-6.1", 5e5}, {"linux-6.7", 4e5}};
  SeedComparisonTable t = CompareWithSeed(ours, /*page_fault=*/false);
  EXPECT_EQ(t.base, "linux-6.0");
  ASSERT_EQ(t.rows.size(), 3u);
  const double seed[] = {13, 49, 67}, our[] = {10, 20, 25};
  for (size_t i = 0; i < 3; i++) {
    SCOPED_TRACE(t.rows[i].seed->profile);
    EXPECT_DOUBLE_EQ(t.rows[i].seed_s, seed[i]);
    EXPECT_DOUBLE_EQ(t.rows[i].seed_slowdown, seed[i] / 13);
    EXPECT_DOUBLE_EQ(*t.rows[i].our_s, our[i]);
    EXPECT_DOUBLE_EQ(*t.rows[i].our_slowdown, our[i] / 10);
  }
  // With page faults: 64 s, 104 s, ~210 s.
  t = CompareWithSeed(ours, /*page_fault=*/true);
  EXPECT_DOUBLE_EQ(t.rows[1].seed_slowdown, 104.0 / 64);
  EXPECT_DOUBLE_EQ(t.rows[2].seed_slowdown, 210.0 / 64);
  EXPECT_STREQ(t.rows[2].seed->kernel, "6.7.0-rc2");
  EXPECT_TRUE(t.rows[2].seed->fault_approx);
  // Without our linux-6.0 figure the first seed row we have is the base.
  t = CompareWithSeed({{"linux-6.1", 5e5}, {"linux-6.7", 4e5}, {"linux-6.15", 9e5}}, false);
  EXPECT_EQ(t.base, "linux-6.1");
  EXPECT_DOUBLE_EQ(t.rows[0].seed_slowdown, 13.0 / 49);
  EXPECT_FALSE(t.rows[0].our_s.has_value());
  EXPECT_DOUBLE_EQ(*t.rows[2].our_slowdown, 5e5 / 4e5);
  EXPECT_TRUE(InSeedTable("linux-6.7"));
  EXPECT_FALSE(InSeedTable("linux-6.6"));
}

}  // namespace
}  // namespace vmspace::stress
