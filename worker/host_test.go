package worker

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/retrain-ml/retrain/internal/gang"
)

func TestIdentityCarriesHost(t *testing.T) {
	id := identity("gpu-node-7.dc1")
	if !strings.HasSuffix(id, "@gpu-node-7.dc1@retrain") {
		t.Fatalf("identity %q", id)
	}
	if h, ok := hostOfIdentity(id); !ok || h != "gpu-node-7.dc1" {
		t.Errorf("hostOfIdentity(%q) = %q, %v", id, h, ok)
	}
	for _, other := range []string{"1234@somehost@", "retrain", "1@bad host@retrain", "1@@retrain"} {
		if h, ok := hostOfIdentity(other); ok {
			t.Errorf("hostOfIdentity(%q) = %q: another worker's identity read as a host", other, h)
		}
	}
}

func TestResolveHost(t *testing.T) {
	h, err := HostConfig{ID: "a", AdvertiseAddress: "127.0.0.1"}.resolve(quiet)
	if err != nil || h.ID != "a" || h.Address != "127.0.0.1" || h.Interface != "" {
		t.Errorf("loopback: %+v, %v", h, err)
	}
	h, err = HostConfig{ID: "b", AdvertiseInterface: "lo"}.resolve(quiet)
	if err != nil || h.Address != "127.0.0.1" {
		t.Errorf("--advertise-interface lo: %+v, %v", h, err)
	}
	if h, err := (HostConfig{}).resolve(quiet); err != nil || h.ID == "" {
		t.Errorf("defaults: %+v, %v: want the host name", h, err)
	}
	for cfg, want := range map[HostConfig]string{
		{ID: "has space"}:                      "--host-id",
		{ID: "a/b"}:                            "--host-id",
		{ID: "a", AdvertiseAddress: "node-7"}:  "not an IP address",
		{ID: "a", AdvertiseInterface: "nope0"}: "no such interface",
		{ID: "a", AdvertiseAddress: "10.9.9.9", AdvertiseInterface: "lo"}: "is not an address of --advertise-interface lo",
	} {
		if _, err := cfg.resolve(quiet); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v, want %q", cfg, err, want)
		}
	}
}

func TestHostLimits(t *testing.T) {
	l, err := HostConfig{}.limits(12, 0)
	if err != nil || l.MaxProcesses != 12 || l.MaxHosts != gang.DefaultMaxHosts {
		t.Errorf("defaults on 12 cores: %+v, %v", l, err)
	}
	if l, _ := (HostConfig{}).limits(4, 8); l.MaxProcesses != 8 {
		t.Errorf("defaults on 4 cores and 8 GPUs: %+v, want a rank per GPU", l)
	}
	if l, _ := (HostConfig{MaxProcesses: 3, MaxHosts: 2}).limits(64, 8); l.MaxProcesses != 3 || l.MaxHosts != 2 {
		t.Errorf("operator's limits: %+v", l)
	}
	if _, err := (HostConfig{MaxProcesses: -1}).limits(4, 0); err == nil || !strings.Contains(err.Error(), "--max-processes-per-host -1") {
		t.Errorf("negative: %v", err)
	}
	if _, err := (HostConfig{MaxHosts: -2}).limits(4, 0); err == nil || !strings.Contains(err.Error(), "--max-hosts -2") {
		t.Errorf("negative: %v", err)
	}
	h := HostConfig{}
	t.Setenv(EnvMaxHosts, "many")
	fs := pflag.NewFlagSet("w", pflag.ContinueOnError)
	h.addFlags(fs)
	if _, err := h.limits(4, 0); err == nil || !strings.Contains(err.Error(), EnvMaxHosts) {
		t.Errorf("%s=many: %v", EnvMaxHosts, err)
	}
	t.Setenv(EnvMaxHosts, "5")
	h = HostConfig{}
	h.addFlags(pflag.NewFlagSet("w", pflag.ContinueOnError))
	if l, err := h.limits(4, 0); err != nil || l.MaxHosts != 5 {
		t.Errorf("%s=5: %+v, %v", EnvMaxHosts, l, err)
	}
}
