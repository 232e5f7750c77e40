package policy

import (
	"fmt"
	"math"
)

// MaxCount is the largest count a domain may set (retry attempts,
// replicas, permits): the largest int of 32-bit Go targets (GOARCH=386, arm), so
// that generated code, which writes the count as an int constant, builds on
// every target.
const MaxCount = math.MaxInt32

// CheckCount reports a count above MaxCount.
func CheckCount(name string, n int64) error {
	if n > MaxCount {
		return fmt.Errorf("%s must be at most %d, the largest int of 32-bit Go targets (got %d)", name, MaxCount, n)
	}
	return nil
}
