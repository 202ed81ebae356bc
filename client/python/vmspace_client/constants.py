# SPDX-License-Identifier: Apache-2.0
"""<sys/mman.h> constants as the API takes them."""
# <sys/mman.h> values (x86-64 Linux), as the API takes them.
PROT_NONE, PROT_READ, PROT_WRITE, PROT_EXEC = 0, 1, 2, 4
MAP_SHARED, MAP_PRIVATE, MAP_FIXED, MAP_ANONYMOUS, MAP_FIXED_NOREPLACE = 0x01, 0x02, 0x10, 0x20, 0x100000
MADV_DONTNEED = 4
MS_ASYNC, MS_INVALIDATE, MS_SYNC = 1, 2, 4
MREMAP_MAYMOVE, MREMAP_FIXED, MREMAP_DONTUNMAP = 1, 2, 4
