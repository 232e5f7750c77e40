package telnames

// Outcome is how an acquire, renew, release or hold ended. It is recorded as the
// lockkit.outcome attribute of spans and metrics. Each constant says which operations
// use it and whether it is a failure (error span status and error.type).
//
// The zero Outcome is OutcomeError, so an outcome the caller forgot to set shows up
// as a failure rather than as a success.
type Outcome uint8

// The outcomes.
const (
	// OutcomeError is any other failure (error.type "_OTHER"). Any operation.
	OutcomeError Outcome = iota
	// OutcomeAcquired: the lease was granted. Acquire.
	OutcomeAcquired
	// OutcomeContended: a single attempt (TryDo, TryAcquire) found the lock held.
	// Acquire and hold. Not a failure: the caller asked whether it is free.
	OutcomeContended
	// OutcomeExhausted: the domain's max attempts were made and the lock was still
	// held (ErrNotAcquired after retries). Acquire and hold. Failure.
	OutcomeExhausted
	// OutcomeTimeout: the domain's max wait or the caller's ctx deadline passed before
	// the lock was acquired. Acquire and hold. Failure.
	OutcomeTimeout
	// OutcomeCanceled: the caller's ctx was canceled. Any operation. Not a failure:
	// the caller gave up.
	OutcomeCanceled
	// OutcomeUnavailable: the backend failed (network, timeout, LOADING, READONLY,
	// ...): ErrUnavailable. Any operation. Failure.
	OutcomeUnavailable
	// OutcomeBreakerOpen: the circuit breaker was open, no call was made. Any
	// operation. Failure.
	OutcomeBreakerOpen
	// OutcomeClosed: the client was closed (ErrClosed). Any operation. Failure.
	OutcomeClosed
	// OutcomeOK: the lease was extended. Renew.
	OutcomeOK
	// OutcomeRefused: the extend was refused because the key is no longer ours; the
	// lease is lost. Renew. Failure.
	OutcomeRefused
	// OutcomeReleased: the lease was released while still ours. Release and hold.
	OutcomeReleased
	// OutcomeExpired: at release the key was no longer ours (ErrNotHeld): the lease
	// lapsed during the hold. Release and hold. Failure.
	OutcomeExpired
	// OutcomeLost: the lease was lost while held (ErrLockLost). Hold. Failure.
	OutcomeLost

	NumOutcomes // keep last
)

var outcomeNames = [NumOutcomes]string{
	OutcomeError:       "error",
	OutcomeAcquired:    "acquired",
	OutcomeContended:   "contended",
	OutcomeExhausted:   "exhausted",
	OutcomeTimeout:     "timeout",
	OutcomeCanceled:    "canceled",
	OutcomeUnavailable: "unavailable",
	OutcomeBreakerOpen: "breaker_open",
	OutcomeClosed:      "closed",
	OutcomeOK:          "ok",
	OutcomeRefused:     "refused",
	OutcomeReleased:    "released",
	OutcomeExpired:     "expired",
	OutcomeLost:        "lost",
}

// String returns the outcome's attribute value ("acquired", "breaker_open", ...).
func (o Outcome) String() string { return outcomeNames[o.valid()] }

// Failure reports whether the outcome is a real failure: one that sets the span
// status to Error and the error.type attribute. Success, contention in a single
// attempt, and caller cancellation are not failures.
func (o Outcome) Failure() bool {
	switch o.valid() {
	case OutcomeAcquired, OutcomeContended, OutcomeCanceled, OutcomeOK, OutcomeReleased:
		return false
	}
	return true
}

// ErrorType returns the error.type value of a failure: the outcome's name, or
// "_OTHER" for OutcomeError; "" when the outcome is not a failure.
func (o Outcome) ErrorType() string {
	switch {
	case !o.Failure():
		return ""
	case o.valid() == OutcomeError:
		return ErrorTypeAny
	}
	return o.String()
}

// valid maps out-of-range values to OutcomeError, so a bad value never panics.
func (o Outcome) valid() Outcome {
	if o >= NumOutcomes {
		return OutcomeError
	}
	return o
}

// LostCause is why a held lease was lost, recorded as lockkit.lost.cause.
type LostCause uint8

// The causes of a lost lease.
const (
	// LostRefused: an extend was refused, the key had expired or belonged to another
	// owner.
	LostRefused LostCause = iota
	// LostDeadline: the local validity deadline passed without a successful extend
	// (backend unreachable, process paused).
	LostDeadline
	// LostClosed: Client.Close released the lease under its holder (an Acquire
	// lease still held at Close); the holder's Err reports ErrLockLost and
	// ErrClosed.
	LostClosed
	// LostMaxHold: the lease reached its domain's max hold (Policy.MaxHold),
	// the cap on its total life; the holder's Err matches ErrLockLost and
	// names the max hold.
	LostMaxHold

	NumLostCauses // keep last
)

var lostCauseNames = [NumLostCauses]string{
	LostRefused:  "refused",
	LostDeadline: "deadline",
	LostClosed:   "closed",
	LostMaxHold:  "max_hold",
}

// String returns the cause's attribute value ("refused", "deadline", "closed", "max_hold").
func (c LostCause) String() string { return lostCauseNames[c.valid()] }

func (c LostCause) valid() LostCause {
	if c >= NumLostCauses {
		return LostRefused
	}
	return c
}
