package exampleenv

import (
	"fmt"
	"io"
	"slices"
	"sync"
	"time"
)

// Timeline collects the narrative lines of concurrent replicas, to print in
// time order. The zero value is ready to use.
type Timeline struct {
	mu    sync.Mutex
	lines []stamped
}

type stamped struct {
	at   time.Duration
	text string
}

// Add records a line, stamped with the time since start.
func (t *Timeline) Add(start time.Time, format string, args ...any) {
	at := time.Since(start)
	t.mu.Lock()
	t.lines = append(t.lines, stamped{at, fmt.Sprintf(format, args...)})
	t.mu.Unlock()
}

// Print writes the lines in time order, each with its stamp.
func (t *Timeline) Print(w io.Writer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	slices.SortStableFunc(t.lines, func(a, b stamped) int { return int(a.at - b.at) })
	for _, l := range t.lines {
		fmt.Fprintf(w, "   %s %s\n", Stamp(l.at), l.text)
	}
}

// Stamp formats a time since the start of a scenario: "+ 104ms".
func Stamp(d time.Duration) string { return fmt.Sprintf("+%4dms", d.Milliseconds()) }
