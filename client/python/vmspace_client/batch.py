# SPDX-License-Identifier: Apache-2.0
"""Batch ops: many operations on one space per message over one bidirectional stream
(Client.batch). Each BatchRequest is answered by one BatchResponse with one OpResult per
op, in order; a failing op does not stop the batch (its result carries the error)."""
import grpc

from ._pb import pb
from .constants import MADV_BY_NAME
from .errors import VmspaceError

_REQUEST = {"mmap": pb.MmapRequest, "munmap": pb.MunmapRequest, "mprotect": pb.MprotectRequest,
            "fault": pb.FaultRequest, "access": pb.AccessRequest, "read": pb.ReadMemoryRequest,
            "write": pb.WriteMemoryRequest, "madvise": pb.MadviseRequest, "msync": pb.MsyncRequest,
            "brk": pb.BrkRequest, "mremap": pb.MremapRequest,
            "mlock": pb.MlockRequest, "munlock": pb.MunlockRequest, "mlockall": pb.MlockallRequest,
            "munlockall": pb.MunlockallRequest, "mseal": pb.MsealRequest,
            "mincore": pb.MincoreRequest}
ACCESS = {"read": pb.ACCESS_READ, "write": pb.ACCESS_WRITE, "exec": pb.ACCESS_EXEC}


def op(kind, space_id, addr_of_back=None, addr_of_index=None, **fields):
    """One Batch op (a vmspace.v1.Op). `kind`: "mmap", "munmap", "mprotect", "fault",
    "access", "read", "write", "madvise", "msync", "brk", "mremap", "mlock", "munlock",
    "mlockall", "munlockall", "mseal" or "mincore"; `fields`: those of its request message (addr, len,
    prot, flags, stride, data, advice, brk, old_addr, old_len, new_len, new_addr, ...;
    `access` may be "read", "write" or "exec"). addr_of_back=k: the address (mremap:
    old_addr) is what the mmap or mremap op k places before this one returned, plus its
    own value (an offset); addr_of_index=i: the same for op number i of the stream (ops
    are numbered from 0 across the stream's messages)."""
    if isinstance(fields.get("access"), str):
        fields["access"] = ACCESS[fields["access"]]
    if isinstance(fields.get("advice"), str):
        fields["advice"] = MADV_BY_NAME[fields["advice"]]
    o = pb.Op(**{kind: _REQUEST[kind](space_id=space_id, **fields)})
    if addr_of_back is not None:
        o.addr_of.back = addr_of_back
    elif addr_of_index is not None:
        o.addr_of.index = addr_of_index
    return o


def request(ops, tag=0):
    """A BatchRequest of `ops` (an iterable of Op) echoing `tag`."""
    return pb.BatchRequest(ops=list(ops), tag=tag)


def op_error(result):
    """The VmspaceError of a failed OpResult (code != 0), else None."""
    if result.code == 0 and result.errno_ == 0:
        return None
    code = next((c for c in grpc.StatusCode if c.value[0] == result.code), grpc.StatusCode.UNKNOWN)
    return VmspaceError(code, result.message, result.errno_ or None, result.errno_name)


def space_of(req):
    """The space id of a BatchRequest's first op (packed or not); 0 if it has none."""
    if req.HasField("packed"):
        return req.packed.space_id
    for o in req.ops:
        kind = o.WhichOneof("op")
        if kind:
            return getattr(o, kind).space_id
    return 0
