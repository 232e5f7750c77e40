package testserver

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMain checks, after all tests, that no server process and no goroutine of this
// package or of go-redis is left behind.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := checkLeaks(); err != nil {
			fmt.Fprintln(os.Stderr, "leak check:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func checkLeaks() error {
	deadline := time.Now().Add(3 * time.Second)
	for {
		err := leaks()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func leaks() error {
	if kids := children(); len(kids) > 0 {
		return fmt.Errorf("child processes still running: %v", kids)
	}
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "testserver.TestMain") || strings.Contains(g, "testserver.checkLeaks") {
			continue
		}
		if strings.Contains(g, "internal/testserver.") || strings.Contains(g, "github.com/redis/go-redis") ||
			strings.Contains(g, "github.com/jackc/pgx") {
			return fmt.Errorf("goroutine left behind:\n%s", g)
		}
	}
	return nil
}

// children lists the PIDs of this process's children, un-reaped zombies included, from /proc.
func children() []int { return childPIDs(os.Getpid()) }

// assertGone fails the test unless pid no longer exists.
func assertGone(t testing.TB, what string, pid int) {
	t.Helper()
	if !pidGone(pid) {
		t.Errorf("%s: pid %d still exists after cleanup", what, pid)
	}
}
