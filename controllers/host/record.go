package host

import (
	"encoding/json"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
)

// The host's record of its claim and reservation, kept on its metadata (annotations), which
// `clusterctl move` and backups carry while they drop the status. A host recreated without status
// (see inspect) trusts its record: it restores its claim only to the machine the record names,
// restores its reservation, and is cleaned before anyone else may claim it when the recorded
// machine is gone. A host without a record is a new server: Available once inspected.

// recordable says whether the host's status is authoritative, so that the record follows it. While
// a host registers and is inspected (its status being rebuilt after a restore), the record is
// what it was restored with, and is left alone.
func recordable(h *infrav1.RedfishHost) bool {
	switch stateOf(h) {
	case "", infrav1.HostStateRegistering, infrav1.HostStateInspecting, infrav1.HostStateError:
		return false
	}
	return true
}

// record writes the host's claim and reservation into its annotations, when its status is
// authoritative. It is called when a round starts (a claim's first BMC action is preceded by a
// write that carries the record) and after its handler (the round's write carries what the
// handler changed).
func record(h *infrav1.RedfishHost) {
	if !recordable(h) {
		return
	}
	set := func(key, value string) {
		if value == "" {
			delete(h.Annotations, key)
			return
		}
		if h.Annotations == nil {
			h.Annotations = map[string]string{}
		}
		h.Annotations[key] = value
	}
	// A host cleaned without a claim (restored from a record whose machine is gone, or reserved
	// for an owner that is gone) keeps its record until the erase ended, should its status be
	// lost again meanwhile.
	cleaning := stateOf(h) == infrav1.HostStateDeprovisioning || stateOf(h) == infrav1.HostStateCleaning
	consumer := ""
	switch c := h.Status.Claim; {
	case c != nil:
		consumer = c.Consumer.Name
	case cleaning:
		consumer = recordedConsumer(h)
	}
	cluster := ""
	if c := h.Status.Claim; c != nil {
		cluster = c.ClusterName
	} else if consumer != "" {
		cluster = h.Annotations[infrav1.HostClaimedClusterAnnotation]
	}
	set(infrav1.HostClaimedByAnnotation, consumer)
	set(infrav1.HostClaimedClusterAnnotation, cluster)
	reserved := ""
	switch rf := h.Status.ReservedFor; {
	case rf != nil:
		b, _ := json.Marshal(rf)
		reserved = string(b)
	case cleaning:
		reserved = h.Annotations[infrav1.HostReservedForAnnotation]
	}
	set(infrav1.HostReservedForAnnotation, reserved)
}

// recordedConsumer is the RedfishMachine the host's record says it is claimed by ("": none).
func recordedConsumer(h *infrav1.RedfishHost) string {
	return h.Annotations[infrav1.HostClaimedByAnnotation]
}

// recordedReservation is the owner the host's record says it is reserved for (nil: none, or a
// record that does not parse).
func recordedReservation(h *infrav1.RedfishHost) *infrav1.ObjectRef {
	v := h.Annotations[infrav1.HostReservedForAnnotation]
	if v == "" {
		return nil
	}
	ref := &infrav1.ObjectRef{}
	if err := json.Unmarshal([]byte(v), ref); err != nil || ref.Kind == "" || ref.Name == "" {
		return nil
	}
	return ref
}
