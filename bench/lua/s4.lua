-- S4: POST /v1/pets with a JSON NewPet; each 201 follows its own durable commit.
dofile("common.lua")
use_post()
