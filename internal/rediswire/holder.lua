-- Holder: who holds a lock, and the fence it was granted with (an
-- election's Leader). Reads only.
--
-- KEYS[1]  lock key
-- KEYS[2]  fence counter key (same hash slot)
--
-- Returns nil when the lock is free, else {value, fence}: the lock's value
-- (token, or token ';' description: internal/holder) and the counter's
-- decimal text (exact past 2^53), which the grant of the current holder set
-- (a fencing grant writes both in one script, nothing else moves the
-- counter while the lock is held, and extend keeps it as long as the lock);
-- '0' when the counter is missing (the lock was taken without fencing).
-- A counter of another type gets bad_fence's error (policy.BadFenceLua,
-- prepended).
local v = redis.call('GET', KEYS[1])
if not v then
  return false
end
local c = redis.pcall('GET', KEYS[2])
if type(c) == 'table' then
  return bad_fence(2, c.err or 'WRONGTYPE')
end
return {v, c or '0'}
