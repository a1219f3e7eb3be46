//go:build !linux

package devdb

import "syscall"

// childAttr puts the server in a process group of its own (no Pdeathsig
// outside Linux: stop the server with Stop).
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
