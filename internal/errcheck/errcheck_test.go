package errcheck

import (
	"errors"
	"fmt"
	"testing"
)

func TestReturnedReportsFormattingFaults(t *testing.T) {
	var seen []error
	Watch(func(err error) { seen = append(seen, err) })
	t.Cleanup(func() { Watch(nil) })
	var nilErr error
	faulty := []error{
		fmt.Errorf("stopped waiting: %w", nilErr),
		errors.New("count %!d(string=x)"),
		errors.Join(errors.New("fine"), fmt.Errorf("left: %w", nilErr)),
	}
	clean := []error{nil, errors.New("lockkit: lock not acquired"), fmt.Errorf("100%% sure: %w", errors.New("x"))}
	for _, err := range append(faulty, clean...) {
		if got := Returned(err); got != err { //nolint:errorlint // the same value
			t.Errorf("Returned(%v) = %v, want it unchanged", err, got)
		}
	}
	if len(seen) != len(faulty) {
		t.Fatalf("reported %v, want the %d faulty errors %v", seen, len(faulty), faulty)
	}
}
