-- FIFO release (and leave): give the lock back if it still holds this token,
-- take the token out of the queue, and, when the lock is now free, wake the
-- waiter at the head of the queue.
--
-- KEYS[1]  lock key
-- KEYS[2]  queue: ZSET token -> join order
-- KEYS[3]  deadlines: ZSET token -> server ms
-- KEYS[4]  previous holder: where the releaser's trace context is left for
--          the next holder
-- KEYS[5]  wake-up channels: HASH token -> the channel its client listens on
-- ARGV[1]  token
-- ARGV[2]  '1' to publish with SPUBLISH (Cluster), else PUBLISH
-- ARGV[3]  the releaser's trace context, or ''
--
-- Returns 1 when the lock held the token and was deleted, else 0. The owner
-- check is exact: a lock that holds another token is never deleted.

local lock, queue, deadlines, chans = KEYS[1], KEYS[2], KEYS[3], KEYS[5]
local token = ARGV[1]

local held = 0
if redis.call('GET', lock) == token then
  redis.call('DEL', lock)
  held = 1
end
if redis.call('ZCARD', queue) == 0 then
  return held
end
redis.call('ZREM', queue, token)
redis.call('ZREM', deadlines, token)
redis.call('HDEL', chans, token)
if held == 0 and redis.call('EXISTS', lock) == 1 then
  -- Someone else holds the lock; its release wakes the next waiter.
  return 0
end

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local dead = redis.call('ZRANGEBYSCORE', deadlines, '-inf', now_ms, 'LIMIT', 0, 100)
if #dead > 0 then
  redis.call('ZREM', queue, unpack(dead))
  redis.call('ZREM', deadlines, unpack(dead))
  redis.call('HDEL', chans, unpack(dead))
end
local head = redis.call('ZRANGE', queue, 0, 0)[1]
if head then
  if held == 1 and ARGV[3] ~= '' then
    local qttl = redis.call('PTTL', queue)
    if qttl > 0 then
      redis.call('SET', KEYS[4], ARGV[3], 'PX', qttl)
    end
  end
  local ch = redis.call('HGET', chans, head)
  if ch then
    redis.call(ARGV[2] == '1' and 'SPUBLISH' or 'PUBLISH', ch, head)
  end
end
return held
