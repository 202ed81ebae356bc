// SPDX-License-Identifier: Apache-2.0
// Must NOT compile under clang -Wthread-safety -Werror (deploy/test.sh, stage
// thread-safety, checks that it is rejected): it reads the VMA tree without mmap_lock.
#include "mm.h"
#include "vma.h"

namespace vmspace {
Vma* FindWithoutTheLock(MmStruct& m, uint64_t addr) { return FindVmaLocked(m, addr); }
}  // namespace vmspace
