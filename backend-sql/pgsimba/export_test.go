package pgsimba

import "github.com/simba-go/simba/backend-sql/internal/core"

// FirstSchema is version 1 of the schema, as the first releases installed
// it: the starting point of the upgrade test.
func FirstSchema(prefix string) (string, error) { return core.Expand(schema, prefix) }
