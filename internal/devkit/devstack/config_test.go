package devstack

import "testing"

func TestAdvertiseHost(t *testing.T) {
	for host, want := range map[string]string{
		"127.0.0.1": "127.0.0.1",
		"0.0.0.0":   "127.0.0.1",
		"::":        "::1",
		"10.1.2.3":  "10.1.2.3",
		"::1":       "::1",
	} {
		if got := advertiseHost(host); got != want {
			t.Errorf("advertiseHost(%q) = %q, want %q", host, got, want)
		}
	}
	if got := uiHost("::1"); got != "[::1]" {
		t.Errorf("uiHost(::1) = %q", got)
	}
}

func TestResolveHost(t *testing.T) {
	if got, err := resolveHost("localhost"); err != nil || got != "127.0.0.1" {
		t.Errorf("resolveHost(localhost) = %q, %v", got, err)
	}
	if _, err := resolveHost("no-such-host.invalid"); err == nil {
		t.Error("resolveHost of an unknown name succeeded")
	}
}
