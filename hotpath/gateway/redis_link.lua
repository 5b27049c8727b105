-- The gateway's link to the fleet's Redis (hotpath.shared_state): lua-resty-redis (Debian's
-- lua-nginx-redis), one pooled keepalive connection per worker, short timeouts, and a breaker: after a
-- failed call Redis is skipped for `retry_s`, so while it is down or slow no request waits out a timeout;
-- the first call after that tries again (Redis back: used again, no restart). Every failure is counted
-- in the shared dict (the status server's /metrics) and logged once per breaker period.

local redis = require "nginx.redis"

local M = {}
local cfg      -- front_door.json's "redis" (host, port, db, password, timeout_ms, retry_s, pool_size, idle_ms)
local dict     -- the gateway's shared dict: the breaker and the counters are the workers' together

function M.init(config, shared)
  cfg = config
  dict = shared
end

function M.enabled()
  return cfg ~= nil
end

-- The gateway's shared dict (flags the workers share, e.g. the exact cache's dirty stores).
function M.shared()
  return dict
end

-- Skipped now (the breaker is open)?
local function skipped()
  return dict:get("redis:down")
end

-- Did the last call succeed? (metrics and health: the breaker closes after retry_s, Redis may still be down)
function M.up()
  return cfg ~= nil and not dict:get("redis:failing")
end

function M.count(name, n)
  dict:incr(name, n or 1, 0)
end

local function failed(err)
  M.count("redis:errors")
  dict:set("redis:failing", true)
  if dict:add("redis:down", true, cfg.retry_s) then   -- the first failure of a period logs it
    ngx.log(ngx.WARN, "hotpath gateway: redis ", cfg.host, ":", cfg.port, " failed (", tostring(err),
      "); quotas follow each tenant's redis_failure policy, answers go uncached; retrying in ", cfg.retry_s, " s")
  end
end

local function connect()
  local red = redis:new()
  red:set_timeout(cfg.timeout_ms)
  local ok, err = red:connect(cfg.host, cfg.port)
  if ok and red:get_reused_times() == 0 then   -- a new connection: log in, pick the database
    if cfg.password ~= "" then
      ok, err = red:auth(cfg.password)
    end
    if ok and cfg.db ~= 0 then
      ok, err = red:select(cfg.db)
    end
  end
  if not ok then
    red:close()
    return nil, err
  end
  return red
end

-- fn(red) with a connected client; fn returns nil, err when the connection failed (socket error or
-- timeout) and anything else otherwise. Returns fn's result, or nil, err when Redis is down or failed.
-- A pooled connection that fails other than by a timeout is tried once more on another: after a Redis
-- restart the pool holds connections the old server closed.
function M.call(fn)
  if not cfg or skipped() then
    return nil, "down"
  end
  local err
  for attempt = 1, 2 do
    local red
    red, err = connect()
    if not red then
      break
    end
    local reused = red:get_reused_times() > 0
    local result
    result, err = fn(red)
    if result ~= nil then
      red:set_keepalive(cfg.idle_ms, cfg.pool_size)
      if dict:get("redis:failing") then
        dict:delete("redis:failing")
        ngx.log(ngx.WARN, "hotpath gateway: redis ", cfg.host, ":", cfg.port, " answers again")
      end
      return result
    end
    red:close()
    if not reused or err == "timeout" or attempt == 2 then
      break
    end
  end
  failed(err)
  return nil, err
end

-- Health: a PING unless the breaker is open, so /health tells a Redis that came back without traffic.
function M.probe()
  if cfg then
    M.call(function(red) return red:ping() end)
  end
  return M.up()
end

-- A script of one key by its SHA-1, loaded on NOSCRIPT (a restarted or new Redis has none). nil, err: a failure.
function M.script(red, sha, source, key, ...)
  local res, err = red:evalsha(sha, 1, key, ...)
  if res == false and tostring(err):find("^NOSCRIPT") then
    res, err = red:eval(source, 1, key, ...)
  end
  if res == false then   -- an error reply (out of memory, a script error): the call failed
    return nil, err
  end
  return res, err
end

-- GCRA in Redis (gcra.redis.lua): true; false, seconds to wait; or nil when Redis cannot answer.
function M.gcra(key, rate, burst, cost)
  local res = M.call(function(red)
    return M.script(red, cfg.gcra_sha, cfg.gcra_script, key, string.format("%.3f", 1e6 / rate), burst, cost)
  end)
  if res == nil then
    return nil
  end
  if res[1] == 1 then
    return true
  end
  return false, math.max(1, math.ceil(res[2] / 1e6))
end

return M
