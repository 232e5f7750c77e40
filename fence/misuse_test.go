package fence

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestMisuseIsAnError: nil and typed-nil clients, a nil *Error: each is an
// error that names the mistake, never a panic.
func TestMisuseIsAnError(t *testing.T) {
	ctx := context.Background()
	var nilClient *redis.Client
	var nilCluster *redis.ClusterClient
	for name, rdb := range map[string]redis.Scripter{"nil": nil, "typed-nil *redis.Client": nilClient, "typed-nil *redis.ClusterClient": nilCluster} {
		if err := Set(ctx, rdb, "k", "v", 1); err == nil || !strings.Contains(err.Error(), "the Redis client is nil") {
			t.Errorf("Set with a %s client: %v", name, err)
		}
		if _, _, err := Get(ctx, rdb, "k"); err == nil || !strings.Contains(err.Error(), "the Redis client is nil") {
			t.Errorf("Get with a %s client: %v", name, err)
		}
	}
	var nilDB *sql.DB
	var nilTx *sql.Tx
	tbl := Table{Table: "rooms", KeyColumn: "id"}
	for name, db := range map[string]Execer{"nil": nil, "typed-nil *sql.DB": nilDB, "typed-nil *sql.Tx": nilTx} {
		if err := tbl.Update(ctx, db, 1, 5, Column{Name: "guest", Value: "x"}); err == nil || !strings.Contains(err.Error(), "the Execer (db) is nil") {
			t.Errorf("Update with a %s Execer: %v", name, err)
		}
	}
	var e *Error
	if got := e.Error(); got == "" {
		t.Error("(*Error)(nil).Error() is empty")
	}
	if !errors.Is(e, ErrFenced) {
		t.Error("(*Error)(nil) does not match ErrFenced")
	}
}
