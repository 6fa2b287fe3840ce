-- S2: GET /v1/pets?status=available&limit=100, a filtered page of 100.
dofile("common.lua")
wrk.path = available_path
