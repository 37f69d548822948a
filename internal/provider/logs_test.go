package provider

import (
	"testing"

	logsv1 "k8s.io/component-base/logs/api/v1"
)

// From --v=8 on client-go logs API answers' bodies, Secrets included: neither --v nor a --vmodule
// entry (--vmodule=request=8 names client-go's request logging) reaches that.
func TestLogVerbosityIsCappedBelowWhereClientGoLogsSecrets(t *testing.T) {
	c := logsv1.LoggingConfiguration{Verbosity: 10, VModule: logsv1.VModuleConfiguration{{FilePattern: "request", Verbosity: 8}, {FilePattern: "host", Verbosity: 4}}}
	lowered := CapLogVerbosity(&c)
	if c.Verbosity != MaxLogVerbosity || c.VModule[0].Verbosity != MaxLogVerbosity || c.VModule[1].Verbosity != 4 {
		t.Errorf("after the cap: --v=%d, vmodule %+v", c.Verbosity, c.VModule)
	}
	if len(lowered) != 2 || lowered[0] != "--v=10 lowered to 7" || lowered[1] != "--vmodule request=8 lowered to 7" {
		t.Errorf("said %q", lowered)
	}
}
