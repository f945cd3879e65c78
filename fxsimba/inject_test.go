package fxsimba_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/fxsimba"
	"github.com/simba-go/simba/group"
	"github.com/simba-go/simba/term"
)

// store stands for a value the application's graph provides (a *sql.DB).
type store struct {
	mu    sync.Mutex
	lines []string
}

func (s *store) add(format string, args ...any) {
	s.mu.Lock()
	s.lines = append(s.lines, fmt.Sprintf(format, args...))
	s.mu.Unlock()
}

func (s *store) get() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := append([]string(nil), s.lines...)
	sort.Strings(out)
	return out
}

type prefix string

// LeaderJob, WhileLeader and PartitionedJob take, like fx.Provide, a
// constructor whose parameters fx resolves (plain and fx.In parameters)
// and which returns the task (issue 22, item 10).
func TestJobsTakeValuesFromTheGraph(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type deps struct {
			fx.In
			Store  *store
			Prefix prefix `optional:"true"`
		}
		st := &store{}
		app := fxtest.New(t, fx.Provide(fxsimba.Module), backend(newMemory(t)), env(nil), quiet(),
			fx.Supply(st, prefix("db")),
			fxsimba.LeaderJob("purge", time.Minute, func(s *store, p prefix) election.Task {
				return func(ctx context.Context, tm *term.Term) error { s.add("%s purge %v", p, tm); return nil }
			}),
			fxsimba.WhileLeader("indexer", func(d deps) (election.Task, error) {
				return func(ctx context.Context, tm *term.Term) error { d.Store.add("%s index %v", d.Prefix, tm); return nil }, nil
			}),
			fxsimba.PartitionedJob("orders", 2, func(s *store) group.Task {
				return func(ctx context.Context, p int, tm *term.Term) error { s.add("orders %d", p); <-ctx.Done(); return nil }
			}),
		)
		app.RequireStart()
		<-time.After(15 * time.Second)
		synctest.Wait()
		app.RequireStop()
		got := strings.Join(st.get(), "; ")
		for _, want := range []string{"db purge purge#1", "db index indexer#1", "orders 0", "orders 1"} {
			if !strings.Contains(got, want) {
				t.Fatalf("the tasks ran %q, want %q among them", got, want)
			}
		}
	})
}

// A constructor's error fails the application, naming the job; a task of
// the wrong shape or a constructor of the wrong shape fails fx.New naming
// the rule; a missing dependency is fx's own error.
func TestJobConstructorErrors(t *testing.T) {
	newApp := func(opts ...fx.Option) error {
		return fx.New(append([]fx.Option{fx.Provide(fxsimba.Module), backend(newMemory(t)), env(nil), quiet(), fx.NopLogger}, opts...)...).Err()
	}
	boom := errors.New("no database")
	if err := newApp(fxsimba.LeaderJob("purge", time.Minute, func() (election.Task, error) { return nil, boom })); !errors.Is(err, boom) || !strings.Contains(err.Error(), `job "purge"`) {
		t.Errorf("a failing constructor: %v, want its error, naming the job", err)
	}
	if err := newApp(fxsimba.LeaderJob("purge", time.Minute, func() election.Task { return nil })); !errors.Is(err, fxsimba.ErrInvalidJob) {
		t.Errorf("a constructor returning nil: %v, want ErrInvalidJob", err)
	}
	for name, task := range map[string]any{
		"a task of the wrong shape": func(ctx context.Context) error { return nil },
		"a constructor of no task":  func(s *store) int { return 0 },
		"not a function":            42,
		"a variadic constructor":    func(s ...*store) election.Task { return nil },
		"a second result not error": func() (election.Task, int) { return nil, 0 },
		"a nil election.Task":       election.Task(nil),
	} {
		err := newApp(fxsimba.LeaderJob("purge", time.Minute, task))
		if !errors.Is(err, fxsimba.ErrInvalidJob) || (name != "a nil election.Task" && !strings.Contains(err.Error(), "constructor returning one")) {
			t.Errorf("%s: %v, want ErrInvalidJob naming the rule", name, err)
		}
	}
	if err := newApp(fxsimba.PartitionedJob("orders", 2, func(ctx context.Context, t *term.Term) error { return nil })); !errors.Is(err, fxsimba.ErrInvalidJob) {
		t.Errorf("an election.Task given to PartitionedJob: %v, want ErrInvalidJob", err)
	}
	if err := newApp(fxsimba.WhileLeader("indexer", func(s *store) election.Task { return nil })); err == nil || !strings.Contains(err.Error(), "store") {
		t.Errorf("a missing dependency: %v, want fx's error naming the type", err)
	}
}
