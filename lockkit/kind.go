package lockkit

import (
	"fmt"

	"github.com/lockkit/lockkit/internal/policy"
)

// checkKind reports a domain kind that the client's backend cannot serve,
// naming the backend: Client.Domain refuses such a domain. Locks and
// semaphores (whose permits are locks) run on every backend; an election
// needs a backend that reads a key's holder (driver.HolderReader).
func (c *Client) checkKind(kind string) error {
	switch kind {
	case "", policy.KindLock, policy.KindSemaphore:
		return nil
	case policy.KindElection:
		if c.holders == nil {
			return c.noHolders()
		}
		return nil
	}
	return fmt.Errorf("kind %q is not served by the %s backend", kind, c.kind)
}
