package obs

import (
	"go.opentelemetry.io/otel/attribute"

	"github.com/lockkit/lockkit/telemetry"
)

// The number of outcomes and lost causes: telemetry's last constant of each
// plus one. TestOutcomeRange fails if telemetry gains a constant after them.
const (
	numOutcomes   = int(telemetry.OutcomeLost) + 1
	numLostCauses = int(telemetry.LostMaxHold) + 1
)

// validOutcome is o, or OutcomeError when o is out of range: the same rule as
// Outcome.String.
func validOutcome(o telemetry.Outcome) telemetry.Outcome {
	if int(o) >= numOutcomes {
		return telemetry.OutcomeError
	}
	return o
}

func validCause(c telemetry.LostCause) telemetry.LostCause {
	if int(c) >= numLostCauses {
		return telemetry.LostRefused
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
		outcomeAttrs[o] = telemetry.AttrOutcome.String(telemetry.Outcome(o).String())
		errorTypeAttrs[o] = telemetry.AttrErrorType.String(telemetry.Outcome(o).ErrorType())
	}
	for c := range numLostCauses {
		lostCauseAttrs[c] = telemetry.AttrLostCause.String(telemetry.LostCause(c).String())
	}
}
