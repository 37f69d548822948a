package simulator

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path"
	"slices"
	"strings"
	"time"
)

// Task states as Redfish reports them.
const (
	TaskRunning   = "Running"
	TaskCompleted = "Completed"
	TaskException = "Exception"
)

type task struct {
	id       string
	state    string
	percent  int
	message  string
	start    time.Time
	end      time.Time
	target   string // BIOS or BMC
	version  string
	imageURI string
	echo     string // appended to every message (Faults.EchoUpdateCredentials)
	critical bool   // ends Completed with TaskStatus Critical: the BMC rejected the image (Faults.FailUpdates)
	// eraseTarget is the SecureErase action of the drive an erase task erases.
	eraseTarget string
}

func (t *task) name() string {
	if strings.HasPrefix(t.target, "Erase ") {
		return "Secure erase " + strings.TrimPrefix(t.target, "Erase ")
	}
	return "Firmware update " + t.target
}

func (t *task) resource() map[string]any {
	status := map[string]string{TaskRunning: "OK", TaskCompleted: "OK", TaskException: "Critical"}[t.state]
	if t.state == TaskCompleted && t.critical {
		status = "Critical"
	}
	r := map[string]any{
		"@odata.id": tasksPath + "/" + t.id, "@odata.type": "#Task.v1_7_1.Task", "Id": t.id, "Name": t.name(),
		"TaskState": t.state, "TaskStatus": status, "PercentComplete": t.percent,
		"StartTime": t.start.UTC().Format(time.RFC3339), "TaskMonitor": monitorPrefix + t.id,
		"Messages": []any{map[string]any{"MessageId": "Update.1.0.UpdateInProgress", "Message": t.message + t.echo}},
	}
	if !t.end.IsZero() {
		r["EndTime"] = t.end.UTC().Format(time.RFC3339)
	}
	// The request that started the task, as Redfish records it.
	r["Payload"] = map[string]any{"TargetUri": updatePath + "/Actions/UpdateService.SimpleUpdate", "HttpOperation": "POST"}
	if strings.HasPrefix(t.target, "Erase ") {
		r["Payload"] = map[string]any{"TargetUri": t.eraseTarget, "HttpOperation": "POST"}
	}
	return r
}

// simpleUpdate accepts UpdateService.SimpleUpdate. The target is BMC when Targets names the
// manager or its firmware inventory entry, BIOS otherwise; the new version is the image file name
// without its extension.
func (s *Server) simpleUpdate(w http.ResponseWriter, r *http.Request) {
	var body struct {
		ImageURI         string
		TransferProtocol string
		Targets          []string
		Username         string
		Password         string
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.ImageURI == "" {
		writeError(w, 400, "Base.1.8.ActionParameterMissing", "The action SimpleUpdate requires the parameter ImageURI.")
		return
	}
	if s.cfg.Profile.UpdateTargetsListed {
		for _, t := range body.Targets {
			if !slices.Contains(updateTargets, t) {
				writeError(w, 400, "Base.1.8.ActionParameterValueNotInList", fmt.Sprintf("The value %s for the parameter Targets is not in the list of acceptable values.", t))
				return
			}
		}
	}
	s.mu.Lock()
	s.stats.ImageUsers = append(s.stats.ImageUsers, body.Username)
	s.mu.Unlock()
	echo := ""
	if s.Fault.echoesUpdateCredentials() && body.Username != "" {
		echo = " (image fetched as user " + body.Username + " with password " + body.Password + ")"
	}
	s.startUpdate(w, updateTarget(body.Targets), body.ImageURI, body.ImageURI, echo)
}

// updateTarget is BMC when targets name the manager or its firmware inventory entry, BIOS
// otherwise.
func updateTarget(targets []string) string {
	for _, t := range targets {
		if strings.Contains(t, "/Managers/") || strings.HasSuffix(t, "/BMC") {
			return "BMC"
		}
	}
	return "BIOS"
}

// startUpdate starts a firmware task and answers for it; the new version is the image's file
// name without its extension.
func (s *Server) startUpdate(w http.ResponseWriter, target, image, source, echo string) {
	version := strings.TrimSuffix(path.Base(image), path.Ext(image))
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.tasks {
		if t.state == TaskRunning && t.target == target {
			s.stats.UpdatesRefusedBusy++
			writeError(w, http.StatusConflict, "Base.1.8.ResourceInUse", "An update of "+target+" is already running.")
			return
		}
	}
	s.nextID++
	t := &task{id: fmt.Sprintf("%d", s.nextID), state: TaskRunning, start: time.Now(), target: target,
		version: version, imageURI: source, message: "Update of " + target + " to " + version + " started.", echo: echo,
		critical: s.Fault.takeFailUpdate()}
	s.tasks[t.id] = t
	s.stats.SimpleUpdates++
	step := s.cfg.TaskDuration / 4
	for i := 1; i <= 4; i++ {
		s.after(time.Duration(i)*step, func() { s.progress(t, i) })
	}
	if s.cfg.Profile.UpdateWithoutMonitor {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	w.Header().Set("Location", monitorPrefix+t.id)
	w.Header().Set("Retry-After", "1")
	if s.cfg.Profile.MonitorOnly {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	writeJSON(w, http.StatusAccepted, t.resource())
}

// multipartPush accepts an image pushed to the UpdateService's MultipartHttpPushUri: a
// multipart/form-data body with UpdateParameters (JSON, Targets) and UpdateFile (the image).
func (s *Server) multipartPush(w http.ResponseWriter, r *http.Request) {
	// One upload at a time, as BMCs take them: a second one while an image is being received is
	// refused.
	s.mu.Lock()
	if s.pushing {
		s.stats.UpdatesRefusedBusy++
		s.mu.Unlock()
		writeError(w, http.StatusConflict, "Base.1.8.ResourceInUse", "An image is already being uploaded.")
		return
	}
	s.pushing = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.pushing = false
		s.mu.Unlock()
	}()
	if err := r.ParseMultipartForm(8 << 20); err != nil {
		writeError(w, 400, "Base.1.8.MalformedJSON", "The request is not multipart/form-data: "+err.Error())
		return
	}
	defer func() { _ = r.MultipartForm.RemoveAll() }()
	var params struct{ Targets []string }
	if err := json.Unmarshal([]byte(r.FormValue("UpdateParameters")), &params); err != nil {
		writeError(w, 400, "Base.1.8.ActionParameterMissing", "The part UpdateParameters is missing or not JSON.")
		return
	}
	files := r.MultipartForm.File["UpdateFile"]
	if len(files) != 1 || files[0].Size == 0 {
		writeError(w, 400, "Base.1.8.ActionParameterMissing", "The part UpdateFile is missing or empty.")
		return
	}
	s.mu.Lock()
	s.stats.PushedBytes += files[0].Size
	s.mu.Unlock()
	s.startUpdate(w, updateTarget(params.Targets), files[0].Filename, "pushed:"+files[0].Filename, "")
}

// progress moves a task one quarter forward. Caller holds s.mu.
func (s *Server) progress(t *task, quarter int) {
	if t.state != TaskRunning {
		return
	}
	t.percent = quarter * 25
	if quarter < 4 {
		return
	}
	t.state, t.end = TaskCompleted, time.Now()
	if !t.critical {
		s.stats.UpdatesCompleted++
	}
	if purge := s.cfg.Profile.PurgeTasksAfter; purge > 0 {
		s.after(purge, func() { delete(s.tasks, t.id) })
	}
	if t.critical {
		t.message = "The image for " + t.target + " was rejected after transfer: " + t.version + " is not applicable."
		return
	}
	t.message = "Update of " + t.target + " to " + t.version + " completed."
	if t.target == "BMC" {
		s.state.bmcVersion = t.version
		// A BMC reboots into new firmware: sessions are gone and it is briefly unavailable.
		s.sessions = map[string]*session{}
		s.Fault.setUnavailable(s.cfg.TaskDuration / 4)
	} else {
		// A BIOS image is staged: the host's next boot (its POST) flashes it, as on real servers;
		// until then the inventory reports the old version.
		s.state.pendingBiosVersion = t.version
	}
}

// ResetBMC simulates the BMC rebooting: it answers 503 for d, forgets every session, and any
// running firmware task ends in Exception.
func (s *Server) ResetBMC(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sessions = map[string]*session{}
	for _, t := range s.tasks {
		if t.state == TaskRunning {
			t.state, t.end, t.message = TaskException, time.Now(), "The BMC was reset while the update was running."
			if t.eraseTarget == "" {
				s.stats.UpdatesInterrupted++
			}
		}
	}
	s.Fault.setUnavailable(d)
}

func (s *Server) taskCollection(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	members := make([]any, 0, len(s.tasks))
	for id := range s.tasks {
		members = append(members, link(tasksPath+"/"+id))
	}
	s.mu.Unlock()
	writeJSON(w, 200, collection(tasksPath, "#TaskCollection.TaskCollection", "Tasks", members))
}

func (s *Server) getTask(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tasks[r.PathValue("id")]
	if !ok {
		writeError(w, 404, "Base.1.8.ResourceMissingAtURI", "No such task.")
		return
	}
	writeJSON(w, 200, t.resource())
}

// taskMonitor answers 202 with the task while it runs, then the task with 200 once it ended.
func (s *Server) taskMonitor(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tasks[r.PathValue("id")]
	if !ok {
		writeError(w, 404, "Base.1.8.ResourceMissingAtURI", "No such task monitor.")
		return
	}
	if t.state == TaskRunning {
		w.Header().Set("Location", monitorPrefix+t.id)
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusAccepted, t.resource())
		return
	}
	if strings.HasPrefix(t.target, "Erase ") {
		// As Redfish defines a finished monitor: the operation's own answer (SecureErase: 204).
		w.WriteHeader(http.StatusNoContent)
		return
	}
	writeJSON(w, 200, t.resource())
}

// updating says whether a firmware update runs or an image is being pushed. Caller holds s.mu.
func (s *Server) updating() bool {
	if s.pushing {
		return true
	}
	for _, t := range s.tasks {
		if t.state == TaskRunning && !strings.HasPrefix(t.target, "Erase ") {
			return true
		}
	}
	return false
}
