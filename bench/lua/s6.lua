-- S6: a mix: 80% S3 (one animal), 15% S1 (first page of 20), 5% S4 (create).
dofile("common.lua")

function request()
   local draw = math.random()
   if draw < 0.80 then
      return random_pet()
   elseif draw < 0.95 then
      return list_page()
   end
   return create_pet()
end
