package statuspage_test

import (
	"context"
	"net/http/httptest"
	"regexp"
	"sync/atomic"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/simba-go/simba/session/driver"
	"github.com/simba-go/simba/session/memory"
	"github.com/simba-go/simba/statuspage"
)

// cutInspect is a memory client whose inspections hang, as across a
// partition, once cut.
type cutInspect struct {
	*memory.Backend
	cut atomic.Bool
}

func (c *cutInspect) Inspect(ctx context.Context, req driver.InspectRequest) ([]driver.Holder, error) {
	if c.cut.Load() {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return c.Backend.Inspect(ctx, req)
}

// With the backend not answering, a holder's "session left" is what the
// backend said at the last look: the page says when, rather than show a
// time left that stays frozen while the real one runs out.
func TestStaleSessionLeftSaysWhen(t *testing.T) {
	b, _ := memory.New()
	a := node(t, b.NewClient(), "node-a", nil)
	lead(t, a, "billing")
	c := &cutInspect{Backend: b.NewClient()}
	w := node(t, c, "watcher", nil)
	srv := httptest.NewServer(newPage(t, w, statuspage.Watch("billing")))
	defer srv.Close()
	ctx := browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, `document.querySelector('#holders').textContent.includes('node-a')`, "#holders")
	c.cut.Store(true)
	waitFor(t, ctx, `document.querySelectorAll('#holders tr.stale').length > 0`, "#holders")
	cell, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#holders tr.stale').lastChild.textContent`))
	if err != nil {
		t.Fatal(err)
	}
	if !regexpAt.MatchString(cell) {
		t.Fatalf("a stale holder's session left reads %q, want the time left as of the last look (… at HH:MM:SS)", cell)
	}
}

var regexpAt = regexp.MustCompile(`^\d.* at \d{2}:\d{2}:\d{2}`)
