-- A GCRA give-back in Redis (beside gcra.redis.lua, same key and clock): `units` charged but not used are
-- given back by moving the key's theoretical arrival time (TAT, microseconds on Redis's clock) back by
-- units x interval, never below now: a budget is never more than full. Run by usage.lua when a generation
-- ends with fewer tokens than the max_tokens it was charged.
--
-- KEYS[1] the budget (hotpath:tokens:<tenant>)
-- ARGV[1] emission interval in microseconds (1e6 / rate per second), ARGV[2] units given back
-- Returns the microseconds the TAT moved back (0: nothing was owed).
local interval = tonumber(ARGV[1])
local units = tonumber(ARGV[2])
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(redis.call("GET", KEYS[1]))
if not tat or tat <= now or units <= 0 then
  return 0
end
local new_tat = math.max(tat - units * interval, now)
if new_tat <= now then
  redis.call("DEL", KEYS[1])
else
  redis.call("SET", KEYS[1], string.format("%.0f", new_tat), "PX", math.ceil((new_tat - now) / 1000) + 1000)
end
return math.floor(tat - new_tat)
