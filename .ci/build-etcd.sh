#!/usr/bin/env bash
# Builds the etcd server binary that the etcd tests run
# (internal/testserver), from the pinned tools module in tools/etcd.
#
#   bash .ci/build-etcd.sh            # build into the cache dir unless already up to date
#   LOCKKIT_TOOLS_BIN=/some/dir bash .ci/build-etcd.sh
#
# The binary goes to ${LOCKKIT_TOOLS_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/lockkit/bin}/etcd,
# with etcd.stamp beside it: a hash of tools/etcd/go.mod, go.sum, main.go and the
# Go version. When the stamp matches, the build is skipped, so CI pays for it once per
# machine (a cold build takes a few minutes on 2 cores; see tools/etcd/go.mod).
# It prints the binary's path on its last line.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mod_dir=$root/tools/etcd
bin_dir=${LOCKKIT_TOOLS_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/lockkit/bin}
bin=$bin_dir/etcd
stamp=$bin_dir/etcd.stamp

want=$(
	cd "$mod_dir"
	{ cat go.mod go.sum main.go; go env GOVERSION GOOS GOARCH; } | sha256sum | cut -d' ' -f1
)

if [[ -x $bin && -f $stamp && $(<"$stamp") == "$want" ]]; then
	echo "build-etcd: up to date" >&2
	echo "$bin"
	exit 0
fi

mkdir -p "$bin_dir"
# Build to a temporary name and rename, so a concurrent or interrupted build never
# leaves a half-written binary under the final name.
tmp=$(mktemp "$bin_dir/.etcd.XXXXXX")
trap 'rm -f "$tmp"' EXIT

echo "build-etcd: building tools/etcd (go.etcd.io/etcd/server/v3 etcdmain; a minute or two the first time)" >&2
start=$SECONDS
(
	cd "$mod_dir"
	CGO_ENABLED=0 go build -mod=readonly -buildvcs=false -trimpath -ldflags='-s -w' \
		-o "$tmp" .
)
chmod 0755 "$tmp"
mv -f "$tmp" "$bin"
echo "$want" >"$stamp"
echo "build-etcd: built in $((SECONDS - start))s" >&2
echo "$bin"
