// SPDX-License-Identifier: Apache-2.0
// One protobuf message at a time on an Arena that keeps its first block: for a stream
// that builds or parses one message after another (Batch requests and responses), an
// op's sub-messages are bump-allocated instead of a malloc and a free each, and Next()
// drops them all at once. Header-only; used by vmspaced's Batch handler and the client
// library's Batch sessions.
#pragma once

#include <google/protobuf/arena.h>

#include <cstddef>
#include <memory>
#include <optional>

namespace vmspace::proto {

/// A message of type M on an arena whose first block (`first_block` bytes, allocated
/// once) is reused by every message; a bigger message adds blocks of at most
/// `max_block` bytes, freed by Next(). Not thread-safe: one owner thread.
template <typename M>
class ArenaMessage {
 public:
  explicit ArenaMessage(size_t first_block = 32 << 10, size_t max_block = 256 << 10)
      : block_(new char[first_block]), block_bytes_(first_block), max_block_(max_block) {
    Next();
  }
  ArenaMessage(const ArenaMessage&) = delete;
  ArenaMessage& operator=(const ArenaMessage&) = delete;

  /// Drops the current message and everything on its arena; returns a new empty one.
  M& Next() {
    msg_ = nullptr;
    arena_.reset();  // first: the old and the new arena would share the first block
    google::protobuf::ArenaOptions o;
    o.initial_block = block_.get();
    o.initial_block_size = block_bytes_;
    o.max_block_size = max_block_;
    arena_.emplace(o);
    msg_ = google::protobuf::Arena::CreateMessage<M>(&*arena_);
    return *msg_;
  }
  /// The current message.
  M& get() { return *msg_; }

 private:
  std::unique_ptr<char[]> block_;
  size_t block_bytes_;
  size_t max_block_;
  std::optional<google::protobuf::Arena> arena_;
  M* msg_ = nullptr;
};

}  // namespace vmspace::proto
