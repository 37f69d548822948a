package bmc

import (
	"context"
	"fmt"
	"net/http"
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
	protocol := schemas.HTTPTransferProtocolType
	if strings.HasPrefix(imageURI, "https://") {
		protocol = schemas.HTTPSTransferProtocolType
	}
	resp, err := c.request(ctx, http.MethodPost, actionTarget(us.RawData, "#UpdateService.SimpleUpdate", us.ODataID),
		map[string]any{"ImageURI": imageURI, "Targets": targets, "TransferProtocol": protocol})
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
