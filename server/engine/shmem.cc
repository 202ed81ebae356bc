#include "shmem.h"

namespace vmspace {

ShmemObject::~ShmemObject() {
  MutexLock l(mu);
  for (auto& [pgoff, f] : pages) frames.Free(f);
}

void* ShmemObject::GetPage(uint64_t pgoff) {
  MutexLock l(mu);
  auto it = pages.find(pgoff);
  if (it != pages.end()) return it->second;
  void* f = frames.Alloc();
  if (f) pages.emplace(pgoff, f);
  return f;
}

}  // namespace vmspace
