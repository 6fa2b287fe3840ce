from starlette.testclient import TestClient

from tests import examples


def test_created_pet_is_listed_and_fetched(client: TestClient, auth: dict[str, str]) -> None:
    created = client.post("/v1/pets", json={"name": "Rex", "categoryId": 3}, headers=auth)
    assert created.status_code == 201
    pet = created.json()
    assert pet == examples.pet(pet["id"], "Rex", 3)
    assert client.get("/v1/pets", headers=auth).json() == [pet]
    assert client.get(f"/v1/pets/{pet['id']}", headers=auth).json() == pet
