-- Extend: reset the lock's TTL only if it still holds this lease's token.
-- KEYS[1] lock key; KEYS[2], when given, its fence counter (same hash
-- slot), kept at least as long as the lock (keep_fence, internal/policy's
-- rule, prepended); ARGV[1] token; ARGV[2] TTL in milliseconds.
-- Returns 1 when extended, 0 when not held.
if owns(redis.call('GET', KEYS[1]), ARGV[1]) then
  if #KEYS >= 2 then
    keep_fence(KEYS[2], ARGV[2])
  end
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
