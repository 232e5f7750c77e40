package lockkit

import (
	_ "embed"

	"github.com/lockkit/lockkit/internal/holder"
	"github.com/lockkit/lockkit/internal/policy"
	"github.com/redis/go-redis/v9"
)

var (
	//go:embed acquire.lua
	acquireBody   string
	acquireSrc    = policy.NextFenceLua + acquireBody
	acquireScript = redis.NewScript(acquireSrc)

	// Release and extend check the owner exactly: the value is the lease's
	// token, or its token followed by ';' and a holder description
	// (internal/holder owns that format and its owns() check).
	//go:embed release.lua
	releaseBody   string
	releaseSrc    = holder.OwnsLua + releaseBody
	releaseScript = redis.NewScript(releaseSrc)

	//go:embed extend.lua
	extendBody   string
	extendSrc    = holder.OwnsLua + extendBody
	extendScript = redis.NewScript(extendSrc)
)
