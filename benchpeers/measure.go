package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"syscall"
	"time"
)

// pairCase is one way of taking and giving back an uncontended lock: the
// raw primitive pair, Simba, or a peer library. op runs one acquire +
// release of a name no one else uses.
type pairCase struct {
	name string
	op   func(ctx context.Context) error
}

// handoverCase measures one handover: A holds the lock, B starts waiting
// for it, lead later A releases; it returns the time from the start of A's
// release until B holds the lock.
type handoverCase struct {
	name  string
	run   func(ctx context.Context, lead time.Duration) (time.Duration, error)
	split *noticeSplit // where B's release notice fell in each handover, if known
}

// noticeSplit divides Simba's handovers at the moment B's session received
// the release notice: before it, the backend's release and its push;
// after it, the engine's answer (an Acquire on a goroutine of its own) and
// B's wake-up.
type noticeSplit struct {
	toNotice, afterNotice map[time.Duration][]time.Duration // by lead
}

// pairResult is what a pairCase measured over every round.
type pairResult struct {
	name    string
	lat     []time.Duration
	ops     int
	cpu     time.Duration // process CPU (user + system) spent in the case's batches
	allocs  uint64
	bytes   uint64
	failure error
}

// usage reads the process's CPU time and heap allocations so far. Both
// are process-wide: the batches of one case run alone, so the difference
// over a batch is the client's cost of that case (its library's goroutines
// included), plus a little background noise shared by every case alike.
// ReadMemStats rather than runtime/metrics: it flushes the per-P caches,
// so small batches count every allocation.
func usage() (cpu time.Duration, allocs, bytes uint64) {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), ms.Mallocs, ms.TotalAlloc
}

// opTimeout is the deadline of the fresh context every operation gets, as
// a caller on a hot path writes it: the context's timer and its
// cancellation are part of what every case costs.
const opTimeout = 5 * time.Second

// once runs one operation of c on a fresh deadline context.
func once(ctx context.Context, c pairCase) error {
	octx, cancel := context.WithTimeout(ctx, opTimeout)
	err := c.op(octx)
	cancel()
	return err
}

// runPairs runs rounds rounds; in each, every case runs batch operations,
// the cases in a fresh random order (batch 1: every operation has a
// different case before it, so none is measured on a server still busy
// with its own previous operation, nor on one idle since then). Each
// operation gets a fresh context.WithTimeout, created inside the timed
// span. A case that fails stops being run and reports its error.
func runPairs(ctx context.Context, rng *rand.Rand, cases []pairCase, rounds, batch int) []*pairResult {
	res := make([]*pairResult, len(cases))
	for i, c := range cases {
		res[i] = &pairResult{name: c.name, lat: make([]time.Duration, 0, rounds*batch)}
	}
	order := make([]int, len(cases))
	for i := range order {
		order[i] = i
	}
	for range rounds {
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, i := range order {
			c, r := cases[i], res[i]
			if r.failure != nil {
				continue
			}
			cpu0, a0, b0 := usage()
			for range batch {
				start := time.Now()
				if err := once(ctx, c); err != nil {
					r.failure = err
					break
				}
				r.lat = append(r.lat, time.Since(start))
			}
			cpu1, a1, b1 := usage()
			r.cpu += cpu1 - cpu0
			r.allocs += a1 - a0
			r.bytes += b1 - b0
			r.ops += batch
		}
	}
	return res
}

// blockResult is what a case measured alone, in blocks of n operations
// one after the other: the throughput view, where what an operation
// leaves for the server to finish (an unflushed commit, a notice) is paid
// by the next operation of the same case.
type blockResult struct {
	name    string
	means   []time.Duration // mean time per operation of each block
	ops     int
	wall    time.Duration
	cpu     time.Duration
	allocs  uint64
	bytes   uint64
	failure error
}

func (r *blockResult) mean() time.Duration {
	if r.ops == 0 {
		return 0
	}
	return r.wall / time.Duration(r.ops)
}

// runBlocks runs reps repetitions; in each, every case runs n operations
// alone (a fresh deadline context each), the cases in a fresh random
// order. The client's CPU and allocations per operation are taken over
// the blocks: no other case's garbage or goroutines are in them.
func runBlocks(ctx context.Context, rng *rand.Rand, cases []pairCase, reps, n int) []*blockResult {
	res := make([]*blockResult, len(cases))
	for i, c := range cases {
		res[i] = &blockResult{name: c.name}
	}
	order := make([]int, len(cases))
	for i := range order {
		order[i] = i
	}
	for range reps {
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, i := range order {
			c, r := cases[i], res[i]
			if r.failure != nil {
				continue
			}
			runtime.GC() // the previous case's garbage is not this one's
			cpu0, a0, b0 := usage()
			start := time.Now()
			done := 0
			for range n {
				if err := once(ctx, c); err != nil {
					r.failure = err
					break
				}
				done++
			}
			wall := time.Since(start)
			cpu1, a1, b1 := usage()
			if done == 0 {
				continue
			}
			r.means = append(r.means, wall/time.Duration(done))
			r.wall += wall
			r.cpu += cpu1 - cpu0
			r.allocs += a1 - a0
			r.bytes += b1 - b0
			r.ops += done
		}
	}
	return res
}

// handoverResult is what a handoverCase measured for one lead time.
type handoverResult struct {
	name    string
	lead    time.Duration
	lat     []time.Duration
	failure error
}

// runHandovers interleaves the handover cases in shuffled rounds, once
// per lead time per round.
func runHandovers(ctx context.Context, rng *rand.Rand, cases []handoverCase, leads []time.Duration, rounds int) []*handoverResult {
	type job struct{ c, l int }
	var jobs []job
	res := make([]*handoverResult, 0, len(cases)*len(leads))
	index := map[job]*handoverResult{}
	for ci, c := range cases {
		for li, l := range leads {
			r := &handoverResult{name: c.name, lead: l}
			res = append(res, r)
			index[job{ci, li}] = r
			jobs = append(jobs, job{ci, li})
		}
	}
	for range rounds {
		rng.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
		for _, j := range jobs {
			r := index[j]
			if r.failure != nil {
				continue
			}
			d, err := cases[j.c].run(ctx, leads[j.l])
			if err != nil {
				r.failure = err
				continue
			}
			r.lat = append(r.lat, d)
		}
	}
	return res
}

// quantile is the q-quantile of d (nearest rank); d is sorted in place.
func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(q*float64(len(d)) + 0.5)
	return d[min(max(i-1, 0), len(d)-1)]
}

func micros(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Microsecond)) }

func millis(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }
