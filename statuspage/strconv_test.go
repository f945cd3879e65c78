package statuspage_test

import "strconv"

func strconvU(v uint64) string { return strconv.FormatUint(v, 10) }
