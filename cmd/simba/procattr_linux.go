package main

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// commandAttr starts the command in its own process group, killed by the
// kernel if the watchdog dies (the watchdog keeps the thread that started
// it for the command's life, as Pdeathsig requires).
func commandAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// subreaper makes the watchdog the child subreaper of what the command
// starts: a descendant whose parent ends is reparented to it, not to init,
// even one that left the command's process group and session.
func subreaper() {
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}
