package telnames

import "testing"

func TestOutcomes(t *testing.T) {
	seen := map[string]bool{}
	for o := range NumOutcomes {
		s := o.String()
		if s == "" || seen[s] {
			t.Errorf("outcome %d: name %q empty or duplicate", o, s)
		}
		seen[s] = true
		if o.Failure() != (o.ErrorType() != "") {
			t.Errorf("%s: Failure %v but ErrorType %q", s, o.Failure(), o.ErrorType())
		}
	}
	notFailures := map[Outcome]bool{OutcomeAcquired: true, OutcomeContended: true, OutcomeCanceled: true, OutcomeOK: true, OutcomeReleased: true}
	for o := range NumOutcomes {
		if o.Failure() == notFailures[o] {
			t.Errorf("%s: Failure() = %v", o, o.Failure())
		}
	}
	var zero Outcome
	if zero != OutcomeError || !zero.Failure() || zero.ErrorType() != "_OTHER" {
		t.Error("the zero Outcome must be a failure")
	}
	if Outcome(200).String() != "error" || LostCause(200).String() != "refused" {
		t.Error("out-of-range values are not mapped")
	}
	if OutcomeBreakerOpen.ErrorType() != "breaker_open" || OutcomeAcquired.ErrorType() != "" {
		t.Error("ErrorType")
	}
}
