package bmc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/stmcginnis/gofish/schemas"
)

// TaskGone is the State of a task the BMC no longer knows (its outcome is unknown).
const TaskGone = "Gone"

// Task is the progress of an asynchronous BMC operation.
type Task struct {
	URI     string
	State   string // New, Running, Completed, Exception, Killed, Cancelled, …
	Percent int
	Message string
	Done    bool // finished, successfully or not
	Failed  bool
}

// TaskStatus reads a task monitor (or task) the way Redfish defines it: 202 while the operation
// runs; once it ended, the operation's own answer (often 204 without a body) or, for a Task
// resource, its final TaskState; 404 once the BMC forgot a finished monitor.
func (c *client) TaskStatus(ctx context.Context, uri string) (*Task, error) {
	if uri == "" {
		return nil, errors.New("no task URI to read")
	}
	ctx, cancel := c.call(ctx)
	defer cancel()
	resp, err := c.with(ctx).Get(uri)
	if err != nil {
		var re *schemas.Error
		if errors.As(err, &re) {
			switch code := re.HTTPReturnedStatusCode; {
			case code == http.StatusNotFound:
				// Forgotten: the outcome is unknown, so it counts as failed (fail closed).
				return &Task{URI: uri, State: TaskGone, Done: true, Failed: true, Message: "the BMC no longer knows this task; its outcome is unknown"}, nil
			case code >= 400 && code != http.StatusUnauthorized && code != http.StatusForbidden && code != http.StatusServiceUnavailable:
				// The operation's own (failed) answer.
				return &Task{URI: uri, State: string(schemas.ExceptionTaskState), Done: true, Failed: true, Message: Redact(re.Message)}, nil
			}
		}
		return nil, fmt.Errorf("reading task %s: %w", uri, classify(err))
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("reading task %s: %w", uri, classify(err))
	}
	t := &schemas.Task{}
	if len(body) == 0 || json.Unmarshal(body, t) != nil || t.TaskState == "" {
		// Not a Task: the operation's own answer once it ended, or a bare 202 while it runs.
		if resp.StatusCode == http.StatusAccepted {
			return &Task{URI: uri, State: string(schemas.RunningTaskState)}, nil
		}
		return &Task{URI: uri, State: string(schemas.CompletedTaskState), Done: true}, nil
	}
	out := &Task{URI: uri, State: string(t.TaskState)}
	if t.PercentComplete != nil {
		out.Percent = int(*t.PercentComplete)
	}
	if len(t.Messages) > 0 {
		out.Message = Redact(t.Messages[len(t.Messages)-1].Message) // it may echo the image URL
	}
	switch t.TaskState {
	case schemas.CompletedTaskState:
		// "Completed" with a Critical status is a failure (a BMC that rejected the image after
		// taking it says so this way).
		out.Done, out.Failed = true, t.TaskStatus == schemas.CriticalHealth
	case schemas.ExceptionTaskState, schemas.KilledTaskState, schemas.CancelledTaskState:
		out.Done, out.Failed = true, true
	}
	return out, nil
}

// taskOf reads where an accepted action's progress is followed, and closes the answer: the Task
// named in its body (it outlives the monitor on most BMCs and keeps the final state), else the
// task monitor in its Location header (made relative: the client prefixes the BMC's address
// itself); "" when the BMC named neither (it finished, or accepted without a monitor).
func taskOf(resp *http.Response) string {
	defer func() { _ = resp.Body.Close() }()
	var task struct {
		ID string `json:"@odata.id"`
	}
	_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&task)
	if strings.Contains(task.ID, "/Tasks/") {
		return task.ID
	}
	monitor := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusAccepted || monitor == "" {
		return ""
	}
	if u, err := url.Parse(monitor); err == nil && u.IsAbs() {
		monitor = u.RequestURI()
	}
	return monitor
}
