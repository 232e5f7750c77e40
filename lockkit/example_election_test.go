package lockkit_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/lockkit"
)

// exampleElection is an election bound by hand as generated code does it
// (locks.NightlyReport() in an application), on a client named owner.
func exampleElection(owner string) (lockkit.Election, func()) {
	rdb, stop := exampleRedis()
	client, err := lockkit.New(goredis.New(rdb), lockkit.WithOwner(owner))
	if err != nil {
		log.Fatal(err)
	}
	d := client.Domain(lockkit.DomainSpec{
		Name:    "nightly",
		Pattern: "nightly",
		Policy:  lockkit.Policy{TTL: 10 * time.Second, Kind: "election", Retry: lockkit.Retry{MaxWait: 5 * time.Second}},
	})
	return d.Key(7).Literal("nightly").Election(), func() { client.Close(context.Background()); stop() }
}

// Lead campaigns, then runs fn while this process leads; the term's number
// is a fence for the leader's writes. Lead resigns when fn returns.
func ExampleElection_Lead() {
	e, stop := exampleElection("replica-a")
	defer stop()
	err := e.Lead(context.Background(), func(ctx context.Context, term *lockkit.Term) error {
		fmt.Println("leading, term > 0:", term.Number() > 0, "valid:", term.Err() == nil)
		return nil // ... run the job with ctx, fencing writes with term.Number() ...
	})
	fmt.Println("Lead:", err)
	// Output:
	// leading, term > 0: true valid: true
	// Lead: <nil>
}

// Leader says who leads now, as the backend records it.
func ExampleElection_Leader() {
	e, stop := exampleElection("replica-a")
	defer stop()
	ctx := context.Background()
	_ = e.Lead(ctx, func(ctx context.Context, term *lockkit.Term) error {
		l, err := e.Leader(ctx)
		fmt.Println("leader:", l.Owner, "same term:", l.Term == term.Number(), err)
		return nil
	})
	l, err := e.Leader(ctx)
	fmt.Println("after resigning, somebody leads:", l.Leads(), err)
	// Output:
	// leader: replica-a same term: true <nil>
	// after resigning, somebody leads: false <nil>
}

// Observe delivers leader changes until its ctx ends.
func ExampleElection_Observe() {
	e, stop := exampleElection("replica-a")
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	changes, err := e.Observe(ctx)
	if err != nil {
		log.Fatal(err)
	}
	_ = e.Lead(ctx, func(ctx context.Context, term *lockkit.Term) error {
		for l := range changes {
			if l.Term == term.Number() {
				fmt.Println("observed this term, led by", l.Owner)
				return nil
			}
		}
		return nil
	})
	// Output:
	// observed this term, led by replica-a
}
