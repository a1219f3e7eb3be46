package main

import (
	"fmt"
	"net"
	"strconv"
)

// freeAddr returns addr when its port is given and free, or a free port on
// its host when the port is 0. A port another process holds is an error
// named as such at once (waiting for a MariaDB that cannot start there,
// the demo used to blame the login of the server that held it ~40 s later).
func freeAddr(addr, what, flagName string) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("%s: port %s is in use (another server?): stop it, or pass %s with another port, or 0 for a free one: %w", what, addr, flagName, err)
	}
	got := ln.Addr().String()
	if err := ln.Close(); err != nil {
		return "", err
	}
	return got, nil
}

// portOf returns the port of host:port.
func portOf(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return n
}
