package faultharness

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// PermitReport is CheckPermits' verdict and figures.
type PermitReport struct {
	Violations []string
	Leases     int // leases with an accepted write
	Writes     int // accepted writes, every slot
	MaxAtOnce  int // most writers at once in the resource's order
	AtMax      int // accepted writes at which Permits writers were at the resource
}

// CheckPermits checks a semaphore's resource record: never more than
// permits writers at once. The resource keeps one fenced row per permit
// slot (writes, by row; Write.Pos is the record's order across every row).
// A lease is a writer at the resource from its first accepted write to its
// last, in that order: after its last, the resource never took a write of
// it again (a stale one was fenced off). At each accepted write, the
// writers whose span holds it must number at most permits.
//
// The fences keep each row's spans apart (a write below the row's fence is
// turned away, and Check checks each row's fences); the count then bounds
// how many rows, and so slots, were written at once. A semaphore that
// hands out more slots than its permits, or a resource that stops
// checking fences, breaks it.
func CheckPermits(writes map[string][]Write, permits int) PermitReport {
	var rp PermitReport
	type at struct {
		res string
		w   Write
	}
	var all []at
	for _, res := range slices.Sorted(maps.Keys(writes)) {
		for _, w := range writes[res] {
			all = append(all, at{res, w})
		}
	}
	slices.SortStableFunc(all, func(a, b at) int { return a.w.Pos - b.w.Pos })
	first, last := map[string]int{}, map[string]int{}
	slot := map[string]string{}
	for i, a := range all {
		tok := ValueToken(a.w.Value)
		if _, ok := first[tok]; !ok {
			first[tok] = i
			slot[tok] = a.res
		}
		last[tok] = i
	}
	rp.Leases, rp.Writes = len(first), len(all)
	open := map[string]bool{}
	over := false // inside a run of writes with more than permits writers
	for i, a := range all {
		tok := ValueToken(a.w.Value)
		if first[tok] == i {
			open[tok] = true
		}
		n := len(open)
		rp.MaxAtOnce = max(rp.MaxAtOnce, n)
		if n == permits {
			rp.AtMax++
		}
		if n > permits && !over {
			var who []string
			for _, t := range slices.Sorted(maps.Keys(open)) {
				who = append(who, fmt.Sprintf("%s (%s, writes %d..%d)", t, slot[t], all[first[t]].w.Pos, all[last[t]].w.Pos))
			}
			rp.Violations = append(rp.Violations, fmt.Sprintf("%d writers at once at the resource, over the semaphore's %d permits, at write %d (%s): %s",
				n, permits, a.w.Pos, a.res, strings.Join(who, ", ")))
		}
		over = n > permits
		if last[tok] == i {
			delete(open, tok)
		}
	}
	return rp
}
