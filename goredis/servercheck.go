package goredis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
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
			// A client of its own, with the caller's connection settings
			// (a failover client's dialer finds the primary): the
			// caller's hooks see only lockkit's lock commands. Fields
			// are copied one by one: go-redis rewrites some of its
			// options while connecting, so the struct is not copied.
			o := c.Options()
			own := redis.NewClient(&redis.Options{
				Network: o.Network, Addr: o.Addr, Dialer: o.Dialer, Protocol: o.Protocol,
				Username: o.Username, Password: o.Password, DB: o.DB, TLSConfig: o.TLSConfig,
				CredentialsProvider: o.CredentialsProvider, CredentialsProviderContext: o.CredentialsProviderContext,
				StreamingCredentialsProvider: o.StreamingCredentialsProvider,
				DialTimeout:                  o.DialTimeout, ContextTimeoutEnabled: true, PoolSize: 1, DisableIdentity: true,
				MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
			})
			defer own.Close()
			checkServer(ctx, own, cfg.Warn)
		case *redis.ClusterClient:
			_ = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
				checkServer(ctx, m, cfg.Warn)
				return nil
			})
		}
	}()
	return done
}

// checkServer checks one server: its version and its eviction policy.
func checkServer(ctx context.Context, c *redis.Client, warn func(string, ...any)) {
	node := c.Options().Addr
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
