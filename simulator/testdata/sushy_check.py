"""Drives a CAPRF simulated BMC with OpenStack sushy, an independent Redfish client.

Usage: sushy_check.py <base-url> <username> <password> <image-url>
Prints one JSON object with what sushy saw; exits non-zero when sushy raises.
"""
import json
import sys
import time

import sushy
from sushy.resources import constants as res_cons
from sushy.resources.manager import constants as mgr_cons
from sushy.resources.system import constants as sys_cons

base, user, password, image = sys.argv[1:5]
root = sushy.Sushy(base + "/redfish/v1", username=user, password=password, verify=False)
out = {}


def wait_on():
    """Polls the system until it reports power On (10 s at most)."""
    deadline = time.time() + 10
    while time.time() < deadline:
        system.refresh()
        if system.power_state == res_cons.PowerState.ON:
            return
        time.sleep(0.05)


systems = root.get_system_collection().get_members()
out["systems"] = len(systems)
system = systems[0]
out["uuid"] = system.uuid
out["power_before"] = str(system.power_state.value)
out["nics"] = sorted(n.mac_address for n in system.ethernet_interfaces.get_members())

system.set_system_boot_source(
    sys_cons.BootSource.PXE,
    enabled=sys_cons.BootSourceOverrideEnabled.ONCE,
    mode=sys_cons.BootSourceOverrideMode.UEFI)
system.refresh()
out["boot_target"] = str(system.boot.target.value)
out["boot_enabled"] = str(system.boot.enabled.value)

manager = system.managers[0]
vm = next(m for m in manager.virtual_media.get_members()
          if mgr_cons.VirtualMediaType.CD in m.media_types)
vm.insert_media(image, inserted=True, write_protected=True)
vm.refresh()
out["media_inserted"] = vm.inserted
out["media_image"] = vm.image

system.reset_system(res_cons.ResetType.ON)
wait_on()
out["power_after_on"] = str(system.power_state.value)

system.reset_system(res_cons.ResetType.FORCE_RESTART)
wait_on()
out["power_after_cycle"] = str(system.power_state.value)
print(json.dumps(out))
