package bmc

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/schemas"
)

// FirmwareTarget is what a firmware update flashes.
type FirmwareTarget string

// Firmware targets.
const (
	FirmwareBIOS FirmwareTarget = "BIOS"
	FirmwareBMC  FirmwareTarget = "BMC"
)

// ImageCredentials are the image server's user name and password.
type ImageCredentials struct {
	Username string
	Password string
}

func (c *client) BootProgress(ctx context.Context) (string, time.Time, error) {
	ctx, cancel := c.call(ctx)
	defer cancel()
	sys, err := c.system(ctx)
	if err != nil {
		return "", time.Time{}, err
	}
	at, _ := time.Parse(time.RFC3339, sys.BootProgress.LastStateTime)
	return string(sys.BootProgress.LastState), at, nil
}

func (c *client) FirmwareVersion(ctx context.Context, target FirmwareTarget) (string, error) {
	ctx, cancel := c.call(ctx)
	defer cancel()
	sys, err := c.system(ctx)
	if err != nil {
		return "", err
	}
	if target == FirmwareBIOS {
		return sys.BiosVersion, nil
	}
	managers, err := sys.ManagedBy()
	if err != nil || len(managers) == 0 {
		return "", fmt.Errorf("reading the BMC manager: %w", classify(err))
	}
	return managers[0].FirmwareVersion, nil
}

func (c *client) UpdateFirmware(ctx context.Context, imageURI string, target FirmwareTarget, creds *ImageCredentials) (string, error) {
	parent := ctx // a push is bounded by PushTimeout, not by the call timeout
	ctx, cancel := c.call(ctx)
	defer cancel()
	api := c.with(ctx)
	// Never flash twice: an update still running on the BMC (started by an earlier call whose
	// answer got lost) is the one to follow.
	if uri, err := c.runningUpdate(api); err != nil || uri != "" {
		if err != nil {
			err = fmt.Errorf("%w: %w", ErrNotSent, err)
		}
		return uri, err
	}
	us, err := api.Service.UpdateService()
	if err != nil {
		return "", fmt.Errorf("%w: reading UpdateService: %w", ErrNotSent, classify(err))
	}
	if us == nil {
		return "", fmt.Errorf("%w: the service root has no UpdateService", ErrNotSupported)
	}
	var targets []string
	if target == FirmwareBMC {
		sys, err := c.system(ctx)
		if err != nil {
			return "", fmt.Errorf("%w: %w", ErrNotSent, err)
		}
		managers, err := sys.ManagedBy()
		if err != nil || len(managers) == 0 {
			return "", fmt.Errorf("%w: finding the BMC manager to update: %w", ErrNotSent, classify(err))
		}
		targets = []string{managers[0].ODataID}
	} else {
		targets = []string{c.systemPath}
	}
	var uri string
	switch {
	case offersAction(us.RawData, "#UpdateService.SimpleUpdate") || us.MultipartHTTPPushURI == "":
		// The BMC pulls the image (the default where it offers nothing else to go by).
		protocol := schemas.HTTPTransferProtocolType
		if strings.HasPrefix(imageURI, "https://") {
			protocol = schemas.HTTPSTransferProtocolType
		}
		target := actionTarget(us.RawData, "#UpdateService.SimpleUpdate", us.ODataID)
		listed, err := allowedUpdateTargets(us.RawData, targets, target)
		if err != nil {
			return "", err
		}
		body := map[string]any{"ImageURI": imageURI, "Targets": listed, "TransferProtocol": protocol}
		if creds != nil {
			body["Username"], body["Password"] = creds.Username, creds.Password
		}
		resp, err := c.request(ctx, http.MethodPost, target, body) //nolint:bodyclose // taskOf closes it
		if err != nil {
			return "", fmt.Errorf("starting firmware update: %w", err)
		}
		uri = taskOf(resp)
	default:
		// Only a push: the image is streamed from its server to the BMC through the manager.
		if uri, err = c.push(parent, us.MultipartHTTPPushURI, imageURI, targets, creds); err != nil {
			return "", fmt.Errorf("starting firmware update: %w", err)
		}
	}
	if uri != "" {
		return uri, nil
	}
	// Accepted without a monitor (204): the update runs all the same. Follow the task the BMC
	// lists for it; never send it again.
	ctx, cancel = c.call(parent) // a push may have outlived the first call timeout
	defer cancel()
	uri, err = c.runningUpdate(c.with(ctx))
	if err != nil {
		// Accepted all the same: "" (verify against the inventory), never an error a caller
		// could take for a refusal and send the update again.
		return "", nil
	}
	return uri, nil
}

func (c *client) runningUpdate(api *gofish.APIClient) (string, error) {
	tasks, _, err := updateTasks(api)
	for _, t := range tasks {
		if t.Running {
			return t.URI, nil // the Task outlives its monitor (see taskOf)
		}
	}
	return "", err
}

// UpdateTask is a firmware update task a BMC lists.
type UpdateTask struct {
	URI     string
	Running bool // New, Starting or Running
}

func (c *client) UpdateTasks(ctx context.Context) ([]UpdateTask, bool, error) {
	ctx, cancel := c.call(ctx)
	defer cancel()
	return updateTasks(c.with(ctx))
}

// updateTasks lists the update tasks of the BMC's TaskService; listed is false when the BMC has
// none (it cannot tell).
func updateTasks(api *gofish.APIClient) ([]UpdateTask, bool, error) {
	ts, err := api.Service.Tasks()
	if err != nil || ts == nil {
		return nil, false, nil //nolint:nilerr // a BMC without a TaskService cannot tell: go on
	}
	tasks, err := ts.Tasks()
	if err != nil {
		return nil, true, fmt.Errorf("listing tasks: %w", classify(err))
	}
	var out []UpdateTask
	for _, t := range tasks {
		if target := t.Payload.TargetURI; target != "" && !strings.Contains(target, "UpdateService") && !strings.Contains(target, "update") {
			continue // another kind of task (a drive erase): not an update
		}
		running := t.TaskState == schemas.RunningTaskState || t.TaskState == schemas.NewTaskState || t.TaskState == schemas.StartingTaskState
		out = append(out, UpdateTask{URI: t.ODataID, Running: running})
	}
	return out, true, nil
}

// push streams the image from its server to the BMC's MultipartHttpPushUri (UpdateParameters
// with the targets first, then UpdateFile): nothing is held in memory or on disk, and the request
// is sent once (its body cannot be read again). It is bounded by PushTimeout and returns the
// task to follow ("" when the BMC named none).
func (c *client) push(ctx context.Context, pushURI, imageURI string, targets []string, creds *ImageCredentials) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.PushTimeout)
	defer cancel()
	img, name, size, err := openImage(ctx, imageURI, creds, c.opts)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrNotSent, err)
	}
	defer func() { _ = img.Close() }()
	params, err := json.Marshal(map[string]any{"Targets": targets, "@Redfish.OperationApplyTime": "Immediate"})
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	part := func(h textproto.MIMEHeader) error { _, err := mw.CreatePart(h); return err }
	if err := part(textproto.MIMEHeader{"Content-Disposition": {`form-data; name="UpdateParameters"`}, "Content-Type": {"application/json"}}); err != nil {
		return "", err
	}
	buf.Write(params)
	if err := part(textproto.MIMEHeader{"Content-Disposition": {fmt.Sprintf(`form-data; name="UpdateFile"; filename=%q`, name)},
		"Content-Type": {"application/octet-stream"}}); err != nil {
		return "", err
	}
	head := bytes.Clone(buf.Bytes())
	buf.Reset()
	if err := mw.Close(); err != nil {
		return "", err
	}
	tail := buf.Bytes()
	ctx = context.WithValue(context.WithValue(ctx, streamKey{}, true), attemptTimeoutKey{}, c.opts.PushTimeout)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.tr.baseURL+pushURI,
		io.MultiReader(bytes.NewReader(head), img, bytes.NewReader(tail)))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.ContentLength = -1 // chunked, unless the image's size is known
	if size >= 0 {
		req.ContentLength = int64(len(head)) + size + int64(len(tail))
	}
	httpc := &http.Client{Transport: c.tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := httpc.Do(req)
	if err != nil {
		return "", fmt.Errorf("pushing the image to %s: %s", pushURI, Redact(err.Error()))
	}
	if resp.StatusCode >= 300 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
		err := fmt.Errorf("pushing the image to %s: HTTP %d: %s", pushURI, resp.StatusCode, Redact(errorMessage(body)))
		switch {
		case resp.StatusCode == http.StatusConflict:
			err = fmt.Errorf("%w: %w", ErrConflict, err)
		case resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusRequestTimeout:
			err = fmt.Errorf("%w: %w", ErrRefused, err)
		}
		return "", err
	}
	return taskOf(resp), nil
}

// openImage starts downloading a firmware image: its body, file name (BMCs read it) and size
// (-1 when the server does not say). Credentials go over HTTPS only and to the image's own
// scheme, host and port only; no redirect leads to plain HTTP from HTTPS (see imageClient).
func openImage(ctx context.Context, imageURI string, creds *ImageCredentials, opts Options) (io.ReadCloser, string, int64, error) {
	u, err := url.Parse(imageURI)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, "", 0, fmt.Errorf("firmware image %q: only http and https images can be pushed", Redact(imageURI))
	}
	if creds != nil && u.Scheme != "https" {
		return nil, "", 0, fmt.Errorf("firmware image %s: image server credentials are sent over https only", Redact(imageURI))
	}
	name := path.Base(u.Path)
	if name == "." || name == "/" {
		name = "firmware.bin"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, imageURI, nil)
	if err != nil {
		return nil, "", 0, fmt.Errorf("firmware image %s: %s", Redact(imageURI), Redact(err.Error()))
	}
	if creds != nil {
		req.SetBasicAuth(creds.Username, creds.Password)
	}
	resp, err := imageClient(u, creds != nil, opts).Do(req)
	if err != nil {
		return nil, "", 0, fmt.Errorf("downloading firmware image %s: %s", Redact(imageURI), Redact(err.Error()))
	}
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close()
		return nil, "", 0, fmt.Errorf("downloading firmware image %s: %s", Redact(imageURI), resp.Status)
	}
	return resp.Body, name, resp.ContentLength, nil
}

// maxImageRedirects bounds the redirects an image download follows.
const maxImageRedirects = 5

// imageClient is the HTTP client of one image download: bounded (connect, TLS handshake and
// response headers time out; the body is bounded by the push's context), with redirects followed
// only to HTTPS when the origin is HTTPS, and only to the origin's own scheme, host and port when
// credentials go with the request (Go's client would forward them to the same host over plain
// HTTP).
func imageClient(origin *url.URL, withCreds bool, opts Options) *http.Client {
	opts = opts.withDefaults()
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dialer.DialContext,
		TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: opts.ImageRootCAs},
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: opts.AttemptTimeout,
		DisableKeepAlives:     true, // one download
	}
	return &http.Client{Transport: tr, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		to := req.URL
		switch {
		case len(via) >= maxImageRedirects:
			return fmt.Errorf("more than %d redirects", maxImageRedirects)
		case to.Scheme != "https" && to.Scheme != "http":
			return fmt.Errorf("redirected to a %s URL", to.Scheme)
		case origin.Scheme == "https" && to.Scheme != "https":
			return errors.New("redirected from https to plain http: not followed")
		case withCreds && (to.Scheme != origin.Scheme || to.Host != origin.Host):
			return fmt.Errorf("redirected to %s://%s: image server credentials go to %s://%s only, the redirect is not followed", to.Scheme, to.Host, origin.Scheme, origin.Host)
		}
		return nil
	}}
}

// allowedUpdateTargets holds SimpleUpdate's Targets to the action's Targets@Redfish.AllowableValues
// when it lists them: the system or manager when listed, else the one listed firmware inventory
// entry named for the component (BIOS or UEFI; BMC or iDRAC), never a backup, recovery or previous bank.
// None, or more than one, and the BMC cannot be told what to flash: ErrNotSupported (a flash of
// the wrong component, or of a backup bank retried for ever, is worse than none).
func allowedUpdateTargets(raw []byte, targets []string, action string) ([]string, error) {
	var us struct {
		Actions map[string]struct {
			Targets []string `json:"Targets@Redfish.AllowableValues"`
		}
	}
	_ = json.Unmarshal(raw, &us)
	allowed := us.Actions["#UpdateService.SimpleUpdate"].Targets
	if len(allowed) == 0 || len(targets) == 0 || slices.Contains(allowed, targets[0]) {
		return targets, nil
	}
	names := []string{"bios", "uefi"} // Lenovo XCC names its BIOS entry UEFI
	if strings.Contains(targets[0], "/Managers/") {
		names = []string{"bmc", "idrac"}
	}
	var fit []string
	for _, a := range allowed {
		id := strings.ToLower(path.Base(strings.TrimSuffix(a, "/")))
		if strings.Contains(id, "backup") || strings.Contains(id, "recovery") || strings.Contains(id, "previous") ||
			strings.Contains(id, "golden") || strings.Contains(id, "standby") {
			continue
		}
		for _, n := range names {
			if strings.Contains(id, n) {
				fit = append(fit, a)
				break
			}
		}
	}
	if len(fit) != 1 {
		return nil, fmt.Errorf("%w: %s takes Targets %v: not %s, and %d entries look like it", ErrNotSupported, action, allowed, targets[0], len(fit))
	}
	return fit, nil
}
