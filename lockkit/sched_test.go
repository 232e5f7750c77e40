package lockkit

import (
	"sync"
	"testing"
	"time"
)

// The scheduler runs entries in time order, honours reset and stop, and
// keeps running entries after its one timer fired early (the earliest entry
// was stopped) or late.
func TestScheduler(t *testing.T) {
	var s scheduler
	var mu sync.Mutex
	var ran []string
	done := make(chan struct{}, 8)
	rec := func(name string) func() {
		return func() {
			mu.Lock()
			ran = append(ran, name)
			mu.Unlock()
			done <- struct{}{}
		}
	}
	now := time.Now()
	early := s.add(now.Add(20*time.Millisecond), rec("early-stopped"))
	s.add(now.Add(60*time.Millisecond), rec("b"))
	moved := s.add(now.Add(40*time.Millisecond), rec("moved-last"))
	s.add(now.Add(80*time.Millisecond), rec("c"))
	s.stop(early)                                 // the timer is armed for it: it fires early and must re-arm
	s.reset(moved, now.Add(100*time.Millisecond)) // later than b and c
	again := s.add(now.Add(30*time.Millisecond), rec("a"))
	for range 4 {
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("entries did not all run: %v", ran)
		}
	}
	mu.Lock()
	got := append([]string(nil), ran...)
	mu.Unlock()
	want := []string{"a", "b", "c", "moved-last"}
	if len(got) != len(want) {
		t.Fatalf("ran %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("ran %v, want %v", got, want)
		}
	}
	// An entry that already ran is queued again by reset.
	s.reset(again, time.Now().Add(10*time.Millisecond))
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("reset of a finished entry did not run it again")
	}
	if len(s.queue) != 0 {
		t.Fatalf("queue holds %d entries after all ran", len(s.queue))
	}
}
