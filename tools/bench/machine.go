package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/leasecron/leasecron/azurite"
	"github.com/leasecron/leasecron/tools/bench/results"
)

// machineInfo describes this machine from /proc, the Go runtime, git and
// the Azurite package.
func machineInfo() results.Machine {
	m := results.Machine{
		Cores:          runtime.NumCPU(),
		GoVersion:      runtime.Version(),
		OS:             runtime.GOOS + "/" + runtime.GOARCH,
		AzuriteVersion: azuriteVersion(),
		LoadStart:      loadAvg(),
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		m.CPUModel = cpuModel(string(b))
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		m.MemoryMiB = memTotalMiB(string(b))
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if out, err := exec.Command("git", "describe", "--always", "--dirty").Output(); err == nil {
		m.Commit = strings.TrimSpace(string(out))
	}
	return m
}

// cpuModel returns the first "model name" of a /proc/cpuinfo text.
func cpuModel(cpuinfo string) string {
	for _, l := range strings.Split(cpuinfo, "\n") {
		k, v, ok := strings.Cut(l, ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// memTotalMiB returns MemTotal of a /proc/meminfo text in MiB.
func memTotalMiB(meminfo string) int {
	for _, l := range strings.Split(meminfo, "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, _ := strconv.Atoi(f[1])
			return kb / 1024
		}
	}
	return 0
}

// loadAvg returns the first three fields of /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) > 3 {
		f = f[:3]
	}
	return strings.Join(f, " ")
}

// azuriteVersion reads the version of the Azurite package the harness
// starts (its package.json, found above the resolved binary).
func azuriteVersion() string {
	bin, err := azurite.FindBinary("")
	if err != nil {
		return "unknown"
	}
	if p, err := filepath.EvalSymlinks(bin); err == nil {
		bin = p
	}
	for dir := filepath.Dir(bin); dir != filepath.Dir(dir); dir = filepath.Dir(dir) {
		b, err := os.ReadFile(filepath.Join(dir, "package.json"))
		if err != nil {
			continue
		}
		var pkg struct{ Name, Version string }
		if json.Unmarshal(b, &pkg) == nil && pkg.Name == "azurite" {
			return pkg.Version
		}
	}
	return "unknown"
}

// procUsage is what /proc says about one process.
type procUsage struct {
	RSSKiB, HWMKiB int64   // VmRSS, VmHWM
	CPU            float64 // utime+stime, seconds
}

// clockTicks is USER_HZ, 100 on every Linux this runs on.
const clockTicks = 100

// readProc reads /proc/PID/status and /proc/PID/stat.
func readProc(pid int) (procUsage, error) {
	var u procUsage
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	u.RSSKiB, u.HWMKiB = parseStatus(string(status))
	if u.CPU, err = parseStatCPU(string(stat)); err != nil {
		return u, err
	}
	return u, nil
}

// parseStatus returns VmRSS and VmHWM (KiB) of a /proc/PID/status text.
func parseStatus(s string) (rss, hwm int64) {
	for _, l := range strings.Split(s, "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = v
		case "VmHWM:":
			hwm = v
		}
	}
	return rss, hwm
}

// parseStatCPU returns utime+stime in seconds from a /proc/PID/stat text.
// The command name (field 2) may contain spaces and parentheses, so fields
// are counted after its closing parenthesis.
func parseStatCPU(s string) (float64, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc stat: no command name in %q", s)
	}
	f := strings.Fields(s[i+1:])
	// After the name: state(3) ppid(4) ... utime(14) stime(15).
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc stat: %d fields after the name, want at least 13", len(f))
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc stat: utime %q stime %q", f[11], f[12])
	}
	return float64(ut+st) / clockTicks, nil
}

// selfCPU returns the CPU time this process has used, in seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

// pidWithArg returns the pid of a process whose command line contains
// arg (0 if none).
func pidWithArg(arg string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), arg) {
			return pid
		}
	}
	return 0
}

// cpuMeter measures the CPU this process and one Azurite use.
type cpuMeter struct {
	self0, az0 float64
	azPID      int
}

func startCPU(azDir string) cpuMeter {
	m := cpuMeter{self0: selfCPU(), azPID: pidWithArg(azDir)}
	if m.azPID > 0 {
		if u, err := readProc(m.azPID); err == nil {
			m.az0 = u.CPU
		}
	}
	return m
}

// stop returns the CPU seconds used since start by this process and by
// Azurite (0 when unknown).
func (m cpuMeter) stop() (self, az float64) {
	self = selfCPU() - m.self0
	if m.azPID > 0 {
		if u, err := readProc(m.azPID); err == nil {
			az = u.CPU - m.az0
		}
	}
	return self, az
}
