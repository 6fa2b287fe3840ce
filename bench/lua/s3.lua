-- S3: GET /v1/pets/{id}, an id drawn uniformly from the seeded 1..BENCH_PETS.
dofile("common.lua")

function request()
   return random_pet()
end
