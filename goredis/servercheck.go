package goredis

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lockkit/lockkit/driver"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// minRedisVersion is the oldest Redis lockkit supports (README.md,
// "Requirements": sharded Pub/Sub, SPUBLISH, came in 7.0).
var minRedisVersion = [2]int{7, 0}

// serverCheckTimeout bounds the background server check at New: it may
// have to dial first, and it delays nothing.
const serverCheckTimeout = 5 * time.Second

// checkServers warns, through the Client's logger, about Redis settings
// that break lock promises, once at New and in the background (New never
// waits for Redis; when Redis does not answer within serverCheckTimeout
// nothing is said). It is best effort: CONFIG may be disabled (managed
// Redis services often rename it), and then the warning says the policy
// could not be read. On a Cluster every master is checked. The channel
// is closed once the check is over (for tests).
func checkServers(rdb redis.UniversalClient, cfg driver.Config) <-chan struct{} {
	done := make(chan struct{})
	if cfg.Warn == nil {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), serverCheckTimeout)
		defer cancel()
		switch c := rdb.(type) {
		case *redis.Client:
			checkServer(ctx, c.Options(), cfg.Warn)
		case *redis.ClusterClient:
			_ = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
				checkServer(ctx, m.Options(), cfg.Warn)
				return nil
			})
		}
	}()
	return done
}

// checkServer checks one server, o's, on a connection of its own: its
// version and its eviction policy. The connection is dialed first with o's
// own dialer (a failover client's finds the primary), so a server that
// refuses it costs no "failed to dial" line from go-redis's pool (its
// process-wide logger) and no command of the caller's client (on a
// Cluster, only the master list comes from its slot map): the caller's
// hooks and pool see only lockkit's lock commands, and no breaker counts
// the check. The client over that connection copies o's fields
// one by one (go-redis rewrites some of its options while connecting, so
// the struct is not copied) and honours ctx's deadline.
func checkServer(ctx context.Context, o *redis.Options, warn func(string, ...any)) {
	if o.Dialer == nil {
		return
	}
	conn, err := o.Dialer(ctx, o.Network, o.Addr)
	if err != nil {
		return // down or slow: the lock calls say so
	}
	var given atomic.Bool
	c := redis.NewClient(&redis.Options{
		Network: o.Network, Addr: o.Addr, Protocol: o.Protocol,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if given.CompareAndSwap(false, true) {
				return conn, nil
			}
			return o.Dialer(ctx, network, addr)
		},
		Username: o.Username, Password: o.Password, DB: o.DB, TLSConfig: o.TLSConfig,
		CredentialsProvider: o.CredentialsProvider, CredentialsProviderContext: o.CredentialsProviderContext,
		StreamingCredentialsProvider: o.StreamingCredentialsProvider,
		DialTimeout:                  o.DialTimeout, ContextTimeoutEnabled: true, PoolSize: 1, MaxRetries: -1, DisableIdentity: true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	defer func() {
		_ = c.Close()
		if given.CompareAndSwap(false, true) {
			_ = conn.Close()
		}
	}()
	node := o.Addr
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return // down or slow: the lock calls say so
	}
	if msg := versionWarning(infoField(info, "redis_version")); msg != "" {
		warn(msg, "node", node)
	}
	policy, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil || policy["maxmemory-policy"] == "" {
		if ctx.Err() == nil {
			warn("lockkit: could not read the server's maxmemory-policy (CONFIG GET is disabled or refused); make sure it is noeviction, as any other policy may evict a held lock's key (docs/deployments.md#redis-settings)",
				"node", node, "error", err)
		}
		return
	}
	if msg := evictionWarning(policy["maxmemory-policy"]); msg != "" {
		warn(msg, "node", node)
	}
}

// evictionWarning is the warning for an eviction policy that can delete a
// held lock's key, or "" for noeviction. Every lock key has a TTL, so the
// volatile-* policies can evict it as well as the allkeys-* ones.
func evictionWarning(policy string) string {
	if policy == "noeviction" {
		return ""
	}
	return fmt.Sprintf("lockkit: the server's maxmemory-policy is %s: once it reaches maxmemory it may evict a held lock's key, and another caller then takes the lock while its holder still relies on it; set maxmemory-policy noeviction (docs/deployments.md#redis-settings)", policy)
}

// versionWarning is the warning for a Redis older than minRedisVersion, or
// "" (also when version cannot be read).
func versionWarning(version string) string {
	parts := strings.SplitN(version, ".", 3)
	if len(parts) < 2 {
		return ""
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return ""
	}
	if major > minRedisVersion[0] || major == minRedisVersion[0] && minor >= minRedisVersion[1] {
		return ""
	}
	return fmt.Sprintf("lockkit: the server runs Redis %s, older than the minimum %d.%d that lockkit supports (README.md#requirements); some lock operations may fail", version, minRedisVersion[0], minRedisVersion[1])
}

// infoField is one field of an INFO reply ("name:value" lines).
func infoField(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
