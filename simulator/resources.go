package simulator

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

const (
	rootPath      = "/redfish/v1"
	systemPath    = rootPath + "/Systems/1"
	managerPath   = rootPath + "/Managers/BMC"
	chassisPath   = rootPath + "/Chassis/1"
	mediaRoot     = managerPath + "/VirtualMedia"
	biosPath      = systemPath + "/Bios"
	updatePath    = rootPath + "/UpdateService"
	tasksPath     = rootPath + "/TaskService/Tasks"
	registryPath  = rootPath + "/Registries/BiosAttributeRegistry.v1_0_0"
	registryJSON  = registryPath + "/BiosAttributeRegistry.v1_0_0.json"
	resetTarget   = systemPath + "/Actions/ComputerSystem.Reset"
	storagePath   = systemPath + "/Storage/1"
	firmwarePath  = updatePath + "/FirmwareInventory"
	monitorPrefix = rootPath + "/TaskService/TaskMonitors/"
)

var resetTypes = []string{"On", "ForceOn", "ForceOff", "GracefulShutdown", "GracefulRestart", "ForceRestart", "PowerCycle", "PushPowerButton"}

func link(path string) map[string]any { return map[string]any{"@odata.id": path} }

func collection(path, typ, name string, members []any) map[string]any {
	return map[string]any{"@odata.id": path, "@odata.type": typ, "Name": name,
		"Members": members, "Members@odata.count": len(members)}
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// routes serves the Redfish resource tree of one BMC managing one system.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	static := func(pattern string, body func() map[string]any) {
		mux.HandleFunc("GET "+pattern, func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, 200, body()) })
	}
	static("/redfish", func() map[string]any { return map[string]any{"v1": "/redfish/v1/"} })
	static(rootPath, s.serviceRoot)
	static(rootPath+"/Systems", func() map[string]any {
		members := []any{link(systemPath)}
		for i := 2; i <= s.cfg.Profile.systems(); i++ {
			members = append(members, link(fmt.Sprintf("%s/Systems/%d", rootPath, i)))
		}
		return collection(rootPath+"/Systems", "#ComputerSystemCollection.ComputerSystemCollection", "Systems", members)
	})
	for i := 2; i <= s.cfg.Profile.systems(); i++ {
		static(fmt.Sprintf("%s/Systems/%d", rootPath, i), func() map[string]any { return s.bladeSystem(i) })
	}
	if s.cfg.Profile.systems() > 1 {
		mux.HandleFunc("POST "+rootPath+"/Systems/{id}/Actions/ComputerSystem.Reset", s.resetBlade)
	}
	static(systemPath, s.system)
	mux.HandleFunc("PATCH "+systemPath, s.patchSystem)
	if s.cfg.Profile.BootOnlyInSettings {
		mux.HandleFunc("PATCH "+systemPath+"/Settings", s.patchSystem)
		static(systemPath+"/Settings", s.systemSettings)
	}
	mux.HandleFunc("POST "+resetTarget, s.postReset)
	static(systemPath+"/ResetActionInfo", func() map[string]any {
		return map[string]any{"@odata.id": systemPath + "/ResetActionInfo", "@odata.type": "#ActionInfo.v1_1_2.ActionInfo", "Id": "ResetActionInfo", "Name": "Reset Action Info",
			"Parameters": []any{map[string]any{"Name": "ResetType", "Required": true, "DataType": "String", "AllowableValues": resetTypes}}}
	})
	static(systemPath+"/Processors", func() map[string]any {
		return collection(systemPath+"/Processors", "#ProcessorCollection.ProcessorCollection", "Processors",
			[]any{link(systemPath + "/Processors/CPU1"), link(systemPath + "/Processors/CPU2")})
	})
	mux.HandleFunc("GET "+systemPath+"/Processors/{id}", s.processor)
	static(systemPath+"/Memory", func() map[string]any {
		members := []any{}
		for i := 1; i <= 10; i++ { // eight DIMMs and two empty slots
			members = append(members, link(fmt.Sprintf("%s/Memory/DIMM%d", systemPath, i)))
		}
		return collection(systemPath+"/Memory", "#MemoryCollection.MemoryCollection", "Memory", members)
	})
	mux.HandleFunc("GET "+systemPath+"/Memory/{id}", s.memory)
	if !s.cfg.Profile.NoNICs {
		s.nicRoutes(mux, static)
	}
	if s.cfg.Profile.SimpleStorageOnly {
		static(systemPath+"/SimpleStorage", func() map[string]any {
			return collection(systemPath+"/SimpleStorage", "#SimpleStorageCollection.SimpleStorageCollection", "Simple Storage", []any{link(systemPath + "/SimpleStorage/1")})
		})
		static(systemPath+"/SimpleStorage/1", s.simpleStorage)
	} else {
		s.storageRoutes(mux, static)
	}
	if s.cfg.Profile.mediaUnderSystem() {
		static(systemPath+"/VirtualMedia", func() map[string]any {
			return collection(systemPath+"/VirtualMedia", "#VirtualMediaCollection.VirtualMediaCollection", "Virtual Media", s.mediaLinks())
		})
	}
	if !s.cfg.Profile.NoBios {
		s.biosRoutes(mux, static)
	}
	s.otherRoutes(mux, static)
	return withTrailingSlash(mux)
}

type staticFunc func(pattern string, body func() map[string]any)

func (s *Server) nicRoutes(mux *http.ServeMux, static staticFunc) {
	static(systemPath+"/EthernetInterfaces", func() map[string]any {
		members := []any{link(systemPath + "/EthernetInterfaces/NIC1"), link(systemPath + "/EthernetInterfaces/NIC2")}
		if s.cfg.Profile.ExtraInterfaces {
			members = append(members, link(systemPath+"/EthernetInterfaces/NIC1.100"), link(systemPath+"/EthernetInterfaces/HostInterface"))
		}
		return collection(systemPath+"/EthernetInterfaces", "#EthernetInterfaceCollection.EthernetInterfaceCollection", "Ethernet Interfaces", members)
	})
	mux.HandleFunc("GET "+systemPath+"/EthernetInterfaces/{id}", s.nic)
}

func (s *Server) storageRoutes(mux *http.ServeMux, static staticFunc) {
	static(systemPath+"/Storage", func() map[string]any {
		return collection(systemPath+"/Storage", "#StorageCollection.StorageCollection", "Storage", []any{link(storagePath)})
	})
	static(storagePath, s.storage)
	mux.HandleFunc("GET "+storagePath+"/Drives/{id}", s.drive)
	mux.HandleFunc("POST "+storagePath+"/Drives/{id}/Actions/Drive.SecureErase", s.secureErase)
}

func (s *Server) biosRoutes(mux *http.ServeMux, static staticFunc) {
	static(biosPath, s.biosResource)
	settings := strings.TrimSuffix(s.cfg.Profile.biosSettingsLink(), "/") // trailing slashes are served without
	static(settings, s.biosSettings)
	mux.HandleFunc("PATCH "+settings, s.patchBiosSettings)
	static(rootPath+"/Registries", func() map[string]any {
		if s.cfg.Profile.NoAttributeRegistry {
			return collection(rootPath+"/Registries", "#MessageRegistryFileCollection.MessageRegistryFileCollection", "Registries", []any{})
		}
		return collection(rootPath+"/Registries", "#MessageRegistryFileCollection.MessageRegistryFileCollection", "Registries", []any{link(registryPath)})
	})
	static(registryPath, func() map[string]any {
		return map[string]any{"@odata.id": registryPath, "@odata.type": "#MessageRegistryFile.v1_1_3.MessageRegistryFile",
			"Id": "BiosAttributeRegistry.v1_0_0", "Name": "BIOS Attribute Registry File", "Registry": "BiosAttributeRegistry.1.0",
			"Languages": []string{"en"}, "Location": []any{map[string]any{"Language": "en", "Uri": registryJSON}}}
	})
	static(registryJSON, func() map[string]any {
		return map[string]any{"@odata.type": "#AttributeRegistry.v1_3_6.AttributeRegistry", "Id": "BiosAttributeRegistry.v1_0_0",
			"Name": "BIOS Attribute Registry", "Language": "en", "OwningEntity": "CAPRF", "RegistryVersion": "1.0.0",
			"RegistryEntries": map[string]any{"Attributes": biosRegistry}}
	})
}

func (s *Server) otherRoutes(mux *http.ServeMux, static staticFunc) {
	static(rootPath+"/Managers", func() map[string]any {
		return collection(rootPath+"/Managers", "#ManagerCollection.ManagerCollection", "Managers", []any{link(managerPath)})
	})
	static(managerPath, s.manager)
	if s.cfg.Profile.mediaUnderManager() {
		static(mediaRoot, func() map[string]any {
			return collection(mediaRoot, "#VirtualMediaCollection.VirtualMediaCollection", "Virtual Media", s.mediaLinks())
		})
	}
	for _, slot := range s.state.media {
		if !s.cfg.Profile.hasMedia() {
			break
		}
		p := mediaRoot + "/" + slot.id
		mux.HandleFunc("GET "+p, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Allow", "GET, PATCH") // how a client learns it may PATCH (sushy reads it)
			writeJSON(w, 200, s.virtualMedia(slot))
		})
		mux.HandleFunc("PATCH "+p, func(w http.ResponseWriter, r *http.Request) { s.patchVirtualMedia(w, r, slot) })
		if !s.cfg.Profile.NoMediaActions {
			mux.HandleFunc("POST "+p+"/Actions/VirtualMedia.InsertMedia", func(w http.ResponseWriter, r *http.Request) { s.insertMedia(w, r, slot) })
			mux.HandleFunc("POST "+p+"/Actions/VirtualMedia.EjectMedia", func(w http.ResponseWriter, r *http.Request) { s.ejectMedia(w, r, slot) })
		}
	}

	static(rootPath+"/Chassis", func() map[string]any {
		return collection(rootPath+"/Chassis", "#ChassisCollection.ChassisCollection", "Chassis", []any{link(chassisPath)})
	})
	static(chassisPath, func() map[string]any {
		return map[string]any{"@odata.id": chassisPath, "@odata.type": "#Chassis.v1_23_0.Chassis", "Id": "1", "Name": "Chassis",
			"ChassisType": "RackMount", "Manufacturer": "CAPRF", "Model": "SimServer 1U", "SerialNumber": "CH-" + s.cfg.ID,
			"Status": map[string]any{"State": "Enabled", "Health": "OK"},
			"Links":  map[string]any{"ComputerSystems": []any{link(systemPath)}, "ManagedBy": []any{link(managerPath)}}}
	})

	static(rootPath+"/SessionService", func() map[string]any {
		return map[string]any{"@odata.id": rootPath + "/SessionService", "@odata.type": "#SessionService.v1_1_8.SessionService",
			"Id": "SessionService", "Name": "Session Service", "ServiceEnabled": true,
			"SessionTimeout": int(s.cfg.SessionTimeout.Seconds()), "Sessions": link(s.cfg.Profile.sessionsPath())}
	})
	mux.HandleFunc("GET "+s.cfg.Profile.sessionsPath(), s.sessionCollection)
	mux.HandleFunc("POST "+s.cfg.Profile.sessionsPath(), s.createSession)
	mux.HandleFunc("GET "+s.cfg.Profile.sessionsPath()+"/{id}", s.getSession)
	mux.HandleFunc("DELETE "+s.cfg.Profile.sessionsPath()+"/{id}", s.deleteSession)

	if !s.cfg.Profile.NoUpdateService {
		s.updateRoutes(mux, static)
	}
	s.taskRoutes(mux, static)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "Base.1.8.ResourceMissingAtURI", fmt.Sprintf("The resource at the URI %s was not found.", r.URL.Path))
	})
}

// updateTargets are the SimpleUpdate Targets a BMC listing them (UpdateTargetsListed) takes.
var updateTargets = []string{firmwarePath + "/BIOS", firmwarePath + "/BMC"}

func (s *Server) updateRoutes(mux *http.ServeMux, static staticFunc) {
	static(updatePath, func() map[string]any {
		us := map[string]any{"@odata.id": updatePath, "@odata.type": "#UpdateService.v1_11_0.UpdateService", "Id": "UpdateService",
			"Name": "Update Service", "ServiceEnabled": true, "FirmwareInventory": link(firmwarePath),
			"Actions": map[string]any{"#UpdateService.SimpleUpdate": map[string]any{
				"target": updatePath + "/Actions/UpdateService.SimpleUpdate",
				"TransferProtocol@Redfish.AllowableValues": []string{"HTTP", "HTTPS"}}}}
		if s.cfg.Profile.UpdateTargetsListed {
			us["Actions"].(map[string]any)["#UpdateService.SimpleUpdate"].(map[string]any)["Targets@Redfish.AllowableValues"] = updateTargets
		}
		if s.cfg.Profile.PushUpdatesOnly {
			delete(us, "Actions")
			us["MultipartHttpPushUri"] = updatePath + "/upload"
		}
		return us
	})
	if s.cfg.Profile.PushUpdatesOnly {
		mux.HandleFunc("POST "+updatePath+"/upload", s.multipartPush)
	} else {
		mux.HandleFunc("POST "+updatePath+"/Actions/UpdateService.SimpleUpdate", s.simpleUpdate)
	}
	static(firmwarePath, func() map[string]any {
		return collection(firmwarePath, "#SoftwareInventoryCollection.SoftwareInventoryCollection", "Firmware Inventory",
			[]any{link(firmwarePath + "/BIOS"), link(firmwarePath + "/BMC")})
	})
	mux.HandleFunc("GET "+firmwarePath+"/{id}", s.firmware)
}

func (s *Server) taskRoutes(mux *http.ServeMux, static staticFunc) {
	static(rootPath+"/TaskService", func() map[string]any {
		return map[string]any{"@odata.id": rootPath + "/TaskService", "@odata.type": "#TaskService.v1_2_0.TaskService", "Id": "TaskService",
			"Name": "Task Service", "ServiceEnabled": true, "Tasks": link(tasksPath)}
	})
	mux.HandleFunc("GET "+tasksPath, s.taskCollection)
	mux.HandleFunc("GET "+tasksPath+"/{id}", s.getTask)
	mux.HandleFunc("GET "+monitorPrefix+"{id}", s.taskMonitor)
}

// withTrailingSlash serves /path/ like /path, as BMCs do.
func withTrailingSlash(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.URL.Path) > 1 && strings.HasSuffix(r.URL.Path, "/") && r.URL.Path != "/redfish/v1/" {
			r.URL.Path = strings.TrimSuffix(r.URL.Path, "/")
		} else if r.URL.Path == "/redfish/v1/" {
			r.URL.Path = rootPath
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) serviceRoot() map[string]any {
	root := map[string]any{
		"@odata.id": rootPath, "@odata.type": "#ServiceRoot.v1_15_0.ServiceRoot", "Id": "RootService",
		"Name": "Root Service", "RedfishVersion": "1.17.0", "UUID": s.state.uuid,
		"Systems": link(rootPath + "/Systems"), "Chassis": link(rootPath + "/Chassis"), "Managers": link(rootPath + "/Managers"),
		"SessionService": link(rootPath + "/SessionService"), "UpdateService": link(updatePath),
		"Tasks": link(rootPath + "/TaskService"), "Registries": link(rootPath + "/Registries"),
		"Links":                     map[string]any{"Sessions": link(s.cfg.Profile.sessionsPath())},
		"ProtocolFeaturesSupported": map[string]any{"ExpandQuery": map[string]any{"ExpandAll": false}},
	}
	if s.cfg.Profile.NoUpdateService {
		delete(root, "UpdateService")
	}
	return root
}

// bladeSystem is system i of a bladed BMC: its identity and power, nothing else.
func (s *Server) bladeSystem(i int) map[string]any {
	p := fmt.Sprintf("%s/Systems/%d", rootPath, i)
	return map[string]any{"@odata.id": p, "@odata.type": "#ComputerSystem.v1_20_0.ComputerSystem", "Id": fmt.Sprint(i), "Name": fmt.Sprintf("Blade %d", i),
		"SystemType": "Physical", "Manufacturer": "CAPRF", "Model": "SimBlade", "SerialNumber": fmt.Sprintf("SN-%s-%d", s.cfg.ID, i),
		"PowerState": s.bladePower(i), "Status": map[string]any{"State": "Enabled", "Health": "OK"},
		"Boot": map[string]any{"BootSourceOverrideEnabled": "Disabled", "BootSourceOverrideTarget": "None",
			"BootSourceOverrideTarget@Redfish.AllowableValues": []string{"None", "Pxe", "Hdd"}},
		"Actions": map[string]any{"#ComputerSystem.Reset": map[string]any{
			"target": p + "/Actions/ComputerSystem.Reset", "ResetType@Redfish.AllowableValues": []string{"On", "ForceOff", "ForceRestart"}}},
		"Links": map[string]any{"ManagedBy": []any{link(managerPath)}}}
}

func (s *Server) bladePower(i int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.blades[i] == "" {
		return PowerOff
	}
	return s.blades[i]
}

// resetBlade powers one of the other blades on or off (at once: nothing boots there).
func (s *Server) resetBlade(w http.ResponseWriter, r *http.Request) {
	var body struct{ ResetType string }
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || !oneOf(body.ResetType, "On", "ForceOff", "ForceRestart") {
		writeError(w, 400, "Base.1.8.ActionParameterNotSupported", "ResetType must be On, ForceOff or ForceRestart.")
		return
	}
	var i int
	_, _ = fmt.Sscan(r.PathValue("id"), &i)
	s.mu.Lock()
	s.blades[i] = map[bool]string{true: PowerOff, false: PowerOn}[body.ResetType == "ForceOff"]
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// simpleStorage lists the drives as SimpleStorage devices: no Drive resources, no erase.
func (s *Server) simpleStorage() map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	devices := []any{}
	for _, d := range s.state.drives {
		if d.absent {
			devices = append(devices, map[string]any{"Name": "Empty bay " + d.id, "Status": map[string]any{"State": "Absent"}})
			continue
		}
		devices = append(devices, map[string]any{"Name": d.id, "Model": d.model, "CapacityBytes": d.capacity,
			"Status": map[string]any{"State": "Enabled", "Health": "OK"}})
	}
	p := systemPath + "/SimpleStorage/1"
	return map[string]any{"@odata.id": p, "@odata.type": "#SimpleStorage.v1_3_1.SimpleStorage", "Id": "1", "Name": "Simple Storage Controller",
		"UefiDevicePath": "PciRoot(0x0)/Pci(0x17,0x0)", "Devices": devices, "Status": map[string]any{"State": "Enabled", "Health": "OK"}}
}

func (s *Server) system() map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.state
	power := st.power
	if s.Fault.powerInverted() {
		power = map[string]string{PowerOn: PowerOff, PowerOff: PowerOn, PowerPoweringOn: PowerOff, PowerPoweringOff: PowerOn}[power]
	}
	sys := map[string]any{
		"@odata.id": systemPath, "@odata.type": "#ComputerSystem.v1_20_0.ComputerSystem", "Id": "1", "Name": "System",
		"SystemType": "Physical", "Manufacturer": "CAPRF", "Model": "SimServer 1U", "SerialNumber": "SN-" + s.cfg.ID,
		"UUID": st.uuid, "HostName": "", "PowerState": power, "BiosVersion": st.biosVersion,
		"BootProgress":       bootProgress(st.bootProgress, st.bootProgressAt),
		"Status":             map[string]any{"State": "Enabled", "Health": "OK"},
		"ProcessorSummary":   map[string]any{"Count": 2, "CoreCount": 32, "Model": "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz"},
		"MemorySummary":      map[string]any{"TotalSystemMemoryGiB": 256},
		"Processors":         link(systemPath + "/Processors"),
		"Memory":             link(systemPath + "/Memory"),
		"EthernetInterfaces": link(systemPath + "/EthernetInterfaces"),
		"Storage":            link(systemPath + "/Storage"),
		"VirtualMedia":       link(systemPath + "/VirtualMedia"),
		"Bios":               link(biosPath),
		"Boot": map[string]any{
			"BootSourceOverrideEnabled":                         st.boot.enabled,
			"BootSourceOverrideTarget":                          st.boot.target,
			"BootSourceOverrideMode":                            st.boot.mode,
			"HttpBootUri":                                       st.boot.httpURI,
			"BootSourceOverrideTarget@Redfish.AllowableValues":  s.cfg.Profile.bootTargets(),
			"BootSourceOverrideEnabled@Redfish.AllowableValues": []string{"Disabled", "Once", "Continuous"},
			"BootSourceOverrideMode@Redfish.AllowableValues":    []string{"UEFI", "Legacy"},
		},
		"Actions": map[string]any{"#ComputerSystem.Reset": map[string]any{
			"target": resetTarget, "ResetType@Redfish.AllowableValues": resetTypes,
			"@Redfish.ActionInfo": systemPath + "/ResetActionInfo",
		}},
		"Links": map[string]any{"Chassis": []any{link(chassisPath)}, "ManagedBy": []any{link(managerPath)}},
	}
	pr := s.cfg.Profile
	if pr.BootOnlyInSettings {
		sys["@Redfish.Settings"] = map[string]any{"@odata.type": "#Settings.v1_3_5.Settings", "SettingsObject": link(systemPath + "/Settings")}
	}
	if pr.NoNICs {
		delete(sys, "EthernetInterfaces")
	}
	if pr.SimpleStorageOnly {
		delete(sys, "Storage")
		sys["SimpleStorage"] = link(systemPath + "/SimpleStorage")
	}
	if !pr.mediaUnderSystem() {
		delete(sys, "VirtualMedia")
	}
	if pr.NoBios {
		delete(sys, "Bios")
	}
	if pr.NoBootProgress {
		delete(sys, "BootProgress")
	}
	if pr.NoBootMode {
		boot := sys["Boot"].(map[string]any)
		delete(boot, "BootSourceOverrideMode")
		delete(boot, "BootSourceOverrideMode@Redfish.AllowableValues")
	}
	return sys
}

func (s *Server) patchSystem(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Boot *struct {
			BootSourceOverrideEnabled *string
			BootSourceOverrideTarget  *string
			BootSourceOverrideMode    *string
			HTTPBootURI               json.RawMessage `json:"HttpBootUri"` // null clears it
		}
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeError(w, 400, "Base.1.8.MalformedJSON", "The request body is not valid JSON.")
		return
	}
	if body.Boot != nil && s.cfg.Profile.BootOnlyInSettings && r.URL.Path == systemPath {
		writeError(w, 400, "Base.1.8.PropertyNotWritable", "The property Boot is a read-only property and cannot be assigned a value.")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := body.Boot; b != nil && time.Now().Before(s.state.postUntil) {
		writeError(w, 400, "iLO.2.14.UnableToModifyDuringSystemPOST", "The value for the property cannot be changed while the server is in POST.")
		return
	}
	if b := body.Boot; b != nil && s.cfg.Profile.BootPatchNeedsAll && (b.BootSourceOverrideEnabled == nil || b.BootSourceOverrideTarget == nil) {
		writeError(w, 400, "Base.1.8.PropertyMissing", "BootSourceOverrideEnabled and BootSourceOverrideTarget are required together.")
		return
	}
	if b := body.Boot; b != nil {
		next := s.state.boot
		if b.BootSourceOverrideEnabled != nil {
			if !oneOf(*b.BootSourceOverrideEnabled, "Disabled", "Once", "Continuous") {
				writeError(w, 400, "Base.1.8.PropertyValueNotInList", "BootSourceOverrideEnabled value not allowed.")
				return
			}
			next.enabled = *b.BootSourceOverrideEnabled
		}
		if b.BootSourceOverrideTarget != nil {
			if !oneOf(*b.BootSourceOverrideTarget, s.cfg.Profile.bootTargets()...) {
				writeError(w, 400, "Base.1.8.PropertyValueNotInList", "BootSourceOverrideTarget value not allowed.")
				return
			}
			next.target = *b.BootSourceOverrideTarget
		}
		if b.BootSourceOverrideMode != nil && s.cfg.Profile.NoBootMode {
			writeError(w, 400, "Base.1.8.PropertyUnknown", "The property BootSourceOverrideMode is not in the list of valid properties for the resource.")
			return
		}
		if b.BootSourceOverrideMode != nil {
			if !oneOf(*b.BootSourceOverrideMode, "UEFI", "Legacy") {
				writeError(w, 400, "Base.1.8.PropertyValueNotInList", "BootSourceOverrideMode value not allowed.")
				return
			}
			next.mode = *b.BootSourceOverrideMode
		}
		if len(b.HTTPBootURI) > 0 {
			var uri *string
			if err := json.Unmarshal(b.HTTPBootURI, &uri); err != nil {
				writeError(w, 400, "Base.1.8.PropertyValueTypeError", "HttpBootUri must be a string or null.")
				return
			}
			next.httpURI = ""
			if uri != nil {
				next.httpURI = *uri
			}
		}
		s.state.boot = next
	}
	w.WriteHeader(http.StatusNoContent)
}

// systemSettings is the system's settings object (iDRAC 10): the boot override it takes.
func (s *Server) systemSettings() map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.state.boot
	return map[string]any{"@odata.id": systemPath + "/Settings", "@odata.type": "#ComputerSystem.v1_20_0.ComputerSystem", "Id": "Settings",
		"Name": "System pending settings", "Boot": map[string]any{"BootSourceOverrideEnabled": b.enabled,
			"BootSourceOverrideTarget": b.target, "BootSourceOverrideMode": b.mode}}
}

func (s *Server) postReset(w http.ResponseWriter, r *http.Request) {
	var body struct{ ResetType string }
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeError(w, 400, "Base.1.8.MalformedJSON", "The request body is not valid JSON.")
		return
	}
	if s.Fault.takeConflict() {
		writeError(w, http.StatusConflict, "Base.1.8.ResourceInUse", "The change could not be made because the resource is in use or in transition.")
		return
	}
	s.mu.Lock()
	code, msg := s.reset(body.ResetType)
	s.mu.Unlock()
	switch code {
	case 204:
		w.WriteHeader(http.StatusNoContent)
	case 409:
		writeError(w, code, "Base.1.8.ResourceInUse", msg)
	default:
		writeError(w, code, "Base.1.8.ActionParameterNotSupported", msg)
	}
}

func (s *Server) processor(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if id != "CPU1" && id != "CPU2" {
		writeError(w, 404, "Base.1.8.ResourceMissingAtURI", "No such processor.")
		return
	}
	writeJSON(w, 200, map[string]any{"@odata.id": systemPath + "/Processors/" + id, "@odata.type": "#Processor.v1_18_0.Processor",
		"Id": id, "Name": id, "Socket": id, "ProcessorType": "CPU", "ProcessorArchitecture": "x86", "InstructionSet": "x86-64",
		"Manufacturer": "Intel(R) Corporation", "Model": "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz",
		"TotalCores": 16, "TotalThreads": 32, "MaxSpeedMHz": 3200, "Status": map[string]any{"State": "Enabled", "Health": "OK"}})
}

func (s *Server) memory(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if id == "DIMM9" || id == "DIMM10" {
		// An empty slot, as BMCs list them.
		writeJSON(w, 200, map[string]any{"@odata.id": systemPath + "/Memory/" + id, "@odata.type": "#Memory.v1_17_0.Memory",
			"Id": id, "Name": id, "Status": map[string]any{"State": "Absent"}})
		return
	}
	writeJSON(w, 200, map[string]any{"@odata.id": systemPath + "/Memory/" + id, "@odata.type": "#Memory.v1_17_0.Memory",
		"Id": id, "Name": id, "CapacityMiB": 32768, "MemoryDeviceType": "DDR4", "OperatingSpeedMhz": 3200,
		"Manufacturer": "Samsung", "SerialNumber": fmt.Sprintf("%s-%s", s.cfg.ID, id), "PartNumber": "M393A4K40DB3-CWE",
		"Status": map[string]any{"State": "Enabled", "Health": "OK"}})
}

func (s *Server) nic(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	extra := s.cfg.Profile.ExtraInterfaces
	p := systemPath + "/EthernetInterfaces/" + id
	nic := func(mac string) map[string]any {
		return map[string]any{"@odata.id": p, "@odata.type": "#EthernetInterface.v1_9_0.EthernetInterface", "Id": id, "Name": id,
			"MACAddress": mac, "SpeedMbps": 25000, "LinkStatus": "LinkUp", "Status": map[string]any{"State": "Enabled", "Health": "OK"}}
	}
	switch i, physical := map[string]int{"NIC1": 0, "NIC2": 1}[id]; {
	case physical && extra:
		res := nic(s.bondMAC())
		res["PermanentMACAddress"], res["EthernetInterfaceType"] = s.state.macs[i], "Physical"
		writeJSON(w, 200, res)
	case physical:
		res := nic(s.state.macs[i])
		res["PermanentMACAddress"] = s.state.macs[i]
		writeJSON(w, 200, res)
	case extra && id == "NIC1.100":
		res := nic(s.bondMAC())
		res["EthernetInterfaceType"], res["VLAN"] = "Virtual", map[string]any{"VLANEnable": true, "VLANId": 100}
		writeJSON(w, 200, res)
	case extra && id == "HostInterface":
		// As Dell-, Lenovo- and Supermicro-shaped services list it: untyped, known only by its
		// link to the manager's HostInterface.
		res := nic("02:00:5e:10:00:01")
		res["Name"], res["Description"] = "Manager Network Interface", "Redfish host interface to the BMC"
		res["Links"] = map[string]any{"HostInterface": link(managerPath + "/HostInterfaces/1")}
		writeJSON(w, 200, res)
	default:
		writeError(w, 404, "Base.1.8.ResourceMissingAtURI", "No such interface.")
	}
}

// bondMAC is the MAC address the OS gave a bond of the NICs: what MACAddress reports on BMCs
// that show the running address, not the permanent one.
func (s *Server) bondMAC() string {
	return "02" + s.state.macs[0][2:]
}

func (s *Server) storage() map[string]any {
	drives := []any{}
	for _, d := range s.state.drives {
		drives = append(drives, link(storagePath+"/Drives/"+d.id))
	}
	return map[string]any{"@odata.id": storagePath, "@odata.type": "#Storage.v1_15_0.Storage", "Id": "1", "Name": "Storage Controller",
		"Drives": drives, "Drives@odata.count": len(drives), "Status": map[string]any{"State": "Enabled", "Health": "OK"}}
}

func (s *Server) findDrive(id string) *drive {
	for _, d := range s.state.drives {
		if d.id == id {
			return d
		}
	}
	return nil
}

func (s *Server) drive(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.findDrive(r.PathValue("id"))
	if d == nil {
		writeError(w, 404, "Base.1.8.ResourceMissingAtURI", "No such drive.")
		return
	}
	p := storagePath + "/Drives/" + d.id
	if d.absent {
		writeJSON(w, 200, map[string]any{"@odata.id": p, "@odata.type": "#Drive.v1_17_0.Drive", "Id": d.id, "Name": "Empty bay " + d.id,
			"Status": map[string]any{"State": "Absent"}})
		return
	}
	res := map[string]any{"@odata.id": p, "@odata.type": "#Drive.v1_17_0.Drive", "Id": d.id, "Name": d.id,
		"Model": d.model, "SerialNumber": d.serial, "CapacityBytes": d.capacity, "MediaType": "SSD", "Protocol": "SATA",
		"Manufacturer": "Samsung", "Identifiers": []any{map[string]any{"DurableName": strings.ToUpper(d.wwn), "DurableNameFormat": "NAA"}},
		"Status": map[string]any{"State": "Enabled", "Health": "OK"}}
	if !s.cfg.NoSecureErase && !d.noSecureErase {
		res["Actions"] = map[string]any{"#Drive.SecureErase": map[string]any{"target": p + "/Actions/Drive.SecureErase"}}
	}
	if d.erasing {
		res["Operations"] = []any{map[string]any{"OperationName": "Sanitize", "PercentageComplete": 50}}
	}
	writeJSON(w, 200, res)
}

// secureErase starts an asynchronous erase, as real drives do (minutes to hours): 202 with a task
// monitor; the drive counts as erased when the task completes.
func (s *Server) secureErase(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.findDrive(r.PathValue("id"))
	if d == nil || s.cfg.NoSecureErase || d.noSecureErase || d.absent {
		writeError(w, 404, "Base.1.8.ResourceMissingAtURI", "No such drive or action.")
		return
	}
	if d.erasing {
		writeError(w, http.StatusConflict, "Base.1.8.ResourceInUse", "The drive is being erased.")
		return
	}
	d.erasing = true
	s.nextID++
	t := &task{id: fmt.Sprintf("%d", s.nextID), state: TaskRunning, start: time.Now(), target: "Erase " + d.id,
		message: "Secure erase of " + d.id + " started.", eraseTarget: r.URL.Path}
	if !s.cfg.EraseWithoutMonitor {
		s.tasks[t.id] = t
	}
	s.after(s.cfg.EraseDuration, func() {
		d.erasing, d.erased = false, d.erased+1
		s.zeroDrive(d)
		t.state, t.end, t.percent = TaskCompleted, time.Now(), 100
		t.message = "Secure erase of " + d.id + " completed."
	})
	if s.cfg.EraseWithoutMonitor {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	w.Header().Set("Location", monitorPrefix+t.id)
	w.Header().Set("Retry-After", "1")
	writeJSON(w, http.StatusAccepted, t.resource())
}

func (s *Server) manager() map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := map[string]any{"@odata.id": managerPath, "@odata.type": "#Manager.v1_19_0.Manager", "Id": "BMC", "Name": "Manager",
		"ManagerType": "BMC", "FirmwareVersion": s.state.bmcVersion, "UUID": s.state.uuid,
		"Status":       map[string]any{"State": "Enabled", "Health": "OK"},
		"VirtualMedia": link(managerPath + "/VirtualMedia"),
		"Links":        map[string]any{"ManagerForServers": []any{link(systemPath)}, "ManagerForChassis": []any{link(chassisPath)}}}
	if !s.cfg.Profile.mediaUnderManager() {
		delete(m, "VirtualMedia")
	}
	return m
}

func (s *Server) mediaLinks() []any {
	links := make([]any, 0, len(s.state.media))
	for _, slot := range s.state.media {
		links = append(links, link(mediaRoot+"/"+slot.id))
	}
	return links
}

func (s *Server) virtualMedia(slot *mediaSlot) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := mediaRoot + "/" + slot.id
	var image any
	name := ""
	if slot.inserted || (s.cfg.Profile.NoMediaActions && slot.image != "") {
		image = slot.image
		name = slot.image[strings.LastIndex(slot.image, "/")+1:]
	}
	res := map[string]any{"@odata.id": p, "@odata.type": "#VirtualMedia.v1_6_0.VirtualMedia", "Id": slot.id, "Name": slot.name,
		"MediaTypes": slot.types, "Image": image, "ImageName": name, "Inserted": slot.inserted,
		"WriteProtected": true, "ConnectedVia": map[bool]string{true: "URI", false: "NotConnected"}[slot.inserted],
		"TransferProtocolType": "HTTP",
		"Actions": map[string]any{
			"#VirtualMedia.InsertMedia": map[string]any{"target": p + "/Actions/VirtualMedia.InsertMedia"},
			"#VirtualMedia.EjectMedia":  map[string]any{"target": p + "/Actions/VirtualMedia.EjectMedia"},
		}}
	if s.cfg.Profile.NoMediaActions {
		delete(res, "Actions")
	}
	return res
}

func (s *Server) insertMedia(w http.ResponseWriter, r *http.Request, slot *mediaSlot) {
	var raw map[string]json.RawMessage
	var body struct {
		Image    string
		Inserted *bool
	}
	data, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if json.Unmarshal(data, &raw) != nil || json.Unmarshal(data, &body) != nil || body.Image == "" {
		writeError(w, 400, "Base.1.8.ActionParameterMissing", "The action InsertMedia requires the parameter Image.")
		return
	}
	if s.cfg.Profile.StrictMediaPayload {
		for _, p := range []string{"Inserted", "WriteProtected"} {
			if _, ok := raw[p]; ok {
				writeError(w, 400, "Base.1.8.ActionParameterUnknown", "The action InsertMedia was submitted with the invalid parameter "+p+".")
				return
			}
		}
		if _, ok := raw["TransferProtocolType"]; !ok {
			// As Supermicro answers (an older Base registry, the property named in
			// RelatedProperties, which is what sushy looks for).
			writeErrorAbout(w, 400, "Base.1.5.ActionParameterMissing", "The action InsertMedia requires the parameter TransferProtocolType to be present in the request body.", "#/TransferProtocolType")
			return
		}
	}
	if s.Fault.takeRejectMedia() {
		writeError(w, 400, "Base.1.8.ActionParameterValueFormatError", "The value '"+body.Image+"' for the parameter Image in the action InsertMedia is of a different format than the parameter can accept.")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if slot.inserted {
		writeError(w, http.StatusConflict, "Base.1.8.ResourceInUse", "Media is already inserted; eject it first.")
		return
	}
	slot.image, slot.inserted = body.Image, true
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) ejectMedia(w http.ResponseWriter, _ *http.Request, slot *mediaSlot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	slot.image, slot.inserted = "", false
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) patchVirtualMedia(w http.ResponseWriter, r *http.Request, slot *mediaSlot) {
	var body struct {
		Image    json.RawMessage // a string, or null to clear it
		Inserted *bool
	}
	var image *string
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || (len(body.Image) > 0 && json.Unmarshal(body.Image, &image) != nil) {
		writeError(w, 400, "Base.1.8.MalformedJSON", "The request body is not valid JSON.")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(body.Image) > 0 {
		slot.image = ""
		if image != nil {
			slot.image = *image
		}
		slot.inserted = slot.image != ""
	}
	if body.Inserted != nil {
		slot.inserted = *body.Inserted && slot.image != ""
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) biosResource() map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	attrs := map[string]any{}
	for k, v := range s.state.bios {
		attrs[k] = v
	}
	settings := map[string]any{"@odata.type": "#Settings.v1_3_5.Settings",
		"SettingsObject": link(s.cfg.Profile.biosSettingsLink()), "SupportedApplyTimes": []string{"OnReset"}}
	if s.cfg.Profile.NoApplyTime {
		delete(settings, "SupportedApplyTimes")
	}
	return map[string]any{"@odata.id": biosPath, "@odata.type": "#Bios.v1_2_1.Bios", "Id": "Bios", "Name": "BIOS Configuration",
		"AttributeRegistry": s.cfg.Profile.biosRegistryName(), "Attributes": attrs, "@Redfish.Settings": settings,
		"Actions": map[string]any{"#Bios.ResetBios": map[string]any{"target": biosPath + "/Actions/Bios.ResetBios"}}}
}

func (s *Server) biosSettings() map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	attrs := map[string]any{}
	for k, v := range s.state.pendingBios {
		attrs[k] = v
	}
	return map[string]any{"@odata.id": s.cfg.Profile.biosSettingsLink(), "@odata.type": "#Bios.v1_2_1.Bios", "Id": "Settings",
		"Name": "BIOS Pending Settings", "AttributeRegistry": s.cfg.Profile.biosRegistryName(), "Attributes": attrs}
}

func (s *Server) patchBiosSettings(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Attributes map[string]any
		ApplyTime  json.RawMessage `json:"@Redfish.SettingsApplyTime"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeError(w, 400, "Base.1.8.MalformedJSON", "The request body is not valid JSON.")
		return
	}
	if len(body.ApplyTime) > 0 && s.cfg.Profile.NoApplyTime {
		writeError(w, 400, "Base.1.8.PropertyUnknown", "The property @Redfish.SettingsApplyTime is not in the list of valid properties for the resource.")
		return
	}
	for k, v := range body.Attributes {
		if id, msg := validateBios(k, v); id != "" {
			writeError(w, 400, id, msg)
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range body.Attributes {
		s.state.pendingBios[k] = v
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) firmware(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.mu.Lock()
	version := map[string]string{"BIOS": s.state.biosVersion, "BMC": s.state.bmcVersion}[id]
	s.mu.Unlock()
	if version == "" {
		writeError(w, 404, "Base.1.8.ResourceMissingAtURI", "No such firmware.")
		return
	}
	writeJSON(w, 200, map[string]any{"@odata.id": firmwarePath + "/" + id, "@odata.type": "#SoftwareInventory.v1_10_0.SoftwareInventory",
		"Id": id, "Name": id + " firmware", "Version": version, "Updateable": true,
		"Status": map[string]any{"State": "Enabled", "Health": "OK"}})
}

func oneOf(v string, allowed ...string) bool {
	for _, a := range allowed {
		if v == a {
			return true
		}
	}
	return false
}

func bootProgress(state string, at time.Time) map[string]any {
	if state == "" {
		state = "None"
	}
	p := map[string]any{"LastState": state}
	if !at.IsZero() {
		p["LastStateTime"] = at.UTC().Format(time.RFC3339Nano)
	}
	return p
}
