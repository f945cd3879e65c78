package group

import (
	"context"
	"fmt"
	"time"

	"github.com/simba-go/simba/term"
)

// StepDown gives up every partition this member owns and stops being
// counted as a member for cooldown, counted from now; then it joins again
// and takes its share back, as a newcomer would. The Group stays usable
// throughout: its Listener and tasks hear the partitions go and come back.
// Use it to move load off a node (before a deploy, or while it is
// overloaded) without closing its session.
//
// The order is Leave's: the member record is released first, so that the
// other members stop counting this one at their next poll and compete for
// its partitions; then each partition is handed over (its term revoked
// with STEPPED_DOWN, its lease kept until its tasks return or the term's
// remaining time runs out, released with its token, then OnRevoked). A
// partition moves to its next owner only once its tasks have returned.
// StepDown waits for all that, or for ctx. Called again during a cooldown,
// it restarts the cooldown from now.
//
// It returns ErrWouldBlockSelf when called from the group's own callback
// or task (the step down was started, not waited for), and an error
// wrapping ErrLeft once Leave or Close was called or the session closed.
// See docs/adr/0103-group-step-down.md for why a member steps down as a
// whole rather than partition by partition.
func (g *Group) StepDown(ctx context.Context, cooldown time.Duration) error {
	done, left := g.stepDown(cooldown)
	if !left {
		select {
		case <-done:
			return nil
		default:
		}
		if g.eng.WouldWaitForSelf(ctx, g) {
			return ErrWouldBlockSelf
		}
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("simba: group %q: waiting for the step down: %w", g.name, context.Cause(ctx))
		}
	}
	return fmt.Errorf("simba: group %q: step down: %w", g.name, ErrLeft)
}

func (g *Group) stepDown(cooldown time.Duration) (done <-chan struct{}, left bool) {
	ch := make(chan struct{})
	g.eng.Do(func() {
		if g.leaving != nil || g.closed {
			left = true
			return
		}
		g.stopPoll()
		g.stopCooldown()
		g.cooling = true
		g.joined = false
		g.blind = false
		g.coolStop = g.eng.AfterFunc(max(cooldown, 0), func() { g.eng.Do(g.endCooldown) })
		// The member record first: the others stop counting this member
		// and compete for its partitions while they are handed over.
		g.member.Want(false)
		g.member.Release(term.SteppedDown, nil)
		g.stepped = append(g.stepped, ch)
		for _, pt := range g.parts {
			if pt != nil {
				pt.unwant(term.SteppedDown)
			}
		}
		g.checkLeft()
	})
	return ch, left
}

// endCooldown makes the member compete for its member record again; its
// first poll after winning it takes its share. Lock held.
func (g *Group) endCooldown() {
	if !g.cooling {
		return
	}
	g.cooling = false
	g.coolStop = nil
	if g.leaving == nil && !g.closed {
		g.member.Want(true)
	}
}

// stopCooldown cancels the cooldown's timer. Lock held.
func (g *Group) stopCooldown() {
	if g.coolStop != nil {
		g.coolStop()
		g.coolStop = nil
	}
	g.cooling = false
}
