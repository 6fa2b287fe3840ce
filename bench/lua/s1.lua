-- S1: GET /v1/pets?limit=20, the first page, again and again.
dofile("common.lua")
wrk.path = list_path
