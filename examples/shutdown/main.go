// Command shutdown is the shutdown recipe for a service that takes locks: on
// SIGTERM it stops accepting requests, lets the requests in flight finish
// their locked work, stops its background jobs, and only then closes the
// lockkit Client, which releases whatever is still held. Nothing is cut off
// half-way and no lock is left for its TTL to free.
//
//	go run ./examples/shutdown
//
// The order matters. http.Server.Shutdown waits for the handlers in flight;
// their Do calls finish and release normally. Closing the Client first would
// cancel those handlers' fns with lockkit.ErrClosed in the middle of their
// work. Close comes last, bounded by the same deadline, for leases that
// background work still holds (an Acquire without a Release); it reports any
// it could not release, which then expire by their TTL.
//
// With no REDIS_URL it runs on an embedded in-process Redis. The example
// sends itself the SIGTERM once three bookings are in flight, and exits
// non-zero if any fact of the recipe does not hold.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/lockkit/lockkit/examples/internal/exampleenv"
	"github.com/lockkit/lockkit/examples/locks"
	"github.com/lockkit/lockkit/lockkit"
)

func main() { exampleenv.Main("shutdown", run) }

// workTime is how long one booking's locked work takes.
const workTime = 300 * time.Millisecond

func run(ctx context.Context, w io.Writer, env *exampleenv.Env) error {
	client, err := env.NewClient()
	if err != nil {
		return err
	}
	l := locks.New(client)
	start := time.Now()
	var log exampleenv.Timeline

	// The service: POST /book?table=N books a table under its lock.
	var (
		mu       sync.Mutex
		bookings = map[string]int64{} // table -> the fence its booking was written with
		inFlight sync.WaitGroup
	)
	inFlight.Add(3)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /book", func(rw http.ResponseWriter, r *http.Request) {
		table := r.URL.Query().Get("table")
		err := l.Table(table).Do(r.Context(), func(ctx context.Context, lease *lockkit.Lease) error {
			log.Add(start, "handler   table %s: acquired %s, working %v", table, lease.Key(), workTime)
			inFlight.Done()
			select {
			case <-time.After(workTime):
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			mu.Lock()
			bookings[table] = lease.Fence() // a real store would check it (package fence)
			mu.Unlock()
			log.Add(start, "handler   table %s: booked, releasing", table)
			return nil
		})
		if err != nil {
			log.Add(start, "handler   table %s: %v", table, err)
			http.Error(rw, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(rw, "booked")
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	url := "http://" + ln.Addr().String()

	// A background job that holds a lease across its own work: the nightly
	// digest, taken with Acquire and renewed until the job stops.
	jobCtx, stopJobs := context.WithCancel(ctx)
	defer stopJobs()
	//lockkit-vet:ignore the job leaves its lease to Client.Close on purpose: that is what this example shows
	digest, err := l.UserDigest(42).Acquire(ctx)
	if err != nil {
		return err
	}
	log.Add(start, "job       holds %s (Acquire; renewed in the background)", digest.Key())
	jobDone := make(chan struct{})
	go func() {
		defer close(jobDone)
		<-jobCtx.Done()
		// The job is told to stop. This one forgets to Release: Close
		// will release it.
		log.Add(start, "job       stopped, lease left to Close")
	}()

	// SIGTERM, as Kubernetes sends it, handled the standard way.
	sigCtx, stopSignals := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stopSignals()

	// Three bookings arrive; once all three are inside their locks, the
	// process is told to terminate.
	codes := make(chan int, 3)
	for _, table := range []string{"1", "2", "3"} {
		go func() {
			resp, err := http.Post(url+"/book?table="+table, "text/plain", nil)
			if err != nil {
				codes <- 0
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	inFlight.Wait()
	log.Add(start, "signal    SIGTERM while 3 bookings are in flight")
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		return err
	}
	<-sigCtx.Done()

	// The recipe: one deadline for the whole shutdown (Kubernetes' grace
	// period is 30 s by default; keep below it).
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// 1. Stop accepting, and wait for the handlers in flight: their Do
	//    calls finish their work and release their locks.
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("http shutdown: %w", err)
	}
	log.Add(start, "shutdown  1. http.Server.Shutdown returned: no request in flight")
	// 2. Stop the background jobs and wait for them.
	stopJobs()
	<-jobDone
	log.Add(start, "shutdown  2. background jobs stopped")
	// 3. Close the lockkit Client: it releases what is still held.
	if err := client.Close(shutdownCtx); err != nil {
		return fmt.Errorf("lockkit close: %w", err)
	}
	log.Add(start, "shutdown  3. lockkit Client closed: every lease released")
	if err := <-serveErr; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %v", err)
	}

	fmt.Fprintln(w, "\nA service is told to terminate while three bookings hold their locks")
	log.Print(w)

	// The facts.
	for range 3 {
		if code := <-codes; code != http.StatusOK {
			return fmt.Errorf("a booking in flight at SIGTERM got status %d, want 200: shutdown cut it off", code)
		}
	}
	if len(bookings) != 3 {
		return fmt.Errorf("%d of 3 bookings written", len(bookings))
	}
	if err := digest.Err(); !errors.Is(err, lockkit.ErrClosed) {
		return fmt.Errorf("the job's lease after Close: %v, want ErrClosed (released by Close)", err)
	}
	rdb := env.NewRedis()
	keys, err := rdb.Keys(ctx, "lock:*").Result()
	if err != nil {
		return err
	}
	for _, k := range keys {
		if k == "lock:{table:1}" || k == "lock:{table:2}" || k == "lock:{table:3}" || k == digest.Key() {
			return fmt.Errorf("%s is still held after shutdown", k)
		}
	}
	if _, err := http.Post(url+"/book?table=4", "text/plain", nil); err == nil {
		return errors.New("a request after shutdown was served")
	}
	fmt.Fprintln(w, "result: 3 of 3 bookings in flight finished (200), the job's lease was released by Close, no lock is left held, and new requests are refused.")
	return nil
}
