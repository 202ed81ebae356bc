# SPDX-License-Identifier: Apache-2.0
"""VmspaceError: a failed call, decoded from the google.rpc.Status details."""
from ._pb import pb, status_pb2

_SYSCALL_ERROR = "type.googleapis.com/vmspace.v1.SyscallError"


class VmspaceError(OSError):
    """A failed call. .code: grpc.StatusCode; .errno: Linux errno or None; .errno_name:
    its name ("EINVAL"), "" without errno; .name: the errno's name or else the code's
    ("NOT_FOUND"); .message: the status text."""

    def __init__(self, code, message, errno=None, errno_name=""):
        super().__init__(errno, message)
        self.code = code
        self.message = message
        self.errno_name = errno_name
        self.name = errno_name or code.name

    def __str__(self):
        return f"{self.name}{f' ({self.errno})' if self.errno else ''}: {self.message}"

    @classmethod
    def from_rpc_error(cls, err):
        """Decodes a grpc.RpcError: the errno from the google.rpc.Status details."""
        errno, name = None, ""
        for key, value in err.trailing_metadata() or ():
            if key != "grpc-status-details-bin":
                continue
            status = status_pb2.Status.FromString(value)
            for any_ in status.details:
                if any_.type_url == _SYSCALL_ERROR:
                    se = pb.SyscallError.FromString(any_.value)
                    errno, name = se.errno_, se.errno_name
                    break
        return cls(err.code(), err.details() or "", errno, name)
