package statuspage_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
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

func node(t *testing.T, b session.Backend, id string, md map[string]string) *session.Session {
	t.Helper()
	s, err := session.Open(context.Background(), b, session.WithLogger(nil), session.WithIdentity(id, md))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// lead starts an election of name on s and waits until it leads.
func lead(t *testing.T, s *session.Session, name string) *election.Election {
	t.Helper()
	won := make(chan struct{}, 1)
	e, err := election.Start(s, name, election.WithListener(election.Funcs{Elected: func(*term.Term) { won <- struct{}{} }}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	select {
	case <-won:
	case <-time.After(30 * time.Second): // a bound on a hang
		t.Fatalf("%s: not elected within 30s", name)
	}
	return e
}

func newPage(t *testing.T, s *session.Session, opts ...statuspage.Option) *statuspage.Handler {
	t.Helper()
	h, err := statuspage.New(s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func getStatus(t *testing.T, url string) (statuspage.Status, map[string]any) {
	t.Helper()
	resp, err := http.Get(url + "/status.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		t.Fatal(err)
	}
	var st statuspage.Status
	var generic map[string]any
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &generic); err != nil {
		t.Fatal(err)
	}
	return st, generic
}

func TestStatusJSON(t *testing.T) {
	b, _ := memory.New()
	a := node(t, b.NewClient(), "node-a", map[string]string{"host": "h1", "pid": "42", "version": "v1.2.3"})
	e := lead(t, a, "billing")
	srv := httptest.NewServer(newPage(t, a, statuspage.Watch("billing", "nobody")))
	defer srv.Close()
	st, raw := getStatus(t, srv.URL)
	if len(st.Holders) != 1 || st.Session.State != "LIVE" || len(st.Session.Entries) != 1 ||
		st.Session.Entries[0].Status != "LEADER" || st.Owner.Identity != "node-a" {
		t.Fatalf("status = %+v", st)
	}
	h := st.Holders[0]
	if h.Owner.Host != "h1" || h.Owner.PID != "42" || h.Owner.Version != "v1.2.3" || !h.Mine || h.HeldSince.IsZero() || !h.HeldBeforePage {
		t.Fatalf("holder = %+v, want node-a's host, pid and version, mine, held since the page's first look", h)
	}
	// Tokens are JSON strings and durations whole milliseconds, everywhere.
	holder := raw["holders"].([]any)[0].(map[string]any)
	if _, ok := holder["token"].(string); !ok {
		t.Fatalf("holders[0].token = %#v, want a string", holder["token"])
	}
	entry := raw["session"].(map[string]any)["entries"].([]any)[0].(map[string]any)
	if _, ok := entry["token"].(string); !ok {
		t.Fatalf("session.entries[0].token = %#v, want a string", entry["token"])
	}
	checkDurations(t, "", raw)
	if got := e.Term().Token(); h.Token != strconvU(got) {
		t.Fatalf("token %q, want %d", h.Token, got)
	}
}

// checkDurations fails for any field that looks like a duration but is
// not an integer of milliseconds named *_ms (issue 22: "5.167511882s" and
// 4027000000 in one JSON).
func checkDurations(t *testing.T, path string, v any) {
	t.Helper()
	switch x := v.(type) {
	case map[string]any:
		for k, c := range x {
			p := path + "." + k
			switch {
			case strings.HasSuffix(k, "_ms"):
				if f, ok := c.(float64); c != nil && (!ok || f != float64(int64(f))) {
					t.Errorf("%s = %#v, want whole milliseconds", p, c)
				}
			case k == "remaining" || k == "in_state" || k == "renew_every":
				t.Errorf("%s: a duration not in milliseconds", p)
			default:
				checkDurations(t, p, c)
			}
		}
	case []any:
		for _, c := range x {
			checkDurations(t, path+"[]", c)
		}
	case string:
		if _, err := time.ParseDuration(x); err == nil && strings.ContainsAny(x, "smh") {
			t.Errorf("%s = %q: a duration as text", path, x)
		}
	}
}

func TestInvalidOptions(t *testing.T) {
	b, _ := memory.New()
	s := node(t, b, "x", nil)
	for name, opt := range map[string]statuspage.Option{
		"bad name":      statuspage.Watch("a b"),
		"bad prefix":    statuspage.WatchPrefix(""),
		"bad group":     statuspage.WatchGroup("orders", 0),
		"zero timeout":  statuspage.InspectTimeout(0),
		"group with :":  statuspage.WatchGroup("a:b", 4),
		"empty in list": statuspage.Watch("ok", ""),
	} {
		if _, err := statuspage.New(s, opt); !errors.Is(err, statuspage.ErrInvalidOption) {
			t.Errorf("%s: New = %v, want ErrInvalidOption", name, err)
		}
	}
}

// The holder's renewals and a handover, as the JSON
// reports them (the page shows the same fields).
func TestRenewalsAndTransitions(t *testing.T) {
	b, _ := memory.New()
	a := node(t, b.NewClient(), "node-a", nil)
	bn := node(t, b.NewClient(), "node-b", nil)
	w := node(t, b.NewClient(), "watcher", nil)
	ea := lead(t, a, "billing")
	h := newPage(t, w, statuspage.Watch("billing"))
	st := h.Status(context.Background())
	if len(st.Holders) != 1 || st.Holders[0].RenewedAgoMS != nil {
		t.Fatalf("first look: %+v, want one holder with no renewal seen yet", st.Holders)
	}
	// The next renewal (every 5s by default) raises the holder's remaining
	// time: the page sees it within one renewal period.
	deadline := time.Now().Add(20 * time.Second) // a bound on a hang
	for st.Holders[0].RenewedAgoMS == nil {
		if time.Now().After(deadline) {
			t.Fatal("no renewal seen in 20s")
		}
		<-time.After(300 * time.Millisecond)
		st = h.Status(context.Background())
	}
	if ago := *st.Holders[0].RenewedAgoMS; ago < 0 || ago > 1000 {
		t.Fatalf("renewed_ago_ms = %d just after the renewal was seen, want at most one inspection interval", ago)
	}
	eb, err := election.Start(bn, "billing")
	if err != nil {
		t.Fatal(err)
	}
	defer eb.Close()
	if err := ea.StepDown(context.Background(), time.Hour); err != nil {
		t.Fatal(err)
	}
	for eb.Status() != election.Leader {
		if time.Now().After(deadline.Add(30 * time.Second)) {
			t.Fatal("node-b not elected")
		}
		<-time.After(50 * time.Millisecond)
	}
	<-time.After(300 * time.Millisecond)
	st = h.Status(context.Background())
	if len(st.Transitions) == 0 || st.Transitions[0].To == nil || st.Transitions[0].To.Owner.Identity != "node-b" {
		t.Fatalf("transitions = %+v, want the latest to node-b", st.Transitions)
	}
	if st.Holders[0].HeldBeforePage || st.Holders[0].Owner.Identity != "node-b" {
		t.Fatalf("holder after the handover = %+v, want node-b, held since the page saw it taken", st.Holders[0])
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
	t.Fatal("no chromium: run `./scripts/services.sh start` with SIMBA_SERVICES=chromium (installs Debian's chromium) or set SIMBA_CHROMIUM; the status page is tested in a real headless browser")
	return ""
}

// browser starts a headless Chromium for the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path),
		chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.NoFirstRun, chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.WindowSize(1280, 1000), chromedp.UserDataDir(t.TempDir()))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelA)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	// The first action starts the browser: without a timeout, which would
	// stop the whole browser (chromedp.Run).
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	ctx, cancelT := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(cancelT)
	return ctx
}

// screenshot saves the page as name.png under SIMBA_ARTIFACTS (else the
// test's temporary directory) and returns the path.
func screenshot(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if len(png) < 1000 {
		t.Fatalf("screenshot %s: %d bytes", name, len(png))
	}
	dir := os.Getenv("SIMBA_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	p := filepath.Join(dir, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", p)
	return p
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.TextContent(sel))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// waitFor polls a JavaScript condition in the page (bounded).
func waitFor(t *testing.T, ctx context.Context, cond, sel string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](cond, chromedp.WithPollingTimeout(45*time.Second))); err != nil {
		t.Fatalf("the page never satisfied %s: %v; it shows %q", cond, err, text(t, ctx, sel))
	}
}
