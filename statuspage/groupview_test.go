package statuspage_test

import (
	"context"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/simba-go/simba/group"
	"github.com/simba-go/simba/session/memory"
	"github.com/simba-go/simba/statuspage"
)

// An operator opens a big group's partition table and reads it: it stays
// open across the page's refreshes (it used to be rebuilt closed every
// second), and a group of 2000 partitions renders them all.
func TestPartitionTableStaysOpenAcrossRefreshes(t *testing.T) {
	const n = 2000
	b, _ := memory.New()
	a := node(t, b.NewClient(), "node-a", map[string]string{"host": "host-a", "pid": "7"})
	g, err := group.Join(a, "orders", n)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = g.Leave(context.Background()) }()
	srv := httptest.NewServer(newPage(t, a, statuspage.WatchGroup("orders", n)))
	defer srv.Close()

	ctx := browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, `document.querySelector('.group-summary') && document.querySelector('.group-summary').textContent.includes('`+strconv.Itoa(n)+` of `+strconv.Itoa(n)+` partitions owned')`, "#groups")
	if err := chromedp.Do(ctx, chromedp.Click(`#groups details summary`)); err != nil {
		t.Fatal(err)
	}
	polls, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.dataset.polls`))
	if err != nil {
		t.Fatal(err)
	}
	p0, _ := strconv.Atoi(polls)
	waitFor(t, ctx, `(+document.body.dataset.polls) >= `+strconv.Itoa(p0+2), "#groups")
	open, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector('#groups details').open`))
	if err != nil {
		t.Fatal(err)
	}
	if !open {
		t.Fatal("the partition table the operator opened was closed by the next refresh")
	}
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#groups details tbody tr').length`))
	if err != nil {
		t.Fatal(err)
	}
	if rows != n {
		t.Fatalf("%d partition rows, want %d", rows, n)
	}
}
