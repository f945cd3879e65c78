package session

import (
	"context"
	"fmt"
	"log/slog"
	"os"

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
}

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
