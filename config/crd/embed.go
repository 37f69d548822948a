// Package crd embeds the generated CustomResourceDefinitions of this provider, so the test
// environment and the embedded demo install exactly what `make generate` wrote.
package crd

import "embed"

// Bases holds bases/*.yaml, one CRD a file.
//
//go:embed bases/*.yaml
var Bases embed.FS
