-- Release: delete the lock only if it still holds this lease's token.
-- KEYS[1] lock key; ARGV[1] token. Returns 1 when deleted, 0 when not held.
if owns(redis.call('GET', KEYS[1]), ARGV[1]) then
  return redis.call('DEL', KEYS[1])
end
return 0
