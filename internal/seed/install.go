package seed

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/bmc"
	"github.com/caprf/cluster-api-provider-redfish/internal/install"
)

// DeployVolumeURL is the per-claim NoCloud volume of the deploy image: its user-data is the script
// that writes the claim's disk image to the root drive.
func DeployVolumeURL(base, namespace, machine, token string) string {
	return Dir(base, namespace, machine, token) + "deploy.iso"
}

// InstallReportURL is where the deploy script POSTs its outcome.
func InstallReportURL(base, namespace, machine, token string) string {
	return Dir(base, namespace, machine, token) + "install-report"
}

// maxReport bounds an install report's body.
const maxReport = 16 << 10

// deployVolume serves the deploy image's cidata volume for a seed that names a disk image.
func (s *Server) deployVolume(w http.ResponseWriter, r *http.Request, sec *corev1.Secret) {
	log := logf.FromContext(r.Context())
	format := infrav1.ImageFormat(sec.Data[KeyImageFormat])
	if !format.DiskImage() || len(sec.Data[KeyInstallReport]) > 0 {
		// Once a report is in, the script is not served again: a reboot of the deploy image
		// (a power cycle, a watchdog) finds no seed and writes nothing over the reported drive.
		http.NotFound(w, r)
		return
	}
	key := "deploy:" + sec.Namespace + "/" + sec.Name + "@" + sec.ResourceVersion
	iso, ok := s.cached(key)
	if !ok {
		var imageCA []byte
		if name := string(sec.Data[KeyImageCABundle]); name != "" {
			ca := &corev1.Secret{}
			if err := s.Reader.Get(r.Context(), client.ObjectKey{Namespace: sec.Namespace, Name: name}, ca); err != nil {
				log.Error(err, "reading the image CA bundle", "secret", name)
				http.Error(w, "temporarily unavailable", http.StatusServiceUnavailable)
				return
			}
			imageCA = ca.Data["ca.crt"]
		}
		script, err := install.Script(install.Params{
			ImageURL: string(sec.Data[KeyImageURL]), Format: format,
			Checksum: string(sec.Data[KeyChecksum]), ChecksumType: infrav1.ChecksumType(sec.Data[KeyChecksumType]),
			Device:    infrav1.RootDevice{SerialNumber: string(sec.Data[KeyRootSerial]), WWN: string(sec.Data[KeyRootWWN])},
			ReportURL: InstallReportURL(s.BaseURL, sec.Namespace, r.PathValue("machine"), r.PathValue("token")),
			CABundle:  imageCA, ReportCABundle: s.CABundle,
		})
		if err != nil {
			log.Error(err, "writing the deploy script")
			http.Error(w, "the deploy script cannot be written: "+err.Error(), http.StatusConflict)
			return
		}
		meta := fmt.Appendf(nil, "instance-id: %s-deploy\nlocal-hostname: %s-deploy\n", sec.Data[KeyInstanceID], sec.Data[KeyHostname])
		if iso, err = CIDataISO(map[string][]byte{"meta-data": meta, "user-data": script, "network-config": networkConfig(string(sec.Data[KeyBootMAC]))}); err != nil {
			log.Error(err, "building the deploy volume")
			http.Error(w, "temporarily unavailable", http.StatusServiceUnavailable)
			return
		}
		s.keep(key, iso)
	}
	log.V(2).Info("served the deploy volume")
	w.Header().Set("Content-Type", "application/x-iso9660-image")
	http.ServeContent(w, r, "deploy.iso", time.Time{}, bytes.NewReader(iso))
}

// installReport records the deploy script's report in the seed Secret, where the host
// controller reads it. The first report of a claim stands: a second is answered 200 and dropped.
func (s *Server) installReport(w http.ResponseWriter, r *http.Request) {
	ns, machine, token := r.PathValue("ns"), r.PathValue("machine"), r.PathValue("token")
	log := logf.FromContext(r.Context()).WithValues("namespace", ns, "redfishMachine", machine)
	sec, err := s.lookup(r.Context(), ns, machine, token)
	if err != nil {
		log.Error(err, "reading seed")
		http.Error(w, "temporarily unavailable", http.StatusServiceUnavailable)
		return
	}
	if sec == nil || !infrav1.ImageFormat(sec.Data[KeyImageFormat]).DiskImage() {
		http.NotFound(w, r)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxReport))
	if err != nil {
		http.Error(w, "report too large", http.StatusRequestEntityTooLarge)
		return
	}
	rep, err := install.ParseReport(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rep.Message = bmc.Redact(truncate(rep.Message, 1024))
	rep.Device = bmc.Redact(truncate(rep.Device, 253))
	if len(rep.Checksum) > 128 {
		rep.Checksum = ""
	}
	rep.ReceivedAt = time.Now().UTC().Format(time.RFC3339Nano)
	if err := s.recordReport(r.Context(), client.ObjectKeyFromObject(sec), rep); err != nil {
		log.Error(err, "recording the install report")
		http.Error(w, "temporarily unavailable", http.StatusServiceUnavailable)
		return
	}
	log.Info("install reported", "ok", rep.OK, "reason", rep.Reason, "device", rep.Device, "sizeBytes", rep.SizeBytes)
	w.WriteHeader(http.StatusOK)
}

// recordReport writes rep into the seed Secret unless a report is there already.
func (s *Server) recordReport(ctx context.Context, key client.ObjectKey, rep install.Report) error {
	data, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	for range 3 {
		sec := &corev1.Secret{}
		if err := s.Reader.Get(ctx, key, sec); err != nil {
			return err
		}
		if len(sec.Data[KeyInstallReport]) > 0 {
			return nil // the first report stands
		}
		before := sec.DeepCopy()
		sec.Data[KeyInstallReport] = data
		// A patch (the manager's role may patch Secrets, not update them), refused if the Secret
		// changed since it was read: two reports racing do not both stand.
		err := s.Writer.Patch(ctx, sec, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
		if !apierrors.IsConflict(err) {
			return err
		}
	}
	return fmt.Errorf("the seed Secret kept changing")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
