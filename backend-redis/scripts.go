package redissimba

import "github.com/redis/go-redis/v9"

// The Lua scripts, one per operation, so each operation is atomic on the
// server. Each is called by SHA; go-redis falls back to EVAL (which loads
// it again) when Redis answers NOSCRIPT, e.g. after SCRIPT FLUSH or a
// restart.
//
// Every key a script touches shares the namespace's hash tag. Scripts that
// must touch keys they learn only while running (the owner's session in
// acquire, the owned leases in close) build them from a prefix passed in
// ARGV; being in the same slot, they are served by the same Cluster node.
//
// Numbers: Lua numbers are doubles, exact up to 2^53. Tokens are about
// 1.8e15 (microseconds since 1970) and stay below 2^53 until the year 2255.
// They travel as decimal strings formatted with %.0f, so the string stored
// in the lease and the one compared on release are the same.

// open: KEYS[1] session; ARGV[1] lease ms, ARGV[2] the owner as JSON (""
// for none). Returns PTTL, or an error if the id exists (which crypto/rand
// makes practically impossible; checked so an id is never handed out
// twice).
var openScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.error_reply('SIMBA_DUPLICATE session id exists')
end
redis.call('HSET', KEYS[1], '#v', '1', '#d', ARGV[1], '#o', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return redis.call('PTTL', KEYS[1])
`)

// renew: KEYS[1] session; ARGV[1] the version the caller knows.
// Returns -1 if the session has expired, else {pttl, version} and, when the
// version differs from ARGV[1], the session hash flattened (HGETALL).
var renewScript = redis.NewScript(`
local d = redis.call('HGET', KEYS[1], '#d')
if not d then return -1 end
redis.call('PEXPIRE', KEYS[1], d)
local ttl = redis.call('PTTL', KEYS[1])
local v = redis.call('HGET', KEYS[1], '#v')
if v == ARGV[1] then return {ttl, v} end
return {ttl, v, redis.call('HGETALL', KEYS[1])}
`)

// acquire: KEYS[1] session, KEYS[2] the name index, KEYS[3..n] lease keys;
// ARGV[1] session id, ARGV[2] session key prefix, ARGV[3..n] the names of
// KEYS[3..n].
// Returns -1 if the session has expired, else one token string per lease
// key ("0" when another live session owns it).
//
// A lease is taken when it has no owner or its owner's session key is gone
// (expired on the Redis clock, closed, or lost with the data). The token is
// max(last + 1, now in µs by Redis TIME): it rises per name, and a name
// whose record was lost restarts from the clock, above every earlier token.
var acquireScript = redis.NewScript(`
local v = redis.call('HGET', KEYS[1], '#v')
if not v then return -1 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local out = {}
local fields = {}
local changed = false
for i = 3, #KEYS do
  local cur = redis.call('HMGET', KEYS[i], 's', 't')
  local owner = cur[1]
  if owner == ARGV[1] then
    out[i - 2] = cur[2]
  elseif owner and redis.call('EXISTS', ARGV[2] .. owner) == 1 then
    out[i - 2] = '0'
  else
    local tok = (tonumber(cur[2]) or 0) + 1
    if tok < now then tok = now end
    local s = string.format('%.0f', tok)
    redis.call('HSET', KEYS[i], 's', ARGV[1], 't', s)
    -- Every won term (re)indexes its name, so the index heals if it alone
    -- was evicted; inspection by prefix reads it (ADR 0080).
    redis.call('ZADD', KEYS[2], 0, ARGV[i])
    fields[#fields + 1] = ARGV[i]
    fields[#fields + 1] = s
    out[i - 2] = s
    changed = true
    if #fields >= 2000 then -- unpack has a limit: write big batches in chunks
      redis.call('HSET', KEYS[1], unpack(fields))
      fields = {}
    end
  end
end
if changed then
  -- The new version goes with the last (usually the only) write of the set.
  fields[#fields + 1] = '#v'
  fields[#fields + 1] = string.format('%.0f', tonumber(v) + 1)
  redis.call('HSET', KEYS[1], unpack(fields))
end
return out
`)

// release: KEYS[1] session, KEYS[2..n] lease keys; ARGV[1] session id,
// ARGV[2] channel, then name and token of each lease key in order.
// Deletes the owner of each lease owned by the session under that token,
// publishes the released names, returns how many were released.
var releaseScript = redis.NewScript(`
local rel = {}
local live = 0
for i = 2, #KEYS do
  local name, tok = ARGV[2 * i - 1], ARGV[2 * i]
  local cur = redis.call('HMGET', KEYS[i], 's', 't')
  if cur[1] == ARGV[1] and cur[2] == tok then
    redis.call('HDEL', KEYS[i], 's')
    -- 1 when the session still exists and listed the lease.
    live = redis.call('HDEL', KEYS[1], name) + live
    rel[#rel + 1] = name
  end
end
if live > 0 then redis.call('HINCRBY', KEYS[1], '#v', 1) end
if #rel > 0 then redis.call('PUBLISH', ARGV[2], table.concat(rel, ' ')) end
return #rel
`)

// close: KEYS[1] session; ARGV[1] session id, ARGV[2] lease key prefix,
// ARGV[3] channel. Deletes the session, frees every lease it still owns,
// publishes their names, returns how many.
var closeScript = redis.NewScript(`
local all = redis.call('HGETALL', KEYS[1])
local rel = {}
for i = 1, #all, 2 do
  local f = all[i]
  if string.sub(f, 1, 1) ~= '#' then
    local lk = ARGV[2] .. f
    if redis.call('HGET', lk, 's') == ARGV[1] then
      redis.call('HDEL', lk, 's')
      rel[#rel + 1] = f
    end
  end
end
redis.call('DEL', KEYS[1])
if #rel > 0 then redis.call('PUBLISH', ARGV[3], table.concat(rel, ' ')) end
return #rel
`)

// inspect: KEYS[1..n] lease keys; ARGV[1] session key prefix, ARGV[2..n+1]
// the names of KEYS. Returns one {name, token, session id, owner JSON,
// PTTL} per lease whose owner's session is alive, in KEYS order. Read only.
var inspectScript = redis.NewScript(`
local out = {}
for i = 1, #KEYS do
  local cur = redis.call('HMGET', KEYS[i], 's', 't')
  if cur[1] then
    local sk = ARGV[1] .. cur[1]
    local ttl = redis.call('PTTL', sk)
    if ttl > 0 then
      out[#out + 1] = {ARGV[i + 1], cur[2], cur[1], redis.call('HGET', sk, '#o') or '', ttl}
    end
  end
end
return out
`)
