package election

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simba-go/simba/term"
)

// fixedLife is a lifeline with a fixed remaining time.
type fixedLife time.Duration

func (l fixedLife) Remaining() time.Duration { return time.Duration(l) }

// The simulation's handover-order check must be able to fail (mutation
// sim-handover-skips-valid-older-term): during a voluntary handover, an
// OnElected on another node before the old task returned is a violation,
// also for a term whose token is lower than the handed-over one as long
// as that term is valid. Only an older term that has already ended is
// skipped: the late OnElected of a node paused since it won (sim-long seed
// 71966), which is no new leader.
func TestHandoverCheckSkipsOnlyEndedOlderTerms(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := defaultSim()
		cfg.faults, cfg.nodes, cfg.names = false, 2, []string{"alpha"}
		w := newSim(cfg, 1)
		w.run(5 * time.Second) // both sessions are live
		a, b := w.nodes[0], w.nodes[1]
		if a.s.Remaining() <= 0 {
			t.Fatal("node 1's session is not live after 5s without faults")
		}
		handed, _ := term.New(context.Background(), "alpha", 100, fixedLife(time.Minute))
		w.tasks = append(w.tasks, &simTask{node: a, name: "alpha", t: handed,
			stopWait: w.now, boundAt: w.now + int64(time.Minute), sessionAtStop: a.s.ID()})
		for _, tc := range []struct {
			name  string
			token uint64
			life  time.Duration
			want  bool // a handover-order violation
		}{
			{"valid newer term", 200, time.Minute, true},
			{"valid older term", 50, time.Minute, true},
			{"ended older term", 50, 0, false},
		} {
			w.violations = nil
			b.cbs["alpha"] = nil
			cb, _ := term.New(context.Background(), "alpha", tc.token, fixedLife(tc.life))
			w.callback(b, "alpha", simCallback{elected: true, t: cb})
			got := false
			for _, v := range w.violations {
				got = got || strings.Contains(v, "before the task of")
			}
			if got != tc.want {
				t.Errorf("%s: OnElected(%s) during the handover of %s: violation %v, want %v (violations: %q)", tc.name, cb, handed, got, tc.want, w.violations)
			}
		}
	})
}
