package fifo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockkit/lockkit/internal/policy"
	"github.com/redis/go-redis/v9"
)

// Wake says what ended a Wait.
type Wake int

const (
	// WakeTimer: the fallback timer; no push arrived in time.
	WakeTimer Wake = iota
	// WakePush: a release (or a leave, or a prune) published this token.
	WakePush
	// WakeSubscribed: the subscription to the key's channel was made or
	// remade (after a reconnect or a failover): a publish may have been
	// missed while it was down, so the waiter should check now.
	WakeSubscribed
)

func (w Wake) String() string {
	switch w {
	case WakePush:
		return "push"
	case WakeSubscribed:
		return "subscribed"
	default:
		return "timer"
	}
}

// Notifier delivers wake-ups to the waiters of one go-redis client. It has
// its own channel per lock key (Channel), so a release's publish reaches
// only the client of the waiter it wakes; it holds one subscription per
// lock key, shared by all the client's waiters on that key and
// reference-counted, and wakes only the waiter whose token a message names.
//
// On a *redis.ClusterClient it uses sharded Pub/Sub (SSUBSCRIBE, Redis 7),
// with one Pub/Sub connection per hash tag in use, to the node that serves
// its slot: a connection per lock key that has waiters, not per waiter.
// On any other client it uses SUBSCRIBE, with one connection for all keys.
// A connection with no subscription left is closed after Linger.
//
// go-redis reconnects and resubscribes by itself; the (re)subscription
// wakes the key's waiters with WakeSubscribed, and a message lost while
// the connection was down costs a waiter at most its fallback timer.
type Notifier struct {
	rdb     redis.UniversalClient
	id      string
	sharded bool
	linger  time.Duration
	timeout time.Duration

	wakes cache[wakeName, *wakeName] // its channels, by lock key (wakeOf)

	mu     sync.Mutex
	groups map[string]*group // by hash tag; "" for the single connection
	closed bool
	wg     sync.WaitGroup
}

// NotifierOptions tune a Notifier; the zero value is the default.
type NotifierOptions struct {
	// Linger is how long a Pub/Sub connection with no subscription left
	// stays open for the next waiter (default 10s).
	Linger time.Duration
	// Timeout bounds each SUBSCRIBE and UNSUBSCRIBE (default 1s).
	Timeout time.Duration
}

// notifierIDBytes is the size of a Notifier's random id, written in hex
// at the end of its channels.
const notifierIDBytes = 8

// NewNotifier returns a Notifier for rdb. It starts nothing until the first
// Subscribe. Close it when the client is done.
func NewNotifier(rdb redis.UniversalClient, o NotifierOptions) *Notifier {
	if o.Linger <= 0 {
		o.Linger = 10 * time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	var id [notifierIDBytes]byte
	_, _ = rand.Read(id[:])
	return &Notifier{
		rdb:     rdb,
		id:      hex.EncodeToString(id[:]),
		sharded: Sharded(rdb),
		linger:  o.Linger,
		timeout: o.Timeout,
		groups:  make(map[string]*group),
		wakes:   newCache[wakeName](wakeBits),
	}
}

// Channel is the channel this Notifier listens on for key's wake-ups: the
// Request.Wake of its waiters. It shares key's hash slot.
func (n *Notifier) Channel(key string) string { return n.wakeOf(key).ch }

// Waiter is one queued token's registration with a Notifier. It is used by
// one goroutine at a time; Close ends it.
type Waiter struct {
	n       *Notifier
	g       *group // nil after the Notifier was closed
	channel string
	token   string
	c       chan Wake
	timer   *time.Timer
	once    sync.Once
	// grant is what the last handover's message (payload) delivered to w
	// carried, when granted; under Notifier.mu.
	payload string
	grant   Result
	granted bool
}

// channelState is one key's subscription: the waiters that share it.
type channelState struct {
	waiters map[string]*Waiter // by token
	// recent holds the last payloads published on the channel for tokens
	// no waiter here had registered: a waiter registers after its Acquire
	// reply, and a handover in between must not be lost.
	recent [8]string
	next   int
}

// group is one Pub/Sub connection and the goroutine that runs it.
type group struct {
	tag string
	// chans are the group's channels, under Notifier.mu: subscribed while
	// they have waiters, dropped once unsubscribed without any.
	chans map[string]*channelState
	kick  chan struct{} // reconcile subscriptions (capacity 1)
	stop  chan struct{} // closed by Notifier.Close
}

// Subscribe registers token, queued on key, for wake-ups and returns its
// Waiter. The first waiter on a key subscribes to its channel; the
// subscription is made in the background and wakes the waiter
// (WakeSubscribed) once it is in place. Subscribe never blocks on I/O.
// After Close it returns a Waiter that only its timer wakes.
func (n *Notifier) Subscribe(key, token string) *Waiter {
	ch := n.Channel(key)
	w := &Waiter{n: n, channel: ch, token: token, c: make(chan Wake, 1)}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return w
	}
	tag := ""
	if n.sharded {
		tag = policy.HashTag(key)
	}
	g := n.groups[tag]
	if g == nil {
		g = &group{tag: tag, chans: make(map[string]*channelState), kick: make(chan struct{}, 1), stop: make(chan struct{})}
		n.groups[tag] = g
		local.Store(n.id, n)
		n.wg.Add(1)
		go n.run(g)
	}
	w.g = g
	cs := g.chans[ch]
	if cs == nil {
		cs = &channelState{waiters: make(map[string]*Waiter)}
		g.chans[ch] = cs
	}
	if len(cs.waiters) == 0 {
		g.poke() // subscribe, or keep the subscription a pending unsubscribe would drop
	}
	cs.waiters[token] = w
	for _, p := range cs.recent {
		if t, _, _ := strings.Cut(p, " "); t == token {
			w.deliver(p)
		}
	}
	return w
}

// Granted returns what the last handover push for w's token carried. It
// may be stale (a push delivered after that handover expired and the token
// rejoined): its Joined names the place in the queue the handover found the
// token at, and only a push for the place the token's last Acquire found it
// queued at is its grant (lockkit checks it). ok is false when no handover
// push came.
func (w *Waiter) Granted() (r Result, ok bool) {
	w.n.mu.Lock()
	defer w.n.mu.Unlock()
	if !w.granted {
		return Result{}, false
	}
	return w.grant, true
}

// deliver wakes w for a message; a handover's 'token fence px previous
// joined' also leaves its grant ('token fence px previous', from a releaser
// of v0.1.0, leaves one without Joined, which is only a wake-up). A
// handover names the place it was made for, so it is never made twice: the
// same message delivered again (by the releaser in this process, then by
// Pub/Sub, or the other way round) is dropped; woke reports whether it was
// not. Called with Notifier.mu held.
func (w *Waiter) deliver(payload string) (woke bool) {
	if w.granted && payload == w.payload && w.grant.Joined != 0 {
		return false
	}
	r, ok := parseHandover(payload)
	if ok {
		w.grant, w.granted, w.payload = r, true, payload
	}
	w.wake(WakePush)
	return true
}

// parseHandover reads a handover's message, 'token fence px previous
// joined' (v0.1.0's has no joined: Joined 0, as when joined does not parse).
// A plain wake-up ('token') is no handover.
func parseHandover(payload string) (Result, bool) {
	var f [4]string
	rest := payload
	for i := range f {
		var ok bool
		if f[i], rest, ok = strings.Cut(rest, " "); !ok && i < 3 {
			return Result{}, false
		} else if !ok {
			rest = ""
		}
	}
	fence, err1 := strconv.ParseInt(f[1], 10, 64)
	px, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil || px <= 0 {
		return Result{}, false
	}
	var joined int64
	if rest != "" {
		if j, err := strconv.ParseInt(rest, 10, 64); err == nil && j > 0 {
			joined = j
		}
	}
	return Result{Granted: true, Fence: fence, Previous: f[3], LockTTL: time.Duration(px) * time.Millisecond, Earlier: true, Joined: joined}, true
}

// C is the channel Wait receives from, for callers that select on more.
func (w *Waiter) C() <-chan Wake { return w.c }

// Wait blocks until a push or a (re)subscription wakes w, or fallback has
// passed (WakeTimer), or ctx is done (its error).
func (w *Waiter) Wait(ctx context.Context, fallback time.Duration) (Wake, error) {
	select {
	case k := <-w.c:
		return k, nil
	default:
	}
	if w.timer == nil {
		w.timer = time.NewTimer(fallback)
	} else {
		w.timer.Reset(fallback)
	}
	defer w.timer.Stop()
	select {
	case k := <-w.c:
		return k, nil
	case <-w.timer.C:
		return WakeTimer, nil
	case <-ctx.Done():
		return WakeTimer, ctx.Err()
	}
}

// Close unregisters w; the last waiter on a key unsubscribes it. Safe to
// call more than once.
func (w *Waiter) Close() {
	w.once.Do(func() {
		if w.g == nil {
			return
		}
		n := w.n
		n.mu.Lock()
		defer n.mu.Unlock()
		cs := w.g.chans[w.channel]
		if cs == nil || cs.waiters[w.token] != w {
			return
		}
		delete(cs.waiters, w.token)
		if len(cs.waiters) == 0 {
			// The channel state stays until the unsubscription is done:
			// a message that arrives meanwhile is kept in recent for a
			// waiter that registers again.
			w.g.poke()
		}
	})
}

// wake leaves one pending wake for w; a push replaces a pending
// subscription wake, so that what is reported is the push. Called with
// Notifier.mu held: wakes have no other sender, so the send cannot block.
func (w *Waiter) wake(k Wake) {
	select {
	case w.c <- k:
		return
	default:
	}
	if k != WakePush {
		return // a wake is already pending: one is enough
	}
	select {
	case old := <-w.c:
		if old == WakePush {
			k = old
		}
	default:
	}
	w.c <- k
}

func (g *group) poke() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// Close unsubscribes everything, closes the Pub/Sub connections and waits
// for their goroutines. Waiters still registered are woken only by their
// timers from then on.
func (n *Notifier) Close() error {
	n.mu.Lock()
	if !n.closed {
		n.closed = true
		local.CompareAndDelete(n.id, n)
		for _, g := range n.groups {
			close(g.stop)
		}
	}
	n.mu.Unlock()
	n.wg.Wait()
	return nil
}

// run owns one Pub/Sub connection: it subscribes and unsubscribes to match
// the group's channels, pings it when it has been quiet, and closes it once
// it has had no channel for the linger time. A second goroutine receives
// and dispatches, so that a wake-up costs no hop through a Go channel.
func (n *Notifier) run(g *group) {
	defer n.wg.Done()
	// Every call on the Pub/Sub connection, the receiver's reconnects
	// included, ends when the group stops: Close must not wait for a dial
	// or a read that hangs on a partitioned network.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ps *redis.PubSub
	if n.sharded {
		// Created empty: the first SSUBSCRIBE picks the node that serves
		// its slot (go-redis routes a connection by its first channel).
		ps = n.rdb.SSubscribe(ctx)
	} else {
		ps = n.rdb.Subscribe(ctx)
	}
	subscribed := make(map[string]bool)
	idle := time.NewTimer(n.linger)
	defer idle.Stop()
	reconcile := func() (empty bool) {
		n.mu.Lock()
		var add, drop []string
		for ch, cs := range g.chans {
			switch {
			case len(cs.waiters) > 0 && !subscribed[ch]:
				add = append(add, ch)
			case len(cs.waiters) == 0 && subscribed[ch]:
				drop = append(drop, ch)
			case len(cs.waiters) == 0:
				delete(g.chans, ch)
			}
		}
		n.mu.Unlock()
		for _, ch := range add {
			// An error (say the connection is down) still records the
			// channel in ps, which subscribes it on reconnect.
			cctx, cancel := context.WithTimeout(ctx, n.timeout)
			if n.sharded {
				_ = ps.SSubscribe(cctx, ch)
			} else {
				_ = ps.Subscribe(cctx, ch)
			}
			cancel()
			subscribed[ch] = true
		}
		for _, ch := range drop {
			cctx, cancel := context.WithTimeout(ctx, n.timeout)
			if n.sharded {
				_ = ps.SUnsubscribe(cctx, ch)
			} else {
				_ = ps.Unsubscribe(cctx, ch)
			}
			cancel()
			delete(subscribed, ch)
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		for _, ch := range drop {
			if cs := g.chans[ch]; cs != nil && len(cs.waiters) == 0 {
				delete(g.chans, ch)
			} else if cs != nil {
				g.poke() // a waiter came back meanwhile: subscribe again
			}
		}
		return len(g.chans) == 0
	}
	reconcile()

	// Only now: the receiver's first connection must be routed by a
	// channel, which the first subscription has recorded.
	var stopping atomic.Bool
	var heard atomic.Int64 // unix ns of the last thing received
	received := make(chan struct{})
	go func() {
		defer close(received)
		for {
			m, err := ps.Receive(ctx)
			if stopping.Load() {
				return
			}
			if err != nil {
				// go-redis reconnects and resubscribes on the next
				// Receive; do not spin while the server is away.
				time.Sleep(100 * time.Millisecond)
				continue
			}
			heard.Store(time.Now().UnixNano())
			n.dispatch(g, m)
		}
	}()
	defer func() {
		stopping.Store(true)
		cancel() // a reconnect in Receive gives up now
		_ = ps.Close()
		<-received
	}()

	health := time.NewTicker(healthInterval)
	defer health.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-g.kick:
			if reconcile() {
				idle.Reset(n.linger)
			}
		case <-idle.C:
			n.mu.Lock()
			if len(g.chans) == 0 && n.groups[g.tag] == g {
				delete(n.groups, g.tag)
				if len(n.groups) == 0 {
					local.CompareAndDelete(n.id, n)
				}
				n.mu.Unlock()
				return
			}
			n.mu.Unlock()
		case <-health.C:
			// A quiet connection may be a dead one: a PING that cannot be
			// written makes go-redis reconnect and resubscribe.
			if time.Since(time.Unix(0, heard.Load())) >= healthInterval {
				cctx, cancel := context.WithTimeout(ctx, n.timeout)
				_ = ps.Ping(cctx)
				cancel()
			}
		}
	}
}

// healthInterval is how long a Pub/Sub connection may stay quiet before it
// is pinged.
const healthInterval = 3 * time.Second

func (n *Notifier) dispatch(g *group, m any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch m := m.(type) {
	case *redis.Message:
		cs := g.chans[m.Channel]
		if cs == nil {
			return
		}
		tok, _, _ := strings.Cut(m.Payload, " ")
		if w := cs.waiters[tok]; w != nil {
			w.deliver(m.Payload)
			return
		}
		cs.recent[cs.next] = m.Payload
		cs.next = (cs.next + 1) % len(cs.recent)
	case *redis.Subscription:
		if m.Kind != "subscribe" && m.Kind != "ssubscribe" {
			return
		}
		if cs := g.chans[m.Channel]; cs != nil {
			for _, w := range cs.waiters {
				w.wake(WakeSubscribed)
			}
		}
	}
}

// local holds this process's Notifiers that have waiters' subscriptions
// (from a group's start to the last group's end, or Close), by id.
var local sync.Map // string → *Notifier

// deliverLocal gives a handover's message, which Release published on
// channel ch and which reached a subscriber there, to its waiter now when
// that waiter is in this process (its Notifier's id ends ch). The releaser
// got the script's reply, so the lock is already handed over, and the
// waiter need not wait for the Pub/Sub hop: without this, the message
// reaches the waiter only after the releaser's goroutine next blocks (the
// runtime polls the network when a processor runs out of work, so the
// releaser's next call, often its own next attempt, would run first). It is
// the same message, for the same place in the queue, and the waiter takes
// it only as the published one: Waiter.deliver drops whichever copy comes
// second, and a message that reached no subscriber (the waiter's
// connection is down) is not delivered here either: that waiter recovers by
// its timer, as in any other process. When it wakes a waiter, the releaser
// yields so that the waiter runs at once.
func deliverLocal(ch, payload string) {
	i := strings.LastIndex(ch, ChannelSuffix)
	if i < 0 || len(ch)-i-len(ChannelSuffix) != 2*notifierIDBytes {
		return
	}
	v, ok := local.Load(ch[i+len(ChannelSuffix):])
	if !ok {
		return
	}
	if v.(*Notifier).deliverLocal(ch[:i], ch, payload) {
		runtime.Gosched()
	}
}

// deliverLocal delivers payload to the waiter its token names on key's
// channel ch, when n has that waiter registered; woke reports whether it
// was woken.
func (n *Notifier) deliverLocal(key, ch, payload string) (woke bool) {
	tag := ""
	if n.sharded {
		tag = policy.HashTag(key)
	}
	tok, _, _ := strings.Cut(payload, " ")
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return false
	}
	g := n.groups[tag]
	if g == nil {
		return false
	}
	cs := g.chans[ch]
	if cs == nil {
		return false
	}
	w := cs.waiters[tok]
	return w != nil && w.deliver(payload)
}
