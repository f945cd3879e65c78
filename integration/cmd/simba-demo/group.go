package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/simba-go/simba/group"
	"github.com/simba-go/simba/term"
)

// demoGroup shows a partition group rebalancing: six partitions over two
// members, then three, then two again, each move in handover order and
// each partition's fencing token rising as it changes hands.
func demoGroup(tl *timeline, nodes []*node) error {
	const partitions = 6
	tl.print("\n— 5. partition group \"orders\" with %d partitions: node-a and node-b join, node-c joins, node-a leaves\n", partitions)
	members := map[*node]*group.Group{}
	join := func(n *node) error {
		g, err := group.Join(n.s, "orders", partitions, group.WithMemberID(n.name),
			group.WithListener(group.Funcs{
				Assigned: func(p int, t *term.Term) { tl.say(n.name, "OnAssigned partition %d (token %d)", p, t.Token()) },
				Revoked: func(p int, t *term.Term, r term.RevokeReason) {
					tl.say(n.name, "OnRevoked  partition %d (token %d) reason %s", p, t.Token(), r.String())
				},
			}))
		if err != nil {
			return err
		}
		members[n] = g
		tl.say(n.name, "joined the group")
		return nil
	}
	a, b, c := nodes[0], nodes[1], nodes[2]
	for _, n := range []*node{a, b} {
		if err := join(n); err != nil {
			return err
		}
	}
	if err := settle(tl, members, partitions); err != nil {
		return err
	}
	if err := join(c); err != nil {
		return err
	}
	if err := settle(tl, members, partitions); err != nil {
		return err
	}
	tl.say(a.name, "Leave called")
	if err := members[a].Leave(context.Background()); err != nil {
		return err
	}
	tl.say(a.name, "Leave returned: its partitions were released with their tokens")
	delete(members, a)
	if err := settle(tl, members, partitions); err != nil {
		return err
	}
	for _, g := range members {
		if err := g.Close(); err != nil {
			return err
		}
	}
	return nil
}

// settle waits until every partition has one valid owner and the members
// share them fairly, then prints who owns what.
func settle(tl *timeline, members map[*node]*group.Group, partitions int) error {
	m := len(members)
	lo, hi := partitions/m, (partitions+m-1)/m
	deadline := time.Now().Add(15 * time.Second)
	for {
		owner := make([]string, partitions)
		fair, total := true, 0
		for n, g := range members {
			ts := g.Terms()
			fair = fair && len(ts) >= lo && len(ts) <= hi
			total += len(ts)
			for p, t := range ts {
				owner[p] = fmt.Sprintf("%s#%d", n.name, t.Token())
			}
		}
		if fair && total == partitions {
			var names []string
			for n := range members {
				names = append(names, n.name)
			}
			slices.Sort(names)
			var cells []string
			for p, o := range owner {
				cells = append(cells, fmt.Sprintf("p%d=%s", p, o))
			}
			tl.say("group", "settled over %s: %s", strings.Join(names, ", "), strings.Join(cells, " "))
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("group did not settle within 15s (%d of %d owned)", total, partitions)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
