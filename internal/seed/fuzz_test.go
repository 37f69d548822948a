package seed

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
)

// Fuzz targets: their seed corpora run with every `go test`; `go test -fuzz=FuzzX
// ./internal/seed` explores (see docs/fuzzing.md).

// Any request a booting host, a scanner or an attacker sends: the server never fails (no 5xx),
// hands out the token or the bootstrap data only to a request that carries the token (or, the
// token only, to iPXE by the MAC of a host in its boot window), and loses nothing of the seed.
func FuzzSeedServerRequest(f *testing.F) {
	pxe := provisioningHost("h1", "52:54:00:00:00:01", infrav1.BootMethodPXE, true)
	_, c := world(f, "", pxe)
	sec := &corev1.Secret{}
	key := client.ObjectKey{Namespace: "ns", Name: SecretName("m1")}
	if err := c.Get(f.Context(), key, sec); err != nil {
		f.Fatal(err)
	}
	sec.Data[KeyImageFormat] = []byte(infrav1.ImageFormatRaw) // install reports are taken
	if err := c.Update(f.Context(), sec); err != nil {
		f.Fatal(err)
	}
	h := (&Server{Seeds: c, Reader: c, Writer: c, Hosts: c, BaseURL: "https://seed.example", Rate: 1e9, Burst: 1e9, IPXERate: 1e9, IPXEBurst: 1e9}).Handler()
	for _, s := range []struct{ method, path, body string }{
		{"GET", "/v1/ns/m1/" + token + "/user-data", ""},
		{"GET", "/v1/ns/m1/" + token + "/cidata.iso", ""},
		{"GET", "/v1/ns/m1/" + token + "/image", ""},
		{"GET", "/v1/ns/m1/" + token + "/../../ns/m1/" + token + "/meta-data", ""},
		{"GET", "/v1/ns/m1/" + strings.ToUpper(token) + "/user-data", ""},
		{"GET", "/v1/ns/m1/" + token[:63] + "/user-data", ""},
		{"GET", "/v1/ns/m1%2F/" + token + "/user-data", ""},
		{"GET", "/v1/ipxe/52:54:00:00:00:01", ""},
		{"GET", "/v1/ipxe/52-54-00-00-00-01", ""},
		{"POST", "/v1/ns/m1/" + token + "/install-report", `{"ok":true,"device":"/dev/sda","checksum":"ab"}`},
		{"POST", "/v1/ns/m1/" + token + "/install-report", `{"ok":false,"message":"https://u:p@x/","sizeBytes":-1}`},
		{"POST", "/v1/ns/m1/" + token + "/install-report", `[`},
		{"GET", "/healthz", ""}, {"DELETE", "/v1/ns/m1/" + token + "/user-data", ""}, {"GET", "//v1", ""},
	} {
		f.Add(s.method, s.path, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, method, path string, body []byte) {
		r, err := http.NewRequestWithContext(t.Context(), method, "http://seed.example"+path, bytes.NewReader(body))
		if err != nil || r.URL.Host != "seed.example" {
			return // not a request a client could send
		}
		r.RemoteAddr = "10.0.0.1:1234"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code >= 500 {
			t.Fatalf("%s %q answered %d %q", method, path, w.Code, w.Body.String())
		}
		out := w.Body.String() + w.Header().Get("Location")
		carries := strings.Contains(r.URL.Path, token) || strings.Contains(r.URL.RawPath, token)
		if strings.Contains(out, token) && !carries && !strings.HasPrefix(r.URL.Path, "/v1/ipxe/") {
			t.Fatalf("%s %q, without the token, answered %d with it: %q", method, path, w.Code, out)
		}
		if (strings.Contains(out, "kubeadm") || strings.Contains(out, "runcmd")) && !carries {
			t.Fatalf("%s %q, without the token, answered %d with the bootstrap data", method, path, w.Code)
		}
		got := &corev1.Secret{}
		if err := c.Get(t.Context(), key, got); err != nil || string(got.Data[KeyToken]) != token || string(got.Data[KeyBootstrapSecret]) != "boot" {
			t.Fatalf("%s %q changed the seed: %v %v", method, path, err, got.Data)
		}
	})
}

// Whatever medium is attached, reading it as a volume returns an error or its files, and a seed
// volume reads back as written.
func FuzzReadVolume(f *testing.F) {
	iso, err := CIDataISO(map[string][]byte{"meta-data": []byte("instance-id: a\n"), "user-data": []byte("#cloud-config\n")})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(iso)
	f.Add(iso[:len(iso)/2])
	f.Add(make([]byte, 40*1024))
	broken := bytes.Clone(iso)
	for i := 32768; i < len(broken) && i < 34816; i += 7 {
		broken[i] ^= 0xff // the volume descriptors
	}
	f.Add(broken)
	f.Fuzz(func(t *testing.T, image []byte) {
		label, files, err := ReadVolume(image)
		if err != nil {
			return
		}
		if bytes.Equal(image, iso) && (label != CIDataLabel || string(files["user-data"]) != "#cloud-config\n") {
			t.Fatalf("the seed volume read back as %q %v", label, files)
		}
	})
}
