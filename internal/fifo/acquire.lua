-- FIFO acquire: take the lock if it is free and this waiter is at the head of
-- the queue (or the queue is empty); otherwise join the queue, or refresh this
-- waiter's place in it. One script, so the uncontended path is one round trip
-- and a waiter joins the queue in the same step as its first failed attempt.
--
-- KEYS[1]  lock key: its value is the lease token, exactly (release and
--          extend compare it)
-- KEYS[2]  queue: ZSET token -> join order (server µs, strictly increasing)
-- KEYS[3]  deadlines: ZSET token -> server ms after which the waiter is dead
-- KEYS[4]  previous holder: the trace context the last releaser left
-- KEYS[5]  wake-up channels: HASH token -> the channel its client listens on
-- KEYS[6]  fence counter (only when fencing)
-- ARGV[1]  token
-- ARGV[2]  lock TTL, ms
-- ARGV[3]  waiter TTL, ms: how long a waiter stays queued without calling again
-- ARGV[4]  this waiter's wake-up channel, or '' (timer only)
-- ARGV[5]  '1' to publish with SPUBLISH (Cluster), else PUBLISH
--
-- Returns {1, fence, previous} when granted (fence 0 without fencing;
-- previous is nil unless the grant came from the queue and the releaser left
-- a trace context), or {0, lock PTTL, position, join order} when queued
-- (position 1 is the head; the join order is the token's score in the queue). All times come from the server's clock (TIME).

local lock, queue, deadlines, prevkey, chans = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local token, wttl = ARGV[1], tonumber(ARGV[3])

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Prune waiters that stopped calling: dead, or gone without leaving.
local dead = redis.call('ZRANGEBYSCORE', deadlines, '-inf', now_ms, 'LIMIT', 0, 100)
if #dead > 0 then
  redis.call('ZREM', queue, unpack(dead))
  redis.call('ZREM', deadlines, unpack(dead))
  redis.call('HDEL', chans, unpack(dead))
end

local head = redis.call('ZRANGE', queue, 0, 0)[1]
if redis.call('EXISTS', lock) == 0 then
  if head == nil or head == token then
    redis.call('SET', lock, token, 'PX', ARGV[2])
    local prev = false
    if head then
      redis.call('ZREM', queue, token)
      redis.call('ZREM', deadlines, token)
      redis.call('HDEL', chans, token)
      prev = redis.call('GET', prevkey)
    end
    local fence = 0
    if #KEYS >= 6 then
      -- fence = max(counter + 1, server TIME in µs), stored back: strictly
      -- increasing per key, even after the counter was lost.
      fence = redis.call('INCR', KEYS[6])
      local us = t[1] .. string.format('%06d', tonumber(t[2]))
      if tonumber(us) > fence then
        redis.call('SET', KEYS[6], us)
        fence = tonumber(us)
      end
    end
    return {1, fence, prev}
  end
  if #dead > 0 then
    -- The lock is free and pruning may have made a new head that no release
    -- told: tell it now.
    local ch = redis.call('HGET', chans, head)
    if ch then
      redis.call(ARGV[5] == '1' and 'SPUBLISH' or 'PUBLISH', ch, head)
    end
  end
end

local joined = redis.call('ZSCORE', queue, token)
if not joined then
  local seq = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local last = redis.call('ZRANGE', queue, -1, -1, 'WITHSCORES')
  if last[2] and tonumber(last[2]) >= seq then
    seq = tonumber(last[2]) + 1
  end
  joined = string.format('%.0f', seq)
  redis.call('ZADD', queue, joined, token)
  if ARGV[4] ~= '' then
    redis.call('HSET', chans, token, ARGV[4])
  end
end
redis.call('ZADD', deadlines, now_ms + wttl, token)
-- The queue's keys live as long as their longest-lived waiter could, and
-- no longer: a queue nobody calls on again disappears by itself.
for _, k in ipairs({queue, deadlines, chans}) do
  if redis.call('PTTL', k) < wttl then
    redis.call('PEXPIRE', k, wttl)
  end
end
return {0, redis.call('PTTL', lock), redis.call('ZRANK', queue, token) + 1, joined}
