package dags

import (
	"strings"
	"testing"
)

func TestCheckSecretURL(t *testing.T) {
	for s, want := range map[string]string{
		"https://hooks.example/deployed?token=${secret.T}":                 "",
		"https://hooks.example/${secret.T}/deployed":                       "",
		"https://user:${secret.P}@hooks.example/deployed":                  "",
		"https://hooks.example/deployed?token=${secret.T}&run=${params.r}": "",
		"${params.hook}": "", // no secret
		"${params.hook}/deployed?token=${secret.WEBHOOK_TOKEN}":          "${params.hook} supplies part of them",
		"https://${params.host}/deployed?token=${secret.T}":              "${params.host} supplies",
		"https://hooks.example/${params.path}?token=${secret.T}":         "${params.path} supplies",
		"https://hooks.example/${nodes.a.outputs.p}#x?token=${secret.T}": "${nodes.a.outputs.p} supplies",
		"https://hooks.example${params.port}/d?token=${secret.T}":        "${params.port} supplies",
		"//hooks.example/deployed?token=${secret.T}":                     "want an http(s) URL",
		"https://?token=${secret.T}":                                     "want an http(s) URL",
		"https://hooks.example/deployed#${params.f}?token=${secret.T}":   "",
	} {
		err := CheckSecretURL(s)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("CheckSecretURL(%q) = %v, want %q", s, err, want)
		}
	}
}

// TestSecretRefLiteral: the record of a string's secret references says
// how much of it, from its start, is the spec's own text.
func TestSecretRefLiteral(t *testing.T) {
	sc := Scope{Params: map[string]any{"hook": "http://evil.example", "r": "run-1"}}
	for in, want := range map[string]int{
		"${params.hook}/deployed?token=${secret.T}":           0,
		"https://h.example/d?token=${secret.T}&r=${params.r}": len("https://h.example/d?token=${secret.T}&r="),
		"https://h.example/d?token=${secret.T}":               len("https://h.example/d?token=${secret.T}"),
	} {
		_, refs, err := InterpolateSecrets(map[string]any{"u": in}, sc)
		if err != nil || len(refs) != 1 || refs[0].Literal == nil || *refs[0].Literal != want {
			t.Errorf("%q: refs %+v, %v; want literal %d", in, refs, err, want)
		}
	}
}

func TestDurationParam(t *testing.T) {
	for _, ok := range []string{"5m", "1h30m", "90s", "2d", "500ms"} {
		if v, err := coerceParam(ParamDuration, ok); err != nil || v != ok {
			t.Errorf("%q: %v, %v", ok, v, err)
		}
	}
	for _, bad := range []any{"5m])) * 0 + 1 or vector(1) #", "1.5h", "", "5", "-5m", "5 m", 5, "5m\n", "1w"} {
		if _, err := coerceParam(ParamDuration, bad); err == nil {
			t.Errorf("%q: accepted as a duration", bad)
		}
	}
}

func TestQueryProblem(t *testing.T) {
	params := map[string]ParamType{"w": ParamDuration, "n": ParamNumber, "i": ParamInt, "s": ParamString, "u": ""}
	for q, want := range map[string]string{
		`rate(x[${params.w}]) > ${params.n} * ${params.i}`: "",
		`rate(x{v="$${version}"}[5m])`:                     "",
		`rate(x[${params.s}])`:                             "${params.s} is a string param",
		`rate(x[${params.u}])`:                             "${params.u} is a string param",
		`rate(x[${nodes.a.outputs.w}])`:                    "spliced into a query as text",
		`x{token="${secret.T}"}`:                           "secret",
	} {
		got := queryProblem(q, params)
		if want == "" && got != "" || want != "" && !strings.Contains(got, want) {
			t.Errorf("queryProblem(%q) = %q, want %q", q, got, want)
		}
	}
}
