// Package redact removes credentials from the connection strings retrain
// is given (catalog URIs, endpoints, DSNs) before they reach an error, a
// log line, an id or anything else a client can read. It is the one place
// that knows the forms a credential can take in such a string:
//
//   - the password of URL user info (postgres://user:PASSWORD@host/db),
//   - a query or fragment parameter whose name names a credential
//     (password=, sslpassword=, access_token=, client_secret=, ...),
//   - a value of such a key in a libpq key=value string
//     (host=db user=u password=PASSWORD, as lib/pq and pgx accept).
package redact

import (
	"net/url"
	"slices"
	"strings"
)

// Mask replaces a credential.
const Mask = "xxxxx"

// secretWords are the parts of a parameter name that make it a credential.
var secretWords = []string{"password", "passwd", "secret", "token", "credential", "apikey", "api_key", "api-key"}

// SecretKey reports whether a parameter named name carries a credential:
// its name contains password, secret or token (and a few spellings of
// the same), in any case.
func SecretKey(name string) bool {
	n := strings.ToLower(name)
	for _, w := range secretWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// URI returns s with every credential it carries replaced by Mask, and
// everything else as it was written (a user name, the host, the path and
// harmless parameters stay, so that the result still says what s names).
// s may be a URL, an opaque URI (file:...?...), a libpq key=value string,
// or something unparseable; an unparseable URL loses what might be its
// user info altogether.
func URI(s string) string {
	out, _ := scan(s)
	return out
}

// Secrets lists the credentials s carries, as written and percent-decoded,
// longest first: what Text removes from text that may quote them.
func Secrets(s string) []string {
	_, secrets := scan(s)
	var out []string
	for _, v := range secrets {
		if v == "" {
			continue
		}
		out = append(out, v)
		if d, err := url.PathUnescape(v); err == nil && d != v {
			out = append(out, d)
		}
		if d, err := url.QueryUnescape(v); err == nil && d != v {
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return slices.Compact(out)
}

// Text returns text (an error message, say) with each of the connection
// strings given replaced by its redacted form, and every credential they
// carry masked wherever else it appears (a driver may quote a URI in its
// own way, or a password alone).
func Text(text string, uris ...string) string {
	var pairs []string
	for _, u := range uris {
		if u != "" {
			pairs = append(pairs, u, URI(u))
		}
	}
	if len(pairs) > 0 {
		text = strings.NewReplacer(pairs...).Replace(text)
	}
	var secrets []string
	for _, u := range uris {
		secrets = append(secrets, Secrets(u)...)
	}
	slices.SortFunc(secrets, func(a, b string) int { return len(b) - len(a) })
	for _, v := range secrets {
		text = strings.ReplaceAll(text, v, Mask)
	}
	return text
}

// scan returns the redacted form of s and the credentials it found.
func scan(s string) (string, []string) {
	if isDSN(s) {
		return scanDSN(s)
	}
	if i := strings.Index(s, "://"); i > 0 && validScheme(s[:i]) {
		return scanURL(s, i)
	}
	// An opaque URI (file:/x.db?password=...) or a bare path: only its
	// parameters can hold credentials.
	return scanParams(s)
}

func validScheme(s string) bool {
	for i, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case i > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return s != ""
}

// scanURL redacts scheme://[user[:password]@]host/path?query#fragment.
// i is where "://" starts.
func scanURL(s string, i int) (string, []string) {
	u, err := url.Parse(s)
	// A password holding an unescaped / ? # or @ splits the URL elsewhere
	// than its writer meant: url.Parse fails, or finds no user info but an
	// @ further on. Then all before the last @ is taken for user info.
	if err != nil || (u.User == nil && strings.Contains(s[i+3:], "@")) {
		return scanBrokenURL(s, i)
	}
	var secrets []string
	head := s[:i+3]
	rest := s[i+3:]
	if u.User != nil {
		at := strings.LastIndex(rest[:authorityEnd(rest)], "@")
		info := rest[:at]
		user, pw, hasPW := strings.Cut(info, ":")
		if hasPW {
			secrets = append(secrets, pw)
			info = user + ":" + Mask
		}
		head += info + "@"
		rest = rest[at+1:]
	}
	tail, more := scanParams(rest)
	return head + tail, append(secrets, more...)
}

// authorityEnd is where the authority of rest (a URL after its "://")
// ends.
func authorityEnd(rest string) int {
	if j := strings.IndexAny(rest, "/?#"); j >= 0 {
		return j
	}
	return len(rest)
}

// scanBrokenURL redacts a URL url.Parse could not read: everything from
// the scheme to the last @ (before any parameter that holds no @) may be
// a password, so all of it but a plain user name goes.
func scanBrokenURL(s string, i int) (string, []string) {
	head, rest := s[:i+3], s[i+3:]
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		tail, secrets := scanParams(rest)
		return head + tail, secrets
	}
	info := rest[:at]
	user, pw, hasPW := strings.Cut(info, ":")
	secrets := []string{info}
	if hasPW {
		secrets = append(secrets, pw)
	}
	if !hasPW || strings.ContainsAny(user, "/?#") {
		user = ""
	}
	tail, more := scanParams(rest[at+1:])
	if user == "" {
		return head + Mask + "@" + tail, append(secrets, more...)
	}
	return head + user + ":" + Mask + "@" + tail, append(secrets, more...)
}

// scanParams masks the credential parameters of s's query and fragment
// (name=value pairs split by & or ;), keeping the rest as written.
func scanParams(s string) (string, []string) {
	q := strings.IndexAny(s, "?#")
	if q < 0 {
		return s, nil
	}
	var b strings.Builder
	var secrets []string
	b.WriteString(s[:q+1])
	start := q + 1
	for j := start; j <= len(s); j++ {
		if j < len(s) && !strings.ContainsRune("&;#?", rune(s[j])) {
			continue
		}
		part := s[start:j]
		if k, v, ok := strings.Cut(part, "="); ok && SecretKey(unescape(k)) {
			secrets = append(secrets, v)
			part = k + "=" + Mask
		}
		b.WriteString(part)
		if j < len(s) {
			b.WriteByte(s[j])
		}
		start = j + 1
	}
	return b.String(), secrets
}

func unescape(s string) string {
	if d, err := url.QueryUnescape(s); err == nil {
		return d
	}
	return s
}
