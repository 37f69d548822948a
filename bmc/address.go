package bmc

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
)

// Address is a parsed RedfishHost BMC address.
type Address struct {
	// BaseURL is the scheme and host of the Redfish service, e.g. https://10.0.0.5:443.
	BaseURL string
	// SystemPath is the Redfish path of the system, empty when it should be discovered.
	SystemPath string
}

// ParseAddress parses redfish://host[:port][/redfish/v1/Systems/<id>] (HTTPS),
// redfish+https://… (HTTPS) and redfish+http://… (plain HTTP). Errors say what is wrong in words
// a person registering a server understands.
func ParseAddress(raw string) (Address, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		// url.Error repeats the input, which may hold a password: say only what is wrong.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if strings.Contains(raw, "@") {
			// Credentials with a '/', '?' or '#' end the authority early: the parser's error then
			// quotes part of the password (as a port, say). Say nothing of what was typed.
			err = errors.New("it holds an '@' (credentials belong in the credentials Secret) and does not parse")
		}
		return Address{}, fmt.Errorf("BMC address is not a URL: %w", err)
	}
	raw = RedactAddress(u) // never echo credentials someone put in the URL
	var scheme string
	switch u.Scheme {
	case "redfish", "redfish+https":
		scheme = "https"
	case "redfish+http":
		scheme = "http"
	default:
		return Address{}, fmt.Errorf("BMC address %q: scheme must be redfish://, redfish+https:// or redfish+http://", raw)
	}
	if u.Host == "" || u.Hostname() == "" {
		return Address{}, fmt.Errorf("BMC address %q has no host", raw)
	}
	if !hostName(u.Hostname()) {
		return Address{}, fmt.Errorf("BMC address %q: %q is not an IP address or host name", raw, u.Hostname())
	}
	if strings.Contains(u.Hostname(), "%") {
		return Address{}, fmt.Errorf("BMC address %q: an IPv6 zone (%%interface) names an interface of one machine, not the manager's: give an address the manager routes to", raw)
	}
	if p := u.Port(); p != "" {
		var n int
		if _, err := fmt.Sscanf(p, "%d", &n); err != nil || n < 1 || n > 65535 {
			return Address{}, fmt.Errorf("BMC address %q: port %q is not between 1 and 65535", raw, p)
		}
	}
	if u.User != nil {
		return Address{}, fmt.Errorf("BMC address %q must not carry credentials: put them in the credentials Secret", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return Address{}, fmt.Errorf("BMC address %q must not have a query or fragment", raw)
	}
	path := strings.TrimSuffix(u.Path, "/")
	if path != "" {
		rest, ok := strings.CutPrefix(path, "/redfish/v1/Systems/")
		if !ok || rest == "" || strings.Contains(rest, "/") {
			return Address{}, fmt.Errorf("BMC address %q: the path must be /redfish/v1/Systems/<id> or empty", raw)
		}
	}
	return Address{BaseURL: scheme + "://" + net.JoinHostPort(u.Hostname(), portOrDefault(u.Port(), scheme)), SystemPath: path}, nil
}

// hostName says whether h is an IP address (an IPv6 zone included, refused next with its own
// message) or a DNS name: labels of letters, digits, '-' and '_' (which some BMCs' names carry).
func hostName(h string) bool {
	if ip, _, _ := strings.Cut(h, "%"); net.ParseIP(ip) != nil {
		return true
	}
	if len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(strings.TrimSuffix(h, "."), ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range label {
			if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '-' && c != '_' {
				return false
			}
		}
	}
	return true
}

func portOrDefault(port, scheme string) string {
	if port != "" {
		return port
	}
	if scheme == "http" {
		return "80"
	}
	return "443"
}

// RedactAddress returns u without the credentials it may carry (neither username nor password),
// also when a typo made them no userinfo of the URL ("redfish:/admin:pw@host"): whatever comes
// before an "@" is dropped.
func RedactAddress(u *url.URL) string {
	c := *u
	if c.User != nil {
		c.User = url.User("REDACTED")
	}
	s := c.String()
	if i := strings.LastIndex(s, "@"); i >= 0 && !strings.HasPrefix(s[:i+1], c.Scheme+"://REDACTED@") {
		return "REDACTED@" + s[i+1:]
	}
	return s
}
