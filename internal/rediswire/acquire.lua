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
-- The fence: next_fence (internal/policy's rule, prepended to this script).
return next_fence(KEYS[2])
