// Package apireads counts the reads that reach a test's API server (a fake client standing for
// it): tests of what a controller reads from the cache rather than the API server use it.
package apireads

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Counter counts the Gets and Lists made through it.
type Counter struct {
	client.Reader
	Gets, Lists int
}

func (c *Counter) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.Gets++
	return c.Reader.Get(ctx, key, obj, opts...)
}

func (c *Counter) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	c.Lists++
	return c.Reader.List(ctx, list, opts...)
}
