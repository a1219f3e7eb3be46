package config

import (
	"fmt"
	"os"
	"strings"
)

// LoadOffline is Load for the commands that connect to nothing and read
// only the keys describing the captured tables (`schema`): source.tables,
// source.flavor and router.*. Those are decoded and validated as Load
// does. Elsewhere a variable may be unset (a password on a workstation)
// and values are not validated (a certificate file that is not on this
// machine), and no secret file is read; unknown keys and values of the
// wrong type written in the file are still errors everywhere.
func LoadOffline(path string) (Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read config: %w", err)
	}
	cfg, err := ParseOffline(raw, os.LookupEnv)
	return cfg, inFile(path, err)
}

// ParseOffline is LoadOffline on bytes, with lookup standing in for the
// environment.
func ParseOffline(raw []byte, lookup func(string) (string, bool)) (Config, error) {
	return parse(raw, lookup, offlineKey)
}

// offlineKey reports whether a problem of key is reported by LoadOffline:
// a key the offline commands read.
func offlineKey(key string) bool {
	switch {
	case key == "source.flavor", key == "router",
		key == "source.tables", strings.HasPrefix(key, "source.tables["), strings.HasPrefix(key, "router."):
		return true
	}
	return false
}
