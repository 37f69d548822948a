package simulator

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// A request log (OnRequest) changes nothing the BMC does: an answer a fault drops is still
// dropped, and the log says which requests got no answer, which status the others got, and who
// sent them (the User-Agent a manager replica sets); a dropped answer is logged with the status
// the request was carried out with.
func TestTheRequestLogKeepsStatusAndSenderAndFaultsStillDropAnswers(t *testing.T) {
	s, err := New(Config{ID: "observed"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var mu sync.Mutex
	var seen []Request
	s.OnRequest(func(r Request) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, r)
	})
	user, pass := s.Credentials()
	post := func(path, body string) (*http.Response, error) {
		req, err := http.NewRequest(http.MethodPost, s.URL()+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.SetBasicAuth(user, pass)
		req.Header.Set("User-Agent", "cluster-api-provider-redfish (replica-a)")
		return http.DefaultClient.Do(req)
	}
	reset := s.SystemPath() + "/Actions/ComputerSystem.Reset"
	s.Fault.DropResponses(http.MethodPost, 1)
	if resp, err := post(reset, `{"ResetType":"On"}`); err == nil {
		resp.Body.Close()
		t.Fatalf("a dropped answer arrived: %s", resp.Status)
	}
	if n := s.Stats().Resets["On"]; n != 1 {
		t.Fatalf("the dropped request was carried out %d times, want 1", n)
	}
	resp, err := post(reset, `{"ResetType":"Bogus"}`)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 {
		t.Fatalf("logged %d requests, want 2", len(seen))
	}
	if !seen[0].Dropped || seen[1].Dropped {
		t.Errorf("dropped: %v, %v; want the first answer logged as dropped, the second not", seen[0].Dropped, seen[1].Dropped)
	}
	for i, want := range []int{http.StatusNoContent, resp.StatusCode} {
		r := seen[i]
		if r.Status != want || r.Header.Get("User-Agent") != "cluster-api-provider-redfish (replica-a)" || r.Answered.Before(r.Received) || time.Since(r.Received) > time.Minute {
			t.Errorf("request %d logged as status %d from %q at %v..%v, want status %d", i, r.Status, r.Header.Get("User-Agent"), r.Received, r.Answered, want)
		}
	}
	if resp.StatusCode < 400 {
		t.Errorf("ResetType Bogus answered %s", resp.Status)
	}
}
