// Package faultcheck checks the logs of real processes contending for one
// election, or sharing the partitions of one group, while faults are
// applied, and reports how fast leadership came back after each fault.
//
// Every process logs its acts with the CLOCK_MONOTONIC time read before it
// checked its term and the time until which it then believed the term
// valid (that time plus Term.Remaining). CLOCK_MONOTONIC is one clock for
// every process of a machine, so acts of different processes compare
// directly. The rules:
//
//   - exclusion: no act of a token starts at or before the end of an older
//     token's last believed-valid window; a term handed over voluntarily
//     (revoked STOPPED or STEPPED_DOWN: its task returns before its lease
//     is released) ends its window when its task returned, if that is
//     earlier: the process knew its term over and acted no more;
//   - tokens strictly rise, across elections in time order;
//   - callbacks pair: within one process run, elected and revoked
//     alternate and carry the same token; a run ends with no open term
//     unless the process was killed; an act happens only inside its
//     token's elected..revoked span.
//
// Each rule holds per lease: an event's Lease names it (a group's
// partition lease, "<group>:p:<p>"); events without one are the
// election's, the only lease failovers are measured on.
package faultcheck

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"time"

	"golang.org/x/sys/unix"
)

// Event kinds.
const (
	Start   = "start"   // a process run begins
	Elected = "elected" // OnElected
	Act     = "act"     // one act under a term
	Revoked = "revoked" // OnRevoked
	// Returned: the term's task saw its term end and returned; it acts no
	// more under that token.
	Returned = "returned"
	Exit     = "exit"  // a process run ends cleanly
	Fault    = "fault" // the controller applies a fault (Worker is the target)
)

// Event is one line of a log.
type Event struct {
	Kind   string `json:"k"`
	Worker string `json:"w"`
	Run    int    `json:"n,omitempty"`          // the process run (restart count) of Worker
	T      int64  `json:"t"`                    // CLOCK_MONOTONIC, ns
	Token  uint64 `json:"tok,omitempty,string"` // a string, as every token in JSON (ADR 0196)
	Until  int64  `json:"u,omitempty"`          // Act: believed valid until (CLOCK_MONOTONIC, ns)
	Reason string `json:"r,omitempty"`          // Revoked: the reason; Fault: its kind
	Killed bool   `json:"killed,omitempty"`
	// Lease names the lease of Elected, Act and Revoked: a group
	// partition's ("<group>:p:<p>"); empty for the election.
	Lease string `json:"l,omitempty"`
}

// Now reads CLOCK_MONOTONIC, the clock every process of a machine shares
// (Go's monotonic readings are private to a process).
func Now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err) // cannot fail on Linux with a valid clock id
	}
	return ts.Nano()
}

// Read parses a log, one JSON event per line. A torn last line (a process
// killed mid-write) is ignored.
func Read(r io.Reader) ([]Event, error) {
	var out []Event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	var bad int
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			bad++
			continue
		}
		if bad > 0 {
			return nil, fmt.Errorf("faultcheck: unparsable line before line %d", len(out)+bad+1)
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// ReadFiles reads and merges logs.
func ReadFiles(paths ...string) ([]Event, error) {
	var all []Event
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		es, err := Read(f)
		_ = f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		all = append(all, es...)
	}
	return all, nil
}

// Failover is the time from a fault until an act of a newer token than
// the one that acted last before the fault.
type Failover struct {
	Fault  string
	Target string
	// D is the failover time; 0 with Kept when the old term went on.
	D    time.Duration
	Kept bool
}

// Report is the outcome of Check.
type Report struct {
	Acts       int
	Elections  int
	Faults     map[string]int
	Failovers  []Failover
	Violations []string
}

// Check applies the rules to the merged events of all processes and the
// controller, lease by lease.
func Check(events []Event) Report {
	es := slices.Clone(events)
	sort.SliceStable(es, func(i, j int) bool { return es[i].T < es[j].T })
	byLease := map[string][]Event{}
	var shared []Event // Start, Exit, Fault: every lease's
	for _, e := range es {
		switch e.Kind {
		case Elected, Act, Revoked, Returned:
			byLease[e.Lease] = append(byLease[e.Lease], e)
		default:
			shared = append(shared, e)
		}
	}
	leases := make([]string, 0, len(byLease))
	for l := range byLease {
		leases = append(leases, l)
	}
	slices.Sort(leases)
	if len(leases) == 0 {
		leases = []string{""}
	}
	r := Report{Faults: map[string]int{}}
	for _, e := range shared {
		if e.Kind == Fault {
			r.Faults[e.Reason]++
		}
	}
	for _, l := range leases {
		merged := append(slices.Clone(byLease[l]), shared...)
		sort.SliceStable(merged, func(i, j int) bool { return merged[i].T < merged[j].T })
		lr := checkLease(merged, l == "")
		r.Acts += lr.Acts
		r.Elections += lr.Elections
		r.Failovers = append(r.Failovers, lr.Failovers...)
		for _, v := range lr.Violations {
			if l != "" {
				v = l + ": " + v
			}
			r.Violations = append(r.Violations, v)
		}
	}
	return r
}

// checkLease applies the rules to one lease's events (with every Start,
// Exit and Fault), sorted by time; failovers are measured if measure.
func checkLease(es []Event, measure bool) Report {
	r := Report{}
	vio := func(format string, args ...any) { r.Violations = append(r.Violations, fmt.Sprintf(format, args...)) }

	// Callbacks paired, acts inside their term, per process run.
	type runKey struct {
		w string
		n int
	}
	open := map[runKey]uint64{} // token of the open term, 0 if none
	ended := map[runKey]bool{}
	for _, e := range es {
		k := runKey{e.Worker, e.Run}
		switch e.Kind {
		case Elected:
			if tok := open[k]; tok != 0 {
				vio("%s run %d: elected %d while %d still open", e.Worker, e.Run, e.Token, tok)
			}
			open[k] = e.Token
			r.Elections++
		case Revoked:
			if tok := open[k]; tok != e.Token {
				vio("%s run %d: revoked %d but the open term is %d", e.Worker, e.Run, e.Token, tok)
			}
			open[k] = 0
		case Act:
			r.Acts++
			if tok := open[k]; tok != e.Token {
				vio("%s run %d: act with token %d at %d outside its term (open: %d)", e.Worker, e.Run, e.Token, e.T, tok)
			}
		case Exit:
			if tok := open[k]; tok != 0 && !e.Killed {
				vio("%s run %d: exited with term %d still open (no OnRevoked)", e.Worker, e.Run, tok)
			}
			ended[k] = true
		}
	}

	// Tokens strictly rise across elections in time order.
	var last uint64
	for _, e := range es {
		if e.Kind != Elected {
			continue
		}
		if e.Token <= last {
			vio("token went from %d to %d (%s elected at %d)", last, e.Token, e.Worker, e.T)
		}
		last = max(last, e.Token)
	}

	// Exclusion: per token, the first act and the end of the last believed
	// window; a newer token's first act must come after every older
	// token's window end.
	type span struct {
		first, until int64
		who          string
	}
	spans := map[uint64]*span{}
	voluntary := map[uint64]bool{}
	returned := map[uint64]int64{}
	for _, e := range es {
		switch {
		case e.Kind == Revoked && (e.Reason == "STOPPED" || e.Reason == "STEPPED_DOWN"):
			voluntary[e.Token] = true
		case e.Kind == Returned:
			if t, ok := returned[e.Token]; !ok || e.T < t {
				returned[e.Token] = e.T
			}
		}
	}
	for _, e := range es {
		if e.Kind != Act {
			continue
		}
		until := e.Until
		if at, ok := returned[e.Token]; ok && voluntary[e.Token] && e.T <= at {
			// Acted before its task saw the voluntary end and returned:
			// believed valid until then at most. An act after the
			// return (a worker ignoring its revocation) counts in full.
			until = min(until, at)
		}
		s := spans[e.Token]
		if s == nil {
			s = &span{first: e.T, until: until, who: e.Worker}
			spans[e.Token] = s
		}
		s.until = max(s.until, until)
	}
	toks := make([]uint64, 0, len(spans))
	for t := range spans {
		toks = append(toks, t)
	}
	slices.Sort(toks)
	var maxUntil int64
	var maxTok uint64
	for _, t := range toks {
		s := spans[t]
		if maxTok != 0 && s.first <= maxUntil {
			vio("token %d (%s) acted at %d, inside token %d's believed-valid window (until %d, %v earlier)%s",
				t, s.who, s.first, maxTok, maxUntil, time.Duration(maxUntil-s.first), lastFault(es, s.first))
		}
		if s.until > maxUntil {
			maxUntil, maxTok = s.until, t
		}
	}

	// Failover after each fault: the first act of a token newer than the
	// last one that acted before the fault, if it comes before the next
	// fault.
	var faults []int
	for i, e := range es {
		if e.Kind == Fault && measure {
			faults = append(faults, i)
		}
	}
	for fi, i := range faults {
		end := len(es)
		if fi+1 < len(faults) {
			end = faults[fi+1]
		}
		var before uint64
		for j := i - 1; j >= 0; j-- {
			if es[j].Kind == Act {
				before = es[j].Token
				break
			}
		}
		f := Failover{Fault: es[i].Reason, Target: es[i].Worker, Kept: true}
		for j := i + 1; j < end; j++ {
			if es[j].Kind == Act && es[j].Token > before {
				f.D, f.Kept = time.Duration(es[j].T-es[i].T), false
				break
			}
		}
		r.Failovers = append(r.Failovers, f)
	}
	return r
}

// Percentile returns the p-th percentile (0-100) of the failovers that
// happened, and their maximum.
func (r Report) Percentile(p float64) (pct, maxD time.Duration, n int) {
	var ds []time.Duration
	for _, f := range r.Failovers {
		if !f.Kept {
			ds = append(ds, f.D)
		}
	}
	if len(ds) == 0 {
		return 0, 0, 0
	}
	slices.Sort(ds)
	idx := int(float64(len(ds)-1) * p / 100)
	return ds[idx], ds[len(ds)-1], len(ds)
}

// lastFault names the last fault applied at or before t, and how long
// before, for a violation's report ("" if none).
func lastFault(es []Event, t int64) string {
	for i := len(es) - 1; i >= 0; i-- {
		if e := es[i]; e.Kind == Fault && e.T <= t {
			return fmt.Sprintf("; last fault %s (%s) %v before", e.Reason, e.Worker, time.Duration(t-e.T))
		}
	}
	return ""
}
