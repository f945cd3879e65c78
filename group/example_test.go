package group_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/simba-go/simba/group"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/memory"
	"github.com/simba-go/simba/term"
)

// A member of the group "orders" with 4 partitions: alone, it owns all of
// them, each under its own fencing token; more members would share them.
func ExampleJoin() {
	b, _ := memory.New()
	s, err := session.Open(context.Background(), b, session.WithLogger(nil))
	if err != nil {
		panic(err)
	}
	defer s.Close()

	var mu sync.Mutex
	var owned []int
	all := make(chan struct{})
	g, err := group.Join(s, "orders", 4,
		group.WithListener(group.Funcs{
			Assigned: func(p int, t *term.Term) {
				mu.Lock()
				defer mu.Unlock()
				if owned = append(owned, p); len(owned) == 4 {
					close(all)
				}
			},
		}),
		group.RunWhileOwner(func(ctx context.Context, p int, t *term.Term) error {
			// Work on partition p while ctx lives; pass t.Token() to every
			// write so a resource can reject a stale owner.
			<-ctx.Done()
			return nil
		}))
	if err != nil {
		panic(err)
	}
	<-all
	mu.Lock()
	sort.Ints(owned)
	fmt.Println("owns", owned)
	mu.Unlock()
	if err := g.Close(); err != nil { // hands every partition over, in order
		panic(err)
	}
	fmt.Println(g.Snapshot().Status)
	// Output:
	// owns [0 1 2 3]
	// LEFT
}

// Assign is the assignment every member computes: fair and sticky.
func ExampleAssign() {
	before := group.Assign(6, []string{"a", "b"}, nil)
	after := group.Assign(6, []string{"a", "b", "c"}, before)
	moved := 0
	for p := range before {
		if before[p] != after[p] {
			moved++
		}
	}
	fmt.Println("moved", moved, "of 6 when c joined")
	// Output: moved 2 of 6 when c joined
}

// A member moves its load off before a deploy: StepDown hands every
// partition over in order (tasks return, then each lease is released with
// its token, then OnRevoked), and the member is not counted for the
// cooldown, so the other members take its partitions; afterwards it joins
// again and takes its share back.
func ExampleGroup_StepDown() {
	b, _ := memory.New()
	s, err := session.Open(context.Background(), b, session.WithLogger(nil))
	if err != nil {
		panic(err)
	}
	defer s.Close()

	var mu sync.Mutex
	owned := map[int]bool{}
	all := make(chan struct{})
	g, err := group.Join(s, "orders", 2, group.WithListener(group.Funcs{
		Assigned: func(p int, _ *term.Term) {
			mu.Lock()
			defer mu.Unlock()
			if owned[p] = true; len(owned) == 2 {
				close(all)
			}
		},
		Revoked: func(p int, _ *term.Term, reason term.RevokeReason) {
			mu.Lock()
			defer mu.Unlock()
			delete(owned, p)
			fmt.Println("revoked", p, reason.String())
		},
	}))
	if err != nil {
		panic(err)
	}
	<-all
	if err := g.StepDown(context.Background(), time.Hour); err != nil {
		panic(err)
	}
	mu.Lock()
	fmt.Println("owned after StepDown:", len(owned), g.Snapshot().Status)
	mu.Unlock()
	if err := g.Close(); err != nil {
		panic(err)
	}
	// Unordered output:
	// revoked 0 STEPPED_DOWN
	// revoked 1 STEPPED_DOWN
	// owned after StepDown: 0 COOLDOWN
}

// A group whose partitions ask the backend for a lock-delay: a member that
// dies without leaving keeps its partitions from the others for 15s after
// its session ends; rebalances and Leave hand them over at once.
func ExampleWithLockDelay() {
	b, _ := memory.New(memory.WithMaxLockDelay(15 * time.Second))
	s, _ := session.Open(context.Background(), b, session.WithLogger(nil))
	defer s.Close()

	all := make(chan struct{})
	var once sync.Once
	n := 0
	g, err := group.Join(s, "ledgers", 2, group.WithLockDelay(15*time.Second),
		group.WithListener(group.Funcs{Assigned: func(int, *term.Term) {
			if n++; n == 2 {
				once.Do(func() { close(all) })
			}
		}}))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer g.Close()
	<-all
	fmt.Println("owned:", len(g.Terms()))
	// Output: owned: 2
}
