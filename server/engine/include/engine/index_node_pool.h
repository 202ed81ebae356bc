// SPDX-License-Identifier: Apache-2.0
// What the VMA index's node pools hold from the heap, for the daemon's metrics.
#pragma once

#include <cstdint>

namespace vmspace {

/// Bytes of heap the VMA index's node pools (maple tree and rbtree nodes) have carved
/// into slabs: nodes linked into trees, in trees' caches and free in the pools. Like a
/// kmem_cache that is never shrunk, the slabs are kept for reuse after the spaces that
/// used them are gone. No lock (a relaxed read).
uint64_t IndexNodePoolBytes();

}  // namespace vmspace
