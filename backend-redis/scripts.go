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
// keys of owners the caller expects (hints), and last (KEYS[#KEYS]) the
// namespace's lineage key; ARGV[1] session id, ARGV[2] session key prefix,
// ARGV[3] the maximum lease in ms, ARGV[4] n, ARGV[5] "1" to check the
// server incarnation (run_id) and the replication history (master_replid),
// "0" not to (WithoutRestartQuarantine), ARGV[5+i] name i, ARGV[5+n+i] the
// KEYS index of name i's hinted owner session key ("0": none).
//
// Returns -1 if the session has expired; {-2, ms, why} during a quarantine
// (nothing granted; why says what started it, see quarantineHint); else
// one string per name: a token (granted, or already the caller's),
// "-<id>" (owned by live session <id>) or "?<id>" (owned by <id>, whose
// session key was not declared: the caller asks again with it as a hint).
//
// The epoch (ADR 0130, 0131) is read in the same script that grants. It
// holds "<quarantine_until µs> <run_id>": the end of the last quarantine
// and the run_id of the server incarnation that wrote it. The lineage key
// holds the replication ID of the dataset's history the epoch was last
// written in (h), and what started the last quarantine (y) (ADR 0163); it
// is a hash whose v = "2" says this layout (ADR 0245), and an earlier
// version's string "<master_replid> [why]" is read too. A missing or garbled epoch means the namespace lost
// its records (or was never initialised); a run_id other than the serving
// node's means the data came back from an older state (a restart from an
// RDB snapshot or an AOF not fsynced on every write, a failover to a
// replica, a slot moved to another Cluster node); a master_replid other
// than the lineage's means the history changed under the same process: a
// process that was a replica at some point since (it resynchronised from a
// promoted replica, keeping its run_id, and was promoted back) serves a
// dataset that may lack grants its first history acknowledged. Every
// promotion gives the promoted node a new master_replid, so any promotion
// between two Acquires on the node that serves the namespace is seen.
// master_replid2 (the history a promoted node continues) is not accepted
// in place of it: it says the new history continues the old one's stream,
// not that it had every write the old master acknowledged. All are one
// loss: the script writes quarantine_until = now + max lease + max
// lock-delay (ARGV[6+2n]), on the Redis
// clock, with the current run_id and master_replid, and grants nothing
// until then. The run_id is read from INFO server (by the acquire function
// once per server process, functions.go), the replication section on every
// call (it changes while the process runs); only their lines are parsed.
// A node that is a replica refuses: a writable replica's writes are lost at
// its next sync. The lineage is its own key, not a third field of the
// epoch, so that processes of an earlier version, which compare the epoch
// with a pattern of two fields, never take this one's epoch for garbled;
// they fail on the lineage hash instead (ADR 0245).
//
// A grant reads the eviction policy (INFO memory) first and refuses with
// SIMBA_EVICTION when a memory limit is set with a policy other than
// noeviction (ADR 0164): an evicted session key would make its live
// owner's lease look free, an evicted lease key a held name look new. The
// check runs in the script that grants, so a policy changed at run time by
// CONFIG SET is seen at the next grant (by the acquire function within a
// second: INFO memory costs about 15 µs, so it keeps the reply for a second
// of Redis TIME; functions.go); refusals and renewals skip it.
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
// A lease is taken when it has no record, no owner, or its owner's session
// key is gone (expired on the Redis clock or lost with the data) and the
// term's lock-delay, if any, has passed since a candidate first found it
// gone (field e, Redis TIME, written by that candidate; ADR 0246). The
// token is max(hw + 1, now in µs by Redis TIME), and above the record's own
// token when a record is there; hw, the namespace's high-water mark, is
// raised to it in the same script: a name's tokens rise with no per-name
// record, and after a loss restart from the clock, above every earlier
// token (ADR 0020, 0245). The first grant of this layout converts an
// earlier version's string lineage into the hash, after which that
// version's acquire fails (WRONGTYPE) before it writes.
var acquireScript = newScript(acquireSrc)

// acquireSrc is the acquire script's source, also the body of the acquire
// function (functions.go), which replaces acquireRunIDLine.
const acquireSrc = `
local seen = {free = {false, false, false, false, false}} -- the function keeps it between calls (functions.go)
-- %d prints an integer below 2^53 as %.0f does, at a third of the cost.
local function decimal(x)
  if x >= 1 and x < 9007199254740992 and x % 1 == 0 then return string.format('%d', x) end
  return string.format('%.0f', x)
end
local v = redis.call('HGET', KEYS[1], '#v')
if not v then return -1 end
local t = redis.call('TIME')
-- Arithmetic converts the numeric strings, as tonumber does, without a call.
local now = t[1] * 1000000 + t[2]
local rid, hist, repl = '', '', nil
if ARGV[5] == '1' then
  rid = string.match(redis.call('INFO', 'server'), '\nrun_id:(%x+)')
  if not rid then return redis.error_reply('SIMBA_NO_RUN_ID INFO server shows no run_id') end
  repl = redis.call('INFO', 'replication')
  -- The parse depends on the section's text alone: the text parsed last
  -- is not parsed again (Lua interns strings: equal texts are one object,
  -- compared at the cost of a pointer; ADR 0315).
  if repl == seen.repl then
    hist = seen.hist
  else
    -- Plain finds, then anchored matches: a pattern that is not anchored
    -- is tried at every byte of the section, microseconds per call.
    if not string.find(repl, '\nrole:master\r', 1, true) then
      return redis.error_reply('SIMBA_REPLICA the node serving the namespace is a replica (INFO replication role): a lease written there is lost at its next sync; point the client at the master')
    end
    local at = string.find(repl, '\nmaster_replid:', 1, true)
    hist = at and string.match(repl, '^%x+', at + 15)
    if not hist then return redis.error_reply('SIMBA_NO_REPLID INFO replication shows no master_replid') end
    seen.repl, seen.hist = repl, hist
  end
end
local n = ARGV[4] + 0
local lk, hk = KEYS[#KEYS], KEYS[#KEYS - 1]
local e = redis.call('GET', KEYS[3])
local q, erid
if e == seen.e then
  q, erid = seen.q, seen.erid
elseif e then
  local qs, rs = string.match(e, '^(%d+) ?(%x*)$')
  q, erid = tonumber(qs), rs
  seen.e, seen.q, seen.erid = e, q, erid
end
-- The lineage is a hash (h: master_replid, y: why, v: layout); an
-- earlier version's is a string, converted at the first grant (ADR 0245).
local lraw, lh, lwhy, lv = redis.pcall('HMGET', lk, 'h', 'y', 'v'), nil, nil, nil
if lraw.err then
  lraw = redis.call('GET', lk)
  lh, lwhy = string.match(lraw, '^(%x*) ?(%a*)$')
else
  lh, lwhy, lv = lraw[1] or nil, lraw[2] or nil, lraw[3]
  lraw = lh
end
local why
if not q then
  if e then
    why = 'garbled'
  elseif redis.call('EXISTS', KEYS[2]) == 1 or redis.call('EXISTS', hk) == 1 then
    why = 'lost' -- the name index or the high-water mark outlived the epoch: not a new namespace
  else
    why = 'missing'
  end
elseif ARGV[5] == '1' and erid ~= rid then
  why = 'server'
elseif ARGV[5] == '1' and lh ~= hist then
  if lraw then
    why = 'history'
  else
    -- No lineage: an epoch of an earlier version. The serving process
    -- wrote it (same run_id); never promoted since it started
    -- (master_replid2 unset), its history is the epoch's; up for more
    -- than a maximum lease (whole seconds, up to one ahead) and never
    -- flushed, no loss an unchecked Init of that version could have
    -- hidden is still within a lease (Init's own signs): record the
    -- lineage, no quarantine (ADR 0163, amended).
    local up = tonumber(string.match(redis.call('INFO', 'server'), '\nuptime_in_seconds:(%d+)'))
    local at = string.find(repl, '\nmaster_replid2:', 1, true)
    local r2 = at and string.match(repl, '^%x+', at + 16)
    if (r2 and string.match(r2, '[^0]')) or not up or up * 1000 <= tonumber(ARGV[3]) + 1000 then
      why = 'unrecorded'
    else
      for cmd in string.gmatch(redis.call('INFO', 'commandstats'), 'cmdstat_(%a+):calls=') do
        if cmd == 'flushall' or cmd == 'flushdb' or cmd == 'swapdb' then why = 'unrecorded' end
      end
      if not why then
        redis.call('DEL', lk)
        redis.call('HSET', lk, 'h', hist, 'v', '2')
        lv = '2'
      end
    end
  end
end
if why then
  local ms = tonumber(ARGV[6 + 2 * n]) -- the maximum lease plus the maximum lock-delay
  local qn = now + ms * 1000
  if q and q > qn then qn = q end -- never shorten a running quarantine
  redis.call('SET', KEYS[3], string.format('%.0f', qn) .. ' ' .. rid)
  redis.call('DEL', lk)
  redis.call('HSET', lk, 'h', hist, 'y', why, 'v', '2')
  return {-2, math.ceil((qn - now) / 1000), why}
end
if q > now then return {-2, math.ceil((q - now) / 1000), lwhy or ''} end
local me = ARGV[1]
local out, take, last, stale = {}, {}, {}, {}
local mark, begun -- made when a name needs one: most calls need neither
local free = seen.free -- HMGET's answer for a missing key (read only)
for i = 1, n do
  -- A free name has no record (ADR 0245): EXISTS answers it for a third
  -- of HMGET's cost, a held one pays both.
  local cur = free
  if redis.call('EXISTS', KEYS[3 + i]) == 1 then
    cur = redis.call('HMGET', KEYS[3 + i], 's', 't', 'w', 'd', 'e')
  end
  local owner = cur[1]
  if owner == me then
    out[i] = cur[2]
  elseif owner then
    local h = tonumber(ARGV[5 + n + i])
    if h > 0 and KEYS[h] == ARGV[2] .. owner then
      if redis.call('EXISTS', KEYS[h]) == 1 then
        out[i] = '-' .. owner
      elseif cur[4] and not cur[5] then
        -- The owner's session ended without a release and the term
        -- asked for a lock-delay: it counts from now (ADR 0246).
        out[i] = '-' .. owner
        begun = begun or {}
        begun[#begun + 1] = i
      elseif cur[4] and now < tonumber(cur[5]) + tonumber(cur[4]) * 1000 then
        out[i] = '-' .. owner -- inside the lock-delay
      else
        take[#take + 1] = i
      end
    else
      out[i] = '?' .. owner
    end
    if out[i] and not cur[3] then -- refused: waited for
      mark = mark or {}
      mark[#mark + 1] = i
    end
  else
    take[#take + 1] = i
  end
  last[i] = cur[2]
  stale[i] = cur[4] or cur[5]
end
-- pcall: the marks are hints or refusals; a server that refuses writes
-- (over maxmemory, NOREPLICAS, MISCONF) still answers the refusal. A
-- lock-delay whose start could not be written starts at the next try.
if mark then
  for _, i in ipairs(mark) do redis.pcall('HSET', KEYS[3 + i], 'w', '1') end
end
if begun then
  for _, i in ipairs(begun) do redis.pcall('HSET', KEYS[3 + i], 'e', string.format('%.0f', now)) end
end
if #take == 0 then return out end
local mem = redis.call('INFO', 'memory') -- the function reads these at most once a second
local policy, limit = string.match(mem, '\nmaxmemory_policy:([%w-]+)'), tonumber(string.match(mem, '\nmaxmemory:(%d+)'))
if not policy or not limit then
  return redis.error_reply('SIMBA_EVICTION INFO memory shows no maxmemory or maxmemory_policy')
end
if limit > 0 and policy ~= 'noeviction' then
  return redis.error_reply('SIMBA_EVICTION maxmemory-policy ' .. policy .. ' with maxmemory ' .. limit .. ': Redis may evict a live session and hand its lease to another; set maxmemory-policy noeviction (or maxmemory 0)')
end
-- One token for every name of this grant: max(high-water + 1, now), and
-- above a record's own last token (a record of an earlier version, or of
-- an expired owner's term). The high-water mark is the namespace's: it
-- never decreases while the namespace's records live (ADR 0245).
local hw = tonumber(redis.call('GET', hk)) or 0
local base = hw + 1
if base < now then base = now end
local top, bs = base, decimal(base) -- formatting costs: once for the common case
local ts = bs
local fields = {}
for _, i in ipairs(take) do
  local tok = base
  local l = tonumber(last[i])
  if l and l >= tok then tok = l + 1 end
  if tok > top then top = tok end
  out[i] = tok == base and bs or string.format('%.0f', tok)
  if tok == top then ts = out[i] end
  fields[#fields + 1] = ARGV[5 + i]
  fields[#fields + 1] = out[i]
  if #fields >= 2000 then -- unpack has a limit: write big batches in chunks
    redis.call('HSET', KEYS[1], unpack(fields))
    fields = {}
  end
end
if lv ~= '2' then
  -- The first grant of this layout: an earlier version's acquire meets
  -- a hash where it reads a string and fails before it writes (ADR 0245).
  redis.call('DEL', lk)
  if lh then redis.call('HSET', lk, 'h', lh, 'y', lwhy or '', 'v', '2') else redis.call('HSET', lk, 'v', '2') end
end
redis.call('SET', hk, ts)
-- The new version goes with the last (usually the only) write of the set.
fields[#fields + 1] = '#v'
fields[#fields + 1] = decimal(v + 1)
redis.call('HSET', KEYS[1], unpack(fields))
local delay = ARGV[7 + 2 * n]
local names = {}
for _, i in ipairs(take) do
  if delay ~= '0' then
    redis.call('HSET', KEYS[3 + i], 's', me, 't', out[i], 'd', delay)
  else
    redis.call('HSET', KEYS[3 + i], 's', me, 't', out[i])
  end
  if stale[i] then redis.call('HDEL', KEYS[3 + i], 'e', delay == '0' and 'd' or 'e') end
  -- Every won term (re)indexes its name, so the index heals if it alone
  -- was evicted; inspection by prefix and the sweep read it (ADR 0080).
  names[#names + 1] = 0
  names[#names + 1] = ARGV[5 + i]
  if #names >= 2000 then
    redis.call('ZADD', KEYS[2], unpack(names))
    names = {}
  end
end
if #names > 0 then redis.call('ZADD', KEYS[2], unpack(names)) end
return out
`

// release: KEYS[1] session, KEYS[2..n+1] lease keys, KEYS[#KEYS] the name
// index; ARGV[1] session id, ARGV[2] channel, then name and token of each
// lease key in order. Deletes each lease key owned by the session under
// that token, with its index entry (no per-name state outlives a release,
// ADR 0245; a lock-delay is skipped), publishes the released names marked
// as waited for (see acquire), returns how many were released. A lease
// with a lock-delay whose session key is gone is left alone: the release
// comes from a holder that woke after the server ended its session, the
// case the delay is for, so the name waits out its delay as after any
// expiry (ADR 0285's rule, on Redis). A name
// the session lists under that token while the lease key shows another
// owner (a write stopped half way) is dropped from the session's list.
// Every key is read before the first write.
var releaseScript = newScript(`
local match, waited = {}, {}
local alive -- read only for a lease with a lock-delay, the one case that asks (ADR 0315)
for i = 2, #KEYS - 1 do
  local cur = redis.call('HMGET', KEYS[i], 's', 't', 'w', 'd')
  if cur[4] and alive == nil then alive = redis.call('EXISTS', KEYS[1]) == 1 end
  match[i] = cur[1] == ARGV[1] and cur[2] == ARGV[2 * i] and (alive or not cur[4])
  waited[i] = cur[3]
end
local n, pub, gone = 0, {}, {}
local live = 0
for i = 2, #KEYS - 1 do
  local name = ARGV[2 * i - 1]
  if match[i] then
    redis.call('DEL', KEYS[i])
    gone[#gone + 1] = name
    -- 1 when the session still exists and listed the lease.
    live = redis.call('HDEL', KEYS[1], name) + live
    n = n + 1
    if waited[i] then pub[#pub + 1] = name end
  elseif redis.call('HGET', KEYS[1], name) == ARGV[2 * i] then
    live = redis.call('HDEL', KEYS[1], name) + live
  end
end
for i = 1, #gone, 1000 do redis.call('ZREM', KEYS[#KEYS], unpack(gone, i, math.min(i + 999, #gone))) end
if live > 0 then redis.call('HINCRBY', KEYS[1], '#v', 1) end
if #pub > 0 then redis.call('PUBLISH', ARGV[2], table.concat(pub, ' ')) end
return n
`)

// close: KEYS[1] session, KEYS[2..n+1] the lease keys the caller expects
// the session to own, KEYS[#KEYS] the name index; ARGV[1] session id,
// ARGV[2] channel, ARGV[3..] the names of KEYS[2..n+1]. If the session
// owns a name the caller did not declare, returns {-2, name...} (every
// owned name) and writes nothing: the caller asks again with those keys.
// Else deletes the session and every lease key it still owns, with their
// index entries (ADR 0245; a lock-delay is skipped), publishes the names
// of those marked as waited for (see acquire), returns how many it freed.
// Every key is read before the first write (ADR 0131).
var closeScript = newScript(`
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
for _, f in ipairs(free) do redis.call('DEL', KEYS[declared[f]]) end
for i = 1, #free, 1000 do redis.call('ZREM', KEYS[#KEYS], unpack(free, i, math.min(i + 999, #free))) end
redis.call('DEL', KEYS[1])
if #pub > 0 then redis.call('PUBLISH', ARGV[2], table.concat(pub, ' ')) end
return #free
`)

// sweep: KEYS[1] the name index, KEYS[2] the high-water mark, KEYS[3] the
// lineage, KEYS[3+i] the lease key of name i (i = 1..n), then the session
// keys of the owners the caller saw (hints); ARGV[1] session key prefix,
// ARGV[2] n, ARGV[2+i] name i, ARGV[2+n+i] the KEYS index of name i's
// hinted owner session key ("0": the caller saw no owner), ARGV[3+2n] the
// release channel. Deletes the
// records nobody holds any more, with their index entries: an index
// entry without a lease key, a lease key without an owner (an earlier
// version's released name), and a lease whose declared owner's session
// key is gone, once its lock-delay (if any) has passed on the Redis clock;
// the first sweep that finds such an owner gone starts the delay, as an
// Acquire does. Raises the high-water mark to every deleted record's token
// first, so the record's token is still below every later grant (ADR
// 0245). A lease whose owner is live, or not the one declared, is left
// alone. Does nothing until this version's layout is recorded (the
// lineage's v): an earlier version's processes read a missing record as a
// new name. Publishes the names marked as waited for. Returns how many
// records it deleted. Every key is read before the first write.
var sweepScript = redis.NewScript(`
local lv = redis.pcall('HGET', KEYS[3], 'v')
if lv ~= '2' then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local n = tonumber(ARGV[2])
local hw = tonumber(redis.call('GET', KEYS[2])) or 0
local top = hw
local del, names, pub, seen = {}, {}, {}, {}
for i = 1, n do
  local cur = redis.call('HMGET', KEYS[3 + i], 's', 't', 'w', 'd', 'e')
  local gone = not cur[1]
  if cur[1] then
    local h = tonumber(ARGV[2 + n + i])
    if h > 0 and KEYS[h] == ARGV[1] .. cur[1] and redis.call('EXISTS', KEYS[h]) == 0 then
      if cur[4] and not cur[5] then
        seen[#seen + 1] = KEYS[3 + i]
      elseif not cur[4] or now >= tonumber(cur[5]) + tonumber(cur[4]) * 1000 then
        gone = true
      end
    end
  end
  if gone then
    local tok = tonumber(cur[2])
    if tok and tok > top then top = tok end
    del[#del + 1] = KEYS[3 + i]
    names[#names + 1] = ARGV[2 + i]
    if cur[3] then pub[#pub + 1] = ARGV[2 + i] end
  end
end
if top > hw then redis.call('SET', KEYS[2], string.format('%.0f', top)) end
for _, k in ipairs(seen) do redis.call('HSET', k, 'e', string.format('%.0f', now)) end
if #del > 0 then
  redis.call('DEL', unpack(del))
  redis.call('ZREM', KEYS[1], unpack(names))
end
if #pub > 0 then redis.call('PUBLISH', ARGV[3 + 2 * n], table.concat(pub, ' ')) end
return #del
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

// init: KEYS[1] the namespace epoch, KEYS[2] its lineage, KEYS[3] the name
// index, KEYS[4] the high-water mark; ARGV[1] "1" for Init (check for signs of a recent loss first),
// "0" for ForceInit; ARGV[2] the maximum lease in whole seconds, rounded
// up. Creates the
// epoch with no quarantine, the serving node's run_id and its
// master_replid (see acquire) when it is missing and, for Init, the server
// shows no sign that the namespace's records may have been lost within one
// maximum lease (ADR 0165). Returns {1, "created"}, {0, "exists"} (nothing
// written: the epoch is there, and a quarantine it holds runs on), or
// {-1, sign, detail} (nothing written) with sign one of:
//
//	replica   the node is a replica;
//	records   the lineage, the name index or the high-water mark is there
//	          without the epoch:
//	          records of an earlier epoch, so the epoch alone was lost;
//	young     the server started less than one maximum lease ago (detail:
//	          uptime in s, which counts whole seconds and may run up to
//	          one second ahead, so it must exceed the lease), whatever its
//	          persistence: a restart without persistence, from a snapshot
//	          older than the namespace, or with an AOF lost with a
//	          container's disk or turned on after the restart looks so;
//	promoted  the node was a replica promoted since it started
//	          (master_replid2 is set, detail): a replica that missed the
//	          namespace's first writes looks like this;
//	flushed   FLUSHALL, FLUSHDB or SWAPDB ran since the server started
//	          (detail: calls, INFO commandstats): SWAPDB with an empty
//	          database empties the namespace's as a flush does.
var initScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return {0, 'exists'} end
local srv = redis.call('INFO', 'server')
local rid = string.match(srv, '\nrun_id:(%x+)')
if not rid then return redis.error_reply('SIMBA_NO_RUN_ID INFO server shows no run_id') end
local repl = redis.call('INFO', 'replication')
local hist = string.match(repl, '\nmaster_replid:(%x+)')
if not hist then return redis.error_reply('SIMBA_NO_REPLID INFO replication shows no master_replid') end
if ARGV[1] == '1' then
  if string.match(repl, '\nrole:(%a+)') ~= 'master' then return {-1, 'replica', ''} end
  if redis.call('EXISTS', KEYS[2]) == 1 or redis.call('EXISTS', KEYS[3]) == 1 or redis.call('EXISTS', KEYS[4]) == 1 then return {-1, 'records', ''} end
  local up = tonumber(string.match(srv, '\nuptime_in_seconds:(%d+)'))
  -- Whatever the persistence: an AOF lost with a container's disk, or
  -- turned on after a restart, looks durable (ADR 0165, amended).
  if not up or up <= tonumber(ARGV[2]) then
    return {-1, 'young', tostring(up)}
  end
  local r2 = string.match(repl, '\nmaster_replid2:(%x+)')
  if r2 and string.match(r2, '[^0]') then return {-1, 'promoted', r2} end
  local n = 0
  for cmd, c in string.gmatch(redis.call('INFO', 'commandstats'), 'cmdstat_(%a+):calls=(%d+)') do
    if cmd == 'flushall' or cmd == 'flushdb' or cmd == 'swapdb' then n = n + tonumber(c) end
  end
  if n > 0 then return {-1, 'flushed', tostring(n)} end
end
redis.call('SET', KEYS[1], '0 ' .. rid)
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], 'h', hist, 'v', '2')
return {1, 'created'}
`)
