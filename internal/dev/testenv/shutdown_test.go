package testenv

import (
	"strings"
	"testing"
	"time"
)

// Goroutines as runtime/pprof's goroutine profile (debug=2) prints them.
const (
	doneBlock = `goroutine 7 [sync.Mutex.Lock, 3 minutes]:
internal/sync.runtime_SemacquireMutex(0xc000a1b2c4?, 0x0?, 0x0?)
	/usr/local/go/src/runtime/sema.go:95 +0x25
sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue.(*priorityqueue[...]).Done(0xc000123450, {0xc0001, 0x2})
	/root/go/pkg/mod/sigs.k8s.io/controller-runtime@v0.24.1/pkg/controller/priorityqueue/priorityqueue.go:468 +0x55
sigs.k8s.io/controller-runtime/pkg/internal/controller.(*Controller[...]).processNextWorkItem(0xc0002, {0x5, 0xc0003})
	/root/go/pkg/mod/sigs.k8s.io/controller-runtime@v0.24.1/pkg/internal/controller/controller.go:438 +0x221`
	sendBlock = `goroutine 12 [chan send]:
sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue.(*priorityqueue[...]).handleReadyItems.func1.1(0xc0004)
	/root/go/pkg/mod/sigs.k8s.io/controller-runtime@v0.24.1/pkg/controller/priorityqueue/priorityqueue.go:400 +0x28c
sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue.(*priorityqueue[...]).handleReadyItems(0xc0005)
	/root/go/pkg/mod/sigs.k8s.io/controller-runtime@v0.24.1/pkg/controller/priorityqueue/priorityqueue.go:408 +0x28`
	liveQueue = `goroutine 13 [select]:
sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue.(*priorityqueue[...]).handleReadyItems(0xc0006)
	/root/go/pkg/mod/sigs.k8s.io/controller-runtime@v0.24.1/pkg/controller/priorityqueue/priorityqueue.go:360 +0x28`
	reconciling = `goroutine 20 [IO wait]:
github.com/caprf/cluster-api-provider-redfish/controllers/host.(*Reconciler).Reconcile(0xc0007, {0x5, 0xc0008}, {{{0xc0009, 0x4}, {0xc000a, 0x6}}})
	/work/main/controllers/host/controller.go:230 +0x1a5
sigs.k8s.io/controller-runtime/pkg/internal/controller.(*Controller[...]).reconcileHandler(0xc0002, {0x5, 0xc0003})
	/root/go/pkg/mod/sigs.k8s.io/controller-runtime@v0.24.1/pkg/internal/controller/controller.go:480 +0x1b`
)

func dumpOf(goroutines ...string) func() string {
	return func() string { return strings.Join(goroutines, "\n\n") }
}

func TestAStopCountsOnlyShutdownBlocksItLeftItself(t *testing.T) {
	before, _ := goroutinesAtShutdown(dumpOf(doneBlock, liveQueue)())
	if len(before) != 1 || !before["7"] {
		t.Fatalf("blocks before the stop: %v, want goroutine 7 only (a queue waiting in its select is live)", before)
	}
	if err := knownShutdownBlockIn(dumpOf(doneBlock, liveQueue), before, 0); err == nil {
		t.Error("an earlier manager's block let a stop that left none of its own through")
	}
	if err := knownShutdownBlockIn(dumpOf(doneBlock, sendBlock), before, 0); err != nil {
		t.Errorf("a new block was not recognised: %v", err)
	}
}

func TestAStopWaitsForTheReconcilesStillRunning(t *testing.T) {
	err := knownShutdownBlockIn(dumpOf(sendBlock, reconciling), map[string]bool{}, 0)
	if err == nil || !strings.Contains(err.Error(), "controllers/host.(*Reconciler).Reconcile") {
		t.Errorf("a reconcile still running: %v, want an error naming it", err)
	}
	dumps := 0
	endsAfterTwoLooks := func() string {
		dumps++
		if dumps <= 2 {
			return dumpOf(sendBlock, reconciling)()
		}
		return dumpOf(sendBlock)()
	}
	if err := knownShutdownBlockIn(endsAfterTwoLooks, map[string]bool{}, 10*time.Second); err != nil {
		t.Errorf("a reconcile that ended within the drain: %v", err)
	}
}
