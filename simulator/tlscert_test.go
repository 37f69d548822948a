package simulator

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"testing"
)

// Each TLS BMC serves a certificate of a CA of its own: its CA verifies it, another BMC's does not.
func TestEveryTLSBMCHasACAOfItsOwn(t *testing.T) {
	var servers []*Server
	for _, id := range []string{"tls-a", "tls-b"} {
		s, err := New(Config{ID: id, TLS: true})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		servers = append(servers, s)
	}
	get := func(s *Server, ca []byte) error {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			t.Fatal("no PEM certificate in CACertPEM")
		}
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
		resp, err := c.Get(s.URL() + "/redfish/v1/")
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	a, b := servers[0], servers[1]
	if err := get(a, a.CACertPEM()); err != nil {
		t.Errorf("a BMC with its own CA: %v", err)
	}
	if err := get(b, a.CACertPEM()); err == nil {
		t.Error("a BMC was trusted with another BMC's CA")
	}
	if string(a.CACertPEM()) == string(b.CACertPEM()) {
		t.Error("two BMCs share a CA")
	}
}
