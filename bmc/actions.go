package bmc

import (
	"context"
	"encoding/json"
	"errors"
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
// without one, 428); a 412 (the ETag changed, or a BMC that refuses If-Match) is retried once
// without it. A PATCH is idempotent, so the retry is safe.
func (c *client) patch(ctx context.Context, uri, etag string, payload any) error {
	api := c.with(ctx)
	headers := map[string]string{}
	if etag != "" {
		headers["If-Match"] = etag
	}
	resp, err := api.PatchWithHeaders(uri, payload, headers)
	if err != nil && etag != "" && statusOf(err) == http.StatusPreconditionFailed {
		resp, err = api.PatchWithHeaders(uri, payload, nil)
	}
	if err != nil {
		return classify(err)
	}
	_ = resp.Body.Close()
	return nil
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
