package bmc

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stmcginnis/gofish/schemas"

	"github.com/caprf/cluster-api-provider-redfish/simulator"
)

// Fuzz targets: their seed corpora run with every `go test`; `go test -fuzz=FuzzX ./bmc` explores
// (see docs/fuzzing.md).

// An address a person registers is parsed to one canonical form or refused with an error that
// never repeats the credentials someone put in it.
func FuzzParseAddress(f *testing.F) {
	for _, s := range []string{
		"redfish://10.0.0.5", "redfish+https://bmc.example:8443/redfish/v1/Systems/1", "redfish+http://[fe80::1%25eth0]:80",
		"redfish://admin:hunter22@10.0.0.5/", "redfish://[::1]:99999", "https://10.0.0.5", "redfish://:443",
		"redfish://h/redfish/v1/Systems/a/b", "redfish://h?x=1#y", " redfish://h ", "redfish://user:p%40ss@h:0",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		a, err := ParseAddress(raw)
		if err != nil {
			// Checked for passwords of six letters and digits or more typed once: a shorter one, or
			// one with quotes, '%' or control characters, the error's own quoting and the URL's
			// escapes can spell anew; one also typed as the host is echoed as the host.
			if p := typedPassword(raw); len(p) >= 6 && strings.Count(raw, p) == 1 && !strings.ContainsFunc(p, notAlphanumeric) &&
				!strings.ContainsFunc(raw, func(r rune) bool { return r == '%' || r < ' ' }) && strings.Contains(err.Error(), p) {
				t.Fatalf("the error repeats the password %q: %v", p, err)
			}
			return
		}
		u, perr := url.Parse(a.BaseURL)
		if perr != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Hostname() == "" || u.User != nil || u.Path != "" {
			t.Fatalf("%q parsed to base URL %q, which is not scheme://host:port", raw, a.BaseURL)
		}
		if port, err := strconv.Atoi(u.Port()); err != nil || port < 1 || port > 65535 {
			t.Fatalf("%q parsed to base URL %q, whose port is not 1..65535", raw, a.BaseURL)
		}
		if id, ok := strings.CutPrefix(a.SystemPath, "/redfish/v1/Systems/"); a.SystemPath != "" && (!ok || id == "" || strings.Contains(id, "/")) {
			t.Fatalf("%q parsed to system path %q", raw, a.SystemPath)
		}
		// The canonical form names the same BMC.
		again, err := ParseAddress("redfish+" + u.Scheme + "://" + u.Host + a.SystemPath)
		if err != nil || again != a {
			t.Fatalf("%q parsed to %+v; its canonical form parsed to %+v, %v", raw, a, again, err)
		}
	})
}

func notAlphanumeric(r rune) bool {
	return (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9')
}

// typedPassword is the password part of the userinfo as typed in raw ("" when there is none).
func typedPassword(raw string) string {
	_, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return ""
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return ""
	}
	_, pw, ok := strings.Cut(rest[:at], ":")
	if !ok {
		return ""
	}
	return pw
}

// redfishDocuments are the resources the provider reads itself (inventory, BIOS and its attribute
// registry, tasks, update tasks), and the call that reads each.
var redfishDocuments = []struct {
	path string
	call func(context.Context, *client) error
}{
	{"/redfish/v1/Systems/1", inventory},
	{"/redfish/v1/Systems/1/Memory", inventory},
	{"/redfish/v1/Systems/1/Memory/DIMM0", inventory},
	{"/redfish/v1/Systems/1/Processors", inventory},
	{"/redfish/v1/Systems/1/EthernetInterfaces/NIC1", inventory},
	{"/redfish/v1/Systems/1/Storage", inventory},
	{"/redfish/v1/Systems/1/Storage/1", inventory},
	{"/redfish/v1/Systems/1/Storage/1/Drives/Disk0", inventory},
	{"/redfish/v1/Systems/1/EthernetInterfaces", inventory},
	{"/redfish/v1/Systems/1/Bios", biosAttributes},
	{"/redfish/v1/Registries/BiosAttributeRegistry.v1_0_0", biosAttributes},
	{"/redfish/v1/Registries/BiosAttributeRegistry.v1_0_0/BiosAttributeRegistry.v1_0_0.json", biosAttributes},
	{"/redfish/v1/TaskService/Tasks", updateTaskList},
	{"/redfish/v1/Systems/1/Storage/1/Drives/Disk1", erasesInProgress},
}

func inventory(ctx context.Context, c *client) error { _, err := c.Inventory(ctx); return err }
func biosAttributes(ctx context.Context, c *client) error {
	_, err := c.BIOSAttributes(ctx)
	return err
}
func updateTaskList(ctx context.Context, c *client) error {
	_, _, err := c.UpdateTasks(ctx)
	return err
}
func erasesInProgress(ctx context.Context, c *client) error {
	_, err := c.ErasesInProgress(ctx, []string{"Disk0", "Disk1"})
	return err
}

// A BMC whose firmware answers one of the documents the provider reads itself malformed or
// unexpected (any status, any body): the call returns, a value or an error, within its timeout
// and without a panic.
func FuzzRedfishDocuments(f *testing.F) {
	sim := newSim(f, simulator.Config{})
	for i, d := range redfishDocuments {
		f.Add(uint8(i), http.StatusOK, realDocument(f, sim, d.path))
	}
	f.Add(uint8(0), http.StatusOK, []byte(`{"ProcessorSummary":{"Count":-1},"MemorySummary":{"TotalSystemMemoryGiB":1e308}}`))
	f.Add(uint8(1), http.StatusOK, []byte(`{"Members":[{"@odata.id":"/redfish/v1/Systems/1/Memory"}],"Members@odata.count":1}`))
	f.Add(uint8(6), http.StatusOK, []byte(`{"Drives":[null,{"@odata.id":""}]}`))
	f.Add(uint8(10), http.StatusOK, []byte(`{"Location":[{"Uri":"http://169.254.0.1/x.json"}]}`))
	f.Add(uint8(11), http.StatusOK, []byte(`{"RegistryEntries":{"Attributes":[{"AttributeName":null,"Value":[{}]}]}}`))
	f.Add(uint8(12), http.StatusInternalServerError, []byte(`{"error":{"code":"Base.1.8.InternalError"}}`))
	f.Add(uint8(3), http.StatusNoContent, []byte(nil))
	f.Fuzz(func(t *testing.T, which uint8, status int, body []byte) {
		if status < 200 || status > 599 {
			status = 200 + (status%400+400)%400
		}
		d := redfishDocuments[int(which)%len(redfishDocuments)]
		sim.Fault.ClearAnswers()
		sim.Fault.AnswerTo(d.path, 1, status, body)
		c := fuzzClient(t, sim)
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		start := time.Now()
		_ = d.call(ctx, c)
		if ctx.Err() != nil {
			t.Fatalf("GET %s answered %d %q: the call ran %s, past its timeout", d.path, status, body, time.Since(start))
		}
	})
}

// A task the BMC answers anything for ends successfully only when the BMC said so: a Task whose
// state is Completed and not Critical, or (a task monitor) the operation's own answer that is no
// Task and no 202.
func FuzzTaskStatus(f *testing.F) {
	sim := newSim(f, simulator.Config{})
	for _, s := range []struct {
		status int
		body   string
	}{
		{200, `{"TaskState":"Completed","TaskStatus":"OK","PercentComplete":100}`},
		{200, `{"TaskState":"Completed","TaskStatus":"Critical","Messages":[{"Message":"https://u:secret@img/x failed"}]}`},
		{202, `{"TaskState":"Running","PercentComplete":40}`},
		{202, ``}, {204, ``}, {200, `{}`}, {200, `not json`}, {404, ``}, {400, `{"error":{"message":"bad"}}`},
		{200, `{"TaskState":"Exception"}`}, {200, `{"TaskState":"Completed","Messages":[]}`},
	} {
		f.Add(s.status, []byte(s.body))
	}
	const uri = "/redfish/v1/TaskService/Tasks/fuzz"
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		if status < 200 || status > 599 {
			status = 200 + (status%400+400)%400
		}
		sim.Fault.ClearAnswers()
		sim.Fault.AnswerTo(uri, 1, status, body)
		c := fuzzClient(t, sim)
		task, err := c.TaskStatus(t.Context(), uri)
		if err != nil || !task.Done || task.Failed {
			return
		}
		var doc schemas.Task
		isTask := len(body) > 0 && json.Unmarshal(body, &doc) == nil && doc.TaskState != ""
		switch {
		case status == http.StatusAccepted && !isTask:
			t.Fatalf("202 %q (still running) read as a success: %+v", body, task)
		case isTask && (doc.TaskState != schemas.CompletedTaskState || doc.TaskStatus == schemas.CriticalHealth):
			t.Fatalf("%d %q read as a success: %+v", status, body, task)
		case status >= 300 && status != http.StatusNotModified:
			t.Fatalf("an error answer %d %q read as a success: %+v", status, body, task)
		}
	})
}

// fuzzClient connects to sim.
func fuzzClient(t *testing.T, sim *simulator.Server) *client {
	t.Helper()
	opts := fastOpts
	// One try each (a fuzzed answer is given once), and time enough on a machine the fuzzer keeps busy.
	opts.Retries, opts.BreakerThreshold, opts.AttemptTimeout = 1, 1000, 5*time.Second
	c, err := connect(t.Context(), target(sim), opts, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	// Logged out and its connections closed: a client a run leaves open holds a file descriptor
	// and a simulator goroutine, and a long run of the fuzzer ran out of both.
	t.Cleanup(func() {
		c.close(time.Second)
		c.tr.closeIdle()
	})
	return c
}

// realDocument is the document sim answers at path.
func realDocument(f *testing.F, sim *simulator.Server, path string) []byte {
	f.Helper()
	u, p := sim.Credentials()
	req, err := http.NewRequest(http.MethodGet, sim.URL()+path, nil)
	if err != nil {
		f.Fatal(err)
	}
	req.SetBasicAuth(u, p)
	tr := &http.Transport{DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext}
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		f.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		f.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
	}
	return b
}
