# SPDX-License-Identifier: Apache-2.0
"""<sys/mman.h> constants as the API takes them."""
# <sys/mman.h> values (x86-64 Linux), as the API takes them.
PROT_NONE, PROT_READ, PROT_WRITE, PROT_EXEC = 0, 1, 2, 4
MAP_SHARED, MAP_PRIVATE, MAP_FIXED, MAP_ANONYMOUS, MAP_FIXED_NOREPLACE = 0x01, 0x02, 0x10, 0x20, 0x100000
MADV_DONTNEED = 4
MS_ASYNC, MS_INVALIDATE, MS_SYNC = 1, 2, 4
MLOCK_ONFAULT = 1
MCL_CURRENT, MCL_FUTURE, MCL_ONFAULT = 1, 2, 4
# <fcntl.h> memfd seals (F_ADD_SEALS / F_GET_SEALS) and open(2) access modes.
F_SEAL_SEAL, F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_WRITE, F_SEAL_FUTURE_WRITE, F_SEAL_EXEC = 1, 2, 4, 8, 0x10, 0x20
O_RDONLY, O_WRONLY, O_RDWR = 0, 1, 2
