// SPDX-License-Identifier: Apache-2.0
// execve(2)'s new address space (fs/exec.c bprm_mm_init, setup_arg_pages, exec_mmap;
// fs/binfmt_elf.c load_elf_binary, load_elf_interp, elf_load, elf_map;
// arch/x86/entry/vdso/vma.c map_vdso; Linux 6.18) with ASLR off (setarch -R):
// AddressSpace::Exec, ReadElfFile, OpenExecImage.
#include "engine/exec.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "engine/address_space.h"
#include "mm.h"
#include "mmap.h"
#include "mmap_lock.h"
#include "vma.h"
#include "vma_lock.h"

namespace vmspace {

namespace {

constexpr uint64_t P = kPageSize;
uint64_t ElfPageStart(uint64_t x) { return x & ~(P - 1); }
uint64_t ElfPageOffset(uint64_t x) { return x & (P - 1); }
uint64_t ElfPageAlign(uint64_t x) { return (x + P - 1) & ~(P - 1); }

/// make_prot(): the segment's PF_R/PF_W/PF_X as PROT_* bits.
int MakeProt(uint32_t p_flags) {
  int prot = 0;
  if (p_flags & PF_R) prot |= PROT_READ;
  if (p_flags & PF_W) prot |= PROT_WRITE;
  if (p_flags & PF_X) prot |= PROT_EXEC;
  return prot;
}

/// total_mapping_size(): from the first PT_LOAD's page to the end of the highest one.
uint64_t TotalMappingSize(const std::vector<Elf64_Phdr>& ph) {
  uint64_t min_addr = ~0ull, max_addr = 0;
  bool any = false;
  for (const Elf64_Phdr& p : ph) {
    if (p.p_type != PT_LOAD) continue;
    any = true;
    min_addr = std::min<uint64_t>(min_addr, p.p_vaddr);
    max_addr = std::max<uint64_t>(max_addr, p.p_vaddr + p.p_memsz);
  }
  return any ? max_addr - ElfPageStart(min_addr) : 0;
}

/// maximum_alignment(): the largest power-of-two p_align of the PT_LOADs, at least a page.
uint64_t MaximumAlignment(const std::vector<Elf64_Phdr>& ph) {
  uint64_t a = 0;
  for (const Elf64_Phdr& p : ph)
    if (p.p_type == PT_LOAD && p.p_align && !(p.p_align & (p.p_align - 1))) a = std::max<uint64_t>(a, p.p_align);
  return ElfPageAlign(a);
}

/// elf_map(): maps the file part of segment `ph` at `addr` (its page); with
/// `total_size` the whole image's span first, then unmaps what lies past this segment
/// (so that the later segments fit where the image was placed).
SysResult ElfMap(AddressSpace& as, const ElfFile& f, uint64_t addr, const Elf64_Phdr& ph, int prot, int type,
                 uint64_t total_size) {
  const uint64_t size = ElfPageAlign(ph.p_filesz + ElfPageOffset(ph.p_vaddr));
  const uint64_t off = ph.p_offset - ElfPageOffset(ph.p_vaddr);
  addr = ElfPageStart(addr);
  if (!size) return SysResult::Ok(addr);
  if (!total_size) return as.Mmap(addr, size, prot, type, off, f.file);
  total_size = ElfPageAlign(total_size);
  SysResult r = as.Mmap(addr, total_size, prot, type, off, f.file);
  if (r.ok() && total_size > size) as.Munmap(r.value + size, total_size - size);
  return r;
}

/// elf_load(): elf_map, then padzero (zeros from the end of the file data to the end
/// of its page, a write the process would make: an error counts only for a writable
/// segment) and the bss beyond that page as anonymous memory (vm_brk_flags:
/// VM_DATA_DEFAULT_FLAGS, read-write, plus VM_EXEC if the segment is executable).
SysResult ElfLoad(AddressSpace& as, const ElfFile& f, uint64_t addr, const Elf64_Phdr& ph, int prot, int type,
                  uint64_t total_size) {
  uint64_t map_addr, zero_start, zero_end;
  if (ph.p_filesz) {
    SysResult r = ElfMap(as, f, addr, ph, prot, type, total_size);
    if (!r.ok()) return r;
    map_addr = r.value;
    zero_start = map_addr + ElfPageOffset(ph.p_vaddr) + ph.p_filesz;
    zero_end = map_addr + ElfPageOffset(ph.p_vaddr) + ph.p_memsz;
    if (ph.p_memsz > ph.p_filesz && ElfPageOffset(zero_start)) {
      static const uint8_t kZeros[P] = {};
      const uint64_t n = P - ElfPageOffset(zero_start);
      if (as.WriteMemory(zero_start, kZeros, n).bytes != n && (prot & PROT_WRITE)) return SysResult::Err(EFAULT);
    }
  } else {
    map_addr = zero_start = ElfPageStart(addr);
    zero_end = zero_start + ElfPageOffset(ph.p_vaddr) + ph.p_memsz;
  }
  if (ph.p_memsz > ph.p_filesz) {
    zero_start = ElfPageAlign(zero_start);
    zero_end = ElfPageAlign(zero_end);
    if (zero_end > zero_start) {
      SysResult b = as.Mmap(zero_start, zero_end - zero_start, PROT_READ | PROT_WRITE | (prot & PROT_EXEC),
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED);
      if (!b.ok()) return b;
    }
  }
  return SysResult::Ok(map_addr);
}

/// load_elf_interp(): the interpreter's PT_LOADs; an ET_DYN one is placed by the first
/// segment's mmap (hint 0: top-down below mmap_base, with the image's total size), the
/// rest MAP_FIXED at their offsets from it. Returns the load address.
SysResult LoadElfInterp(AddressSpace& as, const ElfFile& interp) {
  uint64_t total_size = TotalMappingSize(interp.phdrs);
  if (!total_size) return SysResult::Err(EINVAL);
  uint64_t load_addr = 0;
  bool load_addr_set = false;
  for (const Elf64_Phdr& ph : interp.phdrs) {
    if (ph.p_type != PT_LOAD) continue;
    int type = MAP_PRIVATE;
    if (interp.ehdr.e_type == ET_EXEC || load_addr_set) type |= MAP_FIXED;
    else load_addr = -ph.p_vaddr;  // no_base: the hint is 0
    SysResult m = ElfLoad(as, interp, load_addr + ph.p_vaddr, ph, MakeProt(ph.p_flags), type, total_size);
    if (!m.ok()) return m;
    total_size = 0;
    if (!load_addr_set && interp.ehdr.e_type == ET_DYN) {
      load_addr = m.value - ElfPageStart(ph.p_vaddr);
      load_addr_set = true;
    }
  }
  return SysResult::Ok(load_addr);
}

/// bprm_stack_limits(): the strings and their pointers may take a quarter of
/// RLIMIT_STACK (8 MiB here), no less than ARG_MAX (32 pages) and no more than 3/4 of
/// _STK_LIM.
constexpr uint64_t kRlimitStack = 8ull << 20;
uint64_t ArgLimit() { return std::max<uint64_t>(std::min<uint64_t>(6ull << 20, kRlimitStack / 4), 32 * P); }

}  // namespace

int ReadElfFile(FileTable& files, uint64_t id, ElfFile* out) {
  std::shared_ptr<OpenFile> h = files.Get(id);
  if (!h || !h->readable) return EBADF;
  ElfFile e;
  e.file = h;
  SysResult r = files.Read(id, 0, &e.ehdr, sizeof e.ehdr);
  if (!r.ok()) return r.error == EBADF ? EBADF : EIO;
  const Elf64_Ehdr& x = e.ehdr;
  if (r.value < sizeof x || memcmp(x.e_ident, ELFMAG, SELFMAG) != 0 || x.e_ident[EI_CLASS] != ELFCLASS64 ||
      x.e_ident[EI_DATA] != ELFDATA2LSB || (x.e_type != ET_EXEC && x.e_type != ET_DYN) || x.e_machine != EM_X86_64 ||
      x.e_phentsize != sizeof(Elf64_Phdr) || x.e_phnum < 1 || x.e_phnum > 65536 / sizeof(Elf64_Phdr))
    return ENOEXEC;
  e.phdrs.resize(x.e_phnum);
  const uint64_t bytes = x.e_phnum * sizeof(Elf64_Phdr);
  r = files.Read(id, x.e_phoff, e.phdrs.data(), bytes);
  if (!r.ok()) return EIO;
  if (r.value != bytes) return ENOEXEC;  // elf_read: a short read is -EIO, seen as not an ELF file
  for (const Elf64_Phdr& p : e.phdrs) {
    if (p.p_type != PT_INTERP) continue;
    if (!e.interp.empty() || p.p_filesz > 4096 || p.p_filesz < 2) return ENOEXEC;
    std::string s(p.p_filesz, '\0');
    r = files.Read(id, p.p_offset, s.data(), s.size());
    if (!r.ok() || r.value != s.size() || s.back() != '\0') return ENOEXEC;
    s.pop_back();
    if (s.empty() || s.find('\0') != std::string::npos) return ENOEXEC;
    e.interp = std::move(s);
  }
  *out = std::move(e);
  return 0;
}

int OpenExecImage(FileTable& files, const std::string& path, const std::string& interpreter_path, ExecImage* out) {
  auto load = [&files](const std::string& p, ElfFile* e) -> int {
    SysResult id = files.Open(p, OpenFlags{});
    if (!id.ok()) return id.error;
    const int err = ReadElfFile(files, id.value, e);
    files.Close(id.value);
    return err;
  };
  ExecImage img;
  if (int err = load(path, &img.program)) return err;
  if (!img.program.interp.empty()) {
    std::string ip = interpreter_path;
    if (ip.empty()) ip = img.program.interp.substr(img.program.interp.find_first_not_of('/'));
    img.interpreter = std::make_unique<ElfFile>();
    if (int err = load(ip, img.interpreter.get())) return err == ENOEXEC ? ELIBBAD : err;
  }
  img.filename = path;
  out->program = std::move(img.program);
  out->interpreter = std::move(img.interpreter);
  out->filename = std::move(img.filename);
  return 0;
}

std::unique_ptr<AddressSpace> AddressSpace::Exec(const ExecImage& img, int* error) const {
  auto fail = [error](int e) -> std::unique_ptr<AddressSpace> {
    if (error) *error = e;
    return nullptr;
  };
  const ElfFile& prog = img.program;
  if (!prog.file) return fail(EBADF);
  if (!prog.interp.empty() && !img.interpreter) return fail(ENOENT);
  // do_execveat_common: filename, then envp and argv, each NUL-terminated, copied
  // down from STACK_TOP - sizeof(void*); the pointers to them count against the limit.
  uint64_t strings = img.filename.size() + 1;
  for (const std::string& s : img.envp) strings += s.size() + 1;
  for (const std::string& s : img.argv) strings += s.size() + 1;
  const uint64_t ptrs = (img.argv.size() + img.envp.size()) * sizeof(void*);
  if (ptrs >= ArgLimit() || strings > ArgLimit() - ptrs) return fail(E2BIG);
  const uint64_t p = kExecStackTop - sizeof(void*) - strings;

  // Where the program's brk starts is known before anything is mapped, except for an
  // ET_DYN program without an interpreter (a loader run directly: placed by mmap).
  int executable_stack = 0;  // EXSTACK_DEFAULT (no READ_IMPLIES_EXEC on x86-64)
  uint64_t elf_brk = 0;
  for (const Elf64_Phdr& ph : prog.phdrs) {
    if (ph.p_type == PT_GNU_STACK) executable_stack = (ph.p_flags & PF_X) ? 1 : -1;
    if (ph.p_type == PT_LOAD) elf_brk = std::max<uint64_t>(elf_brk, ph.p_vaddr + ph.p_memsz);
  }
  uint64_t load_bias = 0;
  uint64_t first_vaddr = 0;
  for (const Elf64_Phdr& ph : prog.phdrs)
    if (ph.p_type == PT_LOAD) {
      first_vaddr = ph.p_vaddr;
      break;
    }
  if (prog.ehdr.e_type == ET_DYN && img.interpreter) {
    load_bias = kElfEtDynBase;
    if (const uint64_t a = MaximumAlignment(prog.phdrs)) load_bias &= ~(a - 1);
    load_bias = ElfPageStart(load_bias - first_vaddr);
  }
  // exec_mmap's new mm: this space's settings (not its mlockall(MCL_FUTURE) or
  // mappings) with the program's brk.
  SpaceOptions o = mm_->opts;
  o.start_brk = ElfPageAlign(elf_brk + load_bias);
  auto as = std::make_unique<AddressSpace>(mm_->frames, o);
  MmStruct& m = *as->mm_;
  SpaceEntry entry(m);  // nests with the entries of the calls below

  // setup_arg_pages: the argument pages' VMA, VM_STACK_FLAGS (VM_GROWSDOWN, VM_ACCOUNT),
  // expanded by stack_expand below them, with the strings in place.
  uint64_t stack_start = ElfPageStart(p);
  stack_start = kExecStackTop - stack_start + kExecStackExpand > kRlimitStack ? kExecStackTop - kRlimitStack
                                                                               : stack_start - kExecStackExpand;
  const int stack_prot = PROT_READ | PROT_WRITE | (executable_stack > 0 ? PROT_EXEC : 0);
  SysResult st = as->Mmap(stack_start, kExecStackTop - stack_start, stack_prot,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_GROWSDOWN | MAP_FIXED);
  if (!st.ok()) return fail(st.error);
  {
    uint64_t pos = kExecStackTop - sizeof(void*);
    auto put = [&](const std::string& s) {
      pos -= s.size() + 1;
      return as->WriteMemory(pos, s.c_str(), s.size() + 1).bytes == s.size() + 1;
    };
    bool ok = put(img.filename);
    for (auto it = img.envp.rbegin(); ok && it != img.envp.rend(); ++it) ok = put(*it);
    for (auto it = img.argv.rbegin(); ok && it != img.argv.rend(); ++it) ok = put(*it);
    if (!ok) return fail(EFAULT);
  }

  // load_elf_binary's PT_LOAD loop.
  bool first_pt_load = true;
  uint64_t total_size = 0;
  for (const Elf64_Phdr& ph : prog.phdrs) {
    if (ph.p_type != PT_LOAD) continue;
    int flags = MAP_PRIVATE;
    const int prot = MakeProt(ph.p_flags);
    if (!first_pt_load) {
      flags |= MAP_FIXED;
    } else if (prog.ehdr.e_type == ET_EXEC) {
      flags |= MAP_FIXED_NOREPLACE;
    } else {
      total_size = TotalMappingSize(prog.phdrs);
      if (!total_size) return fail(EINVAL);
      if (img.interpreter) {
        flags |= MAP_FIXED_NOREPLACE;
      } else if (MaximumAlignment(prog.phdrs) > P) {
        // A loader asking for a larger alignment: placed by mmap, then aligned.
        SysResult probe = ElfLoad(*as, prog, 0, ph, prot, flags, total_size);
        if (!probe.ok()) return fail(probe.error);
        as->Munmap(probe.value, ElfPageAlign(total_size));
        load_bias = ElfPageStart((probe.value & ~(MaximumAlignment(prog.phdrs) - 1)) - ph.p_vaddr);
        flags |= MAP_FIXED_NOREPLACE;
      }
    }
    SysResult m2 = ElfLoad(*as, prog, load_bias + ph.p_vaddr, ph, prot, flags, total_size);
    if (!m2.ok()) return fail(m2.error);
    if (first_pt_load && prog.ehdr.e_type == ET_DYN) {
      load_bias += m2.value - ElfPageStart(load_bias + ph.p_vaddr);
      total_size = 0;
    }
    first_pt_load = false;
  }
  if (first_pt_load) return fail(ENOEXEC);  // no PT_LOAD

  if (img.interpreter) {
    SysResult i = LoadElfInterp(*as, *img.interpreter);
    if (!i.ok()) return fail(i.error);
  }

  // ARCH_SETUP_ADDITIONAL_PAGES: map_vdso's one get_unmapped_area for the data pages
  // and the text, then the three special mappings in it.
  const uint64_t vdso_len = (kVvarPages + kVvarVclockPages + kVdsoPages) * P;
  uint64_t base;
  {
    int err = 0;
    MmapWriteLock(m);
    base = GetUnmappedAreaLocked(m, 0, vdso_len, 0, false, 0, &err);
    MmapWriteUnlock(m);
    if (!base) return fail(err ? err : ENOMEM);
  }
  struct Special {
    uint64_t start, pages;
    int prot;
    uint64_t flags;
    const char* name;
  };
  const uint64_t vvar_flags = VM_READ | VM_MAYREAD | VM_IO | VM_DONTDUMP | VM_PFNMAP | VM_DONTEXPAND;
  const Special specials[] = {
      {base + (kVvarPages + kVvarVclockPages) * P, kVdsoPages, PROT_READ | PROT_EXEC,
       VM_READ | VM_EXEC | VM_MAYREAD | VM_MAYWRITE | VM_MAYEXEC | VM_DONTEXPAND, "[vdso]"},
      {base, kVvarPages, PROT_READ, vvar_flags, "[vvar]"},
      {base + kVvarPages * P, kVvarVclockPages, PROT_READ, vvar_flags, "[vvar_vclock]"},
  };
  for (const Special& s : specials) {
    SysResult r = as->Mmap(s.start, s.pages * P, s.prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED);
    if (!r.ok()) return fail(r.error);
    // _install_special_mapping: the flags are the mapping's own, never merged (VM_SPECIAL
    // or a different vm_ops), and the VMA is named by its vm_special_mapping.
    MmapWriteLock(m);
    Vma* v = FindVmaLocked(m, s.start);
    VmaStartWriteLocked(m, v);
    v->vm_flags = s.flags;
    m.special_mappings.push_back({s.start, s.name});
    MmapWriteUnlock(m);
  }

  MmapWriteLock(m);
  m.start_brk = m.brk = ElfPageAlign(elf_brk + load_bias);
  m.start_stack = p;
  MmapWriteUnlock(m);
  return as;
}

}  // namespace vmspace
