local v = redis.call('HGET', KEYS[1], '#v')
if not v then return -1 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local rid, hist, r2 = '', '', nil
if ARGV[5] == '1' then
  rid = string.match(redis.call('INFO', 'server'), '\nrun_id:(%x+)')
  if not rid then return redis.error_reply('SIMBA_NO_RUN_ID INFO server shows no run_id') end
  local repl = redis.call('INFO', 'replication')
  if string.match(repl, '\nrole:(%a+)') ~= 'master' then
    return redis.error_reply('SIMBA_REPLICA the node serving the namespace is a replica (INFO replication role): a lease written there is lost at its next sync; point the client at the master')
  end
  hist = string.match(repl, '\nmaster_replid:(%x+)')
  if not hist then return redis.error_reply('SIMBA_NO_REPLID INFO replication shows no master_replid') end
  r2 = string.match(repl, '\nmaster_replid2:(%x+)')
end
local lk = KEYS[#KEYS]
local e = redis.call('GET', KEYS[3])
local q, erid
if e then
  local qs, rs = string.match(e, '^(%d+) ?(%x*)$')
  q, erid = tonumber(qs), rs
end
local lraw = redis.call('GET', lk)
local lh, lwhy = string.match(lraw or '', '^(%x*) ?(%a*)$')
local why
if not q then
  if e then
    why = 'garbled'
  elseif redis.call('EXISTS', KEYS[2]) == 1 then
    why = 'lost' -- the name index outlived the epoch: not a new namespace
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
    if (r2 and string.match(r2, '[^0]')) or not up or up * 1000 <= tonumber(ARGV[3]) + 1000 then
      why = 'unrecorded'
    else
      for cmd in string.gmatch(redis.call('INFO', 'commandstats'), 'cmdstat_(%a+):calls=') do
        if cmd == 'flushall' or cmd == 'flushdb' or cmd == 'swapdb' then why = 'unrecorded' end
      end
      if not why then redis.call('SET', lk, hist) end
    end
  end
end
if why then
  local ms = tonumber(ARGV[3])
  local qn = now + ms * 1000
  if q and q > qn then qn = q end -- never shorten a running quarantine
  redis.call('SET', KEYS[3], string.format('%.0f', qn) .. ' ' .. rid)
  redis.call('SET', lk, hist .. ' ' .. why)
  return {-2, math.ceil((qn - now) / 1000), why}
end
if q > now then return {-2, math.ceil((q - now) / 1000), lwhy or ''} end
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
local mem = redis.call('INFO', 'memory') -- the function reads these at most once a second
local policy, limit = string.match(mem, '\nmaxmemory_policy:([%w-]+)'), tonumber(string.match(mem, '\nmaxmemory:(%d+)'))
if not policy or not limit then
  return redis.error_reply('SIMBA_EVICTION INFO memory shows no maxmemory or maxmemory_policy')
end
if limit > 0 and policy ~= 'noeviction' then
  return redis.error_reply('SIMBA_EVICTION maxmemory-policy ' .. policy .. ' with maxmemory ' .. limit .. ': Redis may evict a live session and hand its lease to another; set maxmemory-policy noeviction (or maxmemory 0)')
end
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
