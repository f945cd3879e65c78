package redissimba

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/simba-go/simba/term"
)

// ErrFenced is returned by [FencedSet] when a write carries a token lower
// than one that has already written through the fence: a later term owns
// the resource, and this writer's term has ended. It is [term.ErrFenced]
// (the same value), which the SQL fencing helpers return too.
var ErrFenced = term.ErrFenced

// fencedSetScript: KEYS[1] fence key, KEYS[2] data key; ARGV[1] token,
// ARGV[2] value, ARGV[3] ttl in ms (0: none). Tokens are compared as
// decimal strings without leading zeros (longer is larger), exact for every
// uint64, where Lua numbers are not. An allkeys-* policy with a memory
// limit may evict the fence key (it has no TTL, so volatile-* never does),
// after which a lower token would pass: refused before anything is read
// or written.
var fencedSetScript = redis.NewScript(`
local mem = redis.call('INFO', 'memory')
local policy, limit = string.match(mem, '\nmaxmemory_policy:([%w-]+)'), tonumber(string.match(mem, '\nmaxmemory:(%d+)'))
if not policy or not limit then
  return redis.error_reply('SIMBA_EVICTION INFO memory shows no maxmemory or maxmemory_policy')
end
if limit > 0 and string.sub(policy, 1, 8) == 'allkeys-' then
  return redis.error_reply('SIMBA_EVICTION maxmemory-policy ' .. policy .. ' with maxmemory ' .. limit .. ': Redis may evict the fence key, and a lower token would then pass; set maxmemory-policy noeviction or a volatile-* policy (or maxmemory 0)')
end
local cur = redis.call('GET', KEYS[1])
if cur and (#cur > #ARGV[1] or (#cur == #ARGV[1] and cur > ARGV[1])) then
  return 0
end
if cur ~= ARGV[1] then redis.call('SET', KEYS[1], ARGV[1]) end
if ARGV[3] == '0' then
  redis.call('SET', KEYS[2], ARGV[2])
else
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
end
return 1
`)

// FencedSet sets key to value, with ttl unless it is 0, only if token is at
// least the highest token that has written through fenceKey, and records
// token there: the two happen in one script, so a writer whose term ended
// (a paused leader waking up) cannot overwrite the work of a later term.
// It returns an error wrapping [ErrFenced] when the write is refused, and
// one wrapping [ErrServerUnsafe] on a server that may evict the fence key
// (an allkeys-* maxmemory-policy with a memory limit).
//
// Pass the term's token (term.Term.Token). Use one fence key per resource
// that terms of one lease write to; on a Cluster, fenceKey and key must be
// in one slot, so give them the same hash tag, e.g. "{orders}:fence" and
// "{orders}:latest". Writes of the same term may repeat.
func FencedSet(ctx context.Context, rdb redis.Scripter, fenceKey, key string, token uint64, value string, ttl time.Duration) error {
	if token == 0 {
		return fmt.Errorf("redissimba: fenced set of %q: token 0 is never a term's token", key)
	}
	if ttl < 0 {
		return fmt.Errorf("redissimba: fenced set of %q: ttl %v, want ≥ 0", key, ttl)
	}
	ms := int64((ttl + time.Millisecond - 1) / time.Millisecond)
	ok, err := fencedSetScript.Run(ctx, rdb, []string{fenceKey, key},
		strconv.FormatUint(token, 10), value, ms).Int64()
	if err != nil {
		return fmt.Errorf("redissimba: fenced set of %q: %w", key, unsafeServer(err))
	}
	if ok == 0 {
		return fmt.Errorf("redissimba: fenced set of %q with token %d: %w", key, token, ErrFenced)
	}
	return nil
}
