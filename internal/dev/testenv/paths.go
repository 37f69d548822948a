package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// capiModuleDir returns the folder of the pinned sigs.k8s.io/cluster-api module, where its CRDs and
// webhook manifests live. CAPI_MODULE_DIR overrides the lookup.
func capiModuleDir() (string, error) {
	if dir := os.Getenv("CAPI_MODULE_DIR"); dir != "" {
		return dir, nil
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/cluster-api").Output()
	if err != nil {
		return "", fmt.Errorf("locating the sigs.k8s.io/cluster-api module (set CAPI_MODULE_DIR to skip): %w", err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", fmt.Errorf("go list returned no folder for sigs.k8s.io/cluster-api; run 'go mod download'")
	}
	return dir, nil
}

// assetsDir returns the folder with kube-apiserver, etcd and kube-controller-manager. KUBEBUILDER_ASSETS wins; otherwise the
// cache folder hack/envtest-assets.sh fills.
func assetsDir() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	cache := os.Getenv("CAPRF_CACHE_DIR")
	if cache == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return "", err
		}
		cache = filepath.Join(base, "caprf")
	}
	matches, _ := filepath.Glob(filepath.Join(cache, "envtest", "*", "kube-apiserver"))
	if len(matches) == 0 {
		return "", fmt.Errorf("no envtest binaries: run 'make envtest' (builds kube-apiserver, etcd and kube-controller-manager from the Go module proxy) or set KUBEBUILDER_ASSETS")
	}
	return filepath.Dir(matches[len(matches)-1]), nil
}
