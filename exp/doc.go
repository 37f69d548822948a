// Package exp holds experimental features of the provider, each behind a feature gate: the typed
// maintenance handshake (RedfishMaintenance, windows and disruption budgets) lands here first.
package exp
