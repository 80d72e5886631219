package worker

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/retrain-ml/retrain/activities/progenv"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/internal/storage"
)

func basePolicyConfig() Config {
	return Config{
		TaskQueue:     "retrain",
		Pipelines:     fstest.MapFS{"hello.yaml": {Data: []byte("name: hello\n")}},
		AllowCommands: []string{"sh", "python3"},
		ReportURL:     "http://reports:8234/runs/{run}",
		Env:           progenv.Policy{AllowPaths: []string{"/data"}, PassEnv: []string{"HF_HOME"}},
		Store:         storage.Config{S3: s3store.Config{URI: "s3://models/prod", Endpoint: "http://s3:7070", AccessKeyID: "AKIA1", SecretAccessKey: "secret-1"}},
		Lake:          lake.Config{URI: "postgres://app:pw1@db:5432/catalog?sslmode=disable", Warehouse: "s3://lake/wh"},
	}
}

// TestPolicyDiff: each policy setting that changes what a run does shows
// as its own field; settings that do not (capacity, host, credentials,
// the order of a list) change nothing.
func TestPolicyDiff(t *testing.T) {
	base := basePolicyConfig()
	p := policyOf(base, []string{"retrain"}, nil)
	if d := p.diff(policyOf(basePolicyConfig(), []string{"retrain"}, nil)); len(d) != 0 {
		t.Fatalf("one config, two computations: differ in %v", d)
	}
	cases := []struct {
		name    string
		change  func(*Config)
		trusted []string
		want    []string
	}{
		{"inline specs", func(c *Config) { c.AllowInlineSpecs = true }, nil, []string{fieldInline}},
		{"report url", func(c *Config) { c.ReportURL = "" }, nil, []string{fieldReportURL}},
		{"commands", func(c *Config) { c.AllowCommands = []string{"sh"} }, nil, []string{fieldCommands}},
		{"commands any", func(c *Config) { c.AllowCommands = nil }, nil, []string{fieldCommands}},
		{"pipeline content", func(c *Config) {
			c.Pipelines = fstest.MapFS{"hello.yaml": {Data: []byte("name: hello\nnodes: []\n")}}
		}, nil, []string{fieldPipelines}},
		{"pipeline added", func(c *Config) {
			c.Pipelines = fstest.MapFS{"hello.yaml": {Data: []byte("name: hello\n")}, "b.yml": {Data: []byte("name: b\n")}}
		}, nil, []string{fieldPipelines}},
		{"no pipelines", func(c *Config) { c.Pipelines = nil }, nil, []string{fieldPipelines}},
		{"trusted queues", nil, []string{"retrain", "other"}, []string{fieldTrusted}},
		{"paths", func(c *Config) { c.Env.AllowPaths = []string{"/data", "/models"} }, nil, []string{fieldPaths}},
		{"pass env", func(c *Config) { c.Env.PassEnv = nil }, nil, []string{fieldPassEnv}},
		{"store", func(c *Config) { c.Store.S3.URI = "s3://models/staging" }, nil, []string{fieldObjectStore}},
		{"lake", func(c *Config) { c.Lake.Warehouse = "s3://lake/other" }, nil, []string{fieldLake}},
		{"two at once", func(c *Config) { c.AllowInlineSpecs, c.ReportURL = true, "" }, nil, []string{fieldInline, fieldReportURL}},
		// Not policy: no difference.
		{"credentials", func(c *Config) {
			c.Store.S3.AccessKeyID, c.Store.S3.SecretAccessKey = "AKIA2", "secret-2"
			c.Lake.URI = "postgres://app:pw2@db:5432/catalog?sslmode=require"
		}, nil, nil},
		{"capacity and host", func(c *Config) {
			c.MaxConcurrentActivities, c.GPUSlots, c.Host.ID, c.MetricsAddr = 8, 2, "hostB", ":9090"
		}, nil, nil},
		{"list order", func(c *Config) { c.AllowCommands = []string{" python3", "sh", "sh"} }, nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := basePolicyConfig()
			if tc.change != nil {
				tc.change(&c)
			}
			trusted := tc.trusted
			if trusted == nil {
				trusted = []string{"retrain"}
			}
			other := policyOf(c, trusted, nil)
			if got := p.diff(other); !slices.Equal(got, tc.want) {
				t.Errorf("diff = %v, want %v", got, tc.want)
			}
			if got := other.diff(p); !slices.Equal(got, tc.want) {
				t.Errorf("diff the other way = %v, want %v", got, tc.want)
			}
			if (p.digest() == other.digest()) != (len(tc.want) == 0) {
				t.Errorf("digests %s and %s for a diff of %v", p.digest(), other.digest(), tc.want)
			}
		})
	}
}

// TestPolicyNoSecrets: what a worker publishes holds no secret value, no
// credential and no list in clear: only hashes, and on/off for flags.
func TestPolicyNoSecrets(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hf_token"), []byte("hf_SECRETVALUE"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(progenv.SecretEnvPrefix+"API_KEY", "sk-LIVEVALUE")
	c := basePolicyConfig()
	c.Env.SecretsDir = dir
	id := encodeIdentity("42@hostB@retrain", policyOf(c, []string{"retrain"}, nil))
	for _, secret := range []string{"hf_SECRETVALUE", "sk-LIVEVALUE", "hf_token", "API_KEY", "pw1", "AKIA1", "secret-1", "python3", "/data", "reports", "s3://"} {
		if strings.Contains(id, secret) {
			t.Errorf("published identity %q holds %q", id, secret)
		}
	}
	if len(id) > 1000 {
		t.Errorf("identity is %d characters, past the server's 1000", len(id))
	}
	// A secret that another worker has and this one lacks is a difference;
	// its value is not.
	t.Setenv(progenv.SecretEnvPrefix+"API_KEY", "sk-OTHER")
	same := policyOf(c, []string{"retrain"}, nil)
	if d := policyOf(c, []string{"retrain"}, nil).diff(same); len(d) != 0 {
		t.Errorf("secret value changed the policy: %v", d)
	}
	if err := os.WriteFile(filepath.Join(dir, "db_password"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	with := policyOf(c, []string{"retrain"}, nil)
	if d := same.diff(with); !slices.Equal(d, []string{fieldSecrets}) {
		t.Errorf("a secret more: diff %v, want [secrets]", d)
	}
}

// TestPolicyIdentityRoundTrip: the published identity reads back as the
// worker's identity and policy; identities that publish none, or are
// malformed, are not read as one.
func TestPolicyIdentityRoundTrip(t *testing.T) {
	p := policyOf(basePolicyConfig(), []string{"retrain"}, nil)
	base, got, ok := decodeIdentity(encodeIdentity("1234@hostB@retrain", p))
	if !ok || base != "1234@hostB@retrain" || len(got.diff(p)) != 0 || len(got) != len(p) {
		t.Fatalf("round trip: %q %v %v", base, got, ok)
	}
	for _, bad := range []string{"", "1234@hostB@retrain", "1234@hostB@", ";retrain-policy=1", "x;retrain-policy=2;a=b", "x;retrain-policy=1;novalue", "x;retrain-policy=1;=v"} {
		if _, _, ok := decodeIdentity(bad); ok {
			t.Errorf("decodeIdentity(%q) read a policy", bad)
		}
	}
	// A newer worker's extra field is not a difference; the version is.
	newer := policy{}
	for k, v := range p {
		newer[k] = v
	}
	newer["future_field"] = "abcd"
	if d := p.diff(newer); len(d) != 0 {
		t.Errorf("unknown field counted: %v", d)
	}
}

func TestWithoutUserinfo(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:p@db:5432/c?sslmode=disable": "postgres://db:5432/c",
		"s3://bucket/prefix":                       "s3://bucket/prefix",
		"user:pass@host/db":                        "host/db",
		"host=db dbname=c user=u password=p":       "host=db dbname=c user=u password=xxxxx",
		"postgres://u@db/c?password=p":             "postgres://db/c",
		"":                                         "",
	} {
		if got := withoutUserinfo(in); got != want {
			t.Errorf("withoutUserinfo(%q) = %q, want %q", in, got, want)
		}
	}
}
