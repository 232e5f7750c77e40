package driver_test

import (
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"

	"github.com/lockkit/lockkit/driver"
)

// A third party writes a backend against package driver alone: it must link
// nothing but the standard library (no lockkit, no store client).
func TestDriverIsStdlibOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "github.com/lockkit/lockkit/driver").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if p != "github.com/lockkit/lockkit/driver" {
			t.Errorf("package driver depends on %s; it must use the standard library only", p)
		}
	}
}

// Failure and Capacity mark an error for the Client's breaker without
// changing its message or hiding its chain.
func TestMarks(t *testing.T) {
	cause := io.ErrUnexpectedEOF
	for _, c := range []struct {
		mark      func(error) error
		is, isNot error
	}{
		{driver.Failure, driver.ErrFailure, driver.ErrCapacity},
		{driver.Capacity, driver.ErrCapacity, driver.ErrFailure},
	} {
		err := c.mark(cause)
		if !errors.Is(err, c.is) || !errors.Is(err, cause) || errors.Is(err, c.isNot) {
			t.Errorf("%v: Is(%v)=%v Is(cause)=%v Is(%v)=%v; want true, true, false", err, c.is, errors.Is(err, c.is), errors.Is(err, cause), c.isNot, errors.Is(err, c.isNot))
		}
		if err.Error() != cause.Error() {
			t.Errorf("marked message %q; want the cause's %q", err.Error(), cause.Error())
		}
		if c.mark(nil) != nil {
			t.Error("marking nil gave an error")
		}
	}
}
