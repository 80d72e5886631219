package main

// Schedules name time zones (Europe/Berlin); a worker in a minimal
// container image has no /usr/share/zoneinfo, so the binary carries the
// zone database itself (about 450 KB). Go uses the system's database
// first when there is one.
import _ "time/tzdata"
