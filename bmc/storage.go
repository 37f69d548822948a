package bmc

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/stmcginnis/gofish/schemas"
)

// ErasesInProgress counts, among drives (their Redfish paths), those that report a sanitize or
// erase operation not yet at 100%: the check that an erase whose task said it ended really did.
func (c *client) ErasesInProgress(ctx context.Context, drives []string) (int, error) {
	ctx, cancel := c.call(ctx)
	defer cancel()
	sys, err := c.system(ctx)
	if err != nil {
		return 0, err
	}
	storages, err := sys.Storage()
	if err != nil {
		return 0, fmt.Errorf("listing storage: %w", classify(err))
	}
	n := 0
	for _, st := range storages {
		all, err := st.Drives()
		if err != nil {
			return 0, fmt.Errorf("listing drives of %s: %w", st.ODataID, classify(err))
		}
		for _, d := range all {
			if !slices.Contains(drives, d.ODataID) {
				continue
			}
			var res struct {
				Operations []struct {
					OperationName      string
					PercentageComplete *int
				}
			}
			if json.Unmarshal(d.RawData, &res) != nil {
				continue
			}
			for _, op := range res.Operations {
				name := strings.ToLower(op.OperationName)
				if (strings.Contains(name, "sanitiz") || strings.Contains(name, "erase")) && (op.PercentageComplete == nil || *op.PercentageComplete < 100) {
					n++
					break
				}
			}
		}
	}
	return n, nil
}

// EraseJob is the erase of one drive, started on the BMC.
type EraseJob struct {
	// Drive is the drive's Redfish path.
	Drive string
	// TaskURI is where the erase's progress is read (TaskStatus); empty when the BMC finished
	// before it answered.
	TaskURI string
}

func (c *client) EraseDrives(ctx context.Context) ([]EraseJob, error) {
	ctx, cancel := c.call(ctx)
	defer cancel()
	sys, err := c.system(ctx)
	if err != nil {
		return nil, err
	}
	storages, err := sys.Storage()
	if err != nil {
		return nil, fmt.Errorf("listing storage: %w", classify(err))
	}
	var jobs []EraseJob
	without := 0
	for _, st := range storages {
		drives, err := st.Drives()
		if err != nil {
			return nil, fmt.Errorf("listing drives of %s: %w", st.ODataID, classify(err))
		}
		for _, d := range drives {
			if !offersSecureErase(d.RawData) {
				without++
				continue
			}
			// A POST without If-Match (gofish would add the drive's ETag; iDRAC refuses that).
			target := actionTarget(d.RawData, "#Drive.SecureErase", d.ODataID)
			resp, err := c.request(ctx, http.MethodPost, target, //nolint:bodyclose // taskOf closes it
				map[string]any{"OverwritePasses": 1, "SanitizationType": schemas.CryptographicEraseDataSanitizationType})
			if err != nil {
				return jobs, fmt.Errorf("erasing drive %s: %w", d.ODataID, err)
			}
			job := EraseJob{Drive: d.ODataID, TaskURI: taskOf(resp)}
			jobs = append(jobs, job)
		}
	}
	if len(jobs) == 0 {
		simple := 0
		if ss, err := sys.SimpleStorage(); err == nil {
			for _, s := range ss {
				simple += len(s.Devices)
			}
		}
		return nil, fmt.Errorf("%w: %d Storage drives without Drive.SecureErase, %d devices behind SimpleStorage (which has no erase)", ErrNothingToErase, without, simple)
	}
	return jobs, nil
}

// offersSecureErase says whether a drive's resource advertises the Drive.SecureErase action.
func offersSecureErase(raw []byte) bool {
	var d struct {
		Actions struct {
			SecureErase struct {
				Target string `json:"target"`
			} `json:"#Drive.SecureErase"`
		}
	}
	return json.Unmarshal(raw, &d) == nil && d.Actions.SecureErase.Target != ""
}
