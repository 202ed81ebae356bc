#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The generated modules checked in under vmspace_client/_proto are what generate.sh makes
of proto/vmspace/v1/vmspace.proto now (ctest client.python.stubs). When the proto
changes, run `bash client/python/generate.sh` and commit its output."""
import filecmp
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PY = os.path.dirname(HERE)
CHECKED_IN = os.path.join(PY, "vmspace_client", "_proto")
FILES = ["vmspace/v1/vmspace_pb2.py", "vmspace/v1/vmspace_pb2_grpc.py", "google/rpc/status_pb2.py"]


def main():
    with tempfile.TemporaryDirectory(prefix="vmspace-py-stubs-") as out:
        subprocess.run(["bash", os.path.join(PY, "generate.sh"), out], check=True)
        stale = [f for f in FILES if not filecmp.cmp(os.path.join(out, f), os.path.join(CHECKED_IN, f), shallow=False)]
        made = sorted(os.path.relpath(os.path.join(d, f), out) for d, _, fs in os.walk(out) for f in fs)
    if made != sorted(FILES):
        print(f"generate.sh made {made}, the package ships {sorted(FILES)}")
        return 1
    if stale:
        print("stale generated modules (run `bash client/python/generate.sh` and commit):", ", ".join(stale))
        return 1
    print(f"test_stubs: {len(FILES)} generated modules match proto/vmspace/v1/vmspace.proto")
    return 0


if __name__ == "__main__":
    sys.exit(main())
