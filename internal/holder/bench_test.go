package holder

import (
	"context"
	"crypto/rand"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/redis/go-redis/v9"
)

// BenchmarkAcquireValue measures what writing the holder description in the
// lock's value costs on acquire, on a real redis-server, in one run:
//
//	token   today's value: SET key token NX PX
//	holder  SET key Encode(token, holder) NX PX, the description built on
//	        every acquire (host, pid, owner, a trace id)
//
// both as a plain SET and through the runtime's own acquire script
// (lockkit/acquire.lua, EVALSHA, without and with fencing). Every iteration
// takes a fresh key, so every SET succeeds; the token is made in the loop in
// both cases, as the runtime does.
//
//	go test -run '^$' -bench AcquireValue -benchmem ./internal/holder
func BenchmarkAcquireValue(b *testing.B) {
	testserver.RequireRedis(b)
	rdb := testserver.StartRedis(b).Client(b)
	ctx := context.Background()
	src, err := os.ReadFile("../../lockkit/acquire.lua")
	if err != nil {
		b.Fatal(err)
	}
	acquire := redis.NewScript(string(src))
	if err := acquire.Load(ctx, rdb).Err(); err != nil {
		b.Fatal(err)
	}
	host, _ := os.Hostname()
	pid := os.Getpid()
	traceID := "4bf92f3577b34da6a3ce929d0e0e4736"

	values := map[string]func() string{
		"token": func() string { return rand.Text() },
		"holder": func() string {
			return Encode(rand.Text(), Holder{Host: host, PID: pid, Owner: "billing-worker", TraceID: traceID})
		},
	}
	ops := []struct {
		name string
		do   func(key, value string) error
	}{
		{"SET", func(key, value string) error {
			ok, err := rdb.SetNX(ctx, key, value, 10*time.Second).Result()
			if err == nil && !ok {
				b.Fatal("not acquired")
			}
			return err
		}},
		{"script", func(key, value string) error {
			return acquire.EvalSha(ctx, rdb, []string{key}, value, 10000).Err()
		}},
		{"script-fencing", func(key, value string) error {
			return acquire.EvalSha(ctx, rdb, []string{key, key + ":fence"}, value, 10000).Err()
		}},
	}
	for _, op := range ops {
		for _, v := range []string{"token", "holder"} {
			b.Run(op.name+"/"+v, func(b *testing.B) {
				value := values[v]
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					if err := op.do("lock:{bench:"+strconv.Itoa(i)+"}", value()); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(len(value())), "value-bytes")
				if err := rdb.FlushAll(ctx).Err(); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

// BenchmarkAcquireValueInterleaved runs the two values alternately in one
// loop, on the runtime's acquire script, and reports each one's mean time
// and their ratio: the load of a shared machine then weighs on both alike.
//
//	go test -run '^$' -bench AcquireValueInterleaved -benchmem ./internal/holder
func BenchmarkAcquireValueInterleaved(b *testing.B) {
	testserver.RequireRedis(b)
	rdb := testserver.StartRedis(b).Client(b)
	ctx := context.Background()
	src, err := os.ReadFile("../../lockkit/acquire.lua")
	if err != nil {
		b.Fatal(err)
	}
	acquire := redis.NewScript(string(src))
	if err := acquire.Load(ctx, rdb).Err(); err != nil {
		b.Fatal(err)
	}
	host, _ := os.Hostname()
	h := Holder{Host: host, PID: os.Getpid(), Owner: "billing-worker", TraceID: "4bf92f3577b34da6a3ce929d0e0e4736"}
	for _, fencing := range []bool{false, true} {
		name := "script"
		if fencing {
			name = "script-fencing"
		}
		b.Run(name, func(b *testing.B) {
			var tokenNs, holderNs time.Duration
			do := func(key, value string) {
				keys := []string{key}
				if fencing {
					keys = append(keys, key+":fence")
				}
				if err := acquire.EvalSha(ctx, rdb, keys, value, 10000).Err(); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for i := range b.N {
				k := strconv.Itoa(i)
				start := time.Now()
				do("lock:{t:"+k+"}", rand.Text())
				mid := time.Now()
				do("lock:{h:"+k+"}", Encode(rand.Text(), h))
				end := time.Now()
				tokenNs += mid.Sub(start)
				holderNs += end.Sub(mid)
			}
			b.StopTimer()
			b.ReportMetric(float64(tokenNs.Nanoseconds())/float64(b.N), "token-ns/op")
			b.ReportMetric(float64(holderNs.Nanoseconds())/float64(b.N), "holder-ns/op")
			b.ReportMetric(float64(holderNs)/float64(tokenNs), "holder/token")
			if err := rdb.FlushAll(ctx).Err(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkEncode is the CPU cost of building a value with a description.
func BenchmarkEncode(b *testing.B) {
	h := Holder{Host: "web-1.prod.example.com", PID: 4242, Owner: "billing-worker", TraceID: "4bf92f3577b34da6a3ce929d0e0e4736"}
	tok := rand.Text()
	b.ReportAllocs()
	for range b.N {
		_ = Encode(tok, h)
	}
}
