package bench

import "syscall"

// childAttr has a `berth serve` under test stopped when the bench dies,
// so that no berth outlives its run.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
