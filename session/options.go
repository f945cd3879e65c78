package session

import (
	"log/slog"

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
