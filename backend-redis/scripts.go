package redissimba

import "github.com/redis/go-redis/v9"

// The Lua scripts, one per operation, so each operation is atomic on the
// server. Each is called by SHA; go-redis falls back to EVAL (which loads
// it again) when Redis answers NOSCRIPT, e.g. after SCRIPT FLUSH or a
// restart.
//
// Every key a script touches shares the namespace's hash tag and is
// declared in KEYS, even the keys a script learns only while running (the
// owner's session in acquire and inspect, the owned leases in close): the
// caller declares the keys it expects, and a script that finds a key it was
// not given answers so and writes nothing for it; the caller asks again
// with that key (ADR 0131). During a Cluster slot migration Redis checks
// only declared keys before a script runs.
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

// renew: KEYS[1] session; ARGV[1] the version the caller knows, ARGV[2]
// the maximum lease in ms (WithMaxLease), which caps the stored lease.
// Returns -1 if the session has expired, else {pttl, version} and, when the
// version differs from ARGV[1], the session hash flattened (HGETALL).
var renewScript = redis.NewScript(`
local d = redis.call('HGET', KEYS[1], '#d')
if not d then return -1 end
if tonumber(d) > tonumber(ARGV[2]) then d = ARGV[2] end
redis.call('PEXPIRE', KEYS[1], d)
local ttl = redis.call('PTTL', KEYS[1])
local v = redis.call('HGET', KEYS[1], '#v')
if v == ARGV[1] then return {ttl, v} end
return {ttl, v, redis.call('HGETALL', KEYS[1])}
`)

// acquire: KEYS[1] session, KEYS[2] the name index, KEYS[3] the namespace
// epoch, KEYS[3+i] the lease key of name i (i = 1..n), then the session
// keys of owners the caller expects (hints); ARGV[1] session id, ARGV[2]
// session key prefix, ARGV[3] the maximum lease in ms, ARGV[4] n,
// ARGV[5] "1" to check the server incarnation (run_id), "0" not to
// (WithoutRestartQuarantine), ARGV[5+i] name i, ARGV[5+n+i] the KEYS index
// of name i's hinted owner session key ("0": none).
//
// Returns -1 if the session has expired; {-2, ms} during a quarantine
// (nothing granted); else one string per name: a token (granted, or
// already the caller's), "-<id>" (owned by live session <id>) or "?<id>"
// (owned by <id>, whose session key was not declared: the caller asks
// again with it as a hint).
//
// The epoch (ADR 0130, 0131) is read in the same script that grants. It
// holds "<quarantine_until µs> <run_id>": the end of the last quarantine
// and the run_id of the server incarnation that wrote it. A missing or
// garbled epoch means the namespace lost its records (or was never
// initialised); a run_id other than the serving node's means the data came
// back from an older state (a restart from an RDB snapshot or an AOF not
// fsynced on every write, a failover to a replica, a slot moved to another
// Cluster node), which may lack leases granted since. Both are one loss:
// the script writes quarantine_until = now + max lease, on the Redis clock,
// with the current run_id, and grants nothing until then. The run_id is
// read from INFO server (by the acquire function once per server process,
// functions.go), the smallest section that carries it; only its
// line is parsed.
//
// Every key the script touches is in KEYS (ADR 0131): during a Cluster
// slot migration Redis checks declared keys before the script runs (ASK,
// TRYAGAIN), while an undeclared key on the importing node looks missing,
// which would make a live owner look dead. The owner's liveness is read
// only from a declared hint key; an owner without one is answered "?".
//
// Every key is read before the first write, and the session's owned set is
// written before the lease keys, so a script stopped half way can leave
// only a listed name the lease key does not show (the engine releases it),
// never a lease the session's record does not list.
//
// A name refused because another session owns it (answered "-" or "?")
// is marked as waited for: the field w of its lease key, set in this same
// script, so no release can come between the refusal and the mark. Only a
// release or close that publishes the name clears it, in the script that
// publishes (ADR 0147): every refused Acquire is followed by a notice at
// the name's next release or close, and a release nobody waits for sends
// none. A grant leaves the mark alone (another waiter may still wait).
// The mark is the only write of a refusal, so it is made with pcall: a
// server that refuses writes (over maxmemory with noeviction, too few
// replicas for min-replicas-to-write, a failed snapshot with
// stop-writes-on-bgsave-error) must still answer "held", as it did when a
// refusal wrote nothing; the waiter then finds the release on its tick.
//
// A lease is taken when it has no owner or its owner's session key is gone
// (expired on the Redis clock, closed, or lost with the data). The token is
// max(last + 1, now in µs by Redis TIME): it rises per name, and a name
// whose record was lost restarts from the clock, above every earlier token.
var acquireScript = redis.NewScript(acquireSrc)

// acquireSrc is the acquire script's source, also the body of the acquire
// function (functions.go), which replaces acquireRunIDLine.
const acquireSrc = `
local v = redis.call('HGET', KEYS[1], '#v')
if not v then return -1 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local rid = ''
if ARGV[5] == '1' then
  rid = string.match(redis.call('INFO', 'server'), '\nrun_id:(%x+)')
  if not rid then return redis.error_reply('SIMBA_NO_RUN_ID INFO server shows no run_id') end
end
local e = redis.call('GET', KEYS[3])
local q, erid
if e then
  local qs, rs = string.match(e, '^(%d+) ?(%x*)$')
  q, erid = tonumber(qs), rs
end
if not q or (ARGV[5] == '1' and erid ~= rid) then
  local ms = tonumber(ARGV[3])
  local qn = now + ms * 1000
  if q and q > qn then qn = q end -- never shorten a running quarantine
  redis.call('SET', KEYS[3], string.format('%.0f', qn) .. ' ' .. rid)
  return {-2, math.ceil((qn - now) / 1000)}
end
if q > now then return {-2, math.ceil((q - now) / 1000)} end
local me, n = ARGV[1], tonumber(ARGV[4])
local out, take, last, mark = {}, {}, {}, {}
for i = 1, n do
  local cur = redis.call('HMGET', KEYS[3 + i], 's', 't', 'w')
  local owner = cur[1]
  if owner == me then
    out[i] = cur[2]
  elseif owner then
    local h = tonumber(ARGV[5 + n + i])
    if h > 0 and KEYS[h] == ARGV[2] .. owner then
      if redis.call('EXISTS', KEYS[h]) == 1 then
        out[i] = '-' .. owner
      else
        take[#take + 1] = i
      end
    else
      out[i] = '?' .. owner
    end
    if out[i] and not cur[3] then mark[#mark + 1] = i end -- refused: waited for
  else
    take[#take + 1] = i
  end
  last[i] = cur[2]
end
-- pcall: the mark is a hint; a server that refuses writes (over
-- maxmemory, NOREPLICAS, MISCONF) still answers the refusal.
for _, i in ipairs(mark) do redis.pcall('HSET', KEYS[3 + i], 'w', '1') end
if #take == 0 then return out end
local fields = {}
for _, i in ipairs(take) do
  local tok = (tonumber(last[i]) or 0) + 1
  if tok < now then tok = now end
  out[i] = string.format('%.0f', tok)
  fields[#fields + 1] = ARGV[5 + i]
  fields[#fields + 1] = out[i]
  if #fields >= 2000 then -- unpack has a limit: write big batches in chunks
    redis.call('HSET', KEYS[1], unpack(fields))
    fields = {}
  end
end
-- The new version goes with the last (usually the only) write of the set.
fields[#fields + 1] = '#v'
fields[#fields + 1] = string.format('%.0f', tonumber(v) + 1)
redis.call('HSET', KEYS[1], unpack(fields))
for _, i in ipairs(take) do
  redis.call('HSET', KEYS[3 + i], 's', me, 't', out[i])
  -- Every won term (re)indexes its name, so the index heals if it alone
  -- was evicted; inspection by prefix reads it (ADR 0080).
  redis.call('ZADD', KEYS[2], 0, ARGV[5 + i])
end
return out
`

// release: KEYS[1] session, KEYS[2..n] lease keys; ARGV[1] session id,
// ARGV[2] channel, then name and token of each lease key in order.
// Deletes the owner of each lease owned by the session under that token,
// publishes the released names marked as waited for (see acquire) and
// clears their marks, returns how many were released. A name
// the session lists under that token while the lease key shows another
// owner (a write stopped half way) is dropped from the session's list.
// Every key is read before the first write.
var releaseScript = redis.NewScript(`
local match, waited = {}, {}
for i = 2, #KEYS do
  local cur = redis.call('HMGET', KEYS[i], 's', 't', 'w')
  match[i] = cur[1] == ARGV[1] and cur[2] == ARGV[2 * i]
  waited[i] = cur[3]
end
local n, pub = 0, {}
local live = 0
for i = 2, #KEYS do
  local name = ARGV[2 * i - 1]
  if match[i] then
    redis.call('HDEL', KEYS[i], 's', 'w')
    -- 1 when the session still exists and listed the lease.
    live = redis.call('HDEL', KEYS[1], name) + live
    n = n + 1
    if waited[i] then pub[#pub + 1] = name end
  elseif redis.call('HGET', KEYS[1], name) == ARGV[2 * i] then
    live = redis.call('HDEL', KEYS[1], name) + live
  end
end
if live > 0 then redis.call('HINCRBY', KEYS[1], '#v', 1) end
if #pub > 0 then redis.call('PUBLISH', ARGV[2], table.concat(pub, ' ')) end
return n
`)

// close: KEYS[1] session, KEYS[2..n] the lease keys the caller expects
// the session to own; ARGV[1] session id, ARGV[2] channel, ARGV[3..]
// the names of KEYS[2..n]. If the session owns a name the caller did not
// declare, returns {-2, name...} (every owned name) and writes nothing: the
// caller asks again with those keys. Else deletes the session, frees every
// lease it still owns, publishes the names of those marked as waited for
// (see acquire) and clears their marks, returns how many it freed. Every
// key is read before the first write (ADR 0131).
var closeScript = redis.NewScript(`
local all = redis.call('HGETALL', KEYS[1])
if #all == 0 then return 0 end
local declared = {}
for i = 3, #ARGV do declared[ARGV[i]] = i - 1 end
local owned, missing = {}, false
for i = 1, #all, 2 do
  local f = all[i]
  if string.sub(f, 1, 1) ~= '#' then
    owned[#owned + 1] = f
    if not declared[f] then missing = true end
  end
end
if missing then
  table.insert(owned, 1, -2)
  return owned
end
local free, pub = {}, {}
for _, f in ipairs(owned) do
  local cur = redis.call('HMGET', KEYS[declared[f]], 's', 'w')
  if cur[1] == ARGV[1] then
    free[#free + 1] = f
    if cur[2] then pub[#pub + 1] = f end
  end
end
for _, f in ipairs(free) do redis.call('HDEL', KEYS[declared[f]], 's', 'w') end
redis.call('DEL', KEYS[1])
if #pub > 0 then redis.call('PUBLISH', ARGV[2], table.concat(pub, ' ')) end
return #free
`)

// inspect: KEYS[1..n] lease keys, then the session keys of owners the
// caller expects (hints); ARGV[1] session key prefix, ARGV[2] n,
// ARGV[2+i] the name of KEYS[i], ARGV[2+n+i] the KEYS index of its hinted
// owner's session key ("0": none). Returns, per lease with an owner, in
// KEYS order, {name, token, session id, owner JSON, PTTL} when the owner's
// declared session is alive, or {name, "?", session id} when the owner's
// key was not declared (the caller asks again with it). Read only; every
// key it reads is declared (ADR 0131).
var inspectScript = redis.NewScript(`
local out = {}
local n = tonumber(ARGV[2])
for i = 1, n do
  local cur = redis.call('HMGET', KEYS[i], 's', 't')
  if cur[1] then
    local h = tonumber(ARGV[2 + n + i])
    if h > 0 and KEYS[h] == ARGV[1] .. cur[1] then
      local ttl = redis.call('PTTL', KEYS[h])
      if ttl > 0 then
        out[#out + 1] = {ARGV[2 + i], cur[2], cur[1], redis.call('HGET', KEYS[h], '#o') or '', ttl}
      end
    else
      out[#out + 1] = {ARGV[2 + i], '?', cur[1]}
    end
  end
end
return out
`)

// init: KEYS[1] the namespace epoch. Creates it with no quarantine and the
// serving node's run_id (see acquire) when missing; returns 1 if it created
// it, 0 if it was there.
var initScript = redis.NewScript(`
local rid = string.match(redis.call('INFO', 'server'), '\nrun_id:(%x+)')
if not rid then return redis.error_reply('SIMBA_NO_RUN_ID INFO server shows no run_id') end
if redis.call('SET', KEYS[1], '0 ' .. rid, 'NX') then return 1 end
return 0
`)
