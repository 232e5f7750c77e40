package lockkit

import (
	"fmt"

	"github.com/lockkit/lockkit/internal/policy"
)

// checkKind reports a domain kind that the client's backend cannot serve,
// naming the backend: Client.Domain refuses such a domain. Locks and
// semaphores (whose permits are locks) run on every backend.
func (c *Client) checkKind(kind string) error {
	switch kind {
	case "", policy.KindLock, policy.KindSemaphore:
		return nil
	case policy.KindElection:
		return nil // what an election needs of the backend is declared with it
	}
	return fmt.Errorf("kind %q is not served by the %s backend", kind, c.kind)
}
