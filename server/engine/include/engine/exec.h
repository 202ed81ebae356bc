// SPDX-License-Identifier: Apache-2.0
// execve(2)'s new address space: the program's ELF64 headers read from a file of the
// daemon's FileTable (fs/binfmt_elf.c load_elf_binary's checks, Linux 6.18) and what
// AddressSpace::Exec maps from them (exec.cc, named after fs/exec.c).
#pragma once

#include <elf.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/file.h"

namespace vmspace {

/// An ELF64 executable or shared object as load_elf_binary reads it: the file header,
/// the program headers and the PT_INTERP path.
struct ElfFile {
  std::shared_ptr<OpenFile> file;  // the open handle the segments are mapped from
  Elf64_Ehdr ehdr{};
  std::vector<Elf64_Phdr> phdrs;
  std::string interp;  // PT_INTERP's path ("" if none), e.g. "/lib64/ld-linux-x86-64.so.2"
};

/// Reads and checks the ELF headers of FileTable handle `id` (load_elf_phdrs and the
/// checks before it, Linux 6.18): ELFMAG, ELFCLASS64, little-endian, ET_EXEC or
/// ET_DYN, EM_X86_64, e_phentsize == sizeof(Elf64_Phdr), 1..65536/56 program headers
/// inside the file, at most one PT_INTERP, NUL-terminated, 2..4096 bytes. Returns 0,
/// EBADF (unknown handle or not readable), ENOEXEC (not such an ELF file) or EIO.
int ReadElfFile(FileTable& files, uint64_t id, ElfFile* out);

/// What execve(2) loads (AddressSpace::Exec): the program, its interpreter when it has
/// a PT_INTERP (null otherwise: a static program), and the strings copied onto the new
/// stack, whose total size places the stack VMA's start.
struct ExecImage {
  ElfFile program;
  std::unique_ptr<ElfFile> interpreter;
  std::string filename;  // bprm->filename: the path given to execve, copied first
  std::vector<std::string> argv, envp;
};

/// Opens `path` (relative to the FileTable's data directory, read-only) and, if it has
/// a PT_INTERP, the interpreter: `interpreter_path` if not empty, else the PT_INTERP
/// path taken relative to the data directory (its leading '/' dropped). Fills
/// `out->program`, `out->interpreter` and `out->filename` (= "/" + path) and closes
/// the handles again (the ElfFiles keep the OpenFiles). Errors: Open's (ENOENT,
/// EACCES, EINVAL...; ENOENT also for a missing interpreter, as the kernel's
/// open_exec), ReadElfFile's; ELIBBAD for an interpreter that is not an ELF file.
int OpenExecImage(FileTable& files, const std::string& path, const std::string& interpreter_path,
                  ExecImage* out);

/// The initial stack: stack_guard_gap aside, load_elf_binary's setup_arg_pages expands
/// the argument pages' VMA by this much below them (fs/exec.c stack_expand).
inline constexpr uint64_t kExecStackExpand = 128 * 1024;
/// STACK_TOP with ASLR off on x86-64 (4-level paging): TASK_SIZE.
inline constexpr uint64_t kExecStackTop = 0x7ffffffff000ull;
/// ELF_ET_DYN_BASE (arch/x86/include/asm/elf.h): 2/3 of TASK_SIZE; a PIE with an
/// interpreter loads at its page (0x555555554000) when ASLR is off.
inline constexpr uint64_t kElfEtDynBase = kExecStackTop / 3 * 2;
/// The vDSO data and text pages (arch/x86/entry/vdso/vma.c map_vdso, Linux 6.18): the
/// [vvar] pages (the generic vDSO data store), [vvar_vclock] (pvclock, hvclock) and
/// the [vdso] text, mapped in this order from one get_unmapped_area of their sum.
inline constexpr uint64_t kVvarPages = 4, kVvarVclockPages = 2, kVdsoPages = 2;

}  // namespace vmspace
