package testserver

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"testing"
)

const (
	redisInstall    = "apt-get install -y redis-server redis-sentinel"
	postgresInstall = "apt-get install -y postgresql-15"
)

// redisBin finds one of redis-server, redis-sentinel, redis-cli (all three come with
// the install command in the error).
func redisBin(name string) (string, error) {
	p, err := lookBin(name)
	if err != nil {
		return "", fmt.Errorf("%s not found (looked in $PATH and /usr/bin); install with: %s", name, redisInstall)
	}
	return p, nil
}

func lookBin(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	p := filepath.Join("/usr/bin", name)
	if isExecutable(p) {
		return p, nil
	}
	return "", fmt.Errorf("%s not found", name)
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// PostgresBinDirEnv names an environment variable that, when set, is the directory holding
// initdb and postgres; otherwise the newest /usr/lib/postgresql/*/bin, then $PATH, is used.
const PostgresBinDirEnv = "LOCKKIT_PG_BIN"

var findPostgres = sync.OnceValues(func() (string, error) {
	var dirs []string
	if d := os.Getenv(PostgresBinDirEnv); d != "" {
		dirs = append(dirs, d)
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(matches, func(i, j int) bool { // newest major version first
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(matches[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(matches[j])))
		return vi > vj
	})
	dirs = append(dirs, matches...)
	if p, err := exec.LookPath("postgres"); err == nil {
		dirs = append(dirs, filepath.Dir(p))
	}
	for _, d := range dirs {
		if isExecutable(filepath.Join(d, "postgres")) && isExecutable(filepath.Join(d, "initdb")) {
			return d, nil
		}
	}
	return "", fmt.Errorf("PostgreSQL server binaries (initdb, postgres) not found (looked in $%s, "+
		"/usr/lib/postgresql/*/bin and $PATH); install with: %s", PostgresBinDirEnv, postgresInstall)
})

// RequireRedis makes sure redis-server is installed. When it is missing the test fails
// with the apt-get command to run, or is skipped if the CI environment variable is unset
// or false.
func RequireRedis(t testing.TB) { t.Helper(); requireRedisBin(t, "redis-server") }

// RequireSentinel makes sure redis-sentinel is installed, like RequireRedis.
func RequireSentinel(t testing.TB) { t.Helper(); requireRedisBin(t, "redis-sentinel") }

// RequireRedisCLI makes sure redis-cli (needed by StartCluster) is installed, like RequireRedis.
func RequireRedisCLI(t testing.TB) { t.Helper(); requireRedisBin(t, "redis-cli") }

func requireRedisBin(t testing.TB, name string) string {
	t.Helper()
	p, err := redisBin(name)
	if err != nil {
		missing(t, err)
	}
	return p
}

// RequirePostgres makes sure the PostgreSQL server binaries are installed, like RequireRedis.
func RequirePostgres(t testing.TB) {
	t.Helper()
	if _, err := findPostgres(); err != nil {
		missing(t, err)
	}
}

func missing(t testing.TB, err error) { t.Helper(); missingCI(t, os.Getenv("CI"), err) }

func missingCI(t testing.TB, ci string, err error) {
	t.Helper()
	msg := "testserver: " + err.Error()
	if skipMissing(ci) {
		t.Skip(msg + " (skipped because CI is not set; under CI=true this fails)")
	} else {
		t.Fatal(msg)
	}
}

// skipMissing reports whether a missing binary skips the test rather than failing it:
// only when CI is unset, empty, or explicitly false.
func skipMissing(ci string) bool {
	if ci == "" {
		return true
	}
	b, err := strconv.ParseBool(ci)
	return err == nil && !b
}
