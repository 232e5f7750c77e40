package jaegertest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// waitForBuild is what lets .ci/run build Jaeger beside the tests: a test
// that needs the binary waits for the build's status file, goes on when it
// says 0, and fails with the build's log otherwise, never waiting past its
// patience.
func TestWaitForBuild(t *testing.T) {
	t.Run("NoBuildRunning", func(t *testing.T) {
		if err := waitForBuild("", time.Millisecond); err != nil {
			t.Fatalf("no status file named: %v, want nil", err)
		}
	})
	t.Run("SucceedsLater", func(t *testing.T) {
		done := filepath.Join(t.TempDir(), "jaeger.done")
		go func() {
			time.Sleep(1500 * time.Millisecond)
			os.WriteFile(done, []byte("0\nbuild-jaeger: built in 500s\n"), 0o644)
		}()
		start := time.Now()
		if err := waitForBuild(done, time.Minute); err != nil {
			t.Fatalf("build succeeded: %v, want nil", err)
		}
		if waited := time.Since(start); waited < time.Second {
			t.Fatalf("returned after %v, before the status file was written", waited)
		}
	})
	t.Run("Failed", func(t *testing.T) {
		done := filepath.Join(t.TempDir(), "jaeger.done")
		os.WriteFile(done, []byte("1\ngo: module lookup disabled\n"), 0o644)
		err := waitForBuild(done, time.Minute)
		if err == nil || !strings.Contains(err.Error(), "exit status 1") ||
			!strings.Contains(err.Error(), "go: module lookup disabled") {
			t.Fatalf("failed build: %v, want its status and log", err)
		}
	})
	t.Run("NeverEnds", func(t *testing.T) {
		done := filepath.Join(t.TempDir(), "jaeger.done")
		err := waitForBuild(done, 1500*time.Millisecond)
		if err == nil || !strings.Contains(err.Error(), "had not ended") {
			t.Fatalf("no status file: %v, want a timeout naming it", err)
		}
	})
}
