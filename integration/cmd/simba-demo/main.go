// Command simba-demo shows Simba at work with no server: three nodes in one
// process elect a leader over the in-memory backend, hand leadership over
// in order, fail over after a node is cut off, and take a lock whose
// fencing token refuses a stale write, then share a partition group that
// rebalances as members join and leave. It prints a timeline and exits by
// itself in about twenty seconds.
//
//	make demo   # or: cd integration && go run ./cmd/simba-demo
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/simba-go/simba/deadline"
	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/lock"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/memory"
	"github.com/simba-go/simba/term"
)

// Short times so the demo runs in seconds; production defaults are a 15s
// lease renewed every 5s.
var timing = deadline.Config{LeaseDuration: 3 * time.Second, RenewInterval: time.Second}

type timeline struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
}

func (tl *timeline) say(who, format string, args ...any) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	fmt.Fprintf(tl.w, "%+8.3fs  %-7s %s\n", time.Since(tl.start).Seconds(), who, fmt.Sprintf(format, args...))
}

func (tl *timeline) print(format string, args ...any) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	fmt.Fprintf(tl.w, format, args...)
}

type node struct {
	name    string
	client  *memory.Backend
	s       *session.Session
	e       *election.Election
	elected chan *term.Term
}

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(w io.Writer) error {
	tl := &timeline{w: w, start: time.Now()}
	backend, err := memory.New()
	if err != nil {
		return err
	}
	tl.print("Simba demo: three nodes, one in-memory backend, lease 3s, renewal every 1s.\n\n")

	var nodes []*node
	for _, name := range []string{"node-a", "node-b", "node-c"} {
		n := &node{name: name, client: backend.NewClient(), elected: make(chan *term.Term, 4)}
		s, err := session.Open(context.Background(), n.client, session.WithConfig(timing), session.WithLogger(nil),
			session.WithListener(func(e session.Event) {
				switch e.Kind {
				case session.SessionSuspended:
					tl.say(n.name, "session SUSPENDED (renewal failed: %v); retrying with backoff", e.Err)
				case session.SessionDeadlinePassed:
					tl.say(n.name, "local deadline passed: the node stops believing it leads, before the backend frees the lease")
				}
			}))
		if err != nil {
			return err
		}
		n.s = s
		tl.say(n.name, "session %s… opened", string(s.ID())[:8])
		nodes = append(nodes, n)
	}
	defer func() {
		for _, n := range nodes {
			_ = n.s.Close()
		}
	}()

	// 1. Election, with a leader task.
	tl.print("\n— 1. election: every node runs for \"scheduler\"; the leader runs a task\n")
	for _, n := range nodes {
		n := n
		e, err := election.Start(n.s, "scheduler",
			election.WithListener(election.Funcs{
				Elected: func(t *term.Term) { tl.say(n.name, "OnElected  %s (fencing token %d)", t, t.Token()); n.elected <- t },
				Revoked: func(t *term.Term, r term.RevokeReason) { tl.say(n.name, "OnRevoked  %s reason %s", t, r.String()) },
			}),
			election.RunWhileLeader(func(ctx context.Context, t *term.Term) error {
				tl.say(n.name, "task started under %s", t)
				<-ctx.Done()
				tl.say(n.name, "task told to stop (%s); finishing its work…", context.Cause(ctx).(term.RevokeReason).String())
				time.Sleep(300 * time.Millisecond) // the task winds down
				tl.say(n.name, "task returned")
				return nil
			}))
		if err != nil {
			return err
		}
		n.e = e
	}
	leader, err := waitLeader(nodes, nil, 5*time.Second)
	if err != nil {
		return err
	}

	// 2. Voluntary handover: StepDown.
	tl.print("\n— 2. handover: %s steps down for 10s (revoke, task returns, release, OnRevoked; then a new leader)\n", leader.name)
	tl.say(leader.name, "StepDown(10s) called")
	if err := leader.e.StepDown(context.Background(), 10*time.Second); err != nil {
		return err
	}
	tl.say(leader.name, "StepDown returned; status %s", leader.e.Status())
	next, err := waitLeader(nodes, leader, 5*time.Second)
	if err != nil {
		return err
	}

	// 3. Failover: the new leader is cut off from the backend.
	tl.print("\n— 3. failover: %s loses its connection to the backend (as in a partition or a crash)\n", next.name)
	next.client.FailCalls(errors.New("connection refused"))
	tl.say(next.name, "cut off")
	after, err := waitLeader(nodes, next, 10*time.Second)
	if err != nil {
		return err
	}
	tl.say(after.name, "took over after %s's session expired on the backend", next.name)
	next.client.FailCalls(nil)

	// 4. A lock with its fencing token.
	tl.print("\n— 4. lock: node-a and node-c take the lock \"nightly-report\" in turn; the resource checks fencing tokens\n")
	store := &fencedStore{}
	a, c := nodes[0], nodes[2]
	la, err := lock.Acquire(context.Background(), a.s, "nightly-report")
	if err != nil {
		return err
	}
	tl.say(a.name, "holds the lock, token %d; writes: %v", la.Token(), store.write(la.Token(), "report v1"))
	staleToken := la.Token()
	_ = la.Close()
	tl.say(a.name, "released the lock")
	lc, err := lock.Acquire(context.Background(), c.s, "nightly-report")
	if err != nil {
		return err
	}
	tl.say(c.name, "holds the lock, token %d; writes: %v", lc.Token(), store.write(lc.Token(), "report v2"))
	tl.say(a.name, "a late write with old token %d (say, after a GC pause): %v", staleToken, store.write(staleToken, "report v1 (stale)"))
	_ = lc.Close()

	if err := demoGroup(tl, nodes); err != nil {
		return err
	}

	tl.print("\n— done: every node closes its session, which releases every lease at once.\n")
	for _, n := range nodes {
		_ = n.e.Stop(context.Background())
	}
	return nil
}

// waitLeader waits until a node other than not reports a new term.
func waitLeader(nodes []*node, not *node, within time.Duration) (*node, error) {
	deadline := time.After(within)
	for {
		for _, n := range nodes {
			if n == not {
				continue
			}
			select {
			case <-n.elected:
				return n, nil
			default:
			}
		}
		select {
		case <-deadline:
			return nil, fmt.Errorf("no leader within %v", within)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// fencedStore is a resource that remembers the highest token it accepted
// and refuses lower ones: the fencing that makes a late write harmless.
type fencedStore struct {
	mu      sync.Mutex
	highest uint64
	value   string
}

func (f *fencedStore) write(token uint64, v string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if token < f.highest {
		return fmt.Sprintf("REFUSED (token %d < %d already seen)", token, f.highest)
	}
	f.highest, f.value = token, v
	return fmt.Sprintf("accepted %q", v)
}
