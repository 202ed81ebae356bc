#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Generates the Python modules of the vmspace API with Debian's protoc and
# grpc_python_plugin (package protobuf-compiler-grpc). (Debian's python3-grpc-tools
# bundles an older protoc that rejects proto3 `optional`, which vmspace.proto uses.)
#
#   bash client/python/generate.sh [OUT_DIR]     (default: client/python/vmspace_client/_proto)
#
# OUT_DIR receives vmspace/v1/vmspace_pb2.py, vmspace/v1/vmspace_pb2_grpc.py and
# google/rpc/status_pb2.py (google.rpc.Status, the error details; Debian has no Python
# package of it). vmspace_client finds them in its _proto folder, or in $VMSPACE_PY_PROTO.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-$here/vmspace_client/_proto}
googleapis=/usr/share/gocode/src/github.com/gogo/googleapis  # golang-github-gogo-googleapis-dev
plugin=$(command -v grpc_python_plugin) || { echo "grpc_python_plugin not found: apt-get install protobuf-compiler-grpc" >&2; exit 1; }
mkdir -p "$out"
protoc --proto_path="$root/proto" --python_out="$out" --grpc_out="$out" \
  --plugin=protoc-gen-grpc="$plugin" "$root/proto/vmspace/v1/vmspace.proto"
protoc --proto_path="$googleapis" --python_out="$out" "$googleapis/google/rpc/status.proto"
