-- Acquire: take the lock if free and, for a fencing domain, issue the next
-- fencing number in the same atomic step.
--
-- KEYS[1]  lock key
-- KEYS[2]  fence counter key (only for fencing domains; same hash slot)
-- ARGV[1]  token (this lease's owner id)
-- ARGV[2]  TTL in milliseconds
--
-- Returns nil when the lock is held, 0 when taken without fencing, or the
-- fencing number (> 0) when taken with fencing. A counter that is no
-- integer gets bad_fence's error and nothing is written.
if #KEYS < 2 then
  if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    return false
  end
  return 0
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return false
end
-- The fence: next_fence (internal/policy's rule, prepended to this script),
-- issued before the lock is set, so a counter it cannot read leaves the
-- lock as it was.
local fence, bad = next_fence(KEYS[2], ARGV[2])
if bad then
  return bad_fence(2, bad)
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return fence
