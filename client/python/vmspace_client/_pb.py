# SPDX-License-Identifier: Apache-2.0
"""The generated modules of vmspace.proto: pb (vmspace.v1), pb_grpc (its stubs), status_pb2."""
import os
import sys

import grpc

_PROTO = os.environ.get("VMSPACE_PY_PROTO") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "_proto")
if _PROTO not in sys.path:
    sys.path.append(_PROTO)  # vmspace.v1.*_pb2 and google.rpc.status_pb2 (namespace packages)
try:
    from google.rpc import status_pb2
    from vmspace.v1 import vmspace_pb2 as pb
    from vmspace.v1 import vmspace_pb2_grpc as pb_grpc
except ImportError as e:  # pragma: no cover - a setup problem, said plainly
    raise ImportError(f"vmspace_client: generated modules not found in {_PROTO} (client/python/generate.sh "
                      f"writes them; Debian needs python3-grpcio and python3-protobuf): {e}") from e
