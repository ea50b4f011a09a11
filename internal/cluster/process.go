package cluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Process is one OS process of the cluster that can be killed and started
// again with the same command line. Its stdout and stderr are appended to
// its log file, across restarts.
type Process struct {
	// Name is unique in the cluster, e.g. "etcd-1", "scheduler-2".
	Name string
	// Addr is the address it serves, if any.
	Addr string

	path    string
	args    []string
	logPath string

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{} // closed when cmd exited
	starts   int
	stopping bool
}

// Start starts the process; it fails if it is already running.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("cluster: %s already running", p.Name)
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("cluster: %s log: %w", p.Name, err)
	}
	fmt.Fprintf(logf, "--- %s start #%d: %s %v\n", time.Now().UTC().Format(time.RFC3339Nano), p.starts+1, p.path, p.args)
	cmd := exec.Command(p.path, p.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Own process group: a Ctrl-C at the terminal reaches the cluster
	// command only, which stops everything in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("cluster: start %s: %w", p.Name, err)
	}
	p.starts++
	done := make(chan struct{})
	p.cmd, p.done = cmd, done
	go func() {
		_ = cmd.Wait()
		logf.Close()
		p.mu.Lock()
		if p.cmd == cmd {
			p.cmd = nil
		}
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// Running reports whether the process is running.
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil
}

// Pid returns the process id, 0 when not running.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Kill sends SIGKILL and waits for the process to exit.
func (p *Process) Kill() error { return p.signal(syscall.SIGKILL, 0) }

// Stop sends SIGTERM, then SIGKILL if the process has not exited after
// grace, and waits for it to exit.
func (p *Process) Stop(grace time.Duration) error { return p.signal(syscall.SIGTERM, grace) }

// SetBinary makes the next Start run path, with the same arguments: a
// stopped scheduler started again as another version of Reeve (a rolling
// upgrade, one process at a time).
func (p *Process) SetBinary(path string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.path = path
}

// Restart kills the process if it runs and starts it again.
func (p *Process) Restart() error {
	if err := p.Kill(); err != nil {
		return err
	}
	return p.Start()
}

func (p *Process) signal(sig syscall.Signal, grace time.Duration) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("cluster: signal %s: %w", p.Name, err)
	}
	if sig == syscall.SIGKILL {
		<-done
		return nil
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
	return fmt.Errorf("cluster: %s did not stop within %v after SIGTERM: killed", p.Name, grace)
}
