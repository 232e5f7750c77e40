package policy

import "time"

// BackoffBounds is the least and the most an acquisition can wait between
// its attempts in all, when it makes every one of attempts attempts: the
// sum of its attempts−1 backoffs, each its interval ± jitter. The intervals
// start at initial and grow by multiplier up to maxInterval, as the
// runtime's backoff (cenkalti/backoff's ExponentialBackOff) grows them; a
// test ties the two. The generated comment states a domain's wait with it.
func BackoffBounds(attempts int, initial, maxInterval time.Duration, multiplier, jitter float64) (lo, hi time.Duration) {
	cur := initial
	var low, high float64
	for range attempts - 1 {
		low += float64(cur) - jitter*float64(cur)
		high += float64(cur) + jitter*float64(cur)
		if float64(cur) >= float64(maxInterval)/multiplier {
			cur = maxInterval
		} else {
			cur = time.Duration(float64(cur) * multiplier)
		}
	}
	return time.Duration(low), time.Duration(high)
}
