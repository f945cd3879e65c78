package etcdsimba

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// hedged runs f and, while no attempt has answered, runs it again every
// share of ctx's time, up to n attempts in all; the first success wins and
// the others are cancelled. The client's balancer sends each attempt to
// the next member, so a member that is stalled (a SIGSTOP, a full disk, a
// long pause) costs a share of the call, not the call (ADR 0207); gRPC
// finds such a member dead only after its keepalive, at least 10 s. Only
// requests whose repetition is harmless are hedged: keepalives, reads, and
// transactions whose condition makes a second application a no-op.
func hedged[T any](ctx context.Context, n int, f func(context.Context) (T, error)) (T, error) {
	if n <= 1 {
		return f(ctx)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		v   T
		err error
	}
	// A member answers in milliseconds: one that has not answered in
	// hedgeAfter (or a share of a shorter call) is likely stalled.
	delay := hedgeAfter
	if dl, ok := ctx.Deadline(); ok {
		delay = min(delay, max(time.Until(dl)/time.Duration(n+1), 20*time.Millisecond))
	}
	ch := make(chan result, n)
	launched, answered := 0, 0
	launch := func() {
		launched++
		go func() {
			v, err := f(ctx)
			ch <- result{v, err}
		}()
	}
	launch()
	timer := time.NewTimer(delay)
	defer timer.Stop()
	for {
		select {
		case r := <-ch:
			answered++
			switch {
			case r.err == nil:
				return r.v, nil
			case launched < n && ctx.Err() == nil && retryable(r.err):
				// A member that answered with an error (its connection
				// found dead, no leader): the next one, at once.
				launch()
				timer.Reset(delay)
			case answered == launched:
				return r.v, r.err
			}
		case <-timer.C:
			if launched < n {
				launch()
				timer.Reset(delay)
			}
		}
	}
}

// hedgeAfter is the longest wait before a hedged request is sent again.
const hedgeAfter = 250 * time.Millisecond

// attempts is how many members a hedged request may try.
func (b *Backend) attempts() int { return min(len(b.cli.Endpoints()), 3) }

// retryable reports whether an attempt's error may be a member's, not the
// request's: unavailable, no leader, a timeout on the way.
func retryable(err error) bool {
	if errors.Is(err, rpctypes.ErrNoLeader) || errors.Is(err, rpctypes.ErrGRPCNoLeader) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}
