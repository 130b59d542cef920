// Command pause is the pod sandbox's init process: it holds the pod's namespaces open,
// reaps orphaned children (it is PID 1 of the sandbox) and exits cleanly on SIGINT or SIGTERM.
// With -v it prints its version and exits 0, as upstream's pause does: kubeadm's upgrade health
// check runs the pause image with -v as a Job and waits for it to complete.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("pause (kdrill)")
		os.Exit(0)
	}
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig == syscall.SIGCHLD {
			reap()
			continue
		}
		os.Exit(0)
	}
}

// reap collects every exited child so none stays a zombie.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
