// mmap(2), munmap(2), get_unmapped_area and stack expansion (mm/mmap.c).
#pragma once

#include <cstdint>

#include "engine/types.h"
#include "mm.h"

namespace vmspace {

/// calc_vm_prot_bits(): PROT_READ/WRITE/EXEC have the VM_ values.
inline uint64_t CalcVmProtBits(int prot) { return static_cast<uint64_t>(prot) & VM_ACCESS_FLAGS; }

}  // namespace vmspace
