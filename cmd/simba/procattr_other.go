//go:build !linux

package main

import "syscall"

// commandAttr starts the command in its own process group. There is no
// parent-death signal outside Linux: the watchdog still stops the group
// when simba dies, but a killed watchdog leaves the command running.
func commandAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// subreaper: there is no child subreaper outside Linux; a command's
// descendant that leaves its process group is not followed.
func subreaper() {}
