// SPDX-License-Identifier: Apache-2.0
// Translation between vmspace.proto messages and the engine's types.
#pragma once

#include <cstdint>

#include "engine/address_space.h"
#include "engine/file.h"
#include "engine/types.h"
#include "rpc/errors.h"
#include "vmspace/v1/vmspace.pb.h"

namespace vmspace::rpc {

/// The engine's access type of a proto AccessType; false for an unknown value.
bool ToAccessType(int v, AccessType* out);
/// The proto outcome of a fault (kOom and kInterrupted, never reported, map to NONE).
v1::FaultOutcome ToProto(FaultOutcome o);
/// The si_code of a fault that ended in SIGSEGV or SIGBUS; SI_CODE_NONE otherwise.
v1::SiCode ToProtoSiCode(const FaultResult& f);
/// The proto lock path of a fault.
v1::LockPath ToProto(LockPath p);
/// A FaultInfo of `f`: outcome, lock path, and the signal's si_code and si_addr.
void FillFault(const FaultResult& f, v1::FaultInfo* out);

/// Validates CreateSpace settings and converts them to engine options in *o; an empty
/// or "default" locking_profile takes `default_profile`. max_map_count defaults to (and
/// may not exceed) `max_map_count_limit`. EINVAL naming the bad setting.
OpStatus ToSpaceOptions(const v1::SpaceSettings& s, const LockingProfile& default_profile,
                        uint64_t max_map_count_limit, SpaceOptions* o);

/// A FileInfo of file `st`, named by its client-visible id `public_id`.
void FillFileInfo(const FileStat& st, uint64_t public_id, bool writable, v1::FileInfo* out);

}  // namespace vmspace::rpc
