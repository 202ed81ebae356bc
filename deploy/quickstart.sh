#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The main job, from a fresh Debian 12 machine: install what is missing, build, start
# vmspaced, run the seed-004 stress workload through gRPC (stream transport, batched),
# print the summary, and leave the daemon running so /metrics can be scraped.
# Usage: bash deploy/quickstart.sh [extra `vmspace bench stress` options]
# Environment: VMSPACE_LISTEN (default 127.0.0.1:50051), VMSPACE_METRICS (default
# 127.0.0.1:9464), ROUNDS (default 20000).
set -euo pipefail
cd "$(dirname "$0")/.."
LISTEN=${VMSPACE_LISTEN:-127.0.0.1:50051}
METRICS=${VMSPACE_METRICS:-127.0.0.1:9464}
ROUNDS=${ROUNDS:-20000}
bash deploy/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target vmspaced vmspace

mkdir -p build/run
if [ -f build/run/vmspaced.pid ] && kill -0 "$(cat build/run/vmspaced.pid)" 2>/dev/null; then
  echo "quickstart: stopping the vmspaced started earlier (pid $(cat build/run/vmspaced.pid))" >&2
  kill "$(cat build/run/vmspaced.pid)"; sleep 2
fi
./build/server/vmspaced --listen "$LISTEN" --metrics-listen "$METRICS" 2> build/run/vmspaced.log &
echo $! > build/run/vmspaced.pid
for _ in $(seq 50); do
  grep -q "listening" build/run/vmspaced.log 2>/dev/null && break
  kill -0 "$(cat build/run/vmspaced.pid)" 2>/dev/null || { cat build/run/vmspaced.log >&2; exit 1; }
  sleep 0.1
done
echo "quickstart: vmspaced running (pid $(cat build/run/vmspaced.pid)), log build/run/vmspaced.log" >&2

./build/client/vmspace --target "$LISTEN" bench stress --transport stream --batch 256 \
  --rounds "$ROUNDS" --page-fault "$@"

cat <<MSG

Metrics: http://$METRICS/metrics   (try: curl -s http://$METRICS/metrics | grep vmspace_)
The daemon keeps running; stop it with: kill \$(cat build/run/vmspaced.pid)
MSG
