package httpapi

import (
	"bytes"
	"crypto/sha256"
	_ "embed" // the OpenAPI document is part of the binary
	"encoding/hex"
	"net/http"
	"time"

	"berth.dev/berth/internal/auth"
)

// openAPIDoc is the OpenAPI 3.1 description of every route of the server
// (TestOpenAPIDescribesEveryRoute holds the two together).
//
//go:embed openapi.yaml
var openAPIDoc []byte

// openAPIETag names this build's document, so clients revalidate cheaply
// and see a new one after an upgrade.
var openAPIETag = func() string {
	sum := sha256.Sum256(openAPIDoc)
	return `"` + hex.EncodeToString(sum[:12]) + `"`
}()

// openAPI serves the document (GET /openapi.yaml). It changes only with the
// binary: caches may keep it for an hour and revalidate with its ETag.
// application/yaml is the registered YAML type (RFC 9512).
func (s *Server) openAPI(w http.ResponseWriter, r *http.Request, _ auth.Caller) error {
	w.Header().Set("Content-Type", "application/yaml")
	w.Header().Set("Cache-Control", "public, max-age=3600")
	w.Header().Set("ETag", openAPIETag)
	http.ServeContent(w, r, "openapi.yaml", time.Time{}, bytes.NewReader(openAPIDoc))
	return nil
}
