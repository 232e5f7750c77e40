#!/usr/bin/env bash
# Binary size: builds two ten-line programs with the same flags and prints
# their sizes and the ratio. tools/binsize/lockkit calls lockkit.New over a
# go-redis client; tools/binsize/redislock does the same with
# github.com/bsm/redislock. Both live in the tools/binsize module (so
# lockkit's go.mod never requires redislock), on the go-redis version that
# lockkit's go.mod requires. The target is a ratio of at most 1.3.
#
#   bash scripts/binsize.sh            # default flags: -trimpath
#   bash scripts/binsize.sh -ldflags='-s -w'   # more go build flags, for both
#
# Exit status: 0 when the ratio is at most MAX_RATIO (default 1.3), 1 when
# above, 2 when a build fails or go-redis versions disagree.
set -euo pipefail
cd "$(dirname "$0")/.."

max=${MAX_RATIO:-1.3}
want=$(go list -m -f '{{.Version}}' github.com/redis/go-redis/v9)
got=$(cd tools/binsize && go list -m -f '{{.Version}}' github.com/redis/go-redis/v9)
if [ "$want" != "$got" ]; then
  echo "binsize: tools/binsize builds with go-redis $got, lockkit requires $want; pin it in tools/binsize/go.mod" >&2
  exit 2
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
flags=(-trimpath "$@")
for prog in lockkit redislock; do
  (cd tools/binsize && go build "${flags[@]}" -o "$out/$prog" "./$prog") || exit 2
done

size() { stat -c %s "$1" 2>/dev/null || stat -f %z "$1"; }
lk=$(size "$out/lockkit")
rl=$(size "$out/redislock")
echo "go: $(go env GOVERSION) $(go env GOOS)/$(go env GOARCH); go-redis $want; flags: ${flags[*]}"
awk -v lk="$lk" -v rl="$rl" -v max="$max" 'BEGIN {
  printf "lockkit    %10d bytes  %6.1f MB\n", lk, lk / 1e6
  printf "redislock  %10d bytes  %6.1f MB\n", rl, rl / 1e6
  r = lk / rl
  printf "ratio      %.2f (target <= %s)\n", r, max
  exit (r > max) ? 1 : 0
}'
