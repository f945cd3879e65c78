package redissimba

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
	"github.com/simba-go/simba/session/driver"
)

// The hot calls (acquire, release, close) build their command in one
// slice, []any{cmd, function or hash, numkeys, keys..., args...}, with the
// namespace's constant keys and arguments boxed once, and send it as a
// go-redis Cmd: FCall and Script.Run take the keys as []string and box
// each one again into a slice of their own, an allocation per key on every
// call (ADR 0315).

// argvHead is where a command's keys start in its slice.
const argvHead = 3

// newArgv returns a command slice for nk keys and up to na arguments, its
// head left for the caller of send to fill.
func newArgv(nk, na int) []any {
	argv := make([]any, argvHead, argvHead+nk+na)
	argv[2] = nk
	return argv
}

// send runs argv as one command routed by its first key.
func (b *Backend) send(ctx context.Context, argv []any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, argv...)
	if nk, _ := argv[2].(int); nk > 0 {
		cmd.SetFirstKeyPos(argvHead)
	}
	_ = b.uc.Process(ctx, cmd)
	return cmd
}

// script is a Lua script with its hash and source boxed once.
type script struct {
	*redis.Script
	hash, src any
}

func newScript(src string) script {
	s := redis.NewScript(src)
	return script{Script: s, hash: s.Hash(), src: src}
}

// runArgv runs s with the keys and arguments of argv by its hash, and by
// its source when the server answers NOSCRIPT, as Script.Run does; with
// WithWaitReplicas through run, which pipelines the WAIT with it.
func (b *Backend) runArgv(ctx context.Context, s script, argv []any) *redis.Cmd {
	if b.opts.waitReplicas != 0 {
		keys, args := splitArgv(argv)
		return b.run(ctx, s.Script, keys, args...)
	}
	argv[0], argv[1] = "evalsha", s.hash
	cmd := b.send(ctx, argv)
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") { // HasErrorPrefix allocates even for nil
		argv[0], argv[1] = "eval", s.src
		cmd = b.send(ctx, argv)
	}
	return cmd
}

// splitArgv returns the keys and the arguments of argv.
func splitArgv(argv []any) ([]string, []any) {
	nk, _ := argv[2].(int)
	keys := make([]string, nk)
	for i := range keys {
		keys[i], _ = argv[argvHead+i].(string)
	}
	return keys, argv[argvHead+nk:]
}

// sessionArgs caches, per session id, its session key and its id boxed:
// every call of a session sends both.
type sessionArgs struct {
	mu sync.Mutex
	m  map[driver.ID]boxedSession
}

type boxedSession struct{ key, id any }

// maxSessionArgs bounds the cache: a backend serves few sessions at a
// time, and one that expired without Close is forgotten at the next clear.
const maxSessionArgs = 1 << 10

// get returns id's session key and id, boxed.
func (c *sessionArgs) get(prefix string, id driver.ID) (key, sid any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.m[id]; ok {
		return s.key, s.id
	}
	if c.m == nil || len(c.m) >= maxSessionArgs {
		c.m = make(map[driver.ID]boxedSession)
	}
	s := boxedSession{key: prefix + string(id), id: string(id)}
	c.m[id] = s
	return s.key, s.id
}

// forget drops id (its session closed).
func (c *sessionArgs) forget(id driver.ID) {
	c.mu.Lock()
	delete(c.m, id)
	c.mu.Unlock()
}
