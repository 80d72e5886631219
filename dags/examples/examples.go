// Package examples embeds the example pipelines, so `retrain demo` and
// `retrain dev` work from any directory.
package examples

import "embed"

// FS holds the example pipeline files at its top level.
//
//go:embed *.yaml
var FS embed.FS
