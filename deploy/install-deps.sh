#!/usr/bin/env bash
# Installs the Debian 12 packages vmspace needs to build and test, if missing.
# Run as root (or with sudo). Idempotent: does nothing when all are present.
set -euo pipefail
PKGS=(
  build-essential cmake pkg-config
  libgrpc++-dev libgrpc-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev prometheus-cpp-dev liburcu-dev
  libfmt-dev           # the engine's message formatting
  clang                # the thread-safety analysis stage of deploy/test.sh (-Wthread-safety)
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev   # JSON output of the CLI
  libcli11-dev         # the CLI's option parsing, help and subcommands (header-only)
  golang-github-gogo-googleapis-dev  # google/rpc/status.proto (standard gRPC error details)
  gnuplot-nox          # SVG charts of `vmspace bench ... --plot` (run as a subprocess)
  prometheus           # promtool, used by the metrics test
  curl
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
