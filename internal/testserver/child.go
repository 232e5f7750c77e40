package testserver

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Child is a copy of the test binary run as a separate process: a lock
// holder that a test can SIGSTOP, SIGCONT or SIGKILL from outside, as an
// operating system would. It speaks one line at a time: the test reads its
// stdout with Next and writes to its stdin with Send. The child's side is the
// test binary's own TestMain (or test) that sees its environment variables.
type Child struct {
	PID    int
	stdin  io.WriteCloser
	lines  chan string
	exited chan error
}

// StartChild runs os.Args[0] -test.run=run with env added to the
// environment. The child dies with the test binary (Pdeathsig); at cleanup it
// is continued, given 5s to exit, then killed.
func StartChild(t testing.TB, run string, env ...string) *Child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run="+run)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &Child{PID: cmd.Process.Pid, stdin: stdin, lines: make(chan string, 16), exited: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
		c.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(c.PID, syscall.SIGCONT)
		select {
		case err := <-c.exited:
			c.exited <- err
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(c.PID, syscall.SIGKILL)
		}
	})
	return c
}

// Next is the child's next line. It fails the test when the child exits
// first, says nothing for 20s, or writes a line starting with "error ".
func (c *Child) Next(t testing.TB) string {
	t.Helper()
	select {
	case l, ok := <-c.lines:
		if !ok {
			t.Fatal("the child process exited early")
		}
		if strings.HasPrefix(l, "error ") {
			t.Fatalf("the child process: %s", l)
		}
		return l
	case <-time.After(20 * time.Second):
		t.Fatal("the child process said nothing for 20s")
	}
	return ""
}

// Send writes line and a newline to the child's stdin (buffered by the pipe,
// so it can be sent while the child is stopped).
func (c *Child) Send(t testing.TB, line string) {
	t.Helper()
	if _, err := io.WriteString(c.stdin, line+"\n"); err != nil {
		t.Fatal(err)
	}
}

// Signal sends sig to the child. A SIGSTOP returns once every thread of
// the child is stopped. Until then the child may still run: the kernel
// wakes one of its threads to start the stop, and another thread that
// wakes meanwhile (say, for data on a socket) returns to the child's code
// until that one is scheduled, which on a loaded machine can be long after
// kill returned. A test that acts next on something the child must not see
// (a handover to a "stopped" waiter) would otherwise race with it.
func (c *Child) Signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if err := syscall.Kill(c.PID, sig); err != nil {
		t.Fatalf("signal %v to the child process %d: %v", sig, c.PID, err)
	}
	if sig == syscall.SIGSTOP {
		if err := waitStopped(c.PID); err != nil {
			t.Fatalf("the child process: %v", err)
		}
	}
}

// Wait waits up to d for the child to exit and returns how it exited.
func (c *Child) Wait(t testing.TB, d time.Duration) error {
	t.Helper()
	select {
	case err := <-c.exited:
		c.exited <- err // for the cleanup
		return err
	case <-time.After(d):
		t.Fatalf("the child process did not exit within %v", d)
	}
	return nil
}
