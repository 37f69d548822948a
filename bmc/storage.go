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
	// A drive that is not listed, or whose resource does not parse, is counted as still
	// erasing: only a drive seen without an erase operation is done.
	n := 0
	seen := map[string]bool{}
	for _, st := range storages {
		all, err := st.Drives()
		if err != nil {
			return 0, fmt.Errorf("listing drives of %s: %w", st.ODataID, classify(err))
		}
		for _, d := range all {
			if !slices.Contains(drives, d.ODataID) || seen[d.ODataID] {
				continue
			}
			seen[d.ODataID] = true
			var res struct {
				Operations []struct {
					OperationName      string
					PercentageComplete *int
				}
			}
			if json.Unmarshal(d.RawData, &res) != nil {
				n++
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
	for _, d := range drives {
		if !seen[d] {
			n++
		}
	}
	return n, nil
}

// EraseJob is the erase of one drive, started on the BMC.
type EraseJob struct {
	// Drive is the drive's Redfish path.
	Drive string
	// TaskURI is where the erase's progress is read (TaskStatus); empty when the BMC gave no
	// task: the drive's Operations then tell whether the erase still runs (ErasesInProgress).
	TaskURI string
}

func (c *client) EraseDrives(ctx context.Context, exempt, expected []string) ([]EraseJob, error) {
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
	// Every drive present is erased, or none is: the erase starts only once each drive is known
	// to offer one (or the host's operator exempted it by name or serial).
	var erasable []*schemas.Drive
	var unerasable []string
	exempted := false
	present := map[string]bool{} // serial numbers listed
	for _, st := range storages {
		drives, err := st.Drives()
		if err != nil {
			return nil, fmt.Errorf("listing drives of %s: %w", st.ODataID, classify(err))
		}
		for _, d := range drives {
			if d.Status.State != schemas.AbsentState && d.SerialNumber != "" {
				present[d.SerialNumber] = true
			}
			switch {
			case d.Status.State == schemas.AbsentState:
				// An empty bay.
			case offersSecureErase(d.RawData):
				erasable = append(erasable, d)
			case slices.Contains(exempt, d.ID) || (d.SerialNumber != "" && slices.Contains(exempt, d.SerialNumber)):
				exempted = true // the operator accepts this drive is not erased through Redfish
			default:
				unerasable = append(unerasable, driveName(d.ID, d.SerialNumber))
			}
		}
	}
	// A drive the inventory recorded that the listing does not show now (a controller that did
	// not answer, a BMC listing partly) would stay unerased: nothing is erased until it is seen,
	// or the operator accepts it (removed from the server).
	var missing []string
	for _, serial := range expected {
		if serial != "" && !present[serial] && !slices.Contains(exempt, serial) {
			missing = append(missing, serial)
		}
	}
	if len(missing) > 0 && len(erasable)+len(unerasable) > 0 {
		return nil, fmt.Errorf("%w: serials %s (none was erased)", ErrDrivesMissing, strings.Join(missing, ", "))
	}
	if len(erasable) == 0 && len(unerasable) == 0 {
		// Older BMCs list drives only as SimpleStorage devices, which have no erase.
		// A system that lists no drive at all is not taken as clean: a BMC that answered an empty
		// collection would otherwise release the host unerased.
		var simple []string
		if ss, err := sys.SimpleStorage(); err == nil {
			for _, s := range ss {
				for _, d := range s.Devices {
					switch {
					case d.Status.State == schemas.AbsentState:
					case slices.Contains(exempt, d.Name):
						exempted = true
					default:
						simple = append(simple, d.Name)
					}
				}
			}
		}
		if len(simple) == 0 && exempted {
			return nil, nil // every drive present is exempt
		}
		return nil, fmt.Errorf("%w: no Storage drive offers Drive.SecureErase; %d devices behind SimpleStorage (which has no erase): %s",
			ErrNothingToErase, len(simple), strings.Join(simple, ", "))
	}
	if len(unerasable) > 0 {
		if len(erasable) == 0 {
			return nil, fmt.Errorf("%w: %d Storage drives without Drive.SecureErase: %s", ErrNothingToErase, len(unerasable), strings.Join(unerasable, ", "))
		}
		return nil, fmt.Errorf("%w: %s (%d of %d drives; none was erased)", ErrDrivesNotErasable,
			strings.Join(unerasable, ", "), len(unerasable), len(unerasable)+len(erasable))
	}
	var jobs []EraseJob
	for _, d := range erasable {
		// A POST without If-Match (gofish would add the drive's ETag; iDRAC refuses that).
		target := actionTarget(d.RawData, "#Drive.SecureErase", d.ODataID)
		resp, err := c.request(ctx, http.MethodPost, target, //nolint:bodyclose // taskOf closes it
			map[string]any{"OverwritePasses": 1, "SanitizationType": schemas.CryptographicEraseDataSanitizationType})
		if err != nil {
			return jobs, fmt.Errorf("erasing drive %s: %w", d.ODataID, err)
		}
		jobs = append(jobs, EraseJob{Drive: d.ODataID, TaskURI: taskOf(resp)})
	}
	return jobs, nil
}

// driveName is how an error names a drive: its Id and, when it has one, its serial number.
func driveName(id, serial string) string {
	if serial == "" {
		return id
	}
	return id + " (serial " + serial + ")"
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
