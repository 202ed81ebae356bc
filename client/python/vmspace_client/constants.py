# SPDX-License-Identifier: Apache-2.0
"""<sys/mman.h> constants as the API takes them."""
# <sys/mman.h> values (x86-64 Linux), as the API takes them.
PROT_NONE, PROT_READ, PROT_WRITE, PROT_EXEC = 0, 1, 2, 4
MAP_SHARED, MAP_PRIVATE, MAP_FIXED, MAP_ANONYMOUS, MAP_FIXED_NOREPLACE = 0x01, 0x02, 0x10, 0x20, 0x100000
MADV_DONTNEED = 4
# Every madvise advice AddressSpace::Madvise takes (include/uapi/asm-generic/mman-common.h);
# HWPOISON and SOFT_OFFLINE are EINVAL on the kernel the engine models (no CONFIG_MEMORY_FAILURE).
MADV_NORMAL, MADV_RANDOM, MADV_SEQUENTIAL, MADV_WILLNEED = 0, 1, 2, 3
MADV_FREE, MADV_REMOVE, MADV_DONTFORK, MADV_DOFORK = 8, 9, 10, 11
MADV_MERGEABLE, MADV_UNMERGEABLE, MADV_HUGEPAGE, MADV_NOHUGEPAGE = 12, 13, 14, 15
MADV_DONTDUMP, MADV_DODUMP, MADV_WIPEONFORK, MADV_KEEPONFORK = 16, 17, 18, 19
MADV_COLD, MADV_PAGEOUT, MADV_POPULATE_READ, MADV_POPULATE_WRITE = 20, 21, 22, 23
MADV_DONTNEED_LOCKED, MADV_COLLAPSE = 24, 25
MADV_HWPOISON, MADV_SOFT_OFFLINE, MADV_GUARD_INSTALL, MADV_GUARD_REMOVE = 100, 101, 102, 103
# The advices by name: the MADV_ name in lower case without the prefix ("dontneed", "guard_install").
MADV_BY_NAME = {k[len("MADV_"):].lower(): v for k, v in dict(globals()).items() if k.startswith("MADV_")}
MS_ASYNC, MS_INVALIDATE, MS_SYNC = 1, 2, 4
MREMAP_MAYMOVE, MREMAP_FIXED, MREMAP_DONTUNMAP = 1, 2, 4
