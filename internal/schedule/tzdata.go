package schedule

// The IANA time zone database, embedded (about 450 KB): time.LoadLocation
// reads the system's first and falls back to this one, so a schedule's zone
// resolves the same in a minimal container image without /usr/share/zoneinfo.
import _ "time/tzdata"
