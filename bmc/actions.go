package bmc

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
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
