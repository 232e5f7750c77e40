-- Acquire: take the lock if free and, for a fencing domain, issue the next
-- fencing number in the same atomic step.
--
-- KEYS[1]  lock key
-- KEYS[2]  fence counter key (only for fencing domains; same hash slot)
-- ARGV[1]  token (this lease's owner id)
-- ARGV[2]  TTL in milliseconds
--
-- Returns nil when the lock is held, 0 when taken without fencing, or the
-- fencing number (> 0) when taken with fencing.
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return false
end
if #KEYS < 2 then
  return 0
end
-- The fence is max(counter + 1, server time in microseconds), on every grant.
-- The counter alone goes back when Redis loses writes (a restart without
-- them, everysec AOF, a failover to a replica that missed the last INCRs);
-- the clock does not, so a fence stays above every fence issued before as
-- long as the server clock never steps back (across a failover: the new
-- primary's clock is not behind the old one's by more than the failover
-- took) and grants stay below one per microsecond per key on average.
--
-- Both numbers stay below 2^53 for centuries, so Lua's doubles hold them
-- exactly; the reply is converted to an integer without loss.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local fence = redis.call('INCR', KEYS[2])
if now > fence then
  fence = now
  redis.call('SET', KEYS[2], string.format('%.0f', fence))
end
return fence
