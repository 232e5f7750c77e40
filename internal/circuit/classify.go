package circuit

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
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
	// redis.Nil first: it is contention, as common as success, and the
	// reply checks below would allocate for it.
	if err == nil || errors.Is(err, redis.Nil) {
		return Success
	}
	if callerEnded(callerCtx) && isCallersEnd(err, callerCtx) {
		return Ignored
	}
	if errors.Is(err, context.Canceled) ||
		errors.Is(err, redis.ErrClosed) ||
		errors.Is(err, redis.ErrPoolExhausted) ||
		isTryAgain(err) {
		return Ignored
	}
	if isNetworkFailure(err) || isFailureReply(err) {
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
		errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, redis.ErrPoolTimeout) {
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

// failureCodes are the error-reply codes (the first word of a Redis error)
// that mean the node cannot serve locks now. Each is matched as a whole
// word, so "BUSY" does not match BUSYKEY or BUSYGROUP.
var failureCodes = [...]string{
	"LOADING",
	"READONLY",
	"MASTERDOWN",
	"CLUSTERDOWN",
	"BUSY",
	"NOREPLICAS",
	"MISCONF",
	"OOM",
}

// isFailureReply reports whether err is a Redis error reply that means the
// node cannot serve. go-redis's typed helpers are used where it has them;
// the rest is matched on the reply's code.
func isFailureReply(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	if redis.IsLoadingError(re) ||
		redis.IsReadOnlyError(re) || // also the Lua-wrapped "-READONLY" form
		redis.IsMasterDownError(re) ||
		redis.IsClusterDownError(re) ||
		redis.IsNoReplicasError(re) ||
		redis.IsOOMError(re) ||
		redis.IsMaxClientsError(re) ||
		redis.HasErrorPrefix(re, "BUSY ") ||
		redis.HasErrorPrefix(re, "MISCONF ") {
		return true
	}
	return hasWrappedFailureCode(re.Error())
}

// isTryAgain reports a TRYAGAIN reply: a multi-key request during a Cluster
// resharding, while the keys' slot is being migrated. The node is healthy and
// the request fails for a moment only; counting it would let a resharding
// open the breaker of a master that serves every other key.
func isTryAgain(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && (redis.IsTryAgainError(re) || strings.Contains(re.Error(), ": -TRYAGAIN "))
}

// scriptErrorPrefix starts the error Redis 6 and older return when a
// redis.call inside a script fails; the inner error follows as
// ": -CODE message".
const scriptErrorPrefix = "ERR Error running script"

func hasWrappedFailureCode(msg string) bool {
	if !strings.HasPrefix(msg, scriptErrorPrefix) {
		return false
	}
	for _, code := range failureCodes {
		if strings.Contains(msg, ": -"+code+" ") {
			return true
		}
	}
	return false
}
