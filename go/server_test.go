// Real `ticketing server` processes for the tests, on loopback only, always stopped:
// $TICKETING_BIN, else ../target/release/ticketing (what `go generate` builds).

package ticketing_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const secret = "go-test-secret-0123456789"

type server struct {
	cmd  *exec.Cmd
	addr string
}

// binary is the server binary the tests start.
func binary() (string, error) {
	if bin := os.Getenv("TICKETING_BIN"); bin != "" {
		return bin, nil
	}
	bin, err := filepath.Abs("../target/release/ticketing")
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("no ticketing binary: set TICKETING_BIN or run `go generate` (cargo build --release): %v", err)
	}
	return bin, nil
}

// startServer starts a standalone node and waits for its "listening on" line; the
// node is killed when the test ends.
func startServer(t *testing.T, env ...string) *server {
	t.Helper()
	s, err := launch(env...)
	if s != nil {
		t.Cleanup(s.stop)
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// launch starts a standalone node and waits (at most 10 s) for its "listening on"
// line; the caller stops it (a node is returned with the error when it was started).
func launch(env ...string) (*server, error) {
	bin, err := binary()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "server")
	cmd.Env = append([]string{"TICKETING_AUTH_TOKEN=" + secret, "RUST_LOG=info", "TICKETING_LISTEN=127.0.0.1:0",
		"PATH=" + os.Getenv("PATH")}, env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{cmd: cmd}
	found := make(chan string, 1)
	go func() {
		scanner := bufio.NewScanner(stderr)
		sent := false
		for scanner.Scan() {
			line := scanner.Text()
			if i := strings.Index(line, " listening on "); i >= 0 && !sent {
				found <- strings.Fields(line[i+len(" listening on "):])[0]
				sent = true
			}
		}
		if !sent {
			close(found)
		}
	}()
	select {
	case addr, ok := <-found:
		if !ok {
			return s, errors.New("the server ended before it listened")
		}
		s.addr = addr
	case <-time.After(10 * time.Second):
		return s, errors.New("the server did not listen within 10 s")
	}
	return s, nil
}

// stop kills the node (resumed first, if paused) and waits for it.
func (s *server) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

// pause stops the server (SIGSTOP) and waits until every thread of it is stopped.
func (s *server) pause(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join("/proc", strconv.Itoa(s.cmd.Process.Pid), "task")
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		tasks, _ := os.ReadDir(dir)
		stopped := len(tasks) > 0
		for _, task := range tasks {
			stat, err := os.ReadFile(filepath.Join(dir, task.Name(), "stat"))
			if err != nil {
				continue
			}
			fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
			if len(fields) == 0 || (fields[0] != "T" && fields[0] != "t") {
				stopped = false
			}
		}
		if stopped {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("the server did not stop")
}

func (s *server) resume() { _ = s.cmd.Process.Signal(syscall.SIGCONT) }
