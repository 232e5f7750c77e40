package rediswire

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/internal/circuit"
	"github.com/lockkit/lockkit/internal/policy"
	"github.com/redis/go-redis/v9"
)

// FenceError turns a script's policy.BadFenceCode reply (a fence counter it
// cannot read as one) into the error callers see: it names the counter's
// key (keys are the script's KEYS), says what Redis found wrong and how to
// repair it, and matches circuit.ErrData and driver.ErrFinal (not an
// outage; not retried). Any other err is returned as it is.
func FenceError(err error, keys []string) error {
	var re redis.Error
	if err == nil || !errors.As(err, &re) {
		return err
	}
	msg := re.Error()
	// Redis 6 and older wrap a script's error reply after a prefix.
	i := strings.Index(msg, policy.BadFenceCode+" ")
	if i < 0 {
		return err
	}
	rest := msg[i+len(policy.BadFenceCode)+1:]
	n, why, _ := strings.Cut(rest, " ")
	key := "?"
	if k, perr := strconv.Atoi(n); perr == nil && k >= 1 && k <= len(keys) {
		key = keys[k-1]
	}
	return BadCounter(key, why)
}

// BadCounter is the error of a fence counter at key that cannot be read as
// one, why being what is wrong with it (FenceError).
func BadCounter(key, why string) error {
	return fmt.Errorf("%w: the fence counter %q is not a fence (%s): it must be a Redis string holding a decimal integer below 2^63-1; "+
		"something other than lockkit wrote it. Delete it (DEL %q): the next grant then issues the server's TIME in µs, above every fence issued before (docs/semantics.md, guarantee 3): %w",
		circuit.ErrData, key, why, key, driver.ErrFinal)
}
