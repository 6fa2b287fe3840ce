-- Soak: the S6 mix (80% one animal, 15% a page, 5% create), counting the creates
-- acknowledged with 201 so the run can check that none was lost.
dofile("s6.lua")

local plain_init, plain_response, plain_done = init, response, done
local soak_threads = {}
local plain_setup = setup

function setup(thread)
   table.insert(soak_threads, thread)
   plain_setup(thread)
end

function init(args)
   created = 0
   plain_init(args)
end

function response(status, headers, body)
   if status == 201 then created = created + 1 end
   plain_response(status, headers, body)
end

function done(summary, latency, requests)
   local total = 0
   for _, thread in ipairs(soak_threads) do
      total = total + thread:get("created")
   end
   io.write(string.format("bench created %d\n", total))
   io.write(string.format("bench p90_us %.1f\n", latency:percentile(90)))
   io.write(string.format("bench p999_us %.1f\n", latency:percentile(99.9)))
   plain_done(summary, latency, requests)
end
