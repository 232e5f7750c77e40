package lockkit

import (
	"os/exec"
	"strings"
	"testing"
)

// Package lockkit must not link pgx: programs on Redis would pay for it in
// binary size. The PostgreSQL backend lives in package postgres.
func TestNoPgxDependency(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/lockkit/lockkit/lockkit").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps listed %d packages; want lockkit's whole closure:\n%s", len(deps), out)
	}
	for _, p := range deps {
		if strings.HasPrefix(p, "github.com/jackc/pgx") || strings.HasPrefix(p, "github.com/lockkit/lockkit/internal/pgbackend") {
			t.Errorf("package lockkit depends on %s; keep PostgreSQL in package postgres", p)
		}
	}
}
