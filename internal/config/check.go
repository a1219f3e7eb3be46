package config

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// checkHostPort accepts host:port with a port from 1 to 65535 (0 too when
// listening, for any free port); an empty host only when listening.
func checkHostPort(v string, listen bool) error {
	if strings.Contains(v, "@") || strings.Contains(v, "://") {
		return errors.New("is a URL or holds credentials: write host:port only, with the user and password in their own settings")
	}
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		return errors.New("is not host:port: write it as host:port, such as db1:3306 or [::1]:3306")
	}
	if host == "" && !listen {
		return errors.New("has no host: write host:port")
	}
	n, err := strconv.Atoi(port)
	low := 1
	if listen {
		low = 0
	}
	if err != nil || n < low || n > 65535 {
		return fmt.Errorf("has port %q: write a number from %d to 65535", port, low)
	}
	return nil
}

// Kafka's topic name rules (org.apache.kafka.common.internals.Topic): 1 to
// 249 characters of ASCII letters, digits, '.', '_' and '-', and neither
// "." nor "..".
const maxTopicLen = 249

func checkTopic(t string) error {
	if t == "" {
		return errors.New("empty: write a topic name")
	}
	if t == "." || t == ".." {
		return fmt.Errorf("%q: Kafka refuses the topic names \".\" and \"..\"", t)
	}
	return checkTopicChars(t, maxTopicLen)
}

// checkTopicChars checks the characters and length of a topic name or a
// prefix of one (max: the longest allowed).
func checkTopicChars(t string, max int) error {
	if len(t) > max {
		return fmt.Errorf("%q is %d characters: Kafka allows at most %d", t, len(t), max)
	}
	for _, r := range t {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("%q has %q: Kafka topic names take only ASCII letters, digits, '.', '_' and '-'", t, r)
		}
	}
	return nil
}

// checkStart accepts now, earliest, or a GTID set of the flavor (either
// flavor when auto).
func checkStart(v, flavor string) error {
	switch v {
	case "":
		return errors.New("empty: write now, earliest or a GTID set")
	case "now", "earliest":
		return nil
	}
	maria := func() error { _, err := mysql.ParseMariadbGTIDSet(v); return err }
	my := func() error { _, err := mysql.ParseMysqlGTIDSet(v); return err }
	var err error
	switch flavor {
	case "mariadb":
		err = maria()
	case "mysql":
		err = my()
	default:
		if err = maria(); err != nil {
			err = my()
		}
	}
	if err != nil || !looksLikeGTIDSet(v) {
		return fmt.Errorf("%q is not now, earliest or a GTID set: write a MariaDB set such as 0-1-100,1-2-5 or a MySQL set such as 3e11fa47-71ca-11e1-9e33-c80aa9429562:1-100", v)
	}
	return nil
}

// looksLikeGTIDSet refuses what go-mysql's parsers let through: every
// element must be domain-server-sequence (MariaDB) or uuid[:tag]:intervals
// (MySQL).
func looksLikeGTIDSet(v string) bool {
	for _, e := range strings.Split(v, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			return false
		}
		if p := strings.Split(e, "-"); len(p) == 3 && allDigits(p[0]) && allDigits(p[1]) && allDigits(p[2]) {
			continue
		}
		uuid, rest, ok := strings.Cut(e, ":")
		if !ok || len(strings.ReplaceAll(uuid, "-", "")) != 32 || rest == "" {
			return false
		}
	}
	return true
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// maskUserinfo hides what comes before the last '@' of a host:port (a
// URL's user and password) so that an error can show the rest.
func maskUserinfo(v string) string {
	if i := strings.LastIndexByte(v, '@'); i >= 0 {
		return "***" + v[i:]
	}
	return v
}
