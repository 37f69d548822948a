package bmc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"

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

func (c *client) UpdateFirmware(ctx context.Context, imageURI string, target FirmwareTarget) (string, error) {
	ctx, cancel := c.call(ctx)
	defer cancel()
	api := c.with(ctx)
	// Never flash twice: an update still running on the BMC (started by an earlier call whose
	// answer got lost) is the one to follow.
	if uri, err := c.runningUpdate(api); err != nil || uri != "" {
		return uri, err
	}
	us, err := api.Service.UpdateService()
	if err != nil {
		return "", fmt.Errorf("reading UpdateService: %w", classify(err))
	}
	if us == nil {
		return "", fmt.Errorf("%w: the service root has no UpdateService", ErrNotSupported)
	}
	var targets []string
	if target == FirmwareBMC {
		sys, err := c.system(ctx)
		if err != nil {
			return "", err
		}
		managers, err := sys.ManagedBy()
		if err != nil || len(managers) == 0 {
			return "", fmt.Errorf("finding the BMC manager to update: %w", classify(err))
		}
		targets = []string{managers[0].ODataID}
	} else {
		targets = []string{c.systemPath}
	}
	var resp *http.Response
	switch {
	case offersAction(us.RawData, "#UpdateService.SimpleUpdate") || us.MultipartHTTPPushURI == "":
		// The BMC pulls the image (the default where it offers nothing else to go by).
		protocol := schemas.HTTPTransferProtocolType
		if strings.HasPrefix(imageURI, "https://") {
			protocol = schemas.HTTPSTransferProtocolType
		}
		target := actionTarget(us.RawData, "#UpdateService.SimpleUpdate", us.ODataID)
		resp, err = c.request(ctx, http.MethodPost, target, //nolint:bodyclose // taskOf closes it
			map[string]any{"ImageURI": imageURI, "Targets": targets, "TransferProtocol": protocol})
	default:
		// Only a push: the image is fetched here and sent to the BMC.
		resp, err = c.push(ctx, us.MultipartHTTPPushURI, imageURI, targets) //nolint:bodyclose // taskOf closes it
	}
	if err != nil {
		return "", fmt.Errorf("starting firmware update: %w", err)
	}
	if uri := taskOf(resp); uri != "" {
		return uri, nil
	}
	// Accepted without a monitor (204): the update runs all the same. Follow the task the BMC
	// lists for it; never send it again.
	uri, err := c.runningUpdate(api)
	if err != nil {
		return "", fmt.Errorf("the BMC accepted the update without a task monitor, and listing its tasks failed: %w", err)
	}
	return uri, nil
}

func (c *client) runningUpdate(api *gofish.APIClient) (string, error) {
	ts, err := api.Service.Tasks()
	if err != nil || ts == nil {
		return "", nil //nolint:nilerr // a BMC without a TaskService cannot tell: go on
	}
	tasks, err := ts.Tasks()
	if err != nil {
		return "", fmt.Errorf("listing tasks: %w", classify(err))
	}
	for _, t := range tasks {
		if t.TaskState == schemas.RunningTaskState || t.TaskState == schemas.NewTaskState || t.TaskState == schemas.StartingTaskState {
			return t.ODataID, nil // the Task outlives its monitor (see taskOf)
		}
	}
	return "", nil
}

// push downloads the image to a temporary file and sends it to the BMC's MultipartHttpPushUri
// (UpdateParameters with the targets, UpdateFile with the image), bounded by PushTimeout.
func (c *client) push(ctx context.Context, pushURI, imageURI string, targets []string) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.PushTimeout)
	defer cancel()
	dir, err := os.MkdirTemp("", "caprf-firmware-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	f, err := download(ctx, imageURI, dir)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	params, err := json.Marshal(map[string]any{"Targets": targets, "@Redfish.OperationApplyTime": "Immediate"})
	if err != nil {
		return nil, err
	}
	ctx = context.WithValue(ctx, attemptTimeoutKey{}, c.opts.PushTimeout)
	resp, err := c.with(ctx).PostMultipart(pushURI, map[string]io.Reader{"UpdateParameters": bytes.NewReader(params), "UpdateFile": f})
	if err != nil {
		return nil, fmt.Errorf("pushing the image to %s: %w", pushURI, classify(err))
	}
	return resp, nil
}

// download fetches an image into dir under its own file name (BMCs read the name).
func download(ctx context.Context, imageURI, dir string) (*os.File, error) {
	u, err := url.Parse(imageURI)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("firmware image %q: only http and https images can be pushed", Redact(imageURI))
	}
	name := path.Base(u.Path)
	if name == "." || name == "/" {
		name = "firmware.bin"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, imageURI, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("downloading firmware image %s: %s", Redact(imageURI), Redact(err.Error()))
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("downloading firmware image %s: %s", Redact(imageURI), resp.Status)
	}
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		return nil, err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("downloading firmware image %s: %s", Redact(imageURI), Redact(err.Error()))
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}
