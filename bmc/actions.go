package bmc

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/stmcginnis/gofish/schemas"
)

// actionTarget reads the target URI of an action from a resource's raw JSON; without one, the
// conventional <resource>/Actions/<Action>.
func actionTarget(raw []byte, action, resource string) string {
	var res struct {
		Actions map[string]struct {
			Target string `json:"target"`
		}
	}
	_ = json.Unmarshal(raw, &res)
	if t := res.Actions[action].Target; t != "" {
		return t
	}
	return resource + "/Actions/" + strings.TrimPrefix(action, "#")
}

// offersAction says whether a resource's raw JSON lists the action.
func offersAction(raw []byte, action string) bool {
	var res struct {
		Actions map[string]json.RawMessage
	}
	_ = json.Unmarshal(raw, &res)
	_, ok := res.Actions[action]
	return ok
}

// send makes one request with a JSON body and no If-Match, and drains the answer. Actions go out
// without If-Match: iDRAC refuses an action that carries one (412), and gofish would add it.
func (c *client) send(ctx context.Context, method, uri string, payload any) error {
	resp, err := c.request(ctx, method, uri, payload)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	return nil
}

// request is send returning the answer, for a caller that reads its headers.
func (c *client) request(ctx context.Context, method, uri string, payload any) (*http.Response, error) {
	api := c.with(ctx)
	var resp *http.Response
	var err error
	if method == http.MethodPost {
		resp, err = api.Post(uri, payload)
	} else {
		resp, err = api.Patch(uri, payload)
	}
	if err != nil {
		return nil, classify(err)
	}
	return resp, nil
}

// patch PATCHes a resource with its ETag as If-Match (BMCs such as Lenovo XCC refuse a PATCH
// without one, 428). A 412 means the ETag is stale (another client changed the resource since it
// was read): the ETag is read again and the PATCH retried with it; a second 412 (a BMC that
// refuses If-Match altogether) is retried without it, as sushy does. A PATCH is idempotent, so
// the retries are safe.
func (c *client) patch(ctx context.Context, uri, etag string, payload any) error {
	api := c.with(ctx)
	withTag := func(tag string) error {
		headers := map[string]string{}
		if tag != "" {
			headers["If-Match"] = tag
		}
		resp, err := api.PatchWithHeaders(uri, payload, headers)
		if err != nil {
			return err
		}
		return resp.Body.Close()
	}
	err := withTag(etag)
	if err != nil && etag != "" && statusOf(err) == http.StatusPreconditionFailed {
		if fresh, ferr := c.etag(ctx, uri); ferr == nil && fresh != "" && fresh != etag {
			err = withTag(fresh)
		}
		if err != nil && statusOf(err) == http.StatusPreconditionFailed {
			err = withTag("")
		}
	}
	if err != nil {
		return classify(err)
	}
	return nil
}

// etag reads a resource's current entity tag: its ETag header, else its @odata.etag.
func (c *client) etag(ctx context.Context, uri string) (string, error) {
	raw, header, err := c.raw(ctx, uri)
	if err != nil {
		return "", err
	}
	if tag := header.Get("ETag"); tag != "" {
		return tag, nil
	}
	var res struct {
		ETag string `json:"@odata.etag"`
	}
	_ = json.Unmarshal(raw, &res)
	return res.ETag, nil
}

// raw reads a resource's JSON and headers (gofish keeps some resources' JSON to itself).
func (c *client) raw(ctx context.Context, uri string) ([]byte, http.Header, error) {
	resp, err := c.with(ctx).Get(uri)
	if err != nil {
		return nil, nil, classify(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, nil, classify(err)
	}
	return body, resp.Header, nil
}

// statusOf returns the HTTP status of a BMC's error answer, 0 without one.
func statusOf(err error) int {
	var re *schemas.Error
	if errors.As(err, &re) {
		return re.HTTPReturnedStatusCode
	}
	return 0
}

// settingsObject is the @Redfish.Settings object of a resource, "" when it has none.
func settingsObject(raw []byte) string {
	var res struct {
		Settings struct {
			SettingsObject struct {
				ID string `json:"@odata.id"`
			}
		} `json:"@Redfish.Settings"`
	}
	_ = json.Unmarshal(raw, &res)
	return res.Settings.SettingsObject.ID
}
