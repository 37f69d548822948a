package shutdown

import (
	"context"
	"errors"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func TestOnlyAnErrorAfterTheManagerStoppedIsDropped(t *testing.T) {
	failed := errors.New("failed to patch RedfishHost rack/server-1: context canceled")
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	timedOut, cancelTimeout := context.WithTimeout(t.Context(), time.Nanosecond)
	defer cancelTimeout()
	<-timedOut.Done()

	for _, c := range []struct {
		name    string
		ctx     context.Context
		err     error
		wantErr bool
	}{
		{"an error while the manager runs is returned", t.Context(), failed, true},
		{"an error once the manager stopped is dropped", canceled, failed, false},
		{"an error after a reconcile timed out is returned", timedOut, failed, true},
		{"no error once the manager stopped stays no error", canceled, nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := Quiet[reconcile.Request](reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
				return reconcile.Result{RequeueAfter: time.Second}, c.err
			}))
			res, err := r.Reconcile(c.ctx, reconcile.Request{})
			if (err != nil) != c.wantErr {
				t.Fatalf("error %v, want an error: %t", err, c.wantErr)
			}
			if err == nil && c.err != nil && res != (reconcile.Result{}) {
				t.Errorf("a dropped error kept its result %+v", res)
			}
			if c.err == nil && res.RequeueAfter != time.Second {
				t.Errorf("the result was lost: %+v", res)
			}
		})
	}
}
