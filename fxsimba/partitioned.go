package fxsimba

import (
	"context"
	"fmt"
	"reflect"

	"go.uber.org/fx"

	"github.com/simba-go/simba/group"
	"github.com/simba-go/simba/session"
)

// PartitionedJob makes the node a member of the partition group name with
// partitions partitions and runs task for every partition it owns, under
// the partition term's context (the specification's @SimbaPartitioned):
// the members share the partitions fairly, each owned by one node at a time
// under its own fencing token. The node joins on start; on stop it leaves
// before the session closes, handing each partition over in order (its
// task returns, its lease is released with its token).
//
// task is a group.Task, or, for a task that needs values of the fx graph,
// a constructor like those given to fx.Provide: a function whose
// parameters fx resolves and which returns the group.Task (and optionally
// an error, which fails the start of the application):
//
//	fxsimba.PartitionedJob("orders", 64, func(db *sql.DB, log *slog.Logger) group.Task {
//		return func(ctx context.Context, p int, t *term.Term) error { return consume(ctx, db, p, t.Token()) }
//	})
//
// An invalid name, count or task fails fx.New, wrapping ErrInvalidJob.
func PartitionedJob(name string, partitions int, task any, opts ...group.Option) fx.Option {
	if err := group.Validate(name, partitions); err != nil {
		return fx.Error(fmt.Errorf("%w: partitioned job: %w", ErrInvalidJob, err))
	}
	what := fmt.Sprintf("partitioned job %q", name)
	want := reflect.TypeFor[group.Task]()
	direct, ctor, err := taskOrConstructor(task, want, what)
	if err != nil {
		return fx.Error(err)
	}
	lead := []reflect.Type{reflect.TypeFor[fx.Lifecycle](), reflect.TypeFor[*session.Session]()}
	// Invoked after the session is built, so its hook runs after the
	// session's start hook and before its stop hook.
	return invokeTask(direct, ctor, want, what, lead, func(l []reflect.Value, tv reflect.Value) error {
		lc, s := l[0].Interface().(fx.Lifecycle), l[1].Interface().(*session.Session)
		all := append([]group.Option{group.RunWhileOwner(tv.Interface().(group.Task))}, opts...)
		var g *group.Group
		lc.Append(fx.Hook{
			OnStart: func(context.Context) error {
				var err error
				g, err = group.Join(s, name, partitions, all...)
				if err != nil {
					return fmt.Errorf("fxsimba: partitioned job: %w", err)
				}
				return nil
			},
			OnStop: func(ctx context.Context) error { return g.Leave(ctx) },
		})
		return nil
	})
}
