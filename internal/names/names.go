// Package names fits object names derived from others into the limits Kubernetes sets.
package names

import (
	"crypto/sha256"
	"encoding/hex"
)

// LabelValue is name when it fits a label value (63 characters), else its first 46 characters
// and a digest of the whole: still unique, still recognisable.
func LabelValue(name string) string {
	if len(name) <= 63 {
		return name
	}
	return name[:46] + "-" + digest(name)
}

// digest is 16 hex characters of name's SHA-256.
func digest(name string) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:])[:16]
}

// Join is prefix + "-" + suffix when that fits in limit characters, else prefix cut short, a
// digest of both, and suffix.
func Join(prefix, suffix string, limit int) string {
	if name := prefix + "-" + suffix; len(name) <= limit {
		return name
	}
	keep := max(limit-len(suffix)-18, 0)
	return prefix[:min(len(prefix), keep)] + "-" + digest(prefix+"/"+suffix) + "-" + suffix[:min(len(suffix), limit-keep-18)]
}
