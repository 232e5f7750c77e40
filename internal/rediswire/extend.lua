-- Extend: reset the lock's TTL only if it still holds this lease's token.
-- KEYS[1] lock key; ARGV[1] token; ARGV[2] TTL in milliseconds.
-- Returns 1 when extended, 0 when not held.
if owns(redis.call('GET', KEYS[1]), ARGV[1]) then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
