-- Conversation affinity at the OpenAI door (hotpath.gateway.openai_door; docs/operations.md, "Conversation
-- affinity"): a chat conversation's turns go to the replica that served its earlier ones, whose vLLM prefix
-- cache still holds the conversation's KV blocks (enable_prefix_caching in build/text_generation.toml).
--
-- Key: a hash of the tenant and the conversation's first messages (its first system or developer message,
-- if one comes before the first user message, and that first user message): every turn of a conversation
-- resends them unchanged, so turn 1 (a single user message) and turn 3 have the same key, and two
-- conversations that share a system prompt but start with different questions have different keys. The
-- tenant's name is part of it: two tenants' identical prompts are different keys (no cross-tenant signal).
-- No key (no `messages` array, no user message in it; every call of /v1/embeddings, /v1/completions,
-- /tokenize): the least-loaded live replica.
--
-- Consistent hashing with bounded loads (Mirrokni, Thorup, Zadimoghaddam 2018): each replica has POINTS
-- points on a ring of 32-bit hashes of its address; a key goes to the first replica clockwise from its hash
-- that is live (not failed within fail_timeout) and has fewer calls in flight than
-- ceil(factor * (in flight on live replicas + 1) / live replicas); when the preferred one is at the bound
-- the next replica on the ring takes the call. In-flight calls are this gateway's own count (shared dict),
-- so each gateway replica bounds the calls it sends.
--
-- The choice is an upstream group per replica (openai_api_<i>: that replica, the others as NGINX `backup`),
-- so NGINX itself connects, keeps connections alive, resolves host names and fails over: a replica that
-- refuses or times out is marked failed by NGINX and the call passes to a backup; the log phase marks it
-- failed here too, for fail_timeout, and the conversation's next turns go to the next replica on the ring.
--
-- The ring and the pick are pure functions (build_ring, order, pick, least_loaded) with the hash passed
-- in: tests/tools/test_gateway_affinity.py runs them in NGINX.

local M = {}

M.POINTS = 160   -- per replica: the keys' shares of the ring are within a few percent of equal

local cfg            -- front_door.json's openai.affinity: replicas, factor, fail_timeout_s, upstream, variable
local counters       -- the gateway's shared dict
local ring           -- build_ring(cfg.replicas)

-- 32-bit hash of a string: the first 8 hex digits of its MD5.
function M.hash(text)
  return tonumber(ngx.md5(text):sub(1, 8), 16)
end

-- The ring: {{point, replica index}, ...} sorted by point; POINTS points per replica, hashed from its name
-- (its --openai-upstream address: gateways given the same addresses, in any order, build the same ring).
function M.build_ring(names, hash, points)
  local out = {}
  for i, name in ipairs(names) do
    for k = 1, points or M.POINTS do
      out[#out + 1] = { hash(name .. "#" .. k), i }
    end
  end
  table.sort(out, function(a, b)
    if a[1] ~= b[1] then
      return a[1] < b[1]
    end
    return a[2] < b[2]
  end)
  return out
end

-- The replicas in ring order from `h` clockwise, each once.
function M.order(r, n, h)
  local lo, hi = 1, #r + 1   -- the first point >= h (wrapping to 1 past the end)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if r[mid][1] < h then
      lo = mid + 1
    else
      hi = mid
    end
  end
  local out, seen = {}, {}
  for step = 0, #r - 1 do
    local i = r[(lo - 1 + step) % #r + 1][2]
    if not seen[i] then
      seen[i] = true
      out[#out + 1] = i
      if #out == n then
        break
      end
    end
  end
  return out
end

-- The bound on any live replica's calls in flight, counting the call being placed.
function M.bound(loads, live, factor)
  local total, count = 0, 0
  for i, up in ipairs(live) do
    if up then
      total, count = total + (loads[i] or 0), count + 1
    end
  end
  return math.ceil(factor * (total + 1) / math.max(count, 1))
end

-- The first replica of `ring_order` that is live and under the bound, and whether it is the key's own (the
-- first on the ring); nil when none is live.
function M.pick(ring_order, loads, live, factor)
  local limit = M.bound(loads, live, factor)
  local first
  for _, i in ipairs(ring_order) do
    if live[i] then
      first = first or i
      if (loads[i] or 0) < limit then
        return i, i == ring_order[1]
      end
    end
  end
  return first, first == ring_order[1]  -- unreachable while factor >= 1: some live replica is at or under the mean
end

-- The live replica with the fewest calls in flight; ties go to the one after `after` (round robin).
function M.least_loaded(loads, live, after)
  local n, best = #live, nil
  for step = 1, n do
    local i = ((after or 0) + step - 1) % n + 1
    if live[i] and (best == nil or (loads[i] or 0) < (loads[best] or 0)) then
      best = i
    end
  end
  return best
end

-- NGINX side ------------------------------------------------------------------------------------------

function M.init(openai, shared)
  cfg = openai and openai.affinity
  counters = shared
  if cfg then
    ring = M.build_ring(cfg.replicas, M.hash)
  end
end

-- The text of a message's content: a string, or the text (and image URLs) of its parts, in order.
local function text_of(content)
  if type(content) == "string" then
    return content
  end
  if type(content) ~= "table" then
    return nil
  end
  local parts = {}
  for _, p in ipairs(content) do
    if type(p) == "string" then
      parts[#parts + 1] = p
    elseif type(p) == "table" then
      local t = p.text
      if t == nil and type(p.image_url) == "table" then
        t = p.image_url.url
      end
      if type(t) == "string" then
        parts[#parts + 1] = t
      end
    end
  end
  return table.concat(parts, "\n")
end

-- The conversation's key, or nil: the tenant, its first system/developer message before the first user
-- message, and that first user message.
function M.key(tenant, messages)
  if type(messages) ~= "table" then
    return nil
  end
  local system, user
  for _, m in ipairs(messages) do
    if type(m) == "table" then
      if m.role == "user" then
        user = text_of(m.content)
        break
      elseif system == nil and (m.role == "system" or m.role == "developer") then
        system = text_of(m.content)
      end
    end
  end
  if user == nil then
    return nil
  end
  return M.hash(tenant .. "\0" .. (system or "") .. "\0" .. user)
end

local function loads_and_live()
  local loads, live = {}, {}
  local any = false
  for i = 1, #cfg.replicas do
    loads[i] = counters:get("affinity:calls:" .. i) or 0
    live[i] = not counters:get("affinity:down:" .. i)
    any = any or live[i]
  end
  if not any then   -- every replica failed lately: try them all again (NGINX's own groups do the same)
    for i = 1, #live do
      live[i] = true
    end
  end
  return loads, live
end

-- Access phase, once the call is admitted: the replica for `doc` (a parsed OpenAI body; `chat`: a chat
-- completion, which may carry a key). Sets the request's upstream group; nothing without affinity.
function M.route(tenant, doc, chat)
  if not cfg then
    return
  end
  local loads, live = loads_and_live()
  local key = chat and M.key(tenant, doc.messages) or nil
  local i, result
  if key then
    local preferred
    i, preferred = M.pick(M.order(ring, #cfg.replicas, key), loads, live, cfg.factor)
    result = preferred and "preferred" or "spilled"
  else
    i = M.least_loaded(loads, live, counters:incr("affinity:rr", 1, 0))
    result = "no_key"
  end
  counters:incr("affinity:calls:" .. i, 1, 0)
  counters:incr("affinity:" .. result, 1, 0)
  ngx.var[cfg.variable] = cfg.upstream .. "_" .. i
end

-- Log phase: the call's count released; a replica that failed (NGINX passed the call on, or got no answer)
-- is marked failed for fail_timeout.
function M.release()
  if not cfg then
    return
  end
  local group = ngx.var[cfg.variable]
  local i = group and tonumber(group:match("_(%d+)$"))
  if not i or group ~= cfg.upstream .. "_" .. i then
    return
  end
  ngx.var[cfg.variable] = ""
  counters:incr("affinity:calls:" .. i, -1, 0)
  local statuses = ngx.var.upstream_status or ""
  local first = statuses:match("^[^,:]+") or ""
  local passed_on = statuses:find("[,:]") ~= nil
  local no_answer = (first == "502" or first == "504") and (ngx.var.upstream_header_time or "-"):match("^%-")
  if passed_on or no_answer then
    counters:set("affinity:down:" .. i, true, cfg.fail_timeout_s)
    counters:incr("affinity:failovers", 1, 0)
  end
end

-- Prometheus text for the status server's /metrics ("" without affinity).
function M.metrics_lines()
  if not cfg then
    return ""
  end
  local lines = { "# HELP hotpath_gateway_openai_affinity_total OpenAI door calls by how the replica was chosen: " ..
    "preferred (the conversation's replica), spilled (the next on the ring: the preferred one was at the load " ..
    "bound or failed), no_key (least loaded)", "# TYPE hotpath_gateway_openai_affinity_total counter" }
  for _, result in ipairs({ "preferred", "spilled", "no_key" }) do
    lines[#lines + 1] = string.format('hotpath_gateway_openai_affinity_total{result="%s"} %d', result,
      counters:get("affinity:" .. result) or 0)
  end
  lines[#lines + 1] = "# HELP hotpath_gateway_openai_affinity_failovers_total OpenAI door calls whose replica " ..
    "failed (it is skipped for fail_timeout)"
  lines[#lines + 1] = "# TYPE hotpath_gateway_openai_affinity_failovers_total counter"
  lines[#lines + 1] = "hotpath_gateway_openai_affinity_failovers_total " .. (counters:get("affinity:failovers") or 0)
  return table.concat(lines, "\n")
end

return M
