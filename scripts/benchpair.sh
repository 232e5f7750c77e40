#!/usr/bin/env bash
# benchpair.sh: run benchmarks interleaved and compare them as paired ratios.
#
#   scripts/benchpair.sh [-r ROUNDS] [-n ITERATIONS] PACKAGE BASE OTHER...
#
# BASE and each OTHER are full benchmark names (e.g. DoTelemetry/uninstrumented).
# The package's test binary is built once; then, ROUNDS times, each benchmark runs
# in its own process for ITERATIONS iterations, one after the other, in an order
# rotated every round. Every
# benchmark's ns/op is divided by BASE's from the same round, and the script
# prints, per benchmark, the median ns/op, B/op and allocs/op and the median of
# those paired ratios. On a shared machine whose speed drifts between runs, the
# paired ratio is the figure to read; a sequential -count run is not.
# A benchmark that reports cpu-µs/op (this process's CPU per operation) also
# gets the median of that and its paired ratio to BASE's.
set -euo pipefail

rounds=8
iters=10000
while getopts "r:n:" opt; do
	case $opt in
	r) rounds=$OPTARG ;;
	n) iters=$OPTARG ;;
	*)
		echo "usage: $0 [-r ROUNDS] [-n ITERATIONS] PACKAGE BASE OTHER..." >&2
		exit 2
		;;
	esac
done
shift $((OPTIND - 1))
if [ $# -lt 3 ]; then
	echo "usage: $0 [-r ROUNDS] [-n ITERATIONS] PACKAGE BASE OTHER..." >&2
	exit 2
fi
pkg=$1
shift

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go test -c -o "$work/bench.test" "$pkg"
dir=$(go list -f '{{.Dir}}' "$pkg")

names=("$@")
count=${#names[@]}
for ((r = 1; r <= rounds; r++)); do
	# Rotate the order each round, so no benchmark always runs first or last.
	for ((k = 0; k < count; k++)); do
		i=$(((k + r) % count))
		b=${names[$i]}
		pattern="^Benchmark${b%%/*}\$"
		if [[ $b == */* ]]; then
			pattern="$pattern/^${b#*/}\$"
		fi
		out=$(cd "$dir" && "$work/bench.test" -test.run '^$' -test.bench "$pattern" \
			-test.benchtime "${iters}x" -test.benchmem 2>/dev/null | grep '^Benchmark' || true)
		if [ -z "$out" ]; then
			echo "benchpair: $b printed no result (is the name right?)" >&2
			exit 1
		fi
		# round index ns B allocs cpu (fields found by their unit; cpu 0 when absent)
		awk -v r="$r" -v i="$i" '{
			ns = b = a = cpu = 0
			for (f = 3; f < NF; f++) {
				if ($(f + 1) == "ns/op") ns = $f
				if ($(f + 1) == "B/op") b = $f
				if ($(f + 1) == "allocs/op") a = $f
				if ($(f + 1) == "cpu-µs/op") cpu = $f
			}
			print r, i, ns, b, a, cpu
		}' <<<"$out" >>"$work/results"
	done
	echo "round $r/$rounds done" >&2
done

for ((i = 0; i < count; i++)); do
	awk -v i="$i" '
		$2 == 0 { base[$1] = $3; cpubase[$1] = $6 }
		$2 == i { ns[$1] = $3; bytes = $4; allocs = $5; cpu[$1] = $6 }
		function median(a,   n, k, v, j, t) {
			n = 0
			for (k in a) v[++n] = a[k]
			for (k = 2; k <= n; k++) { t = v[k]; for (j = k - 1; j > 0 && v[j] > t; j--) v[j + 1] = v[j]; v[j + 1] = t }
			return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
		}
		END {
			for (k in ns) ratio[k] = ns[k] / base[k]
			printf "%-40s median %9.0f ns/op %7s B/op %4s allocs/op  paired ratio %.3f", name, median(ns), bytes, allocs, median(ratio)
			hascpu = 0
			for (k in cpu) if (cpu[k] > 0 && cpubase[k] > 0) { cratio[k] = cpu[k] / cpubase[k]; hascpu = 1 }
			if (hascpu) printf "  %7.2f cpu-µs/op  cpu ratio %.3f", median(cpu), median(cratio)
			printf "\n"
		}' name="${names[$i]}" "$work/results"
done
