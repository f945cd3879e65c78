package mysqlsimba

import (
	"strings"

	"github.com/simba-go/simba/backend-sql/internal/core"
)

// FirstSchema is version 1 of the schema, as the first releases installed
// it: the starting point of the upgrade test.
func FirstSchema(prefix string) ([]string, error) {
	out := make([]string, len(schema))
	for i, s := range schema {
		var err error
		if out[i], err = core.Expand(strings.TrimSpace(s), prefix); err != nil {
			return nil, err
		}
	}
	return out, nil
}
