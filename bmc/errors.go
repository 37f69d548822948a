package bmc

import (
	"errors"
	"fmt"
)

var (
	// ErrAuth means the BMC rejected the credentials.
	ErrAuth = errors.New("the BMC rejected the credentials")
	// ErrSessionLimit means the BMC refused a new session because its session table is full
	// (other clients hold the sessions). Free sessions on the BMC, or use HTTP Basic
	// authentication (Target.BasicAuth), which needs none.
	ErrSessionLimit = errors.New("the BMC refused a new session: its session limit is reached (other clients hold its sessions)")
	// ErrTLS means the BMC's certificate was not trusted (unknown issuer, wrong name, expired):
	// the host's CA bundle (spec.bmc.caBundleName) does not hold the BMC's CA.
	ErrTLS = errors.New("the BMC's TLS certificate is not trusted: put the CA that signed it in a Secret (key ca.crt) named by spec.bmc.caBundleName, or, if the certificate is expired or names another host, renew it on the BMC")
	// ErrCircuitOpen means recent calls to this BMC kept failing; calls fail fast until a probe
	// succeeds again.
	ErrCircuitOpen = errors.New("BMC circuit breaker open: recent calls kept failing")
	// ErrConnecting means the connection to the BMC (service root, login) is still being made
	// in the background; ask again shortly.
	ErrConnecting = errors.New("connecting to the BMC")
	// ErrNotSupported means the BMC does not offer what was asked (no Bios resource, no
	// UpdateService, …): not a failure to retry.
	ErrNotSupported = errors.New("not supported by this BMC")
	// ErrConflict means the BMC refused the operation because the resource is busy (HTTP 409),
	// typically a power transition in progress. Try again later.
	ErrConflict = errors.New("the BMC is busy with another operation (409 Conflict)")
	// ErrNotSent means a request was not sent to the BMC (what it needed, such as a firmware
	// image to push, could not be had): nothing was started.
	ErrNotSent = errors.New("not sent to the BMC")
	// ErrRefused means the BMC answered a request with a client error (4xx): nothing was started.
	ErrRefused = errors.New("refused by the BMC")
	// ErrNothingToErase means the system has no drive Redfish can erase (no Drive.SecureErase
	// action, or drives only behind SimpleStorage): cleaning cannot be done through this BMC.
	ErrNothingToErase = errors.New("the BMC offers no drive erase (Drive.SecureErase)")
	// ErrDrivesNotErasable means some drives offer an erase and others (named in the error) do
	// not: nothing was erased, since a host released with one drive unerased would hand the
	// previous tenant's data to the next.
	ErrDrivesNotErasable = errors.New("some drives offer no Drive.SecureErase")
	// ErrDrivesMissing means drives the host's inventory recorded are not listed by the BMC now:
	// nothing was erased, since those drives would keep their data.
	ErrDrivesMissing = errors.New("drives recorded at inspection are not listed by the BMC")
	// ErrNoSeedSlot means the BMC offers no virtual media device for a seed volume: a single one
	// when the OS image needs it too, or none at all.
	ErrNoSeedSlot = errors.New("the BMC offers no second virtual media device (USB stick, floppy or second CD) for the seed volume")
)

// UnknownAttributesError lists BIOS attributes the BMC's registry does not know or whose values
// it would not accept.
type UnknownAttributesError struct {
	Problems []string
}

func (e *UnknownAttributesError) Error() string {
	return fmt.Sprintf("BIOS attributes rejected by the attribute registry: %v", e.Problems)
}
