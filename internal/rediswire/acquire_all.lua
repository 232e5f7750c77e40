-- Acquire all: take every lock of a set, or none, in one atomic step; for
-- each fencing lock, issue its next fencing number in the same step. Every
-- key must live on this server (and, on a Cluster, in one hash slot).
--
-- KEYS[1..n]   the lock keys
-- KEYS[n+1..]  the fence counter keys of the fencing locks, in the same order
-- ARGV[1]      n
-- then, for lock i (1-based), at ARGV[3i-1], ARGV[3i], ARGV[3i+1]:
--              value (token and holder), TTL in milliseconds, '1' to fence
--
-- Returns nil when any lock is held (nothing is taken then), or an array of
-- n fences: 0 for a lock without fencing; bad_fence's error (nothing is
-- taken) when a counter is no integer.
local n = tonumber(ARGV[1])
for i = 1, n do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    return false
  end
end
-- The fences first: next_fence (internal/policy's rule, prepended to this
-- script), so a counter it cannot read fails the set before any lock is set
-- (a counter raised before it only skips a number).
local fences = {}
local counter = n
for i = 1, n do
  if ARGV[3 * i + 1] == '1' then
    counter = counter + 1
    local fence, bad = next_fence(KEYS[counter], ARGV[3 * i])
    if bad then
      return bad_fence(counter, bad)
    end
    fences[i] = fence
  else
    fences[i] = 0
  end
end
for i = 1, n do
  redis.call('SET', KEYS[i], ARGV[3 * i - 1], 'PX', ARGV[3 * i])
end
return fences
