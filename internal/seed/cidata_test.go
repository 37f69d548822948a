package seed

import (
	"strings"
	"testing"
)

func TestCIDataVolumeReadsBackWithItsLabelAndNames(t *testing.T) {
	files := map[string][]byte{
		"meta-data": []byte("instance-id: abc\n"), "user-data": []byte("#cloud-config\n" + strings.Repeat("x", 100000)),
		"network-config": networkConfig("52:54:00:00:07:01"),
	}
	iso, err := CIDataISO(files)
	if err != nil {
		t.Fatal(err)
	}
	label, got, err := ReadVolume(iso)
	if err != nil {
		t.Fatal(err)
	}
	if label != CIDataLabel {
		t.Errorf("label %q, want %q", label, CIDataLabel)
	}
	if len(got) != len(files) {
		t.Fatalf("files %v, want %d", keys(got), len(files))
	}
	for name, want := range files {
		if string(got[name]) != string(want) {
			t.Errorf("%s differs after a round trip (%d bytes, want %d)", name, len(got[name]), len(want))
		}
	}
}

func keys(m map[string][]byte) []string {
	out := []string{}
	for k := range m {
		out = append(out, k)
	}
	return out
}
