-- FIFO release (and leave): give the lock back if it still holds this token,
-- take the token out of the queue, and, when the lock is now free, hand it
-- to the waiter at the head of the queue and tell that waiter.
--
-- KEYS[1]  lock key
-- KEYS[2]  queue: ZSET token -> join order
-- KEYS[3]  deadlines: ZSET token -> server ms
-- KEYS[4]  previous holder: where the releaser's trace context is left for
--          the next holder
-- KEYS[5]  waiters: HASH token -> 'channel|lock TTL ms|waiter TTL ms|fencing|holder'
-- KEYS[6]  fence counter
-- ARGV[1]  token
-- ARGV[2]  '1' to publish with SPUBLISH (Cluster), else PUBLISH
-- ARGV[3]  the releaser's trace context, or ''
--
-- The handover: the head (alive by its deadline, with a wake-up channel)
-- gets the lock in this script, for min(its lock TTL, its waiter TTL), with
-- its fence when it asked for one, and is published
-- 'token fence px previous joined' on its channel, so it starts without
-- another round trip. joined is the head's score in the queue (its join
-- order, as acquire.lua returns it): the waiter trusts the push only for the
-- place it last found itself queued at, so a push from an earlier place,
-- delivered after the token rejoined, is no grant. A head that died after its last call holds the lock at most
-- that long. A waiter without a channel is only told nothing: it takes the
-- lock itself on its timer.
--
-- Returns 1 when the lock held the token and was deleted, else 0; after a
-- handover whose message reached a subscriber, {that, the channel, the
-- message}, so that a releaser whose process holds the waiter hands it the
-- message at once. The owner
-- check is internal/holder's owns(): the value is the token, or the token and
-- ';' and a description; a lock that holds another token is never deleted.
-- The handover writes the head's value the same way: its token, ';' and the
-- holder description it queued with.

local lock, queue, deadlines, prevkey, waiters = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local token = ARGV[1]

-- held: the lock holds the token. It is deleted (give_up) unless it is
-- handed over, whose SET replaces it.
local held = 0
if owns(redis.call('GET', lock), token) then
  held = 1
end
local function give_up()
  if held == 1 then
    redis.call('DEL', lock)
  end
  return held
end
-- The head before anything is removed: prune starts from it when nothing
-- ahead of it goes.
local first = redis.call('ZRANGE', queue, 0, 0, 'WITHSCORES')
if not first[1] then
  if held == 1 then
    redis.call('DEL', prevkey) -- no waiter to pass a context to; none goes stale
  end
  return give_up()
end
-- A holder is not queued (every grant and handover takes the token out of
-- the queue), so for it the ZREM on the queue finds nothing and is all; a
-- waiter that leaves (or a holder queued after all) is taken out of all
-- three.
local queued = redis.call('ZREM', queue, token) == 1
if held == 0 or queued then
  redis.call('ZREM', deadlines, token)
  redis.call('HDEL', waiters, token)
end
if held == 0 and redis.call('EXISTS', lock) == 1 then
  -- Someone else holds the lock; its release tells the next waiter.
  return 0
end

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if first[1] == token then
  first = nil -- it was the token, taken out above
end
local _, head, w, joined = prune(queue, deadlines, waiters, now_ms, first)
if not head then
  return give_up()
end
local prev = ''
if held == 1 then
  -- The releaser's context, or none: an untraced releaser must not pass on
  -- an older holder's context as if it were its own.
  prev = ARGV[3]
  local qttl = prev ~= '' and redis.call('PTTL', queue) or 0
  if qttl > 0 then
    redis.call('SET', prevkey, prev, 'PX', qttl)
  else
    redis.call('DEL', prevkey)
  end
else
  -- A leave: the lock was released by its last holder, whose context stays.
  prev = redis.call('GET', prevkey) or ''
end
-- prune() left a head whose :qc entry (w) waiter() reads, and its score.
local ch, ttl, wttl, fencing, rest = waiter(w)
if not ch or ch == '' then
  return give_up()
end
local px = math.min(tonumber(ttl), tonumber(wttl))
local value = head
if rest and #rest > 1 then
  value = head .. ';' .. string.sub(rest, 2)
end
local fence = 0
if fencing == '1' then
  -- internal/policy's rule, prepended. A counter it cannot read hands
  -- nothing over: the head stays queued, takes the lock itself on its
  -- timer and gets the counter's error there.
  local bad
  fence, bad = next_fence(KEYS[6], px)
  if bad then
    return give_up()
  end
end
redis.call('SET', lock, value, 'PX', px)
redis.call('ZREM', queue, head)
redis.call('ZREM', deadlines, head)
redis.call('HDEL', waiters, head)
local msg = head .. ' ' .. (fence == 0 and '0' or fence_text(fence)) .. ' ' .. px .. ' ' .. prev .. ' ' .. joined
if redis.call(ARGV[2] == '1' and 'SPUBLISH' or 'PUBLISH', ch, msg) > 0 then
  return {held, ch, msg}
end
return held
