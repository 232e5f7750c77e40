// Module binsize holds the two programs scripts/binsize.sh builds to compare
// binary sizes: lockkit/ (the runtime, through the replace below) and
// redislock/ (github.com/bsm/redislock). It is a separate module so that
// lockkit's go.mod never requires redislock. go-redis is pinned to the
// version lockkit's go.mod requires; scripts/binsize.sh checks that they agree.
module github.com/lockkit/lockkit/tools/binsize

go 1.26.0

require (
	github.com/bsm/redislock v0.9.4
	github.com/lockkit/lockkit v0.0.0
	github.com/redis/go-redis/v9 v9.23.0
)

require (
	github.com/cenkalti/backoff/v4 v4.3.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/sony/gobreaker/v2 v2.4.0 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel v1.47.0 // indirect
	go.opentelemetry.io/otel/log v1.47.0 // indirect
	go.opentelemetry.io/otel/metric v1.47.0 // indirect
	go.opentelemetry.io/otel/trace v1.47.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

replace github.com/lockkit/lockkit => ../..
