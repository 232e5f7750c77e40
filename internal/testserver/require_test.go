package testserver

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// fakeTB records Skip and Fatal and then ends the goroutine with runtime.Goexit, like
// the real ones; use it through runFake.
type fakeTB struct {
	testing.TB
	skip, fatal string
}

func (f *fakeTB) Helper()          {}
func (f *fakeTB) Skip(args ...any) { f.skip = fmt.Sprint(args...); runtime.Goexit() }
func (f *fakeTB) Fatal(args ...any) {
	f.fatal = fmt.Sprint(args...)
	runtime.Goexit()
}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// runFake runs fn on its own goroutine with a fakeTB wrapping t and returns the record.
func runFake(t testing.TB, fn func(testing.TB)) *fakeTB {
	f := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return f
}

func TestSkipMissing(t *testing.T) {
	t.Parallel()
	for ci, want := range map[string]bool{"": true, "false": true, "0": true, "true": false, "1": false, "yes": false} {
		if got := skipMissing(ci); got != want {
			t.Errorf("skipMissing(CI=%q) = %v, want %v", ci, got, want)
		}
	}
}

func TestMissingFailsUnderCI(t *testing.T) {
	t.Parallel()
	_, err := redisBin("redis-server-that-does-not-exist")
	if err == nil {
		t.Fatal("found a binary that does not exist")
	}
	ci := runFake(t, func(tb testing.TB) { missingCI(tb, "true", err) })
	if ci.skip != "" || !strings.Contains(ci.fatal, "apt-get install -y redis-server redis-sentinel") {
		t.Errorf("CI=true: skip %q, fatal %q; want a failure naming the install command", ci.skip, ci.fatal)
	}
	local := runFake(t, func(tb testing.TB) { missingCI(tb, "", err) })
	if local.fatal != "" || !strings.Contains(local.skip, "apt-get install -y redis-server redis-sentinel") {
		t.Errorf("CI unset: skip %q, fatal %q; want a skip naming the install command", local.skip, local.fatal)
	}
	if postgresInstall != "apt-get install -y postgresql-15" {
		t.Errorf("postgresInstall = %q", postgresInstall)
	}
}

func TestBinariesFound(t *testing.T) {
	t.Parallel()
	RequireRedis(t)
	RequireSentinel(t)
	RequireRedisCLI(t)
	RequirePostgres(t)
}
