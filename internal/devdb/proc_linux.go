package devdb

import "syscall"

// childAttr puts the server in a process group of its own and, on Linux,
// makes it die with its parent even when that is killed (Pdeathsig).
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
