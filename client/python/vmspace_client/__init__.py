# SPDX-License-Identifier: Apache-2.0
"""vmspace_client: a Python client of vmspaced (vmspace.v1.VmSpace over gRPC), every RPC.

    from vmspace_client import Client, VmspaceError, PROT_READ, PROT_WRITE

    with Client("127.0.0.1:50051") as vm:
        space = vm.create_space(label="demo")
        addr = vm.mmap(space, 16384, PROT_READ | PROT_WRITE)
        print(vm.fault(space, addr, "write").outcome_name)   # "minor"
        print(vm.maps(space), end="")

Every call has a deadline (`timeout`, seconds). A failed call raises VmspaceError, an
OSError whose .errno and .name (e.g. 22, "EINVAL") are read from the status details: the
standard google.rpc.Status with a packed vmspace.v1.SyscallError (never from the message
text). Failures without an errno (NOT_FOUND for an unknown space, UNAVAILABLE) have
.errno None and .name the gRPC code's name. A SIGSEGV is an answer, not an error.

Several daemons (shards): Client("a:50051,b:50051") or Client("shards:NAME:PORT"); calls
go to the daemon of their id's shard (id >> 40), as the C++ client routes them.

The generated modules (client/python/generate.sh, checked in under _proto and tested to
match the proto) are looked for in $VMSPACE_PY_PROTO, else in this package's _proto folder.
"""
from . import batch
from ._pb import pb
from .client import Client
from . import constants as _constants
from .constants import *  # noqa: F401,F403
from .errors import VmspaceError
from .fault import Fault
from .results import AccessResult, LockStat, LockStats, ServerInfo
from .routing import parse_targets, shard_of

__all__ = ["Client", "VmspaceError", "Fault", "AccessResult", "LockStat", "LockStats", "ServerInfo", "batch", "pb",
           "parse_targets", "shard_of", "PROT_NONE", "PROT_READ", "PROT_WRITE", "PROT_EXEC",
           "MAP_SHARED", "MAP_PRIVATE", "MAP_FIXED", "MAP_ANONYMOUS", "MAP_FIXED_NOREPLACE", "MADV_DONTNEED",
           "MS_ASYNC", "MS_INVALIDATE", "MS_SYNC", "MREMAP_MAYMOVE", "MREMAP_FIXED", "MREMAP_DONTUNMAP", "MADV_BY_NAME"]
# Every MADV_* constant (constants.py).
__all__ += sorted(k for k in dir(_constants) if k.startswith("MADV_") and k not in __all__)
