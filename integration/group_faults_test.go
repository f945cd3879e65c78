package integration_test

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/simba-go/simba/simbatest"
)

// groupFaultPartitions is the size of the group the fault workers share.
const groupFaultPartitions = 12

// groupFaultBackends are the backends TestGroupFaults runs on in the CI
// slice; SIMBA_FAULT_GROUPS=all runs every one (make chaos), or a
// comma-separated list some.
func groupFaultBackends() []string {
	switch v := os.Getenv("SIMBA_FAULT_GROUPS"); v {
	case "":
		return []string{"postgres", "redis"}
	case "all":
		var all []string
		for _, st := range setups {
			all = append(all, st.name)
		}
		return all
	default:
		return strings.Split(v, ",")
	}
}

// TestGroupFaults is TestFaults for partition groups: three simba-worker
// processes join one group of 12 partitions (-group), the same faults hit
// a worker that owns partitions, and faultcheck checks every partition as
// an election: at most one valid owner at every instant (no act of a
// token inside an older token's believed-valid window), tokens rising per
// partition, callbacks paired per partition and process run.
func TestGroupFaults(t *testing.T) {
	d := faultDuration(t)
	want := groupFaultBackends()
	for _, st := range setups {
		if !slices.Contains(want, st.name) {
			continue
		}
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			args := []string{"-group", strconv.Itoa(groupFaultPartitions)}
			r := newRig(t, st.name, st.setup, args, args, args)
			for _, w := range r.workers {
				r.start(w)
			}
			ctx, cancel := context.WithTimeout(t.Context(), d+time.Minute)
			defer cancel()
			if r.waitLeader(ctx, 60*time.Second) == nil {
				t.Fatal("no worker owned a partition within 60s")
			}
			end := time.Now().Add(d)
			prev := "start"
			for i := 0; time.Now().Before(end); i++ {
				if i%len(r.faults) == 0 {
					rand.Shuffle(len(r.faults), func(a, b int) { r.faults[a], r.faults[b] = r.faults[b], r.faults[a] })
				}
				f := r.faults[i%len(r.faults)]
				if err := f.apply(ctx, r); err != nil {
					t.Errorf("fault %s (after %s): %v", f.name, prev, err)
				}
				prev = f.name
				// Let it settle: a takeover takes about a lease, a
				// rebalance two candidate ticks.
				sleep(ctx, leases(2.5, 3.5))
			}
			r.stopAll()
			rep := r.check()
			for _, v := range rep.Violations {
				t.Errorf("violation: %s", v)
			}
			if dir := os.Getenv("SIMBA_FAULT_LOGDIR"); dir != "" && len(rep.Violations) > 0 {
				keep := filepath.Join(dir, st.name)
				if err := os.CopyFS(keep, os.DirFS(r.dir)); err != nil {
					t.Log(err)
				}
				t.Logf("logs kept in %s", keep)
			}
			t.Logf("%s group of %d: %d acts, %d partition terms, faults %v, %d violations",
				st.name, groupFaultPartitions, rep.Acts, rep.Elections, rep.Faults, len(rep.Violations))
			if rep.Acts == 0 {
				t.Error("no act was logged: the workers never owned a partition")
			}
		})
	}
}

// TestGroupFaultCheckerCatches shows the checker able to fail on a group:
// a member that keeps acting on its partitions after they were revoked,
// paused past its lease while a correct member takes them over.
func TestGroupFaultCheckerCatches(t *testing.T) {
	args := []string{"-group", strconv.Itoa(groupFaultPartitions)}
	r := newRig(t, "redis", func(t *testing.T, r *rig) ([]string, bool) {
		return simbatest.Redis(t, simbatest.WithNamespace(r.ns)).Addrs(), false
	}, append(args, "-misbehave", "late"), args)
	ctx := t.Context()
	r.start(r.workers[0])
	if w := r.waitLeader(ctx, 30*time.Second); w != r.workers[0] {
		t.Fatalf("the misbehaving member does not own partitions first (%v)", w)
	}
	sleep(ctx, faultLease/2)
	r.start(r.workers[1])
	sleep(ctx, 2*faultLease) // the correct member joins and takes its share
	if err := r.pauseLeader(ctx, 2*faultLease); err != nil {
		t.Fatal(err)
	}
	sleep(ctx, 3*faultLease)
	r.stopAll()
	rep := r.check()
	if len(rep.Violations) == 0 {
		t.Fatalf("no violation found for a late group member (%d acts, %d partition terms)", rep.Acts, rep.Elections)
	}
	t.Logf("%d violations, first: %s", len(rep.Violations), rep.Violations[0])
}
