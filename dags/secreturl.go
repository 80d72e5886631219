package dags

import (
	"fmt"
	"strings"
)

// URLs that carry secrets.
//
// A ${secret.NAME} in a URL (its user information, path or query, or a
// header sent with it) goes wherever the URL points. A URL whose scheme,
// host or path comes from a param or an output lets whoever starts a run
// choose that: "${params.hook}/deployed?token=${secret.WEBHOOK_TOKEN}"
// sends the token to the param's host. So such a URL must be written in
// the spec up to its query: scheme, host and path literal; only the query
// (after ?) and the fragment may take values.

// CheckSecretURL refuses the URL template s (a spec's text) when it holds
// a ${secret.NAME} and its scheme, host or path is not written out.
func CheckSecretURL(s string) error {
	t, err := parseTemplate(s)
	if err != nil {
		return nil // reported where references are checked
	}
	hasSecret := false
	for _, seg := range t {
		hasSecret = hasSecret || seg.secret != ""
	}
	if !hasSecret {
		return nil
	}
	return LiteralURLPrefix(s, "it carries a secret")
}

// LiteralURLPrefix refuses the URL template s unless its scheme, host and
// path are literal text: a ${secret.NAME} may stand in the path, any
// other ${...} only after the query's ?. why says why it matters.
func LiteralURLPrefix(s, why string) error {
	t, err := parseTemplate(s)
	if err != nil {
		return nil
	}
	var lit strings.Builder // the literal text before the query
	for _, seg := range t {
		if seg.ref != nil || seg.expr != nil {
			return fmt.Errorf("%s: its scheme, host and path must be written in the spec because %s, but %s supplies part of them (whoever starts a run could send it elsewhere); write the URL out up to its ? (a value may go in the query)", displaySecretURL(s), why, seg.source())
		}
		if i := strings.IndexAny(seg.lit, "?#"); i >= 0 && seg.secret == "" {
			lit.WriteString(seg.lit[:i])
			break
		}
		lit.WriteString(seg.lit)
	}
	prefix := lit.String()
	rest, ok := strings.CutPrefix(prefix, "https://")
	if !ok {
		rest, ok = strings.CutPrefix(prefix, "http://")
	}
	host, _, _ := strings.Cut(rest, "/")
	if i := strings.LastIndexByte(host, '@'); i >= 0 {
		host = host[i+1:]
	}
	if !ok || host == "" {
		return fmt.Errorf("%s: want an http(s) URL whose scheme and host are written in the spec, because %s", displaySecretURL(s), why)
	}
	return nil
}

// displaySecretURL is s without its query (which may hold what should not
// be shown) for a message.
func displaySecretURL(s string) string {
	if i := strings.IndexByte(s, '?'); i >= 0 {
		return fmt.Sprintf("%q", s[:i]+"?...")
	}
	return fmt.Sprintf("%q", s)
}
