package webhooks

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// A refused URL with credentials in it is quoted back without the password, at every place
// admission quotes a URL: typed without its scheme or "//" (admin:pw@host/x.iso), with a '/' in
// the password (which url.Parse takes for the end of the host), or with a scheme it refuses. The
// error reaches the client, the API server's audit log and whatever records admission failures.
// Found by FuzzWebhookAdmission; the scheme stays in the quote (it is often what was wrong).
func TestARefusedURLNeverEchoesItsPassword(t *testing.T) {
	validators := testValidators(t)
	// Each place a URL is quoted back (admissionKinds indexes, a spec with %s for the URL).
	sites := []struct {
		kind int
		spec string
	}{
		{0, `{"bmc":{"address":"redfish://10.0.0.5","credentialsName":"bmc"},"serviceBoot":{"image":%s,"requestor":"ops"}}`},
		{1, `{"image":{"url":%s}}`},
		{1, `{"image":{"url":"https://images.example/os.raw","checksum":%s}}`},
		{1, `{"providerID":%s}`},
		{3, `{"hostName":"h1","tasks":[{"insertMedia":{"url":%s}}]}`},
		{4, `{"hostName":"h1","reason":"r","requestor":"ops","tasks":[{"bootImage":{"url":%s}}]}`},
		{4, `{"hostName":"h1","reason":"r","requestor":"ops","tasks":[{"firmware":{"component":"BIOS","plan":[{"version":"2.1","imageURL":%s}]}}]}`},
	}
	for _, u := range []string{
		"admin:hunter2@images.example/x.iso", "https:admin:hunter2@images.example/x.iso", ":hunter2@",
		"https://admin:hun/ter2@images.example/x.iso", "https://admin:123/x@hunter2.example/x.iso", "ftp://admin:hunter2@images.example/x.iso",
	} {
		secret := "hunter2"
		if strings.Contains(u, "hun/ter2") {
			secret = "ter2"
		}
		if strings.Contains(u, "123/x@") {
			secret = "123"
		}
		for _, site := range sites {
			k := admissionKinds[site.kind]
			obj := k.new()
			obj.SetNamespace("fleet")
			obj.SetName("o")
			quoted, _ := json.Marshal(u)
			if err := json.Unmarshal([]byte(fmt.Sprintf(site.spec, quoted)), k.spec(obj)); err != nil {
				t.Fatal(err)
			}
			err := validateCreate(t.Context(), validators[k.kind], obj)
			if err == nil {
				continue // admitted: nothing quoted back
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("%s %s with %q: the error repeats the password: %v", k.kind, site.spec, u, err)
			}
		}
	}
	if got := refusedURL("ftp://admin:hunter2@images.example/x.iso"); got != "ftp://REDACTED@images.example/x.iso" {
		t.Errorf("refusedURL kept %q: the scheme (what was wrong) should stay, the credentials go", got)
	}
	if d := strings.Repeat("ab", 32); refusedChecksum(d) != d {
		t.Errorf("a refused digest is quoted as %q: a digest is no secret, and what the operator must compare", refusedChecksum(d))
	}
}
