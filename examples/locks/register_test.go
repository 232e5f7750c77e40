package locks_test

import (
	"strings"
	"testing"

	_ "github.com/lockkit/lockkit/examples/locks"
	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/redis/go-redis/v9"
)

// The generated package registers its domains when it is initialized, so
// lockkit.New refuses a LOCKKIT_TTL_* override that names none of them (a
// typo would otherwise be ignored in silence) and accepts one that does.
func TestMistypedTTLOverrideRefused(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialed
	defer rdb.Close()

	t.Run("mistyped", func(t *testing.T) {
		t.Setenv("LOCKKIT_TTL_TABEL", "5s")
		_, err := lockkit.New(goredis.New(rdb))
		if err == nil || !strings.Contains(err.Error(), "LOCKKIT_TTL_TABEL names no lock domain") || !strings.Contains(err.Error(), "LOCKKIT_TTL_TABLE") {
			t.Fatalf("New with a mistyped override = %v; want an error naming it and the real variables", err)
		}
	})
	t.Run("declared", func(t *testing.T) {
		t.Setenv("LOCKKIT_TTL_USER_DIGEST", "5s")
		c, err := lockkit.New(goredis.New(rdb))
		if err != nil {
			t.Fatalf("New with an override of a declared domain: %v", err)
		}
		_ = c.Close(t.Context())
	})
}
