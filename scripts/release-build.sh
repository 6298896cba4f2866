#!/usr/bin/env sh
# The one release build of berth: a static binary (no cgo), trimmed paths,
# version and commit stamped. The Dockerfile and .ci/run both run this file,
# so the image's build cannot drift from what CI checks.
#
#   scripts/release-build.sh [output]          (default ./.bin/berth)
#   BERTH_VERSION=v1.4.0 BERTH_COMMIT=<sha> scripts/release-build.sh
set -eu
cd "$(dirname "$0")/.."
out=${1:-.bin/berth}
version=${BERTH_VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
commit=${BERTH_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
mkdir -p "$(dirname "$out")"
CGO_ENABLED=0 go build -trimpath -buildvcs=false \
  -ldflags "-s -w -X main.version=${version} -X main.commit=${commit}" \
  -o "$out" ./cmd/berth
