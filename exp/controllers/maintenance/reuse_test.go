package maintenance

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
)

// The hook is an annotation key: its name part holds at most 63 characters, whatever the
// maintenance's name (up to 253), and two long names sharing a prefix get two keys.
func TestReuseHookIsAValidAnnotationKeyForAnyName(t *testing.T) {
	long := strings.Repeat("rack1-u07-bios-reflash-", 10)
	keys := map[string]bool{}
	for _, name := range []string{"bios", long + "a", long + "b"} {
		key := ReuseHook(&expv1.RedfishMaintenance{ObjectMeta: metav1.ObjectMeta{Name: name}})
		if errs := validation.IsQualifiedName(key); len(errs) > 0 {
			t.Errorf("hook of %q: %s: %v", name, key, errs)
		}
		keys[key] = true
	}
	if len(keys) != 3 {
		t.Errorf("%d distinct keys for 3 names", len(keys))
	}
}
