-- GCRA in Redis (the generic cell rate algorithm, with redis-cell's semantics: CL.THROTTLE key burst rate
-- period cost), run atomically by EVALSHA from every gateway replica, so one tenant has one budget across
-- the fleet. One stored value per key, the theoretical arrival time (TAT, microseconds on Redis's own
-- clock: replicas' clocks never meet). A call of `cost` units is admitted when, after it, the TAT is at
-- most `burst` + 1 emission intervals ahead of now.
--
-- KEYS[1] the budget (hotpath:rate:<tenant>, hotpath:tokens:<tenant>)
-- ARGV[1] emission interval in microseconds (1e6 / rate per second), ARGV[2] burst, ARGV[3] cost
-- Returns { 1, 0 } admitted, or { 0, microseconds until it would be }.
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(redis.call("GET", KEYS[1])) or now
if tat < now then
  tat = now
end
local new_tat = tat + cost * interval
local allow_at = new_tat - (burst + 1) * interval
if now < allow_at then
  return { 0, math.ceil(allow_at - now) }
end
-- "%.0f": Redis would write a Lua number of 16 digits as 1.7e+15, losing the microseconds
redis.call("SET", KEYS[1], string.format("%.0f", new_tat), "PX", math.ceil((new_tat - now) / 1000) + 1000)
return { 1, 0 }
