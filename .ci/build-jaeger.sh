#!/usr/bin/env bash
# Builds the Jaeger v2 all-in-one binary that the end-to-end telemetry tests run
# (internal/jaegertest), from the pinned tools module in tools/jaeger.
#
#   bash .ci/build-jaeger.sh            # build into the cache dir unless already up to date
#   LOCKKIT_TOOLS_BIN=/some/dir bash .ci/build-jaeger.sh
#
# The binary goes to ${LOCKKIT_TOOLS_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/lockkit/bin}/jaeger,
# with jaeger.stamp beside it: a hash of tools/jaeger/go.mod, tools/jaeger/go.sum and the
# Go version. When the stamp matches, the build is skipped, so CI pays for it once per
# machine (a cold build takes a few minutes on 2 cores; see tools/jaeger/go.mod).
# It prints the binary's path on its last line.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mod_dir=$root/tools/jaeger
bin_dir=${LOCKKIT_TOOLS_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/lockkit/bin}
bin=$bin_dir/jaeger
stamp=$bin_dir/jaeger.stamp

want=$(
	cd "$mod_dir"
	{ cat go.mod go.sum; go env GOVERSION GOOS GOARCH; } | sha256sum | cut -d' ' -f1
)

if [[ -x $bin && -f $stamp && $(<"$stamp") == "$want" ]]; then
	echo "build-jaeger: up to date" >&2
	echo "$bin"
	exit 0
fi

mkdir -p "$bin_dir"
# Build to a temporary name and rename, so a concurrent or interrupted build never
# leaves a half-written binary under the final name.
tmp=$(mktemp "$bin_dir/.jaeger.XXXXXX")
trap 'rm -f "$tmp"' EXIT

echo "build-jaeger: building github.com/jaegertracing/jaeger/cmd/jaeger (this takes a few minutes the first time)" >&2
start=$SECONDS
(
	cd "$mod_dir"
	CGO_ENABLED=0 go build -mod=readonly -buildvcs=false -trimpath -ldflags='-s -w' \
		-o "$tmp" github.com/jaegertracing/jaeger/cmd/jaeger
)
chmod 0755 "$tmp"
mv -f "$tmp" "$bin"
echo "$want" >"$stamp"
echo "build-jaeger: built in $((SECONDS - start))s" >&2
echo "$bin"
