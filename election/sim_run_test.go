package election

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
)

// simSeeds is how many seeds TestSimulation runs: SIMBA_SIM_SEEDS, or a
// few hundred for a quick run (make test sets 10,000; make sim-long more).
func simSeeds(t *testing.T, quick int) int {
	if v := os.Getenv("SIMBA_SIM_SEEDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SIMBA_SIM_SEEDS=%q: want a positive number", v)
		}
		return n
	}
	return quick
}

// TestSimulation runs the seeded simulation: mutual exclusion at every
// instant, rising tokens, no revived session, paired callbacks, handover
// order, and liveness once faults stop. A failing seed prints itself; rerun
// it alone with SIMBA_SIM_SEED=<seed>.
func TestSimulation(t *testing.T) {
	first, n := uint64(1), simSeeds(t, 300)
	if v := os.Getenv("SIMBA_SIM_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("SIMBA_SIM_SEED=%q: %v", v, err)
		}
		first, n = s, 1
	}
	events := 0
	progress := newSimProgress(n)
	for seed := first; seed < first+uint64(n); seed++ {
		r := runSimT(t, variedSim(seed), seed)
		events += r.events
		if len(r.violations) > 0 || len(r.leaderless) > 0 {
			if os.Getenv("SIMBA_SIM_TRACE") != "" {
				t.Log(r.trace)
			}
			t.Fatalf("seed %d (%+v) failed (reproduce: SIMBA_SIM_SEED=%d go test -run TestSimulation ./election):\n%v\n%v", seed, variedSim(seed), seed, r.violations, r.leaderless)
		}
		progress.seedPassed(seed)
	}
	t.Logf("%d seeds, %d events", n, events)
}

// TestSimulationIsReproducible: one seed, one run, exactly.
func TestSimulationIsReproducible(t *testing.T) {
	for _, seed := range []uint64{7, 8, 9} {
		a, b := runSimT(t, variedSim(seed), seed), runSimT(t, variedSim(seed), seed)
		if a.hash != b.hash || a.events != b.events {
			t.Fatalf("seed %d ran twice differently: %d events (hash %x) vs %d (hash %x)", seed, a.events, a.hash, b.events, b.hash)
		}
		if a.events < 500 {
			t.Fatalf("seed %d ran only %d events: the simulation does too little to prove anything", seed, a.events)
		}
	}
}

// TestSimulationCatchesDriftBeyondTheBound shows that the checker can
// fail: with node clocks slower than the configured drift allows, some seed
// must show two valid terms at once.
func TestSimulationCatchesDriftBeyondTheBound(t *testing.T) {
	cfg := defaultSim()
	cfg.rateDev = 0.3 // clocks up to 30% slow, with drift configured at 1%
	cfg.dataLoss = false
	for seed := uint64(1); seed <= 300; seed++ {
		r := runSimT(t, cfg, seed)
		if len(r.violations) > 0 {
			t.Logf("seed %d: %v", seed, r.violations[0])
			return
		}
	}
	t.Fatal("300 seeds with drift 30× beyond the bound found no violation: the checker is blind")
}

var _ = time.Second

// simProgress prints, to stderr, a line every 10,000 seeds when many are
// asked (make sim-long), so that a run of an hour shows it is alive and how
// fast it goes. A quick run prints nothing.
type simProgress struct {
	total, done int
	start       time.Time
}

func newSimProgress(total int) *simProgress {
	return &simProgress{total: total, start: time.Now()}
}

func (p *simProgress) seedPassed(seed uint64) {
	p.done++
	if p.total >= 20_000 && p.done%10_000 == 0 {
		fmt.Fprintf(os.Stderr, "%s simulation: %d of %d seeds passed (last %d), %v\n", "election", p.done, p.total, seed, time.Since(p.start).Round(time.Second))
	}
}
