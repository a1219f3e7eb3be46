package main

import (
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The one reading of a time on the command line, for every command that
// takes one (audit --since/--until, replay --since/--until, prune
// --older-than): an RFC 3339 time, or an age before now.

// when is a time given on the command line.
type when struct {
	// At is the time, in UTC: as written, or now less Age.
	At time.Time
	// Age is how long before now, when it was given as an age (0 for an
	// RFC 3339 time).
	Age time.Duration
}

// whenForms says what parseWhen reads, for errors and help.
const whenForms = "an RFC 3339 time (2026-11-30T10:00:00Z, 2026-11-30T12:00:00+02:00) or an age before now (90m, 2h, 7d)"

// parseWhen reads flag's value s: an RFC 3339 time, or an age (parseAge's
// forms) before now. Anything else is a usage error naming flag.
func parseWhen(flag, s string, now time.Time) (when, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return when{At: t.UTC()}, nil
	}
	d, err := parseAge(s)
	if err != nil {
		return when{}, usageErr("%s %q: give %s", flag, s, whenForms)
	}
	return when{At: now.Add(-d).UTC(), Age: d}, nil
}

// maxAge bounds an age: past it is a typo (or an overflow in the making),
// not a time anyone means.
const maxAge = 3650 * 24 * time.Hour

// dayCount is a plain decimal number of days: no sign, exponent, hex,
// underscore, NaN or Inf (strconv.ParseFloat takes all of those).
var dayCount = regexp.MustCompile(`^[0-9]{1,5}(\.[0-9]{1,6})?$`)

// parseAge reads 7d, 12h, 90m, 30s (days added to Go's durations): a
// finite, positive age of at most maxAge. Anything else is refused, so an
// overflowing or meaningless age can never turn into "every row".
func parseAge(s string) (time.Duration, error) {
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if !dayCount.MatchString(days) {
			return 0, usageErr("%q: want a positive number of days, such as 7d", s)
		}
		n, err := strconv.ParseFloat(days, 64)
		if err != nil || n <= 0 || n > float64(maxAge/(24*time.Hour)) {
			return 0, usageErr("%q: want a positive number of days up to %d, such as 7d", s, int(maxAge/(24*time.Hour)))
		}
		d = time.Duration(n * float64(24*time.Hour))
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, usageErr("%q: want a positive age such as 7d, 36h or 90m", s)
		}
	}
	if d <= 0 || d > maxAge {
		return 0, usageErr("%q: want an age above 0 and at most %dd", s, int(maxAge/(24*time.Hour)))
	}
	return d, nil
}
