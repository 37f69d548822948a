package demo

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"sort"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/dev/simos"
)

// imageServer serves the demo's images over HTTP: the deploy image (a live ISO that writes disk
// images) and the node disk images, as image-builder writes them (raw, with their sha256).
type imageServer struct {
	srv   *httptest.Server
	files map[string][]byte
}

func startImageServer() *imageServer {
	s := &imageServer{files: map[string][]byte{
		"/deploy.iso":  simos.DeployImage(),
		"/node-v1.raw": simos.NodeImage("node-v1", 3<<20),
		"/node-v2.raw": simos.NodeImage("node-v2", 3<<20),
	}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, ok := s.files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		http.ServeContent(w, r, r.URL.Path, time.Time{}, bytes.NewReader(data))
	}))
	return s
}

// image is the spec of the node disk image named file.
func (s *imageServer) image(file string) *infrav1.Image {
	sum := sha256.Sum256(s.files["/"+file])
	return &infrav1.Image{URL: s.srv.URL + "/" + file, Format: infrav1.ImageFormatRaw, Checksum: hex.EncodeToString(sum[:])}
}

// PrintInstalls says, per claimed host that installs to disk, what was written to which drive.
func (w *World) PrintInstalls(ctx context.Context) error {
	hosts := &infrav1.RedfishHostList{}
	if err := w.List(ctx, hosts, client.InNamespace(Namespace)); err != nil {
		return err
	}
	sort.Slice(hosts.Items, func(i, j int) bool { return hosts.Items[i].Name < hosts.Items[j].Name })
	for _, h := range hosts.Items {
		c, in := h.Status.Claim, h.Status.Install
		if c == nil || in == nil || c.Image == nil {
			continue
		}
		w.Printf("    %-10s %s: %s → drive %s, %d bytes, sha256 %.12s… verified while it streamed", h.Name, in.Phase,
			c.Image.URL[len(w.images.srv.URL)+1:], in.Device, in.SizeBytes, in.Checksum)
	}
	return nil
}
