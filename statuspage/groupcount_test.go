package statuspage_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/simba-go/simba/group"
	"github.com/simba-go/simba/session/memory"
	"github.com/simba-go/simba/statuspage"
)

// A rolling deploy changing a group's partition count: members configured
// with 8 and 4 serve the smallest, 4. The page (configured with 8) shows
// the count each member has and the count served, and does not report
// partitions 4 to 7, which nobody is meant to own now, as unowned.
func TestGroupCountMismatchShownNotUnowned(t *testing.T) {
	b, _ := memory.New()
	a := node(t, b.NewClient(), "node-a", nil)
	c := node(t, b.NewClient(), "node-c", nil)
	ga, err := group.Join(a, "orders", 8)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ga.Leave(context.Background()) }()
	gc, err := group.Join(c, "orders", 4)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = gc.Leave(context.Background()) }()
	h := newPage(t, node(t, b.NewClient(), "watcher", nil), statuspage.WatchGroup("orders", 8))
	deadline := time.Now().Add(60 * time.Second) // a bound on a hang
	for {
		st := h.Status(context.Background())
		g := st.Groups[0]
		owned := map[int]bool{}
		for _, ph := range g.Holders {
			owned[ph.Partition] = true
		}
		if len(g.Members) == 2 && owned[0] && owned[1] && owned[2] && owned[3] && len(g.Holders) == 4 {
			counts := map[string]int{}
			for _, m := range g.Members {
				counts[m.Owner.Identity] = m.ConfiguredPartitions
			}
			if g.ServingPartitions != 4 || len(g.Unowned) != 0 || counts["node-a"] != 8 || counts["node-c"] != 4 {
				t.Fatalf("group %+v: want serving 4, nothing unowned, members configured with 8 (node-a) and 4 (node-c)", g)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the group never settled on 4 partitions: %+v", g)
		}
		<-time.After(300 * time.Millisecond)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	ctx := browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, `document.querySelector('.group-summary') && document.querySelector('.group-summary').textContent.includes('4 of 4 partitions owned; members disagree on the partition count')`, "#groups")
}
