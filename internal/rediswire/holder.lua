-- Holder: who holds a lock, and the fence it was granted with (an
-- election's Leader). Reads only.
--
-- KEYS[1]  lock key
-- KEYS[2]  fence counter key (same hash slot)
--
-- Returns nil when the lock is free, else {value, fence}: the lock's value
-- (token, or token ';' description: internal/holder) and the counter, which
-- the grant of the current holder set (a fencing grant writes both in one
-- script, and nothing else moves the counter while the lock is held); 0
-- when the counter is missing (the lock was taken without fencing).
local v = redis.call('GET', KEYS[1])
if not v then
  return false
end
return {v, tonumber(redis.call('GET', KEYS[2]) or '0')}
