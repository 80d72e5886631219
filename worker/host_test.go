package worker

import (
	"strings"
	"testing"
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
