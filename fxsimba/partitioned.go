package fxsimba

import (
	"context"
	"fmt"

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
// task returns, its lease is released with its token). An invalid name or
// count fails fx.New, wrapping ErrInvalidJob.
func PartitionedJob(name string, partitions int, task group.Task, opts ...group.Option) fx.Option {
	if err := group.Validate(name, partitions); err != nil {
		return fx.Error(fmt.Errorf("%w: partitioned job: %w", ErrInvalidJob, err))
	}
	if task == nil {
		return fx.Error(fmt.Errorf("%w: partitioned job %q has no task", ErrInvalidJob, name))
	}
	opts = append([]group.Option{group.RunWhileOwner(task)}, opts...)
	// Invoked after the session is built, so its hook runs after the
	// session's start hook and before its stop hook.
	return fx.Invoke(func(lc fx.Lifecycle, s *session.Session) {
		var g *group.Group
		lc.Append(fx.Hook{
			OnStart: func(context.Context) error {
				var err error
				g, err = group.Join(s, name, partitions, opts...)
				if err != nil {
					return fmt.Errorf("fxsimba: partitioned job: %w", err)
				}
				return nil
			},
			OnStop: func(ctx context.Context) error { return g.Leave(ctx) },
		})
	})
}
