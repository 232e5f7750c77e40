package circuit

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/lockkit/lockkit/driver"
)

// Outcome is what one request's error says about the health of the backend
// node, as decided by [Classify].
type Outcome uint8

const (
	// Success means the node answered: the error is nil, or a reply or
	// condition that a healthy node produces (redis.Nil, NOSCRIPT, …).
	Success Outcome = iota
	// Failure means the node is unreachable, too slow, or unable to serve.
	Failure
	// Ignored means the error says nothing about the node, typically
	// because the caller's own ctx ended. It counts neither way.
	Ignored
)

// String returns "success", "failure" or "ignored".
func (o Outcome) String() string {
	switch o {
	case Success:
		return "success"
	case Failure:
		return "failure"
	case Ignored:
		return "ignored"
	default:
		return "Outcome(" + strconv.Itoa(int(o)) + ")"
	}
}

// IsBackendFailure reports whether err counts as a failure of the backend
// node, that is whether [Classify] returns [Failure]. callerCtx is the
// caller's own ctx (not a per-command ctx derived from it): a timeout or
// cancellation after it ended is the caller's, not the node's. A nil
// callerCtx is treated as one that never ends.
func IsBackendFailure(err error, callerCtx context.Context) bool {
	return Classify(err, callerCtx) == Failure
}

// Classify sorts err, returned by a request made on behalf of callerCtx, into
// the [Outcome] the breaker records. The package documentation lists the
// rules. callerCtx is the caller's own ctx, not a per-command ctx derived
// from it; nil is treated as a ctx that never ends.
func Classify(err error, callerCtx context.Context) Outcome {
	// Contention first: it is as common as success.
	if err == nil || errors.Is(err, driver.ErrContended) {
		return Success
	}
	if callerEnded(callerCtx) && isCallersEnd(err, callerCtx) {
		return Ignored
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, driver.ErrCapacity) {
		return Ignored
	}
	if errors.Is(err, driver.ErrFailure) || isNetworkFailure(err) {
		return Failure
	}
	return Success
}

// callerEnded reports whether ctx has ended. A deadline that has passed
// counts even before ctx's timer has fired: go-redis puts the deadline on the
// socket, whose timeout can be seen first.
func callerEnded(ctx context.Context) bool {
	if ctx == nil {
		return false
	}
	if ctx.Err() != nil {
		return true
	}
	deadline, ok := ctx.Deadline()
	return ok && !time.Now().Before(deadline)
}

// isCallersEnd reports whether err is how a request fails when callerCtx,
// which has ended, ends: a cancellation, any kind of timeout (go-redis
// applies the ctx deadline to the socket, so it surfaces as an i/o timeout),
// or the ctx's cause.
func isCallersEnd(err error, callerCtx context.Context) bool {
	if errors.Is(err, context.Canceled) ||
		errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	if cause := context.Cause(callerCtx); cause != nil && errors.Is(err, cause) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// failureErrnos are the socket errors that mean the node is unreachable or
// dropped the connection. They normally arrive inside a *net.OpError (a
// net.Error), but may come wrapped otherwise.
var failureErrnos = [...]syscall.Errno{
	syscall.ECONNREFUSED,
	syscall.ECONNRESET,
	syscall.ECONNABORTED,
	syscall.EPIPE,
	syscall.ETIMEDOUT,
	syscall.EHOSTUNREACH,
	syscall.ENETUNREACH,
}

func isNetworkFailure(err error) bool {
	if errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) ||
		errors.Is(err, os.ErrDeadlineExceeded) ||
		errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		for _, e := range failureErrnos {
			if errno == e {
				return true
			}
		}
	}
	return false
}

// isTimeout reports whether err is a timeout (a command deadline, a socket
// deadline) rather than an answer or a refused connection.
func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// ErrData marks an error about the data a store holds under a key (a Redis
// fence counter that is no integer): no outage, and no retry can succeed
// until someone repairs the key. Classify counts it as Success (the node
// answered); the Client neither retries it (it also matches driver.ErrFinal)
// nor reports it as lockkit.ErrUnavailable, but as itself, naming the key.
var ErrData = errors.New("lockkit: unreadable data in the store")
