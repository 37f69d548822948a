"""Drives a CAPRF simulated BMC with OpenStack sushy, an independent Redfish client.

Usage: sushy_check.py <base-url> <username> <password> <image-url>
Prints one JSON object with what sushy saw; exits non-zero when sushy raises. Steps a BMC's shape
does not offer (no NICs, no virtual media under a manager, no BIOS) are reported as absent, so the
caller can check that sushy found exactly what the profile has.
"""
import json
import sys
import time

import sushy
from sushy import exceptions
from sushy.resources import constants as res_cons
from sushy.resources.manager import constants as mgr_cons
from sushy.resources.system import constants as sys_cons

base, user, password, image = sys.argv[1:5]
root = sushy.Sushy(base + "/redfish/v1", username=user, password=password, verify=False)
out = {}


def wait_power(state):
    """Polls the system until it reports the power state (10 s at most)."""
    deadline = time.time() + 10
    while time.time() < deadline:
        system.refresh()
        if system.power_state == state:
            return
        time.sleep(0.05)


def retry(f):
    """Retries a call a BMC refuses for a while (iDRAC's 409 after power-off, iLO in POST)."""
    deadline = time.time() + 10
    while True:
        try:
            return f()
        except exceptions.HTTPError as e:
            if time.time() > deadline or e.status_code not in (400, 409):
                raise
            time.sleep(0.2)


systems = root.get_system_collection().get_members()
out["systems"] = len(systems)
system = next(s for s in systems if s.path.endswith("/Systems/1"))
out["uuid"] = system.uuid
out["power_before"] = str(system.power_state.value)
try:
    out["nics"] = sorted(n.mac_address for n in system.ethernet_interfaces.get_members())
except exceptions.MissingAttributeError:
    out["nics"] = None

mode = sys_cons.BootSourceOverrideMode.UEFI if system.boot.mode is not None else None
system.set_system_boot_source(
    sys_cons.BootSource.PXE, enabled=sys_cons.BootSourceOverrideEnabled.ONCE, mode=mode)
system.refresh()
out["boot_target"] = str(system.boot.target.value)
out["boot_enabled"] = str(system.boot.enabled.value)

out["media"] = None
try:
    vms = system.managers[0].virtual_media.get_members()
except exceptions.MissingAttributeError:
    vms = []
vm = next((m for m in vms if mgr_cons.VirtualMediaType.CD in m.media_types), None)
if vm is not None:
    vm.insert_media(image, inserted=True, write_protected=True)
    vm.refresh()
    out["media"] = {"inserted": vm.inserted, "image": vm.image}

try:
    bios = system.bios
    bios.set_attributes({"BootMode": "LegacyBios"})
    out["bios_pending"] = bios.pending_attributes.get("BootMode")
except exceptions.MissingAttributeError:
    out["bios_pending"] = None
except exceptions.HTTPError as e:
    # sushy 4.3 commits BIOS settings without If-Match; a BMC that requires one refuses.
    out["bios_pending"] = "refused: %d" % e.status_code

retry(lambda: system.reset_system(res_cons.ResetType.ON))
wait_power(res_cons.PowerState.ON)
out["power_after_on"] = str(system.power_state.value)

retry(lambda: system.reset_system(res_cons.ResetType.FORCE_RESTART))
wait_power(res_cons.PowerState.ON)
out["power_after_cycle"] = str(system.power_state.value)
print(json.dumps(out))
