package statuspage_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/simba-go/simba/election"
	"github.com/simba-go/simba/session"
	"github.com/simba-go/simba/session/memory"
	"github.com/simba-go/simba/statuspage"
	"github.com/simba-go/simba/term"
)

func node(t *testing.T, b *memory.Backend, id string) *session.Session {
	t.Helper()
	s, err := session.Open(context.Background(), b.NewClient(), session.WithLogger(nil), session.WithIdentity(id, nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// lead starts an election of billing on s and waits until it leads.
func lead(t *testing.T, s *session.Session) *election.Election {
	t.Helper()
	won := make(chan struct{}, 1)
	e, err := election.Start(s, "billing", election.WithListener(election.Funcs{Elected: func(*term.Term) { won <- struct{}{} }}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	<-won
	return e
}

func TestStatusJSON(t *testing.T) {
	b, _ := memory.New()
	a := node(t, b, "node-a")
	lead(t, a)
	srv := httptest.NewServer(statuspage.New(a, statuspage.Watch("billing", "nobody")))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/status.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Session struct {
			State   string `json:"state"`
			Entries []struct{ Name, Status string }
		} `json:"session"`
		Owner   session.Owner    `json:"owner"`
		Holders []session.Holder `json:"holders"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	if len(st.Holders) != 1 || st.Holders[0].Owner.Identity != "node-a" || st.Session.State != "LIVE" ||
		len(st.Session.Entries) != 1 || st.Session.Entries[0].Status != "LEADER" || st.Owner.Identity != "node-a" {
		t.Fatalf("status = %+v", st)
	}
}

// chromium finds the headless browser the test drives: SIMBA_CHROMIUM, or
// chromium on PATH (scripts/services.sh installs Debian's).
func chromium(t *testing.T) string {
	if p := os.Getenv("SIMBA_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium: run `make services` (installs Debian's chromium) or set SIMBA_CHROMIUM; the status page is tested in a real headless browser")
	return ""
}

// TestPageInHeadlessChromium: the page loads, shows the current leader,
// and shows the new one after a handover, without a reload.
func TestPageInHeadlessChromium(t *testing.T) {
	path := chromium(t)
	b, _ := memory.New()
	a, bb, watcher := node(t, b, "node-a"), node(t, b, "node-b"), node(t, b, "watcher")
	ea := lead(t, a)
	won := make(chan struct{}, 1)
	eb, err := election.Start(bb, "billing", election.WithListener(election.Funcs{Elected: func(*term.Term) { won <- struct{}{} }}))
	if err != nil {
		t.Fatal(err)
	}
	defer eb.Close()
	srv := httptest.NewServer(statuspage.New(watcher, statuspage.Watch("billing")))
	defer srv.Close()

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path),
		chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.NoFirstRun, chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, 90*time.Second)
	defer cancelT()

	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(`#holders tr`)); err != nil {
		t.Fatalf("load the page in %s: %v", path, err)
	}
	holders, err := chromedp.Run(ctx, chromedp.Text(`#holders`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(holders, "node-a") {
		t.Fatalf("the page shows %q, want node-a leading billing", holders)
	}
	if err := ea.StepDown(context.Background(), time.Hour); err != nil {
		t.Fatal(err)
	}
	<-won
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelector('#holders').textContent.includes('node-b')`,
		chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		holders, _ = chromedp.Run(ctx, chromedp.Text(`#holders`))
		t.Fatalf("after the handover the page shows %q, want node-b: %v", holders, err)
	}
}
