package e2e

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"time"

	. "github.com/onsi/gomega"

	"github.com/caprf/cluster-api-provider-redfish/internal/dev/simos"
)

// imageFiles is an HTTPS image server (the seed server's certificate: hosts and BMCs trust it)
// whose files specs publish; it counts the downloads of each.
type imageFiles struct {
	srv   *httptest.Server
	mu    sync.Mutex
	files map[string][]byte
	gets  map[string]int
}

func startImageFiles(certDir string) *imageFiles {
	cert, err := tls.LoadX509KeyPair(filepath.Join(certDir, "tls.crt"), filepath.Join(certDir, "tls.key"))
	Expect(err).NotTo(HaveOccurred())
	f := &imageFiles{files: map[string][]byte{"/deploy.iso": simos.DeployImage()}, gets: map[string]int{}}
	f.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		data, ok := f.files[r.URL.Path]
		if ok && r.Header.Get("Range") == "" {
			f.gets[r.URL.Path]++
		}
		f.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		http.ServeContent(w, r, filepath.Base(r.URL.Path), time.Time{}, bytes.NewReader(data))
	}))
	f.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	f.srv.StartTLS()
	return f
}

func (f *imageFiles) close() { f.srv.Close() }

func (f *imageFiles) url(path string) string { return f.srv.URL + path }

// publish serves data at path and returns its URL and sha256.
func (f *imageFiles) publish(path string, data []byte) (string, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.files[path] = data
	sum := sha256.Sum256(data)
	return f.srv.URL + path, hex.EncodeToString(sum[:])
}

// downloads is how many whole downloads of path were served.
func (f *imageFiles) downloads(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gets[path]
}
