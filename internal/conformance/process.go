package conformance

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Command is an agent under test started as a process, in a process group
// of its own so that signals reach wrappers' children too (npm, go run).
type Command struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
}

// StartCommand starts argv with REEVE_ADDRESS=addr and env ("KEY=value",
// e.g. the certificate files of a secure run) added to the environment; its
// stdout and stderr go to out.
func StartCommand(argv []string, addr string, out io.Writer, env ...string) (*Command, error) {
	if len(argv) == 0 {
		return nil, errors.New("conformance: no agent command")
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), "REEVE_ADDRESS="+addr), env...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("conformance: start agent: %w", err)
	}
	c := &Command{cmd: cmd, exited: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

// Stop sends SIGTERM to the agent's process group.
func (c *Command) Stop() { c.signal(syscall.SIGTERM) }

// Exited is closed when the agent process has exited.
func (c *Command) Exited() <-chan struct{} { return c.exited }

// Err is the agent's exit error once Exited is closed (nil: exit status 0).
func (c *Command) Err() error {
	select {
	case <-c.exited:
		return c.err
	default:
		return nil
	}
}

// Close ends the agent if it still runs: SIGTERM, then SIGKILL to its
// process group after grace. It returns once the process has exited.
func (c *Command) Close(grace time.Duration) {
	select {
	case <-c.exited:
	default:
		c.signal(syscall.SIGTERM)
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-c.exited:
		case <-t.C:
			c.signal(syscall.SIGKILL)
			<-c.exited
		}
	}
	// Children the agent left behind in its group.
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
}

func (c *Command) signal(sig syscall.Signal) {
	_ = syscall.Kill(-c.cmd.Process.Pid, sig)
}
