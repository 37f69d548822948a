// Package webhook embeds the admission webhook configuration `make generate` writes, so the test
// environment and the embedded demo register exactly what the release manifests do.
package webhook

import _ "embed" // for go:embed

// Manifests is manifests.yaml: the ValidatingWebhookConfiguration of the provider.
//
//go:embed manifests.yaml
var Manifests []byte
