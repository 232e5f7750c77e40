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
	rec := func(arg any) {
		mu.Lock()
		ran = append(ran, arg.(string))
		mu.Unlock()
		done <- struct{}{}
	}
	entry := func(name string) *schedEntry { return &schedEntry{run: rec, arg: name} }
	now := time.Now()
	early, b, moved, c, again := entry("early-stopped"), entry("b"), entry("moved-last"), entry("c"), entry("a")
	s.add(early, now.Add(20*time.Millisecond))
	s.add(b, now.Add(60*time.Millisecond))
	s.add(moved, now.Add(40*time.Millisecond))
	s.add(c, now.Add(80*time.Millisecond))
	if !s.stop(early) { // the timer is armed for it: it fires early and must re-arm
		t.Fatal("stop of a queued entry reported it was not queued")
	}
	if s.stop(early) {
		t.Fatal("a second stop reported the entry still queued")
	}
	s.reset(moved, now.Add(100*time.Millisecond)) // later than b and c
	s.add(again, now.Add(30*time.Millisecond))
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
	if s.stop(again) {
		t.Fatal("stop of an entry that ran reported it queued")
	}
	if len(s.queue) != 0 {
		t.Fatalf("queue holds %d entries after all ran", len(s.queue))
	}
}
