package schemas

import (
	"net/url"
	"strings"
)

// redacted replaces the userinfo (user, password or token) of a URL.
const redacted = "REDACTED"

// RedactURL returns raw with the userinfo of every URL in it replaced by
// REDACTED, for logs and error messages. raw may be a comma-separated list
// (NATS server URLs). Text that does not parse as a URL is cut at its last
// '@' instead, so a malformed URL cannot leak its credentials either.
func RedactURL(raw string) string {
	if !strings.Contains(raw, "@") {
		return raw
	}
	parts := strings.Split(raw, ",")
	for i, p := range parts {
		parts[i] = redactOne(p)
	}
	return strings.Join(parts, ",")
}

func redactOne(raw string) string {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err == nil && u.User != nil {
		u.User = url.User(redacted)
		return u.String()
	}
	if err == nil && !strings.Contains(u.Host+u.Opaque, "@") {
		return raw
	}
	// Unparseable (e.g. a password with a '/'): drop everything between the
	// scheme and the last '@' before the path.
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		scheme, rest = "", raw
	}
	end := len(rest)
	if j := strings.IndexAny(rest, "?#"); j >= 0 {
		end = j
	}
	at := strings.LastIndex(rest[:end], "@")
	if at < 0 {
		return raw
	}
	if scheme != "" {
		scheme += "://"
	}
	return scheme + redacted + rest[at:]
}

// HasUserinfo reports whether raw (a URL or a comma-separated list of them)
// carries credentials in its userinfo.
func HasUserinfo(raw string) bool {
	return RedactURL(raw) != raw
}

// StripUserinfo returns raw without its userinfo: the form of a URL that
// may travel on the bus and be stored. A URL that does not parse is
// returned redacted.
func StripUserinfo(raw string) string {
	if !HasUserinfo(raw) {
		return raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return RedactURL(raw)
	}
	u.User = nil
	return u.String()
}
