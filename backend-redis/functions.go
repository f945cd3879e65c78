package redissimba

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The acquire operation runs as a Redis Function (Redis 7 and later) where
// the server allows it, and as the acquire script (EVALSHA) otherwise: on
// Redis 5 and 6, when FUNCTION LOAD is refused (an ACL, a managed service),
// and with WithWaitReplicas, whose WAIT rides in a pipeline with the script.
// Both run the same source, acquireSrc (ADR 0148).
//
// The difference is the server's run_id (ADR 0131). The script reads it
// from INFO server on every call, 6-15 µs of server time. The function reads
// it once, on its first call, into an upvalue of its library: a Lua local
// that lives in the serving process's function engine until that process
// exits, or its library is loaded again (FUNCTION LOAD REPLACE, FUNCTION
// FLUSH, FUNCTION RESTORE, a full resynchronisation of a replica, which
// loads the library again and starts with no cached value). A run_id
// identifies one execution of a Redis process and never changes while it
// runs, and a Lua state never outlives or leaves its process: the cached
// value is what INFO server would answer in every call it serves. A restart
// (from an RDB snapshot, an AOF), a failover to a replica and a Cluster slot
// move all reach a process whose engine loaded the library itself (from its
// RDB or AOF, through replication, or from this backend after "Function not
// found"), so its first call reads its own run_id.

// acquireRunIDLine is the line of acquireSrc that reads the run_id; the
// function reads the cached one instead.
const acquireRunIDLine = "  rid = string.match(redis.call('INFO', 'server'), '\\nrun_id:(%x+)')\n"

// acquireMemLines are the lines of acquireSrc that read the eviction policy
// before a grant (ADR 0164). INFO memory costs about 15 µs of server time,
// more than the rest of a grant, so the function keeps the policy and the
// limit it read for one second of Redis TIME: a policy or a limit set at run time stops grants
// within a second (a step of the clock back reads it again). The script
// reads it on every grant. The replication section (ADR 0163) is read on
// every call by both: a failover and back can take milliseconds.
const acquireMemLines = "local mem = redis.call('INFO', 'memory') -- the function reads these at most once a second\n" +
	"local policy, limit = string.match(mem, '\\nmaxmemory_policy:([%w-]+)'), tonumber(string.match(mem, '\\nmaxmemory:(%d+)'))\n"

// acquireSeenLine is the line of acquireSrc that makes the table where the
// acquire keeps the last INFO replication text and epoch it parsed, with
// their parse: the script makes it anew on every call, the function once,
// in its library, so that a call finding the same text as the last one
// skips the parse (ADR 0315). The parse is a function of the text alone,
// so the cached one is the parse of the text read, whatever ran between
// the calls.
const acquireSeenLine = "local seen = {free = {false, false, false, false, false}} -- the function keeps it between calls (functions.go)\n"

// acquireDecimal is acquireSrc's function formatting a token: the script
// makes it on every call, the function once, in its library.
const acquireDecimal = "-- %d prints an integer below 2^53 as %.0f does, at a third of the cost.\n" +
	"local function decimal(x)\n" +
	"  if x >= 1 and x < 9007199254740992 and x % 1 == 0 then return string.format('%d', x) end\n" +
	"  return string.format('%.0f', x)\n" +
	"end\n"

// acquireLib is the library holding the acquire function; fnAcquire its name.
var acquireLib, fnAcquire = acquireLibrary()

// argFnAcquire is fnAcquire boxed once.
var argFnAcquire any = fnAcquire

// acquireLibrary builds the library from acquireSrc. Its name and the
// function's carry a hash of the code, so that processes running different
// versions of this package can share a server: each loads its own library
// and none replaces another's.
func acquireLibrary() (code, fn string) {
	if strings.Count(acquireSrc, acquireRunIDLine) != 1 || strings.Count(acquireSrc, acquireMemLines) != 1 || strings.Count(acquireSrc, acquireSeenLine) != 1 ||
		strings.Count(acquireSrc, acquireDecimal) != 1 {
		panic("redissimba: the acquire script's run_id, memory, seen or decimal lines are not where the function expects them")
	}
	body := strings.Replace(acquireSrc, acquireRunIDLine, "  rid = runID()\n", 1)
	body = strings.Replace(body, acquireMemLines, "local policy, limit = memoryPolicy(now)\n", 1)
	body = strings.Replace(body, acquireSeenLine, "", 1)
	body = strings.Replace(body, acquireDecimal, "", 1)
	lib := `
local seen = {free = {false, false, false, false, false}}
` + acquireDecimal + `local cached
local function runID()
  if not cached then
    cached = string.match(redis.call('INFO', 'server'), '\nrun_id:(%x+)')
  end
  return cached
end
local memPolicy, memLimit, memAt
local function memoryPolicy(now)
  if not memAt or now < memAt or now - memAt > 1000000 then
    local mem = redis.call('INFO', 'memory')
    memPolicy, memLimit = string.match(mem, '\nmaxmemory_policy:([%w-]+)'), tonumber(string.match(mem, '\nmaxmemory:(%d+)'))
    memAt = now
  end
  return memPolicy, memLimit
end
redis.register_function('FN', function(KEYS, ARGV)
` + body + `end)
`
	sum := sha1.Sum([]byte(lib))
	h := hex.EncodeToString(sum[:8])
	fn = "simba_acquire_" + h
	return "#!lua name=simba_" + h + "\n" + strings.Replace(lib, "'FN'", "'"+fn+"'", 1), fn
}

// runAcquire runs the acquire operation, argv's keys and arguments (see
// newArgv): the function when the server has (or takes) it, the script
// otherwise.
func (b *Backend) runAcquire(ctx context.Context, argv []any) *redis.Cmd {
	if b.opts.waitReplicas != 0 || b.noFunctions.Load() {
		return b.runArgv(ctx, acquireScript, argv)
	}
	argv[0], argv[1] = "fcall", argFnAcquire
	cmd := b.send(ctx, argv)
	err := cmd.Err()
	switch {
	case err == nil || !isRedisError(err):
		return cmd // a reply, or an error that says nothing about functions
	case functionMissing(err):
		// This node has not loaded the library (a fresh server, a
		// FUNCTION FLUSH, a Cluster node that received the slot): load it
		// there and call again. Nothing ran, so calling again is safe.
		key, _ := argv[argvHead].(string)
		if lerr := b.loadAcquire(ctx, key); lerr != nil {
			if refusesFunctions(lerr) {
				b.noFunctions.Store(true) // this server will not take functions
			}
			return b.runArgv(ctx, acquireScript, argv)
		}
		argv[0], argv[1] = "fcall", argFnAcquire
		cmd = b.send(ctx, argv)
		if err := cmd.Err(); err != nil && functionMissing(err) {
			// Still not there (a Cluster ASK to an importing node, a
			// failover in between): this call runs the script.
			return b.runArgv(ctx, acquireScript, argv)
		}
		return cmd
	case refusesFunctions(err):
		// Redis before 7, or an ACL without FCALL: nothing ran.
		b.noFunctions.Store(true)
		return b.runArgv(ctx, acquireScript, argv)
	case refusesWritesNow(err):
		// A function declares no flags, so Redis counts FCALL as a write
		// that may grow memory and refuses it before it runs while the
		// server refuses writes. The script (EVAL, no flags) runs then and
		// stops only at its first write: a refusal, whose mark it makes
		// with pcall, is still answered, and a grant fails as it would.
		return b.runArgv(ctx, acquireScript, argv)
	}
	return cmd
}

// refusesWritesNow reports whether err is the server refusing a write
// command before running it, for a while: over maxmemory with noeviction
// (OOM), too few replicas for min-replicas-to-write (NOREPLICAS), a failed
// snapshot with stop-writes-on-bgsave-error (MISCONF).
func refusesWritesNow(err error) bool {
	if !isRedisError(err) {
		return false
	}
	msg := err.Error()
	return strings.HasPrefix(msg, "OOM ") || strings.HasPrefix(msg, "NOREPLICAS ") || strings.HasPrefix(msg, "MISCONF ")
}

// refusesFunctions reports whether err is the server refusing FCALL or
// FUNCTION LOAD for good: a Redis before 7 (unknown command) or an ACL
// (NOPERM), naming the command in quotes ('fcall', `FUNCTION`,
// 'function|load'). An error inside the function names another command
// (and ends with "on @user_function", unquoted), and transient answers
// (LOADING, BUSY, TRYAGAIN) are not refusals: such a call may have
// written, so it is never run again as the script.
func refusesFunctions(err error) bool {
	if !isRedisError(err) {
		return false
	}
	msg := strings.ToLower(err.Error())
	if !strings.HasPrefix(msg, "noperm") && !strings.HasPrefix(msg, "err unknown command") {
		return false
	}
	for _, q := range []string{"'fcall'", "`fcall`", "'function", "`function"} {
		if strings.Contains(msg, q) {
			return true
		}
	}
	return false
}

// loadAcquire loads the acquire library on the node serving key. Another
// process may have loaded it first: "already exists" is success.
func (b *Backend) loadAcquire(ctx context.Context, key string) error {
	var node redis.Cmdable = b.uc
	if cc, ok := b.uc.(*redis.ClusterClient); ok {
		c, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return fmt.Errorf("node for %s: %w", key, err)
		}
		node = c
	}
	err := node.FunctionLoad(ctx, acquireLib).Err()
	if err != nil && strings.Contains(err.Error(), "already exists") {
		return nil
	}
	return err
}

// functionMissing reports whether err is the server's "ERR Function not
// found".
func functionMissing(err error) bool {
	return isRedisError(err) && strings.HasPrefix(strings.TrimPrefix(err.Error(), "ERR "), "Function not found")
}

// isRedisError reports whether err is an answer of the server (as opposed
// to a network error, a timeout or a closed client).
func isRedisError(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr)
}
