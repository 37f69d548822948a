// Package simulator is a Redfish fleet simulator: each simulated server is a real HTTP(S)
// Redfish service on loopback (service root, Systems with inventory, Managers, Chassis,
// SessionService, VirtualMedia, Bios with pending settings, UpdateService and TaskService).
// Power transitions are asynchronous with configurable latency, and every server has fault
// injection (5xx bursts, latency, hangs, 409 conflicts, session expiry, a BMC reset in the middle
// of a firmware task, a wrongly reported power state). Boot observers see which boot target and
// media each boot used: the simulated "OS" hangs off that hook.
//
// Tests import it; users run it as `redfish-sim` (cmd/redfish-sim).
package simulator
