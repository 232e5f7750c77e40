// Package vet is the lockkit analyzer: it reports misuse of lockkit locks
// and leases at build time, with positions, and fixes where one is clear.
// Command lockkit-vet runs it:
//
//	go run github.com/lockkit/lockkit/cmd/lockkit-vet ./...
//	go vet -vettool=$(command -v lockkit-vet) ./...
//
// It matches lockkit's types by package path
// (github.com/lockkit/lockkit/lockkit) and name, Lock and Lease, so the
// methods of Lock are found also when generated wrapper types promote
// them (type TableLock struct{ lockkit.Lock }). Calls through a method
// value (f := l.Acquire), an interface or a type parameter are not seen.
//
// # Lease not released on every path
//
// A lease from Acquire or TryAcquire is renewed in the background until
// Release: one that is never released stays held until the client closes.
// Like vet's lostcancel, the check walks the function's control-flow graph
// from the acquisition and reports a path that reaches a return, or a new
// assignment to the variable, without handing the lease on:
//
//	lease, err := locks.Table(id).Acquire(ctx) // reported
//	if err != nil {
//		return err
//	}
//	if err := check(); err != nil {
//		return err // the lease is lost here
//	}
//	return lease.Release(ctx)
//
// Handing the lease on ends the function's duty: Release (also deferred,
// also in a closure), returning it, storing it (field, struct, map, channel,
// another variable), passing it to a function, capturing it in a function
// literal. Reading it (lease.Fence(), lease.Key(), lease != nil), assigning
// it to _ and passing it only to fmt, log, log/slog or errors do not. A
// local closure that captures it (release := func() error { return
// lease.Release(ctx) }, never assigned again) hands it on where the closure
// is used (called, deferred, passed on), not where it is written: a path
// that never calls it is reported.
// Paths on which the lease is nil are not followed: the branch where the
// call's own error is non-nil (err != nil, errors.Is(err, ...),
// err == lockkit.ErrNotAcquired or another package-level error, err == nil
// being false, the same as cases of switch err) or the lease is nil, until
// err is assigned again. Paths that
// end in panic, os.Exit, log.Fatal or t.Fatal, or on which a test has been
// marked failed (t.Error, t.Errorf, t.Fail), are not followed either. A
// lease assigned to _ (_, err := l.TryAcquire(ctx)) is reported when some
// path on which the call may have succeeded reaches a return.
//
// # Another context inside a Do fn
//
// The fn of Do and TryDo gets a ctx that is cancelled, with cause
// ErrLockLost, the moment the lease is lost; the ctx given to Do is not. A
// call inside fn that passes any other context is reported: the outer
// ctx, context.Background(), context.TODO(), nil, or a context made in fn
// from none of these. Contexts derived from fn's ctx are fine: every
// assignment of a context variable declared in fn must mention fn's ctx or
// another such variable (context.WithTimeout(ctx, d), tracer.Start(ctx,
// name)). The suggested fix replaces the argument with fn's ctx parameter,
// when the argument is the outer ctx, context.Background(),
// context.TODO() or nil and that name is not shadowed there:
//
//	locks.Table(id).Do(ctx, func(lctx context.Context, lease *lockkit.Lease) error {
//		return book(ctx, id, lease.Fence()) // reported; fix: book(lctx, ...)
//	})
//
// An assignment that replaces fn's ctx (ctx = context.Background()) is
// reported too. A nested Do's fn is checked against its own ctx. Only fn
// literals are checked: a named function passed as fn is not. The fn of an
// election's Lead (Election, also promoted through a generated wrapper) is
// checked the same way: its ctx is cancelled when leadership is lost.
//
// # Discarded errors
//
// The error of Do, TryDo, Acquire, TryAcquire, Lead and (*Lease).Release is
// reported when the call is an expression statement, a go statement, a
// deferred call, or its error is assigned to _:
//
//	lease.Release(ctx)            // reported
//	_ = locks.Job(id).Do(ctx, fn) // reported
//
// The one exception is defer lease.Release(ctx): the lease ends with the
// function either way, as Do's own release does, and the idiom is common.
//
// # Use after Release
//
// After a lease's Release on some path (not a deferred one), a use of the
// lease on that path is reported, and so is a use of a variable whose only
// value is that lease's Fence(), read before the release: another holder
// may have the lock, and a newer fence, by then.
//
//	fence := lease.Fence()
//	lease.Release(ctx)
//	store.Write(ctx, v, fence) // reported
//
// A second Release is reported as such. lease.Key(), lease.Token() and
// lease == nil are not reported: they stay true after Release. A new
// assignment to the variable (a new Acquire) ends the check, and so does a
// range loop's next element.
//
// # Fencing domains whose fn never reads the fence
//
// When the lock type has the marker method
//
//	func (TableLock) LockkitFencing()
//
// (no parameters, no results; the generator emits it on the lock type of
// each domain with fencing on), the fn literal of its Do and TryDo must
// read lease.Fence(), or hand the lease to code that may (pass it,
// store it, capture it). One that does not is reported: the fence exists
// to be passed to the protected resource's write. A fn that calls no
// function (other than builtins and the lease's methods) writes nowhere
// and is not reported.
//
// An election always fences: the fn literal of its Lead must read
// term.Number() or term.Lease(), or hand the term on, with the same
// exception for a fn that calls nothing.
//
// # What it does not report
//
//   - Code of the runtime package itself and of its tests, which implement
//     Release and break these rules on purpose.
//   - Leases kept in fields, globals or variables of an enclosing function:
//     whoever holds them is not known.
//   - Calls through method values, interfaces and type parameters.
//   - A context handed on in a non-call way (a struct field, a channel).
//   - A Release, or a use of a lease, inside a function literal, for the
//     use-after-Release check: the literal runs at another time.
//
// # Silencing a report
//
// A comment //lockkit-vet:ignore followed by a reason, on the line of a
// report or on the line above it, silences that report; without a reason
// it silences nothing.
package vet
