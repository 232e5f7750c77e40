-- Fenced set: store a value only when its fencing number is at least the
-- highest one the resource has accepted, in one atomic step.
--
-- KEYS[1]  the resource: a hash with the fields "value" and "fence"
-- ARGV[1]  value
-- ARGV[2]  fence, a canonical positive decimal (no sign, no leading zero)
--
-- Returns {1} when stored, or {0, stored fence} when the fence is lower than
-- the stored one; nothing is written then.
--
-- Fences are compared as decimal strings, never as Lua numbers: those are
-- doubles, which cannot tell neighbouring integers apart past 2^53, and
-- TIME-seeded fences (~1.8e15) are only a few doublings below that.

local function canonical(s)
  return string.find(s, '^[1-9][0-9]*$') ~= nil
end

-- at_least is a >= b for canonical decimals: the longer one is larger; at
-- equal length the first differing digit decides. Byte by byte, because
-- Lua's < on strings goes through strcoll and so the server's locale.
local function at_least(a, b)
  if #a ~= #b then
    return #a > #b
  end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x > y
    end
  end
  return true
end

local fence = ARGV[2]
if not canonical(fence) then
  return redis.error_reply('fence "' .. fence .. '" is not a positive decimal integer')
end
local stored = redis.call('HGET', KEYS[1], 'fence')
if stored then
  if not canonical(stored) then
    return redis.error_reply('the stored fence "' .. stored .. '" of ' .. KEYS[1] .. ' is not a positive decimal integer')
  end
  if not at_least(fence, stored) then
    return {0, stored}
  end
end
redis.call('HSET', KEYS[1], 'value', ARGV[1], 'fence', fence)
return {1}
