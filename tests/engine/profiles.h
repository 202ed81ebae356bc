// SPDX-License-Identifier: Apache-2.0
// The locking profiles every engine semantic and stress test runs under, and a gtest
// name generator for them ("linux-6.6,vma_lock=off" -> "linux_6_6_vma_lock_off").
#pragma once

#include <gtest/gtest.h>

#include <cctype>
#include <string>

#include "engine/address_space.h"

namespace vmspace::testing_profiles {

inline auto AllProfiles() {
  return ::testing::Values("linux-6.0", "linux-6.1", "linux-6.4", "linux-6.6", "linux-6.7", "linux-6.15");
}

/// SpaceOptions with the locking profile `name` (a test failure if it does not parse).
inline SpaceOptions ProfileOptions(const char* name) {
  SpaceOptions o;
  std::string err;
  EXPECT_TRUE(LockingProfile::Parse(name, &o.profile, &err)) << err;
  return o;
}

struct ProfileName {
  template <typename Info>
  std::string operator()(const Info& info) const {
    std::string n = info.param;
    for (char& c : n)
      if (!isalnum(static_cast<unsigned char>(c))) c = '_';
    return n;
  }
};

}  // namespace vmspace::testing_profiles
