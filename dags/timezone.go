package dags

import (
	"fmt"
	"time"
)

// CheckTimezone checks that name is an IANA time zone name such as UTC or
// Europe/Berlin. "Local" is refused: it would mean the zone of whichever
// machine reads the spec.
func CheckTimezone(name string) error {
	if name == "" || name == "Local" {
		return fmt.Errorf("unknown time zone %q (use an IANA name such as UTC or Europe/Paris)", name)
	}
	if _, err := time.LoadLocation(name); err != nil {
		return fmt.Errorf("unknown time zone %q (use an IANA name such as UTC or Europe/Paris)", name)
	}
	return nil
}
