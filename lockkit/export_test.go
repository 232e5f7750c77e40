package lockkit

import "testing"

// RestoreRegisteredAfter puts the registry of declared domains back as it is
// now when t ends, for a test that registers domains New would refuse.
func RestoreRegisteredAfter(t testing.TB) {
	registered.Lock()
	saved := registered.domains
	savedEnv := make(map[string]string, len(registered.byEnv))
	for k, v := range registered.byEnv {
		savedEnv[k] = v
	}
	savedOverlaps := registered.overlaps
	registered.Unlock()
	t.Cleanup(func() {
		registered.Lock()
		defer registered.Unlock()
		registered.domains, registered.byEnv, registered.overlaps = saved, savedEnv, savedOverlaps
	})
}
