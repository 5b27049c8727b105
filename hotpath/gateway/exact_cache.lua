-- The fleet's exact cache (hotpath.shared_state.cache_key has the key's definition and the same function
-- for Python callers): a deterministic endpoint's answer, kept in Redis for `ttl_s`, keyed by the
-- tenant's cache namespace, the endpoint, the repository build's fingerprint (model versions, configs,
-- engines) and a SHA-256 of the request exactly as received (URI with the version asked, the
-- Inference-Header-Content-Length, the body). A hit is answered here, marked `X-Hotpath-Cache: hit` and
-- counted; a miss is marked `miss` and its answer stored after it was sent (log phase, in a timer), only
-- when the server answered 200 in full. Errors are never cached. Redis down: every call a plain miss.
--
-- An endpoint with writes (a store: retrieval's OP "upsert" / "delete") keeps its answers per collection
-- (hotpath.runtime.tenancy: the tenant's name, "shared" for an admin), never in a namespace tenants share,
-- and has a version per collection in Redis (`store_prefix` .. endpoint .. ":" .. collection, no TTL, so
-- volatile-lru never evicts it). A read sees its own collection and the shared corpus: its answer is
-- stored with both versions ("<shared>.<own>") and is a hit only while both still are; a write moves its
-- collection's version (an admin's: "shared", so every collection's reads) before it is forwarded and again
-- after it was answered, so an answer computed before or during a write is never served after the write's
-- answer (a read racing a write within the same millisecond may see either state), and a write by one
-- tenant leaves the others' cached reads alone. A version that could not be moved (Redis failed) leaves
-- that collection uncached on this replica until a move succeeds. Only writes through a gateway move it:
-- see docs/operations.md.

local ffi = require "ffi"
local link = require "hotpath_redis_link"

ffi.cdef [[unsigned char *SHA256(const unsigned char *d, size_t n, unsigned char *md);]]

local M = {}
local cfg      -- front_door.json's "cache": prefix, store_prefix, build, ttl_s, max_bytes
local HEADER = "X-Hotpath-Cache"

function M.init(config)
  cfg = config
end

-- SHA-256 from the OpenSSL libcrypto NGINX is linked with (as lua-resty-string does), hex.
local digest = ffi.new("unsigned char[32]")
local function sha256_hex(s)
  ffi.C.SHA256(s, #s, digest)
  local out = {}
  for i = 0, 31 do
    out[#out + 1] = string.format("%02x", digest[i])
  end
  return table.concat(out)
end

-- hotpath.shared_state.cache_key.cache_key, the same string.
function M.key(namespace, endpoint, request)
  return cfg.prefix .. namespace .. ":" .. endpoint .. ":" .. cfg.build .. ":" .. sha256_hex(request)
end

-- A store collection's version key.
local function version_key(endpoint, collection)
  return cfg.store_prefix .. endpoint .. ":" .. collection
end

-- A store collection's version: move it on (INCR). False when Redis failed: the collection is then "dirty"
-- here (its cached reads are not trusted) until a move succeeds.
local function move_version(endpoint, collection)
  local key = version_key(endpoint, collection)
  local ok = link.call(function(red)
    return red:incr(key)
  end)
  local flag = "cache:dirty:" .. key
  if type(ok) == "number" then
    link.shared():delete(flag)
    return true
  end
  link.shared():set(flag, true)
  return false
end

local function move_later(premature, endpoint, collection)
  if not premature then
    move_version(endpoint, collection)
  end
end

-- Access phase of a write to a store endpoint's `collection`: its version moves now, and again once it
-- was answered.
function M.write(endpoint, collection)
  if not cfg or not link.enabled() then
    return
  end
  move_version(endpoint, collection)
  ngx.ctx.cache_write = { endpoint, collection }
end

-- A collection whose version could not be moved is not trusted until a move succeeds.
local function clean(endpoint, collection)
  return not link.shared():get("cache:dirty:" .. version_key(endpoint, collection))
      or move_version(endpoint, collection)
end

-- The stored value of `key` (a string) or nil, and the prefix a new answer is stored under ("" or the
-- versions of the shared corpus and of the collection, and a newline); false: do not cache this call.
local function fetch(endpoint, model, key, collection)
  if not model.store then
    return link.call(function(red)
      return red:get(key)   -- nil, err: the connection failed; ngx.null: no entry; false: an error reply
    end), ""
  end
  local shared = cfg.shared_collection
  if not (clean(endpoint, shared) and clean(endpoint, collection)) then
    return false
  end
  local res = link.call(function(red)
    return red:mget(version_key(endpoint, shared), version_key(endpoint, collection), key)
  end)
  if type(res) ~= "table" then
    return false   -- the version is unknown: nothing may be served or stored under it
  end
  local version = (type(res[1]) == "string" and res[1] or "0") .. "." .. (type(res[2]) == "string" and res[2] or "0")
  local value = res[3]
  if type(value) == "string" then
    local stored, rest = value:match("^([^\n]*)\n(.*)$")
    value = stored == version and rest or nil
  end
  return value, version .. "\n"
end

-- Access phase, after the checks and the quota: serve a hit (the request ends here), or remember the key.
-- `namespace`: the tenant's cache namespace, or for a store its `collection`.
function M.lookup(namespace, endpoint, model, header_length, data, collection)
  if not cfg or not model.cacheable or not namespace or namespace == "" or not link.enabled() then
    return
  end
  -- The key holds the decoded path, the upstream gets the raw one: a raw path that decodes to another
  -- (text_embedding%2Finfer) is not the call whose answer is stored under the decoded one.
  if ngx.var.request_uri:match("^[^?]*") ~= ngx.var.uri then
    return
  end
  local key = M.key(namespace, endpoint, ngx.var.uri .. "\n" .. header_length .. "\n" .. data)
  local value, version = fetch(endpoint, model, key, collection)
  if value == false then
    link.count("cache:misses")
    return
  end
  if type(value) == "string" then
    local length, content_type, answer = value:match("^(%d*)\n([^\n]*)\n(.*)$")
    if answer then
      link.count("cache:hits")
      ngx.status = 200
      ngx.header["content-type"] = content_type
      if length ~= "" then
        ngx.header["inference-header-content-length"] = length
      end
      ngx.header[HEADER] = "hit"
      ngx.print(answer)
      return ngx.exit(200)
    end
  end
  link.count("cache:misses")
  ngx.ctx.cache_key, ngx.ctx.cache_version = key, version
end

-- header filter: only a 200 is stored
function M.header()
  local ctx = ngx.ctx
  if not ctx.cache_key then
    return
  end
  -- An encoded answer (the client accepted gzip) is not what another client asked for: a hit carries no
  -- content-encoding.
  if ngx.status ~= 200 or ngx.header["content-encoding"] then
    ctx.cache_key = nil
    return
  end
  ngx.header[HEADER] = "miss"
  ctx.cache_meta = ctx.cache_version .. (ngx.header["inference-header-content-length"] or "") .. "\n" ..
      (ngx.header["content-type"] or "") .. "\n"
  ctx.cache_parts, ctx.cache_bytes = {}, 0
end

-- body filter: keep a copy of the answer, up to max_bytes
function M.body()
  local ctx = ngx.ctx
  if not ctx.cache_parts then
    return
  end
  local chunk = ngx.arg[1]
  ctx.cache_bytes = ctx.cache_bytes + #chunk
  if ctx.cache_bytes > cfg.max_bytes then
    ctx.cache_parts = nil
    return
  end
  ctx.cache_parts[#ctx.cache_parts + 1] = chunk
  if ngx.arg[2] then
    ctx.cache_done = true
  end
end

local function put(premature, key, value)
  if premature then
    return
  end
  local ok = link.call(function(red)
    return red:set(key, value, "EX", cfg.ttl_s)
  end)
  if ok then
    link.count("cache:stores")
  end
end

-- log phase: the whole answer was sent with 200: store it; a write was answered: move its store's version
-- (cosockets are not allowed here, a timer runs them)
function M.store()
  local ctx = ngx.ctx
  if ctx.cache_write then
    ngx.timer.at(0, move_later, ctx.cache_write[1], ctx.cache_write[2])
  end
  if ctx.cache_done and ctx.cache_parts and ngx.status == 200 then
    ngx.timer.at(0, put, ctx.cache_key, ctx.cache_meta .. table.concat(ctx.cache_parts))
  end
end

return M
