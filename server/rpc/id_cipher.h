// SPDX-License-Identifier: Apache-2.0
// IdCipher: a keyed permutation of the 40-bit local part of space and file ids, so ids
// are unguessable and say nothing of how many spaces or files other tenants made.
#pragma once

#include <array>
#include <cstdint>

namespace vmspace::rpc {

/// A keyed pseudo-random permutation of [0, 2^40): an 8-round Feistel network over two
/// 20-bit halves, each round a keyed 64-bit mix (splitmix64's finalizer). Not a
/// cryptographic cipher: it hides the order and count of ids from clients that see a
/// few of them, it does not resist a cryptanalyst with millions. Thread-safe (const).
class IdCipher {
 public:
  static constexpr unsigned kBits = 40;
  static constexpr uint64_t kMask = (uint64_t{1} << kBits) - 1;
  /// Round keys derived from `seed`; 0 draws the seed from std::random_device.
  explicit IdCipher(uint64_t seed = 0);
  /// The image of x (x < 2^40), below 2^40.
  uint64_t Encrypt(uint64_t x) const;
  /// The x whose image is y (y < 2^40).
  uint64_t Decrypt(uint64_t y) const;

 private:
  static constexpr int kRounds = 8;
  static constexpr unsigned kHalf = kBits / 2;
  static constexpr uint64_t kHalfMask = (uint64_t{1} << kHalf) - 1;
  uint64_t F(int round, uint64_t half) const;
  std::array<uint64_t, kRounds> keys_{};
};

}  // namespace vmspace::rpc
