-- Shared by every scenario (loaded with dofile; wrk runs with bench/lua as its
-- working directory). Environment, set by bench/run.py:
--   BENCH_KEY         the API key, sent as "Authorization: Bearer <key>"
--   BENCH_PETS        the number of seeded animals: ids 1..BENCH_PETS
--   BENCH_DEEP_PATHS  a file of request paths, one a line (S5)
-- done() prints "bench <name> <value>" lines that bench/wrk.py reads.

local key = os.getenv("BENCH_KEY") or ""
local pets = tonumber(os.getenv("BENCH_PETS") or "1")
local auth = { ["Authorization"] = "Bearer " .. key }
local post_headers = { ["Authorization"] = "Bearer " .. key, ["Content-Type"] = "application/json" }

-- Keep in step with bench/scenarios.py.
local new_pet_body = '{"name":"Bench","categoryId":7,"status":"available"}'
list_path = "/v1/pets?limit=20"
available_path = "/v1/pets?status=available&limit=100"

wrk.headers["Authorization"] = auth["Authorization"]

function use_post()
   wrk.method = "POST"
   wrk.path = "/v1/pets"
   wrk.body = new_pet_body
   wrk.headers["Content-Type"] = "application/json"
end

function random_pet()
   return wrk.format("GET", "/v1/pets/" .. math.random(1, pets), auth)
end

function list_page()
   return wrk.format("GET", list_path, auth)
end

function create_pet()
   return wrk.format("POST", "/v1/pets", post_headers, new_pet_body)
end

function read_lines(path)
   local lines = {}
   for line in io.lines(path) do
      if line ~= "" then table.insert(lines, line) end
   end
   return lines
end

local threads = {}

function setup(thread)
   thread:set("id", #threads + 1)
   table.insert(threads, thread)
end

function init(args)
   non2xx = 0
   math.randomseed(os.time() * 1000 + id)
end

function response(status, headers, body)
   if status < 200 or status > 299 then
      non2xx = non2xx + 1
   end
end

function done(summary, latency, requests)
   local bad = 0
   for _, thread in ipairs(threads) do
      bad = bad + thread:get("non2xx")
   end
   local errors = summary.errors
   io.write(string.format("bench requests %d\n", summary.requests))
   io.write(string.format("bench duration_us %d\n", summary.duration))
   io.write(string.format("bench p50_us %.1f\n", latency:percentile(50)))
   io.write(string.format("bench p99_us %.1f\n", latency:percentile(99)))
   -- The latency distribution (bench.tail), beside the two figures the report reads.
   for _, p in ipairs({ 75, 90, 95, 99.9, 99.99 }) do
      io.write(string.format("bench p%s_us %.1f\n", p, latency:percentile(p)))
   end
   io.write(string.format("bench max_us %.1f\n", latency.max))
   io.write(string.format("bench non2xx %d\n", bad))
   io.write(string.format("bench socket_errors %d\n",
      errors.connect + errors.read + errors.write + errors.timeout))
end
