package provider

import (
	"fmt"

	logsv1 "k8s.io/component-base/logs/api/v1"
)

// MaxLogVerbosity is the most verbose level the manager logs at (--v, and each --vmodule entry):
// from 8 on, client-go logs the body of every API request and answer, Secrets included (BMC
// passwords, image-server credentials, bootstrap data, seed tokens). The e2e suite's secrets
// sweep logs at this level.
const MaxLogVerbosity = 7

// CapLogVerbosity lowers --v and every --vmodule entry to MaxLogVerbosity, and says what it
// lowered.
func CapLogVerbosity(c *logsv1.LoggingConfiguration) []string {
	var lowered []string
	if c.Verbosity > MaxLogVerbosity {
		lowered = append(lowered, fmt.Sprintf("--v=%d lowered to %d", c.Verbosity, MaxLogVerbosity))
		c.Verbosity = MaxLogVerbosity
	}
	for i := range c.VModule {
		if m := &c.VModule[i]; m.Verbosity > MaxLogVerbosity {
			lowered = append(lowered, fmt.Sprintf("--vmodule %s=%d lowered to %d", m.FilePattern, m.Verbosity, MaxLogVerbosity))
			m.Verbosity = MaxLogVerbosity
		}
	}
	return lowered
}
