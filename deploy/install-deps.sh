#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian 12 packages vmspace needs to build and test, if missing.
# Run as root (or with sudo). Idempotent: does nothing when all are present.
set -euo pipefail
PKGS=(
  build-essential cmake pkg-config
  libgrpc++-dev libgrpc-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev prometheus-cpp-dev
  libfmt-dev           # the engine's message formatting
  clang                # the thread-safety analysis stage of deploy/test.sh (-Wthread-safety)
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev   # JSON output of the CLI
  libcli11-dev         # the CLI's option parsing, help and subcommands (header-only)
  golang-github-gogo-googleapis-dev  # google/rpc/status.proto (standard gRPC error details)
  gnuplot-nox          # SVG and PNG charts of `vmspace bench ... --plot` (run as a subprocess)
  prometheus           # promtool (metrics and rules tests) and the server of the Prometheus end-to-end test
  curl
  openssl              # tests/service/tenant_test and the Python client's test make their CA and TLS certificates at test time
  python3-grpcio python3-protobuf  # the Python client (client/python) and its test, run with /usr/bin/python3
  python3-venv python3-pip python3-setuptools python3-wheel  # ctest client.python pip-installs the client into a venv, offline
  python3-yaml         # the deploy tests read compose, rule and manifest files
  docker-compose       # `docker-compose config` validates deploy/compose.yaml (no engine needed)
  python3-kubernetes   # offline schema of the Kubernetes API objects in deploy/k8s
  # The programs of the corpus (ctest -L corpus: recorded on this kernel, replayed with
  # --check): besides python3, perl, gcc and coreutils of build-essential
  sqlite3 nodejs git xz-utils zstd
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

# Debian's kubectl (package kubernetes-client, kubectl 1.20 with kustomize) builds the
# manifests in deploy/k8s. Where another package already owns /usr/bin/kubectl (Google's
# `kubectl`), the two cannot both be installed: unpack Debian's into KUBECTL_DIR instead,
# so the test always runs the same kubectl. deploy/tests/validate_deploy.py finds either.
KUBECTL_DIR=/opt/vmspace-tools/kubernetes-client
if ! dpkg-query -W -f='${Status}' kubernetes-client 2>/dev/null | grep -q "install ok installed" &&
   [ ! -x "$KUBECTL_DIR/usr/bin/kubectl" ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -q
  if ! dpkg-query -S /usr/bin/kubectl >/dev/null 2>&1; then
    echo "install-deps: installing kubernetes-client" >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends kubernetes-client
  else
    echo "install-deps: /usr/bin/kubectl belongs to $(dpkg-query -S /usr/bin/kubectl | cut -d: -f1); unpacking Debian's kubernetes-client into $KUBECTL_DIR" >&2
    tmp=$(mktemp -d) && chmod 755 "$tmp"  # apt downloads as user _apt
    (cd "$tmp" && apt-get download kubernetes-client >/dev/null) &&
      $SUDO mkdir -p "$KUBECTL_DIR" && $SUDO dpkg-deb -x "$tmp"/kubernetes-client_*.deb "$KUBECTL_DIR"
    rm -rf "$tmp"
  fi
fi
