package obs

import (
	"testing"

	"github.com/lockkit/lockkit/telemetry"
)

// TestOutcomeRange ties numOutcomes and numLostCauses to telemetry's
// constants: a value one past the range must be out of telemetry's range too
// (it names the zero value).
func TestOutcomeRange(t *testing.T) {
	if got, want := telemetry.Outcome(numOutcomes).String(), telemetry.OutcomeError.String(); got != want {
		t.Errorf("Outcome(%d) is %q: telemetry has an outcome after OutcomeLost; update numOutcomes", numOutcomes, got)
	}
	if got, want := telemetry.LostCause(numLostCauses).String(), telemetry.LostRefused.String(); got != want {
		t.Errorf("LostCause(%d) is %q: telemetry has a cause after LostDeadline; update numLostCauses", numLostCauses, got)
	}
}
