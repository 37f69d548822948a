package bmc

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/stmcginnis/gofish/schemas"
)

// classify maps BMC answers to the package's sentinel errors, keeping the original text, with
// secrets redacted: BMCs echo rejected values (an image URL with its seed token) in their error
// bodies, and errors end up in conditions, events and logs.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var re *schemas.Error
	if errors.As(err, &re) {
		switch {
		case re.HTTPReturnedStatusCode == http.StatusConflict,
			// HPE iLO refuses changes while the system is in POST (400 with this MessageId):
			// busy, like a 409.
			re.HTTPReturnedStatusCode == http.StatusBadRequest && strings.Contains(err.Error(), ".UnableToModifyDuringSystemPOST"):
			return fmt.Errorf("%w: %s", ErrConflict, Redact(re.Message))
		case re.HTTPReturnedStatusCode == http.StatusUnauthorized || re.HTTPReturnedStatusCode == http.StatusForbidden:
			return fmt.Errorf("%w: %s", ErrAuth, Redact(re.Message))
		}
	}
	if tlsVerification(err) {
		return fmt.Errorf("%w: %w", ErrTLS, &redactedError{msg: Redact(err.Error()), err: err})
	}
	return &redactedError{msg: Redact(err.Error()), err: err}
}

// tlsVerification says whether err is a failed verification of the BMC's certificate.
func tlsVerification(err error) bool {
	var (
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
	)
	return errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &hostname) || errors.As(err, &invalid)
}

// redactedError shows a redacted text; errors.Is and errors.As still see the BMC's error.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

var (
	// seedToken matches the 256-bit tokens of per-claim seed URLs.
	seedToken = regexp.MustCompile(`[0-9a-fA-F]{64}`)
	// urlUserinfo matches credentials in URLs (scheme://user:password@host).
	urlUserinfo = regexp.MustCompile(`(://)[^/@\s"']+@`)
	// queryCredential matches credentials in query strings: presigned object-store URLs (S3's
	// X-Amz-Signature and X-Amz-Security-Token, Google's X-Goog-Signature, Azure's sig), tokens, passwords.
	queryCredential = regexp.MustCompile(`(?i)([?&](?:x-amz-signature|x-amz-security-token|x-amz-credential|x-goog-signature|x-goog-credential|sig|signature|token|access_token|auth|password|passwd|key|api_key|apikey)=)[^&\s"'#]*`)
)

// Redact removes secrets a text may carry: seed tokens, credentials in URLs and in their query
// strings.
func Redact(s string) string {
	s = seedToken.ReplaceAllString(s, "REDACTED")
	s = queryCredential.ReplaceAllString(s, "${1}REDACTED")
	return urlUserinfo.ReplaceAllString(s, "${1}REDACTED@")
}

// Refused says whether the BMC answered a request with a refusal (HTTP 4xx, a busy 409 included)
// or the request was never sent (ErrNotSupported): either way it was not carried out. A timeout
// or a 5xx is not a refusal: the request may have been carried out.
func Refused(err error) bool {
	if errors.Is(err, ErrNotSupported) || errors.Is(err, ErrConflict) || errors.Is(err, ErrAuth) {
		return true
	}
	var re *schemas.Error
	return errors.As(err, &re) && re.HTTPReturnedStatusCode >= 400 && re.HTTPReturnedStatusCode < 500
}

// IsUnsupported says whether the BMC refused a request as one it does not support at all (HTTP
// 405 or 501, or a 400 whose message says the action or its parameter is not supported), as
// opposed to a 400 that depends on the server's current state.
func IsUnsupported(err error) bool {
	var re *schemas.Error
	if !errors.As(err, &re) {
		return false
	}
	switch re.HTTPReturnedStatusCode {
	case http.StatusMethodNotAllowed, http.StatusNotImplemented:
		return true
	case http.StatusBadRequest:
		return strings.Contains(err.Error(), "NotSupported") || strings.Contains(re.Message, "NotSupported")
	}
	return false
}

// IsBadRequest says whether the BMC refused a request as invalid or unsupported (HTTP 400, 405 or
// 501): sending it again changes nothing.
func IsBadRequest(err error) bool {
	var re *schemas.Error
	if !errors.As(err, &re) {
		return false
	}
	switch re.HTTPReturnedStatusCode {
	case http.StatusBadRequest, http.StatusMethodNotAllowed, http.StatusNotImplemented:
		return true
	}
	return false
}
