-- What each tenant used, as the gateway sees it, and the give-back of the generated-token budget
-- (front_door.lua loads this file beside itself in the master; `hotpath usage` reads the counters).
--
-- Requests: each inference request the gateway served for a tenant, by door: an admitted unary call
-- (gRPC ModelInfer, HTTP infer, the OpenAI door), an HTTP generate_stream passed on, a gRPC stream message
-- admitted by /charge, an answer from the exact cache. Published on the status server's /metrics as
--   hotpath_gateway_tenant_requests_total{tenant, door}      door: grpc | grpc_stream | http | openai
--   hotpath_gateway_tokens_returned_total{tenant}            tokens given back to the budget (below)
-- per replica (Prometheus sums the replicas).
--
-- Give-back: a generation is charged its max_tokens when it is admitted (front_door.lua's limit); when it
-- ends, the tokens it did not generate are given back to the tenant's token budget, so the budget counts
-- what the engine generated. A give-back moves the GCRA key's theoretical arrival time (TAT) back by
-- unused x interval, never below now (no credit beyond a full budget): in Redis with gcra_return.redis.lua
-- beside gcra.redis.lua (the fleet's budget), else in the shared dict. What was generated is told by:
--   the OpenAI API: header x-hotpath-output-tokens on a whole answer, a last SSE comment line
--     ": hotpath-output-tokens=N" after "data: [DONE]" on a stream; both are removed here (the header and
--     body filters) before the client sees them, and the give-back runs in the log phase;
--   the stream admission (hotpath.gateway.streams): /charge?return=N per finished generation message.
-- HTTP generate_stream answers are not given back (Triton's events carry the count only when the client
-- asked for it): they stay charged their max_tokens.

local M = {}

local dict       -- the gateway's shared dict (front_door.lua's counters)
local link       -- redis_link.lua
local cfg        -- front_door.json
local DOORS = { "grpc", "grpc_stream", "http", "openai" }
local HEADER = "x-hotpath-output-tokens"
local MARK = ": hotpath-output-tokens="
local SCRIPT_NAME = "gcra_return.redis.lua"
local script, sha

function M.init(config, shared, redis_link, here)
  cfg, dict, link = config, shared, redis_link
  local f = io.open(here .. SCRIPT_NAME, "rb")
  if f then
    script = f:read("*a")
    f:close()
  end
end

-- Counting ---------------------------------------------------------------------------------------------

function M.request(tenant, door)
  if tenant and tenant ~= "" then
    dict:incr("usage:requests:" .. door .. ":" .. tenant, 1, 0)
  end
end

-- Give-back ---------------------------------------------------------------------------------------------

local function hex(bin)
  return (bin:gsub(".", function(c) return string.format("%02x", c:byte()) end))
end

local function give_back_local(key, interval, units)
  local now = ngx.now()
  local tat = dict:get(key)
  if not tat or tat <= now then
    return
  end
  local new_tat = math.max(tat - units * interval, now)
  dict:set(key, new_tat, math.ceil(new_tat - now) + 1)
end

local function give_back_redis(premature, key, interval, units)
  if premature then
    return
  end
  sha = sha or hex(ngx.sha1_bin(script))
  local res = link.call(function(red)
    return link.script(red, sha, script, "hotpath:" .. key, string.format("%.3f", interval * 1e6), units)
  end)
  if res == nil then   -- Redis cannot answer: the charge went to this replica's budget, as gcra() fell back
    give_back_local(key, interval, units)
  end
end

-- Gives `units` tokens back to `tenant`'s token budget (nothing without a tokens_per_min).
function M.give_back(tenant, units)
  local t = cfg.tenants[tenant]
  units = math.floor(tonumber(units) or 0)
  if not t or not t.tokens_per_min or units <= 0 then
    return
  end
  local key = "tokens:" .. tenant
  local interval = 60 / t.tokens_per_min
  dict:incr("usage:returned:" .. tenant, units, 0)
  if link.enabled() and script then
    if ngx.get_phase() == "log" then   -- no cosockets in the log phase: a timer runs the script
      ngx.timer.at(0, give_back_redis, key, interval, units)
    else
      give_back_redis(false, key, interval, units)
    end
  else
    give_back_local(key, interval, units)
  end
end

-- Access phase (front_door.lua's limit): the tokens a call was charged, given back in part when it ends.
function M.charged(tenant, tokens)
  ngx.ctx.usage_charged = { tenant, tokens }
end

-- The OpenAI door's filters: read and remove what the API told the gateway --------------------------

function M.header_filter()
  local told = ngx.header[HEADER]
  if told then
    ngx.ctx.usage_generated = tonumber(told)
    ngx.header[HEADER] = nil
  end
end

-- The comment is the stream's last line. A chunk that ends in what may be its start (a line that is a prefix
-- of it, or of it and its number) is held back until the rest comes; held when the body ends, it is sent.
local function comment_at(data, line_start)
  if line_start and data:sub(1, #MARK) == MARK then
    return 1
  end
  local at = data:find("\n" .. MARK, 1, true)
  return at and at + 1
end

local function partial_at(data, line_start)
  -- the last line of data, when it has no newline yet and could still become the comment
  local from = 1
  local last = data:match(".*()\n")
  if last then
    from = last + 1
  elseif not line_start then
    return nil
  end
  local tail = data:sub(from)
  if tail == "" then
    return nil
  end
  if #tail <= #MARK then
    return MARK:sub(1, #tail) == tail and from or nil
  end
  return tail:sub(1, #MARK) == MARK and tail:find("^%d*$", #MARK + 1) and from or nil
end

function M.body_filter()
  local ctx = ngx.ctx
  local data = (ctx.usage_held or "") .. (ngx.arg[1] or "")
  ctx.usage_held = nil
  if ctx.usage_blank and data ~= "" then   -- the blank line that ends the comment's event came apart from it
    ctx.usage_blank = nil
    data = data:gsub("^\n", "", 1)
  end
  local line_start = ctx.usage_line_start ~= false
  local at = comment_at(data, line_start)
  if at then
    local n, stop = data:match("^(%d+)\n()", at + #MARK)
    if n then
      ctx.usage_generated = tonumber(n)
      local rest = data:sub(stop)
      ctx.usage_blank = rest == ""
      data = data:sub(1, at - 1) .. rest:gsub("^\n", "", 1)
    end
  end
  if not ngx.arg[2] then
    local from = partial_at(data, line_start)
    if from then
      ctx.usage_held = data:sub(from)
      data = data:sub(1, from - 1)
    end
  end
  if data ~= "" then
    ctx.usage_line_start = data:sub(-1) == "\n"
  end
  ngx.arg[1] = data
end

-- Log phase: count the request, give back what a generation did not use ---------------------------------

local function door()
  if ngx.var.uri:find("^/v1/") then
    return "openai"
  end
  if (ngx.var.content_type or ""):find("^application/grpc") then
    return "grpc"
  end
  return "http"
end

-- `admitted`: front_door.lua's admission record ("tenant work"), read before release clears it.
function M.log(admitted)
  local tenant = ngx.var[cfg.tenant_variable]
  if not tenant or tenant == "" or not cfg.tenants[tenant] then
    return
  end
  if (admitted and admitted ~= "") or ngx.var.sent_http_x_hotpath_cache == "hit"
      or (ngx.var.uri:find("/generate_stream$") and (ngx.var.upstream_addr or "") ~= "") then
    M.request(tenant, door())
  end
  local charged = ngx.ctx.usage_charged
  local generated = ngx.ctx.usage_generated
  if charged and generated and charged[1] == tenant then
    M.give_back(tenant, charged[2] - generated)
  end
end

-- Prometheus text lines for the status server's /metrics.
function M.metrics_lines()
  local lines = {
    "# HELP hotpath_gateway_tenant_requests_total Inference requests served per tenant and door (this replica)",
    "# TYPE hotpath_gateway_tenant_requests_total counter",
  }
  local names = {}
  for name in pairs(cfg.tenants) do
    names[#names + 1] = name
  end
  table.sort(names)
  for _, name in ipairs(names) do
    for _, d in ipairs(DOORS) do
      local v = dict:get("usage:requests:" .. d .. ":" .. name)
      if v then
        lines[#lines + 1] = string.format('hotpath_gateway_tenant_requests_total{tenant="%s",door="%s"} %d',
          name, d, v)
      end
    end
  end
  lines[#lines + 1] = "# HELP hotpath_gateway_tokens_returned_total Charged generation tokens given back " ..
    "to the tenant's budget because they were not generated (this replica)"
  lines[#lines + 1] = "# TYPE hotpath_gateway_tokens_returned_total counter"
  for _, name in ipairs(names) do
    local v = dict:get("usage:returned:" .. name)
    if v then
      lines[#lines + 1] = string.format('hotpath_gateway_tokens_returned_total{tenant="%s"} %d', name, v)
    end
  end
  return table.concat(lines, "\n")
end

return M
