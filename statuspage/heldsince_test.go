package statuspage_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/simba-go/simba/session/memory"
	"github.com/simba-go/simba/statuspage"
)

// The page looks only when asked: a lease taken while nobody had the page
// open was taken some time between the previous look and this one, and
// the page says so rather than "held since" the moment it noticed (an
// operator opening it in the morning would read that a leader of hours
// had just taken over).
func TestHeldSinceIsARangeBetweenLooks(t *testing.T) {
	b, _ := memory.New()
	a := node(t, b.NewClient(), "node-a", nil)
	w := node(t, b.NewClient(), "watcher", nil)
	h := newPage(t, w, statuspage.Watch("billing"))
	if st := h.Status(context.Background()); len(st.Holders) != 0 || !st.Backend.OK {
		t.Fatalf("first look: %+v, want billing free", st)
	}
	const gap = 2500 * time.Millisecond
	<-time.After(gap) // nobody looks for a while
	lead(t, a, "billing")
	st := h.Status(context.Background())
	if len(st.Holders) != 1 {
		t.Fatalf("holders %+v, want billing held", st.Holders)
	}
	hd := st.Holders[0]
	if hd.HeldBeforePage || hd.HeldSinceAfter == nil || hd.HeldSince.Sub(*hd.HeldSinceAfter) < gap {
		t.Fatalf("holder %+v (held_since_after %v), want it taken after the previous look, %v or more before held_since", hd, hd.HeldSinceAfter, gap)
	}

	srv := httptest.NewServer(h)
	defer srv.Close()
	ctx := browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, `document.querySelector('#holders').textContent.includes('node-a')`, "#holders")
	waitFor(t, ctx, `document.querySelector('#holders').textContent.includes('taken between')`, "#holders")
}
