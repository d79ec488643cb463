package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/acme/billing/internal/testkit/freeport"
)

// billingProc is bin/billing run, a child of the driver, for one run: the
// service runs and the memory lines start and stop it the same way.
type billingProc struct {
	cmd    *exec.Cmd
	addr   string // of its HTTP server
	log    *os.File
	exited chan error // cmd.Wait's result, once
	done   bool       // exited has been read
}

// termWait is how long a SIGTERM'd service may take to drain and exit.
const termWait = 40 * time.Second

// startBilling starts `bin/billing run` on topic (and its tiers and DLQ)
// as consumer group group, with the gateway at gwURL, in-flight events at
// once, extra variables on top, and its log in logs/<name>.log.
func startBilling(ctx context.Context, e *env, name, topic, group, gwURL string, inFlight int, extra map[string]string) (*billingProc, error) {
	port, err := freeport.Port()
	if err != nil {
		return nil, err
	}
	p := &billingProc{addr: "127.0.0.1:" + strconv.Itoa(port), exited: make(chan error, 1)}
	if p.log, err = os.Create(filepath.Join(e.outDir, "logs", name+".log")); err != nil {
		return nil, err
	}
	vars := map[string]string{
		"BILLING_KAFKA_TOPIC":              topic,
		"BILLING_KAFKA_GROUP_ID":           group,
		"BILLING_KAFKA_RETRY_TOPIC_PREFIX": topic + ".retry",
		"BILLING_KAFKA_DLQ_TOPIC":          topic + ".dlq",
		"BILLING_PAYMENT_BASE_URL":         gwURL,
		"BILLING_MAX_IN_FLIGHT":            strconv.Itoa(inFlight),
		"BILLING_HTTP_ADDR":                p.addr,
		"BILLING_LOG_LEVEL":                "info",
	}
	for k, v := range extra {
		vars[k] = v
	}
	p.cmd = exec.CommandContext(ctx, e.bin, "run")
	p.cmd.Env = e.serviceEnv(vars)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	// The child must not outlive a driver that is killed.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		_ = p.log.Close()
		return nil, fmt.Errorf("start billing: %w", err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	return p, nil
}

func (p *billingProc) pid() int { return p.cmd.Process.Pid }

func (p *billingProc) metricsURL() string { return "http://" + p.addr + "/metrics" }

// died is the error of a service that exited on its own while the run
// waited for it, given what its exited channel gave (err).
func (p *billingProc) died(err error) error {
	p.done = true
	if err == nil {
		err = errors.New("exit status 0")
	}
	return fmt.Errorf("billing exited before handling every event (%w); its log ends:\n%s", err, p.logTail())
}

// terminate sends SIGTERM and waits for a clean exit; it returns the
// problem, or "".
func (p *billingProc) terminate() string {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		p.done = true
		if err != nil {
			return fmt.Sprintf("billing exited with %v after SIGTERM", err)
		}
		return ""
	case <-time.After(termWait):
		return fmt.Sprintf("billing did not exit within %s of SIGTERM", termWait)
	}
}

// close kills a service still running and closes its log.
func (p *billingProc) close() {
	if !p.done {
		_ = p.cmd.Process.Kill()
		<-p.exited //nolint:errcheck // only waits for the exit: Wait's error says the process was killed
		p.done = true
	}
	_ = p.log.Close()
}

// logTail returns the last lines of the service's log, for an error
// message.
func (p *billingProc) logTail() string {
	b, err := os.ReadFile(p.log.Name())
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-20, 0):], "\n")
}
