package exampleenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockkit/lockkit/lockkit"
	"github.com/lockkit/lockkit/postgres"
)

// pgEnv is the PostgreSQL side of an Env, when DATABASE_URL is set.
type pgEnv struct {
	cfg   *pgxpool.Config
	mu    sync.Mutex
	pools []*pgxpool.Pool
	conns map[*lockkit.Client]*connSet // a replica's connections, for Crash
}

// connSet is every connection a pool dialled, so that a crash can drop them
// the way a killed process's kernel does.
type connSet struct {
	mu    sync.Mutex
	conns []net.Conn
}

func (s *connSet) drop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		_ = c.Close()
	}
}

// openPostgres reads DATABASE_URL; nil when it is unset.
func openPostgres(out interface{ Write([]byte) (int, error) }) (*pgEnv, error) {
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		return nil, nil
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// The URL may hold a password: never echo it.
		return nil, errors.New("exampleenv: DATABASE_URL is not a PostgreSQL URL (postgres://user[:password]@host:port/db)")
	}
	fmt.Fprintf(out, "lockkit: using the PostgreSQL at %s:%d/%s (DATABASE_URL)\n", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
	return &pgEnv{cfg: cfg, conns: make(map[*lockkit.Client]*connSet)}, nil
}

// Postgres reports whether DATABASE_URL is set: the example then takes its
// locks (and keeps its data) in PostgreSQL.
func (e *Env) Postgres() bool { return e.pg != nil }

// NewPool returns a new pool on DATABASE_URL's server (one replica's), with
// at most maxConns connections. Close closes it.
func (e *Env) NewPool(ctx context.Context, maxConns int32) (*pgxpool.Pool, error) {
	pool, _, err := e.newPool(ctx, maxConns)
	return pool, err
}

func (e *Env) newPool(ctx context.Context, maxConns int32) (*pgxpool.Pool, *connSet, error) {
	if e.pg == nil {
		return nil, nil, errors.New("exampleenv: DATABASE_URL is not set")
	}
	cfg := e.pg.cfg.Copy()
	cfg.MaxConns = maxConns
	set := &connSet{}
	dial := cfg.ConnConfig.DialFunc
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err == nil {
			set.mu.Lock()
			set.conns = append(set.conns, c)
			set.mu.Unlock()
		}
		return c, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("exampleenv: PostgreSQL pool: %w", err)
	}
	e.pg.mu.Lock()
	e.pg.pools = append(e.pg.pools, pool)
	e.pg.mu.Unlock()
	return pool, set, nil
}

// NewPostgresClient returns a new replica on PostgreSQL: a lockkit client
// over a pool of its own, and the pool. Its spans go to TracerProvider and its
// log lines to Out.
func (e *Env) NewPostgresClient(ctx context.Context, opts ...lockkit.Option) (*lockkit.Client, *pgxpool.Pool, error) {
	pool, set, err := e.newPool(ctx, 4)
	if err != nil {
		return nil, nil, err
	}
	// lockkit's tables (fences and lease records), as an application's
	// migrations would create them; idempotent.
	if err := postgres.Migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, nil, err
	}
	all := append([]lockkit.Option{lockkit.WithLogger(e.log), lockkit.WithTracerProvider(e.TracerProvider)}, opts...)
	lk, err := lockkit.New(postgres.New(pool), all...)
	if err != nil {
		return nil, nil, err
	}
	e.mu.Lock()
	e.replicas = append(e.replicas, &replica{lk: lk})
	e.mu.Unlock()
	e.pg.mu.Lock()
	e.pg.conns[lk] = set
	e.pg.mu.Unlock()
	return lk, pool, nil
}

// crashPostgres drops c's connections as a killed process's kernel does.
func (e *Env) crashPostgres(c *lockkit.Client) bool {
	if e.pg == nil {
		return false
	}
	e.pg.mu.Lock()
	set := e.pg.conns[c]
	e.pg.mu.Unlock()
	if set == nil {
		return false
	}
	set.drop()
	return true
}

func (e *Env) closePostgres() {
	if e.pg == nil {
		return
	}
	e.pg.mu.Lock()
	pools := e.pg.pools
	e.pg.pools = nil
	e.pg.mu.Unlock()
	for _, p := range pools {
		p.Close()
	}
}
