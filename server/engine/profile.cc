// Locking profiles: named sets of design switches, one per modelled kernel era.
#include <sstream>

#include "engine/profile.h"

namespace vmspace {

const char* const LockingProfile::kNames[4] = {"linux-6.0", "linux-6.1", "linux-6.4", "linux-6.6"};

const char* VmaLockModeName(VmaLockMode m) {
  switch (m) {
    case VmaLockMode::kOff: return "off";
    case VmaLockMode::kAnon: return "anon";
    case VmaLockMode::kAll: return "all";
  }
  return "?";
}

namespace {
bool Named(const std::string& name, LockingProfile* p) {
  if (name == "linux-6.0") {
    p->index = VmaIndexKind::kRbtree;
    p->vma_lock = VmaLockMode::kOff;
  } else if (name == "linux-6.1") {
    p->index = VmaIndexKind::kMaple;
    p->vma_lock = VmaLockMode::kOff;
  } else if (name == "linux-6.4") {
    p->index = VmaIndexKind::kMaple;
    p->vma_lock = VmaLockMode::kAnon;
  } else if (name == "linux-6.6") {
    p->index = VmaIndexKind::kMaple;
    p->vma_lock = VmaLockMode::kAll;
  } else {
    return false;
  }
  p->name = name;
  return true;
}
}  // namespace

bool LockingProfile::Parse(const std::string& spec, LockingProfile* out, std::string* err) {
  LockingProfile p;  // linux-6.6
  std::stringstream ss(spec);
  std::string item;
  bool first = true, overridden = false;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    size_t eq = item.find('=');
    if (eq == std::string::npos) {
      if (!first || !Named(item, &p)) {
        *err = "unknown locking profile '" + item + "' (linux-6.0, linux-6.1, linux-6.4, linux-6.6)";
        return false;
      }
    } else {
      std::string k = item.substr(0, eq), v = item.substr(eq + 1);
      if (k == "index" && v == "rbtree") p.index = VmaIndexKind::kRbtree;
      else if (k == "index" && v == "maple") p.index = VmaIndexKind::kMaple;
      else if (k == "vma_lock" && v == "off") p.vma_lock = VmaLockMode::kOff;
      else if (k == "vma_lock" && v == "anon") p.vma_lock = VmaLockMode::kAnon;
      else if (k == "vma_lock" && v == "all") p.vma_lock = VmaLockMode::kAll;
      else {
        *err = "unknown switch '" + item + "' (index=rbtree|maple, vma_lock=off|anon|all)";
        return false;
      }
      overridden = true;
    }
    first = false;
  }
  if (first && !spec.empty()) {  // nothing but separators ("" is the default)
    *err = "empty locking profile '" + spec + "' (linux-6.0, linux-6.1, linux-6.4, linux-6.6)";
    return false;
  }
  if (p.vma_lock != VmaLockMode::kOff && p.index != VmaIndexKind::kMaple) {
    *err = "vma_lock=" + std::string(VmaLockModeName(p.vma_lock)) +
           " needs index=maple (per-VMA locks look VMAs up under RCU)";
    return false;
  }
  if (overridden) {
    // Keep the name if the overrides happen to match it.
    LockingProfile named;
    bool same = Named(p.name, &named) && named.index == p.index && named.vma_lock == p.vma_lock;
    if (!same) {
      p.name = "custom";
      for (const char* n : kNames) {
        LockingProfile q;
        Named(n, &q);
        if (q.index == p.index && q.vma_lock == p.vma_lock) p.name = n;
      }
    }
  }
  *out = p;
  return true;
}

std::string LockingProfile::Describe() const {
  return name + " (index=" + VmaIndexKindName(index) + " vma_lock=" + VmaLockModeName(vma_lock) + ")";
}

int LockingProfile::stats_slot() const {
  for (int i = 0; i < 4; i++)
    if (name == kNames[i]) return i;
  return 4;
}

}  // namespace vmspace
