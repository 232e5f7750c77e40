-- Redlock acquire: one node's vote, refused while the node is quarantined.
-- A node that restarted (its run_id changed) or lost its data (the marker is
-- gone) may have forgotten a lock that it helped grant; it votes for a key
-- only once that key's TTL has passed since the node's first use in its new
-- life, so every lease it may have forgotten has expired (the "delayed
-- restart" of the Redlock algorithm, kept by the node itself).
--
-- KEYS[1]  lock key
-- KEYS[2]  the node's marker (internal/policy: RedlockMarker); never expires
-- ARGV[1]  token (and holder)
-- ARGV[2]  TTL in milliseconds
--
-- Returns 0 when taken, nil when held, and -ms (< 0) while quarantined: ms
-- is how long the node still refuses to vote for a key of this TTL.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local info = redis.pcall('INFO', 'server')
local run = type(info) == 'string' and string.match(info, 'run_id:(%x+)') or '-'
local marker = redis.call('GET', KEYS[2])
local was, since
if marker then
  was, since = string.match(marker, '^(%S+) (%d+)$')
end
if was ~= run or not since or tonumber(since) > now then
  -- A new life (or a clock that stepped back): the quarantine starts now.
  redis.call('SET', KEYS[2], run .. ' ' .. string.format('%.0f', now))
  return -tonumber(ARGV[2])
end
local left = tonumber(since) + tonumber(ARGV[2]) - now
if left > 0 then
  return -left
end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return false
end
return 0
