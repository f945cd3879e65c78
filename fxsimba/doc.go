// Package fxsimba wires Simba into go.uber.org/fx applications.
//
// The way in is the constructor [Module], with your backend and your jobs:
//
//	fx.New(
//		fx.Provide(fxsimba.Module),
//		fx.Provide(newBackend), // no I/O here: see the README's backend pattern
//		fxsimba.LeaderJob("cleanup", time.Hour, cleanup),
//		fxsimba.WhileLeader("indexer", index),
//	).Run()
//
// [Wiring] is the same as an fx.Option. [Module] provides the *session.Session
// and the [Jobs] registry, whose [JobHandle]s step a job down, or tell
// whether this node leads it. The session is opened on start
// (start waits until the backend has granted it) and closed on stop, which
// releases every lease at once. Jobs are leader-only: each is one election
// for its name, started on start and stopped on stop in handover order (the
// task's context is cancelled and the lease kept until the task returns, so
// the next leader never overlaps it) before the session closes.
//
// # Configuration
//
// The session timing comes from a [Config] the application may provide
// (typically decoded from its YAML or JSON file under the key "simba", as
// simba.session.leaseDuration and so on), overridden by the environment
// variables SIMBA_SESSION_LEASE_DURATION, SIMBA_SESSION_RENEW_INTERVAL,
// SIMBA_SESSION_DRIFT, SIMBA_SESSION_MARGIN, SIMBA_SESSION_RETRY_JITTER
// and SIMBA_SESSION_MIN_BACKOFF. Durations are written like "15s". Unset
// values take the defaults of package deadline. An invalid value, or a
// combination that breaks a timing rule, fails fx.New with an error naming
// the key or variable and the rule.
//
// # What is the application's
//
// The module provides the session and the jobs registry, nothing else. The session.Backend
// (and the driver client behind it), the *slog.Logger and the
// OpenTelemetry setup are the application's: provide them, and add
// session options such as an otelsimba listener with [SessionOption] or
// [AsSessionOption].
//
// # Without fx
//
// Every piece works without fx: [Config.ApplyEnv] and [Config.Deadline]
// give a validated deadline.Config for session.Open, and [StartJobs] and
// [Jobs.Stop] run the same jobs on any session.
package fxsimba
