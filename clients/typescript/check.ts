// What a TypeScript caller of Petstore writes, type-checked by `make lint-openapi`
// against the types openapi-typescript generates from the served OpenAPI document
// (`--default-non-nullable false`: a NewPet without `status` is valid).
import createClient from "openapi-fetch";
import type { components, paths } from "./petstore-api";

type Pet = components["schemas"]["Pet"];
type NewPet = components["schemas"]["NewPet"];
type ApiError = components["schemas"]["Error"];

// Created without `status`: the service defaults it to "available".
const rex: NewPet = { name: "Rex", categoryId: 1 };

export async function example(apiKey: string): Promise<Pet[]> {
  const petstore = createClient<paths>({
    baseUrl: "http://127.0.0.1:8000/v1",
    headers: { Authorization: `Bearer ${apiKey}` },
  });
  const created = await petstore.POST("/pets", {
    body: rex,
    params: { header: { "Idempotency-Key": '"import-rex-1"' } },
  });
  if (created.error) {
    const error: ApiError = created.error;
    throw new Error(`${error.status} ${error.code}: ${error.message}`);
  }
  const pet: Pet = created.data;
  const listed = await petstore.GET("/pets", {
    params: { query: { status: "available", limit: 20 } },
  });
  if (listed.error) {
    const error: ApiError = listed.error;
    throw new Error(`${error.code}: ${error.message}`);
  }
  return [pet, ...listed.data];
}
