-- The tenant gateway's checks in NGINX's access phase (hotpath.gateway.config writes the nginx.conf that
-- loads this file in the master process, so workers never read it from disk).
--
-- Before any Triton parser sees a request: the model is a public endpoint (internal ensemble steps are
-- unreachable), an HTTP JSON body is bounded in nesting depth (Triton 2.51's JSON parser segfaults near
-- 100,000 levels: docs/runtime_notes.md) and shaped as the KServe v2 protocol and the model's config
-- say (Triton's HTTP frontend answers some malformed bodies with 500, or narrows integers silently), and
-- the call fits its tenant's fair share of the replicas' in-flight calls and work (items in the batch).
-- A refusal names the field and the rule, in the caller's protocol: gRPC trailers-only, HTTP JSON.

local cjson = require "cjson.safe"
local bit = require "bit"
local link = require "hotpath_redis_link"      -- the fleet's Redis: shared budgets (redis_link.lua)
local cache = require "hotpath_exact_cache"    -- the fleet's exact cache (exact_cache.lua)
-- usage: per-tenant requests and the give-back of unused generation tokens (usage.lua, beside this file)
local HERE = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local usage = dofile(HERE .. "usage.lua")
-- affinity: the OpenAI door's replica per conversation (affinity.lua, beside this file)
local affinity = dofile(HERE .. "affinity.lua")

local M = {}
local cfg            -- hotpath.gateway.config's front_door.json: models, depth, tenants' weights, caps
local json           -- a cjson instance with the depth bound
local counters       -- ngx.shared dict: in-flight calls and work per tenant and in total
local refused_parameter = {}   -- set: parameter keys no tenant may send (front_door.REFUSED_PARAMETERS)

local GRPC_STATUS = { INVALID_ARGUMENT = 3, NOT_FOUND = 5, PERMISSION_DENIED = 7, RESOURCE_EXHAUSTED = 8,
                      UNAVAILABLE = 14 }
local HTTP_STATUS = { INVALID_ARGUMENT = 400, NOT_FOUND = 404, PERMISSION_DENIED = 403, RESOURCE_EXHAUSTED = 429,
                      UNAVAILABLE = 503 }
-- Largest magnitude of each integer type that a JSON number may carry: the gateway re-writes the body
-- with lua-cjson, which writes numbers with at most 14 significant digits, so 64-bit inputs are held to
-- +-(10^14 - 1) (exact in a double too).
local INT64_MAX = 99999999999999
local INT_RANGE = {
  INT8 = { -128, 127 }, INT16 = { -32768, 32767 }, INT32 = { -2147483648, 2147483647 },
  INT64 = { -INT64_MAX, INT64_MAX }, UINT8 = { 0, 255 }, UINT16 = { 0, 65535 },
  UINT32 = { 0, 4294967295 }, UINT64 = { 0, INT64_MAX },
}
local FLOAT_TYPES = { FP16 = true, FP32 = true, FP64 = true, BF16 = true }
local MAX_DIM = 2147483647
-- A tenant counts as active this long after its last call or refusal: longer than the Retry-After a
-- refusal carries (1 s), so a client that waits as told is still a contender when it comes back.
local ACTIVE_S = 3

function M.init(path)
  local f = assert(io.open(path, "rb"))
  local text = f:read("*a")
  f:close()
  cfg = assert(cjson.decode(text), "front_door.json is not JSON")
  json = cjson.new()
  json.decode_max_depth(cfg.max_json_depth)
  json.decode_invalid_numbers(false)   -- NaN / Infinity are not JSON
  counters = ngx.shared[cfg.shared_dict]
  link.init(cfg.redis, counters)   -- no "redis": every replica keeps its own budgets, nothing is cached
  cache.init(cfg.cache)
  usage.init(cfg, counters, link, HERE)   -- usage
  affinity.init(cfg.openai, counters)     -- affinity
  for _, key in ipairs(cfg.refused_parameters) do
    refused_parameter[key] = true
  end
end

-- A parameter no tenant may send: a name of front_door.REFUSED_PARAMETERS, or x-hotpath-* in any letter case
-- (the gateway's own headers, which tritonserver forwards as request parameters: hotpath.runtime.tenancy).
local function refused_key(key)
  return refused_parameter[key] or (type(key) == "string" and key:sub(1, 10):lower() == "x-hotpath-")
end

-- Refusals -----------------------------------------------------------------------------------------

local function grpc_message(message)
  -- gRPC's grpc-message is percent-encoded outside printable ASCII (and '%' itself).
  return (message:gsub("[^%w %-%._~:;,/'()=<>%[%]{}@!?*+]", function(c)
    return string.format("%%%02X", string.byte(c))
  end))
end

local openai_refuse   -- the OpenAI door's answers (below, with M.openai)

local function refuse(protocol, code, message, retry_after)
  if protocol == "openai" then
    return openai_refuse(code, message, retry_after)
  end
  if protocol == "charge" then   -- the stream admission's question: the answer is the body
    ngx.status = 200
    ngx.print(cjson.encode({ code = code, message = message, retry_after = retry_after }))
    return ngx.exit(200)
  end
  if retry_after and protocol == "grpc" then
    ngx.header["retry-after"] = retry_after
  end
  if protocol == "grpc" then
    ngx.header["content-type"] = "application/grpc"
    ngx.header["grpc-status"] = GRPC_STATUS[code]
    ngx.header["grpc-message"] = grpc_message(message)
    return ngx.exit(204)   -- a trailers-only response: the client reads the status from the headers
  end
  ngx.status = HTTP_STATUS[code]
  ngx.header["content-type"] = "application/json"
  if retry_after then
    ngx.header["retry-after"] = retry_after
  end
  ngx.print(cjson.encode({ error = message }))
  return ngx.exit(ngx.status)
end

local function public_model(protocol, name)
  local model = cfg.models[name]
  if not model then
    local t = cfg.tenants[ngx.var[cfg.tenant_variable] or ""]
    return nil, refuse(protocol, "NOT_FOUND",
      "gateway: unknown model '" .. tostring(name):sub(1, 128) .. "'; public endpoints: " ..
      (t and t.public_list or cfg.public_list))
  end
  return model
end

-- Scopes (hotpath.gateway.tenants): may `tenant` call `name` (a write to it, when `write`)? A refusal is
-- PERMISSION_DENIED; a call to a store sets the collection it reads and writes: "shared" for an admin, else
-- the tenant's own (the server's default).
local function permitted(protocol, tenant, name, write)
  local t = cfg.tenants[tenant]
  local level = t and t.calls[name]
  if not level then
    return refuse(protocol, "PERMISSION_DENIED", "gateway: this tenant's scopes do not grant '" ..
      tostring(name):sub(1, 128) .. "'")
  end
  if write and level ~= "write" and level ~= "admin" then
    return refuse(protocol, "PERMISSION_DENIED", "gateway: this tenant may only search '" .. name ..
      "' (its scope is \"" .. level .. "\"): a call with the " .. cfg.store_input .. " input writes")
  end
  if cfg.models[name].store and protocol ~= "charge" then
    local collection = level == "admin" and cfg.shared_collection or tenant
    ngx.var[cfg.collection_variable] = collection
    return collection
  end
  return tenant
end

-- The request body, from memory or from the temp file NGINX spilled it to.
local function body()
  ngx.req.read_body()
  local data = ngx.req.get_body_data()
  if data then
    return data
  end
  local file = ngx.req.get_body_file()
  if not file then
    return ""
  end
  local f = io.open(file, "rb")
  if not f then
    return nil
  end
  data = f:read("*a")
  f:close()
  return data
end

-- Rate limits: GCRA ----------------------------------------------------------------------------------
-- The generic cell rate algorithm (as NGINX's limit_req and redis-cell): one stored time per key, the
-- theoretical arrival time; a call of cost n is admitted when, after it, the key is at most `burst`
-- units ahead of a steady `rate`. Requests and generated tokens are two keys per tenant; every inference
-- request counts, a stream's messages included (the stream admission asks /charge for each).

local function gcra(key, rate, burst, cost, now)
  local interval = 1 / rate
  local tat = math.max(counters:get(key) or now, now)
  local new_tat = tat + cost * interval
  local allow_at = new_tat - (burst + 1) * interval
  if cost > burst + 1 then
    return false, nil    -- never fits, at any wait
  end
  if now < allow_at then
    return false, math.ceil(allow_at - now)
  end
  counters:set(key, new_tat, math.ceil(new_tat - now) + 1)
  return true
end

-- With Redis configured the budget is the fleet's (redis_link.lua runs gcra.redis.lua there); when Redis
-- cannot answer, the tenant's redis_failure policy decides: "open" counts on this replica as without
-- Redis (so N replicas admit up to N times the rate while it lasts), "closed" refuses with UNAVAILABLE.
local function budget(protocol, t, key, rate, burst, cost, now)
  if cost > burst + 1 then
    return false, nil    -- never fits, at any wait
  end
  if link.enabled() then
    local ok, retry = link.gcra("hotpath:" .. key, rate, burst, cost)
    if ok ~= nil then
      return ok, retry
    end
    if t.redis_failure == "closed" then
      link.count("redis:refused")
      return refuse(protocol, "UNAVAILABLE", "gateway: the quota store is unreachable and this tenant's quotas " ..
        "fail closed; retry later", "1")
    end
    link.count("redis:local")
  end
  return gcra(key, rate, burst, cost, now)
end

local function limit(protocol, tenant, tokens)
  local t = cfg.tenants[tenant]
  local now = ngx.now()
  local ok, retry = budget(protocol, t, "rate:" .. tenant, t.requests_per_s, t.burst, 1, now)
  if not ok then
    return refuse(protocol, "RESOURCE_EXHAUSTED", string.format(
      "gateway: tenant request rate limit exceeded (%d/s, burst %d); retry after %d s",
      t.requests_per_s, t.burst, retry), tostring(retry))
  end
  if tokens > 0 and t.tokens_per_min then
    local per_s = t.tokens_per_min / 60
    ok, retry = budget(protocol, t, "tokens:" .. tenant, per_s, t.tokens_per_min - 1, tokens, now)
    if not ok then
      if not retry then
        return refuse(protocol, "INVALID_ARGUMENT", string.format(
          "gateway: %d tokens asked, more than the tenant's %d tokens per minute", tokens, t.tokens_per_min))
      end
      return refuse(protocol, "RESOURCE_EXHAUSTED", string.format(
        "gateway: tenant token limit exceeded (%d tokens per minute); retry after %d s", t.tokens_per_min, retry),
        tostring(retry))
    end
    if protocol == "openai" then usage.charged(tenant, tokens) end   -- usage: given back in part at the end
  end
end

-- A call that names no model (health, server metadata) still counts against its tenant's rate.
function M.count(protocol)
  limit(protocol, ngx.var[cfg.tenant_variable], 0)
end

-- Tokens a generation request may produce: max_tokens of its sampling_parameters (a JSON text), else the
-- model's default; times n (its choices, 1..8: the model refuses any other value). A number is max_tokens
-- as the stream admission read it, with its n.
local function requested_tokens(model, value, choices)
  if not model.decoupled then
    return 0
  end
  if type(value) == "table" then
    value = value[1]
  end
  local n = 1
  if type(choices) == "number" and choices > 1 then
    n = math.min(math.floor(choices), 8)
  end
  if type(value) == "string" then
    local params = json.decode(value)
    value = type(params) == "table" and params.max_tokens or nil
    if type(params) == "table" and type(params.n) == "number" and params.n > 1 then
      n = math.min(math.floor(params.n), 8)
    end
  end
  if type(value) == "number" and value >= 1 then
    return math.floor(value) * n
  end
  return (model.default_max_tokens or 1) * n
end

-- The stream admission (hotpath.gateway.streams) asks here for each message of a gRPC stream; only it
-- can reach this server (a unix socket beside nginx.conf) and it proves it with the run's key.
function M.charge()
  if ngx.var.http_x_hotpath_key ~= cfg.charge_key then
    return ngx.exit(403)
  end
  local args = ngx.req.get_uri_args()
  local tenant, name = args.tenant, args.model
  if type(tenant) ~= "string" or not cfg.tenants[tenant] then
    return refuse("charge", "PERMISSION_DENIED", "gateway: unknown tenant")
  end
  if args.returned then   -- usage: a finished generation gives back the tokens it did not use
    usage.give_back(tenant, tonumber(args.returned))
    return refuse("charge", "OK", "")
  end
  local model = cfg.models[name]
  if not model then
    return refuse("charge", "NOT_FOUND",
      "gateway: unknown model '" .. tostring(name):sub(1, 128) .. "'; public endpoints: " ..
      cfg.tenants[tenant].public_list)
  end
  permitted("charge", tenant, name)
  if not model.decoupled then   -- a stream's requests would bypass the in-flight caps and fair shares
    return refuse("charge", "INVALID_ARGUMENT", "gateway: '" .. name .. "' answers once per request: " ..
      "call ModelInfer; streams are for generation endpoints")
  end
  local tokens = requested_tokens(model, tonumber(args.max_tokens), tonumber(args.n))
  limit("charge", tenant, tokens)
  usage.request(tenant, "grpc_stream")   -- usage: counted; "charged": what a give-back starts from
  -- Only a model that can report what it generated (its return_num_output_tokens input, as vLLM's
  -- backend names it) has a give-back: asking another model for the count would fail its request.
  local counts = model.inputs.return_num_output_tokens ~= nil
  ngx.print(cjson.encode({ code = "OK", message = "", charged = counts and tokens or 0 }))
  return ngx.exit(200)
end

-- Fair shares ----------------------------------------------------------------------------------------
-- Each tenant's share of the in-flight calls and work is its weight over the weights of the tenants
-- active now (a call in flight or admitted within the last second). A call is admitted when the total
-- is under the caps and either the tenant is within its share, or the capacity that other active tenants
-- have not used up to their shares (reserved for them) still leaves room. A tenant with nothing in flight
-- always gets one call while any slot is free, so a batch larger than its share still makes progress.

local function get(key)
  return counters:get(key) or 0
end

local function shares(tenant)
  local total_weight, active = 0, {}
  for name, weight in pairs(cfg.weights) do
    if name == tenant or get("calls:" .. name) > 0 or counters:get("seen:" .. name) then
      total_weight = total_weight + weight
      active[#active + 1] = name
    end
  end
  local out = {}
  for _, name in ipairs(active) do
    local part = cfg.weights[name] / total_weight
    out[name] = { calls = math.max(1, math.floor(cfg.max_calls * part)),
                  work = math.max(1, math.floor(cfg.max_work * part)) }
  end
  return out
end

local function admit(protocol, tenant, work)
  counters:set("seen:" .. tenant, true, ACTIVE_S)
  local calls, total_work = get("calls"), get("work")
  if calls >= cfg.max_calls then
    return refuse(protocol, "UNAVAILABLE", cfg.overloaded, "1")
  end
  local mine_calls, mine_work = get("calls:" .. tenant), get("work:" .. tenant)
  local share = shares(tenant)
  local fair = share[tenant]
  local ok = mine_calls == 0
      or (mine_calls < fair.calls and mine_work + work <= fair.work)
  if not ok then
    local reserved_calls, reserved_work = 0, 0
    for name, s in pairs(share) do
      if name ~= tenant then
        -- A tenant whose calls are large can hold no more calls than its work share allows (at its
        -- current items per call): only those are kept for it, the rest of its call share is free.
        local c, w = get("calls:" .. name), get("work:" .. name)
        local usable = s.calls
        if c > 0 and w > 0 then
          usable = math.min(usable, math.max(1, math.floor(s.work * c / w)))
        end
        reserved_calls = reserved_calls + math.max(0, usable - c)
        reserved_work = reserved_work + math.max(0, s.work - w)
      end
    end
    ok = calls + reserved_calls < cfg.max_calls and total_work + work + reserved_work <= cfg.max_work
  end
  if not ok then
    return refuse(protocol, "UNAVAILABLE", string.format(
      "gateway: tenant at its fair share of the server (%d calls, %d items in flight) while other tenants " ..
      "are waiting; retry later", fair.calls, fair.work), "1")
  end
  counters:incr("calls", 1, 0)
  counters:incr("work", work, 0)
  counters:incr("calls:" .. tenant, 1, 0)
  counters:incr("work:" .. tenant, work, 0)
  -- ngx.ctx is lost on error_page's redirect to a named location (a 502 from a dead replica): the
  -- record lives in a request variable, which that redirect keeps.
  ngx.var[cfg.admitted_variable] = tenant .. " " .. work
end

-- log phase: every request ends here, answered or not
function M.release()
  local admitted = ngx.var[cfg.admitted_variable]
  usage.log(admitted)   -- usage: the tenant's request counted, unused generation tokens given back
  affinity.release()    -- affinity: the replica's count of calls in flight, its failure noted
  if admitted and admitted ~= "" then
    ngx.var[cfg.admitted_variable] = ""
    local tenant, work = admitted:match("^(%S+) (%d+)$")
    work = tonumber(work)
    counters:incr("calls", -1, 0)
    counters:incr("work", -work, 0)
    counters:incr("calls:" .. tenant, -1, 0)
    counters:incr("work:" .. tenant, -work, 0)
  end
end

-- gRPC ModelInfer: a minimal protobuf reader ---------------------------------------------------------
-- inference.ModelInferRequest: model_name = 1 (string), inputs = 5 (InferInputTensor: name = 1, shape = 3).

local function varint(s, pos)
  local result, mult = 0, 1
  for i = pos, math.min(pos + 9, #s) do
    local b = s:byte(i)
    result = result + bit.band(b, 0x7f) * mult
    if b < 0x80 then
      return result, i + 1
    end
    mult = mult * 128
  end
  return nil
end

-- Calls on_field(number, wire_type, value_or_start, stop) for each field of s[first..last]; false on a
-- malformed message.
local function fields(s, first, last, on_field)
  local pos = first
  while pos <= last do
    local key
    key, pos = varint(s, pos)
    if not key then return false end
    local number, wire = math.floor(key / 8), key % 8
    if wire == 0 then
      local value
      value, pos = varint(s, pos)
      if not value then return false end
      on_field(number, wire, value)
    elseif wire == 2 then
      local len
      len, pos = varint(s, pos)
      if not len or pos + len - 1 > last then return false end
      on_field(number, wire, pos, pos + len - 1)
      pos = pos + len
    elseif wire == 1 then
      pos = pos + 8
    elseif wire == 5 then
      pos = pos + 4
    else
      return false
    end
  end
  return pos == last + 1
end

-- The model's name, the first input's first dimension (the batch of a batched model), and whether every
-- dimension of every input fits 1..2^31-1 (Triton 2.51 keeps a batch size in 32 bits: a first dimension of
-- 2^32 + 1 with one item in it is served as a batch of 1; a dimension of 0 with data was served too).
-- Field numbers and wire types each inspected message may hold (inference.proto): anything else, groups
-- and unknown fields included, refuses the call. Triton's C++ parser skips what it does not know, so a
-- reader that stopped at an unknown field would let a tenant hide fields behind it.
local LEN, VARINT = { [2] = true }, { [0] = true }
local SCHEMA = {
  request = { LEN, LEN, LEN, LEN, LEN, LEN, LEN },       -- name, version, id, parameters, inputs, outputs, raw
  input = { LEN, LEN, { [0] = true, [2] = true }, LEN, LEN },   -- name, datatype, shape, parameters, contents
  output = { LEN, LEN },                                  -- name, parameters
  entry = { LEN, LEN },                                   -- map entry: key, value
  named = { LEN, LEN },                                   -- ModelReady/Metadata/Config: name, version
}

-- fields() with the schema enforced; false on anything it does not allow.
local function strict(s, a, b, schema, on_field)
  local fine = true
  local ok = fields(s, a, b, function(n, w, x, y)
    if not (schema[n] and schema[n][w]) then
      fine = false
    elseif on_field and on_field(n, w, x, y) == false then
      fine = false
    end
  end)
  return ok and fine
end

-- A map<string, InferParameter>'s entry: false when malformed; else the key when it is refused, or true.
local function entry_key(s, a, b)
  local key
  local ok = strict(s, a, b, SCHEMA.entry, function(n, w, x, y)
    if n == 1 then key = s:sub(x, y) end
  end)
  if not ok then return false end
  return key and refused_key(key) and key or true
end

-- The model's name, the first input's first dimension (the batch of a batched model), whether every
-- dimension of every input fits 1..2^31-1 (Triton 2.51 keeps a batch size in 32 bits: a first dimension of
-- 2^32 + 1 with one item in it is served as a batch of 1; a dimension of 0 with data was served too),
-- a refused parameter key if any, and whether an input is named as a store's write op (cfg.store_input).
local function parse_infer_request(s, first, last)
  local name, batch, dims_ok, refused, op = nil, nil, true, nil, false
  local function dim(value)
    if not value or value < 1 or value > MAX_DIM then
      dims_ok = false
    elseif batch == nil then
      batch = value
    end
  end
  local function parameter(x, y)
    local key = entry_key(s, x, y)
    if key == false then return false end
    if key ~= true then refused = refused or key end
  end
  local ok = strict(s, first, last, SCHEMA.request, function(number, wire, a, b)
    if number == 1 then
      name = s:sub(a, b)
    elseif number == 4 then
      return parameter(a, b)
    elseif number == 6 then
      return strict(s, a, b, SCHEMA.output, function(n, w, x, y)
        if n == 2 then return parameter(x, y) end
      end)
    elseif number == 5 then
      local first_input = batch == nil
      local fine = strict(s, a, b, SCHEMA.input, function(n, w, x, y)
        if n == 1 and s:sub(x, y) == cfg.store_input then op = true end
        if n == 4 then return parameter(x, y) end
        if n ~= 3 then return end
        if w == 0 then
          dim(x)
        else
          local pos = x
          while pos <= y do
            local value
            value, pos = varint(s, pos)
            dim(value)
            if not value then return false end
          end
        end
      end)
      if first_input and batch == nil then batch = 0 end
      return fine
    end
  end)
  return ok, name, batch, dims_ok, refused, op
end

-- One uncompressed gRPC message in the body: its protobuf's first and last byte, or a refusal.
local function grpc_message_of(data)
  if not data or #data < 5 then
    return refuse("grpc", "INVALID_ARGUMENT", "gateway: empty or truncated gRPC message")
  end
  if data:byte(1) ~= 0 then
    return refuse("grpc", "INVALID_ARGUMENT", "gateway: compressed gRPC messages are not accepted")
  end
  local b2, b3, b4, b5 = data:byte(2, 5)
  if ((b2 * 256 + b3) * 256 + b4) * 256 + b5 + 5 ~= #data then
    return refuse("grpc", "INVALID_ARGUMENT", "gateway: one request message per call")
  end
  return 6, #data
end

-- At capacity a call is refused before its body is read and parsed: refusing stays cheap when most
-- calls are refused (perf/reports/overload.md).
local function at_capacity(protocol)
  if get("calls") >= cfg.max_calls then
    -- still a contender: the others' shares shrink for it while it waits
    counters:set("seen:" .. ngx.var[cfg.tenant_variable], true, ACTIVE_S)
    return refuse(protocol, "UNAVAILABLE", cfg.overloaded, "1")
  end
end

function M.grpc_infer()
  at_capacity("grpc")
  local data = body()
  grpc_message_of(data)
  local ok, name, batch, dims_ok, refused, op = parse_infer_request(data, 6, #data)
  if not ok then
    return refuse("grpc", "INVALID_ARGUMENT", "gateway: malformed ModelInferRequest")
  end
  local model = public_model("grpc", name)
  local tenant = ngx.var[cfg.tenant_variable]
  -- a read-only store scope: a call carrying the OP input is refused whatever its value (not read here);
  -- a search sends no OP
  local collection = permitted("grpc", tenant, name, model.store and op)
  if refused then
    return refuse("grpc", "INVALID_ARGUMENT", "gateway: parameter '" .. refused .. "' is not accepted")
  end
  if not dims_ok then
    return refuse("grpc", "INVALID_ARGUMENT", "gateway: an input's shape holds a dimension that is not 1..2^31-1")
  end
  local work = 1
  if model.batched and batch and batch >= 1 then
    work = batch
  end
  limit("grpc", tenant, 0)   -- decoupled models are called on streams (hotpath.gateway.streams)
  if model.store and op then   -- a write (or an explicit search: its op is not read here) moves the version
    cache.write(name, collection)
  end
  return admit("grpc", tenant, work)
end

-- ModelReady / ModelMetadata / ModelConfig: field 1 of the request names the model.
function M.grpc_model()
  local data = body()
  grpc_message_of(data)
  local name
  local ok = strict(data, 6, #data, SCHEMA.named, function(n, w, x, y)
    if n == 1 then name = data:sub(x, y) end
  end)
  if not ok then
    return refuse("grpc", "INVALID_ARGUMENT", "gateway: malformed request message")
  end
  public_model("grpc", name)
  permitted("grpc", ngx.var[cfg.tenant_variable], name)
end

function M.http_model(name)
  public_model("http", name)
  permitted("http", ngx.var[cfg.tenant_variable], name)
end

-- HTTP: KServe v2 JSON ---------------------------------------------------------------------------------

-- cjson decodes [] and {} alike (an empty table): an empty one passes as either.
local function is_array(v)
  if type(v) ~= "table" then return false end
  local n = 0
  for _ in pairs(v) do n = n + 1 end
  return n == #v
end

local function is_object(v)
  return type(v) == "table" and v[1] == nil
end

local function is_count(v, limit)
  return type(v) == "number" and v >= 0 and v <= limit and v == math.floor(v)
end

-- Checks every leaf of `data` (nested arrays) against `datatype`; returns the leaf count and the least
-- and greatest number of arrays around a leaf, or nil, why.
-- Nested data whose every list at level d holds shape[d] items.
local function nested_as(v, shape, level)
  if level > #shape then return type(v) ~= "table" end
  if type(v) ~= "table" or #v ~= shape[level] then return false end
  for _, item in ipairs(v) do
    if not nested_as(item, shape, level + 1) then return false end
  end
  return true
end

local function check_data(data, datatype)
  local count, shallow, deep = 0, math.huge, 0
  local range, float = INT_RANGE[datatype], FLOAT_TYPES[datatype]
  local function walk(v, depth)
    if type(v) == "table" then
      if not is_array(v) then return "an object inside 'data'" end
      if next(v) == nil then return "an empty list inside 'data'" end   -- cjson would write it as {}
      for _, item in ipairs(v) do
        local why = walk(item, depth + 1)
        if why then return why end
      end
      return nil
    end
    shallow, deep = math.min(shallow, depth), math.max(deep, depth)
    count = count + 1
    if datatype == "BYTES" then
      if type(v) ~= "string" then return "BYTES data must be strings" end
    elseif datatype == "BOOL" then
      if type(v) ~= "boolean" then return "BOOL data must be true or false" end
    elseif range then
      if type(v) ~= "number" or v ~= math.floor(v) then return datatype .. " data must be integers" end
      if v < range[1] or v > range[2] then
        return string.format("%s data must be within [%.0f, %.0f]", datatype, range[1], range[2])
      end
    elseif float then
      if type(v) ~= "number" or v ~= v or v == math.huge or v == -math.huge then
        return datatype .. " data must be finite numbers"
      end
    end
    return nil
  end
  local why = walk(data, 0)
  if why then return nil, why end
  return count, shallow, deep
end

-- Parameters as the KServe extensions Triton reads them: each allowed key with the JSON type Triton
-- expects (a wrong type is a 500 from its parser), everything else refused. cfg.parameters comes from
-- hotpath.gateway.front_door.PARAMETERS (one list for both protocols and the stream admission).
local function check_parameters(params, allowed, where)
  if params == nil then return true end
  if not is_object(params) then return nil, where .. ": parameters must be an object" end
  for key, value in pairs(params) do
    local kind = not refused_key(key) and (allowed[key] or allowed["*"])
    local ok = kind == "bool" and type(value) == "boolean"
        or kind == "count" and is_count(value, INT_RANGE.INT64[2])
        or kind == "id" and (type(value) == "string" or is_count(value, INT_RANGE.INT64[2]))
        or kind == "scalar" and (type(value) == "string" or type(value) == "boolean"
                                 or type(value) == "number" and value == math.floor(value)
                                    and math.abs(value) <= INT64_MAX)
    if not kind then
      return nil, where .. ": parameter '" .. tostring(key):sub(1, 64) .. "' is not accepted"
    end
    if not ok then
      return nil, where .. ": parameter '" .. key .. "' must be " .. (cfg.parameter_kinds[kind] or kind)
    end
  end
  return true
end

local function check_tensor(t, spec, where, binary_left)
  if not is_object(t) then return nil, where .. " must be an object" end
  if type(t.name) ~= "string" then return nil, where .. ".name must be a string" end
  where = "input '" .. t.name:sub(1, 64) .. "'"
  if not spec then return nil, where .. ": the model has no such input" end
  if t.datatype ~= spec.datatype then
    return nil, where .. ": datatype must be " .. spec.datatype .. ", not " .. tostring(t.datatype):sub(1, 16)
  end
  if not is_array(t.shape) or #t.shape == 0 or #t.shape > 8 then
    return nil, where .. ": shape must be a list of 1 to 8 dimensions"
  end
  local elements = 1
  for _, dim in ipairs(t.shape) do
    if not is_count(dim, MAX_DIM) or dim < 1 then
      return nil, where .. ": shape holds a dimension that is not 1..2^31-1"
    end
    elements = elements * dim
  end
  local params = t.parameters
  local fine, bad = check_parameters(params, cfg.parameters.input, where)
  if not fine then return nil, bad end
  local binary = params and params.binary_data_size
  if binary ~= nil then
    if not is_count(binary, binary_left) then
      return nil, where .. ": binary_data_size must be an integer within the binary part of the body"
    end
    if t.data ~= nil then return nil, where .. ": give data or binary_data_size, not both" end
    return binary
  end
  if t.data == nil then return nil, where .. ": no data and no binary_data_size" end
  if not is_array(t.data) then return nil, where .. ": data must be a list" end
  local count, shallow, deep = check_data(t.data, t.datatype)
  if not count then return nil, where .. ": " .. shallow end
  -- flat, or nested exactly as the shape (Triton flattened any nesting, so [[["x"]]] passed for [1, 1])
  if not (shallow == deep and (deep == 1 or deep == #t.shape and nested_as(t.data, t.shape, 1))) then
    return nil, where .. ": data must be a flat list or nested as its shape (" .. #t.shape .. " levels)"
  end
  if count ~= elements then
    return nil, string.format("%s: data holds %d elements, shape says %.0f", where, count, elements)
  end
  return 0
end

-- A KServe v2 inference request's JSON against the model's inputs and outputs; nil, why on a fault.
local function check_infer_json(doc, model, binary_bytes)
  if not is_object(doc) then return nil, "the body must be a JSON object" end
  if doc.id ~= nil and type(doc.id) ~= "string" then return nil, "'id' must be a string" end
  local fine, bad = check_parameters(doc.parameters, cfg.parameters.request, "the request")
  if not fine then return nil, bad end
  if not is_array(doc.inputs) or #doc.inputs == 0 then return nil, "'inputs' must be a non-empty list" end
  local seen, batch, left = {}, nil, binary_bytes
  for i, t in ipairs(doc.inputs) do
    local used, why = check_tensor(t, is_object(t) and type(t.name) == "string" and model.inputs[t.name],
      "inputs[" .. (i - 1) .. "]", left)
    if not used then return nil, why end
    if seen[t.name] then return nil, "input '" .. t.name .. "' given twice" end
    seen[t.name] = true
    left = left - used
    batch = batch or t.shape[1]
  end
  if left ~= 0 then return nil, "binary_data_size of the inputs does not add up to the binary part of the body" end
  for name, spec in pairs(model.inputs) do
    if not spec.optional and not seen[name] then return nil, "required input '" .. name .. "' is missing" end
  end
  if doc.outputs ~= nil then
    if not is_array(doc.outputs) then return nil, "'outputs' must be a list" end
    for i, o in ipairs(doc.outputs) do
      if not is_object(o) or type(o.name) ~= "string" or not model.outputs[o.name] then
        return nil, "outputs[" .. (i - 1) .. "] names no output of the model"
      end
      fine, bad = check_parameters(o.parameters, cfg.parameters.output, "output '" .. o.name .. "'")
      if not fine then return nil, bad end
    end
  end
  return batch or 1
end

-- Triton parses JSON the gateway wrote, not the client: a number is an integer or not by its value
-- (the client's 3.0 for an INT64 input was a 500 from Triton's parser, which reads 3.0 as a double).
local function forward(doc, data, header_length)
  if doc.outputs ~= nil and next(doc.outputs) == nil then
    doc.outputs = nil   -- cjson would write the empty list as {}
  end
  local header = cjson.encode(doc)
  if not header then
    return refuse("http", "INVALID_ARGUMENT", "gateway: the body holds a value JSON cannot carry")
  end
  ngx.req.set_body_data(header .. data:sub(header_length + 1))
  if ngx.var.http_inference_header_content_length then
    ngx.req.set_header("Inference-Header-Content-Length", tostring(#header))
  end
end

-- The JSON text, or a 400 naming why it does not parse (its nesting bound included).
local function decode(text)
  local doc, err = json.decode(text)
  if doc == nil then
    return refuse("http", "INVALID_ARGUMENT", "gateway: the JSON body does not parse (" ..
      tostring(err):sub(1, 120) .. "; nesting is limited to " .. cfg.max_json_depth .. " levels)")
  end
  return doc
end

-- A compressed body cannot be checked here (and Triton decoded a non-gzip body sent as gzip into
-- another text, answering 200 with its embedding).
local function identity_encoding()
  local encoding = ngx.var.http_content_encoding
  if encoding and encoding:lower() ~= "identity" then
    return refuse("http", "INVALID_ARGUMENT", "gateway: Content-Encoding '" .. encoding:sub(1, 32) ..
      "' is not accepted; send the body uncompressed")
  end
end

-- Does a checked JSON call to a store endpoint write? It does when it has the write-op input with any
-- value but "search" (or with binary data, not read here).
local function only_search(v)
  if type(v) == "table" then
    for _, item in ipairs(v) do
      if not only_search(item) then return false end
    end
    return true
  end
  return v == "search"
end

local function writes(doc)
  for _, t in ipairs(doc.inputs) do
    if t.name == cfg.store_input and (type(t.data) ~= "table" or not only_search(t.data)) then
      return true
    end
  end
  return false
end

function M.http_infer(name)
  at_capacity("http")
  local model = public_model("http", name)
  identity_encoding()
  local data = body()
  if not data or #data == 0 then
    return refuse("http", "INVALID_ARGUMENT", "gateway: empty request body")
  end
  local header_length = #data
  local declared = ngx.var.http_inference_header_content_length
  if declared then
    if not declared:match("^%d+$") or tonumber(declared) > #data or tonumber(declared) == 0 then
      return refuse("http", "INVALID_ARGUMENT",
        "gateway: Inference-Header-Content-Length must be a number of bytes within the body")
    end
    header_length = tonumber(declared)
  end
  local doc = decode(header_length == #data and data or data:sub(1, header_length))
  local batch, why = check_infer_json(doc, model, #data - header_length)
  if not batch then
    return refuse("http", "INVALID_ARGUMENT", "gateway: " .. why)
  end
  forward(doc, data, header_length)
  local work = 1
  if model.batched and batch >= 1 then
    work = batch
  end
  local tenant = ngx.var[cfg.tenant_variable]
  local write = model.store and writes(doc)
  local collection = permitted("http", tenant, name, write)
  limit("http", tenant, 0)
  if write then
    cache.write(name, collection)
  else
    -- a store's reads are keyed by collection, never by a namespace tenants share ("" still caches
    -- nothing for the tenant); a hit ends here
    local namespace = cfg.tenants[tenant].cache_namespace
    if model.store and namespace ~= "" then
      namespace = collection
    end
    cache.lookup(namespace, name, model, declared or "", data, collection)
  end
  return admit("http", tenant, work)
end

-- HTTP generate / generate_stream: a flat JSON object of input names (and 'parameters') to values.
function M.http_generate(name)
  local model = public_model("http", name)
  permitted("http", ngx.var[cfg.tenant_variable], name)
  if not model.decoupled then
    return refuse("http", "INVALID_ARGUMENT", "gateway: '" .. name .. "' is not a generation endpoint")
  end
  -- Triton's /generate takes exactly one response, which a streaming model never gives (it answered 200
  -- with an error in the body, after generating)
  if not ngx.var.uri:find("/generate_stream$") then
    return refuse("http", "INVALID_ARGUMENT", "gateway: '" .. name .. "' streams its answer: call " ..
      ".../generate_stream (server-sent events) or gRPC ModelStreamInfer")
  end
  identity_encoding()
  local doc = decode(body() or "")
  if not is_object(doc) then
    return refuse("http", "INVALID_ARGUMENT", "gateway: the body must be a JSON object")
  end
  for key, value in pairs(doc) do
    if key == "parameters" then
      local fine, bad = check_parameters(value, cfg.parameters.request, "the request")
      if not fine then return refuse("http", "INVALID_ARGUMENT", "gateway: " .. bad) end
    else
      local spec = model.inputs[key]
      if not spec then
        return refuse("http", "INVALID_ARGUMENT", "gateway: input '" .. tostring(key):sub(1, 64) ..
          "': the model has no such input")
      end
      local count, why, deep = check_data(value, spec.datatype)
      if not count then return refuse("http", "INVALID_ARGUMENT", "gateway: input '" .. key .. "': " .. why) end
      if count == 0 or deep > 1 then   -- the model reads a value or a flat list (and [[1024]] as 1024 tokens)
        return refuse("http", "INVALID_ARGUMENT", "gateway: input '" .. key .. "' must be a value or a flat, " ..
          "non-empty list")
      end
    end
  end
  for key, spec in pairs(model.inputs) do
    if not spec.optional and doc[key] == nil then
      return refuse("http", "INVALID_ARGUMENT", "gateway: required input '" .. key .. "' is missing")
    end
  end
  local tenant = ngx.var[cfg.tenant_variable]
  limit("http", tenant, requested_tokens(model, doc[model.max_tokens_input or ""]))
  -- tritonserver 2.51's generate endpoints do not forward headers as request parameters (infer does): the
  -- tenant and collection go in the body's parameters, where no client may name them (refused_key above)
  if type(doc.parameters) ~= "table" then
    doc.parameters = {}
  end
  doc.parameters[cfg.tenant_header] = tenant
  doc.parameters[cfg.collection_header] = ngx.var[cfg.collection_variable]
  local text = cjson.encode(doc)
  if not text then
    return refuse("http", "INVALID_ARGUMENT", "gateway: the body holds a value JSON cannot carry")
  end
  ngx.req.set_body_data(text)
end

-- The OpenAI-compatible API's door (hotpath.gateway.openai_door): the tenant's token is the API key; the
-- same budget, fair shares and body bound as the Triton doors. The API itself validates the body strictly;
-- here only what the budget needs is read: the model (a name the API serves, else 404), the items of an
-- embeddings call (its work) and the tokens a generation may produce. Refusals in the OpenAI shape; the
-- overload answers are 429 with Retry-After, as OpenAI clients retry them.
local OPENAI_STATUS = { INVALID_ARGUMENT = 400, NOT_FOUND = 404, RESOURCE_EXHAUSTED = 429, UNAVAILABLE = 429,
                        UNAUTHENTICATED = 401, PERMISSION_DENIED = 403 }
local OPENAI_TYPE = { [400] = "invalid_request_error", [401] = "authentication_error", [403] = "permission_error",
                      [404] = "invalid_request_error", [429] = "rate_limit_error" }

openai_refuse = function(code, message, retry_after, param)
  local status = OPENAI_STATUS[code] or 503
  if code == "UNAVAILABLE" and not retry_after then
    status = 503
  end
  ngx.status = status
  ngx.header["content-type"] = "application/json"
  if retry_after then
    ngx.header["retry-after"] = retry_after
  end
  ngx.print(cjson.encode({ error = { message = message, type = OPENAI_TYPE[status] or "server_error",
                                     param = param or cjson.null, code = code:lower() } }))
  return ngx.exit(status)
end

local function openai_tokens(doc, served)
  local value = doc.max_completion_tokens
  if value == nil then
    value = doc.max_tokens
  end
  local tokens = served.default_max_tokens
  if type(value) == "number" and value >= 1 then
    tokens = math.floor(value)
  end
  -- every choice generates up to max_tokens (n: 1..8 in the API, which refuses any other value)
  local n = doc.n
  if type(n) == "number" and n > 1 then
    tokens = tokens * math.min(math.floor(n), 8)
  end
  return tokens
end

-- kind: "embedding", "generation", or "tokenize" (/tokenize, /detokenize: a generation model's tokenizer,
-- the model's scopes, no tokens charged)
function M.openai(kind)
  at_capacity("openai")
  local encoding = ngx.var.http_content_encoding
  if encoding and encoding:lower() ~= "identity" then
    return openai_refuse("INVALID_ARGUMENT", "gateway: send the body uncompressed")
  end
  local doc, err = json.decode(body() or "")
  if not is_object(doc) then
    return openai_refuse("INVALID_ARGUMENT", "gateway: the body must be a JSON object (" ..
      tostring(err or "not an object"):sub(1, 120) .. "; nesting is limited to " .. cfg.max_json_depth .. " levels)")
  end
  local served = type(doc.model) == "string" and cfg.openai.models[doc.model]
  if not served or served.kind ~= (kind == "tokenize" and "generation" or kind) then
    return openai_refuse("NOT_FOUND", "gateway: the model '" .. tostring(doc.model):sub(1, 128) ..
      "' is not served here (GET /v1/models lists them)", nil, "model")
  end
  local tenant = ngx.var[cfg.tenant_variable]
  if not cfg.tenants[tenant].openai[doc.model] then
    return openai_refuse("PERMISSION_DENIED", "gateway: this tenant's scopes do not grant the model '" ..
      doc.model:sub(1, 128) .. "'", nil, "model")
  end
  local work, tokens = 1, 0
  if kind == "embedding" and type(doc.input) == "table" then
    work = math.max(1, #doc.input)
  elseif kind == "generation" then
    tokens = openai_tokens(doc, served)
  end
  limit("openai", tenant, tokens)
  -- the API's answer cache; a tenant that caches nothing gets the namespace the API never caches under
  local namespace = cfg.tenants[tenant].cache_namespace or ""
  ngx.var.hotpath_cache_namespace = namespace ~= "" and namespace or cfg.no_cache_namespace
  admit("openai", tenant, work)
  -- affinity: the replica (a chat conversation's own, else the least loaded)
  return affinity.route(tenant, doc, ngx.var.uri == "/v1/chat/completions")
end

-- GET /v1/models[/<name>]: counted; a named model the tenant's scopes do not grant is 403.
function M.openai_model(name)
  local tenant = ngx.var[cfg.tenant_variable]
  limit("openai", tenant, 0)
  -- a name the API does not serve goes on: the API answers its own 404
  if name and name ~= "" and cfg.openai.models[name] and not cfg.tenants[tenant].openai[name] then
    return openai_refuse("PERMISSION_DENIED", "gateway: this tenant's scopes do not grant the model '" ..
      name:sub(1, 128) .. "'", nil, "model")
  end
end

-- The exact cache's filters (exact_cache.lua) and the status server's answers.
M.cache_header = cache.header
M.cache_body = cache.body
M.cache_store = cache.store
M.usage_header = usage.header_filter   -- usage: the OpenAI door's generation locations (usage.lua)
M.usage_body = usage.body_filter

-- Prometheus text: the Redis link's state and counters, the cache's hits and misses.
function M.metrics()
  local lines = {}
  local function metric(name, kind, help, value)
    lines[#lines + 1] = string.format("# HELP %s %s\n# TYPE %s %s\n%s %d", name, help, name, kind, name, value)
  end
  metric("hotpath_gateway_redis_configured", "gauge", "1 when the fleet's Redis is configured", link.enabled() and 1 or 0)
  metric("hotpath_gateway_redis_up", "gauge", "0 when the last Redis call failed", link.up() and 1 or 0)
  metric("hotpath_gateway_redis_errors_total", "counter", "Redis calls that failed or timed out",
    get("redis:errors"))
  metric("hotpath_gateway_redis_local_quota_total", "counter",
    "quota decisions taken on this replica alone while Redis could not answer (redis_failure = open)",
    get("redis:local"))
  metric("hotpath_gateway_redis_refused_total", "counter",
    "calls refused with UNAVAILABLE while Redis could not answer (redis_failure = closed)", get("redis:refused"))
  metric("hotpath_gateway_cache_hits_total", "counter", "answers served from the exact cache", get("cache:hits"))
  metric("hotpath_gateway_cache_misses_total", "counter", "cacheable calls not in the exact cache",
    get("cache:misses"))
  metric("hotpath_gateway_cache_stores_total", "counter", "answers stored in the exact cache", get("cache:stores"))
  lines[#lines + 1] = usage.metrics_lines()   -- usage
  local routed = affinity.metrics_lines()      -- affinity ("" without it)
  if routed ~= "" then
    lines[#lines + 1] = routed
  end
  ngx.header["content-type"] = "text/plain; version=0.0.4"
  ngx.print(table.concat(lines, "\n"), "\n")
end

-- Health: the gateway answers (200) whatever Redis does; the body says whether the fleet's state is reachable.
function M.health()
  local redis = "off"
  if link.enabled() then
    redis = link.probe() and "up" or "down"
  end
  ngx.header["content-type"] = "application/json"
  ngx.print(cjson.encode({ status = "ok", redis = redis }))
end

return M
