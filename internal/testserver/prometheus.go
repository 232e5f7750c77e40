package testserver

import (
	"fmt"
	"os/exec"
	"testing"
)

const prometheusInstall = "apt-get install -y prometheus"

// RequirePromtool returns the path of promtool (Debian's prometheus package).
// When it is missing the test fails under CI=true and is skipped otherwise,
// with the install command.
func RequirePromtool(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		missing(t, fmt.Errorf("promtool not found in $PATH; install with: %s", prometheusInstall))
	}
	return p
}
