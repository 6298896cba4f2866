package httpapi

import (
	"maps"

	"berth.dev/berth/internal/fault"
)

// StatusOf returns a copy of the table from problem codes to HTTP statuses,
// for the external tests that hold the OpenAPI document to it.
func StatusOf() map[fault.Code]int { return maps.Clone(statusOf) }
