package install

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"text/template"
	"time"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
)

// Params are what one deploy script installs, where, and where it reports.
type Params struct {
	// ImageURL is the disk image (raw or qcow2) to download.
	ImageURL string
	Format   infrav1.ImageFormat
	// Checksum is the hex digest, or an http(s) URL of a checksum file.
	Checksum     string
	ChecksumType infrav1.ChecksumType
	// Device is the drive to write: found by WWN when it has one, else by serial number.
	Device infrav1.RootDevice
	// ReportURL receives the outcome (a JSON Report, POSTed).
	ReportURL string
	// CABundle is the PEM bundle curl trusts for the image and the checksum file (empty: the
	// deploy image's trust store).
	CABundle []byte
	// ReportCABundle is the PEM bundle curl trusts for the report: the seed server's CA (empty:
	// the deploy image's trust store).
	ReportCABundle []byte
	// ReportWindow bounds how long the report is retried, wall clock (default 30 minutes: a
	// manager restarting or a leader changing meanwhile); ReportDelay is the wait between tries
	// (default 15 s). Each try takes at most 30 s.
	ReportWindow time.Duration
	ReportDelay  time.Duration
}

// Report is what the deploy script POSTs to ReportURL once it is done.
type Report struct {
	// OK is true when the image was written and its checksum matched.
	OK bool `json:"ok"`
	// Reason is one of the ImageInstalled condition's reasons when it failed.
	Reason string `json:"reason,omitempty"`
	// Message says what failed.
	Message string `json:"message,omitempty"`
	// Device is the drive written: /dev/... as the deploy image saw it, and its serial or WWN.
	Device string `json:"device,omitempty"`
	// SizeBytes is how many bytes of image were downloaded and written (for qcow2: downloaded).
	SizeBytes int64 `json:"sizeBytes,omitempty"`
	// Checksum is the digest computed while the image streamed.
	Checksum string `json:"checksum,omitempty"`
	// ReceivedAt is when the seed server received the report (RFC 3339), set by it: a report
	// older than the boot into the deploy image is not that boot's.
	ReceivedAt string `json:"receivedAt,omitempty"`
}

// ParseReport reads a report as the seed server received it.
func ParseReport(data []byte) (Report, error) {
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		return Report{}, fmt.Errorf("the install report is not JSON: %w", err)
	}
	return r, nil
}

// IsChecksumURL says whether a checksum names a checksum file rather than a digest.
func IsChecksumURL(s string) bool {
	return strings.HasPrefix(s, "http://") || strings.HasPrefix(s, "https://")
}

// ValidDigest says whether s is a hex digest of type t.
func ValidDigest(s string, t infrav1.ChecksumType) bool {
	n := 64
	if t == infrav1.ChecksumSHA512 {
		n = 128
	}
	if len(s) != n {
		return false
	}
	for _, c := range strings.ToLower(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Script returns the bash script (cloud-init user-data) that writes the image to the drive.
func Script(p Params) ([]byte, error) {
	if !p.Format.DiskImage() {
		return nil, fmt.Errorf("format %q is not a disk image", p.Format)
	}
	if p.Device.WWN == "" && p.Device.SerialNumber == "" {
		return nil, fmt.Errorf("the root drive has no serial number or WWN to find it by")
	}
	for name, v := range map[string]string{"image URL": p.ImageURL, "checksum": p.Checksum, "serial number": p.Device.SerialNumber,
		"WWN": p.Device.WWN, "report URL": p.ReportURL, "CA bundle": string(p.CABundle), "report CA bundle": string(p.ReportCABundle)} {
		if strings.ContainsRune(v, 0) {
			// bash reads a script's strings up to a NUL: the value would be cut short there.
			return nil, fmt.Errorf("the %s contains a NUL byte", name)
		}
	}
	tool := "sha256sum"
	if p.ChecksumType == infrav1.ChecksumSHA512 {
		tool = "sha512sum"
	}
	want, sumURL := strings.ToLower(p.Checksum), ""
	if IsChecksumURL(p.Checksum) {
		want, sumURL = "", p.Checksum
	}
	window, delay := p.ReportWindow, p.ReportDelay
	if window <= 0 {
		window = 30 * time.Minute
	}
	if delay <= 0 {
		delay = 15 * time.Second
	}
	var b bytes.Buffer
	err := script.Execute(&b, map[string]string{
		"image": quote(p.ImageURL), "format": quote(string(p.Format)), "want": quote(want), "sumURL": quote(sumURL),
		"tool": tool, "serial": quote(p.Device.SerialNumber), "wwn": quote(NormalizeWWN(p.Device.WWN)),
		"report": quote(p.ReportURL), "ca": quote(string(p.CABundle)), "reportCA": quote(string(p.ReportCABundle)),
		"window": strconv.Itoa(int(window.Seconds())), "delay": strconv.Itoa(int(delay.Seconds())),
	})
	return b.Bytes(), err
}

// quote is s in single quotes for bash.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

var script = template.Must(template.New("deploy").Parse(`#!/bin/bash
# Written by cluster-api-provider-redfish for one claim: downloads a disk image, verifies its
# checksum while it streams, writes it to the drive chosen by WWN or serial number, reports the
# outcome to the seed server and powers off. A failure wipes the drive's start and reports why:
# the provider never boots a drive it did not see reported written and verified.
set -Eeuo pipefail
image_url={{.image}}
format={{.format}}
want={{.want}}
checksum_url={{.sumURL}}
serial={{.serial}}
wwn={{.wwn}}
report_url={{.report}}
ca={{.ca}}
report_ca={{.reportCA}}

work=$(mktemp -d)
curl_opts=(--fail --silent --show-error --location --connect-timeout 30)
report_opts=("${curl_opts[@]}")
if [ -n "$ca" ]; then
  printf '%s\n' "$ca" > "$work/ca.crt"
  curl_opts+=(--cacert "$work/ca.crt")
fi
if [ -n "$report_ca" ]; then
  printf '%s\n' "$report_ca" > "$work/report-ca.crt"
  report_opts+=(--cacert "$work/report-ca.crt")
fi
dev=''
label=''

json() { printf '%s' "$1" | tr -d '\000-\037' | sed 's/\\/\\\\/g; s/"/\\"/g'; }
# The report is retried for ReportWindow (a manager restarting, a leader changing), then the host
# powers off all the same: the provider reads a power-off without a report as a failure.
report() {
  local deadline=$((SECONDS + {{.window}}))
  while true; do
    if curl "${report_opts[@]}" --max-time 30 -X POST -H 'Content-Type: application/json' \
      --data-binary "$1" "$report_url" > /dev/null; then
      return 0
    fi
    [ $((SECONDS + {{.delay}})) -lt "$deadline" ] || return 1
    sleep {{.delay}}
  done
}
wipe() {
  if [ -n "$dev" ]; then
    wipefs --all --quiet "$dev" 2> /dev/null || true
    dd if=/dev/zero of="$dev" bs=1M count=1 conv=notrunc,fsync status=none || true
  fi
}
fail() {
  trap - ERR
  wipe
  report "{\"ok\":false,\"reason\":\"$1\",\"message\":\"$(json "$2")\",\"device\":\"$(json "$label")\",\"checksum\":\"$(json "${3:-}")\"}" || true
  poweroff || true
  exit 1
}
# A stage of a pipeline that refuses what it reads leaves its reason in $work/reason.
on_error() {
  trap - ERR
  if [ -s "$work/reason" ]; then
    fail "$(head -n 1 "$work/reason")" "$(tail -n +2 "$work/reason")"
  fi
  fail InstallFailed "command failed (line $1, exit status $2)"
}
trap 'on_error $LINENO $?' ERR

# The drive: by WWN when the BMC reported one and a drive shows it (lsblk prints 0x…, naa.…,
# eui.…), else by serial number; exactly one must match.
norm() {
  local w
  w=$(printf '%b' "$1" | tr 'A-Z' 'a-z')
  w=${w#0x} w=${w#naa.} w=${w#eui.} w=${w#nguid.}
  printf '%s' "$w"
}
trim() { local v; v=$(printf '%b' "$1"); v=${v#"${v%%[![:space:]]*}"}; printf '%s' "${v%"${v##*[![:space:]]}"}"; }
by_wwn=()
by_serial=()
while IFS= read -r line; do
  [[ $line =~ NAME=\"([^\"]*)\"\ TYPE=\"([^\"]*)\"\ SERIAL=\"([^\"]*)\"\ WWN=\"([^\"]*)\" ]] || continue
  name=${BASH_REMATCH[1]} type=${BASH_REMATCH[2]} dserial=${BASH_REMATCH[3]} dwwn=${BASH_REMATCH[4]}
  [ "$type" = disk ] || continue
  if [ -n "$wwn" ] && [ "$(norm "$dwwn")" = "$wwn" ]; then by_wwn+=("$name"); fi
  if [ -n "$serial" ] && [ "$(trim "$dserial")" = "$serial" ]; then by_serial+=("$name"); fi
done < <(lsblk --nodeps --noheadings --bytes --paths --pairs --output NAME,TYPE,SERIAL,WWN)
if [ ${#by_wwn[@]} -gt 0 ]; then
  matches=("${by_wwn[@]}") label="wwn $wwn"
else
  matches=("${by_serial[@]}") label="serial $serial"
  [ -n "$wwn" ] && label="wwn $wwn or serial $serial"
fi
case ${#matches[@]} in
  1) dev=${matches[0]}; label="$dev ($label)" ;;
  0) fail InstallFailed "no drive with $label" ;;
  *) fail InstallFailed "${#matches[@]} drives with $label: ${matches[*]}" ;;
esac

file=${image_url%%[?#]*}
file=${file##*/}
if [ -n "$checksum_url" ]; then
  # GNU (hash  name, hash *name) and BSD (SHA256 (name) = hash) lines, CRLF or not; a file of a
  # single hash stands for the image.
  curl "${curl_opts[@]}" -o "$work/sums" "$checksum_url"
  want=$(trap - ERR; awk -v f="$file" '
    { sub(/\r$/, "") }
    /^[A-Za-z0-9-]+ \(.*\) = [0-9A-Fa-f]+$/ {
      n = $0; sub(/^[^(]*\(/, "", n); sub(/\) = [0-9A-Fa-f]+$/, "", n)
      if (n == f) { print $NF; found = 1; exit }
      next
    }
    { n = $2; sub(/^\*/, "", n); sub(/^\.\//, "", n) }
    n == f { print $1; found = 1; exit }
    NR == 1 && NF == 1 { only = $1 }
    END { if (!found && NR == 1 && only != "") print only }' "$work/sums")
  [ -n "$want" ] || fail ChecksumMismatch "the checksum file names no $file"
  want=$(printf '%s' "$want" | tr 'A-F' 'a-f')
fi

# checked passes the download through once its first bytes are those of a $format image: a
# compressed file or a qcow2 written as raw would be verified (its checksum is the file's) and
# then never boot.
checked() {
  trap - ERR
  dd bs=512 count=1 iflag=fullblock status=none > "$work/head" || true
  if [ ! -s "$work/head" ]; then
    return 0 # nothing came: the download's own failure is what is reported
  fi
  local magic
  magic=$(od -An -tx1 -N6 "$work/head" | tr -d ' \n')
  local what=''
  case "$magic" in
    514649fb*) what=qcow2 ;;
    1f8b*) what=gzip ;;
    fd377a585a00) what=xz ;;
    28b52ffd*) what=zstd ;;
    425a68*) what=bzip2 ;;
  esac
  if [ "$format" = qcow2 ] && [ "$what" != qcow2 ]; then
    printf 'ImageFormatMismatch\n%s is not a qcow2 image (it starts with %s)\n' "$file" "${what:-$magic}" > "$work/reason"
    exit 3
  fi
  if [ "$format" = raw ] && [ -n "$what" ]; then
    printf 'ImageFormatMismatch\n%s is a %s file, not a raw disk image: set the format it has (qcow2), or decompress it\n' "$file" "$what" > "$work/reason"
    exit 3
  fi
  cat "$work/head" -
}

# One pass over the download: the digest and the size are computed from the bytes written.
mkfifo "$work/sum.in" "$work/size.in"
{{.tool}} < "$work/sum.in" > "$work/sum" &
sum_pid=$!
wc -c < "$work/size.in" > "$work/size" &
size_pid=$!
if [ "$format" = raw ]; then
  curl "${curl_opts[@]}" "$image_url" | checked | tee "$work/sum.in" "$work/size.in" |
    dd of="$dev" bs=4M iflag=fullblock conv=notrunc,fsync status=none
else
  curl "${curl_opts[@]}" "$image_url" | checked | tee "$work/sum.in" "$work/size.in" > "$work/image"
fi
wait "$sum_pid" "$size_pid"
got=$(cut -d' ' -f1 < "$work/sum")
size=$(tr -d ' ' < "$work/size")
if [ "$got" != "$want" ]; then
  fail ChecksumMismatch "$file has {{.tool}} $got, not $want" "$got"
fi
if [ "$format" = qcow2 ]; then
  qemu-img info -f qcow2 --output=json "$work/image" > "$work/info"
  if grep -q -e '"backing-filename"' -e '"data-file"' "$work/info"; then
    fail ImageFormatMismatch "$file names a backing or data file: only a self-contained qcow2 image is written"
  fi
  qemu-img convert -n -f qcow2 -O raw "$work/image" "$dev"
  rm -f "$work/image"
fi
sync
# Written and verified: nothing after this may wipe the drive.
trap - ERR
report "{\"ok\":true,\"device\":\"$(json "$label")\",\"sizeBytes\":$size,\"checksum\":\"$got\"}" || true
poweroff || true
`))
