package session

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/simba-go/simba/deadline"
)

// An Option configures a Session.
type Option func(*options)

type options struct {
	cfg       deadline.Config
	env       Env
	listeners []Listener
	logger    *slog.Logger
	noLog     bool
	owner     Owner
	termCtx   func(context.Context, Event) context.Context
	// deferStart: New does no I/O; Start subscribes and opens.
	deferStart bool
	// warnMargin: TermDeadlineNear this long before the local deadline.
	warnMargin time.Duration
}

// WithDeadlineWarning publishes a [TermDeadlineNear] event for each term
// of the session when its local deadline comes within margin, that is
// when renewals have not come in time: a warning while the terms are still
// valid, to listeners and OTel, before TermRevoked with DEADLINE_PASSED.
// It is computed on the same monotonic deadline as term.Valid and never
// comes later than the deadline. It is published again after a renewal
// that moved the deadline away, if the deadline comes near again. New
// refuses a margin that is not positive or not below LeaseDuration -
// RenewInterval (it would fire between healthy renewals). A margin at
// least the slack of the grant in force (the time from the next renewal's
// due moment to the deadline: less on a grant the backend shortened,
// SessionLeaseShortened, and a little less than that bound on a full one,
// by the drift) is replaced by half that slack for the grant, so that the
// warning never comes before every healthy renewal and still comes before
// the deadline (ADR 0234). Code that writes should use term.ContextBefore,
// which ends margin before the deadline whatever the grant.
func WithDeadlineWarning(margin time.Duration) Option {
	return func(o *options) { o.warnMargin = margin }
}

// WithDeferredStart makes [New] build the session without touching the
// backend: no subscription, no Open, until [Session.Start]. For
// frameworks whose constructors must do no I/O (fx: the session opens in a
// start hook, after the backend's own hooks have created its schema).
// Elections and groups may be started on it meanwhile; they wait, as on a
// session that is still opening. [Open] starts the session anyway: it
// opens.
func WithDeferredStart() Option { return func(o *options) { o.deferStart = true } }

// WithIdentity names the process behind the session for people and tools
// that ask who holds a lease (the default is hostname/pid), with optional
// small metadata such as an address. New fails if they break the bounds of
// deadline.ValidateOwner.
func WithIdentity(identity string, metadata map[string]string) Option {
	return func(o *options) {
		md := make(map[string]string, len(metadata))
		for k, v := range metadata {
			md[k] = v
		}
		o.owner = Owner{Identity: identity, Metadata: md}
	}
}

// defaultIdentity is hostname/pid, cut to the identity bound.
func defaultIdentity() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "unknown"
	}
	id := fmt.Sprintf("%s/%d", h, os.Getpid())
	if len(id) > deadline.MaxIdentityLen {
		id = id[len(id)-deadline.MaxIdentityLen:]
	}
	return id
}

// WithConfig sets the session timing. Zero fields take the documented
// defaults; New fails if the result does not validate.
func WithConfig(c deadline.Config) Option { return func(o *options) { o.cfg = c } }

// WithEnv runs the engine on env instead of the running process's clock,
// timers and goroutines: virtual time for tests and simulations.
func WithEnv(env Env) Option { return func(o *options) { o.env = env } }

// WithListener adds a listener for the session's events. Listeners run in
// the order added.
func WithListener(l Listener) Option {
	return func(o *options) {
		if l != nil {
			o.listeners = append(o.listeners, l)
		}
	}
}

// WithLogger logs the session's events through l (see [LogEvents]); nil
// turns logging off. The default is [slog.Default].
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.logger, o.noLog = l, l == nil }
}

// WithTermContext lets an instrumentation decorate the context of every term
// of the session, so that leader work (which runs under the term's context)
// nests under, say, the term's trace span. f is called when a term begins,
// with the engine's lock held and the TermElected event about to be
// published (Name, Token, Session, Time); it must return quickly, must not
// call the session, and must return parent or a context derived from it.
// Only one decorator is kept: the last one given.
func WithTermContext(f func(parent context.Context, elected Event) context.Context) Option {
	return func(o *options) { o.termCtx = f }
}
