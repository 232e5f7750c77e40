-- Acquire: take the lock if free and, for a fencing domain, issue the next
-- fencing number in the same atomic step.
--
-- KEYS[1]  lock key
-- KEYS[2]  fence counter key (only for fencing domains; same hash slot)
-- ARGV[1]  token (this lease's owner id)
-- ARGV[2]  TTL in milliseconds
--
-- Returns nil when the lock is held, 0 when taken without fencing, or the
-- fencing number (> 0) when taken with fencing.
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return false
end
if #KEYS < 2 then
  return 0
end
if redis.call('EXISTS', KEYS[2]) == 0 then
  -- The counter is missing: first use, FLUSHALL, or a restart that lost the
  -- data. Seed it from the server clock in microseconds, which is above every
  -- number issued before as long as issuance stayed below one per microsecond
  -- and the server clock did not step back.
  local t = redis.call('TIME')
  redis.call('SET', KEYS[2], t[1] .. string.format('%06d', tonumber(t[2])))
end
return redis.call('INCR', KEYS[2])
