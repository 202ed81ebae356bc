// SPDX-License-Identifier: Apache-2.0
#include "rpc/id_cipher.h"

#include <random>

namespace vmspace::rpc {

namespace {

uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

IdCipher::IdCipher(uint64_t seed) {
  if (seed == 0) {
    std::random_device rd;
    seed = (static_cast<uint64_t>(rd()) << 32) | rd();
  }
  for (uint64_t& k : keys_) {
    seed += 0x9e3779b97f4a7c15ull;  // splitmix64's sequence
    k = Mix(seed);
  }
}

uint64_t IdCipher::F(int round, uint64_t half) const {
  return Mix(keys_[static_cast<size_t>(round)] ^ (half * 0x9e3779b97f4a7c15ull)) & kHalfMask;
}

uint64_t IdCipher::Encrypt(uint64_t x) const {
  uint64_t l = (x >> kHalf) & kHalfMask, r = x & kHalfMask;
  for (int i = 0; i < kRounds; ++i) {
    const uint64_t t = l ^ F(i, r);
    l = r;
    r = t;
  }
  return (l << kHalf) | r;
}

uint64_t IdCipher::Decrypt(uint64_t y) const {
  uint64_t l = (y >> kHalf) & kHalfMask, r = y & kHalfMask;
  for (int i = kRounds - 1; i >= 0; --i) {
    const uint64_t t = r ^ F(i, l);
    r = l;
    l = t;
  }
  return (l << kHalf) | r;
}

}  // namespace vmspace::rpc
