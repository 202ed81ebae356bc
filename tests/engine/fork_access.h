// SPDX-License-Identifier: Apache-2.0
// Engine-internal access for the fork tests: the MmStruct behind an AddressSpace (the
// friend AddressSpaceTestAccess), setting VMA flags no system call sets yet, and the
// frame a PTE maps.
#pragma once

#include <cstdint>

#include "engine/address_space.h"
#include "mm.h"
#include "mmap_lock.h"
#include "page_table.h"
#include "vma.h"
#include "vma_lock.h"

namespace vmspace {

struct AddressSpaceTestAccess {
  static MmStruct& Mm(AddressSpace& as) { return *as.mm_; }
};

namespace testing_fork {

/// The PTE at addr (0 if no table), read without locks (quiet spaces only).
inline uint64_t PteAt(AddressSpace& as, uint64_t addr) {
  MmStruct& m = AddressSpaceTestAccess::Mm(as);
  PageTable::PteTable* t = m.pt.Lookup(addr, false);
  return t ? t->Get(PageTable::PteIndex(addr)) : 0;
}

}  // namespace testing_fork
}  // namespace vmspace
