-- S5: the rel="next" pages past 90% of the ids, in turn. Their paths, taken from the
-- service's own Link headers, are in the file named by BENCH_DEEP_PATHS.
dofile("common.lua")
local paths = read_lines(os.getenv("BENCH_DEEP_PATHS"))
local turn = 0

function request()
   turn = turn % #paths + 1
   return wrk.format("GET", paths[turn], auth)
end
