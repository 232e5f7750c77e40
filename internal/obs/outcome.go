package obs

import (
	"go.opentelemetry.io/otel/attribute"

	"github.com/lockkit/lockkit/internal/telnames"
)

// The number of outcomes and lost causes: telemetry's counts of each.
// TestOutcomeRange ties them to telemetry's String.
const (
	numOutcomes   = int(telnames.NumOutcomes)
	numLostCauses = int(telnames.NumLostCauses)
)

// validOutcome is o, or OutcomeError when o is out of range: the same rule as
// Outcome.String.
func validOutcome(o telnames.Outcome) telnames.Outcome {
	if int(o) >= numOutcomes {
		return telnames.OutcomeError
	}
	return o
}

func validCause(c telnames.LostCause) telnames.LostCause {
	if int(c) >= numLostCauses {
		return telnames.LostRefused
	}
	return c
}

// Attribute values built once, indexed by outcome and cause.
var (
	outcomeAttrs   [numOutcomes]attribute.KeyValue
	errorTypeAttrs [numOutcomes]attribute.KeyValue
	lostCauseAttrs [numLostCauses]attribute.KeyValue
)

func init() {
	for o := range numOutcomes {
		outcomeAttrs[o] = telnames.AttrOutcome.String(telnames.Outcome(o).String())
		errorTypeAttrs[o] = telnames.AttrErrorType.String(telnames.Outcome(o).ErrorType())
	}
	for c := range numLostCauses {
		lostCauseAttrs[c] = telnames.AttrLostCause.String(telnames.LostCause(c).String())
	}
}
