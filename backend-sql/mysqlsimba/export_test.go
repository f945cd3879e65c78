package mysqlsimba

// FirstSchema is version 1 of the schema, as the first releases installed
// it: the starting point of the upgrade test.
func FirstSchema(prefix string) ([]string, error) { return expandAll(schema, prefix) }
