-- FIFO acquire: take the lock if it is free and this waiter is at the head of
-- the queue (or the queue is empty); otherwise join the queue, or refresh this
-- waiter's place in it. One script, so the uncontended path is one round trip
-- and a waiter joins the queue in the same step as its first failed attempt.
--
-- KEYS[1]  lock key: its value is the lease token, or the token, ';' and a
--          holder description (internal/holder; owns() is its check)
-- KEYS[2]  queue: ZSET token -> join order (server µs, strictly increasing)
-- KEYS[3]  deadlines: ZSET token -> server ms after which the waiter is dead
-- KEYS[4]  previous holder: the trace context the last releaser left
-- KEYS[5]  waiters: HASH token -> 'channel|lock TTL ms|waiter TTL ms|fencing|holder',
--          what a release needs to hand the lock over, write the waiter's
--          holder value and tell the waiter
-- KEYS[6]  fence counter (only when fencing)
-- ARGV[1]  token
-- ARGV[2]  lock TTL, ms
-- ARGV[3]  waiter TTL, ms: how long a waiter stays queued without calling again
-- ARGV[4]  this waiter's wake-up channel, or '' (timer only: no handover)
-- ARGV[5]  '1' to publish with SPUBLISH (Cluster), else PUBLISH
-- ARGV[6]  the holder description to store with the token ('' for none)
--
-- Returns {1, fence, previous, lock PTTL} when granted by this call, {2, ...}
-- the same when the lock already held this token (a release handed it over,
-- or a retry after a lost reply) (fence 0 without fencing; previous
-- is nil unless the grant came from the queue and the releaser left a trace
-- context), or {0, lock PTTL, position, join order} when queued (position 1
-- is the head; the join order is the token's score in the queue). All times
-- come from the server's clock (TIME). A fence counter that is no integer
-- gets bad_fence's error, and nothing is written.

local lock, queue, deadlines, prevkey, waiters = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local token, wttl, desc = ARGV[1], tonumber(ARGV[3]), ARGV[6] or ''
local value = token
if desc ~= '' then
  value = token .. ';' .. desc
end

local owner = redis.call('GET', lock)
if owns(owner, token) then
  -- A release handed the lock to this token (its push may have been lost),
  -- or this is a retry of a grant whose reply was lost. No other grant can
  -- have followed while the token holds the lock, so the counter is its fence.
  -- The counter's text, not tonumber's double: exact past 2^53.
  local fence = 0
  if #KEYS >= 6 then
    fence = redis.pcall('GET', KEYS[6]) or 0
    if type(fence) == 'table' then
      return bad_fence(6, fence.err or 'WRONGTYPE')
    end
    if type(fence) == 'string' and not string.match(fence, '^%d+$') then
      return bad_fence(6, 'not a decimal integer')
    end
  end
  return {2, fence, redis.call('GET', prevkey), redis.call('PTTL', lock)}
end

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local dead, head, head_waiter, head_joined = prune(queue, deadlines, waiters, now_ms)

if not owner then
  if head == nil or head == token then
    local fence = 0
    if #KEYS >= 6 then
      -- internal/policy's rule, prepended to this script; before any
      -- write, so a counter it cannot read leaves lock and queue alone.
      local bad
      fence, bad = next_fence(KEYS[6], ARGV[2])
      if bad then
        return bad_fence(6, bad)
      end
    end
    redis.call('SET', lock, value, 'PX', ARGV[2])
    local prev = false
    if head then
      redis.call('ZREM', queue, token)
      redis.call('ZREM', deadlines, token)
      redis.call('HDEL', waiters, token)
      prev = redis.call('GET', prevkey)
    end
    return {1, fence, prev, tonumber(ARGV[2])}
  end
  if #dead > 0 then
    -- The lock is free and pruning may have made a new head that no release
    -- told: tell it now (a plain wake-up; it takes the lock itself).
    local ch = head_waiter and string.match(head_waiter, '^([^|]*)|')
    if ch and ch ~= '' then
      redis.call(ARGV[5] == '1' and 'SPUBLISH' or 'PUBLISH', ch, head)
    end
  end
end

local joined = head_joined
if head ~= token then
  joined = redis.call('ZSCORE', queue, token)
end
if not joined then
  local seq = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local last = redis.call('ZRANGE', queue, -1, -1, 'WITHSCORES')
  if last[2] and tonumber(last[2]) >= seq then
    seq = tonumber(last[2]) + 1
  end
  joined = string.format('%.0f', seq)
  redis.call('ZADD', queue, joined, token)
  redis.call('HSET', waiters, token, ARGV[4] .. '|' .. ARGV[2] .. '|' .. ARGV[3] .. '|' .. (#KEYS >= 6 and '1' or '0') .. '|' .. desc)
end
redis.call('ZADD', deadlines, now_ms + wttl, token)
-- The queue's keys live as long as their longest-lived waiter could, and
-- no longer: a queue nobody calls on again disappears by itself. Each is
-- given wttl when its PTTL is shorter, or it has none: PEXPIRE GT in one
-- call when the PTTL is shorter, as it nearly always is, else NX for a key
-- without one (Redis 7.0; an older server refuses both, and is asked the
-- PTTL).
for _, k in ipairs({queue, deadlines, waiters}) do
  local set = redis.pcall('PEXPIRE', k, wttl, 'GT')
  if type(set) == 'table' then
    if redis.call('PTTL', k) < wttl then
      redis.call('PEXPIRE', k, wttl)
    end
  elseif set == 0 then
    redis.call('PEXPIRE', k, wttl, 'NX')
  end
end
return {0, redis.call('PTTL', lock), redis.call('ZRANK', queue, token) + 1, joined}
