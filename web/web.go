// Package web is berth's web app: plain HTML, CSS and ES modules, committed
// as they are served (no build step) and embedded in the binary, so berth
// serves its own pages with nothing fetched from the network. The pages
// call the public API with the caller's bearer token, which they keep in
// sessionStorage under "berth.token".
package web

import "embed"

// Static holds the app's files under "static/": index.html, the app shell
// every /app/... deep link serves, and its styles and modules.
//
//go:embed static
var Static embed.FS
