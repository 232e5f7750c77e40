// Package lockhook gives lockkit's own store packages what package lockkit
// does not export to users: a lockkit.Lock's command timeout, which
// postgres.DoTx bounds its own statements by (its BEGIN and its rollback;
// lockkit.DoOn bounds each acquire).
package lockhook

import "time"

// CommandTimeout returns the command timeout of a lockkit.Lock's Client
// (WithCommandTimeout; the default for a Lock of no Client). Package lockkit
// sets it when it is initialized; its argument is a lockkit.Lock.
var CommandTimeout func(lock any) time.Duration
