package obs

import (
	"testing"

	"github.com/lockkit/lockkit/internal/telnames"
)

// TestOutcomeRange ties numOutcomes and numLostCauses to telemetry's
// constants: a value one past the range must be out of telemetry's range too
// (it names the zero value).
func TestOutcomeRange(t *testing.T) {
	if got, want := telnames.Outcome(numOutcomes).String(), telnames.OutcomeError.String(); got != want {
		t.Errorf("Outcome(%d) is %q: telemetry has an outcome after OutcomeLost; update numOutcomes", numOutcomes, got)
	}
	if got, want := telnames.LostCause(numLostCauses).String(), telnames.LostRefused.String(); got != want {
		t.Errorf("LostCause(%d) is %q: telemetry has a cause after LostDeadline; update numLostCauses", numLostCauses, got)
	}
}
