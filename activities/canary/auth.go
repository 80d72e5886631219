package canary

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/retrain-ml/retrain/activities/progenv"
	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/nodetype"
)

// secretRef is how a secret is written in a spec; what the validator
// looks for in a credential.
const secretRef = "${secret."

// authHeader reports whether a header carries credentials, and so must
// take them from a secret: written in the spec, they would be recorded in
// the run's history and shown wherever the spec is.
func authHeader(name string) bool {
	n := strings.ToLower(name)
	switch n {
	case "authorization", "proxy-authorization", "cookie":
		return true
	}
	for _, w := range []string{"auth", "token", "key", "secret", "password", "session"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// checkAuth refuses Prometheus credentials written out in the spec, or
// taken from anything but a secret (a param is recorded in the history),
// and headers that are not headers.
func checkAuth(with map[string]any) []error {
	var errs []error
	if s, ok := with["prometheus_bearer_token"].(string); ok && !strings.Contains(s, secretRef) {
		errs = append(errs, dags.AtField("prometheus_bearer_token",
			errors.New("prometheus_bearer_token must hold a ${secret.NAME} reference: a token written in the spec, or passed in a param, is recorded with the run")))
	}
	if m, ok := with["prometheus_basic_auth"].(map[string]any); ok {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if k != "username" && k != "password" {
				errs = append(errs, dags.AtField("prometheus_basic_auth", fmt.Errorf("prometheus_basic_auth: unknown key %q (want username, password)", k)))
			}
		}
		if u, _ := m["username"].(string); u == "" {
			errs = append(errs, dags.AtField("prometheus_basic_auth", errors.New("prometheus_basic_auth: username is required")))
		}
		if p, _ := m["password"].(string); !strings.Contains(p, secretRef) {
			errs = append(errs, dags.AtField("prometheus_basic_auth", errors.New("prometheus_basic_auth: password must hold a ${secret.NAME} reference")))
		}
		if _, ok := with["prometheus_bearer_token"]; ok {
			errs = append(errs, dags.AtField("prometheus_basic_auth", errors.New("give prometheus_bearer_token or prometheus_basic_auth, not both: both set Authorization")))
		}
	}
	if m, ok := with["prometheus_headers"].(map[string]any); ok {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			v, _ := m[k].(string)
			switch {
			case !headerName(k):
				errs = append(errs, dags.AtField("prometheus_headers", fmt.Errorf("prometheus_headers: %q is not a header name", k)))
			case strings.EqualFold(k, "Content-Type") || strings.EqualFold(k, "Host") || strings.EqualFold(k, "Content-Length"):
				errs = append(errs, dags.AtField("prometheus_headers", fmt.Errorf("prometheus_headers: %s is set by the query itself", k)))
			case authHeader(k) && !strings.Contains(v, secretRef):
				errs = append(errs, dags.AtField("prometheus_headers", fmt.Errorf("prometheus_headers: %s carries credentials, so it must hold a ${secret.NAME} reference (written in the spec or passed in a param, it is recorded with the run)", k)))
			}
		}
	}
	return errs
}

// prometheusHeader resolves the node's Prometheus credentials and headers
// on the worker: the header to send and the secret values in it, to mask.
// A credential whose ${secret.NAME} the spec's author did not write (a
// param's text) is refused, not sent.
func (a *Activities) prometheusHeader(ctx context.Context, in nodetype.Input) (http.Header, []string, error) {
	ctx = nodetype.WithSecretRefs(ctx, in.Secrets)
	w, err := nodetype.DecodeWith[With](in.With)
	if err != nil {
		return nil, nil, nodetype.Permanent(errtype.BadInput, "node %s (type canary): %v", in.Node, err)
	}
	h := http.Header{}
	var secrets []string
	resolve := func(path, v string, credential bool) (string, error) {
		if credential && !nodetype.LegacySecrets(ctx) && len(nodetype.SecretSpans(ctx, path)) == 0 {
			return "", nodetype.Permanent(errtype.BadInput, "%s: the credential holds no ${secret.NAME} written in the spec (a param's value is text): refused without querying", path)
		}
		var env progenv.Policy
		if a.Models != nil {
			env = a.Models.Env
		}
		out, used, err := env.ResolveString(ctx, path, v)
		secrets = append(secrets, used...)
		return out, err
	}
	if w.PrometheusBearerToken != "" {
		tok, err := resolve(dags.PointerTo("prometheus_bearer_token"), w.PrometheusBearerToken, true)
		if err != nil {
			return nil, nil, err
		}
		h.Set("Authorization", "Bearer "+tok)
	}
	if ba := w.PrometheusBasicAuth; len(ba) > 0 {
		user, err := resolve(dags.PointerTo("prometheus_basic_auth", "username"), ba["username"], false)
		if err != nil {
			return nil, nil, err
		}
		pass, err := resolve(dags.PointerTo("prometheus_basic_auth", "password"), ba["password"], true)
		if err != nil {
			return nil, nil, err
		}
		enc := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
		secrets = append(secrets, enc)
		h.Set("Authorization", "Basic "+enc)
	}
	for _, k := range slices.Sorted(maps.Keys(w.PrometheusHeaders)) {
		v, err := resolve(dags.PointerTo("prometheus_headers", k), w.PrometheusHeaders[k], authHeader(k))
		if err != nil {
			return nil, nil, err
		}
		if strings.ContainsAny(v, "\r\n") {
			return nil, nil, nodetype.Permanent(errtype.BadInput, "prometheus_headers: %s: a header value may not hold a line break", k)
		}
		h.Set(k, v)
	}
	return h, secrets, nil
}

// headerName reports whether s is an HTTP header name (RFC 9110 token).
func headerName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", r)) {
			return false
		}
	}
	return true
}
