// Package health is a health check for a Simba session and the work it
// leads, to wire into a service's /healthz (as client-go's leader-election
// HealthzAdaptor is): the process reports unhealthy when its session has not
// been LIVE for longer than a bound (SUSPENDED, or unable to open a backend
// session), when the session is closed, or when a leader task runs on after
// its term ended (it may be acting without being leader).
//
// An orchestrator that restarts unhealthy processes then restarts the
// node that can no longer reach the backend, or whose leader work ignores
// its term's context, instead of leaving it to act on stale leadership.
package health

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/simba-go/simba/session"
)

// ErrUnhealthy is wrapped by every error [Checker.Check] returns.
var ErrUnhealthy = errors.New("simba: unhealthy")

// Tasks is what the checker asks of an election (or anything running
// leader tasks): *election.Election implements it.
type Tasks interface {
	Name() string
	// Overrun is how long the longest task has run on since its term
	// ended, 0 if none has.
	Overrun() time.Duration
}

// Checker checks a session and the elections watched with it. It is safe
// for concurrent use.
type Checker struct {
	s        *session.Session
	notLive  time.Duration
	grace    time.Duration
	watching []Tasks
}

// An Option configures a [Checker].
type Option func(*Checker)

// NotLiveFor sets how long the session may stay out of LIVE (SUSPENDED or
// OPENING) before the check fails; the default is the session's lease
// duration, past which its terms are over anyway.
func NotLiveFor(d time.Duration) Option { return func(c *Checker) { c.notLive = d } }

// TaskGrace sets how long a task may run on after its term ended before
// the check fails; the default is the session's renewal period.
func TaskGrace(d time.Duration) Option { return func(c *Checker) { c.grace = d } }

// Watch adds elections whose tasks the check watches.
func Watch(ts ...Tasks) Option { return func(c *Checker) { c.watching = append(c.watching, ts...) } }

// New returns a checker of s. Zero or negative durations take the defaults.
func New(s *session.Session, opts ...Option) *Checker {
	c := &Checker{s: s}
	for _, o := range opts {
		o(c)
	}
	cfg := s.Config()
	if c.notLive <= 0 {
		c.notLive = cfg.LeaseDuration
	}
	if c.grace <= 0 {
		c.grace = cfg.RenewInterval
	}
	return c
}

// Name names the check ("simba"), as client-go's healthz checkers do.
func (c *Checker) Name() string { return "simba" }

// Check returns nil when healthy, else an error wrapping ErrUnhealthy that
// says why. The request is not used; it is there so that the method fits
// client-go's healthz.HealthChecker.
func (c *Checker) Check(*http.Request) error {
	state, since := c.s.StateSince()
	switch {
	case state == session.Closed:
		return fmt.Errorf("%w: session closed", ErrUnhealthy)
	case state != session.Live && since > c.notLive:
		return fmt.Errorf("%w: session %s for %v (bound %v)", ErrUnhealthy, state, since, c.notLive)
	}
	for _, t := range c.watching {
		if d := t.Overrun(); d > c.grace {
			return fmt.Errorf("%w: a task of %q runs on %v after its term ended (grace %v)", ErrUnhealthy, t.Name(), d, c.grace)
		}
	}
	return nil
}

// ServeHTTP answers 200 "ok" when healthy and 503 with the reason when not.
func (c *Checker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := c.Check(r); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = fmt.Fprintln(w, err)
		return
	}
	_, _ = fmt.Fprintln(w, "ok")
}
