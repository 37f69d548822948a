package bmc

import (
	"context"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

// counting is an image server that counts its requests and the Authorization headers it saw.
func counting(t *testing.T, tls bool, h http.HandlerFunc) (*httptest.Server, *atomic.Int32, *atomic.Int32) {
	t.Helper()
	var reqs, auths atomic.Int32
	f := func(w http.ResponseWriter, r *http.Request) {
		reqs.Add(1)
		if r.Header.Get("Authorization") != "" {
			auths.Add(1)
		}
		h(w, r)
	}
	var srv *httptest.Server
	if tls {
		srv = httptest.NewTLSServer(http.HandlerFunc(f))
	} else {
		srv = httptest.NewServer(http.HandlerFunc(f))
	}
	t.Cleanup(srv.Close)
	return srv, &reqs, &auths
}

func image(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("firmware")) }

func pushOnly(t *testing.T, roots *x509.CertPool) *client {
	t.Helper()
	s := newSim(t, simulator.Config{Profile: simulator.Profiles["supermicro-x13"], TaskDuration: 50 * time.Millisecond})
	return connectTo(t, s, Options{ImageRootCAs: roots})
}

func pool(srvs ...*httptest.Server) *x509.CertPool {
	p := x509.NewCertPool()
	for _, s := range srvs {
		p.AddCert(s.Certificate())
	}
	return p
}

// The provider's own download of a firmware image (for BMCs that only take a push) never sends
// the image server's credentials over plain HTTP nor to another host, and follows no redirect to
// plain HTTP: an image URL cannot be turned into a credentials leak or a probe of internal
// endpoints.
func TestTheImageDownloadKeepsCredentialsToTheImageServer(t *testing.T) {
	ctx := context.Background()
	creds := &ImageCredentials{Username: "fw-reader", Password: "s3cret"}

	t.Run("credentials over plain HTTP: refused before any request", func(t *testing.T) {
		srv, reqs, _ := counting(t, false, image)
		_, err := pushOnly(t, nil).UpdateFirmware(ctx, srv.URL+"/bios.bin", FirmwareBIOS, creds)
		if err == nil || !strings.Contains(err.Error(), "https") || reqs.Load() != 0 {
			t.Errorf("UpdateFirmware = %v with %d requests to the image server; want a refusal naming https and none", err, reqs.Load())
		}
	})
	t.Run("credentials, redirected to another host: not followed", func(t *testing.T) {
		other, otherReqs, _ := counting(t, true, image)
		origin, _, _ := counting(t, true, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, other.URL+"/bios.bin", http.StatusFound)
		})
		_, err := pushOnly(t, pool(origin, other)).UpdateFirmware(ctx, origin.URL+"/bios.bin", FirmwareBIOS, creds)
		if err == nil || otherReqs.Load() != 0 {
			t.Errorf("UpdateFirmware = %v, the other host got %d requests; want a refusal and none", err, otherReqs.Load())
		}
	})
	t.Run("HTTPS redirected to plain HTTP: not followed", func(t *testing.T) {
		plain, plainReqs, _ := counting(t, false, image)
		origin, _, _ := counting(t, true, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, plain.URL+"/bios.bin", http.StatusFound)
		})
		_, err := pushOnly(t, pool(origin)).UpdateFirmware(ctx, origin.URL+"/bios.bin", FirmwareBIOS, nil)
		if err == nil || plainReqs.Load() != 0 {
			t.Errorf("UpdateFirmware = %v, the plain-HTTP server got %d requests; want a refusal and none", err, plainReqs.Load())
		}
	})
	t.Run("credentials, redirected on the same host: followed, credentials kept", func(t *testing.T) {
		var srv *httptest.Server
		srv, _, auths := counting(t, true, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/old.bin" {
				http.Redirect(w, r, "/bios.bin", http.StatusFound)
				return
			}
			image(w, r)
		})
		if _, err := pushOnly(t, pool(srv)).UpdateFirmware(ctx, srv.URL+"/old.bin", FirmwareBIOS, creds); err != nil {
			t.Fatal(err)
		}
		if auths.Load() != 2 {
			t.Errorf("%d requests carried the credentials, want both", auths.Load())
		}
	})
}
